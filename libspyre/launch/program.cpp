// SPDX-License-Identifier: Apache-2.0
#include "spyre/launch/program.hpp"

#include <algorithm>
#include <atomic>

#include "device/device_core.hpp"
#include "launch/same_device.hpp"
#include "spyre/error.hpp"
#include "spyre/launch/tiling.hpp"

namespace spyre {

namespace {
std::atomic<uint64_t> next_instruction_id{1};

}  // namespace

Instruction::Instruction(SpyreCompute compute) : Instruction(Operation(std::move(compute))) {}
Instruction::Instruction(SpyreCompute compute, std::vector<PreProcessCompute> preprocess)
    : Instruction(Operation(std::move(compute), std::move(preprocess))) {}
Instruction::Instruction(Operation operation) : operation_(std::move(operation)), id_(next_instruction_id++) {}

Program::Program(Device& device) : device_(&device), stream_(device) {}

Program::Program(Device& device, std::shared_ptr<const ExecutionPlan> plan)
    : device_(&device), plan_(std::move(plan)), stream_(device) {
    if (!plan_) throw Error(ErrorKind::InvalidArgument, "Program from a null plan");
    CheckSameDevice(plan_->device, device.id(), [&] { return "Program: plan '" + plan_->name + "'"; }, "device");
    for (const Operation& op : plan_->operations) instructions_.emplace_back(op);
}

Program::~Program() {
    try {
        stream_.Synchronize();
    } catch (const Error&) {
    }
    device_->core()->FreeAfterQueuedWork(owned_);
}

void Program::AddInstruction(Instruction instruction) {
    detail::CheckOperationDevice(instruction.operation(), device_->id(), "Program::AddInstruction", "program");
    const auto& compute = instruction.operation().compute();
    if (compute && !compute->device_handle) {
        if (compute->binary.empty())
            throw Error(ErrorKind::InvalidArgument, "AddInstruction: the compute has neither a device handle nor a binary");
        // Fill in the handle on our own copy of the instruction (a by-value
        // parameter, so not a const object), keeping its id: the caller's
        // Instruction must still name it for RemoveInstruction.
        Operation& op = const_cast<Operation&>(instruction.operation());
        const DeviceAllocation block = device_->allocator().Allocate(compute->binary.size());
        owned_.push_back(block);
        op.compute()->device_handle = block.handle;
        op.compute()->binary_size = op.compute()->binary.size();
        try {
            stream_.flex_stream().CopyToDevice(op.compute()->binary.data(), block.handle, op.compute()->binary_size);
            stream_.Synchronize();  // the host copy goes with the instruction if it is removed
        } catch (...) {
            owned_.pop_back();
            try {
                device_->allocator().Free(block.handle);
            } catch (const Error&) {
            }
            throw;
        }
        instructions_.push_back(std::move(instruction));
        return;
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

std::vector<SpyreTensor> Program::Bind(const Operation& op, std::span<const SpyreTensor> tensors) const {
    std::vector<SpyreTensor> bound;
    if (op.tensor_indices.empty()) {
        const size_t n = op.compute() ? op.compute()->tensors.size() : 0;
        if (tensors.size() < n)
            throw Error(ErrorKind::InvalidArgument, "instruction '" + op.name + "' takes " + std::to_string(n) +
                                                        " tensors, got " + std::to_string(tensors.size()));
        bound.assign(tensors.begin(), tensors.begin() + ptrdiff_t(n));
        return bound;
    }
    for (size_t t : op.tensor_indices) {
        if (t >= tensors.size())
            throw Error(ErrorKind::InvalidArgument, "instruction '" + op.name + "' binds tensor " + std::to_string(t) +
                                                        ", only " + std::to_string(tensors.size()) + " given");
        bound.push_back(tensors[t]);
    }
    return bound;
}

void Program::Launch(std::span<const SpyreTensor> tensors) {
    detail::CheckTensorDevices(tensors, device_->id(), "Program::Launch", "program");
    CheckTensorCount(instructions_, tensors.size(), "Launch");
    std::vector<std::vector<SpyreTensor>> bound;
    for (const Instruction& ins : instructions_) {
        const Operation& op = ins.operation();
        bound.push_back(Bind(op, tensors));
        if (!op.compute()) continue;
        const auto& specs = op.compute()->tensors;
        for (size_t slot = 0; slot < specs.size(); ++slot) {
            const SpyreTensor& t = bound.back()[slot];
            const TensorSpec& spec = specs[slot];
            const std::string who = "tensor " + std::to_string(slot) + " ('" + spec.name + "')";
            if (t.data_type() != spec.dtype)
                throw Error(ErrorKind::InvalidArgument, "Launch: " + who + " is " + ToString(t.data_type()) +
                                                            ", the compute expects " + ToString(spec.dtype));
            if (t.shape().size() != spec.shape.size())
                throw Error(ErrorKind::InvalidArgument, "Launch: " + who + " has rank " +
                                                            std::to_string(t.shape().size()) + ", expected " +
                                                            std::to_string(spec.shape.size()));
            const std::vector<int64_t> strides = t.element_strides();
            // Shapes first: a wrong shape usually brings wrong strides along,
            // and the shape is what the caller got wrong.
            for (size_t d = 0; d < spec.shape.size(); ++d)
                if (t.shape()[d] != spec.shape[d])
                    throw Error(ErrorKind::InvalidArgument,
                                "Launch: " + who + " dimension " + std::to_string(d) + " is " +
                                    std::to_string(t.shape()[d]) + ", compiled for " + std::to_string(spec.shape[d]) +
                                    " (shape " + ShapeText(t.shape()) + " vs " + ShapeText(spec.shape) +
                                    "; LaunchTiled handles larger tensors)");
            for (size_t d = 0; d < spec.shape.size(); ++d) {
                if (strides[d] != spec.strides[d])
                    throw Error(ErrorKind::InvalidArgument,
                                "Launch: " + who + " dimension " + std::to_string(d) + " has stride " +
                                    std::to_string(strides[d]) + " elements, compiled for " +
                                    std::to_string(spec.strides[d]));
            }
        }
    }
    for (size_t i = 0; i < instructions_.size(); ++i) stream_.Launch(instructions_[i].operation(), bound[i]);
    stream_.Synchronize();
}

void Program::LaunchTiled(std::span<const SpyreTensor> tensors) {
    detail::CheckTensorDevices(tensors, device_->id(), "Program::LaunchTiled", "program");
    CheckTensorCount(instructions_, tensors.size(), "LaunchTiled");
    std::vector<std::vector<SpyreTensor>> bound;
    for (const Instruction& ins : instructions_) bound.push_back(Bind(ins.operation(), tensors));
    // Plan every instruction before running any, so a failure leaves nothing
    // half done (SpyreStream::LaunchTiled checks one Operation at a time).
    if (instructions_.size() > 1)
        for (size_t i = 0; i < instructions_.size(); ++i) {
            const Operation& op = instructions_[i].operation();
            if (!op.compute()) continue;
            std::vector<TiledTensor> tiled;
            for (const SpyreTensor& t : bound[i]) tiled.push_back(TiledTensor{t.shape(), t.element_strides(), t.data_type()});
            try {
                const TilingPlan plan = PlanTiling(*op.compute(), tiled);
                if (!plan.exact && (!op.correction || !op.correction->binary_handle || !op.correction_step))
                    throw Error(ErrorKind::InvalidArgument,
                                "its tensor addresses are fixed (no program correction), so it cannot be tiled");
            } catch (const Error& e) {
                throw Error(e.kind(), "LaunchTiled: instruction " + std::to_string(i) + " ('" + op.name + "'): " + e.message(),
                            e.context());
            }
        }
    for (size_t i = 0; i < instructions_.size(); ++i) {
        const Operation& op = instructions_[i].operation();
        if (op.compute())
            stream_.LaunchTiled(op, bound[i]);
        else
            stream_.Launch(op, bound[i]);
    }
    stream_.Synchronize();
}

}  // namespace spyre
