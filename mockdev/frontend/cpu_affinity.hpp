// SPDX-License-Identifier: Apache-2.0
// Which CPUs the daemon's threads (the cards' cores, lanes and FUSE loop)
// may run on (--cpus). A card's cores are not the host process's: a
// daemon a program starts for itself must not inherit that program's CPU
// binding (mpirun binds each rank to one core, and the rank's card would
// then compute on the rank's one core, beside the rank). A daemon started
// by hand keeps what it was given (taskset, a cgroup) unless told.
#pragma once

#include <sched.h>

#include <optional>
#include <string>

namespace spyre::mockdev {

struct CpuChoice {
    enum class Kind { Inherit, All, List } kind = Kind::Inherit;
    cpu_set_t list{};  // Kind::List
};

// "inherit", "all" or a list such as "0-3,6"; nullopt (with `error` set)
// for anything else, a range written backwards, or a CPU this machine
// does not have.
std::optional<CpuChoice> ParseCpus(const std::string& text, std::string* error);

// Binds this process (the threads it starts from here on) as chosen. All:
// every CPU the machine has, as far as its cgroup allows. False with
// `error` set when the kernel refuses (none of the CPUs is allowed here).
bool ApplyCpus(const CpuChoice& choice, std::string* error);

// "0-3,6": the CPUs this process may run on now, for the log.
std::string AllowedCpus();

}  // namespace spyre::mockdev
