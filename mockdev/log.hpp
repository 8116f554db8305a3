// SPDX-License-Identifier: Apache-2.0
//
// Leveled logging to stderr with a "spyre-mockdev:" prefix. One write(2) per
// line so lines from the FUSE workers and engine threads never interleave.
#pragma once

#include <optional>
#include <string_view>

namespace spyre::mockdev {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

std::optional<LogLevel> ParseLogLevel(std::string_view name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define MOCKDEV_LOG(level, ...)                                             \
    do {                                                                    \
        if (::spyre::mockdev::LogEnabled(level)) ::spyre::mockdev::Log(level, __VA_ARGS__); \
    } while (0)
#define LOG_ERROR(...) MOCKDEV_LOG(::spyre::mockdev::LogLevel::Error, __VA_ARGS__)
#define LOG_WARN(...) MOCKDEV_LOG(::spyre::mockdev::LogLevel::Warn, __VA_ARGS__)
#define LOG_INFO(...) MOCKDEV_LOG(::spyre::mockdev::LogLevel::Info, __VA_ARGS__)
#define LOG_DEBUG(...) MOCKDEV_LOG(::spyre::mockdev::LogLevel::Debug, __VA_ARGS__)

}  // namespace spyre::mockdev
