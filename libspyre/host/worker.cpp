// SPDX-License-Identifier: Apache-2.0
// The Worker's public face: opening its devices, registration, checking a
// run's arguments, handing the host orchestration function's tasks to the
// dispatcher as it submits them (HostGraph), and the handle of a run in flight.
#include "spyre/host/worker.hpp"

#include <atomic>
#include <map>
#include <set>
#include <mutex>
#include <system_error>
#include <thread>

#include "host_task.hpp"
#include "local_chip_executor.hpp"
#include "dispatcher.hpp"
#include "orchestration/program_slots.hpp"
#include "spyre/device/host.hpp"
#include "spyre/trace/trace.hpp"
#include "spyre/uapi/spyre_regs.h"
#include "moved_from.hpp"

namespace spyre {

namespace {
// Inputs, and outputs, a HostProgram may declare: far more than any run
// passes, and small enough that their sum cannot wrap.
constexpr size_t kMaxProgramTensors = size_t(1) << 20;
}  // namespace

struct Worker::Impl {
    DistributedConfig config;
    std::shared_ptr<ChipRegistry> registry;
    // One registration of a kernel or plan at a time: each checks, loads on
    // every device, and only then records the id or adds the name.
    std::mutex register_mu;
    std::set<int32_t> kernels;  // RegisterKernel's ids that every device loaded
    std::mutex sub_mu;
    std::map<std::string, SubWorkerFn> sub_workers;
    std::shared_ptr<host::Dispatcher> dispatcher;
    std::atomic<uint64_t> next_task{1};

    ~Impl() {
        if (dispatcher) dispatcher->Shutdown();
    }
};

struct HostGraph::Impl {
    Impl(Worker::Impl& w, host::RunState& r, std::string p) : worker(w), run(r), program(std::move(p)) {}
    Worker::Impl& worker;  // both valid while open: the Worker may go, and the run end, after the function returned
    host::RunState& run;
    const std::string program;
    // The orchestration function may hand the graph to threads of its own:
    // one of them submits at a time (the names, the spares and the
    // dispatcher's per-run submission counts are a single submitter's).
    std::mutex submit_mu;
    // The function has not returned: changed under submit_mu, read first
    // without it (CheckMaySubmit).
    std::atomic<bool> open{true};
    std::map<std::string, int> counts;  // default task names: "<function>#<n>"
    std::vector<std::unique_ptr<host::HostTask>> spares;  // Dispatcher::NewTask's

    // Final once under submit_mu (a submission in progress holds it).
    void CheckOpen(const char* call) const {
        if (!open.load(std::memory_order_acquire))
            throw Error(ErrorKind::InvalidArgument,
                        std::string("HostGraph::") + call + ": the orchestration function of host program '" + program +
                            "' has returned; its graph takes tasks only while that function runs");
    }
    // Before taking submit_mu: a task (SubWorker or chip function) submits
    // only into runs it started (nested). Into its own run, its submit
    // would wait for room in the run's window that only its own end can
    // make, or for the lock a submitter waiting for that room holds. Into
    // another run, the same: that run may depend on the task, or need the
    // pool thread it holds to make room. (A run that ended is closed, so
    // an address reused by a later run is never mistaken for this one.)
    void CheckMaySubmit(const char* call) const {
        if (!open.load(std::memory_order_acquire)) return;  // CheckOpen says why
        if (host::Dispatcher::CallerRunsATaskOf(run))
            throw Error(ErrorKind::InvalidArgument,
                        std::string("HostGraph::") + call + ": a task of host program '" + program +
                            "' submits into its own run, whose window of unfinished tasks could wait for that very "
                            "task; submit from the orchestration function (or its threads), or start a nested run");
        if (const host::HostTask* task = host::Dispatcher::CallerTaskOutside(run))
            throw Error(ErrorKind::InvalidArgument,
                        std::string("HostGraph::") + call + ": task '" + task->name + "' of host program '" +
                            task->run->name + "' submits into host program '" + program +
                            "', a run it did not start; waiting there for room in the window could wait for the "
                            "task itself (that run may depend on it, or need the thread it holds); submit from that "
                            "run's orchestration function (or its threads), or start a nested run");
    }
    // What Chip and Sub do first: checks the caller, then holds submit_mu
    // with the graph open.
    std::unique_lock<std::mutex> EnterSubmit(const char* call) {
        CheckMaySubmit(call);
        std::unique_lock lock(submit_mu);
        CheckOpen(call);
        return lock;
    }
    // The function returned (or threw): waits for a submission in
    // progress, then refuses the rest.
    void Close() {
        std::lock_guard lock(submit_mu);
        open.store(false, std::memory_order_release);
        spares.clear();
    }

    std::unique_ptr<host::HostTask> Make(Level level, const std::string& function, std::vector<TensorArg> args,
                                         const std::string& name) {
        // The task as the program named it (the function's name was given
        // as a named task's, found probing from outside).
        const std::string task =
            name.empty() ? "task '" + function + "'" : "task '" + name + "' (function '" + function + "')";
        for (size_t i = 0; i < args.size(); ++i) {
            if (!args[i].tensor)
                throw Error(ErrorKind::InvalidArgument, task + ": argument " + std::to_string(i) + " is an empty tensor");
            if (args[i].access != Access::In && args[i].access != Access::Out && args[i].access != Access::InOut)
                throw Error(ErrorKind::InvalidArgument, task + ": argument " + std::to_string(i) + " has access " +
                                                            std::to_string(int(args[i].access)) +
                                                            ", not In, Out or InOut");
        }
        if (level == Level::Chip) CheckNoWrittenAlias(task, args);
        auto t = worker.dispatcher->NewTask(spares);
        t->id = worker.next_task.fetch_add(1);
        t->name = name.empty() ? function + "#" + std::to_string(counts[function]++) : name;
        t->level = level;
        t->function = function;
        t->args = std::move(args);
        return t;
    }
    // A chip call's arguments become device copies: one per argument on
    // another rank's device, one per byte range on this rank's. Bytes two
    // written arguments share would come back as whichever copy went last
    // remotely and as the one copy locally: a result that depends on
    // placement. Refused; a SubWorker sees the host bytes themselves. (An
    // In and an Out of the same bytes, an in-place elementwise call, is
    // the same either way: the Out's copy comes back.)
    static void CheckNoWrittenAlias(const std::string& task, const std::vector<TensorArg>& args) {
        for (size_t i = 0; i < args.size(); ++i)
            for (size_t j = i + 1; j < args.size(); ++j)
                if (args[i].access != Access::In && args[j].access != Access::In &&
                    args[i].tensor.Overlaps(args[j].tensor))
                    throw Error(ErrorKind::InvalidArgument,
                                "chip " + task + ": arguments " + std::to_string(i) + " (" +
                                    ToString(args[i].access) + ") and " + std::to_string(j) + " (" +
                                    ToString(args[j].access) +
                                    ") are both written and share bytes: each argument is its own device copy on "
                                    "another rank, so the result would depend on placement; write those bytes "
                                    "through one argument");
    }
    uint64_t Submit(std::unique_ptr<host::HostTask> t) {
        const uint64_t id = t->id;
        worker.dispatcher->Submit(run, std::move(t));
        return id;
    }
    // Under submit_mu, open.
    uint64_t SubmitSub(const std::string& name, SubWorkerFn fn, std::vector<TensorArg> args, const SubOptions& options) {
        NeedSubWorkers(name);
        auto t = Make(Level::Host, name, std::move(args), options.name);
        t->fn = std::move(fn);
        return Submit(std::move(t));
    }
    void NeedSubWorkers(const std::string& name) const {
        if (worker.config.num_sub_workers == 0)
            throw Error(ErrorKind::InvalidArgument, "SubWorker task '" + name +
                                                        "' needs DistributedConfig::num_sub_workers >= 1 (it is 0)");
    }
};

namespace {
// A graph's state; InvalidArgument for a graph made from null or moved from
// (a public constructor takes any pointer).
HostGraph::Impl& LiveGraph(const std::shared_ptr<HostGraph::Impl>& impl, const char* call) {
    if (!impl)
        throw Error(ErrorKind::InvalidArgument, std::string("HostGraph::") + call +
                                                    ": this graph has no run (made from null, or moved from); use "
                                                    "the graph a host orchestration function is given");
    return *impl;
}
}  // namespace

HostTensor HostGraph::CreateTensor(const std::vector<int64_t>& shape, DType dtype) {
    LiveGraph(impl_, "CreateTensor").CheckOpen("CreateTensor");  // submits nothing: no lock
    return HostTensor::Zeros(shape, dtype);
}

uint64_t HostGraph::Chip(const std::string& function, std::vector<TensorArg> args, ChipOptions options) {
    const auto lock = LiveGraph(impl_, "Chip").EnterSubmit("Chip");
    const Worker::Impl& worker = impl_->worker;
    const ChipRegistry::Entry* entry = worker.registry->Find(function);
    if (!entry)
        throw Error(ErrorKind::NotFound, "chip function '" + function + "' is not registered on this Worker (registered: " +
                                             worker.registry->Names() + ")");
    const size_t devices = worker.dispatcher->device_count();
    if (options.device && *options.device >= devices)
        throw Error(ErrorKind::InvalidArgument, "chip task '" + (options.name.empty() ? function : options.name) +
                                                    "' names device " + std::to_string(*options.device) +
                                                    ", but the Worker has " + std::to_string(devices));
    auto t = impl_->Make(Level::Chip, function, std::move(args), options.name);
    t->pinned = options.device;
    t->chip = entry;
    return impl_->Submit(std::move(t));
}

uint64_t HostGraph::Sub(const std::string& name, std::vector<TensorArg> args, SubOptions options) {
    const auto lock = LiveGraph(impl_, "Sub").EnterSubmit("Sub");
    SubWorkerFn fn;
    {
        Worker::Impl& worker = impl_->worker;
        std::lock_guard sub_lock(worker.sub_mu);
        auto it = worker.sub_workers.find(name);
        if (it == worker.sub_workers.end())
            throw Error(ErrorKind::NotFound, "SubWorker '" + name + "' is not registered on this Worker");
        fn = it->second;
    }
    return impl_->SubmitSub(name, std::move(fn), std::move(args), options);
}

uint64_t HostGraph::Sub(const std::string& name, SubWorkerFn fn, std::vector<TensorArg> args, SubOptions options) {
    const auto lock = LiveGraph(impl_, "Sub").EnterSubmit("Sub");
    if (!fn) throw Error(ErrorKind::InvalidArgument, "SubWorker task '" + name + "': no function");
    return impl_->SubmitSub(name, std::move(fn), std::move(args), options);
}

struct RunHandle::State {
    std::shared_ptr<host::Dispatcher> dispatcher;
    std::shared_ptr<host::RunState> run;
};

RunHandle::RunHandle() = default;
RunHandle::RunHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}
RunHandle::RunHandle(RunHandle&& o) noexcept : state_(std::move(o.state_)), waited_(o.waited_.exchange(false)) {}
RunHandle& RunHandle::operator=(RunHandle&& o) noexcept {
    if (this != &o) {
        RunHandle old(std::move(*this));  // waits for the run it had, as destruction would
        state_ = std::move(o.state_);
        waited_ = o.waited_.exchange(false);
    }
    return *this;
}
RunHandle::~RunHandle() {
    if (!state_ || waited_.load() || state_->dispatcher->ForkedAway()) return;  // a forked child has none of its threads
    if (state_->dispatcher->FreeingHere()) return;  // the run ends on its own; waiting here would hold the lock it needs
    try {
        state_->dispatcher->Wait(*state_->run);
    } catch (...) {  // the error belongs to whoever waits; a dropped handle only waits
    }
}

std::vector<HostTensor> RunHandle::Wait(const ProgressCallback& progress) {
    const auto empty = [] {
        return Error(ErrorKind::InvalidArgument, "RunHandle: empty (waited for already, moved from, or default)");
    };
    if (!state_ || waited_.load()) throw empty();
    state_->dispatcher->CheckSameProcess("RunHandle::Wait");
    // Refused before the handle counts as waited: a task of the run
    // waiting on it gets the error, and the handle still waits later.
    state_->dispatcher->CheckNotPartOf(*state_->run);
    if (waited_.exchange(true)) throw empty();  // another thread's Wait came first
    return state_->dispatcher->Wait(*state_->run, progress);
}

bool RunHandle::Done() const {
    if (!state_) return true;
    state_->dispatcher->CheckSameProcess("RunHandle::Done");
    return state_->dispatcher->Done(*state_->run);
}

bool RunHandle::WaitFor(std::chrono::nanoseconds timeout) {
    if (!state_) throw Error(ErrorKind::InvalidArgument, "RunHandle: empty (moved from, or default)");
    state_->dispatcher->CheckSameProcess("RunHandle::WaitFor");
    return state_->dispatcher->WaitFor(*state_->run, timeout);
}

std::vector<TaskRecord> RunHandle::Report() {
    if (!state_) throw Error(ErrorKind::InvalidArgument, "RunHandle: empty (moved from, or default)");
    state_->dispatcher->CheckSameProcess("RunHandle::Report");
    return state_->dispatcher->Report(*state_->run);
}


Worker::Worker(Host& host, DistributedConfig config) {
    auto registry = std::make_shared<ChipRegistry>();
    auto executors = host::OpenLocalChipExecutors(host, config, registry);
    *this = Worker(std::move(executors), std::move(config), std::move(registry));
}

Worker::Worker(std::vector<std::unique_ptr<ChipExecutor>> executors, DistributedConfig config,
               std::shared_ptr<ChipRegistry> registry)
    : impl_(std::make_unique<Impl>()) {
    DistributedConfig checked = config;
    checked.device_ids = {0};  // the executors are the devices here
    Validate(checked);
    if (executors.empty()) throw Error(ErrorKind::InvalidArgument, "Worker: no chip executors");
    for (size_t i = 0; i < executors.size(); ++i)
        if (!executors[i]) throw Error(ErrorKind::InvalidArgument, "Worker: chip executor " + std::to_string(i) + " is null");
    if (!registry) throw Error(ErrorKind::InvalidArgument, "Worker: no chip registry");
    impl_->config = std::move(config);
    impl_->registry = std::move(registry);
    impl_->dispatcher = std::make_shared<host::Dispatcher>(std::move(executors), impl_->config);
}

namespace {
Worker::Impl& Live(const std::unique_ptr<Worker::Impl>& impl, const char* call) {
    Worker::Impl& live = detail::LiveState(impl, call);
    live.dispatcher->CheckSameProcess(call);
    return live;
}
}  // namespace

namespace {
// Frees a Worker's state. From one of its own SubWorkers, chip functions or
// orchestration functions, freeing it waits for the runs in flight, the
// calling task's too, so it would wait for itself for good: it is freed on
// a thread of its own instead, once those runs have ended (a destructor
// cannot refuse). As the Orchestrator does from its own host kernels.
void Destroy(std::unique_ptr<Worker::Impl> impl) noexcept {
    // In a child forked since the Worker was created, its threads are the
    // parent's: freeing the state would wait for them for good. The child's
    // copy is left as it is (its exit frees it).
    if (impl && impl->dispatcher && impl->dispatcher->ForkedAway()) {
        (void)impl.release();
        return;
    }
    if (impl && impl->dispatcher && impl->dispatcher->CallerIsPartOf()) {
        Worker::Impl* state = impl.get();
        state->dispatcher->MarkDevicesClosing();  // a new Worker opening them waits for that
        try {
            std::thread([state] { delete state; }).detach();
            (void)impl.release();
            return;
        } catch (const std::system_error&) {
            // No thread to spare: the wait below is what it was.
        }
    }
    impl.reset();
}
}  // namespace

Worker::Worker(Worker&& other) noexcept : impl_(std::move(other.impl_)) {}
Worker& Worker::operator=(Worker&& other) noexcept {
    if (this != &other) {
        Destroy(std::move(impl_));
        impl_ = std::move(other.impl_);
    }
    return *this;
}
Worker::~Worker() { Destroy(std::move(impl_)); }

void Worker::RegisterKernel(int32_t kernel_id, const std::vector<uint8_t>& program) {
    Impl& impl = Live(impl_, "Worker::RegisterKernel");
    host::Dispatcher& dispatcher = *impl.dispatcher;
    const std::string what = "Worker::RegisterKernel: kernel " + std::to_string(kernel_id);
    if (program.empty()) throw Error(ErrorKind::InvalidArgument, what + ": the program is empty");
    if (kernel_id < 0) throw Error(ErrorKind::InvalidArgument, what + ": a kernel id must be >= 0");
    // Decoded and checked first, as pto_register_program does: a bad
    // program is refused here, not by the device for every chip task of it,
    // and what is left to fail on a device is the device itself.
    orchestration::CheckedSlots(program, what + "'s program");
    std::lock_guard lock(impl.register_mu);
    if (impl.kernels.count(kernel_id)) throw Error(ErrorKind::InvalidArgument, what + " is already registered");
    // A device that fails (out of memory, lost) leaves the id unrecorded;
    // the devices that loaded it take the same program again as done.
    for (size_t d = 0; d < dispatcher.device_count(); ++d) dispatcher.executor(d).LoadKernel(kernel_id, program);
    impl.kernels.insert(kernel_id);
}

void Worker::RegisterChipFunction(const std::string& name, ChipFunction fn) {
    if (!fn) throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "': empty function");
    Live(impl_, "Worker::RegisterChipFunction").registry->Add(name, {std::move(fn), nullptr});
}

void Worker::RegisterChipFunction(const std::string& name, pto_orchestration_fn fn) {
    if (!fn) throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "': null function");
    Live(impl_, "Worker::RegisterChipFunction").registry->Add(name, {{}, fn});
}

void Worker::RegisterChipPlan(const std::string& name, const CompilerOutput& plan) {
    Impl& impl = Live(impl_, "Worker::RegisterChipPlan");
    // All or nothing: the name is added once every device has loaded the
    // plan, so a plan a device refuses leaves neither the name nor a loaded
    // plan behind (a later registration of the name works), and no chip
    // task finds the name before the plan is there.
    if (name.empty()) throw Error(ErrorKind::InvalidArgument, "chip function: empty name");
    std::lock_guard lock(impl.register_mu);
    if (impl.registry->Find(name))
        throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "' is already registered");
    host::Dispatcher& dispatcher = *impl.dispatcher;
    size_t loaded = 0;
    try {
        for (; loaded < dispatcher.device_count(); ++loaded) dispatcher.executor(loaded).LoadPlan(name, plan);
        impl.registry->Add(name, {{}, nullptr, true});
    } catch (...) {
        for (size_t d = 0; d < loaded; ++d)
            if (auto* local = dynamic_cast<host::LocalChipExecutor*>(&dispatcher.executor(d))) local->UnloadPlan(name);
        throw;
    }
}

void Worker::RegisterSubWorker(const std::string& name, SubWorkerFn fn) {
    if (name.empty() || !fn) throw Error(ErrorKind::InvalidArgument, "SubWorker: empty name or function");
    Impl& impl = Live(impl_, "Worker::RegisterSubWorker");
    std::lock_guard lock(impl.sub_mu);
    if (!impl.sub_workers.emplace(name, std::move(fn)).second)
        throw Error(ErrorKind::InvalidArgument, "SubWorker '" + name + "' is already registered");
}

std::vector<HostTensor> Worker::Run(const HostProgram& program, std::vector<HostTensor> args,
                                    const ProgressCallback& progress) {
    SPYRE_TRACE_SCOPE("host_run");
    Live(impl_, "Worker::Run");  // Submit's refusal would name Submit
    return Submit(program, std::move(args)).Wait(progress);
}

RunHandle Worker::Submit(const HostProgram& program, std::vector<HostTensor> args) {
    SPYRE_TRACE_SCOPE("host_submit");
    Impl& impl = Live(impl_, "Worker::Submit");
    const std::string what = "host program '" + program.name + "'";
    if (!program.fn) throw Error(ErrorKind::InvalidArgument, what + ": no orchestration function");
    // Checked before the sum: a count near SIZE_MAX would wrap it.
    if (program.num_inputs > kMaxProgramTensors || program.outputs.size() > kMaxProgramTensors)
        throw Error(ErrorKind::InvalidArgument, what + " declares " + std::to_string(program.num_inputs) + " input(s) and " +
                                                    std::to_string(program.outputs.size()) + " output(s): at most " +
                                                    std::to_string(kMaxProgramTensors) + " of each");
    const size_t all = program.num_inputs + program.outputs.size();
    // An output's tensor as the program declares it; a bad spec names the
    // program and the output.
    const auto declared = [&](size_t o) {
        try {
            return HostTensor::Zeros(program.outputs[o].shape, program.outputs[o].dtype);
        } catch (const Error& e) {
            throw Error(e.kind(), what + ": output " + std::to_string(o) + ": " + e.message());
        }
    };
    if (args.size() == program.num_inputs && !program.outputs.empty()) {
        for (size_t o = 0; o < program.outputs.size(); ++o) args.push_back(declared(o));  // return style
    } else if (args.size() != all) {
        throw Error(ErrorKind::InvalidArgument, what + " takes " + std::to_string(program.num_inputs) + " input(s) and " +
                                                    std::to_string(program.outputs.size()) + " output(s): got " +
                                                    std::to_string(args.size()) + " tensor(s)");
    }
    for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i]) throw Error(ErrorKind::InvalidArgument, what + ": argument " + std::to_string(i) + " is empty");
        if (i < program.num_inputs) continue;
        const auto& spec = program.outputs[i - program.num_inputs];
        if (args[i].shape() != spec.shape || args[i].dtype() != spec.dtype)
            throw Error(ErrorKind::InvalidArgument, what + ": output " + std::to_string(i - program.num_inputs) + " is " +
                                                        args[i].Describe() + ", the program writes " +
                                                        declared(i - program.num_inputs).Describe());
    }
    auto owned = std::make_unique<host::RunState>();
    owned->name = program.name;
    owned->window = size_t(impl.config.max_tasks_in_flight);
    owned->outputs.assign(args.begin() + long(program.num_inputs), args.end());
    // Held here: the orchestration function may destroy the Worker, whose
    // state then lives until the run ends (Destroy), not past the Seal.
    const std::shared_ptr<host::Dispatcher> dispatcher = impl.dispatcher;
    std::shared_ptr<host::RunState> run = dispatcher->Begin(std::move(owned));
    const auto graph_impl = std::make_shared<HostGraph::Impl>(impl, *run, program.name);
    HostGraph graph(graph_impl);
    std::optional<TaskFailureInfo> failed;
    try {
        host::Dispatcher::Submitting submitting(*dispatcher, *run);
        program.fn(graph, args);
    } catch (...) {
        // It fails the run as a failing task would (seed 003 q5). What it
        // submitted before it threw runs on (or is skipped behind a failed
        // task); nothing more is submitted.
        TaskFailureInfo f;
        f.task = f.function = program.name;
        f.task_id = impl.next_task.fetch_add(1);
        f.level = Level::Host;
        f.orchestrator = true;
        host::SetCause(f);
        failed = std::move(f);
    }
    graph_impl->Close();
    dispatcher->Seal(*run, std::move(failed));
    return RunHandle(std::make_shared<RunHandle::State>(RunHandle::State{dispatcher, std::move(run)}));
}

size_t Worker::device_count() const { return Live(impl_, "Worker::device_count").dispatcher->device_count(); }
namespace {
// One of the Worker's devices, or InvalidArgument naming the call.
host::Dispatcher& CheckedDevice(const std::unique_ptr<Worker::Impl>& impl, size_t index, const char* call) {
    host::Dispatcher& d = *Live(impl, (std::string("Worker::") + call).c_str()).dispatcher;
    if (index >= d.device_count())
        throw Error(ErrorKind::InvalidArgument, std::string("Worker::") + call + ": device " + std::to_string(index) +
                                                    ", but the Worker has " + std::to_string(d.device_count()) +
                                                    " device(s)");
    return d;
}
}  // namespace

std::string Worker::DescribeDevice(size_t index) const {
    return CheckedDevice(impl_, index, "DescribeDevice").executor(index).Describe();
}
unsigned Worker::ChipTasksAtOnce(size_t index) const { return CheckedDevice(impl_, index, "ChipTasksAtOnce").room(index); }
Worker::DeviceStats Worker::Stats(size_t device) const { return CheckedDevice(impl_, device, "Stats").Stats(device); }
Worker::Held Worker::HeldNow() const { return Live(impl_, "Worker::HeldNow").dispatcher->HeldNow(); }
const DistributedConfig& Worker::config() const { return Live(impl_, "Worker::config").config; }

}  // namespace spyre
