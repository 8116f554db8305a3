// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/function.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <signal.h>
#include <thread>
#include <time.h>
#include <utility>

#include "device_backend.hpp"
#include "device_checks.hpp"
#include "heartbeat_watch.hpp"
#include "run_while.hpp"
#include "spyre/common/pid_namespace.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"
#include "spyre/uapi/spyre_region_size.h"

namespace spyre::driver {

namespace {

std::string RegisterName(uint32_t offset) {
    for (const auto& r : uapi::kRegisters)
        if (r.offset == offset) return r.name;
    return {};
}

// Registers whose writes have side effects in the device model: a store to
// the mapping would go unnoticed, so these are always written trapped.
bool HasSideEffects(uint32_t offset) {
    return offset == SPYRE_REG_CONTROL || offset == SPYRE_REG_RESET || offset == SPYRE_REG_ERR_CLEAR ||
           offset == SPYRE_REG_REGION_CMD;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

// Opening asks the device model before the driver knows its process or
// heartbeat: a stopped daemon is given up on after the heartbeat's bound.
// An open given up on closes the function on its own thread, if it ever
// gets that far, so the function is not left held.
Function Function::Open(const FunctionInfo& info) {
    return CallWithinHeartbeatBound<Function>([info] { return OpenHere(info); },
                                              "the device node of " + info.pci_address,
                                              info.sysfs_dir.parent_path().string());
}

Function Function::OpenHere(const FunctionInfo& info) {
    Function f;
    f.info_ = info;
    ErrorContext ctx{.device = info.pci_address};
    f.backend_ = OpenBackend(info);
    f.dev_info_ = f.backend_->DeviceInfo();
    if (f.dev_info_.vendor_id != SPYRE_PCI_VENDOR_IBM ||
        (f.dev_info_.device_id != SPYRE_PCI_DEVICE_PF && f.dev_info_.device_id != SPYRE_PCI_DEVICE_VF))
        throw Error(ErrorKind::ProtocolError, "device node does not describe a spyre function", ctx);
    checks::CheckContractVersion(f.dev_info_.contract_version, ctx);

    f.bar0_ = f.MapRegion(SPYRE_REGION_BAR0);
    f.bar4_ = f.MapRegion(SPYRE_REGION_BAR4);
    if (f.bar0_.size() < SPYRE_REG_FILE_SIZE || f.bar4_.size() < sizeof(spyre_doorbell_page))
        throw Error(ErrorKind::ProtocolError, "BAR0 or BAR4 mapping is smaller than the contract requires", ctx);
    // Plain loads: the liveness checks of Read32 need the doorbell page first.
    if (f.Load32(SPYRE_REG_MAGIC) != SPYRE_MAGIC)
        throw Error(ErrorKind::ProtocolError, "bad magic in MAGIC register",
                    ErrorContext{.device = info.pci_address, .reg = "MAGIC", .offset = SPYRE_REG_MAGIC});
    // The doorbell page must lie inside the mapping; the offset is kept, not re-read.
    f.db_offset_ = f.Load32(SPYRE_REG_DB_OFFSET);
    checks::CheckDoorbellOffset(f.db_offset_, f.bar4_.size(), ctx);
    // The daemon's pid names its process only in the daemon's own pid
    // namespace: from another one (a container's) it named nobody, and the
    // open failed DeviceLost with the daemon serving, or another process,
    // whose exit then read as the daemon's (found probing from outside).
    // There the heartbeat and the device state tell its loss. A device
    // before 3.4 reports no namespace: its pid is taken as ours.
    const uint32_t daemon_ns = f.dev_info_.daemon_pid_ns;
    f.watch_pid_ = f.dev_info_.daemon_pid > 0 && (daemon_ns == 0 || daemon_ns == PidNamespaceId());
    // -1 when not watched, or pidfd_open failed (kill(pid, 0) then)
    if (f.watch_pid_) f.pidfd_ = PidfdOpen(f.dev_info_.daemon_pid);
    // Devices before 3.3 never beat.
    if (const auto bound = HeartbeatWatch::BoundFromEnvironment();
        bound.count() != 0 && SPYRE_VERSION_GET_MINOR(f.dev_info_.contract_version) >= 3)
        f.heartbeat_ = std::make_unique<HeartbeatWatch>(bound);
    return f;
}

Function::Function(Function&& o) noexcept
    : info_(std::move(o.info_)), dev_info_(o.dev_info_), backend_(std::move(o.backend_)),
      pidfd_(std::exchange(o.pidfd_, -1)), watch_pid_(o.watch_pid_), lost_(o.lost_), lost_why_(o.lost_why_), heartbeat_(std::move(o.heartbeat_)), task_queues_held_(o.task_queues_held_), next_probe_ns_(o.next_probe_ns_), db_offset_(o.db_offset_),
      bar0_(std::move(o.bar0_)), bar4_(std::move(o.bar4_)) {}

bool Function::HoldTaskQueue(uint32_t group) noexcept {
    const uint32_t bit = 1u << group;
    return (std::atomic_ref<uint32_t>(task_queues_held_).fetch_or(bit, std::memory_order_acq_rel) & bit) == 0;
}

void Function::ReleaseTaskQueue(uint32_t group) noexcept {
    std::atomic_ref<uint32_t>(task_queues_held_).fetch_and(~(1u << group), std::memory_order_acq_rel);
}

bool Function::HoldCommandRing() noexcept {
    static_assert(SPYRE_TQ_MAX_QUEUES < 31, "the CB ring's bit is above the task queues'");
    return (std::atomic_ref<uint32_t>(task_queues_held_).fetch_or(kCommandRingBit, std::memory_order_acq_rel) &
            kCommandRingBit) == 0;
}

void Function::ReleaseCommandRing() noexcept {
    std::atomic_ref<uint32_t>(task_queues_held_).fetch_and(~kCommandRingBit, std::memory_order_acq_rel);
}

bool Function::TaskQueueHeld(uint32_t group) const noexcept {
    // std::atomic_ref of a const object is C++26: the builtin it wraps.
    return (__atomic_load_n(&task_queues_held_, __ATOMIC_ACQUIRE) & (1u << group)) != 0;
}

Function& Function::operator=(Function&& o) noexcept {
    if (this != &o) {
        Close();
        info_ = std::move(o.info_);
        dev_info_ = o.dev_info_;
        backend_ = std::move(o.backend_);
        pidfd_ = std::exchange(o.pidfd_, -1);
        watch_pid_ = o.watch_pid_;
        lost_ = o.lost_;
        lost_why_ = o.lost_why_;
        heartbeat_ = std::move(o.heartbeat_);
        task_queues_held_ = o.task_queues_held_;
        next_probe_ns_ = o.next_probe_ns_;
        db_offset_ = o.db_offset_;
        bar0_ = std::move(o.bar0_);
        bar4_ = std::move(o.bar4_);
    }
    return *this;
}

Function::~Function() { Close(); }

void Function::Close() noexcept {
    bar0_ = MappedRegion();
    if (backend_) {
        // Hand the function over before the fds close, so whoever opens it
        // next finds it free, waiting for the device only while it serves:
        // a device model that stopped would never answer. Its node is free
        // once the fds close. (BAR4 stays mapped meanwhile for the
        // heartbeat; the hand-over gives the next owner fresh pages.)
        backend_->Release([this]() noexcept { return StillServing(); });
        backend_.reset();
    }
    bar4_ = MappedRegion();
    if (pidfd_ >= 0) ::close(std::exchange(pidfd_, -1));
}

bool Function::StillServing() const noexcept {
    if (lost() || !bar4_.data()) return false;
    bool serving = false;
    try {
        serving = ServingProcess() && !HeartbeatStill();
    } catch (...) {  // the watch's lock: a system error there leaves nothing to wait for
    }
    // Given up on: later calls fail at once as DeviceLost, and the close
    // asks the device nothing more.
    if (!serving) std::atomic_ref<bool>(lost_).store(true, std::memory_order_relaxed);
    return serving;
}

int Function::fd() const noexcept { return backend_ ? backend_->fd() : -1; }

const char* Function::backend_name() const noexcept { return backend_ ? backend_->name() : "closed"; }

DeviceBackend& Function::Backend() const {
    if (!backend_)
        throw Error(ErrorKind::InvalidArgument, "the function is closed (moved from)", ErrorContext{.device = info_.pci_address});
    return *backend_;
}

spyre_region_info Function::RegionInfo(uint32_t index) const { return Backend().RegionInfo(index); }

MappedRegion Function::MapRegion(uint32_t index) const { return Backend().Map(index); }

RegionFile Function::OpenRegionFile(uint32_t index) const { return Backend().File(index); }

namespace {
void CheckRegisterOffset(const FunctionInfo& info, uint32_t offset, uint32_t width) {
    // In 64 bits: offset 0xfffffffc + 4 wrapped to 0 and passed, and the
    // access landed 4 GiB past BAR0 (found probing from outside).
    if (offset % width != 0 || uint64_t(offset) + width > SPYRE_REG_FILE_SIZE)
        throw Error(ErrorKind::InvalidArgument,
                    "register offset must be " + std::to_string(width) + "-byte aligned and inside the register file",
                    ErrorContext{.device = info.pci_address, .reg = RegisterName(offset), .offset = offset});
}
}  // namespace

uint32_t Function::Load32(uint32_t offset) const noexcept {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(bar0_.data() + offset)).load(std::memory_order_acquire);
}

uint32_t Function::Read32(uint32_t offset) const {
    CheckRegisterOffset(info_, offset, 4);
    CheckAliveThrottled();
    return Load32(offset);
}

uint64_t Function::Read64(uint32_t offset) const {
    CheckRegisterOffset(info_, offset, 8);
    CheckAliveThrottled();
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bar0_.data() + offset)).load(std::memory_order_acquire);
}

void Function::CountDma(uint64_t to_device_bytes, uint64_t from_device_bytes, uint64_t busy_ns) noexcept {
    auto add = [&](uint32_t offset, uint64_t delta) {
        if (delta != 0 && offset + 8 <= bar0_.size())
            std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(bar0_.data() + offset))
                .fetch_add(delta, std::memory_order_relaxed);
    };
    add(SPYRE_REG_CNT_DMA_TO_DEV_BYTES, to_device_bytes);
    add(SPYRE_REG_CNT_DMA_FROM_DEV_BYTES, from_device_bytes);
    add(SPYRE_REG_CNT_DMA_BUSY_NS, busy_ns);
}

void Function::Write32(uint32_t offset, uint32_t value) {
    CheckRegisterOffset(info_, offset, 4);
    if (HasSideEffects(offset)) return WriteTrapped32(offset, value);
    CheckAliveThrottled();
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(bar0_.data() + offset)).store(value, std::memory_order_release);
}

uint32_t Function::ReadTrapped32(uint32_t offset) const {
    CheckRegisterOffset(info_, offset, 4);
    auto bytes = ReadRegion(SPYRE_REGION_BAR0, offset, 4);
    uint32_t v;
    std::memcpy(&v, bytes.data(), 4);
    return v;
}

uint64_t Function::ReadTrapped64(uint32_t offset) const {
    CheckRegisterOffset(info_, offset, 8);
    auto bytes = ReadRegion(SPYRE_REGION_BAR0, offset, 8);
    uint64_t v;
    std::memcpy(&v, bytes.data(), 8);
    return v;
}

void Function::WriteTrapped32(uint32_t offset, uint32_t value) {
    CheckRegisterOffset(info_, offset, 4);
    uint8_t bytes[4];
    std::memcpy(bytes, &value, 4);
    WriteRegion(SPYRE_REGION_BAR0, offset, bytes);
}

bool Function::WriteTrapped32WhileServing(uint32_t offset, uint32_t value) noexcept {
    try {
        WriteTrapped32(offset, value);
        return true;
    } catch (...) {  // refused, lost or given up on: a teardown has nothing more to do
        return false;
    }
}

void Function::Request(std::function<void(Syscalls&, int)> request) const {
    if (lost()) throw LostError();
    if (!Backend().RequestWhileServing(std::move(request), [this]() noexcept { return StillServing(); }))
        throw LostError();
}

namespace {
ErrorContext RegionContext(const FunctionInfo& info, uint32_t index, uint64_t offset) {
    ErrorContext ctx{.device = info.pci_address, .reg = index == SPYRE_REGION_BAR0 ? RegisterName(uint32_t(offset)) : "",
                     .offset = offset};
    if (offset > SPYRE_REGION_OFFSET_MASK) throw Error(ErrorKind::InvalidArgument, "region offset too large", ctx);
    return ctx;
}
}  // namespace

std::vector<uint8_t> Function::ReadRegion(uint32_t index, uint64_t offset, size_t length) const {
    ErrorContext ctx = RegionContext(info_, index, offset);
    // Before the buffer is taken: a huge length threw std::bad_alloc. The
    // contract's sizes, not a GET_REGION_INFO round trip: that one is not
    // bounded by the heartbeat, and a stopped daemon held the caller for good.
    // An index of no region: the largest, and the request refuses the index.
    uint64_t size = spyre_region_size(index, dev_info_.mem_size);
    if (size == 0) size = std::max<uint64_t>(SPYRE_BAR2_SIZE, dev_info_.mem_size);
    if (offset > size || length > size - offset)
        throw Error(ErrorKind::InvalidArgument,
                    "reading " + std::to_string(length) + " bytes at offset " + std::to_string(offset) +
                        " runs past region " + std::to_string(index) + " (" + std::to_string(size) + " bytes)",
                    ctx);
    const auto out = std::make_shared<std::vector<uint8_t>>(length);
    Request(Backend().ReadRequest(index, offset, out, std::move(ctx)));
    return std::move(*out);
}

void Function::WriteRegion(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes) {
    ErrorContext ctx = RegionContext(info_, index, offset);
    Request(Backend().WriteRequest(index, offset, std::vector<uint8_t>(bytes.begin(), bytes.end()), std::move(ctx)));
}

void Function::Reset() {
    Request(Backend().ResetRequest());
    // The reset returns once the model has reset; RESETTING only shows if a
    // reset raced with ours, so wait it out with a bound.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_RESETTING) {
        CheckAlive();
        if (std::chrono::steady_clock::now() > deadline)
            throw Error(ErrorKind::Timeout, "function reset did not finish within 5 s",
                        ErrorContext{.device = info_.pci_address, .reg = "STATUS", .offset = SPYRE_REG_STATUS});
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

std::string Function::RegisterDump() const {
    auto regs = ReadRegion(SPYRE_REGION_BAR0, 0, SPYRE_REG_FILE_SIZE);
    uint32_t db_offset = Read32(SPYRE_REG_DB_OFFSET);
    auto db = ReadRegion(SPYRE_REGION_BAR4, db_offset, sizeof(spyre_doorbell_page));
    return uapi::FormatRegisterDump(regs, db);
}

bool Function::Alive() const {
    if (lost()) return false;
    const bool alive = Probe();
    if (!alive) std::atomic_ref<bool>(lost_).store(true, std::memory_order_relaxed);
    return alive;
}

spyre_doorbell_page* Function::Doorbell() const noexcept {
    return reinterpret_cast<spyre_doorbell_page*>(bar4_.data() + db_offset_);
}

uint32_t Function::DeviceState() const noexcept {
    return std::atomic_ref<uint32_t>(Doorbell()->device_state).load(std::memory_order_acquire);
}

bool Function::Probe() const { return DeviceState() == SPYRE_DEVSTATE_ALIVE && ServingProcess() && !HeartbeatStill(); }

bool Function::ServingProcess() const noexcept {
    if (!watch_pid_) return true;  // no process to watch, or one our pids do not name
    if (pidfd_ >= 0) {
        // Readable once the daemon has exited. A signal the program handles
        // interrupts the look (EINTR): taken for an exit, it marked a live
        // device lost for good (found probing from outside). Asked again.
        pollfd p{pidfd_, POLLIN, 0};
        int r;
        do r = ::poll(&p, 1, 0);
        while (r < 0 && errno == EINTR);
        if (r >= 0) return r == 0;
        // Any other failure tells nothing of the daemon: ask the kernel by pid.
    }
    return ::kill(dev_info_.daemon_pid, 0) == 0 || errno == EPERM;
}

bool Function::HeartbeatStill() const {
    if (!heartbeat_) return false;
    const uint32_t beat = std::atomic_ref<uint32_t>(Doorbell()->heartbeat).load(std::memory_order_acquire);
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    if (!heartbeat_->Still(beat, now)) return false;
    std::atomic_ref<uint8_t>(lost_why_).store(kNotResponding, std::memory_order_relaxed);
    return true;
}

void Function::CheckAlive() const {
    if (!Alive()) throw LostError();
}

void Function::CheckAliveThrottled() const {
    if (lost() || DeviceState() != SPYRE_DEVSTATE_ALIVE) throw LostError();
    // The coarse clock is a vDSO read of a few ns; a pidfd poll is a system call.
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const int64_t now = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    std::atomic_ref<int64_t> next(next_probe_ns_);
    int64_t due = next.load(std::memory_order_relaxed);
    if (now < due) return;
    // One thread probes per period; the others go on.
    if (!next.compare_exchange_strong(due, now + std::chrono::nanoseconds(kProbePeriod).count(),
                                      std::memory_order_relaxed))
        return;
    CheckAlive();
}

Error Function::LostError() const {
    const std::string daemon = "spyre-mockdev pid " + std::to_string(dev_info_.daemon_pid);
    if (std::atomic_ref<uint8_t>(lost_why_).load(std::memory_order_relaxed) == kNotResponding && heartbeat_)
        return Error(ErrorKind::DeviceLost,
                     "the device stopped responding: its heartbeat has not moved for " +
                         std::to_string(heartbeat_->bound().count()) + " ms (SPYRE_HEARTBEAT_TIMEOUT_MS; is " +
                         daemon + " stopped or hung?)",
                     ErrorContext{.device = info_.pci_address});
    return Error(ErrorKind::DeviceLost,
                 "the device model serving this function is gone (" + daemon + " exited or shut down)",
                 ErrorContext{.device = info_.pci_address});
}

}  // namespace spyre::driver
