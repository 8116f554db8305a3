// SPDX-License-Identifier: Apache-2.0
#include "plan/plan_format.hpp"

#include <cstdio>

#include "spyre/uapi/spyre_program.h"

namespace spyre::plan_format {

std::optional<DType> ParseDType(std::string_view text) {
    for (DType d : {DType::FP16, DType::BF16, DType::FP32, DType::INT8, DType::INT32})
        if (text == ToString(d)) return d;
    return std::nullopt;
}

const char* RoleName(TensorRole role) noexcept { return role == TensorRole::Input ? "input" : "output"; }

std::optional<TensorRole> ParseRole(std::string_view text) {
    if (text == "input") return TensorRole::Input;
    if (text == "output") return TensorRole::Output;
    return std::nullopt;
}

std::string Crc32Text(uint32_t crc) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", crc);
    return text;
}

std::optional<uint32_t> ParseCrc32(std::string_view text) {
    if (text.size() < 3 || text.size() > 10 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) return std::nullopt;
    uint32_t value = 0;
    for (char c : text.substr(2)) {
        uint32_t digit;
        if (c >= '0' && c <= '9') digit = uint32_t(c - '0');
        else if (c >= 'a' && c <= 'f') digit = uint32_t(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') digit = uint32_t(c - 'A' + 10);
        else return std::nullopt;
        value = value << 4 | digit;
    }
    return value;
}

uint32_t Crc32(std::span<const uint8_t> bytes) noexcept { return uapi::Crc32(0, bytes.data(), bytes.size()); }

bool IsBlobName(std::string_view name) noexcept {
    return !name.empty() && name != "." && name != ".." && name != kManifestFile &&
           name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

std::string JsonMessage(std::string_view what) {
    if (what.starts_with("[json.exception.")) {
        if (const size_t end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
    }
    return std::string(what);
}

}  // namespace spyre::plan_format
