// SPDX-License-Identifier: Apache-2.0
// A task of a host-level run (a chip task or a SubWorker) and the run it
// belongs to, as the dispatcher keeps them. Every field changes under the
// dispatcher's lock only, but for a task's parked outcome (written by the
// thread that ran it, before it parks the task) and a run's wake-up words.
// A task lives from its submission until it finished well (then only its
// TaskRecord stays), or, failed or skipped, until its run ends (the region
// tracker keeps it to skip later readers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dependency/fan_out.hpp"
#include "dependency/run_cost.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"

namespace spyre::host {

struct RunState;
class Dispatcher;
struct HostTask;

// What a running task lent of its bytes to tasks of other Workers (their
// claims count as its own, StorageClaims): it ends only once those tasks
// finished, so its Worker's later tasks over the bytes, ordered after it,
// come after them too, whether or not it waited for the runs it handed
// them to. A task of its own Worker handed them needs none: that Worker
// orders it.
struct Lending {
    const HostTask* holder;
    const Dispatcher* dispatcher;  // the holder's
    std::atomic<uint64_t> out{0};  // tasks holding a lent argument, per argument
    EventCount returned;

    Lending(const HostTask* h, const Dispatcher* d) : holder(h), dispatcher(d) {}
    void Lend() noexcept { out.fetch_add(1, std::memory_order_relaxed); }
    void GiveBack() noexcept {
        if (out.fetch_sub(1, std::memory_order_seq_cst) == 1) returned.NotifyAfterSeqCstUpdate();
    }
    void WaitForAll() noexcept {
        auto back = [&] { return out.load(std::memory_order_seq_cst) == 0; };
        while (!back()) returned.SleepUnless(back, std::chrono::seconds(1));
    }
};

struct HostTask {
    enum class State : uint8_t { Pending, Queued, Running, Done, Failed, Skipped };

    // Set by the submitter (HostGraph), read by the dispatcher. A task is
    // reused once finished (Dispatcher::NewTask): each thread resets only
    // its own half, so the other half's cache lines stay on the core that
    // writes them instead of moving to the submitter's core and back for
    // every task.
    uint64_t id = 0;
    std::string name;
    Level level = Level::Chip;
    std::string function;         // chip function or SubWorker name
    SubWorkerFn fn;               // SubWorker body (resolved when submitted)
    const ChipRegistry::Entry* chip = nullptr;  // chip function (resolved when submitted)
    std::vector<TensorArg> args;
    // Per argument, whose claim it counts on its storage (StorageClaims):
    // the dispatcher, or the Worker of a task this one runs inside that
    // holds the same bytes (a task handing them to another Worker's run).
    // Set when submitted, dropped when finished.
    struct Claim {
        const void* owner;
        // When `owner` is another Worker's: the Lending of its task that
        // claimed the bytes, which counts this argument until this task
        // finished. Null otherwise.
        std::shared_ptr<Lending> borrowed;
    };
    std::vector<Claim> claims;
    std::optional<size_t> pinned;  // ChipOptions::device
    uint64_t submitted = 0;        // a chip task's HostBytesTick when submitted
    RunState* run = nullptr;
    // Submitted, or how it ended, parked in the dispatcher's inboxes by the
    // submitter or by the thread that ran it, until a holder of the
    // dispatcher's lock files it or applies it.
    HostTask* inbox_next = nullptr;
    // The submitter's half as a new task's (NewTask), but for `fn` and
    // `args`: Free emptied them when the task finished.
    void ResetSubmitted() {
        id = 0;
        name.clear();
        level = Level::Chip;
        function.clear();
        chip = nullptr;
        pinned.reset();
        submitted = 0;
        run = nullptr;
        inbox_next = nullptr;
    }

    // The dispatcher's half, under its lock or by the thread running the task.
    alignas(64) State state = State::Pending;
    // What it lent while it ran (see Lending), made by its own thread; null: nothing.
    std::shared_ptr<Lending> lent;
    // Producers not finished yet, and the failure this task is skipped for
    // (its own once it failed). The root is a value, not the failed task:
    // that may belong to another run, gone by then.
    dependency::Gate gate;
    std::vector<HostTask*> consumers;
    // The producers its reads met: a failure passes along those edges only
    // (dependency/fan_out.hpp); it only follows the others.
    std::vector<const HostTask*> reads_from;
    size_t device = SIZE_MAX;            // where a chip task was placed
    ChipCall call;                       // what its device thread runs, set when placed
    // How long its chip function's local runs take (the dispatcher's, one
    // per function), recorded by the thread that ran it; null: not timed
    // (a SubWorker, a remote device).
    dependency::RunCost* cost = nullptr;

    // While a trace records: this task's span once drawn (track 0: none),
    // and its producers' span ends, each the tail of an arrow into it.
    struct TraceEnd {
        uint32_t track = 0;
        uint64_t end_ns = 0;
        uint64_t recording = 0;  // a track id means nothing in another recording
    };
    TraceEnd trace;
    std::vector<TraceEnd> trace_in;

    std::unique_ptr<TaskFailureInfo> inbox_failure;  // how it ended, parked: null when it succeeded
    ChipCallStats inbox_moved;
    // When it ran, on the device clock (DeviceClockNs): a chip task from its
    // device's first task start to its last task end, a SubWorker from the
    // host clock around its call. 0: it never ran.
    uint64_t start_ns = 0, end_ns = 0;
    // The dispatcher's half as a new task's, keeping the vectors' capacity
    // (Dispatcher::Free, under the lock).
    void ResetRan() {
        state = State::Pending;
        lent.reset();
        gate = {};
        consumers.clear();
        reads_from.clear();
        device = SIZE_MAX;
        cost = nullptr;
        std::vector<ChipArg> call_args = std::move(call.args);
        call_args.clear();
        call = {};
        call.args = std::move(call_args);
        trace = {};
        trace_in.clear();
        inbox_failure.reset();
        inbox_moved = {};
        start_ns = end_ns = 0;
    }

    bool Finished() const { return state == State::Done || state == State::Failed || state == State::Skipped; }
};

// What a run remembers of a finished task for its report: TaskRecord
// without the strings it can rebuild (the device's name from its index).
struct FinishedTask {
    std::string name;
    uint64_t id = 0;
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t device = UINT32_MAX;  // UINT32_MAX: a SubWorker, or never placed
    Level level = Level::Chip;
    TaskState state = TaskState::Done;
};

// One run: its tasks in flight, what it returns, and how it ended. It ends
// once its orchestration function returned (`sealed`) and every task it
// submitted finished.
struct RunState {
    std::string name;
    uint64_t serial = 0;  // unique in the process (ChipCall::run)
    std::vector<HostTensor> outputs;
    size_t unfinished = 0;  // submitted, not finished
    uint64_t submitted = 0;
    bool sealed = false;
    std::vector<HostTask*> kept;  // failed and skipped tasks, freed when the run ends
    // The roots (HostTask::gate) its failed tasks made: tasks of other runs
    // skipped for one stay in the hazard map until this run ends
    // (Dispatcher::EndRun).
    std::vector<const TaskFailureInfo*> roots;
    std::vector<FinishedTask> finished;
    std::vector<TaskFailureInfo> failures;
    bool done = false;
    bool watched = false;  // a waiter reports progress: announce every finished task
    bool window_waiter = false;  // the submitter sleeps until a task finishes
    std::atomic<bool> done_flag{false};  // `done`, readable without the lock
    // The window, kept without the lock: tasks submitted (`entered`, counted
    // at Submit, before they are filed) less tasks finished (`left`). Each
    // count has one writing side and a cache line of its own, and the
    // submitter reads `left` again only when its last look (`left_seen`)
    // says the window is full: one count both sides wrote moved between
    // their cores on every task (host_bench's dispatch).
    alignas(64) std::atomic<uint64_t> entered{0};  // by the submitter
    std::atomic<uint64_t> left_seen{0};            // by the submitter
    size_t window = 0;                             // DistributedConfig::max_tasks_in_flight
    alignas(64) std::atomic<uint64_t> left{0};     // by Finish, under the lock
    size_t InWindow() const noexcept {
        return size_t(entered.load(std::memory_order_seq_cst) - left.load(std::memory_order_seq_cst));
    }
    // Notified when the run ends, when a task finishes while watched, and
    // when one finishes while the submitter waits for room.
    alignas(64) EventCount wake;
};

}  // namespace spyre::host
