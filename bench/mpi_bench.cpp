// SPDX-License-Identifier: Apache-2.0
// Level 4 across ranks (run under mpirun -np 2; docs/multihost.md): a tensor
// round trip rank 0 -> rank 1 -> rank 0 three ways, each beside a raw MPI
// ping-pong of the same size measured in the same run:
//   raw_mpi      MPI_Send/MPI_Recv on the transport's MPI thread (the baseline)
//   transport    Transport::Send + Receive of one payload, echoed by rank 1
//   chip_call    RemoteChipClient::Call of an "echo" chip function (the
//                protocol: header encode/decode, output sizing, a device open)
// x_raw is the figure over the raw ping-pong of its size.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>

#include "bench_main.hpp"
#include "mpi_pingpong.hpp"
#include "spyre/device/host.hpp"
#include "spyre/host/mpi_transport.hpp"
#include "spyre/host/remote_chip_client.hpp"
#include "spyre/host/remote_chip_service.hpp"

using namespace spyre;
using namespace spyre::host;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint16_t kEcho = 200;     // payloads go back as they came
constexpr uint16_t kRawBatch = 201; // header: u64 size, u64 count: a raw ping-pong batch follows
constexpr int kRawTag = 7;

MpiTransport* g_transport = nullptr;
std::optional<RemoteChipClient> g_client;
std::map<std::string, std::map<int64_t, double>> g_ns;  // figure -> size -> ns per round trip

int64_t BatchOf(int64_t size) { return std::max<int64_t>(2, std::min<int64_t>(64, (64 << 20) / size)); }

Message RawBatchRequest(uint64_t size, uint64_t count) {
    Message m;
    m.type = kRawBatch;
    m.header.resize(16);
    std::memcpy(m.header.data(), &size, 8);
    std::memcpy(m.header.data() + 8, &count, 8);
    return m;
}

void Report(benchmark::State& state, const char* figure, double ns) {
    const int64_t size = state.range(0);
    g_ns[figure][size] = ns;
    state.SetBytesProcessed(state.iterations() * size * 2);
    if (g_ns["raw_mpi"].count(size)) {
        state.counters["raw_us"] = g_ns["raw_mpi"][size] / 1000;
        state.counters["x_raw"] = ns / g_ns["raw_mpi"][size];
    }
}

void BM_RawMpi(benchmark::State& state) {
    const uint64_t size = static_cast<uint64_t>(state.range(0)), count = static_cast<uint64_t>(BatchOf(state.range(0)));
    double total = 0;
    for (auto _ : state) {
        g_transport->Send(1, RawBatchRequest(size, count));
        double seconds = 0;
        g_transport->RunOnMpiThread([&](MPI_Comm comm) { seconds = bench::RawPingPongs(comm, 1, true, size, count, kRawTag); });
        // The figure is one round trip; a batch amortises the hand-over to the MPI thread.
        state.SetIterationTime(seconds / static_cast<double>(count));
        total += seconds / static_cast<double>(count);
    }
    Report(state, "raw_mpi", total * 1e9 / static_cast<double>(state.iterations()));
}

void BM_Transport(benchmark::State& state) {
    std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)), 0x5a);
    const auto start = Clock::now();
    for (auto _ : state) {
        Message m;
        m.type = kEcho;
        m.payloads.push_back(std::move(buf));
        g_transport->Send(1, std::move(m));
        Message back = g_transport->Receive(std::chrono::seconds(30), 1);
        buf = std::move(back.payloads.at(0));
    }
    Report(state, "transport", std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
                                   static_cast<double>(state.iterations()));
}

void BM_ChipCall(benchmark::State& state) {
    const int64_t floats = state.range(0) / 4;
    WireTensor input{{{floats}, DType::FP32}, std::vector<uint8_t>(static_cast<size_t>(state.range(0)), 0x3f)};
    const auto start = Clock::now();
    for (auto _ : state) {
        RemoteCall call{"echo", "echo", "0", {}, {WireSpec{{floats}, DType::FP32}}};
        call.inputs.push_back(std::move(input));
        std::vector<WireTensor> out = g_client->Call(1, std::move(call));
        input = std::move(out.at(0));
    }
    Report(state, "chip_call", std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
                                   static_cast<double>(state.iterations()));
}

int ServeRank(MpiTransport& t) {
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"));
    RemoteChipService service(t, host);
    service.Register("echo", [](Device&, const RemoteCall& call, std::vector<WireTensor>& out) {
        std::memcpy(out.at(0).data.data(), call.inputs.at(0).data.data(), out[0].data.size());
    });
    service.SetOtherMessageHandler([&](Message m) {
        if (m.type == kEcho) {
            const int from = m.source;
            m.header.clear();
            t.Send(from, std::move(m));
        } else if (m.type == kRawBatch && m.header.size() == 16) {
            uint64_t size = 0, count = 0;
            std::memcpy(&size, m.header.data(), 8);
            std::memcpy(&count, m.header.data() + 8, 8);
            t.RunOnMpiThread([&](MPI_Comm comm) { bench::RawPingPongs(comm, m.source, false, size, count, kRawTag); });
        }
    });
    service.Serve(0);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    MpiTransportOptions options;
    // Polling longer before sleeping: a round trip should not pay a sleep.
    options.idle_spin = std::chrono::microseconds(2000);
    int status = 0;
    try {
        MpiTransport t(options);
        if (t.size() != 2) {
            if (t.rank() == 0) std::fprintf(stderr, "mpi_bench: run with mpirun -np 2 (this run has %d ranks)\n", t.size());
            return 1;
        }
        if (t.rank() == 1) return ServeRank(t);
        g_transport = &t;
        g_client.emplace(t, std::chrono::seconds(60));
        // Rank 1 must be serving before a raw batch blocks our MPI thread
        // (no heartbeats go out meanwhile; its mock may take seconds to start).
        g_client->Describe(1);
        // Per size: the raw baseline first, so each figure prints beside it.
        for (int64_t size : {int64_t(4) << 10, int64_t(64) << 10, int64_t(1) << 20, int64_t(16) << 20}) {
            // Fixed batch counts: the manual time is per round trip, so letting
            // the library pick iterations from it would run 2 to 64 times longer.
            benchmark::RegisterBenchmark("raw_mpi_pingpong", BM_RawMpi)->Arg(size)->UseManualTime()->Iterations(
                size <= (64 << 10) ? 64 : 16);
            benchmark::RegisterBenchmark("transport_roundtrip", BM_Transport)->Arg(size)->UseRealTime()->MinTime(0.3);
            benchmark::RegisterBenchmark("chip_call_roundtrip", BM_ChipCall)->Arg(size)->UseRealTime()->MinTime(0.3);
        }
        status = bench::RunBenchmarks("mpi_bench", std::chrono::seconds(120));
        std::printf("\n%10s %12s %14s %8s %14s %8s\n", "bytes", "raw MPI us", "transport us", "x raw", "chip call us", "x raw");
        for (const auto& [size, raw] : g_ns["raw_mpi"]) {
            const double tr = g_ns["transport"][size], cc = g_ns["chip_call"][size];
            std::printf("%10lld %12.1f %14.1f %8.2f %14.1f %8.2f\n", static_cast<long long>(size), raw / 1000, tr / 1000,
                        tr / raw, cc / 1000, cc / raw);
        }
        g_client->Shutdown(1);
        g_client.reset();
    } catch (const Error& e) {
        std::fprintf(stderr, "mpi_bench: %s\n", e.what());
        status = 1;
    }
    return status;
}
