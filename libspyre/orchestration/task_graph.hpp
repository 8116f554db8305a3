// SPDX-License-Identifier: Apache-2.0
// TaskGraph: seed 004's runtime over one range of the function's mapped memory.
// It owns the TaskRing, HeapRing, hazard map, ScopeStack, BufferTracker and
// one ReadyQueue per executor, and implements submit (slot, dependencies,
// outputs, ready) and complete (fan-in, consumers ready, fan-out refcount,
// CONSUMED, reclaim), back-pressure and failure propagation.
//
// Threads: one lock (mu_) guards the bookkeeping; submitters are serialised
// by submit_mu_ (the seed has one orchestration thread), except while one
// waits for room in the rings: it lets go of both locks, with nothing of
// its submission taken, so a running task's kernel may submit meanwhile. Executors report completions from
// their threads through OnTaskComplete without waiting for the lock: a
// completion that finds it held is parked in the inbox (ParkingInbox), which
// every lock holder applies when it takes the lock and looks at again
// after it releases it. docs/orchestration.md has the lifecycle and why.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dependency/region_map.hpp"
#include "spyre/common/adaptive_mutex.hpp"
#include "orchestration/buffer_tracker.hpp"
#include "orchestration/executor.hpp"
#include "orchestration/heap_ring.hpp"
#include "orchestration/program_slots.hpp"
#include "orchestration/ready_queue.hpp"
#include "orchestration/scope_stack.hpp"
#include "orchestration/task_ring.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/common/inbox.hpp"
#include "spyre/common/progress.hpp"
#include "spyre/error.hpp"
#include "spyre/orchestration/orchestrator.hpp"
#include "spyre/pto.h"

namespace spyre::orchestration {

struct TaskGraphOptions {
    int32_t task_ring_size = 1024;
    // The function's memory as this process maps it: every buffer address
    // must lie inside; device address = host address - memory.
    uint8_t* memory = nullptr;
    uint64_t memory_size = 0;
    // The heap ring: [memory + heap_offset, + heap_size).
    uint64_t heap_offset = 0;
    uint64_t heap_size = 0;
    unsigned host_threads = 0;  // 0: one per hardware thread
    ReadyQueueKind ready_queues = ReadyQueueKind::LockFree;
    // A host task that is ready when it is submitted, of a kernel whose
    // runs average under cheap_host_task_ns, runs on the submitting thread
    // (OrchestratorOptions::run_cheap_host_tasks_here).
    bool run_cheap_host_tasks_here = true;
    uint32_t cheap_host_task_ns = RunCost::kDefaultCheapNs;
    std::string device;         // for messages
    // Where the task sequence starts (TaskRing): tests start it just before
    // the task ids wrap; 0 otherwise.
    int64_t first_task_seq = 0;
    // How many submissions before a task id comes round again (TaskRing):
    // tests make it short; 0 otherwise.
    int32_t task_id_period = 0;
};

struct TaskGraphStats {
    int32_t task_ring_size = 0;
    int32_t live_tasks = 0;
    uint64_t heap_size = 0;
    uint64_t heap_used = 0;
    size_t live_buffers = 0;
    size_t tensor_map_entries = 0;
    uint64_t submitted = 0;
    uint64_t completed = 0;
    int32_t scope_depth = 0;
};

class TaskGraph final : public CompletionSink {
public:
    explicit TaskGraph(TaskGraphOptions options);
    ~TaskGraph() override;
    TaskGraph(const TaskGraph&) = delete;
    TaskGraph& operator=(const TaskGraph&) = delete;

    // kernel_id -> implementation; a kernel id is registered once.
    void RegisterKernel(KernelEntry kernel);
    // A device kernel: the program at `program_address` (InvalidArgument
    // outside the function's memory), its argument slots read from it so
    // every task of it is checked against them at submission.
    void RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address);
    // Orchestrator::KernelOperandBytes.
    std::vector<uint64_t> OperandBytes(int32_t kernel_id) const;
    // Orchestrator::KernelOperandDTypes.
    std::vector<uint8_t> OperandDTypes(int32_t kernel_id) const;
    // Serves `worker_type` with `executor` from now on (no task may be in flight).
    void SetExecutor(int32_t worker_type, std::shared_ptr<Executor> executor);

    // The seed's six calls (C++ spelling; errors are spyre::Error).
    uint8_t* Alloc(uint64_t size);
    void Free(const void* buffer);
    // Memory of [at, at + bytes) that is freed outside the heap ring (a
    // pto_device_malloc buffer): what failed tasks left poisoned there goes,
    // so a task reading the next allocation at that address is not skipped.
    void ForgetFailuresIn(const void* at, uint64_t bytes);
    // Entries of the hazard map, stale ones included (its tests: what a
    // run keeps there stays bounded).
    size_t hazard_entries();
    // Returns the calling thread's depth with the new scope open, and in
    // `serial` (when not null) which scope of the runtime it is.
    int32_t ScopeBegin(uint32_t* serial = nullptr);
    // `depth`, `serial`: the scope that began at that depth with that serial
    // (Orchestrator::Scope), checked under the same lock: 0 when it ended;
    // the number of inner scopes still open when it cannot end yet (nothing
    // ended); throws InvalidArgument when it was ended already, even when
    // another scope was begun at its depth since. -1: the innermost scope.
    // `once_inner_end` (a Scope's destructor, which cannot report): a scope
    // that cannot end yet ends as soon as its inner scopes have, instead
    // of staying open with nobody left to end it.
    int32_t ScopeEnd(int32_t depth = -1, uint32_t serial = 0, bool once_inner_end = false);
    // Scopes at or below `depth` are not the calling thread's to end
    // (pto_run keeps an orchestration function inside its own); returns
    // that thread's previous floor.
    int32_t SetScopeFloor(int32_t depth);
    // Open scopes are one thread's at a time: their depth for the calling
    // thread (0 while none or another thread's are open).
    int32_t ScopeDepthOfThisThread() const;
    int32_t Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params);
    // Finishes an EXTERNAL task (status 0: success, else its error code).
    void Complete(int32_t task_id, uint32_t status);

    uint8_t* TaskOutput(int32_t task_id, int32_t index);
    // The calling thread is exiting: lets go of its depth-0 holds (see
    // holds_) and ends the scopes it left open (their failures stay for
    // WaitAll), which nobody else could end.
    void ThreadExiting();
    // The runtime is being destroyed (its handle takes no new call): calls
    // waiting for room in its rings fail now. What they wait for may come
    // only through the destroying thread (its pto_free, its next task
    // reading a held output), which now waits for them.
    void Closing();
    // Waits for every task submitted; `progress` (if set) hears tasks
    // completed of those submitted since the last WaitAll.
    void WaitAll(const ProgressCallback& progress = {});
    // Waits until no task is in flight or `until`; whether none is. Reports
    // nothing (WaitAll then does, at once), and refuses what WaitAll does.
    bool WaitAllUntil(std::chrono::steady_clock::time_point until);
    // For a runtime being destroyed (no call can reach it any more): waits
    // for the tasks that will finish on their own, and returns how many
    // never will (EXTERNAL tasks nobody finished, and the tasks behind them).
    int64_t WaitForRunningTasks();
    // Failed and skipped tasks not yet reported by WaitAll, each with its
    // root (TaskFailureInfo::root_*).
    std::vector<TaskFailureInfo> Failures() const;

    uint64_t DeviceAddress(const void* p, uint64_t size = 1) const;
    uint8_t* HostAddress(uint64_t device_address, uint64_t size) const;
    // InvalidArgument naming `call` when [device_address, + size) overlaps
    // the device program of a registered kernel: pto_copy_in there broke
    // every later task of it, and so did a free of the buffer it lay in
    // (`freeing`: the next owner's bytes went there).
    void CheckNotAProgram(uint64_t device_address, uint64_t size, const char* call, bool freeing = false);
    // Orchestrator::ConfineTasksTo.
    void ConfineTasksTo(std::optional<std::vector<Orchestrator::TaskRegion>> regions);  // nullopt: anywhere
    // Where [p, p + size) lies among the confined regions: in a writable
    // one, only in read-only ones, or outside them all.
    enum class Confinement { Writable, ReadOnly, Outside };
    Confinement ConfinedAs(const uint8_t* p, uint64_t size) const noexcept;
    // pto_copy_in (`writes`) and pto_copy_out of [at, at + size) under
    // ConfineTasksTo: held to the rules of a task parameter over those
    // bytes (InvalidArgument outside the regions, or writing a read-only one).
    void CheckCopyConfined(const void* at, uint64_t size, bool writes, const char* call);
    // Before pto_copy_in (`writes`) or pto_copy_out of [at, at + size):
    // waits for the calling thread's tasks in flight the copy must follow,
    // as a task over those bytes would (a copy in follows their readers and
    // writers, a copy out their writers). Busy (EDEADLK) when only EXTERNAL
    // tasks could end the wait. From inside a task of this runtime it does
    // not wait: the task would wait for itself.
    void WaitForTasksOver(const void* at, uint64_t size, bool writes, const char* call);
    // InvalidArgument naming `what` when [p, p + size) is outside the
    // confined regions, or `writes` one that is read-only.
    void CheckConfined(const uint8_t* p, uint64_t size, bool writes, const std::string& what) const;
    uint64_t memory_size() const noexcept { return options_.memory_size; }
    TaskState State(int32_t task_id) const;  // Consumed once reclaimed
    TaskGraphStats Stats() const;
    int32_t task_ring_size() const noexcept { return options_.task_ring_size; }

    void OnTaskComplete(int32_t task_id, uint32_t status, const TaskTiming* timing = nullptr) override;
    void OnTasksComplete(std::span<const Done> done) override;
    void OnDeviceLost(const std::string& why) override;

    // What a thread that exits lets go of (its depth-0 hold), through a
    // handle that outlives the graph.
    struct HoldAnchor;

private:
    // The kernel's device program's slot uses; NotFound for a kernel not registered.
    std::vector<SlotUse> SlotUses(int32_t kernel_id) const;
    // mu_ held; the inbox is applied when it is taken and looked at again
    // after it is released, so nothing parked there is left behind.
    class Lock {
    public:
        explicit Lock(const TaskGraph& graph) : graph_(const_cast<TaskGraph&>(graph)) { lock(); }
        ~Lock() {
            if (held_) unlock();
        }
        Lock(const Lock&) = delete;
        Lock& operator=(const Lock&) = delete;
        void lock() {
            graph_.mu_.lock();
            held_ = true;
            try {
                graph_.ApplyInbox();
            } catch (...) {  // a constructor that throws has no destructor to unlock
                graph_.mu_.unlock();
                held_ = false;
                throw;
            }
        }
        void unlock() {
            graph_.mu_.unlock();
            held_ = false;
            graph_.ApplyInboxAfterUnlock();  // and kicks
        }

    private:
        TaskGraph& graph_;
        bool held_ = false;
    };
    void ApplyInbox();             // mu_ held: completes every parked task
    void Park(TaskDescriptor& t, uint32_t status) noexcept {
        t.inbox_status = status;
        inbox_.Push(t);
    }
    void ApplyInboxAfterUnlock();  // mu_ free: applies what was parked, unless another holder will
    // mu_ free: kicks the driven executors if tasks were pushed to them.
    void KickAfterUnlock() const noexcept {
        if (kick_.load(std::memory_order_relaxed) && kick_.exchange(false, std::memory_order_acq_rel)) KickExecutors();
    }
    void KickExecutors() const noexcept;

    struct Route {
        std::shared_ptr<Executor> executor;
        ReadyQueue* queue = nullptr;
        bool driven = false;  // executor->driven(): kicked after a push
        bool orders_after = false;  // executor->OrdersAfterProducers()
    };
    const Route& RouteFor(int32_t worker_type, const KernelEntry& kernel) const;
    [[noreturn]] void Fail(ErrorKind kind, const std::string& message, int sys_errno = 0) const;
    bool InMemory(const uint8_t* p, uint64_t size) const noexcept;
    [[noreturn]] void FailOutside(const uint8_t* p, uint64_t size, const std::string& what) const;
    std::string Describe(int32_t task_id) const;
    // Not yet consumed: a producer a new task can wait for.
    bool Unconsumed(int32_t task_id) const;
    // Whether the hazard map's entry of `task_id` still counts: unconsumed,
    // or a failed writer kept for its poison.
    bool Alive(int32_t task_id) const;
    // What a stalled submitter waits for.
    struct StallNeed {
        int32_t slots = 0;
        uint64_t bytes = 0;
        bool behind_scopes = false;  // held back for another thread's scopes (RoomKeptForAnotherThreadsScopes)
        std::chrono::steady_clock::time_point since{};  // when the submission began to wait ({}: not known)
    };
    // Waits until `attempt` succeeds; throws what `stuck` builds once no
    // running task can change anything. Each wait (WaitForRoom) releases
    // both locks: the submitter's too, so a kernel of a running task may
    // submit meanwhile (a stalled submitter that kept it made such a
    // kernel, and so the ring, wait for good).
    template <typename Attempt, typename Stuck>
    auto Stall(std::unique_lock<std::mutex>& submitting, Lock& lock, StallNeed need, Attempt&& attempt, Stuck&& stuck);
    // One wait of a submitter that found no room for `need`: lets go of what
    // it can, throws OutOfMemory (EDEADLK, what `stuck` builds) when only
    // this caller could free it, or sleeps with both locks released until
    // room may have come. The caller tries again.
    template <typename Stuck>
    void WaitForRoom(std::unique_lock<std::mutex>& submitting, Lock& lock, StallNeed need, Stuck&& stuck);
    // Submit's work under both locks: the task's id, or nullopt with `need`
    // set when the rings have no room for it (nothing taken).
    std::optional<int32_t> TrySubmit(std::unique_lock<std::mutex>& submitting, Lock& lock, int32_t kernel_id,
                                     int32_t worker_type, std::span<const TaskParam> params, StallNeed& need);
    std::string TaskRingStuck() const;
    const char* NextToTheSubmittingKernel(int64_t id) const;
    struct Held;                                // a depth-0 hold (holds_)
    const Held* HoldOf(int32_t task_id) const;  // a depth-0 hold of it, if a thread holds it
    bool HeldByThisThread(int32_t task_id) const;
    bool ScopesHold(const TaskDescriptor& t) const;  // whether an open scope holds `t`
    const char* Holder(const TaskDescriptor& t) const;  // who holds `t`, for a message
    // The thread other than the calling one whose depth-0 hold keeps task
    // `id` live, if any (`only_by_the_hold`: when nothing else keeps it,
    // its consumers done). Of the ring's oldest task, or the owner of the
    // heap's oldest block: both rings are reused in order, so nothing
    // behind it comes back before that thread lets go, which its next task
    // that reads the output does. That task's room is kept for it.
    std::optional<std::thread::id> HeldByAnotherThread(std::optional<int32_t> id, bool only_by_the_hold) const;
    std::optional<int32_t> RingTail() const;        // the ring's oldest task, if any
    std::optional<int32_t> HeapOldestTask() const;  // the task owning the heap's oldest block, if a task does
    // Whether this thread's submission would take the ring's last slot, or
    // the heap room for `bytes` of implicit outputs, kept for another
    // thread's hold (its next task's: a block the size of the held one).
    bool SlotKeptForAHold() const;
    bool HeapRoomKeptForAHold(uint64_t bytes) const;
    // Whether this thread's submission (of `bytes` of implicit outputs)
    // would take the half of the task ring or of the heap ring kept for the
    // scopes another thread has open.
    bool RoomKeptForAnotherThreadsScopes(uint64_t bytes) const;
    // Whether `task_id` is a task whose kernel the calling thread is in.
    bool RunsOnThisThread(int64_t task_id) const;
    // Whether what a stalled submitter waits for can only come once a task
    // whose kernel this thread is in has ended: the oldest task of the ring
    // (slots) or the owner of the heap's oldest block (bytes).
    bool WaitsForItsOwnRun(StallNeed need) const;
    // Whether `task_id` is, or waits (through producers not yet completed)
    // for, a task whose kernel the calling thread is in.
    bool EndsAfterThisThreadsTask(int64_t task_id) const;
    // For a stalled submitter inside a task: runs one ready task of a host
    // executor on this thread, both locks released meanwhile; false when
    // none was queued.
    bool RunOneReadyHostTask(std::unique_lock<std::mutex>& submitting, Lock& lock);
    // InvalidArgument when the calling thread runs a task of this runtime.
    void CheckNotInATask(const char* call) const;
    std::string HeapStuck(uint64_t need) const;
    void MakeReady(TaskDescriptor& t);
    // Pushes `t`, whose producers have not all finished, to its executor
    // now when that executor orders it after them (they are all its own and
    // pushed already); whether it did.
    bool PushEarly(TaskDescriptor& t);
    void Push(TaskDescriptor& t);  // to its executor's ready queue, counted there
    void ToItsQueue(TaskDescriptor& t);  // Push's hand-over (and SendAgain's), counting nothing
    // An executor's completion of `t`: one pushed early whose producers'
    // completions are not all applied yet waits for them (MakeReady).
    void CompleteFromExecutor(TaskDescriptor& t, uint32_t status, const TaskTiming* timing = nullptr);
    // A task pushed early, once its fan-in ended and its completion came:
    // DEPENDENCY_FAILED for a producer's failure is a skip, or, for a
    // producer it only follows, a reason to send it again (SendAgain).
    void CompleteEarly(TaskDescriptor& t, const TaskTiming* timing = nullptr);
    // Whether a producer `t` was pushed early after ended other than well
    // (failed, skipped) or went again itself: the executor did not run `t`
    // for it.
    bool FollowedAProducerThatDidNotSucceed(const TaskDescriptor& t) const;
    // To its executor again, waiting for nothing, its early completion dropped.
    void SendAgain(TaskDescriptor& t);
    // Whether a task ready at submission runs on the submitting thread, and
    // running it there (both locks released while its kernel runs).
    bool RunsHere(const TaskDescriptor& t) const;
    void RunHere(std::unique_lock<std::mutex>& submitting, Lock& lock, TaskDescriptor& t);
    void CompleteLocked(TaskDescriptor& t, uint32_t status, bool skipped, const TaskTiming* timing = nullptr);
    // The task's span (with its status) and an arrow from each traced
    // producer (a trace records).
    void TraceTask(TaskDescriptor& t, const TaskTiming& timing, uint32_t status);
    // The heap ring's bytes in use, as a counter (a trace records).
    void TraceHeap();
    void TryConsume(TaskDescriptor& t);
    // Depth-0 holds (holds_, docs/orchestration.md "The depth-0 rule").
    // The calling thread holds t; `newest`: as the task it submitted last.
    Held& Hold(TaskDescriptor& t, bool newest = true);
    Held* HoldOfThisThread(int32_t task_id);  // the calling thread's (or running kernel's) hold of it
    int32_t RunningKernelTask() const;  // the task whose kernel this thread runs, or -1
    void LetGo(int32_t task_id);      // one hold's reference goes
    void LetGoOfScope(const ScopeRecord& scope);  // its held tasks' references go (mu_ held)
    void LetGoHoldsReadBy(const TaskDescriptor& t);  // the calling thread's holds t reads
    bool LetGoHoldsNotHandedOut();    // under pressure; whether any went
    void LetGoHoldsOf(std::thread::id thread);
    void LetGoHoldsTakenBy(int32_t kernel_task);  // the holds its kernel took (Held::kernel_task)
    template <typename Which>
    bool LetGoHoldsWhere(Which&& which);  // the holds `which` picks; whether there were any
    // Whether `p` lies inside `owner`'s implicit outputs.
    static bool Covers(const TaskDescriptor& owner, const ResolvedParam& p);
    // The implicit outputs of `owner` (bit i: params[i]) that `p` overlaps.
    static uint32_t OutputsTouched(const TaskDescriptor& owner, const ResolvedParam& p);
    // Whether `consumer` reads from `producer` (a producer its reads'
    // lookups met): the edges a failure passes along (fan_out.hpp).
    static bool ReadsFrom(const TaskDescriptor& consumer, int32_t producer);
    // Refuses (unwinding t's slot and block) a parameter in the heap ring
    // that is not inside live, handed-out implicit outputs (deps_ holds the
    // lookups' producers).
    void CheckOutputsUsed(TaskDescriptor& t);
    bool InHeap(const uint8_t* p, uint64_t size) const noexcept;
    // The record of `t` failing with device error `status` (its root).
    dependency::Root FailureOf(const TaskDescriptor& t, uint32_t status) const;
    // Records a failed or skipped task for WaitAll and its open scopes.
    void NoteFailure(const TaskDescriptor& t);
    Error FailureReport(const std::string& prefix, const TaskFailureInfo& root, int32_t failed, int32_t skipped) const;
    void ReleaseBuffer(BufferInfo& b);
    void DrainSkips();  // then WakeWaiters
    // WaitAll's refusals: called from a task of this runtime (InvalidArgument),
    // or what is in flight can never finish by itself (Busy; mu_ held).
    void CheckWaitable() const;
    void CheckNotStuck() const;
    // Waits on wake_; WakeWaiters wakes the waiters only when what they
    // wait for may have come. Returns at `until` at the latest.
    // `submitting` (held, when given) is released for the wait too.
    void Sleep(Lock& lock, std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max(),
               std::unique_lock<std::mutex>* submitting = nullptr);
    void WakeWaiters();
    // Failed writers kept in the hazard map after they are consumed (see
    // poisoned_): filed at consumption, met by readers' lookups, dropped
    // from the map by writers that cover them, by a free, or by WaitAll.
    void KeepPoisonedWrites(const TaskDescriptor& t);
    // Whether the task whose implicit output `p` of `t` writes into is not
    // consumed yet (its heap block still holds that output).
    bool OutputOwnerLives(const TaskDescriptor& t, const ResolvedParam& p) const;
    // Submit's part while poisoned_ is not empty: drops the kept writers
    // from deps_ (they are not producers) and gives `t` the root of those
    // its reads overlap.
    void InheritPoison(TaskDescriptor& t);
    void DropPoisonInside(uint64_t lo, uint64_t hi);
    // Every half period of task ids (TaskRing), before any id comes round
    // again: drops the kept writes of tasks that failed half a period ago
    // or more, and the hazard map's entries of tasks gone that no lookup
    // met. Either would otherwise name the newer task given the same id.
    void ForgetBeforeIdsComeRound();

    const TaskGraphOptions options_;
    std::optional<std::vector<Orchestrator::TaskRegion>> confined_to_;  // ConfineTasksTo; nullopt: anywhere in memory
    std::mutex submit_mu_;
    mutable AdaptiveMutex mu_;
    EventCount wake_;  // Sleep's waiters (WaitAll, a stalled submitter, the destructor)
    // Tasks pushed to an executor and not yet completed (written under mu_,
    // read without it by ApplyInboxAfterUnlock).
    std::atomic<int64_t> on_executors_{0};
    // A task was pushed to a driven executor since the last kick (set under
    // mu_, taken by whoever unlocks next).
    mutable std::atomic<bool> kick_{false};
    // Completions parked while mu_ was held (status in inbox_status).
    ParkingInbox<TaskDescriptor, &TaskDescriptor::inbox_next> inbox_;
    TaskRing ring_;
    HeapRing heap_;
    // The hazard map over the function's memory (one space: host addresses).
    dependency::RegionMap<int32_t> map_;
    ScopeStack scopes_;
    uint32_t scopes_begun_ = 0;  // the last scope's serial (ScopeRecord::serial)
    BufferTracker buffers_;
    std::map<int32_t, std::unique_ptr<KernelEntry>> kernels_;
    // The device programs of registered kernels, [begin, end) in memory,
    // and whose: a task's write there is refused, and so is CheckNotAProgram's.
    struct KernelProgram {
        const uint8_t* begin;
        const uint8_t* end;
        int32_t kernel_id;
    };
    std::vector<KernelProgram> program_images_;
    // The one overlapping [p, p + size), or null (mu_ held).
    const KernelProgram* ProgramIn(const uint8_t* p, uint64_t size) const noexcept;
    [[noreturn]] void FailOverProgram(const KernelProgram& image, const uint8_t* p, uint64_t size,
                                      const std::string& what, bool freeing) const;
    std::vector<std::unique_ptr<ReadyQueue>> queues_;
    Route routes_[PTO_WORKER_TYPES];
    std::vector<std::shared_ptr<Executor>> executors_;
    std::vector<TaskFailureInfo> failures_;
    // Why the device is gone (OnDeviceLost), else empty. Its own lock: the
    // device worker reports it from inside its queue's callbacks.
    mutable std::mutex lost_mu_;
    std::string device_lost_;
    std::vector<dependency::Root> failure_roots_;  // failures_[i]'s root record: its cause in words
    std::vector<int32_t> skip_work_;   // poisoned tasks whose inputs are done, and early ones to complete
    // Failed or skipped writers already consumed whose writes stay in the
    // hazard map (Alive keeps their entries) until WaitAll reports the
    // failure, a later OUTPUT covers the region, or its buffer is freed: a
    // reader submitted meanwhile is skipped, not run on stale data. By task
    // id: the root to pass on and the ranges filed (for a free).
    struct PoisonedWrites {
        int64_t seq = 0;  // the failed task's sequence number
        dependency::Root root;
        std::vector<std::pair<uint64_t, uint64_t>> ranges;  // host addresses [lo, hi)
    };
    // Drops the ranges of task `id`'s `kept` that `drop` picks, with their
    // entries in the map.
    template <typename Drop>
    void DropKeptRanges(int32_t id, PoisonedWrites& kept, Drop&& drop);
    std::unordered_map<int32_t, PoisonedWrites> poisoned_;
    std::vector<int32_t> poison_scratch_;  // InheritPoison's lookups
    int64_t next_forget_seq_ = 0;  // ForgetBeforeIdsComeRound's next turn (a compare per submit, no division)
    std::vector<int32_t> deps_;        // Submit's scratch
    size_t deps_read_ = 0;             // deps_[0, deps_read_) are what its reads met
    // Tasks below this ring sequence had finished when WaitAll reported
    // their failures: a failed one a scope still holds poisons no later
    // reader (the caller knows), as one consumed already does not.
    int64_t reported_below_seq_ = 0;
    // Depth-0 holds, oldest first. A task with implicit outputs submitted
    // outside any scope has no scope to keep them, and a fast task would be
    // reclaimed before its submitter could pass them on (seed 004's
    // Example 1 reads t0's output right after submitting it). So its
    // submitting thread holds it until a later task of that thread reads
    // them, the thread's next wait, or its exit; under pressure, holds whose
    // address was never handed out go sooner (each thread's newest stays).
    struct Held {
        std::thread::id thread;
        int32_t task;
        // The task whose kernel submitted it (-1: not a kernel's): a hold a
        // kernel took goes when its task completes, since nothing of the
        // kernel reads the output after that, and a runtime's worker thread
        // neither waits nor exits (a hold kept there hung the next
        // submitter: found probing from outside).
        int32_t kernel_task = -1;
        // Per param (an implicit output): the times pto_task_output handed
        // it to this thread less the later tasks of this thread that read
        // it, each ask for one reader. Each asking thread holds for its own
        // asks: one hold for all, let go by one thread's reads or exit, left
        // another thread's ask unprotected, and a mark per output let one
        // reader stand for two asks; the reader of the other ask read a
        // newer task's bytes (both found probing from outside).
        std::array<uint16_t, PTO_MAX_PARAMS> unread{};
        bool AllRead() const noexcept {
            return std::all_of(unread.begin(), unread.end(), [](uint16_t n) { return n == 0; });
        }
    };
    std::vector<Held> holds_;
    // Each thread's newest task that took a hold (whether or not the hold
    // is still there): the one hold that stays under pressure, while it is.
    std::vector<Held> newest_holds_;
    std::shared_ptr<HoldAnchor> anchor_;
    // The thread whose scopes are open (scopes record ranges of task ids,
    // so two threads' scopes interleaved would end each other's), and each
    // thread's floor (SetScopeFloor; none: 0).
    std::thread::id scope_owner_;
    std::vector<std::pair<std::thread::id, int32_t>> scope_floors_;
    // What stalled submitters wait for ({}: none): the ring's slots, and the
    // smallest heap block any of them waits for (wakes them no later than
    // the one it fits).
    StallNeed stalled_;
    int stallers_ = 0;  // submitters asleep in WaitForRoom
    bool closing_ = false;  // Closing() was called: WaitForRoom fails
    std::vector<std::thread::id> stalled_threads_;  // their threads
    bool space_freed_ = false;  // a ring slot or heap block came back since the last WakeWaiters
    int64_t inflight_ = 0;  // submitted, not completed
    int64_t active_ = 0;    // READY or RUNNING on an executor: will complete on their own
    int32_t copy_waiters_ = 0;  // threads in WaitForTasksOver: woken on every completion
    uint64_t submitted_ = 0;
    uint64_t runs_here_ = 0;  // tasks run on the submitting thread (samples one in 32 for host_cost)
    uint64_t completed_ = 0;
    uint64_t waited_ = 0;  // tasks completed when the last WaitAll returned (progress counts from it)
    uint32_t heap_track_ = 0;  // of recording heap_recording_
    uint64_t heap_recording_ = 0;
};

}  // namespace spyre::orchestration
