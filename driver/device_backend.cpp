// SPDX-License-Identifier: Apache-2.0
#include "device_backend.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

#include "spyre/common/futex.hpp"

#include "vfio_backend.hpp"

namespace spyre::driver {

int Syscalls::Open(const char* path, int flags) { return ::open(path, flags); }
int Syscalls::Close(int fd) { return ::close(fd); }
int Syscalls::Ioctl(int fd, unsigned long request, void* arg) { return ::ioctl(fd, request, arg); }
int Syscalls::IoctlValue(int fd, unsigned long request, unsigned long value) { return ::ioctl(fd, request, value); }
int Syscalls::Dup(int fd) { return ::fcntl(fd, F_DUPFD_CLOEXEC, 0); }
void* Syscalls::Mmap(size_t length, int prot, int fd, off_t offset) {
    return ::mmap(nullptr, length, prot, MAP_SHARED, fd, offset);
}
ssize_t Syscalls::Pread(int fd, void* buf, size_t count, off_t offset) { return ::pread(fd, buf, count, offset); }
ssize_t Syscalls::Pwrite(int fd, const void* buf, size_t count, off_t offset) {
    return ::pwrite(fd, buf, count, offset);
}

Syscalls& Syscalls::Real() {
    static Syscalls real;
    return real;
}

namespace {

// Calls `step(done)` (one pread or pwrite of what is left, at `done` bytes
// in) until `length` bytes have moved: the device may move fewer per call.
template <typename Step>
void Transfer(const char* verb, uint32_t index, size_t length, const ErrorContext& ctx, Step step) {
    size_t done = 0;
    while (done < length) {
        const ssize_t n = step(done);
        if (n < 0 && errno == EINTR) continue;
        const std::string what = std::string("trapped ") + verb;
        if (n < 0) throw SystemError(what + " of region " + std::to_string(index) + " failed", ctx);
        if (n == 0) throw Error(ErrorKind::InvalidArgument, what + " past the end of region " + std::to_string(index), ctx);
        done += static_cast<size_t>(n);
    }
}

}  // namespace

void DeviceBackend::Read(uint32_t index, uint64_t offset, std::span<uint8_t> out, const ErrorContext& ctx) {
    const uint64_t base = TrapOffset(index) + offset;
    Transfer("read", index, out.size(), ctx, [&](size_t done) {
        return sys_.Pread(fd(), out.data() + done, out.size() - done, static_cast<off_t>(base + done));
    });
}

void DeviceBackend::Write(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes, const ErrorContext& ctx) {
    const uint64_t base = TrapOffset(index) + offset;
    Transfer("write", index, bytes.size(), ctx, [&](size_t done) {
        return sys_.Pwrite(fd(), bytes.data() + done, bytes.size() - done, static_cast<off_t>(base + done));
    });
}

bool DeviceBackend::RequestWhileServing(std::function<void(Syscalls& sys, int fd)> request,
                                        const StillServing& serving) noexcept {
    if (!serving()) return false;
    Syscalls* sys = &sys_;  // Syscalls::Real() but in unit tests: static, so a thread left behind may keep it
    const auto answered = std::make_shared<std::atomic<uint32_t>>(0);
    const int dup = sys->Dup(fd());
    std::thread thread;
    if (dup >= 0) {
        try {
            thread = std::thread([sys, dup, answered, request] {
                request(*sys, dup);
                sys->Close(dup);
                answered->store(1, std::memory_order_release);
                FutexWake(answered.get(), FutexScope::Private);
            });
        } catch (const std::system_error&) {
            sys->Close(dup);
        }
    }
    if (!thread.joinable()) {
        request(*sys, fd());
        return true;
    }
    constexpr std::chrono::milliseconds kLook{SPYRE_HEARTBEAT_PERIOD_MS};
    while (answered->load(std::memory_order_acquire) == 0) {
        FutexWait(answered.get(), 0, kLook, FutexScope::Private);
        if (answered->load(std::memory_order_acquire) == 0 && !serving()) {
            thread.detach();
            return false;
        }
    }
    thread.join();
    return true;
}

bool DeviceBackend::WriteWhileServing(uint32_t index, uint64_t offset, uint32_t value,
                                      const StillServing& serving) noexcept {
    uint64_t at = 0;
    try {
        at = TrapOffset(index) + offset;
    } catch (...) {
        return false;
    }
    const auto written = std::make_shared<std::atomic<bool>>(false);
    const bool answered = RequestWhileServing(
        [at, value, written](Syscalls& sys, int fd) {
            written->store(sys.Pwrite(fd, &value, sizeof value, static_cast<off_t>(at)) == ssize_t(sizeof value));
        },
        serving);
    return answered && written->load();
}

std::unique_ptr<DeviceBackend> OpenBackend(const FunctionInfo& info) {
    switch (info.transport) {
    case Transport::Vfio: return OpenVfioBackend(info);
    case Transport::Mock: break;
    }
    return OpenMockBackend(info);
}

}  // namespace spyre::driver
