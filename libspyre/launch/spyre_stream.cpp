// SPDX-License-Identifier: Apache-2.0
#include "spyre/launch/spyre_stream.hpp"

#include <cstring>

#include "stream/control_blocks.hpp"
#include "launch/same_device.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/launch/tiling.hpp"

namespace spyre {

// Where a tiled iteration finds its program: a re-specialised variant with
// its own correction program and input table.
struct SpyreStream::ProgramOverride {
    DeviceHandle program;
    uint64_t program_size;
    DeviceHandle correction;
    uint64_t correction_size;
    DeviceHandle table;
};

namespace {

std::string OpName(const Operation& op) { return op.name.empty() ? std::string("operation") : "operation '" + op.name + "'"; }

std::vector<uint8_t> AddressTable(std::span<const uint64_t> addresses) {
    std::vector<uint8_t> bytes(addresses.size() * sizeof(uint64_t));
    for (size_t i = 0; i < addresses.size(); ++i)
        for (int b = 0; b < 8; ++b) bytes[i * 8 + size_t(b)] = uint8_t(addresses[i] >> (8 * b));
    return bytes;
}

}  // namespace

SpyreStream::SpyreStream(Device& device, StreamOptions options)
    : owned_(std::make_unique<FlexStream>(device.CreateStream(options))), stream_(owned_.get()) {}
SpyreStream::SpyreStream(FlexStream stream)
    : owned_(std::make_unique<FlexStream>(std::move(stream))), stream_(owned_.get()) {}

SpyreStream::SpyreStream(FlexStream* borrowed) : stream_(borrowed) {}

SpyreStream SpyreStream::Default(Device& device) { return SpyreStream(&device.default_stream()); }

std::vector<uint64_t> SpyreStream::Addresses(const Operation& op, std::span<const DeviceHandle> handles) {
    std::vector<uint64_t> addresses;
    const SpyreCompute* compute = op.compute() ? &*op.compute() : nullptr;
    for (size_t i = 0; i < handles.size(); ++i) {
        const uint64_t bytes = compute && i < compute->tensors.size() && compute->tensors[i].bytes
                                   ? compute->tensors[i].bytes
                                   : 1;
        addresses.push_back(stream_->core()->allocator->DeviceAddress(handles[i], bytes));
    }
    return addresses;
}

void SpyreStream::Decompose(std::vector<ControlBlock>& group, const Operation& op, std::span<const uint64_t> addresses,
                            const ProgramOverride* override_program) {
    DeviceCore& core = *stream_->core();
    const auto& steps = op.preprocess();
    for (size_t i = 0; i < steps.size(); ++i) {
        const std::string where = OpName(op) + " step " + std::to_string(i);
        if (const auto* copy = std::get_if<PreProcessCompute::CopyToDevice>(&steps[i].step())) {
            if (op.correction_step && *op.correction_step == i) {
                // The correction input: the tensors' addresses, one u64 per slot.
                if (addresses.size() * sizeof(uint64_t) != copy->size)
                    throw Error(ErrorKind::InvalidArgument,
                                where + ": the correction input takes " + std::to_string(copy->size / 8) +
                                    " tensor addresses, got " + std::to_string(addresses.size()));
                group.push_back(detail::OwnedCopyToDevice(
                    core, override_program ? override_program->table : copy->device_handle, AddressTable(addresses)));
            } else {
                if (!copy->host_address)
                    throw Error(ErrorKind::InvalidArgument, where + ": CopyToDevice without a host address");
                group.push_back(detail::CopyToDevice(core, copy->host_address, copy->device_handle, copy->size));
            }
        } else if (const auto* back = std::get_if<PreProcessCompute::CopyFromDevice>(&steps[i].step())) {
            if (!back->host_address)
                throw Error(ErrorKind::InvalidArgument, where + ": CopyFromDevice without a host address");
            group.push_back(detail::CopyFromDevice(core, back->host_address, back->device_handle, back->size));
        } else {
            const auto& launch = std::get<PreProcessCompute::DeviceLaunch>(steps[i].step());
            const bool is_correction = op.correction && op.correction->binary_handle &&
                                       launch.device_handle == *op.correction->binary_handle;
            if (override_program && is_correction)
                group.push_back(detail::Launch(core, override_program->correction, override_program->correction_size));
            else
                group.push_back(detail::Launch(core, launch.device_handle, launch.size));
        }
    }
    if (const auto& compute = op.compute()) {
        if (override_program) {
            group.push_back(detail::Launch(core, override_program->program, override_program->program_size));
        } else {
            if (!compute->device_handle)
                throw Error(ErrorKind::InvalidArgument,
                            OpName(op) + ": its compute binary is not on the device (load the plan first)");
            group.push_back(detail::Launch(core, *compute->device_handle, compute->binary_size));
        }
    }
}

void SpyreStream::Launch(const Operation& op, std::span<const DeviceHandle> device_handles) {
    detail::CheckOperationDevice(op, stream_->core()->id(), "SpyreStream::Launch", "stream");
    // One handle per tensor slot (none for a compute whose addresses are
    // fixed in its binary): a different count is a caller's mistake.
    if (op.compute() && !op.compute()->tensors.empty() && !device_handles.empty() &&
        device_handles.size() != op.compute()->tensors.size())
        throw Error(ErrorKind::InvalidArgument, OpName(op) + " takes " + std::to_string(op.compute()->tensors.size()) +
                                                    " tensors, got " + std::to_string(device_handles.size()) +
                                                    " device handles");
    std::vector<ControlBlock> group;
    Decompose(group, op, Addresses(op, device_handles), nullptr);
    stream_->EnqueueGroup(group);
}

void SpyreStream::Launch(const Operation& op, std::span<const SpyreTensor> tensors) {
    // Launch runs the compute as compiled: the tensors must be exactly what
    // it expects (count, dtype, shape, strides), or it would read and write
    // the wrong bytes. Larger tensors go through LaunchTiled.
    detail::CheckOperationDevice(op, stream_->core()->id(), "SpyreStream::Launch", "stream");
    detail::CheckTensorDevices(tensors, stream_->core()->id(), "SpyreStream::Launch", "stream");
    if (op.compute() && !op.compute()->tensors.empty()) {
        const auto& specs = op.compute()->tensors;
        if (tensors.size() != specs.size())
            throw Error(ErrorKind::InvalidArgument, OpName(op) + " takes " + std::to_string(specs.size()) +
                                                        " tensors, got " + std::to_string(tensors.size()));
        for (size_t i = 0; i < specs.size(); ++i) {
            const SpyreTensor& t = tensors[i];
            const std::string who = OpName(op) + " tensor " + std::to_string(i) + " ('" + specs[i].name + "')";
            if (t.data_type() != specs[i].dtype)
                throw Error(ErrorKind::InvalidArgument, who + " is " + ToString(t.data_type()) + ", the compute expects " +
                                                            ToString(specs[i].dtype));
            if (t.shape() != specs[i].shape || t.element_strides() != specs[i].strides)
                throw Error(ErrorKind::InvalidArgument, who + " is " + t.ToString() +
                                                            ", not the shape and strides the compute was compiled for"
                                                            " (LaunchTiled handles other shapes)");
        }
    }
    std::vector<DeviceHandle> handles;
    for (const SpyreTensor& t : tensors) handles.push_back(t.device_handle());
    Launch(op, handles);
}

void SpyreStream::LaunchTiled(const Operation& op, std::span<const SpyreTensor> tensors) {
    detail::CheckOperationDevice(op, stream_->core()->id(), "SpyreStream::LaunchTiled", "stream");
    detail::CheckTensorDevices(tensors, stream_->core()->id(), "SpyreStream::LaunchTiled", "stream");
    if (!op.compute()) throw Error(ErrorKind::InvalidArgument, OpName(op) + " has no compute to tile");
    const SpyreCompute& compute = *op.compute();
    if (!compute.device_handle)
        throw Error(ErrorKind::InvalidArgument, OpName(op) + ": its compute binary is not on the device");
    if (tensors.size() != compute.tensors.size())
        throw Error(ErrorKind::InvalidArgument, OpName(op) + " takes " + std::to_string(compute.tensors.size()) +
                                                    " tensors, got " + std::to_string(tensors.size()));
    std::vector<TiledTensor> tiled;
    for (const SpyreTensor& t : tensors) tiled.push_back(TiledTensor{t.shape(), t.element_strides(), t.data_type()});
    const TilingPlan plan = PlanTiling(compute, tiled);
    if (plan.exact) return Launch(op, tensors);
    if (!op.correction || !op.correction->binary_handle || !op.correction_step)
        throw Error(ErrorKind::InvalidArgument,
                    OpName(op) + " has no program correction: its tensor addresses are fixed, so it cannot be tiled");

    DeviceCore& core = *stream_->core();
    std::vector<uint64_t> bases;
    for (const SpyreTensor& t : tensors) bases.push_back(core.allocator->DeviceAddress(t.device_handle(), t.size_bytes()));

    // Variant programs (remainders, strides, accumulation) are derived from
    // the compiled one and copied to device ahead of the iterations; they are
    // freed in stream order once the last iteration is done.
    auto scratch = std::make_shared<std::vector<DeviceAllocation>>();
    auto free_scratch = [scratch, core_ptr = stream_->core()] {
        core_ptr->FreeAfterQueuedWork(*scratch);
        scratch->clear();
    };
    std::vector<std::optional<ProgramOverride>> overrides(plan.variants.size());
    std::vector<ControlBlock> uploads;
    bool enqueued = false;
    try {
        for (size_t v = 0; v < plan.variants.size(); ++v) {
            if (plan.variants[v].compiled) continue;
            std::vector<uint8_t> program = SpecializeProgram(compute.binary, compute, tiled, plan.variants[v]);
            std::vector<uint8_t> correction = op.correction->binary;
            const DeviceAllocation prog = core.allocator->Allocate(program.size());
            scratch->push_back(prog);
            const DeviceAllocation table = core.allocator->Allocate(op.correction->input_size);
            scratch->push_back(table);
            const DeviceAllocation corr = core.allocator->Allocate(correction.size());
            scratch->push_back(corr);
            SetCorrectionTarget(correction, core.allocator->DeviceAddress(prog.handle, program.size()),
                                core.allocator->DeviceAddress(table.handle, op.correction->input_size));
            overrides[v] = ProgramOverride{prog.handle, program.size(), corr.handle, correction.size(), table.handle};
            uploads.push_back(detail::OwnedCopyToDevice(core, prog.handle, std::move(program)));
            uploads.push_back(detail::OwnedCopyToDevice(core, corr.handle, std::move(correction)));
        }
        // One group per tile keeps its copy -> correct -> compute together.
        std::vector<std::vector<ControlBlock>> groups;
        std::vector<uint64_t> addresses(tensors.size());
        for (const TileIteration& it : plan.iterations) {
            for (size_t i = 0; i < tensors.size(); ++i) addresses[i] = bases[i] + it.byte_offsets[i];
            Decompose(groups.emplace_back(), op, addresses, overrides[it.variant] ? &*overrides[it.variant] : nullptr);
        }
        if (!uploads.empty()) {
            stream_->EnqueueGroup(uploads);
            enqueued = true;
        }
        for (auto& g : groups) {
            stream_->EnqueueGroup(g);
            enqueued = true;
        }
        if (!scratch->empty()) {
            detail::QueueCleanup(*stream_, free_scratch);
        }
    } catch (...) {
        if (!enqueued) {
            free_scratch();
            throw;
        }
        // Part of it is queued (the stream faulted meanwhile): free in stream
        // order, after what was queued, so nothing writes into freed memory.
        detail::QueueCleanup(*stream_, free_scratch);
        throw;
    }
}

// ---------------------------------------------------------------- LaunchKernel

void LaunchKernel(SpyreStream& stream, const ExecutionPlan& plan, std::span<const SpyreTensor> tensors) {
    const std::string plan_name = plan.name.empty() ? std::string("plan") : "plan '" + plan.name + "'";
    const DeviceId& device = stream.flex_stream().core()->id();
    CheckSameDevice(plan.device, device, [&] { return "LaunchKernel: " + plan_name; }, "stream");
    for (const Operation& op : plan.operations) detail::CheckOperationDevice(op, device, "LaunchKernel", "stream");
    detail::CheckTensorDevices(tensors, device, "LaunchKernel", "stream");
    if (tensors.size() != plan.tensor_input_metadata.size())
        throw Error(ErrorKind::InvalidArgument, plan_name + " takes " + std::to_string(plan.tensor_input_metadata.size()) +
                                                    " tensors, got " + std::to_string(tensors.size()));
    struct Route {
        const Operation* op;
        std::vector<SpyreTensor> tensors;
        bool tiled;
    };
    std::vector<Route> routes;
    // Validate every Operation before enqueuing any.
    for (size_t o = 0; o < plan.operations.size(); ++o) {
        const Operation& op = plan.operations[o];
        Route r{&op, {}, false};
        std::vector<size_t> indices = op.tensor_indices;
        if (indices.empty() && op.compute())
            for (size_t i = 0; i < op.compute()->tensors.size(); ++i) indices.push_back(i);
        for (size_t slot = 0; slot < indices.size(); ++slot) {
            const size_t t = indices[slot];
            if (t >= tensors.size())
                throw Error(ErrorKind::InvalidArgument, plan_name + " operation " + std::to_string(o) +
                                                            " binds tensor " + std::to_string(t) + " of " +
                                                            std::to_string(tensors.size()));
            r.tensors.push_back(tensors[t]);
        }
        if (const auto& compute = op.compute()) {
            if (!compute->device_handle)
                throw Error(ErrorKind::InvalidArgument, plan_name + " is not loaded (use LoadExecutionPlan)");
            if (r.tensors.size() != compute->tensors.size())
                throw Error(ErrorKind::InvalidArgument, plan_name + " operation " + std::to_string(o) + " takes " +
                                                            std::to_string(compute->tensors.size()) + " tensors");
            for (size_t slot = 0; slot < r.tensors.size(); ++slot) {
                const TensorSpec& spec = compute->tensors[slot];
                const SpyreTensor& t = r.tensors[slot];
                if (t.data_type() != spec.dtype)
                    throw Error(ErrorKind::InvalidArgument,
                                plan_name + " tensor '" + spec.name + "' is " + ToString(spec.dtype) + ", got " +
                                    ToString(t.data_type()));
                if (t.shape() != spec.shape || t.element_strides() != spec.strides) r.tiled = true;
            }
        }
        routes.push_back(std::move(r));
    }
    // LaunchTiled checks its tensors before it enqueues anything, but with
    // several Operations a later one failing would leave the earlier ones
    // queued: plan every tiled route first.
    if (routes.size() > 1)
        for (size_t o = 0; o < routes.size(); ++o) {
            const Route& r = routes[o];
            if (!r.tiled) continue;
            try {
                std::vector<TiledTensor> tiled;
                for (const SpyreTensor& t : r.tensors)
                    tiled.push_back(TiledTensor{t.shape(), t.element_strides(), t.data_type()});
                const TilingPlan tiling = PlanTiling(*r.op->compute(), tiled);
                if (!tiling.exact && (!r.op->correction || !r.op->correction->binary_handle || !r.op->correction_step))
                    throw Error(ErrorKind::InvalidArgument, OpName(*r.op) +
                                                                " has no program correction: its tensor addresses are "
                                                                "fixed, so it cannot be tiled");
            } catch (const Error& e) {
                ErrorContext context = e.context();
                context.op_index = o;
                throw Error(e.kind(), plan_name + " operation " + std::to_string(o) + ": " + e.message(), context);
            }
        }
    for (Route& r : routes) {
        if (r.tiled)
            stream.LaunchTiled(*r.op, r.tensors);
        else
            stream.Launch(*r.op, r.tensors);
    }
}

}  // namespace spyre
