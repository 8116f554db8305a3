// SPDX-License-Identifier: Apache-2.0
// What the runtime's own layers (tensors, launches, plans, the orchestration
// runtime, the host level) and the tests reach behind a Device or a
// FlexStream: the device's core, its opened function and its task queues.
// Private to libspyre: apps see a Device's public face only, and the driver
// level (spyre/driver/*.hpp) opens its own functions.
#pragma once

#include <cstdint>
#include <memory>

#include "spyre/device/device.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/stream/flex_stream.hpp"

namespace spyre {

class DeviceInternals {
public:
    // Both throw InvalidArgument for a moved-from Device or stream.
    static const std::shared_ptr<DeviceCore>& Core(const Device& device);
    // The device a stream belongs to.
    static const std::shared_ptr<DeviceCore>& Core(const FlexStream& stream);
    static driver::Function& Function(const Device& device);
    // The function's core groups, one task queue each (uapi/spyre_task.h);
    // none on a function of a contract without task queues.
    static const driver::TaskTopology& TaskTopology(const Device& device);
    // Task queue `group`, for one user's exclusive use while the returned
    // queue lives (the orchestration runtime's device tasks go through the
    // queues it takes here). Throws InvalidArgument for a group the device
    // does not have, Busy while another user holds the queue or it has
    // tasks in flight.
    static std::unique_ptr<driver::TaskQueue> TakeTaskQueue(const Device& device, uint32_t group);
};

}  // namespace spyre
