// SPDX-License-Identifier: Apache-2.0
//
// The command line and the top level of the example programs. A number on
// the command line is read strictly: decimal digits only (no sign, space or
// suffix), the whole argument, within the range the program's usage line
// documents; anything else is a usage error, reported before any device is
// opened with a message naming the argument, the usage line and exit code 2
// (an atoll that read "abc" as 0, "-4" as a size or 99999999999 past an
// int ended in a misleading message, an abort or a run of a billion NOPs).
// Whatever else comes out of a program's body (a spyre::Error, an
// allocation the host cannot make) ends it with its message and exit
// code 1, never an uncaught exception's abort.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace spyre::support {

inline constexpr int kUsageExitCode = 2;

// The largest matrix dimension (or count of chunks) the examples take:
// 2^20, so that every dimension fits an int (BLAS) and the product of two
// an int64_t; what the host cannot allocate is an error, not an abort.
inline constexpr int64_t kMaxDimension = int64_t(1) << 20;

// A bad command line; what() says which argument and what was wanted.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// `text` as an integer from `lo` to `hi`; UsageError naming `what` (the
// argument's name in the usage line) otherwise.
inline int64_t ParseInteger(std::string_view what, std::string_view text, int64_t lo, int64_t hi) {
    bool digits = !text.empty();
    for (char c : text) digits = digits && c >= '0' && c <= '9';
    int64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [stop, ec] = std::from_chars(text.data(), end, value);
    if (!digits || ec != std::errc() || stop != end || value < lo || value > hi)
        throw UsageError(std::string(what) + ": '" + std::string(text) + "' is not an integer from " +
                         std::to_string(lo) + " to " + std::to_string(hi));
    return value;
}

// Runs a program's body (which returns main's exit code): a UsageError
// prints "PROGRAM: MESSAGE" and "usage: USAGE" and gives 2; any other
// exception prints "PROGRAM: MESSAGE" and gives 1.
template <typename Body>
int RunExample(const char* program, const char* usage, Body&& body) {
    try {
        return body();
    } catch (const UsageError& e) {
        std::fprintf(stderr, "%s: %s\nusage: %s\n", program, e.what(), usage);
        return kUsageExitCode;
    } catch (const std::bad_alloc& e) {
        std::fprintf(stderr, "%s: the host cannot allocate memory this large (%s)\n", program, e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        return 1;
    }
}

}  // namespace spyre::support
