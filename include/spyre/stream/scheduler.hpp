// SPDX-License-Identifier: Apache-2.0
// The Scheduler of seed 001: per-stream FIFOs drained onto one function.
//
// One scheduler per device drives the command ring (its thread, or a host
// thread that finds it idle: docs/streams.md). Ring work (launches,
// small copies carried inline in the ring, semaphore writes and waits) is
// chained: consecutive ready CBs of a stream go down with one doorbell, and
// the CBs of one Operation are LINKed so a failure cancels the rest of it on
// the device. Large copies and device->host copies run on the DMA engine
// while the ring computes for other streams. Within a stream an operation
// starts only after the previous one completed; across streams the policy
// decides. docs/streams.md describes the policies and their guarantees.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

enum class SchedulerPolicy {
    RoundRobin,     // streams take turns, a bounded quantum each
    Priority,       // lower priority number first; waiting streams age upwards
    DrainOneFirst,  // finish one stream's queue before the next (work-conserving)
};
const char* ToString(SchedulerPolicy policy) noexcept;

// Stream priorities as torch streams use them: 0 is the default, negative
// numbers are higher priority, positive lower (CUDA's convention).
inline constexpr int kStreamPriorityHighest = -3;
inline constexpr int kStreamPriorityDefault = 0;
inline constexpr int kStreamPriorityLowest = 3;

struct SchedulerOptions {
    SchedulerPolicy policy = SchedulerPolicy::RoundRobin;
    // Ring CBs of one stream per turn (RoundRobin, Priority). A turn goes
    // to the ring as one LINKed chain, and a stream's next turn waits until
    // that chain has completed, so a failure cancels everything behind it.
    uint32_t quantum = 64;
    // CBs in the ring at once, over all streams. Small keeps priorities
    // meaningful; large keeps the device busy.
    uint32_t max_ring_inflight = 256;
    // Priority: a ready stream passed over this many turns gains one
    // priority level (so no stream starves).
    uint32_t aging_turns = 4;
    // How the scheduler thread, Synchronize and the waiters of the task
    // queues (an orchestration runtime's pto_wait_all, a stalled submit)
    // wait: spin up to this long, then sleep (Adaptive; a task-queue waiter
    // also yields the CPU between looks for a while before it sleeps), spin
    // only (Poll), or sleep at once (Blocking).
    std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
    driver::WaitMode wait_mode = driver::WaitMode::Adaptive;
};

// One unit of stream work as a caller builds it for Scheduler::QueueOperation:
// a ring CB, a copy, or a host callback. (Events, chains and cleanup are the
// runtime's: FlexStream, Event and the group form set them up.)
struct ControlBlock {
    enum class Kind : uint8_t {
        Launch,          // LAUNCH of a resident program
        CopyToDevice,    // inline in the ring when small, else the DMA engine
        CopyFromDevice,  // DMA engine
        SemWrite,        // device semaphore store
        // Device semaphore wait. The ring runs CBs in order for every stream
        // of the device: the SemWrite that releases it must be queued
        // before it, or it waits behind it until the watchdog stops the wait.
        SemWait,
        HostCallback,    // runs on the scheduler thread after prior work
    };
    Kind kind = Kind::Launch;
    uint64_t device_addr = 0;     // function-relative: program, copy target/source, semaphore
    uint64_t size = 0;            // Launch: program bytes (0: from its header); copies: bytes
    const void* src = nullptr;    // CopyToDevice source
    void* dst = nullptr;          // CopyFromDevice destination
    uint64_t value = 0;           // SemWrite/SemWait value
    // Owns `src` or `dst` if set (a private copy, a staging image): kept
    // until the device is done with it.
    std::shared_ptr<const void> keep_alive;
    std::function<void()> callback;
};
const char* ToString(ControlBlock::Kind kind) noexcept;

struct SchedulerStats {
    uint64_t ring_cbs = 0;       // CBs submitted to the ring
    uint64_t doorbells = 0;      // ring submissions (one doorbell each)
    uint64_t inline_copies = 0;  // copies carried in the ring
    uint64_t dma_copies = 0;     // copies on the DMA engine
    uint64_t callbacks = 0;
    uint64_t dropped = 0;        // ops discarded on faulted streams
    uint64_t host_events = 0;    // event records and waits settled on the host (no CB)
    // The task queues (orchestration runtimes' device tasks), through the
    // same Device: tasks sent, their doorbells, completions reaped, and
    // drives by the Device's thread for runtimes nobody waited on.
    uint64_t tasks_sent = 0;
    uint64_t task_doorbells = 0;
    uint64_t tasks_reaped = 0;
    uint64_t task_backstops = 0;
    // How the task queues' waiters waited (SchedulerOptions::wait_mode):
    // sleeps on the completion interrupt, and looks that yielded the CPU.
    uint64_t task_sleeps = 0;
    uint64_t task_yields = 0;
};

namespace detail {
class SPYRE_INTERNAL SchedulerCore;
}

// The scheduler of one device (Device::scheduler()). Everything a stream
// runs enters through QueueOperation or its group form.
class Scheduler {
public:
    // A view of the device's scheduler (made by the device, opaque here).
    explicit Scheduler(detail::SchedulerCore& core) noexcept : core_(&core) {}
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Accepts a control block for stream `stream_index` and returns at once.
    // Throws InvalidArgument for an unknown stream or a malformed block,
    // the stream's sticky error if it is faulted, DeviceLost once the
    // device is gone.
    void QueueOperation(int stream_index, ControlBlock cb);
    // The group form: the blocks run in order as one chain (LINKed in the
    // ring, never split between turns), so a failure cancels the rest of
    // the group. Checked whole before any is queued.
    void QueueOperations(int stream_index, std::span<ControlBlock> group);

    SchedulerPolicy policy() const noexcept { return options().policy; }
    const SchedulerOptions& options() const noexcept;
    SchedulerStats Stats() const;

private:
    detail::SchedulerCore* core_;
};

}  // namespace spyre
SPYRE_API_END
