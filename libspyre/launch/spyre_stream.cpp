// SPDX-License-Identifier: Apache-2.0
#include "spyre/launch/spyre_stream.hpp"

#include "device/device_internals.hpp"
#include "launch/launch_binding.hpp"
#include "launch/same_device.hpp"
#include "moved_from.hpp"
#include "spyre/error.hpp"
#include "spyre/trace/trace.hpp"

namespace spyre {

SpyreStream::SpyreStream(Device& device, StreamOptions options)
    : owned_(std::make_unique<FlexStream>(device.CreateStream(options))), stream_(owned_.get()) {}
SpyreStream::SpyreStream(FlexStream stream)
    : owned_(std::make_unique<FlexStream>(std::move(stream))), stream_(owned_.get()) {}

SpyreStream::SpyreStream(FlexStream* borrowed) : stream_(borrowed) {}

SpyreStream SpyreStream::Default(Device& device) { return SpyreStream(&device.default_stream()); }

FlexStream& SpyreStream::flex_stream() { return detail::LiveState(stream_, "SpyreStream"); }

void SpyreStream::Synchronize() { detail::LiveState(stream_, "SpyreStream::Synchronize").Synchronize(); }

void SpyreStream::Launch(const Operation& op, std::span<const DeviceHandle> device_handles) {
    SPYRE_TRACE_SCOPE("SpyreStream::Launch");
    FlexStream& stream = detail::LiveState(stream_, "SpyreStream::Launch");
    detail::Enqueue(stream, detail::BindLaunch(*DeviceInternals::Core(stream), op, device_handles, "SpyreStream::Launch"));
}

void SpyreStream::Launch(const Operation& op, std::span<const SpyreTensor> tensors) {
    SPYRE_TRACE_SCOPE("SpyreStream::Launch");
    FlexStream& stream = detail::LiveState(stream_, "SpyreStream::Launch");
    detail::Enqueue(stream, detail::BindLaunch(*DeviceInternals::Core(stream), op, tensors, detail::LaunchMode::Exact,
                                                 "SpyreStream::Launch"));
}

void SpyreStream::LaunchTiled(const Operation& op, std::span<const SpyreTensor> tensors) {
    SPYRE_TRACE_SCOPE("SpyreStream::LaunchTiled");
    FlexStream& stream = detail::LiveState(stream_, "SpyreStream::LaunchTiled");
    detail::Enqueue(stream, detail::BindLaunch(*DeviceInternals::Core(stream), op, tensors, detail::LaunchMode::Tiled,
                                                 "SpyreStream::LaunchTiled"));
}

void SpyreStream::LaunchTiled(const Operation& op, std::span<const SpyreTensor> tensors,
                              const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("SpyreStream::LaunchTiled");
    FlexStream& stream = detail::LiveState(stream_, "SpyreStream::LaunchTiled");
    detail::Enqueue(stream,
                    detail::BindLaunch(*DeviceInternals::Core(stream), op, tensors, detail::LaunchMode::Tiled, "SpyreStream::LaunchTiled"),
                    progress);
}

// ---------------------------------------------------------------- LaunchKernel

void LaunchKernel(SpyreStream& stream, const ExecutionPlan& plan, std::span<const SpyreTensor> tensors) {
    const std::string plan_name = plan.name.empty() ? std::string("plan") : "plan '" + plan.name + "'";
    DeviceCore& core = *DeviceInternals::Core(stream.flex_stream());
    CheckSameDevice(plan.device(), core.id(), [&] { return "LaunchKernel: " + plan_name; }, "stream");
    detail::CheckTensorDevices(tensors, core.id(), "LaunchKernel", "stream");
    if (tensors.size() != plan.tensor_input_metadata.size())
        throw Error(ErrorKind::InvalidArgument, plan_name + " takes " + std::to_string(plan.tensor_input_metadata.size()) +
                                                    " tensors, got " + std::to_string(tensors.size()));
    // Bind every Operation before enqueuing any.
    std::vector<detail::BoundLaunch> bound;
    for (size_t o = 0; o < plan.operations.size(); ++o) {
        const Operation& op = plan.operations[o];
        if (op.compute() && !op.compute()->device_handle())
            throw Error(ErrorKind::InvalidArgument, plan_name + " is not loaded (use LoadExecutionPlan)");
        try {
            bound.push_back(detail::BindLaunch(core, op, detail::SelectTensors(op, tensors),
                                               op.compute() ? detail::LaunchMode::Tiled : detail::LaunchMode::Exact,
                                               "LaunchKernel"));
        } catch (const Error& e) {
            throw detail::AtOperation(e, o);
        }
    }
    for (const detail::BoundLaunch& b : bound) detail::Enqueue(stream.flex_stream(), b);
}

}  // namespace spyre
