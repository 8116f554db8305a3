// SPDX-License-Identifier: Apache-2.0
// Chip tasks (seed 003's CHIP level) and what runs them. A chip function is
// registered by name and called with tensor arguments; a ChipExecutor runs a
// named call on one device (card or VF), moving the host tensors' bytes to
// the device and the outputs back. The scheduler sees only this interface,
// so a device of another MPI rank can be one more executor later.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/host/host_tensor.hpp"
#include "spyre/pto.h"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class Device;
class Orchestrator;
struct CompilerOutput;

enum class Access : uint8_t { In, Out, InOut };
const char* ToString(Access access) noexcept;

// A task's tensor argument: a tensor (or row view) and how the task uses it.
struct TensorArg {
    HostTensor tensor;
    Access access = Access::In;
};
inline TensorArg In(HostTensor t) { return {std::move(t), Access::In}; }
inline TensorArg Out(HostTensor t) { return {std::move(t), Access::Out}; }
inline TensorArg InOut(HostTensor t) { return {std::move(t), Access::InOut}; }

// What a chip function sees: the device's orchestration runtime (seed 004),
// its arguments as addresses in the device's memory (what TaskParam and
// pto_submit_task take), in argument order, and the cores it may spread over.
struct ChipContext {
    Orchestrator& orch;
    Device& device;
    std::vector<void*> args;        // device-memory addresses as this process maps them
    std::vector<uint64_t> bytes;    // each argument's size
    std::vector<std::vector<int64_t>> shapes;
    int block_dim = 1;              // DistributedConfig::block_dim: core tasks to split the work into
    // How the task uses each argument. An In argument's device copy may be
    // kept for later calls that read the same bytes: never write it.
    std::vector<Access> access;
    std::vector<DType> dtypes;  // each argument's element type
    // Keeps args' device memory: a copy held past the call (a language
    // binding's views that may outlive it) makes the runtime set this
    // call's device copies aside for the holder. It neither reuses nor
    // frees them, and keeps them mapped, until the last copy goes.
    std::shared_ptr<const void> args_memory;
};
// A chip function in C++: submits device tasks on ctx.orch (the runtime
// opens a scope around it and waits for its tasks after it returns).
using ChipFunction = std::function<void(ChipContext& ctx)>;

// The chip functions a Worker knows, by name. Seed 004 orchestration
// functions (pto_orchestration_fn) get args[i] = the address of argument i.
class ChipRegistry {
public:
    struct Entry {
        ChipFunction cpp;
        pto_orchestration_fn pto = nullptr;
        bool plan = false;  // an ExecutionPlan each executor loaded under this name
    };
    void Add(const std::string& name, Entry entry);  // InvalidArgument: empty name or already registered
    // nullptr when unknown.
    const Entry* Find(const std::string& name) const;
    std::string Names() const;  // "chip_add, chip_sub"
    std::vector<std::string> List() const;  // sorted

private:
    mutable std::mutex mu_;
    std::map<std::string, Entry> entries_;
};

// One argument of a chip call. Whether a device copy kept from an earlier
// call still holds the host bytes is the executor's to check (a caller may
// write host memory through a kept pointer, unseen by the runtime).
struct ChipArg {
    TensorArg arg;
    // Tasks that had written the tensor's storage (any part of it), ended,
    // when the call was placed (see ChipCall::run).
    uint64_t writes = 0;
};

struct ChipCall {
    std::string task_name;
    std::string function;
    std::vector<ChipArg> args;
    int block_dim = 1;
    // `function` as the Worker's registry resolved it when the task was
    // recorded (entries are never removed), so a local executor need not
    // look it up again per call; nullptr: look it up by name.
    const ChipRegistry::Entry* entry = nullptr;
    // The call's run: a number no other run in the process has; 0: unknown.
    // Two calls of one run that see the same ChipArg::writes of a tensor,
    // the second submitted before the first read the tensor's host bytes
    // (see `submitted`), see the same bytes: no task wrote them between,
    // the program wrote them before both, and a write after the second's
    // submission races with a task in flight. An executor may then read a
    // copy the first made current without checking it again.
    uint64_t run = 0;
    // The arguments' storages live for this call only (a served remote
    // call's message buffers): an executor need not keep device copies of
    // them for later calls, nor hash their bytes to reuse such copies.
    bool one_shot = false;
    // When the program submitted the task, on the process's clock of host
    // byte reads (internal to libspyre): a copy read from the host bytes
    // at a later tick holds what the program wrote before submitting it,
    // for example between two chip tasks of one run. 0: unknown.
    uint64_t submitted = 0;
};

// What a call moved, for the locality tests and the docs.
struct ChipCallStats {
    uint64_t bytes_uploaded = 0;
    uint64_t bytes_reused = 0;  // In/InOut bytes already current on the device
    uint64_t bytes_downloaded = 0;
    // On the device clock (DeviceClockNs): when the function started
    // (uploads done) and the device had completed what it submitted
    // (downloads next), for the run's report and the trace's nested
    // spans; 0: not known.
    uint64_t run_start_ns = 0;
    uint64_t run_end_ns = 0;
    // Host bytes hashed to check a kept copy before reusing it. Last, so
    // code that fills the fields above in order keeps its meaning.
    uint64_t bytes_checked = 0;
};

class ChipExecutor {
public:
    virtual ~ChipExecutor() = default;
    // "0000:01:00.1": the device in messages and errors.
    virtual std::string Describe() const = 0;
    // A device program every later call may use as `kernel_id` on this
    // device's orchestration runtime.
    virtual void LoadKernel(int32_t kernel_id, const std::vector<uint8_t>& program) = 0;
    // An ExecutionPlan (seed 001) a call may name as its function: its
    // tensors (tensor_input_metadata order) are the call's arguments, and
    // its operations run on one stream of the device.
    virtual void LoadPlan(const std::string& name, const CompilerOutput& plan) = 0;
    // Calls Run may take at once, from different threads (the scheduler
    // gives the device that many lanes).
    virtual unsigned Concurrency() const { return 1; }
    // Served by another rank: every call ships its inputs over the network
    // (placement prefers this rank's devices, and never counts its copies
    // as current).
    virtual bool Remote() const { return false; }
    // Runs `call` to completion: the inputs are on the device before the
    // function runs, the outputs in their host tensors after. Calls running
    // at once never write overlapping tensor ranges, and never read a range
    // another of them writes (the scheduler orders those). Throws
    // spyre::Error (DeviceError with the device's code when the device
    // refused a task; NotFound for an unknown function).
    virtual ChipCallStats Run(const ChipCall& call) = 0;
};

}  // namespace spyre
SPYRE_API_END
