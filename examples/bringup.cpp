// SPDX-License-Identifier: Apache-2.0
// spyre-bringup: driver-level bring-up of a spyre PF. Opens the PF (starting a
// private spyre-mockdev when no device is mounted), prints its identity and
// status registers, submits NOP control blocks through the ring in each wait
// mode, checks every completion and prints the round-trip latency; then
// reserves device memory and moves 64 MiB there and back by DMA.
//
// Usage: spyre-bringup [NOPS_PER_MODE]   (an integer from 1 to 1000000, default
//        10000; a bad one: a usage error, exit code 2)
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "example_main.hpp"
#include "hang_watchdog.hpp"
// Bring-up works at the driver level, below a Device: it includes that tier itself.
#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/spyre.hpp"

using namespace spyre::driver;
using Clock = std::chrono::steady_clock;

namespace {

void PrintIdentity(const Function& fn, const DeviceEnvironment& env) {
    const auto& di = fn.device_info();
    std::printf("device root   %s%s\n", env.root().path().c_str(), env.embedded() ? " (private spyre-mockdev)" : "");
    std::printf("function      %s  [%04x:%04x] %s, card %u\n", fn.pci_address().c_str(), di.vendor_id, di.device_id,
                fn.is_vf() ? "VF" : "PF", di.card_index);
    const uint32_t version = fn.Read32(SPYRE_REG_VERSION);
    std::printf("MAGIC         0x%08x %s\n", fn.Read32(SPYRE_REG_MAGIC),
                fn.Read32(SPYRE_REG_MAGIC) == SPYRE_MAGIC ? "(SPYR)" : "(BAD)");
    std::printf("VERSION       %u.%u\n", SPYRE_VERSION_GET_MAJOR(version), SPYRE_VERSION_GET_MINOR(version));
    std::printf("NUM_CORES     %u\n", fn.Read32(SPYRE_REG_NUM_CORES));
    std::printf("MEM_SIZE      %" PRIu64 " GiB\n", fn.Read64(SPYRE_REG_MEM_SIZE) >> 30);
    std::printf("SQ/CQ         %u x %u B / %u x %u B\n", fn.Read32(SPYRE_REG_SQ_ENTRIES), fn.Read32(SPYRE_REG_CB_SIZE),
                fn.Read32(SPYRE_REG_CQ_ENTRIES), fn.Read32(SPYRE_REG_CQE_SIZE));
}

void PrintStatus(const Function& fn) {
    std::string dump = fn.RegisterDump();
    for (const char* name : {"STATUS ", "ERR_CODE ", "CNT_CB_DONE ", "CNT_CB_ERRORS ", "CNT_NOPS ", "CNT_WAKEUPS ", "CNT_IRQS "}) {
        size_t at = dump.find(std::string("\n") + name);
        if (at != std::string::npos) std::printf("  %s\n", dump.substr(at + 1, dump.find('\n', at + 1) - at - 1).c_str());
    }
}

// Submits `count` NOPs one at a time, waits for each, checks its completion.
// Returns per-CB round-trip times in nanoseconds.
std::vector<double> RoundTrips(CommandRing& ring, WaitMode mode, int count, uint64_t& user_data) {
    std::vector<double> ns;
    ns.reserve(count);
    WaitOptions wait{.mode = mode};
    Completion c;
    for (int i = 0; i < count; ++i) {
        const spyre_cb cb = NopCb(++user_data);
        const auto t0 = Clock::now();
        const uint32_t pos = ring.Submit({&cb, 1});
        ring.Wait({&c, 1}, 1, wait);
        ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
        if (!c.ok() || c.user_data != cb.user_data || c.sq_pos != pos || c.opcode != SPYRE_OP_NOP)
            throw spyre::Error(spyre::ErrorKind::DeviceError,
                               "NOP " + std::to_string(i) + " completed wrongly (status " + spyre_error_name(c.status) +
                                   ", user_data " + std::to_string(c.user_data) + ")",
                               {.device_code = c.status});
    }
    return ns;
}

double Percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// At most 10^6 NOPs per mode: at tens of microseconds per blocking round
// trip, the run stays inside its hang bound.
constexpr int64_t kMaxNops = 1'000'000;
constexpr const char* kUsage = "spyre-bringup [NOPS_PER_MODE]  (an integer from 1 to 1000000, default 10000)";

int Run(int argc, char** argv) {
    if (argc > 2) throw spyre::support::UsageError("one argument at most");
    const int count = argc > 1 ? int(spyre::support::ParseInteger("NOPS_PER_MODE", argv[1], 1, kMaxNops)) : 10000;
    // A hang is reported (exit 124), not waited out: 100 s for the whole run
    // (SPYRE_HANG_TIMEOUT_S overrides it, for large counts).
    spyre::support::HangWatchdog watchdog("spyre-bringup", std::chrono::seconds(100));
    DeviceEnvironment env = DeviceEnvironment::Acquire();
    Function fn = env.Open();
    std::printf("== spyre bring-up (libspyre %s) ==\n", spyre::Version());
    PrintIdentity(fn, env);
    CommandRing ring(fn);
    std::printf("status after ring enable:\n");
    PrintStatus(fn);

    uint64_t user_data = 0;
    std::printf("\n%d NOP round trips per wait mode (submit one, wait for its completion):\n", count);
    std::printf("  %-9s %10s %10s %10s %10s\n", "mode", "mean us", "p50 us", "p99 us", "max us");
    for (WaitMode mode : {WaitMode::Poll, WaitMode::Adaptive, WaitMode::Blocking}) {
        auto ns = RoundTrips(ring, mode, count, user_data);
        double mean = 0;
        for (double x : ns) mean += x;
        mean /= ns.size();
        std::printf("  %-9s %10.2f %10.2f %10.2f %10.2f\n", ToString(mode), mean / 1e3, Percentile(ns, 0.5) / 1e3,
                    Percentile(ns, 0.99) / 1e3, Percentile(ns, 1.0) / 1e3);
    }

    // Throughput: keep the ring full in batches of 64 CBs per doorbell.
    const int batch = 64;
    std::vector<spyre_cb> cbs(batch);
    std::vector<Completion> done(batch);
    int checked = 0;
    const auto t0 = Clock::now();
    while (checked < count) {
        const int n = std::min(batch, count - checked);
        for (int i = 0; i < n; ++i) cbs[i] = NopCb(++user_data);
        ring.Submit({cbs.data(), static_cast<size_t>(n)});
        size_t got = 0;
        while (got < static_cast<size_t>(n)) got += ring.Wait({done.data() + got, n - got}, n - got, {.mode = WaitMode::Adaptive});
        for (int i = 0; i < n; ++i)
            if (!done[i].ok() || done[i].user_data != cbs[i].user_data)
                throw spyre::Error(spyre::ErrorKind::DeviceError, "batched NOP completed out of order or failed");
        checked += n;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("\n%d NOPs in batches of %d: %.2f M CB/s (%.0f ns per CB)\n", count, batch, count / secs / 1e6,
                secs * 1e9 / count);
    std::printf("all %d completions checked: status OK, ring order, user_data echoed\n", count * 4);

    // Device memory: reserve the pool, then a 64 MiB round trip by DMA.
    spyre::SpyreAllocator alloc(fn);
    DmaQueue queue(fn);
    spyre::DMAEngine dma(alloc, queue);
    const uint64_t bytes = 64ull << 20;
    std::vector<uint8_t> out(bytes), back(bytes);
    for (uint64_t i = 0; i < bytes; ++i) out[i] = uint8_t(i * 131 + 7);
    auto block = alloc.Allocate(bytes);
    const auto d0 = Clock::now();
    dma.Wait(dma.CopyToDevice(out.data(), block.handle, bytes));
    const auto d1 = Clock::now();
    dma.Wait(dma.CopyFromDevice(back.data(), block.handle, bytes));
    const auto d2 = Clock::now();
    if (back != out) throw spyre::Error(spyre::ErrorKind::DeviceError, "DMA round trip corrupted data");
    auto gbps = [&](auto a, auto b) { return bytes / std::chrono::duration<double>(b - a).count() / 1e9; };
    std::printf("\nmemory pool   %s\n", alloc.Stats().reservation.c_str());
    std::printf("DMA backend   %s (%s)\n", ToString(queue.backend()), queue.backend_reason().c_str());
    std::printf("DMA 64 MiB    host->device %.1f GB/s (first touch: device pages are allocated), device->host %.1f GB/s, byte-exact\n",
                gbps(d0, d1), gbps(d1, d2));
    alloc.Free(block.handle);
    std::printf("status at the end:\n");
    PrintStatus(fn);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return spyre::support::RunExample("spyre-bringup", kUsage, [&] { return Run(argc, argv); });
}
