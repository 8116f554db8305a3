// SPDX-License-Identifier: Apache-2.0
// The raw MPI ping-pong the level-4 benchmarks stand beside: both sides of
// `count` round trips of `size` bytes, run on the transport's MPI thread
// (MpiTransport::RunOnMpiThread, holding its MPI lock) so no other MPI call
// runs at the same time. A zero-byte exchange first, so the timed part
// starts with both ranks in it.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace spyre::bench {

inline double RawPingPongs(MPI_Comm comm, int peer, bool first, uint64_t size, uint64_t count, int tag = 7) {
    std::vector<uint8_t> buf(size, 0x5a);
    char sync = 0;
    if (first) {
        MPI_Send(&sync, 0, MPI_BYTE, peer, tag, comm);
        MPI_Recv(&sync, 0, MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(&sync, 0, MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
        MPI_Send(&sync, 0, MPI_BYTE, peer, tag, comm);
    }
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < count; ++i) {
        if (first) {
            MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, peer, tag, comm);
            MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf.data(), static_cast<int>(size), MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf.data(), static_cast<int>(size), MPI_BYTE, peer, tag, comm);
        }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace spyre::bench
