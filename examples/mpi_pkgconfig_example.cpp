// SPDX-License-Identifier: Apache-2.0
// Level 4 from an installed libspyre-mpi: run under mpirun, every rank opens
// its own card (a private mock here); rank 0 runs a chip task on rank 1's
// device and checks what comes back, byte for byte.
#include <cstdio>
#include <cstring>
#include <spyre/host.hpp>
#include <spyre/host/mpi_transport.hpp>

int main() {
    try {
        spyre::host::MpiTransport transport;  // every rank
        spyre::Host host = spyre::Host::Open(spyre::HostOptions::EmbeddedMock(1, 1, "256M"));
        spyre::MultiHostWorker mw(transport, host, {.device_ids = {1}, .num_sub_workers = 1});
        // The same registration on every rank: a chip function that copies
        // its input to its output through the device's memory.
        mw.worker().RegisterChipFunction("copy", [](spyre::ChipContext& ctx) {
            std::memcpy(ctx.args[1], ctx.args[0], ctx.bytes[0]);
        });
        if (mw.rank() != 0) {
            mw.Serve();  // until rank 0's MultiHostWorker goes
            return 0;
        }
        spyre::HostTensor a = spyre::HostTensor::Full({64, 64}, 1.5f), b = spyre::HostTensor::Zeros({64, 64});
        spyre::HostProgram p{"copy", 0, {}, [&](spyre::HostGraph& g, std::span<const spyre::HostTensor>) {
                                 g.Chip("copy", {spyre::In(a), spyre::Out(b)}, {.device = 1});  // rank 1's VF
                             }};
        mw.worker().Run(p, {});
        const bool same = std::memcmp(a.data(), b.data(), a.bytes()) == 0;
        std::printf("libspyre-mpi, %d ranks, a chip task on %s: %s\n", mw.ranks(), mw.worker().DescribeDevice(1).c_str(),
                    same ? "OK" : "WRONG");
        return same ? 0 : 1;
    } catch (const spyre::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
