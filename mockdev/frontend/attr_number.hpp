// SPDX-License-Identifier: Apache-2.0
//
// Numbers written to sysfs-like attribute files (reset, sriov_numvfs).
#pragma once

#include <cstddef>

namespace spyre::mockdev {

// Linux's kstrtoul(buf, 0, ...) as sysfs stores use it: decimal, 0x hex or 0
// octal, one optional trailing newline, nothing else. 0, -EINVAL or -ERANGE.
int ParseAttrNumber(const char* buf, size_t size, unsigned long* out);

}  // namespace spyre::mockdev
