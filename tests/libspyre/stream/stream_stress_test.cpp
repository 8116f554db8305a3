// SPDX-License-Identifier: Apache-2.0
// Stress: 64 streams x 10,000 ops, enqueued from several host threads at once.
// Each stream owns a device buffer and fills it slot by slot with small
// inline copies (a unique value per slot), with periodic copy-backs of the
// prefix written so far and a final copy-back: nothing lost, nothing
// reordered within a stream, nothing leaking between streams.
//
// SPYRE_STRESS_OPS (ops per stream, default 10000) and SPYRE_STRESS_STREAMS
// (default 64) scale it; the 'stream' suite runs a smaller instance, the
// 'stress' suite the full one.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "stream_fixture.hpp"
#include "stream_test_util.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {

int EnvInt(const char* name, int fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : fallback;
}

struct StreamWork {
    int id = 0;
    int slots = 0;
    std::optional<FlexStream> stream;
    DeviceAllocation buf{PFDeviceHandle{}, 0};
    std::vector<uint64_t> values;  // host sources: stay valid until the end
    std::vector<uint64_t> zeros;
    std::vector<uint64_t> final_back;
    struct Snapshot {
        int written;                  // slots written before it
        std::vector<uint64_t> data;   // slots [0, written + kTail)
    };
    std::vector<Snapshot> snapshots;  // reserved up front: never reallocated while queued
    std::atomic<int> callbacks{0};

    uint64_t Value(int slot) const { return (uint64_t(id + 1) << 40) ^ (uint64_t(slot) * 0x9E3779B1ull) ^ 0xA5; }
};

constexpr int kTail = 8;          // zero slots checked past each snapshot's prefix
constexpr int kSnapshotEvery = 1000;
constexpr int kBurst = 64;        // ops a thread enqueues on one stream before moving on

}  // namespace

TEST_F(StreamTest, ManyStreamsManyOpsFromManyThreads) {
    const int streams_n = EnvInt("SPYRE_STRESS_STREAMS", 64);
    const int ops = EnvInt("SPYRE_STRESS_OPS", 10000);
    const int threads_n = 4;
    ASSERT_GE(ops, 100);
    DeviceOptions o;
    Device dev = OpenDevice(-1, o);

    // Per stream: 1 clearing copy + slots inline copies + snapshots (copy-back
    // + callback each) + 1 final copy-back = ops.
    const int snapshots_n = (ops - 2) / (kSnapshotEvery + 2);
    const int slots = ops - 2 - 2 * snapshots_n;
    std::vector<std::unique_ptr<StreamWork>> work;
    for (int i = 0; i < streams_n; ++i) {
        auto w = std::make_unique<StreamWork>();
        w->id = i;
        w->slots = slots;
        w->stream.emplace(dev.CreateStream({.priority = i % 3 - 1}));
        w->buf = dev.allocator().Allocate(uint64_t(slots) * 8);
        w->values.resize(slots);
        for (int k = 0; k < slots; ++k) w->values[k] = w->Value(k);
        w->zeros.assign(slots, 0);
        w->snapshots.reserve(snapshots_n);
        work.push_back(std::move(w));
    }

    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < threads_n; ++t)
        threads.emplace_back([&, t] {
            try {
                std::vector<StreamWork*> mine;
                std::vector<int> next;  // next slot per stream
                for (int i = t; i < streams_n; i += threads_n) {
                    mine.push_back(work[i].get());
                    next.push_back(-1);  // -1: the clearing copy is next
                }
                bool more = true;
                while (more) {
                    more = false;
                    for (size_t m = 0; m < mine.size(); ++m) {
                        StreamWork& w = *mine[m];
                        FlexStream& s = *w.stream;
                        int& k = next[m];
                        if (k > w.slots) continue;
                        for (int b = 0; b < kBurst && k <= w.slots; ++b) {
                            if (k == -1) {
                                s.CopyToDevice(w.zeros.data(), w.buf.handle, uint64_t(w.slots) * 8);
                            } else if (k == w.slots) {
                                w.final_back.assign(w.slots, ~0ull);
                                s.CopyFromDevice(w.final_back.data(), w.buf.handle, uint64_t(w.slots) * 8);
                            } else {
                                s.CopyToDevice(&w.values[k], w.buf.handle.Offset(8ull * k, 8, w.buf), 8);
                                const int written = k + 1;
                                if (written % kSnapshotEvery == 0 && int(w.snapshots.size()) < snapshots_n) {
                                    const int n = std::min(written + kTail, w.slots);
                                    w.snapshots.push_back({written, std::vector<uint64_t>(n, ~0ull)});
                                    s.CopyFromDevice(w.snapshots.back().data.data(), w.buf.handle, uint64_t(n) * 8);
                                    s.AddCallback([&w] { w.callbacks.fetch_add(1, std::memory_order_relaxed); });
                                }
                            }
                            ++k;
                        }
                        more = more || k <= w.slots;
                    }
                }
            } catch (const std::exception& e) {
                ADD_FAILURE() << "enqueue thread " << t << ": " << e.what();
                failures.fetch_add(1);
            }
        });
    for (auto& th : threads) th.join();
    ASSERT_EQ(failures.load(), 0);
    const double enqueue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    uint64_t total_ops = 0;
    for (auto& w : work) {
        ASSERT_TRUE(SettlesWithin(*w->stream, std::chrono::seconds(120)));
        w->stream->Synchronize();
        total_ops += w->stream->enqueued();
    }
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty("ops", std::to_string(total_ops));
    RecordProperty("enqueue_s", std::to_string(enqueue_s));
    RecordProperty("total_s", std::to_string(total_s));
    std::printf("%d streams x %d ops = %llu ops from %d threads: enqueued in %.2f s, done in %.2f s (%.0f ops/s)\n",
                streams_n, ops, (unsigned long long)total_ops, threads_n, enqueue_s, total_s, double(total_ops) / total_s);

    for (auto& w : work) {
        SCOPED_TRACE("stream " + std::to_string(w->id));
        EXPECT_GE(w->stream->enqueued(), uint64_t(ops) - 2);
        EXPECT_EQ(w->stream->completed(), w->stream->enqueued());
        // Final contents: every slot holds its own value.
        int wrong = 0;
        for (int k = 0; k < w->slots; ++k)
            if (w->final_back[k] != w->values[k] && wrong++ < 3)
                ADD_FAILURE() << "slot " << k << " = " << std::hex << w->final_back[k] << ", expected " << w->values[k];
        EXPECT_EQ(wrong, 0);
        // Each snapshot saw exactly the prefix written before it.
        EXPECT_EQ(w->callbacks.load(), int(w->snapshots.size()));
        for (const auto& snap : w->snapshots) {
            for (int k = 0; k < int(snap.data.size()); ++k) {
                const uint64_t want = k < snap.written ? w->values[k] : 0;
                if (snap.data[k] != want) {
                    ADD_FAILURE() << "snapshot after " << snap.written << " slots: slot " << k << " = " << std::hex
                                  << snap.data[k] << ", expected " << want;
                    break;
                }
            }
        }
        dev.allocator().Free(w->buf.handle);
    }
    const SchedulerStats st = dev.scheduler().Stats();
    EXPECT_GE(st.inline_copies, uint64_t(streams_n) * uint64_t(slots));
    EXPECT_LT(st.doorbells, st.ring_cbs);
    EXPECT_EQ(st.dropped, 0u);
}
