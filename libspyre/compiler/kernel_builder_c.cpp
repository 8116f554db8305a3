// SPDX-License-Identifier: Apache-2.0
// spyre_build_kernel: the kernel builder behind the C header
// spyre/compiler/kernel_builder.h.
#include "spyre/compiler/kernel_builder.h"

#include <cstring>
#include <string>

#include "c_api_error.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre {
namespace {

[[noreturn]] void Invalid(const std::string& what) {
    throw Error(ErrorKind::InvalidArgument, "spyre_build_kernel: " + what);
}

DType DTypeOf(int32_t code) {
    switch (code) {
        case SPYRE_DTYPE_FP16: return DType::FP16;
        case SPYRE_DTYPE_BF16: return DType::BF16;
        case SPYRE_DTYPE_FP32: return DType::FP32;
        case SPYRE_DTYPE_INT8: return DType::INT8;
        case SPYRE_DTYPE_INT32: return DType::INT32;
    }
    Invalid("unknown dtype " + std::to_string(code) + " (SPYRE_DTYPE_*)");
}

BuiltKernel Build(const spyre_kernel_spec& spec) {
    if (spec.rank < 1 || spec.rank > 4) Invalid("rank " + std::to_string(spec.rank) + " is not 1 to 4");
    const std::vector<int64_t> shape(spec.shape, spec.shape + spec.rank);
    const DType dtype = DTypeOf(spec.dtype);
    const KernelBuilder kb;
    switch (spec.kind) {
        case SPYRE_KERNEL_MATMUL:
        case SPYRE_KERNEL_MATMUL_ACCUMULATE:
            if (spec.rank != 3) Invalid("a matmul's shape is {M, K, N} (rank 3), not rank " + std::to_string(spec.rank));
            return kb.Matmul(shape[0], shape[1], shape[2], dtype, spec.kind == SPYRE_KERNEL_MATMUL_ACCUMULATE);
        case SPYRE_KERNEL_ADD: return kb.Elementwise(ElementwiseOp::Add, shape, shape, dtype);
        case SPYRE_KERNEL_SUB: return kb.Elementwise(ElementwiseOp::Sub, shape, shape, dtype);
        case SPYRE_KERNEL_MUL: return kb.Elementwise(ElementwiseOp::Mul, shape, shape, dtype);
        case SPYRE_KERNEL_DIV: return kb.Elementwise(ElementwiseOp::Div, shape, shape, dtype);
        case SPYRE_KERNEL_RELU: return kb.Relu(shape, dtype);
        case SPYRE_KERNEL_GELU: return kb.Gelu(shape, dtype);
        case SPYRE_KERNEL_COPY: return kb.Copy(shape, dtype);
        case SPYRE_KERNEL_FILL: return kb.Fill(shape, spec.value, dtype);
    }
    Invalid("unknown kernel kind " + std::to_string(spec.kind) + " (SPYRE_KERNEL_*)");
}

// The program with each 2-D operand given a row stride read at that stride:
// a tile kernel that reads and writes tiles in place in bigger matrices.
std::vector<uint8_t> WithRowStrides(const BuiltKernel& kernel, const spyre_kernel_spec& spec) {
    ProgramImage image = ProgramImage::Decode(kernel.program);
    for (const spyre_program_reloc& r : image.relocs) {
        if (r.slot >= SPYRE_KERNEL_MAX_OPERANDS || spec.row_stride[r.slot] == 0) continue;
        spyre_program_operand& op = image.operands.at(r.operand);
        const int64_t stride = spec.row_stride[r.slot];
        if (op.rank != 2) Invalid("operand " + std::to_string(r.slot) + " has rank " + std::to_string(op.rank) +
                                  "; a row stride needs a 2-D operand");
        if (stride < int64_t(op.shape[1]))
            Invalid("operand " + std::to_string(r.slot) + "'s row stride " + std::to_string(stride) +
                    " is less than its width " + std::to_string(op.shape[1]));
        op.strides[0] = uint64_t(stride);
        op.strides[1] = 1;
        if (spyre_operand_extent(&op) == 0)
            Invalid("operand " + std::to_string(r.slot) + "'s row stride " + std::to_string(stride) +
                    " makes it span more than 2^64 bytes");
    }
    for (int i = int(kernel.tensor_count()); i < SPYRE_KERNEL_MAX_OPERANDS; ++i)
        if (spec.row_stride[i] != 0)
            Invalid("row_stride[" + std::to_string(i) + "] is set, but the kernel has " +
                    std::to_string(kernel.tensor_count()) + " operands");
    return image.Encode();
}

}  // namespace
}  // namespace spyre

extern "C" int64_t spyre_build_kernel(const spyre_kernel_spec* spec, void* image, uint64_t capacity) {
    int64_t size = 0;
    const int32_t r = spyre::capi::Guard("spyre_build_kernel", [&] {
        if (!spec) spyre::Invalid("no spec (NULL)");
        if (capacity && !image) spyre::Invalid("no image buffer (NULL) for a capacity of " + std::to_string(capacity));
        const std::vector<uint8_t> program = spyre::WithRowStrides(spyre::Build(*spec), *spec);
        size = int64_t(program.size());
        if (program.size() <= capacity) std::memcpy(image, program.data(), program.size());
        return 0;
    });
    return r < 0 ? r : size;
}
