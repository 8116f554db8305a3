// SPDX-License-Identifier: Apache-2.0
//
// One PCI function (the PF or a VF) of a mock card: its BAR0 register file
// and BAR4 ring in shared memory, its slice of the card memory, its queue
// server, and the device semantics of every region. The sysfs-style resource
// files and the device node both reach the regions through ReadRegion and
// WriteRegion, so trapped access behaves the same on either path.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "pci/card_memory.hpp"
#include "pci/card_policy.hpp"
#include "execution/cb_executor.hpp"
#include "execution/card_cores.hpp"
#include "pci/config_space.hpp"
#include "execution/queue_server.hpp"
#include "pci/memory_regions.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre_ioctl.h"

namespace spyre::mockdev {

struct FunctionParams {
    unsigned card = 0;
    unsigned index = 0;      // 0 = PF, i = VF i
    uint64_t mem_base = 0;   // card address of this function's memory
    uint64_t mem_size = 0;
    std::string shm_prefix;
    std::chrono::microseconds poll{50};
};

// Registers that carry a holder's addresses or data: ERR_ADDR, ERR_USER_DATA,
// the bases of the granted memory regions, and the two it writes freely
// (SCRATCH, REGION_ARG). A reader other than the
// holder (or the card's PF holder) gets zeros there (docs/security.md).
// Zeroes the bytes of `buf` (register file bytes [offset, offset + len))
// that fall in them.
void RedactPrivateRegisters(uint64_t offset, uint8_t* buf, size_t len);

// A process as the device knows its holder. A pid alone is reused once its
// process is gone (a child may keep the node open after its parent, the
// holder, exits); with the start time (/proc/PID/stat field 22) it is not.
struct ProcessId {
    pid_t pid = 0;
    uint64_t start_time = 0;  // clock ticks after boot; 0: unknown
    bool operator==(const ProcessId&) const = default;
};

class Function {
public:
    // Creates the register and ring objects (throws std::system_error) and
    // brings the registers to their power-on state. The server starts in
    // Start(). Programs run on the card's `compute` cores under the card's
    // `policy`; the function's memory is its window of `card_memory`.
    Function(const FunctionParams& params, CardMemory& card_memory, const CardPolicy& policy,
             CardCores& compute);
    ~Function();

    Function(const Function&) = delete;
    Function& operator=(const Function&) = delete;

    void Start();
    // The daemon or the PF lets go of this function: stop the server, tell
    // drivers (device_state GONE, irq waiters woken). Later accesses get ENODEV.
    void Shutdown();
    // Removes the shared-memory names (mappings stay valid until destruction).
    void UnlinkShm();
    // One heartbeat (the doorbell page's `heartbeat`, contract 3.3): the
    // card's heartbeat thread calls it every SPYRE_HEARTBEAT_PERIOD_MS. A
    // function shut down beats no more. It also logs new shm repairs.
    void Beat();
    // The card's policy changed: its mirror in the register file (WATCHDOG_MS)
    // takes the new value, for mapped readers too.
    void MirrorPolicy();
    // How often the daemon sized back one of this function's objects after a
    // process (its holder: nobody else is given the names) shrank it.
    uint64_t ShmRepairs() const;

    unsigned card() const { return params_.card; }
    unsigned index() const { return params_.index; }
    bool is_vf() const { return params_.index != 0; }
    uint16_t device_id() const;
    const std::string& address() const { return address_; }
    // Its slice of the card memory: card addresses [mem_base, mem_base + mem_size).
    uint64_t mem_base() const { return params_.mem_base; }
    uint64_t mem_size() const { return params_.mem_size; }

    // Trapped region access: bytes transferred, or -errno.
    ssize_t ReadRegion(unsigned region, uint64_t offset, void* buf, size_t len);
    ssize_t WriteRegion(unsigned region, uint64_t offset, const void* buf, size_t len);
    uint64_t RegionSize(unsigned region) const;

    spyre_device_info DeviceInfo() const;
    spyre_region_info RegionInfo(unsigned region) const;  // region < SPYRE_NUM_REGIONS
    // The mock transport: the shared-memory window a mappable region is
    // served from (empty name if not mappable). Only the holder asks.
    spyre_mock_region_shm RegionShm(unsigned region) const;  // region < SPYRE_NUM_REGIONS

    // Function-level reset (device node open, SPYRE_IOC_RESET, REG_RESET, sysfs reset).
    int Reset();  // 0 or -ENODEV
    // `redact`: the holder's addresses and data read as 0 (RedactPrivateRegisters).
    std::string RegisterDump(bool redact = false);
    // The `stats` attribute (function_stats.cpp): counters, ring state,
    // memory in use and the holder, as "name value" lines; no addresses.
    std::string Stats();
    // The `stats.json` attribute (uapi/spyre_stats.h): the same plus the
    // granted regions, the error registers and the status decoded; region
    // bases and the error's address and user_data are null unless
    // `show_private` (the reader may see the holder's addresses).
    std::string StatsJson(bool show_private);
    ConfigSpace Config() const;
    void SetSriovNumVfs(uint16_t num_vfs) { sriov_num_vfs_.store(num_vfs); }
    // Where the device may grant memory regions to this function: refused
    // (false) while a granted region lies beyond `limit`.
    bool SetRegionLimit(uint64_t limit) { return regions_.SetGrantable(limit); }

    // Device node ownership: one open file at a time, held by process
    // `holder` (a thread group). Open claims, gives the new owner fresh
    // objects (what anyone wrote while nobody held it is not its) and
    // resets; Close lets go and hands the next owner fresh objects too:
    // registers, rings and memory are new and zeroed, and whatever the old
    // holder still maps is no longer the device's. Only while held does the
    // function run anything: its queues are served from Open to Close, and
    // a ring enable while nobody holds it is refused (-EACCES).
    int Open(const ProcessId& holder);  // 0, -EBUSY, -ENODEV
    void Close();
    // The pid of the process holding the device node, or 0.
    pid_t holder() const;
    // The same with its start time ({0, 0}: nobody).
    ProcessId holder_process() const;
    // Whether `p` is the holder: same pid and same start time (a process
    // that got a dead holder's pid is not it).
    bool HeldBy(const ProcessId& p) const;
    // The holder's process ended but the node is still held: the kernel's
    // release of its file is on its way, or a child it forked keeps the file
    // (then the release never comes). An open may wait for that release
    // (the front end, fuse_fs.cpp); one open of this function at a time,
    // and once per dead holder. ClaimReleaseWait is false if another open
    // waits, if `dead` no longer holds the function, or if a wait for `dead`
    // ran out already; EndReleaseWait ends a claim (`ran_out`: the release
    // did not come).
    bool ClaimReleaseWait(const ProcessId& dead);
    void EndReleaseWait(const ProcessId& dead, bool ran_out);
    // For VF removal: succeeds only while nobody holds the device node.
    bool TryMarkRemoved();
    void UndoMarkRemoved();

private:
    enum class State { Idle, Open, Removed };

    void InitRegisters(uint64_t resets, uint32_t status);
    // The function changes hands: fresh objects for registers, rings and
    // memory, and its queues served from then on only if `serve` (a new
    // holder takes it; a function nobody holds runs nothing). False if the
    // objects could not be made (the function is then removed, its queues
    // not served: nothing of the old owner's may reach the next one).
    bool HandOver(bool serve);
    // Readers of the register file through a trap (BAR0, regs, stats) hold
    // regs_mutex_ meanwhile: a reset or hand-over renews the file under it.
    void RefreshMirrors();
    void SetHolder(const ProcessId& holder);
    // Logs repairs of this function's objects not logged yet (shm_guard.hpp).
    void LogShmRepairs();
    // What both stats attributes read, loaded once so that they agree.
    struct StatsSnapshot {
        struct Region {
            uint32_t index;
            uint64_t base, size;
        };
        uint64_t timestamp_ns = 0;
        pid_t holder_pid = 0;
        std::string holder_comm;
        uint32_t status = 0;
        uint64_t mem_used = 0, task_cores = 0;
        std::vector<Region> regions;
        std::vector<uint64_t> counters;  // in SPYRE_STATS_COUNTERS order
    };
    StatsSnapshot SnapshotStats();
    ssize_t ReadBar0(uint64_t offset, void* buf, size_t len);
    ssize_t WriteBar0(uint64_t offset, const void* buf, size_t len);
    ssize_t WriteRegister(uint32_t offset, uint32_t value);
    ssize_t ReadMemory(uint64_t window, uint64_t offset, void* buf, size_t len) const;
    void WriteMemory(uint64_t offset, const void* buf, size_t len);
    // The function's window of the card memory, as its executors see it.
    DeviceMemory Window() const;
    bool removed() const { return state_.load() == State::Removed; }

    const FunctionParams params_;
    const std::string address_;
    CardMemory& card_memory_;
    const CardPolicy& policy_;
    ShmRepairCount shm_repairs_{0};  // of regs_shm_ and ring_shm_; before them: they count in it
    std::atomic<uint64_t> shm_repairs_logged_{0};  // what LogShmRepairs reported last
    ShmObject regs_shm_;
    ShmObject ring_shm_;
    RegisterFile regs_;
    RegionTable regions_;
    CbExecutor executor_;
    QueueServer server_;  // the CB ring and the task queues

    std::mutex reset_mutex_;  // one reset or hand-over at a time
    // Held by a reset or hand-over while it renews the registers and rings,
    // and by each trapped read of them: a reader sees them before or after,
    // never halfway. Not the heartbeat's lock, so no flood of reads can
    // still a function's heartbeat.
    std::mutex regs_mutex_;
    // Resets of this function, the daemon's own count (under regs_mutex_):
    // CNT_RESETS lives in the holder-writable register file, and read from
    // there at a hand-over it carried 64 bits the old holder chose to the
    // next one (found probing from outside).
    uint64_t resets_ = 0;
    std::atomic<State> state_{State::Idle};
    mutable std::mutex holder_mutex_;
    ProcessId holder_;  // guarded by holder_mutex_; pid 0 while nobody holds it
    // Guarded by holder_mutex_: an open waits for a dead holder's release
    // (ClaimReleaseWait); the dead holder whose release a wait ran out for.
    bool release_waiter_ = false;
    ProcessId release_overdue_;
    std::atomic<uint16_t> sriov_num_vfs_{0};
};

}  // namespace spyre::mockdev
