// SPDX-License-Identifier: Apache-2.0
#include "frontend/cpu_affinity.hpp"

#include <sys/sysinfo.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace spyre::mockdev {

namespace {

// CPUs numbered below this exist on this machine (online or not).
int ConfiguredCpus() { return std::min(::get_nprocs_conf(), int(CPU_SETSIZE)); }

std::string ListOf(const cpu_set_t& set) {
    std::string out;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
        if (!out.empty()) out += ',';
        out += std::to_string(c);
        if (last > c) out += '-' + std::to_string(last);
        c = last;
    }
    return out;
}

}  // namespace

std::optional<CpuChoice> ParseCpus(const std::string& text, std::string* error) {
    CpuChoice choice;
    if (text == "inherit") return choice;
    if (text == "all") {
        choice.kind = CpuChoice::Kind::All;
        return choice;
    }
    const int cpus = ConfiguredCpus();
    const auto fail = [&](const std::string& why) -> std::optional<CpuChoice> {
        *error = "'" + text + "' " + why + " (examples: all, inherit, 0-3,6)";
        return std::nullopt;
    };
    choice.kind = CpuChoice::Kind::List;
    CPU_ZERO(&choice.list);
    const char* p = text.data();
    const char* end = p + text.size();
    if (p == end) return fail("is not a CPU list");
    for (;;) {
        int first = 0, last = 0;
        auto r = std::from_chars(p, end, first);
        if (r.ec != std::errc() || first < 0) return fail("is not a CPU list");
        p = r.ptr;
        last = first;
        if (p != end && *p == '-') {
            r = std::from_chars(p + 1, end, last);
            if (r.ec != std::errc() || last < 0) return fail("is not a CPU list");
            p = r.ptr;
            if (last < first) return fail("has a range written backwards");
        }
        if (last >= cpus)
            return fail("names CPU " + std::to_string(last) + ", but this machine has CPUs 0-" +
                        std::to_string(cpus - 1));
        for (int c = first; c <= last; ++c) CPU_SET(c, &choice.list);
        if (p == end) return choice;
        if (*p != ',') return fail("is not a CPU list");
        ++p;
    }
}

bool ApplyCpus(const CpuChoice& choice, std::string* error) {
    if (choice.kind == CpuChoice::Kind::Inherit) return true;
    cpu_set_t set;
    if (choice.kind == CpuChoice::Kind::List) {
        set = choice.list;
    } else {
        CPU_ZERO(&set);
        for (int c = 0; c < ConfiguredCpus(); ++c) CPU_SET(c, &set);
    }
    // The kernel keeps the part its cgroup allows; none at all is EINVAL.
    if (::sched_setaffinity(0, sizeof set, &set) == 0) return true;
    *error = (errno == EINVAL ? std::string("none of CPUs ") + ListOf(set) + " is available to this process (allowed: " +
                                    AllowedCpus() + ")"
                              : std::string(std::strerror(errno)));
    return false;
}

std::string AllowedCpus() {
    cpu_set_t set;
    if (::sched_getaffinity(0, sizeof set, &set) != 0) return "?";
    return ListOf(set);
}

}  // namespace spyre::mockdev
