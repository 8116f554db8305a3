// SPDX-License-Identifier: Apache-2.0
#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "stream/scheduler_impl.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "stream/stream_wait.hpp"

namespace spyre {

namespace {

using Kind = ControlBlock::Kind;
using Clock = std::chrono::steady_clock;

// How long the thread sleeps at most between device health checks when
// work is in flight, and at all when idle.
constexpr auto kBusySleep = std::chrono::milliseconds(100);
constexpr auto kIdleSleep = std::chrono::seconds(1);

thread_local bool tls_scheduler_thread = false;

}  // namespace

const char* ToString(SchedulerPolicy policy) noexcept {
    switch (policy) {
    case SchedulerPolicy::RoundRobin: return "round-robin";
    case SchedulerPolicy::Priority: return "priority";
    case SchedulerPolicy::DrainOneFirst: return "drain-one-first";
    }
    return "?";
}

const char* ToString(ControlBlock::Kind kind) noexcept {
    switch (kind) {
    case Kind::Launch: return "Launch";
    case Kind::CopyToDevice: return "CopyToDevice";
    case Kind::CopyFromDevice: return "CopyFromDevice";
    case Kind::SemWrite: return "SemWrite";
    case Kind::SemWait: return "SemWait";
    case Kind::EventRecord: return "EventRecord";
    case Kind::EventWait: return "EventWait";
    case Kind::HostCallback: return "HostCallback";
    }
    return "?";
}

// ---------------------------------------------------------------- public face

Scheduler::Scheduler(DeviceCore& core, SchedulerOptions options)
    : options_(options), impl_(std::make_unique<Impl>(core, options_)) {}

Scheduler::~Scheduler() = default;

void Scheduler::QueueOperation(int stream_index, ControlBlock cb) {
    std::shared_ptr<StreamState> s = impl_->Find(stream_index);
    if (!s)
        throw Error(ErrorKind::InvalidArgument, "no stream with index " + std::to_string(stream_index),
                    ErrorContext{.stream = stream_index});
    // A control block from outside the library is checked like FlexStream's
    // arguments: a null buffer or missing callback would crash the
    // scheduler thread, not fail one stream. (Device addresses are checked
    // by the DMA engine and the device, and fail the stream.)
    auto bad = [&](const std::string& what) {
        return Error(ErrorKind::InvalidArgument, std::string("QueueOperation: ") + ToString(cb.kind) + " " + what,
                     ErrorContext{.stream = stream_index});
    };
    switch (cb.kind) {
    case ControlBlock::Kind::CopyToDevice:
    case ControlBlock::Kind::CopyFromDevice:
        if (cb.size == 0) throw bad("of 0 bytes");
        if (cb.kind == ControlBlock::Kind::CopyToDevice ? !cb.src : !cb.dst) throw bad("with a null host address");
        break;
    case ControlBlock::Kind::HostCallback:
        if (!cb.callback) throw bad("without a callback");
        break;
    case ControlBlock::Kind::EventRecord:
    case ControlBlock::Kind::EventWait:
        if (!cb.event || cb.value == 0) throw bad("without an event and a sequence >= 1");
        break;
    case ControlBlock::Kind::Launch:
    case ControlBlock::Kind::SemWrite:
    case ControlBlock::Kind::SemWait: break;
    default: throw bad("of an unknown kind");
    }
    impl_->Push(*s, std::move(cb));
}

SchedulerStats Scheduler::Stats() const { return impl_->Stats(); }

bool SchedulerThreadActive() { return tls_scheduler_thread; }

// ---------------------------------------------------------------- setup

Scheduler::Impl::Impl(DeviceCore& core, const SchedulerOptions& options) : core_(core), options_(options) {
    if (options_.quantum == 0) throw Error(ErrorKind::InvalidArgument, "scheduler quantum must be >= 1");
    if (options_.max_ring_inflight == 0)
        throw Error(ErrorKind::InvalidArgument, "scheduler max_ring_inflight must be >= 1");
    ring_.emplace(*core_.function);
    inline_max_ = core_.function->Read32(SPYRE_REG_CAPS) & SPYRE_CAP_COPY_INLINE ? SPYRE_CB_INLINE_MAX_BYTES : 0;
    completions_.resize(256);
}

Scheduler::Impl::~Impl() { Stop(); }

void Scheduler::Impl::Start() {
    thread_ = std::thread([this] {
        tls_scheduler_thread = true;
        Run();
    });
    pthread_setname_np(thread_.native_handle(), "spyre-sched");
}

void Scheduler::Impl::Stop() {
    if (!thread_.joinable()) return;
    stopping_.store(true);
    Wake();
    thread_.join();
}

StreamState* Scheduler::Impl::CreateStream(int priority) {
    if (priority < kStreamPriorityHighest || priority > kStreamPriorityLowest)
        throw Error(ErrorKind::InvalidArgument, "stream priority " + std::to_string(priority) + " is outside [" +
                                                    std::to_string(kStreamPriorityHighest) + ", " +
                                                    std::to_string(kStreamPriorityLowest) + "]");
    if (lost()) throw lost_error();
    std::lock_guard lock(streams_mu_);
    streams_.push_back(std::make_shared<StreamState>(next_index_++, priority));
    streams_version_.fetch_add(1);
    return streams_.back().get();
}

std::shared_ptr<StreamState> Scheduler::Impl::Find(int stream_index) {
    std::lock_guard lock(streams_mu_);
    for (auto& s : streams_)
        if (s->index == stream_index && !s->retired.load()) return s;
    return nullptr;
}

void Scheduler::Impl::Retire(StreamState* state) {
    state->retired.store(true);
    streams_version_.fetch_add(1);
    Wake();
}

std::vector<std::shared_ptr<StreamState>> Scheduler::Impl::Streams() {
    std::lock_guard lock(streams_mu_);
    std::vector<std::shared_ptr<StreamState>> out;
    for (auto& s : streams_)
        if (!s->retired.load()) out.push_back(s);
    return out;
}

SchedulerStats Scheduler::Impl::Stats() const {
    std::lock_guard lock(stats_mu_);
    return stats_;
}

// ---------------------------------------------------------------- producers

void Scheduler::Impl::Push(StreamState& s, ControlBlock cb) {
    {
        std::lock_guard lock(s.mu);
        if (s.fault) throw *s.fault;
        if (lost()) throw lost_error();
        s.incoming.push_back(std::move(cb));
        s.enqueued_count.store(++s.enqueued, std::memory_order_release);
    }
    s.pending.store(true, std::memory_order_seq_cst);
    // Only the first producer to find the thread asleep pays for the wake-up.
    if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(0, std::memory_order_seq_cst)) Wake();
}

void Scheduler::Impl::PushGroup(StreamState& s, std::span<ControlBlock> group) {
    if (group.empty()) return;
    {
        std::lock_guard lock(s.mu);
        // Cleanup callbacks are accepted even on a faulted stream.
        const bool cleanup_only = group.size() == 1 && group[0].always;
        if (s.fault && !cleanup_only) throw *s.fault;
        if (lost() && !cleanup_only) throw lost_error();
        for (size_t i = 0; i < group.size(); ++i) {
            group[i].link = i + 1 < group.size();
            s.incoming.push_back(std::move(group[i]));
        }
        s.enqueued += group.size();
        s.enqueued_count.store(s.enqueued, std::memory_order_release);
    }
    s.pending.store(true, std::memory_order_seq_cst);
    // Only the first producer to find the thread asleep pays for the wake-up.
    if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(0, std::memory_order_seq_cst)) Wake();
}

void Scheduler::Impl::Wake() {
    wake_seq_.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&wake_seq_, FutexScope::Private);
}

// ---------------------------------------------------------------- the thread

void Scheduler::Impl::Run() {
    auto last_progress = Clock::now();
    while (!stopping_.load()) {
        bool progress = false;
        try {
            progress |= RefreshStreams();
            progress |= PullIncoming();
            progress |= ReapRing();
            progress |= PollDma();
            progress |= IssueHostWork();
            progress |= SubmitRing();
        } catch (const Error& e) {
            // Only the ring and the function can throw here: the device is gone or halted.
            FaultAll(e);
            progress = true;
        }
        if (progress) {
            last_progress = Clock::now();
            continue;
        }
        const bool spinning = options_.wait_mode == driver::WaitMode::Poll ||
                              (options_.wait_mode == driver::WaitMode::Adaptive &&
                               Clock::now() - last_progress < options_.spin);
        if (spinning && (!ring_records_.empty() || !dma_records_.empty())) {
            CpuRelax();
            continue;
        }
        IdleWait();
        last_progress = Clock::now();
    }
    // Shutting down: whatever is still queued never runs.
    FaultAll(Error(ErrorKind::DeviceLost, "the device was closed with work still queued"));
}

void Scheduler::Impl::IdleWait() {
    const uint32_t seen = wake_seq_.load(std::memory_order_seq_cst);
    sleeping_.store(1, std::memory_order_seq_cst);
    bool work = stopping_.load() || dma_done_.load() != dma_seen_ ||
                streams_version_.load() != active_version_;
    for (StreamState* s : active_) work = work || s->pending.load(std::memory_order_seq_cst);
    if (!work) {
        if (!ring_records_.empty()) {
            try {
                ring_->WaitCompletionOr(wake_seq_, seen, kBusySleep);
            } catch (const Error& e) {
                sleeping_.store(0);
                FaultAll(e);
                return;
            }
        } else {
            FutexWait(&wake_seq_, seen, dma_records_.empty() ? kIdleSleep : kBusySleep, FutexScope::Private);
        }
    }
    sleeping_.store(0, std::memory_order_seq_cst);
}

bool Scheduler::Impl::RefreshStreams() {
    const uint64_t version = streams_version_.load();
    if (version == active_version_) return false;
    std::lock_guard lock(streams_mu_);
    // Retired streams leave once idle (their owner waited for them already).
    std::erase_if(streams_, [&](const std::shared_ptr<StreamState>& s) {
        const bool gone = s->retired.load() && s->local.empty() && s->ring_inflight == 0 && !s->host_busy &&
                          !s->pending.load();
        if (gone && drain_current_ == s.get()) drain_current_ = nullptr;
        return gone;
    });
    active_.clear();
    for (auto& s : streams_) active_.push_back(s.get());
    active_version_ = version;
    // A retired stream with work left keeps the version "dirty" so it is looked at again.
    for (StreamState* s : active_)
        if (s->retired.load()) active_version_ = ~0ull;
    return false;
}

bool Scheduler::Impl::PullIncoming() {
    bool any = false;
    for (StreamState* s : active_) {
        if (!s->pending.load(std::memory_order_acquire)) continue;
        std::lock_guard lock(s->mu);
        s->pending.store(false, std::memory_order_relaxed);
        for (ControlBlock& cb : s->incoming) s->local.push_back(std::move(cb));
        s->incoming.clear();
        any = true;
    }
    return any;
}

// ---------------------------------------------------------------- completions

void Scheduler::Impl::Complete(StreamState& s, uint64_t seq) {
    s.completed.store(seq + 1, std::memory_order_seq_cst);
    s.done.Notify();
}

void Scheduler::Impl::Fault(StreamState& s, uint64_t seq, Error error) {
    std::lock_guard lock(s.mu);
    if (s.fault) return;  // the first failure is the one reported
    (void)seq;
    s.fault = std::move(error);
    s.faulted.store(true, std::memory_order_release);
}

void Scheduler::Impl::CompleteEvent(EventState& ev, uint64_t seq, uint64_t timestamp_ns,
                                    const std::optional<Error>& error) {
    // An event re-recorded on another stream may see its records complete
    // out of sequence order: an older record never moves it backwards.
    if (seq <= ev.completed.load(std::memory_order_relaxed)) return;
    {
        std::lock_guard lock(ev.mu);
        ev.error = error;
    }
    ev.timestamp_ns.store(timestamp_ns, std::memory_order_relaxed);
    ev.completed.store(seq, std::memory_order_seq_cst);
    ev.done.Notify();
}

Error Scheduler::Impl::DeviceFailure(const StreamState& s, uint64_t seq, const RingRecord& rec, uint16_t status,
                                     uint64_t result) const {
    std::string what = std::string(ToString(rec.kind)) + " failed on the device: " + spyre_error_name(status);
    if (status == SPYRE_ERR_CANCELED) what = std::string(ToString(rec.kind)) + " was cancelled by an earlier failure";
    return Error(ErrorKind::DeviceError, "stream " + std::to_string(s.index) + " op #" + std::to_string(seq) + ": " + what,
                 ErrorContext{.device = core_.function->pci_address(),
                              .address = result ? std::optional<uint64_t>(result) : std::nullopt,
                              .stream = s.index,
                              .op_index = seq,
                              .device_code = status});
}

bool Scheduler::Impl::ReapRing() {
    if (ring_records_.empty()) return false;
    const size_t n = ring_->Reap(completions_);
    for (size_t i = 0; i < n; ++i) {
        const driver::Completion& c = completions_[i];
        if (ring_records_.empty() || ring_records_.front().user_data != c.user_data)
            throw Error(ErrorKind::ProtocolError, "the device completed CB " + std::to_string(c.user_data) +
                                                      " out of ring order",
                        ErrorContext{.device = core_.function->pci_address()});
        RingRecord rec = std::move(ring_records_.front());
        ring_records_.pop_front();
        StreamState& s = *rec.stream;
        --s.ring_inflight;
        if (!c.ok() && !s.faulted.load()) {
            Fault(s, rec.seq, DeviceFailure(s, rec.seq, rec, c.status, c.result));
        } else if (c.status == SPYRE_ERR_CANCELED) {
            std::lock_guard lock(stats_mu_);
            ++stats_.dropped;  // cancelled on the device behind the stream's failure
        }
        if (rec.kind == Kind::EventRecord) {
            std::optional<Error> err;
            if (s.faulted.load()) {
                std::lock_guard lock(s.mu);
                err = s.fault;
            }
            CompleteEvent(*rec.event, rec.value, c.timestamp_ns, err);
        }
        // Let go of the event before the stream's waiter wakes: the last
        // reference to the device must never be dropped on this thread.
        rec.event.reset();
        Complete(s, rec.seq);
    }
    return n > 0;
}

bool Scheduler::Impl::PollDma() {
    const uint64_t done = dma_done_.load(std::memory_order_acquire);
    if (done == dma_seen_) return false;
    // Consume the count even with no stream copy in flight: copies made
    // directly on the DMA engine (events, tensors) bump it too, and an
    // unconsumed count keeps IdleWait from ever sleeping.
    dma_seen_ = done;
    if (dma_records_.empty()) return false;
    bool any = false;
    for (size_t i = 0; i < dma_records_.size();) {
        DmaRecord& r = dma_records_[i];
        std::optional<Error> failure;
        bool finished = false;
        try {
            finished = core_.dma_queue->Poll(r.ticket).has_value();
        } catch (const Error& e) {
            finished = true;
            failure = Error(e.kind(),
                            "stream " + std::to_string(r.stream->index) + " op #" + std::to_string(r.seq) + ": " +
                                ToString(r.kind) + " failed: " + e.message(),
                            ErrorContext{.device = core_.function->pci_address(),
                                         .address = r.device_addr,
                                         .stream = r.stream->index,
                                         .op_index = r.seq,
                                         .sys_errno = e.context().sys_errno});
        }
        if (!finished) {
            ++i;
            continue;
        }
        StreamState& s = *r.stream;
        if (failure) Fault(s, r.seq, *failure);
        s.host_busy = false;
        Complete(s, r.seq);
        dma_records_[i] = std::move(dma_records_.back());  // lets go of its keep_alive
        dma_records_.pop_back();
        any = true;
    }
    return any;
}

// ---------------------------------------------------------------- issuing

bool Scheduler::Impl::IsRingOp(const ControlBlock& cb) const {
    switch (cb.kind) {
    case Kind::Launch:
    case Kind::SemWrite:
    case Kind::SemWait:
    case Kind::EventRecord:
    case Kind::EventWait: return true;
    case Kind::CopyToDevice: return cb.size <= inline_max_;
    case Kind::CopyFromDevice:
    case Kind::HostCallback: return false;
    }
    return false;
}

bool Scheduler::Impl::RingReady(const StreamState& s) const {
    if (s.local.empty() || s.host_busy) return false;
    const ControlBlock& cb = s.local.front();
    if (!IsRingOp(cb)) return false;
    if (s.faulted.load(std::memory_order_relaxed) && cb.kind != Kind::EventRecord) return false;
    if (cb.kind == Kind::EventWait) return cb.event->submitted.load(std::memory_order_relaxed) >= cb.value;
    return true;
}

// Drops what a faulted stream still holds, in order, once nothing of it is in
// flight. Event records still fire so streams waiting on them do not hang,
// and cleanup callbacks still run so nothing leaks.
bool Scheduler::Impl::DropFaulted(StreamState& s) {
    if (!s.faulted.load(std::memory_order_relaxed)) return false;
    bool any = false;
    while (!s.local.empty() && s.ring_inflight == 0 && !s.host_busy && s.local.front().kind != Kind::EventRecord &&
           !s.local.front().always) {
        s.local.pop_front();
        Complete(s, s.next_seq++);
        std::lock_guard lock(stats_mu_);
        ++stats_.dropped;
        any = true;
    }
    return any;
}

bool Scheduler::Impl::IssueHostWork() {
    bool any = false;
    for (StreamState* sp : active_) {
        StreamState& s = *sp;
        any |= DropFaulted(s);
        if (s.local.empty() || s.host_busy || s.ring_inflight != 0) continue;
        ControlBlock& cb = s.local.front();
        if (IsRingOp(cb)) continue;
        const uint64_t seq = s.next_seq;
        if (cb.kind == Kind::HostCallback) {
            std::function<void()> callback = std::move(cb.callback);
            s.local.pop_front();
            ++s.next_seq;
            try {
                callback();
            } catch (const Error& e) {
                Fault(s, seq, Error(e.kind(), "stream " + std::to_string(s.index) + " op #" + std::to_string(seq) +
                                                  ": host callback threw: " + e.message(),
                                    ErrorContext{.stream = s.index, .op_index = seq}));
            } catch (const std::exception& e) {
                Fault(s, seq, Error(ErrorKind::Internal, "stream " + std::to_string(s.index) + " op #" +
                                                             std::to_string(seq) + ": host callback threw: " + e.what(),
                                    ErrorContext{.stream = s.index, .op_index = seq}));
            } catch (...) {
                Fault(s, seq, Error(ErrorKind::Internal, "stream " + std::to_string(s.index) + " op #" +
                                                             std::to_string(seq) + ": host callback threw",
                                    ErrorContext{.stream = s.index, .op_index = seq}));
            }
            // Captures go before the waiter wakes (they may hold the device).
            callback = nullptr;
            Complete(s, seq);
            std::lock_guard lock(stats_mu_);
            ++stats_.callbacks;
            any = true;
            continue;
        }
        // A DMA copy: it runs beside the ring, which may be busy with other streams.
        DmaRecord rec{&s, seq, 0, cb.kind, cb.device_addr, std::move(cb.keep_alive)};
        try {
            rec.ticket = cb.kind == Kind::CopyToDevice ? core_.dma_queue->HostToDevice(cb.src, cb.device_addr, cb.size)
                                                       : core_.dma_queue->DeviceToHost(cb.dst, cb.device_addr, cb.size);
        } catch (const Error& e) {
            s.local.pop_front();
            ++s.next_seq;
            Fault(s, seq, Error(e.kind(), "stream " + std::to_string(s.index) + " op #" + std::to_string(seq) + ": " +
                                              ToString(rec.kind) + " failed: " + e.message(),
                                ErrorContext{.device = core_.function->pci_address(),
                                             .address = rec.device_addr,
                                             .stream = s.index,
                                             .op_index = seq,
                                             .sys_errno = e.context().sys_errno}));
            Complete(s, seq);
            any = true;
            continue;
        }
        s.local.pop_front();
        ++s.next_seq;
        s.host_busy = true;
        dma_records_.push_back(std::move(rec));
        dma_seen_ = ~0ull;  // the copy may have finished inline: look at once
        {
            std::lock_guard lock(stats_mu_);
            ++stats_.dma_copies;
        }
        any = true;
    }
    return any;
}

size_t Scheduler::Impl::SlotsFor(const ControlBlock& cb) const {
    if (cb.kind == Kind::CopyToDevice) return 1 + (cb.size + sizeof(spyre_cb) - 1) / sizeof(spyre_cb);
    return 1;
}

// Ring slots (and CBs) of the LINKed chain starting at the stream's head,
// counting only ring ops that are ready now.
size_t Scheduler::Impl::ChainSlots(const StreamState& s, size_t* cbs) const {
    size_t slots = 0, n = 0;
    for (const ControlBlock& cb : s.local) {
        if (!IsRingOp(cb)) break;
        slots += SlotsFor(cb);
        ++n;
        if (!cb.link) break;
    }
    *cbs = n;
    return slots;
}

void Scheduler::Impl::AppendRingOp(StreamState& s) {
    ControlBlock op = std::move(s.local.front());
    s.local.pop_front();
    const uint64_t seq = s.next_seq++;
    const uint64_t ud = next_user_data_++;
    switch (op.kind) {
    case Kind::Launch: batch_.push_back(driver::LaunchCb(op.device_addr, op.size, ud)); break;
    case Kind::CopyToDevice: {
        driver::AppendCopyInline(batch_, op.device_addr,
                                 std::span(static_cast<const uint8_t*>(op.src), size_t(op.size)), ud);
        std::lock_guard lock(stats_mu_);
        ++stats_.inline_copies;
        break;
    }
    case Kind::SemWrite: batch_.push_back(driver::SemWriteCb(op.device_addr, op.value, ud)); break;
    case Kind::SemWait: batch_.push_back(driver::SemWaitCb(op.device_addr, op.value, 0, ud)); break;
    case Kind::EventRecord: {
        // Records of one event on several streams reach the ring in any
        // order; the semaphore (and `submitted`) only move forward, so a
        // wait for the newest record cannot be undone by an older one.
        const uint64_t value = std::max(op.value, op.event->submitted.load(std::memory_order_relaxed));
        batch_.push_back(driver::SemWriteCb(op.event->sem_addr, value, ud));
        op.event->submitted.store(value, std::memory_order_relaxed);
        break;
    }
    case Kind::EventWait:
        // Every record up to `submitted` is ahead of this CB in the ring, and
        // the ring runs in order, so the semaphore holds exactly that value.
        batch_.push_back(driver::SemWaitCb(op.event->sem_addr, op.event->submitted.load(), 0, ud));
        break;
    default: throw Error(ErrorKind::Internal, "not a ring op");
    }
    ring_records_.push_back(RingRecord{&s, seq, ud, op.kind, op.value, std::move(op.event)});
    ++s.ring_inflight;
}

std::vector<StreamState*> Scheduler::Impl::TurnOrder() {
    std::vector<StreamState*> order;
    const size_t n = active_.size();
    if (n == 0) return order;
    switch (options_.policy) {
    case SchedulerPolicy::RoundRobin:
        for (size_t i = 0; i < n; ++i) order.push_back(active_[(rr_cursor_ + i) % n]);
        rr_cursor_ = (rr_cursor_ + 1) % n;
        break;
    case SchedulerPolicy::Priority: {
        for (size_t i = 0; i < n; ++i) order.push_back(active_[(rr_cursor_ + i) % n]);
        rr_cursor_ = (rr_cursor_ + 1) % n;
        const uint32_t aging = std::max<uint32_t>(options_.aging_turns, 1);
        std::stable_sort(order.begin(), order.end(), [&](const StreamState* a, const StreamState* b) {
            return int64_t(a->priority) - int64_t(a->skipped_turns / aging) <
                   int64_t(b->priority) - int64_t(b->skipped_turns / aging);
        });
        break;
    }
    case SchedulerPolicy::DrainOneFirst: {
        auto has_work = [](const StreamState* s) { return !s->local.empty() || s->ring_inflight || s->host_busy; };
        if (!drain_current_ || !has_work(drain_current_)) {
            drain_current_ = nullptr;
            for (StreamState* s : active_)
                if (has_work(s)) {
                    drain_current_ = s;
                    break;
                }
        }
        if (drain_current_) order.push_back(drain_current_);
        for (StreamState* s : active_)
            if (s != drain_current_) order.push_back(s);
        break;
    }
    }
    return order;
}

bool Scheduler::Impl::SubmitRing() {
    batch_.clear();
    size_t batch_cbs = 0;
    const size_t inflight = ring_records_.size();
    if (inflight >= options_.max_ring_inflight) return false;
    size_t cb_budget = options_.max_ring_inflight - inflight;
    size_t slot_budget = ring_->FreeSlots();
    for (StreamState* sp : TurnOrder()) {
        StreamState& s = *sp;
        // A stream's turn is one LINKed chain in the ring, so a failure
        // cancels the rest of it on the device (the stream drops the work
        // behind a failure). CBs sent in a later turn could not be linked
        // to it (other streams' CBs may sit between), so a stream gets its
        // next turn only once its previous one has completed.
        if (s.ring_inflight != 0 || !RingReady(s)) continue;
        const size_t quantum =
            options_.policy == SchedulerPolicy::DrainOneFirst && sp == drain_current_ ? SIZE_MAX : options_.quantum;
        size_t taken = 0;
        size_t previous = SIZE_MAX;  // the stream's last CB in this batch
        bool turn_over = false;
        while (!turn_over && taken < quantum && RingReady(s)) {
            // A LINKed chain goes down whole, never interleaved with another
            // stream; only a chain larger than the whole budget is split.
            size_t chain_cbs = 0;
            const size_t chain_slots = ChainSlots(s, &chain_cbs);
            const bool fits = chain_slots <= slot_budget && chain_cbs <= cb_budget;
            if (!fits && !(inflight == 0 && batch_.empty())) break;
            for (size_t k = 0; k < chain_cbs && RingReady(s); ++k) {
                if (SlotsFor(s.local.front()) > slot_budget || cb_budget == 0) break;
                // An event record is never cancelled by the work before it
                // (it fires even after a failure, so waiters do not hang):
                // it starts a turn, unlinked from its predecessor.
                if (s.local.front().kind == Kind::EventRecord && previous != SIZE_MAX) {
                    turn_over = true;
                    break;
                }
                const size_t first = batch_.size();
                AppendRingOp(s);
                if (previous != SIZE_MAX) batch_[previous].flags |= SPYRE_CB_F_LINK;
                previous = first;
                slot_budget -= batch_.size() - first;
                --cb_budget;
                ++taken;
                ++batch_cbs;
            }
            if (cb_budget == 0 || slot_budget == 0) break;
        }
        if (taken)
            s.skipped_turns = 0;
        else
            ++s.skipped_turns;  // ready but passed over: it ages (Priority)
    }
    if (batch_.empty()) return false;
    ring_->Submit(batch_);
    std::lock_guard lock(stats_mu_);
    stats_.ring_cbs += batch_cbs;
    ++stats_.doorbells;
    return true;
}

// ---------------------------------------------------------------- device loss

void Scheduler::Impl::FaultAll(const Error& error) {
    if (!lost_.load()) {
        lost_error_ = error;
        lost_.store(true, std::memory_order_release);
    }
    const Error lost_err(ErrorKind::DeviceLost, "device lost: " + error.message(), error.context());
    for (RingRecord& r : ring_records_) {
        Fault(*r.stream, r.seq, lost_err);
        if (r.event && r.kind == Kind::EventRecord) CompleteEvent(*r.event, r.value, 0, lost_err);
        r.event.reset();
        --r.stream->ring_inflight;
        Complete(*r.stream, r.seq);
    }
    ring_records_.clear();
    for (DmaRecord& r : dma_records_) {
        // The copy itself still runs on the DMA engine, against host memory
        // the caller reclaims once the stream completes (and the record's
        // staging buffer): let it finish first. Copies only move memory, so
        // this is bounded; the ticket's own error does not matter any more.
        try {
            core_.dma_queue->Wait(r.ticket);
        } catch (const Error&) {
        }
        Fault(*r.stream, r.seq, lost_err);
        r.stream->host_busy = false;
        Complete(*r.stream, r.seq);
    }
    dma_records_.clear();
    PullIncoming();
    for (StreamState* s : active_) {
        Fault(*s, s->next_seq, lost_err);
        while (!s->local.empty()) {
            const ControlBlock& cb = s->local.front();
            if (cb.kind == Kind::EventRecord) CompleteEvent(*cb.event, cb.value, 0, lost_err);
            s->local.pop_front();
            Complete(*s, s->next_seq++);
        }
    }
}

}  // namespace spyre
