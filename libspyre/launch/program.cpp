// SPDX-License-Identifier: Apache-2.0
#include "spyre/launch/program.hpp"

#include <algorithm>
#include <atomic>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "launch/launch_binding.hpp"
#include "launch/operation_access.hpp"
#include "launch/same_device.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/trace/trace.hpp"

namespace spyre {

namespace {
std::atomic<uint64_t> next_instruction_id{1};

}  // namespace

Instruction::Instruction(SpyreCompute compute) : Instruction(Operation(std::move(compute))) {}
Instruction::Instruction(SpyreCompute compute, std::vector<PreProcessCompute> preprocess)
    : Instruction(Operation(std::move(compute), std::move(preprocess))) {}
Instruction::Instruction(Operation operation) : operation_(std::move(operation)), id_(next_instruction_id++) {}

Program::Program(Device& device) : core_(DeviceInternals::Core(device)), stream_(device) {}

Program::Program(Device& device, std::shared_ptr<const ExecutionPlan> plan)
    : core_(DeviceInternals::Core(device)), plan_(std::move(plan)), stream_(device) {
    if (!plan_) throw Error(ErrorKind::InvalidArgument, "Program from a null plan");
    CheckSameDevice(plan_->device(), core_->id(), [&] { return "Program: plan '" + plan_->name + "'"; }, "device");
    for (const Operation& op : plan_->operations) instructions_.emplace_back(op);
}

Program::~Program() {
    try {
        stream_.Synchronize();
    } catch (const Error&) {
    }
}

void Program::AddInstruction(Instruction instruction) {
    detail::CheckOperationDevice(instruction.operation(), core_->id(), "Program::AddInstruction", "program");
    try {
        detail::CheckBoundToItsTensors(instruction.operation());
    } catch (const Error& e) {
        throw Error(e.kind(), "Program::AddInstruction: " + e.message(), e.context());
    }
    const auto& compute = instruction.operation().compute();
    if (compute && !compute->device_handle()) {
        if (compute->binary.empty())
            throw Error(ErrorKind::InvalidArgument, "AddInstruction: the compute has neither a device handle nor a binary");
        // Decoded first, as LoadExecutionPlan does: a binary that is no
        // program is refused here, not by the device at the next Launch
        // (whose failure the stream then keeps until Reset).
        try {
            (void)ProgramImage::Decode(compute->binary);
        } catch (const Error& e) {
            throw Error(ErrorKind::InvalidArgument, "Program::AddInstruction: compute '" + compute->name +
                                                        "': its binary is not a program image: " + e.message());
        }
        // Fill in the handle on our own copy of the instruction (a by-value
        // parameter, so not a const object), keeping its id: the caller's
        // Instruction must still name it for RemoveInstruction.
        SpyreCompute& own = *const_cast<Operation&>(instruction.operation()).compute();
        DeviceBuffer block = DeviceBuffer::Allocate(core_, own.binary.size());
        stream_.flex_stream().CopyToDevice(own.binary.data(), block.handle(), own.binary.size());
        // The host copy goes with the instruction if it is removed; a failed
        // copy frees the block (after the stream's queued work) as it goes.
        stream_.Synchronize();
        core_->KeepForPrograms(block.handle());
        detail::OperationAccess::SetBinary(own, block.handle(), own.binary.size());
        owned_.push_back(std::move(block));
    }
    instructions_.push_back(std::move(instruction));
}

void Program::RemoveInstruction(const Instruction& instruction) {
    for (auto it = instructions_.begin(); it != instructions_.end(); ++it) {
        if (it->id() == instruction.id()) {
            instructions_.erase(it);
            return;
        }
    }
    throw Error(ErrorKind::NotFound, "RemoveInstruction: instruction " + std::to_string(instruction.id()) +
                                         " is not in this program");
}

namespace {
// Tensors the instructions bind: one past the highest index any of them uses.
// More than that would be silently ignored: an error, like too few.
void CheckTensorCount(const std::vector<Instruction>& instructions, size_t given, const char* what) {
    size_t needed = 0;
    for (const Instruction& ins : instructions) {
        const Operation& op = ins.operation();
        if (op.tensor_indices.empty())
            needed = std::max(needed, op.compute() ? op.compute()->tensors.size() : size_t(0));
        for (size_t t : op.tensor_indices) needed = std::max(needed, t + 1);
    }
    if (given > needed)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the program takes " + std::to_string(needed) +
                                                    " tensors, got " + std::to_string(given));
}
}  // namespace

void Program::Run(std::span<const SpyreTensor> tensors, bool tiled, const char* entry) {
    SPYRE_TRACE_SCOPE("Program::Run");
    detail::CheckTensorDevices(tensors, core_->id(), entry, "program");
    CheckTensorCount(instructions_, tensors.size(), entry);
    // Bind every instruction before running any, so a failure leaves
    // nothing half done.
    std::vector<detail::BoundLaunch> bound;
    for (size_t i = 0; i < instructions_.size(); ++i) {
        const Operation& op = instructions_[i].operation();
        const auto mode = tiled && op.compute() ? detail::LaunchMode::Tiled : detail::LaunchMode::Exact;
        try {
            bound.push_back(detail::BindLaunch(*core_, op, detail::SelectTensors(op, tensors), mode, entry));
        } catch (const Error& e) {
            throw detail::AtOperation(e, i);
        }
    }
    for (const detail::BoundLaunch& b : bound) detail::Enqueue(stream_.flex_stream(), b);
    stream_.Synchronize();
}

void Program::Launch(std::span<const SpyreTensor> tensors) { Run(tensors, false, "Program::Launch"); }

void Program::LaunchTiled(std::span<const SpyreTensor> tensors) { Run(tensors, true, "Program::LaunchTiled"); }

}  // namespace spyre
