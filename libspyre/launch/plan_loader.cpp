// SPDX-License-Identifier: Apache-2.0
// Workflow 2: loading an ExecutionPlan onto the device.
#include <algorithm>

#include "device/device_internals.hpp"
#include "launch/launch_binding.hpp"
#include "launch/operation_access.hpp"
#include "launch/variant_cache.hpp"
#include "stream/control_blocks.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/trace/trace.hpp"

namespace spyre {

namespace {

// Device memory of one loaded plan, freed with the plan's last reference
// (after the launches of the plan still queued).
struct PlanMemory {
    std::vector<DeviceBuffer> blocks;
    DeviceHandle Allocate(DeviceCore& core, uint64_t size) {
        return blocks.emplace_back(DeviceBuffer::Allocate(core.shared_from_this(), std::max<uint64_t>(size, 1))).handle();
    }
};

// Progress of one load: binaries copied of `total`.
struct LoadProgress {
    const ProgressCallback* callback = nullptr;
    uint64_t total = 0;
    uint64_t queued = 0;
};

// How many binaries LoadOperation and the init packets upload.
uint64_t CountUploads(const ExecutionPlan& plan) {
    uint64_t n = plan.init_packets.size();
    for (const Operation& op : plan.operations) {
        const SpyreCompute* c = op.compute() ? &*op.compute() : nullptr;
        if (!c) continue;
        n += !c->binary.empty();
        n += op.correction && (!c->binary.empty() || c->device_handle());
    }
    return n;
}

// A preprocessing-only Operation copying `bytes` to a fresh allocation
// (seed 001 Workflow 2 step 3), launched on `stream`. Returns the handle.
DeviceHandle Upload(SpyreStream& stream, PlanMemory& memory, const std::vector<uint8_t>& bytes, LoadProgress& progress) {
    const DeviceHandle block = memory.Allocate(*DeviceInternals::Core(stream.flex_stream()), bytes.size());
    const Operation load({PreProcessCompute(PreProcessCompute::CopyToDevice{bytes.data(), block, bytes.size()})});
    stream.Launch(load, std::span<const DeviceHandle>{});
    DeviceInternals::Core(stream.flex_stream())->KeepForPrograms(block);
    if (progress.callback && *progress.callback)
        stream.flex_stream().AddCallback([cb = *progress.callback, done = ++progress.queued, total = progress.total] {
            cb({"loading plan", done, std::max(done, total), "binaries"});
        });
    return block;
}

void LoadOperation(SpyreStream& stream, const std::shared_ptr<PlanMemory>& memory_ptr, Operation& op,
                   LoadProgress& progress) {
    PlanMemory& memory = *memory_ptr;
    DeviceCore& core = *DeviceInternals::Core(stream.flex_stream());
    SpyreCompute* compute = op.compute() ? &*op.compute() : nullptr;
    if (compute && !compute->binary.empty())
        detail::OperationAccess::SetBinary(*compute, Upload(stream, memory, compute->binary, progress),
                                          compute->binary.size());
    if (!compute || !compute->device_handle()) return;
    const DeviceHandle program = *compute->device_handle();
    auto loaded = std::make_shared<detail::LoadedOperation>();
    loaded->plan_memory = memory_ptr;
    if (op.correction) {
        CorrectionMetadata& c = *op.correction;
        const DeviceHandle table = memory.Allocate(core, c.input_size);
        // The correction program patches this Operation's compute binary
        // from this Operation's input table.
        SetCorrectionTarget(c.binary, core.allocator->DeviceAddress(program, compute->binary_size()),
                            core.allocator->DeviceAddress(table, c.input_size));
        const DeviceHandle correction = Upload(stream, memory, c.binary, progress);
        detail::OperationAccess::SetCorrection(c, correction, c.binary.size(), table);
        // Example 2: copy the correction input, launch the correction; the compute follows.
        op.preprocess().insert(op.preprocess().begin(),
                               {PreProcessCompute(PreProcessCompute::CopyToDevice{nullptr, table, c.input_size}),
                                PreProcessCompute(PreProcessCompute::DeviceLaunch{correction, c.binary.size()})});
        loaded->compute = *compute;  // as loaded: launches go by these, not by a copy's edits
        loaded->correction = c;
        detail::OperationAccess::SetLoaded(op, {correction, table, program}, 0, std::move(loaded));
    } else {
        loaded->compute = *compute;
        detail::OperationAccess::SetLoaded(op, {program}, std::nullopt, std::move(loaded));
    }
}

}  // namespace

std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const CompilerOutput& compiler_output,
                                                       const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("LoadExecutionPlan");
    const std::shared_ptr<DeviceCore>& core = DeviceInternals::Core(stream.flex_stream());
    const uint64_t key = compiler_output.ContentHash();
    {
        std::lock_guard lock(core->plans_mu);
        if (auto it = core->plans.find(key); it != core->plans.end())
            if (auto cached = it->second.lock()) {
                if (progress) {
                    const uint64_t n = CountUploads(*cached);
                    progress({"loading plan", n, n, "binaries"});
                }
                return cached;
            }
    }
    // Parse and validate before any device memory is taken.
    auto plan = std::make_shared<ExecutionPlan>(compiler_output);
    detail::OperationAccess::SetDevice(*plan, core->id());
    // An init packet runs once, here, with no tensors: nothing binds its
    // relocations, so one left as compiled would read and write at device
    // address 0, over whatever the caller keeps there (found probing from
    // outside: a tensor at pf:0x0 zeroed by a loaded plan).
    for (const InitPacket& packet : plan->init_packets)
        if (const uint16_t relocs = detail::UnboundRelocations(packet.binary))
            throw Error(ErrorKind::InvalidArgument,
                        "loading plan '" + plan->name + "': init packet '" + packet.name + "' has " +
                            std::to_string(relocs) +
                            " relocation(s) unbound (address 0 as compiled): an init packet runs at load with no "
                            "tensors to bind, so it would run at device address 0; bind every operand of its "
                            "program on the host (BuiltKernel::Bind), or make it an operation");
    // Work the caller queued before the load is the caller's: a fault there
    // is thrown as it is and stays sticky (only a fault of the load's own
    // steps is cleared below, as the plan is discarded with it).
    stream.Synchronize();
    auto memory = std::make_shared<PlanMemory>();
    LoadProgress load_progress{&progress, progress ? CountUploads(*plan) : 0, 0};
    try {
        for (Operation& op : plan->operations) LoadOperation(stream, memory, op, load_progress);
        for (InitPacket& packet : plan->init_packets) {
            detail::OperationAccess::SetBinary(packet, Upload(stream, *memory, packet.binary, load_progress));
            stream.flex_stream().Launch(*packet.device_handle(), packet.binary.size());
        }
    } catch (...) {
        // Copies already queued write into `memory`: let them finish first.
        try {
            stream.Synchronize();
        } catch (const Error&) {
            stream.flex_stream().Reset();
        }
        throw;
    }
    // Loading is done once per plan: surface any failure here, with the plan's name.
    try {
        stream.Synchronize();
    } catch (const Error& e) {
        stream.flex_stream().Reset();
        const std::string from = compiler_output.origin.empty() ? "" : " from " + compiler_output.origin;
        throw Error(e.kind(), "loading plan '" + plan->name + "'" + from + ": " + e.message(), e.context());
    }
    // The plan's device memory lives as long as the plan, or a copy of one
    // of its Operations (each holds it too).
    std::shared_ptr<const ExecutionPlan> loaded(plan.get(), [plan, memory](const ExecutionPlan*) mutable {
        plan.reset();
        memory.reset();
    });
    std::lock_guard lock(core->plans_mu);
    if (auto it = core->plans.find(key); it != core->plans.end())
        if (auto cached = it->second.lock()) return cached;  // another thread won the race
    core->plans[key] = loaded;
    return loaded;
}

std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const std::filesystem::path& directory,
                                                       const ProgressCallback& progress) {
    return LoadExecutionPlan(stream, CompilerOutput::ReadDirectory(directory), progress);
}

}  // namespace spyre
