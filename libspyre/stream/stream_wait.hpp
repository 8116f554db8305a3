// SPDX-License-Identifier: Apache-2.0
// Internal: which thread is the scheduler's (waits there would deadlock).
#pragma once

#include "spyre/common/futex.hpp"

namespace spyre {

// True on the scheduler thread (host callbacks run there).
bool SchedulerThreadActive();

}  // namespace spyre
