// SPDX-License-Identifier: Apache-2.0
// Chip functions of seed 003's level-3 programs, for the examples, tests and
// benchmarks: the device kernels (built by the kernel builder) and the chip
// orchestration functions that submit them on a chip's runtime.
//   chip_add    C = A + B on fp32 operands of one size, a whole number of
//               [128x128] tiles: one device task per tile
//   chip_sub    C = A - B on [128x128] fp32, a C++ ChipFunction
//   chip_matmul C[r x n] = A[r x k] * B[k x n], split into block_dim core tasks of
//               `task_rows` rows each (rows of a row-major matrix are contiguous)
//   chip_empty  submits nothing (dispatch benchmarks)
//   chip_fault  runs a program the device refuses (error tests)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/host.hpp"
#include "spyre/orchestration.hpp"
#include "refused_program.hpp"

namespace spyre::l3 {

enum : int32_t { KERNEL_ADD = 301, KERNEL_SUB = 302, KERNEL_MATMUL = 303, KERNEL_JUNK = 304, KERNEL_MATMUL_2 = 305 };
inline constexpr int64_t kTile = 128;
inline constexpr uint64_t kTileBytes = kTile * kTile * sizeof(float);

// The seed's chip_orch_add, as seed 004 writes orchestration functions: one
// [128x128] fp32 tile. Such a function sees its arguments' addresses, not
// their sizes, so it cannot check them: the runtime refuses smaller operands
// (its tasks are confined to their arguments), but of larger ones it would
// add the first tile alone and leave the rest of the output as it was. So
// chip_add is ChipAdd; tests register this one to cover the pto path.
inline void ChipAddPto(Runtime* rt, uint64_t* args) {
    TaskParam p[] = {{PARAM_INPUT, reinterpret_cast<void*>(args[0]), kTileBytes, {}},
                     {PARAM_INPUT, reinterpret_cast<void*>(args[1]), kTileBytes, {}},
                     {PARAM_OUTPUT, reinterpret_cast<void*>(args[2]), kTileBytes, {}}};
    pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR, p, 3);
}

// chip_add: C = A + B, one [128x128] task per 64 KiB of the operands, which
// must be fp32 tensors of one size, a whole number of tiles (the kernel's
// shape); anything else is refused, never computed in part.
inline void ChipAdd(ChipContext& ctx) {
    if (ctx.args.size() != 3)
        throw Error(ErrorKind::InvalidArgument, "chip_add: takes 3 tensors (a, b, out), got " + std::to_string(ctx.args.size()));
    for (size_t i = 0; i < 3; ++i)
        if (ctx.dtypes[i] != DType::FP32 || ctx.bytes[i] != ctx.bytes[0] || ctx.bytes[i] == 0 || ctx.bytes[i] % kTileBytes)
            throw Error(ErrorKind::InvalidArgument,
                        "chip_add: operands must be fp32 tensors of one size, a whole number of [128x128] tiles "
                        "(64 KiB each); argument " + std::to_string(i) + " has " + std::to_string(ctx.bytes[i]) +
                            " bytes");
    for (uint64_t at = 0; at < ctx.bytes[0]; at += kTileBytes) {
        auto tile = [&](size_t i) { return static_cast<char*>(ctx.args[i]) + at; };
        TaskParam p[] = {{PARAM_INPUT, tile(0), kTileBytes, {}},
                         {PARAM_INPUT, tile(1), kTileBytes, {}},
                         {PARAM_OUTPUT, tile(2), kTileBytes, {}}};
        ctx.orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
    }
}

inline void ChipSub(ChipContext& ctx) {
    for (uint64_t b : ctx.bytes)
        if (b != kTileBytes) throw Error(ErrorKind::InvalidArgument, "chip_sub: operands must be [128x128] fp32");
    TaskParam p[] = {{PARAM_INPUT, ctx.args[0], kTileBytes, {}},
                     {PARAM_INPUT, ctx.args[1], kTileBytes, {}},
                     {PARAM_OUTPUT, ctx.args[2], kTileBytes, {}}};
    ctx.orch.Submit(KERNEL_SUB, WORKER_VECTOR, p);
}

// chip_matmul for row blocks of `task_rows * block_dim` rows, with `kernel`
// a task_rows x k x n matmul program.
inline ChipFunction ChipMatmul(int64_t task_rows, int64_t k, int64_t n, int32_t kernel = KERNEL_MATMUL) {
    return RowBlockMatmulChip("chip_matmul", kernel, task_rows, k, n);
}

inline void ChipFault(ChipContext& ctx) {
    TaskParam p[] = {{PARAM_OUTPUT, ctx.args.back(), ctx.bytes.back(), {}}};
    ctx.orch.Submit(KERNEL_JUNK, WORKER_CUBE, p);
}

// Loads the kernels on every device of `w` and registers the chip functions.
// The matmul kernel computes `task_rows` x k x n.
inline void RegisterChipFunctions(Worker& w, int64_t task_rows = 64, int64_t k = 128, int64_t n = 128) {
    const KernelBuilder kb;
    const std::vector<int64_t> tile = {kTile, kTile};
    w.RegisterKernel(KERNEL_ADD, kb.Elementwise(ElementwiseOp::Add, tile, tile, DType::FP32).program);
    w.RegisterKernel(KERNEL_SUB, kb.Elementwise(ElementwiseOp::Sub, tile, tile, DType::FP32).program);
    w.RegisterKernel(KERNEL_MATMUL, kb.Matmul(task_rows, k, n, DType::FP32).program);
    w.RegisterKernel(KERNEL_JUNK, RefusedProgram(1));  // ChipFault's: the device refuses it
    w.RegisterChipFunction("chip_add", ChipFunction(&ChipAdd));
    w.RegisterChipFunction("chip_sub", ChipFunction(&ChipSub));
    w.RegisterChipFunction("chip_matmul", ChipMatmul(task_rows, k, n));
    w.RegisterChipFunction("chip_empty", ChipFunction([](ChipContext&) {}));
    w.RegisterChipFunction("chip_fault", ChipFunction(&ChipFault));
}

// seed 003's L3DependencyProgram: chip_add(a, b) -> f, then SubWorker verify(f).
inline HostProgram DependencyProgram() {
    return {"l3_dependency", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                g.Sub("verify", {In(x[2])});
            }};
}

// seed 003's L3ParallelReduceProgram: chip_add and chip_sub (independent),
// then SubWorker reduce_sum: f = (a + b) + (a - b) = 2a.
inline HostProgram ParallelReduceProgram() {
    return {"l3_parallel_reduce", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                HostTensor sum_ab = g.CreateTensor({kTile, kTile}), diff_ab = g.CreateTensor({kTile, kTile});
                g.Chip("chip_add", {In(x[0]), In(x[1]), Out(sum_ab)});
                g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(diff_ab)});
                g.Sub("reduce_sum",
                      [](std::span<const HostTensor> t) {
                          auto s = t[0].floats(), d = t[1].floats(), f = t[2].floats();
                          for (size_t i = 0; i < f.size(); ++i) f[i] = s[i] + d[i];
                      },
                      {In(sum_ab), In(diff_ab), Out(x[2])});
            }};
}

// A data-parallel matmul: C = A * B with A's rows split evenly over
// `parts` chip tasks (each writing its own rows of C, so they run in
// parallel), then nothing to gather: the rows land in C.
inline HostProgram RowParallelMatmul(int64_t m, int64_t n, int parts) {
    return {"row_parallel_matmul", 2, {{{m, n}}}, [=](HostGraph& g, std::span<const HostTensor> x) {
                const int64_t rows = m / parts;
                for (int p = 0; p < parts; ++p)
                    g.Chip("chip_matmul", {In(x[0].Rows(p * rows, (p + 1) * rows)), In(x[1]), Out(x[2].Rows(p * rows, (p + 1) * rows))},
                           {.name = "matmul rows " + std::to_string(p * rows) + ".." + std::to_string((p + 1) * rows)});
            }};
}

}  // namespace spyre::l3
