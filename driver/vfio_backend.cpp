// SPDX-License-Identifier: Apache-2.0
// The function's device is a card bound to vfio-pci. The contract's region
// indices are vfio-pci's (BARs 0..5, config 7); DEVMEM, the function's
// memory, is reached through the BAR2 aperture. Mappable BARs are mapped
// through the device fd at the region's offset; the rest is trapped access,
// pread/pwrite at that offset. There is no daemon: liveness is the doorbell
// page's device_state word alone.
#include "vfio_backend.hpp"

#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/mman.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

namespace spyre::driver {

namespace {

// The contract's regions a vfio-pci function has, by vfio-pci index.
constexpr std::array<uint32_t, 4> kRegions = {VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR2_REGION_INDEX,
                                              VFIO_PCI_BAR4_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX};
static_assert(SPYRE_REGION_BAR0 == VFIO_PCI_BAR0_REGION_INDEX && SPYRE_REGION_BAR2 == VFIO_PCI_BAR2_REGION_INDEX &&
                  SPYRE_REGION_BAR4 == VFIO_PCI_BAR4_REGION_INDEX && SPYRE_REGION_CONFIG == VFIO_PCI_CONFIG_REGION_INDEX,
              "the contract numbers regions as vfio-pci does");

class VfioBackend final : public DeviceBackend {
public:
    VfioBackend(const FunctionInfo& info, Syscalls& sys) : DeviceBackend(info.pci_address, sys), info_(info) {
        try {
            OpenContainer();
            OpenGroup();
            OpenDevice();
        } catch (...) {
            Release();
            throw;
        }
    }
    ~VfioBackend() override { Release(); }

    const char* name() const noexcept override { return "vfio"; }
    int fd() const noexcept override { return device_; }

    spyre_device_info DeviceInfo() override {
        spyre_device_info di{};
        di.argsz = sizeof di;
        di.flags = (vfio_flags_ & VFIO_DEVICE_FLAGS_RESET ? SPYRE_DEVICE_FLAGS_RESET : 0u) | SPYRE_DEVICE_FLAGS_PCI |
                   (info_.is_vf ? SPYRE_DEVICE_FLAGS_VF : 0u);
        di.num_regions = SPYRE_NUM_REGIONS;
        di.num_irqs = num_irqs_;
        const uint32_t ids = Load<uint32_t>(SPYRE_REGION_CONFIG, 0);
        di.vendor_id = uint16_t(ids & 0xFFFF);
        di.device_id = uint16_t(ids >> 16);
        const uint32_t func = Load<uint32_t>(SPYRE_REGION_BAR0, SPYRE_REG_FUNC_ID);
        di.card_index = uint16_t((func & SPYRE_FUNC_ID_CARD_MASK) >> SPYRE_FUNC_ID_CARD_SHIFT);
        di.function_index = uint16_t(func & SPYRE_FUNC_ID_INDEX_MASK);
        di.contract_version = Load<uint32_t>(SPYRE_REGION_BAR0, SPYRE_REG_VERSION);
        di.daemon_pid = 0;  // a card: no process serves it
        std::strncpy(di.pci_address, device().c_str(), sizeof di.pci_address - 1);
        di.mem_size = Load<uint64_t>(SPYRE_REGION_BAR0, SPYRE_REG_MEM_SIZE);
        di.num_cores = Load<uint32_t>(SPYRE_REGION_BAR0, SPYRE_REG_NUM_CORES);
        return di;
    }

    spyre_region_info RegionInfo(uint32_t index) override {
        const vfio_region_info& r = Region(index);
        spyre_region_info ri{};
        ri.argsz = sizeof ri;
        ri.index = index;
        ri.flags = r.flags & (VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP);
        ri.size = r.size;
        ri.offset = r.offset;
        return ri;
    }

    MappedRegion Map(uint32_t index) override {
        const vfio_region_info& r = Present(index);
        if (!(r.flags & VFIO_REGION_INFO_FLAG_MMAP))
            throw Error(ErrorKind::Unsupported,
                        "region " + std::to_string(index) + " cannot be mapped (vfio-pci traps it: use trapped access)",
                        Context());
        void* p = sys().Mmap(r.size, PROT_READ | PROT_WRITE, device_, static_cast<off_t>(r.offset));
        if (p == MAP_FAILED) throw SystemError("cannot map region " + std::to_string(index) + " of the device fd", Context());
        return MappedRegion(p, r.size);
    }

    RegionFile File(uint32_t index) override {
        const vfio_region_info& r = Present(index);
        constexpr uint32_t kReadWrite = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        if ((r.flags & kReadWrite) != kReadWrite)
            throw Error(ErrorKind::Unsupported, "region " + std::to_string(index) + " is not readable and writable",
                        Context());
        const int fd = sys().Dup(device_);
        if (fd < 0) throw SystemError("cannot duplicate the device fd", Context());
        return RegionFile{fd, r.offset};
    }

    Request ResetRequest() override {
        if (!(vfio_flags_ & VFIO_DEVICE_FLAGS_RESET))
            throw Error(ErrorKind::Unsupported, "vfio-pci offers no reset for this function", Context());
        return [ctx = Context()](Syscalls& sys, int fd) {
            if (sys.IoctlValue(fd, VFIO_DEVICE_RESET, 0) != 0) throw SystemError("VFIO_DEVICE_RESET failed", ctx);
        };
    }

    // vfio hands the function over when its fds close (device, then group,
    // which leaves the container, then container), asking the card nothing.
    using DeviceBackend::Release;
    void Release(const StillServing& /*serving*/) noexcept override {
        for (int* fd : {&device_, &group_, &container_})
            if (*fd >= 0) sys().Close(std::exchange(*fd, -1));
    }

protected:
    uint64_t TrapOffset(uint32_t index) override { return Present(index).offset; }

private:
    ErrorContext Context(int sys_errno = 0) const { return ErrorContext{.device = device(), .sys_errno = sys_errno}; }

    void OpenContainer() {
        container_ = sys().Open(kVfioContainer, O_RDWR | O_CLOEXEC);
        if (container_ < 0) throw SystemError(std::string("cannot open ") + kVfioContainer, Context());
        const int version = sys().IoctlValue(container_, VFIO_GET_API_VERSION, 0);
        if (version != VFIO_API_VERSION)
            throw Error(ErrorKind::Unsupported,
                        "the kernel speaks VFIO API " + std::to_string(version) + ", this driver " +
                            std::to_string(VFIO_API_VERSION),
                        Context());
        for (int type : {VFIO_TYPE1v2_IOMMU, VFIO_TYPE1_IOMMU})
            if (sys().IoctlValue(container_, VFIO_CHECK_EXTENSION, unsigned(type)) > 0) {
                iommu_type_ = type;
                return;
            }
        throw Error(ErrorKind::Unsupported, "the VFIO container offers no type-1 IOMMU", Context());
    }

    void OpenGroup() {
        const std::string group = info_.dev_node.string();
        group_ = sys().Open(group.c_str(), O_RDWR | O_CLOEXEC);
        if (group_ < 0) {
            if (errno == EBUSY)
                throw Error(ErrorKind::Busy, "IOMMU group " + group + " is held by another process", Context(EBUSY));
            throw SystemError("cannot open IOMMU group " + group, Context());
        }
        vfio_group_status status{};
        status.argsz = sizeof status;
        if (sys().Ioctl(group_, VFIO_GROUP_GET_STATUS, &status) != 0)
            throw SystemError("VFIO_GROUP_GET_STATUS failed on " + group, Context());
        if (!(status.flags & VFIO_GROUP_FLAGS_VIABLE))
            throw Error(ErrorKind::Unsupported,
                        "IOMMU group " + group +
                            " is not viable: every device in it must be bound to vfio-pci or to no driver",
                        Context());
        if (status.flags & VFIO_GROUP_FLAGS_CONTAINER_SET)
            throw Error(ErrorKind::Busy, "IOMMU group " + group + " is in another container already", Context());
        if (sys().Ioctl(group_, VFIO_GROUP_SET_CONTAINER, &container_) != 0)
            throw SystemError("VFIO_GROUP_SET_CONTAINER failed on " + group, Context());
        if (sys().IoctlValue(container_, VFIO_SET_IOMMU, unsigned(iommu_type_)) != 0)
            throw SystemError("VFIO_SET_IOMMU failed", Context());
    }

    void OpenDevice() {
        const int fd = sys().Ioctl(group_, VFIO_GROUP_GET_DEVICE_FD, const_cast<char*>(device().c_str()));
        if (fd < 0) throw SystemError("IOMMU group " + info_.dev_node.string() + " has no device " + device(), Context());
        device_ = fd;
        vfio_device_info di{};
        di.argsz = sizeof di;
        if (sys().Ioctl(device_, VFIO_DEVICE_GET_INFO, &di) != 0) throw SystemError("VFIO_DEVICE_GET_INFO failed", Context());
        if (!(di.flags & VFIO_DEVICE_FLAGS_PCI) || di.num_regions <= VFIO_PCI_CONFIG_REGION_INDEX)
            throw Error(ErrorKind::ProtocolError, "the VFIO device is not a PCI function with config space", Context());
        vfio_flags_ = di.flags;
        num_irqs_ = di.num_irqs;
        for (uint32_t index : kRegions) {
            vfio_region_info& r = regions_[index];
            r.argsz = sizeof r;
            r.index = index;
            if (sys().Ioctl(device_, VFIO_DEVICE_GET_REGION_INFO, &r) != 0)
                throw SystemError("VFIO_DEVICE_GET_REGION_INFO for region " + std::to_string(index) + " failed", Context());
            if (r.index != index)
                throw Error(ErrorKind::ProtocolError,
                            "VFIO_DEVICE_GET_REGION_INFO for region " + std::to_string(index) + " answered for region " +
                                std::to_string(r.index),
                            Context());
        }
        // The registers, the doorbell page and config space are the contract:
        // a function without them is not a spyre function.
        for (uint32_t index : {SPYRE_REGION_BAR0, SPYRE_REGION_BAR4, SPYRE_REGION_CONFIG}) Present(index);
    }

    // vfio-pci's info for contract region `index`.
    const vfio_region_info& Region(uint32_t index) const {
        const uint32_t vfio = index == SPYRE_REGION_DEVMEM ? uint32_t(VFIO_PCI_BAR2_REGION_INDEX) : index;
        if (vfio >= regions_.size() || regions_[vfio].argsz == 0)
            throw Error(ErrorKind::InvalidArgument, "no region " + std::to_string(index) + " on a vfio-pci function", Context());
        return regions_[vfio];
    }
    const vfio_region_info& Present(uint32_t index) const {
        const vfio_region_info& r = Region(index);
        if (r.size == 0)
            throw Error(ErrorKind::ProtocolError, "vfio-pci reports region " + std::to_string(index) + " missing (size 0)",
                        Context());
        return r;
    }

    template <typename T>
    T Load(uint32_t index, uint64_t offset) {
        T v;
        Read(index, offset, std::span(reinterpret_cast<uint8_t*>(&v), sizeof v), Context());
        return v;
    }

    FunctionInfo info_;
    int container_ = -1, group_ = -1, device_ = -1;
    int iommu_type_ = 0;
    uint32_t vfio_flags_ = 0, num_irqs_ = 0;
    std::array<vfio_region_info, VFIO_PCI_CONFIG_REGION_INDEX + 1> regions_{};
};

}  // namespace

std::unique_ptr<DeviceBackend> OpenVfioBackend(const FunctionInfo& info, Syscalls& sys) {
    return std::make_unique<VfioBackend>(info, sys);
}

}  // namespace spyre::driver
