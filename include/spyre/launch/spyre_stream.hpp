// SPDX-License-Identifier: Apache-2.0
// SpyreStream (seed 001): the entry point for device work. It holds a
// FlexStream and decomposes Operations into FlexStream primitives —
// preprocessing steps in order (the correction input filled from the
// tensors' addresses), then the compute — as one group, so the steps of one
// Operation reach the ring back to back and a failure cancels the rest.
// LaunchTiled runs a compute compiled for a tile over larger tensors
// (docs/tiling.md). LaunchKernel routes each Operation of a plan to Launch
// or LaunchTiled. LoadExecutionPlan copies a plan's binaries to device
// (Workflow 2) and caches loaded plans by content.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <utility>

#include "spyre/common/progress.hpp"
#include "spyre/device/device.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/tensor/spyre_tensor.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class SpyreStream {
public:
    // A new stream of its own.
    explicit SpyreStream(Device& device, StreamOptions options = {});
    explicit SpyreStream(FlexStream stream);
    // Over the device's default stream (seed 001 Workflow 5: "default
    // SpyreStream created at runtime start"); the device must outlive it.
    static SpyreStream Default(Device& device);

    // The state goes with a move: every call on a moved-from SpyreStream
    // (flex_stream() included) is InvalidArgument "SpyreStream...: moved
    // from", as for FlexStream.
    SpyreStream(SpyreStream&& other) noexcept
        : owned_(std::move(other.owned_)), stream_(std::exchange(other.stream_, nullptr)) {}
    SpyreStream& operator=(SpyreStream&& other) noexcept {
        if (this != &other) {
            owned_ = std::move(other.owned_);
            stream_ = std::exchange(other.stream_, nullptr);
        }
        return *this;
    }

    FlexStream& flex_stream();

    // Enqueues the Operation's steps for the resident tensors at
    // `device_handles` (one per tensor slot, inputs then outputs; empty for
    // a preprocessing-only Operation). Returns at once.
    void Launch(const Operation& operation, std::span<const DeviceHandle> device_handles);
    void Launch(const Operation& operation, std::span<const SpyreTensor> tensors);
    // Runs the Operation's compute over tensors larger than its tile: one
    // decomposition per tile, each with the tile's addresses; remainder and
    // strided tiles use re-specialised programs; reduction tiles accumulate.
    // The re-specialised programs are kept with the loaded Operation (its
    // plan), keyed by tile shapes and strides: the first launch of a shape
    // uploads them before it returns, later ones upload nothing.
    void LaunchTiled(const Operation& operation, std::span<const SpyreTensor> tensors);
    // The same, telling `progress` the tiles completed (from the stream's
    // callbacks, about every hundredth tile and the last) as the stream
    // runs them.
    void LaunchTiled(const Operation& operation, std::span<const SpyreTensor> tensors,
                     const ProgressCallback& progress);
    void Synchronize();

private:
    explicit SpyreStream(FlexStream* borrowed);

    std::unique_ptr<FlexStream> owned_;
    FlexStream* stream_;
};

// For each Operation of `plan` (loaded), binds its tensors from `tensors`
// (the plan's tensor_input_metadata order), then calls Launch when they
// match the compiled shapes and strides exactly, LaunchTiled otherwise.
// Validates everything before enqueuing anything; returns at once. An error
// about one Operation carries its index in ErrorContext::op_index.
void LaunchKernel(SpyreStream& stream, const ExecutionPlan& plan, std::span<const SpyreTensor> tensors);

// Loads a plan: each binary is allocated and copied to device through a
// preprocessing-only Operation on `stream`, correction programs are pointed
// at their compute binaries, init packets run once; then waits for the
// stream. Plans are cached per device by content: loading equal compiler
// output again, while the first loaded plan is alive, returns it without
// touching the device. The device memory is freed with the last reference.
// `progress` (if set) hears the binaries copied to device, as the stream
// completes them, ending at the plan's number of binaries; a plan found in
// the cache reports done == total at once.
std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const CompilerOutput& compiler_output,
                                                       const ProgressCallback& progress = {});
std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const std::filesystem::path& directory,
                                                       const ProgressCallback& progress = {});

}  // namespace spyre
SPYRE_API_END
