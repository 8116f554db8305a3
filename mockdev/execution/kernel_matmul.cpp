// SPDX-License-Identifier: Apache-2.0
// Matmul on the card's cores: the rows of C are split into chunks, and each
// chunk is a few single-threaded cblas_sgemm calls (the pool is the
// parallelism). fp32 operands with unit column stride go to the BLAS in
// place; fp16 or other strides are converted to fp32 (whole operands up to
// 64 MiB, in parallel; larger ones block by block inside the chunks), and C
// is converted back (rounding to nearest even).
#include <cblas.h>

#include <climits>
#include <cmath>
#include <vector>

#include "execution/fp16.hpp"
#include "execution/kernels.hpp"

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#endif

namespace spyre::mockdev {

namespace {

// The BLAS is not instrumented, so ThreadSanitizer sees none of its
// accesses but the memsets it makes through libc (OpenBLAS's SkylakeX
// kernels zero C that way for beta = 0; its Prescott ones do not). Two
// tasks a client lets write one C at once (the card's memory, racing as a
// device's would) then made a report whose search over the 4 MiB range
// stalled the daemon for seconds, past the heartbeat bound. Within a BLAS
// call ThreadSanitizer looks at nothing, as it already did for the rest.
class BlasUnseenBySanitizer {
public:
#if defined(__SANITIZE_THREAD__)
    BlasUnseenBySanitizer() { __tsan_ignore_thread_begin(); }
    ~BlasUnseenBySanitizer() { __tsan_ignore_thread_end(); }
#else
    BlasUnseenBySanitizer() = default;
#endif
    BlasUnseenBySanitizer(const BlasUnseenBySanitizer&) = delete;
    BlasUnseenBySanitizer& operator=(const BlasUnseenBySanitizer&) = delete;
};

// Work per chunk: a few tens of ms on one core (the budget is checked between
// chunks and, in place, between K blocks of kDirectKBlock).
constexpr double kChunkFlops = double(1ull << 32);
// Below this a matmul runs on one core, the ring lane's own: handing it
// to the workers costs a wake-up and a wait (a futex round trip, 15-25 us on
// this project's VMs), more than the others' share of it saves.
constexpr double kMinParallelFlops = double(1ull << 21);
// Block edges along N and K: as the BLAS takes them in place, and when
// operands are converted (bounds each worker's scratch to a few MiB).
constexpr uint64_t kDirectBlock = 4096;
constexpr uint64_t kConvertBlock = 512;
// K edge in place: the budget is checked before every BLAS call, so this
// bounds how long a worker runs past the watchdog (rows x N x 512 x 2 flops,
// about 1 GFLOP for a 512-row chunk of a 2048^3 matmul). The BLAS blocks K
// internally by a few hundred anyway, so C is not traversed more often.
constexpr uint64_t kDirectKBlock = 512;
// Rows per chunk, in place and converted.
constexpr uint64_t kDirectRows = 1u << 16;
constexpr uint64_t kConvertRows = 256;

// A 2-D operand as the BLAS sees it: device memory, or an fp32 copy of it.
struct Matrix {
    uint8_t* data;
    uint64_t rows;
    uint64_t cols;
    uint64_t row_stride;  // elements
    uint64_t col_stride;
    bool fp16;
    // fp32, unit column stride, a leading dimension the BLAS accepts.
    bool direct;

    static Matrix Of(const Tensor& t) {
        return Make(t.data, t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1],
                    t.desc().dtype == SPYRE_DTYPE_FP16);
    }
    static Matrix Make(uint8_t* data, uint64_t rows, uint64_t cols, uint64_t rs, uint64_t cs, bool fp16) {
        return Matrix{data, rows, cols, rs, cs, fp16, !fp16 && cs == 1 && rs >= cols && rs <= uint64_t(INT_MAX)};
    }

    uint8_t* At(uint64_t r, uint64_t c) const { return data + (r * row_stride + c * col_stride) * (fp16 ? 2 : 4); }

    // Block [r0, r0 + rows) x [c0, c0 + cols) as fp32 into dst (row-major, cols wide).
    void Load(uint64_t r0, uint64_t n_rows, uint64_t c0, uint64_t n_cols, float* dst) const {
        for (uint64_t r = 0; r < n_rows; ++r, dst += n_cols) {
            if (fp16 && col_stride == 1) {
                HalfToFloat(reinterpret_cast<const uint16_t*>(At(r0 + r, c0)), dst, n_cols);
                continue;
            }
            for (uint64_t c = 0; c < n_cols; ++c)
                dst[c] = fp16 ? LoadElement<_Float16>(At(r0 + r, c0 + c), 0) : LoadElement<float>(At(r0 + r, c0 + c), 0);
        }
    }

    void Store(uint64_t r0, uint64_t n_rows, uint64_t c0, uint64_t n_cols, const float* src) const {
        for (uint64_t r = 0; r < n_rows; ++r, src += n_cols) {
            if (fp16 && col_stride == 1) {
                FloatToHalf(src, reinterpret_cast<uint16_t*>(At(r0 + r, c0)), n_cols);
                continue;
            }
            for (uint64_t c = 0; c < n_cols; ++c) {
                if (fp16)
                    StoreElement<_Float16>(At(r0 + r, c0 + c), 0, src[c]);
                else
                    StoreElement<float>(At(r0 + r, c0 + c), 0, src[c]);
            }
        }
    }
};

// Operands the BLAS cannot take in place are copied to fp32 whole when they
// are at most this large (the BLAS then sees fp32 only); larger ones are
// converted block by block inside the chunks.
constexpr uint64_t kStageBytes = 64ull << 20;
constexpr uint64_t kStageRows = 64;  // rows per chunk of a staging copy

// Points `m` at an fp32 copy in `copy` that the BLAS takes in place, unless
// it is direct already or too large. `load`: fill the copy (not for a C the
// matmul overwrites).
uint16_t Stage(const KernelContext& ctx, Matrix& m, std::vector<float>& copy, bool load) {
    if (m.direct || m.rows * m.cols > kStageBytes / sizeof(float)) return SPYRE_ERR_NONE;
    copy.resize(m.rows * m.cols);
    if (load) {
        const uint64_t chunks = (m.rows + kStageRows - 1) / kStageRows;
        const Matrix src = m;
        if (uint16_t status = ctx.ParallelFor(size_t(chunks), [&](size_t i) {
                const uint64_t r0 = i * kStageRows;
                src.Load(r0, std::min(kStageRows, src.rows - r0), 0, src.cols, copy.data() + r0 * src.cols);
                return uint16_t(SPYRE_ERR_NONE);
            }))
            return status;
    }
    m = Matrix::Make(reinterpret_cast<uint8_t*>(copy.data()), m.rows, m.cols, m.cols, 1, false);
    return SPYRE_ERR_NONE;
}

// Writes a staged C back to device memory.
uint16_t Unstage(const KernelContext& ctx, const Matrix& device, const std::vector<float>& copy) {
    const uint64_t chunks = (device.rows + kStageRows - 1) / kStageRows;
    return ctx.ParallelFor(size_t(chunks), [&](size_t i) {
        const uint64_t r0 = i * kStageRows;
        device.Store(r0, std::min(kStageRows, device.rows - r0), 0, device.cols, copy.data() + r0 * device.cols);
        return uint16_t(SPYRE_ERR_NONE);
    });
}

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

}  // namespace

MatmulPlan PlanMatmul(uint64_t m, uint64_t k, uint64_t n, bool direct, unsigned workers) {
    // Whole rounds of chunks: every worker gets as many as the others.
    const double flops = 2.0 * double(m) * double(k) * double(n);
    const unsigned ways = flops < kMinParallelFlops ? 1u : workers;
    const uint64_t rounds = std::max<uint64_t>(1, uint64_t(std::ceil(flops / kChunkFlops / ways)));
    const uint64_t wanted = rounds * ways;
    uint64_t rows = std::max<uint64_t>(1, (m + wanted - 1) / wanted);
    rows = std::min(rows, direct ? kDirectRows : kConvertRows);
    const uint64_t block = direct ? kDirectBlock : kConvertBlock;
    return MatmulPlan{rows, (m + rows - 1) / rows, std::min(n, block), std::min(k, direct ? kDirectKBlock : block)};
}

namespace {

// OpenBLAS threads of its own would fight the pool for the cores.
void UseSingleThreadedBlas() {
    static const bool once = (openblas_set_num_threads(1), true);
    (void)once;
}

}  // namespace

uint16_t RunMatmul(const KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
    UseSingleThreadedBlas();
    const Matrix c_device = Matrix::Of(c);
    Matrix A = Matrix::Of(a), B = Matrix::Of(b), C = c_device;
    std::vector<float>& staged_a = ctx.Scratch(0);
    std::vector<float>& staged_b = ctx.Scratch(1);
    std::vector<float>& staged_c = ctx.Scratch(2);
    if (uint16_t status = Stage(ctx, A, staged_a, true)) return status;
    if (uint16_t status = Stage(ctx, B, staged_b, true)) return status;
    if (uint16_t status = Stage(ctx, C, staged_c, accumulate)) return status;
    const uint64_t m = A.rows, k = A.cols, n = B.cols;
    const MatmulPlan plan = PlanMatmul(m, k, n, A.direct && B.direct && C.direct, ctx.workers());

    const uint16_t status = ctx.ParallelFor(size_t(plan.chunks), [&](size_t chunk) -> uint16_t {
        thread_local std::vector<float> sa, sb, sc;  // per-worker scratch, kept between chunks
        const uint64_t r0 = chunk * plan.rows_per_chunk;
        const uint64_t rows = std::min(plan.rows_per_chunk, m - r0);
        for (uint64_t n0 = 0; n0 < n; n0 += plan.nb) {
            const uint64_t nw = std::min(plan.nb, n - n0);
            const Block cb = View(C, r0, rows, n0, nw, sc, accumulate);
            for (uint64_t k0 = 0; k0 < k; k0 += plan.kb) {
                if (uint16_t stop = ctx.budget.Check()) return stop;
                const uint64_t kw = std::min(plan.kb, k - k0);
                const Block ab = View(A, r0, rows, k0, kw, sa, true);
                const Block bb = View(B, k0, kw, n0, nw, sb, true);
                const float beta = (k0 > 0 || accumulate) ? 1.0f : 0.0f;
                [[maybe_unused]] const BlasUnseenBySanitizer unseen;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(nw), int(kw), 1.0f, ab.data, ab.ld,
                            bb.data, bb.ld, beta, cb.data, cb.ld);
            }
            if (!C.direct) C.Store(r0, rows, n0, nw, cb.data);
        }
        return SPYRE_ERR_NONE;
    });
    if (status != SPYRE_ERR_NONE || C.data == c_device.data) return status;  // C was not staged
    return Unstage(ctx, c_device, staged_c);
}

}  // namespace spyre::mockdev
