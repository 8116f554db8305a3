// SPDX-License-Identifier: Apache-2.0
// Transport rules on InProcessTransport (the same frame encoding, checks and
// liveness rule MpiTransport uses): per-pair order, byte-exact payloads,
// timeouts, a stopped peer reported by rank and host within the bound, and
// hostile frames as ProtocolError.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "mock_fixture.hpp"
#include "random_data.hpp"
#include "host/transport/frame.hpp"  // internal: the frame's magic and version
#include "host/transport/payload_buffers.hpp"  // internal: sent payloads kept for received ones
#include "spyre/host/in_process_transport.hpp"

using namespace spyre;
using namespace spyre::host;
using namespace std::chrono_literals;

namespace {

Message Numbered(uint32_t n, std::vector<std::vector<uint8_t>> payloads = {}) {
    Message m;
    m.type = kFirstUserMessageType;
    m.header.resize(sizeof n);
    std::memcpy(m.header.data(), &n, sizeof n);
    m.payloads = std::move(payloads);
    return m;
}

uint32_t NumberOf(const Message& m) {
    uint32_t n = 0;
    EXPECT_EQ(m.header.size(), sizeof n);
    std::memcpy(&n, m.header.data(), sizeof n);
    return n;
}

// The frame a valid one-payload message would have, to corrupt.
std::vector<uint8_t> FrameBytes(uint32_t magic, uint16_t version, uint32_t header, uint32_t count, std::vector<uint64_t> sizes,
                                size_t header_actual) {
    std::vector<uint8_t> f(16 + 8 * sizes.size() + header_actual, 0);
    uint16_t type = kFirstUserMessageType;
    std::memcpy(f.data(), &magic, 4);
    std::memcpy(f.data() + 4, &version, 2);
    std::memcpy(f.data() + 6, &type, 2);
    std::memcpy(f.data() + 8, &header, 4);
    std::memcpy(f.data() + 12, &count, 4);
    for (size_t i = 0; i < sizes.size(); ++i) std::memcpy(f.data() + 16 + 8 * i, &sizes[i], 8);
    return f;
}

constexpr uint32_t kMagic = wire::kFrameMagic;
constexpr uint16_t kVersion = wire::kFrameVersion;

// A short bound keeps the tests quick; long enough that a loaded machine does not starve a beat past it.
LivenessOptions Fast() { return LivenessOptions{.heartbeat_interval = 50ms, .silence_bound = 1000ms}; }

}  // namespace

TEST(TransportTest, RanksKnowEachOther) {
    auto fabric = InProcessFabric::Create(3, {}, {"node-a", "node-b", "node-c"});
    auto t1 = fabric->Take(1);
    EXPECT_EQ(t1->rank(), 1);
    EXPECT_EQ(t1->size(), 3);
    EXPECT_EQ(t1->peer(2).host_name, "node-c");
    EXPECT_EQ(t1->peer(2).Describe(), "rank 2 (host node-c, pid " + std::to_string(::getpid()) + ")");
    EXPECT_SPYRE_ERROR(t1->peer(3), InvalidArgument, "rank 3 is out of range");
    EXPECT_SPYRE_ERROR(fabric->Take(1), Busy, "rank 1 was already taken");
    EXPECT_SPYRE_ERROR(InProcessFabric::Create(0), InvalidArgument, "at least 1 rank");
    EXPECT_SPYRE_ERROR(InProcessFabric::Create(2, LivenessOptions{.heartbeat_interval = 100ms, .silence_bound = 150ms}),
                       InvalidArgument, "must exceed two heartbeat intervals");
    // Zero and negative intervals were taken, and an idle rank spun a core.
    for (const auto interval : {0ms, -1ms, -1000ms})
        EXPECT_SPYRE_ERROR(InProcessFabric::Create(2, LivenessOptions{.heartbeat_interval = interval}),
                           InvalidArgument, "must be at least 1 ms");
    // Huge ones overflowed the checks and the clock (a core spun too).
    EXPECT_SPYRE_ERROR(InProcessFabric::Create(2, LivenessOptions{.heartbeat_interval = std::chrono::milliseconds(1LL << 62),
                                                                  .silence_bound = 5000ms}),
                       InvalidArgument, "must exceed two heartbeat intervals");
    EXPECT_SPYRE_ERROR(InProcessFabric::Create(2, LivenessOptions{.heartbeat_interval = std::chrono::milliseconds(10'000'000'000'000LL),
                                                                  .silence_bound = std::chrono::milliseconds(30'000'000'000'000LL)}),
                       InvalidArgument, "must be at most a day");
}

TEST(TransportTest, MessagesBetweenTwoRanksArriveInOrderFromConcurrentSenders) {
    auto fabric = InProcessFabric::Create(3);
    auto t0 = fabric->Take(0), t1 = fabric->Take(1), t2 = fabric->Take(2);
    constexpr uint32_t kCount = 2000;
    std::thread s1([&] { for (uint32_t i = 0; i < kCount; ++i) t1->Send(0, Numbered(i)); });
    std::thread s2([&] { for (uint32_t i = 0; i < kCount; ++i) t2->Send(0, Numbered(kCount + i)); });
    uint32_t next1 = 0, next2 = kCount;
    for (uint32_t i = 0; i < 2 * kCount; ++i) {
        Message m = t0->Receive(10s);
        const uint32_t n = NumberOf(m);
        if (m.source == 1) {
            EXPECT_EQ(n, next1++);
        } else {
            ASSERT_EQ(m.source, 2);
            EXPECT_EQ(n, next2++);
        }
    }
    s1.join();
    s2.join();
    EXPECT_EQ(next1, kCount);
    EXPECT_EQ(next2, 2 * kCount);
    // A receive from one source leaves the other's messages in place.
    t1->Send(0, Numbered(7));
    t2->Send(0, Numbered(8));
    EXPECT_EQ(NumberOf(t0->Receive(1s, 2)), 8u);
    EXPECT_EQ(NumberOf(t0->Receive(1s, 1)), 7u);
}

TEST(TransportTest, PayloadsArriveByteExactWhateverTheirSize) {
    auto fabric = InProcessFabric::Create(2);
    auto t0 = fabric->Take(0), t1 = fabric->Take(1);
    const std::vector<size_t> sizes = {0, 1, 4095, 4096, 65537, (16u << 20) + 3};
    std::vector<std::vector<uint8_t>> sent;
    for (size_t i = 0; i < sizes.size(); ++i) sent.push_back(test::RandomBytes(sizes[i], 100 + i));
    t0->Send(1, Numbered(1, sent));
    Message m = t1->Receive(10s, 0);
    EXPECT_EQ(m.source, 0);
    ASSERT_EQ(m.payloads.size(), sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(m.payloads[i], sent[i]) << "payload " << i;
    // To itself too.
    t1->Send(1, Numbered(2, {sent[3]}));
    EXPECT_EQ(t1->Receive(1s, 1).payloads.at(0), sent[3]);
}

TEST(TransportTest, BadArgumentsAndTimeoutsAreTypedErrors) {
    auto fabric = InProcessFabric::Create(2, Fast());
    auto t0 = fabric->Take(0);
    auto t1 = fabric->Take(1);
    EXPECT_SPYRE_ERROR(t0->Send(2, Numbered(0)), InvalidArgument, "rank 2 is out of range");
    EXPECT_SPYRE_ERROR(t0->Send(-1, Numbered(0)), InvalidArgument, "rank -1 is out of range");
    EXPECT_SPYRE_ERROR(t0->Receive(1s, 5), InvalidArgument, "rank 5 is out of range");
    Message too_many = Numbered(0);
    too_many.payloads.resize(kMaxPayloads + 1);
    EXPECT_SPYRE_ERROR(t0->Send(1, std::move(too_many)), InvalidArgument, "payloads is over the limit");
    // The transport's own types: a caller's "peer left" (2) cut the sender
    // off at the receiver for good, a heartbeat (1) was dropped (found
    // probing from outside).
    for (const uint16_t own : {uint16_t(0), uint16_t(1), kPeerLeftMessageType, uint16_t(kFirstUserMessageType - 1)})
        EXPECT_SPYRE_ERROR(t0->Send(1, Message{.type = own}), InvalidArgument,
                           "message type " + std::to_string(own) + " is the transport's own (types below 16): not sent");
    t0->Send(1, Message{.type = kFirstUserMessageType});
    const Message first = t1->Receive(5s, 0);
    EXPECT_EQ(first.type, kFirstUserMessageType);
    EXPECT_FALSE(t1->PeerError(0).has_value());
    EXPECT_SPYRE_ERROR(t0->Receive(100ms, 1), Timeout, "no message from rank 1 (host inproc-1");
    EXPECT_SPYRE_ERROR(t0->Receive(100ms), Timeout, "no message from any rank within 100 ms");
}

// A rank whose transport shuts down says so, after everything it sent: a
// wait on it alone ends at once, a wait on any rank hears it once and goes
// on, and the leave is not a loss (a stopped or silent peer is).
TEST(TransportTest, APeerThatLeavesIsAnnouncedAfterItsMessagesAndEndsAWaitOnIt) {
    auto fabric = InProcessFabric::Create(3, Fast(), {"node-a", "node-b", "node-c"});
    auto t0 = fabric->Take(0);
    auto t2 = fabric->Take(2);
    {
        auto t1 = fabric->Take(1);
        t1->Send(0, Numbered(7));
        t1->Send(0, Numbered(8));
    }
    // From rank 1 alone: its messages, then the leave (no wait for the bound).
    EXPECT_EQ(NumberOf(t0->Receive(1s, 1)), 7u);
    EXPECT_EQ(NumberOf(t0->Receive(1s, 1)), 8u);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_SPYRE_ERROR(t0->Receive(10s, 1), DeviceLost, "rank 1 (host node-b, pid");
    EXPECT_SPYRE_ERROR(t0->Receive(10s, 1), DeviceLost, "left the run: its transport shut down");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_SPYRE_ERROR(t0->Send(1, Numbered(9)), DeviceLost, "rank 1 (host node-b");
    ASSERT_TRUE(t0->PeerError(1).has_value());
    EXPECT_NE(t0->PeerError(1)->message().find("left the run"), std::string::npos);
    // From any rank: the notice once, as a message; then the wait goes on
    // (rank 2 is still here and sends later).
    const Message notice = t0->Receive(1s);
    EXPECT_EQ(notice.type, kPeerLeftMessageType);
    EXPECT_EQ(notice.source, 1);
    EXPECT_TRUE(notice.header.empty());
    EXPECT_TRUE(notice.payloads.empty());
    EXPECT_SPYRE_ERROR(t0->Receive(100ms), Timeout, "no message from any rank");
    t2->Send(0, Numbered(3));
    EXPECT_EQ(NumberOf(t0->Receive(1s)), 3u);
    EXPECT_FALSE(t0->PeerError(2).has_value());
    // Rank 2 heard the same, first from any rank.
    const Message heard = t2->Receive(1s);
    EXPECT_EQ(heard.type, kPeerLeftMessageType);
    EXPECT_EQ(heard.source, 1);
    // A rank that left is not lost by its silence afterwards (its process
    // ends): a wait on any rank still goes on.
    fabric->Stop(1);
    std::this_thread::sleep_for(Fast().silence_bound + 300ms);
    EXPECT_SPYRE_ERROR(t0->Receive(10ms, 1), DeviceLost, "left the run");
    EXPECT_SPYRE_ERROR(t0->Receive(100ms), Timeout, "no message from any rank");
}

TEST(TransportTest, AStoppedPeerIsReportedByRankAndHostWithinTheBound) {
    auto fabric = InProcessFabric::Create(3, Fast(), {"node-a", "node-b", "node-c"});
    auto t0 = fabric->Take(0), t1 = fabric->Take(1);
    t1->Send(0, Numbered(1));
    fabric->Stop(1);
    t1->Send(0, Numbered(2));  // dropped: a stopped process sends nothing
    // What it sent before it stopped is still read first.
    EXPECT_EQ(NumberOf(t0->Receive(1s, 1)), 1u);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_SPYRE_ERROR(t0->Receive(60s, 1), DeviceLost, "rank 1 (host node-b, pid");
    const auto waited = std::chrono::steady_clock::now() - start;
    // The bound (1 s) plus generous slack for a loaded machine; never the 60 s timeout.
    EXPECT_LT(waited, 5s);
    try {
        t0->Receive(1s, 1);
        ADD_FAILURE() << "a lost peer stays lost";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceLost);
        EXPECT_NE(std::string(e.what()).find("liveness bound 1000 ms"), std::string::npos) << e.what();
        EXPECT_EQ(e.context().device, "rank 1@node-b");
    }
    ASSERT_TRUE(t0->PeerError(1).has_value());
    EXPECT_FALSE(t0->PeerError(2).has_value());
    EXPECT_SPYRE_ERROR(t0->Send(1, Numbered(3)), DeviceLost, "rank 1 (host node-b");
    // Any-source receives fail too: the run cannot go on as if nothing happened.
    EXPECT_SPYRE_ERROR(t0->Receive(1s), DeviceLost, "rank 1");
}

// A cut cable plugged back in: the peer beats and sends again, but the run
// that lost it stays failed, and nothing it sends is delivered as if it
// belonged to that run.
TEST(TransportTest, APeerWhoseLinkComesBackStaysLostAndIsNotHeard) {
    auto fabric = InProcessFabric::Create(2, Fast(), {"node-a", "node-b"});
    auto t0 = fabric->Take(0), t1 = fabric->Take(1);
    fabric->Stop(1);
    EXPECT_SPYRE_ERROR(t0->Receive(60s, 1), DeviceLost, "rank 1 (host node-b, pid");
    fabric->Resume(1);
    t1->Send(0, Numbered(7));  // a late reply, say
    // Beats arrive again for two bounds; the message is never handed out.
    const auto until = std::chrono::steady_clock::now() + 2 * Fast().silence_bound;
    for (int i = 0; i < 100 && std::chrono::steady_clock::now() < until; ++i) {
        EXPECT_SPYRE_ERROR(t0->Receive(50ms, 1), DeviceLost, "liveness bound 1000 ms");
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_SPYRE_ERROR(t0->Receive(50ms), DeviceLost, "rank 1");
    ASSERT_TRUE(t0->PeerError(1).has_value());
}

TEST(TransportTest, APeerThatKeepsBeatingIsNeverLost) {
    auto fabric = InProcessFabric::Create(2, Fast());
    auto t0 = fabric->Take(0);
    // Over three bounds of silence without messages: heartbeats alone keep rank 1 alive.
    EXPECT_SPYRE_ERROR(t0->Receive(3600ms, 1), Timeout, "within 3600 ms");
    EXPECT_FALSE(t0->PeerError(1).has_value());
}

TEST(TransportTest, MalformedFramesAreProtocolErrorsAndCutTheSenderOff) {
    struct Case {
        const char* name;
        std::vector<uint8_t> frame;
        std::vector<std::vector<uint8_t>> payloads;
        const char* text;
    };
    const std::vector<Case> cases = {
        {"empty", {}, {}, "truncated at magic"},
        {"magic", FrameBytes(0xdeadbeef, kVersion, 0, 0, {}, 0), {}, "magic 0xdeadbeef is not SPTR"},
        {"version", FrameBytes(kMagic, 9, 0, 0, {}, 0), {}, "version 9 (this side speaks 2)"},
        {"truncated sizes", FrameBytes(kMagic, kVersion, 0, 3, {8}, 0), {}, "truncated at payload size"},
        {"header size", FrameBytes(kMagic, kVersion, 10, 0, {}, 4), {}, "header is 4 bytes, the frame says 10"},
        {"huge payload", FrameBytes(kMagic, kVersion, 0, 1, {1ull << 40}, 0), {}, "over the limit"},
        {"huge total", FrameBytes(kMagic, kVersion, 0, 3, {1ull << 30, 1ull << 30, 1ull << 30}, 0), {}, "in all are over the limit"},
        {"payload count", FrameBytes(kMagic, kVersion, 0, 1, {4}, 0), {}, "announces 1 payloads, 0 followed"},
        {"payload size", FrameBytes(kMagic, kVersion, 0, 1, {4}, 0), {std::vector<uint8_t>(5)}, "payload 0 is 5 bytes, the frame says 4"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        auto fabric = InProcessFabric::Create(3, Fast());
        auto t0 = fabric->Take(0), t2 = fabric->Take(2);
        fabric->InjectFrame(1, 0, c.frame, c.payloads);
        EXPECT_SPYRE_ERROR(t0->Receive(1s, 1), ProtocolError, c.text);
        EXPECT_SPYRE_ERROR(t0->Receive(1s, 1), DeviceLost, "sent a malformed frame");
        // Others are unaffected.
        t2->Send(0, Numbered(5));
        EXPECT_EQ(NumberOf(t0->Receive(1s, 2)), 5u);
    }
}

// A receiver that gets a sender's ProtocolError finds the sender lost at
// once (as the MPI hostile test checks on rank 0). The queue used to push
// the error and mark the loss in two steps, so a receiver polling hard could
// take the error in between and see no loss.
TEST(TransportTest, TheProtocolErrorOfAMalformedFrameComesWithItsSendersLoss) {
    const auto frame = FrameBytes(0xdeadbeef, kVersion, 0, 0, {}, 0);
    int without_loss = 0;
    for (int round = 0; round < 2000; ++round) {
        auto fabric = InProcessFabric::Create(2, Fast());
        auto t0 = fabric->Take(0);
        std::atomic<bool> polling{false}, done{false};
        // Another thread that watches the peer's state, as a scheduler would:
        // it contends for the liveness lock, which widens the window.
        std::thread watcher([&] {
            while (!done.load()) (void)t0->PeerError(1);
        });
        std::thread hostile([&] {
            while (!polling.load()) std::this_thread::yield();
            fabric->InjectFrame(1, 0, frame, {});
        });
        bool got = false;
        const auto give_up = std::chrono::steady_clock::now() + 5s;
        while (!got && std::chrono::steady_clock::now() < give_up) {
            polling.store(true);
            try {
                t0->Receive(0ms, 1);
                ADD_FAILURE() << "a malformed frame was delivered";
                got = true;
            } catch (const Error& e) {
                if (e.kind() == ErrorKind::Timeout) continue;
                EXPECT_EQ(e.kind(), ErrorKind::ProtocolError) << e.what();
                if (!t0->PeerError(1)) ++without_loss;
                got = true;
            }
        }
        hostile.join();
        done.store(true);
        watcher.join();
        ASSERT_TRUE(got) << "round " << round << ": no error within 5 s";
    }
    EXPECT_EQ(without_loss, 0) << "times the error came before the sender's loss";
}

// Large buffers a transport sent are kept to receive the next large
// payloads into (the same memory, zeroed, best fit), within the bounds;
// small ones are not kept. DecodeFrame takes its payloads from them.
TEST(PayloadBuffersTest, SentBuffersComeBackZeroedForTheNextPayloads) {
    using spyre::host::wire::PayloadBuffers;
    PayloadBuffers buffers;
    std::vector<uint8_t> small(PayloadBuffers::kMinBytes - 1, 7);
    buffers.Keep(std::move(small));
    EXPECT_EQ(buffers.count(), 0u);

    std::vector<uint8_t> mib(1 << 20, 0xab), two(2 << 20, 0xcd);
    const uint8_t* mib_data = mib.data();
    const uint8_t* two_data = two.data();
    buffers.Keep(std::move(two));
    buffers.Keep(std::move(mib));
    EXPECT_EQ(buffers.count(), 2u);
    EXPECT_EQ(buffers.held_bytes(), size_t(3) << 20);
    // Best fit: 700 KiB goes into the 1 MiB buffer, zeroed.
    std::vector<uint8_t> got = buffers.Take(700 << 10);
    EXPECT_EQ(got.data(), mib_data);
    EXPECT_EQ(got.size(), size_t(700) << 10);
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0; }));
    // Nothing kept is large enough: a new buffer, the kept one stays.
    EXPECT_NE(buffers.Take(3 << 20).data(), two_data);
    EXPECT_EQ(buffers.count(), 1u);
    // A small payload never takes a kept buffer.
    EXPECT_EQ(buffers.Take(100).size(), 100u);
    EXPECT_EQ(buffers.count(), 1u);

    // DecodeFrame receives into them.
    spyre::host::Message m;
    m.type = 77;
    m.payloads = {std::vector<uint8_t>(16, 1), std::vector<uint8_t>(1 << 20, 2)};
    const std::vector<uint8_t> frame = spyre::host::wire::EncodeFrame(m);
    const spyre::host::Message decoded = spyre::host::wire::DecodeFrame(3, frame, &buffers);
    ASSERT_EQ(decoded.payloads.size(), 2u);
    EXPECT_EQ(decoded.payloads[1].data(), two_data);
    EXPECT_EQ(decoded.payloads[1].size(), size_t(1) << 20);
    EXPECT_EQ(buffers.count(), 0u);

    // Bounded in count and bytes: the oldest go first.
    for (size_t i = 0; i < PayloadBuffers::kMaxBuffers + 2; ++i) buffers.Keep(std::vector<uint8_t>(1 << 20));
    EXPECT_EQ(buffers.count(), PayloadBuffers::kMaxBuffers);
    buffers.Keep(std::vector<uint8_t>(PayloadBuffers::kMaxBytes));
    EXPECT_LE(buffers.held_bytes(), PayloadBuffers::kMaxBytes);
    buffers.Keep(std::vector<uint8_t>(PayloadBuffers::kMaxBytes + 1));  // larger than the whole bound: not kept
    EXPECT_LE(buffers.held_bytes(), PayloadBuffers::kMaxBytes);
}
