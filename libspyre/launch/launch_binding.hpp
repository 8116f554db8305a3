// SPDX-License-Identifier: Apache-2.0
// Internal: the one step every launch entry point (SpyreStream::Launch and
// LaunchTiled, LaunchKernel, Program) goes through. BindLaunch checks an
// Operation against its tensors and the stream's device once — device
// identity, count, dtype, then shapes and strides for an exact launch —
// resolves the device addresses and, for a tiled launch, plans the tiling
// once; Enqueue turns the result into one FlexStream group per launch (per
// tile when tiled). Entry points that run several Operations bind all of
// them before they enqueue any, so a failure leaves nothing half done.
// Every entry point reports a given mismatch with the same message.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device_core.hpp"
#include "spyre/common/progress.hpp"
#include "spyre/launch/tiling.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

namespace spyre::detail {

enum class LaunchMode {
    Exact,  // the tensors must be what the compute was compiled for
    Tiled,  // larger tensors are tiled; exact ones run as compiled
};

struct BoundLaunch {
    const Operation* op = nullptr;
    // Device address of each slot's tensor (empty for an Operation without
    // tensors); a tiled launch adds each tile's byte offsets to them.
    std::vector<uint64_t> addresses;
    std::vector<TiledTensor> tiled;    // the tensors as the tiler sees them (tiled launches)
    std::shared_ptr<const TilingPlan> tiling;  // set when the launch is tiled (not exact); the Operation's cached plan
};

// "operation 'mm'" (or "operation"), as every launch message names it.
std::string OpName(const Operation& op);

// Checks and binds; throws WrongDevice for objects of another device, then
// InvalidArgument / Unsupported naming the operation, the tensor slot and
// what is wrong. `entry` names the caller in WrongDevice messages.
BoundLaunch BindLaunch(DeviceCore& core, const Operation& op, std::span<const SpyreTensor> tensors, LaunchMode mode,
                       const char* entry);
// An exact launch on resident tensors given by handle (one per slot, or
// none for a compute whose addresses are fixed in its binary).
BoundLaunch BindLaunch(DeviceCore& core, const Operation& op, std::span<const DeviceHandle> handles, const char* entry);
// InvalidArgument when `op`'s program has relocations for its tensors that
// nothing bound (an operand holds address 0, as compiled) and no loaded
// correction writes their addresses in (a compute built or copied on its
// own, not an Operation a plan loaded, nor bound on the host): it would
// run at address 0, or at a former launch's tensors.
void CheckBoundToItsTensors(const Operation& op);
// InvalidArgument when `op` runs a program bound on the host (no loaded
// correction) with an operand outside the live, writable memory of `core`:
// a buffer freed since it was bound, one of another device, or a program
// image. A program holds addresses, not buffers, so nothing else stops it
// writing where its operands point. (A block freed and handed out again
// to another tensor is live, and not told apart.)
void CheckHostBoundOperands(const DeviceCore& core, const Operation& op);
// How many relocations of a program image still hold address 0, as the
// compiler leaves them; no buffer is ever there (SpyreAllocator::kNullGuard),
// so each is unbound, also in a program bound in part (0: none, every
// operand bound on the host by BuiltKernel::Bind, or bytes that are no
// program image). Read without decoding it whole: launches of host-bound
// programs look every time.
uint16_t UnboundRelocations(const std::vector<uint8_t>& program);

// The tensors of `op`'s slots from a plan-wide list: op.tensor_indices, or
// the first compute.tensors.size() when it has none.
std::vector<SpyreTensor> SelectTensors(const Operation& op, std::span<const SpyreTensor> all);

// Adds the operation index to an error of one Operation of several.
Error AtOperation(const Error& e, size_t index);

// Enqueues a bound launch on `stream` (which must be on the core it was
// bound with): one group, or one per tile, each copy -> correct -> compute.
// A tiled launch takes its variant programs from the Operation's cache,
// uploading those it does not hold yet.
// With `progress`, a tiled launch also enqueues stream callbacks that report
// the tiles done (about every hundredth tile, and the last).
void Enqueue(FlexStream& stream, const BoundLaunch& launch, const ProgressCallback& progress = {});

}  // namespace spyre::detail
