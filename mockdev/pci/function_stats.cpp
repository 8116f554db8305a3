// SPDX-License-Identifier: Apache-2.0
//
// The `stats` attribute of a function: what a monitor (spyre-smi) shows to
// every reader. Rendered from the registers (one source of truth) plus the
// holder, which only the daemon knows. It carries counts, times, ring
// positions and the holder's pid and name, never an address, a region base,
// data or a CB's user_data (docs/security.md, "What a monitor sees").
#include <cstdio>
#include <string>

#include "pci/function.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/uapi/spyre_regs.h"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

namespace {

// /proc/PID/comm without its newline, or "-" when it cannot be read (the
// process is gone, or /proc hides it).
std::string ProcessName(pid_t pid) {
    if (pid <= 0) return "-";
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/comm", int(pid));
    FILE* f = std::fopen(path, "re");
    if (!f) return "-";
    char name[64] = {};
    const bool ok = std::fgets(name, sizeof name, f) != nullptr;
    std::fclose(f);
    std::string s = ok ? name : "-";
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    for (char& c : s)
        if (c == ' ' || c == '\t' || static_cast<unsigned char>(c) < 0x20) c = '_';  // one token per value
    return s.empty() ? "-" : s;
}

const char* RingState(uint32_t status) {
    if (status & SPYRE_STATUS_RESETTING) return "resetting";
    if (status & SPYRE_STATUS_HALTED) return "halted";
    if (!(status & SPYRE_STATUS_RING_ENABLED)) return "disabled";
    if (status & SPYRE_STATUS_BUSY) return "busy";
    if (status & SPYRE_STATUS_SLEEPING) return "sleeping";
    return "polling";
}

}  // namespace

std::string Function::Stats() {
    RefreshMirrors();
    const pid_t pid = holder();
    uint64_t used = 0, regions = 0;
    for (uint32_t i = 0; i < SPYRE_REGION_MAX_ENTRIES; ++i)
        if (const uint64_t size = regs_.Load64(SPYRE_REG_REGION_SIZE(i)); size != 0) {
            used += size;
            ++regions;
        }
    const uint32_t status = regs_.Load32(SPYRE_REG_STATUS);
    std::string out;
    char line[96];
    auto put = [&](const char* key, unsigned long long v) {
        std::snprintf(line, sizeof line, "%s %llu\n", key, v);
        out += line;
    };
    auto put_text = [&](const char* key, const std::string& v) { out += std::string(key) + " " + v + "\n"; };
    auto reg = [&](const char* key, uint32_t off) { put(key, regs_.Load64(off)); };
    auto reg32 = [&](const char* key, uint32_t off) { put(key, regs_.Load32(off)); };
    put("timestamp_ns", DeviceClockNs());
    put("holder_pid", static_cast<unsigned long long>(pid));
    put_text("holder_comm", ProcessName(pid));
    put_text("ring_state", RingState(status));
    std::snprintf(line, sizeof line, "status 0x%08x\n", status);
    out += line;
    reg32("sq_head", SPYRE_REG_SQ_HEAD);
    reg32("sq_tail", SPYRE_REG_SQ_TAIL);
    reg32("cq_head", SPYRE_REG_CQ_HEAD);
    reg32("cq_tail", SPYRE_REG_CQ_TAIL);
    reg32("task_queues", SPYRE_REG_TQ_COUNT);
    reg32("task_queues_halted", SPYRE_REG_TQ_HALTED);
    uint64_t task_cores = 0;
    for (uint32_t q = 0; q < regs_.Load32(SPYRE_REG_TQ_COUNT) && q < SPYRE_TQ_MAX_QUEUES; ++q) task_cores += regs_.Load32(SPYRE_REG_TQ_GROUP_CORES(q));
    put("task_cores", task_cores);
    put("mem_total_bytes", regs_.Load64(SPYRE_REG_REGION_GRANTABLE));
    put("mem_used_bytes", used);
    put("mem_regions", regions);
    reg32("err_code", SPYRE_REG_ERR_CODE);
    reg32("err_count", SPYRE_REG_ERR_COUNT);
    reg("cb_done", SPYRE_REG_CNT_CB_DONE);
    reg("cb_errors", SPYRE_REG_CNT_CB_ERRORS);
    reg("nops", SPYRE_REG_CNT_NOPS);
    reg("launches", SPYRE_REG_CNT_LAUNCHES);
    reg("copies", SPYRE_REG_CNT_COPIES);
    reg("copy_bytes", SPYRE_REG_CNT_COPY_BYTES);
    reg("doorbells", SPYRE_REG_CNT_DOORBELLS);
    reg("wakeups", SPYRE_REG_CNT_WAKEUPS);
    reg("irqs", SPYRE_REG_CNT_IRQS);
    reg("busy_ns", SPYRE_REG_CNT_BUSY_NS);
    reg("resets", SPYRE_REG_CNT_RESETS);
    reg("tasks_done", SPYRE_REG_CNT_TASKS_DONE);
    reg("task_errors", SPYRE_REG_CNT_TASK_ERRORS);
    reg("task_doorbells", SPYRE_REG_CNT_TASK_DOORBELLS);
    reg("task_busy_ns", SPYRE_REG_CNT_TASK_BUSY_NS);
    reg("watchdog", SPYRE_REG_CNT_WATCHDOG);
    reg("dma_to_device_bytes", SPYRE_REG_CNT_DMA_TO_DEV_BYTES);
    reg("dma_from_device_bytes", SPYRE_REG_CNT_DMA_FROM_DEV_BYTES);
    reg("dma_busy_ns", SPYRE_REG_CNT_DMA_BUSY_NS);
    return out;
}

}  // namespace spyre::mockdev
