// SPDX-License-Identifier: Apache-2.0
#include "host/transport/byte_codec.hpp"

#include <bit>

namespace spyre::host::wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian, as every Spyre host");

void ByteWriter::PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
}

std::string ByteReader::GetString(const char* field, size_t max) {
    const uint32_t n = Get<uint32_t>(field);
    if (n > max) Fail(std::string(field) + " is " + std::to_string(n) + " bytes long (at most " + std::to_string(max) + ")");
    Need(n, field);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
}

void ByteReader::ExpectEnd() const {
    if (at_ != bytes_.size()) Fail(std::to_string(bytes_.size() - at_) + " unexpected trailing bytes");
}

void ByteReader::Need(size_t n, const char* field) const {
    if (bytes_.size() - at_ < n) Fail(std::string("truncated at ") + field);
}

void ByteReader::Fail(const std::string& why) const {
    throw Error(ErrorKind::ProtocolError, "malformed " + what_ + ": " + why);
}

}  // namespace spyre::host::wire
