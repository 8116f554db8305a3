// SPDX-License-Identifier: Apache-2.0
// Internal: the runtime's writes to the fields of Operation, SpyreCompute,
// CorrectionMetadata, InitPacket and ExecutionPlan that loading sets and
// callers only read (plan loading, Program::AddInstruction).
#pragma once

#include <memory>
#include <utility>

#include "spyre/plan/execution_plan.hpp"

namespace spyre::detail {

struct OperationAccess {
    static void SetBinary(SpyreCompute& compute, DeviceHandle handle, uint64_t size) {
        compute.device_handle_ = handle;
        compute.binary_size_ = size;
    }
    static void SetCorrection(CorrectionMetadata& c, DeviceHandle binary, uint64_t binary_size, DeviceHandle table) {
        c.binary_handle_ = binary;
        c.binary_size_ = binary_size;
        c.input_handle_ = table;
    }
    static void SetLoaded(Operation& op, std::vector<DeviceHandle> handles, std::optional<size_t> correction_step,
                          std::shared_ptr<LoadedOperation> loaded) {
        op.device_handles_ = std::move(handles);
        op.correction_step_ = correction_step;
        op.loaded_ = std::move(loaded);
    }
    static LoadedOperation* Loaded(const Operation& op) { return op.loaded_.get(); }
    static void SetBinary(InitPacket& packet, DeviceHandle handle) { packet.device_handle_ = handle; }
    static void SetDevice(ExecutionPlan& plan, DeviceId device) { plan.device_ = device; }
};

}  // namespace spyre::detail
