// SPDX-License-Identifier: Apache-2.0
// Hashes of host bytes (XXH3-128, libxxhash), one per 64 KiB chunk, and
// copies that hash what they copy: how a device copy kept between chip
// calls is checked against the host bytes before it is reused, and brought
// up to date chunk by chunk when they changed (docs/host.md, "Device
// copies"). A caller may write host memory through any pointer at any time
// between runs, unseen by the runtime, so it compares contents instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spyre::host {

struct ContentHash {
    uint64_t low = 0, high = 0;
    bool operator==(const ContentHash&) const = default;
};

// Small enough that a chunk copied is still in L2 when it is hashed, and
// that a write of a few elements costs a small upload.
inline constexpr size_t kHashChunk = 64 << 10;
// The hashes of a byte range, one per kHashChunk bytes in order (the last
// chunk may be shorter).
using ChunkHashes = std::vector<ContentHash>;

// A process-wide clock of reads of host bytes: the program's submission of
// a chip task takes a tick (ChipCall::submitted), and so does every read of
// host bytes into a kept device copy (an upload, a check against hashes, a
// download). A copy read at a later tick than a call's submission holds
// what the program wrote before submitting it. Each tick is an atomic
// read-modify-write, so a write before one tick is seen by a read after a
// later one.
uint64_t HostBytesTick() noexcept;

// The hash of `n` bytes at `p`.
ContentHash HashBytes(const void* p, size_t n) noexcept;
// The chunk hashes of `n` bytes at `p`.
void HashChunks(const void* p, size_t n, ChunkHashes& hashes);

// A byte range [offset, offset + bytes).
struct ByteRange {
    uint64_t offset = 0, bytes = 0;
    bool operator==(const ByteRange&) const = default;
};

// A copy holds bytes whose chunk hashes are `held` (as many as `n` bytes
// have chunks; fewer, as when empty: nothing is known). Returns the ranges
// of the `n` bytes at `src` (host memory) the copy must take to hold them,
// whole chunks whose hash changed with neighbours merged, and makes `held`
// their chunk hashes.
std::vector<ByteRange> ChangedRanges(const void* src, size_t n, ChunkHashes& held);

}  // namespace spyre::host
