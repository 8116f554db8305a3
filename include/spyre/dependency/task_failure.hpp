// SPDX-License-Identifier: Apache-2.0
// The one record of a failed task. The dependency engine's two users share
// it: a task that fails makes one, and every task skipped because it
// depends on that task carries it, shared, as its root cause
// (libspyre/dependency/fan_out.hpp). The host level reports its failed
// tasks with it (HostRunError::failures, spyre/host/worker.hpp); the
// orchestration runtime (seed 004) reports every failed or skipped task
// with it (Orchestrator::Failures: a skipped task's record names itself
// and carries its root's kind, cause and code).
#pragma once

#include <cstdint>
#include <string>

#include "spyre/error.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// Where a task runs: a core group (a task of the orchestration runtime), a
// chip (a host-level chip task) or the host (a SubWorker).
enum class Level : uint8_t { CoreGroup, Chip, Host };
const char* ToString(Level level) noexcept;

// One failed (or skipped) task (q5): who, where, what, why.
struct TaskFailureInfo {
    std::string task;      // the task's name
    uint64_t task_id = 0;
    Level level = Level::Chip;
    std::string device;    // the chip task's device; "" for a SubWorker
    std::string function;  // chip function or SubWorker name
    ErrorKind kind = ErrorKind::Internal;  // the cause's kind
    std::string cause;     // the cause's message
    uint32_t device_code = 0;  // SPYRE_ERR_* when the device reported one
    // device_code is the host's own code, not a SPYRE_ERR_*: what a host
    // kernel (a task of the orchestration runtime run on the host) returned,
    // or the code an EXTERNAL task was failed with (pto_task_fail).
    bool host_kernel_code = false;
    // The host orchestration function itself threw (level HOST, task and
    // function: the program's name); what it had submitted still ran.
    bool orchestrator = false;
    // The kernel that failed, when one did (-1: none known): an orchestration
    // task's, or the one a failed chip function's runtime reported.
    int32_t kernel_id = -1;
    // Skipped, not run: a task it depends on failed. kind, cause and
    // device_code are then that task's (the root cause's), root_* name it.
    bool skipped = false;
    // The failed task behind this record: a failed task's own id and kernel.
    int64_t root_task_id = -1;
    int32_t root_kernel_id = -1;
    // The host level: the run the failed task belongs to (HostProgram::name).
    // A run whose task was skipped for a failure of an earlier run in flight
    // lists that failure, with the earlier run's name here. "" elsewhere.
    std::string run;
};

}  // namespace spyre

SPYRE_API_END
