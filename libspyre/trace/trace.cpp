// SPDX-License-Identifier: Apache-2.0
// The trace recorder. Each thread appends fixed-size records to its own
// chain of chunks (no lock: a record is published by a release store of
// the chunk's count); Stop walks every chain, sorts by time and writes the
// Chrome trace-event JSON with nlohmann_json.
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "spyre/common/device_clock.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "trace/recorder.hpp"
#include "trace/trace_file.hpp"

namespace spyre::trace {

namespace detail {

std::atomic<bool> g_enabled{false};

uint64_t NowNs() noexcept { return DeviceClockNs(); }  // the clock device timestamps use

namespace {

constexpr char kFunctionSeparator = '\x1f';  // between an 'H' record's device and function

struct Record {
    uint64_t ts_ns;
    uint64_t dur_ns;
    int64_t arg;         // 'T': the task id
    uint64_t queued_ns;  // 'T': when the host sent the task
    uint64_t flow;       // 'T': the kernel id
    union {
        const char* name;
        uint64_t reaped_ns;  // 'T' (named "kernel <id>" when written)
    };
    const char* category;
    uint32_t track;  // 0: the thread's own
    // 'X' span, 'T' task span, 'H' host-level task, 's' flow start, 'f' flow end, 'A' arrow, 'C' counter
    char ph;
    HostTaskState state = HostTaskState::Unknown;  // 'H'
    // 'X': the device's error code; 'T': the task's status, kStatusTooBig
    // for one past 16 bits (a host kernel that threw, a lost device).
    uint16_t code = 0;
};
constexpr uint16_t kStatusTooBig = 0xffff;
static_assert(sizeof(Record) == 64, "a record is one cache line");

// A run of one thread's records. A thread's first chunk is small and each
// next one twice the last, up to 1 MiB: a thread that records a few spans
// (a thread per request) pinned a whole MiB for the rest of the recording,
// 2 GB for 2,000 short threads under a 1 MiB cap.
struct Chunk {
    static constexpr uint32_t kFirstRecords = 64;     // 4 KiB, a page
    static constexpr uint32_t kMaxRecords = 16384;  // 1 MiB
    uint32_t capacity = 0;
    std::atomic<uint32_t> count{0};
    std::atomic<Chunk*> next{nullptr};
    // `capacity` records follow the header, on cache lines of their own;
    // left uninitialised: written before they count.
    static constexpr size_t kHeader = 64;
    Record* records() { return reinterpret_cast<Record*>(reinterpret_cast<char*>(this) + kHeader); }
    const Record* records() const {
        return reinterpret_cast<const Record*>(reinterpret_cast<const char*>(this) + kHeader);
    }

    // Chunks come from mmap with MAP_POPULATE: the pages are mapped in one
    // system call instead of one page fault per 64 records while recording
    // (a fault costs microseconds in a VM).
    static size_t Bytes(uint32_t capacity) { return kHeader + size_t(capacity) * sizeof(Record); }
    static Chunk* New(uint32_t capacity) {
        void* p = mmap(nullptr, Bytes(capacity), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                       -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        Chunk* c = ::new (p) Chunk;
        c->capacity = capacity;
        return c;
    }
    struct Unmap {
        void operator()(Chunk* c) const noexcept {
            const size_t bytes = Bytes(c->capacity);
            c->~Chunk();
            munmap(c, bytes);
        }
    };
};
static_assert(sizeof(Chunk) <= Chunk::kHeader, "a chunk's header fits before its records");
using ChunkPtr = std::unique_ptr<Chunk, Chunk::Unmap>;

// One thread's records, oldest chunk first. Only the thread appends, and
// only the thread resets it for the next recording, keeping its chunks:
// memory touched once is cheap to write again (a first touch costs about
// 80 ns per record in this VM even with MAP_POPULATE, a second 3-7 ns).
struct ThreadBuffer {
    uint32_t tid = 0;
    std::string name;
    ChunkPtr head{Chunk::New(Chunk::kFirstRecords)};
    Chunk* tail = head.get();
    std::vector<ChunkPtr> more;  // owns the chunks after head
    bool charged = false;  // head's records counted against this recording's bound

    void Reset() {
        for (Chunk* c = head.get(); c; c = c->next.load(std::memory_order_relaxed))
            c->count.store(0, std::memory_order_relaxed);
        tail = head.get();
        charged = false;
    }
};

// Tracks that are not threads get ids above every thread id.
constexpr uint32_t kFirstNamedTrack = 1u << 30;

struct State {
    std::mutex session_mu;  // a whole Start or Stop: a Stop's writing ends before buffers are reused
    std::mutex mu;
    uint64_t generation = 1;  // a Start drops older buffers
    std::string path;
    pid_t started_by = 0;  // the process that started the recording: only it writes the file
    std::vector<std::shared_ptr<ThreadBuffer>> buffers;
    std::map<std::string, uint32_t> tracks;
    std::atomic<uint32_t> next_flow{1};
};

State& state() {
    static State* s = new State();  // never destroyed: threads may probe during exit
    return *s;
}

std::atomic<uint64_t> g_generation{1};
}  // namespace
std::atomic<uint64_t> g_events_written{0};
namespace {

// The recording's bound (SPYRE_TRACE_MAX_MB), in records of the chunks
// its threads write, each thread's first chunk included. A long traced run
// grew without limit (3.4 GB of records for a 60 s copy loop), and the file
// took minutes to write; past the bound records are dropped and counted,
// and the file says so.
constexpr uint64_t kDefaultMaxMb = 256;
constexpr uint64_t kRecordsPerMb = (1u << 20) / sizeof(Record);
std::atomic<uint64_t> g_max_mb{kDefaultMaxMb};
std::atomic<uint64_t> g_max_records{kDefaultMaxMb * kRecordsPerMb};
std::atomic<uint64_t> g_records{0};  // room taken by this recording's chunks
std::atomic<uint64_t> g_dropped{0};
thread_local std::shared_ptr<ThreadBuffer> tl_buffer;
thread_local uint64_t tl_generation = 0;

ThreadBuffer& Buffer() {
    const uint64_t gen = g_generation.load(std::memory_order_acquire);
    if (tl_generation != gen || !tl_buffer) {
        if (tl_buffer) {
            tl_buffer->Reset();  // the last recording's Stop has written it (session_mu)
        } else {
            tl_buffer = std::make_shared<ThreadBuffer>();
            tl_buffer->tid = uint32_t(syscall(SYS_gettid));
        }
        char name[32] = {};
        if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) tl_buffer->name = name;
        State& s = state();
        std::lock_guard lock(s.mu);
        if (s.generation == gen) s.buffers.push_back(tl_buffer);
        tl_generation = gen;
    }
    return *tl_buffer;
}

void Append(const Record& r) noexcept {
    if (!Enabled()) return;
    try {
        ThreadBuffer& b = Buffer();
        // Room for `records` more under the bound, or the record is dropped.
        auto charge = [](uint64_t records) {
            if (g_records.fetch_add(records, std::memory_order_relaxed) + records >
                g_max_records.load(std::memory_order_relaxed)) {
                g_records.fetch_sub(records, std::memory_order_relaxed);
                g_dropped.fetch_add(1, std::memory_order_relaxed);
                return false;
            }
            return true;
        };
        if (!b.charged) {
            if (!charge(b.head->capacity)) return;
            b.charged = true;
        }
        Chunk* c = b.tail;
        uint32_t n = c->count.load(std::memory_order_relaxed);
        if (n == c->capacity) {
            Chunk* next = c->next.load(std::memory_order_relaxed);  // kept from an earlier recording
            uint32_t capacity = next ? next->capacity : std::min(2 * c->capacity, Chunk::kMaxRecords);
            if (!next) {
                // The last chunk under the bound takes what room is left.
                const uint64_t used = g_records.load(std::memory_order_relaxed),
                               max = g_max_records.load(std::memory_order_relaxed);
                if (used < max && max - used < capacity) capacity = uint32_t(max - used);
            }
            if (!charge(capacity)) return;
            if (!next) {
                ChunkPtr fresh{Chunk::New(capacity)};
                next = fresh.get();
                b.more.push_back(std::move(fresh));
                c->next.store(next, std::memory_order_release);
            }
            b.tail = c = next;
            n = c->count.load(std::memory_order_relaxed);
        }
        c->records()[n] = r;
        c->count.store(n + 1, std::memory_order_release);
    } catch (...) {
        // Out of memory while tracing: the record is lost, the work goes on.
    }
}

double Micros(uint64_t ns) { return double(ns) / 1000.0; }

// Names a record cannot point at as literals: copied once, never freed (a
// record may outlive every Start and Stop in between, so nothing is safe to
// free), looked up under their own lock.
const char* Intern(const std::string& name) {
    // A thread tends to repeat a few names (its device, its functions): a
    // small cache of its own saves the shared lock on most records.
    struct Hit {
        std::string name;
        const char* copy = nullptr;
    };
    thread_local Hit recent[4];
    thread_local unsigned next = 0;
    for (const Hit& h : recent)
        if (h.copy && h.name == name) return h.copy;
    static std::mutex mu;
    static auto* names = new std::set<std::string, std::less<>>();  // nodes never move
    const char* copy;
    {
        std::lock_guard lock(mu);
        copy = names->insert(name).first->c_str();
    }
    recent[next++ % 4] = {name, copy};
    return copy;
}

}  // namespace

void ApiSpan(const char* name, uint64_t start_ns, uint64_t end_ns) noexcept {
    Append(Record{start_ns, end_ns - start_ns, -1, 0, 0, {name}, "api", 0, 'X'});
}

}  // namespace detail

using namespace detail;

namespace detail {

uint32_t NamedTrack(const std::string& name) {
    State& s = state();
    std::lock_guard lock(s.mu);
    auto [it, fresh] = s.tracks.emplace(name, kFirstNamedTrack + uint32_t(s.tracks.size()));
    return it->second;
}

uint64_t Recording() noexcept { return g_generation.load(std::memory_order_acquire); }

uint32_t NewFlow() noexcept {
    uint32_t id = state().next_flow.fetch_add(1, std::memory_order_relaxed);
    while (id == 0) id = state().next_flow.fetch_add(1, std::memory_order_relaxed);  // wrapped
    return id;
}

void Span(uint32_t track, const char* category, const char* name, uint64_t start_ns, uint64_t end_ns, int64_t arg,
          uint64_t queued_ns, uint64_t flow_in, uint32_t device_code) noexcept {
    Record r{start_ns, end_ns > start_ns ? end_ns - start_ns : 0, arg, queued_ns, flow_in, {name}, category, track, 'X'};
    r.code = uint16_t(std::min<uint32_t>(device_code, kStatusTooBig));
    Append(r);
}

void FlowOut(uint64_t flow, uint64_t ts_ns) noexcept {
    Append(Record{ts_ns, 0, -1, 0, flow, {"enqueue"}, "flow", 0, 's'});
}

void Arrow(uint32_t from_track, uint64_t from_ns, uint32_t to_track, uint64_t to_ns) noexcept {
    if (!Enabled()) return;
    // One record (half the memory of two): `queued_ns` holds the tail's
    // time and `arg` its track; Stop writes the two events.
    Append(Record{to_ns, 0, int64_t(from_track), from_ns, 0, {"depends"}, "flow", to_track, 'A'});  // id at Stop
}

void TaskSpan(uint32_t track, const char* category, uint64_t start_ns, uint64_t end_ns, int32_t task_id,
              int32_t kernel_id, uint64_t sent_ns, uint64_t reaped_ns, uint32_t status) noexcept {
    Record r{start_ns, end_ns > start_ns ? end_ns - start_ns : 0, task_id, sent_ns, uint64_t(uint32_t(kernel_id)),
             {nullptr}, category, track, 'T'};
    r.reaped_ns = reaped_ns;
    r.code = uint16_t(std::min<uint32_t>(status, kStatusTooBig));
    Append(r);
}

void HostTaskSpan(uint32_t track, const std::string& name, const std::string& device, uint64_t start_ns,
                  uint64_t end_ns, uint64_t task_id, uint64_t bytes_uploaded, uint64_t bytes_downloaded,
                  const std::string& function, HostTaskState state) noexcept {
    if (!Enabled()) return;
    try {
        // `queued_ns` holds the bytes uploaded, `flow` those downloaded,
        // `category` the device ("": a SubWorker), then the function after
        // a unit separator.
        const std::string where = function.empty() ? device : device + kFunctionSeparator + function;
        Record r{start_ns, end_ns > start_ns ? end_ns - start_ns : 0, int64_t(task_id), bytes_uploaded,
                 bytes_downloaded, {Intern(name)}, Intern(where), track, 'H'};
        r.state = state;
        Append(r);
    } catch (...) {
        // Out of memory while tracing: the record is lost, the work goes on.
    }
}

void Counter(uint32_t track, const char* name, uint64_t ts_ns, int64_t value) noexcept {
    Append(Record{ts_ns, 0, value, 0, 0, {name}, "counter", track, 'C'});
}

}  // namespace detail

namespace {
size_t WriteAndStop(State& s);
}  // namespace

namespace {

// SPYRE_TRACE_MAX_MB: a whole number >= 1, decimal digits only (strtoull
// skips leading blanks and takes a sign).
uint64_t MaxMb() {
    const char* text = std::getenv("SPYRE_TRACE_MAX_MB");
    if (!text || !*text) return kDefaultMaxMb;
    char* end = nullptr;
    errno = 0;
    const unsigned long long mb = std::strtoull(text, &end, 10);
    if (*end != '\0' || errno != 0 || mb < 1 || mb > (1ull << 30) || text[0] < '0' || text[0] > '9')
        throw Error(ErrorKind::InvalidArgument, std::string("SPYRE_TRACE_MAX_MB='") + text +
                                                    "' is not a whole number of MiB from 1 to 2^30 (default " +
                                                    std::to_string(kDefaultMaxMb) + ")");
    return mb;
}

}  // namespace

void Start(const std::string& path) {
    const uint64_t max_mb = MaxMb();
    State& s = state();
    std::lock_guard session(s.session_mu);
    // Fails now, not at Stop, if the file cannot be written; before the
    // running recording stops, which a refused path leaves running.
    detail::TraceFile::Check(path);
    // A recording already running is written to its own file first: its
    // events are not lost, and its file is no empty placeholder.
    WriteAndStop(s);
    std::lock_guard lock(s.mu);
    s.path = path;
    s.started_by = getpid();
    s.buffers.clear();
    s.tracks.clear();
    g_max_mb.store(max_mb, std::memory_order_relaxed);
    g_max_records.store(max_mb * kRecordsPerMb, std::memory_order_relaxed);
    g_records.store(0, std::memory_order_relaxed);
    g_dropped.store(0, std::memory_order_relaxed);
    s.generation = g_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
    g_enabled.store(true, std::memory_order_release);
}

size_t Stop() {
    State& s = state();
    std::lock_guard session(s.session_mu);
    return WriteAndStop(s);
}

namespace {

// A record with the row it is written on.
struct Placed {
    Record r;
    uint32_t tid;
};

// The spans of each row ('X', task and host-task records), to ask whether
// one encloses a time there (a flow's end binds to that span).
class SpanIndex {
public:
    explicit SpanIndex(const std::vector<Placed>& by_time) {
        for (const Placed& p : by_time)
            if (p.r.ph == 'X' || p.r.ph == 'T' || p.r.ph == 'H') rows_[p.tid].push_back({p.r.ts_ns, p.r.ts_ns + p.r.dur_ns});
        // By start (as `by_time` is), each end raised to the latest end so
        // far: some span that started by `ts` still runs at `ts` iff the
        // last one to start by then has a raised end >= ts.
        for (auto& [tid, spans] : rows_)
            for (size_t i = 1; i < spans.size(); ++i) spans[i].end = std::max(spans[i].end, spans[i - 1].end);
    }
    bool Encloses(uint32_t tid, uint64_t ts) const {
        const auto row = rows_.find(tid);
        if (row == rows_.end()) return false;
        const auto after = std::upper_bound(row->second.begin(), row->second.end(), ts,
                                            [](uint64_t t, const Interval& s) { return t < s.start; });
        return after != row->second.begin() && std::prev(after)->end >= ts;
    }

private:
    struct Interval {
        uint64_t start, end;
    };
    std::unordered_map<uint32_t, std::vector<Interval>> rows_;
};

// Stop()'s work, with the session lock held.
size_t WriteAndStop(State& s) {
    std::vector<std::shared_ptr<ThreadBuffer>> buffers;
    std::map<std::string, uint32_t> tracks;
    std::string path;
    {
        std::lock_guard lock(s.mu);
        if (!g_enabled.exchange(false)) return 0;
        buffers = std::move(s.buffers);
        s.buffers.clear();
        tracks = std::move(s.tracks);
        s.tracks.clear();
        path = std::move(s.path);
        g_generation.fetch_add(1, std::memory_order_acq_rel);  // threads start fresh buffers next time
        s.generation = g_generation.load();
    }
    // A child forked without exec inherits the recording but writes
    // nothing: its Stop wrote the records of before the fork over the
    // parent's finished file (found probing from outside).
    if (getpid() != s.started_by) return 0;

    std::vector<Placed> all;
    for (const auto& b : buffers)
        for (const Chunk* c = b->head.get(); c; c = c->next.load(std::memory_order_acquire)) {
            const uint32_t n = c->count.load(std::memory_order_acquire);
            for (uint32_t i = 0; i < n; ++i) {
                const Record& r = c->records()[i];
                if (r.ph == 'A') {  // an arrow: its tail and its head, each at its own time on its own track
                    Record tail = r, head = r;
                    tail.flow = head.flow = NewFlow();
                    tail.ph = 's', tail.ts_ns = r.queued_ns, tail.track = uint32_t(r.arg);
                    head.ph = 'f';
                    all.push_back({tail, tail.track});
                    all.push_back({head, head.track});
                    continue;
                }
                all.push_back({r, r.track ? r.track : b->tid});
            }
        }
    std::stable_sort(all.begin(), all.end(), [](const Placed& a, const Placed& b) { return a.r.ts_ns < b.r.ts_ns; });
    // Flows written are those with both ends recorded: an operation still
    // queued when the recording stopped (a process exiting with work in
    // flight) has only its tail, an arrow to nowhere that viewers and
    // checkers reject; one enqueued before it started, only its head.
    // An end binds to the span enclosing it on its row, so a flow whose 's'
    // or 'f' has none is left out too: spans are recorded when they end,
    // and a recording cut by its bound (or stopped mid-span) kept an
    // 'enqueue' tail whose API span it dropped (found probing from outside).
    const SpanIndex spans(all);
    std::unordered_set<uint64_t> whole_flows, ended_flows;  // whole: started, then those also ended
    for (const Placed& p : all) {
        if (p.r.ph == 's' && spans.Encloses(p.tid, p.r.ts_ns)) whole_flows.insert(p.r.flow);
        if (p.r.ph == 'f' && spans.Encloses(p.tid, p.r.ts_ns)) ended_flows.insert(p.r.flow);
        if (p.r.ph == 'X' && p.r.flow) ended_flows.insert(p.r.flow);
    }
    std::erase_if(whole_flows, [&](uint64_t flow) { return !ended_flows.contains(flow); });

    const int pid = int(getpid());
    // Processes that recorded to one path spliced their events, and a full
    // disk left half a file (trace_file.hpp).
    detail::TraceFile out(path);
    auto write = [&](const nlohmann::json& ev, bool& first) {
        out.Write(first ? "\n" : ",\n");
        // Names are bytes (a thread's, the executable's): not UTF-8, dump throws.
        out.Write(ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        first = false;
        detail::g_events_written.fetch_add(1, std::memory_order_relaxed);
    };
    out.Write("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
    bool first = true;
    char exe[256] = {};
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const std::string process = std::string("spyre: ") + (len > 0 ? std::strrchr(exe, '/') + 1 : "process");
    write({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process}}}}, first);
    for (const auto& b : buffers)
        write({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", b->tid},
               {"args", {{"name", b->name.empty() ? "thread " + std::to_string(b->tid) : b->name}}}},
              first);
    std::map<uint32_t, std::string> track_names;
    for (const auto& [name, id] : tracks) {
        track_names[id] = name;
        write({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", id}, {"args", {{"name", name}}}}, first);
        write({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", id},
               {"args", {{"sort_index", int64_t(id - kFirstNamedTrack) + 1000}}}},
              first);
    }
    for (const Placed& p : all) {
        const Record& r = p.r;
        if (r.ph == 'T') {
            nlohmann::json args = {{"task", r.arg}, {"kernel", int32_t(uint32_t(r.flow))}};
            if (r.queued_ns) args["sent_us"] = Micros(r.queued_ns);
            if (r.reaped_ns) args["reaped_us"] = Micros(r.reaped_ns);
            if (r.code) {
                args["status"] = r.code == kStatusTooBig ? int64_t(-1) : int64_t(r.code);
                if (std::strcmp(r.category, "device") == 0 && r.code < 0x100) args["error"] = spyre_error_name(r.code);
            }
            write({{"ph", "X"}, {"name", "kernel " + std::to_string(int32_t(uint32_t(r.flow)))}, {"cat", r.category},
                   {"pid", pid}, {"tid", p.tid}, {"ts", Micros(r.ts_ns)}, {"dur", Micros(r.dur_ns)}, {"args", args}},
                  first);
            continue;
        }
        if (r.ph == 'H') {
            const std::string_view where = r.category;
            const size_t cut = where.find(kFunctionSeparator);
            const std::string device(where.substr(0, cut));
            const bool chip = !device.empty();
            nlohmann::json args = {{"task", r.arg}, {"level", chip ? "CHIP" : "HOST"}};
            if (cut != std::string_view::npos) args["function"] = std::string(where.substr(cut + 1));
            if (r.state != HostTaskState::Unknown) args["state"] = r.state == HostTaskState::Done ? "done" : "failed";
            if (chip) {
                args["device"] = device;
                args["bytes_uploaded"] = r.queued_ns;
                args["bytes_downloaded"] = r.flow;
            }
            write({{"ph", "X"}, {"name", r.name}, {"cat", "host-level"}, {"pid", pid}, {"tid", p.tid},
                   {"ts", Micros(r.ts_ns)}, {"dur", Micros(r.dur_ns)}, {"args", args}},
                  first);
            continue;
        }
        nlohmann::json ev = {{"ph", std::string(1, r.ph)}, {"name", r.name}, {"cat", r.category},
                             {"pid", pid},  {"tid", p.tid}, {"ts", Micros(r.ts_ns)}};
        if (r.ph == 'X') {
            ev["dur"] = Micros(r.dur_ns);
            nlohmann::json args = nlohmann::json::object();
            const bool bytes = std::strcmp(r.category, "dma") == 0 || std::strcmp(r.category, "host-level") == 0;
            if (r.arg >= 0) args[bytes ? "bytes" : "op"] = r.arg;
            if (r.queued_ns) args["enqueued_us"] = Micros(r.queued_ns);
            if (r.code) args["error"] = spyre_error_name(r.code);
            if (!args.empty()) ev["args"] = args;
            if (r.flow && whole_flows.contains(r.flow)) {
                // The arrow's head binds to this span (its start lies inside it).
                write({{"ph", "f"}, {"bp", "e"}, {"name", "enqueue"}, {"cat", "flow"}, {"id", r.flow}, {"pid", pid},
                       {"tid", p.tid}, {"ts", Micros(r.ts_ns)}},
                      first);
            }
        } else if (r.ph == 's') {
            if (!whole_flows.contains(r.flow)) continue;
            ev["id"] = r.flow;
        } else if (r.ph == 'f') {
            if (!whole_flows.contains(r.flow)) continue;
            ev["id"] = r.flow;
            ev["bp"] = "e";  // binds to the span enclosing it: the consumer, which starts here
        } else if (r.ph == 'C') {
            const auto it = track_names.find(r.track);
            ev["name"] = std::string(r.name) + (it != track_names.end() ? " (" + it->second + ")" : "");
            ev["args"] = {{"value", r.arg}};
            ev.erase("tid");
        }
        write(ev, first);
    }
    if (const uint64_t dropped = g_dropped.load(std::memory_order_relaxed)) {
        const std::string what = "trace truncated: " + std::to_string(dropped) +
                                 " record(s) dropped past SPYRE_TRACE_MAX_MB (" +
                                 std::to_string(g_max_mb.load()) + " MiB); the file holds the first ones";
        write({{"ph", "i"}, {"s", "g"}, {"name", what}, {"cat", "trace"}, {"pid", pid}, {"tid", 0},
               {"ts", all.empty() ? 0.0 : Micros(all.back().r.ts_ns)}, {"args", {{"dropped", dropped}}}},
              first);
        std::fprintf(stderr, "spyre: %s: %s\n", path.c_str(), what.c_str());
    }
    out.Write("\n]}\n");
    out.Commit();
    return all.size();
}

}  // namespace

std::string ProcessTracePath(const std::string& path) {
    auto env = [](std::initializer_list<const char*> names) -> std::string {
        for (const char* n : names)
            if (const char* v = std::getenv(n); v && *v) return v;
        return "";
    };
    const std::string rank = env({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"});
    const std::string size = env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
    std::string out;
    bool named = false;
    for (size_t i = 0; i < path.size(); ++i) {
        if (path[i] == '%' && i + 1 < path.size() && (path[i + 1] == 'p' || path[i + 1] == 'r')) {
            out += path[i + 1] == 'p' ? std::to_string(getpid()) : (rank.empty() ? "0" : rank);
            named = true;
            ++i;
        } else {
            out += path[i];
        }
    }
    if (!named && !rank.empty() && std::atoi(size.c_str()) > 1) {
        const size_t slash = out.rfind('/'), dot = out.rfind('.');
        const size_t at = dot != std::string::npos && (slash == std::string::npos || dot > slash) ? dot : out.size();
        out.insert(at, ".rank" + rank);
    }
    return out;
}

namespace {

// SPYRE_TRACE=path: record from the library's load to the process's exit.
// A child forked without exec inherits the recording and the path (with
// its %p already the parent's pid): it leaves the file to the parent,
// whose recording it would otherwise replace when it exits first.
struct FromEnvironment {
    FromEnvironment() {
        const char* path = std::getenv("SPYRE_TRACE");
        if (!path || !*path) return;
        try {
            Start(ProcessTracePath(path));
            detail::SaveOnTerminatingSignals();
        } catch (const Error& e) {
            // A trace the user asked for but cannot have must not stop the
            // program; it says so (it ran untraced without a word).
            std::fprintf(stderr, "spyre: SPYRE_TRACE=%s: %s; running untraced\n", path, e.message().c_str());
        }
    }
    ~FromEnvironment() {
        if (getpid() != pid) return;
        try {
            Stop();
        } catch (const Error& e) {
            // The exit status is the program's; the lost trace is said (a
            // full disk ended it without a word, the file cut short).
            std::fprintf(stderr, "spyre: SPYRE_TRACE: %s; the trace is lost\n", e.message().c_str());
        }
    }
    const pid_t pid = getpid();
} from_environment;

}  // namespace

}  // namespace spyre::trace
