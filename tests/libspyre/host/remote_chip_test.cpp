// SPDX-License-Identifier: Apache-2.0
// Remote chip calls between two in-process ranks: rank 1 serves its own
// embedded mock card (a real Host, real device programs), rank 0 calls it.
// Results are compared byte for byte with the CPU; failures come back as
// RemoteChipError naming task, rank, host, device and function.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "mock_fixture.hpp"
#include "random_data.hpp"
#include "remote_add.hpp"
#include "spyre/device/host.hpp"
#include "spyre/host/in_process_transport.hpp"
#include "spyre/host/remote_chip_client.hpp"
#include "spyre/host/remote_chip_service.hpp"
#include "host/remote_protocol.hpp"

using namespace spyre;
using namespace spyre::host;
using namespace std::chrono_literals;

namespace {

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
    const std::vector<uint8_t> bytes = test::RandomBytes(n * 4, seed);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(bytes[i * 4] | (bytes[i * 4 + 1] << 8)) / 256.0f - 100.0f;
    return v;
}

RemoteCall AddCall(const std::string& task, const std::vector<int64_t>& shape, uint64_t seed, const std::string& device = "0") {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return RemoteCall{task, "add", device,
                    {test::Fp32Tensor(shape, RandomFloats(n, seed)), test::Fp32Tensor(shape, RandomFloats(n, seed + 1))},
                    {WireSpec{shape, DType::FP32}}};
}

class RemoteChipTest : public ::testing::Test {
protected:
    void SetUp() override {
        SPYRE_REQUIRE_FUSE();
        fabric_ = InProcessFabric::Create(2, LivenessOptions{.heartbeat_interval = 50ms, .silence_bound = 800ms},
                                          {"node-a", "node-b"});
        t0_ = fabric_->Take(0);
        t1_ = fabric_->Take(1);
        HostOptions o;
        o.source = HostOptions::Source::EmbeddedMock;
        o.embedded_mock = {.cards = 1, .vfs = 1, .mem = "1G"};
        host_.emplace(Host::Open(o));
        service_ = std::make_unique<RemoteChipService>(*t1_, *host_);
        service_->Register("add", test::DeviceAdd);
        service_->Register("fault", test::DeviceFault);
        server_ = std::thread([this] {
            try {
                service_->Serve(0);
            } catch (const Error& e) {
                serve_error_ = e.what();
            }
        });
        client_ = std::make_unique<RemoteChipClient>(*t0_, 60s);
    }
    void TearDown() override {
        if (server_.joinable()) {
            if (!t0_->PeerError(1)) client_->Shutdown(1);
            if (stopped_) fabric_->Stop(0);  // the server's receive ends on the lost controller
            server_.join();
        }
    }

    std::shared_ptr<InProcessFabric> fabric_;
    std::unique_ptr<InProcessTransport> t0_, t1_;
    std::optional<Host> host_;
    std::unique_ptr<RemoteChipService> service_;
    std::unique_ptr<RemoteChipClient> client_;
    std::thread server_;
    std::string serve_error_;
    bool stopped_ = false;
};

}  // namespace

TEST_F(RemoteChipTest, DescribeListsTheRanksFunctionsAndChipFunctions) {
    const RankDescription d = client_->Describe(1);
    EXPECT_EQ(d.rank, 1);
    EXPECT_EQ(d.host_name, "node-b");
    EXPECT_NE(d.host.find("embedded spyre-mockdev"), std::string::npos) << d.host;
    ASSERT_EQ(d.functions.size(), 2u);  // PF and one VF
    EXPECT_EQ(d.functions[0].pci_address, "0000:01:00.0");
    EXPECT_FALSE(d.functions[0].is_vf);
    EXPECT_TRUE(d.functions[1].is_vf);
    EXPECT_GT(d.functions[1].memory_bytes, 0u);
    EXPECT_EQ(d.chip_functions, (std::vector<std::string>{"add", "fault"}));
    EXPECT_TRUE(d.chip_tasks_at_once.empty()) << "a service without a level-4 Worker names no rooms";
}

// Each device's room goes with the description, and a rank that claims a
// room of 0 or one past any device's task queues is refused by name.
TEST(RemoteProtocol, DescribeReplyCarriesEachDevicesRoomAndRefusesNonsense) {
    RankDescription d;
    d.rank = 2;
    d.host_name = "node-c";
    d.chip_functions = {"add"};
    d.chip_tasks_at_once = {2, 1};
    d.served_devices = {"0000:01:00.1", "0000:01:00.2"};
    Message m = remote::EncodeDescribeReply(7, d);
    m.source = 2;
    EXPECT_EQ(remote::ReplyId(m), 7u);
    EXPECT_EQ(remote::DecodeDescribeReply(m).chip_tasks_at_once, (std::vector<uint32_t>{2, 1}));
    EXPECT_EQ(remote::DecodeDescribeReply(m).served_devices, d.served_devices);
    for (uint32_t bad : {0u, 100000u}) {
        d.chip_tasks_at_once = {1, bad};
        Message hostile = remote::EncodeDescribeReply(8, d);
        hostile.source = 2;
        EXPECT_SPYRE_ERROR(remote::DecodeDescribeReply(hostile), ProtocolError,
                           "device 1 runs " + std::to_string(bad) + " chip tasks at once");
    }
}

// A call's device is read by one rule wherever it is read: the serving
// rank once picked the device's threads by one rule and ran the call by
// another, so "1x" or " 1" ran on device 1 from the receiving thread.
TEST(RemoteProtocol, ACallsDeviceIsAPlainDecimalIndex) {
    EXPECT_EQ(remote::DeviceIndex("0"), 0u);
    EXPECT_EQ(remote::DeviceIndex("7"), 7u);
    EXPECT_EQ(remote::DeviceIndex("007"), 7u);
    for (const char* bad : {"", " 1", "1 ", "+1", "-1", "1x", "0x1", "1234567890", "0000:01:00.1"})
        EXPECT_EQ(remote::DeviceIndex(bad), std::nullopt) << '"' << bad << '"';
    RemoteCall call{.task = "t", .function = "add", .device = "3"};
    Message m = remote::EncodeCall(5, call);
    m.source = 0;
    EXPECT_EQ(remote::CallDevice(m), "3");
    EXPECT_EQ(remote::DecodeCall(m).second.device, "3");
    m.header.resize(12);  // the id and part of the task's length
    EXPECT_EQ(remote::CallDevice(m), std::nullopt);
}

// An in-place Out goes as an output naming its In argument, with no bytes
// of its own; the serving rank refuses one that names no In argument or
// one of another shape.
TEST(RemoteProtocol, AnInPlaceOutNamesAnInArgumentOfItsShape) {
    const WireSpec spec{{2, 4}, DType::FP32};
    auto call = [&] {
        RemoteCall c{.task = "t", .function = "f", .device = "0"};
        c.inputs.push_back(WireTensor{spec, std::vector<uint8_t>(spec.bytes(), 7)});
        c.outputs.push_back(spec);
        c.access = {RemoteCall::kIn, RemoteCall::kOutInPlace};
        c.in_place_of = {0};
        return c;
    };
    RemoteCall good = call();
    Message m = remote::EncodeCall(9, good);
    m.source = 1;
    const RemoteCall back = remote::DecodeCall(m).second;
    EXPECT_EQ(back.access, (std::vector<uint8_t>{RemoteCall::kIn, RemoteCall::kOutInPlace}));
    EXPECT_EQ(back.in_place_of, std::vector<uint32_t>{0});
    ASSERT_EQ(back.inputs.size(), 1u);
    EXPECT_EQ(back.inputs[0].data, std::vector<uint8_t>(spec.bytes(), 7));
    RemoteCall self = call();
    self.in_place_of = {1};  // itself, not an In argument
    EXPECT_SPYRE_ERROR(remote::EncodeCall(9, self), InvalidArgument, "names argument 1, not an In argument");
    RemoteCall other = call();
    other.outputs[0] = WireSpec{{4, 2}, DType::FP32};
    EXPECT_SPYRE_ERROR(remote::EncodeCall(9, other), InvalidArgument, "is [4x2] fp32, its In argument 0 [2x4] fp32");
    RemoteCall missing = call();
    missing.in_place_of.clear();
    EXPECT_SPYRE_ERROR(remote::EncodeCall(9, missing), InvalidArgument, "1 in-place outputs and names the inputs of 0");
    // On the wire: a peer's index past the arguments is a ProtocolError.
    RemoteCall wire = call();
    Message bad = remote::EncodeCall(9, wire);
    bad.source = 1;
    bad.header[bad.header.size() - 4] = 5;  // the in-place output's input, last in the header
    EXPECT_SPYRE_ERROR(remote::DecodeCall(bad), ProtocolError, "names argument 5, not an In argument");
}

// Every error kind a serving rank can raise comes back as itself, with
// its message (TaskFailed, the last kind, was once refused as unknown).
TEST(RemoteProtocol, ACallErrorCarriesEveryKind) {
    for (ErrorKind kind : {ErrorKind::InvalidArgument, ErrorKind::NotFound, ErrorKind::Busy,
                           ErrorKind::PermissionDenied, ErrorKind::Unsupported, ErrorKind::DeviceError,
                           ErrorKind::DeviceLost, ErrorKind::Timeout, ErrorKind::NotReady, ErrorKind::OutOfMemory,
                           ErrorKind::IoError, ErrorKind::ProtocolError, ErrorKind::Internal, ErrorKind::WrongDevice,
                           ErrorKind::TaskFailed}) {
        RemoteFailure f;
        f.cause = kind;
        f.rank = 1;
        f.task = "t";
        f.message = std::string("raised ") + ToString(kind);
        Message m = remote::EncodeCallError(3, f);
        m.source = 1;
        const RemoteFailure back = remote::DecodeCallError(m);
        EXPECT_EQ(back.cause, kind) << ToString(kind);
        EXPECT_EQ(back.message, f.message);
    }
    // A host kernel's return code stays marked as one across the wire.
    for (bool host_kernel : {false, true}) {
        RemoteFailure f;
        f.cause = ErrorKind::DeviceError;
        f.device_code = 9;
        f.host_kernel_code = host_kernel;
        Message m = remote::EncodeCallError(3, f);
        m.source = 1;
        const RemoteFailure back = remote::DecodeCallError(m);
        EXPECT_EQ(back.device_code, 9u);
        EXPECT_EQ(back.host_kernel_code, host_kernel);
        EXPECT_EQ(RemoteChipError(back).context().host_kernel_code, host_kernel);
        m.header[13] = 2;  // id 8, kind 1, code 4: the flag
        EXPECT_SPYRE_ERROR(remote::DecodeCallError(m), ProtocolError, "host kernel flag 2 is not 0 or 1");
    }
    RemoteFailure f;
    Message m = remote::EncodeCallError(3, f);
    m.header[8] = uint8_t(ErrorKind::TaskFailed) + 1;  // the byte after the id
    m.source = 1;
    EXPECT_SPYRE_ERROR(remote::DecodeCallError(m), ProtocolError, "error kind 15 is unknown");
}

TEST_F(RemoteChipTest, AddsOnTheRemoteDeviceMatchTheCpuByteForByte) {
    const std::vector<std::vector<int64_t>> shapes = {{256}, {128, 128}, {3, 1000}, {1}};
    std::vector<RemoteCall> calls;
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < shapes.size(); ++i) {
        // The VF too: a device is a selector of the serving rank's Host.
        calls.push_back(AddCall("add" + std::to_string(i), shapes[i], 10 * i, i % 2 ? "0000:01:00.1" : "0"));
        RemoteCall copy = calls.back();
        ids.push_back(client_->Submit(1, std::move(copy)));  // all in flight at once
    }
    for (size_t i = ids.size(); i-- > 0;) {  // waited for out of order
        std::vector<WireTensor> out = client_->Wait(ids[i]);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].spec.shape, shapes[i]);
        EXPECT_EQ(out[0].data, test::CpuAdd(calls[i].inputs[0], calls[i].inputs[1])) << "call " << i;
    }
    EXPECT_EQ(service_->calls_served(), shapes.size());
}

TEST_F(RemoteChipTest, FailuresComeBackStructured) {
    try {
        RemoteCall call = AddCall("t-missing", {4}, 1);
        call.function = "nope";
        client_->Call(1, std::move(call));
        ADD_FAILURE() << "unknown function";
    } catch (const RemoteChipError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::NotFound);
        EXPECT_EQ(e.failure().task, "t-missing");
        EXPECT_EQ(e.failure().rank, 1);
        EXPECT_EQ(e.failure().host_name, "node-b");
        EXPECT_EQ(e.failure().function, "nope");
        EXPECT_NE(std::string(e.what()).find("task 't-missing' on rank 1 (host node-b), device 0, function 'nope'"),
                  std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("no chip function 'nope' is registered"), std::string::npos) << e.what();
    }
    EXPECT_SPYRE_ERROR(client_->Call(1, AddCall("t-dev", {4}, 1, "7")), NotFound, "task 't-dev' on rank 1");
    try {
        client_->Call(1, RemoteCall{"t-fault", "fault", "0", {}, {}});
        ADD_FAILURE() << "device fault";
    } catch (const RemoteChipError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_EQ(e.failure().device, "0000:01:00.0");
        EXPECT_NE(e.failure().device_code, 0u);
        EXPECT_EQ(e.context().device_code, e.failure().device_code);
        EXPECT_EQ(e.context().device, "rank 1@node-b:0000:01:00.0");
    }
    // Mismatched operands: the handler's own InvalidArgument, carried back.
    RemoteCall bad = AddCall("t-shape", {4}, 1);
    bad.outputs[0].shape = {5};
    EXPECT_SPYRE_ERROR(client_->Call(1, std::move(bad)), InvalidArgument, "task 't-shape'");
    // The service is still healthy after all that.
    RemoteCall ok = AddCall("t-ok", {64}, 3);
    RemoteCall copy = ok;
    EXPECT_EQ(client_->Call(1, std::move(copy)).at(0).data, test::CpuAdd(ok.inputs[0], ok.inputs[1]));
}

TEST_F(RemoteChipTest, BadCallsAreRefusedBeforeTheyLeave) {
    RemoteCall short_input = AddCall("t", {4}, 1);
    short_input.inputs[0].data.pop_back();
    EXPECT_SPYRE_ERROR(client_->Submit(1, std::move(short_input)), InvalidArgument, "input 0 has 15 bytes");
    RemoteCall bad_shape = AddCall("t", {4}, 1);
    bad_shape.outputs[0].shape = {0};
    EXPECT_SPYRE_ERROR(client_->Submit(1, std::move(bad_shape)), InvalidArgument, "dims must be >= 1");
    // Outputs whose reply could not come back (3 x 768 MiB): refused here.
    // Before, the call went, the serving rank allocated and ran it, and
    // then failed its own reply (outside probe: 20 s, 4.7 GB).
    RemoteCall huge_reply = AddCall("t-huge", {4}, 1);
    huge_reply.outputs.assign(3, WireSpec{{int64_t(192) << 20}, DType::FP32});
    EXPECT_SPYRE_ERROR(client_->Submit(1, std::move(huge_reply)), InvalidArgument,
                       "its outputs' 2415919104 bytes in all are over the limit of 2147483648 of one reply");
    EXPECT_SPYRE_ERROR(client_->Wait(999), InvalidArgument, "was not submitted");
}

TEST_F(RemoteChipTest, AHostileCallRequestGetsAProtocolErrorReply) {
    // A call header cut short (type kCall = 18), sent as rank 0 would.
    Message m;
    m.type = kFirstUserMessageType + 2;
    const uint64_t id = 77;
    m.header.resize(10);  // the id, then half of the task length
    std::memcpy(m.header.data(), &id, 8);
    t0_->Send(1, std::move(m));
    Message reply = t0_->Receive(10s, 1);
    EXPECT_EQ(reply.type, kFirstUserMessageType + 4);  // kCallError
    // Decoded as the client would: the error names the malformed field.
    uint8_t kind = 0;
    std::memcpy(&kind, reply.header.data() + 8, 1);
    EXPECT_EQ(static_cast<ErrorKind>(kind), ErrorKind::ProtocolError);
    const std::string text(reply.header.begin(), reply.header.end());
    EXPECT_NE(text.find("malformed chip call from rank 0: truncated at task"), std::string::npos);
}

TEST_F(RemoteChipTest, AStoppedServerIsReportedWithinTheBoundNotWaitedFor) {
    ASSERT_EQ(client_->Describe(1).rank, 1);
    fabric_->Stop(1);
    stopped_ = true;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_SPYRE_ERROR(client_->Call(1, AddCall("t-lost", {256}, 5)), DeviceLost, "rank 1 (host node-b");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // bound 800 ms, reply timeout 60 s
}

// A controller that fails before it sends Shutdown (its transport goes):
// the serving rank's Serve ends at once with DeviceLost naming it, not at
// the liveness bound (the controller's process may still be alive, waiting
// at the transport's final barrier for this rank).
TEST_F(RemoteChipTest, AControllerThatLeavesWithoutShutdownEndsServeAtOnce) {
    ASSERT_EQ(client_->Describe(1).rank, 1);
    client_.reset();
    const auto start = std::chrono::steady_clock::now();
    t0_.reset();
    server_.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_NE(serve_error_.find("rank 0 (host node-a"), std::string::npos) << serve_error_;
    EXPECT_NE(serve_error_.find("left the run"), std::string::npos) << serve_error_;
}

// Rank 1 of three in-process ranks serving "add" on an embedded mock card
// until rank 0 sends Shutdown; rank 0's client makes one add and checks
// it against the CPU, then ends the service, which must end cleanly.
class ServingRankOfThree {
public:
    ServingRankOfThree()
        : fabric_(InProcessFabric::Create(3, LivenessOptions{.heartbeat_interval = 50ms, .silence_bound = 800ms})),
          t0_(fabric_->Take(0)), t1_(fabric_->Take(1)), host_(Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"))),
          service_(*t1_, host_) {
        service_.Register("add", test::DeviceAdd);
        server_ = std::thread([this] {
            try {
                service_.Serve(0);
                serve_error_.clear();
            } catch (const Error& e) {
                serve_error_ = e.what();
            }
        });
    }
    ~ServingRankOfThree() {
        if (server_.joinable()) {  // a failed check: end the service all the same
            RemoteChipClient(*t0_, 5s).Shutdown(1);
            server_.join();
        }
    }
    InProcessFabric& fabric() { return *fabric_; }
    void AddThenShutdown(const std::string& task, uint64_t seed) {
        RemoteChipClient client(*t0_, 5s);
        const RemoteCall call = AddCall(task, {64}, seed);
        std::vector<WireTensor> out = client.Call(1, call);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].data, test::CpuAdd(call.inputs[0], call.inputs[1]));
        client.Shutdown(1);
        server_.join();
        EXPECT_EQ(serve_error_, "");
    }

private:
    std::shared_ptr<InProcessFabric> fabric_;
    std::unique_ptr<InProcessTransport> t0_, t1_;
    Host host_;
    RemoteChipService service_;
    std::string serve_error_ = "still serving";
    std::thread server_;
};

// Another rank that finishes is no reason to stop serving the controller.
TEST(RemoteChipServiceTest, ARankOtherThanTheControllerLeavingIsNotAnError) {
    SPYRE_REQUIRE_FUSE();
    ServingRankOfThree rank1;
    rank1.fabric().Take(2).reset();  // rank 2 comes and goes
    rank1.AddThenShutdown("after-rank-2-left", 11);
}

// A Shutdown from a rank other than the controller is logged and ignored:
// it ended Serve, and the controller's later calls to the rank failed
// (found probing from outside).
TEST(RemoteChipServiceTest, AShutdownFromARankOtherThanTheControllerIsIgnored) {
    SPYRE_REQUIRE_FUSE();
    ServingRankOfThree rank1;
    RemoteChipClient(*rank1.fabric().Take(2), 5s).Shutdown(1);
    std::this_thread::sleep_for(200ms);  // the service takes it first
    rank1.AddThenShutdown("after-rank-2-said-shutdown", 12);
}

namespace {

// A reply as a hostile or broken server would send it: type, call id, payloads.
Message Reply(uint16_t type, uint64_t id, std::vector<std::vector<uint8_t>> payloads) {
    Message m;
    m.type = type;
    m.header.resize(8);
    std::memcpy(m.header.data(), &id, 8);
    m.payloads = std::move(payloads);
    return m;
}

constexpr uint16_t kCallReplyType = kFirstUserMessageType + 3;

}  // namespace

// No device here: rank 1 is the test itself, answering with what a broken
// server might say. The client checks every reply against the call it made.
TEST(RemoteChipClientTest, RepliesThatDoNotMatchTheCallAreProtocolErrors) {
    auto fabric = InProcessFabric::Create(2);
    auto t0 = fabric->Take(0), t1 = fabric->Take(1);
    RemoteChipClient client(*t0, 10s);
    auto submit = [&] {
        const uint64_t id = client.Submit(1, RemoteCall{"t", "f", "0", {test::Fp32Tensor({2}, {1, 2})}, {WireSpec{{2}}}});
        Message call = t1->Receive(1s, 0);
        EXPECT_EQ(call.payloads.size(), 1u);
        return id;
    };
    uint64_t id = submit();
    t1->Send(0, Reply(kCallReplyType, id, {std::vector<uint8_t>(8), std::vector<uint8_t>(8)}));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "rank 1 returned 2 outputs for chip call 't', which has 1");
    id = submit();
    t1->Send(0, Reply(kCallReplyType, id, {std::vector<uint8_t>(7)}));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "returned output 0 of chip call 't' with 7 bytes, not 8");
    id = submit();
    t1->Send(0, Reply(kCallReplyType, id + 100, {}));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "replied to call " + std::to_string(id + 100) + ", which it was never sent");
    id = submit();
    t1->Send(0, Reply(kFirstUserMessageType + 7, id, {}));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "where a reply was due");
    id = submit();
    Message cut = Reply(kFirstUserMessageType + 4, id, {});  // a CallError cut after its id
    t1->Send(0, std::move(cut));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "malformed call error from rank 1: truncated at error kind");
    // Replies may come in any order; each reaches its own Wait.
    const uint64_t a = submit(), b = submit();
    t1->Send(0, Reply(kCallReplyType, b, {std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}}));
    t1->Send(0, Reply(kCallReplyType, a, {std::vector<uint8_t>{8, 7, 6, 5, 4, 3, 2, 1}}));
    EXPECT_EQ(client.Wait(a).at(0).data, (std::vector<uint8_t>{8, 7, 6, 5, 4, 3, 2, 1}));
    EXPECT_EQ(client.Wait(b).at(0).data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

// A call that timed out may still be answered: its late reply is dropped,
// not taken as another call's. Before, the late reply hit the next Wait
// ("rank 1 replied to call 1, which it was never sent") and every later
// call to that healthy rank failed the same way, each taking another's.
TEST(RemoteChipClientTest, ALateReplyToATimedOutCallIsDroppedAndLaterCallsSucceed) {
    auto fabric = InProcessFabric::Create(2);
    auto t0 = fabric->Take(0), t1 = fabric->Take(1);
    RemoteChipClient client(*t0, 300ms);
    auto submit = [&] {
        const uint64_t id = client.Submit(1, RemoteCall{"t", "f", "0", {test::Fp32Tensor({2}, {1, 2})}, {WireSpec{{2}}}});
        EXPECT_EQ(t1->Receive(1s, 0).payloads.size(), 1u);
        return id;
    };
    const uint64_t late = submit();
    EXPECT_SPYRE_ERROR(client.Wait(late), Timeout, "");
    t1->Send(0, Reply(kCallReplyType, late, {std::vector<uint8_t>(8, 0xee)}));
    for (uint8_t i = 0; i < 4; ++i) {
        const uint64_t id = submit();
        t1->Send(0, Reply(kCallReplyType, id, {std::vector<uint8_t>(8, i)}));
        EXPECT_EQ(client.Wait(id).at(0).data, std::vector<uint8_t>(8, i)) << "call " << id;
    }
    // Its reply came: a second one is again a reply to a call never sent.
    const uint64_t id = submit();
    t1->Send(0, Reply(kCallReplyType, late, {std::vector<uint8_t>(8)}));
    EXPECT_SPYRE_ERROR(client.Wait(id), ProtocolError, "replied to call " + std::to_string(late) + ", which it was never sent");
}

// A handler that throws something other than a std::exception fails the
// call, as a local chip task's does; before, it escaped Serve and ended the
// serving rank (std::terminate on its thread).
TEST_F(RemoteChipTest, AHandlerThrowingANonStdExceptionFailsTheCallAndServingGoesOn) {
    service_->Register("throw_int", [](Device&, const RemoteCall&, std::vector<WireTensor>&) { throw 42; });
    RemoteCall call = AddCall("t-int", {64}, 21);
    call.function = "throw_int";
    try {
        client_->Call(1, call);
        ADD_FAILURE() << "the throw was not reported";
    } catch (const RemoteChipError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::TaskFailed) << e.what();
        EXPECT_EQ(e.failure().rank, 1);
        EXPECT_EQ(e.failure().task, "t-int");
        EXPECT_NE(e.failure().message.find("an exception that is not a std::exception: the int 42"), std::string::npos)
            << e.what();
    }
    const RemoteCall add = AddCall("t-after", {64}, 23);
    EXPECT_EQ(client_->Call(1, add).at(0).data, test::CpuAdd(add.inputs[0], add.inputs[1]));
}
