// SPDX-License-Identifier: Apache-2.0
#include "device_checks.hpp"

#include <cstring>
#include <limits>

namespace spyre::driver::checks {

namespace {

constexpr uint64_t kPage = 4096;

bool IsPowerOfTwo(uint32_t v) { return v && !(v & (v - 1)); }

[[noreturn]] void Protocol(const std::string& what, ErrorContext ctx, const char* reg = nullptr,
                           std::optional<uint64_t> offset = {}) {
    if (reg) ctx.reg = reg;
    if (offset) ctx.offset = offset;
    throw Error(ErrorKind::ProtocolError, what, std::move(ctx));
}

// [begin, begin + size) inside [0, limit), without wrapping.
bool Inside(uint64_t begin, uint64_t size, uint64_t limit) { return begin <= limit && size <= limit - begin; }

// "dir/object": what the mock transport names, a path that cannot leave
// SPYRE_MOCK_SHM_DIR (no leading '/', no "..", no third component).
bool IsObjectName(const std::string& name) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.find('/', slash + 1) != std::string::npos) return false;
    for (const std::string& part : {name.substr(0, slash), name.substr(slash + 1)})
        if (part.empty() || part == "." || part == "..") return false;
    return true;
}

bool Overlap(uint64_t a, uint64_t a_size, uint64_t b, uint64_t b_size) { return a < b + b_size && b < a + a_size; }

}  // namespace

void CheckContractVersion(uint32_t version, const ErrorContext& ctx) {
    if (SPYRE_VERSION_GET_MAJOR(version) != SPYRE_VERSION_MAJOR)
        Protocol("device speaks contract " + std::to_string(SPYRE_VERSION_GET_MAJOR(version)) + "." +
                     std::to_string(SPYRE_VERSION_GET_MINOR(version)) + ", this driver " +
                     std::to_string(SPYRE_VERSION_MAJOR) + ".x (a major version changes the formats)",
                 ctx, "VERSION", SPYRE_REG_VERSION);
}

void CheckRegionInfo(const spyre_region_info& ri, uint32_t index, const ErrorContext& ctx) {
    if (ri.index != index)
        Protocol("GET_REGION_INFO for region " + std::to_string(index) + " answered for region " + std::to_string(ri.index),
                 ctx);
}

MappableRegion CheckMockRegion(const spyre_region_info& ri, const spyre_mock_region_shm& shm, uint32_t index,
                               const ErrorContext& ctx) {
    CheckRegionInfo(ri, index, ctx);
    const std::string region = "region " + std::to_string(index);
    if (shm.index != index)
        Protocol("the mock's shared memory for " + region + " was answered for region " + std::to_string(shm.index), ctx);
    if (!(ri.flags & SPYRE_REGION_INFO_FLAG_MMAP) || shm.shm_name[0] == '\0' || shm.mmap_size == 0)
        throw Error(ErrorKind::Unsupported, region + " cannot be mapped", ctx);
    const void* nul = std::memchr(shm.shm_name, '\0', sizeof shm.shm_name);
    if (!nul) Protocol(region + ": shared-memory name is not NUL-terminated", ctx);
    const std::string name(shm.shm_name);
    if (!IsObjectName(name))
        Protocol(region + ": shared-memory name \"" + name + "\" is not of the form DIR/OBJECT", ctx);
    if (shm.shm_offset % kPage)
        Protocol(region + ": shm_offset " + std::to_string(shm.shm_offset) + " is not page-aligned", ctx);
    if (shm.mmap_size > ri.size)
        Protocol(region + ": mmap_size " + std::to_string(shm.mmap_size) + " exceeds the region size " +
                     std::to_string(ri.size),
                 ctx);
    if (!Inside(shm.shm_offset, shm.mmap_size, uint64_t(std::numeric_limits<int64_t>::max())))
        Protocol(region + ": shm_offset + mmap_size does not fit a file offset", ctx);
    return MappableRegion{name, shm.shm_offset, shm.mmap_size};
}

bool DoorbellOffsetOk(uint32_t db_offset, uint64_t bar4_size) noexcept {
    return db_offset % kPage == 0 && Inside(db_offset, sizeof(spyre_doorbell_page), bar4_size);
}

void CheckDoorbellOffset(uint32_t db_offset, uint64_t bar4_size, const ErrorContext& ctx) {
    if (!DoorbellOffsetOk(db_offset, bar4_size))
        Protocol("doorbell page offset " + std::to_string(db_offset) + " is not a page inside the " +
                     std::to_string(bar4_size) + "-byte BAR4 mapping",
                 ctx, "DB_OFFSET", SPYRE_REG_DB_OFFSET);
}

void CheckRingGeometry(const RingRegisters& r, uint64_t bar4_size, const ErrorContext& ctx) {
    if (r.cb_size != sizeof(spyre_cb) || r.cqe_size != sizeof(spyre_cqe))
        Protocol("device publishes CB/CQE sizes " + std::to_string(r.cb_size) + "/" + std::to_string(r.cqe_size) +
                     ", driver expects 64/32",
                 ctx, "CB_SIZE", SPYRE_REG_CB_SIZE);
    if (!IsPowerOfTwo(r.sq_entries) || !IsPowerOfTwo(r.cq_entries) || r.cq_entries < r.sq_entries)
        Protocol("ring sizes must be powers of two with CQ >= SQ (SQ " + std::to_string(r.sq_entries) + ", CQ " +
                     std::to_string(r.cq_entries) + ")",
                 ctx, "SQ_ENTRIES", SPYRE_REG_SQ_ENTRIES);
    CheckDoorbellOffset(r.db_offset, bar4_size, ctx);
    const uint64_t sq_bytes = uint64_t(r.sq_entries) * r.cb_size, cq_bytes = uint64_t(r.cq_entries) * r.cqe_size;
    if (r.sq_offset % 64 || !Inside(r.sq_offset, sq_bytes, bar4_size))
        Protocol("SQ at " + std::to_string(r.sq_offset) + " (" + std::to_string(sq_bytes) +
                     " bytes) is misaligned or outside BAR4",
                 ctx, "SQ_OFFSET", SPYRE_REG_SQ_OFFSET);
    if (r.cq_offset % 32 || !Inside(r.cq_offset, cq_bytes, bar4_size))
        Protocol("CQ at " + std::to_string(r.cq_offset) + " (" + std::to_string(cq_bytes) +
                     " bytes) is misaligned or outside BAR4",
                 ctx, "CQ_OFFSET", SPYRE_REG_CQ_OFFSET);
    const uint64_t db_bytes = sizeof(spyre_doorbell_page);
    if (Overlap(r.sq_offset, sq_bytes, r.cq_offset, cq_bytes) || Overlap(r.sq_offset, sq_bytes, r.db_offset, db_bytes) ||
        Overlap(r.cq_offset, cq_bytes, r.db_offset, db_bytes))
        Protocol("ring geometry overlaps: doorbell page, SQ and CQ must be disjoint", ctx);
}

void CheckTaskGeometry(const TaskRegisters& t, uint64_t bar4_size, const ErrorContext& ctx) {
    const QueueRegisters& r = t.rings;
    if (r.cb_size != sizeof(spyre_cb) || r.cqe_size != sizeof(spyre_cqe))
        Protocol("device publishes task queue CB/CQE sizes " + std::to_string(r.cb_size) + "/" +
                     std::to_string(r.cqe_size) + ", driver expects 64/32",
                 ctx, "TQ_DESC_SIZE", SPYRE_REG_TQ_DESC_SIZE);
    if (t.queues > SPYRE_TQ_MAX_QUEUES)
        Protocol("device publishes " + std::to_string(t.queues) + " task queues, the contract allows " +
                     std::to_string(SPYRE_TQ_MAX_QUEUES),
                 ctx, "TQ_COUNT", SPYRE_REG_TQ_COUNT);
    if (!IsPowerOfTwo(r.sq_entries) || !IsPowerOfTwo(r.cq_entries))
        Protocol("task ring sizes must be powers of two (SQ " + std::to_string(r.sq_entries) + ", CQ " +
                     std::to_string(r.cq_entries) + ")",
                 ctx, "TQ_SQ_ENTRIES", SPYRE_REG_TQ_SQ_ENTRIES);
    if (r.db_offset % kPage || !Inside(r.db_offset, sizeof(spyre_task_doorbell), bar4_size))
        Protocol("task doorbell page offset " + std::to_string(r.db_offset) + " is not a page inside the " +
                     std::to_string(bar4_size) + "-byte BAR4 mapping",
                 ctx, "TQ_DB_OFFSET", SPYRE_REG_TQ_DB_OFFSET);
    if (t.queues == 0) return;
    const uint64_t sq_bytes = uint64_t(r.sq_entries) * r.cb_size, cq_bytes = uint64_t(r.cq_entries) * r.cqe_size;
    const uint64_t blocks = uint64_t(t.queues - 1) * t.stride + r.cq_offset + cq_bytes;
    if (r.sq_offset % 64 || t.stride % 64 || r.cq_offset % 64 || r.cq_offset < sq_bytes ||
        uint64_t(r.cq_offset) + cq_bytes > t.stride || !Inside(r.sq_offset, blocks, bar4_size) ||
        Overlap(r.sq_offset, blocks, r.db_offset, sizeof(spyre_task_doorbell)))
        Protocol("task queue blocks at " + std::to_string(r.sq_offset) + " (stride " + std::to_string(t.stride) +
                     ", CQ at +" + std::to_string(r.cq_offset) +
                     ") are misaligned, overlap each other or the task doorbell page, or leave BAR4",
                 ctx, "TQ_OFFSET", SPYRE_REG_TQ_OFFSET);
}

void CheckCompletion(const spyre_cqe& cqe, uint32_t cq_pos, uint32_t oldest_sq_pos, const ErrorContext& ctx) {
    if (cqe.sq_pos != oldest_sq_pos)
        Protocol("completion " + std::to_string(cq_pos) + " is for ring position " + std::to_string(cqe.sq_pos) +
                     ", but the oldest CB in flight starts at " + std::to_string(oldest_sq_pos),
                 ctx);
}

}  // namespace spyre::driver::checks
