// SPDX-License-Identifier: Apache-2.0
// Internal: the vocabulary of the on-disk compiler output (docs/execution_plan.md),
// shared by its writer (plan_writer.cpp) and its reader (execution_plan.cpp)
// so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "spyre/tensor/layout.hpp"
#include "spyre/plan/operation.hpp"

namespace spyre::plan_format {

inline constexpr std::string_view kManifestFile = "plan.json";
inline constexpr std::string_view kFormat = "spyre-execution-plan";
inline constexpr int64_t kVersion = 1;

// "fp16", "bf16", "fp32", "int8", "int32" (layout.hpp's ToString); nullopt for anything else.
std::optional<DType> ParseDType(std::string_view text);

const char* RoleName(TensorRole role) noexcept;  // "input" or "output"
std::optional<TensorRole> ParseRole(std::string_view text);

// Checksums are written "0x" + 8 lowercase hex digits; the reader takes 1 to
// 8 hex digits of either case.
std::string Crc32Text(uint32_t crc);
std::optional<uint32_t> ParseCrc32(std::string_view text);
uint32_t Crc32(std::span<const uint8_t> bytes) noexcept;

// A blob name is a plain file name inside the plan directory: not empty, no
// '/', no NUL, not "." or "..", and not the manifest's own name.
bool IsBlobName(std::string_view name) noexcept;

// The JSON library's message without its "[json.exception.parse_error.101] "
// prefix: the library's internal id tells a user nothing.
std::string JsonMessage(std::string_view what);

}  // namespace spyre::plan_format
