// SPDX-License-Identifier: Apache-2.0
//
// What every kernel works with: validated operands with their bytes in
// device memory, the card's cores and the CB's budget, a walk over strided
// index spaces, and fp16/fp32 element access. Kernels compute in fp32 (fp16
// is converted on load and rounded to nearest even on store).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "execution/budget.hpp"
#include "execution/card_cores.hpp"
#include "execution/program_decoder.hpp"

namespace spyre::mockdev {

// A validated operand and its bytes (desc.addr onwards) in device memory.
struct Tensor {
    const Operand& operand;
    uint8_t* data;

    const spyre_program_operand& desc() const { return operand.desc; }
    unsigned rank() const { return operand.desc.rank; }
    const uint64_t* shape() const { return operand.desc.shape; }
    const uint64_t* strides() const { return operand.desc.strides; }
};

// Where a kernel runs: across the card's cores (a LAUNCH holding the card),
// or on the one core running a task, whose chunks then run inline in order.
struct KernelContext {
    CardCores& compute;
    const Budget& budget;
    bool one_core = false;  // a task (spyre_task.h)

    uint16_t ParallelFor(size_t chunks, const std::function<uint16_t(size_t)>& body) const {
        if (!one_core) return compute.ParallelFor(chunks, budget, body);
        for (size_t i = 0; i < chunks; ++i) {
            if (uint16_t status = budget.Check()) return status;
            if (uint16_t status = body(i)) return status;
        }
        return SPYRE_ERR_NONE;
    }
    unsigned workers() const { return one_core ? 1u : compute.workers(); }
    // Scratch of the program holding the card, or of this core's task.
    std::vector<float>& Scratch(size_t slot) const {
        thread_local std::array<std::vector<float>, CardCores::kScratchSlots> core_scratch;
        return one_core ? core_scratch[slot] : compute.Scratch(slot);
    }
};

// Elements per chunk of the elementwise kernels: large enough to amortise a
// chunk, small enough that the watchdog and resets are served promptly.
constexpr uint64_t kElementGrain = 1u << 16;

// Runs body(begin, end) over [0, total) in chunks of `grain` on the card's cores.
template <typename Body>
uint16_t ForChunks(const KernelContext& ctx, uint64_t total, uint64_t grain, Body&& body) {
    const uint64_t chunks = total / grain + (total % grain != 0);
    return ctx.ParallelFor(size_t(chunks), [&](size_t i) {
        body(i * grain, std::min<uint64_t>(total, (i + 1) * grain));
        return uint16_t(SPYRE_ERR_NONE);
    });
}

// A row-major walk over the index space `shape` that keeps the element
// offset of N tensors (each with its own strides over that space). Visits a
// linear range in runs along the innermost dim: run(offsets, count) covers
// elements offsets[t] + j * inner stride of t, for j in [0, count).
template <size_t N>
class StridedWalk {
public:
    StridedWalk(const uint64_t* shape, unsigned rank, std::array<const uint64_t*, N> strides)
        : shape_(shape), rank_(rank), strides_(strides) {}

    uint64_t inner_stride(size_t t) const { return strides_[t][rank_ - 1]; }

    template <typename Run>
    void ForEachRun(uint64_t begin, uint64_t end, Run&& run) const {
        uint64_t idx[SPYRE_PROGRAM_MAX_RANK] = {};
        std::array<uint64_t, N> off{};
        uint64_t rest = begin;
        for (unsigned d = rank_; d-- > 0;) {
            idx[d] = rest % shape_[d];
            rest /= shape_[d];
            for (size_t t = 0; t < N; ++t) off[t] += idx[d] * strides_[t][d];
        }
        const unsigned last = rank_ - 1;
        for (uint64_t i = begin; i < end;) {
            const uint64_t count = std::min(shape_[last] - idx[last], end - i);
            run(off, count);
            i += count;
            idx[last] += count;
            for (size_t t = 0; t < N; ++t) off[t] += count * strides_[t][last];
            // Carry into the outer dims (unsigned arithmetic wraps back exactly).
            for (unsigned d = last; d > 0 && idx[d] == shape_[d]; --d) {
                idx[d] = 0;
                ++idx[d - 1];
                for (size_t t = 0; t < N; ++t) off[t] += strides_[t][d - 1] - shape_[d] * strides_[t][d];
            }
        }
    }

private:
    const uint64_t* shape_;
    unsigned rank_;
    std::array<const uint64_t*, N> strides_;
};

// Element access for the two arithmetic dtypes; T is float or _Float16.
template <typename T>
inline float LoadElement(const uint8_t* base, uint64_t index) {
    T v;
    std::memcpy(&v, base + index * sizeof(T), sizeof v);
    return static_cast<float>(v);
}

template <typename T>
inline void StoreElement(uint8_t* base, uint64_t index, float value) {
    const T v = static_cast<T>(value);
    std::memcpy(base + index * sizeof(T), &v, sizeof v);
}

// Calls f.template operator()<T>() with T matching the fp16/fp32 dtype.
template <typename F>
inline auto WithFloatType(uint8_t dtype, F&& f) {
    if (dtype == SPYRE_DTYPE_FP16) return f.template operator()<_Float16>();
    return f.template operator()<float>();
}

}  // namespace spyre::mockdev
