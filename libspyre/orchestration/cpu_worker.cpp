// SPDX-License-Identifier: Apache-2.0
#include "orchestration/cpu_worker.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#include "trace/recorder.hpp"
#include "thrown_value.hpp"

namespace spyre::orchestration {

CpuWorker::CpuWorker(unsigned threads, std::string device)
    : threads_(std::max(1u, threads)), device_(std::move(device)) {}

CpuWorker::~CpuWorker() { Stop(); }

namespace {
thread_local const CpuWorker::TaskFrame* t_running_tasks = nullptr;

// Puts a task on this thread's stack of running tasks for one kernel call.
class InKernel {
public:
    explicit InKernel(const TaskDescriptor& task) noexcept : frame_{&task, t_running_tasks} { t_running_tasks = &frame_; }
    ~InKernel() { t_running_tasks = frame_.outer; }
    InKernel(const InKernel&) = delete;
    InKernel& operator=(const InKernel&) = delete;

private:
    CpuWorker::TaskFrame frame_;
};
}  // namespace

const CpuWorker::TaskFrame* CpuWorker::RunningTasks() noexcept { return t_running_tasks; }

uint32_t CpuWorker::Run(const TaskDescriptor& task) {
    const InKernel in_kernel(task);
    void* buffers[PTO_MAX_PARAMS];
    uint64_t sizes[PTO_MAX_PARAMS];
    for (int32_t i = 0; i < task.num_params; ++i) {
        buffers[i] = task.params[i].host;
        sizes[i] = task.params[i].size;
    }
    const KernelEntry& k = *task.kernel;
    // A C++ kernel that throws fails its task instead of escaping the
    // thread; what it threw goes to the task's failure record.
    try {
        if (k.host_callable) return k.host_callable(buffers, sizes, task.num_params);
        return k.host_fn(buffers, sizes, task.num_params, k.user_data);
    } catch (const std::exception& e) {
        task.thrown = e.what();
    } catch (...) {
        task.thrown = spyre::detail::DescribeThrownValue();
    }
    return kHostKernelThrew;
}

namespace {
thread_local const CompletionSink* t_running_task_of = nullptr;
}  // namespace

const CompletionSink* CpuWorker::RunningTaskOf() noexcept { return t_running_task_of; }

CpuWorker::RunningTask::RunningTask(const CompletionSink* sink) noexcept : outer_(t_running_task_of) {
    t_running_task_of = sink;
}

CpuWorker::RunningTask::~RunningTask() { t_running_task_of = outer_; }

uint32_t CpuWorker::RunTimed(const TaskDescriptor& task) {
    const auto start = std::chrono::steady_clock::now();
    const uint32_t status = Run(task);
    task.kernel->host_cost.Record(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
    return status;
}

void CpuWorker::Start(ReadyQueue& queue, CompletionSink& sink) {
    pool_ = std::make_unique<dependency::JobThreads>(int(threads_), "spyre-cpu");
    for (unsigned i = 0; i < threads_; ++i) pool_->Post([this, &queue, &sink] { Serve(queue, sink); });
}

void CpuWorker::Serve(ReadyQueue& queue, CompletionSink& sink) {
    const RunningTask running(&sink);  // every task this thread runs is the sink's
    Track track{device_ + " host worker " + std::to_string(dependency::JobThreads::CurrentIndex())};
    std::vector<ReadyTask> batch;
    while (queue.PopBatch(batch, 1)) {
        for (const ReadyTask& t : batch) RunAndReport(t, sink, track);
        batch.clear();
    }
}

bool CpuWorker::RunOneQueued(ReadyQueue& queue, CompletionSink& sink) {
    std::vector<ReadyTask> one;  // not thread_local: the task may wait and come here again
    if (queue.TryPopBatch(one, 1) == 0) return false;
    const RunningTask running(&sink);
    Track track{device_ + " thread of a waiting kernel"};
    RunAndReport(one.front(), sink, track);
    return true;
}

void CpuWorker::RunAndReport(const ReadyTask& t, CompletionSink& sink, Track& track) {
    if (!trace::Enabled()) [[likely]] {
        sink.OnTaskComplete(t.task_id, RunTimed(*t.task));
        return;
    }
    if (track.recording != trace::detail::Recording()) {  // named once per recording, not per task
        track.recording = trace::detail::Recording();
        track.id = trace::detail::NamedTrack(track.name);
    }
    TaskTiming timing;
    timing.track = track.id;
    timing.start_ns = trace::detail::NowNs();
    const uint32_t status = RunTimed(*t.task);
    timing.end_ns = trace::detail::NowNs();
    sink.OnTaskComplete(t.task_id, status, &timing);
}

void CpuWorker::Stop() {
    pool_.reset();  // the queue is closed: each loop returns, and the pool joins its threads
}

}  // namespace spyre::orchestration
