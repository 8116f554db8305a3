// SPDX-License-Identifier: Apache-2.0
// ExecutionPlan (seed 001): the compiler's output as passive data. The
// compiler writes a directory (a plan.json manifest plus one file per
// binary, docs/execution_plan.md); CompilerOutput holds those bytes and
// ExecutionPlan parses and validates them into Operations without touching a
// device. Loading the binaries to device fills the Operations' handles.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "spyre/memory/device_handle.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// The raw compiler output: the manifest text and the blobs by file name.
// Nothing is validated here; ExecutionPlan does that.
struct CompilerOutput {
    std::string manifest;                               // plan.json
    std::map<std::string, std::vector<uint8_t>> blobs;  // file name -> bytes
    std::string origin;                                 // where it came from, for messages ("" in memory)

    // Reads plan.json and every other regular file of `dir` (not recursive).
    // NotFound when `dir` or its plan.json is missing; InvalidArgument for an
    // entry that is not a regular file; IoError when a read fails.
    static CompilerOutput ReadDirectory(const std::filesystem::path& dir);
    // Writes plan.json and the blobs into `dir`, creating it. `dir` must be
    // absent or empty (stale blobs would otherwise join the plan):
    // InvalidArgument if not, or if a blob name is not a plain file name.
    void WriteDirectory(const std::filesystem::path& dir) const;
    // FNV-1a 64 over the manifest and every blob's name and bytes, in name
    // order (each length-prefixed): equal outputs hash equal on every host.
    uint64_t ContentHash() const;
};

// A program the device runs once, when the plan loads, before any Operation
// (the plan reader refuses bytes that do not decode as a program).
struct InitPacket {
    InitPacket() = default;
    InitPacket(std::string name, std::vector<uint8_t> binary) : name(std::move(name)), binary(std::move(binary)) {}

    std::string name;
    std::vector<uint8_t> binary;
    // Set by the runtime when the plan is loaded.
    const std::optional<DeviceHandle>& device_handle() const noexcept { return device_handle_; }

private:
    friend struct detail::OperationAccess;
    std::optional<DeviceHandle> device_handle_;
};

class ExecutionPlan {
public:
    ExecutionPlan() = default;  // empty: operations added by hand
    // Parses and validates `compiler_output` (docs/execution_plan.md lists
    // every check). Throws Error(InvalidArgument) naming the file and the
    // manifest field that is wrong; ErrorContext::op_index says which
    // operation. Device handles stay empty.
    explicit ExecutionPlan(const CompilerOutput& compiler_output);

    // Every tensor of the plan, as the compiler laid it out; operations refer
    // to these (their SpyreCompute::tensors are copies).
    std::vector<TensorSpec> tensor_input_metadata;
    std::vector<Operation> operations;
    std::vector<InitPacket> init_packets;
    std::string name;
    uint64_t content_hash = 0;  // CompilerOutput::ContentHash of the source, for plan caches
    // The device the plan was loaded on (set by LoadExecutionPlan); its
    // operations' device handles belong there, and launches on other
    // devices are refused.
    const std::optional<DeviceId>& device() const noexcept { return device_; }

    // Per operation, its correction metadata or nullptr when it has none.
    // Pointers into `operations`: valid until it is changed.
    std::vector<const CorrectionMetadata*> correction_metadata() const;

private:
    friend struct detail::OperationAccess;
    std::optional<DeviceId> device_;
};


}  // namespace spyre
SPYRE_API_END
