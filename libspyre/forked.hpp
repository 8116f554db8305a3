// SPDX-License-Identifier: Apache-2.0
// A runtime object (a Device's core, an orchestration runtime, a Worker)
// belongs to the process that made it: its threads stay with that process
// on fork(), so a child using it would wait for them for good. Each object
// notes the fork generation it was made in; a child forked since gets
// InvalidArgument naming both processes and what to do instead.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace spyre::detail {

// How many fork()s this process descends through (pthread_atfork): one
// load, so a check on every call costs nothing measurable.
uint64_t ForkGeneration() noexcept;

class MadeInProcess {
public:
    // Whether the calling process is a child forked since this was made.
    bool ForkedAway() const noexcept { return generation_ != ForkGeneration(); }
    // InvalidArgument in such a child: "<call>: this <what> was made by
    // process P before it forked: process C (a child) cannot use it, since
    // <what>'s threads stayed with the parent; <again>".
    void Check(const char* call, const char* what, const char* again) const {
        if (ForkedAway()) [[unlikely]]
            Throw(call, what, again);
    }
    pid_t made_by() const noexcept { return made_by_; }
    // The same message for an object that keeps its generation and maker
    // itself (a public class): "... cannot use it, since <because>; <again>".
    [[noreturn]] static void Throw(pid_t made_by, const char* call, const char* what, const std::string& because,
                                   const char* again);

private:
    [[noreturn]] void Throw(const char* call, const char* what, const char* again) const;
    uint64_t generation_ = ForkGeneration();
    pid_t made_by_ = ::getpid();
};

}  // namespace spyre::detail
