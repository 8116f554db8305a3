// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the register-dump formatter with arbitrary register
// bytes: spyre::uapi::FormatRegisterDump on snapshots of any length (short
// snapshots read as zero), and the driver's DumpRegisters
// (driver/register_dump.cpp) on resource0/resource4 files holding the same
// bytes, so a hostile DB_OFFSET register steers its second read. Promises:
// one line per register and doorbell word plus the two headings, every
// byte printable ASCII or a newline; DumpRegisters either returns that same
// text or throws spyre::Error.
//
// Input: u16 split point, then the bytes: [0, split) is BAR0, the rest the
// doorbell page.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "spyre/driver/register_dump.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"

namespace {

void Require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "broken promise: %s\n", what);
        __builtin_trap();
    }
}

void CheckText(const std::string& text) {
    size_t lines = 0;
    for (char c : text) {
        if (c == '\n') ++lines;
        else Require(c >= 0x20 && c < 0x7f, "non-printable byte in the dump");
    }
    Require(!text.empty() && text.back() == '\n', "dump does not end with a newline");
    Require(lines == 2 + std::size(spyre::uapi::kRegisters) + std::size(spyre::uapi::kDoorbellWords),
            "one line per register and doorbell word");
}

// One directory per input, removed when it is done: the fuzzer ends a run
// with _Exit, which skipped the atexit removal of a shared one (a directory
// left in /dev/shm by every run).
class InputDir {
public:
    InputDir() {
        char tmpl[] = "/dev/shm/spyre-regdump-fuzz-XXXXXX";  // tmpfs: two small files per input
        if (!::mkdtemp(tmpl)) std::abort();
        path_ = tmpl;
    }
    ~InputDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    InputDir(const InputDir&) = delete;
    InputDir& operator=(const InputDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

void Write(const std::filesystem::path& p, std::span<const uint8_t> bytes, uint64_t at = 0) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.seekp(std::streamoff(at));
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    const size_t split = std::min<size_t>(size - 2, size_t(data[0] | data[1] << 8));
    const std::span<const uint8_t> bar0(data + 2, split), doorbell(data + 2 + split, size - 2 - split);
    const std::string text = spyre::uapi::FormatRegisterDump(bar0, doorbell);
    CheckText(text);

    // The driver's path: full-size register file from the bytes (zero-padded),
    // the doorbell bytes where DB_OFFSET points if that is small, else nowhere.
    std::vector<uint8_t> regs(SPYRE_REG_FILE_SIZE, 0);
    std::memcpy(regs.data(), bar0.data(), std::min(bar0.size(), regs.size()));
    uint32_t db_offset;
    std::memcpy(&db_offset, regs.data() + SPYRE_REG_DB_OFFSET, sizeof db_offset);
    std::vector<uint8_t> page(sizeof(spyre_doorbell_page), 0);
    std::memcpy(page.data(), doorbell.data(), std::min(doorbell.size(), page.size()));
    const InputDir dir;
    Write(dir.path() / "resource0", regs);
    const bool reachable = db_offset <= (1u << 20);
    Write(dir.path() / "resource4", page, reachable ? db_offset : 0);
    spyre::driver::FunctionInfo fn;
    fn.pci_address = "fuzz";
    fn.sysfs_dir = dir.path();
    try {
        const std::string dumped = spyre::driver::DumpRegisters(fn);
        CheckText(dumped);
        Require(reachable, "DumpRegisters read a doorbell page that is not there");
        Require(dumped == spyre::uapi::FormatRegisterDump(regs, page), "DumpRegisters differs from the formatter");
    } catch (const spyre::Error&) {
        Require(!reachable, "DumpRegisters failed on readable files");
    }
    return 0;
}
