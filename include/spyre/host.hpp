// SPDX-License-Identifier: Apache-2.0
// Host-level (level 3) orchestration over many devices (seed 003): the
// Worker, its chip tasks and SubWorkers, the host tensors they share, and
// the level-4 MultiHostWorker over several ranks (docs/multihost.md).
// docs/host.md, "Host-level orchestration (level 3)".
#pragma once

#include "spyre/device/host.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/chip_functions.hpp"
#include "spyre/host/host_tensor.hpp"
#include "spyre/host/multihost_worker.hpp"
#include "spyre/host/worker.hpp"
