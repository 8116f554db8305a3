// SPDX-License-Identifier: Apache-2.0
#include "log.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace spyre::mockdev {

namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};

const char* LevelTag(LogLevel level) {
    switch (level) {
    case LogLevel::Error: return "error: ";
    case LogLevel::Warn: return "warning: ";
    case LogLevel::Info: return "";
    case LogLevel::Debug: return "debug: ";
    }
    return "";
}
}  // namespace

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
    if (name == "error") return LogLevel::Error;
    if (name == "warn") return LogLevel::Warn;
    if (name == "info") return LogLevel::Info;
    if (name == "debug") return LogLevel::Debug;
    return std::nullopt;
}

void SetLogLevel(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }

bool LogEnabled(LogLevel level) { return level <= g_level.load(std::memory_order_relaxed); }

void Log(LogLevel level, const char* fmt, ...) {
    const int saved_errno = errno;  // callers often log right before using errno
    char line[1024];
    int n = std::snprintf(line, sizeof line, "spyre-mockdev: %s", LevelTag(level));
    va_list ap;
    va_start(ap, fmt);
    int m = std::vsnprintf(line + n, sizeof line - size_t(n) - 1, fmt, ap);
    va_end(ap);
    size_t len = size_t(n) + (m < 0 ? 0 : std::min(size_t(m), sizeof line - size_t(n) - 2));
    line[len++] = '\n';
    ssize_t ignored = ::write(STDERR_FILENO, line, len);
    (void)ignored;
    errno = saved_errno;
}

}  // namespace spyre::mockdev
