// SPDX-License-Identifier: Apache-2.0
// Register dumps of a live function through its sysfs-like resource files,
// without claiming the function (an app may hold its device node).
#pragma once

#include <string>

#include "spyre/driver/discovery.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

// The text of spyre::uapi::FormatRegisterDump for the function, read with
// trapped reads of resource0 (registers) and resource4 (doorbell page).
std::string DumpRegisters(const FunctionInfo& function);

}  // namespace spyre::driver
SPYRE_API_END
