// SPDX-License-Identifier: Apache-2.0
// The small named things of level 3: access and level names, the chip
// function registry, the run error, and the config check.
#include <algorithm>
#include <string>
#include <string_view>

#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"

namespace spyre {

const char* ToString(Access access) noexcept {
    switch (access) {
    case Access::In: return "in";
    case Access::Out: return "out";
    case Access::InOut: return "inout";
    }
    return "?";
}

const char* ToString(TaskState state) noexcept {
    switch (state) {
    case TaskState::Done: return "done";
    case TaskState::Failed: return "failed";
    case TaskState::Skipped: return "skipped";
    }
    return "?";
}

const char* ToString(ChipRuntime runtime) noexcept {
    switch (runtime) {
    case ChipRuntime::TensorMapAndRingBuffer: return "tensormap_and_ringbuffer";
    case ChipRuntime::TensorMapAndRingBufferLockFree: return "tensormap_and_ringbuffer_lockfree";
    }
    return "?";
}

ChipRuntime ChipRuntimeFromString(std::string_view name) {
    for (ChipRuntime r : {ChipRuntime::TensorMapAndRingBuffer, ChipRuntime::TensorMapAndRingBufferLockFree})
        if (name == ToString(r)) return r;
    throw Error(ErrorKind::InvalidArgument, "runtime '" + std::string(name) +
                                                "' is unknown (tensormap_and_ringbuffer, tensormap_and_ringbuffer_lockfree)");
}

void ChipRegistry::Add(const std::string& name, Entry entry) {
    if (name.empty()) throw Error(ErrorKind::InvalidArgument, "chip function: empty name");
    if (!entry.cpp && !entry.pto && !entry.plan) throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "': no function");
    std::lock_guard lock(mu_);
    if (!entries_.emplace(name, std::move(entry)).second)
        throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "' is already registered");
}

const ChipRegistry::Entry* ChipRegistry::Find(const std::string& name) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;  // entries are never removed
}

std::vector<std::string> ChipRegistry::List() const {
    std::lock_guard lock(mu_);
    std::vector<std::string> names;
    for (const auto& [name, e] : entries_) names.push_back(name);
    return names;
}

std::string ChipRegistry::Names() const {
    std::lock_guard lock(mu_);
    std::string s;
    for (const auto& [name, e] : entries_) s += (s.empty() ? "" : ", ") + name;
    return s.empty() ? "none" : s;
}

namespace {

std::string Describe(const std::string& run, const std::vector<TaskFailureInfo>& failures,
                     const std::vector<std::string>& skipped) {
    const TaskFailureInfo& f = failures.front();
    const char* what = f.level == Level::Chip ? "chip function '"
                       : f.orchestrator       ? "host orchestration function '"
                                              : "SubWorker '";
    std::string s = "run '" + run + "': " + ToString(f.level) + " task '" + f.task + "'";
    if (!f.run.empty() && f.run != run) s += " of run '" + f.run + "'";  // an earlier run's failure skipped this one's
    s += std::string(" (") + what + f.function + "'";
    if (!f.device.empty()) s += " on " + f.device;
    // The device or host code is the error's context (ContextOf), which
    // what() shows once; here it repeated, once more per nested run.
    s += ") failed: " + f.cause;
    if (failures.size() > 1) s += "; " + std::to_string(failures.size() - 1) + " more task(s) failed";
    if (!skipped.empty()) {
        // A few names: a failure at the head of a long loop skips thousands,
        // and a message of all of them buries its cause (skipped() has them).
        constexpr size_t kNamed = 16;
        s += "; skipped " + std::to_string(skipped.size()) + " downstream task(s):";
        for (size_t i = 0; i < std::min(skipped.size(), kNamed); ++i) s += " " + skipped[i];
        if (skipped.size() > kNamed) s += " and " + std::to_string(skipped.size() - kNamed) + " more (skipped() lists them)";
    }
    return s;
}

ErrorContext ContextOf(const TaskFailureInfo& f) {
    ErrorContext c;
    c.device = f.device;
    c.device_code = f.device_code;
    c.host_kernel_code = f.host_kernel_code;
    c.op_index = f.task_id;
    if (f.kernel_id >= 0) c.kernel_id = f.kernel_id;
    return c;
}

}  // namespace

HostRunError::HostRunError(std::string run, std::vector<TaskFailureInfo> failures, std::vector<std::string> skipped,
                           std::vector<TaskRecord> report)
    : Error(failures.front().kind, Describe(run, failures, skipped), ContextOf(failures.front())),
      failures_(std::move(failures)),
      skipped_(std::move(skipped)),
      report_(std::move(report)) {}

void Validate(const DistributedConfig& c) {
    auto bad = [](const std::string& what) { throw Error(ErrorKind::InvalidArgument, "DistributedConfig: " + what); };
    if (c.device_ids.empty()) bad("device_ids is empty (name at least one device)");
    for (size_t i = 0; i < c.device_ids.size(); ++i) {
        if (c.device_ids[i] < 0) bad("device_ids[" + std::to_string(i) + "] is " + std::to_string(c.device_ids[i]));
        for (size_t j = 0; j < i; ++j)
            if (c.device_ids[j] == c.device_ids[i])
                bad("device_ids names device " + std::to_string(c.device_ids[i]) + " twice");
    }
    if (c.num_sub_workers < 0 || c.num_sub_workers > 256)
        bad("num_sub_workers is " + std::to_string(c.num_sub_workers) + " (0..256)");
    if (c.runtime != ChipRuntime::TensorMapAndRingBuffer && c.runtime != ChipRuntime::TensorMapAndRingBufferLockFree)
        bad("runtime " + std::to_string(unsigned(c.runtime)) + " is unknown (ChipRuntime::TensorMapAndRingBuffer, "
            "ChipRuntime::TensorMapAndRingBufferLockFree)");
    if (c.block_dim < 1) bad("block_dim is " + std::to_string(c.block_dim) + " (>= 1)");
    if (c.aicpu_thread_num < 1 || c.aicpu_thread_num > 64)
        bad("aicpu_thread_num is " + std::to_string(c.aicpu_thread_num) + " (1..64)");
    if (c.chip_heap_bytes < 4096) bad("chip_heap_bytes is " + std::to_string(c.chip_heap_bytes) + " (>= 4096)");
    if (c.chip_tasks_per_device < 0)
        bad("chip_tasks_per_device is " + std::to_string(c.chip_tasks_per_device) + " (0: automatic, or >= 1)");
    if (c.max_tasks_in_flight < 1 || c.max_tasks_in_flight > (1 << 20))
        bad("max_tasks_in_flight is " + std::to_string(c.max_tasks_in_flight) + " (1..1048576)");
}

}  // namespace spyre
