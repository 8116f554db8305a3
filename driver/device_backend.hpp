// SPDX-License-Identifier: Apache-2.0
//
// The seam under Function: how a function's device is reached. Function
// speaks the hardware contract (registers, rings, region indices); a backend
// carries it to a device: MockBackend to spyre-mockdev (its device node and
// shared-memory objects), VfioBackend to a card bound to vfio-pci (container,
// group and device fds). Everything above Function is the same on both.
//
// A backend holds the one claim on its function (the mock's exclusive device
// node, VFIO's group and device fds): whoever holds the backend, and only
// they, can map or reach the function's memory.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/driver/discovery.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre.h"

namespace spyre::driver {

// The system calls a backend makes, so that tests can stand in for the
// kernel. Each returns what the system call returns and sets errno likewise.
class Syscalls {
public:
    virtual ~Syscalls() = default;
    virtual int Open(const char* path, int flags);
    virtual int Close(int fd);
    virtual int Ioctl(int fd, unsigned long request, void* arg);
    virtual int IoctlValue(int fd, unsigned long request, unsigned long value);
    virtual int Dup(int fd);
    virtual void* Mmap(size_t length, int prot, int fd, off_t offset);
    virtual ssize_t Pread(int fd, void* buf, size_t count, off_t offset);
    virtual ssize_t Pwrite(int fd, const void* buf, size_t count, off_t offset);
    static Syscalls& Real();
};

class DeviceBackend {
public:
    explicit DeviceBackend(std::string device, Syscalls& sys) : device_(std::move(device)), sys_(sys) {}
    virtual ~DeviceBackend() = default;
    DeviceBackend(const DeviceBackend&) = delete;
    DeviceBackend& operator=(const DeviceBackend&) = delete;

    virtual const char* name() const noexcept = 0;
    // The function's identity as the contract's device info.
    virtual spyre_device_info DeviceInfo() = 0;
    // Region `index` (SPYRE_REGION_*): flags, size, the offset of trapped access.
    virtual spyre_region_info RegionInfo(uint32_t index) = 0;
    // Maps the whole mappable part of a region. Unsupported if it cannot be mapped.
    virtual MappedRegion Map(uint32_t index) = 0;
    // The region as a file for bulk copies (DMA). Unsupported if it has none.
    virtual RegionFile File(uint32_t index) = 0;
    // Function-level reset; returns when the device has reset.
    void Reset() { ResetRequest()(sys_, fd()); }
    // Whether the device still serves requests (its process lives, its
    // heartbeat moves), asked while a request waits for its answer.
    using StillServing = std::function<bool()>;
    // Ends the claim now, before the fds close (the next owner finds it
    // free). A request to a device model that stopped (SIGSTOP, hung)
    // waits for as long as it stays stopped: the claim's end waits for
    // the device only while `serving` says yes, and then closes the fds
    // without its answer. The default: wait for as long as it takes.
    virtual void Release(const StillServing& serving) noexcept = 0;
    void Release() noexcept {
        Release([] { return true; });
    }
    // The fd trapped access goes through (the device node, the VFIO device fd).
    virtual int fd() const noexcept = 0;

    // Trapped access: pread/pwrite on fd() at the region's offset, in as
    // many calls as the device takes. Throws InvalidArgument at the region's
    // end, SystemError on a failed call.
    void Read(uint32_t index, uint64_t offset, std::span<uint8_t> out, const ErrorContext& ctx);
    void Write(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes, const ErrorContext& ctx);

    // One request to the device (a system call or a few on `fd`, fd() or a
    // dup of it). A request owns all it touches: one given up on may run
    // after its caller has gone, and after this backend has.
    using Request = std::function<void(Syscalls& sys, int fd)>;
    // Read, Write and Reset as requests; a read's bytes land in `*out`.
    Request ReadRequest(uint32_t index, uint64_t offset, std::shared_ptr<std::vector<uint8_t>> out, ErrorContext ctx);
    Request WriteRequest(uint32_t index, uint64_t offset, std::vector<uint8_t> bytes, ErrorContext ctx);
    virtual Request ResetRequest() = 0;
    // Whether a request can wait for ever on a device that stopped: true
    // for a device model behind a node (a FUSE request waits for as long as
    // its daemon does not read it), false for the kernel's vfio-pci.
    virtual bool MayStall() const noexcept { return false; }

    // Runs `request` and returns true once it is done, rethrowing what it
    // threw. Where the device may stall, it runs on a dup of fd() from a
    // thread of its own, and the caller waits for it only while `serving`
    // says yes, looking once per heartbeat period: false at once when
    // `serving` says no, or later when the device stopped serving first.
    // The request's thread is then left to its answer, or to the process's
    // exit (a FUSE request the daemon has not read dies with it). With no
    // fd or thread to spare, the request runs here.
    bool RequestWhileServing(Request request, const StillServing& serving);

    const std::string& device() const noexcept { return device_; }

protected:
    // The offset of trapped access to region `index` (from RegionInfo, cached).
    virtual uint64_t TrapOffset(uint32_t index) = 0;
    Syscalls& sys() const noexcept { return sys_; }

private:
    std::string device_;
    Syscalls& sys_;
};

// The backend FunctionInfo::transport names, opened on `info`.
std::unique_ptr<DeviceBackend> OpenBackend(const FunctionInfo& info);
std::unique_ptr<DeviceBackend> OpenMockBackend(const FunctionInfo& info, Syscalls& sys = Syscalls::Real());

}  // namespace spyre::driver
