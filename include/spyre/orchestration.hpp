// SPDX-License-Identifier: Apache-2.0
// The orchestration runtime (seed 004): its C++ API (spyre::Orchestrator)
// and the C API it shares a runtime with (pto_*). docs/orchestration.md.
#pragma once

#include "spyre/orchestration/orchestrator.hpp"
#include "spyre/pto.h"
