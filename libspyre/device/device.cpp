// SPDX-License-Identifier: Apache-2.0
#include "spyre/device/device.hpp"

#include <atomic>
#include <string>
#include <system_error>
#include <thread>

#include "deadline.hpp"
#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "forked.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/common/log.hpp"
#include "spyre/trace/trace.hpp"
#include "stream/scheduler_core.hpp"
#include "stream/stream_wait.hpp"
#include "moved_from.hpp"

namespace spyre {

DeviceCore::DeviceCore(std::shared_ptr<const driver::DeviceEnvironment> env, const driver::FunctionInfo& info,
                       DeviceOptions options)
    : environment(std::move(env)) {
    function.emplace(driver::Function::Open(info));
    AllocatorOptions alloc = options.allocator;
    alloc.mode = options.allocator_mode.value_or(function->is_vf() ? AllocatorMode::VF : AllocatorMode::PF);
    allocator.emplace(*function, alloc);
    driver::DmaOptions dma_options = options.dma;
    // Every finished copy tells the scheduler, which wakes for it only
    // while a stream's copy is in flight.
    auto user_hook = dma_options.on_complete;
    dma_options.on_complete = [this, user_hook] {
        if (user_hook) user_hook();
        WakeScheduler();
    };
    try {
        task_topology = driver::ReadTaskTopology(*function);
    } catch (const Error& e) {
        // A function of an older contract has no task queues: its work goes
        // through the CB ring alone.
        SPYRE_LOG_INFO("%s: no task queues (%s)", function->pci_address().c_str(), e.what());
    }
    dma_queue.emplace(*function, dma_options);
    dma.emplace(*allocator, *dma_queue, function->pci_address());
    sched = std::make_unique<detail::SchedulerCore>(*this, options.scheduler);
    scheduler = std::make_unique<Scheduler>(*sched);
    sched->Start();
    // A raw Allocator::Free waits as a DeviceBuffer's free does: a copy or
    // launch queued into the block earlier must not land in its next owner.
    allocator->SetFreeFence([this] {
        if (OnSchedulerThread())
            throw Error(ErrorKind::InvalidArgument,
                        "Allocator::Free in a host callback (the scheduler thread) cannot wait for the work queued "
                        "into the block: free it after the callback, or use a DeviceBuffer, which the scheduler frees "
                        "once the streams got there",
                        ErrorContext{.device = function->pci_address()});
        WaitForQueuedWork();
    });
}

DeviceCore::~DeviceCore() {
    // The DMA queue's completion hook reaches the scheduler: stop the
    // thread, drain the queue, then take the scheduler (and its ring) down.
    if (sched) sched->Stop();
    dma.reset();
    dma_queue.reset();
    scheduler.reset();
    sched.reset();
    allocator.reset();
    function.reset();
}

void DeviceCore::WakeScheduler() {
    if (sched) sched->DmaDone();
}

StreamState* DeviceCore::CreateStream(int priority) { return sched->CreateStream(priority); }
void DeviceCore::RetireStream(StreamState* state) { sched->Retire(state); }

void DeviceCore::CheckAddressToWrite(uint64_t address, uint64_t size) const {
    const SpyreAllocator& a = *allocator;
    std::optional<DeviceHandle> handle;
    {
        std::lock_guard lock(a.mutex_);
        for (uint32_t i = 0; i < a.regions_.size() && !handle; ++i)
            if (address >= a.regions_[i].device_base && address - a.regions_[i].device_base < a.regions_[i].size)
                handle = a.MakeHandle(i, address - a.regions_[i].device_base);
    }
    if (!handle)
        throw Error(ErrorKind::InvalidArgument, "range of " + std::to_string(size) + " bytes at device address " +
                                                    Hex(address) + " is in none of this function's memory regions",
                    ErrorContext{.device = function->pci_address()});
    try {
        a.DeviceAddressToWrite(*handle, size);
    } catch (const Error& e) {
        throw Error(e.kind(), "device address " + Hex(address) + ": " + e.message(), e.context());
    }
}
bool DeviceCore::OnSchedulerThread() const { return SchedulerThreadActive(); }

uint64_t DeviceCore::ForkGeneration() noexcept { return detail::ForkGeneration(); }

void DeviceCore::ThrowForked() const {
    throw Error(ErrorKind::InvalidArgument,
                "this device was opened by process " + std::to_string(opened_by_) + " before it forked: process " +
                    std::to_string(::getpid()) + " (a child) cannot use it, since the device's threads stayed with the "
                    "parent; open the device again in the child",
                ErrorContext{.device = function ? function->pci_address() : std::string()});
}

bool DeviceCore::WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, EventCount& word,
                           std::chrono::steady_clock::time_point until) const {
    CheckSameProcess();
    // Checked first, so a callback that waits fails every time, not only
    // when the work it waits for happens to be unfinished.
    if (OnSchedulerThread())
        throw Error(ErrorKind::InvalidArgument,
                    "a host callback must not wait for device work (it runs on the scheduler thread)");
    return sched->WaitUntil(counter, target, word, until);
}

void DeviceCore::WaitForQueuedWork() noexcept {
    if (sched) {
        try {
            for (const auto& s : sched->StreamsWithWork()) WaitUntil(s->completed, s->enqueued_count.load(), s->done);
        } catch (const Error&) {
            // Device lost: nothing runs any more.
        }
    }
    // Copies through the DMAEngine (Device::dma()) outside any stream: the
    // engines write the block until they finish, also on a lost device
    // (its memory outlives the daemon).
    if (dma_queue) dma_queue->WaitForCopiesSubmitted();
}

void DeviceCore::FreeAfterQueuedWork(std::span<const DeviceAllocation> blocks) noexcept {
    if (blocks.empty() || ForkedAway()) return;
    allocator->BeginFreeOwned(blocks);  // work named from now on is refused
    if (OnSchedulerThread() && sched) {
        try {
            sched->FreeAfterStreams(blocks);  // a host callback may not wait: the scheduler frees later
            return;
        } catch (const std::bad_alloc&) {
            // No memory to remember them: free at once, as before.
        }
    }
    if (!OnSchedulerThread()) WaitForQueuedWork();
    else if (dma_queue) dma_queue->WaitForCopiesSubmitted();
    for (const DeviceAllocation& a : blocks) {
        try {
            allocator->FreeOwned(a.handle);
        } catch (const Error&) {
            // Already gone with the device: nothing to give back.
        }
    }
}

// ---------------------------------------------------------------- Device

Device::Device(std::shared_ptr<DeviceCore> core)
    : core_(std::move(core)),
      default_stream_(new FlexStream(core_, core_->CreateStream(kStreamPriorityDefault))) {}
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;
// The default stream finishes its work; streams, events and plans held
// elsewhere keep the core (and so the function) alive until they go.
Device::~Device() = default;

Device Device::Open(DeviceOptions options) {
    auto env = std::make_shared<const driver::DeviceEnvironment>(driver::DeviceEnvironment::Acquire(options.embedded_mock));
    const driver::FunctionInfo info = env->Resolve(options.function);
    return OpenIn(std::move(env), info, std::move(options));
}

namespace {
// The last reference to a core. In a forked child it leaks the core
// (ForkedAway). On the core's own scheduler thread (a host callback whose
// closure held it: a stream kept alive only by its own callback), the
// teardown, which joins that thread, runs on a thread of its own; deleted
// there, it aborted the process (found probing from outside).
void DeleteCore(DeviceCore* core) {
    if (core->ForkedAway()) return;
    if (core->sched && core->sched->OnItsThread()) {
        try {
            std::thread([core] { delete core; }).detach();
        } catch (const std::system_error&) {
            SPYRE_LOG_ERROR("%s: no thread to close the device on: left open until the process exits",
                            core->function->pci_address().c_str());
        }
        return;
    }
    delete core;
}
}  // namespace

Device Device::OpenIn(std::shared_ptr<const driver::DeviceEnvironment> environment, const driver::FunctionInfo& function,
                      DeviceOptions options) {
    Device device(std::shared_ptr<DeviceCore>(new DeviceCore(std::move(environment), function, std::move(options)),
                                              &DeleteCore));
    SPYRE_LOG_INFO("opened %s", device.pci_address().c_str());
    return device;
}

namespace {
DeviceCore& Live(const std::shared_ptr<DeviceCore>& core) {
    DeviceCore& c = detail::LiveState(core, "Device");
    c.CheckSameProcess();
    return c;
}
}  // namespace

SpyreAllocator& Device::allocator() { return *Live(core_).allocator; }
DeviceBuffer Device::AllocateBuffer(uint64_t bytes) {
    Live(core_);
    return DeviceBuffer::Allocate(core_, bytes);
}
DMAEngine& Device::dma() { return *Live(core_).dma; }
Scheduler& Device::scheduler() { return *Live(core_).scheduler; }
const std::string& Device::pci_address() const { return Live(core_).function->pci_address(); }
const DeviceId& Device::id() const { return Live(core_).id(); }
FlexStream& Device::default_stream() {
    Live(core_);
    return *default_stream_;
}
const std::shared_ptr<DeviceCore>& DeviceInternals::Core(const Device& device) {
    Live(device.core_);
    return device.core_;
}
const std::shared_ptr<DeviceCore>& DeviceInternals::Core(const FlexStream& stream) {
    detail::LiveState(stream.core_, "FlexStream");
    return stream.core_;
}
driver::Function& DeviceInternals::Function(const Device& device) { return *Live(device.core_).function; }
const driver::TaskTopology& DeviceInternals::TaskTopology(const Device& device) {
    return Live(device.core_).task_topology;
}

std::unique_ptr<driver::TaskQueue> DeviceInternals::TakeTaskQueue(const Device& device, uint32_t group) {
    DeviceCore& core = Live(device.core_);
    const uint32_t have = core.task_topology.queues();
    if (group >= have)
        throw Error(ErrorKind::InvalidArgument, "task queue " + std::to_string(group) + " does not exist on " +
                                                    device.pci_address() + ", which has " + std::to_string(have));
    try {
        return std::make_unique<driver::TaskQueue>(*core.function, group);
    } catch (const Error& e) {
        // The driver names its own class; above it, only the task ports of
        // Orchestrators (a Worker's chip tasks run on Orchestrators too) take
        // queues: say which object holds it and what to do.
        if (e.kind() != ErrorKind::Busy || !core.function->TaskQueueHeld(group)) throw;
        throw Error(ErrorKind::Busy,
                    "task queue " + std::to_string(group) + " of " + device.pci_address() +
                        " is held by another Orchestrator of this process (a level-3 Worker's runtimes on this "
                        "device included): close it first, or give each runtime its own "
                        "OrchestratorOptions::task_queues",
                    e.context());
    }
}

FlexStream Device::CreateStream(StreamOptions options) {
    return FlexStream(core_, Live(core_).CreateStream(options.priority));
}

void Device::Synchronize() {
    SPYRE_TRACE_SCOPE("Device::Synchronize");
    SynchronizeFor(std::chrono::nanoseconds::max());  // no deadline
}

bool Device::SynchronizeFor(std::chrono::nanoseconds timeout) {
    const auto until = DeadlineAfter(timeout);
    // Shared pointers: a stream retired meanwhile stays readable until we are done.
    for (const std::shared_ptr<StreamState>& s : Live(core_).sched->StreamsWithWork())
        if (!core_->WaitUntil(s->completed, s->enqueued_count.load(), s->done, until)) return false;
    return true;
}

}  // namespace spyre
