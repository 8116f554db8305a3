// SPDX-License-Identifier: Apache-2.0
#include "scheduler.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "host_trace.hpp"
#include "placement.hpp"
#include "spyre/trace/trace.hpp"

namespace spyre::host {

class Scheduler::Lock {
public:
    explicit Lock(Scheduler& s) : s_(s) {
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
    Scheduler& s_;
};

void Scheduler::Unlock() {
    Graveyard dead;
    struct Posting {
        JobThreads* pool;
        std::vector<JobThreads::Job> jobs;
    };
    std::vector<Posting> posting;  // allocates only when there is something to post
    auto take = [&] {
        for (auto& run : finished_) dead.push_back(std::move(run));
        finished_.clear();
        for (size_t i = 0; i < to_post_.size(); ++i) {
            if (to_post_[i].empty()) continue;
            posting.push_back({i < lanes_.size() ? lanes_[i].get() : sub_workers_.get(), std::move(to_post_[i])});
            to_post_[i].clear();  // moved from: empty again, and usable
        }
    };
    auto post = [&] {
        for (Posting& p : posting) p.pool->PostAll(p.jobs);
        posting.clear();
    };
    take();
    mu_.unlock();
    post();
    ApplyParkedAfterUnlock(mu_, inbox_, [&] {
        ApplyInbox();
        take();
    });
    post();
}  // `dead` freed here, outside the lock

void Scheduler::ApplyInbox() {
    for (HostTask* t = inbox_.TakeAll(); t;) {
        HostTask* next = t->inbox_next;  // read first: finishing may end its run
        if (t->level == Level::Chip) {
            Worker::DeviceStats& st = stats_[t->device];
            ++st.chip_tasks;
            st.moved.bytes_uploaded += t->inbox_moved.bytes_uploaded;
            st.moved.bytes_reused += t->inbox_moved.bytes_reused;
            st.moved.bytes_downloaded += t->inbox_moved.bytes_downloaded;
        }
        if (t->inbox_failure) Finish(t, HostTask::State::Failed, std::move(*t->inbox_failure));
        else Finish(t, HostTask::State::Done, {});
        t = next;
    }
}

void Scheduler::Park(HostTask& task) {
    inbox_.Push(task);  // `task` may be finished, and its run gone, from here on
    if (!mu_.try_lock()) return;  // its holder applies it
    ApplyInbox();
    Unlock();
}

namespace {

void SleepUntilDone(RunState& run) {
    auto done = [&] { return run.done_flag.load(std::memory_order_seq_cst); };
    while (!done()) run.wake.SleepUnless(done, std::chrono::seconds(1));
}

}  // namespace

Scheduler::Scheduler(std::vector<std::unique_ptr<ChipExecutor>> executors, const DistributedConfig& config)
    : executors_(std::move(executors)), load_(executors_.size()), stats_(executors_.size()), block_dim_(config.block_dim) {
    for (size_t d = 0; d < executors_.size(); ++d) {
        room_.push_back(std::max(1u, executors_[d]->Concurrency()));
        remote_.push_back(executors_[d]->Remote());
        lanes_.push_back(std::make_unique<JobThreads>(room_[d]));
        device_names_.push_back(executors_[d]->Describe());
    }
    costs_ = std::make_unique<DeviceCosts>(remote_);
    placement_.room = room_;
    to_post_.resize(lanes_.size() + 1);
    placement_.remote = remote_;
    if (config.num_sub_workers > 0) sub_workers_ = std::make_unique<JobThreads>(config.num_sub_workers);
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Shutdown() {
    for (;;) {
        std::shared_ptr<RunState> run;
        {
            Lock lock(*this);
            if (in_flight_.empty()) break;
            run = in_flight_.front();
        }
        SleepUntilDone(*run);
    }
    lanes_.clear();  // joins
    sub_workers_.reset();
    executors_.clear();
}

std::shared_ptr<RunState> Scheduler::Start(std::unique_ptr<RunState> owned) {
    std::shared_ptr<RunState> run(std::move(owned));
    Lock lock(*this);
    in_flight_.push_back(run);
    run->unfinished = run->tasks.size();
    std::vector<HostTask*> producers;
    for (auto& t : run->tasks) {
        producers.clear();
        for (const TensorArg& a : t->args)
            tracker_.Access(a.tensor.storage_id(), a.tensor.byte_offset(), a.tensor.byte_offset() + a.tensor.bytes(),
                            a.access != Access::In, t.get(), producers);
        std::sort(producers.begin(), producers.end());
        producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
        for (HostTask* p : producers) {
            if (p->state == HostTask::State::Failed || p->state == HostTask::State::Skipped) {
                if (!t->root) t->root = p->root;
            } else if (p->state != HostTask::State::Done) {
                p->consumers.push_back(t.get());
                ++t->fanin;
            }
        }
        t->state = HostTask::State::Pending;
    }
    if (run->tasks.empty()) {
        run->done = true;
        run->done_flag.store(true, std::memory_order_release);
        in_flight_.pop_back();
        return run;
    }
    // Recorded all first: a task readied (or skipped) below may release
    // consumers recorded after it.
    std::vector<HostTask*> ready;
    for (auto& t : run->tasks)
        if (t->fanin == 0) ready.push_back(t.get());
    for (HostTask* t : ready) MakeReady(t);
    return run;
}

std::shared_ptr<RunState> Scheduler::Fail(std::unique_ptr<RunState> run, TaskFailureInfo failure) {
    for (auto& t : run->tasks) {
        t->state = HostTask::State::Skipped;
        run->skipped.push_back(t->name);
    }
    run->failures.push_back(std::move(failure));
    run->unfinished = 0;
    run->done = true;
    run->done_flag.store(true, std::memory_order_release);
    return run;
}

void Scheduler::MakeReady(HostTask* task) {
    if (task->root) {
        Finish(task, HostTask::State::Skipped, {});
        return;
    }
    task->state = HostTask::State::Queued;
    if (task->level == Level::Host) {
        to_post_.back().push_back([this, task] { RunSub(task); });
        return;
    }
    PlacementInput& in = placement_;
    in.pinned = task->pinned;
    in.load = load_;
    in.current_bytes.assign(executors_.size(), 0);
    in.input_bytes = 0;
    for (const TensorArg& a : task->args)
        if (a.access != Access::Out) {
            in.input_bytes += a.tensor.bytes();
            for (size_t d = 0; d < executors_.size(); ++d)
                if (!remote_[d] && residency_.Current(a.tensor, d)) in.current_bytes[d] += a.tensor.bytes();
        }
    costs_->Fill(in);
    in.rotate = rotate_++;
    const size_t d = Place(in);
    task->device = d;
    ++load_[d];
    ChipCall& call = task->call;
    call = {task->name, task->function, {}, block_dim_, task->chip};
    for (const TensorArg& a : task->args) call.args.push_back({a});
    to_post_[d].push_back([this, task] { RunChip(task); });
}

void Scheduler::Finish(HostTask* task, HostTask::State state, TaskFailureInfo failure) {
    task->state = state;
    RunState& run = *task->run;
    const bool chip = task->level == Level::Chip && task->device != SIZE_MAX;
    if (chip) --load_[task->device];
    if (state == HostTask::State::Done) {
        for (const TensorArg& a : task->args) {
            if (a.access != Access::In) residency_.Wrote(a.tensor, chip ? task->device : Residency::kHost);
            else if (chip) residency_.Copied(a.tensor, task->device);
        }
    } else if (state == HostTask::State::Failed) {
        task->root = std::make_shared<const TaskFailureInfo>(failure);
        // What the device copies of its outputs hold is unknown now.
        for (const TensorArg& a : task->args)
            if (a.access != Access::In) residency_.Wrote(a.tensor, Residency::kHost);
        run.failures.push_back(std::move(failure));
    } else {
        run.skipped.push_back(task->name);
        // Skipped for a task of an earlier run in flight: this run fails with that cause too.
        const uint64_t root_id = task->root->task_id;
        if (std::none_of(run.failures.begin(), run.failures.end(), [&](const auto& f) { return f.task_id == root_id; }))
            run.failures.push_back(*task->root);
    }
    if (task->trace.track != 0) [[unlikely]]
        TraceHandOff(*task);
    for (HostTask* c : task->consumers) {
        if (state != HostTask::State::Done && !c->root) c->root = task->root;
        if (--c->fanin == 0) MakeReady(c);
    }
    const bool ended = --run.unfinished == 0;
    if (ended) {
        for (auto& t : run.tasks) tracker_.Forget(*t);
        residency_.Sweep();
        std::sort(run.failures.begin(), run.failures.end(),
                  [](const TaskFailureInfo& a, const TaskFailureInfo& b) { return a.task_id < b.task_id; });
        run.done = true;
        run.done_flag.store(true, std::memory_order_seq_cst);
    }
    if (ended || run.watched) run.wake.Notify();  // the run ended, or a progress report is due
    if (ended) {
        auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const auto& r) { return r.get() == &run; });
        finished_.push_back(std::move(*it));  // `run` lives until the lock is released
        in_flight_.erase(it);
    }
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
    } catch (const std::exception& e) {
        f.kind = ErrorKind::TaskFailed;
        f.cause = e.what();
    } catch (...) {
        f.kind = ErrorKind::TaskFailed;
        f.cause = "an exception that is not a std::exception";
    }
}

void Scheduler::RunChip(HostTask* task) {
    const size_t d = task->device;
    ChipCallStats moved;
    const uint64_t start_ns = trace::Enabled() ? trace::detail::NowNs() : 0;
    const auto began = std::chrono::steady_clock::now();
    try {
        moved = executors_[d]->Run(task->call);
        costs_->Record(d, uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count()),
                      moved);
    } catch (...) {
        task->inbox_failure = std::make_unique<TaskFailureInfo>(FailureOf(*task, executors_[d]->Describe()));
    }
    if (start_ns != 0) [[unlikely]]
        TraceTask(*task, device_names_[d], start_ns, trace::detail::NowNs(), moved);
    task->inbox_moved = moved;
    Park(*task);
}

void Scheduler::RunSub(HostTask* task) {
    const uint64_t start_ns = trace::Enabled() ? trace::detail::NowNs() : 0;
    try {
        std::vector<HostTensor> args;
        for (const TensorArg& a : task->args) args.push_back(a.tensor);
        task->fn(args);
    } catch (...) {
        task->inbox_failure = std::make_unique<TaskFailureInfo>(FailureOf(*task, ""));
    }
    if (start_ns != 0) [[unlikely]]
        TraceTask(*task, "", start_ns, trace::detail::NowNs(), {});
    Park(*task);
}

std::vector<HostTensor> Scheduler::Wait(RunState& run, const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("host_run_wait");
    if (progress) return WaitReporting(run, progress);
    // A short run ends within a few microseconds: look for that before
    // paying a sleep and a wake-up.
    JobThreads::LookBeforeSleeping([&] { return run.done_flag.load(std::memory_order_acquire); });
    SleepUntilDone(run);
    Lock lock(*this);
    if (!run.failures.empty()) throw HostRunError(run.name, run.failures, run.skipped);
    return run.outputs;
}

std::vector<HostTensor> Scheduler::WaitReporting(RunState& run, const ProgressCallback& progress) {
    // Reported outside the lock, once per change: done only rises and ends
    // at total (Finish announces every finished task of a watched run).
    const uint64_t total = run.tasks.size();
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
            progress(ProgressInfo{"host-level", done, total, "tasks"});
            continue;  // look again: tasks finished meanwhile
        }
        if (ended) break;
        run.wake.SleepUnless([&] { return look() != std::pair<uint64_t, bool>{reported, false}; }, std::chrono::seconds(1));
    }
    Lock lock(*this);
    if (!run.failures.empty()) throw HostRunError(run.name, run.failures, run.skipped);
    return run.outputs;
}

bool Scheduler::Done(RunState& run) {
    Lock lock(*this);
    return run.done;
}

Worker::DeviceStats Scheduler::Stats(size_t device) {
    Lock lock(*this);
    return stats_.at(device);
}

}  // namespace spyre::host
