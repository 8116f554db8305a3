/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: the statistics a function publishes to monitors.
 *
 * Every function has two read-only attributes beside its registers:
 *   stats       "name value" lines, for people
 *   stats.json  one JSON object, for programs (spyre-smi): the same counters
 *               plus the granted regions and the error registers, with
 *               addresses only for the holder (docs/security.md)
 * Both list the counters below, in this order, with these names. A reader
 * checks "schema" and "version" before it reads anything else; the version
 * changes whenever a field is renamed, removed or changes meaning (adding a
 * field does not change it). The JSON layout is in docs/mockdev.md.
 */
#ifndef SPYRE_UAPI_SPYRE_STATS_H
#define SPYRE_UAPI_SPYRE_STATS_H

#include "spyre_regs.h"
#include "spyre_task.h"

#define SPYRE_STATS_ATTR            "stats"
#define SPYRE_STATS_JSON_ATTR       "stats.json"
#define SPYRE_STATS_JSON_SCHEMA     "spyre-stats"
#define SPYRE_STATS_JSON_VERSION    1

/*
 * X(name, register): each 64-bit counter register under its stats name.
 * Keep one entry per line: tools read this list from the header.
 */
#define SPYRE_STATS_COUNTERS(X) \
    X(cb_done, SPYRE_REG_CNT_CB_DONE) \
    X(cb_errors, SPYRE_REG_CNT_CB_ERRORS) \
    X(nops, SPYRE_REG_CNT_NOPS) \
    X(launches, SPYRE_REG_CNT_LAUNCHES) \
    X(copies, SPYRE_REG_CNT_COPIES) \
    X(copy_bytes, SPYRE_REG_CNT_COPY_BYTES) \
    X(doorbells, SPYRE_REG_CNT_DOORBELLS) \
    X(wakeups, SPYRE_REG_CNT_WAKEUPS) \
    X(irqs, SPYRE_REG_CNT_IRQS) \
    X(busy_ns, SPYRE_REG_CNT_BUSY_NS) \
    X(resets, SPYRE_REG_CNT_RESETS) \
    X(tasks_done, SPYRE_REG_CNT_TASKS_DONE) \
    X(task_errors, SPYRE_REG_CNT_TASK_ERRORS) \
    X(task_doorbells, SPYRE_REG_CNT_TASK_DOORBELLS) \
    X(task_busy_ns, SPYRE_REG_CNT_TASK_BUSY_NS) \
    X(watchdog, SPYRE_REG_CNT_WATCHDOG) \
    X(dma_to_device_bytes, SPYRE_REG_CNT_DMA_TO_DEV_BYTES) \
    X(dma_from_device_bytes, SPYRE_REG_CNT_DMA_FROM_DEV_BYTES) \
    X(dma_busy_ns, SPYRE_REG_CNT_DMA_BUSY_NS)

#ifdef __cplusplus
/* The same list as a table: each counter's stats name and register. */
struct spyre_stats_counter {
    const char* name;
    uint32_t reg;
};
#define SPYRE_STATS_COUNTER_ROW(name, reg) {#name, reg},
inline constexpr spyre_stats_counter spyre_stats_counters[] = {SPYRE_STATS_COUNTERS(SPYRE_STATS_COUNTER_ROW)};
#undef SPYRE_STATS_COUNTER_ROW
#endif

#endif /* SPYRE_UAPI_SPYRE_STATS_H */
