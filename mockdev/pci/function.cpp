// SPDX-License-Identifier: Apache-2.0
#include "pci/function.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "spyre/common/futex.hpp"
#include "spyre/common/pid_namespace.hpp"
#include "log.hpp"
#include "pci/pci_address.hpp"
#include "spyre/uapi/spyre_region_size.h"
#include "spyre/uapi/spyre_regdesc.hpp"

namespace spyre::mockdev {

namespace {

constexpr RingGeometry kGeometry{};
constexpr TaskGeometry kTaskGeometry{};
constexpr uint32_t kNumCores = 32;
constexpr uint32_t kCaps = SPYRE_CAP_NOP | SPYRE_CAP_LAUNCH | SPYRE_CAP_CORRECTION | SPYRE_CAP_COPY |
                           SPYRE_CAP_COPY_INLINE | SPYRE_CAP_SEMAPHORE | SPYRE_CAP_TASKS | SPYRE_CAP_CQE_PHASE |
                           SPYRE_CAP_RING_STREAMS;
constexpr uint32_t kErrClearLatch = 1u << 0;

// <prefix>.d/c<card>f<fn>.<kind> (NewShmFile appends the random part).
std::string ShmName(const FunctionParams& p, const char* kind) {
    return ShmDirName(p.shm_prefix) + "/c" + std::to_string(p.card) + "f" + std::to_string(p.index) + "." + kind;
}

void CopyName(char* dst, size_t cap, const std::string& src) {
    std::memset(dst, 0, cap);
    std::memcpy(dst, src.data(), std::min(src.size(), cap - 1));
}

}  // namespace

Function::Function(const FunctionParams& params, CardMemory& card_memory, const CardPolicy& policy,
                   CardCores& compute)
    : params_(params),
      address_(FunctionAddress(params.card, params.index).ToString()),
      card_memory_(card_memory),
      policy_(policy),
      regs_shm_(ShmName(params, "regs"), SPYRE_BAR0_SIZE, shm_repairs_),
      ring_shm_(ShmName(params, "ring"), SPYRE_BAR4_SIZE, shm_repairs_),
      regs_(regs_shm_.data()),
      regions_(regs_, params.mem_size),
      executor_(regs_, policy.watchdog_ms, Window(), compute),
      server_(regs_, ring_shm_, kGeometry, kTaskGeometry, executor_, policy.watchdog_ms, Window(), compute,
              card_memory.host_link(), params.poll) {
    InitRegisters(0, SPYRE_STATUS_READY);
    SharedWord(server_.doorbell()->device_state).store(SPYRE_DEVSTATE_ALIVE);
}

Function::~Function() { Shutdown(); }

void Function::Start() {
    server_.Start(address_.substr(5));
}

void Function::Beat() {
    // Not while a reset or a hand-over renews the doorbell page: that beat
    // is skipped (the next one comes a period later), rather than the
    // card's heartbeat thread waiting behind a reset for every function.
    std::unique_lock guard(reset_mutex_, std::try_to_lock);
    if (guard.owns_lock() && !removed()) SharedWord(server_.doorbell()->heartbeat).fetch_add(1);
    // A holder that grew an object (found probing from outside: 64 MiB
    // past its slice, kept mapped after it let go) has it cut back here.
    if (guard.owns_lock()) {
        regs_shm_.CutBackGrowth();
        ring_shm_.CutBackGrowth();
        card_memory_.CutBackGrowth(params_.index);
    }
    LogShmRepairs();
}

uint64_t Function::ShmRepairs() const { return shm_repairs_.load() + card_memory_.Repairs(params_.index); }

// The SIGBUS handler that repaired only counts; the log line comes from here,
// on a normal thread: the heartbeat, or the close while the holder is known.
void Function::LogShmRepairs() {
    const uint64_t repairs = ShmRepairs();
    if (shm_repairs_logged_.exchange(repairs) == repairs) return;
    LOG_WARN("%s: a process resized this function's shared memory; sized back (%llu time(s) so far): bytes "
             "it cut off are zeros now, pages it added are gone (holder pid %d)",
             address_.c_str(), static_cast<unsigned long long>(repairs), int(holder()));
}

void Function::Shutdown() {
    state_.store(State::Removed);
    server_.Stop();
    server_.Gone();
}

void Function::UnlinkShm() {
    regs_shm_.Unlink();
    ring_shm_.Unlink();
}

uint16_t Function::device_id() const { return is_vf() ? SPYRE_PCI_DEVICE_VF : SPYRE_PCI_DEVICE_PF; }

// Power-on register image. Written as aligned 64-bit stores so no register,
// 32- or 64-bit, is ever seen half-written (identity words never blink to 0).
void Function::InitRegisters(uint64_t resets, uint32_t status) {
    alignas(8) std::array<uint8_t, SPYRE_REG_FILE_SIZE> image{};
    auto put32 = [&](uint32_t off, uint32_t v) { std::memcpy(image.data() + off, &v, sizeof v); };
    auto put64 = [&](uint32_t off, uint64_t v) { std::memcpy(image.data() + off, &v, sizeof v); };
    put32(SPYRE_REG_MAGIC, SPYRE_MAGIC);
    put32(SPYRE_REG_VERSION, SPYRE_VERSION);
    put32(SPYRE_REG_PCI_ID, SPYRE_PCI_VENDOR_IBM | uint32_t(device_id()) << 16);
    put32(SPYRE_REG_FUNC_ID, (params_.card << SPYRE_FUNC_ID_CARD_SHIFT) | params_.index |
                                 (is_vf() ? SPYRE_FUNC_ID_IS_VF : 0u));
    put32(SPYRE_REG_CAPS, kCaps);
    put32(SPYRE_REG_STATUS, status);
    put32(SPYRE_REG_NUM_CORES, kNumCores);
    put32(SPYRE_REG_DAEMON_PID, uint32_t(::getpid()));
    put32(SPYRE_REG_WATCHDOG_MS, policy_.watchdog_ms.load());
    put64(SPYRE_REG_MEM_SIZE, params_.mem_size);
    put64(SPYRE_REG_MEM_BASE, params_.mem_base);
    put32(SPYRE_REG_DB_OFFSET, kGeometry.db_offset);
    put32(SPYRE_REG_SQ_OFFSET, kGeometry.sq_offset);
    put32(SPYRE_REG_SQ_ENTRIES, kGeometry.sq_entries);
    put32(SPYRE_REG_CB_SIZE, kGeometry.cb_size);
    put32(SPYRE_REG_CQ_OFFSET, kGeometry.cq_offset);
    put32(SPYRE_REG_CQ_ENTRIES, kGeometry.cq_entries);
    put32(SPYRE_REG_CQE_SIZE, kGeometry.cqe_size);
    put32(SPYRE_REG_TQ_COUNT, server_.task_queues());
    put32(SPYRE_REG_TQ_DB_OFFSET, kTaskGeometry.db_offset);
    put32(SPYRE_REG_TQ_OFFSET, kTaskGeometry.offset);
    put32(SPYRE_REG_TQ_STRIDE, kTaskGeometry.stride);
    put32(SPYRE_REG_TQ_SQ_ENTRIES, kTaskGeometry.sq_entries);
    put32(SPYRE_REG_TQ_DESC_SIZE, kTaskGeometry.desc_size);
    put32(SPYRE_REG_TQ_CQ_OFFSET, kTaskGeometry.cq_offset);
    put32(SPYRE_REG_TQ_CQ_ENTRIES, kTaskGeometry.cq_entries);
    put32(SPYRE_REG_TQ_CQE_SIZE, kTaskGeometry.cqe_size);
    put32(SPYRE_REG_TQ_HALTED, server_.tasks_halted_mask());
    for (uint32_t q = 0; q < server_.task_queues(); ++q) put32(SPYRE_REG_TQ_GROUP_CORES(q), server_.group_cores(q));
    put64(SPYRE_REG_CNT_RESETS, resets);
    for (uint32_t off = 0; off < SPYRE_REG_FILE_SIZE; off += 8) {
        if (off >= SPYRE_REG_REGION_CMD && off < SPYRE_REG_REGION_BASE(SPYRE_REGION_MAX_ENTRIES)) continue;  // survives reset
        uint64_t v;
        std::memcpy(&v, image.data() + off, sizeof v);
        regs_.Store64(off, v);
    }
}

void Function::MirrorPolicy() {
    std::lock_guard regs(regs_mutex_);  // not while a reset or hand-over renews the registers
    regs_.Store32(SPYRE_REG_WATCHDOG_MS, policy_.watchdog_ms.load());
}

// Registers that reflect state kept elsewhere (the doorbell page, the server)
// are brought up to date before anyone reads them through a trap.
void Function::RefreshMirrors() {
    spyre_doorbell_page* db = server_.doorbell();
    regs_.Store32(SPYRE_REG_WATCHDOG_MS, policy_.watchdog_ms.load());  // a mapped store changes only this mirror
    regs_.Store32(SPYRE_REG_SQ_HEAD, SharedWord(db->sq_head).load());
    regs_.Store32(SPYRE_REG_SQ_TAIL, SharedWord(db->sq_tail).load());
    regs_.Store32(SPYRE_REG_CQ_HEAD, SharedWord(db->cq_head).load());
    regs_.Store32(SPYRE_REG_CQ_TAIL, SharedWord(db->cq_tail).load());
    auto status_bit = [&](uint32_t bit, bool on) {
        if (on)
            regs_.SetBits32(SPYRE_REG_STATUS, bit);
        else
            regs_.ClearBits32(SPYRE_REG_STATUS, bit);
    };
    status_bit(SPYRE_STATUS_RING_ENABLED, server_.ring_enabled());
    status_bit(SPYRE_STATUS_HALTED, server_.ring_halted());
    status_bit(SPYRE_STATUS_SLEEPING, SharedWord(db->device_sleeping).load() != 0);
    status_bit(SPYRE_STATUS_ERROR, regs_.Load32(SPYRE_REG_ERR_CODE) != 0);
    regs_.Store32(SPYRE_REG_TQ_HALTED, server_.tasks_halted_mask());
}

uint64_t Function::RegionSize(unsigned region) const { return spyre_region_size(region, params_.mem_size); }

ssize_t Function::ReadRegion(unsigned region, uint64_t offset, void* buf, size_t len) {
    if (removed()) return -ENODEV;
    if (len == 0) return 0;
    const uint64_t size = RegionSize(region);
    if (offset >= size) return 0;  // regions end where they end, like files
    len = size_t(std::min<uint64_t>(len, size - offset));
    switch (region) {
    case SPYRE_REGION_BAR0: return ReadBar0(offset, buf, len);
    case SPYRE_REGION_BAR2: return ReadMemory(std::min<uint64_t>(SPYRE_BAR2_SIZE, params_.mem_size), offset, buf, len);
    case SPYRE_REGION_BAR4: return ssize_t(ring_shm_.ReadAt(offset, buf, len));
    case SPYRE_REGION_CONFIG: {
        const ConfigSpace cs = Config();
        std::memcpy(buf, cs.data() + offset, len);
        return ssize_t(len);
    }
    case SPYRE_REGION_DEVMEM: return ReadMemory(params_.mem_size, offset, buf, len);
    default: return 0;
    }
}

ssize_t Function::WriteRegion(unsigned region, uint64_t offset, const void* buf, size_t len) {
    if (removed()) return -ENODEV;
    if (region == SPYRE_REGION_CONFIG) return -EACCES;
    if (len == 0) return 0;
    // Nothing is silently dropped at a region's end: a write must fit whole.
    const uint64_t size = RegionSize(region);
    if (offset >= size || len > size - offset) return -EINVAL;
    switch (region) {
    case SPYRE_REGION_BAR0: return WriteBar0(offset, buf, len);
    case SPYRE_REGION_BAR2: {
        // The aperture is 2 GiB whatever the memory size; past the memory,
        // stores go nowhere (an unbacked window), as on the bus.
        const uint64_t window = std::min<uint64_t>(SPYRE_BAR2_SIZE, params_.mem_size);
        if (offset < window) WriteMemory(offset, buf, size_t(std::min<uint64_t>(len, window - offset)));
        return ssize_t(len);
    }
    case SPYRE_REGION_BAR4: {
        // The server reads ring words atomically: stores are whole aligned
        // words too, and anything else is refused (a byte store racing the
        // server's atomic accesses is a bug of the writer, not a feature).
        if (offset % 4 != 0 || len % 4 != 0) return -EINVAL;
        for (size_t i = 0; i < len; i += 4) {
            uint32_t word;
            std::memcpy(&word, static_cast<const uint8_t*>(buf) + i, sizeof word);
            SharedWord(*reinterpret_cast<uint32_t*>(ring_shm_.data() + offset + i)).store(word);
        }
        const uint64_t sq_tail = kGeometry.db_offset + SPYRE_DB_SQ_TAIL;
        if (offset < sq_tail + sizeof(uint32_t) && offset + len > sq_tail) {
            std::atomic_thread_fence(std::memory_order_seq_cst);
            server_.RingDoorbell();
        }
        // Any store to the task doorbell page may be a task doorbell.
        if (offset < kTaskGeometry.db_offset + sizeof(spyre_task_doorbell) && offset + len > kTaskGeometry.db_offset) {
            std::atomic_thread_fence(std::memory_order_seq_cst);
            server_.TaskDoorbell();
        }
        return ssize_t(len);
    }
    case SPYRE_REGION_DEVMEM:
        WriteMemory(offset, buf, len);
        return ssize_t(len);
    default: return -EINVAL;
    }
}

// A trapped store into function memory: the host asked for it after what it
// waited for, and acts on it once the write returns (host_link.hpp).
void Function::WriteMemory(uint64_t offset, const void* buf, size_t len) {
    card_memory_.host_link().Observed();
    std::memcpy(card_memory_.view() + params_.mem_base + offset, buf, len);
    card_memory_.host_link().Published();
}

DeviceMemory Function::Window() const {
    return DeviceMemory(card_memory_.view() + params_.mem_base, params_.mem_size, &card_memory_.host_link());
}

// Function memory seen through a window of `window` bytes; past it, zeros.
ssize_t Function::ReadMemory(uint64_t window, uint64_t offset, void* buf, size_t len) const {
    const size_t inside = offset < window ? size_t(std::min<uint64_t>(len, window - offset)) : 0;
    if (inside) card_memory_.ReadAt(params_.mem_base + offset, buf, inside);  // through the files: holes stay free
    std::memset(static_cast<uint8_t*>(buf) + inside, 0, len - inside);
    return ssize_t(len);
}

ssize_t Function::ReadBar0(uint64_t offset, void* buf, size_t len) {
    std::lock_guard regs(regs_mutex_);  // not while a reset or hand-over renews the registers
    RefreshMirrors();
    const size_t inside = offset < SPYRE_REG_FILE_SIZE ? size_t(std::min<uint64_t>(len, SPYRE_REG_FILE_SIZE - offset)) : 0;
    regs_.ReadSpan(uint32_t(offset), buf, inside);
    std::memset(static_cast<uint8_t*>(buf) + inside, 0, len - inside);  // past the register file
    return ssize_t(len);
}

ssize_t Function::WriteBar0(uint64_t offset, const void* buf, size_t len) {
    if (len == 8) {
        if (offset % 8 != 0 || !Is64BitRegister(offset)) return -EINVAL;
        return 8;  // every 64-bit register is read-only
    }
    if (len != 4 || offset % 4 != 0) return -EINVAL;
    if (offset >= SPYRE_REG_FILE_SIZE) return 4;  // unbacked BAR space
    uint32_t value;
    std::memcpy(&value, buf, sizeof value);
    return WriteRegister(uint32_t(offset), value);
}

ssize_t Function::WriteRegister(uint32_t offset, uint32_t value) {
    switch (offset) {
    case SPYRE_REG_CONTROL:
        // A function nobody holds runs nothing (its queue server serves no
        // queue): file permissions let a process write an unheld function's
        // files, not run work there. The PF's CBs address the whole card,
        // held VFs' slices included.
        if ((value & SPYRE_CONTROL_RING_ENABLE) && !server_.serving()) {
            LOG_WARN("%s: ring enable refused: nobody holds the function (a function runs work only for its holder)",
                     address_.c_str());
            return -EACCES;
        }
        regs_.Store32(SPYRE_REG_CONTROL, value & SPYRE_CONTROL_RING_ENABLE);
        server_.SetRingEnabled(value & SPYRE_CONTROL_RING_ENABLE);
        break;
    case SPYRE_REG_RESET:
        if (value == SPYRE_RESET_KEY) Reset();
        break;
    case SPYRE_REG_SCRATCH: regs_.Store32(SPYRE_REG_SCRATCH, value); break;
    case SPYRE_REG_REGION_CMD:
        // The region table is its holder's, like the ring: a process
        // holding nothing could otherwise grant the unheld PF a region
        // reaching into the VF slices, and keep VFs from being enabled.
        if (!server_.serving()) {
            LOG_WARN("%s: region command refused: nobody holds the function (its memory regions are its holder's)",
                     address_.c_str());
            return -EACCES;
        }
        regions_.Command(value);
        break;
    case SPYRE_REG_REGION_ARG: regs_.Store32(SPYRE_REG_REGION_ARG, value); break;
    case SPYRE_REG_WATCHDOG_MS:
        // Card-wide policy: the PF may set it through this trapped write (the
        // front end lets only the PF's holder reach it); a VF's write is
        // ignored, as for any read-only register, and so is a value outside
        // what --watchdog-ms accepts.
        if (is_vf()) break;
        if (value < kWatchdogMsMin || value > kWatchdogMsMax) {
            LOG_WARN("%s: WATCHDOG_MS %u ignored: outside %u..%u ms", address_.c_str(), value, kWatchdogMsMin,
                     kWatchdogMsMax);
            break;
        }
        const_cast<CardPolicy&>(policy_).watchdog_ms.store(value);
        if (policy_.mirror_everywhere) policy_.mirror_everywhere();
        break;
    case SPYRE_REG_ERR_CLEAR:
        if (value & kErrClearLatch) regs_.ClearErrorLatch();
        break;
    default: break;  // read-only and reserved registers ignore writes, as hardware does
    }
    return 4;
}

spyre_device_info Function::DeviceInfo() const {
    spyre_device_info info{};
    info.argsz = sizeof info;
    info.flags = SPYRE_DEVICE_FLAGS_RESET | SPYRE_DEVICE_FLAGS_PCI | (is_vf() ? SPYRE_DEVICE_FLAGS_VF : 0u);
    info.num_regions = SPYRE_NUM_REGIONS;
    info.num_irqs = 1;
    info.vendor_id = SPYRE_PCI_VENDOR_IBM;
    info.device_id = device_id();
    info.card_index = uint16_t(params_.card);
    info.function_index = uint16_t(params_.index);
    info.contract_version = SPYRE_VERSION;
    info.daemon_pid = int32_t(::getpid());
    info.daemon_pid_ns = spyre::PidNamespaceId();  // a driver in another namespace does not watch our pid
    CopyName(info.pci_address, sizeof info.pci_address, address_);
    info.mem_size = params_.mem_size;
    info.num_cores = kNumCores;
    return info;
}

spyre_region_info Function::RegionInfo(unsigned region) const {
    spyre_region_info ri{};
    ri.argsz = sizeof ri;
    ri.index = region;
    ri.size = RegionSize(region);
    ri.offset = SPYRE_REGION_OFFSET(region);
    if (RegionShm(region).shm_name[0] != '\0')
        ri.flags = SPYRE_REGION_INFO_FLAG_READ | SPYRE_REGION_INFO_FLAG_WRITE | SPYRE_REGION_INFO_FLAG_MMAP;
    else if (region == SPYRE_REGION_CONFIG)
        ri.flags = SPYRE_REGION_INFO_FLAG_READ;
    return ri;
}

spyre_mock_region_shm Function::RegionShm(unsigned region) const {
    spyre_mock_region_shm m{};
    m.argsz = sizeof m;
    m.index = region;
    auto mappable = [&](const std::string& shm_name, uint64_t shm_offset, uint64_t mmap_size) {
        CopyName(m.shm_name, sizeof m.shm_name, shm_name);
        m.shm_offset = shm_offset;
        m.mmap_size = mmap_size;
    };
    switch (region) {
    case SPYRE_REGION_BAR0: mappable(regs_shm_.name(), 0, SPYRE_BAR0_SIZE); break;
    case SPYRE_REGION_BAR2: {
        // The function's own object only: a VF's slice, the PF's memory
        // outside the VF slices. The PF reaches VF memory through the device.
        const uint64_t own = card_memory_.MappableSize(params_.index);
        mappable(card_memory_.ObjectName(params_.index), 0, std::min<uint64_t>(SPYRE_BAR2_SIZE, own));
        break;
    }
    case SPYRE_REGION_BAR4: mappable(ring_shm_.name(), 0, SPYRE_BAR4_SIZE); break;
    case SPYRE_REGION_DEVMEM:
        mappable(card_memory_.ObjectName(params_.index), 0, card_memory_.MappableSize(params_.index));
        break;
    default: break;  // config space and absent BARs: trapped access or none
    }
    return m;
}

int Function::Reset() {
    if (removed()) return -ENODEV;
    std::lock_guard guard(reset_mutex_);
    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RESETTING);
    uint64_t resets = 0;
    {
        // Counted before any work ends: a driver that reaps an ABORTED
        // completion of this reset sees the reset that caused it.
        std::lock_guard regs(regs_mutex_);
        resets = ++resets_;
        regs_.Store64(SPYRE_REG_CNT_RESETS, resets);
    }
    {
        auto paused = server_.Pause();
        std::lock_guard regs(regs_mutex_);
        server_.Clear(paused);
        const uint32_t sleeping = regs_.Load32(SPYRE_REG_STATUS) & SPYRE_STATUS_SLEEPING;
        InitRegisters(resets, SPYRE_STATUS_READY | SPYRE_STATUS_RESETTING | sleeping);
        SharedWord(server_.doorbell()->device_state).store(SPYRE_DEVSTATE_ALIVE);
    }
    regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RESETTING);
    server_.RaiseIrqs();  // a driver blocked on the old rings looks again
    LOG_DEBUG("%s: function reset", address_.c_str());
    return 0;
}

void RedactPrivateRegisters(uint64_t offset, uint8_t* buf, size_t len) {
    auto zero = [&](uint64_t begin, uint64_t end) {  // register bytes [begin, end)
        const uint64_t lo = std::max(begin, offset), hi = std::min(end, offset + len);
        if (lo < hi) std::memset(buf + (lo - offset), 0, size_t(hi - lo));
    };
    static_assert(SPYRE_REG_ERR_USER_DATA == SPYRE_REG_ERR_ADDR + 8, "the error address and user_data are adjacent");
    zero(SPYRE_REG_ERR_ADDR, SPYRE_REG_ERR_USER_DATA + 8);
    // What the holder writes freely is its data too: a value others read
    // there is a channel out of the function.
    zero(SPYRE_REG_SCRATCH, SPYRE_REG_SCRATCH + 4);
    zero(SPYRE_REG_REGION_ARG, SPYRE_REG_REGION_ARG + 4);
    for (uint32_t i = 0; i < SPYRE_REGION_MAX_ENTRIES; ++i) zero(SPYRE_REG_REGION_BASE(i), SPYRE_REG_REGION_BASE(i) + 8);
}

std::string Function::RegisterDump(bool redact) {
    std::lock_guard regs(regs_mutex_);  // not while a reset or hand-over renews the registers
    RefreshMirrors();
    alignas(8) std::array<uint8_t, SPYRE_REG_FILE_SIZE> image;
    for (uint32_t off = 0; off < SPYRE_REG_FILE_SIZE; off += 8) {  // whole 64-bit loads: no torn counter
        const uint64_t v = regs_.Load64(off);
        std::memcpy(image.data() + off, &v, sizeof v);
    }
    if (redact) RedactPrivateRegisters(0, image.data(), image.size());
    return uapi::FormatRegisterDump({image.data(), image.size()},
                                    {reinterpret_cast<const uint8_t*>(server_.doorbell()), sizeof(spyre_doorbell_page)});
}

ConfigSpace Function::Config() const {
    return BuildConfigSpace(ConfigSpaceParams{params_.card, params_.index, sriov_num_vfs_.load()});
}

pid_t Function::holder() const {
    std::lock_guard lock(holder_mutex_);
    return holder_.pid;
}

ProcessId Function::holder_process() const {
    std::lock_guard lock(holder_mutex_);
    return holder_;
}

bool Function::HeldBy(const ProcessId& p) const {
    std::lock_guard lock(holder_mutex_);
    return holder_.pid != 0 && p.start_time != 0 && p == holder_;
}

void Function::SetHolder(const ProcessId& holder) {
    std::lock_guard lock(holder_mutex_);
    holder_ = holder;
}

bool Function::ClaimReleaseWait(const ProcessId& dead) {
    std::lock_guard lock(holder_mutex_);
    if (release_waiter_ || holder_.pid == 0 || holder_ != dead || release_overdue_ == dead) return false;
    release_waiter_ = true;
    return true;
}

void Function::EndReleaseWait(const ProcessId& dead, bool ran_out) {
    std::lock_guard lock(holder_mutex_);
    release_waiter_ = false;
    if (ran_out) release_overdue_ = dead;
}

int Function::Open(const ProcessId& holder) {
    State expected = State::Idle;
    if (!state_.compare_exchange_strong(expected, State::Open)) return expected == State::Open ? -EBUSY : -ENODEV;
    SetHolder(holder);
    card_memory_.SetHeld(params_.index, true);
    // While nobody held it anyone could write it (its resource files, the
    // PF's owner through the device): the new owner gets fresh objects too,
    // not only the last owner's successor. Its queues are served from now on.
    if (!HandOver(true)) {
        card_memory_.SetHeld(params_.index, false);
        SetHolder({});
        state_.store(State::Removed);
        return -ENODEV;
    }
    Reset();
    regions_.Clear();  // a new owner starts with no memory granted
    return 0;
}

void Function::Close() {
    if (state_.load() != State::Open) return;
    regs_.Store32(SPYRE_REG_CONTROL, 0);
    server_.SetRingEnabled(false);
    const bool handed_over = HandOver(false);  // nobody's: it runs nothing until the next holder
    regions_.Clear();  // the owner's grants end with it
    card_memory_.SetHeld(params_.index, false);
    LogShmRepairs();  // while the holder who did it is still known
    SetHolder({});
    State expected = State::Open;
    state_.compare_exchange_strong(expected, handed_over ? State::Idle : State::Removed);
}

bool Function::HandOver(bool serve) {
    std::lock_guard guard(reset_mutex_);
    auto paused = server_.Pause();  // the old owner's CBs and tasks end (ABORTED) before its memory goes
    server_.SetServing(false, paused);
    server_.Gone();  // whoever still waits on the old pages learns that the device is gone for them
    std::lock_guard regs(regs_mutex_);
    const uint64_t resets = resets_;
    try {
        regs_shm_.Renew();
        ring_shm_.Renew();
        card_memory_.Renew(params_.index);
    } catch (const std::system_error& e) {
        LOG_ERROR("%s: cannot give the next owner fresh memory (%s): function removed", address_.c_str(), e.what());
        return false;
    }
    server_.Clear(paused);
    server_.SetServing(serve, paused);
    InitRegisters(resets, SPYRE_STATUS_READY);
    SharedWord(server_.doorbell()->device_state).store(SPYRE_DEVSTATE_ALIVE);
    return true;
}

bool Function::TryMarkRemoved() {
    State expected = State::Idle;
    return state_.compare_exchange_strong(expected, State::Removed);
}

void Function::UndoMarkRemoved() {
    State expected = State::Removed;
    state_.compare_exchange_strong(expected, State::Idle);
}

}  // namespace spyre::mockdev
