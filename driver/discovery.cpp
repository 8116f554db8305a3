// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/discovery.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "spyre/error.hpp"
#include "spyre/uapi/spyre_pci.h"
#include "spyre/uapi/spyre_regs.h"

#include "run_while.hpp"

namespace fs = std::filesystem;

namespace spyre::driver {

namespace {

fs::path DevicesDir(const fs::path& root) { return root / "bus" / "pci" / "devices"; }

std::optional<uint16_t> ReadHexFile(const fs::path& file) {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text)) return std::nullopt;
    try {
        size_t used = 0;
        unsigned long v = std::stoul(text, &used, 16);
        if (used != text.size() || v > 0xFFFF) return std::nullopt;
        return static_cast<uint16_t>(v);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// An index: digits, few enough to be one ("00000000000000000001" is none).
bool IsIndex(std::string_view s) {
    return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// DDDD:BB:DD.F exactly: hex digits in every place (sscanf's %x took "0x0",
// "+000", "-1", a leading space and short fields), the function 0-7.
bool IsLongAddress(std::string_view a) {
    if (a.size() != 12 || a[4] != ':' || a[7] != ':' || a[10] != '.' || a[11] < '0' || a[11] > '7') return false;
    for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9})
        if (!std::isxdigit(static_cast<unsigned char>(a[i]))) return false;
    return true;
}

// "01:00.1" -> "0000:01:00.1"; full addresses pass through.
std::string NormalizeAddress(std::string_view s) {
    std::string a(s);
    if (std::count(a.begin(), a.end(), ':') == 1) a = "0000:" + a;
    std::transform(a.begin(), a.end(), a.begin(), [](unsigned char c) { return std::tolower(c); });
    return a;
}

// Every entry, trimmed, empty ones too ("1,,2": the user meant something
// there, and a skipped entry would shift the indices they counted on).
std::vector<std::string> SplitList(std::string_view s) {
    std::vector<std::string> out;
    std::stringstream ss{std::string(s)};
    std::string item;
    while (std::getline(ss, item, ',')) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        out.push_back(item);
    }
    if (!s.empty() && s.back() == ',') out.emplace_back();  // getline drops a trailing empty entry
    return out;
}

constexpr const char* kSelectorForms = "an index or a PCI address (DDDD:BB:DD.F or BB:DD.F)";

}  // namespace

FunctionSelector ParseFunctionSelector(std::string_view selector) {
    if (selector.empty())
        throw Error(ErrorKind::InvalidArgument, std::string("empty device selector: give ") + kSelectorForms);
    if (IsIndex(selector)) return FunctionSelector{std::stoul(std::string(selector)), {}};
    const std::string addr = NormalizeAddress(selector);
    if (!IsLongAddress(addr))
        throw Error(ErrorKind::InvalidArgument,
                    "device selector '" + std::string(selector) + "' is not " + kSelectorForms);
    return FunctionSelector{std::nullopt, addr};
}

std::optional<FunctionInfo> ProbeFunction(const fs::path& root, const std::string& pci_address) {
    fs::path dir = DevicesDir(root) / pci_address;
    auto vendor = ReadHexFile(dir / "vendor");
    auto device = ReadHexFile(dir / "device");
    if (!vendor || !device || *vendor != SPYRE_PCI_VENDOR_IBM) return std::nullopt;
    if (*device != SPYRE_PCI_DEVICE_PF && *device != SPYRE_PCI_DEVICE_VF) return std::nullopt;
    FunctionInfo info;
    info.pci_address = pci_address;
    info.vendor_id = *vendor;
    info.device_id = *device;
    info.is_vf = *device == SPYRE_PCI_DEVICE_VF;
    info.sysfs_dir = dir;
    info.dev_node = root / "dev" / "spyre" / pci_address;
    // A real sysfs: a function bound to vfio-pci is reached through its IOMMU group.
    std::error_code ec;
    if (fs::read_symlink(dir / "driver", ec).filename() == "vfio-pci") {
        const fs::path group = fs::read_symlink(dir / "iommu_group", ec).filename();
        if (!ec && !group.empty()) {
            info.dev_node = fs::path(kVfioDevDir) / group;
            info.transport = Transport::Vfio;
        }
    }
    return info;
}

// Discovery reads the device model's files before the driver knows its
// process: each step waits for a stopped daemon no longer than the
// heartbeat's bound (run_while.hpp).
namespace {
std::string TreeAt(const fs::path& mount) { return "the device tree at " + mount.string(); }
}  // namespace

bool DeviceRoot::Looks(const fs::path& mount) {
    return CallWithinHeartbeatBound<bool>(
        [mount] {
            std::error_code ec;
            return fs::is_directory(DevicesDir(mount), ec);
        },
        TreeAt(mount), DevicesDir(mount).string());
}

namespace {
// A FUSE mount whose daemon died answers ENOTCONN (ECONNABORTED when it died
// during the request) until it is unmounted.
bool DaemonGone(int err) { return err == ENOTCONN || err == ECONNABORTED; }
}  // namespace

DeviceRoot::DeviceRoot(fs::path mount) : path_(std::move(mount)) {
    if (!Looks(path_)) {
        std::error_code ec;
        (void)fs::status(DevicesDir(path_), ec);
        if (DaemonGone(ec.value()))
            throw Error(ErrorKind::DeviceLost, "the device tree at " + path_.string() + " is a mount whose daemon is gone (" +
                                                   ec.message() + "): unmount it (fusermount3 -u " + path_.string() +
                                                   ") and start spyre-mockdev again");
        throw Error(ErrorKind::NotFound, "no spyre device tree at " + path_.string() +
                                             " (expected bus/pci/devices; is spyre-mockdev mounted there?)");
    }
}

std::vector<FunctionInfo> DeviceRoot::Functions() const {
    std::vector<FunctionInfo> all = CallWithinHeartbeatBound<std::vector<FunctionInfo>>(
        [root = path_] {
            std::vector<FunctionInfo> found;
            std::error_code ec;
            for (const auto& entry : fs::directory_iterator(DevicesDir(root), ec)) {
                if (auto info = ProbeFunction(root, entry.path().filename().string())) found.push_back(std::move(*info));
            }
            if (ec)
                throw Error(DaemonGone(ec.value()) ? ErrorKind::DeviceLost : ErrorKind::IoError,
                            "cannot list " + DevicesDir(root).string() + ": " + ec.message());
            return found;
        },
        TreeAt(path_), DevicesDir(path_).string());
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.pci_address < b.pci_address; });

    const char* visible = std::getenv("SPYRE_DEVICES");
    if (!visible || !*visible) return all;
    // Every entry must name one function, once: an entry that names nothing
    // (a typo, a VF not enabled) would otherwise leave the app on other
    // devices than its user chose, without a word.
    auto listed = [&] {
        std::string names;
        for (const auto& f : all) names += (names.empty() ? "" : ", ") + f.pci_address;
        return std::to_string(all.size()) + " spyre function(s) under " + path_.string() +
               (names.empty() ? "" : ": " + names);
    };
    std::vector<FunctionInfo> chosen;
    const std::vector<std::string> items = SplitList(visible);
    for (size_t n = 0; n < items.size(); ++n) {
        const std::string& item = items[n];
        const std::string entry = "SPYRE_DEVICES entry '" + item + "'";
        if (item.empty())
            throw Error(ErrorKind::InvalidArgument, "SPYRE_DEVICES='" + std::string(visible) + "': entry " +
                                                        std::to_string(n + 1) + " is empty; each entry is " +
                                                        kSelectorForms + ", or unset SPYRE_DEVICES for all");
        FunctionSelector sel;
        try {
            sel = ParseFunctionSelector(item);
        } catch (const Error&) {
            throw Error(ErrorKind::InvalidArgument, entry + ": not " + std::string(kSelectorForms));
        }
        std::vector<FunctionInfo>::const_iterator it;
        if (sel.index) {
            const size_t i = *sel.index;
            if (i >= all.size()) throw Error(ErrorKind::NotFound, entry + ": index out of range: " + listed());
            it = all.begin() + long(i);
        } else {
            const std::string& addr = sel.pci_address;
            it = std::find_if(all.begin(), all.end(), [&](const auto& f) { return f.pci_address == addr; });
            if (it == all.end()) throw Error(ErrorKind::NotFound, entry + ": no such function: " + listed());
        }
        if (std::any_of(chosen.begin(), chosen.end(), [&](const auto& f) { return f.pci_address == it->pci_address; }))
            throw Error(ErrorKind::InvalidArgument, entry + " names " + it->pci_address + " a second time");
        chosen.push_back(*it);
    }
    return chosen;
}

std::optional<FunctionInfo> FunctionAtPath(const std::string& target) {
    // The mount a path into a device tree lies in, for the message when
    // its daemon is gone (its files can no longer tell).
    auto mount_of = [](std::string path) {
        while (path.size() > 1 && path.back() == '/') path.pop_back();
        for (const std::string marker : {"/dev/spyre", "/bus/pci/devices"}) {
            if (const size_t at = path.rfind(marker + "/"); at != std::string::npos) return path.substr(0, at);
            if (path.size() >= marker.size() && path.ends_with(marker)) return path.substr(0, path.size() - marker.size());
        }
        return path;  // the mount itself (or somewhere in it)
    };
    return CallWithinHeartbeatBound<std::optional<FunctionInfo>>(
        [target, mount_of]() -> std::optional<FunctionInfo> {
            fs::path p(target);
            std::error_code ec;
            const bool exists = fs::exists(p, ec);
            if (DaemonGone(ec.value())) {
                const std::string mount = mount_of(fs::absolute(p).string());
                throw Error(ErrorKind::DeviceLost, target + " lies on a mount whose daemon is gone (" + ec.message() +
                                                       "): unmount it (fusermount3 -u " + mount +
                                                       ") and start spyre-mockdev again");
            }
            if (!exists) return std::nullopt;
            // A directory named with a trailing slash (as a shell completes
            // it) has an empty last component: it was refused.
            p = fs::absolute(p).lexically_normal();
            if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
            if (fs::is_regular_file(p, ec) && p.parent_path().filename() != "spyre") p = p.parent_path();
            const std::string addr = p.filename().string();
            // Up to the mount: <root>/dev/spyre/<addr> or <root>/bus/pci/devices/<addr>.
            const fs::path up = p.parent_path();
            const fs::path root =
                up.filename() == "spyre" ? up.parent_path().parent_path() : up.parent_path().parent_path().parent_path();
            if (auto info = ProbeFunction(root, addr)) return info;
            throw Error(ErrorKind::NotFound, target + " is not a spyre device node or function directory");
        },
        "the device tree " + target + " lies in", target);
}

FunctionInfo DeviceRoot::Find(std::string_view selector) const {
    const FunctionSelector sel = ParseFunctionSelector(selector);
    auto functions = Functions();
    if (sel.index) {
        const size_t i = *sel.index;
        if (i >= functions.size())
            throw Error(ErrorKind::NotFound, "device index " + std::string(selector) + " out of range: " +
                                                 std::to_string(functions.size()) + " spyre function(s) under " +
                                                 path_.string());
        return functions[i];
    }
    const std::string& addr = sel.pci_address;
    for (const auto& f : functions)
        if (f.pci_address == addr) return f;
    throw Error(ErrorKind::NotFound, "no spyre function " + addr + " under " + path_.string());
}

namespace {

// Reads `size` bytes at `offset` of a function's file; the errno on failure.
int ReadAt(const fs::path& file, void* out, size_t size, off_t offset) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    const ssize_t n = ::pread(fd, out, size, offset);
    const int err = n < 0 ? errno : (size_t(n) == size ? 0 : EIO);
    ::close(fd);
    return err;
}

FunctionStatus ReadStatusHere(const FunctionInfo& info) {
    FunctionStatus st;
    // Fallback identity from the address: bus - first bus, devfn as the SR-IOV layout places VFs.
    unsigned domain = 0, bus = 0, device = 0, fn = 0;
    if (std::sscanf(info.pci_address.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &fn) == 4) {
        st.card = uint16_t(bus >= SPYRE_PCI_FIRST_BUS ? bus - SPYRE_PCI_FIRST_BUS : bus);
        const unsigned devfn = device << 3 | fn;
        st.function = uint16_t(info.is_vf && devfn >= SPYRE_SRIOV_FIRST_VF_OFFSET
                                   ? (devfn - SPYRE_SRIOV_FIRST_VF_OFFSET) / SPYRE_SRIOV_VF_STRIDE + 1
                                   : 0);
    }
    // FUNC_ID (0x0C) through MEM_SIZE (0x30..0x38) in one trapped read.
    uint8_t regs[SPYRE_REG_MEM_SIZE + 8 - SPYRE_REG_FUNC_ID];
    if (ReadAt(info.sysfs_dir / "resource0", regs, sizeof regs, SPYRE_REG_FUNC_ID) == 0) {
        uint32_t func_id;
        std::memcpy(&func_id, regs, 4);
        std::memcpy(&st.memory_bytes, regs + (SPYRE_REG_MEM_SIZE - SPYRE_REG_FUNC_ID), 8);
        std::memcpy(&st.daemon_pid, regs + (SPYRE_REG_DAEMON_PID - SPYRE_REG_FUNC_ID), 4);
        st.card = uint16_t((func_id & SPYRE_FUNC_ID_CARD_MASK) >> SPYRE_FUNC_ID_CARD_SHIFT);
        st.function = uint16_t(func_id & SPYRE_FUNC_ID_INDEX_MASK);
    }
    uint8_t byte;
    const int err = ReadAt(info.sysfs_dir / "resource2", &byte, 1, 0);
    if (err == 0)
        st.held = false;
    else if (err == EBUSY)
        st.held = true;
    return st;
}

}  // namespace

FunctionStatus ReadFunctionStatus(const FunctionInfo& info) {
    return CallWithinHeartbeatBound<FunctionStatus>([info] { return ReadStatusHere(info); },
                                                    "the sysfs files of " + info.pci_address,
                                                    info.sysfs_dir.parent_path().string());
}

}  // namespace spyre::driver
