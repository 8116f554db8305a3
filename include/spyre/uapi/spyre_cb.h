/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: control blocks (CBs) and completion records (CQEs).
 *
 * The device has one submission format and one completion format (contract
 * 3.0): every queue takes 64-byte spyre_cb slots and answers each CB with one
 * 32-byte spyre_cqe. The CB ring (below) runs its CBs one at a time in ring
 * order; the task queues (spyre_task.h) run SPYRE_OP_TASK CBs many at once and
 * complete them in the order they finish. A queue refuses an opcode that
 * belongs to the other kind with SPYRE_ERR_WRONG_QUEUE: the ring refuses TASK,
 * a task queue every opcode but TASK and NOP.
 *
 * On the CB ring a CB is one slot, followed by inline payload slots for
 * COPY_INLINE. The device copies the CB (and its payload) out of the ring
 * before validating it, validates every field (opcode, reserved bytes, slot
 * count, addresses) and answers every CB with exactly one CQE, in ring order.
 * A CB that fails validation gets an error CQE and latches the error
 * registers; the device then goes on with the next CB.
 *
 * Ring framing. The device reads `slots` of the CB at sq_head first. If
 * 1 <= slots <= SPYRE_CB_MAX_SLOTS and slots <= sq_tail - sq_head (so the
 * driver must publish a CB and its payload with one sq_tail store), the CB
 * occupies `slots` ring slots: the CB at sq_head, its payload at sq_head + 1
 * .. sq_head + slots - 1 (positions wrap at the ring end like any position).
 * Otherwise the CB occupies exactly 1 slot and completes with
 * SPYRE_ERR_BAD_SLOT_COUNT without being executed. Either way the CB gets one
 * CQE whose sq_pos is its first slot, and sq_head moves past its slots.
 * Validation then requires slots == 1 for every opcode but COPY_INLINE, and
 * slots == SPYRE_CB_INLINE_SLOTS(size) for COPY_INLINE (BAD_SLOT_COUNT).
 *
 * Linked CBs. SPYRE_CB_F_LINK on a CB says the next CB in the ring depends on
 * it: if the CB fails (any status but NONE, CANCELED included), the next CB is
 * not executed and completes with SPYRE_ERR_CANCELED (result 0, user_data and
 * opcode as read). A cancelled CB that carries LINK itself cancels its
 * successor, so one failure cancels the rest of a chain; the chain ends at the
 * first CB without LINK, and the CB after it runs normally. The state carries
 * over doorbells (a chain may be submitted in pieces) and is cleared by a
 * function reset. The device looks at bit 0 of flags of every CB, even one
 * that fails framing or validation. A cancelled CB is framed as usual (its
 * payload slots are consumed) but not validated; it counts in CNT_CB_ERRORS
 * but does not latch the error registers or ERR_COUNT.
 *
 * CQE phase (contract 1.3, SPYRE_CAP_CQE_PHASE). The device writes a CQE's
 * first 31 bytes, then its `phase` byte with a release store, then cq_tail.
 * Bit 0 of phase is spyre_cqe_phase(position): 1 on the CQ's first lap after
 * a reset (positions 0 .. cq_entries - 1), 0 on the second, and so on; the
 * other bits are 0. A reset zeroes the CQ, so a slot the device has not
 * written in this lap never shows the lap's phase. A driver may therefore
 * poll the CQE at its cq_head instead of cq_tail: the notice travels in the
 * line that carries the completion (NVMe's phase tag). cq_tail and the
 * interrupt are published as before, for waiters that sleep.
 *
 * Ring streams (contract 1.4, SPYRE_CAP_RING_STREAMS). LINK orders a chain
 * only while nothing else sits between its CBs; a host that runs several
 * streams of work through the one ring needs a failure of one stream to stop
 * that stream's later CBs, wherever they sit. SPYRE_CB_F_STREAM puts a CB in
 * ring stream `stream` (0 .. SPYRE_RING_STREAMS - 1). The device keeps one
 * failed bit per ring stream (register RING_STREAMS_FAILED). A CB of a stream
 * whose bit is set is not executed: it completes with SPYRE_ERR_CANCELED like
 * a LINK cancellation (it does not latch the error registers). A CB of a
 * stream that completes with any status but NONE, CANCELED included, sets its
 * stream's bit. SPYRE_CB_F_STREAM_RESTART (only with F_STREAM) clears the bit
 * before the CB is looked at: the host sets it on a stream's first CB once it
 * has seen the failure. LINK works as before beside it. A function reset
 * clears every bit. `stream` must be 0 without F_STREAM, and below
 * SPYRE_RING_STREAMS with it (else RESERVED_NONZERO, no bit touched).
 */
#ifndef SPYRE_UAPI_SPYRE_CB_H
#define SPYRE_UAPI_SPYRE_CB_H

#include <stdint.h>
#include "spyre_pci.h"

/* Opcodes. 0 is never valid, so a zeroed slot is caught as garbage. */
#define SPYRE_OP_NOP                0x01u /* no effect; completes with result 0 */
#define SPYRE_OP_LAUNCH             0x10u /* run a resident program */
#define SPYRE_OP_CORRECT            0x11u /* program correction: patch a program's relocations */
#define SPYRE_OP_COPY               0x20u /* device-to-device copy */
#define SPYRE_OP_COPY_INLINE        0x21u /* host data carried in the following ring slots */
#define SPYRE_OP_SEM_WRITE          0x30u /* write a value to device memory */
#define SPYRE_OP_SEM_WAIT           0x31u /* wait until device memory holds a value */
#define SPYRE_OP_TASK               0x40u /* 3.0: a task, task queues only (spyre_task.h) */

/* CB flags. Bits not defined here are reserved and must be 0 (RESERVED_NONZERO). */
#define SPYRE_CB_F_LINK             (1u << 0) /* next CB runs only if this one succeeds, else CANCELED */
#define SPYRE_CB_F_STREAM           (1u << 1) /* 1.4: the CB belongs to ring stream `stream` */
#define SPYRE_CB_F_STREAM_RESTART   (1u << 2) /* 1.4: clear the stream's failed bit first */
#define SPYRE_CB_F_DEFINED          (SPYRE_CB_F_LINK | SPYRE_CB_F_STREAM | SPYRE_CB_F_STREAM_RESTART)

/* Ring streams a function tracks (bits of RING_STREAMS_FAILED). */
#define SPYRE_RING_STREAMS          64u

/* Bytes of one ring slot: a CB or a slot of inline payload. */
#define SPYRE_CB_SLOT_BYTES         64u

/* Largest number of ring slots one CB may occupy (itself plus inline payload). */
#define SPYRE_CB_MAX_SLOTS          64u

/* COPY_INLINE: u.copy.src_addr = 0, u.copy.dst_addr = device address,
 * u.copy.size = 1..SPYRE_CB_INLINE_MAX_BYTES; the payload fills the next
 * ceil(size / 64) slots (bytes past size in the last slot are ignored). */
#define SPYRE_CB_INLINE_MAX_BYTES   ((SPYRE_CB_MAX_SLOTS - 1u) * SPYRE_CB_SLOT_BYTES) /* 4032 */
#define SPYRE_CB_INLINE_SLOTS(size) (1u + ((uint32_t)(size) + SPYRE_CB_SLOT_BYTES - 1u) / SPYRE_CB_SLOT_BYTES)

/* Device addresses in CBs are function-relative (offsets into the
 * function's memory window [0, MEM_SIZE)); reserved words must be 0. */
struct spyre_cb_launch {
    uint64_t program_addr;    /* device address of the program binary (spyre_program.h), 8-aligned */
    uint64_t program_size;    /* bytes; must equal the program's total_size; 0 = take it from the header */
    uint64_t reserved[4];
};

/* The direct form of a program's CORRECT op: patch the target program's
 * relocations from a table of entry_count u64 device addresses. */
struct spyre_cb_correct {
    uint64_t target_addr;     /* program whose relocation slots are patched, 8-aligned */
    uint64_t input_addr;      /* address table written by the host, 8-aligned */
    uint64_t entry_count;     /* table entries: the target's slot_count */
    uint64_t reserved[3];
};

struct spyre_cb_copy {
    uint64_t src_addr;
    uint64_t dst_addr;
    uint64_t size;            /* bytes; ranges may overlap (memmove); for COPY_INLINE the payload follows in the ring */
    uint64_t reserved[3];
};

struct spyre_cb_sem {
    uint64_t addr;            /* 8-byte aligned device address of a u64 */
    uint64_t value;           /* SEM_WRITE: stored (release); SEM_WAIT: awaited (acquire) */
    uint64_t timeout_ns;      /* SEM_WAIT only (0 = the watchdog bound); 0 for SEM_WRITE */
    uint64_t reserved[3];
};

/* A task (task queues only, spyre_task.h): a program already in device
 * memory run on one core with its own argument table. The task's id is the
 * CB's user_data. 3.1: it may wait for up to SPYRE_TASK_MAX_AFTER earlier
 * tasks of its own queue, named by submission position (spyre_task.h,
 * "Waiting on earlier tasks"). */
#define SPYRE_TASK_MAX_AFTER 4u
struct spyre_cb_task {
    uint64_t program_addr;    /* program binary (spyre_program.h), 8-aligned */
    uint64_t args_addr;       /* table of arg_count u64 device addresses, 8-aligned, inside the window */
    uint32_t program_size;    /* bytes; 0 = the header's total_size */
    uint32_t arg_count;       /* must equal the program's slot_count (RELOCATION) */
    uint32_t after_count;     /* 3.1: how many of after[] it waits for, <= SPYRE_TASK_MAX_AFTER */
    uint32_t after[SPYRE_TASK_MAX_AFTER]; /* 3.1: sq positions of earlier tasks of this queue; unused ones 0 */
    uint32_t reserved;        /* must be 0 */
};

struct spyre_cb {
    uint8_t  opcode;          /* 0x00 SPYRE_OP_* */
    uint8_t  flags;           /* 0x01 SPYRE_CB_F_*; other bits must be 0 */
    uint16_t slots;           /* 0x02 ring slots used, >= 1 (1 unless inline payload) */
    uint32_t stream;          /* 0x04 with SPYRE_CB_F_STREAM: its ring stream; else 0 */
    uint64_t user_data;       /* 0x08 echoed in the CQE */
    union {                   /* 0x10 */
        uint64_t args[6];
        struct spyre_cb_launch  launch;
        struct spyre_cb_correct correct;
        struct spyre_cb_copy    copy;
        struct spyre_cb_sem     sem;
        struct spyre_cb_task    task;
    } u;
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb) == 64, "a CB is one 64-byte slot");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb_launch) == 48, "CB payload is 48 bytes");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb_correct) == 48, "CB payload is 48 bytes");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb_copy) == 48, "CB payload is 48 bytes");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb_sem) == 48, "CB payload is 48 bytes");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb_task) == 48, "CB payload is 48 bytes");
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cb) == SPYRE_CB_SLOT_BYTES, "a ring slot holds one CB");
SPYRE_STATIC_ASSERT(SPYRE_CB_INLINE_MAX_BYTES == 4032u, "inline payload fills at most 63 slots");
SPYRE_STATIC_ASSERT(SPYRE_CB_INLINE_SLOTS(SPYRE_CB_INLINE_MAX_BYTES) == SPYRE_CB_MAX_SLOTS, "largest inline CB fills SPYRE_CB_MAX_SLOTS");
SPYRE_STATIC_ASSERT(SPYRE_CB_INLINE_SLOTS(1) == 2 && SPYRE_CB_INLINE_SLOTS(64) == 2 && SPYRE_CB_INLINE_SLOTS(65) == 3, "inline slot math");

struct spyre_cqe {
    uint64_t user_data;       /* 0x00 from the CB */
    uint64_t result;          /* 0x08 opcode-specific (bytes moved, value seen; a task's run time and core) */
    uint64_t timestamp_ns;    /* 0x10 device clock (CLOCK_MONOTONIC) at completion */
    uint32_t sq_pos;          /* 0x18 free-running ring position of the CB */
    uint16_t status;          /* 0x1C SPYRE_ERR_*; 0 = success */
    uint8_t  opcode;          /* 0x1E opcode of the CB (as read) */
    uint8_t  phase;           /* 0x1F bit 0: spyre_cqe_phase of the CQE's position, written last */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_cqe) == 32, "a CQE is 32 bytes");

/* The phase a CQE at free-running position `cq_pos` carries (entries is a
 * power of two, so the phase also alternates across the u32 wrap). */
static inline uint8_t spyre_cqe_phase(uint32_t cq_pos, uint32_t cq_entries) {
    return (uint8_t)(((cq_pos / cq_entries) & 1u) ^ 1u);
}
#define SPYRE_CQE_PHASE_OFFSET      0x1Fu

#ifdef __cplusplus
#include <cstddef>
static_assert(offsetof(spyre_cb, opcode) == 0x00, "");
static_assert(offsetof(spyre_cb, flags) == 0x01, "");
static_assert(offsetof(spyre_cb, slots) == 0x02, "");
static_assert(offsetof(spyre_cb, stream) == 0x04, "");
static_assert(offsetof(spyre_cb, user_data) == 0x08, "");
static_assert(offsetof(spyre_cb, u) == 0x10, "");
static_assert(offsetof(spyre_cb, u.task.program_addr) == 0x10, "");
static_assert(offsetof(spyre_cb, u.task.args_addr) == 0x18, "");
static_assert(offsetof(spyre_cb, u.task.program_size) == 0x20, "");
static_assert(offsetof(spyre_cb, u.task.arg_count) == 0x24, "");
static_assert(offsetof(spyre_cb, u.task.after_count) == 0x28, "");
static_assert(offsetof(spyre_cb, u.task.after) == 0x2C, "");
static_assert(offsetof(spyre_cb, u.task.reserved) == 0x3C, "");
static_assert(offsetof(spyre_cqe, user_data) == 0x00, "");
static_assert(offsetof(spyre_cqe, result) == 0x08, "");
static_assert(offsetof(spyre_cqe, timestamp_ns) == 0x10, "");
static_assert(offsetof(spyre_cqe, sq_pos) == 0x18, "");
static_assert(offsetof(spyre_cqe, status) == 0x1C, "");
static_assert(offsetof(spyre_cqe, opcode) == 0x1E, "");
static_assert(offsetof(spyre_cqe, phase) == SPYRE_CQE_PHASE_OFFSET, "");
#endif

#endif /* SPYRE_UAPI_SPYRE_CB_H */
