// SPDX-License-Identifier: Apache-2.0
// The daemon's names for the one logger (spyre/common/log.hpp): lines carry
// the "spyre-mockdev:" prefix once main() has called SetProgram.
#pragma once

#include "spyre/common/log.hpp"

namespace spyre::mockdev {

using LogLevel = log::Level;

inline std::optional<LogLevel> ParseLogLevel(std::string_view name) { return log::ParseLevel(name); }
inline void SetLogLevel(LogLevel level) { log::SetLevel(level); }
inline bool LogEnabled(LogLevel level) { return log::Enabled(level); }

#define LOG_ERROR(...) SPYRE_LOG_ERROR(__VA_ARGS__)
#define LOG_WARN(...) SPYRE_LOG_WARN(__VA_ARGS__)
#define LOG_INFO(...) SPYRE_LOG_INFO(__VA_ARGS__)
#define LOG_DEBUG(...) SPYRE_LOG_DEBUG(__VA_ARGS__)

}  // namespace spyre::mockdev
