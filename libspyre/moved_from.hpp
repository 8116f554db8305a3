// SPDX-License-Identifier: Apache-2.0
// The state behind a public handle (Device, Host, FlexStream, Event,
// Orchestrator, Worker) goes with a move: a call on the moved-from handle is
// InvalidArgument naming the call, never a dereference of null.
#pragma once

#include <string>

#include "spyre/error.hpp"

namespace spyre::detail {

// *state, or InvalidArgument "<call>: moved from ..." when it is null.
template <typename Pointer>
auto& LiveState(const Pointer& state, const char* call) {
    if (!state) throw Error(ErrorKind::InvalidArgument, std::string(call) + ": moved from (its state went with the move)");
    return *state;
}

}  // namespace spyre::detail
