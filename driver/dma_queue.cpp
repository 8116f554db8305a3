// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/dma_queue.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "spyre/common/memory_copy.hpp"
#include "spyre/error.hpp"

using namespace std::chrono;

namespace spyre::driver {

const char* ToString(DmaBackend backend) noexcept {
    return backend == DmaBackend::IoUring ? "io_uring" : "fallback (memcpy worker)";
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
    uint64_t moved = 0;  // bytes done before a short transfer was resubmitted
};

}  // namespace

// What both backends share: the device memory, its mapping, and tickets.
class DmaQueue::Backend {
public:
    Backend(Function& fn, const DmaOptions& options, std::string reason)
        : fn_(fn), options_(options), reason_(std::move(reason)) {
        mapping_ = fn.MapRegion(SPYRE_REGION_DEVMEM);
        const RegionFile file = fn.OpenRegionFile(SPYRE_REGION_DEVMEM);  // the backend's: shm object or device fd
        fd_ = file.fd;
        shm_offset_ = file.offset;
        const unsigned n = std::max(2u, std::thread::hardware_concurrency());
        for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { CopyLoop(); });
    }
    virtual ~Backend() {
        {
            std::lock_guard lock(work_mutex_);
            stopping_ = true;
        }
        work_cv_.notify_all();
        for (auto& w : workers_) w.join();
        if (fd_ >= 0) ::close(fd_);
    }
    virtual DmaBackend kind() const noexcept = 0;
    virtual void Submit(const std::vector<Chunk>& chunks) = 0;

    const std::string& reason() const noexcept { return reason_; }
    uint64_t size() const noexcept { return mapping_.size(); }
    uint8_t* memory() const noexcept { return mapping_.data(); }
    uint64_t shm_offset() const noexcept { return shm_offset_; }
    const DmaOptions& options() const noexcept { return options_; }
    const std::string& device() const noexcept { return fn_.pci_address(); }
    const Function& function() const noexcept { return fn_; }

    Ticket NewTicket(uint64_t parts, Direction dir, uint64_t done_bytes = 0) {
        std::lock_guard lock(mutex_);
        const Ticket t = ++next_ticket_;
        tickets_.emplace(t, State{parts, done_bytes, 0, false, dir});
        if (parts != 0 && active_++ == 0) busy_since_ = steady_clock::now();
        return t;
    }

    // A chunk finished: `bytes` moved, or errno `error`. A chunk that went
    // into the memory of a dead device (the shared memory outlives its
    // daemon) counts for nothing: the copy fails with DeviceLost.
    void ChunkDone(Ticket t, uint64_t bytes, int error) {
        std::unique_lock lock(mutex_);
        State* s = &tickets_.at(t);
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
        uint64_t busy_ns = 0;
        if (complete && --active_ == 0)
            busy_ns = uint64_t(duration_cast<nanoseconds>(steady_clock::now() - busy_since_).count());
        if (complete) cv_.notify_all();
        const State done = *s;
        lock.unlock();
        if (complete) Count(done.dir, done.error || done.lost ? 0 : done.bytes, busy_ns);
        if (complete) NotifyComplete();  // outside the lock: the hook may Poll
    }

    // DmaOptions::on_complete, once per completed ticket.
    void NotifyComplete() const {
        if (options_.on_complete) options_.on_complete();
    }

    // A copy done in the caller (which took `busy` for it): its ticket is
    // complete at birth.
    Ticket CompletedTicket(uint64_t bytes, Direction dir, steady_clock::duration busy) {
        const Ticket t = NewTicket(0, dir, bytes);
        Count(dir, bytes, uint64_t(duration_cast<nanoseconds>(busy).count()));
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
        HelpWith(t);
        std::unique_lock lock(mutex_);
        auto it = Find(t);
        if (!cv_.wait_for(lock, timeout, [&] { return it->second.parts_left == 0; }))
            throw Error(ErrorKind::Timeout, "DMA copy " + std::to_string(t) + " did not finish within " +
                                                std::to_string(timeout.count()) + " ms",
                        {.device = device()});
        return Take(it);
    }

    std::optional<DmaCompletion> Poll(Ticket t) {
        std::lock_guard lock(mutex_);
        auto it = Find(t);
        if (it->second.parts_left) return std::nullopt;
        return Take(it);
    }

protected:
    // Copy engines: threads that copy chunks through the mapping, in parallel.
    void CopyOnWorkers(const std::vector<Chunk>& chunks) {
        {
            std::lock_guard lock(work_mutex_);
            work_.insert(work_.end(), chunks.begin(), chunks.end());
        }
        work_cv_.notify_all();
    }

    Function& fn_;
    int fd_ = -1;

private:
    void CopyLoop() {
        for (;;) {
            std::unique_lock lock(work_mutex_);
            work_cv_.wait(lock, [&] { return stopping_ || !work_.empty(); });
            if (work_.empty()) return;  // stopping, and everything done
            const Chunk c = work_.front();
            work_.pop_front();
            lock.unlock();
            Copy(c);
        }
    }

    void Copy(const Chunk& c) {
        uint8_t* dev = memory() + (c.offset - shm_offset());
        if (c.to_device)
            CopyMemory(dev, c.host, c.size);  // chunks of one copy never overlap
        else
            CopyMemory(c.host, dev, c.size);
        ChunkDone(c.ticket, c.size, 0);
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
            Copy(c);
        }
    }

    struct State {
        uint64_t parts_left;
        uint64_t bytes;
        int error;
        bool lost;  // the device was gone when a chunk finished
        Direction dir;
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
        return DmaCompletion{s.bytes};
    }

    const DmaOptions options_;
    const std::string reason_;
    MappedRegion mapping_;
    uint64_t shm_offset_ = 0;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::unordered_map<Ticket, State> tickets_;
    Ticket next_ticket_ = 0;
    uint64_t active_ = 0;                 // tickets in flight: the engine is busy while > 0
    steady_clock::time_point busy_since_;  // when active_ left 0
    std::mutex work_mutex_;
    std::condition_variable work_cv_;
    std::deque<Chunk> work_;
    bool stopping_ = false;
    std::vector<std::thread> workers_;
};

namespace {

// Chunks become read/write requests on io_uring against the device-memory
// object, registered as a fixed file. One completion thread sleeps in the
// kernel for completions, and it alone submits the requests: the kernel
// cancels a thread's io_uring requests when that thread exits, so a copy
// started by a short-lived caller thread must not belong to it. Callers queue
// chunks and wake the completion thread with a NOP (completed inline, so it
// does not matter if they exit).
class IoUringBackend final : public DmaQueue::Backend {
public:
    IoUringBackend(Function& fn, const DmaOptions& options, io_uring* ring)
        : Backend(fn, options, "io_uring"), ring_(*ring), slots_(options.queue_depth) {
        if (io_uring_register_files(&ring_, &fd_, 1) != 0) fixed_file_ = false;
        reaper_ = std::thread([this] { Reap(); });
    }
    ~IoUringBackend() override {
        {
            std::unique_lock lock(submit_mutex_);
            idle_cv_.wait(lock, [&] { return in_flight_ == 0 && pending_.empty(); });
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, nullptr);  // the reaper's signal to stop
            io_uring_submit(&ring_);
        }
        reaper_.join();
        io_uring_queue_exit(&ring_);
    }
    DmaBackend kind() const noexcept override { return DmaBackend::IoUring; }

    // Chunks towards the device go to the copy engines: buffered writes to
    // one file are serialised by io-wq (hashed per inode) and the shmem write
    // path is slow (measured 0.4x memcpy). Reads from the device object go to
    // the copy engines too unless uring_read_every asks for io_uring reads
    // (forced async, on the kernel's io-wq workers): on 2 cores the io-wq
    // threads only compete with the engines (measured 0.45-0.9x memcpy mixed,
    // 0.63-0.74x all io_uring, 0.8-1.2x engines only). docs/dma.md.
    void Submit(const std::vector<Chunk>& chunks) override {
        if (!chunks.empty() && chunks.front().to_device) return CopyOnWorkers(chunks);
        const unsigned every = options().uring_read_every;
        if (every == 0) return CopyOnWorkers(chunks);
        std::vector<Chunk> theirs;
        std::lock_guard lock(submit_mutex_);
        for (size_t i = 0; i < chunks.size(); ++i) {
            if (i % every)
                theirs.push_back(chunks[i]);
            else
                pending_.push_back(new Chunk(chunks[i]));
        }
        if (!wake_sent_ && !pending_.empty()) {
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data(sqe, &wake_tag_);
            io_uring_submit(&ring_);
            wake_sent_ = true;
        }
        CopyOnWorkers(theirs);
    }

private:
    // With submit_mutex_ held.
    void Queue(Chunk* c) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        const int fd = fixed_file_ ? 0 : fd_;
        if (c->to_device)
            io_uring_prep_write(sqe, fd, c->host, unsigned(c->size), c->offset);
        else
            io_uring_prep_read(sqe, fd, c->host, unsigned(c->size), c->offset);
        sqe->flags |= IOSQE_ASYNC;  // straight to io-wq: parallel, not inline in io_uring_submit
        if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
        io_uring_sqe_set_data(sqe, c);
        ++in_flight_;
    }

    // With submit_mutex_ held, on the reaper: queued chunks go out while the
    // in-flight bound allows (io-wq gains nothing past its workers).
    void IssuePending() {
        bool issued = false;
        while (!pending_.empty() && in_flight_ < slots_) {
            Queue(pending_.front());
            pending_.pop_front();
            issued = true;
        }
        if (issued) io_uring_submit(&ring_);
    }

    void Reap() {
        for (;;) {
            io_uring_cqe* cqe = nullptr;
            if (io_uring_wait_cqe(&ring_, &cqe) != 0) continue;  // EINTR
            void* data = io_uring_cqe_get_data(cqe);
            const int res = cqe->res;
            io_uring_cqe_seen(&ring_, cqe);
            if (!data) return;  // the destructor's NOP
            std::unique_lock lock(submit_mutex_);
            if (data == &wake_tag_) {
                wake_sent_ = false;
                IssuePending();
                continue;
            }
            auto* c = static_cast<Chunk*>(data);
            --in_flight_;
            if (res > 0 && uint64_t(res) < c->size) {
                // Short transfer: the rest goes out again, in order.
                ChunkProgress(*c, uint64_t(res));
                Queue(c);
                io_uring_submit(&ring_);
                continue;
            }
            IssuePending();
            if (in_flight_ == 0 && pending_.empty()) idle_cv_.notify_all();
            lock.unlock();
            ChunkDone(c->ticket, res > 0 ? c->moved + uint64_t(res) : c->moved, res < 0 ? -res : (res == 0 ? EIO : 0));
            delete c;
        }
    }

    static void ChunkProgress(Chunk& c, uint64_t n) {
        c.host += n;
        c.offset += n;
        c.size -= n;
        c.moved += n;
    }

    io_uring ring_;
    bool fixed_file_ = true;
    std::mutex submit_mutex_;
    std::condition_variable idle_cv_;  // nothing in flight or queued
    const unsigned slots_;
    unsigned in_flight_ = 0;
    std::deque<Chunk*> pending_;  // chunks waiting for the reaper to submit them
    bool wake_sent_ = false;      // a wake NOP is on its way to the reaper
    char wake_tag_ = 0;           // user_data of wake NOPs
    std::thread reaper_;
};


// Every chunk goes to the copy engines: for hosts without io_uring.
class FallbackBackend final : public DmaQueue::Backend {
public:
    FallbackBackend(Function& fn, const DmaOptions& options, std::string reason)
        : Backend(fn, options, std::move(reason)) {}
    DmaBackend kind() const noexcept override { return DmaBackend::Fallback; }
    void Submit(const std::vector<Chunk>& chunks) override { CopyOnWorkers(chunks); }
};

std::unique_ptr<DmaQueue::Backend> MakeBackend(Function& fn, const DmaOptions& options) {
    std::optional<DmaBackend> want = options.backend;
    std::string why;
    if (const char* env = std::getenv("SPYRE_DMA"); env && *env) {
        const std::string v = env;
        if (v != "io_uring" && v != "fallback")
            throw Error(ErrorKind::InvalidArgument, "SPYRE_DMA=" + v + " is not io_uring or fallback");
        want = v == "io_uring" ? DmaBackend::IoUring : DmaBackend::Fallback;
        why = "SPYRE_DMA=" + v;
    }
    if (want == DmaBackend::Fallback) return std::make_unique<FallbackBackend>(fn, options, why.empty() ? "requested" : why);
    io_uring ring;
    const int rc = io_uring_queue_init(options.queue_depth * 2, &ring, 0);
    if (rc == 0) return std::make_unique<IoUringBackend>(fn, options, &ring);
    if (want == DmaBackend::IoUring)
        throw Error(ErrorKind::Unsupported, std::string("io_uring is unavailable: ") + std::strerror(-rc),
                    {.device = fn.pci_address(), .sys_errno = -rc});
    return std::make_unique<FallbackBackend>(fn, options, std::string("io_uring_queue_init: ") + std::strerror(-rc));
}

}  // namespace

DmaQueue::DmaQueue(Function& function, DmaOptions options) {
    if (options.chunk_bytes == 0 || options.chunk_bytes > (1u << 30) || options.queue_depth == 0)
        throw Error(ErrorKind::InvalidArgument, "DMA chunk size must be 1 byte to 1 GiB and queue depth positive");
    backend_ = MakeBackend(function, options);
}

DmaQueue::~DmaQueue() = default;

DmaBackend DmaQueue::backend() const noexcept { return backend_->kind(); }
const std::string& DmaQueue::backend_reason() const noexcept { return backend_->reason(); }
uint64_t DmaQueue::memory_size() const noexcept { return backend_->size(); }

namespace {

void CheckRange(const DmaQueue::Backend& b, uint64_t addr, uint64_t size, const char* what) {
    if (addr > b.size() || size > b.size() - addr)
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + " range of " + std::to_string(size) + " bytes leaves the function's " +
                        std::to_string(b.size()) + " bytes of device memory",
                    {.device = b.device(), .address = addr});
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
    if (size <= b.options().inline_threshold) {
        b.function().CheckAliveThrottled();
        const auto started = steady_clock::now();
        CopyMemory(b.memory() + device_addr, host, size);
        return b.CompletedTicket(size, Direction::ToDevice, steady_clock::now() - started);
    }
    b.function().CheckAlive();
    const Ticket t = b.NewTicket(Parts(b, size), Direction::ToDevice);
    b.Submit(Split(b, true, static_cast<uint8_t*>(const_cast<void*>(host)), b.shm_offset() + device_addr, size, t));
    return t;
}

DmaQueue::Ticket DmaQueue::DeviceToHost(void* host, uint64_t device_addr, uint64_t size) {
    Backend& b = *backend_;
    CheckRange(b, device_addr, size, "device-to-host");
    if (size <= b.options().inline_threshold) {
        b.function().CheckAliveThrottled();
        const auto started = steady_clock::now();
        CopyMemory(host, b.memory() + device_addr, size);
        return b.CompletedTicket(size, Direction::FromDevice, steady_clock::now() - started);
    }
    b.function().CheckAlive();
    const Ticket t = b.NewTicket(Parts(b, size), Direction::FromDevice);
    b.Submit(Split(b, false, static_cast<uint8_t*>(host), b.shm_offset() + device_addr, size, t));
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
        return b.CompletedTicket(size, Direction::DeviceToDevice, steady_clock::now() - started);
    }
    b.function().CheckAlive();
    // The source is the mapping itself: a write from it into the object.
    const Ticket t = b.NewTicket(Parts(b, size), Direction::DeviceToDevice);
    b.Submit(Split(b, true, b.memory() + src_addr, b.shm_offset() + dst_addr, size, t));
    return t;
}

DmaCompletion DmaQueue::Wait(Ticket ticket, milliseconds timeout) { return backend_->Wait(ticket, timeout); }

std::optional<DmaCompletion> DmaQueue::Poll(Ticket ticket) { return backend_->Poll(ticket); }

}  // namespace spyre::driver
