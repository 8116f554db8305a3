// SPDX-License-Identifier: Apache-2.0
// The function's device is spyre-mockdev: the contract's ioctls and trapped
// access go to its device node (FUSE), mappable regions are its
// shared-memory objects, named by the mock transport's ioctl on that node.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <optional>
#include <utility>

#include "device_backend.hpp"
#include "device_checks.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre_region_size.h"

namespace spyre::driver {

namespace {

class MockBackend final : public DeviceBackend {
public:
    MockBackend(const FunctionInfo& info, Syscalls& sys) : DeviceBackend(info.pci_address, sys) {
        fd_ = sys.Open(info.dev_node.c_str(), O_RDWR | O_CLOEXEC);
        if (fd_ < 0) {
            if (errno == EBUSY)
                throw Error(ErrorKind::Busy,
                            "function is in use: its device node is held by another process or by another open in "
                            "this one (device nodes are exclusive)",
                            ErrorContext{.device = device(), .sys_errno = EBUSY});
            throw SystemError("cannot open " + info.dev_node.string(), Context());
        }
        // Every region's answers now, while the daemon has just answered
        // the open: asked later, a stopped daemon held the caller for good
        // (RegionInfo, MapRegion, OpenRegionFile, Orchestrator::Create;
        // found probing from outside). The contract fixes them for the
        // function's life.
        try {
            for (uint32_t index = 0; index < SPYRE_NUM_REGIONS; ++index) {
                if (spyre_region_size(index, 1) == 0) continue;  // no region
                Region& r = regions_[index];
                r.info = AskRegionInfo(index);
                if (!(r.info->flags & SPYRE_REGION_INFO_FLAG_MMAP)) continue;
                try {
                    r.mappable = AskMappable(index, *r.info);
                } catch (const Error& e) {
                    if (e.kind() != ErrorKind::Unsupported) throw;  // no object to map: Map says so
                }
            }
        } catch (...) {
            sys.Close(std::exchange(fd_, -1));
            throw;
        }
    }
    ~MockBackend() override { Release(); }

    const char* name() const noexcept override { return "mock"; }
    int fd() const noexcept override { return fd_; }

    spyre_device_info DeviceInfo() override {
        spyre_device_info di{};
        di.argsz = sizeof di;
        if (sys().Ioctl(fd_, SPYRE_IOC_GET_INFO, &di) != 0) throw SystemError("GET_INFO ioctl failed", Context());
        return di;
    }

    spyre_region_info RegionInfo(uint32_t index) override { return *Known(index).info; }

    MappedRegion Map(uint32_t index) override {
        const checks::MappableRegion r = Mappable(index);
        const int shm = OpenObject(r);
        void* p = sys().Mmap(r.mmap_size, PROT_READ | PROT_WRITE, shm, static_cast<off_t>(r.shm_offset));
        const int e = errno;
        ::close(shm);
        if (p == MAP_FAILED) {
            errno = e;
            throw SystemError("cannot map region " + std::to_string(index) + " (" + r.shm_name + ")", Context());
        }
        return MappedRegion(p, r.mmap_size);
    }

    RegionFile File(uint32_t index) override {
        const checks::MappableRegion r = Mappable(index);
        return RegionFile{OpenObject(r), r.shm_offset};
    }

    Request ResetRequest() override {
        return [ctx = Context()](Syscalls& sys, int fd) {
            spyre_reset_req req{sizeof(spyre_reset_req), 0};
            if (sys.Ioctl(fd, SPYRE_IOC_RESET, &req) != 0) throw SystemError("RESET ioctl failed", ctx);
        };
    }

    // Every request is a FUSE request, which waits for as long as the
    // daemon does not read it (stopped, hung).
    bool MayStall() const noexcept override { return true; }

    // FUSE delivers close's release only after close() has returned; the
    // ioctl hands the function over first.
    using DeviceBackend::Release;
    void Release(const StillServing& serving) noexcept override {
        if (fd_ < 0) return;
        // A stopped daemon never answers: the fds close without it, and it
        // hands the function over when it sees them close.
        try {
            RequestWhileServing(
                [](Syscalls& sys, int fd) {
                    spyre_release_req req{.argsz = sizeof req, .flags = 0};
                    sys.Ioctl(fd, SPYRE_IOC_RELEASE, &req);
                },
                serving);
        } catch (...) {  // no memory for the request: the close hands the function over
        }
        sys().Close(std::exchange(fd_, -1));
    }

protected:
    // The contract fixes where trapped access to each region lies.
    uint64_t TrapOffset(uint32_t index) override { return SPYRE_REGION_OFFSET(index); }

private:
    ErrorContext Context() const { return ErrorContext{.device = device()}; }

    struct Region {
        std::optional<spyre_region_info> info;        // every region's
        std::optional<checks::MappableRegion> mappable;  // those it maps
    };

    const Region& Known(uint32_t index) const {
        if (index >= SPYRE_NUM_REGIONS || !regions_[index].info)
            throw Error(ErrorKind::InvalidArgument,
                        "region " + std::to_string(index) + " is none of the function's (0, 2, 4, 7 and 9)", Context());
        return regions_[index];
    }

    checks::MappableRegion Mappable(uint32_t index) const {
        const Region& r = Known(index);
        if (!r.mappable) throw Error(ErrorKind::Unsupported, "region " + std::to_string(index) + " cannot be mapped", Context());
        return *r.mappable;
    }

    spyre_region_info AskRegionInfo(uint32_t index) {
        spyre_region_info ri{};
        ri.argsz = sizeof ri;
        ri.index = index;
        if (sys().Ioctl(fd_, SPYRE_IOC_GET_REGION_INFO, &ri) != 0)
            throw SystemError("GET_REGION_INFO for region " + std::to_string(index) + " failed", Context());
        return ri;
    }

    // The names travel only over the held device node: only the holder
    // learns which objects are its function's memory.
    checks::MappableRegion AskMappable(uint32_t index, const spyre_region_info& ri) {
        spyre_mock_region_shm shm{};
        shm.argsz = sizeof shm;
        shm.index = index;
        if (sys().Ioctl(fd_, SPYRE_MOCK_IOC_REGION_SHM, &shm) != 0)
            throw SystemError("the mock's REGION_SHM for region " + std::to_string(index) + " failed", Context());
        return checks::CheckMockRegion(ri, shm, index, Context());
    }

    int OpenObject(const checks::MappableRegion& r) const {
        // The daemon's directory lets its group in, not list: the name is the key.
        const std::string path = std::string(SPYRE_MOCK_SHM_DIR) + "/" + r.shm_name;
        const int shm = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (shm < 0) throw SystemError("cannot open shared memory " + path, Context());
        return shm;
    }

    int fd_ = -1;
    std::array<Region, SPYRE_NUM_REGIONS> regions_;
};

}  // namespace

std::unique_ptr<DeviceBackend> OpenMockBackend(const FunctionInfo& info, Syscalls& sys) {
    return std::make_unique<MockBackend>(info, sys);
}

}  // namespace spyre::driver
