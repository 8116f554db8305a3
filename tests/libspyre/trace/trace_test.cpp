// SPDX-License-Identifier: Apache-2.0
// The timeline trace against a private mock: a stream's launches, inline
// and DMA copies, a callback and an event, recorded and read back as the
// Chrome trace-event JSON a viewer would: valid, every span closed, spans
// of each stream and device track in order and apart, every flow arrow
// with both ends, device spans inside their op's enqueue-to-completion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/trace/trace.hpp"
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
    const std::string pci = dev.function().pci_address();
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
    EXPECT_EQ(spans[dma_tid].size(), 2u);  // the 1 MiB copies
    // The ring ran the program copy (inline), the launches and the record.
    EXPECT_EQ(spans[ring_tid].size(), size_t(1 + kLaunches + 1));

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

TEST_F(TraceTest, NothingIsRecordedWhenNoTraceRuns) {
    Device dev = OpenDevice();
    RunWork(dev, 3);
    EXPECT_EQ(trace::Stop(), 0u);
    // Stopped twice: still nothing, no error.
    EXPECT_EQ(trace::Stop(), 0u);
}

TEST_F(TraceTest, ARecordingStartedAgainDropsTheOldOne) {
    Device dev = OpenDevice();
    const std::string path = Path();
    trace::Start(path);
    RunWork(dev, 50);
    trace::Start(path);  // again: the first recording's events are gone
    RunWork(dev, 2);
    trace::Stop();
    int launches = 0;
    const json t = Load(path);
    for (const json& e : t["traceEvents"])
        if (e["ph"] == "X" && e["name"] == "FlexStream::Launch") ++launches;
    EXPECT_EQ(launches, 2);
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
