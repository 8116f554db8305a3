// SPDX-License-Identifier: Apache-2.0
// The level-3 Worker's observability on an embedded spyre-mockdev (2 cards
// x 2 VFs): a traced run of seed 003's parallel reduce read back with
// nlohmann_json (host-level spans per device and SubWorker thread, the
// dependency arrows between them, well-formed events), and the progress a
// run reports. Order only, never durations.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "spyre/trace/trace.hpp"
#include "worker_fixture.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

// The shared fixture (seed 003's chip functions, its verify SubWorker) under this file's name.
class WorkerTraceTest : public WorkerTest {};

struct Reports {
    std::vector<ProgressInfo> seen;
    ProgressCallback callback() {
        return [this](const ProgressInfo& p) {
            EXPECT_EQ(p.what, "host-level");
            EXPECT_EQ(p.unit, "tasks");
            seen.push_back({{}, p.done, p.total, {}});  // the views live only during the call
        };
    }
    // done rises (strictly: one report per change) and ends at `total`.
    void Expect(uint64_t total) const {
        ASSERT_FALSE(seen.empty());
        for (size_t i = 0; i < seen.size(); ++i) {
            EXPECT_EQ(seen[i].total, total) << "report " << i;
            EXPECT_LE(seen[i].done, total) << "report " << i;
            if (i > 0) {
                EXPECT_GT(seen[i].done, seen[i - 1].done) << "report " << i;
            }
        }
        EXPECT_EQ(seen.back().done, total);
    }
};

// The trace at `path` (removed after; a parse error fails the test) and
// its track names by tid.
std::pair<nlohmann::json, std::map<int64_t, std::string>> LoadTrace(const std::string& path) {
    std::ifstream in(path);
    nlohmann::json t = nlohmann::json::parse(in);
    std::filesystem::remove(path);
    std::map<int64_t, std::string> tracks;
    for (const auto& e : t["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int64_t>()] = e["args"]["name"];
    return {std::move(t), std::move(tracks)};
}

// `ts` inside `span`, give or take a nanosecond: ts and dur are each
// rounded to microseconds with three decimals, so ts + dur may miss the end.
bool Within(double ts, const nlohmann::json& span) {
    const double s = span["ts"].get<double>(), e = s + span["dur"].get<double>();
    return ts >= s - 1e-3 && ts <= e + 1e-3;
}

}  // namespace

TEST_F(WorkerTraceTest, ParallelReduceTraceShowsDevicesSubWorkerAndArrows) {
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.5f), b = HostTensor::Full({kTile, kTile}, 0.5f);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("l3_trace_" + std::to_string(getpid()) + ".json")).string();
    Reports progress;
    // Tasks run as they are submitted, and a producer that has finished by
    // then is no edge (and draws no arrow): the chip tasks must still be
    // unfinished when the program submits the SubWorker. A run in flight
    // holds `a` (InOut) until the program has returned, so both wait for it.
    std::atomic<bool> submitted{false};
    RunHandle held = worker_->Submit(
        HostProgram{"hold_a", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                        g.Sub("hold",
                              [&](std::span<const HostTensor>) {
                                  for (int i = 0; i < 10'000 && !submitted.load(); ++i)
                                      std::this_thread::sleep_for(std::chrono::milliseconds(1));
                              },
                              {InOut(x[0])});
                    }},
        {a});
    HostProgram reduce = ParallelReduceProgram();
    reduce.fn = [&submitted, inner = reduce.fn](HostGraph& g, std::span<const HostTensor> x) {
        inner(g, x);
        submitted = true;
    };
    trace::Start(path);
    auto outs = worker_->Run(reduce, {a, b}, progress.callback());
    trace::Stop();
    held.Wait();
    for (float x : outs[0].floats()) ASSERT_EQ(x, 3.0f);
    progress.Expect(3);

    auto [t, tracks] = LoadTrace(path);

    // Well formed: every B has an E on its track, X spans have dur >= 0,
    // every flow has both ends.
    std::map<int64_t, int> open;
    std::map<uint64_t, int> flow_ends;
    std::vector<nlohmann::json> chips, subs, arrows_in, phases;
    std::map<uint64_t, nlohmann::json> tails;
    bool run_span = false;
    for (const auto& e : t["traceEvents"]) {
        const std::string ph = e["ph"];
        if (ph == "B") ++open[e["tid"].get<int64_t>()];
        if (ph == "E") --open[e["tid"].get<int64_t>()];
        if (ph == "s" || ph == "f") flow_ends[e["id"].get<uint64_t>()] += ph == "s" ? 1 : 2;
        if (ph == "s" && e["name"] == "depends") tails[e["id"].get<uint64_t>()] = e;
        if (ph == "f" && e["name"] == "depends") arrows_in.push_back(e);
        if (ph != "X") continue;
        EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
        if (e["name"] == "host_run" && e["cat"] == "api") run_span = true;
        if (e["cat"] != "host-level" || e["name"] == "hold#0") continue;  // the holding run's span
        if (!e["args"].contains("task")) {
            phases.push_back(e);  // upload / download
        } else if (e["args"]["level"] == "CHIP") {
            chips.push_back(e);
        } else {
            subs.push_back(e);
        }
    }
    for (const auto& [tid, n] : open) EXPECT_EQ(n, 0) << "unbalanced B/E on " << tracks[tid];
    for (const auto& [id, ends] : flow_ends) EXPECT_EQ(ends, 3) << "flow " << id << " lacks an end";
    EXPECT_TRUE(run_span) << "a host_run span on the calling thread";

    ASSERT_EQ(chips.size(), 2u);
    ASSERT_EQ(subs.size(), 1u);
    // A task's span is named as the run's report names the task, with its
    // function and how it ended beside.
    std::set<std::string> names, functions, chip_tracks;
    for (const auto& c : chips) {
        names.insert(c["name"].get<std::string>());
        functions.insert(c["args"]["function"].get<std::string>());
        EXPECT_EQ(c["args"]["state"], "done") << c.dump();
        const std::string track = tracks[c["tid"].get<int64_t>()];
        chip_tracks.insert(track);
        EXPECT_EQ(track, "host-level " + c["args"]["device"].get<std::string>());
        EXPECT_GT(c["args"]["bytes_uploaded"].get<uint64_t>(), 0u);
        EXPECT_GT(c["args"]["bytes_downloaded"].get<uint64_t>(), 0u);
    }
    EXPECT_EQ(functions, (std::set<std::string>{"chip_add", "chip_sub"}));
    EXPECT_EQ(names, (std::set<std::string>{"chip_add#0", "chip_sub#0"}));
    EXPECT_EQ(chip_tracks.size(), 2u) << "chip spans on two device tracks";
    const nlohmann::json& sub = subs[0];
    EXPECT_EQ(sub["name"], "reduce_sum#0");
    EXPECT_EQ(sub["args"]["function"], "reduce_sum");
    EXPECT_EQ(sub["args"]["state"], "done");
    EXPECT_EQ(tracks[sub["tid"].get<int64_t>()].rfind("host-level subworker ", 0), 0u) << tracks[sub["tid"].get<int64_t>()];
    for (const auto& c : chips)
        EXPECT_GE(sub["ts"].get<double>(), c["ts"].get<double>() + c["dur"].get<double>())
            << "the SubWorker starts after " << c["name"] << " ends";
    // Upload and download phases nest in their chip span.
    EXPECT_EQ(phases.size(), 4u) << "an upload and a download per chip task";
    for (const auto& p : phases) {
        bool inside = false;
        for (const auto& c : chips)
            inside |= c["tid"] == p["tid"] && Within(p["ts"].get<double>(), c) &&
                      Within(p["ts"].get<double>() + p["dur"].get<double>(), c);
        EXPECT_TRUE(inside) << p.dump();
    }

    // Each core task a chip task submitted ran inside that chip task's span
    // on its device (the device's own timestamps, the host's clock).
    int core_tasks = 0;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] != "X" || e["cat"] != "device" || !e.contains("args") || !e["args"].contains("task")) continue;
        const std::string track = tracks[e["tid"].get<int64_t>()];
        const std::string device = track.substr(0, track.find(" core "));
        ++core_tasks;
        bool inside = false;
        for (const auto& c : chips)
            inside |= c["args"]["device"] == device && Within(e["ts"].get<double>(), c) &&
                      Within(e["ts"].get<double>() + e["dur"].get<double>(), c);
        EXPECT_TRUE(inside) << "core task outside its chip task: " << e.dump();
    }
    EXPECT_GE(core_tasks, 2);

    // Timestamps never go back on a track.
    std::map<int64_t, double> last;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] == "M" || !e.contains("tid") || !e.contains("ts")) continue;
        const int64_t tid = e["tid"].get<int64_t>();
        const double ts = e["ts"].get<double>();
        const auto seen = last.find(tid);
        if (seen != last.end()) {
            EXPECT_GE(ts, seen->second) << "on " << tracks[tid] << ": " << e.dump();
        }
        last[tid] = ts;
    }

    // Two arrows into the SubWorker's span, one out of each chip span.
    std::set<std::string> from;
    int into_sub = 0;
    for (const auto& f : arrows_in) {
        if (f["tid"] != sub["tid"] || !Within(f["ts"].get<double>(), sub)) continue;
        ++into_sub;
        const auto tail = tails.find(f["id"].get<uint64_t>());
        ASSERT_NE(tail, tails.end());
        for (const auto& c : chips)
            if (c["tid"] == tail->second["tid"] && Within(tail->second["ts"].get<double>(), c)) from.insert(c["name"]);
    }
    EXPECT_EQ(into_sub, 2);
    EXPECT_EQ(from, (std::set<std::string>{"chip_add#0", "chip_sub#0"}));
}

// A chip task's uploads and downloads are copies of the device's DMA
// engine: they show on the device's DMA track, byte for byte what the task
// moved (its Out argument's copy zeroed first, also by the DMA engine).
TEST_F(WorkerTraceTest, ChipTaskCopiesShowOnTheDevicesDmaTrack) {
    HostProgram p{"add_on_0", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.5f), b = HostTensor::Full({kTile, kTile}, 0.5f);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("l3_dma_trace_" + std::to_string(getpid()) + ".json")).string();
    trace::Start(path);
    auto outs = worker_->Run(p, {a, b});
    trace::Stop();
    for (float x : outs[0].floats()) ASSERT_EQ(x, 2.0f);

    auto [t, tracks] = LoadTrace(path);
    std::string device;
    for (const auto& e : t["traceEvents"])
        if (e["ph"] == "X" && e["cat"] == "host-level" && e["args"].contains("device")) device = e["args"]["device"];
    ASSERT_FALSE(device.empty()) << "no chip task span";
    uint64_t up = 0, down = 0;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] != "X" || e["cat"] != "dma") continue;
        EXPECT_EQ(tracks[e["tid"].get<int64_t>()], device + " DMA") << e.dump();
        (e["name"] == "CopyToDevice" ? up : down) += e["args"]["bytes"].get<uint64_t>();
    }
    EXPECT_EQ(up, 3 * kTileBytes) << "a and b, and the zeros the output's copy starts as";
    EXPECT_EQ(down, kTileBytes) << "the sum";
}

// RunHandle::Wait(progress) reports too, and a failed run's progress still
// ends at its total (a skipped task counts as finished).
TEST_F(WorkerTraceTest, ProgressOfSubmittedAndFailedRuns) {
    HostTensor a = HostTensor::Full({128, 128}, 2.0f), b = HostTensor::Full({128, 128}, 3.0f);
    Reports ok;
    auto outs = worker_->Submit(DependencyProgram(), {a, b}).Wait(ok.callback());
    ok.Expect(2);
    for (float x : outs[0].floats()) ASSERT_EQ(x, 5.0f);

    Reports failed;
    EXPECT_THROW(worker_->Run(DependencyProgram(), {a, a}, failed.callback()), HostRunError);
    failed.Expect(2);

    Reports none;  // no trace recording: progress alone
    worker_->Run(ParallelReduceProgram(), {a, b}, none.callback());
    none.Expect(3);
}

// A callback that threw left Run at once, while the run's tasks still wrote
// the caller's tensors (found probing from outside): its exception now
// leaves once the run has ended.
TEST_F(WorkerTraceTest, AThrowingProgressCallbackLeavesOnceTheRunEnded) {
    HostTensor y = HostTensor::Full({4}, 0.0f);
    HostProgram slow{"slow", 0, {{{4}, DType::FP32}}, [](HostGraph& g, std::span<const HostTensor> a) {
                         g.Sub("writes", [](std::span<const HostTensor> t) {
                             std::this_thread::sleep_for(std::chrono::milliseconds(200));
                             for (float& v : t[0].floats()) v = 7.0f;
                         }, {Out(a[0])});
                     }};
    int calls = 0;
    auto throws = [&](const ProgressInfo&) {
        ++calls;
        throw std::runtime_error("callback gave up");
    };
    EXPECT_THROW(worker_->Run(slow, {y}, throws), std::runtime_error);
    EXPECT_EQ(calls, 1);
    for (float v : y.floats()) EXPECT_EQ(v, 7.0f) << "the run had not ended";
}

// A task that failed is drawn with state "failed"; one skipped behind it
// never ran and has no span (the run's report lists it).
TEST_F(WorkerTraceTest, AFailedTasksSpanSaysSoAndASkippedOneHasNone) {
    HostTensor x = HostTensor::Full({4}, 1.0f), y = HostTensor::Full({4}, 0.0f);
    HostProgram program{"fails", 2, {}, [](HostGraph& g, std::span<const HostTensor> a) {
                            g.Sub("breaks", [](std::span<const HostTensor>) { throw std::runtime_error("broken"); },
                                  {In(a[0]), Out(a[1])});
                            g.Sub("after", [](std::span<const HostTensor>) {}, {In(a[1])});
                        }};
    const std::string path =
        (std::filesystem::temp_directory_path() / ("l3_trace_fail_" + std::to_string(getpid()) + ".json")).string();
    trace::Start(path);
    EXPECT_THROW(worker_->Run(program, {x, y}), HostRunError);
    trace::Stop();
    auto [t, tracks] = LoadTrace(path);
    std::map<std::string, nlohmann::json> spans;
    for (const auto& e : t["traceEvents"])
        if (e["ph"] == "X" && e["cat"] == "host-level" && e["args"].contains("task")) spans[e["name"]] = e;
    ASSERT_EQ(spans.count("breaks#0"), 1u);
    EXPECT_EQ(spans["breaks#0"]["args"]["state"], "failed");
    EXPECT_EQ(spans["breaks#0"]["args"]["function"], "breaks");
    EXPECT_EQ(spans.count("after#0"), 0u) << "a skipped task never ran";
}
