// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/register_dump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "run_while.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"

namespace spyre::driver {

namespace {

std::vector<uint8_t> ReadFileRange(const std::filesystem::path& file, uint64_t offset, size_t length,
                                   const std::string& device) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw SystemError("cannot open " + file.string(), ErrorContext{.device = device});
    std::vector<uint8_t> out(length);
    size_t done = 0;
    while (done < length) {
        ssize_t n = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            ::close(fd);
            errno = e;
            throw SystemError("cannot read " + file.string(), ErrorContext{.device = device, .offset = offset + done});
        }
        done += static_cast<size_t>(n);
    }
    ::close(fd);
    return out;
}

}  // namespace

// Trapped reads: a stopped daemon never answers them, so the dump waits no
// longer than the heartbeat's bound (run_while.hpp), then is DeviceLost.
std::string DumpRegisters(const FunctionInfo& function) {
    return CallWithinHeartbeatBound<std::string>(
        [function] {
            auto regs = ReadFileRange(function.sysfs_dir / "resource0", 0, SPYRE_REG_FILE_SIZE, function.pci_address);
            uint32_t db_offset;
            std::memcpy(&db_offset, regs.data() + SPYRE_REG_DB_OFFSET, sizeof db_offset);
            auto db = ReadFileRange(function.sysfs_dir / "resource4", db_offset, sizeof(spyre_doorbell_page),
                                    function.pci_address);
            return uapi::FormatRegisterDump(regs, db);
        },
        "the registers of " + function.pci_address, function.sysfs_dir.parent_path().string());
}

}  // namespace spyre::driver
