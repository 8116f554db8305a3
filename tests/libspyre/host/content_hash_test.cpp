// SPDX-License-Identifier: Apache-2.0
// The hashes behind the check of kept device copies: each chunk hashed by
// content, and a copy brought up to date takes exactly the chunks that
// changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "host/content_hash.hpp"

using namespace spyre::host;

namespace {

std::vector<unsigned char> Bytes(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7) >> 3);
    return v;
}

}  // namespace

TEST(ContentHash, HashChunksHashesEachChunkOfTheBytes) {
    const size_t n = 5 * kHashChunk + 1234;  // a short last chunk
    const auto src = Bytes(n, 1);
    ChunkHashes h;
    HashChunks(src.data(), n, h);
    ASSERT_EQ(h.size(), 6u);
    for (size_t i = 0; i < h.size(); ++i)
        EXPECT_EQ(h[i], HashBytes(src.data() + i * kHashChunk, std::min(kHashChunk, n - i * kHashChunk))) << i;
    const auto other = Bytes(n, 2);
    EXPECT_FALSE(HashBytes(src.data(), n) == HashBytes(other.data(), n));
    EXPECT_EQ(HashBytes(src.data(), n), HashBytes(std::vector<unsigned char>(src).data(), n)) << "content, not address";
}

// What a device copy must take to hold the host bytes, applied to a host
// vector standing in for the copy.
void Apply(std::vector<unsigned char>& copy, const std::vector<unsigned char>& host, const std::vector<ByteRange>& ranges) {
    for (const ByteRange& r : ranges) std::copy_n(host.begin() + long(r.offset), r.bytes, copy.begin() + long(r.offset));
}

TEST(ContentHash, ChangedRangesNameExactlyTheChunksThatChanged) {
    const size_t n = 4 * kHashChunk + 100;
    auto host = Bytes(n, 3);
    std::vector<unsigned char> device(n);
    ChunkHashes held;  // nothing known: the whole range
    auto ranges = ChangedRanges(host.data(), n, held);
    EXPECT_EQ(ranges, (std::vector<ByteRange>{{0, n}}));
    Apply(device, host, ranges);
    EXPECT_TRUE(ChangedRanges(host.data(), n, held).empty());

    host[kHashChunk + 7] ^= 1;      // one byte of chunk 1
    host[2 * kHashChunk] ^= 2;      // and of chunk 2: merged with chunk 1
    host[n - 1] ^= 0x80;            // one bit of the short last chunk
    ranges = ChangedRanges(host.data(), n, held);
    EXPECT_EQ(ranges, (std::vector<ByteRange>{{kHashChunk, 2 * kHashChunk}, {4 * kHashChunk, 100}}));
    Apply(device, host, ranges);
    EXPECT_EQ(device, host);
    EXPECT_TRUE(ChangedRanges(host.data(), n, held).empty());

    ChunkHashes other_size(2);  // hashes of another length know nothing of these bytes
    EXPECT_EQ(ChangedRanges(host.data(), n, other_size), (std::vector<ByteRange>{{0, n}}));
    EXPECT_EQ(other_size, held);
}
