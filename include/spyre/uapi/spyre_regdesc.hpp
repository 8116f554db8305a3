// SPDX-License-Identifier: Apache-2.0
//
// spyre hardware contract: register descriptions and the register dump text.
//
// One table names every BAR0 register and doorbell-page word; one function
// turns a snapshot of them into text. spyre-mockdev serves that text as the
// `regs` file and spyre-regdump prints it, so both always agree.
#ifndef SPYRE_UAPI_SPYRE_REGDESC_HPP
#define SPYRE_UAPI_SPYRE_REGDESC_HPP

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "spyre_cb.h"
#include "spyre_errors.h"
#include "spyre_regs.h"

namespace spyre::uapi {

enum class RegDecode : uint8_t { None, Magic, Version, PciId, FuncId, Caps, Status, Control, ErrCode, Opcode, DevState, RegionResult };

struct RegDesc {
    const char* name;
    uint32_t offset;
    uint8_t width;  // bytes: 4 or 8
    const char* access;  // RO, RW, WO, W1C
    RegDecode decode;
    const char* description;
};

inline constexpr RegDesc kRegisters[] = {
    {"MAGIC", SPYRE_REG_MAGIC, 4, "RO", RegDecode::Magic, "contract magic"},
    {"VERSION", SPYRE_REG_VERSION, 4, "RO", RegDecode::Version, "contract version"},
    {"PCI_ID", SPYRE_REG_PCI_ID, 4, "RO", RegDecode::PciId, "vendor and device id"},
    {"FUNC_ID", SPYRE_REG_FUNC_ID, 4, "RO", RegDecode::FuncId, "card and function"},
    {"CAPS", SPYRE_REG_CAPS, 4, "RO", RegDecode::Caps, "opcodes executed"},
    {"STATUS", SPYRE_REG_STATUS, 4, "RO", RegDecode::Status, "device status"},
    {"CONTROL", SPYRE_REG_CONTROL, 4, "RW", RegDecode::Control, "device control"},
    {"RESET", SPYRE_REG_RESET, 4, "WO", RegDecode::None, "write the reset key"},
    {"NUM_CORES", SPYRE_REG_NUM_CORES, 4, "RO", RegDecode::None, "compute cores"},
    {"SCRATCH", SPYRE_REG_SCRATCH, 4, "RW", RegDecode::None, "scratch"},
    {"DAEMON_PID", SPYRE_REG_DAEMON_PID, 4, "RO", RegDecode::None, "serving process"},
    {"WATCHDOG_MS", SPYRE_REG_WATCHDOG_MS, 4, "RO", RegDecode::None, "CB run-time bound"},
    {"MEM_SIZE", SPYRE_REG_MEM_SIZE, 8, "RO", RegDecode::None, "device memory bytes"},
    {"MEM_BASE", SPYRE_REG_MEM_BASE, 8, "RO", RegDecode::None, "card address of memory"},
    {"DB_OFFSET", SPYRE_REG_DB_OFFSET, 4, "RO", RegDecode::None, "doorbell page in BAR4"},
    {"SQ_OFFSET", SPYRE_REG_SQ_OFFSET, 4, "RO", RegDecode::None, "submission ring in BAR4"},
    {"SQ_ENTRIES", SPYRE_REG_SQ_ENTRIES, 4, "RO", RegDecode::None, "submission slots"},
    {"CB_SIZE", SPYRE_REG_CB_SIZE, 4, "RO", RegDecode::None, "bytes per slot"},
    {"CQ_OFFSET", SPYRE_REG_CQ_OFFSET, 4, "RO", RegDecode::None, "completion ring in BAR4"},
    {"CQ_ENTRIES", SPYRE_REG_CQ_ENTRIES, 4, "RO", RegDecode::None, "completion slots"},
    {"CQE_SIZE", SPYRE_REG_CQE_SIZE, 4, "RO", RegDecode::None, "bytes per completion"},
    {"SQ_HEAD", SPYRE_REG_SQ_HEAD, 4, "RO", RegDecode::None, "CBs consumed"},
    {"SQ_TAIL", SPYRE_REG_SQ_TAIL, 4, "RO", RegDecode::None, "last doorbell seen"},
    {"CQ_HEAD", SPYRE_REG_CQ_HEAD, 4, "RO", RegDecode::None, "completions reaped"},
    {"CQ_TAIL", SPYRE_REG_CQ_TAIL, 4, "RO", RegDecode::None, "completions posted"},
    {"ERR_CODE", SPYRE_REG_ERR_CODE, 4, "RO", RegDecode::ErrCode, "latched error"},
    {"ERR_OPCODE", SPYRE_REG_ERR_OPCODE, 4, "RO", RegDecode::Opcode, "faulting opcode"},
    {"ERR_SQ_POS", SPYRE_REG_ERR_SQ_POS, 4, "RO", RegDecode::None, "faulting ring position"},
    {"ERR_COUNT", SPYRE_REG_ERR_COUNT, 4, "RO", RegDecode::None, "faults since reset"},
    {"ERR_ADDR", SPYRE_REG_ERR_ADDR, 8, "RO", RegDecode::None, "faulting address"},
    {"ERR_USER_DATA", SPYRE_REG_ERR_USER_DATA, 8, "RO", RegDecode::None, "faulting CB user_data"},
    {"ERR_CLEAR", SPYRE_REG_ERR_CLEAR, 4, "W1C", RegDecode::None, "write 1 to clear"},
    {"RING_STREAMS_FAILED", SPYRE_REG_RING_STREAMS_FAILED, 8, "RO", RegDecode::None, "bit n: ring stream n failed"},
    {"CNT_CB_DONE", SPYRE_REG_CNT_CB_DONE, 8, "RO", RegDecode::None, "CBs completed"},
    {"CNT_CB_ERRORS", SPYRE_REG_CNT_CB_ERRORS, 8, "RO", RegDecode::None, "CBs failed"},
    {"CNT_NOPS", SPYRE_REG_CNT_NOPS, 8, "RO", RegDecode::None, "NOPs"},
    {"CNT_LAUNCHES", SPYRE_REG_CNT_LAUNCHES, 8, "RO", RegDecode::None, "launches"},
    {"CNT_COPIES", SPYRE_REG_CNT_COPIES, 8, "RO", RegDecode::None, "copies"},
    {"CNT_COPY_BYTES", SPYRE_REG_CNT_COPY_BYTES, 8, "RO", RegDecode::None, "bytes copied"},
    {"CNT_DOORBELLS", SPYRE_REG_CNT_DOORBELLS, 8, "RO", RegDecode::None, "batches picked up"},
    {"CNT_WAKEUPS", SPYRE_REG_CNT_WAKEUPS, 8, "RO", RegDecode::None, "wakeups from sleep"},
    {"CNT_IRQS", SPYRE_REG_CNT_IRQS, 8, "RO", RegDecode::None, "interrupts raised"},
    {"CNT_BUSY_NS", SPYRE_REG_CNT_BUSY_NS, 8, "RO", RegDecode::None, "busy nanoseconds"},
    {"CNT_RESETS", SPYRE_REG_CNT_RESETS, 8, "RO", RegDecode::None, "function resets"},
    {"CNT_WATCHDOG", SPYRE_REG_CNT_WATCHDOG, 8, "RO", RegDecode::None, "CBs and tasks stopped by the watchdog"},
    {"CNT_DMA_TO_DEV_BYTES", SPYRE_REG_CNT_DMA_TO_DEV_BYTES, 8, "RO", RegDecode::None, "DMA bytes host to device"},
    {"CNT_DMA_FROM_DEV_BYTES", SPYRE_REG_CNT_DMA_FROM_DEV_BYTES, 8, "RO", RegDecode::None, "DMA bytes device to host"},
    {"CNT_DMA_BUSY_NS", SPYRE_REG_CNT_DMA_BUSY_NS, 8, "RO", RegDecode::None, "DMA busy nanoseconds"},
    {"REGION_CMD", SPYRE_REG_REGION_CMD, 4, "WO", RegDecode::None, "region command"},
    {"REGION_ARG", SPYRE_REG_REGION_ARG, 4, "RW", RegDecode::None, "MiB to ALLOC, index to FREE"},
    {"REGION_RESULT", SPYRE_REG_REGION_RESULT, 4, "RO", RegDecode::RegionResult, "last command's result"},
    {"REGION_INDEX", SPYRE_REG_REGION_INDEX, 4, "RO", RegDecode::None, "entry granted by ALLOC"},
    {"REGION_MAX", SPYRE_REG_REGION_MAX, 4, "RO", RegDecode::None, "table entries"},
    {"REGION_COUNT", SPYRE_REG_REGION_COUNT, 4, "RO", RegDecode::None, "entries in use"},
    {"REGION_ALIGN", SPYRE_REG_REGION_ALIGN, 4, "RO", RegDecode::None, "region alignment"},
    {"REGION_LARGEST", SPYRE_REG_REGION_LARGEST, 8, "RO", RegDecode::None, "largest grantable"},
    {"REGION_GRANTABLE", SPYRE_REG_REGION_GRANTABLE, 8, "RO", RegDecode::None, "memory grantable"},
#define SPYRE_REGION_ROWS(i) \
    {"REGION" #i "_BASE", SPYRE_REG_REGION_BASE(i), 8, "RO", RegDecode::None, "region base"}, \
    {"REGION" #i "_SIZE", SPYRE_REG_REGION_SIZE(i), 8, "RO", RegDecode::None, "region size (0 = unused)"}
    SPYRE_REGION_ROWS(0), SPYRE_REGION_ROWS(1), SPYRE_REGION_ROWS(2), SPYRE_REGION_ROWS(3),
    SPYRE_REGION_ROWS(4), SPYRE_REGION_ROWS(5), SPYRE_REGION_ROWS(6), SPYRE_REGION_ROWS(7),
    SPYRE_REGION_ROWS(8), SPYRE_REGION_ROWS(9), SPYRE_REGION_ROWS(10), SPYRE_REGION_ROWS(11),
    SPYRE_REGION_ROWS(12), SPYRE_REGION_ROWS(13), SPYRE_REGION_ROWS(14), SPYRE_REGION_ROWS(15),
#undef SPYRE_REGION_ROWS
    {"TQ_COUNT", SPYRE_REG_TQ_COUNT, 4, "RO", RegDecode::None, "task queues (core groups)"},
    {"TQ_DB_OFFSET", SPYRE_REG_TQ_DB_OFFSET, 4, "RO", RegDecode::None, "task doorbell page in BAR4"},
    {"TQ_OFFSET", SPYRE_REG_TQ_OFFSET, 4, "RO", RegDecode::None, "queue 0's rings in BAR4"},
    {"TQ_STRIDE", SPYRE_REG_TQ_STRIDE, 4, "RO", RegDecode::None, "bytes between queues"},
    {"TQ_SQ_ENTRIES", SPYRE_REG_TQ_SQ_ENTRIES, 4, "RO", RegDecode::None, "descriptors per queue"},
    {"TQ_DESC_SIZE", SPYRE_REG_TQ_DESC_SIZE, 4, "RO", RegDecode::None, "bytes per descriptor"},
    {"TQ_CQ_OFFSET", SPYRE_REG_TQ_CQ_OFFSET, 4, "RO", RegDecode::None, "task CQ inside a queue"},
    {"TQ_CQ_ENTRIES", SPYRE_REG_TQ_CQ_ENTRIES, 4, "RO", RegDecode::None, "completions per queue"},
    {"TQ_CQE_SIZE", SPYRE_REG_TQ_CQE_SIZE, 4, "RO", RegDecode::None, "bytes per task completion"},
    {"TQ_HALTED", SPYRE_REG_TQ_HALTED, 4, "RO", RegDecode::None, "halted queues (bit q)"},
#define SPYRE_TQ_ROW(q) {"TQ" #q "_CORES", SPYRE_REG_TQ_GROUP_CORES(q), 4, "RO", RegDecode::None, "cores of group " #q}
    SPYRE_TQ_ROW(0), SPYRE_TQ_ROW(1), SPYRE_TQ_ROW(2), SPYRE_TQ_ROW(3),
    SPYRE_TQ_ROW(4), SPYRE_TQ_ROW(5), SPYRE_TQ_ROW(6), SPYRE_TQ_ROW(7),
#undef SPYRE_TQ_ROW
    {"CNT_TASKS_DONE", SPYRE_REG_CNT_TASKS_DONE, 8, "RO", RegDecode::None, "tasks completed"},
    {"CNT_TASK_ERRORS", SPYRE_REG_CNT_TASK_ERRORS, 8, "RO", RegDecode::None, "tasks failed"},
    {"CNT_TASK_DOORBELLS", SPYRE_REG_CNT_TASK_DOORBELLS, 8, "RO", RegDecode::None, "task batches picked up"},
    {"CNT_TASK_BUSY_NS", SPYRE_REG_CNT_TASK_BUSY_NS, 8, "RO", RegDecode::None, "core nanoseconds in tasks"},
};

inline constexpr RegDesc kDoorbellWords[] = {
    {"DB.SQ_TAIL", SPYRE_DB_SQ_TAIL, 4, "RW", RegDecode::None, "driver: CBs submitted"},
    {"DB.CQ_HEAD", SPYRE_DB_CQ_HEAD, 4, "RW", RegDecode::None, "driver: completions reaped"},
    {"DB.IRQ_WAITERS", SPYRE_DB_IRQ_WAITERS, 4, "RW", RegDecode::None, "driver: threads waiting"},
    {"DB.SQ_HEAD", SPYRE_DB_SQ_HEAD, 4, "RO", RegDecode::None, "device: CBs consumed"},
    {"DB.CQ_TAIL", SPYRE_DB_CQ_TAIL, 4, "RO", RegDecode::None, "device: completions posted"},
    {"DB.IRQ_SEQ", SPYRE_DB_IRQ_SEQ, 4, "RO", RegDecode::None, "device: interrupt sequence"},
    {"DB.DEVICE_SLEEPING", SPYRE_DB_DEVICE_SLEEPING, 4, "RO", RegDecode::None, "device: parked"},
    {"DB.DEVICE_STATE", SPYRE_DB_DEVICE_STATE, 4, "RO", RegDecode::DevState, "device: alive or gone"},
    {"DB.HEARTBEAT", SPYRE_DB_HEARTBEAT, 4, "RO", RegDecode::None, "device: beats every 100 ms (3.3)"},
};

inline const RegDesc* FindRegister(const char* name) noexcept {
    for (const auto& r : kRegisters)
        if (std::strcmp(r.name, name) == 0) return &r;
    return nullptr;
}

inline const char* OpcodeName(uint32_t op) noexcept {
    switch (op) {
    case SPYRE_OP_NOP: return "NOP";
    case SPYRE_OP_LAUNCH: return "LAUNCH";
    case SPYRE_OP_CORRECT: return "CORRECT";
    case SPYRE_OP_COPY: return "COPY";
    case SPYRE_OP_COPY_INLINE: return "COPY_INLINE";
    case SPYRE_OP_SEM_WRITE: return "SEM_WRITE";
    case SPYRE_OP_SEM_WAIT: return "SEM_WAIT";
    case SPYRE_OP_TASK: return "TASK";
    default: return "?";
    }
}

namespace detail {
inline uint64_t LoadLe(std::span<const uint8_t> bytes, uint32_t offset, uint8_t width) noexcept {
    if (offset + width > bytes.size()) return 0;
    uint64_t v = 0;
    std::memcpy(&v, bytes.data() + offset, width);  // little-endian hosts only (x86_64, aarch64)
    return v;
}

inline void AppendBits(std::string& out, uint64_t value, std::initializer_list<std::pair<uint32_t, const char*>> bits) {
    bool any = false;
    for (auto [bit, name] : bits) {
        if (value & bit) {
            if (any) out += ' ';
            out += name;
            any = true;
        }
    }
    if (!any) out += "-";
}

inline std::string Decode(RegDecode kind, uint64_t v) {
    char buf[96];
    std::string out;
    switch (kind) {
    case RegDecode::None: return {};
    case RegDecode::Magic:
        return v == SPYRE_MAGIC ? "\"SPYR\" ok" : "BAD MAGIC";
    case RegDecode::Version:
        std::snprintf(buf, sizeof buf, "%u.%u", SPYRE_VERSION_GET_MAJOR(v), SPYRE_VERSION_GET_MINOR(v));
        return buf;
    case RegDecode::PciId:
        std::snprintf(buf, sizeof buf, "vendor 0x%04x device 0x%04x", unsigned(v & 0xFFFF), unsigned((v >> 16) & 0xFFFF));
        return buf;
    case RegDecode::FuncId:
        if (v & SPYRE_FUNC_ID_IS_VF)
            std::snprintf(buf, sizeof buf, "card %u VF %u", unsigned((v & SPYRE_FUNC_ID_CARD_MASK) >> SPYRE_FUNC_ID_CARD_SHIFT),
                          unsigned(v & SPYRE_FUNC_ID_INDEX_MASK));
        else
            std::snprintf(buf, sizeof buf, "card %u PF", unsigned((v & SPYRE_FUNC_ID_CARD_MASK) >> SPYRE_FUNC_ID_CARD_SHIFT));
        return buf;
    case RegDecode::Caps:
        AppendBits(out, v, {{SPYRE_CAP_NOP, "NOP"}, {SPYRE_CAP_LAUNCH, "LAUNCH"}, {SPYRE_CAP_CORRECTION, "CORRECT"},
                            {SPYRE_CAP_COPY, "COPY"}, {SPYRE_CAP_COPY_INLINE, "COPY_INLINE"}, {SPYRE_CAP_SEMAPHORE, "SEMAPHORE"},
                            {SPYRE_CAP_TASKS, "TASKS"}, {SPYRE_CAP_CQE_PHASE, "CQE_PHASE"},
                            {SPYRE_CAP_RING_STREAMS, "RING_STREAMS"}});
        return out;
    case RegDecode::Status:
        AppendBits(out, v, {{SPYRE_STATUS_READY, "READY"}, {SPYRE_STATUS_RING_ENABLED, "RING_ENABLED"},
                            {SPYRE_STATUS_BUSY, "BUSY"}, {SPYRE_STATUS_ERROR, "ERROR"}, {SPYRE_STATUS_SLEEPING, "SLEEPING"},
                            {SPYRE_STATUS_RESETTING, "RESETTING"}, {SPYRE_STATUS_HALTED, "HALTED"}});
        return out;
    case RegDecode::Control:
        AppendBits(out, v, {{SPYRE_CONTROL_RING_ENABLE, "RING_ENABLE"}});
        return out;
    case RegDecode::ErrCode:
        return spyre_error_name(uint32_t(v));
    case RegDecode::Opcode:
        return v == 0 ? "-" : OpcodeName(uint32_t(v));
    case RegDecode::RegionResult:
        return v == SPYRE_REGION_OK ? "OK" : v == SPYRE_REGION_ENOSPC ? "ENOSPC" : v == SPYRE_REGION_EFULL ? "EFULL" : "EINVAL";
    case RegDecode::DevState:
        return v == SPYRE_DEVSTATE_ALIVE ? "ALIVE" : v == SPYRE_DEVSTATE_GONE ? "GONE" : "UNKNOWN";
    }
    return {};
}

// `name_width`: the longest name's, so the columns line up.
inline void AppendRow(std::string& out, const RegDesc& r, uint64_t v, int name_width) {
    char buf[160];
    if (r.width == 8)
        std::snprintf(buf, sizeof buf, "%-*s 0x%03x  %-3s  0x%016llx", name_width, r.name, r.offset, r.access,
                      (unsigned long long)v);
    else
        std::snprintf(buf, sizeof buf, "%-*s 0x%03x  %-3s  0x%08llx        ", name_width, r.name, r.offset, r.access,
                      (unsigned long long)v);
    out += buf;
    std::string decoded = Decode(r.decode, v);
    if (r.width == 8 || decoded.empty()) {
        std::snprintf(buf, sizeof buf, "  %llu", (unsigned long long)v);
        out += buf;
    }
    if (!decoded.empty()) {
        out += "  ";
        out += decoded;
    }
    out += '\n';
}
}  // namespace detail

// Text dump of a function's registers from a snapshot of the first
// SPYRE_REG_FILE_SIZE bytes of BAR0 and of the doorbell page.
inline std::string FormatRegisterDump(std::span<const uint8_t> bar0, std::span<const uint8_t> doorbell) {
    size_t width = std::string_view("# register").size();
    for (const auto& r : kRegisters) width = std::max(width, std::string_view(r.name).size());
    for (const auto& r : kDoorbellWords) width = std::max(width, std::string_view(r.name).size());
    std::string out = "# register";
    out.append(width - out.size(), ' ');
    out += " off    acc  value               decoded\n";
    for (const auto& r : kRegisters) detail::AppendRow(out, r, detail::LoadLe(bar0, r.offset, r.width), int(width));
    out += "# doorbell page (BAR4 + DB_OFFSET)\n";
    for (const auto& r : kDoorbellWords) detail::AppendRow(out, r, detail::LoadLe(doorbell, r.offset, r.width), int(width));
    return out;
}

}  // namespace spyre::uapi

#endif  // SPYRE_UAPI_SPYRE_REGDESC_HPP
