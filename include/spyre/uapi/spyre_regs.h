/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: BAR map, BAR0 registers, BAR4 doorbell page and rings.
 *
 * Every function (PF and each VF) has the same three BARs:
 *   BAR0  4 MiB   register file (identity, status, ring geometry, errors, counters)
 *   BAR2  2 GiB   device-memory aperture (a window onto the function's memory)
 *   BAR4 32 MiB   doorbell page, submission ring, completion ring
 * Registers are little-endian; 32-bit registers sit on 4-byte boundaries,
 * 64-bit registers on 8-byte boundaries and must be accessed whole.
 */
#ifndef SPYRE_UAPI_SPYRE_REGS_H
#define SPYRE_UAPI_SPYRE_REGS_H

#include <stdint.h>
#include "spyre_pci.h"

/* ---- Contract identity ------------------------------------------------- */
#define SPYRE_MAGIC                 0x52595053u /* "SPYR" little-endian */
#define SPYRE_VERSION_MAJOR         3u /* 3.0: a task is a CB (OP_TASK) and completes with a spyre_cqe; 2.0: region info is VFIO's */
#define SPYRE_VERSION_MINOR         4u /* 3.4: the daemon's pid namespace in the device info; 3.3: heartbeat; 3.2: OVERLAP; 3.1: a task waits for earlier tasks of its queue (after); 1.1: task queues; 1.2: watchdog and DMA counters; 1.3: CQE phase; 1.4: ring streams */
#define SPYRE_VERSION               ((SPYRE_VERSION_MAJOR << 16) | SPYRE_VERSION_MINOR)
#define SPYRE_VERSION_GET_MAJOR(v)  ((uint32_t)(v) >> 16)
#define SPYRE_VERSION_GET_MINOR(v)  ((uint32_t)(v) & 0xFFFFu)

/* ---- BARs --------------------------------------------------------------- */
#define SPYRE_BAR_REGS              0u
#define SPYRE_BAR_MEM               2u
#define SPYRE_BAR_RING              4u
#define SPYRE_BAR0_SIZE             (4ull << 20)
#define SPYRE_BAR2_SIZE             (2ull << 30)
#define SPYRE_BAR4_SIZE             (32ull << 20)

/* ---- BAR0 register offsets ---------------------------------------------- */
/* Identity (read-only) */
#define SPYRE_REG_MAGIC             0x000u /* u32 SPYRE_MAGIC */
#define SPYRE_REG_VERSION           0x004u /* u32 major << 16 | minor */
#define SPYRE_REG_PCI_ID            0x008u /* u32 vendor | device << 16 */
#define SPYRE_REG_FUNC_ID           0x00Cu /* u32 see SPYRE_FUNC_ID_* */
#define SPYRE_REG_CAPS              0x010u /* u32 SPYRE_CAP_* opcodes supported */
/* Status and control */
#define SPYRE_REG_STATUS            0x014u /* u32 SPYRE_STATUS_* (live) */
#define SPYRE_REG_CONTROL           0x018u /* u32 SPYRE_CONTROL_* (side effects: trapped) */
#define SPYRE_REG_RESET             0x01Cu /* u32 write SPYRE_RESET_KEY (trapped) */
#define SPYRE_REG_NUM_CORES         0x020u /* u32 compute cores of the card */
#define SPYRE_REG_SCRATCH           0x024u /* u32 read/write, no side effects */
#define SPYRE_REG_DAEMON_PID        0x028u /* u32 mock only: pid of spyre-mockdev */
#define SPYRE_REG_WATCHDOG_MS       0x02Cu /* u32 bound on one CB's run time */
#define SPYRE_REG_MEM_SIZE          0x030u /* u64 bytes of device memory of this function */
#define SPYRE_REG_MEM_BASE          0x038u /* u64 card address of this function's memory */
/* Ring geometry, published by the device (read-only) */
#define SPYRE_REG_DB_OFFSET         0x040u /* u32 doorbell page offset in BAR4 */
#define SPYRE_REG_SQ_OFFSET         0x044u /* u32 submission ring offset in BAR4 */
#define SPYRE_REG_SQ_ENTRIES        0x048u /* u32 power of two */
#define SPYRE_REG_CB_SIZE           0x04Cu /* u32 bytes per submission slot */
#define SPYRE_REG_CQ_OFFSET         0x050u /* u32 completion ring offset in BAR4 */
#define SPYRE_REG_CQ_ENTRIES        0x054u /* u32 power of two, >= SQ_ENTRIES */
#define SPYRE_REG_CQE_SIZE          0x058u /* u32 bytes per completion record */
/* Ring positions, mirrored from the doorbell page (read-only, free-running u32) */
#define SPYRE_REG_SQ_HEAD           0x060u /* u32 ring slots consumed by the device (CBs and payload) */
#define SPYRE_REG_SQ_TAIL           0x064u /* u32 last doorbell value seen */
#define SPYRE_REG_CQ_HEAD           0x068u /* u32 completions consumed by the driver */
#define SPYRE_REG_CQ_TAIL           0x06Cu /* u32 completions posted by the device */
/* Error registers (latched at the first fault until cleared) */
#define SPYRE_REG_ERR_CODE          0x080u /* u32 SPYRE_ERR_*, 0 = none */
#define SPYRE_REG_ERR_OPCODE        0x084u /* u32 opcode of the faulting CB */
#define SPYRE_REG_ERR_SQ_POS        0x088u /* u32 ring position of the faulting CB */
#define SPYRE_REG_ERR_COUNT         0x08Cu /* u32 faults since reset (saturating) */
#define SPYRE_REG_ERR_ADDR          0x090u /* u64 faulting device address, if any */
#define SPYRE_REG_ERR_USER_DATA     0x098u /* u64 user_data of the faulting CB */
#define SPYRE_REG_ERR_CLEAR         0x0A0u /* u32 write 1 to clear the latch (trapped) */
/* 1.4: ring streams (spyre_cb.h) */
#define SPYRE_REG_RING_STREAMS_FAILED 0x0A8u /* u64 bit n: ring stream n failed (read-only; cleared by reset) */
/* Per-function counters (read-only u64, reset by function reset) */
#define SPYRE_REG_CNT_CB_DONE       0x100u /* CBs completed successfully */
#define SPYRE_REG_CNT_CB_ERRORS     0x108u /* CBs completed with an error */
#define SPYRE_REG_CNT_NOPS          0x110u
#define SPYRE_REG_CNT_LAUNCHES      0x118u
#define SPYRE_REG_CNT_COPIES        0x120u
#define SPYRE_REG_CNT_COPY_BYTES    0x128u
#define SPYRE_REG_CNT_DOORBELLS     0x130u /* batches picked up from the doorbell */
#define SPYRE_REG_CNT_WAKEUPS       0x138u /* times the device left its sleep */
#define SPYRE_REG_CNT_IRQS          0x140u /* completion interrupts raised */
#define SPYRE_REG_CNT_BUSY_NS       0x148u /* time spent executing CBs */
#define SPYRE_REG_CNT_RESETS        0x150u /* survives reset */
/* 1.2: what a monitor (spyre-smi) needs beside the above */
#define SPYRE_REG_CNT_WATCHDOG      0x158u /* CBs and tasks stopped by the watchdog */
#define SPYRE_REG_CNT_DMA_TO_DEV_BYTES   0x160u /* bytes the DMA engine moved host -> device */
#define SPYRE_REG_CNT_DMA_FROM_DEV_BYTES 0x168u /* bytes the DMA engine moved device -> host */
#define SPYRE_REG_CNT_DMA_BUSY_NS   0x170u /* time with at least one DMA transfer in flight */
#define SPYRE_REG_COUNTERS_END      0x178u
/*
 * Memory region table: the device grants large regions of the function's
 * memory to its owner (the allocator reserves its pool this way). Bases are
 * function-relative device addresses. Write REGION_ARG (mapped is fine), then
 * REGION_CMD (trapped); the command is done when the write returns, with
 * REGION_RESULT and, for ALLOC, REGION_INDEX set. The table is emptied when
 * the device node changes owner (open and last close), not by a reset.
 */
#define SPYRE_REG_REGION_CMD        0x200u /* u32 SPYRE_REGION_CMD_* (trapped) */
#define SPYRE_REG_REGION_ARG        0x204u /* u32 ALLOC: size in MiB; FREE: index */
#define SPYRE_REG_REGION_RESULT     0x208u /* u32 SPYRE_REGION_E*, 0 = done */
#define SPYRE_REG_REGION_INDEX      0x20Cu /* u32 entry granted by the last ALLOC */
#define SPYRE_REG_REGION_MAX        0x210u /* u32 table entries */
#define SPYRE_REG_REGION_COUNT      0x214u /* u32 entries in use */
#define SPYRE_REG_REGION_ALIGN      0x218u /* u32 base and size alignment in bytes */
#define SPYRE_REG_REGION_LARGEST    0x220u /* u64 largest region ALLOC could grant now */
#define SPYRE_REG_REGION_GRANTABLE  0x228u /* u64 memory the device may grant this function */
#define SPYRE_REG_REGION_TABLE      0x240u /* SPYRE_REGION_MAX_ENTRIES x { u64 base; u64 size } */
#define SPYRE_REG_REGION_BASE(i)    (SPYRE_REG_REGION_TABLE + 16u * (i))
#define SPYRE_REG_REGION_SIZE(i)    (SPYRE_REG_REGION_TABLE + 16u * (i) + 8u) /* 0 = unused */
#define SPYRE_REGION_MAX_ENTRIES    16u
#define SPYRE_REGION_ALIGN          (2u << 20)

#define SPYRE_REGION_CMD_ALLOC      1u
#define SPYRE_REGION_CMD_FREE       2u
#define SPYRE_REGION_CMD_FREE_ALL   3u

#define SPYRE_REGION_OK             0u
#define SPYRE_REGION_ENOSPC         1u /* no free block of that size */
#define SPYRE_REGION_EFULL          2u /* every table entry is in use */
#define SPYRE_REGION_EINVAL         3u /* size 0, bad index, unknown command */

/*
 * Task queues (spyre_task.h): geometry published by the device (read-only),
 * per-queue halt bits and counters. One queue per core group.
 */
#define SPYRE_REG_TQ_COUNT          0x400u /* u32 task queues = core groups, <= SPYRE_TQ_MAX_QUEUES */
#define SPYRE_REG_TQ_DB_OFFSET      0x404u /* u32 task doorbell page offset in BAR4 */
#define SPYRE_REG_TQ_OFFSET         0x408u /* u32 queue 0's block (SQ, then CQ) in BAR4 */
#define SPYRE_REG_TQ_STRIDE         0x40Cu /* u32 bytes from one queue's block to the next */
#define SPYRE_REG_TQ_SQ_ENTRIES     0x410u /* u32 power of two; the SQ starts its block */
#define SPYRE_REG_TQ_DESC_SIZE      0x414u /* u32 bytes per SQ entry: a spyre_cb, 64 */
#define SPYRE_REG_TQ_CQ_OFFSET      0x418u /* u32 CQ offset inside a queue's block */
#define SPYRE_REG_TQ_CQ_ENTRIES     0x41Cu /* u32 power of two */
#define SPYRE_REG_TQ_CQE_SIZE       0x420u /* u32 bytes per CQ entry: a spyre_cqe, 32 */
#define SPYRE_REG_TQ_HALTED         0x424u /* u32 bit q: queue q halted (ring overflow); reset to recover */
#define SPYRE_REG_TQ_GROUP_CORES(q) (0x440u + 4u * (q)) /* u32 cores of group q (runs queue q's tasks) */
#define SPYRE_REG_CNT_TASKS_DONE    0x480u /* u64 tasks completed successfully */
#define SPYRE_REG_CNT_TASK_ERRORS   0x488u /* u64 tasks completed with an error */
#define SPYRE_REG_CNT_TASK_DOORBELLS 0x490u /* u64 task batches picked up */
#define SPYRE_REG_CNT_TASK_BUSY_NS  0x498u /* u64 core time spent in tasks */
#define SPYRE_REG_TQ_END            0x4A0u

#define SPYRE_REG_FILE_SIZE         0x1000u /* registers live in the first 4 KiB */

/* SPYRE_REG_FUNC_ID fields */
#define SPYRE_FUNC_ID_INDEX_MASK    0x0000FFFFu /* 0 = PF, n = VF n */
#define SPYRE_FUNC_ID_CARD_SHIFT    16u
#define SPYRE_FUNC_ID_CARD_MASK     0x7FFF0000u
#define SPYRE_FUNC_ID_IS_VF         0x80000000u

/* SPYRE_REG_CAPS bits: which CB opcodes this device executes. */
#define SPYRE_CAP_NOP               (1u << 0)
#define SPYRE_CAP_LAUNCH            (1u << 1)
#define SPYRE_CAP_CORRECTION        (1u << 2)
#define SPYRE_CAP_COPY              (1u << 3)
#define SPYRE_CAP_COPY_INLINE       (1u << 4)
#define SPYRE_CAP_SEMAPHORE         (1u << 5)
#define SPYRE_CAP_TASKS             (1u << 6) /* task queues (spyre_task.h) */
#define SPYRE_CAP_CQE_PHASE         (1u << 7) /* CQEs carry their lap's phase (spyre_cb.h) */
#define SPYRE_CAP_RING_STREAMS      (1u << 8) /* CBs carry a ring stream (spyre_cb.h) */

/* SPYRE_REG_STATUS bits */
#define SPYRE_STATUS_READY          (1u << 0) /* device model alive */
#define SPYRE_STATUS_RING_ENABLED   (1u << 1) /* submission ring is being served */
#define SPYRE_STATUS_BUSY           (1u << 2) /* a CB is executing */
#define SPYRE_STATUS_ERROR          (1u << 3) /* ERR_CODE latched */
#define SPYRE_STATUS_SLEEPING       (1u << 4) /* ring server is parked on the doorbell futex */
#define SPYRE_STATUS_RESETTING      (1u << 5)
#define SPYRE_STATUS_HALTED         (1u << 6) /* ring stopped by a fatal ring error; reset to recover */

/* SPYRE_REG_CONTROL bits */
#define SPYRE_CONTROL_RING_ENABLE   (1u << 0)

/* SPYRE_REG_RESET: writing this key resets the function (ring, errors, counters). */
#define SPYRE_RESET_KEY             0x52534554u /* "RSET" */

/* ---- BAR4: doorbell page ------------------------------------------------ */
/*
 * One 4 KiB page mapped by both sides. Each word sits on its own cache line.
 * Indices are free-running u32 counters; slot = index & (entries - 1).
 *
 * Submission: the driver writes CBs into the SQ, then store-releases sq_tail,
 * issues a full fence and reads device_sleeping; only if it is 1 does it
 * futex-wake sq_tail. The device sets device_sleeping = 1, fences, re-reads
 * sq_tail and only then futex-waits on sq_tail (EventIdx idea of NVMe).
 *
 * Completion: the device writes CQEs, store-releases cq_tail, fences,
 * increments irq_seq and futex-wakes irq_seq if irq_waiters != 0. A waiting
 * driver increments irq_waiters, fences, reads irq_seq, re-checks cq_tail and
 * then futex-waits on irq_seq. The driver returns ring space by writing cq_head.
 */
struct spyre_doorbell_page {
    uint32_t sq_tail;          uint32_t pad0[15];  /* 0x000 driver -> device */
    uint32_t cq_head;          uint32_t pad1[15];  /* 0x040 driver -> device */
    uint32_t irq_waiters;      uint32_t pad2[15];  /* 0x080 driver -> device */
    uint32_t sq_head;          uint32_t pad3[15];  /* 0x0C0 device -> driver */
    uint32_t cq_tail;          uint32_t pad4[15];  /* 0x100 device -> driver */
    uint32_t irq_seq;          uint32_t pad5[15];  /* 0x140 device -> driver (futex word) */
    uint32_t device_sleeping;  uint32_t pad6[15];  /* 0x180 device -> driver */
    uint32_t device_state;     uint32_t pad7[15];  /* 0x1C0 SPYRE_DEVSTATE_* */
    uint32_t heartbeat;        uint32_t pad8[15];  /* 0x200 device -> driver (3.3) */
    uint8_t  reserved[4096 - 0x240];
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_doorbell_page) == 4096, "doorbell page is 4 KiB");

#define SPYRE_DB_SQ_TAIL            0x000u
#define SPYRE_DB_CQ_HEAD            0x040u
#define SPYRE_DB_IRQ_WAITERS        0x080u
#define SPYRE_DB_SQ_HEAD            0x0C0u
#define SPYRE_DB_CQ_TAIL            0x100u
#define SPYRE_DB_IRQ_SEQ            0x140u
#define SPYRE_DB_DEVICE_SLEEPING    0x180u
#define SPYRE_DB_DEVICE_STATE       0x1C0u
#define SPYRE_DB_HEARTBEAT          0x200u

/* device_state: lets a driver tell a live device from one that went away. */
#define SPYRE_DEVSTATE_ALIVE        0x414C4956u /* "VILA" */
#define SPYRE_DEVSTATE_GONE         0x454E4F47u /* "GONE": daemon shut down */

/* heartbeat (3.3): a live device adds one to it at least every
 * SPYRE_HEARTBEAT_PERIOD_MS, whatever its queues are doing, so a driver can
 * tell a device that stopped (a stopped or hung device model, a wedged card)
 * from one that is busy. How long a still heartbeat means "not responding"
 * is the driver's choice (many periods: a loaded host delays the beat). */
#define SPYRE_HEARTBEAT_PERIOD_MS   100u

/* Default geometry the mock device publishes; drivers must read the registers. */
#define SPYRE_DEFAULT_DB_OFFSET     0x000000u
#define SPYRE_DEFAULT_SQ_OFFSET     0x100000u
#define SPYRE_DEFAULT_SQ_ENTRIES    4096u
#define SPYRE_DEFAULT_CQ_OFFSET     0x200000u
#define SPYRE_DEFAULT_CQ_ENTRIES    4096u

/* Ring index math shared by both sides: positions are free-running u32
 * counters that wrap at 2^32; entries is a power of two. */
static inline uint32_t spyre_ring_slot(uint32_t pos, uint32_t entries) { return pos & (entries - 1u); }
static inline uint32_t spyre_ring_used(uint32_t head, uint32_t tail) { return tail - head; }
static inline uint32_t spyre_ring_free(uint32_t head, uint32_t tail, uint32_t entries) {
    return entries - spyre_ring_used(head, tail);
}
/* True when tail is a position the producer may legally have reached. */
static inline int spyre_ring_valid(uint32_t head, uint32_t tail, uint32_t entries) {
    return spyre_ring_used(head, tail) <= entries;
}

#ifdef __cplusplus
#include <cstddef>
static_assert(offsetof(spyre_doorbell_page, sq_tail) == SPYRE_DB_SQ_TAIL, "");
static_assert(offsetof(spyre_doorbell_page, cq_head) == SPYRE_DB_CQ_HEAD, "");
static_assert(offsetof(spyre_doorbell_page, irq_waiters) == SPYRE_DB_IRQ_WAITERS, "");
static_assert(offsetof(spyre_doorbell_page, sq_head) == SPYRE_DB_SQ_HEAD, "");
static_assert(offsetof(spyre_doorbell_page, cq_tail) == SPYRE_DB_CQ_TAIL, "");
static_assert(offsetof(spyre_doorbell_page, irq_seq) == SPYRE_DB_IRQ_SEQ, "");
static_assert(offsetof(spyre_doorbell_page, device_sleeping) == SPYRE_DB_DEVICE_SLEEPING, "");
static_assert(offsetof(spyre_doorbell_page, device_state) == SPYRE_DB_DEVICE_STATE, "");
static_assert(offsetof(spyre_doorbell_page, heartbeat) == SPYRE_DB_HEARTBEAT, "");
#endif

/* Register blocks must not overlap and must stay inside the register file. */
SPYRE_STATIC_ASSERT(SPYRE_REG_MEM_BASE + 8 <= SPYRE_REG_DB_OFFSET, "identity block overlaps ring block");
SPYRE_STATIC_ASSERT(SPYRE_REG_CQ_TAIL + 4 <= SPYRE_REG_ERR_CODE, "ring block overlaps error block");
SPYRE_STATIC_ASSERT(SPYRE_REG_ERR_CLEAR + 4 <= SPYRE_REG_CNT_CB_DONE, "error block overlaps counters");
SPYRE_STATIC_ASSERT(SPYRE_REG_COUNTERS_END <= 0x200u, "counters overlap the region table");
SPYRE_STATIC_ASSERT(SPYRE_REG_REGION_GRANTABLE + 8 <= SPYRE_REG_REGION_TABLE, "region registers overlap the table");
SPYRE_STATIC_ASSERT(SPYRE_REG_REGION_TABLE % 16 == 0, "region entries are 16-byte aligned");
SPYRE_STATIC_ASSERT(SPYRE_REG_REGION_BASE(SPYRE_REGION_MAX_ENTRIES) <= 0x400u, "region table fits below 0x400");
SPYRE_STATIC_ASSERT(SPYRE_REG_REGION_BASE(SPYRE_REGION_MAX_ENTRIES) <= SPYRE_REG_TQ_COUNT, "task queue registers after the region table");
SPYRE_STATIC_ASSERT(SPYRE_REG_TQ_HALTED + 4 <= SPYRE_REG_TQ_GROUP_CORES(0), "task geometry overlaps group table");
SPYRE_STATIC_ASSERT(SPYRE_REG_TQ_GROUP_CORES(8) <= SPYRE_REG_CNT_TASKS_DONE, "group table overlaps task counters");
SPYRE_STATIC_ASSERT(SPYRE_REG_CNT_TASKS_DONE % 8 == 0 && SPYRE_REG_TQ_END <= SPYRE_REG_FILE_SIZE, "task counters");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_CQ_OFFSET + SPYRE_DEFAULT_CQ_ENTRIES * 32u <= 0x300000u, "CB rings end before the task doorbell page");
SPYRE_STATIC_ASSERT(SPYRE_REG_MEM_SIZE % 8 == 0 && SPYRE_REG_MEM_BASE % 8 == 0, "u64 registers are 8-aligned");
SPYRE_STATIC_ASSERT(SPYRE_REG_ERR_ADDR % 8 == 0 && SPYRE_REG_ERR_USER_DATA % 8 == 0, "u64 registers are 8-aligned");
SPYRE_STATIC_ASSERT(SPYRE_REG_CNT_CB_DONE % 8 == 0, "counters are 8-aligned");
SPYRE_STATIC_ASSERT(SPYRE_REG_CNT_WATCHDOG == SPYRE_REG_CNT_RESETS + 8, "1.2 counters follow CNT_RESETS");
SPYRE_STATIC_ASSERT(SPYRE_REG_CNT_DMA_TO_DEV_BYTES == SPYRE_REG_CNT_WATCHDOG + 8 &&
                        SPYRE_REG_CNT_DMA_FROM_DEV_BYTES == SPYRE_REG_CNT_DMA_TO_DEV_BYTES + 8 &&
                        SPYRE_REG_CNT_DMA_BUSY_NS == SPYRE_REG_CNT_DMA_FROM_DEV_BYTES + 8 &&
                        SPYRE_REG_COUNTERS_END == SPYRE_REG_CNT_DMA_BUSY_NS + 8,
                    "1.2 counters are packed 8-aligned u64s");
SPYRE_STATIC_ASSERT(SPYRE_REG_FILE_SIZE <= SPYRE_BAR0_SIZE, "register file fits BAR0");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_SQ_OFFSET >= SPYRE_DEFAULT_DB_OFFSET + 4096u, "SQ after doorbell page");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_CQ_OFFSET >= SPYRE_DEFAULT_SQ_OFFSET + SPYRE_DEFAULT_SQ_ENTRIES * 64u, "CQ after SQ");
SPYRE_STATIC_ASSERT(SPYRE_DEFAULT_CQ_OFFSET + SPYRE_DEFAULT_CQ_ENTRIES * 32u <= SPYRE_BAR4_SIZE, "rings fit BAR4");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_SQ_ENTRIES & (SPYRE_DEFAULT_SQ_ENTRIES - 1)) == 0, "SQ entries power of two");
SPYRE_STATIC_ASSERT((SPYRE_DEFAULT_CQ_ENTRIES & (SPYRE_DEFAULT_CQ_ENTRIES - 1)) == 0, "CQ entries power of two");

#endif /* SPYRE_UAPI_SPYRE_REGS_H */
