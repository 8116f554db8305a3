// SPDX-License-Identifier: Apache-2.0
// Little-endian field writer and bounds-checked reader for message headers.
// A reader that runs off its bytes throws ProtocolError naming what it was
// reading, so a truncated or hostile header is a typed error, not a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "spyre/error.hpp"

namespace spyre::host::wire {

class ByteWriter {
public:
    template <typename T>
    void Put(T value) {
        static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
        const size_t at = bytes_.size();
        bytes_.resize(at + sizeof(T));
        std::memcpy(bytes_.data() + at, &value, sizeof(T));  // hosts are little-endian (static_assert in the .cpp)
    }
    void PutString(const std::string& s);
    std::vector<uint8_t> Take() { return std::move(bytes_); }

private:
    std::vector<uint8_t> bytes_;
};

class ByteReader {
public:
    // `what` names the message in errors ("call request from rank 1").
    ByteReader(std::span<const uint8_t> bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

    template <typename T>
    T Get(const char* field) {
        static_assert(std::is_integral_v<T> || std::is_enum_v<T>);
        Need(sizeof(T), field);
        T value;
        std::memcpy(&value, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return value;
    }
    // Strings are a u32 length and bytes, at most `max` bytes.
    std::string GetString(const char* field, size_t max = 4096);
    // Throws unless every byte was read (trailing garbage is an error too).
    void ExpectEnd() const;
    size_t remaining() const { return bytes_.size() - at_; }
    [[noreturn]] void Fail(const std::string& why) const;

private:
    void Need(size_t n, const char* field) const;
    std::span<const uint8_t> bytes_;
    size_t at_ = 0;
    std::string what_;
};

}  // namespace spyre::host::wire
