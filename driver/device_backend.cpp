// SPDX-License-Identifier: Apache-2.0
#include "device_backend.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "run_while.hpp"
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
    static auto* real = new Syscalls;  // never destroyed: calls may come while the process exits
    return *real;
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

void ReadAt(Syscalls& sys, int fd, uint32_t index, uint64_t base, std::span<uint8_t> out, const ErrorContext& ctx) {
    Transfer("read", index, out.size(), ctx, [&](size_t done) {
        return sys.Pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(base + done));
    });
}

void WriteAt(Syscalls& sys, int fd, uint32_t index, uint64_t base, std::span<const uint8_t> bytes,
             const ErrorContext& ctx) {
    Transfer("write", index, bytes.size(), ctx, [&](size_t done) {
        return sys.Pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(base + done));
    });
}

}  // namespace

void DeviceBackend::Read(uint32_t index, uint64_t offset, std::span<uint8_t> out, const ErrorContext& ctx) {
    ReadAt(sys_, fd(), index, TrapOffset(index) + offset, out, ctx);
}

void DeviceBackend::Write(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes, const ErrorContext& ctx) {
    WriteAt(sys_, fd(), index, TrapOffset(index) + offset, bytes, ctx);
}

DeviceBackend::Request DeviceBackend::ReadRequest(uint32_t index, uint64_t offset,
                                                  std::shared_ptr<std::vector<uint8_t>> out, ErrorContext ctx) {
    return [index, base = TrapOffset(index) + offset, out = std::move(out), ctx = std::move(ctx)](Syscalls& sys, int fd) {
        ReadAt(sys, fd, index, base, *out, ctx);
    };
}

DeviceBackend::Request DeviceBackend::WriteRequest(uint32_t index, uint64_t offset, std::vector<uint8_t> bytes,
                                                   ErrorContext ctx) {
    return [index, base = TrapOffset(index) + offset, bytes = std::move(bytes), ctx = std::move(ctx)](Syscalls& sys,
                                                                                                       int fd) {
        WriteAt(sys, fd, index, base, bytes, ctx);
    };
}

bool DeviceBackend::RequestWhileServing(Request request, const StillServing& serving) {
    if (!serving()) return false;
    Syscalls* sys = &sys_;  // Syscalls::Real() but in unit tests: static, so a thread left behind may keep it
    const int dup = MayStall() ? sys->Dup(fd()) : -1;
    if (dup < 0) {
        request(*sys, fd());
        return true;
    }
    return RunWhile(
        [sys, dup, request] {
            struct CloseDup {
                Syscalls* sys;
                int fd;
                ~CloseDup() { sys->Close(fd); }
            } close_dup{sys, dup};
            request(*sys, dup);
        },
        serving, std::chrono::milliseconds(SPYRE_HEARTBEAT_PERIOD_MS));
}

std::unique_ptr<DeviceBackend> OpenBackend(const FunctionInfo& info) {
    switch (info.transport) {
    case Transport::Vfio: return OpenVfioBackend(info);
    case Transport::Mock: break;
    }
    return OpenMockBackend(info);
}

}  // namespace spyre::driver
