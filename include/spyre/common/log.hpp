// SPDX-License-Identifier: Apache-2.0
// The one logger of the daemon, the library and the tools: leveled lines on
// stderr, "<program>: <level>: message", one write(2) per line so lines of
// different threads never interleave. The level comes from SPYRE_LOG_LEVEL
// (error, warn, info, debug) unless a program sets it (spyre-mockdev's
// --log-level); without either it is `warn` for the library and the tools,
// `info` for the daemon. Header-only: mockdev, the driver and libspyre all
// include it (docs/logging.md).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::log {

enum class Level { Error = 0, Warn = 1, Info = 2, Debug = 3 };

inline std::optional<Level> ParseLevel(std::string_view name) {
    if (name == "error") return Level::Error;
    if (name == "warn" || name == "warning") return Level::Warn;
    if (name == "info") return Level::Info;
    if (name == "debug") return Level::Debug;
    return std::nullopt;
}

inline const char* Name(Level level) {
    switch (level) {
    case Level::Error: return "error";
    case Level::Warn: return "warn";
    case Level::Info: return "info";
    case Level::Debug: return "debug";
    }
    return "?";
}

namespace detail {
inline constexpr int kUnset = -1;
inline std::atomic<int> g_level{kUnset};
inline std::atomic<int> g_default{int(Level::Warn)};
inline std::atomic<const char*> g_program{"spyre"};
}  // namespace detail

// The level SPYRE_LOG_LEVEL names, if it names one.
inline std::optional<Level> LevelFromEnvironment() {
    const char* env = std::getenv("SPYRE_LOG_LEVEL");
    return env ? ParseLevel(env) : std::nullopt;
}

inline Level CurrentLevel() {
    int level = detail::g_level.load(std::memory_order_relaxed);
    if (level == detail::kUnset) {
        const auto env = LevelFromEnvironment();
        level = env ? int(*env) : detail::g_default.load(std::memory_order_relaxed);
        int expected = detail::kUnset;
        // A value that names no level is said once (it was ignored without
        // a word: "DEBUG" logged at the default).
        const char* named = std::getenv("SPYRE_LOG_LEVEL");
        if (detail::g_level.compare_exchange_strong(expected, level, std::memory_order_relaxed) && !env && named &&
            *named)
            std::fprintf(stderr, "%s: warning: SPYRE_LOG_LEVEL=\"%s\" is none of error, warn, info, debug: logging at %s\n",
                         detail::g_program.load(std::memory_order_relaxed), named, Name(Level(level)));
        level = detail::g_level.load(std::memory_order_relaxed);
    }
    return Level(level);
}

inline void SetLevel(Level level) { detail::g_level.store(int(level), std::memory_order_relaxed); }

// A program's own name and default level (before anything is logged).
inline void SetProgram(const char* name, Level default_level) {
    detail::g_program.store(name, std::memory_order_relaxed);
    detail::g_default.store(int(default_level), std::memory_order_relaxed);
}

inline bool Enabled(Level level) { return int(level) <= int(CurrentLevel()); }

inline const char* Tag(Level level) {
    switch (level) {
    case Level::Error: return "error: ";
    case Level::Warn: return "warning: ";
    case Level::Info: return "";
    case Level::Debug: return "debug: ";
    }
    return "";
}

__attribute__((format(printf, 2, 3))) inline void Write(Level level, const char* fmt, ...) {
    const int saved_errno = errno;  // callers often log right before using errno
    char line[1024];
    const int n = std::snprintf(line, sizeof line, "%s: %s", detail::g_program.load(std::memory_order_relaxed),
                                Tag(level));
    va_list ap;
    va_start(ap, fmt);
    const int m = std::vsnprintf(line + n, sizeof line - size_t(n) - 1, fmt, ap);
    va_end(ap);
    size_t len = size_t(n) + (m < 0 ? 0 : std::min(size_t(m), sizeof line - size_t(n) - 2));
    line[len++] = '\n';
    const ssize_t ignored = ::write(STDERR_FILENO, line, len);
    (void)ignored;
    errno = saved_errno;
}

}  // namespace spyre::log

#define SPYRE_LOG(level, ...)                                                          \
    do {                                                                               \
        if (::spyre::log::Enabled(level)) ::spyre::log::Write(level, __VA_ARGS__);     \
    } while (0)
#define SPYRE_LOG_ERROR(...) SPYRE_LOG(::spyre::log::Level::Error, __VA_ARGS__)
#define SPYRE_LOG_WARN(...) SPYRE_LOG(::spyre::log::Level::Warn, __VA_ARGS__)
#define SPYRE_LOG_INFO(...) SPYRE_LOG(::spyre::log::Level::Info, __VA_ARGS__)
#define SPYRE_LOG_DEBUG(...) SPYRE_LOG(::spyre::log::Level::Debug, __VA_ARGS__)
SPYRE_API_END
