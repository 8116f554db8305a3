// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/chip_functions.hpp"

#include <vector>

#include "spyre/orchestration/orchestrator.hpp"

namespace spyre {

ChipFunction RowBlockMatmulChip(std::string name, int32_t kernel_id, int64_t task_rows, int64_t k, int64_t n) {
    return [=](ChipContext& ctx) {
        if (ctx.args.size() != 3 || ctx.shapes.at(0).at(0) != task_rows * ctx.block_dim ||
            ctx.shapes.at(1) != std::vector<int64_t>{k, n})
            throw Error(ErrorKind::InvalidArgument, name + ": expects (A, B, C) with A of " +
                                                        std::to_string(task_rows * ctx.block_dim) + " rows (block_dim x " +
                                                        std::to_string(task_rows) + ") and B [" + std::to_string(k) + "x" +
                                                        std::to_string(n) + "]");
        auto* a = static_cast<char*>(ctx.args[0]);
        auto* c = static_cast<char*>(ctx.args[2]);
        const uint64_t a_bytes = uint64_t(task_rows * k) * 4, c_bytes = uint64_t(task_rows * n) * 4;
        for (int i = 0; i < ctx.block_dim; ++i) {
            TaskParam p[] = {{PARAM_INPUT, a + i * a_bytes, a_bytes, {}},
                             {PARAM_INPUT, ctx.args[1], ctx.bytes[1], {}},
                             {PARAM_OUTPUT, c + i * c_bytes, c_bytes, {}}};
            ctx.orch.Submit(kernel_id, WORKER_CUBE, p);
        }
    };
}

}  // namespace spyre
