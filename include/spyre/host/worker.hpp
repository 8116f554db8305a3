// SPDX-License-Identifier: Apache-2.0
// The level-3 runtime of seed 003: a Worker over several devices runs host
// orchestration functions. A host orchestration function submits chip tasks
// (named chip functions on a device) and SubWorker tasks (host functions on
// a pool of host threads) over HostTensors; the Worker finds each task's
// dependencies from what it reads and writes as it is submitted, starts it
// once they are done while the function goes on, places chip tasks on
// devices, moves the data, reports failures as one structured error, and
// reports every task (RunHandle::Report).
//
//   spyre::Worker w(host, {.device_ids = {1, 2}, .num_sub_workers = 1});
//   w.RegisterKernel(KERNEL_ADD, add_program);
//   w.RegisterChipFunction("chip_add", chip_add);       // ChipFunction or pto_orchestration_fn
//   w.RegisterSubWorker("verify", verify);
//   spyre::HostProgram p{"host_orch", 2, {{{128, 128}}}, [](spyre::HostGraph& g, auto args) {
//       g.Chip("chip_add", {In(args[0]), In(args[1]), Out(args[2])});
//       g.Sub("verify", {In(args[2])});
//   }};
//   w.Run(p, {a, b, f});           // in-place style
//   auto outs = w.Run(p, {a, b});  // return style: f allocated by the runtime
//
// docs/host.md ("Host-level orchestration") has the rules.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spyre/common/progress.hpp"
#include "spyre/dependency/task_failure.hpp"
#include "spyre/error.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/host_tensor.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class Host;

// The chip runtime a Worker runs on each device: seed 004's runtime with
// locked ready queues, or with its lock-free ones. The seed names them by
// string; ToString and ChipRuntimeFromString map to and from those names.
enum class ChipRuntime : uint8_t { TensorMapAndRingBuffer, TensorMapAndRingBufferLockFree };
const char* ToString(ChipRuntime runtime) noexcept;
// The runtime named `name` ("tensormap_and_ringbuffer",
// "tensormap_and_ringbuffer_lockfree"); InvalidArgument for any other name.
ChipRuntime ChipRuntimeFromString(std::string_view name);

// Seed 003's configuration, each field meaning something here.
struct DistributedConfig {
    std::vector<int> device_ids = {0};  // indices into Host::functions(): the devices chip tasks run on
    int num_sub_workers = 0;            // host threads running SubWorker tasks (0: a graph with one is refused)
    ChipRuntime runtime = ChipRuntime::TensorMapAndRingBuffer;
    int block_dim = 1;         // cores a chip task spreads over (ChipContext::block_dim), 1..cores of the card
    int aicpu_thread_num = 1;  // host threads of each chip's orchestration runtime (its AICPU), 1..64
    // Not in the seed: bytes of each chip runtime's heap ring.
    uint64_t chip_heap_bytes = 16ull << 20;
    // Not in the seed: chip tasks one device runs at once, each on its own
    // share of the device's task queues (core groups) with its own chip
    // runtime. 0: as many as the device has room for: its task queues, at
    // most cores / block_dim, and heaps in at most a quarter of its memory.
    int chip_tasks_per_device = 0;
    // Not in the seed: tasks of one run submitted and not finished at most
    // (seed 004's flow control). A host orchestration function that submits
    // one more waits until one ends. 1..1,048,576.
    int max_tasks_in_flight = 1024;
    // Not in the seed: a local chip task made ready as its function is
    // submitted runs on the submitting thread, inside the submit, when its
    // chip function's runs so far averaged under this many nanoseconds (a
    // function that submits nothing): handing it to a device thread and
    // its completion back costs more than the run. Its device's chip task
    // room still bounds how many run at once. 0: every chip task runs on
    // a device thread.
    uint32_t cheap_chip_task_ns = 1000;
};

enum class TaskState : uint8_t { Done, Failed, Skipped };
const char* ToString(TaskState state) noexcept;

// One task of a finished run, for its report. Times are on the device clock
// (spyre/common/device_clock.hpp: CLOCK_MONOTONIC ns, which the mock's
// completion records and the trace use too): a chip task's as its executor
// read that clock when the chip function started on the device (its inputs
// uploaded) and when the device had completed every task it submitted
// (before the outputs come back); a remote chip task's, and a SubWorker's,
// around the call on the host. A skipped task never ran: start and end are 0.
struct TaskRecord {
    std::string name;      // ChipOptions::name, the SubWorker's name, or "<function>#<n>"
    uint64_t task_id = 0;
    Level level = Level::Chip;
    std::string device;    // the chip task's device; "" for a SubWorker (or a task never placed)
    TaskState state = TaskState::Done;
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
};

// Level and TaskFailureInfo, the failure record the host level shares with
// the orchestration runtime: spyre/dependency/task_failure.hpp.

// A run that failed: the first failure's kind and message, every failure,
// every task skipped because something it depends on failed, and the run's
// report (every task).
class HostRunError : public Error {
public:
    HostRunError(std::string run, std::vector<TaskFailureInfo> failures, std::vector<std::string> skipped,
                 std::vector<TaskRecord> report = {});
    const std::vector<TaskFailureInfo>& failures() const noexcept { return failures_; }
    const std::vector<std::string>& skipped() const noexcept { return skipped_; }
    const std::vector<TaskRecord>& report() const noexcept { return report_; }

private:
    std::vector<TaskFailureInfo> failures_;
    std::vector<std::string> skipped_;
    std::vector<TaskRecord> report_;
};

// A SubWorker: a host function over its arguments' tensors (in task order).
// Any exception it throws fails the task (ErrorKind::TaskFailed, or the
// spyre::Error's own kind).
using SubWorkerFn = std::function<void(std::span<const HostTensor> args)>;
// Inside a SubWorker: its task's arguments with their access (In, Out,
// InOut), in the same order; empty on a thread that runs none. A SubWorker
// must not write its In arguments (nothing orders other readers after it,
// and a chip call may reuse a device copy of the old bytes): a front end
// that views them (Python's numpy arrays) makes those views read-only.
std::span<const TensorArg> RunningSubWorkerArgs() noexcept;

struct ChipOptions {
    std::string name;                // task name in errors; default "<function>#<n>"
    std::optional<size_t> device;    // index into the Worker's devices: run there (affinity)
};

struct SubOptions {
    std::string name;  // task name in errors and the run's report; default "<SubWorker>#<n>"
};

// What a host orchestration function submits tasks into. Each task starts
// as soon as the tasks it depends on (RAW, WAW, WAR on byte ranges, across
// the runs in flight) have finished, while the function goes on. Chip and
// Sub wait while the run has DistributedConfig::max_tasks_in_flight tasks
// unfinished. If the function throws, what it submitted still runs (or is
// skipped behind a failure), and the run fails with its exception.
//
// A HostGraph takes tasks only while its function runs. The function may
// hand it (by value) to threads of its own; a call made after the function
// returned, from a copy kept by such a thread or a SubWorker, throws
// InvalidArgument, and a call in progress when it returns finishes first.
// A task (SubWorker, chip function) submits only into a nested run it
// started: into its own run or another run's open graph, InvalidArgument
// (it could wait for room only its own end makes).
class HostGraph {
public:
    // An intermediate host tensor (pl.create_tensor), zero-filled.
    HostTensor CreateTensor(const std::vector<int64_t>& shape, DType dtype = DType::FP32);
    // A chip task: a registered chip function with its tensor arguments.
    uint64_t Chip(const std::string& function, std::vector<TensorArg> args, ChipOptions options = {});
    // A SubWorker task: a registered SubWorker, or a callable given here
    // under the SubWorker name `name`.
    uint64_t Sub(const std::string& name, std::vector<TensorArg> args, SubOptions options = {});
    uint64_t Sub(const std::string& name, SubWorkerFn fn, std::vector<TensorArg> args, SubOptions options = {});

    struct SPYRE_INTERNAL Impl;
    explicit HostGraph(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

private:
    std::shared_ptr<Impl> impl_;  // shared by the copies: it knows when the function returned
};

// A host orchestration function with its signature: `num_inputs` inputs,
// then outputs of the given shapes (pl.Out parameters). Run with every
// argument (in-place style) or with the inputs only (return style: the
// outputs are allocated, zero-filled, and returned).
struct HostProgram {
    std::string name;
    size_t num_inputs = 0;
    struct OutputSpec {
        std::vector<int64_t> shape;
        DType dtype = DType::FP32;
    };
    std::vector<OutputSpec> outputs;
    std::function<void(HostGraph& g, std::span<const HostTensor> args)> fn;
};

// A run in flight.
class RunHandle {
public:
    RunHandle();
    RunHandle(RunHandle&&) noexcept;
    RunHandle& operator=(RunHandle&&) noexcept;
    ~RunHandle();  // waits for the run (without throwing)
    // Waits; returns the program's outputs (inputs excluded) or throws
    // HostRunError. `progress` (on this thread) reports the run's tasks
    // finished of its tasks ("host-level", unit "tasks"), done rising to total.
    // One Wait per handle: a second (also one racing the first from another
    // thread) is InvalidArgument. Done and Report may be called from any
    // thread meanwhile.
    std::vector<HostTensor> Wait(const ProgressCallback& progress = {});
    // Whether the run ended; true for an empty handle too (nothing is in
    // flight), where Wait, WaitFor and Report are InvalidArgument.
    bool Done() const;
    // Waits up to `timeout` for the run to end; whether it did (Wait then
    // returns at once). Unlike Wait, it runs none of the run's queued tasks
    // on the calling thread meanwhile, so it keeps to its time; but a thread
    // of the Worker's own pools (a SubWorker waiting on a nested run) runs
    // its pool's queued jobs as Wait does, since the nested run may need
    // that thread, and may return later. Not the handle's one Wait: call it any number of
    // times, from any thread, e.g. to look at something else between
    // slices (the Python front end handles Ctrl-C so). InvalidArgument on
    // an empty handle, or from a task or orchestration function of the
    // run itself (as Wait).
    bool WaitFor(std::chrono::nanoseconds timeout);
    // Every task of the run in submission order (waits for it, never
    // throws for its failure); also after Wait. InvalidArgument on an
    // empty handle.
    std::vector<TaskRecord> Report();

    struct SPYRE_INTERNAL State;
    explicit RunHandle(std::shared_ptr<State> state);

private:
    std::shared_ptr<State> state_;
    std::atomic<bool> waited_{false};  // Wait was called: state_ stays, for Done and Report
};

class Worker {
public:
    // Opens config.device_ids of `host` (checked first: InvalidArgument or
    // NotFound naming the field and value) and starts the threads.
    Worker(Host& host, DistributedConfig config);
    // Over executors made elsewhere (later: remote ranks); the config's
    // device_ids are then ignored.
    Worker(std::vector<std::unique_ptr<ChipExecutor>> executors, DistributedConfig config,
           std::shared_ptr<ChipRegistry> registry);
    Worker(Worker&&) noexcept;
    Worker& operator=(Worker&&) noexcept;
    ~Worker();  // waits for the runs in flight

    // A device program, uploaded to every device, usable as `kernel_id` in chip functions.
    void RegisterKernel(int32_t kernel_id, const std::vector<uint8_t>& program);
    void RegisterChipFunction(const std::string& name, ChipFunction fn);
    void RegisterChipFunction(const std::string& name, pto_orchestration_fn fn);
    // A chip function that is an ExecutionPlan: loaded on every device now;
    // a chip task naming it passes the plan's tensors as its arguments.
    void RegisterChipPlan(const std::string& name, const CompilerOutput& plan);
    void RegisterSubWorker(const std::string& name, SubWorkerFn fn);

    // Runs synchronously: returns the outputs or throws HostRunError (a
    // failed task, or a host orchestration function that threw) or Error
    // (bad arguments, or a SubWorker of this Worker waiting on its own run).
    // `progress` as for RunHandle::Wait.
    std::vector<HostTensor> Run(const HostProgram& program, std::vector<HostTensor> args,
                                const ProgressCallback& progress = {});
    // Runs the host orchestration function (its tasks start as it submits
    // them) and returns once it has returned; tasks of runs in flight that
    // touch the same tensors are ordered as if the runs were one. A host
    // orchestration function that throws fails the run (Wait throws
    // HostRunError); bad arguments throw Error here.
    RunHandle Submit(const HostProgram& program, std::vector<HostTensor> args);

    size_t device_count() const;
    std::string DescribeDevice(size_t index) const;
    // Chip tasks device `index` runs at once (DistributedConfig::chip_tasks_per_device).
    unsigned ChipTasksAtOnce(size_t index) const;
    // Chip tasks each device has run, and bytes moved (tests, benchmarks).
    struct DeviceStats {
        uint64_t chip_tasks = 0;
        ChipCallStats moved;
    };
    DeviceStats Stats(size_t device) const;
    // What the runs in flight hold now: tasks submitted and not freed (a
    // task that finished well is freed at once; a failed or skipped one
    // when its run ends) and their hazard records (byte ranges filed for
    // dependency discovery). Tests check that a long run stays bounded.
    struct Held {
        size_t tasks = 0;
        size_t hazard_records = 0;
    };
    Held HeldNow() const;
    const DistributedConfig& config() const;

    struct SPYRE_INTERNAL Impl;

private:
    std::unique_ptr<Impl> impl_;
};

// Checks `config` alone (InvalidArgument naming the field); the Worker also
// checks device ids against the Host and block_dim against the cards.
void Validate(const DistributedConfig& config);

}  // namespace spyre
SPYRE_API_END
