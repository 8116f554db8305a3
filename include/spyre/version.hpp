// SPDX-License-Identifier: Apache-2.0
#pragma once

namespace spyre {

// The libspyre version, "MAJOR.MINOR.PATCH".
const char* Version() noexcept;
// The hardware contract version this build speaks, as SPYRE_VERSION.
unsigned ContractVersion() noexcept;

}  // namespace spyre
