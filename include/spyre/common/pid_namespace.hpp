// SPDX-License-Identifier: Apache-2.0
// Which pid namespace the calling process is in: the inode of
// /proc/self/ns/pid (proc inode numbers fit 32 bits), or 0 when it cannot
// be read. The mock daemon reports its own in the device info, so a
// driver tells whether the daemon's pid means the same process to it: in
// another namespace it names nobody, or somebody else.
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace spyre {

inline uint32_t PidNamespaceId() noexcept {
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
    return static_cast<uint32_t>(st.st_ino);
}

}  // namespace spyre
