// SPDX-License-Identifier: Apache-2.0
// In-place chip calls: a written argument over exactly an In argument's
// bytes starts as those bytes on every placement (local and remote
// executors both ask this).
#pragma once

#include <algorithm>
#include <optional>

#include "spyre/host/chip_executor.hpp"

namespace spyre::host {

// The place of the first In argument of `call` that names exactly the bytes of `t`.
inline std::optional<size_t> InputNamingTheBytesOf(const ChipCall& call, const HostTensor& t) {
    const auto it = std::find_if(call.args.begin(), call.args.end(), [&](const ChipArg& a) {
        return a.arg.access == Access::In && a.arg.tensor.storage_id() == t.storage_id() &&
               a.arg.tensor.byte_offset() == t.byte_offset() && a.arg.tensor.bytes() == t.bytes();
    });
    if (it == call.args.end()) return std::nullopt;
    return size_t(it - call.args.begin());
}
inline bool AnInputNamesTheBytesOf(const ChipCall& call, const HostTensor& t) {
    return InputNamingTheBytesOf(call, t).has_value();
}

}  // namespace spyre::host
