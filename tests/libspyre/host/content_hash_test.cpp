// SPDX-License-Identifier: Apache-2.0
// The hashes behind the check of kept device copies: a copy that hashes
// what it copies agrees with hashing the bytes, whichever side is hashed,
// and a copy brought up to date moves exactly the chunks that changed.
#include <gtest/gtest.h>

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

TEST(ContentHash, CopyHashingHashesEachChunkOfWhatItCopies) {
    const size_t n = 5 * kHashChunk + 1234;  // a short last chunk
    const auto src = Bytes(n, 1);
    for (HostSide side : {HostSide::Source, HostSide::Destination}) {
        std::vector<unsigned char> dst(n);
        ChunkHashes h;
        CopyHashing(dst.data(), src.data(), n, side, h);
        EXPECT_EQ(dst, src);
        ASSERT_EQ(h.size(), 6u);
        for (size_t i = 0; i < h.size(); ++i)
            EXPECT_EQ(h[i], HashBytes(src.data() + i * kHashChunk, std::min(kHashChunk, n - i * kHashChunk))) << i;
    }
    const auto other = Bytes(n, 2);
    EXPECT_FALSE(HashBytes(src.data(), n) == HashBytes(other.data(), n));
    EXPECT_EQ(HashBytes(src.data(), n), HashBytes(std::vector<unsigned char>(src).data(), n)) << "content, not address";
}

TEST(ContentHash, CopyChangedMovesOnlyTheChunksThatChanged) {
    const size_t n = 3 * kHashChunk + 100;
    auto host = Bytes(n, 3);
    std::vector<unsigned char> device(n);
    ChunkHashes held;
    CopyHashing(device.data(), host.data(), n, HostSide::Source, held);
    EXPECT_EQ(CopyChanged(device.data(), host.data(), n, held), 0u);

    host[kHashChunk + 7] ^= 1;  // one byte of chunk 1
    host[n - 1] ^= 0x80;        // one bit of the short last chunk
    EXPECT_EQ(CopyChanged(device.data(), host.data(), n, held), kHashChunk + 100);
    EXPECT_EQ(device, host);
    EXPECT_EQ(CopyChanged(device.data(), host.data(), n, held), 0u);
}
