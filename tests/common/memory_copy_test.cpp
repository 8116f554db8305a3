// SPDX-License-Identifier: Apache-2.0
// CopyMemory (spyre/common/memory_copy.hpp): memcpy's result byte for byte at
// every offset of the destination past the source within a page, on both
// sides of the sizes and gaps where it copies backwards.
#include "spyre/common/memory_copy.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace spyre {
namespace {

// Two page-aligned regions, so a destination offset is its gap mod 4 KiB.
struct Pages {
    explicit Pages(size_t bytes) : bytes(bytes) {
        src = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        dst = static_cast<uint8_t*>(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    }
    ~Pages() {
        ::munmap(src, bytes);
        ::munmap(dst, bytes);
    }
    size_t bytes;
    uint8_t* src;
    uint8_t* dst;
};

TEST(CopyMemory, EqualsMemcpyAtEveryGapAndAroundEverySizeBound) {
    const size_t sizes[] = {0, 1, 63, 64, 65, 255, 256, 257, 4096 + 7, 65536 + 33, (size_t(1) << 20) - 1,
                            size_t(1) << 20};
    Pages pages((size_t(1) << 20) + 3 * 4096);
    for (size_t i = 0; i < pages.bytes; ++i) pages.src[i] = uint8_t(i * 131 + 7);
    for (size_t gap : {size_t(0), size_t(1), size_t(16), size_t(31), size_t(32), size_t(48), size_t(4080)}) {
        for (size_t n : sizes) {
            // A source 8 bytes into its page: the copy's head and tail are not block aligned.
            const uint8_t* src = pages.src + 8;
            uint8_t* dst = pages.dst + 8 + gap;
            std::fill(pages.dst, pages.dst + pages.bytes, uint8_t(0xEE));
            CopyMemory(dst, src, n);
            ASSERT_EQ(std::memcmp(dst, src, n), 0) << "gap " << gap << ", " << n << " bytes";
            // Nothing written outside [dst, dst + n).
            ASSERT_EQ(dst[-1], 0xEE) << "gap " << gap << ", " << n << " bytes";
            ASSERT_EQ(dst[n], 0xEE) << "gap " << gap << ", " << n << " bytes";
        }
    }
}

TEST(CopyMemory, CopiesBackwardsExactlyWhereAForwardCopyStalls) {
    alignas(4096) static uint8_t page[2 * 4096];
    EXPECT_TRUE(detail::ForwardCopyAliases(page + 16, page, 4096));    // a malloc'd buffer after device memory
    EXPECT_TRUE(detail::ForwardCopyAliases(page + 4096 + 1, page, 256));
    EXPECT_FALSE(detail::ForwardCopyAliases(page + 4096, page, 4096));  // same offset in the page
    EXPECT_FALSE(detail::ForwardCopyAliases(page + 32, page, 4096));    // past the stalling gaps
    EXPECT_FALSE(detail::ForwardCopyAliases(page, page + 16, 4096));    // destination before the source
    EXPECT_FALSE(detail::ForwardCopyAliases(page + 16, page, 255));     // too small to matter
    EXPECT_FALSE(detail::ForwardCopyAliases(page + 16, page, size_t(1) << 20));  // glibc's own large path
}

}  // namespace
}  // namespace spyre
