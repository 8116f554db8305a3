// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/chip_functions.hpp"

#include <span>
#include <vector>

#include "spyre/orchestration/orchestrator.hpp"
#include "spyre/tensor/layout.hpp"
#include "tensor/program_dtype.hpp"

namespace spyre {

void CheckArgumentDTypes(const ChipContext& ctx, int32_t kernel_id, const std::string& what) {
    const std::vector<uint8_t> operands = ctx.orch.KernelOperandDTypes(kernel_id);
    for (size_t i = 0; i < ctx.dtypes.size() && i < operands.size(); ++i)
        if (operands[i] != 0 && ProgramDType(ctx.dtypes[i]) != operands[i]) {
            const char* want = ProgramDTypeName(operands[i]);
            throw Error(ErrorKind::InvalidArgument, what + std::to_string(i) + " is " + ToString(ctx.dtypes[i]) +
                                                        ", the kernel's operand " + std::to_string(i) + " is " +
                                                        (want ? want : "of no known dtype"));
        }
}

void CheckArgumentsRead(const ChipContext& ctx, size_t read, const std::string& what) {
    for (size_t i = 0; i < read && i < ctx.access.size(); ++i)
        if (ctx.access[i] == Access::Out)
            throw Error(ErrorKind::InvalidArgument,
                        what + std::to_string(i) + " is Out, but the kernel reads it: pass it as In or InOut");
}

// Each task's operands against the extents the kernel's program gives its
// slots: the device refuses an operand smaller than the kernel's, but
// runs one larger, and computed a wrong C from a kernel of other shapes.
void CheckTaskOperandBytes(const ChipContext& ctx, int32_t kernel_id, std::span<const uint64_t> task_bytes,
                           const std::string& what) {
    const std::vector<uint64_t> operands = ctx.orch.KernelOperandBytes(kernel_id);
    for (size_t i = 0; i < task_bytes.size() && i < operands.size(); ++i)
        if (operands[i] != 0 && operands[i] != task_bytes[i])
            throw Error(ErrorKind::InvalidArgument, what + "kernel " + std::to_string(kernel_id) + "'s operand " +
                                                        std::to_string(i) + " spans " + std::to_string(operands[i]) +
                                                        " bytes, each task passes " + std::to_string(task_bytes[i]) +
                                                        ": register a kernel of the function's shapes");
}

ChipFunction RowBlockMatmulChip(std::string name, int32_t kernel_id, int64_t task_rows, int64_t k, int64_t n) {
    // Refused when made: such a function could only fail each call.
    if (task_rows <= 0 || k <= 0 || n <= 0)
        throw Error(ErrorKind::InvalidArgument, name + ": task_rows " + std::to_string(task_rows) + ", k " +
                                                    std::to_string(k) + " and n " + std::to_string(n) +
                                                    " must be at least 1");
    return [=](ChipContext& ctx) {
        // Whole fp32 tensors of the kernel's shapes: A with other columns or
        // C of another shape ran, and left part of C unwritten or wrong.
        const int64_t m = task_rows * ctx.block_dim;
        const std::vector<std::vector<int64_t>> want = {{m, k}, {k, n}, {m, n}};
        bool fits = ctx.args.size() == 3 && ctx.shapes.size() == 3 && ctx.bytes.size() == 3;
        for (size_t i = 0; fits && i < 3; ++i)
            fits = ctx.shapes[i] == want[i] && ctx.bytes[i] == uint64_t(want[i][0] * want[i][1]) * 4;
        if (!fits)
            throw Error(ErrorKind::InvalidArgument, name + ": expects fp32 (A, B, C) of [" + std::to_string(m) + "x" +
                                                        std::to_string(k) + "] (block_dim x " + std::to_string(task_rows) +
                                                        " rows), [" + std::to_string(k) + "x" + std::to_string(n) + "] and [" +
                                                        std::to_string(m) + "x" + std::to_string(n) + "]");
        CheckArgumentDTypes(ctx, kernel_id, name + ": argument ");
        CheckArgumentsRead(ctx, 2, name + ": argument ");
        auto* a = static_cast<char*>(ctx.args[0]);
        auto* c = static_cast<char*>(ctx.args[2]);
        const uint64_t a_bytes = uint64_t(task_rows * k) * 4, c_bytes = uint64_t(task_rows * n) * 4;
        const uint64_t task_bytes[] = {a_bytes, ctx.bytes[1], c_bytes};
        CheckTaskOperandBytes(ctx, kernel_id, task_bytes, name + ": ");
        for (int i = 0; i < ctx.block_dim; ++i) {
            TaskParam p[] = {{PARAM_INPUT, a + i * a_bytes, a_bytes, {}},
                             {PARAM_INPUT, ctx.args[1], ctx.bytes[1], {}},
                             {PARAM_OUTPUT, c + i * c_bytes, c_bytes, {}}};
            ctx.orch.Submit(kernel_id, WORKER_CUBE, p);
        }
    };
}

}  // namespace spyre
