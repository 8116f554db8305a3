// SPDX-License-Identifier: Apache-2.0
#include "local_chip_executor.hpp"

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "device/task_port.hpp"
#include "host/in_place.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/uapi/spyre_regs.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

namespace spyre::host {

namespace {
// Calls between two walks for copies of storages that are gone (Evict): at
// least kSweepEvery, and one per kSweepShare copies kept. Their device
// memory waits that long, or until the cache is full or the device out of
// memory (both walk at once).
constexpr unsigned kSweepEvery = 64;
constexpr size_t kSweepShare = 8;
// What an overfull cache is cut to, of its limit.
constexpr struct {
    uint64_t num, den;
} kFillAfterEvict{7, 8};

// Whether the copy holds what this call would read without a check: a call
// of the same run made it current after this one was submitted (so after
// the program's writes before it), and no task wrote the storage since.
bool SameView(uint64_t run, uint64_t writes, uint64_t read_at, const ChipCall& call, size_t i) {
    return call.run != 0 && run == call.run && writes == call.args[i].writes && read_at > call.submitted;
}
}  // namespace

unsigned LocalChipExecutor::Room(Device& device, const DistributedConfig& config) {
    // None on a device of an older contract: its chip tasks then run host
    // kernels only, one at a time.
    const driver::TaskTopology& topo = DeviceInternals::TaskTopology(device);
    const uint32_t queues = topo.queues(), cores = topo.cores();
    if (config.chip_tasks_per_device > 0) {
        if (uint32_t(config.chip_tasks_per_device) > std::max(queues, 1u))
            throw Error(ErrorKind::InvalidArgument,
                        "DistributedConfig: chip_tasks_per_device is " + std::to_string(config.chip_tasks_per_device) +
                            ", but " + device.pci_address() + " has " + std::to_string(queues) +
                            " task queue(s), one per chip task at most");
        return unsigned(config.chip_tasks_per_device);
    }
    const uint64_t heaps = device.allocator().Stats().capacity / 4 / config.chip_heap_bytes;
    uint64_t room = std::min<uint64_t>(queues, cores / uint32_t(config.block_dim));
    room = std::min(room, heaps);
    return unsigned(std::max<uint64_t>(room, 1));
}

LocalChipExecutor::LocalChipExecutor(Device device, const DistributedConfig& config,
                                     std::shared_ptr<const ChipRegistry> registry)
    : device_(std::move(device)), registry_(std::move(registry)) {
    const unsigned slots = Room(device_, config);
    const uint32_t queues = DeviceInternals::TaskTopology(device_).queues();
    for (unsigned i = 0; i < slots; ++i) {
        OrchestratorOptions o;
        o.heap_size = config.chip_heap_bytes;
        o.host_threads = unsigned(config.aicpu_thread_num);
        o.ready_queues = config.runtime == ChipRuntime::TensorMapAndRingBufferLockFree ? ReadyQueueKind::LockFree : ReadyQueueKind::Locked;
        // Slot i's share of the queues: [i q / n, (i + 1) q / n).
        for (uint32_t q = i * queues / slots; q < (i + 1) * queues / slots; ++q) o.task_queues.push_back(q);
        auto slot = std::make_unique<Slot>();
        try {
            slot->orch.emplace(Orchestrator::Create(device_, o));
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory && e.kind() != ErrorKind::InvalidArgument) throw;
            // Its heap is the one size the config sets: name the field.
            throw Error(e.kind(), "DistributedConfig: chip_heap_bytes is " + std::to_string(config.chip_heap_bytes) +
                                      ": chip runtime " + std::to_string(i) + " of " + std::to_string(slots) + " on " +
                                      device_.pci_address() + " could not be made (" + e.message() + ")");
        }
        free_slots_.push_back(slot.get());
        slots_.push_back(std::move(slot));
    }
    cache_limit_ = std::min(kCacheBytes, device_.allocator().Stats().capacity / 4);
}

LocalChipExecutor::~LocalChipExecutor() {
    copies_.clear();
    slots_.clear();  // their runtimes before the device they run on: views of their memory become zeros
    for (const std::weak_ptr<SetAside>& kept : set_asides_)
        if (const auto set_aside = kept.lock()) set_aside->buffers.clear();
}

std::string LocalChipExecutor::Describe() const { return device_.pci_address(); }

void LocalChipExecutor::LoadKernel(int32_t kernel_id, const std::vector<uint8_t>& program) {
    {
        // Loaded here by a registration another device then failed: the
        // same program again is done, another is refused as before.
        std::lock_guard lock(mu_);
        auto it = programs_.find(kernel_id);
        if (it != programs_.end() && it->second == program) return;
    }
    DeviceBuffer buffer = device_.AllocateBuffer(program.size());
    device_.default_stream().CopyToDevice(program.data(), buffer.handle(), program.size());
    device_.default_stream().Synchronize();
    DeviceInternals::Core(device_)->KeepForPrograms(buffer.handle());
    const uint64_t address = device_.allocator().DeviceAddress(buffer.handle(), program.size());
    for (auto& slot : slots_) slot->orch->RegisterDeviceKernel(kernel_id, address);
    std::lock_guard lock(mu_);
    kernels_.push_back(std::move(buffer));
    programs_.emplace(kernel_id, program);
}

void LocalChipExecutor::LoadPlan(const std::string& name, const CompilerOutput& plan) {
    std::vector<std::shared_ptr<const ExecutionPlan>> loaded;
    for (auto& slot : slots_) {
        if (!slot->plan_stream) slot->plan_stream.emplace(device_);
        loaded.push_back(LoadExecutionPlan(*slot->plan_stream, plan));
    }
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i]->plans[name] = std::move(loaded[i]);
}

void LocalChipExecutor::UnloadPlan(const std::string& name) {
    for (auto& slot : slots_) slot->plans.erase(name);
}

// The plan's tensors are the call's arguments, dense row-major in their device copies.
void LocalChipExecutor::RunPlan(Slot& slot, const ExecutionPlan& plan, const ChipCall& call,
                                const std::vector<Copy*>& copies) {
    if (plan.tensor_input_metadata.size() != call.args.size())
        throw Error(ErrorKind::InvalidArgument, "chip plan '" + call.function + "' takes " +
                                                    std::to_string(plan.tensor_input_metadata.size()) + " tensors, the task '" +
                                                    call.task_name + "' passes " + std::to_string(call.args.size()));
    // As the ready-made chip functions check: an output given as In was
    // written in the device copy kept for that In tensor, which later
    // calls then read (stale); an input given as Out was never uploaded.
    for (size_t i = 0; i < call.args.size(); ++i) {
        const TensorSpec& spec = plan.tensor_input_metadata[i];
        const Access access = call.args[i].arg.access;
        const bool writes = spec.role == TensorRole::Output;
        if ((writes && access == Access::In) || (!writes && access == Access::Out))
            throw Error(ErrorKind::InvalidArgument,
                        "chip plan '" + call.function + "' " + (writes ? "writes" : "reads") + " its tensor " +
                            std::to_string(i) + " ('" + spec.name + "'), which the task '" + call.task_name +
                            "' passes as " + (access == Access::In ? "In" : "Out") + ": pass it as " + (writes ? "Out" : "In") + " or InOut");
    }
    std::vector<SpyreTensor> tensors;
    for (size_t i = 0; i < call.args.size(); ++i) {
        const HostTensor& t = call.args[i].arg.tensor;
        const std::vector<int64_t> shape = t.shape();
        std::vector<int64_t> stride(shape.size());
        int64_t step = int64_t(ElementSize(t.dtype()));
        for (size_t d = shape.size(); d-- > 0;) stride[d] = step, step *= shape[d];
        tensors.emplace_back(copies[i]->buffer.handle(), shape, stride, t.dtype(), t.bytes());
    }
    LaunchKernel(*slot.plan_stream, plan, tensors);
    slot.plan_stream->Synchronize();  // a device fault surfaces here, with its code
}

LocalChipExecutor::Copy& LocalChipExecutor::CopyFor(const HostTensor& t) {
    const Key key{t.storage_id(), t.byte_offset(), t.bytes()};
    auto it = copies_.find(key);
    if (it == copies_.end()) {
        Copy c;
        c.buffer = AllocateEvicting(t.bytes());
        c.device_address = device_.allocator().DeviceAddress(c.buffer.handle(), t.bytes());
        c.storage = t.storage();
        copy_bytes_ += t.bytes();
        it = copies_.emplace(key, std::move(c)).first;
    }
    it->second.last_use = ++use_clock_;
    return it->second;
}

DeviceBuffer LocalChipExecutor::AllocateEvicting(uint64_t bytes) {
    try {
        return device_.AllocateBuffer(bytes);
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::OutOfMemory) throw;
    }
    const uint64_t limit = std::exchange(cache_limit_, 0);
    Evict();
    cache_limit_ = limit;
    return device_.AllocateBuffer(bytes);
}

LocalChipExecutor::Copy& LocalChipExecutor::ScratchFor(Slot& slot, size_t i, uint64_t bytes) {
    if (slot.scratch.size() <= i) slot.scratch.resize(i + 1);
    Copy& c = slot.scratch[i];
    if (c.buffer.size() < bytes) {
        c.buffer = DeviceBuffer();  // the old one first: the device may have room for one only
        c.buffer = AllocateEvicting(bytes);
        c.device_address = device_.allocator().DeviceAddress(c.buffer.handle(), bytes);
    }
    return c;
}

// Drops copies of storages that are gone, then the least recently used
// until the cache fits (never one a call in flight holds). Each walk visits
// every copy once, so walks come at most every copies_.size() / kSweepShare
// calls, and an overfull cache is cut to kFillAfterEvict of its limit: a
// call over a cache of 20,000 kept copies walked them all every 64 calls,
// and every call while full, once for each copy it dropped.
void LocalChipExecutor::Evict() {
    auto drop = [&](std::map<Key, Copy>::iterator it) {
        copy_bytes_ -= std::get<2>(it->first);
        return copies_.erase(it);
    };
    const size_t every = std::max<size_t>(kSweepEvery, copies_.size() / kSweepShare);
    if (++calls_since_sweep_ < every && copy_bytes_ <= cache_limit_) return;
    calls_since_sweep_ = 0;
    const bool full = copy_bytes_ > cache_limit_;
    std::vector<std::map<Key, Copy>::iterator> unused;
    for (auto it = copies_.begin(); it != copies_.end();) {
        if (it->second.users != 0) {
            ++it;
        } else if (it->second.storage.expired()) {
            it = drop(it);
        } else {
            if (full) unused.push_back(it);
            ++it;
        }
    }
    if (copy_bytes_ <= cache_limit_) return;
    const uint64_t target = cache_limit_ / kFillAfterEvict.den * kFillAfterEvict.num;
    std::sort(unused.begin(), unused.end(), [](const auto& a, const auto& b) { return a->second.last_use < b->second.last_use; });
    for (auto it : unused) {
        if (copy_bytes_ <= target) break;
        drop(it);
    }
}

namespace {
// The executors whose slots the calling thread's chip calls hold, one entry
// per slot: a chip function waiting for a nested run runs that run's chip
// tasks on its own thread meanwhile (its lane's queued jobs).
thread_local std::vector<const LocalChipExecutor*> t_slots_held;
}  // namespace

void LocalChipExecutor::MarkClosing() noexcept {
    DeviceInternals::Core(device_)->closing.store(true, std::memory_order_release);
}

bool LocalChipExecutor::HasFreeSlot() {
    std::lock_guard lock(mu_);
    return !free_slots_.empty();
}

bool LocalChipExecutor::AllSlotsHeldByThisThread() {
    std::lock_guard lock(mu_);
    return free_slots_.empty() && size_t(std::count(t_slots_held.begin(), t_slots_held.end(), this)) >= slots_.size();
}

// One call's hold on the executor: a free slot and its arguments' device
// copies, inputs current. The slot and the copies are taken and given back
// under the executor's lock; the bytes move through the device's DMAEngine
// outside it, so calls on other slots go on meanwhile. An input's copy is
// reused whole when another call in flight reads it (that call made it
// current or is making it so: this one waits for that upload; the dispatcher
// never runs a writer of a range beside a reader of it, and a caller may not
// write a tensor a run in flight uses); else each chunk whose host bytes
// hash differently from what the copy holds is uploaded. A copy not known
// yet is uploaded whole and hashed while the device runs the call
// (HashUploads).
class LocalChipExecutor::Lease {
public:
    Lease(LocalChipExecutor& e, const ChipCall& call, ChipCallStats& stats) : e_(e), call_(call) {
        std::unique_lock lock(e_.mu_);
        // Every slot held by this very thread's calls (a chip function that
        // waits for a run whose chip task came here): none can free before
        // this call returns, so waiting would hang the run and its waiter.
        if (e_.free_slots_.empty() &&
            size_t(std::count(t_slots_held.begin(), t_slots_held.end(), &e_)) >= e_.slots_.size())
            throw Error(ErrorKind::InvalidArgument,
                        "chip task '" + call.task_name + "' on " + e_.Describe() + ": the device's " +
                            std::to_string(e_.slots_.size()) +
                            " chip slot(s) are held by chip calls of this same thread, which wait for this task's run, "
                            "so it would wait for itself (raise DistributedConfig::chip_tasks_per_device, or run the "
                            "nested program from the host orchestration function or a SubWorker)");
        Await(lock, e_.slot_free_, [&] { return !e_.free_slots_.empty(); });
        slot_ = e_.free_slots_.back();
        e_.free_slots_.pop_back();
        t_slots_held.push_back(&e_);
        try {
            hashes_.resize(call.args.size());
            read_at_.resize(call.args.size());
            std::vector<size_t> shared;
            for (size_t i = 0; i < call.args.size(); ++i) {
                const HostTensor& t = call.args[i].arg.tensor;
                const bool in_place = WritesAnInputsBytes(i);
                own_copy_.push_back(!call.one_shot && in_place);  // a one-shot call's copies are all its own
                Copy& c = TakeCopy(lock, i, t);
                ++c.users;
                copies_.push_back(&c);
                // An Out over an In argument's bytes starts as those bytes,
                // in a copy of its own (a served call's too: another rank's
                // in-place Out left zeros where its function wrote nothing).
                const bool reads = call.args[i].arg.access != Access::Out || in_place;
                reads_.push_back(reads);
                if (!reads) {
                    zeroed_.push_back(i);
                    continue;
                }
                if (c.readers > 0) {
                    shared.push_back(i);
                } else if (!c.holds.empty() && SameView(c.run, c.writes, c.read_at, call, i)) {
                    stats.bytes_reused += t.bytes();  // a call of this run made it current, nothing wrote since
                } else {
                    c.upload = Upload::Running;
                    running_.push_back(i);
                }
                ++c.readers;
            }
            for (size_t i : std::vector<size_t>(running_)) Upload(lock, i, stats);
            for (size_t i : shared) {
                Copy& c = *copies_[i];
                Await(lock, e_.uploaded_, [&] { return c.upload != Upload::Running; });
                if (c.upload == Upload::Failed) {
                    c.upload = Upload::Running;  // the uploader gave up: this call tries again
                    running_.push_back(i);
                    Upload(lock, i, stats);
                } else {
                    stats.bytes_reused += call.args[i].arg.tensor.bytes();
                }
            }
            // An argument both written and read (Out(x), In(x)) must not
            // leave its copy marked as holding the host bytes.
            for (size_t i = 0; i < call.args.size(); ++i) {
                if (call.args[i].arg.access == Access::In) continue;
                copies_[i]->holds.clear();
                copies_[i]->run = copies_[i]->writes = 0;
                std::erase_if(to_hash_, [&](size_t j) { return copies_[j] == copies_[i]; });
            }
            if (!zeroed_.empty()) {
                lock.unlock();
                std::exception_ptr failed;
                try {
                    for (size_t i : zeroed_) Zero(*copies_[i], call.args[i].arg.tensor.bytes());
                } catch (...) {
                    failed = std::current_exception();
                }
                lock.lock();
                if (failed) std::rethrow_exception(failed);
            }

        } catch (...) {
            // Uploads this call took on and did not finish: a call waiting
            // for one takes it over.
            for (size_t i : running_) copies_[i]->upload = Upload::Failed;
            e_.uploaded_.Notify();
            GiveBack();
            lock.unlock();
            ForgetHeld();
            e_.slot_free_.Notify();
            throw;
        }
    }
    ~Lease() {
        {
            std::lock_guard lock(e_.mu_);
            GiveBack();
            e_.Evict();
        }
        ForgetHeld();
        e_.slot_free_.Notify();
    }
    Slot& slot() const { return *slot_; }
    bool waited() const { return waited_; }
    // The call's function kept views of its arguments past its end: their
    // copies go to `holder` when the call gives them back (a shared In
    // copy another call still reads stays: nothing writes through a view
    // of an In argument).
    void SetAsideFor(std::shared_ptr<LocalChipExecutor::SetAside> holder) {
        std::lock_guard lock(e_.mu_);
        std::erase_if(e_.set_asides_, [](const std::weak_ptr<SetAside>& s) { return s.expired(); });
        e_.set_asides_.push_back(holder);
        set_aside_ = std::move(holder);
    }

    // Argument `i`'s device copy. When the device's memory is out, the
    // calls on the other slots hold it: wait for one to give its copies
    // back (Evict may then drop them) and try again, as long as one of them
    // is not itself waiting for memory. The last one that would wait gives
    // up instead (OutOfMemory), which gives its copies back to the others.
    // Several chip tasks at once on a small device failed where one at a
    // time fit.
    Copy& TakeCopy(std::unique_lock<std::mutex>& lock, size_t i, const HostTensor& t) {
        // Slots held by calls that are not waiting for memory.
        auto going = [&] { return e_.slots_.size() - e_.free_slots_.size() - e_.memory_waiters_; };
        for (;;) {
            try {
                if (call_.one_shot) return e_.ScratchFor(*slot_, i, t.bytes());
                return own_copy_[i] ? OwnCopy(t) : e_.CopyFor(t);
            } catch (const Error& err) {
                if (err.kind() != ErrorKind::OutOfMemory || going() <= 1) throw;  // 1: this call
            }
            const uint64_t gave_back = e_.gave_back_;
            ++e_.memory_waiters_;
            Await(lock, e_.slot_free_, [&] { return e_.gave_back_ != gave_back || going() == 0; });
            --e_.memory_waiters_;
        }
    }
    // Whether argument i is written (Out, InOut) and names exactly the
    // bytes of an In argument of the call. Another rank's device gives
    // every argument a copy of its own, so the In argument holds the bytes
    // as the call began even while the function writes the other: one
    // shared copy here showed it those writes (an in-place function that
    // reads what it already wrote computed something else by placement).
    bool WritesAnInputsBytes(size_t i) const {
        return call_.args[i].arg.access != Access::In && AnInputNamesTheBytesOf(call_, call_.args[i].arg.tensor);
    }
    // A copy for this call alone (under mu_), not in the executor's cache.
    Copy& OwnCopy(const HostTensor& t) {
        auto c = std::make_unique<Copy>();
        c->buffer = e_.AllocateEvicting(t.bytes());
        c->device_address = e_.device_.allocator().DeviceAddress(c->buffer.handle(), t.bytes());
        own_.push_back(std::move(c));
        return *own_.back();
    }
    const std::vector<Copy*>& copies() const { return copies_; }
    // Hashes the host bytes of the copies uploaded whole, for a later call
    // to reuse them: outside the lock, while the device works. They are
    // still the bytes uploaded: no task writes them beside this call, and
    // the caller may not while the run is in flight.
    void HashUploads() {
        if (call_.one_shot) return;  // no later call reads these copies
        for (size_t i : to_hash_) HashChunks(call_.args[i].arg.tensor.data(), call_.args[i].arg.tensor.bytes(), hashes_[i]);
    }
    // Copies argument i's device copy back into its host range, hashing it
    // for the copy to be reused later. Outputs are this call's alone.
    void Download(size_t i) {
        const HostTensor& t = call_.args[i].arg.tensor;
        DMAEngine& dma = e_.device_.dma();
        dma.Wait(dma.CopyFromDevice(t.data(), copies_[i]->buffer.handle(), t.bytes()));
        read_at_[i] = HostBytesTick();  // the host bytes hold the copy's from here
        if (!call_.one_shot) HashChunks(t.data(), t.bytes(), hashes_[i]);
    }

private:
    void ForgetHeld() noexcept {
        const auto it = std::find(t_slots_held.rbegin(), t_slots_held.rend(), &e_);
        if (it != t_slots_held.rend()) t_slots_held.erase(std::next(it).base());
    }
    // Sleeps on `ec` until `ready` (read under mu_) holds; `lock` holds mu_
    // on entry and on return, and is let go while asleep. No bound: the
    // second is only how often a sleeper looks again.
    template <typename Ready>
    void Await(std::unique_lock<std::mutex>& lock, EventCount& ec, Ready ready) {
        while (!ready()) {
            waited_ = true;
            ec.SleepUnlocked(lock, ready, std::chrono::seconds(1));
        }
    }
    // Makes copy i hold the host bytes (its upload Running, lock held):
    // moves the chunks that changed, or all of it, with the lock let go.
    void Upload(std::unique_lock<std::mutex>& lock, size_t i, ChipCallStats& stats) {
        waited_ = true;
        Copy& c = *copies_[i];
        const HostTensor& t = call_.args[i].arg.tensor;
        const bool whole = c.holds.empty();
        ChunkHashes held = c.holds;  // the copy is this call's to upload: nobody else changes holds meanwhile
        const uint64_t read_at = HostBytesTick();  // before the host bytes are read
        lock.unlock();
        uint64_t copied = 0;
        std::exception_ptr failed;
        try {
            copied = whole ? UploadWhole(c, t) : UploadChanged(c, t, held);
        } catch (...) {
            failed = std::current_exception();
        }
        lock.lock();
        std::erase(running_, i);
        if (failed) {
            c.holds.clear();  // some chunks may have moved: nothing is known
            c.run = c.writes = 0;
            c.upload = Upload::Failed;
            e_.uploaded_.Notify();
            std::rethrow_exception(failed);
        }
        if (whole) {
            to_hash_.push_back(i);
            read_at_[i] = read_at;
        } else {
            c.holds = std::move(held);
            c.run = call_.run, c.writes = call_.args[i].writes, c.read_at = read_at;
            stats.bytes_checked += t.bytes();
        }
        c.upload = Upload::Done;
        e_.uploaded_.Notify();
        stats.bytes_uploaded += copied;
        stats.bytes_reused += t.bytes() - copied;
    }
    // An Out argument that is not uploaded starts as zeros on every
    // placement: a new copy held whatever the device memory held (another
    // tensor's bytes: a freed copy's, or the slot's last served call's),
    // and a kept copy this range's bytes of an earlier run, which a task
    // since may have rewritten on the host; the elements the function left
    // came back with them (both found probing from outside).
    void Zero(Copy& c, uint64_t bytes) {
        static constexpr uint64_t kChunk = 256 * 1024;
        static const std::vector<uint8_t> zeros(kChunk);
        DMAEngine& dma = e_.device_.dma();
        std::vector<DmaTicket> tickets;
        std::exception_ptr failed;
        try {
            for (uint64_t at = 0; at < bytes; at += kChunk) {
                const uint64_t n = std::min(kChunk, bytes - at);
                tickets.push_back(dma.CopyToDevice(zeros.data(), c.buffer.handle().Offset(at, n, c.buffer.allocation()), n));
            }
        } catch (...) {
            failed = std::current_exception();
        }
        for (DmaTicket ticket : tickets) {
            try {
                dma.Wait(ticket);
            } catch (...) {
                if (!failed) failed = std::current_exception();
            }
        }
        if (failed) std::rethrow_exception(failed);
    }
    uint64_t UploadWhole(Copy& c, const HostTensor& t) {
        DMAEngine& dma = e_.device_.dma();
        return dma.Wait(dma.CopyToDevice(t.data(), c.buffer.handle(), t.bytes()));
    }
    // The changed chunks, all submitted before the first wait.
    uint64_t UploadChanged(Copy& c, const HostTensor& t, ChunkHashes& held) {
        DMAEngine& dma = e_.device_.dma();
        const auto* host = static_cast<const uint8_t*>(t.data());
        std::vector<DmaTicket> tickets;
        uint64_t copied = 0;
        std::exception_ptr failed;
        try {
            for (const ByteRange& r : ChangedRanges(host, t.bytes(), held)) {
                const DeviceHandle at = c.buffer.handle().Offset(r.offset, r.bytes, c.buffer.allocation());
                tickets.push_back(dma.CopyToDevice(host + r.offset, at, r.bytes));
            }
        } catch (...) {
            failed = std::current_exception();
        }
        for (DmaTicket ticket : tickets) {  // every one, even after a failure: they read the caller's memory
            try {
                copied += dma.Wait(ticket);
            } catch (...) {
                if (!failed) failed = std::current_exception();
            }
        }
        if (failed) std::rethrow_exception(failed);
        return copied;
    }
    void GiveBack() {
        for (size_t i = 0; i < copies_.size(); ++i) {
            --copies_[i]->users;
            if (i < reads_.size() && reads_[i]) --copies_[i]->readers;
            if (set_aside_ && SetAsideCopy(i)) continue;
            if (!hashes_[i].empty()) {
                // An output's bytes are this call's, whose own write the
                // storage counts once it ends: one more.
                const bool wrote = call_.args[i].arg.access != Access::In;
                copies_[i]->holds = std::move(hashes_[i]);
                copies_[i]->run = call_.run, copies_[i]->writes = call_.args[i].writes + (wrote ? 1 : 0);
                copies_[i]->read_at = read_at_[i];
            }
        }
        if (call_.one_shot)
            for (Copy& c : slot_->scratch)
                if (c.buffer.size() > kScratchKeepBytes) c = Copy{};
        e_.free_slots_.push_back(slot_);
        ++e_.gave_back_;  // its callers notify slot_free_
    }
    // Moves argument i's copy to set_aside_ (under mu_, users counted
    // down), unless another call or argument still holds it; whether it did.
    bool SetAsideCopy(size_t i) {
        Copy& c = *copies_[i];
        if (c.users > 0) return false;
        set_aside_->buffers.push_back(std::move(c.buffer));
        if (call_.one_shot || own_copy_[i]) {
            c = Copy{};
            return true;
        }
        const HostTensor& t = call_.args[i].arg.tensor;
        e_.copies_.erase(Key{t.storage_id(), t.byte_offset(), t.bytes()});
        e_.copy_bytes_ -= t.bytes();
        copies_[i] = nullptr;
        return true;
    }
    LocalChipExecutor& e_;
    const ChipCall& call_;
    Slot* slot_ = nullptr;
    std::vector<Copy*> copies_;
    std::vector<bool> reads_;  // copies_[i] counted among its readers
    std::vector<size_t> zeroed_;  // Out arguments not uploaded whose copies are new: zeroed first
    std::vector<size_t> running_;  // arguments whose upload this call took on and has not finished
    std::vector<size_t> to_hash_;  // arguments uploaded whole, hashed by HashUploads
    std::vector<ChunkHashes> hashes_;  // by argument: what its copy holds once hashed or downloaded; else empty
    std::vector<uint64_t> read_at_;    // by argument: the HostBytesTick of those bytes' upload or download
    std::vector<bool> own_copy_;  // by argument: its copy is OwnCopy's (WritesAnInputsBytes)
    std::vector<std::unique_ptr<Copy>> own_;  // OwnCopy's, freed with the lease
    bool waited_ = false;  // slept or uploaded: time passed since the call began
    std::shared_ptr<LocalChipExecutor::SetAside> set_aside_;  // set: the call's copies go there
};

ChipCallStats LocalChipExecutor::Run(const ChipCall& call) {
    ChipCallStats stats;
    Run(call, DeviceClockNs(), stats);
    return stats;
}

void LocalChipExecutor::Run(const ChipCall& call, uint64_t called_ns, ChipCallStats& stats) {
    const ChipRegistry::Entry* fn = call.entry ? call.entry : registry_->Find(call.function);
    if (!fn) {
        ErrorContext where;
        where.device = Describe();
        throw Error(ErrorKind::NotFound, "chip function '" + call.function + "' is not registered (registered: " +
                                             registry_->Names() + ")", where);
    }
    Lease lease(*this, call, stats);
    Slot& slot = lease.slot();
    const std::vector<Copy*>& copies = lease.copies();
    Orchestrator& orch = *slot.orch;
    ChipContext ctx{orch, device_, {}, {}, {}, call.block_dim};
    auto set_aside = std::make_shared<SetAside>();
    set_aside->mapping = orch.MemoryHold();
    ctx.args_memory = set_aside;
    std::vector<uint64_t> pto_args;
    // The function's tasks may name its arguments' bytes and the runtime's
    // own buffers, nothing else: a region past a tensor would reach another
    // tensor's device copy, which a later call could reuse unchecked.
    std::vector<Orchestrator::TaskRegion> confined;
    for (size_t i = 0; i < call.args.size(); ++i) {
        const HostTensor& t = call.args[i].arg.tensor;
        void* mapped = orch.HostAddress(copies[i]->device_address, t.bytes());
        // An In argument's copy may be kept for later calls: its tasks only read it.
        confined.push_back({mapped, t.bytes(), call.args[i].arg.access != Access::In});
        ctx.args.push_back(mapped);
        ctx.bytes.push_back(t.bytes());
        ctx.shapes.push_back(t.shape());
        ctx.access.push_back(call.args[i].arg.access);
        ctx.dtypes.push_back(t.dtype());
        pto_args.push_back(uint64_t(mapped));
    }
    // The device's span on the device clock, for the run's report. A
    // clock read costs about 70 ns on these VMs: the call's own start
    // stands in when the lease neither slept nor uploaded.
    stats.run_start_ns = lease.waited() ? DeviceClockNs() : called_ns;
    if (fn->plan) {
        auto plan = slot.plans.find(call.function);
        if (plan == slot.plans.end())
            throw Error(ErrorKind::NotFound, "chip plan '" + call.function + "' is not loaded on " + Describe());
        RunPlan(slot, *plan->second, call, copies);
        lease.HashUploads();
    } else {
        orch.ConfineTasksTo(std::move(confined));
        // This thread waits for the function's tasks right after it: their
        // submits need not wake the device's thread.
        const TaskPort::CallerDrivesScope caller_drives;
        if (fn->pto) {
            pto_args.push_back(0);  // never a null array, even with no arguments
            // As pto_run: a call the function made and did not check (a
            // refused pto_submit_task) fails the chip task, which would
            // otherwise end with its work missing.
            orch.Run(fn->pto, pto_args.data());
            lease.HashUploads();
        } else {
            std::exception_ptr thrown;
            try {
                auto scope = orch.BeginScope();
                fn->cpp(ctx);
            } catch (...) {
                thrown = std::current_exception();
            }
            lease.HashUploads();  // while the device runs what the function submitted
            ctx.args_memory.reset();
            if (set_aside.use_count() > 1) lease.SetAsideFor(set_aside);
            orch.WaitAll();  // the device tasks' failure first: it names the kernel and the device code
            if (thrown) std::rethrow_exception(thrown);
        }
    }
    stats.run_end_ns = DeviceClockNs();
    for (size_t i = 0; i < call.args.size(); ++i) {
        const TensorArg& a = call.args[i].arg;
        if (a.access == Access::In) continue;
        lease.Download(i);
        stats.bytes_downloaded += a.tensor.bytes();
    }
}

std::vector<std::unique_ptr<ChipExecutor>> OpenLocalChipExecutors(Host& host, const DistributedConfig& config,
                                                                  const std::shared_ptr<const ChipRegistry>& registry) {
    Validate(config);
    const auto& fns = host.functions();
    std::vector<std::string> selectors;
    for (size_t i = 0; i < config.device_ids.size(); ++i) {
        const int id = config.device_ids[i];
        if (size_t(id) >= fns.size())
            throw Error(ErrorKind::NotFound, "DistributedConfig: device_ids[" + std::to_string(i) + "] is " +
                                                 std::to_string(id) + ", but " + host.Describe() + " has " +
                                                 std::to_string(fns.size()) + " function(s) (0.." +
                                                 std::to_string(int(fns.size()) - 1) + ")");
        selectors.push_back(std::to_string(id));
    }
    std::vector<Device> devices = host.OpenAll(selectors);
    std::vector<std::unique_ptr<ChipExecutor>> executors;
    for (Device& dev : devices) {
        const uint32_t cores = DeviceInternals::Function(dev).Read32(SPYRE_REG_NUM_CORES);
        if (uint32_t(config.block_dim) > cores)
            throw Error(ErrorKind::InvalidArgument, "DistributedConfig: block_dim is " + std::to_string(config.block_dim) +
                                                        ", but " + dev.pci_address() + " has " + std::to_string(cores) +
                                                        " cores");
        executors.push_back(std::make_unique<LocalChipExecutor>(std::move(dev), config, registry));
    }
    return executors;
}


}  // namespace spyre::host
