// SPDX-License-Identifier: Apache-2.0
// Workflow 2: loading an ExecutionPlan onto the device.
#include <algorithm>

#include "stream/control_blocks.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/launch/spyre_stream.hpp"

namespace spyre {

namespace {

// Device memory of one loaded plan, freed with the plan's last reference.
struct PlanMemory {
    explicit PlanMemory(std::shared_ptr<DeviceCore> c) : core(std::move(c)) {}
    PlanMemory(const PlanMemory&) = delete;  // one owner frees the memory, once
    std::shared_ptr<DeviceCore> core;
    std::vector<DeviceAllocation> blocks;
    ~PlanMemory() { core->FreeAfterQueuedWork(blocks); }  // launches of the plan may still be queued
    DeviceAllocation Allocate(uint64_t size) {
        blocks.push_back(core->allocator->Allocate(std::max<uint64_t>(size, 1)));
        return blocks.back();
    }
};

// A preprocessing-only Operation copying `bytes` to a fresh allocation
// (seed 001 Workflow 2 step 3), launched on `stream`. Returns the handle.
DeviceHandle Upload(SpyreStream& stream, PlanMemory& memory, const std::vector<uint8_t>& bytes) {
    const DeviceAllocation block = memory.Allocate(bytes.size());
    const Operation load({PreProcessCompute(PreProcessCompute::CopyToDevice{bytes.data(), block.handle, bytes.size()})});
    stream.Launch(load, std::span<const DeviceHandle>{});
    return block.handle;
}

void LoadOperation(SpyreStream& stream, PlanMemory& memory, Operation& op) {
    DeviceCore& core = *memory.core;
    SpyreCompute* compute = op.compute() ? &*op.compute() : nullptr;
    if (compute && !compute->binary.empty()) {
        compute->device_handle = Upload(stream, memory, compute->binary);
        compute->binary_size = compute->binary.size();
    }
    if (op.correction && compute && compute->device_handle) {
        CorrectionMetadata& c = *op.correction;
        const DeviceAllocation table = memory.Allocate(c.input_size);
        // The correction program patches this Operation's compute binary
        // from this Operation's input table.
        SetCorrectionTarget(c.binary,
                            core.allocator->DeviceAddress(*compute->device_handle, compute->binary_size),
                            core.allocator->DeviceAddress(table.handle, c.input_size));
        c.binary_handle = Upload(stream, memory, c.binary);
        c.binary_size = c.binary.size();
        c.input_handle = table.handle;
        // Example 2: copy the correction input, launch the correction; the compute follows.
        op.preprocess().insert(op.preprocess().begin(),
                               {PreProcessCompute(PreProcessCompute::CopyToDevice{nullptr, table.handle, c.input_size}),
                                PreProcessCompute(PreProcessCompute::DeviceLaunch{*c.binary_handle, c.binary_size})});
        op.correction_step = 0;
        op.device_handles = {*c.binary_handle, table.handle, *compute->device_handle};
    } else if (compute && compute->device_handle) {
        op.device_handles = {*compute->device_handle};
    }
}

}  // namespace

std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const CompilerOutput& compiler_output) {
    const std::shared_ptr<DeviceCore>& core = stream.flex_stream().core();
    const uint64_t key = compiler_output.ContentHash();
    {
        std::lock_guard lock(core->plans_mu);
        if (auto it = core->plans.find(key); it != core->plans.end())
            if (auto cached = it->second.lock()) return cached;
    }
    // Parse and validate before any device memory is taken.
    auto plan = std::make_shared<ExecutionPlan>(compiler_output);
    plan->device = core->id();
    // Work the caller queued before the load is the caller's: a fault there
    // is thrown as it is and stays sticky (only a fault of the load's own
    // steps is cleared below, as the plan is discarded with it).
    stream.Synchronize();
    auto memory = std::make_shared<PlanMemory>(core);
    try {
        for (Operation& op : plan->operations) LoadOperation(stream, *memory, op);
        for (InitPacket& packet : plan->init_packets) {
            packet.device_handle = Upload(stream, *memory, packet.binary);
            stream.flex_stream().Launch(*packet.device_handle, packet.binary.size());
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
        throw Error(e.kind(), "loading plan '" + plan->name + "' from " + compiler_output.origin + ": " + e.message(),
                    e.context());
    }
    // The plan's device memory lives exactly as long as the plan.
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

std::shared_ptr<const ExecutionPlan> LoadExecutionPlan(SpyreStream& stream, const std::filesystem::path& directory) {
    return LoadExecutionPlan(stream, CompilerOutput::ReadDirectory(directory));
}

}  // namespace spyre
