// SPDX-License-Identifier: Apache-2.0
#include "content_hash.hpp"

#include <sys/random.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // the library's AVX2/AVX-512 code, picked at run time (about 3x its SSE2 code)
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>


namespace spyre::host {

namespace {

constexpr size_t kSecretBytes = 192;  // XXH3's own default size
static_assert(kSecretBytes >= XXH3_SECRET_SIZE_MIN);

// XXH3 keyed by a secret drawn once per process: nobody outside the process
// can compute which contents collide, so no input can be crafted to pass
// for another one (XXH3 is not a cryptographic hash; its collisions can be
// built only knowing the secret).
struct Secret {
    unsigned char bytes[kSecretBytes];
    Secret() {
        size_t got = 0;
        while (got < sizeof bytes) {
            const ssize_t r = getrandom(bytes + got, sizeof bytes - got, 0);
            if (r > 0) got += size_t(r);
            else if (errno != EINTR) break;
        }
        if (got == sizeof bytes) return;
        // No getrandom (a kernel before 3.17): splitmix64 from the clock and
        // an address, unpredictable enough outside this process.
        uint64_t x = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ uint64_t(uintptr_t(this));
        for (unsigned char& b : bytes) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            b = static_cast<unsigned char>(z ^ (z >> 31));
        }
    }
};

const unsigned char* TheSecret() {
    static const Secret secret;
    return secret.bytes;
}

size_t Chunks(size_t n) { return (n + kHashChunk - 1) / kHashChunk; }

std::atomic<uint64_t> host_bytes_clock{0};

}  // namespace

uint64_t HostBytesTick() noexcept { return host_bytes_clock.fetch_add(1) + 1; }

ContentHash HashBytes(const void* p, size_t n) noexcept {
    const XXH128_hash_t h = XXH3_128bits_withSecret(p, n, TheSecret(), kSecretBytes);
    return {h.low64, h.high64};
}

void HashChunks(const void* p, size_t n, ChunkHashes& hashes) {
    hashes.resize(Chunks(n));
    const auto* s = static_cast<const unsigned char*>(p);
    for (size_t i = 0, at = 0; at < n; ++i, at += kHashChunk) hashes[i] = HashBytes(s + at, std::min(kHashChunk, n - at));
}

std::vector<ByteRange> ChangedRanges(const void* src, size_t n, ChunkHashes& held) {
    const auto* s = static_cast<const unsigned char*>(src);
    const bool unknown = held.size() != Chunks(n);
    if (unknown) held.resize(Chunks(n));
    std::vector<ByteRange> ranges;
    for (size_t i = 0, at = 0; at < n; ++i, at += kHashChunk) {
        const size_t k = std::min(kHashChunk, n - at);
        const ContentHash now = HashBytes(s + at, k);
        if (!unknown && held[i] == now) continue;
        held[i] = now;
        if (!ranges.empty() && ranges.back().offset + ranges.back().bytes == at) ranges.back().bytes += k;
        else ranges.push_back({at, k});
    }
    return ranges;
}

}  // namespace spyre::host
