// SPDX-License-Identifier: Apache-2.0
// A moved-from Device, Host, FlexStream, SpyreStream, Event, Orchestrator or Worker has
// no state left: every call on it is InvalidArgument naming the object
// (it used to dereference null and crash), and the object it was moved
// into keeps working.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spyre/host.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/orchestration.hpp"
#include "stream_fixture.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {

void ExpectMovedFrom(const std::function<void()>& call, const std::string& object, const std::string& what) {
    SCOPED_TRACE(what);
    try {
        call();
        ADD_FAILURE() << what << ": a call on a moved-from " << object << " returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(object), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
    }
}

// ExpectMovedFrom, and the message names the method called: "<call>: ...".
void ExpectRefusalNames(const std::function<void()>& call, const std::string& named) {
    SCOPED_TRACE(named);
    try {
        call();
        ADD_FAILURE() << named << " returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        EXPECT_EQ(e.message().rfind(named + ": ", 0), 0u) << e.what();
    }
}

class MovedFromTest : public StreamTest {};

TEST_F(MovedFromTest, ADeviceAndItsStreamsAndEventsRefuseCallsOnceMovedFrom) {
    Device from = OpenDevice();
    Device to = std::move(from);
    ExpectMovedFrom([&] { from.allocator(); }, "Device", "allocator");
    ExpectMovedFrom([&] { from.AllocateBuffer(64); }, "Device", "AllocateBuffer");
    ExpectMovedFrom([&] { from.dma(); }, "Device", "dma");
    ExpectMovedFrom([&] { from.pci_address(); }, "Device", "pci_address");
    ExpectMovedFrom([&] { from.default_stream(); }, "Device", "default_stream");
    ExpectMovedFrom([&] { from.CreateStream(); }, "Device", "CreateStream");
    ExpectMovedFrom([&] { from.Synchronize(); }, "Device", "Synchronize");
    ExpectMovedFrom([&] { Event e(from); }, "Device", "Event of a moved-from Device");
    ExpectMovedFrom([&] { Orchestrator::Create(from); }, "Device", "Orchestrator on a moved-from Device");

    FlexStream s = to.CreateStream();
    FlexStream t = std::move(s);
    EXPECT_EQ(s.stream_index(), -1);
    EXPECT_EQ(s.enqueued(), 0u);
    ExpectMovedFrom([&] { s.AddCallback([] {}); }, "FlexStream", "AddCallback");
    ExpectMovedFrom([&] { s.Synchronize(); }, "FlexStream", "Synchronize");
    ExpectMovedFrom([&] { s.Query(); }, "FlexStream", "Query");
    ExpectMovedFrom([&] { s.LastError(); }, "FlexStream", "LastError");

    Event e(to);
    Event f = std::move(e);
    ExpectMovedFrom([&] { e.Query(); }, "Event", "Query");
    ExpectMovedFrom([&] { e.Record(t); }, "Event", "Record");
    ExpectMovedFrom([&] { t.Wait(e); }, "FlexStream::Wait: event", "a stream waiting for it");
    ExpectMovedFrom([&] { f.Record(s); }, "Event::Record: stream", "recorded on a moved-from stream");

    // What they were moved into works.
    DeviceBuffer buffer = to.AllocateBuffer(4096);
    std::vector<uint8_t> out(4096), back(4096);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(i * 7);
    t.CopyToDevice(out.data(), buffer.handle(), out.size());
    f.Record(t);
    t.CopyFromDevice(back.data(), buffer.handle(), back.size());
    t.Synchronize();
    EXPECT_TRUE(f.Query());
    EXPECT_EQ(out, back);
}

// A SpyreStream used to keep its pointer to the FlexStream the object it was
// moved into owns: the moved-from one drove that stream, and once the other
// was destroyed its Synchronize used freed memory.
TEST_F(MovedFromTest, ASpyreStreamRefusesCallsOnceMovedFrom) {
    Device dev = OpenDevice();
    DeviceBuffer buffer = dev.AllocateBuffer(4096);
    std::vector<uint8_t> out(4096), back(4096);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(i * 5);
    const Operation load({PreProcessCompute(PreProcessCompute::CopyToDevice{out.data(), buffer.handle(), out.size()})});
    const Operation read({PreProcessCompute(PreProcessCompute::CopyFromDevice{back.data(), buffer.handle(), back.size()})});

    std::optional<SpyreStream> from(std::in_place, dev);
    std::optional<SpyreStream> to(std::move(*from));
    const auto refused = [&](SpyreStream& s) {
        ExpectMovedFrom([&] { s.flex_stream(); }, "SpyreStream", "flex_stream");
        ExpectMovedFrom([&] { s.Synchronize(); }, "SpyreStream", "Synchronize");
        ExpectMovedFrom([&] { s.Launch(load, std::span<const DeviceHandle>{}); }, "SpyreStream", "Launch");
        ExpectMovedFrom([&] { s.Launch(load, std::span<const SpyreTensor>{}); }, "SpyreStream", "Launch (tensors)");
        ExpectMovedFrom([&] { s.LaunchTiled(load, {}); }, "SpyreStream", "LaunchTiled");
        ExpectMovedFrom([&] { s.LaunchTiled(load, {}, [](const ProgressInfo&) {}); }, "SpyreStream", "LaunchTiled (progress)");
        ExpectMovedFrom([&] { LoadExecutionPlan(s, CompilerOutput{}); }, "SpyreStream", "LoadExecutionPlan");
    };
    refused(*from);
    const uint64_t before = to->flex_stream().enqueued();
    to->Launch(load, std::span<const DeviceHandle>{});
    to->Launch(read, std::span<const DeviceHandle>{});
    to->Synchronize();
    EXPECT_EQ(to->flex_stream().enqueued() - before, 2u);
    EXPECT_EQ(out, back);
    to.reset();
    refused(*from);  // no use of the freed stream

    // Move assignment, and the device's default stream.
    SpyreStream a = SpyreStream::Default(dev);
    SpyreStream b(dev);
    b = std::move(a);
    refused(a);
    std::fill(back.begin(), back.end(), 0);
    b.Launch(read, std::span<const DeviceHandle>{});
    b.Synchronize();
    EXPECT_EQ(out, back);
    EXPECT_EQ(&b.flex_stream(), &dev.default_stream());
}

TEST_F(MovedFromTest, AnOrchestratorRefusesCallsOnceMovedFrom) {
    Device dev = OpenDevice();
    Orchestrator from = Orchestrator::Create(dev);
    Orchestrator to = std::move(from);
    EXPECT_EQ(from.handle(), nullptr);
    ExpectMovedFrom([&] { from.WaitAll(); }, "Orchestrator", "WaitAll");
    ExpectMovedFrom([&] { (void)from.BeginScope(); }, "Orchestrator", "BeginScope");
    ExpectMovedFrom([&] { from.Alloc(64); }, "Orchestrator", "Alloc");
    ExpectMovedFrom([&] { from.Submit(1, WORKER_CUBE, {}); }, "Orchestrator", "Submit");
    ExpectMovedFrom([&] { from.RegisterHostKernel(1, [](auto, auto) { return 0u; }); }, "Orchestrator", "RegisterHostKernel");
    ExpectMovedFrom([&] { from.Failures(); }, "Orchestrator", "Failures");

    int ran = 0;
    to.RegisterHostKernel(1, [&](auto, auto) { return ++ran, 0u; });
    {
        auto scope = to.BeginScope();
        to.Submit(1, WORKER_HOST, {});
    }
    to.WaitAll();
    EXPECT_EQ(ran, 1);
}

TEST_F(MovedFromTest, AHostAndAWorkerRefuseCallsOnceMovedFrom) {
    Host from = Host::Open(HostOptions::EmbeddedMock(1, 1, "1G"));
    Host host = std::move(from);
    ExpectMovedFrom([&] { from.functions(); }, "Host", "functions");
    ExpectMovedFrom([&] { from.Describe(); }, "Host", "Describe");
    ExpectMovedFrom([&] { from.Open("1"); }, "Host", "Open");

    DistributedConfig config;
    config.device_ids = {1};
    config.num_sub_workers = 1;
    Worker moved(host, config);
    Worker worker = std::move(moved);
    const HostProgram nothing{"nothing", 0, {}, [](HostGraph&, std::span<const HostTensor>) {}};
    ExpectMovedFrom([&] { moved.Run(nothing, {}); }, "Worker", "Run");
    ExpectMovedFrom([&] { moved.device_count(); }, "Worker", "device_count");
    ExpectMovedFrom([&] { moved.Stats(0); }, "Worker", "Stats");
    ExpectMovedFrom([&] { moved.RegisterSubWorker("s", [](std::span<const HostTensor>) {}); }, "Worker", "RegisterSubWorker");
    ExpectMovedFrom([&] { moved.RegisterKernel(1, std::vector<uint8_t>(64)); }, "Worker", "RegisterKernel");
    ExpectMovedFrom([&] { moved.HeldNow(); }, "Worker", "HeldNow");
    // Run said "Worker::Submit: moved from" (found probing from outside).
    ExpectRefusalNames([&] { moved.Run(nothing, {}); }, "Worker::Run");
    ExpectRefusalNames([&] { moved.Submit(nothing, {}); }, "Worker::Submit");
    // A graph made from null (its constructor is public) or moved from
    // refuses every call; CreateTensor and Chip dereferenced null.
    HostGraph null_graph(nullptr);
    ExpectRefusalNames([&] { null_graph.CreateTensor({4}); }, "HostGraph::CreateTensor");
    ExpectRefusalNames([&] { null_graph.Chip("f", {}); }, "HostGraph::Chip");
    ExpectRefusalNames([&] { null_graph.Sub("s", {}); }, "HostGraph::Sub");
    ExpectRefusalNames([&] { null_graph.Sub("s", [](std::span<const HostTensor>) {}, {}); }, "HostGraph::Sub");
    std::optional<HostGraph> kept;
    const HostProgram keeps{"keeps", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) { kept.emplace(std::move(g)); }};
    worker.Run(keeps, {});
    ExpectRefusalNames([&] { kept->CreateTensor({4}); }, "HostGraph::CreateTensor");  // its function returned

    worker.RegisterSubWorker("double", [](std::span<const HostTensor> t) {
        for (float& x : t[0].floats()) x *= 2;
    });
    HostTensor x = HostTensor::Full({4}, 1.5f);
    const HostProgram twice{"twice", 1, {}, [](HostGraph& g, std::span<const HostTensor> a) { g.Sub("double", {InOut(a[0])}); }};
    worker.Run(twice, {x});
    for (float v : x.floats()) EXPECT_EQ(v, 3.0f);
}

}  // namespace
