// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what the driver accepts from a hostile device
// (driver/device_checks.hpp): GET_REGION_INFO and the mock transport's
// shared-memory answers, ring geometry
// registers against the BAR4 bytes actually mapped, and completion records
// reaped the way CommandRing::Reap reaps them. Only spyre::Error may leave a
// check, and whatever a check accepts must keep its promises, verified here
// independently with 128-bit arithmetic: every window the driver will touch
// lies inside what was mapped, and the reaper only ever frees the slots of
// CBs it submitted.
//
// Input: byte 0 picks the region index; then a spyre_region_info (32 bytes)
// and a spyre_mock_region_shm (88 bytes),
// a u64 BAR4 mapping size, the seven geometry registers (u32 each), a u32 CQ
// head and in-flight count, and completion records (32 bytes each).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "device_checks.hpp"

using namespace spyre;
using namespace spyre::driver;

namespace {

using u128 = unsigned __int128;

struct Reader {
    const uint8_t* p;
    size_t n;
    template <typename T>
    T Take() {
        T v{};
        const size_t k = n < sizeof v ? n : sizeof v;
        std::memcpy(&v, p, k);
        p += k, n -= k;
        return v;
    }
};

void Require(bool ok) {
    if (!ok) __builtin_trap();
}

void FuzzRegionInfo(const spyre_region_info& ri, const spyre_mock_region_shm& shm, uint32_t index) {
    try {
        const checks::MappableRegion r = checks::CheckMockRegion(ri, shm, index, {});
        Require(ri.index == index && shm.index == index && (ri.flags & SPYRE_REGION_INFO_FLAG_MMAP));
        // DIR/OBJECT: one '/', inside the name, no "." or ".." component (it stays in /dev/shm).
        const size_t slash = r.shm_name.find('/');
        Require(r.shm_name.size() >= 3 && r.shm_name.size() < SPYRE_MOCK_SHM_NAME_MAX);
        Require(slash != std::string::npos && slash > 0 && slash + 1 < r.shm_name.size());
        Require(r.shm_name.find('/', slash + 1) == std::string::npos && r.shm_name.find('\0') == std::string::npos);
        for (const std::string& part : {r.shm_name.substr(0, slash), r.shm_name.substr(slash + 1)})
            Require(part != "." && part != "..");
        Require(r.mmap_size > 0 && r.mmap_size <= ri.size && r.shm_offset % 4096 == 0);
        Require(u128(r.shm_offset) + r.mmap_size <= u128(INT64_MAX));
    } catch (const Error& e) {
        Require(e.kind() == ErrorKind::ProtocolError || e.kind() == ErrorKind::Unsupported);
    }
}

// Returns true (and checks the promises) if the geometry was accepted.
bool FuzzGeometry(const checks::RingRegisters& g, uint64_t bar4) {
    bool db_ok = checks::DoorbellOffsetOk(g.db_offset, bar4);
    Require(db_ok == (g.db_offset % 4096 == 0 && u128(g.db_offset) + 4096 <= bar4));
    try {
        checks::CheckRingGeometry(g, bar4, {});
    } catch (const Error& e) {
        Require(e.kind() == ErrorKind::ProtocolError);
        return false;
    }
    Require(db_ok && g.cb_size == 64 && g.cqe_size == 32);
    Require(g.sq_entries && !(g.sq_entries & (g.sq_entries - 1)) && g.cq_entries >= g.sq_entries &&
            !(g.cq_entries & (g.cq_entries - 1)));
    const u128 sq_end = u128(g.sq_offset) + u128(g.sq_entries) * 64, cq_end = u128(g.cq_offset) + u128(g.cq_entries) * 32;
    Require(sq_end <= bar4 && cq_end <= bar4 && g.sq_offset % 64 == 0 && g.cq_offset % 32 == 0);
    const u128 db_end = u128(g.db_offset) + 4096;
    auto disjoint = [](u128 a, u128 a_end, u128 b, u128 b_end) { return a_end <= b || b_end <= a; };
    Require(disjoint(g.sq_offset, sq_end, g.cq_offset, cq_end) && disjoint(g.sq_offset, sq_end, g.db_offset, db_end) &&
            disjoint(g.cq_offset, cq_end, g.db_offset, db_end));
    return true;
}

// CommandRing::Reap's loop over hostile completion records: `in_flight` CBs
// of one slot each were submitted from sq position `sq_head`. A record is
// taken when it shows its lap's phase, and never more than are in flight.
void FuzzReap(Reader& in, uint32_t cq_entries) {
    uint32_t cq_head = in.Take<uint32_t>();
    const uint32_t submitted = in.Take<uint16_t>() % (cq_entries + 1);
    uint32_t sq_head = in.Take<uint32_t>();
    std::vector<spyre_cqe> cq(cq_entries > 256 ? 256 : cq_entries);
    for (auto& e : cq) e = in.Take<spyre_cqe>();
    const uint32_t entries = uint32_t(cq.size());
    uint32_t reaped = 0;
    try {
        while (reaped < submitted && cq[spyre_ring_slot(cq_head, entries)].phase == spyre_cqe_phase(cq_head, entries)) {
            const spyre_cqe& e = cq[spyre_ring_slot(cq_head, entries)];
            checks::CheckCompletion(e, cq_head, sq_head, {});
            Require(e.sq_pos == sq_head);
            ++sq_head, ++cq_head, ++reaped;
        }
    } catch (const Error& e) {
        Require(e.kind() == ErrorKind::ProtocolError);
    }
    Require(reaped <= submitted);  // never frees slots of CBs it did not submit
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in{data, size};
    const uint32_t index = in.Take<uint8_t>() % 12;
    const auto ri = in.Take<spyre_region_info>();
    FuzzRegionInfo(ri, in.Take<spyre_mock_region_shm>(), index);
    const uint64_t bar4 = in.Take<uint64_t>();
    checks::RingRegisters g;
    g.db_offset = in.Take<uint32_t>();
    g.sq_offset = in.Take<uint32_t>();
    g.cq_offset = in.Take<uint32_t>();
    g.sq_entries = in.Take<uint32_t>();
    g.cq_entries = in.Take<uint32_t>();
    g.cb_size = in.Take<uint32_t>();
    g.cqe_size = in.Take<uint32_t>();
    const bool accepted = FuzzGeometry(g, bar4);
    FuzzReap(in, accepted ? g.cq_entries : 64);
    return 0;
}
