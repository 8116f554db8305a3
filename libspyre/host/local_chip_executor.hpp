// SPDX-License-Identifier: Apache-2.0
// The ChipExecutor of a device this process opened: one seed-004
// orchestration runtime per slot (a chip task running at once), each on its
// own share of the device's task queues, device kernels uploaded once, and
// device copies of host tensor ranges kept between calls (keyed by the exact
// range), each chunk of a copy reused only while the host range's chunk
// still hashes to what the copy holds.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "content_hash.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/device/device.hpp"
#include "spyre/device/host.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/orchestration/orchestrator.hpp"

namespace spyre::host {

class LocalChipExecutor final : public ChipExecutor {
public:
    LocalChipExecutor(Device device, const DistributedConfig& config, std::shared_ptr<const ChipRegistry> registry);
    ~LocalChipExecutor() override;

    std::string Describe() const override;
    void LoadKernel(int32_t kernel_id, const std::vector<uint8_t>& program) override;
    // On every slot or none: a slot that cannot load it leaves the others
    // as they were.
    void LoadPlan(const std::string& name, const CompilerOutput& plan) override;
    // Takes back what LoadPlan loaded under `name` (a registration that
    // another device refused).
    void UnloadPlan(const std::string& name);
    unsigned Concurrency() const override { return unsigned(slots_.size()); }
    // Whether every chip slot is held by calls of the calling thread (a
    // chip function waiting on a nested run): another call could only fail.
    bool AllSlotsHeldByThisThread();
    // Whether a call would get a slot without waiting (a look: another
    // thread may take it first).
    bool HasFreeSlot();
    // The Worker let go of this executor on a thread that is closing it:
    // its device says so to Host::Open (DeviceCore::closing).
    void MarkClosing() noexcept;
    ChipCallStats Run(const ChipCall& call) override;
    // The same, called at `called_ns` on the device clock (the caller's
    // own read, which this call then need not repeat), filling `stats` as
    // it goes: a call that throws still tells what it moved (a failed
    // task's report and trace said it uploaded nothing: found probing).
    void Run(const ChipCall& call, uint64_t called_ns, ChipCallStats& stats);

    // Chip tasks `device` runs at once under `config`
    // (DistributedConfig::chip_tasks_per_device); InvalidArgument when the
    // config asks for more than the device has task queues.
    static unsigned Room(Device& device, const DistributedConfig& config);

    // Bytes of device copies kept between calls at most: this, or a quarter
    // of the function's memory when that is less.
    static constexpr uint64_t kCacheBytes = 256ull << 20;
    // A slot keeps a one-shot argument's scratch copy up to this size; a
    // larger one is given back after its call.
    static constexpr uint64_t kScratchKeepBytes = 16ull << 20;

private:
    using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // storage, offset, bytes
    // Where a copy's upload for the calls reading it stands.
    enum class Upload : uint8_t { Done, Running, Failed };
    struct Copy {
        DeviceBuffer buffer;
        uint64_t device_address = 0;  // each slot's runtime maps it at its own host address
        std::weak_ptr<HostTensor::Storage> storage;
        // The chunk hashes of the host bytes this copy holds, as of its last
        // upload or download; empty while not known (new, written by a call
        // in flight, or by one that failed). A chunk is reused only while
        // the host range's chunk hashes the same: a caller may have written
        // the range through any pointer since.
        ChunkHashes holds;
        // The run of the call that last made `holds` true and the writes of
        // the storage it saw (ChipCall::run, ChipArg::writes): a call that
        // sees the same reads the copy without hashing the host bytes again.
        // run 0: none. read_at: the HostBytesTick when `holds` was last read
        // from or written to the host bytes (ChipCall::submitted).
        uint64_t run = 0, writes = 0, read_at = 0;
        uint64_t last_use = 0;
        unsigned users = 0;    // arguments of calls in flight that hold it: never evicted then
        unsigned readers = 0;  // of those, the In and InOut ones: their bytes are current once uploaded
        Upload upload = Upload::Done;  // Running: a reader's call is moving the bytes (lock let go)
    };
    // What one chip task at a time runs on.
    struct Slot {
        std::optional<Orchestrator> orch;
        std::optional<SpyreStream> plan_stream;  // a stream of its own, made on first plan
        std::map<std::string, std::shared_ptr<const ExecutionPlan>> plans;
        // A one-shot call's device copies (ChipCall::one_shot), by argument:
        // reused by the slot's next such call, so a served remote call
        // neither allocates nor hashes.
        std::deque<Copy> scratch;  // a deque: growing keeps the copies a lease points to in place
    };
    class Lease;
    // A chip call's argument copies that its function's views outlived
    // (ChipContext::args_memory): out of the cache, freed with the views.
    struct SetAside {
        std::shared_ptr<const void> mapping;  // Orchestrator::MemoryHold of the call's slot
        std::vector<DeviceBuffer> buffers;
    };
    // Under mu_. The device copy of `t` (a new one from AllocateEvicting).
    Copy& CopyFor(const HostTensor& t);
    // Under mu_. Slot `slot`'s scratch copy for argument `i` of a one-shot
    // call, at least `bytes` long.
    Copy& ScratchFor(Slot& slot, size_t i, uint64_t bytes);
    // Under mu_. `bytes` of device memory; when the device is out of
    // memory, copies no call holds are dropped and the allocation tried
    // once more.
    DeviceBuffer AllocateEvicting(uint64_t bytes);
    void Evict();  // under mu_
    void RunPlan(Slot& slot, const ExecutionPlan& plan, const ChipCall& call, const std::vector<Copy*>& copies);

    Device device_;
    std::shared_ptr<const ChipRegistry> registry_;
    std::vector<std::unique_ptr<Slot>> slots_;
    std::vector<DeviceBuffer> kernels_;
    std::map<int32_t, std::vector<uint8_t>> programs_;  // under mu_: what LoadKernel loaded, by kernel id

    std::mutex mu_;  // the copies and the free slots; never held while bytes move
    // Under mu_: the set-asides handed out, whose buffers the executor frees
    // when it goes (their views are private zeros by then): a view kept
    // past the Worker must not keep its device open.
    std::vector<std::weak_ptr<SetAside>> set_asides_;
    // Waiters look at the state under mu_ after arming, so producers may
    // notify with mu_ held or after letting it go.
    EventCount slot_free_;
    EventCount uploaded_;  // a copy's upload ended
    std::vector<Slot*> free_slots_;
    std::map<Key, Copy> copies_;  // node-based: a Copy stays put while others come and go
    uint64_t copy_bytes_ = 0, use_clock_ = 0, cache_limit_ = kCacheBytes;
    // Calls since the copies of storages that are gone were last dropped:
    // looking for them walks every copy, so not after every call.
    unsigned calls_since_sweep_ = 0;
    // Calls that gave their slot and copies back so far, and calls waiting
    // for memory: a call short of memory waits for a give-back while
    // another call goes on (Lease::TakeCopy).
    uint64_t gave_back_ = 0;
    size_t memory_waiters_ = 0;
};

// Opens config.device_ids of `host` (checked first: InvalidArgument or
// NotFound naming the field and value) as executors, in that order.
std::vector<std::unique_ptr<ChipExecutor>> OpenLocalChipExecutors(Host& host, const DistributedConfig& config,
                                                                  const std::shared_ptr<const ChipRegistry>& registry);

}  // namespace spyre::host
