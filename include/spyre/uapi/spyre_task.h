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
 * A task is a program already in device memory plus an argument table. The
 * device copies the program into the core's private state, writes entry
 * `slot` of the task's argument table into the address of every operand the
 * program's relocation table (spyre_program_reloc) maps to that slot, and
 * runs the ops of that private copy. The program in memory is never written,
 * so one uploaded kernel serves any number of tasks with different buffers
 * at once. Every field is validated before anything runs, every resolved
 * operand exactly as a LAUNCH's operands are; a task is bounded by the card's
 * watchdog (WATCHDOG_MS) and stopped by a function reset (ABORTED).
 *
 * Rings. Each queue has a submission ring of spyre_task_desc and a completion
 * ring of spyre_task_cqe in BAR4 (TQ_OFFSET + q * TQ_STRIDE, the CQ at
 * TQ_CQ_OFFSET inside that block). Their positions are free-running u32
 * words in the task doorbell page (TQ_DB_OFFSET in BAR4). The device takes a
 * descriptor out of the SQ (advancing sq_head) only while the completions it
 * owes, sq_head - cq_head, are fewer than TQ_CQ_ENTRIES, so completion posting
 * never waits; it posts one completion per descriptor, in the order tasks
 * finish (each CQE carries its task_id). A descriptor that fails validation
 * completes at once with its error code; the queue goes on. A queue whose
 * sq_tail runs more than TQ_SQ_ENTRIES ahead of sq_head, or whose cq_head
 * claims completions never posted, halts (TQ_HALTED bit q, ERR_CODE
 * RING_OVERFLOW) until a function reset.
 *
 * Doorbell (one per batch, as for the CB ring): the driver writes the
 * descriptors, store-releases queue[q].sq_tail, issues a full fence and reads
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
#include "spyre_pci.h"

#define SPYRE_TQ_MAX_QUEUES         8u   /* TQ_COUNT <= this */
#define SPYRE_TQ_DEFAULT_GROUP_CORES 8u  /* cores per group the mock forms (the last group may be smaller) */

/* Task flags: none defined yet; every bit is reserved and must be 0. */
#define SPYRE_TASK_F_DEFINED        0u

struct spyre_task_desc {
    uint64_t task_id;         /* 0x00 opaque, echoed in the completion */
    uint64_t program_addr;    /* 0x08 program binary (spyre_program.h), function-relative, 8-aligned */
    uint64_t args_addr;       /* 0x10 table of arg_count u64 function-relative addresses, 8-aligned, inside the window */
    uint32_t program_size;    /* 0x18 bytes; 0 = the header's total_size */
    uint32_t arg_count;       /* 0x1C must equal the program's slot_count (RELOCATION) */
    uint32_t flags;           /* 0x20 SPYRE_TASK_F_*; must be 0 (RESERVED_NONZERO) */
    uint32_t reserved0;       /* 0x24 must be 0 */
    uint64_t reserved[3];     /* 0x28 must be 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_task_desc) == 64, "a task descriptor is 64 bytes");

struct spyre_task_cqe {
    uint64_t task_id;         /* 0x00 from the descriptor */
    uint64_t start_ns;        /* 0x08 device clock (CLOCK_MONOTONIC) when the core took the task */
    uint64_t end_ns;          /* 0x10 device clock when it finished */
    uint16_t status;          /* 0x18 SPYRE_ERR_*; 0 = success */
    uint16_t core;            /* 0x1A card core that ran it (or validated and refused it) */
    uint32_t reserved;        /* 0x1C 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_task_cqe) == 32, "a task completion is 32 bytes");

/* Positions of one queue in the task doorbell page, one cache line each. */
struct spyre_task_queue_words {
    uint32_t sq_tail;         uint32_t pad0[15];  /* +0x00 driver -> device */
    uint32_t cq_head;         uint32_t pad1[15];  /* +0x40 driver -> device */
    uint32_t sq_head;         uint32_t pad2[15];  /* +0x80 device -> driver: descriptors taken */
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

SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_CQ_OFFSET >= SPYRE_DEFAULT_TQ_SQ_ENTRIES * 64u, "task CQ after task SQ");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_STRIDE >= SPYRE_DEFAULT_TQ_CQ_OFFSET + SPYRE_DEFAULT_TQ_CQ_ENTRIES * 32u,
                    "task queue blocks do not overlap");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_OFFSET >= SPYRE_DEFAULT_TQ_DB_OFFSET + 4096u, "task rings after their doorbell page");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_TQ_OFFSET + SPYRE_TQ_MAX_QUEUES * SPYRE_DEFAULT_TQ_STRIDE <= (32u << 20),
                    "task queues fit BAR4");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_TQ_SQ_ENTRIES & (SPYRE_DEFAULT_TQ_SQ_ENTRIES - 1)) == 0, "power of two");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_TQ_CQ_ENTRIES & (SPYRE_DEFAULT_TQ_CQ_ENTRIES - 1)) == 0, "power of two");

#ifdef __cplusplus
#include <cstddef>
static_assert(offsetof(spyre_task_desc, task_id) == 0x00, "");
static_assert(offsetof(spyre_task_desc, program_addr) == 0x08, "");
static_assert(offsetof(spyre_task_desc, args_addr) == 0x10, "");
static_assert(offsetof(spyre_task_desc, program_size) == 0x18, "");
static_assert(offsetof(spyre_task_desc, arg_count) == 0x1C, "");
static_assert(offsetof(spyre_task_desc, flags) == 0x20, "");
static_assert(offsetof(spyre_task_desc, reserved0) == 0x24, "");
static_assert(offsetof(spyre_task_desc, reserved) == 0x28, "");
static_assert(offsetof(spyre_task_cqe, task_id) == 0x00, "");
static_assert(offsetof(spyre_task_cqe, start_ns) == 0x08, "");
static_assert(offsetof(spyre_task_cqe, end_ns) == 0x10, "");
static_assert(offsetof(spyre_task_cqe, status) == 0x18, "");
static_assert(offsetof(spyre_task_cqe, core) == 0x1A, "");
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
