// SPDX-License-Identifier: Apache-2.0
// The two hand-written rings beside the maintained queues Debian packages,
// in the pattern each ring serves, in one run:
//   ready/...  ReadyQueue's lock-free ring (one task graph thread pushes,
//              1 or 2 workers pop batches) beside Boost.Lockfree's queue,
//              moodycamel::ConcurrentQueue (libconcurrentqueue-dev) and the
//              mutex queue (LockedReadyQueue);
//   op/...     a stream's OpQueue (2 threads enqueue, the scheduler drains)
//              beside moodycamel::ConcurrentQueue with producer tokens,
//              Boost.Lockfree holding each op on the heap (it takes only
//              trivially copyable items; QueuedOp owns a std::function and
//              shared_ptrs) and a mutex with a deque.
// Each figure is ns per item, wall time (thread start and join included,
// about 1-2% of an iteration), with x_ring: the figure over the hand-written
// ring's of the same pattern (run first). docs/architecture.md, "Maintained
// libraries and hand-written parts", has the figures and the decision.
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_main.hpp"
#include "orchestration/ready_queue.hpp"
#include "stream/op_queue.hpp"

using spyre::orchestration::ReadyTask;
using spyre::detail::QueuedOp;

namespace {

std::map<std::string, double> g_ring_ns;  // the hand-written ring's ns per item, per pattern

void Report(benchmark::State& state, const std::string& pattern, bool is_ring, size_t items,
            std::chrono::steady_clock::time_point t0) {
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                      double(state.iterations() * items);
    state.SetItemsProcessed(int64_t(state.iterations() * items));
    state.counters["ns_per_item"] = ns;
    if (is_ring) g_ring_ns[pattern] = ns;
    if (g_ring_ns.count(pattern)) state.counters["x_ring"] = ns / g_ring_ns[pattern];
}

// ------------------------------------------------------------ ready queues

constexpr size_t kReadyCapacity = 1024;  // OrchestratorOptions' default task ring
constexpr size_t kReadyTasks = 1 << 16;
constexpr size_t kReadyBatch = 16;

struct SpyreReady {
    spyre::orchestration::LockFreeReadyQueue q{kReadyCapacity, "bench"};
    void Push(ReadyTask t) { q.Push(t); }
    size_t Pop(std::vector<ReadyTask>& out) { return q.TryPopBatch(out, kReadyBatch); }
};

struct LockedReady {
    spyre::orchestration::LockedReadyQueue q{"bench"};
    void Push(ReadyTask t) { q.Push(t); }
    size_t Pop(std::vector<ReadyTask>& out) { return q.TryPopBatch(out, kReadyBatch); }
};

struct BoostReady {
    boost::lockfree::queue<ReadyTask, boost::lockfree::fixed_sized<true>> q{kReadyCapacity};
    void Push(ReadyTask t) {
        while (!q.push(t)) std::this_thread::yield();  // cannot happen below capacity in flight
    }
    size_t Pop(std::vector<ReadyTask>& out) {
        size_t n = 0;
        ReadyTask t;
        while (n < kReadyBatch && q.pop(t)) {
            out.push_back(t);
            ++n;
        }
        return n;
    }
};

struct MoodyReady {
    moodycamel::ConcurrentQueue<ReadyTask> q{kReadyCapacity};
    void Push(ReadyTask t) { q.enqueue(t); }
    size_t Pop(std::vector<ReadyTask>& out) {
        ReadyTask batch[kReadyBatch];
        const size_t n = q.try_dequeue_bulk(batch, kReadyBatch);
        out.insert(out.end(), batch, batch + n);
        return n;
    }
};

// One pusher keeps at most kReadyCapacity tasks in flight (as the task
// ring bounds the ready tasks); `workers` threads pop until all are taken.
// Every task id must come out exactly once.
template <typename Q>
void BM_Ready(benchmark::State& state, bool is_ring, int workers) {
    const std::string pattern = "ready/" + std::to_string(workers);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        Q q;
        std::atomic<size_t> taken{0};
        std::atomic<uint64_t> id_sum{0};
        std::vector<std::thread> threads;
        for (int w = 0; w < workers; ++w)
            threads.emplace_back([&] {
                std::vector<ReadyTask> out;
                uint64_t sum = 0;
                while (taken.load(std::memory_order_relaxed) < kReadyTasks) {
                    out.clear();
                    const size_t n = q.Pop(out);
                    if (n == 0) {
                        std::this_thread::yield();
                        continue;
                    }
                    for (const ReadyTask& t : out) sum += uint64_t(t.task_id);
                    taken.fetch_add(n, std::memory_order_acq_rel);
                }
                id_sum.fetch_add(sum);
            });
        for (size_t i = 0; i < kReadyTasks; ++i) {
            while (i - taken.load(std::memory_order_acquire) >= kReadyCapacity) std::this_thread::yield();
            q.Push(ReadyTask{int32_t(i), nullptr});
        }
        for (std::thread& t : threads) t.join();
        if (id_sum.load() != uint64_t(kReadyTasks) * (kReadyTasks - 1) / 2) state.SkipWithError("tasks lost or doubled");
    }
    Report(state, pattern, is_ring, kReadyTasks, t0);
}

// --------------------------------------------------------------- op queues

constexpr size_t kOpsPerProducer = 1 << 15;
constexpr int kProducers = 2;

struct SpyreOps {
    spyre::detail::OpQueue q;
    struct Producer {
        SpyreOps& self;
        void Push(QueuedOp&& op) { self.q.Push(std::span(&op, 1)); }
    };
    Producer MakeProducer() { return {*this}; }
    size_t Drain(std::deque<QueuedOp>& out) { return q.Drain(out); }
};

struct MutexOps {
    std::mutex mu;
    std::deque<QueuedOp> q;
    struct Producer {
        MutexOps& self;
        void Push(QueuedOp&& op) {
            std::lock_guard lock(self.mu);
            self.q.push_back(std::move(op));
        }
    };
    Producer MakeProducer() { return {*this}; }
    size_t Drain(std::deque<QueuedOp>& out) {
        std::lock_guard lock(mu);
        const size_t n = q.size();
        for (QueuedOp& op : q) out.push_back(std::move(op));
        q.clear();
        return n;
    }
};

struct MoodyOps {
    moodycamel::ConcurrentQueue<QueuedOp> q{spyre::detail::OpQueue::kDefaultCapacity};
    struct Producer {
        moodycamel::ProducerToken token;
        MoodyOps& self;
        void Push(QueuedOp&& op) { self.q.enqueue(token, std::move(op)); }
    };
    Producer MakeProducer() { return {moodycamel::ProducerToken(q), *this}; }
    size_t Drain(std::deque<QueuedOp>& out) {
        QueuedOp batch[64];
        size_t total = 0;
        for (size_t n; (n = q.try_dequeue_bulk(batch, 64)) != 0; total += n)
            for (size_t i = 0; i < n; ++i) out.push_back(std::move(batch[i]));
        return total;
    }
};

struct BoostOps {
    boost::lockfree::queue<QueuedOp*> q{spyre::detail::OpQueue::kDefaultCapacity};
    ~BoostOps() {
        QueuedOp* op;
        while (q.pop(op)) delete op;
    }
    struct Producer {
        BoostOps& self;
        void Push(QueuedOp&& op) { self.q.push(new QueuedOp(std::move(op))); }
    };
    Producer MakeProducer() { return {*this}; }
    size_t Drain(std::deque<QueuedOp>& out) {
        size_t n = 0;
        for (QueuedOp* op; q.pop(op); ++n) {
            out.push_back(std::move(*op));
            delete op;
        }
        return n;
    }
};

// kProducers threads enqueue single ops (a copy each, with a callback as a
// host callback carries); one consumer drains, as the scheduler does.
// Every producer's ops must come out in its order.
template <typename Q>
void BM_Ops(benchmark::State& state, bool is_ring) {
    constexpr size_t kTotal = kOpsPerProducer * kProducers;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        Q q;
        std::vector<std::thread> producers;
        for (int p = 0; p < kProducers; ++p)
            producers.emplace_back([&q, p] {
                auto producer = q.MakeProducer();
                for (size_t i = 0; i < kOpsPerProducer; ++i) {
                    QueuedOp op;
                    op.kind = spyre::detail::OpKind::HostCallback;
                    op.device_addr = uint64_t(p);
                    op.value = i;
                    op.callback = [] {};
                    producer.Push(std::move(op));
                }
            });
        std::deque<QueuedOp> out;
        std::vector<uint64_t> next(kProducers, 0);
        bool in_order = true;
        for (size_t got = 0; got < kTotal;) {
            const size_t n = q.Drain(out);
            if (n == 0) {
                std::this_thread::yield();
                continue;
            }
            for (const QueuedOp& op : out) in_order &= op.value == next[op.device_addr]++;
            out.clear();
            got += n;
        }
        for (std::thread& t : producers) t.join();
        if (!in_order) state.SkipWithError("a producer's ops came out of order");
    }
    Report(state, "op", is_ring, kTotal, t0);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    for (int workers : {1, 2}) {
        const std::string w = "/workers:" + std::to_string(workers);
        benchmark::RegisterBenchmark(("ready/spyre_ring" + w).c_str(), BM_Ready<SpyreReady>, true, workers)->UseRealTime();
        benchmark::RegisterBenchmark(("ready/boost_lockfree" + w).c_str(), BM_Ready<BoostReady>, false, workers)->UseRealTime();
        benchmark::RegisterBenchmark(("ready/moodycamel" + w).c_str(), BM_Ready<MoodyReady>, false, workers)->UseRealTime();
        benchmark::RegisterBenchmark(("ready/mutex" + w).c_str(), BM_Ready<LockedReady>, false, workers)->UseRealTime();
    }
    benchmark::RegisterBenchmark("op/spyre_ring", BM_Ops<SpyreOps>, true)->UseRealTime();
    benchmark::RegisterBenchmark("op/moodycamel", BM_Ops<MoodyOps>, false)->UseRealTime();
    benchmark::RegisterBenchmark("op/boost_lockfree_boxed", BM_Ops<BoostOps>, false)->UseRealTime();
    benchmark::RegisterBenchmark("op/mutex", BM_Ops<MutexOps>, false)->UseRealTime();
    return spyre::bench::RunBenchmarks("ring_bench", std::chrono::seconds(120));
}
