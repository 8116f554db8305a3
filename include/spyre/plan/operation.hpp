// SPDX-License-Identifier: Apache-2.0
// The Operation layer of seed 001: PreProcessCompute (a tagged variant of
// CopyToDevice, CopyFromDevice and DeviceLaunch), SpyreCompute (a compute
// binary plus the tensors it expects) and Operation (an optional compute with
// its preprocessing). They are passive data: SpyreStream turns them into
// FlexStream primitives. docs/streams.md shows the decomposition.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "spyre/memory/device_handle.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

namespace detail {
// The runtime's side of a loaded Operation (libspyre/launch): the only
// writer of the fields below that loading sets, and the per-operation cache
// of re-specialised tiling variants.
struct SPYRE_INTERNAL OperationAccess;
struct SPYRE_INTERNAL LoadedOperation;
}  // namespace detail

// One step run before an Operation's compute; each maps to one FlexStream call.
class PreProcessCompute {
public:
    struct CopyToDevice {
        const void* host_address = nullptr;
        DeviceHandle device_handle;
        uint64_t size = 0;
    };
    struct CopyFromDevice {
        void* host_address = nullptr;
        DeviceHandle device_handle;
        uint64_t size = 0;
    };
    // Runs a binary already resident on device (e.g. program correction).
    // `size` is the binary's byte size; 0 lets the device read it from the
    // program header.
    struct DeviceLaunch {
        DeviceHandle device_handle;
        uint64_t size = 0;
    };

    PreProcessCompute(CopyToDevice step) : step_(step) {}      // NOLINT: implicit by design
    PreProcessCompute(CopyFromDevice step) : step_(step) {}    // NOLINT
    PreProcessCompute(DeviceLaunch step) : step_(step) {}      // NOLINT

    const std::variant<CopyToDevice, CopyFromDevice, DeviceLaunch>& step() const noexcept { return step_; }
    std::variant<CopyToDevice, CopyFromDevice, DeviceLaunch>& step() noexcept { return step_; }
    // "CopyToDevice", "CopyFromDevice" or "DeviceLaunch", for messages.
    const char* name() const noexcept;

private:
    std::variant<CopyToDevice, CopyFromDevice, DeviceLaunch> step_;
};

enum class TensorRole { Input, Output };

// A tensor as a compute expects it (compiler metadata).
struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;    // the tile shape the binary was compiled for
    std::vector<int64_t> strides;  // in elements, as compiled
    DType dtype = DType::FP32;
    TensorRole role = TensorRole::Input;
    // Iteration-space loop of each dim (for tiling): matmul A[m,k] B[k,n]
    // C[m,n] has loops m=0, k=1, n=2 and A -> {0,1}, B -> {1,2}, C -> {0,2}.
    // Empty: dim i belongs to loop i (right-aligned broadcasting is not
    // inferred; give the map for such kernels).
    std::vector<int> loops;
    uint64_t bytes = 0;            // device bytes the compute touches, padding included
};

// The compute of an Operation: a binary resident on device, launched by
// FlexStream::Launch(device_handle).
struct SpyreCompute {
    // Where the binary is on device and its size: set by the runtime when it
    // loads the binary (LoadExecutionPlan, Program::AddInstruction), never
    // by callers (a hand-made handle would launch whatever lies there).
    const std::optional<DeviceHandle>& device_handle() const noexcept { return device_handle_; }
    uint64_t binary_size() const noexcept { return binary_size_; }
    // Expected tensor shapes (inputs then outputs, in correction-slot order),
    // as the compiler determined them; SpyreStream compares tensor shapes
    // against them to detect tiling.
    std::vector<std::vector<int64_t>> expected_input_shapes;
    // Full metadata of the same tensors (strides, dtype, roles, loops).
    std::vector<TensorSpec> tensors;
    // Loops that are reductions (not indexing any output): tiling along them
    // accumulates partial results (the binary's matmul ops must allow it).
    std::vector<int> reduction_loops;
    // Loops the binary cannot be split along at all (a softmax axis, a
    // REDUCE's reduced axis): the tiler refuses shapes that exceed the
    // compiled size there.
    std::vector<int> untileable_loops;
    // Host copy of the binary: LaunchTiled derives remainder and strided
    // variants from it (program re-specialisation).
    std::vector<uint8_t> binary;
    std::string name;

private:
    friend struct detail::OperationAccess;
    std::optional<DeviceHandle> device_handle_;
    uint64_t binary_size_ = 0;
};

// Program correction of an Operation (seed 001 "correction metadata"): the
// correction binary, where its input table lives, and the table's size.
struct CorrectionMetadata {
    uint64_t input_size = 0;                  // bytes: one u64 address per tensor slot
    std::vector<uint8_t> binary;              // host copy of the correction program

    // Set by the runtime when the plan is loaded: the table and the
    // correction program on device.
    const std::optional<DeviceHandle>& input_handle() const noexcept { return input_handle_; }
    const std::optional<DeviceHandle>& binary_handle() const noexcept { return binary_handle_; }
    uint64_t binary_size() const noexcept { return binary_size_; }

private:
    friend struct detail::OperationAccess;
    std::optional<DeviceHandle> input_handle_;
    std::optional<DeviceHandle> binary_handle_;
    uint64_t binary_size_ = 0;
};

class Operation {
public:
    explicit Operation(SpyreCompute compute);
    Operation(SpyreCompute compute, std::vector<PreProcessCompute> preprocess);
    explicit Operation(std::vector<PreProcessCompute> preprocess);

    const std::optional<SpyreCompute>& compute() const noexcept { return compute_; }
    std::optional<SpyreCompute>& compute() noexcept { return compute_; }
    const std::vector<PreProcessCompute>& preprocess() const noexcept { return preprocess_; }
    std::vector<PreProcessCompute>& preprocess() noexcept { return preprocess_; }

    // One handle per binary loaded to device for this Operation (seed 001):
    // correction binary, correction input table, compute binary. Set by the
    // runtime when it loads the Operation.
    const std::vector<DeviceHandle>& device_handles() const noexcept { return device_handles_; }
    // Set when the compute needs program correction (from the plan).
    std::optional<CorrectionMetadata> correction;
    // Set by the runtime when it loads the correction: the preprocessing
    // step that is the CopyToDevice of the correction input, whose bytes
    // SpyreStream fills from the tensors' addresses.
    const std::optional<size_t>& correction_step() const noexcept { return correction_step_; }
    // For an Operation of an ExecutionPlan: the plan tensor bound to each of
    // its tensor slots (indices into ExecutionPlan::tensor_input_metadata).
    std::vector<size_t> tensor_indices;
    std::string name;

private:
    friend struct detail::OperationAccess;
    std::optional<SpyreCompute> compute_;
    std::vector<PreProcessCompute> preprocess_;
    std::vector<DeviceHandle> device_handles_;
    std::optional<size_t> correction_step_;
    // Shared by copies of a loaded Operation (a Program's instructions copy
    // the plan's): its tiling variants live as long as the last copy.
    std::shared_ptr<detail::LoadedOperation> loaded_;
};

}  // namespace spyre
SPYRE_API_END
