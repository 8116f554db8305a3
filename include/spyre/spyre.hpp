// SPDX-License-Identifier: Apache-2.0
// What an app includes: the app level of libspyre. Host and Device, streams
// and events, device memory and copies, tensors, plans and launches, the
// kernel builder, the orchestration runtime (Orchestrator, pto_*), the
// host-level Worker, errors and the version. It includes nothing of the
// driver level (spyre/driver/*.hpp: functions, CB rings, task queues, DMA
// queues, the mock daemon), which bring-up tools include themselves
// (scripts/check_layers.py keeps it so). docs/building.md lists the tiers.
#pragma once

#include "spyre/common/progress.hpp"
#include "spyre/common/progress_line.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/device/device.hpp"
#include "spyre/device/host.hpp"
#include "spyre/error.hpp"
#include "spyre/host.hpp"
#include "spyre/launch/program.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/launch/tiling.hpp"
#include "spyre/memory/allocator.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/memory/device_handle.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/stream/scheduler.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/tensor/pack.hpp"
#include "spyre/tensor/scales.hpp"
#include "spyre/tensor/spyre_tensor.hpp"
#include "spyre/version.hpp"
