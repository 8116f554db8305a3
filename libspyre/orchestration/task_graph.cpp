// SPDX-License-Identifier: Apache-2.0
#include "orchestration/task_graph.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "orchestration/cpu_worker.hpp"
#include "orchestration/program_slots.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/common/log.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "trace/recorder.hpp"

namespace spyre::orchestration {

namespace {

// Heap blocks name their owner: a task id, or (this bit set) an explicit
// buffer's offset in the function's memory.
constexpr uint64_t kBufferOwner = 1ull << 63;

// The depth-0 rule, as messages state it.
constexpr const char* kHoldRule =
    "a task with implicit outputs submitted outside any scope is held by its submitting thread until later "
    "tasks of that thread have read every output pto_task_output handed out, the thread's next pto_wait_all, or "
    "its exit, and so by each other thread that asked for one of its outputs; outputs whose address "
    "pto_task_output never handed out go sooner when the rings are full, except the one of each thread's newest "
    "task that took a hold";

}  // namespace

struct TaskGraph::HoldAnchor {
    std::mutex mu;
    TaskGraph* graph = nullptr;  // nullptr once the graph is going
};

namespace {

// The graphs this thread may hold a task in (depth-0 holds) or have
// scopes open on, let go when the thread exits: a thread that submitted and
// went away must not pin the task ring's tail, nor keep other threads'
// scopes out, for ever.
class ThreadHolds {
public:
    ~ThreadHolds() {
        for (const auto& weak : anchors_)
            if (const auto anchor = weak.lock()) {
                std::lock_guard lock(anchor->mu);
                if (anchor->graph) anchor->graph->ThreadExiting();
            }
    }
    void Add(const std::shared_ptr<TaskGraph::HoldAnchor>& anchor) {
        for (const auto& weak : anchors_)
            if (!weak.owner_before(anchor) && !anchor.owner_before(weak)) return;
        std::erase_if(anchors_, [](const auto& weak) { return weak.expired(); });
        anchors_.push_back(anchor);
    }

private:
    std::vector<std::weak_ptr<TaskGraph::HoldAnchor>> anchors_;
};
thread_local ThreadHolds tl_holds;

// A depth-0 thread waiting for room behind another thread's open scopes
// (RoomKeptForAnotherThreadsScopes): which scopes (the runtime and the
// outermost scope's serial), since when, and whether it stopped leaving
// them room after kScopeRoomWait. The scopes' thread may be waiting for
// this one (a user's join or hand-over while its scope is open): a wait
// with no bound would hang both.
struct BehindScopes {
    const void* graph = nullptr;
    uint32_t serial = 0;
    std::chrono::steady_clock::time_point since;
    bool gave_up = false;
};
thread_local BehindScopes tl_behind_scopes;
constexpr std::chrono::milliseconds kScopeRoomWait{1000};
// How long a kernel's submission waits for room before it fails (WaitForRoom).
constexpr std::chrono::seconds kKernelRoomWait{5};
// How long a submission waits, with nothing in flight, for another thread
// to pto_free the buffer at the heap's tail (WaitForRoom).
constexpr std::chrono::seconds kForeignBufferWait{5};

}  // namespace

TaskGraph::TaskGraph(TaskGraphOptions options)
    : options_(std::move(options)),
      ring_(options_.task_ring_size, options_.first_task_seq, options_.task_id_period),
      heap_(options_.memory + options_.heap_offset, options_.heap_size),
      map_(size_t(std::max(options_.task_ring_size, 1))),
      anchor_(std::make_shared<HoldAnchor>()) {
    anchor_->graph = this;
    if (!options_.memory || options_.heap_size == 0 || options_.heap_offset + options_.heap_size > options_.memory_size)
        throw Error(ErrorKind::InvalidArgument,
                    "heap ring of " + std::to_string(options_.heap_size) + " bytes at offset " +
                        std::to_string(options_.heap_offset) + " does not fit the function's memory of " +
                        std::to_string(options_.memory_size) + " bytes");
    // One host worker serves CUBE, VECTOR and HOST until a device executor
    // takes a type over; EXTERNAL tasks have no executor.
    const unsigned threads = options_.host_threads ? options_.host_threads
                                                   : std::max(1u, std::thread::hardware_concurrency());
    auto host = std::make_shared<CpuWorker>(threads, options_.device);
    queues_.push_back(
        MakeReadyQueue(options_.ready_queues, size_t(options_.task_ring_size), options_.device + " ready queue (host)"));
    for (int32_t w : {WORKER_CUBE, WORKER_VECTOR, WORKER_HOST}) routes_[w] = {host, queues_.back().get()};
    executors_.push_back(host);
    host->Start(*queues_.back(), *this);
}

TaskGraph::~TaskGraph() {
    {
        std::lock_guard lock(anchor_->mu);  // exiting threads let go of nothing here from now on
        anchor_->graph = nullptr;
    }
    WaitForRunningTasks();  // they use our memory; EXTERNAL tasks still open are abandoned
    for (auto& q : queues_) q->Close();
    for (auto& e : executors_) e->Stop();
}

int64_t TaskGraph::WaitForRunningTasks() {
    Lock lock(*this);
    while (active_ != 0) Sleep(lock);
    return inflight_;
}

void TaskGraph::Fail(ErrorKind kind, const std::string& message, int sys_errno) const {
    throw Error(kind, message, {.device = options_.device, .sys_errno = sys_errno});
}

bool TaskGraph::InMemory(const uint8_t* p, uint64_t size) const noexcept {
    const uint8_t* lo = options_.memory;
    return p >= lo && p < lo + options_.memory_size && size <= uint64_t(lo + options_.memory_size - p);
}

void TaskGraph::FailOutside(const uint8_t* p, uint64_t size, const std::string& what) const {
    std::ostringstream s;
    s << what << " [" << static_cast<const void*>(p) << ", +" << size << ") is outside the function's memory ("
      << options_.memory_size << " bytes mapped at " << static_cast<const void*>(options_.memory) << ")";
    Fail(ErrorKind::InvalidArgument, s.str());
}

uint64_t TaskGraph::DeviceAddress(const void* p, uint64_t size) const {
    if (!InMemory(static_cast<const uint8_t*>(p), size)) FailOutside(static_cast<const uint8_t*>(p), size, "buffer");
    return uint64_t(static_cast<const uint8_t*>(p) - options_.memory);
}

uint8_t* TaskGraph::HostAddress(uint64_t device_address, uint64_t size) const {
    if (device_address > options_.memory_size || size > options_.memory_size - device_address)
        Fail(ErrorKind::InvalidArgument, "device range [" + Hex(device_address) + ", +" + std::to_string(size) +
                                             ") is outside the function's memory of " +
                                             std::to_string(options_.memory_size) + " bytes");
    return options_.memory + device_address;
}

const TaskGraph::KernelProgram* TaskGraph::ProgramIn(const uint8_t* p, uint64_t size) const noexcept {
    for (const KernelProgram& image : program_images_)
        if (p < image.end && image.begin < p + size) return &image;
    return nullptr;
}

void TaskGraph::FailOverProgram(const KernelProgram& image, const uint8_t* p, uint64_t size, const std::string& what,
                                bool freeing) const {
    Fail(ErrorKind::InvalidArgument,
         what + " [device address " + Hex(uint64_t(p - options_.memory)) + ", +" + std::to_string(size) + ") " +
             (freeing ? "holds" : "overlaps") + " kernel " + std::to_string(image.kernel_id) +
             "'s registered device program (" + std::to_string(image.end - image.begin) + " bytes at " +
             Hex(uint64_t(image.begin - options_.memory)) + "): " +
             (freeing ? "a kernel stays registered for the runtime's life, and so does its program's memory"
                      : "every later task of that kernel would run what was written there"));
}

void TaskGraph::CheckNotAProgram(uint64_t device_address, uint64_t size, const char* call, bool freeing) {
    Lock lock(*this);
    const uint8_t* p = options_.memory + device_address;
    if (const KernelProgram* image = ProgramIn(p, size)) FailOverProgram(*image, p, size, call, freeing);
}

void TaskGraph::ConfineTasksTo(std::optional<std::vector<Orchestrator::TaskRegion>> regions) {
    Lock lock(*this);
    confined_to_ = std::move(regions);
}

void TaskGraph::CheckConfined(const uint8_t* p, uint64_t size, bool writes, const std::string& what) const {
    const Confinement in = ConfinedAs(p, size);
    const std::string range = " [device address " + Hex(uint64_t(p - options_.memory)) + ", +" + std::to_string(size) + ")";
    if (in == Confinement::Outside)
        Fail(ErrorKind::InvalidArgument, what + range +
                                             " is outside the memory its tasks are confined to (ConfineTasksTo; at the "
                                             "host level, a chip call's arguments: the region runs past its tensor)");
    // A write of a kept In copy would be read by later calls as the host's
    // bytes.
    if (in == Confinement::ReadOnly && writes)
        Fail(ErrorKind::InvalidArgument, what + range +
                                             " writes memory its tasks may only read (ConfineTasksTo; at the host "
                                             "level, a chip call's In argument: pass it as InOut or Out to write it)");
}

void TaskGraph::CheckCopyConfined(const void* at, uint64_t size, bool writes, const char* call) {
    Lock lock(*this);
    if (!confined_to_) return;
    const auto* p = static_cast<const uint8_t*>(at);
    bool partial = false;
    // The runtime's own memory (a pto_alloc buffer, the heap ring) is its
    // tasks' to write, as for a task's parameter.
    if (buffers_.Find(p, size, &partial) || (!partial && InHeap(p, size))) return;
    CheckConfined(p, size, writes, std::string(call) + " of " + std::to_string(size) + " bytes");
}

TaskGraph::Confinement TaskGraph::ConfinedAs(const uint8_t* p, uint64_t size) const noexcept {
    Confinement found = Confinement::Outside;
    for (const Orchestrator::TaskRegion& r : *confined_to_) {
        const auto* lo = static_cast<const uint8_t*>(r.at);
        if (p < lo || uint64_t(p - lo) > r.bytes || size > r.bytes - uint64_t(p - lo)) continue;
        if (r.writable) return Confinement::Writable;
        found = Confinement::ReadOnly;
    }
    return found;
}

void TaskGraph::RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address) {
    KernelEntry k;
    k.kernel_id = kernel_id;
    k.program_address = program_address;
    k.has_program = true;
    {
        // A runtime on host memory has no device: accepted, every task of
        // the kernel would be refused at submission instead.
        Lock lock(*this);
        if (std::none_of(executors_.begin(), executors_.end(), [&](const auto& e) { return e->CanRun(k); }))
            Fail(ErrorKind::Unsupported, "a runtime on host memory has no device to run kernel " +
                                             std::to_string(kernel_id) + "'s device program: register a host kernel instead");
    }
    const uint8_t* at = HostAddress(program_address, 0);  // InvalidArgument outside the function's memory
    // Decoded now, as pto_register_program does: a bad program is refused
    // here, not by the device for every task of it.
    k.slots = SlotsAt({at, size_t(memory_size() - program_address)},
                      "kernel " + std::to_string(kernel_id) + "'s device program at device address " + Hex(program_address));
    spyre_program_header h;
    std::memcpy(&h, at, sizeof h);  // SlotsAt found a whole header there
    k.program_bytes = std::min<uint64_t>(h.total_size, memory_size() - program_address);
    RegisterKernel(std::move(k));
}

void TaskGraph::RegisterKernel(KernelEntry kernel) {
    Lock lock(*this);
    if (kernel.kernel_id < 0)
        Fail(ErrorKind::InvalidArgument, "kernel id must be >= 0, got " + std::to_string(kernel.kernel_id));
    if (!kernel.host_fn && !kernel.host_callable && !kernel.has_program)
        Fail(ErrorKind::InvalidArgument, "kernel " + std::to_string(kernel.kernel_id) +
                                             " has neither a host function nor a device program");
    if (kernels_.count(kernel.kernel_id))
        Fail(ErrorKind::InvalidArgument, "kernel " + std::to_string(kernel.kernel_id) + " is already registered");
    const int32_t id = kernel.kernel_id;
    if (kernel.has_program && kernel.program_bytes && kernel.program_address < options_.memory_size) {
        const uint8_t* begin = options_.memory + kernel.program_address;
        program_images_.push_back(
            {begin, begin + std::min(kernel.program_bytes, options_.memory_size - kernel.program_address), id});
    }
    kernel.host_cost.SetCheapBelow(options_.cheap_host_task_ns);
    kernels_.emplace(id, std::make_unique<KernelEntry>(std::move(kernel)));
}

std::vector<uint64_t> TaskGraph::OperandBytes(int32_t kernel_id) const {
    std::vector<uint64_t> bytes;
    for (const SlotUse& use : SlotUses(kernel_id)) {
        if (bytes.size() <= use.slot) bytes.resize(size_t(use.slot) + 1);
        bytes[use.slot] = std::max(bytes[use.slot], use.bytes);
    }
    return bytes;
}

std::vector<uint8_t> TaskGraph::OperandDTypes(int32_t kernel_id) const {
    std::vector<uint8_t> dtypes;
    for (const SlotUse& use : SlotUses(kernel_id)) {
        if (dtypes.size() <= use.slot) dtypes.resize(size_t(use.slot) + 1);
        dtypes[use.slot] = use.dtype;
    }
    return dtypes;
}

std::vector<SlotUse> TaskGraph::SlotUses(int32_t kernel_id) const {
    Lock lock(*this);
    auto it = kernels_.find(kernel_id);
    if (it == kernels_.end())
        throw Error(ErrorKind::NotFound, "kernel " + std::to_string(kernel_id) + " is not registered");
    return it->second->slots.uses;
}

void TaskGraph::SetExecutor(int32_t worker_type, std::shared_ptr<Executor> executor) {
    std::lock_guard sub(submit_mu_);  // no task is submitted meanwhile
    {
        Lock lock(*this);
        if (worker_type < 0 || worker_type >= PTO_WORKER_TYPES || worker_type == WORKER_EXTERNAL || !executor)
            Fail(ErrorKind::InvalidArgument, "no executor can serve worker type " + std::to_string(worker_type));
        if (inflight_ != 0)
            Fail(ErrorKind::Busy, "cannot change executors with " + std::to_string(inflight_) + " task(s) in flight");
        // An executor that already serves another type (the device worker
        // runs CUBE and VECTOR) keeps its one ready queue.
        for (const Route& r : routes_)
            if (r.executor == executor) {
                routes_[worker_type] = r;
                return;
            }
    }
    auto queue = MakeReadyQueue(options_.ready_queues, size_t(options_.task_ring_size),
                                options_.device + " ready queue (" + executor->name() + ")");
    // Started without this graph's lock: a device executor registers its
    // task port with the device's thread, which takes this lock (completing
    // tasks) while it drives the ports it holds. Nothing reaches the
    // executor before its route is set below.
    executor->Start(*queue, *this);
    Lock lock(*this);
    routes_[worker_type] = {executor, queue.get(), executor->driven(), executor->OrdersAfterProducers()};
    queues_.push_back(std::move(queue));
    executors_.push_back(std::move(executor));
}

const TaskGraph::Route& TaskGraph::RouteFor(int32_t worker_type, const KernelEntry& kernel) const {
    // A kernel the type's executor cannot run (a host-only kernel submitted
    // as CUBE or VECTOR once the device worker serves those types) runs on
    // the host worker, which serves HOST.
    const Route& r = routes_[worker_type];
    return r.executor->CanRun(kernel) ? r : routes_[WORKER_HOST];
}

bool TaskGraph::Unconsumed(int32_t id) const {
    if (!ring_.IsLive(id)) return false;
    const TaskDescriptor& t = ring_.Get(id);
    const TaskState s = t.state.load(std::memory_order_relaxed);
    // Completed tasks stay visible until consumed: a later reader must hold
    // them (their outputs must outlive its read), and a failed one must
    // skip it.
    return s < TaskState::Consumed;
}

bool TaskGraph::Alive(int32_t id) const {
    return Unconsumed(id) || (!poisoned_.empty() && poisoned_.contains(id));
}

std::string TaskGraph::Describe(int32_t id) const {
    const TaskDescriptor& t = ring_.Get(id);
    return "task " + std::to_string(id) + " (kernel " + std::to_string(t.func_id) + ", " +
           ToString(t.state.load(std::memory_order_relaxed)) + ")";
}

void TaskGraph::Closing() {
    Lock lock(*this);
    closing_ = true;
    wake_.Notify();
}

template <typename Stuck>
void TaskGraph::WaitForRoom(std::unique_lock<std::mutex>& submitting, Lock& lock, StallNeed need, Stuck&& stuck) {
    if (closing_)
        Fail(ErrorKind::InvalidArgument,
             "the runtime is being destroyed (pto_runtime_destroy or ~Orchestrator on another thread), and this "
             "call waited for room: " + stuck());
    if (need.behind_scopes) {
        // The scopes' thread goes on and ends them, or exits, which ends
        // them: looked at again each millisecond, and whenever something
        // wakes the waiters; after kScopeRoomWait this thread takes the room
        // for the rest of these scopes.
        const auto now = std::chrono::steady_clock::now();
        BehindScopes& b = tl_behind_scopes;
        if (b.graph != this || b.serial != scopes_.SerialAt(1)) b = {this, scopes_.SerialAt(1), now, false};
        if (now - b.since >= kScopeRoomWait) {
            b.gave_up = true;
            return;
        }
        Sleep(lock, now + std::chrono::milliseconds(1), &submitting);
        return;
    }
    // Under pressure, depth-0 outputs nobody can name (their address was
    // never handed out) need not be kept.
    if (!holds_.empty() && LetGoHoldsNotHandedOut()) return;
    // Only tasks on executors finish by themselves; with none, space could
    // come back only through this (stalled) caller: say so. Nor does the
    // task whose kernel is this caller: the rings are reused in order, and
    // it cannot end while its kernel waits.
    //
    // The oldest task (or heap block) held by another thread's depth-0 hold
    // comes back once that thread's next task reads its output (Example 1
    // run by several threads): it waits for that thread then, unless that
    // one is stalled too with no room for its next task (it fails then: the
    // hold is its own). A stalled holder with room goes on once woken: woken
    // here.
    std::optional<std::thread::id> holder;
    bool holder_has_room = false;
    if (need.slots > 0 && (holder = HeldByAnotherThread(RingTail(), true))) {
        holder_has_room = ring_.live() < ring_.capacity();
    } else if (need.bytes > 0) {
        const std::optional<int32_t> oldest = HeapOldestTask();
        if ((holder = HeldByAnotherThread(oldest, true)))
            holder_has_room = heap_.FitsAfter(ring_.Get(*oldest).heap_bytes, 0) && ring_.live() < ring_.capacity();
    }
    const bool holder_stalled =
        holder && std::find(stalled_threads_.begin(), stalled_threads_.end(), *holder) != stalled_threads_.end();
    const bool holder_goes_on = holder && (!holder_stalled || holder_has_room);
    // The heap's oldest block is a pto_alloc buffer another thread has not
    // freed yet: it comes back once that thread frees it (two threads each
    // taking and freeing buffers failed "cannot drain": found probing from
    // outside). One of the calling thread's own is its to free: it fails.
    bool buffer_goes = false;
    if (need.bytes > 0 && !holder)
        if (const auto owner = heap_.OldestOwner(); owner && (*owner & kBufferOwner)) {
            const BufferInfo* b = buffers_.FindBase(options_.memory + (*owner & ~kBufferOwner));
            buffer_goes = b && !b->free_requested && b->thread != std::this_thread::get_id();
        }
    if ((active_ == 0 && !holder_goes_on && !buffer_goes) || WaitsForItsOwnRun(need))
        Fail(ErrorKind::OutOfMemory, stuck(), EDEADLK);
    // Only that thread's pto_free makes room, and it may be waiting for this
    // one (main takes a buffer, starts a thread that submits and joins it:
    // that submitter slept for good; found probing from outside). Bounded.
    // So may a holder of depth-0 outputs that is not in this runtime at all
    // (main submits a task, takes its output, starts a submitting thread
    // and joins it: that thread slept for good; found probing from outside).
    const bool waited_long = need.since != std::chrono::steady_clock::time_point{} &&
                             std::chrono::steady_clock::now() - need.since >= kForeignBufferWait;
    const std::string waited = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kForeignBufferWait).count());
    if (active_ == 0 && !holder_goes_on && buffer_goes && waited_long)
        Fail(ErrorKind::OutOfMemory,
             stuck() + " (waited " + waited +
                 " s, nothing in flight, for the thread that took that pto_alloc buffer to pto_free it: it may be "
                 "waiting for this one; take long-lived buffers with pto_device_malloc)",
             EDEADLK);
    if (active_ == 0 && holder && !holder_stalled && waited_long)
        Fail(ErrorKind::OutOfMemory,
             stuck() + " (waited " + waited +
                 " s, nothing in flight, for the thread holding outputs of tasks it submitted outside any scope (or "
                 "asked for) to submit, wait or exit: it may be waiting for this one; submit such tasks inside a scope)",
             EDEADLK);
    if (holder_stalled) wake_.Notify();
    // A kernel's submission holds a host thread: when every one of them is
    // such a kernel, the ready task room waits for would never get a
    // thread. It runs one itself instead, and looks again every
    // millisecond (a push to the ready queue wakes the workers, not it).
    const bool in_a_task = CpuWorker::RunningTaskOf() == this;
    // A kernel's wait is bounded: what it waits for may be the thread that
    // waits for its task (a hold or scope of the orchestration thread), or
    // another kernel stacked on it (RunOneQueued): both slept for good
    // (found probing from outside). Failing lets its task end.
    if (in_a_task && need.since != std::chrono::steady_clock::time_point{} &&
        std::chrono::steady_clock::now() - need.since >= kKernelRoomWait)
        Fail(ErrorKind::OutOfMemory,
             stuck() + " (a kernel's submission waited " +
                 std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kKernelRoomWait).count()) +
                 " s for room: what it waits for may wait for its task)",
             EDEADLK);
    if (in_a_task && RunOneReadyHostTask(submitting, lock)) return;
    stalled_.slots = std::max(stalled_.slots, need.slots);
    if (need.bytes) stalled_.bytes = stalled_.bytes ? std::min(stalled_.bytes, need.bytes) : need.bytes;
    ++stallers_;
    stalled_threads_.push_back(std::this_thread::get_id());
    Sleep(lock,
          in_a_task ? std::chrono::steady_clock::now() + std::chrono::milliseconds(1)
                    : std::chrono::steady_clock::time_point::max(),
          &submitting);
    stalled_threads_.erase(std::find(stalled_threads_.begin(), stalled_threads_.end(), std::this_thread::get_id()));
    if (--stallers_ == 0) stalled_ = {};
}

bool TaskGraph::RunOneReadyHostTask(std::unique_lock<std::mutex>& submitting, Lock& lock) {
    lock.unlock();
    submitting.unlock();
    bool ran = false;
    for (const Route& route : routes_)
        if (route.executor && !route.driven && route.executor->RunOneQueued(*route.queue, *this)) {
            ran = true;
            break;
        }
    submitting.lock();
    lock.lock();
    return ran;
}

template <typename Attempt, typename Stuck>
auto TaskGraph::Stall(std::unique_lock<std::mutex>& submitting, Lock& lock, StallNeed need, Attempt&& attempt,
                      Stuck&& stuck) {
    need.since = std::chrono::steady_clock::now();
    for (;;) {
        if (auto r = attempt()) return *r;
        WaitForRoom(submitting, lock, need, stuck);
    }
}

bool TaskGraph::RunsOnThisThread(int64_t task_id) const {
    if (task_id < 0 || task_id > INT32_MAX || !ring_.IsLive(int32_t(task_id))) return false;
    const TaskDescriptor* task = &ring_.Get(int32_t(task_id));
    for (const CpuWorker::TaskFrame* f = CpuWorker::RunningTasks(); f; f = f->outer)
        if (f->task == task) return true;
    return false;
}

bool TaskGraph::EndsAfterThisThreadsTask(int64_t task_id) const {
    if (task_id < 0 || task_id > INT32_MAX || !ring_.IsLive(int32_t(task_id))) return false;
    // What a task still waits for: a pending one its unfinished producers; a
    // completed one, to be consumed (the ring drains only past consumed
    // tasks), its unfinished consumers, which hold their producers. A ready
    // or running task ends by itself (or its thread finds this too). Every
    // id met is live: producers are held until their consumers complete.
    std::vector<std::pair<int32_t, int32_t>> held_by;  // (producer, unfinished consumer), built when needed
    bool held_by_built = false;
    std::vector<int32_t> todo{int32_t(task_id)}, seen;
    while (!todo.empty()) {
        const int32_t id = todo.back();
        todo.pop_back();
        if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
        seen.push_back(id);
        if (RunsOnThisThread(id)) return true;
        const TaskDescriptor& t = ring_.Get(id);
        const TaskState state = t.state.load(std::memory_order_relaxed);
        if (state == TaskState::Pending) {
            for (int32_t p : t.fanin)
                if (ring_.Get(p).state.load(std::memory_order_relaxed) < TaskState::Completed) todo.push_back(p);
        } else if (state == TaskState::Completed) {
            if (!held_by_built) {
                held_by_built = true;
                for (int64_t seq = ring_.tail_seq(); seq < ring_.head_seq(); ++seq) {
                    const TaskDescriptor& c = ring_.Get(ring_.IdOf(seq));
                    if (c.state.load(std::memory_order_relaxed) >= TaskState::Completed) continue;
                    for (int32_t p : c.fanin) held_by.emplace_back(p, c.task_id);
                }
                std::sort(held_by.begin(), held_by.end());
            }
            for (auto it = std::lower_bound(held_by.begin(), held_by.end(), std::pair{id, INT32_MIN});
                 it != held_by.end() && it->first == id; ++it)
                todo.push_back(it->second);
        }
    }
    return false;
}

bool TaskGraph::WaitsForItsOwnRun(StallNeed need) const {
    if (!CpuWorker::RunningTasks()) return false;  // the common case: an orchestration thread
    if (need.slots > 0 && ring_.live() > 0 && EndsAfterThisThreadsTask(ring_.tail())) return true;
    if (need.bytes > 0) {
        const auto owner = heap_.OldestOwner();
        if (owner && !(*owner & kBufferOwner) && EndsAfterThisThreadsTask(int64_t(*owner))) return true;
    }
    return false;
}

// How task `id`, which ends only after this thread's task, stands to it.
const char* TaskGraph::NextToTheSubmittingKernel(int64_t id) const {
    return RunsOnThisThread(id) ? "is the task whose kernel is submitting"
                                : "waits for the task whose kernel is submitting";
}

std::string TaskGraph::TaskRingStuck() const {
    std::ostringstream s;
    s << "task ring (size " << ring_.capacity() << ") is full and cannot drain: its oldest "
      << Describe(ring_.tail());
    const TaskDescriptor& t = ring_.Get(ring_.tail());
    const TaskState st = t.state.load(std::memory_order_relaxed);
    if (EndsAfterThisThreadsTask(t.task_id)) {
        s << " " << NextToTheSubmittingKernel(t.task_id) << ", and the ring is reused in order behind it: a kernel can submit only as many tasks as the ring has "
             "room for while its own task runs; submit them from the orchestration thread, or create the runtime "
             "with a larger task ring";
    } else if (st == TaskState::Completed && HoldOf(t.task_id) && ring_.capacity() == 1) {
        s << " is held by " << Holder(t) << " (" << kHoldRule
          << "), and a ring of one slot cannot hold it beside a task that reads its outputs: create the runtime "
             "with a task ring of at least 2 slots";
    } else if (st == TaskState::Completed && HoldOf(t.task_id)) {
        s << " is held by " << Holder(t) << " (" << kHoldRule
          << "): read depth-0 outputs sooner, wait, put the tasks in scopes, or create the runtime with a larger "
             "task ring";
    } else if (st == TaskState::Completed && t.has_heap_block && ScopesHold(t)) {
        s << " is held by " << scopes_.depth() << " open scope(s) (the outermost began at task "
          << ring_.IdOf(*scopes_.outermost()) << ") for its implicit outputs, and the ring is reused in order behind it: "
          << "from its first task with an implicit output on, a scope can hold at most " << ring_.capacity()
          << " tasks";
        // Other threads' tasks behind it count too (they are not the
        // scopes', and the message blamed the scope for them).
        int32_t others = 0;
        for (int64_t seq = ring_.tail_seq(); seq < ring_.head_seq(); ++seq) others += !ring_.Get(ring_.IdOf(seq)).in_scopes;
        if (others > 0)
            s << ", and " << others << " of the ring's " << ring_.live()
              << " live tasks are other threads' (submitted outside these scopes; they leave open scopes half the "
                 "ring)";
        s << ": end scopes sooner, write to pto_alloc buffers, or create the runtime with a larger task ring";
    } else if (st == TaskState::Completed) {
        s << " waits for consumers that cannot run";
    } else {
        s << " waits for EXTERNAL task(s) that only pto_task_complete can finish";
    }
    return s.str();
}

std::optional<std::thread::id> TaskGraph::HeldByAnotherThread(std::optional<int32_t> id, bool only_by_the_hold) const {
    if (!id || holds_.empty()) return std::nullopt;
    const TaskDescriptor& t = ring_.Get(*id);
    const auto holds = int32_t(std::count_if(holds_.begin(), holds_.end(), [&](const Held& h) { return h.task == *id; }));
    if (only_by_the_hold && (t.state.load(std::memory_order_relaxed) != TaskState::Completed ||
                             t.fanout_refcount + holds != t.fanout_count))
        return std::nullopt;  // something besides the holds keeps it
    const std::thread::id me = std::this_thread::get_id();
    // Held by this thread too, the task stays for this thread's own hold
    // whatever another does: waiting for another holder, two threads that
    // both held it each slept for the other (found probing from outside).
    if (only_by_the_hold && HeldByThisThread(*id)) return std::nullopt;
    for (const Held& h : holds_)
        if (h.task == *id && h.thread != me) return h.thread;
    return std::nullopt;
}

std::optional<int32_t> TaskGraph::RingTail() const {
    return ring_.live() > 0 ? std::optional(ring_.tail()) : std::nullopt;
}

std::optional<int32_t> TaskGraph::HeapOldestTask() const {
    const std::optional<uint64_t> owner = heap_.OldestOwner();
    if (!owner || (*owner & kBufferOwner) || !ring_.IsLive(int32_t(*owner))) return std::nullopt;
    return int32_t(*owner);
}

// Both looked at closely only when the rings are nearly full: the common
// case pays a compare.
bool TaskGraph::SlotKeptForAHold() const {
    return ring_.capacity() - ring_.live() == 1 && HeldByAnotherThread(RingTail(), false);
}

bool TaskGraph::RoomKeptForAnotherThreadsScopes(uint64_t bytes) const {
    // A kernel's submission is not held back: the scopes' thread may be
    // waiting for its task (pto_wait_all inside a scope).
    const std::thread::id me = std::this_thread::get_id();
    if (scope_owner_ == me || CpuWorker::RunningTasks()) return false;
    const BehindScopes& b = tl_behind_scopes;
    if (b.gave_up && b.graph == this && b.serial == scopes_.SerialAt(1)) return false;
    // Nor one whose own hold keeps the oldest task: its next task lets go
    // of it, and the scopes' thread may be waiting for that.
    if (ring_.live() > 0 && HeldByThisThread(ring_.tail())) return false;
    if (const std::optional<int32_t> oldest = HeapOldestTask(); oldest && HeldByThisThread(*oldest)) return false;
    const int32_t half_free = ring_.capacity() / 2;
    return ring_.capacity() - ring_.live() <= half_free ||
           (bytes > 0 && heap_.size() - heap_.used() < heap_.size() / 2 + bytes);
}

bool TaskGraph::HeapRoomKeptForAHold(uint64_t bytes) const {
    if (bytes == 0 || heap_.size() - heap_.used() >= bytes + (heap_.size() >> 2)) return false;
    const std::optional<int32_t> oldest = HeapOldestTask();
    return HeldByAnotherThread(oldest, false) && !heap_.FitsAfter(bytes, ring_.Get(*oldest).heap_bytes);
}

const TaskGraph::Held* TaskGraph::HoldOf(int32_t task_id) const {
    for (const Held& h : holds_)
        if (h.task == task_id) return &h;
    return nullptr;
}

const char* TaskGraph::Holder(const TaskDescriptor& t) const {
    for (const Held& h : holds_)
        if (h.task == t.task_id && h.thread == t.submitter) return "its submitting thread";
    return "a thread that asked for its outputs (pto_task_output)";
}

bool TaskGraph::ScopesHold(const TaskDescriptor& t) const {
    // Submitted inside the open scopes, not before them (those it was in ended).
    return t.in_scopes && scopes_.depth() > 0 && ring_.SeqOf(t.task_id) >= *scopes_.outermost();
}

bool TaskGraph::HeldByThisThread(int32_t task_id) const {
    const std::thread::id me = std::this_thread::get_id();
    return std::any_of(holds_.begin(), holds_.end(), [&](const Held& h) { return h.task == task_id && h.thread == me; });
}

bool TaskGraph::InHeap(const uint8_t* p, uint64_t size) const noexcept {
    const uint8_t* lo = heap_.base();
    return p < lo + heap_.size() && lo < p + size;
}

std::string TaskGraph::HeapStuck(uint64_t need) const {
    std::ostringstream s;
    // used() spans the oldest live block to the newest: blocks released in
    // between count until the tail passes them (the ring frees in order).
    s << "heap ring (" << heap_.size() << " bytes) cannot make room for " << need << " bytes and cannot drain: "
      << heap_.used() << " bytes from the oldest of " << heap_.live_blocks()
      << " live block(s) on (blocks released after it come back only once it is); the oldest belongs to ";
    const auto owner = heap_.OldestOwner();
    if (owner && (*owner & kBufferOwner)) {
        const uint64_t addr = *owner & ~kBufferOwner;
        const BufferInfo* b = const_cast<BufferTracker&>(buffers_).FindBase(options_.memory + addr);
        s << "the pto_alloc buffer at device address " << Hex(addr)
          << (b && !b->free_requested ? " (not freed with pto_free)" : " (still referenced by live tasks)");
    } else if (owner) {
        s << Describe(int32_t(*owner)) << "'s implicit outputs";
        if (EndsAfterThisThreadsTask(int64_t(*owner)))
            s << ", which " << NextToTheSubmittingKernel(int64_t(*owner)) << " (it cannot end while its kernel waits)";
        else if (HoldOf(int32_t(*owner)))
            s << ", held by " << Holder(ring_.Get(int32_t(*owner))) << " (" << kHoldRule << ")";
        else if (scopes_.depth() > 0 && ring_.Get(int32_t(*owner)).in_scopes)
            s << ", held by " << scopes_.depth() << " open scope(s)";
    }
    s << ": end scopes sooner, free buffers, or create the runtime with a larger heap";
    return s.str();
}

uint8_t* TaskGraph::Alloc(uint64_t size) {
    std::unique_lock sub(submit_mu_);
    Lock lock(*this);
    if (size == 0) Fail(ErrorKind::InvalidArgument, "pto_alloc of 0 bytes");
    if (size > heap_.size())
        Fail(ErrorKind::OutOfMemory, "pto_alloc of " + std::to_string(size) + " bytes is larger than the heap ring (" +
                                         std::to_string(heap_.size()) + " bytes)");
    // The heap room kept for another thread's hold (its next task lets go
    // of it) is not taken here either: a pto_alloc that took it left that
    // task no room, and it failed "cannot drain" (found probing from
    // outside).
    const HeapRing::Block block = Stall(
        sub, lock, {.bytes = size},
        [&]() -> std::optional<HeapRing::Block> {
            if (!holds_.empty() && HeapRoomKeptForAHold(size)) return std::nullopt;
            return heap_.Allocate(size, kBufferOwner);
        },
        [&] { return HeapStuck(size); });
    heap_.SetOwner(block.seq, kBufferOwner | (options_.heap_offset + block.offset));  // known only now
    uint8_t* p = heap_.base() + block.offset;
    // Zero-filled, like calloc: seed 004's Example 2 accumulates every
    // partial product into a new buffer submitted as OUTPUT, which is right
    // only if the buffer starts at zero, on every lap of the heap ring too.
    // No task references the block any more (the ring handed it out).
    std::memset(p, 0, size);
    buffers_.Register(p, size, block.seq).thread = std::this_thread::get_id();
    if (trace::Enabled()) [[unlikely]]
        TraceHeap();
    return p;
}

void TaskGraph::Free(const void* buffer) {
    std::lock_guard sub(submit_mu_);
    Lock lock(*this);
    BufferInfo* b = buffers_.FindBase(static_cast<const uint8_t*>(buffer));
    if (!b) {
        // An address inside a live buffer is not that buffer: freeing it
        // whole from an inner pointer would be a guess.
        if (const BufferInfo* around = buffers_.Find(static_cast<const uint8_t*>(buffer)); around && !around->free_requested)
            Fail(ErrorKind::InvalidArgument,
                 "pto_free: " + Hex(reinterpret_cast<uintptr_t>(buffer)) + " is " +
                     std::to_string(static_cast<const uint8_t*>(buffer) - around->base_ptr) +
                     " bytes inside the live pto_alloc buffer at device address " +
                     Hex(uint64_t(around->base_ptr - options_.memory)) + ": pto_free takes the address pto_alloc returned");
        Fail(ErrorKind::InvalidArgument, "pto_free: " + Hex(reinterpret_cast<uintptr_t>(buffer)) +
                                             " is not a live buffer from pto_alloc (freed already, or never allocated)");
    }
    if (b->free_requested)
        Fail(ErrorKind::InvalidArgument, "pto_free: buffer at device address " +
                                             Hex(uint64_t(b->base_ptr - options_.memory)) + " was freed already");
    if (const KernelProgram* image = ProgramIn(b->base_ptr, b->size)) [[unlikely]]
        FailOverProgram(*image, b->base_ptr, b->size, "pto_free: the buffer", true);
    b->free_requested = true;
    if (BufferTracker::Reclaimable(*b)) ReleaseBuffer(*b);
    WakeWaiters();
}

void TaskGraph::ForgetFailuresIn(const void* at, uint64_t bytes) {
    Lock lock(*this);
    const auto lo = uint64_t(reinterpret_cast<uintptr_t>(at));
    if (!poisoned_.empty()) DropPoisonInside(lo, lo + bytes);
}

size_t TaskGraph::hazard_entries() {
    Lock lock(*this);
    return map_.entries();
}

void TaskGraph::ReleaseBuffer(BufferInfo& b) {
    const auto lo = uint64_t(reinterpret_cast<uintptr_t>(b.base_ptr));
    DropPoisonInside(lo, lo + b.size);
    heap_.Release(b.heap_seq);
    buffers_.Erase(b.base_ptr);
    space_freed_ = true;
    if (trace::Enabled()) [[unlikely]]
        TraceHeap();
}

void TaskGraph::Sleep(Lock& lock, std::chrono::steady_clock::time_point until, std::unique_lock<std::mutex>* submitting) {
    // Armed under the lock: a wake after this (even one from applying the
    // inbox as the lock goes) makes the wait return at once.
    const EventCount::Key key = wake_.Arm();
    lock.unlock();
    if (submitting) submitting->unlock();
    // Tasks on a driven executor (the device's task queues) complete only
    // when a thread reaps them: the waiter does, until what it waits for
    // may have come.
    bool drove = false;
    for (const auto& e : executors_)
        if (e->driven() && e->Drive(wake_.word(), key, until)) {
            drove = true;
            break;
        }
    if (drove)
        wake_.Disarm();
    else
        wake_.Wait(key, std::clamp<std::chrono::nanoseconds>(until - std::chrono::steady_clock::now(),
                                                             std::chrono::nanoseconds(0), std::chrono::seconds(1)));  // callers re-check
    if (submitting) submitting->lock();  // submit_mu_ before mu_, as everywhere
    lock.lock();
}

void TaskGraph::WakeWaiters() {
    // Waiters want space (a stalled submit), no task in flight (WaitAll) or
    // none that can finish by itself (the deadlock checks, the destructor):
    // waking them for anything else cost a futex wake and a context switch
    // per completed task.
    //
    // A stalled submitter is woken once a quarter of the ring is free (or
    // the heap has room for four of its blocks), not for each slot: woken
    // per slot, it and the executor took turns at a futex per task. Waiting
    // longer never hangs it: with nothing left running it is woken
    // (active_ == 0) and goes on or fails.
    if (!wake_.Armed()) {  // the common case, on every completion: nothing to weigh
        space_freed_ = false;
        return;
    }
    const bool ring_ok = stalled_.slots == 0 || ring_.capacity() - ring_.live() >= std::max(1, ring_.capacity() / 4);
    const bool heap_ok =
        stalled_.bytes == 0 || heap_.size() - heap_.used() >= std::min(heap_.size(), 4 * stalled_.bytes);
    const bool stalled = stalled_.slots != 0 || stalled_.bytes != 0;
    const bool room = stalled && space_freed_ && ring_ok && heap_ok;
    if (room || inflight_ == 0 || active_ == 0 || copy_waiters_ != 0) wake_.Notify();
    if (room || !stalled) space_freed_ = false;  // else keep it: the next wake looks again
}

void TaskGraph::ApplyInbox() {
    TaskDescriptor* t = inbox_.TakeAll();
    if (!t) return;
    while (t) {
        TaskDescriptor* next = t->inbox_next;  // read first: completing may consume it
        CompleteFromExecutor(*t, t->inbox_status);
        t = next;
    }
    DrainSkips();
}

void TaskGraph::ApplyInboxAfterUnlock() {
    struct KickAtEnd {  // what applying the inbox made ready, too
        const TaskGraph& graph;
        ~KickAtEnd() { graph.KickAfterUnlock(); }
    } kick{*this};
    // With no task on an executor, nothing can be parked but by a thread
    // that takes mu_ and looks after its own unlock: the fence is skipped.
    // (Read after this thread's unlock or before it, 0 means none was on an
    // executor then, and only a lock holder can put one there.)
    if (on_executors_.load(std::memory_order_relaxed) == 0) return;
    ApplyParkedAfterUnlock(mu_, inbox_, [this] { ApplyInbox(); });
}

void TaskGraph::TraceHeap() {
    if (heap_recording_ != trace::detail::Recording()) {
        heap_recording_ = trace::detail::Recording();
        heap_track_ = trace::detail::NamedTrack(options_.device + " heap ring");
    }
    trace::detail::Counter(heap_track_, "heap ring bytes in use", trace::detail::NowNs(), int64_t(heap_.used()));
}

void TaskGraph::TraceTask(TaskDescriptor& t, const TaskTiming& timing, uint32_t status) {
    trace::detail::TaskSpan(timing.track, timing.category, timing.start_ns, timing.end_ns, t.task_id, t.func_id,
                            timing.sent_ns, timing.reaped_ns, status);
    const uint64_t recording = trace::detail::Recording();
    t.trace_track = timing.track;
    t.trace_end_ns = timing.end_ns;
    t.trace_recording = recording;
    // One arrow per dependency, from the producer's end to this task's
    // start. Producers are held (not consumed) until this task completes,
    // so their descriptors are still theirs. A producer that completed
    // before this task was submitted counts too: it was a dependency, only
    // one that was already satisfied.
    for (int32_t p : t.fanin) {
        const TaskDescriptor& producer = ring_.Get(p);
        // Skipped, EXTERNAL, or run before this recording: no span to start from.
        if (producer.trace_track == 0 || producer.trace_recording != recording) continue;
        // The tail just inside the producer's span, so a viewer binds it there.
        trace::detail::Arrow(producer.trace_track, producer.trace_end_ns > 0 ? producer.trace_end_ns - 1 : 0,
                             timing.track, timing.start_ns);
    }
}

void TaskGraph::CheckNotInATask(const char* call) const {
    // A scope a kernel opened on a worker thread would stay open for good
    // (the thread never ends), and one it ended on the submitting thread
    // would be the orchestration function's.
    if (CpuWorker::RunningTaskOf() == this)
        Fail(ErrorKind::InvalidArgument, std::string(call) +
                                             " called from inside a task of this runtime: scopes are the orchestration "
                                             "thread's; a kernel may submit tasks, outside any scope of its own");
}

int32_t TaskGraph::ScopeBegin(uint32_t* serial) {
    CheckNotInATask("pto_scope_begin");
    std::lock_guard sub(submit_mu_);
    Lock lock(*this);
    const std::thread::id me = std::this_thread::get_id();
    if (scopes_.depth() > 0 && scope_owner_ != me)
        Fail(ErrorKind::Busy,
             "pto_scope_begin while another thread has " + std::to_string(scopes_.depth()) +
                 " scope(s) open on this runtime: the scopes of one runtime nest on one thread at a time",
             EBUSY);
    scopes_.Push(ring_.head_seq(), ++scopes_begun_);
    if (serial) *serial = scopes_begun_;
    scope_owner_ = me;
    tl_holds.Add(anchor_);
    return scopes_.depth();
}

int32_t TaskGraph::ScopeEnd(int32_t depth, uint32_t serial, bool once_inner_end) {
    CheckNotInATask("pto_scope_end");
    std::lock_guard sub(submit_mu_);
    Lock lock(*this);
    const std::thread::id me = std::this_thread::get_id();
    if (depth >= 0) {
        const int32_t open = scope_owner_ == me ? scopes_.depth() : 0;
        // Ended (pto_scope_end) and another begun at its depth since.
        if (depth > 0 && open >= depth && scopes_.SerialAt(depth) != serial)
            Fail(ErrorKind::InvalidArgument, "this scope (depth " + std::to_string(depth) +
                                                 ") was ended already (by pto_scope_end or pto_run); the scope open "
                                                 "at its depth now is another one");
        if (open > depth) {
            if (once_inner_end && depth > 0) scopes_.EndAfterInner(depth);
            return open - depth;
        }
        if (open > 0 && open < depth)
            Fail(ErrorKind::InvalidArgument, "this scope (depth " + std::to_string(depth) +
                                                 ") was ended already (by pto_scope_end or pto_run)");
    }
    if (scopes_.depth() == 0) Fail(ErrorKind::InvalidArgument, "pto_scope_end without an open scope");
    if (scope_owner_ != me)
        Fail(ErrorKind::InvalidArgument, "pto_scope_end of a scope another thread began (the scopes of one runtime "
                                         "nest on one thread at a time)");
    int32_t floor = 0;
    for (const auto& [thread, depth] : scope_floors_)
        if (thread == me) floor = depth;
    if (scopes_.depth() <= floor)
        Fail(ErrorKind::InvalidArgument, "pto_scope_end of a scope the orchestration function did not begin "
                                         "(pto_run keeps the function inside scopes of its own)");
    ScopeRecord scope = *scopes_.Pop();
    LetGoOfScope(scope);
    // Scopes let go of out of order (EndAfterInner) end with the last of
    // their inner ones; the outermost ended reports (its failures include
    // those of the scopes inside it).
    while (scopes_.depth() > floor && scopes_.InnermostEndsNow()) {
        scope = *scopes_.Pop();
        LetGoOfScope(scope);
    }
    if (scopes_.depth() == 0) scope_owner_ = std::thread::id();
    const int32_t end = ring_.head();  // the next id
    WakeWaiters();
    if (scope.first_task >= 0) {
        throw FailureReport("scope of tasks [" + std::to_string(ring_.IdOf(scope.begin)) + ", " + std::to_string(end) + "): ",
                            *scope.first_root, scope.failed, scope.skipped);
    }
    return 0;
}

void TaskGraph::LetGoOfScope(const ScopeRecord& scope) {
    // The scope lets go of the tasks it holds: those of its tasks with
    // implicit outputs, all still live (ids below the tail are reclaimed,
    // and held tasks never are).
    for (int64_t seq = std::max(scope.begin, ring_.tail_seq()); seq < ring_.head_seq(); ++seq) {
        TaskDescriptor& t = ring_.AtSeq(seq);
        if (!t.has_heap_block || !t.in_scopes) continue;
        ++t.fanout_refcount;
        TryConsume(t);
    }
    if (ring_.Reclaim()) space_freed_ = true;
}

int32_t TaskGraph::SetScopeFloor(int32_t depth) {
    Lock lock(*this);
    const std::thread::id me = std::this_thread::get_id();
    auto it = std::find_if(scope_floors_.begin(), scope_floors_.end(), [&](const auto& f) { return f.first == me; });
    const int32_t was = it == scope_floors_.end() ? 0 : it->second;
    if (it != scope_floors_.end() && depth == 0) scope_floors_.erase(it);
    else if (it != scope_floors_.end()) it->second = depth;
    else if (depth != 0) scope_floors_.emplace_back(me, depth);
    return was;
}

int32_t TaskGraph::ScopeDepthOfThisThread() const {
    Lock lock(*this);
    return scope_owner_ == std::this_thread::get_id() ? scopes_.depth() : 0;
}

int32_t TaskGraph::Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params) {
    SPYRE_TRACE_SCOPE("pto_submit_task");
    std::unique_lock sub(submit_mu_);
    Lock lock(*this);
    std::chrono::steady_clock::time_point since{};
    for (;;) {
        StallNeed need;
        if (const std::optional<int32_t> id = TrySubmit(sub, lock, kernel_id, worker_type, params, need)) return *id;
        if (since == std::chrono::steady_clock::time_point{}) since = std::chrono::steady_clock::now();
        need.since = since;
        // Both locks go while it waits: checked again from the start after
        // (another thread may have freed a buffer it names meanwhile).
        WaitForRoom(sub, lock, need, [&] { return need.slots ? TaskRingStuck() : HeapStuck(need.bytes); });
    }
}

// Inlined into Submit: as a call of its own, an empty task took about 10 ns more.
[[gnu::always_inline]] inline std::optional<int32_t> TaskGraph::TrySubmit(std::unique_lock<std::mutex>& sub, Lock& lock, int32_t kernel_id,
                                            int32_t worker_type, std::span<const TaskParam> params, StallNeed& need) {
    // Everything is checked before a slot is taken.
    const auto k = kernels_.find(kernel_id);
    if (k == kernels_.end()) Fail(ErrorKind::InvalidArgument, "kernel " + std::to_string(kernel_id) + " is not registered");
    if (worker_type < 0 || worker_type >= PTO_WORKER_TYPES)
        Fail(ErrorKind::InvalidArgument, "worker type " + std::to_string(worker_type) + " does not exist (0.." +
                                             std::to_string(PTO_WORKER_TYPES - 1) + ")");
    if (worker_type != WORKER_EXTERNAL && !RouteFor(worker_type, *k->second).executor->CanRun(*k->second))
        Fail(ErrorKind::InvalidArgument, "kernel " + std::to_string(kernel_id) + " cannot run on worker type " +
                                             std::to_string(worker_type) + " (its executor, " +
                                             routes_[worker_type].executor->name() + ", has no implementation of it)");
    if (params.size() > PTO_MAX_PARAMS)
        Fail(ErrorKind::InvalidArgument, "task has " + std::to_string(params.size()) + " parameters, at most " +
                                             std::to_string(PTO_MAX_PARAMS) + " are allowed");
    ResolvedParam resolved[PTO_MAX_PARAMS];
    uint64_t implicit_bytes = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        const TaskParam& p = params[i];
        // Messages are built only on failure: this loop is on the submit path.
        auto where = [&] { return "parameter " + std::to_string(i) + " (" + ParamKindName(p.kind) + ")"; };
        if (p.kind != PARAM_INPUT && p.kind != PARAM_OUTPUT && p.kind != PARAM_INOUT)
            Fail(ErrorKind::InvalidArgument, "parameter " + std::to_string(i) + " has unknown kind " + std::to_string(p.kind));
        const bool as_region = p.region.buffer_ptr || p.region.size || p.region.offset;
        if (as_region && (p.buffer || p.size))
            Fail(ErrorKind::InvalidArgument, where() + " sets both buffer/size and region: use one spelling");
        uint8_t* base = static_cast<uint8_t*>(as_region ? p.region.buffer_ptr : p.buffer);
        const uint64_t size = as_region ? p.region.size : p.size;
        if (size == 0) Fail(ErrorKind::InvalidArgument, where() + " has size 0");
        ResolvedParam& r = resolved[i];
        r = {nullptr, size, p.kind, false, false};
        if (!base) {
            if (p.kind != PARAM_OUTPUT)
                Fail(ErrorKind::InvalidArgument, where() + " has no buffer: only an OUTPUT can be allocated implicitly");
            if (as_region && p.region.offset != 0)
                Fail(ErrorKind::InvalidArgument, where() + " has no buffer but a region offset of " +
                                                     std::to_string(p.region.offset) +
                                                     ": an implicit output is allocated whole, at no offset");
            // Checked before rounding: a size near 2^64 would round to 0.
            if (size > heap_.size())
                Fail(ErrorKind::OutOfMemory, where() + ": an implicit output of " + std::to_string(size) +
                                                 " bytes is larger than the heap ring (" +
                                                 std::to_string(heap_.size()) + " bytes)");
            r.implicit = true;
            implicit_bytes += HeapRing::RoundUp(size);  // at most PTO_MAX_PARAMS heaps: no overflow
            continue;
        }
        if (as_region) {
            if (!InMemory(base, 1)) FailOutside(base, 1, where());
            if (p.region.offset > uint64_t(options_.memory + options_.memory_size - base))
                Fail(ErrorKind::InvalidArgument, where() + ": region offset " + std::to_string(p.region.offset) +
                                                     " is outside the function's memory");
            base += p.region.offset;
        }
        if (!InMemory(base, size)) FailOutside(base, size, where());
        bool partial = false;
        BufferInfo* b = buffers_.Find(base, size, &partial);
        if (b && b->free_requested)
            Fail(ErrorKind::InvalidArgument, where() + " refers to a buffer already freed with pto_free (device address " +
                                                 Hex(uint64_t(b->base_ptr - options_.memory)) + ")");
        r.in_outputs = !b && !partial && InHeap(base, size);
        if (partial)
            Fail(ErrorKind::InvalidArgument, where() + " [device address " + Hex(uint64_t(base - options_.memory)) +
                                                 ", +" + std::to_string(size) + ") runs past the end of its pto_alloc buffer");
        if (!b && !r.in_outputs && confined_to_) [[unlikely]]
            CheckConfined(base, size, p.kind != PARAM_INPUT, where());
        // Nothing the ring or a buffer holds: maybe a registered program,
        // which every later task of its kernel would run as written.
        if (p.kind != PARAM_INPUT && !r.in_outputs && !program_images_.empty()) [[unlikely]]
            if (const KernelProgram* image = ProgramIn(base, size))
                FailOverProgram(*image, base, size, where() + " writes", false);
        r.host = base;
    }

    if (k->second->slots.count >= 0) {
        uint64_t sizes[PTO_MAX_PARAMS], addresses[PTO_MAX_PARAMS];
        int32_t kinds[PTO_MAX_PARAMS];
        for (size_t i = 0; i < params.size(); ++i) {
            sizes[i] = resolved[i].size, kinds[i] = params[i].kind;
            addresses[i] = resolved[i].host ? uint64_t(resolved[i].host - options_.memory) : 0;  // implicit: aligned
        }
        const std::string wrong = SlotUseError(kernel_id, k->second->slots, std::span(sizes, params.size()),
                                               std::span(addresses, params.size()), std::span(kinds, params.size()));
        if (!wrong.empty()) Fail(ErrorKind::InvalidArgument, wrong);
    }
    if (implicit_bytes > heap_.size())
        Fail(ErrorKind::OutOfMemory, "the task's implicit outputs need " + std::to_string(implicit_bytes) +
                                         " bytes, more than the heap ring (" + std::to_string(heap_.size()) + " bytes)");
    // 1. A slot from the task ring, 2. implicit outputs packed in one heap
    // block; neither is kept when the other has no room.
    // Half of each ring is kept for another thread's open scopes: they
    // hold their tasks until they end, the rings are reused in order
    // behind them, and a depth-0 thread that filled the rest left the
    // scopes no room to end (found probing from outside).
    if (scopes_.depth() > 0 && RoomKeptForAnotherThreadsScopes(implicit_bytes)) [[unlikely]] {
        need = {.slots = 1, .bytes = implicit_bytes, .behind_scopes = true};
        return std::nullopt;
    }
    // The last free slot is kept for the thread whose hold keeps the oldest
    // task: its next task lets go of the hold, and the ring comes back.
    // Taken by another thread, that next task would find no slot, and the
    // ring could not drain.
    if (!holds_.empty()) [[unlikely]] {
        if (SlotKeptForAHold()) {
            need = {.slots = 1};
            return std::nullopt;
        }
        if (HeapRoomKeptForAHold(implicit_bytes)) {
            need = {.bytes = implicit_bytes};
            return std::nullopt;
        }
    }
    const std::optional<int32_t> slot = ring_.Allocate();
    if (!slot) {
        need = {.slots = 1};
        return std::nullopt;
    }
    const int32_t id = *slot;
    if (ring_.head_seq() >= next_forget_seq_) [[unlikely]]
        ForgetBeforeIdsComeRound();
    TaskDescriptor& t = ring_.Get(id);
    if (implicit_bytes) {
        const std::optional<HeapRing::Block> b = heap_.Allocate(implicit_bytes, uint64_t(id));
        if (!b) {
            ring_.Unallocate();  // nobody else allocates: this thread holds submit_mu_
            need = {.bytes = implicit_bytes};
            return std::nullopt;
        }
        t.heap_seq = b->seq;
        t.heap_bytes = implicit_bytes;
        t.has_heap_block = true;
        t.packed_buffer_base = reinterpret_cast<uint64_t>(heap_.base() + b->offset);
        if (trace::Enabled()) [[unlikely]]
            TraceHeap();
    }
    t.func_id = kernel_id;
    t.core_type = worker_type;
    t.kernel = k->second.get();
    t.submitter = std::this_thread::get_id();
    t.num_params = int32_t(params.size());
    uint8_t* next = reinterpret_cast<uint8_t*>(t.packed_buffer_base);
    for (int32_t i = 0; i < int32_t(params.size()); ++i) {
        // Field by field: as one copy of the array, GCC made it a `rep movs`,
        // slow to start for a few dozen bytes (a tenth of a submission).
        const ResolvedParam& r = resolved[i];
        uint8_t* host = r.host;
        if (r.implicit) {
            host = next;
            next += HeapRing::RoundUp(r.size);
        }
        t.params[i].host = host;
        t.params[i].size = r.size;
        t.params[i].kind = r.kind;
        t.params[i].implicit = r.implicit;
        t.params[i].in_outputs = r.in_outputs;
    }
    // 3. Dependencies: look every region up first, then file this task's
    // accesses (a task never waits for itself).
    deps_.clear();
    auto alive = [this](int32_t task) { return Alive(task); };
    bool uses_outputs = false;
    // Reads first: the writers they meet are the producers this task reads
    // from, which pass a failure on (fan_out.hpp); the writes' lookups then
    // add those it only follows (WAW, WAR). An INOUT is looked up both ways.
    for (int32_t i = 0; i < t.num_params; ++i) {
        const ResolvedParam& p = t.params[i];
        if (p.implicit) continue;  // fresh memory: nobody else touches it yet
        if (p.kind != PARAM_OUTPUT)
            map_.Lookup(0, uint64_t(reinterpret_cast<uintptr_t>(p.host)), p.size, false, id, alive, deps_);
        uses_outputs |= p.in_outputs;
    }
    deps_read_ = deps_.size();
    for (int32_t i = 0; i < t.num_params; ++i) {
        const ResolvedParam& p = t.params[i];
        if (!p.implicit && p.kind != PARAM_INPUT)
            map_.Lookup(0, uint64_t(reinterpret_cast<uintptr_t>(p.host)), p.size, true, id, alive, deps_);
    }
    const bool poison_kept = !poisoned_.empty();
    if (poison_kept) [[unlikely]]
        InheritPoison(t);
    if (uses_outputs) [[unlikely]]
        CheckOutputsUsed(t);  // before anything is filed: a refusal takes nothing
    // A write drops the entries it covers, and cuts what it covers out of
    // those it covers in part: a kept failed writer's too (that part is good
    // again: a reader of it alone was skipped), unless this task is
    // poisoned itself. A region is what its task declares it writes whole.
    auto keep = [this, &t, poison_kept](int32_t task) { return poison_kept && t.gate.root && !Unconsumed(task); };
    for (int32_t i = 0; i < t.num_params; ++i) {
        const ResolvedParam& p = t.params[i];
        map_.Insert(0, uint64_t(reinterpret_cast<uintptr_t>(p.host)), p.size, p.kind != PARAM_INPUT, id, keep);
        if (p.implicit) continue;
        if (BufferInfo* b = buffers_.Find(p.host, p.size)) {
            bool seen = false;
            for (uint64_t base : t.buffers) seen |= base == uint64_t(reinterpret_cast<uintptr_t>(b->base_ptr));
            if (!seen) {
                t.buffers.push_back(uint64_t(reinterpret_cast<uintptr_t>(b->base_ptr)));
                ++b->live_refs;
            }
            if (p.kind != PARAM_INPUT) buffers_.AddWriter(*b, id);
        }
    }
    // Completions apply under the lock this holds: nothing counts the
    // fan-in down before the task is published.
    t.fanin_reads = deps_read_;
    for (size_t i = 0; i < deps_.size(); ++i) {
        const int32_t d = deps_[i];
        TaskDescriptor& producer = ring_.Get(d);
        // Every producer is held (not consumed, its heap block not reused)
        // until this task completes; one completed already is not waited
        // for, but passes on its failure, if any, when this task reads from it.
        ++producer.fanout_count;
        t.fanin.push_back(d);
        if (dependency::Meet(t.gate, producer.gate,
                             producer.state.load(std::memory_order_relaxed) == TaskState::Completed,
                             [&] { return i < deps_read_ && ring_.SeqOf(d) >= reported_below_seq_; }))
            producer.fanout.push_back(id);
    }
    // This thread's depth-0 outputs the task reads are its to hold now, as
    // their consumer.
    if (uses_outputs && !holds_.empty()) LetGoHoldsReadBy(t);
    // 4. Implicit outputs are kept by one reference per open scope (seed
    // 004: fanout = consumers + scope depth), or outside any scope by the
    // submitting thread (the depth-0 rule, holds_). Other tasks are held
    // only by their consumers, so a scope of any length streams through
    // the ring. The scopes are their owner's: a task another thread submits
    // meanwhile is at that thread's depth 0 (held by the scopes, it was let
    // go of when they ended, before its thread read it: found probing from
    // outside).
    // A kernel run on the orchestration thread (RunHere) submits as a
    // worker's kernel does: whether its tasks counted in the scopes (their
    // failures in the scope's report) depended on which thread ran it.
    t.in_scopes = scopes_.depth() > 0 && scope_owner_ == std::this_thread::get_id() && !CpuWorker::RunningTasks();
    if (t.has_heap_block) {
        if (!t.in_scopes) Hold(t);
        else t.fanout_count += scopes_.depth();
    }
    ++inflight_;
    ++submitted_;
    if (t.gate.fanin_remaining == 0) {
        if (RunsHere(t)) {
            RunHere(sub, lock, t);
            return id;
        }
        MakeReady(t);
    } else {
        PushEarly(t);
    }
    DrainSkips();
    return id;
}

bool TaskGraph::PushEarly(TaskDescriptor& t) {
    if (t.gate.root || t.core_type == WORKER_EXTERNAL) return false;
    const Route& route = RouteFor(t.core_type, *t.kernel);
    if (!route.orders_after) return false;
    int32_t n = 0;
    for (size_t i = 0; i < t.fanin.size(); ++i) {
        const int32_t p = t.fanin[i];
        const TaskDescriptor& producer = ring_.Get(p);
        const TaskState s = producer.state.load(std::memory_order_relaxed);
        if (s == TaskState::Completed) continue;  // met at submission: not waited for
        // Waited for: it must be on the same executor already (not pending,
        // not run on a host thread), and the list short.
        if (s != TaskState::Ready || n == TaskDescriptor::kMaxAfter ||
            RouteFor(producer.core_type, *producer.kernel).executor != route.executor)
            return false;
        // Producers it only follows (WAW, WAR) are named too. The card
        // fails a task behind one that did not succeed whatever the edge,
        // where such an edge must not skip it (fan_out.hpp): CompleteEarly
        // then sends it again. Left to the host, each such task waited
        // for a reap of its producer (Example 2's copies: a third of the
        // host's CPU per run).
        t.after_ids[n++] = p;
    }
    t.after_count = n;
    t.pushed_early = true;
    Push(t);
    return true;
}

bool TaskGraph::RunsHere(const TaskDescriptor& t) const {
    return options_.run_cheap_host_tasks_here && !t.gate.root && t.core_type != WORKER_EXTERNAL &&
           RouteFor(t.core_type, *t.kernel).executor == executors_.front() && t.kernel->host_cost.Cheap();
}

void TaskGraph::RunHere(std::unique_lock<std::mutex>& submitting, Lock& lock, TaskDescriptor& t) {
    t.state.store(TaskState::Running, std::memory_order_relaxed);
    ++active_;
    // One run in 32 is timed: two clock reads cost as much as the
    // bookkeeping of a task. A traced run is always timed.
    const bool timed = (++runs_here_ & 31) == 0;
    // Both locks go while it runs: the task is published (nothing of this
    // submission is left to guard), and its kernel may call back into the
    // runtime, a submission of its own included.
    lock.unlock();
    submitting.unlock();
    const CpuWorker::RunningTask running(this);
    TaskTiming timing;
    const bool traced = trace::Enabled();
    uint32_t status;
    if (traced) [[unlikely]] {
        timing.track = trace::detail::NamedTrack(options_.device + " submitting thread");
        timing.start_ns = trace::detail::NowNs();
        status = CpuWorker::RunTimed(t);
        timing.end_ns = trace::detail::NowNs();
    } else {
        status = timed ? CpuWorker::RunTimed(t) : CpuWorker::Run(t);
    }
    lock.lock();
    CompleteLocked(t, status, false, traced ? &timing : nullptr);
    DrainSkips();
}

void TaskGraph::MakeReady(TaskDescriptor& t) {
    if (t.gate.root && !t.pushed_early) [[unlikely]] {  // a producer failed: skipped, not run
        skip_work_.push_back(t.task_id);
        return;
    }
    if (t.core_type == WORKER_EXTERNAL) {
        t.state.store(TaskState::Running, std::memory_order_relaxed);
        if (t.early_done) CompleteLocked(t, t.early_code, false);
        return;
    }
    if (t.pushed_early) [[unlikely]] {  // on its executor already; its completion came first
        if (t.early_done) skip_work_.push_back(t.task_id);  // DrainSkips completes it
        return;
    }
    Push(t);
}

void TaskGraph::Push(TaskDescriptor& t) {
    t.state.store(TaskState::Ready, std::memory_order_relaxed);
    ++active_;
    on_executors_.store(on_executors_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // mu_ held
    ToItsQueue(t);
}

void TaskGraph::ToItsQueue(TaskDescriptor& t) {
    const Route& route = RouteFor(t.core_type, *t.kernel);
    route.queue->Push({t.task_id, &t});
    if (route.driven) kick_.store(true, std::memory_order_relaxed);
}

void TaskGraph::KickExecutors() const noexcept {
    for (const auto& e : executors_)
        if (e->driven()) e->Kick();
}

void TaskGraph::DrainSkips() {
    while (!skip_work_.empty()) {
        const int32_t id = skip_work_.back();
        skip_work_.pop_back();
        TaskDescriptor& t = ring_.Get(id);
        if (t.pushed_early)
            CompleteEarly(t);
        else
            CompleteLocked(t, 0, true);
    }
    if (ring_.Reclaim()) space_freed_ = true;
    WakeWaiters();
}

void TaskGraph::CompleteFromExecutor(TaskDescriptor& t, uint32_t status, const TaskTiming* timing) {
    if (!t.pushed_early) [[likely]] {
        CompleteLocked(t, status, false, timing);
        return;
    }
    t.early_done = true;
    t.early_code = status;
    // Its producers' completions may still be parked behind it: their
    // releases apply first, then MakeReady completes it.
    if (t.gate.fanin_remaining == 0) CompleteEarly(t, timing);
}

void TaskGraph::CompleteEarly(TaskDescriptor& t, const TaskTiming* timing) {
    // The executor did not run it because a producer failed: a skip, with
    // that producer's root. For a producer it only follows, it must run:
    // its producers have all ended, so it goes again, waiting for none.
    // DEPENDENCY_FAILED with no failed producer is the executor's own
    // failure and stays one.
    const bool dependency_failed = t.early_code == SPYRE_ERR_DEPENDENCY_FAILED;
    if (dependency_failed && !t.gate.root && FollowedAProducerThatDidNotSucceed(t)) {
        SendAgain(t);
        return;
    }
    const bool skipped = dependency_failed && t.gate.root;
    CompleteLocked(t, skipped ? 0 : t.early_code, skipped, timing);
}

bool TaskGraph::FollowedAProducerThatDidNotSucceed(const TaskDescriptor& t) const {
    for (int32_t i = 0; i < t.after_count; ++i) {
        // Held until t completes (its fan-out counts t): still this producer.
        const TaskDescriptor& p = ring_.Get(t.after_ids[i]);
        if (p.outcome != TaskOutcome::Ok || p.sent_again) return true;
    }
    return false;
}

void TaskGraph::SendAgain(TaskDescriptor& t) {
    // Still READY and counted on its executor since its first push.
    t.pushed_early = false;
    t.early_done = false;
    t.early_code = 0;
    t.after_count = 0;
    t.sent_again = true;
    ToItsQueue(t);
}

void TaskGraph::CompleteLocked(TaskDescriptor& t, uint32_t status, bool skipped, const TaskTiming* timing) {
    // A task skipped on the card (its producer failed) never ran: no span,
    // as a skipped host task has none (it was traced as one that ran and
    // succeeded: found probing from outside).
    if (timing && !skipped && trace::Enabled()) [[unlikely]]
        TraceTask(t, *timing, status);
    const TaskState was = t.state.load(std::memory_order_relaxed);
    if (was == TaskState::Ready || (was == TaskState::Running && t.core_type != WORKER_EXTERNAL)) --active_;
    // Executors leave a task READY until it completes (RUNNING and not
    // EXTERNAL is a task run on the submitting thread).
    if (was == TaskState::Ready)
        on_executors_.store(on_executors_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);  // mu_ held
    --inflight_;
    ++completed_;
    if (skipped) {
        t.outcome = TaskOutcome::Skipped;
        NoteFailure(t);
    } else if (status != 0) {
        t.outcome = TaskOutcome::Failed;
        t.gate.root = FailureOf(t, status);
        NoteFailure(t);
    } else {
        t.outcome = TaskOutcome::Ok;
    }
    t.state.store(TaskState::Completed, std::memory_order_release);
    // Its root (null: it completed well) poisons its consumers.
    dependency::Release(
        t.gate.root, t.fanout, [this](int32_t c) -> TaskDescriptor& { return ring_.Get(c); },
        [this](TaskDescriptor& consumer) { MakeReady(consumer); },
        [&t](const TaskDescriptor& consumer) { return ReadsFrom(consumer, t.task_id); });
    for (int32_t p : t.fanin) {
        TaskDescriptor& producer = ring_.Get(p);
        ++producer.fanout_refcount;
        TryConsume(producer);
    }
    TryConsume(t);
    if (!holds_.empty()) [[unlikely]]
        LetGoHoldsTakenBy(t.task_id);
}

void TaskGraph::LetGoHoldsTakenBy(int32_t kernel_task) {
    LetGoHoldsWhere([&](const Held& h) { return h.kernel_task == kernel_task; });
}

template <typename Which>
bool TaskGraph::LetGoHoldsWhere(Which&& which) {
    bool any = false;
    for (size_t h = 0; h < holds_.size();) {
        if (!which(holds_[h])) {
            ++h;
            continue;
        }
        const int32_t task = holds_[h].task;
        holds_.erase(holds_.begin() + std::ptrdiff_t(h));
        LetGo(task);
        any = true;
    }
    return any;
}

void TaskGraph::TryConsume(TaskDescriptor& t) {
    if (t.state.load(std::memory_order_relaxed) != TaskState::Completed || t.fanout_refcount < t.fanout_count) return;
    t.state.store(TaskState::Consumed, std::memory_order_relaxed);
    if (t.outcome != TaskOutcome::Ok) [[unlikely]]
        KeepPoisonedWrites(t);
    if (t.has_heap_block) {
        if (!poisoned_.empty()) [[unlikely]]
            DropPoisonInside(t.packed_buffer_base, t.packed_buffer_base + t.heap_bytes);
        // A failed or skipped task a scope still holds may have written into
        // these outputs: its entries there would skip the readers of the
        // next block at that address (a pto_alloc buffer, which no task
        // writes before it is read). Every task that touched them has
        // completed: each holds their owner (met in the map, or found by
        // CheckOutputsUsed behind a writer that covered them). Only while a
        // failure is unreported: a reported one poisons nothing.
        if (!failures_.empty()) [[unlikely]]
            map_.EraseInside(0, t.packed_buffer_base, t.heap_bytes);
        heap_.Release(t.heap_seq);
        space_freed_ = true;
        if (trace::Enabled()) [[unlikely]]
            TraceHeap();
    }
    for (uint64_t base : t.buffers) {
        BufferInfo* b = buffers_.FindBase(reinterpret_cast<const uint8_t*>(uintptr_t(base)));
        if (b && --b->live_refs == 0 && BufferTracker::Reclaimable(*b)) ReleaseBuffer(*b);
    }
}

void TaskGraph::LetGo(int32_t task_id) {
    TaskDescriptor& t = ring_.Get(task_id);
    ++t.fanout_refcount;
    TryConsume(t);
    if (ring_.Reclaim()) space_freed_ = true;
}

int32_t TaskGraph::RunningKernelTask() const {
    if (CpuWorker::RunningTaskOf() == this)
        if (const CpuWorker::TaskFrame* f = CpuWorker::RunningTasks(); f && &ring_.Get(f->task->task_id) == f->task)
            return f->task->task_id;
    return -1;
}

TaskGraph::Held& TaskGraph::Hold(TaskDescriptor& t, bool newest) {
    ++t.fanout_count;
    const std::thread::id me = std::this_thread::get_id();
    holds_.push_back({me, t.task_id, RunningKernelTask()});
    tl_holds.Add(anchor_);
    if (newest) {
        auto it = std::find_if(newest_holds_.begin(), newest_holds_.end(), [&](const Held& n) { return n.thread == me; });
        if (it == newest_holds_.end()) newest_holds_.push_back({me, t.task_id});
        else it->task = t.task_id;
    }
    return holds_.back();
}

TaskGraph::Held* TaskGraph::HoldOfThisThread(int32_t task_id) {
    const std::thread::id me = std::this_thread::get_id();
    const int32_t kernel_task = RunningKernelTask();
    for (Held& h : holds_)
        if (h.task == task_id && h.thread == me && h.kernel_task == kernel_task) return &h;
    return nullptr;
}

bool TaskGraph::ReadsFrom(const TaskDescriptor& consumer, int32_t producer) {
    const auto reads_end = consumer.fanin.begin() + std::ptrdiff_t(consumer.fanin_reads);
    return std::find(consumer.fanin.begin(), reads_end, producer) != reads_end;
}

uint32_t TaskGraph::OutputsTouched(const TaskDescriptor& owner, const ResolvedParam& p) {
    const auto lo = uint64_t(reinterpret_cast<uintptr_t>(p.host)), hi = lo + p.size;
    uint32_t touched = 0;
    for (int32_t i = 0; i < owner.num_params; ++i) {
        const ResolvedParam& o = owner.params[i];
        const auto olo = uint64_t(reinterpret_cast<uintptr_t>(o.host));
        if (o.implicit && lo < olo + o.size && olo < hi) touched |= 1u << i;
    }
    return touched;
}

bool TaskGraph::Covers(const TaskDescriptor& owner, const ResolvedParam& p) {
    const auto a = uint64_t(reinterpret_cast<uintptr_t>(p.host));
    return owner.has_heap_block && a >= owner.packed_buffer_base && a - owner.packed_buffer_base < owner.heap_bytes &&
           p.size <= owner.packed_buffer_base + owner.heap_bytes - a;
}

void TaskGraph::CheckOutputsUsed(TaskDescriptor& t) {
    for (int32_t i = 0; i < t.num_params; ++i) {
        const ResolvedParam& p = t.params[i];
        if (!p.in_outputs) continue;
        // The producer is among the live tasks the lookups found (it wrote
        // the block); it must have handed the address out (pto_task_output):
        // otherwise the address came from a task that is gone, and the
        // bytes there are another's, or nobody's.
        bool live = false;
        for (int32_t d : deps_) live |= Covers(ring_.Get(d), p) && ring_.Get(d).outputs_handed_out != 0;
        // A later task that wrote the whole range (OUTPUT or INOUT of it)
        // took the producer's place in the region map: look for the
        // producer among the live tasks then (rare: a scan of the ring),
        // and hold it as this task's producer too, one it only follows (it
        // finished before that writer began). Held through the writer alone,
        // its block went back to the heap ring once the writer completed,
        // and this task, still to run, read or wrote the next owner's bytes
        // there (found probing from outside).
        for (int64_t seq = ring_.tail_seq(); !live && seq < ring_.SeqOf(t.task_id); ++seq) {
            const TaskDescriptor& owner = ring_.AtSeq(seq);
            live = owner.state.load(std::memory_order_relaxed) < TaskState::Consumed && Covers(owner, p) &&
                   owner.outputs_handed_out != 0;
            if (live && std::find(deps_.begin(), deps_.end(), owner.task_id) == deps_.end())
                deps_.push_back(owner.task_id);
        }
        if (live) continue;
        const uint64_t device_address = uint64_t(p.host - options_.memory);
        // Refused whole: the slot and the heap block go back.
        if (t.has_heap_block) heap_.Release(t.heap_seq);
        ring_.Unallocate();
        Fail(ErrorKind::InvalidArgument,
             "parameter " + std::to_string(i) + " [device address " + Hex(device_address) + ", +" +
                 std::to_string(p.size) +
                 ") lies in the heap ring but not inside a live task's implicit outputs that pto_task_output handed "
                 "out, nor a live pto_alloc buffer: a buffer freed with pto_free whose tasks are done, or an output used "
                 "after its task was let go (" + kHoldRule + ")");
    }
}

void TaskGraph::LetGoHoldsReadBy(const TaskDescriptor& t) {
    const std::thread::id self = std::this_thread::get_id();
    for (size_t h = 0; h < holds_.size();) {
        const Held held = holds_[h];
        TaskDescriptor& owner = ring_.Get(held.task);
        bool read = false;
        uint32_t touched = 0;  // one read per output, however many params of t reach it
        if (held.thread == self)
            for (int32_t i = 0; i < t.num_params; ++i)
                if (t.params[i].in_outputs && Covers(owner, t.params[i])) {
                    read = true;
                    touched |= OutputsTouched(owner, t.params[i]);
                }
        for (int32_t o = 0; touched; ++o, touched >>= 1)
            if ((touched & 1) && holds_[h].unread[size_t(o)] > 0) --holds_[h].unread[size_t(o)];
        // It stays while an ask of this thread is still unread (its reader
        // holds it as a consumer from now on all the same).
        if (!read || !holds_[h].AllRead()) {
            ++h;
            continue;
        }
        holds_.erase(holds_.begin() + std::ptrdiff_t(h));
        LetGo(held.task);
    }
}

bool TaskGraph::LetGoHoldsNotHandedOut() {
    // Each thread's newest task that took a hold keeps it: its submitter
    // may not have asked for the address yet (Example 1 asks right after
    // submitting). An older hold stays no longer for being the newest
    // left (a newer one went when a later task read it).
    std::vector<bool> goes(holds_.size());
    for (size_t h = 0; h < holds_.size(); ++h) {
        const bool newest = std::any_of(newest_holds_.begin(), newest_holds_.end(), [&](const Held& n) {
            return n.thread == holds_[h].thread && n.task == holds_[h].task;
        });
        goes[h] = !newest && holds_[h].AllRead();
    }
    std::vector<int32_t> going;
    size_t kept = 0;
    for (size_t h = 0; h < holds_.size(); ++h) {
        if (goes[h]) going.push_back(holds_[h].task);
        else holds_[kept++] = holds_[h];
    }
    holds_.resize(kept);
    for (int32_t task : going) LetGo(task);
    return !going.empty();
}

void TaskGraph::LetGoHoldsOf(std::thread::id thread) {
    if (LetGoHoldsWhere([&](const Held& h) { return h.thread == thread; })) DrainSkips();
}

void TaskGraph::ThreadExiting() {
    std::lock_guard sub(submit_mu_);
    Lock lock(*this);
    const std::thread::id me = std::this_thread::get_id();
    if (!holds_.empty()) LetGoHoldsOf(me);
    std::erase_if(newest_holds_, [&](const Held& n) { return n.thread == me; });
    std::erase_if(scope_floors_, [&](const auto& f) { return f.first == me; });
    if (scopes_.depth() == 0 || scope_owner_ != me) return;
    SPYRE_LOG_WARN("a thread exited with %d scope(s) open on the orchestration runtime of %s: ended for it (their "
                   "failures are reported by the next wait)",
                   int(scopes_.depth()), options_.device.empty() ? "the host" : options_.device.c_str());
    while (const std::optional<ScopeRecord> scope = scopes_.Pop()) LetGoOfScope(*scope);
    scope_owner_ = std::thread::id();
    WakeWaiters();
}

dependency::Root TaskGraph::FailureOf(const TaskDescriptor& t, uint32_t status) const {
    auto f = std::make_shared<TaskFailureInfo>();
    f->task = "task " + std::to_string(t.task_id);
    f->task_id = uint64_t(t.task_id);
    f->level = Level::CoreGroup;
    f->device = options_.device;
    f->function = "kernel " + std::to_string(t.func_id);
    f->kernel_id = t.func_id;
    const bool on_host = t.core_type != WORKER_EXTERNAL && RouteFor(t.core_type, *t.kernel).executor == executors_.front();
    if (!on_host && status == kDeviceLostStatus) {
        std::lock_guard lock(lost_mu_);
        f->kind = ErrorKind::DeviceLost;
        f->cause = "the device was lost (" + device_lost_ + ")";  // it never ran or ended: no code
        return f;
    }
    if (on_host && status == kHostKernelThrew && !t.thrown.empty()) {
        f->kind = ErrorKind::TaskFailed;
        f->cause = "host kernel threw: " + t.thrown;  // it returned no code: device_code stays 0
        return f;
    }
    f->kind = ErrorKind::DeviceError;
    f->device_code = status;
    // The caller's code (pto_task_fail) is its own, as a host kernel's is: not a SPYRE_ERR_*.
    const bool external = t.core_type == WORKER_EXTERNAL;
    f->host_kernel_code = on_host || external;
    f->cause = (external  ? "pto_task_fail code "
                : on_host ? "host kernel return code "
                          : "device error code ") +
               std::to_string(status);
    return f;
}

void TaskGraph::NoteFailure(const TaskDescriptor& t) {
    const TaskFailureInfo& root = *t.gate.root;  // its own, or the one it was skipped for
    const bool skipped = t.outcome == TaskOutcome::Skipped;
    // The root's record, naming this task: a skipped task reports the cause it was skipped for.
    TaskFailureInfo& f = failures_.emplace_back(root);
    if (skipped) {
        f.task = "task " + std::to_string(t.task_id);
        f.task_id = uint64_t(t.task_id);
        f.function = "kernel " + std::to_string(t.func_id);
        f.kernel_id = t.func_id;
    }
    f.skipped = skipped;
    f.root_task_id = int64_t(root.task_id);
    f.root_kernel_id = root.kernel_id;
    failure_roots_.push_back(t.gate.root);
    if (t.in_scopes) scopes_.NoteFailure(ring_.SeqOf(t.task_id), t.task_id, t.func_id, skipped, t.gate.root);
}

template <typename Drop>
void TaskGraph::DropKeptRanges(int32_t id, PoisonedWrites& kept, Drop&& drop) {
    std::vector<std::pair<uint64_t, uint64_t>> gone;
    std::erase_if(kept.ranges, [&](const std::pair<uint64_t, uint64_t>& r) {
        if (!drop(r)) return false;
        gone.push_back(r);
        return true;
    });
    // With the pieces later writes left of each, but those
    // inside a range that stays.
    for (const auto& r : gone)
        map_.Erase(0, r.first, r.second - r.first, id, [&](uint64_t s, uint64_t e) {
            return std::any_of(kept.ranges.begin(), kept.ranges.end(),
                               [&](const auto& k) { return k.first <= s && e <= k.second; });
        });
}

bool TaskGraph::OutputOwnerLives(const TaskDescriptor& t, const ResolvedParam& p) const {
    // The owner is in the fan-in: met in the map, or held by
    // CheckOutputsUsed when a writer of the whole range stood between.
    return std::any_of(t.fanin.begin(), t.fanin.end(), [&](int32_t f) {
        const TaskDescriptor& owner = ring_.Get(f);
        return ring_.IsLive(f) && owner.state.load(std::memory_order_relaxed) < TaskState::Consumed && Covers(owner, p);
    });
}

void TaskGraph::KeepPoisonedWrites(const TaskDescriptor& t) {
    PoisonedWrites kept{ring_.SeqOf(t.task_id), t.gate.root, {}};
    // A failure pto_wait_all reported already (a failed or skipped task a
    // scope held until now) poisons nothing more: the caller knows.
    const bool reported = kept.seq < reported_below_seq_;
    for (int32_t i = 0; i < t.num_params && !reported; ++i) {
        const ResolvedParam& p = t.params[i];
        const auto lo = uint64_t(reinterpret_cast<uintptr_t>(p.host));
        // Its heap blocks go back to the ring with it, and its reads
        // poison nothing: only its explicit writes stay in the map. A write
        // into another task's implicit output stays only while that output
        // lives (its block's release drops it, TryConsume): a later output
        // at the same address is another's. (pto_alloc buffers live in the
        // heap ring too; theirs stays until the free.)
        bool keep = p.kind != PARAM_INPUT && !p.implicit;
        if (keep && InHeap(p.host, p.size) && !buffers_.Find(p.host, p.size)) keep = OutputOwnerLives(t, p);
        if (keep) kept.ranges.emplace_back(lo, lo + p.size);
    }
    // A range also kept (a parameter both read and written by two entries)
    // stays, and so do the pieces later writes left of a kept one inside
    // another (Erase takes the pieces of the erased ranges: an
    // implicit output's left in the map would skip the readers of the next
    // output at that address).
    auto in_kept = [&](uint64_t s, uint64_t e) {
        return std::any_of(kept.ranges.begin(), kept.ranges.end(), [&](const auto& k) { return k.first <= s && e <= k.second; });
    };
    for (int32_t i = 0; i < t.num_params; ++i) {
        const auto lo = uint64_t(reinterpret_cast<uintptr_t>(t.params[i].host)), hi = lo + t.params[i].size;
        if (std::find(kept.ranges.begin(), kept.ranges.end(), std::pair(lo, hi)) == kept.ranges.end())
            map_.Erase(0, lo, hi - lo, t.task_id, in_kept);
    }
    if (kept.ranges.empty()) return;
    // What it writes supersedes what failed tasks before it kept there:
    // readers after it read its version, whose root it carries. Without
    // this a chain of skipped writers of one region piled up in the map,
    // each submission scanning the pile (4,000 INOUTs after one failure
    // took 16 s). Only earlier tasks: a later writer's kept range is newer.
    for (auto it = poisoned_.begin(); it != poisoned_.end();) {
        if (it->second.seq >= kept.seq) {
            ++it;
            continue;
        }
        DropKeptRanges(it->first, it->second, [&](const std::pair<uint64_t, uint64_t>& r) {
            return std::any_of(kept.ranges.begin(), kept.ranges.end(),
                               [&](const auto& k) { return k.first <= r.first && r.second <= k.second; });
        });
        it = it->second.ranges.empty() ? poisoned_.erase(it) : std::next(it);
    }
    poisoned_.emplace(t.task_id, std::move(kept));
}

void TaskGraph::InheritPoison(TaskDescriptor& t) {
    // Kept failed writers are not producers: nothing waits for them. (In
    // order: deps_[0, deps_read_) stays what the reads met.)
    size_t kept = 0, kept_read = 0;
    for (size_t i = 0; i < deps_.size(); ++i) {
        if (!Unconsumed(deps_[i])) continue;
        kept_read += i < deps_read_;
        deps_[kept++] = deps_[i];
    }
    deps_.resize(kept);
    deps_read_ = kept_read;
    auto alive = [this](int32_t task) { return Alive(task); };
    for (int32_t i = 0; i < t.num_params; ++i) {
        const ResolvedParam& p = t.params[i];
        if (p.implicit || p.kind == PARAM_OUTPUT) continue;  // a pure write reads nothing stale
        // A read's own lookup: deps_ lists each writer once, maybe for a
        // pure write of this task.
        poison_scratch_.clear();
        map_.Lookup(0, uint64_t(reinterpret_cast<uintptr_t>(p.host)), p.size, false, t.task_id, alive,
                    poison_scratch_);
        for (int32_t w : poison_scratch_)
            if (!Unconsumed(w)) dependency::Inherit(t.gate.root, poisoned_.at(w).root);
    }
}

void TaskGraph::DropPoisonInside(uint64_t lo, uint64_t hi) {
    for (auto it = poisoned_.begin(); it != poisoned_.end();) {
        DropKeptRanges(it->first, it->second,
                       [&](const std::pair<uint64_t, uint64_t>& r) { return lo <= r.first && r.second <= hi; });
        it = it->second.ranges.empty() ? poisoned_.erase(it) : std::next(it);
    }
}

void TaskGraph::ForgetBeforeIdsComeRound() {
    next_forget_seq_ = ring_.head_seq() + ring_.period() / 2;
    const int64_t horizon = ring_.head_seq() - ring_.period() / 2;
    for (auto it = poisoned_.begin(); it != poisoned_.end();) {
        if (it->second.seq > horizon) {
            ++it;
            continue;
        }
        for (const auto& [lo, hi] : it->second.ranges) map_.Erase(0, lo, hi - lo, it->first);
        it = poisoned_.erase(it);
    }
    map_.Sweep([this](int32_t task) { return Alive(task); });
}

void TaskGraph::OnTaskComplete(int32_t task_id, uint32_t status, const TaskTiming* timing) {
    if (timing && trace::Enabled()) [[unlikely]] {  // the timing lives on the caller's stack: apply it now
        Lock lock(*this);
        CompleteFromExecutor(ring_.Get(task_id), status, timing);
        DrainSkips();
        return;
    }
    // The slot is stable (the task is live), so it is parked without the lock.
    Park(ring_.Get(task_id), status);
    ApplyInboxAfterUnlock();
}

void TaskGraph::OnDeviceLost(const std::string& why) {
    std::lock_guard lock(lost_mu_);
    if (device_lost_.empty()) device_lost_ = why.empty() ? "device lost" : why;
}

void TaskGraph::OnTasksComplete(std::span<const Done> done) {
    for (const Done& d : done) Park(ring_.Get(d.task_id), d.status);
    ApplyInboxAfterUnlock();
}

void TaskGraph::Complete(int32_t task_id, uint32_t status) {
    Lock lock(*this);
    if (!ring_.IsLive(task_id))
        Fail(ErrorKind::InvalidArgument, "task " + std::to_string(task_id) + " is not live");
    TaskDescriptor& t = ring_.Get(task_id);
    const TaskState s = t.state.load(std::memory_order_relaxed);
    if (t.core_type != WORKER_EXTERNAL)
        Fail(ErrorKind::InvalidArgument, Describe(task_id) +
                                             " is run by an executor; only EXTERNAL tasks are completed by the caller");
    if (s == TaskState::Completed || s == TaskState::Consumed || t.early_done)
        Fail(ErrorKind::InvalidArgument, Describe(task_id) + " is completed already");
    if (s == TaskState::Pending) {  // its inputs are not done: complete it when they are
        t.early_done = true;
        t.early_code = status;
        return;
    }
    CompleteLocked(t, status, false);
    DrainSkips();
}

uint8_t* TaskGraph::TaskOutput(int32_t task_id, int32_t index) {
    Lock lock(*this);
    if (!ring_.IsLive(task_id))
        Fail(ErrorKind::InvalidArgument, "task " + std::to_string(task_id) +
                                             " is not live (never submitted, or consumed and reclaimed)");
    TaskDescriptor& t = ring_.Get(task_id);
    // Consumed but not yet behind the ring's tail: its block went back to
    // the heap ring, and the address may be a newer output's already.
    if (t.state.load(std::memory_order_relaxed) == TaskState::Consumed)
        Fail(ErrorKind::InvalidArgument, Describe(task_id) + " was let go: its outputs' block is another's now (" +
                                             kHoldRule + ")");
    int32_t n = 0;
    for (int32_t i = 0; i < t.num_params; ++i)
        if (t.params[i].implicit && n++ == index) {
            t.outputs_handed_out |= 1u << i;  // from now on a task may name these outputs
            // At depth 0 the asking thread holds the task for this output
            // until a later task of its own reads it (asked again: again),
            // it waits or it exits; with no hold of its own, it takes one,
            // not as its newest (that protects the task it submitted last).
            // Unheld, the task went once earlier readers ran (or another
            // thread let go), and this address, read later, was a newer
            // output's (found probing from outside).
            // So does an ask of a task whose scopes have ended (it was
            // refused, or read a newer output, once its readers ran).
            Held* mine = HoldOfThisThread(task_id);
            if (!mine && !ScopesHold(t)) mine = &Hold(t, /*newest=*/false);
            if (mine && mine->unread[size_t(i)] < UINT16_MAX) ++mine->unread[size_t(i)];
            return t.params[i].host;
        }
    Fail(ErrorKind::InvalidArgument, Describe(task_id) + " has " + std::to_string(n) + " implicit output(s): index " +
                                         std::to_string(index) + " is not one of them");
}

void TaskGraph::CheckWaitable() const {
    if (CpuWorker::RunningTaskOf() == this)
        Fail(ErrorKind::InvalidArgument,
             "wait for all tasks called from inside a task of this runtime would wait for that task itself: wait "
             "in the orchestration thread instead",
             EDEADLK);
}

void TaskGraph::WaitForTasksOver(const void* at, uint64_t size, bool writes, const char* call) {
    if (size == 0 || CpuWorker::RunningTaskOf() == this) return;
    Lock lock(*this);
    std::vector<int32_t> before;
    auto alive = [this](int32_t task) { return Alive(task); };
    for (;;) {
        if (inflight_ == 0) return;  // nothing to follow: no lookup
        before.clear();
        map_.Lookup(0, uint64_t(reinterpret_cast<uintptr_t>(at)), size, writes, -1, alive, before);
        // Unfinished tasks of this thread only: a copy is ordered after its
        // own thread's earlier tasks, as a stream's work is. Waiting for
        // other threads' tasks waited for ones submitted after the copy
        // began (for as long as a thread went on submitting), and a host
        // kernel's helper thread copying over its task's bytes waited for
        // that task, which waited for it (both found probing from outside).
        // A failed task's entry may outlive its slot: not waited for.
        const std::thread::id me = std::this_thread::get_id();
        std::erase_if(before, [this, me](int32_t id) {
            const TaskDescriptor& t = ring_.Get(id);
            const TaskState s = t.state.load(std::memory_order_relaxed);
            return t.submitter != me || (s != TaskState::Pending && s != TaskState::Ready && s != TaskState::Running);
        });
        if (before.empty()) return;
        if (active_ == 0)
            Fail(ErrorKind::Busy, std::string(call) + " would never start: " + Describe(before.front()) +
                                      ", over those bytes, waits for EXTERNAL tasks that only pto_task_complete can finish",
                 EDEADLK);
        ++copy_waiters_;
        try {
            Sleep(lock);
        } catch (...) {
            --copy_waiters_;
            throw;
        }
        --copy_waiters_;
    }
}

void TaskGraph::CheckNotStuck() const {
    if (active_ == 0)
        Fail(ErrorKind::Busy, "wait for all tasks would never return: " + std::to_string(inflight_) +
                                  " task(s) wait for EXTERNAL tasks that only pto_task_complete can finish",
             EDEADLK);
}

bool TaskGraph::WaitAllUntil(std::chrono::steady_clock::time_point until) {
    SPYRE_TRACE_SCOPE("pto_wait_all (a slice)");
    CheckWaitable();
    Lock lock(*this);
    if (!holds_.empty()) [[unlikely]]
        LetGoHoldsOf(std::this_thread::get_id());
    for (;;) {
        if (inflight_ == 0) return true;
        CheckNotStuck();
        if (std::chrono::steady_clock::now() >= until) return false;
        Sleep(lock, until);
    }
}

void TaskGraph::WaitAll(const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("pto_wait_all");
    CheckWaitable();
    Lock lock(*this);
    if (!holds_.empty()) [[unlikely]]
        LetGoHoldsOf(std::this_thread::get_id());
    // Progress: tasks completed of those submitted since the last WaitAll
    // that returned with nothing in flight; reported outside the lock, once
    // per change (so done only rises, and ends at total).
    uint64_t reported = ~0ull;
    for (;;) {
        if (progress && completed_ - waited_ != reported) {
            reported = completed_ - waited_;
            const ProgressInfo info{"orchestration", reported, submitted_ - waited_, "tasks"};
            lock.unlock();
            progress(info);
            lock.lock();
            continue;  // look again: tasks completed meanwhile
        }
        if (inflight_ == 0) break;
        CheckNotStuck();
        Sleep(lock);
    }
    waited_ = completed_;
    if (failures_.empty()) return;
    std::vector<TaskFailureInfo> reports;
    std::vector<dependency::Root> roots;
    reports.swap(failures_);
    roots.swap(failure_roots_);
    poisoned_.clear();  // reported: what the caller does with the data is its own (the map drops them as met)
    reported_below_seq_ = ring_.head_seq();  // and so for failed tasks still held (every task has finished)
    size_t root = reports.size();
    int32_t failed = 0, skipped = 0;
    for (size_t i = 0; i < reports.size(); ++i) {
        if (!reports[i].skipped) {
            ++failed;
            if (root == reports.size()) root = i;
        } else {
            ++skipped;
        }
    }
    throw FailureReport("", *roots[root == reports.size() ? 0 : root], failed, skipped);
}

// "task 3 (kernel 7) failed with device error code 35; ..." (DeviceError),
// or "failed: host kernel threw: ..." (TaskFailed): the root's own kind.
Error TaskGraph::FailureReport(const std::string& prefix, const TaskFailureInfo& root, int32_t failed,
                               int32_t skipped) const {
    const bool threw = root.kind == ErrorKind::TaskFailed;
    return Error(root.kind,
                 prefix + "task " + std::to_string(root.task_id) + " (kernel " + std::to_string(root.kernel_id) +
                     ") failed" + (threw ? ": " : " with ") + root.cause + "; " + std::to_string(failed) +
                     " task(s) failed, " + std::to_string(skipped) + " dependent task(s) skipped",
                 {.device = options_.device, .op_index = root.task_id, .kernel_id = root.kernel_id,
                  .device_code = root.device_code, .host_kernel_code = root.host_kernel_code});
}

std::vector<TaskFailureInfo> TaskGraph::Failures() const {
    Lock lock(*this);
    return failures_;
}

TaskState TaskGraph::State(int32_t task_id) const {
    // A caller that polls a task's state sees device tasks finish without
    // a wait: the look reaps what is done.
    KickExecutors();
    Lock lock(*this);
    if (ring_.SeqOf(task_id) < 0)
        Fail(ErrorKind::InvalidArgument, "task " + std::to_string(task_id) + " was never submitted");
    if (!ring_.IsLive(task_id)) return TaskState::Consumed;  // reclaimed
    return ring_.Get(task_id).state.load(std::memory_order_relaxed);
}

TaskGraphStats TaskGraph::Stats() const {
    Lock lock(*this);
    TaskGraphStats s;
    s.task_ring_size = ring_.capacity();
    s.live_tasks = ring_.live();
    s.heap_size = heap_.size();
    s.heap_used = heap_.used();
    s.live_buffers = buffers_.size();
    s.tensor_map_entries = map_.entries();
    s.submitted = submitted_;
    s.completed = completed_;
    s.scope_depth = scopes_.depth();
    return s;
}

}  // namespace spyre::orchestration
