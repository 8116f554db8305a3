// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the orchestration runtime's C API (spyre/pto.h) on
// host memory: random sequences of pto_alloc, pto_free, pto_copy_in/out,
// scopes, submissions with random parameters (NULL, buffers, other tasks'
// outputs, wild and outside pointers; sizes up to 2^64; both spellings and
// both at once; unknown kinds, worker types and kernels; too many
// parameters), EXTERNAL completions, queries, waits and pto_run, in the
// format of pto_ops.hpp.
//
// Asserted beyond "no crash, no sanitizer report":
// - every call returns success or a negative errno of the documented set,
//   with a message (never another exception, never a crash);
// - no call runs longer than 10 s (a watchdog thread aborts: a hang);
// - after the scopes are ended, EXTERNAL tasks completed, buffers freed and
//   a final wait, no task slot and no heap byte is still held.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "orchestration/handle_table.hpp"
#include "orchestration/runtime_handle.hpp"
#include "pto_ops.hpp"
#include "spyre/pto.h"

using namespace spyre::fuzz::pto;

namespace {

// When the call in progress started (0: none), for the watchdog.
std::atomic<int64_t> g_call_started_ms{0};
const char* g_call = "";

int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void StartWatchdog() {
    static std::once_flag once;
    std::call_once(once, [] {
        std::thread([] {
            for (;;) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
                const int64_t started = g_call_started_ms.load();
                if (started && NowMs() - started > 10'000) {
                    std::fprintf(stderr, "pto_api_fuzz: HANG: %s has not returned for 10 s\n", g_call);
                    std::abort();
                }
            }
        }).detach();
    });
}

// Every pto_* call goes through here: timed, and its result checked.
template <typename F>
auto Call(const char* name, F&& f) {
    g_call = name;
    g_call_started_ms = NowMs();
    auto r = f();
    g_call_started_ms = 0;
    return r;
}

void CheckCode(const char* call, int32_t r) {
    if (r >= 0) return;
    switch (-r) {
        case EINVAL: case ENOMEM: case EDEADLK: case EIO: case EBUSY: case ENOENT: break;
        default:
            std::fprintf(stderr, "pto_api_fuzz: %s returned %d (%s), not a documented code\n", call, r, pto_last_error());
            std::abort();
    }
    if (!*pto_last_error()) {
        std::fprintf(stderr, "pto_api_fuzz: %s failed with %d and no message\n", call, r);
        std::abort();
    }
}

uint32_t WriteOutputs(void* const* b, const uint64_t* s, int32_t n, void*) {
    uint64_t sum = 0;  // reads every byte of every parameter: a bad address or size is ASan's to see
    for (int32_t i = 0; i < n; ++i) {
        const auto* p = static_cast<const uint8_t*>(b[i]);
        for (uint64_t j = 0; j < s[i]; j += 64) sum += p[j];
        if (s[i]) sum += p[s[i] - 1];
    }
    if (n > 0) std::memset(b[n - 1], int(sum & 0xff), s[n - 1]);
    return 0;
}
uint32_t Fails(void* const*, const uint64_t*, int32_t, void*) { return 7; }

class Reader {
public:
    Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
    bool more() const { return p_ < end_; }
    uint8_t u8() { return p_ < end_ ? *p_++ : 0; }

private:
    const uint8_t* p_;
    const uint8_t* end_;
};

struct Session {
    Runtime* rt = nullptr;
    uint8_t* memory = nullptr;
    uint64_t heap = 0;
    std::vector<void*> buffers;
    std::vector<int32_t> tasks, external;
    std::vector<uint8_t> scratch = std::vector<uint8_t>(kMemory + 256, 0x5a);  // host side of COPY
    Reader* in = nullptr;

    uint64_t Size(uint8_t size_class, uint8_t low) const {
        switch (size_class % kSizes) {
            case S_SMALL: return low;  // 0 included
            case S_HEAP: return heap - 128 + low;
            case S_MEMORY: return kMemory - low;
            default: return ~uint64_t(0) - low;
        }
    }

    void* Where(uint8_t where, uint8_t which) {
        switch (where % kWhere) {
            case W_NULL: return nullptr;
            case W_BUFFER:
                return buffers.empty() ? nullptr : static_cast<uint8_t*>(buffers[which % buffers.size()]) + (which & 0x40);
            case W_OUTPUT: {
                if (tasks.empty()) return nullptr;
                void* out = Call("pto_task_output", [&] { return pto_task_output(rt, tasks[which % tasks.size()], which >> 7); });
                return out;
            }
            case W_MEMORY: return memory + uint64_t(which) * 4096;
            default: return &heap;  // outside the runtime's memory
        }
    }

    void Op(uint8_t op, int depth) {
        switch (op % kOps) {
            case ALLOC: {
                const uint64_t size = Size(in->u8(), in->u8());
                void* p = Call("pto_alloc", [&] { return pto_alloc(rt, size); });
                if (p) buffers.push_back(p);
                else CheckCode("pto_alloc", pto_last_error_info(nullptr));
                break;
            }
            case FREE: {
                const uint8_t which = in->u8();
                void* p = which < buffers.size() ? buffers[which] : memory + which;
                CheckCode("pto_free", Call("pto_free", [&] { return pto_free(rt, p); }));
                if (which < buffers.size()) buffers.erase(buffers.begin() + which);
                break;
            }
            case SUBMIT: {
                const int32_t kernel = in->u8() % (kKernels + 1);  // kKernels: unknown
                const int32_t worker = int8_t(in->u8()) % 6;       // -5..5: some invalid
                int32_t n = in->u8() % (kMaxParams + 3);
                TaskParam params[kMaxParams + 2] = {};
                for (int32_t i = 0; i < n; ++i) {
                    TaskParam& p = params[i];
                    p.kind = int8_t(in->u8()) % 4;  // -3..3: some unknown
                    void* at = Where(in->u8(), in->u8());
                    const uint64_t size = Size(in->u8(), in->u8());
                    switch (in->u8() % 3) {
                        case 0: p.buffer = at, p.size = size; break;
                        case 1: p.region = {at, size & 0xfff, size}; break;
                        default: p.buffer = at, p.size = size, p.region = {at, 0, size}; break;
                    }
                }
                if (in->u8() == 0xff) n = -1;  // a negative count
                const int32_t id = Call("pto_submit_task", [&] { return pto_submit_task(rt, kernel, worker, params, n); });
                CheckCode("pto_submit_task", id);
                if (id >= 0) {
                    tasks.push_back(id);
                    if (worker == WORKER_EXTERNAL) external.push_back(id);
                }
                break;
            }
            case COMPLETE: {
                const uint8_t which = in->u8(), code = in->u8();
                const int32_t id = external.empty() ? which : external[which % external.size()];
                CheckCode("pto_task_complete", Call("pto_task_complete", [&] {
                              return code ? pto_task_fail(rt, id, code) : pto_task_complete(rt, id);
                          }));
                break;
            }
            case QUERY: {
                const int32_t id = tasks.empty() ? 0 : tasks[in->u8() % tasks.size()];
                CheckCode("pto_task_state", Call("pto_task_state", [&] { return pto_task_state(rt, id); }));
                Call("pto_task_output", [&] { return pto_task_output(rt, id, 0); });
                break;
            }
            case SCOPE_BEGIN: CheckCode("pto_scope_begin", Call("pto_scope_begin", [&] { return pto_scope_begin(rt); })); break;
            case SCOPE_END: CheckCode("pto_scope_end", Call("pto_scope_end", [&] { return pto_scope_end(rt); })); break;
            case WAIT: CheckCode("pto_wait_all", Call("pto_wait_all", [&] { return pto_wait_all(rt); })); break;
            case COPY: {
                const bool out = in->u8() & 1;
                void* at = Where(in->u8(), in->u8());
                const uint64_t size = Size(in->u8(), in->u8());
                uint8_t* host = scratch.data() + in->u8();
                // A range the runtime takes must fit its memory, so it fits
                // the scratch too; one past it is an ASan report.
                const int32_t r = out ? Call("pto_copy_out", [&] { return pto_copy_out(rt, host, at, size); })
                                      : Call("pto_copy_in", [&] { return pto_copy_in(rt, at, host, size); });
                CheckCode(out ? "pto_copy_out" : "pto_copy_in", r);
                break;
            }
            case RUN: {
                const uint8_t ops = in->u8() % 16;
                if (depth > 0) break;  // no pto_run inside pto_run's function here
                struct Args {
                    Session* s;
                    uint8_t ops;
                } args{this, ops};
                uint64_t raw[] = {uint64_t(uintptr_t(&args))};
                // The function runs on this thread: the watchdog's call is pto_run's.
                const int32_t r = pto_run(rt, [](Runtime*, uint64_t* a) {
                    auto* x = reinterpret_cast<Args*>(uintptr_t(a[0]));
                    for (uint8_t i = 0; i < x->ops && x->s->in->more(); ++i) x->s->Op(x->s->in->u8(), 1);
                }, raw);
                CheckCode("pto_run", r);
                break;
            }
        }
    }

    // Ends every scope, finishes what only the caller can, frees every
    // buffer and waits: then nothing may be held.
    void Drain() {
        while (Call("pto_scope_end", [&] { return pto_scope_end(rt); }) != -EINVAL) {  // -EINVAL: none open
        }
        for (int32_t id : external) Call("pto_task_complete", [&] { return pto_task_complete(rt, id); });
        for (void* b : buffers) Call("pto_free", [&] { return pto_free(rt, b); });
        const int32_t r = Call("pto_wait_all", [&] { return pto_wait_all(rt); });
        if (r != 0 && r != -EIO) {
            std::fprintf(stderr, "pto_api_fuzz: the final wait returned %d: %s\n", r, pto_last_error());
            std::abort();
        }
        const auto entered = spyre::orchestration::HandleTable::Instance().Enter(rt, "check");
        const auto stats = entered->graph->Stats();
        if (stats.live_tasks != 0 || stats.heap_used != 0 || stats.live_buffers != 0) {
            std::fprintf(stderr, "pto_api_fuzz: after the final wait %d task slot(s), %llu heap byte(s), %zu buffer(s) held\n",
                         stats.live_tasks, (unsigned long long)stats.heap_used, stats.live_buffers);
            std::abort();
        }
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    StartWatchdog();
    Reader in(data, size);
    Session s;
    s.in = &in;
    const int32_t ring = 1 + in.u8() % 16;
    s.heap = uint64_t(128) << (in.u8() % 10);
    s.rt = pto_runtime_create_host(kMemory, ring, s.heap);
    if (!s.rt) {
        std::fprintf(stderr, "pto_api_fuzz: cannot create a runtime: %s\n", pto_last_error());
        std::abort();
    }
    s.memory = static_cast<uint8_t*>(pto_host_address(s.rt, 0, kMemory));
    pto_register_host_kernel(s.rt, K_WRITE, WriteOutputs, nullptr);
    pto_register_host_kernel(s.rt, K_FAIL, Fails, nullptr);
    pto_register_host_kernel(s.rt, K_EXT, WriteOutputs, nullptr);
    for (int ops = 0; in.more() && ops < 256; ++ops) s.Op(in.u8(), 0);
    s.Drain();
    if (pto_runtime_destroy(s.rt) != 0 || pto_scope_begin(s.rt) != -EINVAL) {
        std::fprintf(stderr, "pto_api_fuzz: a destroyed runtime's handle was not refused\n");
        std::abort();
    }
    return 0;
}
