// SPDX-License-Identifier: Apache-2.0
#include "execution/fp16.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace spyre::mockdev {

namespace {

void HalfToFloatScalar(const uint16_t* src, float* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        _Float16 h;
        std::memcpy(&h, &src[i], sizeof h);
        dst[i] = static_cast<float>(h);
    }
}

void FloatToHalfScalar(const float* src, uint16_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const _Float16 h = static_cast<_Float16>(src[i]);
        std::memcpy(&dst[i], &h, sizeof h);
    }
}

#if defined(__x86_64__)
bool HaveF16c() {
    static const bool have = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return have;
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* src, float* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    HalfToFloatScalar(src + i, dst + i, n - i);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* src, uint16_t* dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    FloatToHalfScalar(src + i, dst + i, n - i);
}
#endif

}  // namespace

void HalfToFloat(const uint16_t* src, float* dst, size_t n) {
#if defined(__x86_64__)
    if (HaveF16c()) return HalfToFloatF16c(src, dst, n);
#endif
    HalfToFloatScalar(src, dst, n);
}

void FloatToHalf(const float* src, uint16_t* dst, size_t n) {
#if defined(__x86_64__)
    if (HaveF16c()) return FloatToHalfF16c(src, dst, n);
#endif
    FloatToHalfScalar(src, dst, n);
}

}  // namespace spyre::mockdev
