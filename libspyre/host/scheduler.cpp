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

Scheduler::Scheduler(std::vector<std::unique_ptr<ChipExecutor>> executors, const DistributedConfig& config)
    : executors_(std::move(executors)), load_(executors_.size()), stats_(executors_.size()), block_dim_(config.block_dim) {
    for (size_t d = 0; d < executors_.size(); ++d) {
        room_.push_back(std::max(1u, executors_[d]->Concurrency()));
        remote_.push_back(executors_[d]->Remote());
        lanes_.push_back(std::make_unique<JobThreads>(room_[d]));
        device_names_.push_back(executors_[d]->Describe());
    }
    if (config.num_sub_workers > 0) sub_workers_ = std::make_unique<JobThreads>(config.num_sub_workers);
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Shutdown() {
    {
        std::unique_lock lock(mu_);
        idle_cv_.wait(lock, [&] { return in_flight_.empty(); });
        finished_.clear();
    }
    lanes_.clear();  // joins
    sub_workers_.reset();
    executors_.clear();
}

std::shared_ptr<RunState> Scheduler::Start(std::unique_ptr<RunState> owned) {
    std::shared_ptr<RunState> run(std::move(owned));
    Graveyard dead;
    std::lock_guard lock(mu_);
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
    dead.swap(finished_);
    return run;
}

void Scheduler::MakeReady(HostTask* task) {
    if (task->root) {
        Finish(task, HostTask::State::Skipped, {});
        return;
    }
    task->state = HostTask::State::Queued;
    if (task->level == Level::Host) {
        sub_workers_->Post([this, task] { RunSub(task); });
        return;
    }
    PlacementInput in;
    in.pinned = task->pinned;
    in.load = load_;
    in.room = room_;
    in.remote = remote_;
    in.local_bytes.assign(executors_.size(), 0);
    for (const TensorArg& a : task->args)
        if (a.access != Access::Out)
            for (size_t d = 0; d < executors_.size(); ++d)
                if (!remote_[d] && residency_.Current(a.tensor, d)) in.local_bytes[d] += a.tensor.bytes();
    in.rotate = rotate_++;
    const size_t d = Place(in);
    task->device = d;
    ++load_[d];
    ChipCall call{task->name, task->function, {}, block_dim_};
    for (const TensorArg& a : task->args) call.args.push_back({a, !remote_[d] && residency_.Current(a.tensor, d)});
    lanes_[d]->Post([this, task, call = std::move(call)]() mutable { RunChip(task, std::move(call)); });
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
    if (run.watched) run.done_cv.notify_all();  // a progress report is due
    if (--run.unfinished == 0) {
        for (auto& t : run.tasks) tracker_.Forget(*t);
        residency_.Sweep();
        std::sort(run.failures.begin(), run.failures.end(),
                  [](const TaskFailureInfo& a, const TaskFailureInfo& b) { return a.task_id < b.task_id; });
        run.done = true;
        run.done_flag.store(true, std::memory_order_release);
        run.done_cv.notify_all();
        auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const auto& r) { return r.get() == &run; });
        finished_.push_back(std::move(*it));
        in_flight_.erase(it);
        if (in_flight_.empty()) idle_cv_.notify_all();
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
    return f;
}

}  // namespace

void Scheduler::RunChip(HostTask* task, ChipCall call) {
    const size_t d = task->device;
    ChipCallStats moved;
    TaskFailureInfo failure;
    bool ok = true;
    const uint64_t start_ns = trace::Enabled() ? trace::detail::NowNs() : 0;
    try {
        moved = executors_[d]->Run(call);
    } catch (...) {
        ok = false;
        failure = FailureOf(*task, executors_[d]->Describe());
    }
    if (start_ns != 0) [[unlikely]]
        TraceTask(*task, device_names_[d], start_ns, trace::detail::NowNs(), moved);
    Graveyard dead;
    std::lock_guard lock(mu_);
    ++stats_[d].chip_tasks;
    stats_[d].moved.bytes_uploaded += moved.bytes_uploaded;
    stats_[d].moved.bytes_reused += moved.bytes_reused;
    stats_[d].moved.bytes_downloaded += moved.bytes_downloaded;
    Finish(task, ok ? HostTask::State::Done : HostTask::State::Failed, std::move(failure));
    dead.swap(finished_);
}

void Scheduler::RunSub(HostTask* task) {
    TaskFailureInfo failure;
    bool ok = true;
    const uint64_t start_ns = trace::Enabled() ? trace::detail::NowNs() : 0;
    try {
        std::vector<HostTensor> args;
        for (const TensorArg& a : task->args) args.push_back(a.tensor);
        task->fn(args);
    } catch (...) {
        ok = false;
        failure = FailureOf(*task, "");
    }
    if (start_ns != 0) [[unlikely]]
        TraceTask(*task, "", start_ns, trace::detail::NowNs(), {});
    Graveyard dead;
    std::lock_guard lock(mu_);
    Finish(task, ok ? HostTask::State::Done : HostTask::State::Failed, std::move(failure));
    dead.swap(finished_);
}

std::vector<HostTensor> Scheduler::Wait(RunState& run, const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("host_run_wait");
    if (progress) return WaitReporting(run, progress);
    // A short run ends within a few microseconds: look for that (yielding)
    // before paying a sleep and a wake-up.
    const auto until = std::chrono::steady_clock::now() + JobThreads::kSpin;
    while (!run.done_flag.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    std::unique_lock lock(mu_);
    run.done_cv.wait(lock, [&] { return run.done; });
    if (!run.failures.empty()) throw HostRunError(run.name, run.failures, run.skipped);
    return run.outputs;
}

std::vector<HostTensor> Scheduler::WaitReporting(RunState& run, const ProgressCallback& progress) {
    // Reported outside the lock, once per change: done only rises and ends
    // at total (Finish wakes a watched run's waiters on every task).
    std::unique_lock lock(mu_);
    run.watched = true;
    const uint64_t total = run.tasks.size();
    uint64_t reported = ~0ull;
    for (;;) {
        const uint64_t done = total - run.unfinished;
        if (done != reported) {
            reported = done;
            lock.unlock();
            progress(ProgressInfo{"host-level", done, total, "tasks"});
            lock.lock();
            continue;  // look again: tasks finished meanwhile
        }
        if (run.done) break;
        run.done_cv.wait(lock);
    }
    if (!run.failures.empty()) throw HostRunError(run.name, run.failures, run.skipped);
    return run.outputs;
}

bool Scheduler::Done(RunState& run) {
    std::lock_guard lock(mu_);
    return run.done;
}

Worker::DeviceStats Scheduler::Stats(size_t device) {
    std::lock_guard lock(mu_);
    return stats_.at(device);
}

}  // namespace spyre::host
