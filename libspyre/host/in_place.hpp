// SPDX-License-Identifier: Apache-2.0
// In-place chip calls: a written argument over exactly an In argument's
// bytes starts as those bytes on every placement (local and remote
// executors both ask this).
#pragma once

#include <algorithm>

#include "spyre/host/chip_executor.hpp"

namespace spyre::host {

// Whether an In argument of `call` names exactly the bytes of `t`.
inline bool AnInputNamesTheBytesOf(const ChipCall& call, const HostTensor& t) {
    return std::any_of(call.args.begin(), call.args.end(), [&](const ChipArg& a) {
        return a.arg.access == Access::In && a.arg.tensor.storage_id() == t.storage_id() &&
               a.arg.tensor.byte_offset() == t.byte_offset() && a.arg.tensor.bytes() == t.bytes();
    });
}

}  // namespace spyre::host
