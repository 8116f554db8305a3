// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the device's control-block path over whole rings: the
// input is a ring of CBs plus the initial contents of a function's memory
// window, and every CB is framed the way the ring lane frames it (spyre_cb.h:
// a CB's slot count, if valid and inside the ring, takes its payload slots,
// else one slot), then validated and executed by CbExecutor (NOP, LAUNCH
// through the program decoder and executor with the real kernels, CORRECT,
// COPY, COPY_INLINE, SEM_WRITE, SEM_WAIT), LINK chains cancelled as the
// ring lane cancels them. Then the same CBs pushed through a task queue
// (spyre_task.h: one slot per CB, TASK and NOP only), each validated and,
// for a TASK, run on one core as the task queues run it.
//
// Input: byte 0 = ring slots N (1..64, taken mod 64, 0 means 64), then N*64
// bytes of ring (zero-padded), then the window's first bytes (the rest zero).
//
// Promises checked after every CB: the status is a contract error code; a
// successful COPY/COPY_INLINE reports its size; no CB outlives the watchdog
// by more than kWatchdogSlack; and nothing outside the window changed
// (guard pages around it), so no CB reaches beyond its function's memory.
// Each queue refuses the other's opcodes: TASK on the ring, and any contract
// opcode but TASK and NOP on a task queue, complete with WRONG_QUEUE.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

#include "execution/cb_executor.hpp"
#include "execution/task_executor.hpp"
#include "execution/task_waits.hpp"
#include "log.hpp"
#include "spyre/uapi/spyre_regs.h"

using namespace spyre::mockdev;

namespace {

constexpr size_t kWindow = 256 << 10;  // the function's memory window
constexpr size_t kGuard = 4096;        // canary bytes on both sides
constexpr uint8_t kCanary = 0xA5;
constexpr uint32_t kWatchdogMs = 5;    // short: SEM_WAITs that never match end fast
constexpr auto kWatchdogSlack = std::chrono::milliseconds(1000);

struct Device {
    std::vector<uint8_t> bar0 = std::vector<uint8_t>(SPYRE_REG_FILE_SIZE);
    std::vector<uint8_t> memory = std::vector<uint8_t>(kGuard + kWindow + kGuard, kCanary);
    RegisterFile regs{bar0.data()};
    CardCores compute{2};
    std::atomic<uint32_t> watchdog_ms{kWatchdogMs};  // the card's policy
    CbExecutor exec{regs, watchdog_ms, DeviceMemory(memory.data() + kGuard, kWindow), compute};
    ProgramExecutor core{DeviceMemory(memory.data() + kGuard, kWindow), compute};  // one core's task state
};

Device& Dev() {
    static Device* d = [] {
        SetLogLevel(LogLevel::Error);
        return new Device;
    }();
    return *d;
}

bool GuardsIntact(const std::vector<uint8_t>& m) {
    for (size_t i = 0; i < kGuard; ++i)
        if (m[i] != kCanary || m[kGuard + kWindow + i] != kCanary) return false;
    return true;
}

bool KnownStatus(uint16_t s) { return std::strcmp(spyre_error_name(s), "?") != 0 && std::strcmp(spyre_error_name(s), "UNKNOWN") != 0; }

// The same CBs taken by a task queue (contract 3.1, after lists), with a
// window of 16 positions so that laps and slot reuse come up: admitted in
// order, then ended in an order and with statuses the window's bytes pick.
// Every task reaches a core exactly once, never before a task it names has
// ended (unless refused: BAD_DEPENDENCY), with DEPENDENCY_FAILED exactly
// when one of those failed, and none is left waiting.
void CheckWaits(const std::vector<spyre_cb>& ring, const uint8_t* choices) {
    constexpr uint32_t kLap = 16;
    const uint32_t n = uint32_t(ring.size());
    TaskWaits waits(kLap);
    std::deque<QueuedTask> ready;
    std::vector<int> ended(n, -1);  // status once ended
    for (uint32_t i = 0; i < n; ++i) {
        QueuedTask t{ring[i], i};
        if (waits.Admit(t)) ready.push_back(t);
    }
    size_t pick = 0;
    while (!ready.empty()) {
        const uint8_t choice = choices[pick++ % 4096];
        const size_t at = ready.size() > 1 ? choice % ready.size() : 0;
        const QueuedTask t = ready[at];
        ready.erase(ready.begin() + ptrdiff_t(at));
        const uint32_t pos = t.sq_pos;
        if (pos >= n || ended[pos] != -1) {
            std::fprintf(stderr, "task %u reached a core twice\n", pos);
            __builtin_trap();
        }
        const spyre_cb_task& task = t.cb.u.task;
        const bool waited = t.cb.opcode == SPYRE_OP_TASK && t.verdict != SPYRE_ERR_BAD_DEPENDENCY &&
                            ValidateCbHeader(t.cb, 0, CbQueue::Task) == SPYRE_ERR_NONE &&
                            ValidateTaskAfter(task) == SPYRE_ERR_NONE;
        bool failed = false;
        for (uint32_t i = 0; waited && i < task.after_count; ++i) {
            const uint32_t named = task.after[i];
            if (named >= n || ended[named] == -1) {
                std::fprintf(stderr, "task %u started before task %u it names ended\n", pos, named);
                __builtin_trap();
            }
            failed |= ended[named] != SPYRE_ERR_NONE;
        }
        if (waited && failed != (t.verdict == SPYRE_ERR_DEPENDENCY_FAILED)) {
            std::fprintf(stderr, "task %u: verdict 0x%x, a producer failed: %d\n", pos, t.verdict, int(failed));
            __builtin_trap();
        }
        // It ends with its verdict, or as the input says (1 in 8 fail).
        const uint16_t status = t.verdict != SPYRE_ERR_NONE ? t.verdict : (choice & 7) == 7 ? SPYRE_ERR_SHAPE : SPYRE_ERR_NONE;
        ended[pos] = status;
        waits.Ended(pos, status, ready);
    }
    for (uint32_t i = 0; i < n; ++i)
        if (ended[i] == -1) {
            std::fprintf(stderr, "task %u never reached a core (%zu still wait)\n", i, waits.waiting());
            __builtin_trap();
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    Device& d = Dev();
    const uint32_t n = data[0] % SPYRE_CB_MAX_SLOTS ? data[0] % SPYRE_CB_MAX_SLOTS : SPYRE_CB_MAX_SLOTS;
    ++data, --size;
    std::vector<spyre_cb> ring(n);
    const size_t ring_bytes = std::min<size_t>(size, n * sizeof(spyre_cb));
    std::memcpy(static_cast<void*>(ring.data()), data, ring_bytes);
    data += ring_bytes, size -= ring_bytes;
    uint8_t* window = d.memory.data() + kGuard;
    std::memset(window, 0, kWindow);
    std::memcpy(window, data, std::min(size, kWindow));

    std::vector<uint8_t> payload;
    bool cancel_next = false;
    for (uint32_t head = 0; head < n;) {
        const spyre_cb cb = ring[head];
        const bool framed = cb.slots >= 1 && cb.slots <= SPYRE_CB_MAX_SLOTS && cb.slots <= n - head;
        const uint32_t used = framed ? cb.slots : 1u;
        payload.assign(reinterpret_cast<const uint8_t*>(&ring[head + 1]),
                       reinterpret_cast<const uint8_t*>(&ring[head + used]));
        head += used;
        if (cancel_next) {  // the ring lane's LINK rule: the rest of the chain is CANCELED
            cancel_next = (cb.flags & SPYRE_CB_F_LINK) != 0;
            continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const CbOutcome out = d.exec.Execute(cb, payload);
        const auto took = std::chrono::steady_clock::now() - t0;
        if (!KnownStatus(out.status)) {
            std::fprintf(stderr, "CB opcode 0x%02x: status 0x%x is not a contract error\n", cb.opcode, out.status);
            __builtin_trap();
        }
        if (out.status == SPYRE_ERR_INTERNAL) {
            std::fprintf(stderr, "CB opcode 0x%02x: device-model fault (SPYRE_ERR_INTERNAL)\n", cb.opcode);
            __builtin_trap();
        }
        if (out.status == SPYRE_ERR_NONE && (cb.opcode == SPYRE_OP_COPY || cb.opcode == SPYRE_OP_COPY_INLINE) &&
            out.result != cb.u.copy.size)
            __builtin_trap();
        if (cb.opcode == SPYRE_OP_TASK && out.status != SPYRE_ERR_WRONG_QUEUE) {
            std::fprintf(stderr, "TASK on the ring: status 0x%x, not WRONG_QUEUE\n", out.status);
            __builtin_trap();
        }
        if (took > std::chrono::milliseconds(kWatchdogMs) + kWatchdogSlack) {
            std::fprintf(stderr, "CB opcode 0x%02x ran %lld ms past a %u ms watchdog\n", cb.opcode,
                         (long long)std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), kWatchdogMs);
            __builtin_trap();
        }
        if (!GuardsIntact(d.memory)) {
            std::fprintf(stderr, "CB opcode 0x%02x wrote outside its window\n", cb.opcode);
            __builtin_trap();
        }
        cancel_next = out.status != SPYRE_ERR_NONE && (cb.flags & SPYRE_CB_F_LINK);
    }
    // The same slots pushed through a task queue: one CB per slot, run on
    // one core as the task queues run it. Same promises.
    for (uint32_t i = 0; i < n; ++i) {
        const spyre_cb& cb = ring[i];
        const auto t0 = std::chrono::steady_clock::now();
        const uint16_t status =
            ExecuteTaskCb(d.core, cb, Budget(Budget::Clock::now(), std::chrono::milliseconds(kWatchdogMs)));
        const auto took = std::chrono::steady_clock::now() - t0;
        if (!KnownStatus(status) || status == SPYRE_ERR_INTERNAL) {
            std::fprintf(stderr, "task queue CB %u (opcode 0x%02x): status 0x%x\n", i, cb.opcode, status);
            __builtin_trap();
        }
        if (IsContractOpcode(cb.opcode) && !OpcodeFitsQueue(cb.opcode, CbQueue::Task) &&
            status != SPYRE_ERR_WRONG_QUEUE) {
            std::fprintf(stderr, "opcode 0x%02x on a task queue: status 0x%x, not WRONG_QUEUE\n", cb.opcode, status);
            __builtin_trap();
        }
        if (took > std::chrono::milliseconds(kWatchdogMs) + kWatchdogSlack || !GuardsIntact(d.memory)) {
            std::fprintf(stderr, "task queue CB %u ran past its watchdog or wrote outside its window\n", i);
            __builtin_trap();
        }
    }
    CheckWaits(ring, window);  // the window's bytes pick the order tasks end in
    return 0;
}
