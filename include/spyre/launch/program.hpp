// SPDX-License-Identifier: Apache-2.0
// Program (seed 000): a synchronous, ordered collection of Instructions, each
// one Operation (a compute with its preprocessing). It is a thin layer over
// SpyreStream: Launch and LaunchTiled enqueue through its stream and wait.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "spyre/launch/spyre_stream.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class Instruction {
public:
    explicit Instruction(SpyreCompute compute);
    Instruction(SpyreCompute compute, std::vector<PreProcessCompute> preprocess);
    explicit Instruction(Operation operation);

    const Operation& operation() const noexcept { return operation_; }
    uint64_t id() const noexcept { return id_; }  // identity for RemoveInstruction

private:
    Operation operation_;
    uint64_t id_;
};

class Program {
public:
    // An empty program on `device`, with its own stream. The program keeps
    // what it runs on (the device's core) alive: it may outlive `device`.
    explicit Program(Device& device);
    // One Instruction per Operation of a loaded plan; the plan stays alive
    // as long as the program.
    Program(Device& device, std::shared_ptr<const ExecutionPlan> plan);
    // Waits for its stream, then frees the binaries AddInstruction loaded.
    ~Program();
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;

    // Appends; an Instruction whose compute binary is not on the device yet
    // (device_handle empty, binary present) is decoded (InvalidArgument
    // when it is no program image) and copied there first.
    void AddInstruction(Instruction instruction);
    // Removes the instruction with the same id; NotFound if absent.
    void RemoveInstruction(const Instruction& instruction);
    const std::vector<Instruction>& instructions() const noexcept { return instructions_; }

    // Strict: every tensor's shape and strides must equal what each compute
    // was compiled for; fails before running anything, naming the tensor and
    // dimension. Runs every instruction in order and waits.
    void Launch(std::span<const SpyreTensor> tensors);
    // Tiled: loops over tensors larger than the compiled tiles; waits.
    void LaunchTiled(std::span<const SpyreTensor> tensors);
    // The program's stream follows the stream contract (docs/streams.md,
    // "Sticky errors"): a Launch the device fails leaves that error on the
    // stream, and every later Launch, LaunchTiled and AddInstruction that
    // copies a binary throws it again, whatever instructions were removed
    // since, until stream().flex_stream().Reset().

    SpyreStream& stream() noexcept { return stream_; }

private:
    void Run(std::span<const SpyreTensor> tensors, bool tiled, const char* entry);

    std::shared_ptr<DeviceCore> core_;
    std::shared_ptr<const ExecutionPlan> plan_;
    SpyreStream stream_;
    std::vector<Instruction> instructions_;
    std::vector<DeviceBuffer> owned_;  // binaries AddInstruction copied
};

}  // namespace spyre
SPYRE_API_END
