// SPDX-License-Identifier: Apache-2.0
// Internal: the scheduler. Each stream's ops enter through Queue (the one
// way in: FlexStream, events, SpyreStream and Scheduler::QueueOperation all
// end there) and are issued in FIFO order per stream: ring work batched under
// one doorbell (RingBatcher), in turns the policy hands out (TurnPolicy),
// copies on the DMA engine (DmaDispatch), host callbacks on the scheduler
// thread; completions retire in ring order (RingRecords).
//
// Who drives. The state below the drive lock is used by whoever holds it:
// the scheduler thread, or a host thread that finds it free (caller-runs).
// A thread that enqueues while the scheduler thread sleeps submits its ring
// work itself, with no wake-up (a lone ring op on an idle stream, nothing
// else queued: straight into the ring, SubmitAlone); a thread waiting for
// its stream reaps the ring itself (spinning in poll and adaptive mode, asleep on the ring's
// completion interrupt in blocking mode), and the scheduler thread keeps out
// of its way. Host work (callbacks, DMA copies) is the scheduler thread's
// alone: a caller that finds some wakes it. Under contention (the lock
// taken) a caller only queues and the scheduler thread does the rest.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/driver/command_ring.hpp"
#include "spyre/memory/allocator.hpp"
#include "spyre/stream/scheduler.hpp"
#include "stream/completion.hpp"
#include "stream/dma_dispatch.hpp"
#include "stream/ring_batcher.hpp"
#include "stream/turn_policy.hpp"

namespace spyre {
class DeviceCore;
class TaskPort;
}

namespace spyre::detail {

class SchedulerCore {
public:
    // SchedulerOptions::spin at most (InvalidArgument past it).
    static constexpr std::chrono::nanoseconds kMaxSpin{std::chrono::seconds(1)};

    SchedulerCore(DeviceCore& device, const SchedulerOptions& options);
    ~SchedulerCore();

    void Start();
    void Stop();
    // Whether the calling thread is this scheduler's own (Stop would join it).
    bool OnItsThread() const noexcept { return thread_.get_id() == std::this_thread::get_id(); }
    const SchedulerOptions& options() const { return options_; }
    uint64_t memory_size() const;  // the function's device memory, bytes

    StreamState* CreateStream(int priority);
    // Shared: a caller may still hold a stream the scheduler has let go.
    std::shared_ptr<StreamState> Find(int stream_index);
    void Retire(StreamState* s);
    // The registered streams with ops not completed yet: what a device-wide
    // wait and a deferred free wait for (a look at each stream, no copy of
    // the idle ones).
    std::vector<std::shared_ptr<StreamState>> StreamsWithWork();

    // The one way in: queues `ops` on `s` in order and returns. Several ops
    // form a group: LINKed in the ring, never split between turns, so a
    // failure cancels the rest of it. Throws the stream's sticky error
    // (a lone cleanup callback is still taken) or DeviceLost.
    void Queue(StreamState& s, std::span<QueuedOp> ops);

    // Blocks until counter >= target (the caller reaps when it can), or
    // `until` has come; whether the counter got there.
    bool WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, EventCount& word,
                   std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
    // Reaps what the device has finished, if no one else is driving
    // (Query and friends: work a caller submitted completes without a wait).
    void Poke();
    // A DMA copy finished (called from the DMA engine's threads).
    void DmaDone();

    // The task ports of the device's orchestration runtimes
    // (device/task_port.hpp). When no caller drives one that has tasks in
    // flight, this thread does (TaskPort::Backstop), between its own work.
    // Detach waits for a Backstop under way on `port` to end.
    void AttachPort(TaskPort& port);
    void DetachPort(TaskPort& port);
    // A port was left with tasks in flight and nobody driving: wakes the
    // thread if it sleeps for longer than a tick (it looks every tick
    // otherwise).
    void PortUnattended() noexcept;
    // The same for ports left by a caller that owed the wake
    // (TaskPort::CallerDrivesScope): wakes only if one is still unattended.
    void PortsMayBeUnattended() noexcept;
    // Calls of PortUnattended, and of PortsMayBeUnattended that found one (tests).
    uint64_t port_wake_requests() const noexcept { return port_wake_requests_.load(std::memory_order_relaxed); }
    // In a sleep longer than a tick, which only PortUnattended ends early (tests).
    bool sleeping_long() const noexcept { return sleeping_long_.load(std::memory_order_seq_cst); }
    // A port's counts (SchedulerStats::tasks_*), from any port's drive lock.
    void CountTasks(uint64_t sent, uint64_t doorbells, uint64_t reaped) noexcept;
    void CountTaskWaits(uint64_t sleeps, uint64_t yields) noexcept;

    bool lost() const { return lost_.load(std::memory_order_acquire); }
    const Error& lost_error() const { return *lost_error_; }
    SchedulerStats Stats() const;

    // On this thread (a host callback, which may not wait): gives `blocks`
    // back to the allocator once every stream has completed what it has
    // enqueued so far, as a free elsewhere waits for (cudaFree's rule).
    // Freeing at once let a copy still queued on another stream land in
    // the next owner's memory. The drive lock is held (the callback runs
    // inside a pass).
    void FreeAfterStreams(std::span<const DeviceAllocation> blocks);

private:
    void Run();
    // One pass over the work; the drive lock is held. Host work only on the thread.
    bool Pump(bool on_thread);
    // Pump on a caller's thread (the lock held): a failure of the device
    // faults every stream, as on the thread.
    void CallerPump();
    // A waiter's pass once the ring has completions (the lock held): reaps
    // them, and pumps only if anything else is left to do.
    void CallerReap();
    // Nothing queued, in the ring or on the DMA engine (the lock held).
    bool Idle() const;
    // busy_ as of this pass (the lock held); written only when it changes,
    // a seq_cst store being a full fence.
    void SetBusy(bool busy) {
        if (busy != busy_.load(std::memory_order_relaxed)) busy_.store(busy, std::memory_order_seq_cst);
    }
    bool HostWorkPending() const;
    bool WorkArrived() const;
    bool RingReady() const { return !records_.empty() && ring_->CompletionsReady(); }
    // RingReady without the lock, for a waiter deciding whether to take it:
    // the next completion's position as the lock holder last left it
    // (ring_watch_), and that CQE's phase. Stale at worst: a false answer
    // delays the reap until the waiter's next full pass.
    bool RingMayBeReady() const {
        const uint64_t pos = ring_watch_.load(std::memory_order_relaxed);
        return pos != kNoRingWatch && ring_->CompletionPosted(uint32_t(pos));
    }
    void UpdateRingWatch() {  // the lock held
        ring_watch_.store(records_.empty() ? kNoRingWatch : ring_->cq_head(), std::memory_order_relaxed);
    }
    void Wake();
    void WakeIfAsleep();
    void IdleWait(std::unique_lock<std::mutex>& lock);
    void SleepUnlocked(std::unique_lock<std::mutex>& lock, uint32_t seen, std::chrono::nanoseconds timeout);
    // Sleeps on the ring's completion interrupt or a wake-up (`seen` is
    // wake_'s key as read before the last look for work), with the drive lock held.
    void SleepOnRing(uint32_t seen, std::chrono::nanoseconds timeout);
    // Whether a port has tasks in flight and no caller waits for them;
    // `when_taken` when the ports' lock is taken (being driven, or one
    // comes or goes).
    bool PortsUnattended(bool when_taken = false);
    // The drive lock let go (as SleepUnlocked): the unattended ports driven
    // until work of this thread's own comes, or, when every one had a
    // caller drive it within the last tick, a tick's sleep.
    void ServePorts(std::unique_lock<std::mutex>& lock);
    // The drive lock held: one pass for each unattended port (the ring has
    // this thread's work in flight).
    void PassPorts();
    // The stream whose LINKed chain went down in part and must go on before any other.
    const StreamState* SplitChainStream();

    // The streams with work: arrivals taken in, streams retired and idle
    // dropped from the registry.
    void RefreshStreams();
    // A producer pushed to `s`: lists it for the scheduler's passes unless
    // it is listed already (any thread, no lock).
    void Announce(StreamState& s) noexcept;
    // The drive lock held: `s` into active_ (a turn submitted for it).
    void Activate(StreamState& s);
    // The drive lock held: the listed streams announced since the last look, into active_.
    void TakeArrivals();
    // The drive lock held: idle streams leave active_ (a push lists them again).
    void DropIdleStreams();
public:
    // Streams the last pass left listed (for tests: idle ones are not walked).
    size_t ListedStreams() const noexcept { return listed_count_.load(std::memory_order_relaxed); }
private:
    std::atomic<size_t> listed_count_{0};
    bool PullIncoming();
    bool ReapRing();
    bool PollDma();
    // Drops faulted streams' work and settles event records and waits
    // (SettleEventOnHost) until nothing moves.
    bool SettleStreams();
    bool IssueHostWork(bool on_thread);
    bool RunCallback(StreamState& s);
    // Frees the deferred blocks whose streams got there (all of them when
    // `all`: nothing runs any more). The drive lock is held.
    void FreeDeferred(bool all = false);
    bool SubmitRing();
    // Whether the next turn of `s`, which has a turn in the ring, may go in
    // behind it now, so the device starts it with no host round trip in
    // between. Only with a ring stream (the device cancels it should the turn
    // ahead fail), at most kTurnsInRing deep, and only right behind the
    // stream's own CBs: behind another stream's work its event records would
    // wait for that work.
    bool MayQueueBehind(const StreamState& s) const;
    static constexpr uint32_t kTurnsInRing = 2;
    // Queue's short way for a lone ring op on an idle stream when nothing
    // else waits: its turn straight into the ring. False (nothing done) when
    // the whole pass is needed; the op is then still the caller's.
    bool SubmitAlone(StreamState& s, QueuedOp& op);
    // Sends batch_ (batch_cbs CBs) down with one doorbell.
    void RingDoorbell(size_t batch_cbs);
    void FaultAll(const Error& error);
    // The ring or the function threw: the device is gone or halted. Logs it once, then FaultAll.
    void DeviceFailed(const Error& error);

    DeviceCore& device_;
    const SchedulerOptions options_;

    std::mutex streams_mu_;
    std::vector<std::shared_ptr<StreamState>> streams_;  // registered, by creation
    std::atomic<uint64_t> streams_version_{0};
    int next_index_ = 0;
    uint64_t ring_streams_free_ = 0;  // bit n: ring stream n is no stream's (under streams_mu_)

    // Under drive_mu_.
    std::mutex drive_mu_;
    std::optional<driver::CommandRing> ring_;
    TurnPolicy policy_;
    RingBatcher batcher_;
    RingRecords records_;
    DmaDispatch dma_;
    // The streams with work, or with work until lately (listed): what a
    // pass walks. Under drive_mu_.
    std::vector<StreamState*> active_;
    uint64_t active_version_ = ~0ull;
    // Streams listed by producers, not yet in active_: a lock-free stack
    // (each stream on it at most once: only the push that lists it adds it).
    std::atomic<StreamState*> arrivals_{nullptr};
    std::vector<spyre_cb> batch_;
    std::vector<driver::Completion> completions_;
    struct DeferredFree {
        std::vector<DeviceAllocation> blocks;
        std::vector<std::pair<std::shared_ptr<StreamState>, uint64_t>> streams;  // each stream's enqueued count then
    };
    std::vector<DeferredFree> deferred_frees_;
    uint64_t dma_seen_ = 0;
    uint32_t trace_ring_track_ = 0;  // the ring's track in the running trace
    uint64_t trace_recording_ = 0;

    EventCount wake_;  // the scheduler thread and ring sleepers wait on it
    std::atomic<bool> thread_asleep_{false};  // the scheduler thread sleeps without the lock
    std::atomic<uint32_t> drivers_{0};       // callers reaping in a wait (the thread keeps out)
    std::atomic<bool> busy_{false};          // work queued or in flight after the last pass
    static constexpr uint64_t kNoRingWatch = ~0ull;
    std::atomic<uint64_t> ring_watch_{kNoRingWatch};  // RingMayBeReady: the next completion's position
    std::atomic<uint64_t> dma_done_{0};
    // A stream copy of this scheduler is in flight: only then does a DMA
    // completion wake the thread (copies made straight on the DMA engine,
    // as the host level's are, would wake it for nothing). Set before a
    // copy starts, cleared by the thread once none is left.
    std::atomic<bool> awaits_dma_{false};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> lost_{false};

    std::mutex ports_mu_;  // ports_; held through a Backstop (DetachPort waits for it)
    std::vector<TaskPort*> ports_;
    std::atomic<uint32_t> port_count_{0};
    std::atomic<uint64_t> port_wake_requests_{0};
    std::atomic<bool> sleeping_long_{false};  // a sleep longer than a tick (PortUnattended wakes it)
    std::optional<Error> lost_error_;

    // Written only by the drive lock's holder, read by anyone: a relaxed
    // load and store per update, no lock (a submit took the stats mutex).
    struct Counters {
        std::atomic<uint64_t> ring_cbs{0}, doorbells{0}, inline_copies{0}, dma_copies{0}, callbacks{0}, dropped{0},
            host_events{0};
        // Several ports (their own drive locks) add to these: atomic adds.
        std::atomic<uint64_t> tasks_sent{0}, task_doorbells{0}, tasks_reaped{0}, task_backstops{0}, task_sleeps{0},
            task_yields{0};
        static void Add(std::atomic<uint64_t>& c, uint64_t n) {
            c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
        }
    };
    Counters stats_;

    std::thread thread_;
};

}  // namespace spyre::detail
