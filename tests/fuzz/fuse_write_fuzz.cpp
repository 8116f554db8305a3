// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what the daemon parses from file writes: attribute
// numbers (reset, sriov_numvfs) through ParseAttrNumber and Card::SetNumVfs,
// and trapped region writes and reads (registers, doorbell page and rings,
// BAR2, device memory, config space) through Function::WriteRegion and
// ReadRegion, with device-node opens and closes (owner hand-overs) between.
// One small card lives for the whole run; its servers are not started, so
// every input is handled deterministically on this thread.
//
// Input: a list of operations, each one byte of opcode and its operands:
//   0  attribute text: 1 length byte, then that many bytes -> sriov_numvfs
//   1  region write: function, region, 4-byte offset, 1 length byte, data
//   2  region read: function, region, 4-byte offset, 2 length bytes
//   3  open (hold) or close the device node of a function
//   4  reset of a function; register dump
//
// Promises: no crash or sanitizer report; every call returns its byte count
// or a -errno; a region read never returns more than was asked.
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "frontend/attr_number.hpp"
#include "pci/card.hpp"
#include "pci/shm_object.hpp"
#include "log.hpp"
#include "spyre/uapi/spyre_ioctl.h"

using namespace spyre::mockdev;

namespace {

struct Reader {
    const uint8_t* p;
    size_t n;
    bool Empty() const { return n == 0; }
    uint8_t Byte() {
        if (n == 0) return 0;
        --n;
        return *p++;
    }
    uint32_t Word() {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) v |= uint32_t(Byte()) << (8 * i);
        return v;
    }
    std::vector<uint8_t> Bytes(size_t len) {
        len = std::min(len, n);
        std::vector<uint8_t> out(p, p + len);
        p += len;
        n -= len;
        return out;
    }
};

Card& TheCard() {
    static Card* card = [] {
        SetLogLevel(LogLevel::Error);
        const std::string prefix = "spyre-fuzz-" + std::to_string(::getpid());
        static ShmDirectory dir(prefix);  // destroyed after the card the atexit below deletes
        auto* c = new Card(CardParams{0, 64ull << 20, prefix, std::chrono::microseconds(0), 1, 100});
        std::atexit([] { delete &TheCard(); });  // unlinks the objects
        return c;
    }();
    return *card;
}

constexpr unsigned kRegions[] = {SPYRE_REGION_BAR0, SPYRE_REGION_BAR2, SPYRE_REGION_BAR4, SPYRE_REGION_CONFIG,
                                 SPYRE_REGION_DEVMEM, 1, 3, 5, 6, 8};

void Check(bool ok) {
    if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Card& card = TheCard();
    Reader in{data, size};
    while (!in.Empty()) {
        const uint8_t op = in.Byte() % 5;
        switch (op) {
        case 0: {
            const std::vector<uint8_t> text = in.Bytes(in.Byte());
            unsigned long v = 0;
            const int rc = ParseAttrNumber(reinterpret_cast<const char*>(text.data()), text.size(), &v);
            Check(rc == 0 || rc == -EINVAL || rc == -ERANGE);
            if (rc == 0) {
                const int set = card.SetNumVfs(v > UINT16_MAX ? UINT16_MAX : unsigned(v));
                Check(set <= 0);
            }
            break;
        }
        case 1:
        case 2: {
            auto fn = card.FindFunction(in.Byte() % 4);
            const unsigned region = kRegions[in.Byte() % std::size(kRegions)];
            const uint64_t offset = in.Word();
            if (op == 1) {
                const std::vector<uint8_t> bytes = in.Bytes(in.Byte());
                if (!fn) break;
                const ssize_t n = fn->WriteRegion(region, offset, bytes.data(), bytes.size());
                Check(n < 0 ? n >= -4095 : size_t(n) == bytes.size());
            } else {
                const size_t len = size_t(in.Byte()) | size_t(in.Byte()) << 8;
                std::vector<uint8_t> buf(len);
                if (!fn) break;
                const ssize_t n = fn->ReadRegion(region, offset, buf.data(), len);
                Check(n < 0 ? n >= -4095 : size_t(n) <= len);
            }
            break;
        }
        case 3: {
            auto fn = card.FindFunction(in.Byte() % 4);
            if (!fn) break;
            if (fn->holder() == 0) {
                const int rc = fn->Open({1, 1});  // pid 1, started at tick 1
                Check(rc == 0 || rc == -EBUSY || rc == -ENODEV);
            } else {
                fn->Close();
            }
            break;
        }
        case 4: {
            auto fn = card.FindFunction(in.Byte() % 4);
            if (!fn) break;
            const int rc = fn->Reset();
            Check(rc == 0 || rc == -ENODEV);
            Check(!fn->RegisterDump().empty());
            break;
        }
        }
    }
    return 0;
}
