// SPDX-License-Identifier: Apache-2.0
//
// One task descriptor (spyre_task.h) validated and run on one core: the
// descriptor's own fields here, everything it points at (program, argument
// table, relocated operands) by the core's ProgramExecutor, exactly as a
// LAUNCH's program is checked. Shared by the task server and the fuzz target.
#pragma once

#include <cstdint>

#include "execution/budget.hpp"
#include "execution/program_executor.hpp"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

inline bool TaskReservedZero(const spyre_task_desc& d) {
    return (d.flags & ~SPYRE_TASK_F_DEFINED) == 0 && d.reserved0 == 0 && d.reserved[0] == 0 && d.reserved[1] == 0 &&
           d.reserved[2] == 0;
}

// The task's completion status (SPYRE_ERR_*).
inline uint16_t ExecuteTask(ProgramExecutor& core, const spyre_task_desc& d, const Budget& budget) {
    if (!TaskReservedZero(d)) return SPYRE_ERR_RESERVED_NONZERO;
    return core.RunTask(d.program_addr, d.program_size, d.args_addr, d.arg_count, budget).status;
}

}  // namespace spyre::mockdev
