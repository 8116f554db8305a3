// SPDX-License-Identifier: Apache-2.0
//
// The `stats` and `stats.json` attributes of a function: what a monitor
// (spyre-smi) shows to every reader. Rendered from the registers (one source
// of truth) plus the holder, which only the daemon knows. Counter names come
// from the contract (uapi/spyre_stats.h). Addresses (region bases, the
// faulting address, a CB's user_data) appear only in stats.json and only for
// a reader allowed to see them (docs/security.md, "What a monitor sees").
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "pci/function.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"
#include "spyre/uapi/spyre_regs.h"
#include "spyre/uapi/spyre_stats.h"
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

Function::StatsSnapshot Function::SnapshotStats() {
    RefreshMirrors();
    StatsSnapshot s;
    s.timestamp_ns = DeviceClockNs();
    s.holder_pid = holder();
    s.holder_comm = ProcessName(s.holder_pid);
    s.status = regs_.Load32(SPYRE_REG_STATUS);
    for (uint32_t i = 0; i < SPYRE_REGION_MAX_ENTRIES; ++i)
        if (const uint64_t size = regs_.Load64(SPYRE_REG_REGION_SIZE(i)); size != 0) {
            s.mem_used += size;
            s.regions.push_back({i, regs_.Load64(SPYRE_REG_REGION_BASE(i)), size});
        }
    const uint32_t queues = regs_.Load32(SPYRE_REG_TQ_COUNT);
    for (uint32_t q = 0; q < queues && q < SPYRE_TQ_MAX_QUEUES; ++q) s.task_cores += regs_.Load32(SPYRE_REG_TQ_GROUP_CORES(q));
    for (const auto& c : spyre_stats_counters) s.counters.push_back(regs_.Load64(c.reg));
    return s;
}

std::string Function::Stats() {
    std::lock_guard regs(regs_mutex_);  // not while a reset or hand-over renews the registers
    const StatsSnapshot s = SnapshotStats();
    std::string out;
    char line[96];
    auto put = [&](const char* key, unsigned long long v) {
        std::snprintf(line, sizeof line, "%s %llu\n", key, v);
        out += line;
    };
    auto put_text = [&](const char* key, const std::string& v) { out += std::string(key) + " " + v + "\n"; };
    put("timestamp_ns", s.timestamp_ns);
    put("holder_pid", static_cast<unsigned long long>(s.holder_pid));
    put_text("holder_comm", s.holder_comm);
    put_text("ring_state", RingState(s.status));
    std::snprintf(line, sizeof line, "status 0x%08x\n", s.status);
    out += line;
    put("sq_head", regs_.Load32(SPYRE_REG_SQ_HEAD));
    put("sq_tail", regs_.Load32(SPYRE_REG_SQ_TAIL));
    put("cq_head", regs_.Load32(SPYRE_REG_CQ_HEAD));
    put("cq_tail", regs_.Load32(SPYRE_REG_CQ_TAIL));
    put("task_queues", regs_.Load32(SPYRE_REG_TQ_COUNT));
    put("task_queues_halted", regs_.Load32(SPYRE_REG_TQ_HALTED));
    put("task_cores", s.task_cores);
    put("mem_total_bytes", regs_.Load64(SPYRE_REG_REGION_GRANTABLE));
    put("mem_used_bytes", s.mem_used);
    put("mem_regions", s.regions.size());
    put("err_code", regs_.Load32(SPYRE_REG_ERR_CODE));
    put("err_count", regs_.Load32(SPYRE_REG_ERR_COUNT));
    put("shm_repairs", ShmRepairs());
    for (size_t i = 0; i < std::size(spyre_stats_counters); ++i) put(spyre_stats_counters[i].name, s.counters[i]);
    return out;
}

std::string Function::StatsJson(bool show_private) {
    using Json = nlohmann::ordered_json;  // counters keep the contract's order
    std::lock_guard regs(regs_mutex_);  // not while a reset or hand-over renews the registers
    const StatsSnapshot s = SnapshotStats();
    auto private_value = [&](uint64_t v) { return show_private ? Json(v) : Json(nullptr); };
    Json regions = Json::array();
    for (const auto& r : s.regions) regions.push_back({{"index", r.index}, {"base", private_value(r.base)}, {"size_bytes", r.size}});
    const uint32_t err_code = regs_.Load32(SPYRE_REG_ERR_CODE), err_op = regs_.Load32(SPYRE_REG_ERR_OPCODE);
    Json counters = Json::object();
    for (size_t i = 0; i < std::size(spyre_stats_counters); ++i) counters[spyre_stats_counters[i].name] = s.counters[i];
    Json out = {
        {"schema", SPYRE_STATS_JSON_SCHEMA},
        {"version", SPYRE_STATS_JSON_VERSION},
        {"address", address_},
        {"kind", is_vf() ? "VF" : "PF"},
        {"index", index()},
        {"vendor", SPYRE_PCI_VENDOR_IBM},
        {"device", device_id()},
        {"timestamp_ns", s.timestamp_ns},
        {"holder", s.holder_pid ? Json{{"pid", s.holder_pid}, {"name", s.holder_comm}} : Json(nullptr)},
        {"private_visible", show_private},
        {"status", {{"value", s.status}, {"decoded", uapi::detail::Decode(uapi::RegDecode::Status, s.status)}}},
        {"ring",
         {{"state", RingState(s.status)},
          {"sq_head", regs_.Load32(SPYRE_REG_SQ_HEAD)},
          {"sq_tail", regs_.Load32(SPYRE_REG_SQ_TAIL)},
          {"cq_head", regs_.Load32(SPYRE_REG_CQ_HEAD)},
          {"cq_tail", regs_.Load32(SPYRE_REG_CQ_TAIL)}}},
        {"task_queues",
         {{"count", regs_.Load32(SPYRE_REG_TQ_COUNT)}, {"cores", s.task_cores}, {"halted_mask", regs_.Load32(SPYRE_REG_TQ_HALTED)}}},
        {"memory", {{"total_bytes", regs_.Load64(SPYRE_REG_REGION_GRANTABLE)}, {"used_bytes", s.mem_used}, {"regions", regions}}},
        {"errors",
         {{"code", err_code},
          {"name", spyre_error_name(err_code)},
          {"opcode", err_op},
          {"opcode_name", err_op == 0 ? "-" : uapi::OpcodeName(err_op)},
          {"sq_pos", regs_.Load32(SPYRE_REG_ERR_SQ_POS)},
          {"count", regs_.Load32(SPYRE_REG_ERR_COUNT)},
          {"addr", private_value(regs_.Load64(SPYRE_REG_ERR_ADDR))},
          {"user_data", private_value(regs_.Load64(SPYRE_REG_ERR_USER_DATA))}}},
        {"watchdog_ms", regs_.Load32(SPYRE_REG_WATCHDOG_MS)},
        {"shm_repairs", ShmRepairs()},
        {"counters", counters},
    };
    // A process name is any bytes (comm cuts a UTF-8 name mid-character
    // at 15 bytes): what is not UTF-8 is shown as U+FFFD, never thrown.
    return out.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace spyre::mockdev
