// SPDX-License-Identifier: Apache-2.0
// The timeline trace against a private mock: a stream's launches, inline
// and DMA copies, a callback and an event, recorded and read back as the
// Chrome trace-event JSON a viewer would: valid, every span closed, spans
// of each stream and device track in order and apart, every flow arrow
// with both ends, device spans inside their op's enqueue-to-completion.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "device/device_internals.hpp"
#include "spyre/error.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/trace/trace.hpp"
#include "trace/recorder.hpp"
#include "trace/trace_file.hpp"
#include "device_programs.hpp"
#include "stream_fixture.hpp"

using namespace spyre;
using json = nlohmann::json;

namespace {

class TraceTest : public test::StreamTest {
protected:
    void TearDown() override {
        trace::Stop();  // a failed test must not leave a recording running
        if (!path_.empty() && !std::getenv("KEEP_TRACE")) std::filesystem::remove(path_);
        test::StreamTest::TearDown();
    }
    std::string Path() {
        path_ = (std::filesystem::temp_directory_path() / ("spyre_trace_test_" + std::to_string(getpid()) + ".json"))
                    .string();
        return path_;
    }
    std::string path_;
};

json Load(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);  // throws on invalid JSON: the test fails
}

// The track names by tid ("thread_name" metadata).
std::map<int64_t, std::string> TrackNames(const json& t) {
    std::map<int64_t, std::string> names;
    for (const json& e : t["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name") names[e["tid"].get<int64_t>()] = e["args"]["name"];
    return names;
}

// What one stream does, traced: launches, an inline and a DMA copy each way
// (1 MiB goes to the DMA engine), a host callback and an event.
void RunWork(Device& dev, int launches) {
    FlexStream s = dev.CreateStream();
    const std::vector<uint8_t> program = ProgramImage{}.Encode();
    const DeviceAllocation prog = dev.allocator().Allocate(program.size());
    const DeviceAllocation big = dev.allocator().Allocate(1 << 20);
    std::vector<uint8_t> in(1 << 20), out(1 << 20);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7 + 1);
    s.CopyToDevice(program.data(), prog.handle, program.size());
    for (int i = 0; i < launches; ++i) s.Launch(prog.handle);
    s.CopyToDevice(in.data(), big.handle, in.size());
    s.CopyFromDevice(out.data(), big.handle, out.size());
    bool called = false;
    s.AddCallback([&] { called = true; });
    Event ev(dev);
    ev.Record(s);
    s.Synchronize();
    EXPECT_TRUE(called);
    EXPECT_EQ(in, out);
    dev.allocator().Free(big.handle);
    dev.allocator().Free(prog.handle);
}

}  // namespace

TEST_F(TraceTest, AStreamsWorkIsATimelineAViewerCanOpen) {
    Device dev = OpenDevice();
    const std::string path = Path();
    trace::Start(path);
    constexpr int kLaunches = 20;
    RunWork(dev, kLaunches);
    const size_t written = trace::Stop();
    EXPECT_GT(written, size_t(kLaunches));

    const json t = Load(path);
    ASSERT_TRUE(t.contains("traceEvents"));
    const auto names = TrackNames(t);
    const std::string pci = DeviceInternals::Function(dev).pci_address();
    int64_t stream_tid = -1, ring_tid = -1, dma_tid = -1;
    for (const auto& [tid, name] : names) {
        if (name.find(pci + " stream ") == 0) stream_tid = tid;
        if (name == pci + " device ring") ring_tid = tid;
        if (name == pci + " DMA") dma_tid = tid;
    }
    ASSERT_NE(stream_tid, -1) << "no stream track";
    ASSERT_NE(ring_tid, -1) << "no device ring track";
    ASSERT_NE(dma_tid, -1) << "no DMA track";

    std::map<int64_t, std::vector<json>> spans;  // tid -> 'X' events
    std::map<uint64_t, int> flow_starts, flow_ends;
    std::map<std::string, int> api;
    bool memory_counter = false;
    for (const json& e : t["traceEvents"]) {
        ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e.dump();
        const std::string ph = e["ph"];
        if (ph == "M") continue;
        ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e.dump();
        if (ph == "X") {
            ASSERT_TRUE(e.contains("dur") && e["dur"].get<double>() >= 0) << e.dump();
            spans[e["tid"].get<int64_t>()].push_back(e);
            if (e["cat"] == "api") ++api[e["name"]];
        } else if (ph == "s") {
            ++flow_starts[e["id"].get<uint64_t>()];
        } else if (ph == "f") {
            ++flow_ends[e["id"].get<uint64_t>()];
        } else if (ph == "C") {
            memory_counter |= e["name"].get<std::string>().find("device memory in use") == 0;
        } else {
            ADD_FAILURE() << "unexpected phase " << e.dump();
        }
    }
    EXPECT_EQ(api["FlexStream::Launch"], kLaunches);
    EXPECT_EQ(api["FlexStream::CopyToDevice"], 2);
    EXPECT_EQ(api["FlexStream::CopyFromDevice"], 1);
    EXPECT_EQ(api["FlexStream::Synchronize"], 1);
    EXPECT_EQ(api["Event::Record"], 1);
    EXPECT_TRUE(memory_counter);

    // Every op of the stream: program copy, launches, two copies, the
    // callback, the event record.
    EXPECT_EQ(spans[stream_tid].size(), size_t(1 + kLaunches + 2 + 1 + 1));
    EXPECT_EQ(spans[dma_tid].size(), 3u);  // the 1 MiB copies, and the program copy the ring carried inline
    // The ring ran the program copy (inline) and the launches; the record,
    // behind the callback on an idle stream, settled on the host.
    EXPECT_EQ(spans[ring_tid].size(), size_t(1 + kLaunches));

    // Every arrow has both ends, once.
    EXPECT_EQ(flow_starts.size(), spans[stream_tid].size());
    for (const auto& [id, n] : flow_starts) {
        EXPECT_EQ(n, 1) << "flow " << id;
        EXPECT_EQ(flow_ends[id], 1) << "flow " << id << " has no end";
    }
    EXPECT_EQ(flow_ends.size(), flow_starts.size());

    // Stream, ring and DMA tracks: spans in time order, one after another.
    for (int64_t tid : {stream_tid, ring_tid, dma_tid}) {
        const auto& v = spans[tid];
        for (size_t i = 1; i < v.size(); ++i) {
            const double prev_end = v[i - 1]["ts"].get<double>() + v[i - 1]["dur"].get<double>();
            EXPECT_LE(prev_end, v[i]["ts"].get<double>() + 1e-3) << names.at(tid) << " spans overlap at " << i;
        }
    }
    // A device span lies inside its op's enqueue-to-completion span.
    std::map<int64_t, json> stream_ops;
    for (const json& e : spans[stream_tid]) stream_ops[e["args"]["op"].get<int64_t>()] = e;
    for (const json& d : spans[ring_tid]) {
        const int64_t op = d["args"]["op"];
        ASSERT_TRUE(stream_ops.count(op)) << d.dump();
        const json& s = stream_ops[op];
        const double enqueued = s["args"]["enqueued_us"], done = s["ts"].get<double>() + s["dur"].get<double>();
        EXPECT_GE(d["ts"].get<double>() + 1e-3, enqueued) << d.dump() << " vs " << s.dump();
        EXPECT_LE(d["ts"].get<double>() + d["dur"].get<double>(), done + 1e-3) << d.dump() << " vs " << s.dump();
    }
}

// SPYRE_TRACE under mpirun: every rank gets its own file.
// Operations still queued when the recording stops (a process exiting
// with work in flight) wrote the tails of their enqueue arrows and no
// heads: arrows to nowhere (found probing from outside). Only flows with
// both ends are written.
TEST_F(TraceTest, OperationsQueuedWhenTheRecordingStopsLeaveNoHalfArrows) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const DeviceAllocation block = dev.allocator().Allocate(4096);
    std::vector<uint8_t> bytes(4096, 0x33);
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::atomic<bool> entered{false};
    trace::Start(Path());
    s.CopyToDevice(bytes.data(), block.handle, bytes.size());  // ends inside the recording
    s.AddCallback([&] {
        entered = true;
        released.wait();
    });
    for (int i = 0; i < 5; ++i) s.CopyToDevice(bytes.data(), block.handle, bytes.size());  // queued behind it
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!entered && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(entered);
    trace::Stop();
    release.set_value();
    s.Synchronize();
    const json t = Load(path_);
    std::map<uint64_t, int> starts, ends;
    for (const json& e : t["traceEvents"]) {
        if (e["ph"] == "s") ++starts[e["id"].get<uint64_t>()];
        if (e["ph"] == "f") ++ends[e["id"].get<uint64_t>()];
    }
    EXPECT_GE(starts.size(), 1u);  // the first copy's (and the callback's) arrows
    EXPECT_EQ(starts.size(), ends.size());
    for (const auto& [id, n] : starts) EXPECT_EQ(ends[id], n) << "flow " << id << " has no end";
    dev.allocator().Free(block.handle);
}

TEST(TracePath, RanksAndProcessesGetTheirOwnFiles) {
    ::unsetenv("OMPI_COMM_WORLD_RANK");
    ::unsetenv("OMPI_COMM_WORLD_SIZE");
    ::unsetenv("PMIX_RANK");
    ::unsetenv("PMI_RANK");
    ::unsetenv("PMI_SIZE");
    const std::string pid = std::to_string(getpid());
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run.json"), "/tmp/run.json");
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run-%p.json"), "/tmp/run-" + pid + ".json");
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run-%r.json"), "/tmp/run-0.json");
    EXPECT_EQ(trace::ProcessTracePath("/tmp/100%.json"), "/tmp/100%.json");
    ::setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    ::setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run-%r.json"), "/tmp/run-2.json");
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run.json"), "/tmp/run.rank2.json");
    EXPECT_EQ(trace::ProcessTracePath("/tmp/a.d/run"), "/tmp/a.d/run.rank2");
    ::setenv("OMPI_COMM_WORLD_SIZE", "1", 1);  // a single rank keeps the path
    EXPECT_EQ(trace::ProcessTracePath("/tmp/run.json"), "/tmp/run.json");
    ::unsetenv("OMPI_COMM_WORLD_RANK");
    ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST_F(TraceTest, NothingIsRecordedWhenNoTraceRuns) {
    Device dev = OpenDevice();
    RunWork(dev, 3);
    EXPECT_EQ(trace::Stop(), 0u);
    // Stopped twice: still nothing, no error.
    EXPECT_EQ(trace::Stop(), 0u);
}

int Launches(const json& trace) {
    int launches = 0;
    for (const json& e : trace["traceEvents"])
        if (e["ph"] == "X" && e["name"] == "FlexStream::Launch") ++launches;
    return launches;
}

// A thread or process name that is not UTF-8 (names are bytes on Linux)
// aborted the process when the trace was written (nlohmann's dump throws
// on such a string) and lost the trace (found probing from outside). Its
// bad bytes are written as U+FFFD now.
TEST_F(TraceTest, ANameThatIsNotUtf8IsWrittenWithReplacementCharacters) {
    Device dev = OpenDevice();
    const std::string path = Path();
    trace::Start(path);
    std::thread named([&] {
        pthread_setname_np(pthread_self(), "bad\xff\xfename");
        RunWork(dev, 2);
    });
    named.join();
    trace::Stop();
    const json t = Load(path);
    bool found = false;
    for (const auto& [tid, name] : TrackNames(t))
        if (name == "bad\xef\xbf\xbd\xef\xbf\xbdname") found = true;
    EXPECT_TRUE(found) << "no track named bad\\ufffd\\ufffdname";
    EXPECT_EQ(Launches(t), 2);
}

TEST_F(TraceTest, ARecordingStartedAgainOnItsPathStartsOver) {
    Device dev = OpenDevice();
    const std::string path = Path();
    trace::Start(path);
    RunWork(dev, 50);
    trace::Start(path);  // again: the file holds the second recording only
    RunWork(dev, 2);
    trace::Stop();
    EXPECT_EQ(Launches(Load(path)), 2);
}

// A second Start left the first recording's file empty (its events dropped),
// a file every trace reader refuses (found probing from outside).
TEST_F(TraceTest, ASecondStartWritesTheFirstRecordingToItsFile) {
    Device dev = OpenDevice();
    const std::string first = Path(), second = first + ".second.json";
    trace::Start(first);
    RunWork(dev, 5);
    trace::Start(second);
    RunWork(dev, 2);
    trace::Stop();
    EXPECT_EQ(Launches(Load(first)), 5);
    EXPECT_EQ(Launches(Load(second)), 2);
    std::filesystem::remove(second);
}

TEST_F(TraceTest, AnUnwritablePathIsRefusedAtStart) {
    try {
        trace::Start("/nonexistent-dir/trace.json");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(e.message().find("/nonexistent-dir/trace.json"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(trace::Enabled());
}

// A second Start refused for its path leaves the running recording alone:
// it ended that recording first, and what ran after went unrecorded
// without a word (probe of 5 Dec).
TEST_F(TraceTest, ASecondStartRefusedForItsPathLeavesTheRecordingRunning) {
    Device dev = OpenDevice();
    const std::string path = Path();
    trace::Start(path);
    RunWork(dev, 3);
    EXPECT_THROW(trace::Start("/nonexistent-dir/trace.json"), Error);
    EXPECT_TRUE(trace::Enabled());
    RunWork(dev, 2);
    EXPECT_GT(trace::Stop(), 0u);
    EXPECT_EQ(Launches(Load(path)), 5);
}

// Each end of a flow binds to the span around it on its row. An API call
// still running when the recording stopped (or whose span a bounded
// recording dropped: spans are recorded when they end) kept its 'enqueue'
// tail with no span to bind to, an arrow from nowhere (found probing).
TEST_F(TraceTest, AFlowIsWrittenOnlyWithTheSpansItsEndsBindTo) {
    for (const bool call_ended : {true, false}) {
        SCOPED_TRACE(call_ended ? "the call ended" : "the call still runs");
        const std::string path = Path();
        trace::Start(path);
        const uint32_t flow = trace::detail::NewFlow();
        std::optional<trace::Scope> call(std::in_place, "an_enqueue");
        trace::detail::FlowOut(flow, trace::detail::NowNs());
        if (call_ended) call.reset();
        const uint64_t at = trace::detail::NowNs();
        trace::detail::Span(trace::detail::NamedTrack("a stream"), "stream", "its_work", at, at + 1000, -1, 0, flow);
        trace::Stop();
        call.reset();
        const json written = Load(path);
        int tails = 0, heads = 0, calls = 0, work = 0;
        for (const json& e : written["traceEvents"]) {
            if (e["ph"] == "s" && e["id"] == flow) ++tails;
            if (e["ph"] == "f" && e["id"] == flow) ++heads;
            if (e["ph"] == "X" && e["name"] == "an_enqueue") ++calls;
            if (e["ph"] == "X" && e["name"] == "its_work") ++work;
        }
        EXPECT_EQ(calls, call_ended ? 1 : 0);
        EXPECT_EQ(work, 1);
        EXPECT_EQ(tails, call_ended ? 1 : 0);
        EXPECT_EQ(heads, call_ended ? 1 : 0);
    }
}

// A recording under a 1 MiB bound: spans named `name` the file holds, and
// the records its "trace truncated" event says were dropped.
struct Bounded {
    int kept = 0;
    uint64_t dropped = 0;
};
Bounded CountBounded(const json& t, const std::string& name) {
    Bounded b;
    for (const json& e : t["traceEvents"]) {
        if (e["ph"] == "X" && e["name"] == name) ++b.kept;
        if (e["ph"] == "i" && e["name"].get<std::string>().find("trace truncated") == 0) {
            b.dropped = e["args"]["dropped"].get<uint64_t>();
            EXPECT_NE(e["name"].get<std::string>().find("past SPYRE_TRACE_MAX_MB (1 MiB)"), std::string::npos) << e;
        }
    }
    return b;
}

// A recording is bounded (SPYRE_TRACE_MAX_MB, every record of every
// thread): a long traced run grew without limit, 3.4 GB for a 60 s copy
// loop (outside probe). Past the bound records are dropped, counted, and
// the file ends with an instant event saying how many.
TEST_F(TraceTest, ARecordingPastItsBoundDropsAndCountsTheRest) {
    constexpr int kPerMb = 16384, kSpans = 3 * kPerMb;
    const std::string path = Path();
    {
        test::ScopedEnv bound("SPYRE_TRACE_MAX_MB", "1");
        trace::Start(path);
    }
    for (int i = 0; i < kSpans; ++i) SPYRE_TRACE_SCOPE("bounded");
    trace::Stop();
    const auto [kept, dropped] = CountBounded(Load(path), "bounded");
    EXPECT_EQ(kept, kPerMb) << "1 MiB of records, this thread's first included";
    EXPECT_EQ(uint64_t(kept) + dropped, uint64_t(kSpans));
    // A bound that is no number of MiB is refused at Start.
    test::ScopedEnv bad("SPYRE_TRACE_MAX_MB", "lots");
    EXPECT_SPYRE_ERROR(trace::Start(path), InvalidArgument, "SPYRE_TRACE_MAX_MB='lots' is not a whole number of MiB");
    for (const char* text : {" 5", "+5", "-5", "5 "}) {
        test::ScopedEnv signed_or_blank("SPYRE_TRACE_MAX_MB", text);
        EXPECT_SPYRE_ERROR(trace::Start(path), InvalidArgument,
                           std::string("SPYRE_TRACE_MAX_MB='") + text + "' is not a whole number of MiB");
    }
    EXPECT_FALSE(trace::Enabled());
}

// Paths that are no regular file are written in place, as the user named
// them (found probing from outside the first version, which wrote beside
// every path and renamed over it): a symlink stays a symlink and its
// target gets the trace; a pipe no process reads is refused at Stop, not
// waited for (the exit hung past SIGTERM), and Start does not open it
// (its reader read the end).
TEST_F(TraceTest, ASymlinkKeepsItsTargetAndAPipeWithoutReaderIsRefused) {
    const std::filesystem::path dir = std::filesystem::path(Path()).parent_path() / ("links-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir / "real");
    std::ofstream(dir / "real" / "target.json") << "old";
    std::filesystem::create_symlink(dir / "real" / "target.json", dir / "link.json");
    trace::Start((dir / "link.json").string());
    { SPYRE_TRACE_SCOPE("through_the_link"); }
    trace::Stop();
    EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.json"));
    const json t = Load((dir / "real" / "target.json").string());
    EXPECT_TRUE(std::any_of(t["traceEvents"].begin(), t["traceEvents"].end(),
                            [](const json& e) { return e["name"] == "through_the_link"; }));

    const std::string fifo = (dir / "trace.fifo").string();
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    trace::Start(fifo);  // opens nothing
    { SPYRE_TRACE_SCOPE("into_the_pipe"); }
    EXPECT_SPYRE_ERROR(trace::Stop(), IoError, "(a pipe no process reads)");
    EXPECT_FALSE(trace::Enabled());
    std::filesystem::remove_all(dir);
}

// A trace renamed over an earlier file keeps that file's mode: a 0600
// trace stayed private only while it was written in place.
TEST_F(TraceTest, ATraceRenamedIntoPlaceKeepsTheFilesMode) {
    const std::string path = Path();
    std::ofstream(path) << "old";
    ASSERT_EQ(chmod(path.c_str(), 0600), 0);
    trace::Start(path);
    { SPYRE_TRACE_SCOPE("private"); }
    trace::Stop();
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    (void)Load(path);
}

// Threads that record a few spans each take a page apiece, counted against
// the bound: each pinned a whole MiB outside it, so 2,000 short threads
// held 2 GB under a 1 MiB bound (outside probe). Under 1 MiB, 256 threads'
// first pages fit; the later threads' records are dropped and counted.
TEST_F(TraceTest, ShortThreadsTakeAPageEachUnderTheBound) {
    constexpr int kThreads = 300, kSpansEach = 3, kFit = 16384 / 64;
    const std::string path = Path();
    {
        test::ScopedEnv bound("SPYRE_TRACE_MAX_MB", "1");
        trace::Start(path);
    }
    for (int i = 0; i < kThreads; ++i)
        std::thread([] {
            for (int k = 0; k < kSpansEach; ++k) SPYRE_TRACE_SCOPE("short thread");
        }).join();
    trace::Stop();
    const auto [kept, dropped] = CountBounded(Load(path), "short thread");
    EXPECT_EQ(kept, kFit * kSpansEach);
    EXPECT_EQ(uint64_t(kept) + dropped, uint64_t(kThreads * kSpansEach));
}

// ------------------------------------------------------------ orchestration

namespace {

enum : int32_t { kAdd = 7 };

// The diamond t0 -> {t1, t2} -> t3 over buffers of its own: X = A + B,
// Y = X + A, Z = X + B, W = Y + Z. Returns the task ids.
std::vector<int32_t> SubmitDiamond(Orchestrator& orch, int32_t worker) {
    float* buf[3];
    for (float*& b : buf) {
        b = static_cast<float*>(orch.Alloc(1024));
        for (int i = 0; i < 256; ++i) b[i] = float(i);
    }
    auto [A, B, W] = buf;
    // c null: an implicit output, returned with the task's id.
    auto add = [&](float* a, float* b, float* c) {
        TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, b, 1024, {}}, {PARAM_OUTPUT, c, 1024, {}}};
        const int32_t id = orch.Submit(kAdd, worker, p);
        return std::pair{id, c ? c : static_cast<float*>(orch.TaskOutput(id))};
    };
    // In a scope, as an orchestration function submits, with implicit
    // outputs in between: the scope holds their producers, so a producer
    // done before its consumer is submitted is still found and the arrow
    // drawn (a producer of an explicit buffer done by then is consumed, and
    // that arrow is rightly absent: nothing was waited for).
    Orchestrator::Scope scope = orch.BeginScope();
    const auto [t0, X] = add(A, B, nullptr);
    const auto [t1, Y] = add(X, A, nullptr);
    const auto [t2, Z] = add(X, B, nullptr);
    const auto [t3, out] = add(Y, Z, W);
    std::vector<int32_t> ids = {t0, t1, t2, t3};
    orch.WaitAll();
    for (int i = 0; i < 256; ++i) EXPECT_EQ(out[i], 6.0f * float(i)) << i;  // (2i + i) + (2i + i)
    scope.End();
    for (float* b : buf) orch.Free(b);
    return ids;
}

// The orchestration part of a trace, checked as a viewer reads it: task
// spans one after another on each worker's track, every flow with both
// ends bound inside a span, and the arrows exactly the DAG's edges.
struct OrchTrace {
    std::map<int64_t, json> task_span;  // task id -> its span
    std::set<std::pair<int64_t, int64_t>> edges;  // (producer task, consumer task) from the arrows
    std::map<std::string, int> counters;
    int submits = 0;
    std::set<std::string> task_tracks;
};

OrchTrace ReadOrchestration(const json& t) {
    OrchTrace o;
    const auto names = TrackNames(t);
    std::map<int64_t, std::vector<json>> by_track;
    std::map<uint64_t, json> starts, ends;
    std::map<int64_t, double> last_ts;  // per track: timestamps never go back
    for (const json& e : t["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "M") continue;
        if (e.contains("tid")) {
            const int64_t tid = e["tid"];
            const double ts = e["ts"];
            if (last_ts.count(tid)) {
                EXPECT_GE(ts, last_ts[tid]) << "timestamps go back on track " << tid;
            }
            last_ts[tid] = ts;
        }
        const bool is_task = e.contains("args") && e["args"].contains("task");  // not a ring CB (also "device")
        if (ph == "X" && is_task && (e["cat"] == "task" || e["cat"] == "device")) {
            o.task_span[e["args"]["task"].get<int64_t>()] = e;
            by_track[e["tid"].get<int64_t>()].push_back(e);
            o.task_tracks.insert(names.at(e["tid"].get<int64_t>()));
            EXPECT_EQ(e["name"], "kernel " + std::to_string(e["args"]["kernel"].get<int>())) << e.dump();
        } else if (ph == "X" && e["name"] == "pto_submit_task") {
            ++o.submits;
        } else if (ph == "s" && e["cat"] == "flow" && e["name"] == "depends") {
            EXPECT_TRUE(starts.emplace(e["id"].get<uint64_t>(), e).second) << "flow started twice: " << e.dump();
        } else if (ph == "f" && e["name"] == "depends") {
            EXPECT_EQ(e["bp"], "e");
            EXPECT_TRUE(ends.emplace(e["id"].get<uint64_t>(), e).second) << "flow ended twice: " << e.dump();
        } else if (ph == "C") {
            const std::string name = e["name"];
            ++o.counters[name.substr(0, name.find(" ("))];
        }
    }
    for (auto& [tid, v] : by_track)
        for (size_t i = 1; i < v.size(); ++i)
            EXPECT_LE(v[i - 1]["ts"].get<double>() + v[i - 1]["dur"].get<double>(), v[i]["ts"].get<double>() + 1e-3)
                << names.at(tid) << ": tasks overlap on one worker";
    // The span on `ev`'s track that holds its timestamp.
    auto holder = [&](const json& ev) -> int64_t {
        for (const json& s : by_track[ev["tid"].get<int64_t>()]) {
            const double ts = ev["ts"], a = s["ts"], b = a + s["dur"].get<double>();
            if (ts >= a - 1e-3 && ts <= b + 1e-3) return s["args"]["task"];
        }
        return -1;
    };
    EXPECT_EQ(starts.size(), ends.size());
    for (const auto& [id, s] : starts) {
        EXPECT_TRUE(ends.count(id)) << "flow " << id << " has no end";
        if (!ends.count(id)) continue;
        const int64_t producer = holder(s), consumer = holder(ends[id]);
        EXPECT_NE(producer, -1) << "flow start outside every task: " << s.dump();
        EXPECT_NE(consumer, -1) << "flow end outside every task: " << ends[id].dump();
        EXPECT_TRUE(o.edges.emplace(producer, consumer).second) << "two arrows " << producer << " -> " << consumer;
    }
    return o;
}

// The diamond recorded into `path` and read back: four task spans, four
// submissions, and arrows for exactly its four edges.
OrchTrace TraceDiamond(Orchestrator& orch, int32_t worker, const std::string& path) {
    trace::Start(path);
    const std::vector<int32_t> ids = SubmitDiamond(orch, worker);
    trace::Stop();
    OrchTrace o = ReadOrchestration(Load(path));
    EXPECT_EQ(o.task_span.size(), 4u);
    const std::set<std::pair<int64_t, int64_t>> want = {
        {ids[0], ids[1]}, {ids[0], ids[2]}, {ids[1], ids[3]}, {ids[2], ids[3]}};
    EXPECT_EQ(o.edges, want);
    EXPECT_EQ(o.submits, 4);
    return o;
}

}  // namespace

TEST_F(TraceTest, ADiamondOnTheCardsCoresHasArrowsExactlyForItsDependencies) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
    const std::vector<uint8_t> program = test::AddProgram256();
    const DeviceBuffer prog = test::UploadProgram(dev, program);
    orch.RegisterDeviceKernel(kAdd, dev.allocator().DeviceAddress(prog.handle(), program.size()));

    const OrchTrace o = TraceDiamond(orch, WORKER_VECTOR, Path());
    // Device tasks sit on core tracks, inside the host's send-to-reap span.
    const std::string pci = DeviceInternals::Function(dev).pci_address();
    for (const std::string& track : o.task_tracks) EXPECT_EQ(track.rfind(pci + " core ", 0), 0u) << track;
    for (const auto& [id, e] : o.task_span) {
        EXPECT_EQ(e["cat"], "device");
        EXPECT_EQ(e["args"]["kernel"], kAdd);
        const double ts = e["ts"], end = ts + e["dur"].get<double>();
        EXPECT_GE(ts + 1e-3, e["args"]["sent_us"].get<double>()) << e.dump();
        EXPECT_LE(end, e["args"]["reaped_us"].get<double>() + 1e-3) << e.dump();
        EXPECT_FALSE(e["args"].contains("status") || e["args"].contains("error")) << e.dump();  // all succeeded
    }
    EXPECT_GT(o.counters.at("ready tasks"), 0);
    EXPECT_GT(o.counters.at("heap ring bytes in use"), 0);
}

// A device task the card skipped (its producer failed: DEPENDENCY_FAILED,
// it never ran) has no span and no arrow, as a skipped host task has none;
// it had a core span with no status and a `depends` arrow, as if it had run
// and succeeded (found probing from outside).
TEST_F(TraceTest, ADeviceTaskSkippedOnTheCardHasNoSpan) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
    const std::vector<uint8_t> good = test::AddProgram256(), junk(good.size(), 0xAB);
    const DeviceBuffer add = test::UploadProgram(dev, good), bad = test::UploadProgram(dev, good);
    orch.RegisterDeviceKernel(kAdd, dev.allocator().DeviceAddress(add.handle(), good.size()));
    orch.RegisterDeviceKernel(kAdd + 1, dev.allocator().DeviceAddress(bad.handle(), good.size()));
    dev.default_stream().CopyToDevice(junk.data(), bad.handle(), junk.size());  // the card refuses it when it runs
    dev.default_stream().Synchronize();
    const std::string path = Path();
    trace::Start(path);
    int32_t failing = -1, skipped = -1;
    {
        auto scope = orch.BeginScope();
        void* a = orch.Alloc(1024);
        void* c = orch.Alloc(1024);
        void* d = orch.Alloc(1024);
        TaskParam first[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_INOUT, c, 1024, {}}};
        failing = orch.Submit(kAdd + 1, WORKER_VECTOR, first);
        TaskParam second[] = {{PARAM_INPUT, c, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_INOUT, d, 1024, {}}};
        skipped = orch.Submit(kAdd, WORKER_VECTOR, second);
        EXPECT_SPYRE_ERROR(orch.WaitAll(), DeviceError, "1 dependent task(s) skipped");
    }
    trace::Stop();
    const json t = Load(path);
    int failing_spans = 0, skipped_spans = 0, arrows = 0;
    for (const json& e : t["traceEvents"]) {
        if (e["ph"] == "X" && e.contains("args") && e["args"].contains("task")) {
            if (e["args"]["task"] == failing) ++failing_spans;
            if (e["args"]["task"] == skipped) ++skipped_spans;
        }
        if (e["ph"] == "s" && e["name"] == "depends") ++arrows;
    }
    EXPECT_EQ(failing_spans, 1) << "the failed task ran: its span says how";
    EXPECT_EQ(skipped_spans, 0);
    EXPECT_EQ(arrows, 0);
}

// A span says how its work failed: a Launch the device refused, on the
// stream and the device ring, and an orchestration task's status. A failed
// op looked the same as one that succeeded (found probing from outside).
TEST_F(TraceTest, AFailedOpsSpansSayTheDevicesErrorAndATasksStatus) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const DeviceAllocation junk = dev.allocator().Allocate(256);
    const std::vector<uint8_t> bytes(256, 0x5a);  // no program: the device refuses its format
    trace::Start(Path());
    s.CopyToDevice(bytes.data(), junk.handle, bytes.size());
    s.Launch(junk.handle);
    EXPECT_SPYRE_ERROR(s.Synchronize(), DeviceError, "Launch failed on the device: PROGRAM_FORMAT");
    Orchestrator orch = Orchestrator::CreateOnHostMemory(
        1 << 20, {.task_ring_size = 16, .heap_size = 1 << 16, .host_threads = 1, .run_cheap_host_tasks_here = false});
    orch.RegisterHostKernel(kAdd, [](std::span<void* const>, std::span<const uint64_t>) { return 5u; });
    orch.Submit(kAdd, WORKER_HOST, {});
    EXPECT_THROW(orch.WaitAll(), Error);
    trace::Stop();
    const json t = Load(path_);
    const auto names = TrackNames(t);
    const std::string pci = DeviceInternals::Function(dev).pci_address();
    std::map<std::string, std::vector<json>> spans;  // "<track> <name>"
    for (const json& e : t["traceEvents"])
        if (e["ph"] == "X" && names.count(e["tid"].get<int64_t>()))
            spans[names.at(e["tid"].get<int64_t>()) + " " + e["name"].get<std::string>()].push_back(e);
    const std::string stream = pci + " stream " + std::to_string(s.stream_index());
    for (const std::string& launch : {stream + " Launch", pci + " device ring Launch"}) {
        ASSERT_EQ(spans[launch].size(), 1u) << launch;
        EXPECT_EQ(spans[launch][0]["args"]["error"], "PROGRAM_FORMAT") << spans[launch][0].dump();
    }
    ASSERT_EQ(spans[stream + " CopyToDevice"].size(), 1u);
    EXPECT_FALSE(spans[stream + " CopyToDevice"][0]["args"].contains("error"));
    size_t tasks = 0;
    for (const auto& [key, list] : spans)
        for (const json& e : list)
            if (e["cat"] == "task") {
                ++tasks;
                EXPECT_EQ(e["args"]["status"], 5) << e.dump();
                EXPECT_FALSE(e["args"].contains("error")) << e.dump();  // a host kernel's code names no device error
            }
    EXPECT_EQ(tasks, 1u);
    dev.allocator().Free(junk.handle);
}

TEST_F(TraceTest, ADiamondOnHostWorkersHasArrowsExactlyForItsDependencies) {
    // Cheap tasks ready at submission would run on the submitting thread
    // (a track of their own): here every task is a host worker's.
    Orchestrator orch = Orchestrator::CreateOnHostMemory(
        4 << 20, {.task_ring_size = 64, .heap_size = 1 << 20, .host_threads = 2, .run_cheap_host_tasks_here = false});
    orch.RegisterHostKernel(kAdd, [](std::span<void* const> b, std::span<const uint64_t>) {
        auto* a = static_cast<const float*>(b[0]);
        auto* c = static_cast<const float*>(b[1]);
        auto* out = static_cast<float*>(b[2]);
        for (int i = 0; i < 256; ++i) out[i] = a[i] + c[i];
        return 0u;
    });
    const OrchTrace o = TraceDiamond(orch, WORKER_HOST, Path());
    for (const std::string& track : o.task_tracks) EXPECT_EQ(track.rfind("host memory host worker ", 0), 0u) << track;
}

// A copy small enough to ride inside the stream's control blocks is still a
// copy: it is drawn on the device's DMA track like one the DMA engine moved.
TEST_F(TraceTest, ACopyTheRingCarriesInlineIsOnTheDmaTrack) {
    Device dev = OpenDevice();
    const DeviceAllocation cell = dev.allocator().Allocate(64);
    const uint64_t value = 0x1122334455667788ull;
    const std::string path = Path();
    trace::Start(path);
    FlexStream s = dev.CreateStream();
    s.CopyToDevice(&value, cell.handle, sizeof value);
    s.Synchronize();
    EXPECT_EQ(dev.dma().Stats().failed, 0u);
    trace::Stop();
    dev.allocator().Free(cell.handle);

    const json t = Load(path);
    int64_t dma_tid = -1;
    for (const auto& [tid, name] : TrackNames(t))
        if (name == DeviceInternals::Function(dev).pci_address() + " DMA") dma_tid = tid;
    ASSERT_NE(dma_tid, -1) << "no DMA track";
    int copies = 0;
    for (const json& e : t["traceEvents"])
        if (e["ph"] == "X" && e["tid"] == dma_tid && e["name"] == "CopyToDevice") {
            EXPECT_EQ(e["args"]["bytes"], sizeof value) << e.dump();
            ++copies;
        }
    EXPECT_EQ(copies, 1);
}

// Copies that overlap in time (two threads, each with its own 16 MiB
// copies) went onto one DMA track as partially overlapping spans, which a
// viewer's track cannot draw: each lane's spans now follow one another.
TEST_F(TraceTest, OverlappingCopiesGoOnLanesWhoseSpansFollowOneAnother) {
    Device dev = OpenDevice();
    constexpr uint64_t kBytes = 16ull << 20;
    const DeviceAllocation a = dev.allocator().Allocate(kBytes), b = dev.allocator().Allocate(kBytes);
    std::vector<uint8_t> host_a(kBytes, 1), host_b(kBytes, 2);
    const std::string path = Path();
    trace::Start(path);
    auto copies = [&](const DeviceAllocation& to, std::vector<uint8_t>& from) {
        for (int i = 0; i < 6; ++i) dev.dma().Wait(dev.dma().CopyToDevice(from.data(), to.handle, kBytes));
    };
    std::thread other([&] { copies(b, host_b); });
    copies(a, host_a);
    other.join();
    trace::Stop();
    dev.allocator().Free(a.handle);
    dev.allocator().Free(b.handle);

    const json t = Load(path);
    const std::string pci = DeviceInternals::Function(dev).pci_address();
    std::map<int64_t, std::string> lanes;
    for (const auto& [tid, name] : TrackNames(t))
        if (name.rfind(pci + " DMA", 0) == 0) lanes[tid] = name;
    ASSERT_FALSE(lanes.empty()) << "no DMA track";
    EXPECT_EQ(lanes.begin()->second, pci + " DMA");  // the first lane keeps the track's name
    size_t spans = 0;
    for (const auto& [tid, name] : lanes) {
        std::vector<std::pair<double, double>> on_lane;
        for (const json& e : t["traceEvents"])
            if (e["ph"] == "X" && e["tid"] == tid) on_lane.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
        std::sort(on_lane.begin(), on_lane.end());
        for (size_t i = 1; i < on_lane.size(); ++i)
            EXPECT_LE(on_lane[i - 1].second, on_lane[i].first + 1e-3) << name << ": span " << i << " starts inside the one before";
        spans += on_lane.size();
    }
    EXPECT_EQ(spans, 12u);
}

// One stream's small copies run one after another, and the trace draws
// them so, on one DMA lane: each span is where the queue moved the bytes.
// Drawn from submission (the stream hands a run of copies over at once) to
// the poll that saw each end, 200 of them took 64 lanes (found probing
// from outside).
TEST_F(TraceTest, OneStreamsCopiesGoOnOneDmaLane) {
    Device dev = OpenDevice();
    const DeviceAllocation a = dev.allocator().Allocate(1 << 20);
    const std::vector<uint8_t> src(1 << 20, 1);
    const std::string path = Path();
    trace::Start(path);
    FlexStream& s = dev.default_stream();
    for (int i = 0; i < 200; ++i) s.CopyToDevice(src.data(), a.handle, 64 + uint64_t(i));
    s.Synchronize();
    trace::Stop();
    dev.allocator().Free(a.handle);

    const json t = Load(path);
    const std::string pci = DeviceInternals::Function(dev).pci_address();
    std::set<std::string> lanes;
    size_t spans = 0;
    for (const auto& [tid, name] : TrackNames(t)) {
        if (name.rfind(pci + " DMA", 0) != 0) continue;
        lanes.insert(name);
        for (const json& e : t["traceEvents"]) spans += e["ph"] == "X" && e["tid"] == tid;
    }
    EXPECT_EQ(lanes, std::set<std::string>{pci + " DMA"});
    EXPECT_GT(spans, 0u) << "no copy on the DMA track";
}

namespace {

// trace_signal_helper (`mode`: "", "own" or "fork") started with
// SPYRE_TRACE=`path`, its stdout (and its stderr, `with_stderr`) on the
// pipe end `*said_fd`: its pid.
pid_t StartHelper(const std::string& path, const char* mode, int* said_fd, bool with_stderr = false) {
    const std::filesystem::path helper = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "trace_signal_helper";
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "SPYRE_TRACE=", 12) != 0) env_strings.emplace_back(*e);
    env_strings.push_back("SPYRE_TRACE=" + path);
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    const std::string helper_path = helper.string();
    std::vector<char*> argv = {const_cast<char*>(helper_path.c_str())};
    if (*mode) argv.push_back(const_cast<char*>(mode));
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        if (with_stderr) dup2(out[1], STDERR_FILENO);
        // As a shell's background job this may run with SIGINT ignored: the helper starts with defaults.
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        execve(argv[0], argv.data(), envp.data());
        _exit(127);
    }
    close(out[1]);
    *said_fd = out[0];
    return pid;
}

// What the helper printed until `until` was in it, EOF or 30 s.
std::string ReadUntil(int fd, const std::string& until) {
    std::string said;
    char buf[64];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (said.find(until) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        said.append(buf, size_t(n));
    }
    return said;
}

// How trace_signal_helper (`mode`: "" or "own") ended after `sig`, with
// SPYRE_TRACE=`path`: its wait status. Bounded: 30 s for "ready", 30 s to end.
int StatusAfterSignal(const std::string& path, int sig, const char* mode) {
    int out = -1;
    const pid_t pid = StartHelper(path, mode, &out);
    const std::string said = ReadUntil(out, "ready\n");
    close(out);
    if (said.find("ready\n") != std::string::npos) kill(pid, sig);
    if (!test::WaitForExit(pid, std::chrono::seconds(30))) {
        ADD_FAILURE() << "the helper did not end within 30 s of signal " << sig << " (it said: " << said << ")";
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

// How trace_signal_helper `mode`, which ends itself, ended: its wait
// status, or -1 when it had not within 30 s (then killed).
int StatusOfHelperEndingItself(const std::string& path, const char* mode) {
    int out = -1;
    const pid_t pid = StartHelper(path, mode, &out, true);
    const bool ended = test::WaitForExit(pid, std::chrono::seconds(30));
    close(out);
    int status = 0;
    if (!ended) kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return ended ? status : -1;
}

void ExpectEndedBySignal(int status, int sig) {
    EXPECT_TRUE(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == sig) << "wait status " << status;
}

// The helper's trace at `path` is written, and holds its one span; removed.
void ExpectTheHelpersSpanAndRemove(const std::string& path) {
    ASSERT_GT(std::filesystem::exists(path) ? std::filesystem::file_size(path) : 0u, 0u) << "no trace written";
    const json t = Load(path);
    int spans = 0;
    for (const json& e : t["traceEvents"]) spans += e["ph"] == "X" && e["name"] == "before_the_signal";
    EXPECT_EQ(spans, 1);
    std::filesystem::remove(path);
}

}  // namespace

// A trace that could not be written at exit (a full disk) left half a file,
// invalid JSON, and the program said nothing (an outside probe). The file
// is written beside its path and renamed over it whole, so processes that
// record to one path never splice their events either: a failed write
// leaves the placeholder Start made, no half file and no temporary, and
// stderr says the trace is lost; the exit status stays the program's. The
// file's earlier content stays (Start emptied it, and the first rename
// version left Start's empty placeholder).
// The same when SIGTERM ends the process: the lost trace was not said.
TEST(TraceFromEnvironment, ATraceThatCannotBeWrittenAtExitIsSaidLostAndLeavesNoHalfFile) {
  for (const char* mode : {"small", "small_signal"}) {
    SCOPED_TRACE(mode);
    const bool signalled = std::strcmp(mode, "small_signal") == 0;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("spyre-trace-cut-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "cut.json").string();
    const std::string before = "{\"traceEvents\":[]}\n";  // an earlier trace: kept whole
    std::ofstream(path) << before;
    int out = -1;
    const pid_t pid = StartHelper(path, mode, &out, true);
    const std::string said = ReadUntil(out, "the trace is lost");
    close(out);
    int status = 0;
    if (!test::WaitForExit(pid, std::chrono::seconds(30))) kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    if (signalled) {
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
    EXPECT_NE(said.find("spyre: SPYRE_TRACE: trace file " + path +
                        " could not be written completely; the trace is lost"),
              std::string::npos)
        << said;
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        left.push_back(e.path().filename().string() + " (" + std::to_string(e.file_size()) + " bytes)");
    EXPECT_EQ(left, std::vector<std::string>{"cut.json (" + std::to_string(before.size()) + " bytes)"});
    std::ifstream in(path);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), before);
    std::filesystem::remove_all(dir);
  }
}

// SPYRE_TRACE naming a path that cannot be created ran the program
// untraced without a word (an outside probe): it says so on stderr, and
// the program runs on.
TEST(TraceFromEnvironment, AnUnusablePathSaysSoAndTheProgramRunsUntraced) {
    int out = -1;
    const pid_t pid = StartHelper("/nonexistent-dir/run.json", "", &out, true);
    const std::string said = ReadUntil(out, "ready\n");
    close(out);
    EXPECT_NE(said.find("spyre: SPYRE_TRACE=/nonexistent-dir/run.json: trace file /nonexistent-dir/run.json cannot be "
                        "created"),
              std::string::npos)
        << said;
    EXPECT_NE(said.find("; running untraced"), std::string::npos) << said;
    EXPECT_NE(said.find("ready\n"), std::string::npos) << "the program did not run on: " << said;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
}

// A child forked without exec inherits the recording and the path: when
// it exited after its parent, it replaced the parent's trace with its own
// (one span, its pid), also with %p in the path (expanded once, at load).
// A child forked without exec that stops the recording it inherited
// writes nothing: it wrote the records of before the fork over the
// parent's finished file (found probing from outside).
TEST(TraceFork, AChildsStopLeavesTheParentsFileAlone) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("spyre_trace_child_stop_" + std::to_string(getpid()) + ".json")).string();
    trace::Start(path);
    { SPYRE_TRACE_SCOPE("before_the_fork"); }
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(go[1]);
        char byte = 0;
        const bool told = read(go[0], &byte, 1) == 1;
        { SPYRE_TRACE_SCOPE("in_the_child"); }
        const size_t written = trace::Stop();
        _exit(told && written == 0 ? 0 : 3);
    }
    close(go[0]);
    { SPYRE_TRACE_SCOPE("after_the_fork"); }
    EXPECT_GT(trace::Stop(), 0u);
    ASSERT_EQ(write(go[1], "g", 1), 1);  // the child stops once the parent's file is written
    close(go[1]);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    const json t = Load(path);
    std::set<std::string> spans;
    for (const json& e : t["traceEvents"])
        if (e["ph"] == "X") spans.insert(e["name"].get<std::string>());
    EXPECT_EQ(spans, (std::set<std::string>{"before_the_fork", "after_the_fork"}));
    std::filesystem::remove(path);
}

TEST(TraceOnSignal, AForkedChildLeavesTheParentsTraceAlone) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("spyre_trace_fork_" + std::to_string(getpid()) + ".json")).string();
    int out = -1;
    const pid_t pid = StartHelper(path, "fork", &out);
    const std::string said = ReadUntil(out, "\n");
    const bool ended = test::WaitForExit(pid, std::chrono::seconds(30));
    int status = 0;
    if (!ended) kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ASSERT_TRUE(ended && WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ", said " << said;
    // The child exits once the parent's end closed the pipe it reads: after
    // the parent wrote its trace. Its stdout closes as it exits.
    (void)ReadUntil(out, "never");
    close(out);
    const pid_t child = pid_t(std::atol(said.substr(said.find(' ') + 1).c_str()));
    ASSERT_GT(child, 0) << said;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (kill(child, 0) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_NE(kill(child, 0), 0) << "the child did not end";
    const json t = Load(path);
    int parent_spans = 0, child_spans = 0;
    for (const json& e : t["traceEvents"]) {
        parent_spans += e["ph"] == "X" && e["name"] == "before_the_signal";
        child_spans += e["ph"] == "X" && e["name"] == "in_the_child";
        if (e["ph"] == "X") {
            EXPECT_EQ(e["pid"], pid) << e.dump();
        }
    }
    EXPECT_EQ(parent_spans, 1);
    EXPECT_EQ(child_spans, 0);
    std::filesystem::remove(path);
}

// A process recording with SPYRE_TRACE that SIGTERM (mpirun ending a
// failed job's other ranks) or SIGINT (Ctrl-C) ends still writes its
// trace, and still ends by that signal. (It left a 0-byte file.)
TEST(TraceOnSignal, SigtermAndSigintWriteTheTraceAndTheProcessStillEndsByThem) {
    for (const int sig : {SIGTERM, SIGINT}) {
        SCOPED_TRACE(strsignal(sig));
        const std::string path =
            (std::filesystem::temp_directory_path() / ("spyre_trace_signal_" + std::to_string(getpid()) + ".json")).string();
        const int status = StatusAfterSignal(path, sig, "");
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "wait status " << status;
        ExpectTheHelpersSpanAndRemove(path);
    }
}

// A process recording with SPYRE_TRACE that crashes (abort, an uncaught
// exception, a fault) still writes its trace, and still ends by the
// crash's signal. (It left a 0-byte file: found probing from outside.)
// A sanitizer's own fault handler keeps SIGSEGV there (the program's rule).
TEST(TraceOnSignal, ACrashWritesTheTraceAndTheProcessStillEndsByItsSignal) {
    std::vector<std::pair<const char*, int>> crashes = {{"abort", SIGABRT}, {"throw", SIGABRT}};
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    crashes.emplace_back("segv", SIGSEGV);
#endif
    for (const auto& [mode, sig] : crashes) {
        SCOPED_TRACE(mode);
        const std::string path =
            (std::filesystem::temp_directory_path() / ("spyre_trace_crash_" + std::to_string(getpid()) + ".json")).string();
        ExpectEndedBySignal(StatusOfHelperEndingItself(path, mode), sig);
        ExpectTheHelpersSpanAndRemove(path);
    }
}

// A program that raised SIGTERM itself and returned from main exited
// under the thread writing its trace: SIGSEGV and an empty trace (an
// outside probe). The signalled thread waits in the handler while the
// trace is written, and the process ends by SIGTERM.
TEST(TraceOnSignal, ASignalTheProgramRaisesItselfWritesTheTraceBeforeMainReturns) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("spyre_trace_raise_" + std::to_string(getpid()) + ".json")).string();
    ExpectEndedBySignal(StatusOfHelperEndingItself(path, "raise"), SIGTERM);
    ExpectTheHelpersSpanAndRemove(path);
}

// A crashed thread that gave up waiting for a stuck saver left the saver's
// temporary beside the trace's path (an outside probe). The crash handler
// undoes an unfinished file as the writer would: the temporary removed,
// a file written in place (through a symlink) emptied.
TEST(TraceFile, AnUnfinishedFileIsUndoneForACrashedProcess) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("spyre-trace-undo-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const auto names = [&] {
        std::vector<std::string> left;
        for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename().string());
        std::sort(left.begin(), left.end());
        return left;
    };
    {
        trace::detail::TraceFile beside((dir / "run.json").string());
        beside.Write("{\"traceEvents\":[");
        ASSERT_EQ(names().size(), 1u);  // the temporary
        trace::detail::TraceFile::UndoUnfinished();
        EXPECT_EQ(names(), std::vector<std::string>{});
    }
    std::ofstream(dir / "target.json") << "an earlier trace";
    std::filesystem::create_symlink(dir / "target.json", dir / "link.json");
    {
        trace::detail::TraceFile in_place((dir / "link.json").string());
        in_place.Write("{\"traceEvents\":[");
        std::fflush(nullptr);
        trace::detail::TraceFile::UndoUnfinished();
        EXPECT_EQ(std::filesystem::file_size(dir / "target.json"), 0u);
    }
    {
        trace::detail::TraceFile committed((dir / "run.json").string());
        committed.Write("{}");
        committed.Commit();
        trace::detail::TraceFile::UndoUnfinished();  // nothing unfinished: the trace stays
    }
    EXPECT_EQ(std::filesystem::file_size(dir / "run.json"), 2u);
    std::filesystem::remove_all(dir);
}

// A program's own SIGTERM handler is the program's: the recording does
// not take the signal from it.
TEST(TraceOnSignal, AProgramsOwnHandlerKeepsTheSignal) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("spyre_trace_own_" + std::to_string(getpid()) + ".json")).string();
    const int status = StatusAfterSignal(path, SIGTERM, "own");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << "wait status " << status;
    std::filesystem::remove(path);
}
