// SPDX-License-Identifier: Apache-2.0
#include "dispatcher.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <unordered_set>

#include "content_hash.hpp"
#include "deadline.hpp"
#include "host_trace.hpp"
#include "local_chip_executor.hpp"
#include "remote_chip_executor.hpp"
#include "placement.hpp"
#include "remote_protocol.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/trace/trace.hpp"
#include "storage_claims.hpp"
#include "thrown_value.hpp"

namespace spyre::host {

using dependency::JobThreads;

class Dispatcher::Lock {
public:
    explicit Lock(Dispatcher& s) : s_(s) {
        s_.mu_.lock();
        try {
            s_.ApplyInbox();
        } catch (...) {  // a constructor that throws has no destructor to unlock
            s_.Unlock();
            throw;
        }
    }
    ~Lock() { s_.Unlock(); }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

private:
    Dispatcher& s_;
};

void Dispatcher::Unlock() {
    Graveyard dead;
    struct Posting {
        JobThreads* pool;
        std::vector<JobThreads::Job> jobs;
    };
    // Kept per thread, entries and their capacity too: jobs are swapped
    // out of to_post_ and an emptied vector swapped back in, so a submit,
    // which posts one task per unlock, allocates nothing.
    thread_local std::vector<Posting> posting;
    size_t used = 0;
    auto take = [&] {
        for (auto& run : finished_) dead.push_back(std::move(run));
        finished_.clear();
        for (size_t i = 0; i < to_post_.size(); ++i) {
            if (to_post_[i].empty()) continue;
            JobThreads* pool = i < lanes_.size() ? lanes_[i].get() : sub_workers_.get();
            if (used == posting.size()) posting.emplace_back();
            posting[used].pool = pool;
            posting[used++].jobs.swap(to_post_[i]);
        }
    };
    auto post = [&] {
        for (size_t i = 0; i < used; ++i) posting[i].pool->PostAll(posting[i].jobs);  // leaves them empty
        used = 0;
    };
    take();
    mu_.unlock();
    post();
    ApplyParkedAfterUnlock(mu_, parked_, [&] {
        ApplyInbox();
        take();
    });
    post();
}  // `dead` freed here, outside the lock

void Dispatcher::ApplyInbox() {
    // Submissions first (a completion is only ever of a task filed before).
    for (HostTask* t = submissions_.TakeAll(); t;) {
        HostTask* next = t->inbox_next;
        t->inbox_next = nullptr;
        File(t);
        t = next;
    }
    for (HostTask* t = inbox_.TakeAll(); t;) {
        HostTask* next = t->inbox_next;  // read first: finishing may end its run
        if (t->level == Level::Chip) {
            Worker::DeviceStats& st = stats_[t->device];
            ++st.chip_tasks;
            st.moved.bytes_uploaded += t->inbox_moved.bytes_uploaded;
            st.moved.bytes_reused += t->inbox_moved.bytes_reused;
            st.moved.bytes_checked += t->inbox_moved.bytes_checked;
            st.moved.bytes_downloaded += t->inbox_moved.bytes_downloaded;
        }
        if (t->inbox_failure) Finish(t, HostTask::State::Failed, std::move(*t->inbox_failure));
        else Finish(t, HostTask::State::Done, {});
        t = next;
    }
}

void Dispatcher::Park(HostTask& task) {
    inbox_.Push(task);  // `task` may be finished, and its run gone, from here on
    // A waiter looking for its run's end applies it (it looks at the inbox
    // after it stops looking): this thread goes on to its next task.
    if (lookers_.load(std::memory_order_seq_cst) != 0) return;
    ApplyIfParked();
}

void Dispatcher::ApplyIfParked() {
    if (!mu_.try_lock()) return;  // its holder applies it
    ApplyInbox();
    Unlock();
}

bool Dispatcher::LookForEnd(RunState& run) {
    auto ended = [&] { return run.done_flag.load(std::memory_order_acquire); };
    for (;;) {
        bool ran = false;
        lookers_.fetch_add(1, std::memory_order_seq_cst);
        JobThreads::LookBeforeSleeping([&] {
            if (!ended() && !inbox_.Empty()) ApplyIfParked();
            if (ended()) return true;
            if (!MayRunOneOf()) return false;
            // Not a looker while it runs a task: threads that finish one
            // meanwhile apply their own.
            lookers_.fetch_sub(1, std::memory_order_seq_cst);
            if (!inbox_.Empty()) ApplyIfParked();
            ran = RunOneOf(run);
            lookers_.fetch_add(1, std::memory_order_seq_cst);
            return ran;
        });
        lookers_.fetch_sub(1, std::memory_order_seq_cst);
        // A device thread that saw this look parked and left it to us.
        if (!inbox_.Empty()) ApplyIfParked();
        if (!ran || ended()) return ended();  // after a task it ran: a new look
    }
}

bool Dispatcher::MayRunOneOf() const noexcept {
    for (const auto& lane : lanes_)
        if (lane->MayRunOne()) return true;
    return sub_workers_ && sub_workers_->MayRunOne();
}

bool Dispatcher::RunOneOf(RunState& run) {
    for (const auto& lane : lanes_)
        if (lane->MayRunOne() && lane->RunOneOf(&run)) return true;
    return sub_workers_ && sub_workers_->MayRunOne() && sub_workers_->RunOneOf(&run);
}

namespace {

// The names of a run's skipped tasks, in submission order (the order of
// its records; they were listed in the order they were skipped).
std::vector<std::string> SkippedIn(const std::vector<TaskRecord>& records) {
    std::vector<std::string> names;
    for (const TaskRecord& r : records)
        if (r.state == TaskState::Skipped) names.push_back(r.name);
    return names;
}

// What the calling thread is part of: the tasks it runs (a SubWorker or
// chip task; a pool thread that waits runs queued tasks of other runs
// meanwhile, one inside the other), and the run whose orchestration
// function it runs. Waiting from here on a run that needs one of them to end
// would wait for itself.
struct Running {
    Running(const Dispatcher* d, const HostTask* t);
    ~Running();
    const Dispatcher* dispatcher;
    const HostTask* task;
    const Running* previous;
    const int depth;  // of the thread's tasks and orchestration functions, this one included
};
thread_local const Running* tl_running = nullptr;
// While Submit files its task on this thread: its run, whose cheap chip
// tasks made ready meanwhile go to tl_cheap instead of a device thread.
thread_local const RunState* tl_run_here = nullptr;
thread_local std::vector<HostTask*> tl_cheap;
thread_local std::vector<HostTask*> tl_cheap_spare;  // its storage between submits: no allocation per task
thread_local const Dispatcher::Submitting* tl_submitting = nullptr;
// Set while SweepStuckChipTasksOf runs a taken chip task: RunChip fails it.
thread_local bool tl_fail_stuck = false;
// Waits (SleepOrHelp) the calling thread is inside: a chip task it takes
// meanwhile may be one whose device's slots waiting calls hold.
thread_local int tl_waits = 0;
thread_local int tl_depth = 0;
// The dispatcher whose lock this thread holds while Free lets go of what a
// finished task held of the caller's: the last reference to a RunHandle or
// to the Worker may go there, whose destructor must neither wait for a run
// nor take the lock.
thread_local const Dispatcher* tl_freeing = nullptr;

// The tasks of `d` that cannot finish while the calling thread waits: those
// it runs, and those that lent them bytes (which wait for what they lent).
std::vector<const HostTask*> HeldUpByCaller(const Dispatcher* d) {
    std::vector<const HostTask*> held;
    for (const Running* r = tl_running; r; r = r->previous) {
        if (r->dispatcher == d) held.push_back(r->task);
        for (const HostTask::Claim& c : r->task->claims)
            if (c.borrowed && c.borrowed->dispatcher == d) held.push_back(c.borrowed->holder);
    }
    return held;
}

// The dispatcher's lock held: each unfinished task, of any run, that cannot
// end before the calling thread's tasks of `d` do (the consumers of
// HeldUpByCaller, transitively), with the held-up task it waits on:
// visit(task, that).
template <typename Visit>
void ForEachWaitingOnCaller(const Dispatcher* d, Visit&& visit) {
    std::vector<std::pair<const HostTask*, const HostTask*>> todo;
    for (const HostTask* t : HeldUpByCaller(d)) todo.emplace_back(t, t);
    std::unordered_set<const HostTask*> seen;
    while (!todo.empty()) {
        const auto [t, named] = todo.back();
        todo.pop_back();
        for (const HostTask* c : t->consumers) {
            if (c->Finished() || !seen.insert(c).second) continue;
            visit(c, named);
            todo.emplace_back(c, named);
        }
    }
}

Running::Running(const Dispatcher* d, const HostTask* t)
    : dispatcher(d), task(t), previous(tl_running), depth(++tl_depth) {
    tl_running = this;
}
Running::~Running() {
    tl_running = previous;
    --tl_depth;
}

// Sleeps on the run until `ready()`. A thread of the Worker's own pools (a
// SubWorker that started a run and waits on it) runs its pool's queued jobs
// meanwhile: that run's SubWorker tasks may need the very thread that
// waits, and the pool's other threads may be waiting the same way. A job
// posted while it sleeps wakes the pool, not the run, so such a sleep is
// short. `dispatcher` says which queued jobs to leave
// (Dispatcher::LeaveToItsLane): while it leaves some, the sleep is a 1 ms
// look, since they keep the pool's queue from looking empty.
// Whether `ready()` came before `until` (RunHandle::WaitFor's bound).
template <typename Ready>
bool SleepOrHelp(RunState& run, Ready&& ready, Dispatcher& dispatcher,
                 std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max()) {
    using namespace std::chrono;
    JobThreads* pool = JobThreads::Current();
    Dispatcher::NestedWait marked;
    struct Unmark {
        Dispatcher& d;
        Dispatcher::NestedWait& m;
        ~Unmark() {
            d.EndNestedWait(m);
            --tl_waits;
        }
    } unmark{dispatcher, marked};
    ++tl_waits;
    dispatcher.BeginNestedWait(marked);
    bool left_some = false;
    auto leave = [&](const void* item) {
        const bool leave = item && dispatcher.LeaveToItsLane(*static_cast<const HostTask*>(item), run);
        left_some |= leave;
        return leave;
    };
    while (!ready()) {
        const auto now = steady_clock::now();
        if (now >= until) return false;
        const nanoseconds left = until == steady_clock::time_point::max() ? nanoseconds(seconds(1)) : until - now;
        if (!pool) {
            run.wake.SleepUnless(ready, std::min<nanoseconds>(left, seconds(1)));
            continue;
        }
        left_some = false;
        const bool ran = pool->RunOneQueued(leave);
        dispatcher.ApplyParked();  // `leave` may have held its lock
        if (ran) continue;
        if (marked.count != 0 && dispatcher.SweepStuckChipTasksOf(run)) continue;
        run.wake.SleepUnless([&] { return ready() || (!left_some && pool->HasQueued()); },
                             std::min<nanoseconds>(left, milliseconds(1)));
    }
    return true;
}

void SleepOn(RunState& run, Dispatcher& dispatcher) {
    SleepOrHelp(run, [&] { return run.done_flag.load(std::memory_order_seq_cst); }, dispatcher);
}

}  // namespace

Dispatcher::Submitting::Submitting(const Dispatcher& d, const RunState& r)
    : dispatcher(d), run(r), previous(tl_submitting), depth(++tl_depth) {
    tl_submitting = this;
}
Dispatcher::Submitting::~Submitting() {
    tl_submitting = previous;
    --tl_depth;
}

bool Dispatcher::CallerIsPartOf() const noexcept {
    if (tl_freeing == this) return true;
    for (const Running* r = tl_running; r; r = r->previous)
        if (r->dispatcher == this) return true;
    for (const Submitting* s = tl_submitting; s; s = s->previous)
        if (&s->dispatcher == this) return true;
    return false;
}

bool Dispatcher::FreeingHere() const noexcept { return tl_freeing == this; }

bool Dispatcher::CallerRunsATaskOf(const RunState& run) noexcept {
    for (const Running* r = tl_running; r; r = r->previous)
        if (r->task->run == &run) return true;
    return false;
}

const HostTask* Dispatcher::CallerTaskOutside(const RunState& run) noexcept {
    if (!tl_running) return nullptr;
    for (const Submitting* s = tl_submitting; s; s = s->previous)
        if (&s->run == &run && s->depth > tl_running->depth) return nullptr;
    return tl_running->task;
}

void Dispatcher::SleepUntilDone(RunState& run) {
    CheckNotPartOf(run);
    const AwaitingRun awaiting(*this, run);
    SleepOn(run, *this);
}

void Dispatcher::CheckNotPartOf(const RunState& run) {
    if (CallerRunsATaskOf(run)) {
        // The caller's own task, or one this thread runs while a task of
        // `run` waits (a pool thread runs queued jobs as it waits).
        const HostTask* caller = tl_running->task;
        if (caller->run == &run)
            throw Error(ErrorKind::InvalidArgument, "run '" + run.name +
                                                        "': a task of the run waits for the run itself (it cannot end "
                                                        "before this task does)");
        const Running* outer = tl_running->previous;
        while (outer->task->run != &run) outer = outer->previous;
        throw Error(ErrorKind::InvalidArgument,
                    "run '" + run.name + "': task '" + caller->name + "' of run '" + caller->run->name +
                        "' would wait for it on the thread of its task '" + outer->task->name +
                        "', which waits for run '" + caller->run->name + "' (neither run could end)");
    }
    if (tl_submitting && &run == &tl_submitting->run)
        throw Error(ErrorKind::InvalidArgument, "run '" + run.name +
                                                    "': its host orchestration function waits for the run itself "
                                                    "(it cannot end before the function returns)");
    // A task of another run that `run` depends on, through the tensors its
    // tasks touch: `run` cannot end before that task does either.
    if (!tl_running) return;
    Lock lock(*this);
    ForEachWaitingOnCaller(this, [&](const HostTask* c, const HostTask* named) {
        if (c->run == &run)
            throw Error(ErrorKind::InvalidArgument,
                        "run '" + run.name + "': task '" + c->name + "' of it depends on task '" + named->name +
                            "' of run '" + named->run->name + "', which waits for it (neither could end)");
    });
}

Dispatcher::AwaitingRun::AwaitingRun(Dispatcher& dispatcher, const RunState& run, bool for_room)
    : dispatcher_(dispatcher), awaited_(&run), holds_up_(HeldUpByCaller(&dispatcher)), for_room_(for_room) {
    for (const Running* r = tl_running; r; r = r->previous)
        if (r->dispatcher == &dispatcher) {
            blocked_.push_back(r->task->run);
            tasks_.push_back(r->task);
        }
    for (const Submitting* s = tl_submitting; s; s = s->previous)
        if (&s->dispatcher == &dispatcher) blocked_.push_back(&s->run);
    if (blocked_.empty()) return;  // nothing waits for this thread: no cycle through it
    if (tl_running && tl_running->dispatcher == &dispatcher)
        waiter_ = "task '" + tl_running->task->name + "' of run '" + tl_running->task->run->name + "'";
    else
        waiter_ = "the host orchestration function of run '" + blocked_.front()->name + "'";
    Lock lock(dispatcher);
    // Task by task, through every wait filed, room waits included (after
    // the run-level check for a wait for a run: its message says more).
    auto check_tasks = [&] {
        const AwaitingRun* through = nullptr;
        if (holds_up_.empty() || !NeverEnds(*this, dispatcher.StuckWhile(*this, &through))) return;
        std::string what = for_room ? "its host orchestration function waits for room among its " +
                                          std::to_string(run.window) +
                                          " tasks in flight (max_tasks_in_flight), but none of them can finish"
                                    : waiter_ + " would wait for it, but a task of it cannot finish";
        what += " before " + waiter_ + " does";
        if (through)
            what += ", since " + through->waiter_ + " waits for " + (through->for_room_ ? "room in run '" : "run '") +
                    through->awaited_->name + "'";
        throw Error(ErrorKind::InvalidArgument, "run '" + run.name + "': " + what + " (neither could end)");
    };
    if (for_room) {  // its run-level edges would say more than it waits for
        check_tasks();
        dispatcher.run_waits_.push_back(this);
        filed_ = true;
        return;
    }
    // Per wait, this one first, then those filed: the runs that cannot end
    // before it does (its thread's, and those of its tasks' consumers).
    std::vector<std::unordered_set<const RunState*>> blocked_by;
    blocked_by.reserve(1 + dispatcher.run_waits_.size());
    blocked_by.push_back(RunsItBlocks());
    for (const AwaitingRun* w : dispatcher.run_waits_)  // a room wait blocks nothing run-wide: empty
        blocked_by.push_back(w->for_room_ ? std::unordered_set<const RunState*>{} : w->RunsItBlocks());
    const auto& mine = blocked_by.front();
    // The runs that cannot end before `run` does, through the waits filed:
    // one of this thread's closes the cycle.
    std::vector<const RunState*> todo{&run};
    std::unordered_set<const RunState*> seen{&run};
    while (!todo.empty()) {
        const RunState* x = todo.back();
        todo.pop_back();
        for (size_t i = 0; i < dispatcher.run_waits_.size(); ++i) {
            const AwaitingRun* w = dispatcher.run_waits_[i];
            if (!blocked_by[1 + i].contains(x)) continue;
            if (mine.contains(w->awaited_))
                throw Error(ErrorKind::InvalidArgument,
                            "run '" + run.name + "': " + waiter_ + " would wait for it while " + w->waiter_ +
                                " waits for run '" + w->awaited_->name + "' (neither run could end)");
            if (seen.insert(w->awaited_).second) todo.push_back(w->awaited_);
        }
    }
    check_tasks();
    dispatcher.run_waits_.push_back(this);
    filed_ = true;
}

std::unordered_map<const RunState*, size_t> Dispatcher::StuckWhile(const AwaitingRun& wait,
                                                                   const AwaitingRun** through) const {
    std::unordered_map<const RunState*, size_t> per_run;
    std::unordered_set<const HostTask*> stuck;
    std::vector<const HostTask*> todo;
    auto hold_up = [&](const std::vector<const HostTask*>& tasks) {
        for (const HostTask* t : tasks)
            if (!t->Finished() && stuck.insert(t).second) {
                ++per_run[t->run];
                todo.push_back(t);
            }
        while (!todo.empty()) {
            const HostTask* t = todo.back();
            todo.pop_back();
            for (const HostTask* c : t->consumers)
                if (!c->Finished() && stuck.insert(c).second) {
                    ++per_run[c->run];
                    todo.push_back(c);
                }
        }
    };
    hold_up(wait.holds_up_);
    std::vector<const AwaitingRun*> others = run_waits_;
    for (bool added = true; added;) {
        added = false;
        for (const AwaitingRun*& w : others)
            if (w && w != &wait && NeverEnds(*w, per_run)) {
                if (through && !*through) *through = w;
                hold_up(w->holds_up_);
                w = nullptr;
                added = true;
            }
    }
    return per_run;
}

bool Dispatcher::NeverEnds(const AwaitingRun& wait, const std::unordered_map<const RunState*, size_t>& stuck) {
    const auto it = stuck.find(wait.awaited_);
    if (it == stuck.end()) return false;
    return !wait.for_room_ || (wait.awaited_->InWindow() >= wait.awaited_->window && it->second >= wait.awaited_->InWindow());
}

std::unordered_set<const RunState*> Dispatcher::AwaitingRun::RunsItBlocks() const {
    std::unordered_set<const RunState*> runs(blocked_.begin(), blocked_.end());
    std::vector<const HostTask*> todo(tasks_.begin(), tasks_.end());
    std::unordered_set<const HostTask*> seen(tasks_.begin(), tasks_.end());
    while (!todo.empty()) {
        const HostTask* t = todo.back();
        todo.pop_back();
        for (const HostTask* c : t->consumers) {
            if (c->Finished() || !seen.insert(c).second) continue;
            runs.insert(c->run);
            todo.push_back(c);
        }
    }
    return runs;
}

Dispatcher::AwaitingRun::~AwaitingRun() {
    if (!filed_) return;
    auto forget = [&] { std::erase(dispatcher_.run_waits_, this); };
    try {
        Lock lock(dispatcher_);
        forget();
    } catch (...) {  // the inbox could not be applied: the entry must go all the same
        dispatcher_.mu_.lock();
        forget();
        dispatcher_.Unlock();
    }
}

Dispatcher::Dispatcher(std::vector<std::unique_ptr<ChipExecutor>> executors, const DistributedConfig& config)
    : executors_(std::move(executors)), load_(executors_.size()), stats_(executors_.size()), block_dim_(config.block_dim),
      cheap_chip_task_ns_(config.cheap_chip_task_ns) {
    for (size_t d = 0; d < executors_.size(); ++d) {
        room_.push_back(std::max(1u, executors_[d]->Concurrency()));
        remote_.push_back(executors_[d]->Remote());
        lanes_.push_back(std::make_unique<JobThreads>(room_[d], "spyre-chip" + std::to_string(d)));
        device_names_.push_back(executors_[d]->Describe());
        local_.push_back(dynamic_cast<LocalChipExecutor*>(executors_[d].get()));
        auto* remote = dynamic_cast<RemoteChipExecutor*>(executors_[d].get());
        remote_executors_.push_back(remote);
        lost_together_.push_back(remote ? int64_t(remote->rank()) : -1 - int64_t(d));
    }
    lost_.assign(executors_.size(), false);
    waiting_ = std::make_unique<std::atomic<uint32_t>[]>(executors_.size());
    costs_ = std::make_unique<DeviceCosts>(remote_);
    placement_.room = room_;
    to_post_.resize(lanes_.size() + 1);
    placement_.remote = remote_;
    any_remote_ = std::find(remote_.begin(), remote_.end(), true) != remote_.end();
    if (config.num_sub_workers > 0) sub_workers_ = std::make_unique<JobThreads>(config.num_sub_workers, "spyre-sub");
}

Dispatcher::~Dispatcher() { Shutdown(); }

void Dispatcher::Shutdown() {
    for (;;) {
        std::shared_ptr<RunState> run;
        {
            Lock lock(*this);
            if (in_flight_.empty()) break;
            run = in_flight_.front();
        }
        SleepOn(*run, *this);
    }
    lanes_.clear();  // joins
    sub_workers_.reset();
    executors_.clear();
}

std::shared_ptr<RunState> Dispatcher::Begin(std::unique_ptr<RunState> owned) {
    std::shared_ptr<RunState> run(std::move(owned));
    // Unique in the process: executors may serve several Workers.
    static std::atomic<uint64_t> next_serial{1};
    run->serial = next_serial.fetch_add(1, std::memory_order_relaxed);
    Lock lock(*this);
    in_flight_.push_back(run);
    return run;
}

void Dispatcher::WaitForRoom(RunState& run) {
    auto room = [&] { return run.InWindow() < run.window; };
    for (;;) {
        {
            Lock lock(*this);
            run.window_waiter = run.InWindow() >= run.window;
            if (!run.window_waiter) return;
        }
        // The lock is released: the completions that make room need it.
        // A thread inside a task files its wait: tasks may wait for it.
        std::optional<AwaitingRun> awaiting;
        try {
            if (tl_running) awaiting.emplace(*this, run, true);
        } catch (...) {
            Lock lock(*this);
            run.window_waiter = false;
            throw;
        }
        SleepOrHelp(run, room, *this);
    }
}

void Dispatcher::Submit(RunState& run, std::unique_ptr<HostTask> owned) {
    const uint64_t entered = run.entered.load(std::memory_order_relaxed);
    if (entered - run.left_seen.load(std::memory_order_relaxed) >= run.window) [[unlikely]] {
        const uint64_t left = run.left.load(std::memory_order_acquire);
        run.left_seen.store(left, std::memory_order_relaxed);
        if (entered - left >= run.window) WaitForRoom(run);
    }
    Claim(*owned, run);
    run.entered.fetch_add(1, std::memory_order_relaxed);
    HostTask* t = owned.release();  // freed by Finish (done) or EndRun (failed, skipped)
    t->run = &run;
    // After whatever the program wrote before submitting it: a device copy
    // read earlier is checked again before this task reads it.
    if (t->level == Level::Chip) t->submitted = HostBytesTick();
    // Filed by whoever holds the lock: a submitter never waits for a device
    // thread that is applying a completion, and tasks submitted back to
    // back while it does reach the dispatcher in one hand-over.
    submissions_.Push(*t);
    if (!mu_.try_lock()) return;
    const RunState* const outer = std::exchange(tl_run_here, &run);  // a chip task run here may submit
    ApplyInbox();
    Unlock();
    tl_run_here = outer;
    if (!tl_cheap.empty()) RunCheapHere();
}

namespace {
// The task this thread runs (of any Worker, nested ones first) that holds
// `a`'s bytes as `a` uses them, and which of its arguments does: a task may
// hand what it holds to another Worker's run. Null: none.
std::pair<const Running*, size_t> HolderOf(const TensorArg& a) {
    const uint64_t begin = a.tensor.byte_offset(), end = begin + a.tensor.bytes();
    for (const Running* r = tl_running; r; r = r->previous) {
        const HostTask& held = *r->task;
        for (size_t i = 0; i < held.args.size() && i < held.claims.size(); ++i) {
            const TensorArg& h = held.args[i];
            if (h.tensor.SameStorage(a.tensor) && h.tensor.byte_offset() <= begin &&
                end <= h.tensor.byte_offset() + h.tensor.bytes() && (a.access == Access::In || h.access != Access::In))
                return {r, i};
        }
    }
    return {nullptr, 0};
}
}  // namespace

void Dispatcher::Claim(HostTask& t, const RunState& run) {
    t.claims.clear();
    for (size_t i = 0; i < t.args.size(); ++i) {
        const TensorArg& a = t.args[i];
        const auto [holder, held_arg] = tl_running ? HolderOf(a) : std::pair<const Running*, size_t>{nullptr, 0};
        const void* owner = holder ? holder->task->claims[held_arg].owner : this;
        const uint64_t begin = a.tensor.byte_offset();
        if (ClaimsOf(a.tensor).TryClaim(owner, begin, begin + a.tensor.bytes(), a.access != Access::In)) {
            std::shared_ptr<Lending> lending;
            if (owner != this) {  // another Worker's task holds the claim: it waits for this one
                HostTask& lender = const_cast<HostTask&>(*holder->task);
                lending = lender.claims[held_arg].borrowed;  // the task that claimed it, when the holder borrowed it too
                if (!lending) {
                    // The holder claimed it; made by its own thread (this one): nobody else writes it.
                    if (!lender.lent) lender.lent = std::make_shared<Lending>(&lender, holder->dispatcher);
                    lending = lender.lent;
                }
                lending->Lend();
            }
            t.claims.push_back({owner, std::move(lending)});
            continue;
        }
        ReleaseClaims(t);
        throw Error(ErrorKind::InvalidArgument,
                    std::string(t.level == Level::Chip ? "chip" : "SubWorker") + " task '" + t.name +
                        "' of host program '" + run.name + "': argument " + std::to_string(i) + " (" +
                        ToString(a.access) + ", " + a.tensor.Describe() + ") " +
                        (a.access == Access::In ? "reads bytes that a task of another Worker in flight writes"
                                                : "writes bytes that a task of another Worker in flight reads or writes") +
                        "; tasks are ordered only within one Worker: wait for that Worker's run first, or submit "
                        "both through one Worker");
    }
}

void Dispatcher::ReleaseClaims(HostTask& t) noexcept {
    for (size_t i = 0; i < t.claims.size(); ++i) ClaimsOf(t.args[i].tensor).Release(t.claims[i].owner);
    for (const HostTask::Claim& c : t.claims)
        if (c.borrowed) c.borrowed->GiveBack();  // after the claims: its lender may end now
    t.claims.clear();
}

void Dispatcher::RunCheapHere() {
    // Taken out first: a task run here may submit, and fill it again.
    std::vector<HostTask*> cheap = std::move(tl_cheap_spare);
    cheap.swap(tl_cheap);
    for (HostTask* task : cheap) {
        JobThreads::Job job = ChipJob(task);
        JobThreads& lane = *lanes_[task->device];
        if (!lane.RunHere(job)) lane.Post(std::move(job));
    }
    cheap.clear();
    tl_cheap_spare = std::move(cheap);
}

void Dispatcher::File(HostTask* t) {
    RunState& run = *t->run;
    ++run.unfinished;
    ++run.submitted;
    producers_.clear();
    // Reads first: the writers they meet are the producers t reads from,
    // which pass a failure on (dependency/fan_out.hpp); the writes' lookups
    // then add those it only follows. An InOut is looked up both ways.
    auto look = [&](bool write) {
        for (const TensorArg& a : t->args)
            if (write ? a.access != Access::In : a.access != Access::Out)
                tracker_.Lookup(a.tensor.storage_id(), a.tensor.byte_offset(),
                                a.tensor.byte_offset() + a.tensor.bytes(), write, t, producers_);
    };
    look(false);
    const size_t reads = producers_.size();
    t->reads_from.assign(producers_.begin(), producers_.begin() + std::ptrdiff_t(reads));
    look(true);
    for (const TensorArg& a : t->args)
        tracker_.File(a.tensor.storage_id(), a.tensor.byte_offset(), a.tensor.byte_offset() + a.tensor.bytes(),
                      a.access != Access::In, t);
    for (size_t i = 0; i < producers_.size(); ++i) {  // RegionMap lists each once
        HostTask* p = producers_[i];
        if (dependency::Meet(t->gate, p->gate, p->Finished(), [&] { return i < reads; })) p->consumers.push_back(t);
    }
    if (t->gate.fanin_remaining == 0) MakeReady(t);
}

void Dispatcher::Free(HostTask* task) {
    // What it holds of the caller's goes now, before its run's end is
    // announced, not when the task is reused: a spare must not keep an
    // ended run's tensors (a Python caller's arrays) or a SubWorker's
    // captures alive. Each is a reference count drop; the memory itself is
    // freed here only when the caller let go of it while the task ran. The
    // lock is held: a destructor among them that comes back to this
    // dispatcher is refused or deferred (FreeingHere).
    const Dispatcher* const outer = tl_freeing;
    tl_freeing = this;
    task->args.clear();
    task->fn = nullptr;
    task->ResetRan();  // also the call's arguments
    tl_freeing = outer;
    if (spare_.size() == kSpareTasks) delete task;
    else spare_.emplace_back(task);  // the submitter's half reset by NewTask, outside the lock
}

std::unique_ptr<HostTask> Dispatcher::NewTask(std::vector<std::unique_ptr<HostTask>>& spares) {
    if (spares.empty()) {
        // A handful at a time, so the lock is taken once per handful.
        Lock lock(*this);
        const size_t n = std::min<size_t>(spare_.size(), 32);
        for (size_t i = 0; i < n; ++i) {
            spares.push_back(std::move(spare_.back()));
            spare_.pop_back();
        }
        if (spares.empty()) return std::make_unique<HostTask>();
    }
    std::unique_ptr<HostTask> t = std::move(spares.back());
    spares.pop_back();
    t->ResetSubmitted();
    return t;
}

void Dispatcher::Seal(RunState& run, std::optional<TaskFailureInfo> failure) {
    Lock lock(*this);
    run.sealed = true;
    if (failure) {
        failure->run = run.name;  // the orchestration function's own record names its run too
        run.failures.push_back(std::move(*failure));
    }
    if (run.unfinished == 0) EndRun(run);
}

void Dispatcher::MakeReady(HostTask* task) {
    if (task->gate.root) [[unlikely]] {  // a producer failed
        Finish(task, HostTask::State::Skipped, {});
        return;
    }
    task->state = HostTask::State::Queued;
    if (task->level == Level::Host) {
        to_post_.back().push_back({[this, task] { RunSub(task); }, task->run});
        return;
    }
    const size_t d = PlaceLocked(*task, std::nullopt);
    task->device = d;
    ++load_[d];
    ChipCall& call = task->call;  // as Free left it: its arguments' capacity kept (no allocation per task)
    call.task_name = task->name;
    call.function = task->function;
    call.block_dim = block_dim_;
    call.entry = task->chip;
    call.run = task->run->serial;
    call.submitted = task->submitted;
    for (const TensorArg& a : task->args) call.args.push_back({a, residency_.Writes(a.tensor)});
    if (local_[d] && task->chip && cheap_chip_task_ns_ != 0) {
        auto [it, added] = chip_costs_.try_emplace(task->chip);
        if (added) it->second.SetCheapBelow(cheap_chip_task_ns_);
        task->cost = &it->second;
        // A function that submits nothing runs in less time than the two
        // hand-overs between this thread and a device thread on another
        // core (docs/host.md, "Measured").
        if (tl_run_here == task->run && task->cost->Cheap()) {
            tl_cheap.push_back(task);
            return;
        }
    }
    to_post_[d].push_back(ChipJob(task));
}

JobThreads::Job Dispatcher::ChipJob(HostTask* task) {
    return {[this, task] { RunChip(task); }, task->run, task};
}

void Dispatcher::Finish(HostTask* task, HostTask::State state, TaskFailureInfo failure) {
    task->state = state;
    ReleaseClaims(*task);  // it touches its bytes no more
    RunState& run = *task->run;
    const bool chip = task->level == Level::Chip && task->device != SIZE_MAX;
    if (chip) --load_[task->device];
    // A task that ran, even one that failed, may have written what it
    // writes (ChipArg::writes).
    if (state != HostTask::State::Skipped)
        for (const TensorArg& a : task->args)
            if (a.access != Access::In) residency_.CountWrite(a.tensor);
    if (state == HostTask::State::Done) {
        for (const TensorArg& a : task->args) {
            if (a.access != Access::In) residency_.Wrote(a.tensor, chip ? task->device : Residency::kHost);
            else if (chip) residency_.Copied(a.tensor, task->device);
        }
    } else if (state == HostTask::State::Failed) {
        failure.run = run.name;  // a later run skipped for it names this one
        task->gate.root = std::make_shared<const TaskFailureInfo>(failure);
        run.roots.push_back(task->gate.root.get());
        live_roots_.insert(task->gate.root.get());
        // What the device copies of its outputs hold is unknown now.
        for (const TensorArg& a : task->args)
            if (a.access != Access::In) residency_.Wrote(a.tensor, Residency::kHost);
        if (chip && failure.kind == ErrorKind::DeviceLost) MarkLost(task->device);
        run.failures.push_back(std::move(failure));
    } else {
        // Skipped for a task of an earlier run in flight: this run fails with that cause too.
        const uint64_t root_id = task->gate.root->task_id;
        if (std::none_of(run.failures.begin(), run.failures.end(), [&](const auto& f) { return f.task_id == root_id; }))
            run.failures.push_back(*task->gate.root);
    }
    if (task->trace.track != 0) [[unlikely]]
        TraceHandOff(*task);
    // Its root (null: it finished well) poisons its consumers.
    dependency::Release(
        task->gate.root, task->consumers, [](HostTask* c) -> HostTask& { return *c; },
        [this](HostTask& c) { MakeReady(&c); },
        [task](const HostTask& c) {
            return std::find(c.reads_from.begin(), c.reads_from.end(), task) != c.reads_from.end();
        });
    run.finished.push_back({std::move(task->name), task->id, task->start_ns, task->end_ns,
                            chip ? uint32_t(task->device) : UINT32_MAX, task->level,
                            state == HostTask::State::Done     ? TaskState::Done
                            : state == HostTask::State::Failed ? TaskState::Failed
                                                               : TaskState::Skipped});
    if (state == HostTask::State::Done) {
        // It imposes nothing on later tasks any more: forgotten and freed
        // now, so a long run holds only its window.
        tracker_.Forget(*task);
        Free(task);
    } else {
        run.kept.push_back(task);  // later readers of what it wrote are skipped
    }
    if (++since_sweep_ >= 4096) {
        since_sweep_ = 0;
        residency_.Sweep();
    }
    --run.unfinished;
    run.left.fetch_add(1, std::memory_order_seq_cst);
    if (run.sealed && run.unfinished == 0) EndRun(run);
    else if (run.watched || run.window_waiter) run.wake.Notify();  // a progress report, or room, is due
}

void Dispatcher::EndRun(RunState& run) {
    // Its failures end here: so do the tasks other runs skipped for them
    // that outlived their own runs.
    for (const TaskFailureInfo* root : run.roots) {
        live_roots_.erase(root);
        auto [first, last] = retired_.equal_range(root);
        for (auto it = first; it != last; ++it) {
            tracker_.Forget(*it->second);
            Free(it->second);
        }
        retired_.erase(first, last);
    }
    run.roots.clear();
    for (HostTask* t : run.kept) {
        if (t->state == HostTask::State::Skipped && live_roots_.count(t->gate.root.get())) [[unlikely]] {
            retired_.emplace(t->gate.root.get(), t);  // skipped for another run's failure, in flight
            continue;
        }
        tracker_.Forget(*t);
        Free(t);
    }
    run.kept.clear();
    residency_.SweepIfGrown();
    std::sort(run.failures.begin(), run.failures.end(),
              [](const TaskFailureInfo& a, const TaskFailureInfo& b) { return a.task_id < b.task_id; });
    // Tasks mostly finish in the order they were submitted: a look first.
    auto by_id = [](const FinishedTask& a, const FinishedTask& b) { return a.id < b.id; };
    if (!std::is_sorted(run.finished.begin(), run.finished.end(), by_id))
        std::sort(run.finished.begin(), run.finished.end(), by_id);
    run.done = true;
    run.done_flag.store(true, std::memory_order_seq_cst);
    run.wake.Notify();
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const auto& r) { return r.get() == &run; });
    finished_.push_back(std::move(*it));  // `run` lives until the lock is released
    in_flight_.erase(it);
}

namespace {

TaskFailureInfo FailureOf(const HostTask& task, const std::string& device) {
    TaskFailureInfo f;
    f.task = task.name;
    f.task_id = task.id;
    f.level = task.level;
    f.device = device;
    f.function = task.function;
    SetCause(f);
    return f;
}

}  // namespace

void SetCause(TaskFailureInfo& f) {
    try {
        throw;
    } catch (const Error& e) {
        f.kind = e.kind();
        f.cause = e.message();
        f.device_code = e.context().device_code;
        f.host_kernel_code = e.context().host_kernel_code;
        if (e.context().kernel_id) f.kernel_id = int32_t(*e.context().kernel_id);
    } catch (const std::exception& e) {
        f.kind = ErrorKind::TaskFailed;
        f.cause = e.what();
    } catch (...) {
        f.kind = ErrorKind::TaskFailed;
        f.cause = spyre::detail::DescribeThrownValue();
    }
    f.root_task_id = int64_t(f.task_id);  // a failed task is its own root
    f.root_kernel_id = f.kernel_id;
}

bool Dispatcher::LeaveToItsLane(const HostTask& task, const RunState& awaited) {
    // Called under its pool's lock: a queued task has not started, and
    // nothing frees it meanwhile.
    if (task.level != Level::Chip || task.run == &awaited) return false;
    const size_t d = task.device;
    // A slot is free: run it here.
    if (!local_[d] || local_[d]->HasFreeSlot()) return false;
    // Another device can run it: take it, and RunChip moves it there.
    // (This thread's calls holding every slot block it too: they wait here.)
    if (Blocked(d) && !AllDevicesBlocked() && !task.pinned) return false;
    // The bare mutex, not a Lock: under its pool's lock this may not post
    // jobs (a Lock's release does). What threads parked meanwhile, leaving
    // it to this holder, SleepOrHelp applies next (ApplyParked).
    std::lock_guard held(mu_);
    for (const HostTask* c : task.consumers)
        if (!c->Finished()) return false;  // the awaited run may wait for it: run it, and fail
    return true;
}

void Dispatcher::ApplyParked() {
    if (!inbox_.Empty() || !submissions_.Empty()) ApplyIfParked();
}

void Dispatcher::BeginNestedWait(NestedWait& marked) {
    for (const Running* r = tl_running; r && marked.count < std::size(marked.devices); r = r->previous)
        if (r->dispatcher == this && r->task->level == Level::Chip && r->task->device < executors_.size())
            marked.devices[marked.count++] = r->task->device;
    for (size_t i = 0; i < marked.count; ++i) waiting_[marked.devices[i]].fetch_add(1, std::memory_order_acq_rel);
    if (marked.count != 0) waiting_total_.fetch_add(uint32_t(marked.count), std::memory_order_acq_rel);
}

void Dispatcher::EndNestedWait(const NestedWait& marked) {
    for (size_t i = 0; i < marked.count; ++i) waiting_[marked.devices[i]].fetch_sub(1, std::memory_order_acq_rel);
    if (marked.count != 0) waiting_total_.fetch_sub(uint32_t(marked.count), std::memory_order_acq_rel);
}

bool Dispatcher::AllDevicesBlocked() const noexcept {
    if (waiting_total_.load(std::memory_order_acquire) == 0) return false;
    for (size_t d = 0; d < executors_.size(); ++d)
        if (!Blocked(d)) return false;
    return true;
}

bool Dispatcher::SweepStuckChipTasksOf(RunState& run) {
    if (waiting_total_.load(std::memory_order_acquire) == 0) return false;
    bool swept = false;
    JobThreads::Job job;
    for (size_t d = 0; d < lanes_.size(); ++d) {
        if (!Blocked(d)) continue;
        const bool all_blocked = AllDevicesBlocked();
        // Pinned, or every device blocked: it may wait for good. Else it moves.
        while (lanes_[d]->TakeOneOf(&run, [](const void* item) { return item != nullptr; }, job)) {
            HostTask* task = const_cast<HostTask*>(static_cast<const HostTask*>(job.item));
            swept = true;
            if (!task->pinned && !all_blocked && MoveToAnotherDevice(task)) continue;
            tl_fail_stuck = true;
            job.run();  // RunChip, which fails it
            tl_fail_stuck = false;
        }
    }
    return swept;
}

void Dispatcher::MarkLost(size_t device) {
    for (size_t d = 0; d < lost_.size(); ++d)
        if (lost_together_[d] == lost_together_[device]) lost_[d] = true;
    any_lost_ = true;
}

size_t Dispatcher::PlaceLocked(const HostTask& task, std::optional<size_t> excluded) {
    PlacementInput& in = placement_;
    in.pinned = task.pinned;
    in.load = load_;
    in.current_bytes.assign(executors_.size(), 0);
    in.input_bytes = 0;
    for (const TensorArg& a : task.args)
        if (a.access != Access::Out) {
            in.input_bytes += a.tensor.bytes();
            for (size_t d = 0; d < executors_.size(); ++d)
                if (!remote_[d] && residency_.Current(a.tensor, d)) in.current_bytes[d] += a.tensor.bytes();
        }
    in.remote_fits = !any_remote_ || remote::CallFits(task.args);
    in.outliving_ns.clear();
    if (any_remote_) [[unlikely]]
        for (const RemoteChipExecutor* remote : remote_executors_) in.outliving_ns.push_back(remote ? remote->OutlivingWorkNs() : 0);
    costs_->Fill(in);
    in.rotate = rotate_++;
    if (any_lost_) [[unlikely]]
        in.lost = lost_;
    in.blocked.clear();
    if (excluded || waiting_total_.load(std::memory_order_acquire) != 0) [[unlikely]]
        for (size_t d = 0; d < executors_.size(); ++d) in.blocked.push_back(d == excluded || Blocked(d));
    return Place(in);
}

bool Dispatcher::MoveToAnotherDevice(HostTask* task) {
    if (task->pinned) return false;
    Lock lock(*this);
    const size_t from = task->device;
    const size_t to = PlaceLocked(*task, from);
    if (to == from || Blocked(to)) return false;
    --load_[from];
    ++load_[to];
    task->device = to;
    to_post_[to].push_back(ChipJob(task));
    return true;
}

void Dispatcher::MarkDevicesClosing() noexcept {
    for (LocalChipExecutor* local : local_)
        if (local) local->MarkClosing();
}

void Dispatcher::RunChip(HostTask* task) {
    const size_t d = task->device;
    // Taken by a thread that waits for a nested run while every slot of
    // the device is held by calls that wait so (this thread's or others'):
    // to a device that can run it, or it fails, since a slot may never
    // free. When this thread's calls hold them all, the executor refuses it
    // itself, saying so.
    bool stuck = tl_fail_stuck;
    if (!stuck && tl_waits > 0 && local_[d] && !local_[d]->HasFreeSlot()) {
        const bool mine = local_[d]->AllSlotsHeldByThisThread();
        if (mine || Blocked(d)) {
            if (MoveToAnotherDevice(task)) return;
            stuck = !mine;
        }
    }
    ChipCallStats moved;
    // A clock read costs about 70 ns here: a local call reuses start_ns as
    // its device span's start, and a call that downloaded nothing ended
    // when its device work did (run_end_ns), so neither is read again.
    const uint64_t start_ns = DeviceClockNs();
    uint64_t end_ns = 0;
    {
        Running running(this, task);
        try {
            if (stuck)
                throw Error(ErrorKind::InvalidArgument,
                            "chip task '" + task->name + "' of run '" + task->run->name + "' on " +
                                device_names_[d] +
                                ": every chip slot there, and on every device it could move to, is held by chip "
                                "calls that wait for nested runs, so it could wait for them for good (raise "
                                "DistributedConfig::chip_tasks_per_device, or run nested programs from the host "
                                "orchestration function or a SubWorker)");
            if (local_[d]) local_[d]->Run(task->call, start_ns, moved);
            else if (remote_executors_[d]) remote_executors_[d]->Run(task->call, moved);
            else moved = executors_[d]->Run(task->call);
            end_ns = moved.bytes_downloaded == 0 && moved.run_end_ns >= start_ns ? moved.run_end_ns : DeviceClockNs();
            costs_->Record(d, end_ns - start_ns, moved);
            if (task->cost) task->cost->Record(end_ns - start_ns);
        } catch (...) {
            task->inbox_failure = std::make_unique<TaskFailureInfo>(FailureOf(*task, executors_[d]->Describe()));
            end_ns = DeviceClockNs();
        }
    }
    if (task->lent) [[unlikely]]
        task->lent->WaitForAll();  // what it handed to other Workers' runs came back
    // The device's own span when the executor saw it (a local device),
    // else the call's.
    const bool device_span = moved.run_start_ns != 0 && moved.run_end_ns >= moved.run_start_ns;
    task->start_ns = device_span ? moved.run_start_ns : start_ns;
    task->end_ns = device_span ? moved.run_end_ns : end_ns;
    if (trace::Enabled()) [[unlikely]]
        TraceTask(*task, device_names_[d], start_ns, end_ns, moved);
    task->inbox_moved = moved;
    Park(*task);
}

namespace {
// The SubWorker task the calling thread runs (RunningSubWorkerArgs).
thread_local const std::vector<TensorArg>* tl_sub_args = nullptr;
}  // namespace

void Dispatcher::RunSub(HostTask* task) {
    task->start_ns = DeviceClockNs();
    {
        Running running(this, task);
        // A SubWorker may run a nested run's SubWorker on this thread.
        struct Current {
            const std::vector<TensorArg>* outer = tl_sub_args;
            explicit Current(const std::vector<TensorArg>* args) { tl_sub_args = args; }
            ~Current() { tl_sub_args = outer; }
        } current(&task->args);
        try {
            std::vector<HostTensor> args;
            for (const TensorArg& a : task->args) args.push_back(a.tensor);
            task->fn(args);
        } catch (...) {
            task->inbox_failure = std::make_unique<TaskFailureInfo>(FailureOf(*task, ""));
        }
    }
    if (task->lent) [[unlikely]]
        task->lent->WaitForAll();  // what it handed to other Workers' runs came back
    task->end_ns = DeviceClockNs();
    if (trace::Enabled()) [[unlikely]]
        TraceTask(*task, "", task->start_ns, task->end_ns, {});
    Park(*task);
}

std::vector<HostTensor> Dispatcher::Wait(RunState& run, const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("host_run_wait");
    CheckNotPartOf(run);
    const AwaitingRun awaiting(*this, run);
    if (progress) return WaitReporting(run, progress);
    // A short run ends within a few microseconds: look for that, running
    // the run's queued tasks meanwhile, before paying a sleep and a wake-up.
    if (JobThreads::Current() || !LookForEnd(run)) SleepOn(run, *this);  // checked above
    Lock lock(*this);
    if (!run.failures.empty()) {
        std::vector<TaskRecord> records = RecordsOf(run);
        std::vector<std::string> skipped = SkippedIn(records);  // before records moves
        throw HostRunError(run.name, run.failures, std::move(skipped), std::move(records));
    }
    return run.outputs;
}

std::vector<HostTensor> Dispatcher::WaitReporting(RunState& run, const ProgressCallback& progress) {
    // Reported outside the lock, once per change: done only rises and ends
    // at total (Finish announces every finished task of a watched run).
    // (Wait has checked that the caller is not part of the run.)
    const uint64_t total = [&] {
        Lock lock(*this);
        return run.submitted;  // final: the function returned before its handle existed
    }();
    uint64_t reported = ~0ull;
    // Tasks finished so far, and whether the run ended.
    auto look = [&] {
        Lock lock(*this);
        run.watched = true;
        return std::pair<uint64_t, bool>{total - run.unfinished, run.done};
    };
    for (;;) {
        const auto [done, ended] = look();
        if (done != reported) {
            reported = done;
            try {
                progress(ProgressInfo{"host-level", done, total, "tasks"});
            } catch (...) {
                // The callback's exception leaves only once the run has
                // ended: it left while the run's tasks still wrote the
                // caller's tensors (as a DMA progress callback's does).
                SleepOn(run, *this);
                throw;
            }
            continue;  // look again: tasks finished meanwhile
        }
        if (ended) break;
        SleepOrHelp(run, [&] { return look() != std::pair<uint64_t, bool>{reported, false}; }, *this);
    }
    Lock lock(*this);
    if (!run.failures.empty()) {
        std::vector<TaskRecord> records = RecordsOf(run);
        std::vector<std::string> skipped = SkippedIn(records);  // before records moves
        throw HostRunError(run.name, run.failures, std::move(skipped), std::move(records));
    }
    return run.outputs;
}

std::vector<TaskRecord> Dispatcher::Report(RunState& run) {
    if (!run.done_flag.load(std::memory_order_acquire)) SleepUntilDone(run);
    Lock lock(*this);
    return RecordsOf(run);
}

std::vector<TaskRecord> Dispatcher::RecordsOf(const RunState& run) const {
    std::vector<TaskRecord> out;
    out.reserve(run.finished.size());
    for (const FinishedTask& f : run.finished)
        out.push_back({f.name, f.id, f.level, f.device == UINT32_MAX ? std::string() : device_names_[f.device], f.state,
                       f.start_ns, f.end_ns});
    return out;
}

bool Dispatcher::WaitFor(RunState& run, std::chrono::nanoseconds timeout) {
    CheckNotPartOf(run);
    const AwaitingRun awaiting(*this, run);
    const auto until = DeadlineAfter(timeout);
    auto ended = [&] { return run.done_flag.load(std::memory_order_seq_cst); };
    // A thread of the Worker's pools (a SubWorker waiting on a nested run)
    // runs its pool's queued jobs meanwhile, as Wait does (SleepOrHelp):
    // the nested run may need that very thread. Any other caller runs none
    // of the run's tasks (one could take any time, and this wait is
    // bounded); a short run ends within its look, without a sleep and a
    // wake-up.
    if (!JobThreads::Current() && timeout >= JobThreads::kSpin && JobThreads::LookBeforeSleeping(ended)) return true;
    return SleepOrHelp(run, ended, *this, until);
}

bool Dispatcher::Done(RunState& run) {
    Lock lock(*this);
    return run.done;
}

Worker::Held Dispatcher::HeldNow() {
    Lock lock(*this);
    Worker::Held held;
    for (const auto& run : in_flight_) held.tasks += run->unfinished + run->kept.size();
    held.tasks += retired_.size();
    held.hazard_records = tracker_.entries();
    return held;
}

Worker::DeviceStats Dispatcher::Stats(size_t device) {
    Lock lock(*this);
    return stats_.at(device);
}

}  // namespace spyre::host

namespace spyre {
std::span<const TensorArg> RunningSubWorkerArgs() noexcept {
    return host::tl_sub_args ? std::span<const TensorArg>(*host::tl_sub_args) : std::span<const TensorArg>();
}
}  // namespace spyre
