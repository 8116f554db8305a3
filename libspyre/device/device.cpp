// SPDX-License-Identifier: Apache-2.0
#include "spyre/device/device.hpp"

#include "device/device_core.hpp"
#include "stream/scheduler_impl.hpp"
#include "stream/stream_wait.hpp"

namespace spyre {

void CompletionWord::Notify() {
    if (waiters.load(std::memory_order_seq_cst) == 0) return;
    seq.fetch_add(1, std::memory_order_seq_cst);
    FutexWake(&seq, FutexScope::Private);
}

DeviceCore::DeviceCore(std::shared_ptr<const driver::DeviceEnvironment> env, const driver::FunctionInfo& info,
                       DeviceOptions options)
    : environment(std::move(env)) {
    function.emplace(driver::Function::Open(info));
    AllocatorOptions alloc = options.allocator;
    alloc.mode = options.allocator_mode.value_or(function->is_vf() ? AllocatorMode::VF : AllocatorMode::PF);
    allocator.emplace(*function, alloc);
    driver::DmaOptions dma_options = options.dma;
    // Every finished copy wakes the scheduler thread.
    auto user_hook = dma_options.on_complete;
    dma_options.on_complete = [this, user_hook] {
        if (user_hook) user_hook();
        WakeScheduler();
    };
    dma_queue.emplace(*function, dma_options);
    dma.emplace(*allocator, *dma_queue);
    scheduler.reset(new Scheduler(*this, options.scheduler));
    scheduler->impl_->Start();
}

DeviceCore::~DeviceCore() {
    // The DMA queue's completion hook reaches the scheduler: stop the
    // thread, drain the queue, then take the scheduler (and its ring) down.
    if (scheduler) scheduler->impl_->Stop();
    dma.reset();
    dma_queue.reset();
    scheduler.reset();
    allocator.reset();
    function.reset();
}

void DeviceCore::WakeScheduler() {
    if (scheduler) scheduler->impl_->DmaDone();
}

StreamState* DeviceCore::CreateStream(int priority) { return scheduler->impl_->CreateStream(priority); }
void DeviceCore::RetireStream(StreamState* state) { scheduler->impl_->Retire(state); }
std::vector<std::shared_ptr<StreamState>> DeviceCore::Streams() { return scheduler->impl_->Streams(); }
bool DeviceCore::OnSchedulerThread() const { return SchedulerThreadActive(); }

void DeviceCore::WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, CompletionWord& word) const {
    // Checked first, so a callback that waits fails every time, not only
    // when the work it waits for happens to be unfinished.
    if (OnSchedulerThread())
        throw Error(ErrorKind::InvalidArgument,
                    "a host callback must not wait for device work (it runs on the scheduler thread)");
    if (counter.load(std::memory_order_acquire) >= target) return;
    const SchedulerOptions& opt = scheduler->options();
    if (opt.wait_mode != driver::WaitMode::Blocking) {
        const auto until = std::chrono::steady_clock::now() + opt.spin;
        uint32_t spins = 0;
        while (counter.load(std::memory_order_acquire) < target) {
            CpuRelax();
            if (opt.wait_mode == driver::WaitMode::Adaptive && (++spins & 63) == 0 &&
                std::chrono::steady_clock::now() >= until)
                break;
        }
        if (counter.load(std::memory_order_acquire) >= target) return;
    }
    word.waiters.fetch_add(1, std::memory_order_seq_cst);
    while (true) {
        const uint32_t seen = word.seq.load(std::memory_order_seq_cst);
        if (counter.load(std::memory_order_seq_cst) >= target) break;
        FutexWait(&word.seq, seen, std::chrono::milliseconds(100), FutexScope::Private);
    }
    word.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

void DeviceCore::FreeAfterQueuedWork(std::span<const DeviceAllocation> blocks) noexcept {
    if (blocks.empty()) return;
    if (!OnSchedulerThread() && scheduler) {
        try {
            for (const auto& s : Streams()) WaitUntil(s->completed, s->enqueued_count.load(), s->done);
        } catch (const Error&) {
            // Device lost: nothing runs any more.
        }
    }
    for (const DeviceAllocation& a : blocks) {
        try {
            allocator->Free(a.handle);
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

Device Device::OpenIn(std::shared_ptr<const driver::DeviceEnvironment> environment, const driver::FunctionInfo& function,
                      DeviceOptions options) {
    return Device(std::make_shared<DeviceCore>(std::move(environment), function, std::move(options)));
}

SpyreAllocator& Device::allocator() { return *core_->allocator; }
DMAEngine& Device::dma() { return *core_->dma; }
Scheduler& Device::scheduler() { return *core_->scheduler; }
driver::Function& Device::function() { return *core_->function; }
const std::string& Device::pci_address() const { return core_->function->pci_address(); }
const DeviceId& Device::id() const { return core_->id(); }
FlexStream& Device::default_stream() { return *default_stream_; }

FlexStream Device::CreateStream(StreamOptions options) {
    return FlexStream(core_, core_->CreateStream(options.priority));
}

void Device::Synchronize() {
    // Shared pointers: a stream retired meanwhile stays readable until we are done.
    for (const std::shared_ptr<StreamState>& s : core_->Streams())
        core_->WaitUntil(s->completed, s->enqueued_count.load(), s->done);
}

}  // namespace spyre
