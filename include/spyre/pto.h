/* SPDX-License-Identifier: Apache-2.0 */
/* The orchestration runtime's C API (seed 004): dynamic task submission with
 * automatic dependencies. Names and argument order are the seed's; calls that
 * can fail return a negative errno (or NULL) and leave a message that
 * pto_last_error() returns on the same thread. Nothing here aborts the
 * process and no C++ exception crosses this API. docs/orchestration.md
 * explains the design.
 *
 * What a buffer (`void*`) is: an address inside the function's memory as this
 * process maps it (the host mapping of the function's device memory). Pointer
 * arithmetic therefore selects regions, host workers read and write the data
 * directly, and the caller reads results through the same pointer. A pointer
 * outside the function's memory is refused with -EINVAL. */
#ifndef SPYRE_PTO_H
#define SPYRE_PTO_H

#include <stddef.h>
#include <stdint.h>
#include "spyre/export.h"

SPYRE_API_BEGIN

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Runtime Runtime;

/* TaskParam kinds. INOUT reads and writes the region (an accumulation). */
enum { PARAM_INPUT = 0, PARAM_OUTPUT = 1, PARAM_INOUT = 2 };

/* Worker types: which workers run a task. CUBE and VECTOR are the card's
 * core kinds; HOST runs the kernel as a callback on a host worker thread;
 * EXTERNAL tasks are run by nobody: the caller finishes them with
 * pto_task_complete (or pto_task_fail); their kernel id must still be
 * registered (it names them in failures and traces: -EINVAL otherwise). Without a device executor plugged in
 * (C++ Orchestrator::SetExecutor), CUBE and VECTOR tasks run on the host
 * worker too. */
enum { WORKER_CUBE = 0, WORKER_VECTOR = 1, WORKER_HOST = 2, WORKER_EXTERNAL = 3, PTO_WORKER_TYPES = 4 };

/* A task's state (pto_task_state). A task on an executor is READY from
 * the moment it is queued until it completes; EXTERNAL tasks whose inputs
 * are done are RUNNING. Reclaimed tasks read as CONSUMED. */
enum { PTO_TASK_PENDING = 1, PTO_TASK_READY = 2, PTO_TASK_RUNNING = 3, PTO_TASK_COMPLETED = 4, PTO_TASK_CONSUMED = 5 };

/* At most this many parameters per task. */
#define PTO_MAX_PARAMS 16

typedef struct TaskRegion {
    void* buffer_ptr;
    uint64_t offset;
    uint64_t size;
} TaskRegion;

/* Both of the seed's spellings work in C:
 *   {PARAM_INPUT, A, 1024}                                 buffer + size
 *   {PARAM_OUTPUT, .region = {.buffer_ptr = C_tile, .offset = 0, .size = n}}
 * A NULL buffer (and NULL region.buffer_ptr) with a size is an implicit
 * output: the runtime allocates it from the heap ring (pto_task_output). */
typedef struct TaskParam {
    int32_t kind;
    void* buffer;
    uint64_t size;
    TaskRegion region;
} TaskParam;

/* A host kernel: the task's parameter addresses and sizes, in order. Returns
 * 0 on success, else an error code the runtime reports as the device error
 * code of the failed task. */
typedef uint32_t (*pto_host_fn)(void* const* buffers, const uint64_t* sizes, int32_t num_params, void* user_data);

/* An orchestration function as the seed writes it. */
typedef void (*pto_orchestration_fn)(Runtime* rt, uint64_t* args);

/* --- runtime lifetime --------------------------------------------------- */

/* A Runtime* is a handle, not a pointer: a destroyed runtime's handle (or
 * one never created) is refused with -EINVAL by every call, never used. */

/* Opens a device function (`function`: index or PCI address as
 * spyre::DeviceOptions::function; NULL = the environment's default) and
 * creates a runtime on it: a task ring of `task_ring_size` slots and a heap
 * ring of `heap_size` bytes of the function's device memory, rounded up to
 * whole 128-byte granules (a block is one or more). */
Runtime* pto_runtime_create(const char* function, int32_t task_ring_size, uint64_t heap_size);
/* The same on `memory_size` bytes of host memory, no device: every task runs
 * on the host worker (tests, benchmarks, CPU-only use). */
Runtime* pto_runtime_create_host(uint64_t memory_size, int32_t task_ring_size, uint64_t heap_size);
/* Waits for every submitted task and for calls on it in other threads,
 * then frees everything. NULL is a no-op (0). -EINVAL for a handle already
 * destroyed or never created, or one a spyre::Orchestrator owns; -EBUSY
 * from inside a call on the same runtime (its orchestration function or
 * one of its tasks). -EDEADLK when EXTERNAL tasks were never finished: the
 * runtime is destroyed all the same, with them and the tasks behind them
 * abandoned (pto_last_error counts them). */
int32_t pto_runtime_destroy(Runtime* rt);

/* --- errors ------------------------------------------------------------- */

/* What kind of error (spyre::ErrorKind, in its order, plus one). */
enum {
    PTO_ERROR_NONE = 0,
    PTO_ERROR_INVALID_ARGUMENT,
    PTO_ERROR_NOT_FOUND,
    PTO_ERROR_BUSY,
    PTO_ERROR_PERMISSION_DENIED,
    PTO_ERROR_UNSUPPORTED,
    PTO_ERROR_DEVICE_ERROR,   /* a task failed: task_id, kernel_id, device_code say which */
    PTO_ERROR_DEVICE_LOST,
    PTO_ERROR_TIMEOUT,
    PTO_ERROR_NOT_READY,
    PTO_ERROR_OUT_OF_MEMORY,
    PTO_ERROR_IO,
    PTO_ERROR_PROTOCOL,
    PTO_ERROR_INTERNAL,
    PTO_ERROR_WRONG_DEVICE,
    PTO_ERROR_TASK_FAILED,
};

/* The last call that failed on this thread. */
typedef struct pto_error_info {
    int32_t code;          /* what it returned: a negative errno (0: no error since the last clear) */
    int32_t kind;          /* PTO_ERROR_* */
    int32_t task_id;       /* the failed task behind it (the root cause), or -1 */
    int32_t kernel_id;     /* that task's kernel, or -1 */
    uint32_t device_code;  /* SPYRE_ERR_* from the device, or a host kernel's return value; 0 if none */
    const char* call;      /* the function that failed, e.g. "pto_submit_task" ("" if none) */
    const char* message;   /* what went wrong, in full ("" if none) */
} pto_error_info;

/* The message of the last call that failed on this thread ("" if none). */
const char* pto_last_error(void);
/* Fills *info with this thread's last error and returns info->code (0:
 * none). Its strings stay valid until this thread's next failing call or
 * pto_clear_error. */
int32_t pto_last_error_info(pto_error_info* info);
/* Forgets this thread's last error: pto_last_error_info then returns 0. */
void pto_clear_error(void);

/* --- kernels ------------------------------------------------------------ */

/* kernel_id -> a host function, run by a host worker thread; or, when its
 * runs so far average under a microsecond, by the thread that submits a
 * task of it that is ready at once, inside pto_submit_task (handing so short
 * a task to a worker costs more than running it; C++
 * OrchestratorOptions::run_cheap_host_tasks_here turns this off). */
int32_t pto_register_host_kernel(Runtime* rt, int32_t kernel_id, pto_host_fn fn, void* user_data);
/* kernel_id -> a device program (function-relative address of a loaded
 * program), for a device executor. */
int32_t pto_register_device_kernel(Runtime* rt, int32_t kernel_id, uint64_t program_address);

/* kernel_id -> the device program `image` (`size` bytes in the program
 * format of spyre/uapi/spyre_program.h: from spyre_build_kernel in
 * spyre/compiler/kernel_builder.h, or a compiler): decoded and checked,
 * copied into the function's memory (kept until the runtime goes) and
 * registered as pto_register_device_kernel does. A task's parameters, in
 * order, are the program's operands. -ENOTSUP on a runtime without a device. */
int32_t pto_register_program(Runtime* rt, int32_t kernel_id, const void* image, uint64_t size);
/* The same with the program image in the file at `path`. */
int32_t pto_register_program_file(Runtime* rt, int32_t kernel_id, const char* path);
/* The same with the compute program of operation `op_index` of the
 * ExecutionPlan in the directory `plan_dir` (plan.json and its blobs,
 * docs/execution_plan.md). */
int32_t pto_register_plan(Runtime* rt, int32_t kernel_id, const char* plan_dir, int32_t op_index);

/* --- device memory outside the heap ring ------------------------------- */

/* `size` bytes of the function's memory from its allocator (the seed's
 * rtMalloc), not the heap ring: for inputs and results that outlive a run
 * or a scope (a long-lived pto_alloc buffer would pin the heap ring's
 * tail). Zeroed. NULL on error; -ENOTSUP (pto_last_error) on a runtime
 * without a device. Freed by pto_device_free or with the runtime. */
void* pto_device_malloc(Runtime* rt, uint64_t size);
/* Frees what pto_device_malloc returned. Tasks must be done with it. */
int32_t pto_device_free(Runtime* rt, void* buffer);

/* --- the seed's six calls ----------------------------------------------- */

/* A zero-filled buffer from the heap ring (stalls while it is full). NULL on
 * error (size 0, larger than the heap, or a heap that can never drain). */
void* pto_alloc(Runtime* rt, size_t size);
/* No more tasks will reference `buffer` (the address pto_alloc returned; one
 * inside it is refused): it is reclaimed once every task that referenced it
 * is CONSUMED, not at once. */
int32_t pto_free(Runtime* rt, void* buffer);
int32_t pto_scope_begin(Runtime* rt);
/* Returns the task id (>= 0) or a negative errno. Ids wrap (after about
 * 2^31 tasks) at a multiple of the task ring's size: a live task's id names
 * it alone (docs/orchestration.md, TaskRing). */
int32_t pto_submit_task(Runtime* rt, int32_t kernel_id, int32_t worker_type, TaskParam* params, int32_t num_params);
/* Releases the scope's references to its tasks. Does not wait; returns -EIO
 * (message: task id, kernel id, device error code) if a task of the scope
 * has failed or was skipped by then. */
int32_t pto_scope_end(Runtime* rt);
/* Finishes an EXTERNAL task: its outputs are written. If its inputs are not
 * complete yet, the completion takes effect when they are. -EINVAL for a
 * task that is not an unfinished EXTERNAL task. */
int32_t pto_task_complete(Runtime* rt, int32_t task_id);
/* Finishes an EXTERNAL task as failed with `error_code` (non-zero). */
int32_t pto_task_fail(Runtime* rt, int32_t task_id, uint32_t error_code);

/* --- results ------------------------------------------------------------ */

/* Address of implicit output `index` (counting implicit outputs only) of a
 * live task (Example 1's packed_buffer_base + offset). NULL on error.
 * The depth-0 rule (docs/orchestration.md): a task submitted outside any
 * scope is held by the calling thread (its submitter, and each other
 * thread that calls this) until later tasks of that thread have read
 * every output this call handed it (an output asked for again is held
 * again for its next reader), the thread's next pto_wait_all, or its
 * exit; so is a task whose scopes have ended, for an output asked for
 * then; outputs this call never handed out may go sooner when the rings
 * are full. NULL (EINVAL) for a task already let
 * go. An address in the heap ring that is not inside live, handed-out
 * outputs (or a live pto_alloc buffer) is refused by pto_submit_task;
 * ask again (this call) for an output a second reader reads after the
 * first ran: the address kept from before may be a newer output's by
 * then. */
void* pto_task_output(Runtime* rt, int32_t task_id, int32_t index);
/* PTO_TASK_* of a submitted task, or -EINVAL for an id never handed out. */
int32_t pto_task_state(Runtime* rt, int32_t task_id);
/* Waits until every submitted task has finished. -EIO with the first
 * failure (task id, kernel id, device error code) and the skipped count if
 * any task failed since the last pto_wait_all; -EDEADLK if only EXTERNAL
 * tasks are left. */
int32_t pto_wait_all(Runtime* rt);
/* The same, calling progress(done, total, user) on this thread each time
 * tasks complete: tasks completed of those submitted since the last wait
 * that returned with nothing in flight; done rises and ends at total
 * (docs/progress.md). A NULL progress is pto_wait_all. */
typedef void (*pto_progress_fn)(uint64_t done, uint64_t total, void* user);
int32_t pto_wait_all_progress(Runtime* rt, pto_progress_fn progress, void* user);
/* Function-relative device address of a buffer address (-EINVAL outside, or
 * for a NULL device_address). */
int32_t pto_device_address(Runtime* rt, const void* buffer, uint64_t* device_address);
/* The buffer address of [device_address, + size) of the function's memory
 * (NULL outside): how a caller reaches data it placed there itself. */
void* pto_host_address(Runtime* rt, uint64_t device_address, uint64_t size);
/* Copies `size` bytes of host memory to the runtime's memory at `buffer`
 * (pto_alloc, pto_task_output, pto_device_malloc, pto_host_address) and
 * back, and waits for them: by the device's DMA engine, or a memory copy
 * on a runtime without a device. A copy first waits for the calling
 * thread's tasks in flight over those bytes, as a task would (copy in:
 * their readers and writers; copy out: their writers); -EDEADLK when only
 * EXTERNAL tasks could end that wait. -EINVAL when the range leaves the
 * memory. */
int32_t pto_copy_in(Runtime* rt, void* buffer, const void* host, uint64_t size);
int32_t pto_copy_out(Runtime* rt, void* host, const void* buffer, uint64_t size);

/* --- orchestration functions -------------------------------------------- */

/* Calls fn(rt, args), ends the scopes it left open, then waits for its
 * tasks. No scope of its own: the function's tasks at depth 0 follow the
 * depth-0 rule (docs/orchestration.md), its scopes end when it ends them,
 * and it cannot end scopes its caller began. Fails with the first call of
 * the function that failed (pto_alloc, pto_free, pto_scope_begin/end,
 * pto_submit_task, pto_task_complete/fail), even one the function ignored,
 * else with the first task failure, else with -EINVAL when the function
 * returned with scopes open (its tasks ran; the scopes were ended for it). */
int32_t pto_run(Runtime* rt, pto_orchestration_fn fn, uint64_t* args);
/* The same with `symbol` of the shared object `path` (dlopen/dlsym), which
 * stays loaded until the runtime is destroyed (kernels it registers point
 * into it). */
int32_t pto_run_library(Runtime* rt, const char* path, const char* symbol, uint64_t* args);

#ifdef __cplusplus
}
#endif

SPYRE_API_END

#endif /* SPYRE_PTO_H */
