// SPDX-License-Identifier: Apache-2.0
//
// One CB taken from a task queue (spyre_task.h) validated and run on one
// core: the CB's fields by the checks every queue shares (cb_fields.hpp), a
// TASK's program, argument table and relocated operands by the core's
// ProgramExecutor, exactly as a LAUNCH's program is checked. Shared by the
// task queues and the fuzz target.
#pragma once

#include <cstdint>

#include "execution/budget.hpp"
#include "execution/cb_fields.hpp"
#include "execution/program_executor.hpp"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

// A TASK's after list (spyre_cb_task): its length, and the words past it
// and `reserved` zero. The queue waits for the tasks it names before the
// task reaches a core (TaskQueues); this checks only the fields.
inline uint16_t ValidateTaskAfter(const spyre_cb_task& t) {
    if (t.after_count > SPYRE_TASK_MAX_AFTER) return SPYRE_ERR_BAD_DEPENDENCY;
    for (uint32_t i = t.after_count; i < SPYRE_TASK_MAX_AFTER; ++i)
        if (t.after[i] != 0) return SPYRE_ERR_RESERVED_NONZERO;
    return t.reserved == 0 ? SPYRE_ERR_NONE : SPYRE_ERR_RESERVED_NONZERO;
}

// The CB's completion status (SPYRE_ERR_*). Nothing runs unless every field
// passed.
inline uint16_t ExecuteTaskCb(ProgramExecutor& core, const spyre_cb& cb, const Budget& budget) {
    if (uint16_t status = ValidateCbHeader(cb, 0, CbQueue::Task); status != SPYRE_ERR_NONE) return status;
    if (cb.opcode == SPYRE_OP_NOP) return ReservedArgsZero(cb, 0) ? SPYRE_ERR_NONE : SPYRE_ERR_RESERVED_NONZERO;
    const spyre_cb_task& t = cb.u.task;
    if (uint16_t status = ValidateTaskAfter(t); status != SPYRE_ERR_NONE) return status;
    return core.RunTask(t.program_addr, t.program_size, t.args_addr, t.arg_count, budget).status;
}

}  // namespace spyre::mockdev
