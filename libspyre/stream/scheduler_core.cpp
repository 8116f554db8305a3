// SPDX-License-Identifier: Apache-2.0
#include "stream/scheduler_core.hpp"

#include <pthread.h>

#include <algorithm>
#include <bit>

#include "device/device_core.hpp"
#include "device/task_port.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/common/log.hpp"
#include "spyre/common/spin.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "stream/stream_wait.hpp"
#include "trace/recorder.hpp"

namespace spyre {

namespace {
thread_local bool tls_scheduler_thread = false;
}  // namespace

bool SchedulerThreadActive() { return tls_scheduler_thread; }

namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

// How long a sleeper waits at most between device health checks when work
// is in flight, and at all when idle.
constexpr auto kBusySleep = std::chrono::milliseconds(100);
constexpr auto kIdleSleep = std::chrono::seconds(1);
// A waiting caller's spins between two full pumps (WaitUntil).
constexpr uint32_t kSpinsPerFullPump = 16;
// How often the thread looks at task ports nobody drives, and how long it
// drives them at most before it looks at its own work again.
constexpr auto kPortTick = std::chrono::milliseconds(1);
constexpr auto kPortDrive = std::chrono::milliseconds(10);
// The spinning thread's spins between two looks at the ports.
constexpr uint32_t kSpinsPerPortLook = 4096;

}  // namespace

// ---------------------------------------------------------------- setup

SchedulerCore::SchedulerCore(DeviceCore& device, const SchedulerOptions& options)
    : device_(device),
      options_(options),
      policy_(options.policy, options.quantum, options.aging_turns),
      batcher_(device.function->Read32(SPYRE_REG_CAPS) & SPYRE_CAP_COPY_INLINE ? SPYRE_CB_INLINE_MAX_BYTES : 0),
      records_(device.function->pci_address(), &*device.dma),
      dma_(*device.dma, device.function->pci_address()) {
    static_assert(SPYRE_RING_STREAMS == 64, "one bit of ring_streams_free_ per ring stream");
    ring_streams_free_ = device.function->Read32(SPYRE_REG_CAPS) & SPYRE_CAP_RING_STREAMS ? ~0ull : 0;
    if (options_.quantum == 0) throw Error(ErrorKind::InvalidArgument, "scheduler quantum must be >= 1");
    // An enum value past the named ones gave no turn order, and every
    // stream waited for good.
    if (int(options_.policy) < int(SchedulerPolicy::RoundRobin) || int(options_.policy) > int(SchedulerPolicy::DrainOneFirst))
        throw Error(ErrorKind::InvalidArgument,
                    "scheduler policy " + std::to_string(int(options_.policy)) + " is none of RoundRobin, Priority, DrainOneFirst");
    if (int(options_.wait_mode) < int(driver::WaitMode::Poll) || int(options_.wait_mode) > int(driver::WaitMode::Blocking))
        throw Error(ErrorKind::InvalidArgument,
                    "scheduler wait mode " + std::to_string(int(options_.wait_mode)) + " is none of Poll, Adaptive, Blocking");
    if (options_.max_ring_inflight == 0)
        throw Error(ErrorKind::InvalidArgument, "scheduler max_ring_inflight must be >= 1");
    // A negative spin read as none here and as 0 in the task ports; an
    // hour's kept an adaptive Synchronize spinning a core that long (both
    // found probing from outside): one range for every waiter.
    if (options_.spin < std::chrono::nanoseconds(0) || options_.spin > kMaxSpin)
        throw Error(ErrorKind::InvalidArgument, "scheduler spin is " + std::to_string(options_.spin.count()) +
                                                    " ns; it must be 0 to 1 s");
    ring_.emplace(*device_.function);
    completions_.resize(256);
}

SchedulerCore::~SchedulerCore() { Stop(); }

uint64_t SchedulerCore::memory_size() const {
    // The DMA engine's window: a PF's is its own slice, where the card's
    // whole memory let a block pass here that the engine then refused.
    return device_.dma_queue ? device_.dma_queue->memory_size() : device_.function->device_info().mem_size;
}

void SchedulerCore::Start() {
    thread_ = std::thread([this] {
        tls_scheduler_thread = true;
        Run();
    });
    pthread_setname_np(thread_.native_handle(), "spyre-sched");
}

void SchedulerCore::Stop() {
    if (!thread_.joinable()) return;
    stopping_.store(true);
    Wake();
    thread_.join();
}

StreamState* SchedulerCore::CreateStream(int priority) {
    if (priority < kStreamPriorityHighest || priority > kStreamPriorityLowest)
        throw Error(ErrorKind::InvalidArgument, "stream priority " + std::to_string(priority) + " is outside [" +
                                                    std::to_string(kStreamPriorityHighest) + ", " +
                                                    std::to_string(kStreamPriorityLowest) + "]");
    if (lost()) throw lost_error();
    std::lock_guard lock(streams_mu_);
    auto state = std::make_shared<StreamState>(next_index_++, priority);
    if (ring_streams_free_ != 0) {
        state->ring_stream = std::countr_zero(ring_streams_free_);
        ring_streams_free_ &= ~(1ull << state->ring_stream);
    }
    streams_.push_back(std::move(state));
    streams_version_.fetch_add(1);
    return streams_.back().get();
}

std::shared_ptr<StreamState> SchedulerCore::Find(int stream_index) {
    std::lock_guard lock(streams_mu_);
    // streams_ is in creation order, and indices only grow: sorted by index
    // (a copy by index from Python walked every stream of the device).
    auto it = std::lower_bound(streams_.begin(), streams_.end(), stream_index,
                               [](const std::shared_ptr<StreamState>& s, int index) { return s->index < index; });
    if (it != streams_.end() && (*it)->index == stream_index && !(*it)->retired.load()) return *it;
    return nullptr;
}

void SchedulerCore::Retire(StreamState* s) {
    s->retired.store(true);
    streams_version_.fetch_add(1);
    Wake();
}

std::vector<std::shared_ptr<StreamState>> SchedulerCore::StreamsWithWork() {
    std::lock_guard lock(streams_mu_);
    std::vector<std::shared_ptr<StreamState>> out;
    for (auto& s : streams_)
        if (!s->retired.load() && s->completed.load(std::memory_order_acquire) <
                                      s->enqueued_count.load(std::memory_order_acquire))
            out.push_back(s);
    return out;
}

SchedulerStats SchedulerCore::Stats() const {
    auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
    return SchedulerStats{get(stats_.ring_cbs),     get(stats_.doorbells),      get(stats_.inline_copies),
                          get(stats_.dma_copies),   get(stats_.callbacks),      get(stats_.dropped),
                          get(stats_.host_events),  get(stats_.tasks_sent),     get(stats_.task_doorbells),
                          get(stats_.tasks_reaped), get(stats_.task_backstops), get(stats_.task_sleeps),
                          get(stats_.task_yields)};
}

// ---------------------------------------------------------------- the way in

void SchedulerCore::Queue(StreamState& s, std::span<QueuedOp> ops) {
    if (ops.empty()) return;
    // Cleanup callbacks are accepted even on a faulted stream. A fault that
    // lands after this look drops the ops as it drops the ones queued before.
    const bool cleanup_only = ops.size() == 1 && ops[0].always;
    if (!cleanup_only) {
        if (s.faulted.load(std::memory_order_acquire)) {
            std::lock_guard lock(s.mu);
            if (s.fault) throw *s.fault;
        }
        if (lost()) throw lost_error();
    }
    for (size_t i = 0; i < ops.size(); ++i) ops[i].link = i + 1 < ops.size();
    if (trace::Enabled()) [[unlikely]] {
        const uint64_t now = trace::detail::ScopeStartOr(trace::detail::NowNs);
        for (QueuedOp& op : ops) {
            op.trace_enqueue_ns = now;
            op.trace_flow = trace::detail::NewFlow();
            trace::detail::FlowOut(op.trace_flow, now);
        }
    }
    const uint64_t before = s.enqueued_count.fetch_add(ops.size(), std::memory_order_acq_rel);
    // The scheduler thread sleeps and the stream had nothing queued: submit
    // here rather than pay for its wake-up (it is woken only for host work);
    // a lone ring op with nothing else queued goes straight into the ring,
    // past the stream's queue and the whole pass (SubmitAlone). A stream with
    // a backlog is the thread's to drain, so enqueues stay cheap. Never on
    // the thread itself (a callback that enqueues): it holds the lock already.
    if (!tls_scheduler_thread && thread_asleep_.load(std::memory_order_seq_cst) &&
        s.completed.load(std::memory_order_acquire) == before && drive_mu_.try_lock()) {
        std::unique_lock lock(drive_mu_, std::adopt_lock);
        if (ops.size() == 1 && SubmitAlone(s, ops[0])) return;
        s.incoming.Push(ops);
        Announce(s);
        CallerPump();
        if (!HostWorkPending()) return;
        lock.unlock();
        WakeIfAsleep();
        return;
    }
    // Push publishes with a seq_cst update, which orders it before the
    // look at the sleepers; an awake scheduler takes the ops on its next pass.
    s.incoming.Push(ops);
    Announce(s);
    wake_.NotifyAfterSeqCstUpdate();
}

void SchedulerCore::Announce(StreamState& s) noexcept {
    if (s.listed.load(std::memory_order_seq_cst) || s.listed.exchange(true, std::memory_order_seq_cst)) return;
    s.self_while_listed = s.shared_from_this();  // before it is published on the arrivals
    StreamState* head = arrivals_.load(std::memory_order_relaxed);
    do {
        s.next_arrival = head;
    } while (!arrivals_.compare_exchange_weak(head, &s, std::memory_order_seq_cst, std::memory_order_relaxed));
}

void SchedulerCore::Activate(StreamState& s) {
    // A push now finds it listed. Listed already: by a push (which holds it
    // for the scheduler), or in active_.
    if (!s.listed.exchange(true, std::memory_order_seq_cst)) s.self_while_listed = s.shared_from_this();
    if (s.in_active) return;
    active_.push_back(&s);
    s.in_active = true;
}

void SchedulerCore::TakeArrivals() {
    if (!arrivals_.load(std::memory_order_acquire)) return;
    std::vector<StreamState*> taken;
    for (StreamState* s = arrivals_.exchange(nullptr, std::memory_order_acq_rel); s; s = s->next_arrival)
        taken.push_back(s);
    // Oldest arrival first, so turns go in the order streams got work.
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
        StreamState& s = **it;
        s.awaiting_arrival = false;
        if (s.in_active) continue;
        active_.push_back(&s);
        s.in_active = true;
    }
}

void SchedulerCore::DropIdleStreams() {
    // Arrivals first: a stream on the arrivals must not be unlisted, or a
    // push could list it (and push it on them) a second time.
    TakeArrivals();
    std::vector<std::shared_ptr<StreamState>> unlisted;  // released after the walk (each may be the last hold)
    std::erase_if(active_, [&](StreamState* s) {
        if (!s->Idle() || s->incoming.Pending() || s->awaiting_arrival) return false;
        // Unlisted before the last look at its queue, and a push lists it
        // after its own (a Dekker pair, both seq_cst): a push either finds
        // it unlisted and hands it over again, or is seen here. The hold is
        // taken first: a push that lists it again writes a hold of its own.
        std::shared_ptr<StreamState> hold = std::move(s->self_while_listed);
        s->listed.store(false, std::memory_order_seq_cst);
        if (s->incoming.Pending()) {
            // Stays. Listed again by that push: it holds the stream (which
            // may be on the arrivals too: taken once); else the hold goes back.
            if (!s->listed.exchange(true, std::memory_order_seq_cst))
                s->self_while_listed = std::move(hold);
            else
                s->awaiting_arrival = true;  // that push's publication may still be on its way
            unlisted.push_back(std::move(hold));
            return false;
        }
        s->in_active = false;
        policy_.Forget(s);
        unlisted.push_back(std::move(hold));
        return true;
    });
    listed_count_.store(active_.size(), std::memory_order_relaxed);
}

// ---------------------------------------------------------------- waking

void SchedulerCore::Wake() { wake_.NotifyAll(); }

// Only the first producer to find a sleeper pays for the wake-up.
void SchedulerCore::WakeIfAsleep() { wake_.Notify(); }

void SchedulerCore::DmaDone() {
    dma_done_.fetch_add(1, std::memory_order_seq_cst);
    if (awaits_dma_.load(std::memory_order_seq_cst)) wake_.NotifyAfterSeqCstUpdate();
}

bool SchedulerCore::WorkArrived() const {
    bool work = stopping_.load() || dma_done_.load() != dma_seen_ || streams_version_.load() != active_version_ ||
                arrivals_.load(std::memory_order_seq_cst) != nullptr;
    for (StreamState* s : active_) work = work || s->incoming.Pending();
    return work;
}

bool SchedulerCore::HostWorkPending() const {
    if (!dma_.empty() && dma_done_.load(std::memory_order_acquire) != dma_seen_) return true;
    for (StreamState* s : active_) {
        if (s->local.empty()) continue;
        const QueuedOp& head = s->local.front();
        if (!batcher_.IsRingOp(head) && !s->host_busy) return true;
    }
    return false;
}

// ---------------------------------------------------------------- driving

bool SchedulerCore::Pump(bool on_thread) {
    RefreshStreams();
    bool progress = PullIncoming();
    progress |= ReapRing();
    if (on_thread) progress |= PollDma();
    progress |= SettleStreams();
    // The ring first: starting a copy may copy inline (io_uring on shared
    // memory), and the device should not wait for that.
    progress |= SubmitRing();
    progress |= IssueHostWork(on_thread);
    if (!deferred_frees_.empty()) FreeDeferred();
    DropIdleStreams();
    SetBusy(!Idle());
    return progress;
}

void SchedulerCore::CallerPump() {
    try {
        Pump(false);
    } catch (const Error& e) {
        DeviceFailed(e);  // only the ring and the function throw: the device is gone or halted
    }
}

bool SchedulerCore::Idle() const {
    if (!records_.empty() || !dma_.empty()) return false;
    for (const StreamState* s : active_)
        if (!s->local.empty()) return false;
    return true;
}

void SchedulerCore::CallerReap() {
    try {
        // Work arrived or left behind needs the whole pass (turns, host
        // work, the next submit); a lone completion needs only its reap.
        if (!WorkArrived()) {
            ReapRing();
            if (Idle()) {
                if (!deferred_frees_.empty()) FreeDeferred();
                SetBusy(false);
                return;
            }
        }
        Pump(false);
    } catch (const Error& e) {
        DeviceFailed(e);
    }
}

void SchedulerCore::Poke() {
    if (tls_scheduler_thread || !drive_mu_.try_lock()) return;
    std::unique_lock lock(drive_mu_, std::adopt_lock);
    CallerPump();
    if (HostWorkPending()) {
        lock.unlock();
        WakeIfAsleep();
    }
}

bool SchedulerCore::WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, EventCount& word,
                              Clock::time_point until) {
    if (counter.load(std::memory_order_acquire) >= target) return true;
    auto done = [&] { return counter.load(std::memory_order_acquire) >= target; };
    const bool timed = until != Clock::time_point::max();
    // A sleep of `d` at most, ending by the deadline.
    auto bounded = [&](std::chrono::nanoseconds d) {
        return timed ? std::clamp<std::chrono::nanoseconds>(until - Clock::now(), std::chrono::nanoseconds(0), d) : d;
    };
    // Reaps (and submits) here when no one else drives; host work found on
    // the way goes to the scheduler thread. A pump costs a few hundred ns
    // (every stream, the turn order, the DMA queue), which a spinning caller
    // would add to noticing its own completion: between full pumps (every
    // kSpinsPerFullPump) it reaps when the ring has a completion (and pumps
    // only if more is left to do).
    auto drive = [&](bool full) {
        // Between full pumps the lock is taken only for a completion to
        // reap: a try_lock and unlock on every spin (two locked
        // instructions) made noticing the completion slower than the raw
        // ring's wait. Work other threads queue meanwhile is theirs to submit
        // (caller-runs) or the scheduler thread's, woken for it; a waiter
        // takes it at its next full pump at the latest.
        if (!full && !RingMayBeReady()) return;
        if (!drive_mu_.try_lock()) return;
        std::unique_lock lock(drive_mu_, std::adopt_lock);
        if (full)
            CallerPump();
        else if (RingReady())
            CallerReap();
        else
            return;
        if (HostWorkPending()) {
            lock.unlock();
            WakeIfAsleep();
        }
    };
    if (options_.wait_mode != driver::WaitMode::Blocking) {
        drivers_.fetch_add(1, std::memory_order_seq_cst);
        // The spin budget bounds adaptive waits only; a poll-mode caller
        // reads no clock.
        const bool adaptive = options_.wait_mode == driver::WaitMode::Adaptive;
        uint32_t spins = 0;
        SpinFor(
            [&] {
                if (done()) return true;
                drive(spins++ % kSpinsPerFullPump == 0);
                return done();
            },
            {adaptive ? bounded(options_.spin) : timed ? bounded(SpinLimits::kForever) : SpinLimits::kForever});
        drivers_.fetch_sub(1, std::memory_order_seq_cst);
        // Work of others still in flight: the scheduler thread watches it again.
        if (busy_.load(std::memory_order_seq_cst)) WakeIfAsleep();
        if (done()) return true;
    }
    while (!done()) {
        if (timed && Clock::now() >= until) return false;
        // Only ring work of ours outstanding: sleep on the ring's completion
        // interrupt, holding the lock (producers wake us through wake_).
        if (drive_mu_.try_lock()) {
            std::unique_lock lock(drive_mu_, std::adopt_lock);
            CallerPump();
            if (done()) break;
            if (!HostWorkPending() && !records_.empty() && !lost()) {
                // The scheduler thread cannot take the lock meanwhile: a
                // task port nobody drives gets a pass from here each tick.
                const bool ports = PortsUnattended();
                SleepOnRing(wake_.Current(), bounded(ports ? std::chrono::nanoseconds(kPortTick) : kBusySleep));
                if (ports) PassPorts();
                continue;
            }
        }
        // The scheduler thread's turn: make sure it is awake, then sleep
        // until it completes the work (or a while, then look again).
        if (thread_asleep_.load(std::memory_order_seq_cst))
            Wake();
        else
            WakeIfAsleep();
        word.SleepUnless(done, bounded(std::chrono::milliseconds(100)));
    }
    return true;
}

// ---------------------------------------------------------------- the thread

void SchedulerCore::Run() {
    std::unique_lock lock(drive_mu_);
    auto last_progress = Clock::now();
    auto next_port_look = last_progress;
    uint32_t spins = 0;
    while (!stopping_.load()) {
        bool progress = false;
        try {
            progress = Pump(true);
        } catch (const Error& e) {
            // Only the ring and the function can throw here: the device is gone or halted.
            DeviceFailed(e);
            progress = true;
        }
        if (drivers_.load(std::memory_order_seq_cst) > 0 && !HostWorkPending()) {
            // A caller spins in a wait and drives itself: keep off its cores
            // and its lock, also after a pass that did something (woken by a
            // wait that outlasted its spin, the thread would otherwise keep
            // taking the next launches' turns from their callers).
            if (PortsUnattended())
                ServePorts(lock);
            else
                SleepUnlocked(lock, wake_.Current(), kBusySleep);
            last_progress = Clock::now();
            continue;
        }
        if (progress) {
            last_progress = Clock::now();
            // A thread kept busy by its streams (host callbacks one after
            // another) still gives the task ports nobody drives a pass a tick.
            if (last_progress >= next_port_look && port_count_.load(std::memory_order_relaxed) != 0) {
                next_port_look = last_progress + kPortTick;
                if (PortsUnattended()) PassPorts();
            }
            continue;
        }
        const bool inflight = !records_.empty() || !dma_.empty();
        const bool spinning = options_.wait_mode == driver::WaitMode::Poll ||
                              (options_.wait_mode == driver::WaitMode::Adaptive &&
                               Clock::now() - last_progress < options_.spin);
        if (spinning && inflight) {
            lock.unlock();  // a caller may take a turn here
            CpuRelax();
            lock.lock();
            if (++spins % kSpinsPerPortLook == 0 && PortsUnattended()) PassPorts();
            continue;
        }
        IdleWait(lock);
        last_progress = Clock::now();
    }
    // Shutting down: whatever is still queued never runs.
    FaultAll(Error(ErrorKind::DeviceLost, "the device was closed with work still queued"));
    FreeDeferred(/*all=*/true);
    // The holds of listed streams go (a stream would otherwise hold itself).
    TakeArrivals();
    std::vector<std::shared_ptr<StreamState>> holds;
    for (StreamState* s : active_) {
        s->in_active = false;
        holds.push_back(std::move(s->self_while_listed));
    }
    active_.clear();
    holds.clear();
}

void SchedulerCore::SleepUnlocked(std::unique_lock<std::mutex>& lock, uint32_t seen,
                                  std::chrono::nanoseconds timeout) {
    wake_.Arm();
    thread_asleep_.store(true, std::memory_order_seq_cst);
    const bool work = WorkArrived();
    lock.unlock();
    if (work)
        wake_.Disarm();
    else
        wake_.Wait(seen, timeout);
    thread_asleep_.store(false, std::memory_order_seq_cst);
    lock.lock();
}

void SchedulerCore::IdleWait(std::unique_lock<std::mutex>& lock) {
    const uint32_t seen = wake_.Current();
    // A long sleep is announced before the last look at the ports: a port
    // left unattended after that look finds the announcement and wakes us
    // (PortUnattended; a Dekker pair).
    sleeping_long_.store(true, std::memory_order_seq_cst);
    const bool ports = PortsUnattended();
    if (ports) sleeping_long_.store(false, std::memory_order_relaxed);
    if (records_.empty()) {
        // Nothing in the ring: sleep without the lock, so a caller can
        // submit (and reap) without waking us.
        if (ports)
            ServePorts(lock);
        else
            SleepUnlocked(lock, seen, dma_.empty() ? kIdleSleep : kBusySleep);
    } else {
        // Work in the ring: sleep on its completion interrupt, holding the
        // lock (the ring is not shared while we wait on it); while a port is
        // unattended, for a tick, then a pass for it.
        SleepOnRing(seen, ports ? std::chrono::nanoseconds(kPortTick) : std::chrono::nanoseconds(kBusySleep));
        if (ports) PassPorts();
    }
    sleeping_long_.store(false, std::memory_order_relaxed);
}

void SchedulerCore::SleepOnRing(uint32_t seen, std::chrono::nanoseconds timeout) {
    wake_.Arm();
    if (!WorkArrived()) {
        try {
            ring_->WaitCompletionOr(wake_.word(), seen, timeout);
        } catch (const Error& e) {
            DeviceFailed(e);
        }
    }
    wake_.Disarm();
}

// ---------------------------------------------------------------- task ports

void SchedulerCore::AttachPort(TaskPort& port) {
    std::lock_guard lock(ports_mu_);
    ports_.push_back(&port);
    port_count_.fetch_add(1, std::memory_order_seq_cst);
}

void SchedulerCore::DetachPort(TaskPort& port) {
    std::lock_guard lock(ports_mu_);
    std::erase(ports_, &port);
    port_count_.fetch_sub(1, std::memory_order_seq_cst);
}

void SchedulerCore::CountTasks(uint64_t sent, uint64_t doorbells, uint64_t reaped) noexcept {
    if (sent) stats_.tasks_sent.fetch_add(sent, std::memory_order_relaxed);
    if (doorbells) stats_.task_doorbells.fetch_add(doorbells, std::memory_order_relaxed);
    if (reaped) stats_.tasks_reaped.fetch_add(reaped, std::memory_order_relaxed);
}

void SchedulerCore::CountTaskWaits(uint64_t sleeps, uint64_t yields) noexcept {
    if (sleeps) stats_.task_sleeps.fetch_add(sleeps, std::memory_order_relaxed);
    if (yields) stats_.task_yields.fetch_add(yields, std::memory_order_relaxed);
}

void SchedulerCore::PortUnattended() noexcept {
    port_wake_requests_.fetch_add(1, std::memory_order_relaxed);
    if (sleeping_long_.load(std::memory_order_seq_cst)) WakeIfAsleep();
}

void SchedulerCore::PortsMayBeUnattended() noexcept {
    // Cannot look (the lock taken): ask, as PortUnattended would.
    if (PortsUnattended(/*when_taken=*/true)) PortUnattended();
}

bool SchedulerCore::PortsUnattended(bool when_taken) {
    if (port_count_.load(std::memory_order_seq_cst) == 0) return false;
    // Taken: the ports are being driven (or one comes or goes). Never
    // waited for: a caller here may hold the drive lock, and a Backstop
    // holds this one for up to kPortDrive.
    std::unique_lock lock(ports_mu_, std::try_to_lock);
    if (!lock) return when_taken;
    for (const TaskPort* p : ports_)
        if (p->Unattended()) return true;
    return false;
}

void SchedulerCore::ServePorts(std::unique_lock<std::mutex>& lock) {
    const EventCount::Key key = wake_.Arm();
    thread_asleep_.store(true, std::memory_order_seq_cst);
    const bool work = WorkArrived();
    lock.unlock();
    bool drove = false;
    if (!work) {
        std::lock_guard ports(ports_mu_);
        const auto until = Clock::now() + kPortDrive;
        for (TaskPort* p : ports_) drove |= p->Backstop(wake_.word(), key, until);
        if (drove) stats_.task_backstops.fetch_add(1, std::memory_order_relaxed);
    }
    if (work || drove)
        wake_.Disarm();
    else
        wake_.Wait(key, kPortTick);  // every port was driven by a caller lately
    thread_asleep_.store(false, std::memory_order_seq_cst);
    lock.lock();
}

void SchedulerCore::PassPorts() {
    std::unique_lock ports(ports_mu_, std::try_to_lock);  // taken: they are being served
    if (!ports) return;
    const uint32_t never = wake_.Current();
    for (TaskPort* p : ports_) p->Backstop(wake_.word(), never, Clock::now());
}

void SchedulerCore::RefreshStreams() {
    TakeArrivals();
    const uint64_t version = streams_version_.load();
    if (version == active_version_) return;
    std::lock_guard lock(streams_mu_);
    // Retired streams leave once idle and unlisted (their owner waited for
    // them already; a listed one is in active_).
    std::erase_if(streams_, [&](const std::shared_ptr<StreamState>& s) {
        const bool gone = s->retired.load() && !s->HasWork() && !s->incoming.Pending() &&
                          !s->listed.load(std::memory_order_seq_cst);
        if (gone) policy_.Forget(s.get());
        if (gone && s->ring_stream >= 0) ring_streams_free_ |= 1ull << s->ring_stream;
        return gone;
    });
    active_version_ = version;
    // A retired stream still listed keeps the version "dirty" so it is looked at again.
    for (const auto& s : streams_)
        if (s->retired.load()) active_version_ = ~0ull;
}

bool SchedulerCore::PullIncoming() {
    bool any = false;
    for (StreamState* s : active_) any |= s->incoming.Drain(s->local) != 0;
    return any;
}

bool SchedulerCore::ReapRing() {
    if (records_.empty()) return false;
    const size_t n = ring_->Reap(completions_);
    if (n == 0) return false;
    const size_t cancelled = records_.Retire(std::span(completions_.data(), n));
    UpdateRingWatch();
    if (cancelled) Counters::Add(stats_.dropped, cancelled);
    return true;
}

bool SchedulerCore::PollDma() {
    const uint64_t done = dma_done_.load(std::memory_order_acquire);
    if (done == dma_seen_) return false;
    // Consume the count even with no stream copy in flight: copies made
    // directly on the DMA engine (events, tensors) bump it too, and an
    // unconsumed count keeps the thread from ever sleeping.
    dma_seen_ = done;
    const bool progress = dma_.Poll();
    if (dma_.empty()) awaits_dma_.store(false, std::memory_order_relaxed);
    return progress;
}

bool SchedulerCore::RunCallback(StreamState& s) {
    const uint64_t seq = s.next_seq;
    const OpTrace trace = s.local.front().trace();
    std::function<void()> callback = std::move(s.local.front().callback);
    s.local.pop_front();
    ++s.next_seq;
    try {
        callback();
    } catch (const Error& e) {
        Fault(s, StreamOpError(e.kind(), s, seq, "host callback threw: " + e.message()));
    } catch (const std::exception& e) {  // the caller's code raised: TaskFailed, as a SubWorker's
        Fault(s, StreamOpError(ErrorKind::TaskFailed, s, seq, std::string("host callback threw: ") + e.what()));
    } catch (...) {
        Fault(s, StreamOpError(ErrorKind::TaskFailed, s, seq, "host callback threw"));
    }
    // Captures go before the waiter wakes (they may hold the device).
    callback = nullptr;
    if (trace.enqueue_ns && trace::Enabled())
        TraceOp(s, device_.function->pci_address(), OpKind::HostCallback, seq, trace, trace::detail::NowNs());
    Complete(s, seq);
    Counters::Add(stats_.callbacks, 1);
    return true;
}

void SchedulerCore::FreeAfterStreams(std::span<const DeviceAllocation> blocks) {
    DeferredFree entry{{blocks.begin(), blocks.end()}, {}};
    for (auto& s : StreamsWithWork()) {
        const uint64_t enqueued = s->enqueued_count.load(std::memory_order_acquire);
        if (s->completed.load(std::memory_order_acquire) < enqueued) entry.streams.emplace_back(std::move(s), enqueued);
    }
    deferred_frees_.push_back(std::move(entry));
}

void SchedulerCore::FreeDeferred(bool all) {
    auto reached = [](const DeferredFree& d) {
        for (const auto& [s, target] : d.streams)
            if (s->completed.load(std::memory_order_acquire) < target && !s->retired.load()) return false;
        return true;
    };
    const auto ready = std::stable_partition(deferred_frees_.begin(), deferred_frees_.end(),
                                             [&](const DeferredFree& d) { return !all && !reached(d); });
    if (ready == deferred_frees_.end()) return;
    // Copies through the DMAEngine outside any stream write until they finish: one wait for all.
    if (device_.dma_queue) device_.dma_queue->WaitForCopiesSubmitted();
    for (auto it = ready; it != deferred_frees_.end(); ++it)
        for (const DeviceAllocation& a : it->blocks) {
            try {
                device_.allocator->FreeOwned(a.handle);
            } catch (const Error&) {
                // Already gone with the device: nothing to give back.
            }
        }
    deferred_frees_.erase(ready, deferred_frees_.end());
}

bool SchedulerCore::SettleStreams() {
    bool any = false;
    // Until nothing moves: a faulted stream's work is dropped up to each
    // event record, which still fires (with the error), and a record settled
    // on one stream may complete the event another stream waits for.
    for (bool moved = true; moved; any |= moved) {
        moved = false;
        for (StreamState* s : active_) {
            if (const size_t dropped = DropFaulted(*s)) {
                Counters::Add(stats_.dropped, dropped);
                moved = true;
            }
            while (SettleEventOnHost(*s, device_.function->pci_address())) {
                Counters::Add(stats_.host_events, 1);
                moved = true;
            }
        }
    }
    return any;
}

bool SchedulerCore::IssueHostWork(bool on_thread) {
    bool any = false;
    for (StreamState* sp : active_) {
        StreamState& s = *sp;
        // Host work is the thread's: callbacks run there (and may not wait).
        if (!on_thread || s.local.empty() || s.host_busy || s.ring_inflight != 0) continue;
        QueuedOp& op = s.local.front();
        if (batcher_.IsRingOp(op)) continue;
        if (op.kind == OpKind::HostCallback) {
            any |= RunCallback(s);
            continue;
        }
        // A DMA copy: it runs beside the ring, which may be busy with other streams.
        QueuedOp copy = std::move(op);
        s.local.pop_front();
        const uint64_t seq = s.next_seq++;
        awaits_dma_.store(true, std::memory_order_seq_cst);  // before the copy can complete
        if (dma_.Start(s, copy, seq)) {
            dma_seen_ = ~0ull;  // the copy may have finished inline: look at once
            Counters::Add(stats_.dma_copies, 1);
        }
        any = true;
    }
    return any;
}

bool SchedulerCore::SubmitRing() {
    batch_.clear();
    const size_t inflight = records_.size();
    if (inflight >= options_.max_ring_inflight) return false;
    RingBatcher::Budget budget{options_.max_ring_inflight - inflight, ring_->FreeSlots(), inflight == 0,
                               trace::Enabled() ? trace::detail::NowNs() : 0};
    size_t batch_cbs = 0;
    const StreamState* split = SplitChainStream();
    for (StreamState* sp : policy_.Order(active_)) {
        StreamState& s = *sp;
        if (split && split != sp) continue;  // the rest of its chain first
        // A stream's turn is one LINKed chain in the ring, so a failure
        // cancels the rest of it on the device (the stream drops the work
        // behind a failure). A later turn cannot be linked to it (other
        // streams' CBs may sit between): it waits for the previous one,
        // unless it may wait in the ring behind it (MayQueueBehind).
        if (!batcher_.Ready(s) || (s.ring_inflight != 0 && !MayQueueBehind(s))) continue;
        const size_t taken = batcher_.TakeTurn(s, policy_.Quantum(sp), budget, batch_, records_);
        TurnPolicy::EndTurn(s, taken != 0);  // ready but passed over: it ages (Priority)
        batch_cbs += taken;
    }
    if (batch_.empty()) return false;
    RingDoorbell(batch_cbs);
    return true;
}

const StreamState* SchedulerCore::SplitChainStream() {
    const StreamState* s = batcher_.split();
    if (!s) return nullptr;
    // Its rest is all that may go next, unless it will not come as ring CBs
    // right away: the stream faulted (its work is dropped) or left, or its
    // next op is host work (a DMA copy, a callback that may wait for other
    // streams) or an event op (it may wait for other streams).
    const bool live = std::find(active_.begin(), active_.end(), s) != active_.end();
    if (live && !s->faulted.load(std::memory_order_relaxed) && !s->local.empty()) {
        const QueuedOp& next = s->local.front();
        if (batcher_.IsRingOp(next) && next.kind != OpKind::EventWait && next.kind != OpKind::EventRecord) return s;
    }
    batcher_.ForgetSplit();
    return nullptr;
}

bool SchedulerCore::MayQueueBehind(const StreamState& s) const {
    return s.ring_stream >= 0 && s.turns_inflight < kTurnsInRing && records_.last_stream() == &s;
}

bool SchedulerCore::SubmitAlone(StreamState& s, QueuedOp& op) {
    // Anything else to do (work of other streams, a fault, a changed set of
    // streams, a trace) takes the whole pass, which keeps turns fair.
    if (trace::Enabled() || lost() || streams_version_.load() != active_version_) return false;
    if (s.faulted.load(std::memory_order_acquire) || s.HasWork() || s.incoming.Pending()) return false;
    if (!batcher_.IsRingOp(op) || op.kind == OpKind::EventRecord || op.kind == OpKind::EventWait) return false;
    if (arrivals_.load(std::memory_order_acquire)) return false;  // other streams got work
    for (const StreamState* other : active_)
        if (other != &s && (!other->local.empty() || other->incoming.Pending())) return false;
    if (SplitChainStream()) return false;
    const size_t inflight = records_.size();
    if (inflight >= options_.max_ring_inflight) return false;
    try {
        RingBatcher::Budget budget{options_.max_ring_inflight - inflight, ring_->FreeSlots(), inflight == 0, 0};
        if (RingBatcher::SlotsFor(op) > budget.slots) return false;
        s.local.push_back(std::move(op));
        Activate(s);  // passes look after its turn from here
        batch_.clear();
        const size_t taken = batcher_.TakeTurn(s, policy_.Quantum(&s), budget, batch_, records_);
        TurnPolicy::EndTurn(s, taken != 0);
        if (taken != 0)
            RingDoorbell(taken);
        else
            Pump(false);  // not expected (it fitted): the whole pass takes it
    } catch (const Error& e) {
        DeviceFailed(e);  // only the ring and the function throw: the device is gone or halted
    }
    SetBusy(!Idle());
    return true;
}

void SchedulerCore::RingDoorbell(size_t batch_cbs) {
    const uint64_t inline_before = batcher_.inline_copies();
    ring_->Submit(batch_);
    UpdateRingWatch();
    if (trace::Enabled()) [[unlikely]] {
        const uint64_t recording = trace::detail::Recording();
        if (trace_recording_ != recording) {
            trace_ring_track_ = trace::detail::NamedTrack(device_.function->pci_address() + " device ring");
            trace_recording_ = recording;
        }
        trace::detail::Counter(trace_ring_track_, "CBs in the ring", trace::detail::NowNs(), int64_t(records_.size()));
    }
    Counters::Add(stats_.ring_cbs, batch_cbs);
    stats_.inline_copies.store(inline_before, std::memory_order_relaxed);
    Counters::Add(stats_.doorbells, 1);
}

// ---------------------------------------------------------------- device loss

void SchedulerCore::DeviceFailed(const Error& error) {
    if (!lost()) SPYRE_LOG_WARN("%s: %s (every stream fails from here)", device_.function->pci_address().c_str(), error.what());
    FaultAll(error);
}

void SchedulerCore::FaultAll(const Error& error) {
    if (!lost_.load()) {
        lost_error_ = error;
        lost_.store(true, std::memory_order_release);
    }
    // The kind already reads "device lost"; another kind's failure says what it was.
    const Error lost_err(ErrorKind::DeviceLost,
                         error.kind() == ErrorKind::DeviceLost ? error.message()
                                                               : std::string(ToString(error.kind())) + ": " + error.message(),
                         error.context());
    records_.FailAll(lost_err);
    UpdateRingWatch();
    dma_.FailAll(lost_err);
    RefreshStreams();
    PullIncoming();
    // Every stream: registered ones, idle and retired ones too, and listed
    // ones (one queued to by index as it was retired may have left the
    // registry).
    std::vector<std::shared_ptr<StreamState>> all;
    {
        std::lock_guard lock(streams_mu_);
        all = streams_;
    }
    for (StreamState* s : active_)
        if (std::none_of(all.begin(), all.end(), [&](const auto& a) { return a.get() == s; }))
            all.push_back(s->shared_from_this());
    for (const std::shared_ptr<StreamState>& sp : all) {
        StreamState* s = sp.get();
        Fault(*s, lost_err);
        while (!s->local.empty()) {
            const QueuedOp& op = s->local.front();
            if (op.kind == OpKind::EventRecord) CompleteEvent(*op.event, op.value, 0, lost_err);
            s->local.pop_front();
            Complete(*s, s->next_seq++);
        }
    }
}

}  // namespace detail
}  // namespace spyre
