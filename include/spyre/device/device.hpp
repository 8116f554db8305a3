// SPDX-License-Identifier: Apache-2.0
// Device: one opened function with everything the runtime needs on it — the
// allocator (PF or VF mode), the DMA engine, the scheduler and its default
// stream. Streams, events, tensors and loaded plans keep the device's core
// alive, so destruction order cannot leave them dangling.
#pragma once

#include <memory>
#include <string>

#include "spyre/memory/allocator.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/stream/scheduler.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

namespace driver {
class DeviceEnvironment;
struct FunctionInfo;
}  // namespace driver
class SPYRE_INTERNAL LocalHostBackend;

struct DeviceOptions {
    // Function to open: index or PCI address; empty = the environment's
    // default (FLEX_DEVICE=PF|VF, see device_environment.hpp).
    std::string function;
    // Allocator mode follows the function kind unless set.
    std::optional<AllocatorMode> allocator_mode;
    AllocatorOptions allocator;
    SchedulerOptions scheduler;
    driver::DmaOptions dma;
    driver::MockOptions embedded_mock;  // used when the environment starts a private mock
};

class Device {
public:
    // Finds the device as DeviceEnvironment does (starting a private mock
    // when there is none), opens the function and starts the scheduler.
    // The environment is this Device's own; to open several functions of one
    // environment (one private mock for all), use spyre::Host (host.hpp).
    static Device Open(DeviceOptions options = {});

    Device(Device&&) noexcept;
    Device& operator=(Device&&) noexcept;
    ~Device();

    SpyreAllocator& allocator();
    // `bytes` of device memory, freed when the buffer goes (after the work
    // queued on this device's streams by then).
    DeviceBuffer AllocateBuffer(uint64_t bytes);
    DMAEngine& dma();
    Scheduler& scheduler();
    const std::string& pci_address() const;
    // Card and function index of the opened function: what its handles,
    // tensors, plans and events are tagged with.
    const DeviceId& id() const;

    // The default stream (index 0, default priority): an ordinary stream
    // that exists for the device's life. It does not synchronise with other
    // streams implicitly (CUDA's per-thread default stream semantics).
    FlexStream& default_stream();
    FlexStream CreateStream(StreamOptions options = {});

    // Waits for every stream of this device to complete what it was given.
    // It throws no stream's error: each stays with its stream (unlike
    // CUDA's device-wide sticky errors), whose Synchronize or LastError
    // reports it, also DeviceLost.
    void Synchronize();
    // Waits at most `timeout` for the same; whether every stream is done.
    bool SynchronizeFor(std::chrono::nanoseconds timeout);

private:
    friend class DeviceInternals;   // libspyre's own layers: the core, the function, task queues
    friend class LocalHostBackend;  // host.cpp: opens Devices in a shared environment
    explicit Device(std::shared_ptr<DeviceCore> core);
    // Opens `function` of `environment`; the Device keeps the environment alive.
    static Device OpenIn(std::shared_ptr<const driver::DeviceEnvironment> environment,
                         const driver::FunctionInfo& function, DeviceOptions options);
    std::shared_ptr<DeviceCore> core_;
    std::unique_ptr<FlexStream> default_stream_;
};

}  // namespace spyre
SPYRE_API_END
