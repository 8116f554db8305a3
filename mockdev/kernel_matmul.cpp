// SPDX-License-Identifier: Apache-2.0
// Matmul on the card's cores: the rows of C are split into chunks, and each
// chunk is a few single-threaded cblas_sgemm calls (the pool is the
// parallelism). fp32 operands with unit column stride go to the BLAS in
// place; fp16 or other strides are converted to fp32 in blocks, computed,
// and C is converted back (rounding to nearest even).
#include <cblas.h>

#include <climits>
#include <vector>

#include "fp16.hpp"
#include "kernels.hpp"

namespace spyre::mockdev {

namespace {

// Work per chunk: a few tens of ms on one core, the watchdog's granularity.
constexpr double kChunkFlops = double(1ull << 31);
// Block edges along N and K: as the BLAS takes them in place, and when
// operands are converted (bounds each worker's scratch to a few MiB).
constexpr uint64_t kDirectBlock = 4096;
constexpr uint64_t kConvertBlock = 512;
// Rows per chunk, in place and converted.
constexpr uint64_t kDirectRows = 1u << 16;
constexpr uint64_t kConvertRows = 256;

// A 2-D operand as the BLAS sees it.
struct Matrix {
    const Tensor& t;
    uint64_t row_stride;
    uint64_t col_stride;
    bool fp16;
    // fp32, unit column stride, a leading dimension the BLAS accepts.
    bool direct;

    explicit Matrix(const Tensor& tensor)
        : t(tensor),
          row_stride(tensor.strides()[0]),
          col_stride(tensor.strides()[1]),
          fp16(tensor.desc().dtype == SPYRE_DTYPE_FP16),
          direct(!fp16 && col_stride == 1 && row_stride >= tensor.shape()[1] && row_stride <= uint64_t(INT_MAX)) {}

    uint8_t* At(uint64_t r, uint64_t c) const { return t.data + (r * row_stride + c * col_stride) * t.operand.element_size; }

    // Block [r0, r0 + rows) x [c0, c0 + cols) as fp32 into dst (row-major, cols wide).
    void Load(uint64_t r0, uint64_t rows, uint64_t c0, uint64_t cols, float* dst) const {
        for (uint64_t r = 0; r < rows; ++r, dst += cols) {
            if (fp16 && col_stride == 1) {
                HalfToFloat(reinterpret_cast<const uint16_t*>(At(r0 + r, c0)), dst, cols);
                continue;
            }
            for (uint64_t c = 0; c < cols; ++c)
                dst[c] = fp16 ? LoadElement<_Float16>(At(r0 + r, c0 + c), 0) : LoadElement<float>(At(r0 + r, c0 + c), 0);
        }
    }

    void Store(uint64_t r0, uint64_t rows, uint64_t c0, uint64_t cols, const float* src) const {
        for (uint64_t r = 0; r < rows; ++r, src += cols) {
            if (fp16 && col_stride == 1) {
                FloatToHalf(src, reinterpret_cast<uint16_t*>(At(r0 + r, c0)), cols);
                continue;
            }
            for (uint64_t c = 0; c < cols; ++c) {
                if (fp16)
                    StoreElement<_Float16>(At(r0 + r, c0 + c), 0, src[c]);
                else
                    StoreElement<float>(At(r0 + r, c0 + c), 0, src[c]);
            }
        }
    }
};

// An fp32 block the BLAS can read or write: in place, or in scratch.
struct Block {
    float* data;
    int ld;
};

Block View(const Matrix& m, uint64_t r0, uint64_t rows, uint64_t c0, uint64_t cols, std::vector<float>& scratch,
           bool load) {
    if (m.direct) return Block{reinterpret_cast<float*>(m.At(r0, c0)), int(m.row_stride)};
    scratch.resize(rows * cols);
    if (load) m.Load(r0, rows, c0, cols, scratch.data());
    return Block{scratch.data(), int(cols)};
}

struct Plan {
    uint64_t rows_per_chunk;
    uint64_t chunks;
    uint64_t nb;  // block edge along N
    uint64_t kb;  // block edge along K
};

Plan MakePlan(uint64_t m, uint64_t k, uint64_t n, bool direct, unsigned workers) {
    const double flops = 2.0 * double(m) * double(k) * double(n);
    const uint64_t wanted = std::max<uint64_t>(workers, uint64_t(flops / kChunkFlops) + 1);
    uint64_t rows = std::max<uint64_t>(1, (m + wanted - 1) / wanted);
    rows = std::min(rows, direct ? kDirectRows : kConvertRows);
    const uint64_t block = direct ? kDirectBlock : kConvertBlock;
    return Plan{rows, (m + rows - 1) / rows, std::min(n, block), std::min(k, block)};
}

// OpenBLAS threads of its own would fight the pool for the cores.
void UseSingleThreadedBlas() {
    static const bool once = (openblas_set_num_threads(1), true);
    (void)once;
}

}  // namespace

uint16_t RunMatmul(const KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
    UseSingleThreadedBlas();
    const Matrix A(a), B(b), C(c);
    const uint64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    const Plan plan = MakePlan(m, k, n, A.direct && B.direct && C.direct, ctx.compute.workers());

    return ctx.compute.ParallelFor(size_t(plan.chunks), ctx.budget, [&](size_t chunk) -> uint16_t {
        thread_local std::vector<float> sa, sb, sc;  // per-worker scratch, kept between chunks
        const uint64_t r0 = chunk * plan.rows_per_chunk;
        const uint64_t rows = std::min(plan.rows_per_chunk, m - r0);
        for (uint64_t n0 = 0; n0 < n; n0 += plan.nb) {
            const uint64_t nw = std::min(plan.nb, n - n0);
            const Block cb = View(C, r0, rows, n0, nw, sc, accumulate);
            for (uint64_t k0 = 0; k0 < k; k0 += plan.kb) {
                if (uint16_t status = ctx.budget.Check()) return status;
                const uint64_t kw = std::min(plan.kb, k - k0);
                const Block ab = View(A, r0, rows, k0, kw, sa, true);
                const Block bb = View(B, k0, kw, n0, nw, sb, true);
                const float beta = (k0 > 0 || accumulate) ? 1.0f : 0.0f;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(nw), int(kw), 1.0f, ab.data, ab.ld,
                            bb.data, bb.ld, beta, cb.data, cb.ld);
            }
            if (!C.direct) C.Store(r0, rows, n0, nw, cb.data);
        }
        return SPYRE_ERR_NONE;
    });
}

}  // namespace spyre::mockdev
