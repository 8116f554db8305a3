// SPDX-License-Identifier: Apache-2.0
#define FUSE_USE_VERSION 312
#include "frontend/fuse_fs.hpp"

#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <thread>

#include "frontend/attr_number.hpp"
#include "frontend/refusal_log.hpp"
#include "log.hpp"
#include "pci/pci_address.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre_ioctl.h"
#include "spyre/uapi/spyre_regs.h"
#include "spyre/uapi/spyre_stats.h"

namespace spyre::mockdev {

namespace {

enum class Kind {
    Root, BusDir, PciDir, DevicesDir, FunctionDir, DevDir, SpyreDir,  // directories
    Config, Resource0, Resource2, Resource4, Regs, Stats, StatsJson, Reset, Vendor, Device, Class, SriovTotalVfs, SriovNumVfs,
    DevNode,
};

bool IsDir(Kind k) { return k <= Kind::SpyreDir; }

struct FileSpec {
    const char* name;
    Kind kind;
    mode_t mode;
    bool pf_only;
};

constexpr FileSpec kFunctionFiles[] = {
    {"config", Kind::Config, 0444, false},
    {"resource0", Kind::Resource0, 0600, false},
    {"resource2", Kind::Resource2, 0600, false},
    {"resource4", Kind::Resource4, 0600, false},
    {"regs", Kind::Regs, 0444, false},
    {SPYRE_STATS_ATTR, Kind::Stats, 0444, false},  // counters for monitors: anyone, without opening the node
    {SPYRE_STATS_JSON_ATTR, Kind::StatsJson, 0444, false},  // the same for programs (uapi/spyre_stats.h)
    {"reset", Kind::Reset, 0200, false},
    {"vendor", Kind::Vendor, 0444, false},
    {"device", Kind::Device, 0444, false},
    {"class", Kind::Class, 0444, false},
    {"sriov_totalvfs", Kind::SriovTotalVfs, 0444, true},
    {"sriov_numvfs", Kind::SriovNumVfs, 0644, true},
};
constexpr mode_t kDevNodeMode = 0660;
// How long an open waits for the release of a dead holder's file, and how
// many opens of the whole daemon may wait at once (libfuse runs at most 10
// workers: the rest serve everyone else).
constexpr std::chrono::milliseconds kReleaseWait{1000};
constexpr unsigned kMaxReleaseWaits = 2;
// Text attributes report sysfs's size; readers go to EOF (direct_io).
constexpr off_t kAttrSize = 4096;

mode_t ModeOf(Kind kind) {
    if (kind == Kind::DevNode) return kDevNodeMode;
    for (const auto& f : kFunctionFiles)
        if (f.kind == kind) return f.mode;
    return 0;
}

unsigned BarOf(Kind kind) {
    return kind == Kind::Resource0 ? SPYRE_REGION_BAR0 : kind == Kind::Resource2 ? SPYRE_REGION_BAR2 : SPYRE_REGION_BAR4;
}

struct Node {
    Kind kind;
    Card* card = nullptr;
    std::shared_ptr<Function> fn;
};

// Fields 3 (state), 9 (flags) and 22 (start time, in clock ticks after
// boot) of /proc/PID/stat; false when the process is gone (or the line
// does not parse).
bool ReadProcessStat(pid_t pid, char* state, uint64_t* start, unsigned* flags = nullptr) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
    FILE* stat = std::fopen(path, "re");
    if (!stat) return false;
    char line[1024];
    const bool got = std::fgets(line, sizeof line, stat) != nullptr;
    std::fclose(stat);
    // The name (field 2) may hold blanks and ')': fields 3 on follow the last ')'.
    const char* rest = got ? std::strrchr(line, ')') : nullptr;
    unsigned task_flags = 0;
    unsigned long long ticks = 0;
    if (!rest || std::sscanf(rest + 1, " %c %*d %*d %*d %*d %*d %u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                             state, &task_flags, &ticks) != 3)
        return false;
    *start = ticks;
    if (flags) *flags = task_flags;
    return true;
}

// Calls `line(text)` for each line of /proc/PID/status until it returns
// true (found); nothing when the process is gone.
template <typename Line>
void ScanProcessStatus(pid_t pid, Line&& line) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/status", int(pid));
    FILE* status = std::fopen(path, "re");
    if (!status) return;
    char text[256];
    while (std::fgets(text, sizeof text, status))
        if (line(text)) break;
    std::fclose(status);
}

// Whether `pid` was sent SIGKILL that it has not acted on yet (its
// thread's or its group's pending set).
bool KillPending(pid_t pid) {
    bool pending = false;
    ScanProcessStatus(pid, [&](const char* text) {
        unsigned long long mask = 0;
        if (std::sscanf(text, "SigPnd: %llx", &mask) == 1 || std::sscanf(text, "ShdPnd: %llx", &mask) == 1)
            pending = mask & (1ull << (SIGKILL - 1));
        return pending;
    });
    return pending;
}

uint64_t ProcessStartTime(pid_t pid) {
    char state = 0;
    uint64_t start = 0;
    return ReadProcessStat(pid, &state, &start) ? start : 0;
}

// Whether process `p` still runs: the same start time, not a zombie (a
// zombie's files are closed already), and not on its way out: killed, or
// exiting (PF_EXITING; a killed holder unmapping a large mapping showed
// state R, and an open right after it was Busy: found probing).
bool ProcessRuns(const ProcessId& p) {
    constexpr unsigned kPfExiting = 0x4;  // include/linux/sched.h
    char state = 0;
    uint64_t start = 0;
    unsigned flags = 0;
    return ReadProcessStat(p.pid, &state, &start, &flags) && state != 'Z' && state != 'X' && start == p.start_time &&
           !(flags & kPfExiting) && !KillPending(p.pid);
}

// The process (thread group) of the thread that made the current request
// (FUSE reports the thread's id), with its start time: a pid alone is reused.
ProcessId CallerProcess() {
    const pid_t tid = fuse_get_context()->pid;
    pid_t tgid = tid;
    ScanProcessStatus(tid, [&](const char* text) { return std::sscanf(text, "Tgid: %d", &tgid) == 1; });
    return ProcessId{tgid, ProcessStartTime(tgid)};
}

// libfuse's own messages go through our log. While mounting they are held
// back and folded into our one error line instead.
std::mutex g_fuse_log_mutex;
bool g_fuse_log_capture = false;
std::string g_fuse_log_last;

void FuseLogToOurs(fuse_log_level level, const char* fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::string_view msg(buf);
    while (!msg.empty() && msg.back() == '\n') msg.remove_suffix(1);
    {
        std::lock_guard lock(g_fuse_log_mutex);
        if (g_fuse_log_capture) {
            g_fuse_log_last = msg;
            return;
        }
    }
    const LogLevel ours = level <= FUSE_LOG_ERR ? LogLevel::Error : level == FUSE_LOG_WARNING ? LogLevel::Warn
                          : level <= FUSE_LOG_INFO                ? LogLevel::Info
                                                                  : LogLevel::Debug;
    SPYRE_LOG(ours, "libfuse: %.*s", int(msg.size()), msg.data());
}

// Holds libfuse's messages back for its lifetime; Last() is the latest one.
class FuseLogCapture {
public:
    FuseLogCapture() {
        std::lock_guard lock(g_fuse_log_mutex);
        g_fuse_log_capture = true;
        g_fuse_log_last.clear();
    }
    ~FuseLogCapture() {
        std::lock_guard lock(g_fuse_log_mutex);
        g_fuse_log_capture = false;
    }
    std::string Last() const {
        std::lock_guard lock(g_fuse_log_mutex);
        return g_fuse_log_last.empty() ? std::string("no reason given") : g_fuse_log_last;
    }
};

}  // namespace

// Per-open state, kept in fuse_file_info::fh.
struct OpenFile {
    Kind kind;
    Card* card;
    std::shared_ptr<Function> fn;
    std::atomic<bool> released{false};  // device node: the hold ended (SPYRE_IOC_RELEASE or release)
    std::mutex text_mutex;
    std::string text;  // attribute text, regenerated on each read at offset 0 (as sysfs does)
};

// The fuse_operations callbacks. The FuseFs comes back through the context's
// private_data (what init returned).
struct FuseOps {
    static FuseFs* Self() { return static_cast<FuseFs*>(fuse_get_context()->private_data); }
    static OpenFile* File(fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(fi->fh); }

    // Every access through an open file checks holders (CheckHolder, the
    // released node, MaySeePrivate...) and acts with this held: no function
    // of the card changes hands in between. Every file that opens is a
    // function's, so it has a card.
    static std::shared_lock<WriterFirstMutex> KeepHolders(const OpenFile& f) { return f.card->KeepingHolders(); }
    // Ends the hold of a device node once (SPYRE_IOC_RELEASE or release):
    // accesses already past their check finish first.
    static void EndHold(OpenFile& f) {
        if (f.released.exchange(true)) return;
        auto changing = f.card->ChangingHolder();
        f.fn->Close();
    }

    // While a function's device node is held, its resource and reset files
    // serve only the holder and the holder of the card's PF (which sees the
    // whole card). Views that carry no data stay open to every reader: the
    // register file (resource0) and the doorbell page of resource4 (ring
    // indices and flags), which is what spyre-regdump reads. 0 or -EBUSY.
    // A VF nobody holds is the PF's while a process holds the PF (its
    // slice is the PF holder's memory, which the PF reaches through the
    // device; docs/security.md): its files then serve that holder alone.
    static int CheckHolder(const OpenFile& f, bool write, uint64_t off, size_t len) {
        if (int rc = CheckHeldSlices(f, write, off, len); rc != 0) return rc;
        pid_t holder = f.fn->holder();
        const char* held = "the device node";
        if (holder == 0 && f.fn->is_vf())
            if (auto pf = f.card->FindFunction(0); pf && pf->holder() != 0) {
                holder = pf->holder();
                held = "the PF (whose memory the unheld VF's slice is)";
            }
        if (holder == 0) return 0;
        if (!write) {
            if (f.kind == Kind::Resource0) return 0;
            static_assert(SPYRE_DEFAULT_DB_OFFSET == 0, "the doorbell page opens BAR4");
            if (f.kind == Kind::Resource4 && off + len <= sizeof(spyre_doorbell_page)) return 0;
        }
        const ProcessId caller = CallerProcess();
        if (f.fn->HeldBy(caller)) return 0;
        if (auto pf = f.card->FindFunction(0); pf && pf->HeldBy(caller)) return 0;
        const char* what = f.kind == Kind::Reset ? "reset" : f.kind == Kind::Resource0 ? "resource0"
                           : f.kind == Kind::Resource2                             ? "resource2"
                                                                                   : "resource4";
        LOG_REFUSAL("%s: %s %s by pid %d refused: %s is held by pid %d", f.fn->address().c_str(),
                 write ? "write to" : "read of", what, int(caller.pid), held, int(holder));
        return -EBUSY;
    }

    // The PF's CBs and tasks address the whole card, VF slices included,
    // and an enable does not wait for them: while a process holds the PF,
    // only it changes the VF count, at a moment of its choosing (an
    // unheld PF runs nothing: a hand-over stops its work). 0 or -EBUSY.
    static int CheckPfWork(const OpenFile& f) {
        const auto pf = f.card->FindFunction(0);
        if (!pf || pf->holder() == 0) return 0;
        const ProcessId caller = CallerProcess();
        if (pf->HeldBy(caller)) return 0;
        LOG_REFUSAL("%s: write to sriov_numvfs by pid %d refused: the PF is held by pid %d", pf->address().c_str(),
                 int(caller.pid), int(pf->holder()));
        return -EBUSY;
    }

    // The PF's resource2 spans the whole card memory, VF slices included:
    // a range reaching into a held VF's slice serves only that VF's holder
    // and the PF's holder, as the VF's own resource2 does. 0 or -EBUSY.
    static int CheckHeldSlices(const OpenFile& f, bool write, uint64_t off, size_t len) {
        if (f.kind != Kind::Resource2 || f.fn->is_vf() || len == 0) return 0;
        std::optional<ProcessId> caller;
        for (const auto& vf : f.card->Functions()) {
            const pid_t holder = vf->holder();
            if (!vf->is_vf() || holder == 0) continue;
            if (off >= vf->mem_base() + vf->mem_size() || off + len <= vf->mem_base()) continue;
            if (!caller) caller = CallerProcess();
            if (vf->HeldBy(*caller) || f.fn->HeldBy(*caller)) continue;
            LOG_REFUSAL("%s: %s resource2 at 0x%llx (+%zu) by pid %d refused: it reaches %s's memory, held by pid %d",
                     f.fn->address().c_str(), write ? "write to" : "read of", static_cast<unsigned long long>(off), len,
                     int(caller->pid), vf->address().c_str(), int(holder));
            return -EBUSY;
        }
        return 0;
    }

    // Card-wide policy (WATCHDOG_MS) is the PF holder's: through the PF's
    // resource0 it is set only while the caller holds the PF. Anyone else is
    // refused, also while nobody holds the PF: file permissions let a tenant
    // use an unheld function, not rule the card. 0 or -EACCES.
    static int CheckCardPolicy(const OpenFile& f, uint64_t off, size_t len) {
        if (f.kind != Kind::Resource0 || f.fn->is_vf()) return 0;
        if (off >= SPYRE_REG_WATCHDOG_MS + sizeof(uint32_t) || off + len <= SPYRE_REG_WATCHDOG_MS) return 0;
        const ProcessId caller = CallerProcess();
        if (f.fn->HeldBy(caller)) return 0;
        LOG_REFUSAL("%s: write to resource0's WATCHDOG_MS by pid %d refused: card policy is the PF holder's",
                 f.fn->address().c_str(), int(caller.pid));
        return -EACCES;
    }

    // Whether the caller may see the holder's addresses and data in the
    // register file (RedactPrivateRegisters): nobody holds the node, or the
    // caller is its holder or the card's PF holder.
    static bool MaySeePrivate(const OpenFile& f) {
        if (f.fn->holder() == 0) return true;
        const ProcessId caller = CallerProcess();
        if (f.fn->HeldBy(caller)) return true;
        auto pf = f.card->FindFunction(0);
        return pf && pf->HeldBy(caller);
    }

    static std::optional<Node> Resolve(const char* path) {
        std::vector<std::string_view> parts;
        std::string_view rest(path);
        while (!rest.empty()) {
            size_t slash = rest.find('/');
            std::string_view part = rest.substr(0, slash);
            if (!part.empty()) parts.push_back(part);
            if (slash == std::string_view::npos) break;
            rest.remove_prefix(slash + 1);
        }
        FuseFs* self = Self();
        if (parts.empty()) return Node{Kind::Root, nullptr, nullptr};
        if (parts[0] == "bus") {
            if (parts.size() == 1) return Node{Kind::BusDir, nullptr, nullptr};
            if (parts[1] != "pci") return std::nullopt;
            if (parts.size() == 2) return Node{Kind::PciDir, nullptr, nullptr};
            if (parts[2] != "devices") return std::nullopt;
            if (parts.size() == 3) return Node{Kind::DevicesDir, nullptr, nullptr};
            Card* card = nullptr;
            auto fn = self->FindFunction(parts[3], &card);
            if (!fn) return std::nullopt;
            if (parts.size() == 4) return Node{Kind::FunctionDir, card, fn};
            if (parts.size() > 5) return std::nullopt;
            for (const auto& f : kFunctionFiles)
                if (parts[4] == f.name && (!f.pf_only || !fn->is_vf())) return Node{f.kind, card, fn};
            return std::nullopt;
        }
        if (parts[0] == "dev") {
            if (parts.size() == 1) return Node{Kind::DevDir, nullptr, nullptr};
            if (parts[1] != "spyre") return std::nullopt;
            if (parts.size() == 2) return Node{Kind::SpyreDir, nullptr, nullptr};
            if (parts.size() > 3) return std::nullopt;
            Card* card = nullptr;
            auto fn = self->FindFunction(parts[2], &card);
            if (!fn) return std::nullopt;
            return Node{Kind::DevNode, card, fn};
        }
        return std::nullopt;
    }

    static void* Init(fuse_conn_info*, fuse_config* cfg) {
        cfg->entry_timeout = 0;
        cfg->attr_timeout = 0;
        cfg->negative_timeout = 0;
        cfg->direct_io = 1;
        cfg->kernel_cache = 0;
        FuseFs* self = Self();
        if (self->on_ready_) self->on_ready_();
        return self;
    }

    static int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
        auto node = Resolve(path);
        if (!node) return -ENOENT;
        static const time_t started = std::time(nullptr);
        std::memset(st, 0, sizeof *st);
        st->st_uid = ::geteuid();
        st->st_gid = ::getegid();
        st->st_atime = st->st_mtime = st->st_ctime = started;
        if (IsDir(node->kind)) {
            st->st_mode = S_IFDIR | 0755;
            st->st_nlink = 2;
            return 0;
        }
        st->st_mode = S_IFREG | ModeOf(node->kind);
        st->st_nlink = 1;
        switch (node->kind) {
        case Kind::Config: st->st_size = SPYRE_CONFIG_SIZE; break;
        case Kind::Resource0:
        case Kind::Resource2:
        case Kind::Resource4: st->st_size = off_t(node->fn->RegionSize(BarOf(node->kind))); break;
        case Kind::DevNode: st->st_size = 0; break;
        default: st->st_size = kAttrSize; break;
        }
        return 0;
    }

    static int ReadDir(const char* path, void* buf, fuse_fill_dir_t filler, off_t, fuse_file_info*, fuse_readdir_flags) {
        auto node = Resolve(path);
        if (!node) return -ENOENT;
        if (!IsDir(node->kind)) return -ENOTDIR;
        auto add = [&](const std::string& name) { filler(buf, name.c_str(), nullptr, 0, fuse_fill_dir_flags(0)); };
        add(".");
        add("..");
        switch (node->kind) {
        case Kind::Root:
            add("bus");
            add("dev");
            break;
        case Kind::BusDir: add("pci"); break;
        case Kind::PciDir: add("devices"); break;
        case Kind::DevDir: add("spyre"); break;
        case Kind::DevicesDir:
        case Kind::SpyreDir:
            for (const auto& card : Self()->cards_)
                for (const auto& fn : card->Functions()) add(fn->address());
            break;
        case Kind::FunctionDir:
            for (const auto& f : kFunctionFiles)
                if (!f.pf_only || !node->fn->is_vf()) add(f.name);
            break;
        default: break;
        }
        return 0;
    }

    static int Open(const char* path, fuse_file_info* fi) {
        auto node = Resolve(path);
        if (!node) return -ENOENT;
        if (IsDir(node->kind)) return -EISDIR;
        // Modes are enforced here too: root passes the kernel's permission check.
        const int acc = fi->flags & O_ACCMODE;
        const mode_t mode = ModeOf(node->kind);
        if ((acc != O_RDONLY && !(mode & 0222)) || (acc != O_WRONLY && !(mode & 0444))) return -EACCES;
        if (node->kind == Kind::DevNode) {
            const ProcessId caller = CallerProcess();
            // An opener in a pid namespace the daemon cannot see comes as
            // pid 0: it could not be told from any other such process, and
            // a holder of pid 0 read as nobody's.
            if (caller.pid <= 0) {
                LOG_WARN("%s: open refused: the opener's pid is not visible to the daemon (another pid namespace)",
                         node->fn->address().c_str());
                return -EPERM;
            }
            auto open_held = [&] {
                auto changing = node->card->ChangingHolder();
                return node->fn->Open(caller);
            };
            int rc = open_held();
            if (rc == -EBUSY) rc = WaitForDeadHolder(*node, open_held);
            if (rc != 0) return rc;
        }
        auto file = std::make_unique<OpenFile>();
        file->kind = node->kind;
        file->card = node->card;
        file->fn = node->fn;
        if (fi->flags & O_TRUNC)
            if (int rc = CheckTruncate(*file); rc != 0) return rc;
        fi->fh = reinterpret_cast<uint64_t>(file.get());
        fi->direct_io = 1;
        fi->keep_cache = 0;
        Self()->Track(std::move(file));
        return 0;
    }

    // A holder that died holds the node until the kernel's release of its
    // file reaches us (tens to hundreds of ms after it is reaped): an open
    // waits for that, at most kReleaseWait, rather than say busy. But a
    // child it forked may keep the file open, and then the release never
    // comes: each open that waited kept a FUSE worker for the whole bound,
    // and a flood of them held every worker, so other tenants' requests
    // waited seconds. So one open per node waits at a time, at most
    // kMaxReleaseWaits in the daemon, and none for a dead holder whose
    // release a wait ran out for already: those are EBUSY at once. `open_held`
    // tries the open again. 0 or -errno.
    template <typename OpenHeld>
    static int WaitForDeadHolder(const Node& node, OpenHeld&& open_held) {
        constexpr auto kPoll = std::chrono::milliseconds(10);
        constexpr int kTries = int(kReleaseWait / kPoll);
        // Released since the open found it held: the function may be free.
        auto busy = [&] { return node.fn->holder() == 0 ? open_held() : -EBUSY; };
        const ProcessId dead = node.fn->holder_process();
        if (dead.pid == 0 || ProcessRuns(dead)) return busy();
        FuseFs* self = Self();
        if (self->release_waits_.fetch_add(1) >= kMaxReleaseWaits) {
            self->release_waits_.fetch_sub(1);
            return busy();
        }
        if (!node.fn->ClaimReleaseWait(dead)) {
            self->release_waits_.fetch_sub(1);
            return busy();
        }
        int rc = -EBUSY;
        for (int tries = 0; rc == -EBUSY && tries < kTries && node.fn->holder_process() == dead; ++tries) {
            std::this_thread::sleep_for(kPoll);
            rc = open_held();
        }
        const bool ran_out = rc == -EBUSY && node.fn->holder_process() == dead;
        node.fn->EndReleaseWait(dead, ran_out);
        self->release_waits_.fetch_sub(1);
        if (ran_out)
            LOG_WARN("%s: holder pid %d has ended but its file stays open (a process it forked keeps it?): busy, "
                     "and opens are busy at once until it is released",
                     node.fn->address().c_str(), int(dead.pid));
        return rc == -EBUSY && !ran_out ? busy() : rc;
    }

    static int Release(const char*, fuse_file_info* fi) {
        OpenFile* file = File(fi);
        if (file->kind == Kind::DevNode) EndHold(*file);
        Self()->Untrack(file);
        return 0;
    }

    static std::string AttributeText(OpenFile& f) {
        char buf[32];
        switch (f.kind) {
        case Kind::Regs: return f.fn->RegisterDump(!MaySeePrivate(f));
        case Kind::Stats: return f.fn->Stats();
        case Kind::StatsJson: return f.fn->StatsJson(MaySeePrivate(f));
        case Kind::Vendor: std::snprintf(buf, sizeof buf, "0x%04x\n", SPYRE_PCI_VENDOR_IBM); return buf;
        case Kind::Device: std::snprintf(buf, sizeof buf, "0x%04x\n", unsigned(f.fn->device_id())); return buf;
        case Kind::Class: std::snprintf(buf, sizeof buf, "0x%06x\n", SPYRE_PCI_CLASS_CODE); return buf;
        case Kind::SriovTotalVfs: std::snprintf(buf, sizeof buf, "%u\n", SPYRE_SRIOV_TOTAL_VFS); return buf;
        case Kind::SriovNumVfs: std::snprintf(buf, sizeof buf, "%u\n", f.card->num_vfs()); return buf;
        default: return {};
        }
    }

    // Device node offsets carry the region index in their top bits (vfio-pci style).
    static bool SplitDevOffset(off_t off, unsigned* region, uint64_t* region_off) {
        const uint64_t u = uint64_t(off);
        *region = unsigned(u >> SPYRE_REGION_INDEX_SHIFT);
        *region_off = u & SPYRE_REGION_OFFSET_MASK;
        return *region < SPYRE_NUM_REGIONS;
    }

    static int Read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
        OpenFile& f = *File(fi);
        if (off < 0) return -EINVAL;
        const auto keep = KeepHolders(f);
        switch (f.kind) {
        case Kind::Config: return int(f.fn->ReadRegion(SPYRE_REGION_CONFIG, uint64_t(off), buf, size));
        case Kind::Resource0:
        case Kind::Resource2:
        case Kind::Resource4:
            if (int rc = CheckHolder(f, false, uint64_t(off), size); rc != 0) return rc;
            if (f.kind == Kind::Resource0 && !MaySeePrivate(f)) {
                const ssize_t n = f.fn->ReadRegion(SPYRE_REGION_BAR0, uint64_t(off), buf, size);
                if (n > 0) RedactPrivateRegisters(uint64_t(off), reinterpret_cast<uint8_t*>(buf), size_t(n));
                return int(n);
            }
            return int(f.fn->ReadRegion(BarOf(f.kind), uint64_t(off), buf, size));
        case Kind::DevNode: {
            unsigned region;
            uint64_t region_off;
            if (f.released.load()) return -ENODEV;
            if (!SplitDevOffset(off, &region, &region_off)) return -EINVAL;
            return int(f.fn->ReadRegion(region, region_off, buf, size));
        }
        default: {
            std::lock_guard lock(f.text_mutex);
            if (off == 0) f.text = AttributeText(f);
            if (uint64_t(off) >= f.text.size()) return 0;
            const size_t n = std::min(size, f.text.size() - size_t(off));
            std::memcpy(buf, f.text.data() + off, n);
            return int(n);
        }
        }
    }

    static int Write(const char*, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
        OpenFile& f = *File(fi);
        if (off < 0) return -EINVAL;
        const auto keep = KeepHolders(f);
        switch (f.kind) {
        case Kind::Config: return int(f.fn->WriteRegion(SPYRE_REGION_CONFIG, uint64_t(off), buf, size));
        case Kind::Resource0:
        case Kind::Resource2:
        case Kind::Resource4:
            if (int rc = CheckHolder(f, true, uint64_t(off), size); rc != 0) return rc;
            if (int rc = CheckCardPolicy(f, uint64_t(off), size); rc != 0) return rc;
            return int(f.fn->WriteRegion(BarOf(f.kind), uint64_t(off), buf, size));
        case Kind::DevNode: {
            unsigned region;
            uint64_t region_off;
            if (f.released.load()) return -ENODEV;
            if (!SplitDevOffset(off, &region, &region_off)) return -EINVAL;
            return int(f.fn->WriteRegion(region, region_off, buf, size));
        }
        case Kind::Reset: {
            unsigned long v = 0;
            if (int rc = ParseAttrNumber(buf, size, &v); rc != 0) return rc;  // ERANGE as sriov_numvfs says it
            if (v != 1) return -EINVAL;
            if (int rc = CheckHolder(f, true, 0, size); rc != 0) return rc;
            if (int rc = f.fn->Reset(); rc != 0) return rc;
            return int(size);
        }
        case Kind::SriovNumVfs: {
            unsigned long v = 0;
            if (int rc = ParseAttrNumber(buf, size, &v); rc != 0) return rc;
            if (v > UINT16_MAX) return -ERANGE;
            if (int rc = CheckPfWork(f); rc != 0) return rc;
            if (int rc = f.card->SetNumVfs(unsigned(v)); rc != 0) return rc;
            return int(size);
        }
        default: return -EACCES;
        }
    }

    // Sizes are fixed, as in sysfs: truncating a writable file (`echo 1 > reset`
    // opens with O_TRUNC) changes nothing, and is accepted from whoever may
    // write it. It is a write: to a held function's files, EBUSY for others
    // (it returned 0 to them, as if done).
    static int Truncate(const char* path, off_t, fuse_file_info* fi) {
        auto node = Resolve(path);
        if (!node) return -ENOENT;
        if (IsDir(node->kind)) return -EISDIR;
        if (!(ModeOf(node->kind) & 0222)) return -EACCES;
        if (fi) return CheckTruncate(*File(fi));
        OpenFile by_path;
        by_path.kind = node->kind, by_path.card = node->card, by_path.fn = node->fn;
        return CheckTruncate(by_path);
    }
    // A truncate of `f` (truncate(2), or an open with O_TRUNC, which libfuse
    // passes to Open): 0 or -EBUSY.
    static int CheckTruncate(const OpenFile& f) {
        switch (f.kind) {
        case Kind::Resource0:
        case Kind::Resource2:
        case Kind::Resource4:
        case Kind::Reset: {
            const auto keep = KeepHolders(f);
            return CheckHolder(f, true, 0, 0);
        }
        default: return 0;
        }
    }

    static int Ioctl(const char*, unsigned int cmd, void*, fuse_file_info* fi, unsigned int flags, void* data) {
        if (flags & FUSE_IOCTL_COMPAT) return -ENOSYS;
        OpenFile& f = *File(fi);
        if (f.kind != Kind::DevNode) return -ENOTTY;
        if (cmd == SPYRE_IOC_RELEASE) {  // not under KeepHolders: it changes the holder
            if (f.released.load()) return -ENODEV;
            const auto* req = static_cast<const spyre_release_req*>(data);
            if (req->argsz < sizeof *req || req->flags != 0) return -EINVAL;
            EndHold(f);
            return 0;
        }
        const auto keep = KeepHolders(f);
        if (f.released.load()) return -ENODEV;
        switch (cmd) {
        case SPYRE_IOC_GET_INFO:
            *static_cast<spyre_device_info*>(data) = f.fn->DeviceInfo();
            return 0;
        case SPYRE_IOC_GET_REGION_INFO: {
            auto* info = static_cast<spyre_region_info*>(data);
            if (info->argsz < sizeof *info || info->index >= SPYRE_NUM_REGIONS) return -EINVAL;
            *info = f.fn->RegionInfo(info->index);
            return 0;
        }
        case SPYRE_MOCK_IOC_REGION_SHM: {
            auto* shm = static_cast<spyre_mock_region_shm*>(data);
            if (shm->argsz < sizeof *shm || shm->index >= SPYRE_NUM_REGIONS) return -EINVAL;
            *shm = f.fn->RegionShm(shm->index);
            return 0;
        }
        case SPYRE_IOC_RESET: {
            const auto* req = static_cast<const spyre_reset_req*>(data);
            if (req->argsz < sizeof *req || req->flags != 0) return -EINVAL;
            return f.fn->Reset();
        }
        default: return -ENOTTY;
        }
    }

    // No exception may unwind into libfuse (C code): it ends the daemon,
    // and every tenant's device with it (a holder's process name that was
    // not UTF-8 made stats.json's writer throw: found probing from
    // outside). One that escapes a handler fails that call alone.
    template <auto Op>
    struct Barrier;
    template <typename... Args, int (*Op)(Args...)>
    struct Barrier<Op> {
        static int Call(Args... args) noexcept {
            try {
                return Op(args...);
            } catch (const std::bad_alloc&) {
                return -ENOMEM;
            } catch (const std::exception& e) {
                LOG_ERROR("a file system call failed on an exception (EIO): %s", e.what());
            } catch (...) {
                LOG_ERROR("a file system call failed on an exception (EIO)");
            }
            return -EIO;
        }
    };

    static fuse_operations Table() {
        fuse_operations ops{};
        ops.init = Init;
        ops.getattr = Barrier<GetAttr>::Call;
        ops.readdir = Barrier<ReadDir>::Call;
        ops.open = Barrier<Open>::Call;
        ops.release = Barrier<Release>::Call;
        ops.read = Barrier<Read>::Call;
        ops.write = Barrier<Write>::Call;
        ops.truncate = Barrier<Truncate>::Call;
        ops.ioctl = Barrier<Ioctl>::Call;
        return ops;
    }
};

FuseFs::FuseFs(const std::vector<std::unique_ptr<Card>>& cards, std::function<void()> on_ready)
    : cards_(cards), on_ready_(std::move(on_ready)) {}

FuseFs::~FuseFs() { Unmount(); }

std::shared_ptr<Function> FuseFs::FindFunction(std::string_view address, Card** card) const {
    auto slot = ParseFunctionAddress(address);
    if (!slot || slot->card >= cards_.size()) return nullptr;
    *card = cards_[slot->card].get();
    return (*card)->FindFunction(slot->fn);
}

void FuseFs::Track(std::unique_ptr<OpenFile> file) {
    std::lock_guard lock(files_mutex_);
    OpenFile* key = file.get();
    open_files_.emplace(key, std::move(file));
}

void FuseFs::Untrack(OpenFile* file) {
    std::lock_guard lock(files_mutex_);
    open_files_.erase(file);
}

bool FuseFs::Mount(const std::string& dir) {
    static const fuse_operations kOps = FuseOps::Table();
    fuse_set_log_func(FuseLogToOurs);
    std::string options = "fsname=spyre-mockdev,subtype=spyre,default_permissions";
    if (::geteuid() == 0) options += ",allow_other";
    std::string prog = "spyre-mockdev", dash_o = "-o";
    char* argv[] = {prog.data(), dash_o.data(), options.data(), nullptr};
    fuse_args args = FUSE_ARGS_INIT(3, argv);
    FuseLogCapture capture;
    fuse_ = fuse_new(&args, &kOps, sizeof kOps, this);
    fuse_opt_free_args(&args);
    if (!fuse_) {
        LOG_ERROR("FUSE setup failed: %s", capture.Last().c_str());
        return false;
    }
    if (fuse_mount(fuse_, dir.c_str()) != 0) {
        LOG_ERROR("FUSE mount at %s failed: %s", dir.c_str(), capture.Last().c_str());
        fuse_destroy(fuse_);
        fuse_ = nullptr;
        return false;
    }
    mounted_ = true;
    return true;
}

namespace {

// Interrupts the loop's thread: a handler that does nothing, installed
// without SA_RESTART, so the loop's sleep returns EINTR and it looks at
// its exit flag again.
void Interrupted(int) {}

}  // namespace

void FuseFs::Loop(int stop_fd) {
    // A stop ends the loop from a thread of its own, not from a signal
    // handler: libfuse 3.14's loop reads its exit flag and then sleeps on a
    // semaphore, so a flag set by a handler between the two left the loop
    // asleep for good (a daemon stopped right after it came up ignored
    // SIGTERM). The stopper sets the flag and then interrupts the loop's
    // thread until the loop has returned.
    const int wake_signal = SIGRTMIN;
    struct sigaction wake {};
    wake.sa_handler = Interrupted;
    sigemptyset(&wake.sa_mask);
    ::sigaction(wake_signal, &wake, nullptr);
    const int ended_fd = ::eventfd(0, EFD_CLOEXEC);
    if (ended_fd < 0) LOG_ERROR("eventfd: %s: only an unmount stops this daemon", std::strerror(errno));
    std::atomic<bool> ended{false};
    const pthread_t loop_thread = ::pthread_self();
    fuse_session* session = fuse_get_session(fuse_);
    std::thread stopper;
    if (ended_fd >= 0) {
        stopper = std::thread([&] {
            pollfd fds[2] = {{stop_fd, POLLIN, 0}, {ended_fd, POLLIN, 0}};
            while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
            }
            if (!(fds[0].revents & POLLIN)) return;  // the loop ended by itself (an unmount)
            unsigned char sig = 0;
            if (::read(stop_fd, &sig, 1) == 1) LOG_INFO("%s: stopping", strsignal(sig));
            fuse_session_exit(session);
            while (!ended.load()) {
                ::pthread_kill(loop_thread, wake_signal);
                pollfd end{ended_fd, POLLIN, 0};
                ::poll(&end, 1, 20);
            }
        });
    }
    fuse_loop_config* config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(config, 0);
    int rc = fuse_loop_mt(fuse_, config);
    fuse_loop_cfg_destroy(config);
    ended.store(true);
    if (ended_fd >= 0) {
        const uint64_t one = 1;
        ssize_t ignored = ::write(ended_fd, &one, sizeof one);
        (void)ignored;
    }
    if (stopper.joinable()) stopper.join();
    if (ended_fd >= 0) ::close(ended_fd);
    LOG_DEBUG("FUSE loop ended (%d)", rc);
}

void FuseFs::Unmount() {
    if (!fuse_) return;
    if (mounted_) fuse_unmount(fuse_);
    mounted_ = false;
    fuse_destroy(fuse_);
    fuse_ = nullptr;
    std::lock_guard lock(files_mutex_);
    open_files_.clear();
}

}  // namespace spyre::mockdev
