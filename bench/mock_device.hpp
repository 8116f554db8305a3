// SPDX-License-Identifier: Apache-2.0
// A private spyre-mockdev and its first function, opened at the driver level:
// the command ring and the function's device memory mapped, for benchmarks
// that place programs and data in device memory themselves.
#pragma once

// Below a Device: the driver tier, which spyre.hpp leaves out.
#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/spyre.hpp"

namespace spyre::bench {

struct MockDevice {
    explicit MockDevice(driver::MockOptions options)
        : daemon(driver::MockDaemon::Start(std::move(options))),
          fn(driver::Function::Open(driver::DeviceRoot(daemon.mount()).Find("0"))),
          ring(fn),
          mem(fn.MapRegion(SPYRE_REGION_DEVMEM)) {}
    driver::MockDaemon daemon;
    driver::Function fn;
    driver::CommandRing ring;
    driver::MappedRegion mem;
};

}  // namespace spyre::bench
