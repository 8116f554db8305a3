/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: task queues (many small programs on the card's
 * cores at once, completing out of order).
 *
 * The card's cores are split into core groups; a function has one task queue
 * per core group (TQ_COUNT, each group's core count in TQ_GROUP_CORES(q)).
 * Tasks of queue q run on the cores of group q, one task per core at a time,
 * concurrently with each other and with the function's CB ring.
 *
 * A task is a control block (contract 3.0, spyre_cb.h): opcode SPYRE_OP_TASK,
 * u.task naming a program already in device memory and its argument table,
 * the task's id in user_data. The device copies the program into the core's
 * private state, writes entry `slot` of the task's argument table into the
 * address of every operand the program's relocation table
 * (spyre_program_reloc) maps to that slot, and runs the ops of that private
 * copy. The program in memory is never written, so one uploaded kernel serves
 * any number of tasks with different buffers at once. A task is bounded by
 * the card's watchdog (WATCHDOG_MS) and stopped by a function reset (ABORTED).
 *
 * Validation, before anything runs, in this order: an opcode unknown to the
 * contract is INVALID_OPCODE; a task queue takes TASK and NOP only, any other
 * opcode completes with WRONG_QUEUE (and the CB ring refuses TASK so). Flags
 * must be 0 and stream 0 (LINK and ring streams order a ring, they mean
 * nothing where CBs complete out of order: RESERVED_NONZERO); slots must be 1
 * (BAD_SLOT_COUNT; a task queue has no inline payload, every CB takes one
 * slot); u.task.after_count at most SPYRE_TASK_MAX_AFTER (BAD_DEPENDENCY),
 * the after[] words past it and u.task.reserved (a NOP: every payload word)
 * 0 (RESERVED_NONZERO). Then every field of the task, and every resolved
 * operand, is checked exactly as a LAUNCH's.
 *
 * Waiting on earlier tasks (3.1). A TASK may name up to SPYRE_TASK_MAX_AFTER
 * earlier tasks of its own queue by submission position (u.task.after, the
 * sq_pos their CQEs carry). It starts only once each has completed, so it
 * reads what they wrote; the device resolves the wait, with no round trip
 * to the driver. If one of them completed with any status but NONE, it does
 * not run: it completes with DEPENDENCY_FAILED (after all of them), and a
 * task waiting for it fails so in turn. A position that is its own, a later
 * one, SQ_ENTRIES or more behind its own, or before the queue's last reset
 * names no task it could wait for: BAD_DEPENDENCY, at once, without running.
 * Positions, not ids: the device tracks them in one SQ lap, and the driver
 * knows them (its sq_tail when it submitted the task).
 *
 * Completions are spyre_cqe records, one per CB, in the order tasks finish,
 * with the phase bit exactly as on the CB ring (spyre_cb.h, "CQE phase": the
 * phase byte written last, spyre_cqe_phase of the CQE's position, a reset
 * zeroes the CQ), so a driver polls the CQE at its cq_head. A task's CQE:
 * user_data and opcode as read, sq_pos its submission position, timestamp_ns
 * the device clock when it ended, status, and result =
 * spyre_task_result(run_ns, core): the core that ran (or refused) it and how
 * long it ran, so it started at timestamp_ns - run_ns.
 *
 * Rings. Each queue has a submission ring of spyre_cb (TQ_DESC_SIZE 64) and a
 * completion ring of spyre_cqe (TQ_CQE_SIZE 32) in BAR4 (TQ_OFFSET + q *
 * TQ_STRIDE, the CQ at TQ_CQ_OFFSET inside that block). Their positions are
 * free-running u32 words in the task doorbell page (TQ_DB_OFFSET in BAR4).
 * The device takes a CB out of the SQ (advancing sq_head) only while the
 * completions it owes, sq_head - cq_head, are fewer than TQ_CQ_ENTRIES, so
 * completion posting never waits. A CB that fails validation completes at
 * once with its error code; the queue goes on. A queue whose sq_tail runs
 * more than TQ_SQ_ENTRIES ahead of sq_head, or whose cq_head claims
 * completions never posted, halts (TQ_HALTED bit q, ERR_CODE RING_OVERFLOW)
 * until a function reset.
 *
 * Doorbell (one per batch, as for the CB ring): the driver writes the CBs,
 * store-releases queue[q].sq_tail, issues a full fence and reads
 * device_sleeping; only if it is 1 does it increment wake_seq and futex-wake
 * it. The device sets device_sleeping = 1, fences, re-reads every sq_tail and
 * only then futex-waits on wake_seq. Completion interrupt: the device writes
 * CQEs, store-releases cq_tail, fences, increments irq_seq and futex-wakes it
 * if irq_waiters != 0 (one interrupt word for all the function's queues). A
 * function reset, and a change of owner, empties every queue.
 */
#ifndef SPYRE_UAPI_SPYRE_TASK_H
#define SPYRE_UAPI_SPYRE_TASK_H

#include <stdint.h>
#include "spyre_cb.h"
#include "spyre_pci.h"

#define SPYRE_TQ_MAX_QUEUES         8u   /* TQ_COUNT <= this */
#define SPYRE_TQ_DEFAULT_GROUP_CORES 8u  /* cores per group the mock forms (the last group may be smaller) */

/* A task CQE's result: bits 0-15 the core, bits 16-63 the run time in ns
 * (saturating at 2^48 - 1). */
#define SPYRE_TASK_RUN_NS_MAX       ((UINT64_C(1) << 48) - 1u)
static inline uint64_t spyre_task_result(uint64_t run_ns, uint16_t core) {
    return (run_ns < SPYRE_TASK_RUN_NS_MAX ? run_ns : SPYRE_TASK_RUN_NS_MAX) << 16 | core;
}
static inline uint16_t spyre_task_result_core(uint64_t result) { return (uint16_t)(result & 0xFFFFu); }
static inline uint64_t spyre_task_result_run_ns(uint64_t result) { return result >> 16; }

/* Positions of one queue in the task doorbell page, one cache line each. */
struct spyre_task_queue_words {
    uint32_t sq_tail;         uint32_t pad0[15];  /* +0x00 driver -> device */
    uint32_t cq_head;         uint32_t pad1[15];  /* +0x40 driver -> device */
    uint32_t sq_head;         uint32_t pad2[15];  /* +0x80 device -> driver: CBs taken */
    uint32_t cq_tail;         uint32_t pad3[15];  /* +0xC0 device -> driver: completions posted */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_task_queue_words) == 256, "queue words are 4 cache lines");

struct spyre_task_doorbell {
    uint32_t wake_seq;        uint32_t pad0[15];  /* 0x000 driver -> device (futex word) */
    uint32_t device_sleeping; uint32_t pad1[15];  /* 0x040 device -> driver */
    uint32_t irq_waiters;     uint32_t pad2[15];  /* 0x080 driver -> device */
    uint32_t irq_seq;         uint32_t pad3[15];  /* 0x0C0 device -> driver (futex word) */
    uint8_t  reserved0[0x200 - 0x100];
    struct spyre_task_queue_words queue[SPYRE_TQ_MAX_QUEUES]; /* 0x200 */
    uint8_t  reserved1[4096 - 0x200 - 256 * SPYRE_TQ_MAX_QUEUES];
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_task_doorbell) == 4096, "task doorbell page is 4 KiB");

#define SPYRE_TDB_WAKE_SEQ          0x000u
#define SPYRE_TDB_DEVICE_SLEEPING   0x040u
#define SPYRE_TDB_IRQ_WAITERS       0x080u
#define SPYRE_TDB_IRQ_SEQ           0x0C0u
#define SPYRE_TDB_QUEUE(q)          (0x200u + 0x100u * (q))
#define SPYRE_TDB_SQ_TAIL(q)        (SPYRE_TDB_QUEUE(q) + 0x00u)
#define SPYRE_TDB_CQ_HEAD(q)        (SPYRE_TDB_QUEUE(q) + 0x40u)
#define SPYRE_TDB_SQ_HEAD(q)        (SPYRE_TDB_QUEUE(q) + 0x80u)
#define SPYRE_TDB_CQ_TAIL(q)        (SPYRE_TDB_QUEUE(q) + 0xC0u)

/* Default geometry the mock device publishes; drivers must read the registers. */
#define SPYRE_DEFAULT_TQ_DB_OFFSET  0x300000u
#define SPYRE_DEFAULT_TQ_OFFSET     0x400000u
#define SPYRE_DEFAULT_TQ_SQ_ENTRIES 1024u
#define SPYRE_DEFAULT_TQ_CQ_OFFSET  0x10000u  /* inside a queue's block: after its SQ */
#define SPYRE_DEFAULT_TQ_CQ_ENTRIES 1024u
#define SPYRE_DEFAULT_TQ_STRIDE     0x20000u

SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_CQ_OFFSET >= SPYRE_DEFAULT_TQ_SQ_ENTRIES * sizeof(struct spyre_cb), "task CQ after task SQ");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_STRIDE >= SPYRE_DEFAULT_TQ_CQ_OFFSET + SPYRE_DEFAULT_TQ_CQ_ENTRIES * sizeof(struct spyre_cqe),
                    "task queue blocks do not overlap");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_OFFSET >= SPYRE_DEFAULT_TQ_DB_OFFSET + 4096u, "task rings after their doorbell page");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_OFFSET + SPYRE_TQ_MAX_QUEUES * SPYRE_DEFAULT_TQ_STRIDE <= (32u << 20),
                    "task queues fit BAR4");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_TQ_SQ_ENTRIES & (SPYRE_DEFAULT_TQ_SQ_ENTRIES - 1)) == 0, "power of two");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_TQ_CQ_ENTRIES & (SPYRE_DEFAULT_TQ_CQ_ENTRIES - 1)) == 0, "power of two");

#ifdef __cplusplus
#include <cstddef>
static_assert(offsetof(spyre_task_doorbell, wake_seq) == SPYRE_TDB_WAKE_SEQ, "");
static_assert(offsetof(spyre_task_doorbell, device_sleeping) == SPYRE_TDB_DEVICE_SLEEPING, "");
static_assert(offsetof(spyre_task_doorbell, irq_waiters) == SPYRE_TDB_IRQ_WAITERS, "");
static_assert(offsetof(spyre_task_doorbell, irq_seq) == SPYRE_TDB_IRQ_SEQ, "");
static_assert(offsetof(spyre_task_doorbell, queue) == SPYRE_TDB_QUEUE(0), "");
static_assert(offsetof(spyre_task_doorbell, queue[1].sq_tail) == SPYRE_TDB_SQ_TAIL(1), "");
static_assert(offsetof(spyre_task_doorbell, queue[1].cq_head) == SPYRE_TDB_CQ_HEAD(1), "");
static_assert(offsetof(spyre_task_doorbell, queue[1].sq_head) == SPYRE_TDB_SQ_HEAD(1), "");
static_assert(offsetof(spyre_task_doorbell, queue[1].cq_tail) == SPYRE_TDB_CQ_TAIL(1), "");
#endif

#endif /* SPYRE_UAPI_SPYRE_TASK_H */
