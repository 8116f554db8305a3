// SPDX-License-Identifier: Apache-2.0
// Copying between host buffers and mapped device memory at memory speed
// whatever the two addresses' offsets within their pages.
//
// A core checks a load against the stores still in flight by the low 12
// address bits first. A forward copy whose destination lies 1-31 bytes past
// its source modulo 4 KiB therefore makes nearly every load wait on a store it
// only seems to alias. Below its large-copy size glibc's memcpy copies
// forwards: measured 1.6-2.9 GB/s instead of 45-80 GB/s for 4 KiB-256 KiB on
// this project's AMD EPYC VM (docs/dma.md). It is the common case of a
// device-to-host copy: device memory is page aligned, and a malloc'd or
// std::vector buffer starts 16 bytes into its page. Copying backwards loads
// each block before the store that aliases it (measured 44-49 GB/s there, as
// fast as a memcpy free of the stall). Other architectures copy with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#include "spyre/export.h"

SPYRE_API_BEGIN
#endif

namespace spyre {

namespace detail {

// Destination offsets past the source (mod 4 KiB) that stall a forward copy,
// and the sizes where it matters: from 1 MiB on glibc detects the aliasing
// itself (measured 32 GB/s), and under 256 bytes the stalls cost little.
inline constexpr uintptr_t kAliasingGap = 32;
inline constexpr size_t kAliasingMinBytes = 256;
inline constexpr size_t kAliasingMaxBytes = size_t(1) << 20;

inline bool ForwardCopyAliases(const void* dst, const void* src, size_t n) noexcept {
    const uintptr_t gap = (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
    return gap != 0 && gap < kAliasingGap && n >= kAliasingMinBytes && n < kAliasingMaxBytes;
}

#if defined(__SSE2__)
// memcpy from the last 64-byte block to the first, each block through
// registers (a copy through a stack buffer ran at half the speed).
inline void CopyBackwards(unsigned char* dst, const unsigned char* src, size_t n) noexcept {
    size_t at = n;
    while (at >= 64) {
        at -= 64;
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at + 48));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at), a);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at + 16), b);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at + 32), c);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + at + 48), d);
    }
    std::memcpy(dst, src, at);
}
#endif

}  // namespace detail

// memcpy's contract (the ranges must not overlap), without the 4 KiB
// aliasing stall above.
inline void CopyMemory(void* dst, const void* src, size_t n) noexcept {
#if defined(__SSE2__)
    if (detail::ForwardCopyAliases(dst, src, n))
        return detail::CopyBackwards(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n);
#endif
    std::memcpy(dst, src, n);
}

// memmove's contract: CopyMemory where the ranges do not overlap.
inline void MoveMemory(void* dst, const void* src, size_t n) noexcept {
    const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
    if ((d > s ? d - s : s - d) < n)
        std::memmove(dst, src, n);
    else
        CopyMemory(dst, src, n);
}

}  // namespace spyre
SPYRE_API_END
