// SPDX-License-Identifier: Apache-2.0
// The kernel builder: spyre's stand-in for the back-end compiler. It emits
// device programs (uapi/spyre_program.h) for a given tile shape and dtype,
// and for each one the artifacts an ExecutionPlan carries (seed 001): the
// program-correction binary, the size and format of its correction input,
// and the tensor shapes the SpyreCompute expects. docs/kernels.md shows how
// they are used.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// One tensor a kernel reads or writes, as the kernel expects it.
struct KernelTensor {
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;  // elements
    DType dtype = DType::FP32;
    TensorLayout layout = TensorLayout::Dense;
    uint64_t bytes = 0;            // device memory from its address to its end, padding included
    // Iteration-space loop of each dim (TensorSpec::loops): what the tiler
    // splits. A size-1 dim broadcast against a bigger one shares its loop.
    std::vector<int> loops;
};

enum class ElementwiseOp { Add, Sub, Mul, Div };
enum class ReduceKind { Sum, Max };

struct BuiltKernel {
    std::string name;                   // what it computes, for logs
    std::vector<uint8_t> program;       // the compute program; tensor addresses are 0 until corrected
    // The correction program: one CORRECT op. Its target program and input
    // table addresses are 0 until SetCorrectionTarget sets them.
    std::vector<uint8_t> correction;
    // Bytes of the correction input: one little-endian u64 device address per
    // tensor, inputs then outputs (the program's relocation slots).
    uint64_t correction_input_size = 0;
    std::vector<KernelTensor> inputs;   // the SpyreCompute's expected inputs, in order
    std::vector<KernelTensor> outputs;  // what it writes (matmul with accumulate also reads C)
    // Loops that index no output (a matmul's K, a reduce's axis): tiling
    // along them accumulates partial results.
    std::vector<int> reduction_loops;
    // Loops the program cannot be split along (a softmax axis, a reduce's
    // axis: REDUCE cannot accumulate across launches).
    std::vector<int> untileable_loops;

    size_t tensor_count() const { return inputs.size() + outputs.size(); }
    // The correction input for these tensor addresses (inputs then outputs).
    std::vector<uint8_t> CorrectionInput(std::span<const uint64_t> addresses) const;
    // The program with these addresses already in place: correction done on
    // the host, for a program that is launched without a correction step.
    std::vector<uint8_t> Bind(std::span<const uint64_t> addresses) const;
};

// Every method validates its arguments and throws InvalidArgument naming the
// dimension, axis or dtype that is wrong. Shapes are 1 to 8 dims, each >= 1.
// Arithmetic kernels take fp16 or fp32; copies and fills any dtype.
class KernelBuilder {
public:
    explicit KernelBuilder(TensorLayout layout = TensorLayout::Dense) : layout_(layout) {}

    // C[m,n] = A[m,k] * B[k,n], or C += A*B with `accumulate` (tiling along K).
    BuiltKernel Matmul(int64_t m, int64_t k, int64_t n, DType dtype, bool accumulate = false) const;
    // C = A op B with numpy broadcasting (shapes aligned at the right).
    BuiltKernel Elementwise(ElementwiseOp op, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                            DType dtype) const;
    BuiltKernel Relu(const std::vector<int64_t>& shape, DType dtype) const;
    BuiltKernel Gelu(const std::vector<int64_t>& shape, DType dtype) const;  // erf form
    BuiltKernel Softmax(const std::vector<int64_t>& shape, DType dtype) const;  // along the last dim
    // Output keeps the reduced dim with size 1.
    BuiltKernel Reduce(ReduceKind kind, const std::vector<int64_t>& shape, int axis, DType dtype) const;
    // Output dim i is input dim perm[i].
    BuiltKernel Transpose(const std::vector<int64_t>& shape, const std::vector<int>& perm, DType dtype) const;
    BuiltKernel Copy(const std::vector<int64_t>& shape, DType dtype) const;
    // `value` converted to the dtype (rounded to nearest even for fp16/bf16;
    // integer dtypes need an integral value in range).
    BuiltKernel Fill(const std::vector<int64_t>& shape, double value, DType dtype) const;

    // The tensor this builder lays out for `shape`.
    KernelTensor Tensor(const std::vector<int64_t>& shape, DType dtype) const;

private:
    TensorLayout layout_;
};

}  // namespace spyre
SPYRE_API_END
