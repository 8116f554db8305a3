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
#include <memory>
#include <span>
#include <string>

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
    virtual void Reset() = 0;
    // Ends the claim now, before the fds close (the next owner finds it
    // free). `device_responds` false (a device that stopped responding):
    // only close, asking the device nothing, since a request to a stopped
    // device model waits for as long as it stays stopped.
    virtual void Release(bool device_responds = true) noexcept = 0;
    // The fd trapped access goes through (the device node, the VFIO device fd).
    virtual int fd() const noexcept = 0;

    // Trapped access: pread/pwrite on fd() at the region's offset, in as
    // many calls as the device takes. Throws InvalidArgument at the region's
    // end, SystemError on a failed call.
    void Read(uint32_t index, uint64_t offset, std::span<uint8_t> out, const ErrorContext& ctx);
    void Write(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes, const ErrorContext& ctx);

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
