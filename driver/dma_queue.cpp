// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/dma_queue.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "spyre/common/device_clock.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/common/memory_copy.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_regs.h"

using namespace std::chrono;

namespace spyre::driver {

const char* ToString(DmaBackend backend) noexcept {
    return backend == DmaBackend::IoUring ? "io_uring" : "copy engines (memcpy)";
}

namespace {

enum class Direction { ToDevice, FromDevice, DeviceToDevice };

// One contiguous piece of a copy: `host` <-> device memory object at `offset`.
struct Chunk {
    bool to_device;
    uint8_t* host;
    uint64_t offset;  // in the shared-memory object
    uint64_t size;
    uint64_t ticket;
};

// What moving a chunk achieved: bytes moved, and errno if it stopped short.
struct Moved {
    uint64_t bytes;
    int error;
};

unsigned EngineCount() { return std::max(2u, std::thread::hardware_concurrency()); }

}  // namespace

// What both backends share: the device memory, its mapping, tickets, and the
// copy engines (one thread per core) that take chunks from a queue. A
// backend says how an engine moves a chunk (Move).
class DmaQueue::Backend {
public:
    Backend(Function& fn, const DmaOptions& options, std::string reason)
        : fn_(fn), options_(options), reason_(std::move(reason)) {
        mapping_ = fn.MapRegion(SPYRE_REGION_DEVMEM);
        const RegionFile file = fn.OpenRegionFile(SPYRE_REGION_DEVMEM);  // the backend's: shm object or device fd
        fd_ = file.fd;
        file_offset_ = file.offset;
    }
    virtual ~Backend() {
        StopEngines();
        if (fd_ >= 0) ::close(fd_);
    }
    virtual DmaBackend kind() const noexcept = 0;

    void Submit(const std::vector<Chunk>& chunks) {
        {
            std::lock_guard lock(work_mutex_);
            work_.insert(work_.end(), chunks.begin(), chunks.end());
        }
        work_ready_.Notify();
    }

    const std::string& reason() const noexcept { return reason_; }
    uint64_t size() const noexcept { return mapping_.size(); }
    uint8_t* memory() const noexcept { return mapping_.data(); }
    uint64_t file_offset() const noexcept { return file_offset_; }
    const DmaOptions& options() const noexcept { return options_; }
    const std::string& device() const noexcept { return fn_.pci_address(); }
    const Function& function() const noexcept { return fn_; }

    // `start_ns`, `end_ns`: a copy done already (DmaCompletion's).
    Ticket NewTicket(uint64_t parts, Direction dir, uint64_t done_bytes = 0, uint64_t start_ns = 0,
                     uint64_t end_ns = 0) {
        std::lock_guard lock(mutex_);
        const Ticket t = ++next_ticket_;
        tickets_.emplace(t, State{parts, done_bytes, 0, false, dir, start_ns, end_ns});
        if (parts != 0 && active_++ == 0) busy_since_ = steady_clock::now();
        return t;
    }

    // A chunk finished: `bytes` moved, or errno `error`. A chunk that went
    // into the memory of a dead device (the shared memory outlives its
    // daemon) counts for nothing: the copy fails with DeviceLost.
    void ChunkDone(Ticket t, uint64_t bytes, int error, uint64_t began_ns) {
        std::unique_lock lock(mutex_);
        State* s = &tickets_.at(t);
        if (s->start_ns == 0 || began_ns < s->start_ns) s->start_ns = began_ns;
        if (s->parts_left == 1) {
            // The last chunk checks the daemon (a pidfd poll), once per copy:
            // a device never comes back, so a chunk that finished on a dead
            // device is still caught here. Only this chunk is left, so no
            // other thread touches the state meanwhile.
            lock.unlock();
            const bool lost = !fn_.Alive();
            lock.lock();
            s = &tickets_.at(t);
            s->lost = s->lost || lost;
        }
        s->bytes += bytes;
        if (error && !s->error) s->error = error;
        const bool complete = --s->parts_left == 0;
        if (complete) s->end_ns = DeviceClockNs();
        uint64_t busy_ns = 0;
        if (complete && --active_ == 0)
            busy_ns = uint64_t(duration_cast<nanoseconds>(steady_clock::now() - busy_since_).count());
        const State done = *s;
        lock.unlock();
        if (complete) copy_done_.Notify();
        if (complete) Count(done.dir, done.error || done.lost ? 0 : done.bytes, busy_ns);
        if (complete) NotifyComplete();  // outside the lock: the hook may Poll
    }

    // DmaOptions::on_complete, once per completed ticket.
    void NotifyComplete() const {
        if (options_.on_complete) options_.on_complete();
    }

    // A copy done in the caller (since `started`): its ticket is complete
    // at birth.
    Ticket CompletedTicket(uint64_t bytes, Direction dir, steady_clock::time_point started) {
        const steady_clock::time_point ended = steady_clock::now();
        const Ticket t = NewTicket(0, dir, bytes, DeviceClockNs(started), DeviceClockNs(ended));
        Count(dir, bytes, uint64_t(duration_cast<nanoseconds>(ended - started).count()));
        NotifyComplete();
        return t;
    }

    // The DMA engine's counters in the function's registers (CNT_DMA_*):
    // host <-> device bytes by direction; device-to-device copies count only
    // in the busy time.
    void Count(Direction dir, uint64_t bytes, uint64_t busy_ns) noexcept {
        fn_.CountDma(dir == Direction::ToDevice ? bytes : 0, dir == Direction::FromDevice ? bytes : 0, busy_ns);
    }

    DmaCompletion Wait(Ticket t, milliseconds timeout) {
        {
            std::lock_guard lock(mutex_);
            Find(t);  // an unknown ticket fails before any work is taken
        }
        if (CallerHelps()) HelpWith(t);
        std::unique_lock lock(mutex_);
        auto it = Find(t);
        auto finished = [&] { return it->second.parts_left == 0; };
        const auto deadline = steady_clock::now() + timeout;
        while (!finished()) {
            const auto now = steady_clock::now();
            if (now >= deadline)
                throw Error(ErrorKind::Timeout, "DMA copy " + std::to_string(t) + " did not finish within " +
                                                    std::to_string(timeout.count()) + " ms",
                            {.device = device()});
            copy_done_.SleepUnlocked(lock, finished, deadline - now);
        }
        return Take(it);
    }

    void WaitForCopiesSubmitted() {
        std::unique_lock lock(mutex_);
        const Ticket last = next_ticket_;
        // Tickets only grow, and a finished one stays until it is taken.
        auto finished = [&] {
            return std::none_of(tickets_.begin(), tickets_.end(),
                                [&](const auto& t) { return t.first <= last && t.second.parts_left != 0; });
        };
        while (!finished()) copy_done_.SleepUnlocked(lock, finished, std::chrono::seconds(1));
    }

    std::optional<DmaCompletion> Poll(Ticket t) {
        std::lock_guard lock(mutex_);
        auto it = Find(t);
        if (it->second.parts_left) return std::nullopt;
        return Take(it);
    }

protected:
    // Moves one chunk on engine `engine` (0 .. engines started - 1), in its thread.
    virtual Moved Move(const Chunk& c, unsigned engine) = 0;
    // Whether a caller in Wait moves its own ticket's chunks (with memcpy).
    virtual bool CallerHelps() const noexcept = 0;

    // Derived constructors start the engines once they can Move; derived
    // destructors stop them before what Move uses goes away.
    void StartEngines(unsigned n) {
        for (unsigned i = 0; i < n; ++i) {
            workers_.emplace_back([this, i] { CopyLoop(i); });
            // top -H, perf and a trace's tracks tell the copy engines apart.
            pthread_setname_np(workers_.back().native_handle(), ("spyre-dma-" + std::to_string(i)).c_str());
        }
    }
    void StopEngines() {
        {
            std::lock_guard lock(work_mutex_);
            stopping_ = true;
        }
        work_ready_.NotifyAll();
        for (auto& w : workers_) w.join();
        workers_.clear();
    }
    // Called first in each engine's thread.
    virtual void EngineStarted(unsigned /*engine*/) {}

    Moved MoveWithMemcpy(const Chunk& c) const {
        uint8_t* dev = memory() + (c.offset - file_offset());
        if (c.to_device)
            CopyMemory(dev, c.host, c.size);  // chunks of one copy never overlap
        else
            CopyMemory(c.host, dev, c.size);
        return {c.size, 0};
    }

    Function& fn_;
    int fd_ = -1;

private:
    // Looked at before each chunk (the function's throttled probe: a clock
    // read, a pidfd poll once per Function::kProbePeriod): a copy into a
    // dead daemon's lingering memory stops within a chunk or two, where it
    // ran to its end before failing (found probing from outside: DeviceLost
    // 0.7-4.4 s after the kill for 256 MiB). A skipped chunk moves nothing;
    // the last one's check (ChunkDone) fails the copy.
    bool DeviceGone() const noexcept {
        try {
            fn_.CheckAliveThrottled();
            return false;
        } catch (...) {
            return true;
        }
    }

    // The one place that knows how the driver reaches the object behind
    // DEVMEM: a file descriptor for the io_uring path.
    void CopyLoop(unsigned engine) {
        EngineStarted(engine);
        for (;;) {
            std::unique_lock lock(work_mutex_);
            auto ready = [&] { return stopping_ || !work_.empty(); };
            while (!ready()) work_ready_.SleepUnlocked(lock, ready, std::chrono::seconds(1));
            if (work_.empty()) return;  // stopping, and everything done
            const Chunk c = work_.front();
            work_.pop_front();
            lock.unlock();
            const uint64_t began = DeviceClockNs();
            const Moved m = DeviceGone() ? Moved{0, 0} : Move(c, engine);
            ChunkDone(c.ticket, m.bytes, m.error, began);
        }
    }

    // A waiting caller copies its own ticket's chunks that no engine has
    // started: on a loaded machine an engine thread may be descheduled while
    // the caller would sit idle (measured: 0.3-0.5x memcpy at times under a
    // load of 8 on 2 cores without it).
    void HelpWith(Ticket t) {
        for (;;) {
            std::unique_lock lock(work_mutex_);
            auto it = std::find_if(work_.begin(), work_.end(), [&](const Chunk& c) { return c.ticket == t; });
            if (it == work_.end()) return;
            const Chunk c = *it;
            work_.erase(it);
            lock.unlock();
            const uint64_t began = DeviceClockNs();
            const Moved m = DeviceGone() ? Moved{0, 0} : MoveWithMemcpy(c);
            ChunkDone(c.ticket, m.bytes, m.error, began);
        }
    }

    struct State {
        uint64_t parts_left;
        uint64_t bytes;
        int error;
        bool lost;  // the device was gone when a chunk finished
        Direction dir;
        uint64_t start_ns = 0, end_ns = 0;  // DmaCompletion's
    };
    std::unordered_map<Ticket, State>::iterator Find(Ticket t) {
        auto it = tickets_.find(t);
        if (it == tickets_.end())
            throw Error(ErrorKind::InvalidArgument, "unknown or already completed DMA ticket " + std::to_string(t),
                        {.device = device()});
        return it;
    }
    DmaCompletion Take(std::unordered_map<Ticket, State>::iterator it) {
        const Ticket ticket = it->first;
        const State s = it->second;
        tickets_.erase(it);
        if (s.lost) {
            const Error lost = fn_.LostError();
            throw Error(ErrorKind::DeviceLost, "DMA copy " + std::to_string(ticket) + ": " + lost.message(),
                        lost.context());
        }
        if (s.error) {
            errno = s.error;
            throw SystemError("DMA copy failed after " + std::to_string(s.bytes) + " bytes", {.device = device()});
        }
        return DmaCompletion{s.bytes, s.start_ns, s.end_ns};
    }

    const DmaOptions options_;
    const std::string reason_;
    MappedRegion mapping_;
    uint64_t file_offset_ = 0;
    std::mutex mutex_;
    EventCount copy_done_;  // a ticket completed (its state changes under mutex_)
    std::unordered_map<Ticket, State> tickets_;
    Ticket next_ticket_ = 0;
    uint64_t active_ = 0;                 // tickets in flight: the engine is busy while > 0
    steady_clock::time_point busy_since_;  // when active_ left 0
    std::mutex work_mutex_;
    EventCount work_ready_;  // chunks queued, or stopping (under work_mutex_)
    std::deque<Chunk> work_;
    bool stopping_ = false;
    std::vector<std::thread> workers_;
};

namespace {

// One io_uring instance per copy engine, used only by that engine's thread.
// tmpfs has no non-blocking read/write, so the kernel punts every request to
// the io-wq workers of the submitting thread; a ring per engine thread gives
// each engine its own io-wq, so reads move in parallel instead of queueing
// behind one thread's workers, which also run buffered writes to one inode
// one at a time (tmpfs writes then still take the inode lock in turn).
class Rings {
public:
    // Sets up `n` rings, or says why it could not (errno from the kernel).
    static std::optional<Rings> Make(unsigned n, unsigned entries, std::string& why, int& error) {
        Rings rings;
        for (unsigned i = 0; i < n; ++i) {
            // The engine thread that submits is not the one creating the ring:
            // created disabled, it becomes the single issuer when it enables it.
            io_uring_params p{};
            p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
            auto ring = std::make_unique<io_uring>();
            int rc = io_uring_queue_init_params(entries, ring.get(), &p);
            if (rc == -EINVAL) {  // kernels before 6.1 lack these flags
                p = {};
                rc = io_uring_queue_init_params(entries, ring.get(), &p);
            }
            if (rc != 0) {
                why = std::string("io_uring_queue_init: ") + std::strerror(-rc);
                error = -rc;
                return std::nullopt;
            }
            rings.disabled_.push_back(p.flags & IORING_SETUP_R_DISABLED);
            rings.rings_.push_back(std::move(ring));
        }
        return rings;
    }
    Rings() = default;
    Rings(Rings&&) = default;
    ~Rings() {
        for (auto& r : rings_)
            if (r) io_uring_queue_exit(r.get());
    }
    io_uring& operator[](unsigned i) { return *rings_[i]; }
    bool disabled(unsigned i) const { return disabled_[i]; }
    unsigned size() const { return unsigned(rings_.size()); }

private:
    std::vector<std::unique_ptr<io_uring>> rings_;
    std::vector<bool> disabled_;
};

// Every chunk is an io_uring read or write against the device-memory object
// (a registered file), submitted by a copy engine on its own ring; the engine
// waits for its completion, so a request never outlives its thread. Callers do
// not help in Wait: every byte moves through io_uring.
class IoUringBackend final : public DmaQueue::Backend {
public:
    IoUringBackend(Function& fn, const DmaOptions& options, std::string reason, Rings rings)
        : Backend(fn, options, std::move(reason)), rings_(std::move(rings)) {
        for (unsigned i = 0; i < rings_.size(); ++i) fixed_file_.push_back(io_uring_register_files(&rings_[i], &fd_, 1) == 0);
        StartEngines(rings_.size());
    }
    ~IoUringBackend() override { StopEngines(); }
    DmaBackend kind() const noexcept override { return DmaBackend::IoUring; }

private:
    bool CallerHelps() const noexcept override { return false; }
    void EngineStarted(unsigned engine) override {
        // liburing 2.3 (Debian 12) declares io_uring_enable_rings but does not export it.
        if (rings_.disabled(engine) && ::syscall(__NR_io_uring_register, rings_[engine].ring_fd,
                                                 IORING_REGISTER_ENABLE_RINGS, nullptr, 0) != 0)
            enable_error_[engine] = errno;
    }

    // One request at a time; a short transfer goes out again for the rest.
    Moved Move(const Chunk& c, unsigned engine) override {
        if (enable_error_[engine]) return {0, enable_error_[engine]};
        io_uring& ring = rings_[engine];
        const bool fixed = fixed_file_[engine];
        uint64_t done = 0;
        while (done < c.size) {
            io_uring_sqe* sqe = io_uring_get_sqe(&ring);  // the ring is empty between requests
            const unsigned n = unsigned(std::min<uint64_t>(c.size - done, 1u << 30));
            if (c.to_device)
                io_uring_prep_write(sqe, fixed ? 0 : fd_, c.host + done, n, c.offset + done);
            else
                io_uring_prep_read(sqe, fixed ? 0 : fd_, c.host + done, n, c.offset + done);
            if (fixed) sqe->flags |= IOSQE_FIXED_FILE;
            int rc = io_uring_submit(&ring);
            if (rc < 0) return {done, -rc};
            io_uring_cqe* cqe = nullptr;
            do rc = io_uring_wait_cqe(&ring, &cqe);
            while (rc == -EINTR);
            if (rc < 0) return {done, -rc};
            const int res = cqe->res;
            io_uring_cqe_seen(&ring, cqe);
            if (res < 0) return {done, -res};
            if (res == 0) return {done, EIO};  // past the end of the object
            done += uint64_t(res);
        }
        return {done, 0};
    }

    Rings rings_;
    std::vector<bool> fixed_file_;
    std::vector<int> enable_error_ = std::vector<int>(rings_.size(), 0);
};

// Every chunk is a memcpy through the mapping by a copy engine, and a caller
// in Wait copies its own chunks that no engine has started.
class EnginesBackend final : public DmaQueue::Backend {
public:
    EnginesBackend(Function& fn, const DmaOptions& options, std::string reason)
        : Backend(fn, options, std::move(reason)) {
        StartEngines(EngineCount());
    }
    ~EnginesBackend() override { StopEngines(); }
    DmaBackend kind() const noexcept override { return DmaBackend::Engines; }

private:
    bool CallerHelps() const noexcept override { return true; }
    Moved Move(const Chunk& c, unsigned) override { return MoveWithMemcpy(c); }
};

std::unique_ptr<DmaQueue::Backend> MakeBackend(Function& fn, const DmaOptions& options) {
    DmaBackend want = options.backend.value_or(kDefaultDmaBackend);
    std::string why = options.backend ? "requested" : "default";
    if (const char* env = std::getenv("SPYRE_DMA"); env && *env) {
        const std::string v = env;
        if (v != "io_uring" && v != "engines" && v != "fallback")
            throw Error(ErrorKind::InvalidArgument, "SPYRE_DMA=" + v + " is not io_uring, engines or fallback");
        want = v == "io_uring" ? DmaBackend::IoUring : DmaBackend::Engines;
        why = "SPYRE_DMA=" + v;
    }
    if (want == DmaBackend::Engines) return std::make_unique<EnginesBackend>(fn, options, why);
    std::string failure;
    int error = 0;
    if (auto rings = Rings::Make(EngineCount(), options.queue_depth, failure, error))
        return std::make_unique<IoUringBackend>(fn, options, why, std::move(*rings));
    if (options.require_io_uring)
        throw Error(ErrorKind::Unsupported, "io_uring is unavailable: " + failure,
                    {.device = fn.pci_address(), .sys_errno = error});
    return std::make_unique<EnginesBackend>(fn, options, "io_uring unavailable (" + failure + ")");
}

}  // namespace

DmaQueue::DmaQueue(Function& function, DmaOptions options) {
    if (options.chunk_bytes == 0 || options.chunk_bytes > (1u << 30) || options.queue_depth == 0)
        throw Error(ErrorKind::InvalidArgument, "DMA chunk size must be 1 byte to 1 GiB and queue depth positive");
    // A value past the named ones ran as io_uring.
    if (options.backend && *options.backend != DmaBackend::IoUring && *options.backend != DmaBackend::Engines)
        throw Error(ErrorKind::InvalidArgument, "DmaOptions::backend " + std::to_string(int(*options.backend)) +
                                                    " is none of IoUring, Engines (Fallback)");
    backend_ = MakeBackend(function, options);
}

DmaQueue::~DmaQueue() = default;

DmaBackend DmaQueue::backend() const noexcept { return backend_->kind(); }
const std::string& DmaQueue::backend_reason() const noexcept { return backend_->reason(); }
uint64_t DmaQueue::memory_size() const noexcept { return backend_->size(); }

namespace {

void CheckRange(const DmaQueue::Backend& b, uint64_t addr, uint64_t size, const char* what) {
    // What is mapped, but for a PF whose holder enabled VFs since it was
    // mapped only its own part (REGION_GRANTABLE: slice 0): the rest of the
    // mapping is memory the card no longer shows anyone (copies there
    // "succeeded" into detached pages; found probing from outside). One
    // load of the mapped register.
    // REGION_GRANTABLE counts whole regions: a shortfall under one region
    // is that rounding (a card of odd size), not a VF slice.
    const uint64_t grantable = b.function().Read64(SPYRE_REG_REGION_GRANTABLE);
    const uint64_t window = grantable + SPYRE_REGION_ALIGN > b.size() ? b.size() : grantable;
    if (addr > window || size > window - addr)
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + " range of " + std::to_string(size) + " bytes leaves the function's " +
                        std::to_string(window) + " bytes of device memory" +
                        (window < b.size() ? " (its own part since VFs were enabled after it was opened: slice 0)" : ""),
                    {.device = b.device(), .address = addr});
}

// A host buffer the copy can touch: a null one would fault in an engine's
// thread (or the caller's, on the fast path), not as the caller's error.
void CheckHost(const DmaQueue::Backend& b, const void* host, uint64_t size, const char* what) {
    if (!host && size != 0)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + " copy of " + std::to_string(size) +
                                                    " bytes with a null host address",
                    {.device = b.device()});
}

// Cuts a copy into chunks for the backend.
std::vector<Chunk> Split(const DmaQueue::Backend& b, bool to_device, uint8_t* host, uint64_t offset, uint64_t size,
                         uint64_t ticket) {
    std::vector<Chunk> chunks;
    const uint64_t step = b.options().chunk_bytes;
    for (uint64_t done = 0; done < size; done += step)
        chunks.push_back(Chunk{to_device, host + done, offset + done, std::min(step, size - done), ticket});
    return chunks;
}

uint64_t Parts(const DmaQueue::Backend& b, uint64_t size) {
    return (size + b.options().chunk_bytes - 1) / b.options().chunk_bytes;
}

}  // namespace

DmaQueue::Ticket DmaQueue::HostToDevice(const void* host, uint64_t device_addr, uint64_t size) {
    Backend& b = *backend_;
    CheckRange(b, device_addr, size, "host-to-device");
    CheckHost(b, host, size, "host-to-device");
    if (size <= b.options().inline_threshold) {
        b.function().CheckAliveThrottled();
        const auto started = steady_clock::now();
        CopyMemory(b.memory() + device_addr, host, size);
        return b.CompletedTicket(size, Direction::ToDevice, started);
    }
    b.function().CheckAlive();
    const Ticket t = b.NewTicket(Parts(b, size), Direction::ToDevice);
    b.Submit(Split(b, true, static_cast<uint8_t*>(const_cast<void*>(host)), b.file_offset() + device_addr, size, t));
    return t;
}

DmaQueue::Ticket DmaQueue::DeviceToHost(void* host, uint64_t device_addr, uint64_t size) {
    Backend& b = *backend_;
    CheckRange(b, device_addr, size, "device-to-host");
    CheckHost(b, host, size, "device-to-host");
    if (size <= b.options().inline_threshold) {
        b.function().CheckAliveThrottled();
        const auto started = steady_clock::now();
        CopyMemory(host, b.memory() + device_addr, size);
        return b.CompletedTicket(size, Direction::FromDevice, started);
    }
    b.function().CheckAlive();
    const Ticket t = b.NewTicket(Parts(b, size), Direction::FromDevice);
    b.Submit(Split(b, false, static_cast<uint8_t*>(host), b.file_offset() + device_addr, size, t));
    return t;
}

DmaQueue::Ticket DmaQueue::DeviceToDevice(uint64_t src_addr, uint64_t dst_addr, uint64_t size) {
    Backend& b = *backend_;
    CheckRange(b, src_addr, size, "device-to-device source");
    CheckRange(b, dst_addr, size, "device-to-device destination");
    const bool overlap = src_addr < dst_addr + size && dst_addr < src_addr + size;
    if (overlap || size <= b.options().inline_threshold) {
        // Overlapping ranges need memmove's ordering, which chunks in parallel lack.
        if (size <= b.options().inline_threshold)
            b.function().CheckAliveThrottled();
        else
            b.function().CheckAlive();
        const auto started = steady_clock::now();
        MoveMemory(b.memory() + dst_addr, b.memory() + src_addr, size);
        return b.CompletedTicket(size, Direction::DeviceToDevice, started);
    }
    b.function().CheckAlive();
    // The source is the mapping itself: a write from it into the object.
    const Ticket t = b.NewTicket(Parts(b, size), Direction::DeviceToDevice);
    b.Submit(Split(b, true, b.memory() + src_addr, b.file_offset() + dst_addr, size, t));
    return t;
}

DmaCompletion DmaQueue::Wait(Ticket ticket, milliseconds timeout) { return backend_->Wait(ticket, timeout); }

std::optional<DmaCompletion> DmaQueue::Poll(Ticket ticket) { return backend_->Poll(ticket); }

void DmaQueue::WaitForCopiesSubmitted() { backend_->WaitForCopiesSubmitted(); }

}  // namespace spyre::driver
