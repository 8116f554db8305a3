// SPDX-License-Identifier: Apache-2.0
// Run under mpirun (tests/libspyre/host/run_mpi_test.py): every rank opens its
// own embedded mock card through MpiTransport's run; ranks >= 1 serve chip
// calls, rank 0 ships them and checks every result byte for byte.
//   calls      adds of several shapes on every other rank, all in flight at
//              once, against the CPU (and rank 0's own card); an unknown
//              function comes back as RemoteChipError naming the rank.
//   calls-waiters-poll  the same with every rank's progress thread asleep
//              for an hour between polls: the threads that wait (the
//              service's, the client's) must poll MPI themselves. Before
//              they did, nothing was received and each rank lost the other.
//   stop-peer  rank 1 SIGSTOPs itself inside a call: rank 0 must report it
//              lost (DeviceLost naming rank 1) within the liveness bound.
//   kill-peer  rank 1 SIGKILLs itself inside a call: mpirun ends the job
//              (the wrapper checks it names rank 1, in time).
//   controller-fails  rank 0 gives up right after the transport is up (as
//              a program whose own card will not open does), so it never
//              sends Shutdown: every serving rank's Serve must end with
//              DeviceLost naming rank 0 ("left the run") at once. Before
//              the transport said so, they served on while rank 0 waited
//              for them at the final barrier: a minute, the finalize timeout.
//   hostile    ranks 1 and up are not spyre at all: they join the
//              transport's start-up collectives by hand, then send rank 0 a
//              frame with a bad magic (rank 1), a frame whose payload is
//              shorter than announced (rank 2) and, with 4 ranks, one whose
//              payload is longer (rank 3). Rank 0 must get ProtocolError
//              naming each, then find each cut off (DeviceLost), with no
//              crash or hang.
// Lines starting with "RESULT" are what the wrapper checks.
#include <signal.h>
#include <unistd.h>

#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <string>

#include "random_data.hpp"
#include "remote_add.hpp"
#include "spyre/device/host.hpp"
#include "spyre/host/mpi_transport.hpp"
#include "spyre/host/remote_chip_client.hpp"
#include "spyre/host/remote_chip_service.hpp"

using namespace spyre;
using namespace spyre::host;
using Clock = std::chrono::steady_clock;

namespace {

// The voluntary context switches of this process's MPI progress thread
// ("spyre-mpi"), or -1 when there is none: each is one of its sleeps.
long ProgressThreadSleeps() {
    DIR* d = ::opendir("/proc/self/task");
    if (!d) return -1;
    long found = -1;
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        const std::string dir = std::string("/proc/self/task/") + e->d_name;
        std::string comm;
        std::getline(std::ifstream(dir + "/comm"), comm);
        if (comm != "spyre-mpi") continue;
        std::ifstream status(dir + "/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("voluntary_ctxt_switches:", 0) == 0) found = std::atol(line.c_str() + 24);
    }
    ::closedir(d);
    return found;
}

Host OpenOwnCard() {
    return Host::Open(HostOptions::EmbeddedMock(1, 1, "1G"));  // a fresh mount point and shm prefix per rank
}

WireTensor RandomTensor(const std::vector<int64_t>& shape, uint64_t seed) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    const std::vector<uint8_t> bytes = test::RandomBytes(n * 4, seed);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(bytes[i * 4] | (bytes[i * 4 + 1] << 8)) / 128.0f - 256.0f;
    return test::Fp32Tensor(shape, v);
}

int Serve(MpiTransport& t) {
    Host host = OpenOwnCard();
    RemoteChipService service(t, host);
    service.Register("add", test::DeviceAdd);
    service.Register("sigstop", [](Device&, const RemoteCall&, std::vector<WireTensor>&) { ::raise(SIGSTOP); });
    service.Register("sigkill", [](Device&, const RemoteCall&, std::vector<WireTensor>&) { ::raise(SIGKILL); });
    service.Serve(0);
    for (int r = 0; r < t.size(); ++r)
        if (auto e = t.PeerError(r)) {
            // Rank 0 sent Shutdown and may have left already (its transport
            // gone): that it left is no error here (it failed this test 1 in
            // 4 runs on a loaded machine).
            if (r == 0 && std::string(e->what()).find(" left the run: ") != std::string::npos) continue;
            std::fprintf(stderr, "rank %d: %s\n", t.rank(), e->what());
            return 2;
        }
    return 0;
}

int Calls(MpiTransport& t, RemoteChipClient& client) {
    int failures = 0;
    // The transport's own message types are refused: a caller's "peer left"
    // cut rank 1 off here for good (found probing from outside).
    try {
        t.Send(1, Message{.type = kPeerLeftMessageType});
        std::fprintf(stderr, "a message of the transport's own type 2 was sent\n");
        ++failures;
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::InvalidArgument || !std::strstr(e.what(), "type 2 is the transport's own")) {
            std::fprintf(stderr, "type 2: %s\n", e.what());
            ++failures;
        }
    }
    Host host = OpenOwnCard();
    Device own = host.Open("0");
    const std::vector<std::vector<int64_t>> shapes = {{256}, {128, 128}, {3, 1000}, {1024, 1024}};
    struct Sent {
        int rank;
        size_t shape;
        std::vector<uint8_t> expected;
        uint64_t id;
    };
    std::vector<Sent> sent;
    for (int r = 1; r < t.size(); ++r) {
        const RankDescription d = client.Describe(r);
        std::printf("rank %d: host %s, pid %d, %zu functions (%s), serves", d.rank, d.host_name.c_str(), d.pid,
                    d.functions.size(), d.host.c_str());
        for (const auto& f : d.chip_functions) std::printf(" %s", f.c_str());
        std::printf("\n");
        if (d.pid == ::getpid() || d.functions.size() != 2) ++failures;
        for (size_t s = 0; s < shapes.size(); ++s) {
            RemoteCall call{"add-r" + std::to_string(r) + "-s" + std::to_string(s), "add", s % 2 ? "1" : "0",
                          {RandomTensor(shapes[s], 1000 * r + 10 * s), RandomTensor(shapes[s], 1000 * r + 10 * s + 1)},
                          {WireSpec{shapes[s], DType::FP32}}};
            std::vector<uint8_t> expected = test::CpuAdd(call.inputs[0], call.inputs[1]);
            // Rank 0's own card computes the same sum.
            std::vector<WireTensor> local = {WireTensor{call.outputs[0], std::vector<uint8_t>(expected.size())}};
            test::DeviceAdd(own, call, local);
            if (local[0].data != expected) {
                std::printf("rank 0's own card disagrees with the CPU on %s\n", call.task.c_str());
                ++failures;
            }
            const uint64_t id = client.Submit(r, std::move(call));
            sent.push_back(Sent{r, s, std::move(expected), id});
        }
    }
    for (const Sent& s : sent) {
        std::vector<WireTensor> out = client.Wait(s.id);
        if (out.size() != 1 || out[0].data != s.expected) {
            std::printf("rank %d: shape %zu differs from the CPU\n", s.rank, s.shape);
            ++failures;
        }
    }
    for (int r = 1; r < t.size(); ++r) {
        try {
            client.Call(r, RemoteCall{"t-unknown", "no-such-function", "0", {}, {}});
            ++failures;
        } catch (const RemoteChipError& e) {
            const bool named = e.kind() == ErrorKind::NotFound && e.failure().rank == r &&
                               std::string(e.what()).find("on rank " + std::to_string(r)) != std::string::npos;
            if (!named) ++failures;
            std::printf("expected error: %s\n", e.what());
        }
    }
    // An idle rank (no Receive waits) leaves its core alone: its progress
    // thread woke every 100 us (10,000 times a second) before, and took the
    // core from the rank's work each time (docs/multihost.md).
    const long before = ProgressThreadSleeps();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const long wakes = ProgressThreadSleeps() - before;
    std::printf("idle rank 0: its progress thread slept %ld times in 300 ms\n", wakes);
    if (before < 0 || wakes > 600) {
        std::printf("the idle progress thread woke too often (at most 600 in 300 ms), or was not found\n");
        ++failures;
    }
    for (int r = 1; r < t.size(); ++r) client.Shutdown(r);
    if (failures == 0) std::printf("RESULT calls-ok ranks=%d calls=%zu\n", t.size(), sent.size());
    return failures == 0 ? 0 : 1;
}

// Asks rank 1 to stop or kill itself inside a call, then waits for the reply
// that never comes: the wait must end with DeviceLost naming rank 1.
int LosePeer(MpiTransport& t, RemoteChipClient& client, const char* how) {
    for (int r = 1; r < t.size(); ++r) std::printf("rank %d: pid %d\n", r, client.Describe(r).pid);
    std::printf("RESULT fault-requested %s\n", how);
    std::fflush(stdout);
    const auto start = Clock::now();
    const uint64_t id = client.Submit(1, RemoteCall{"t-fault", how, "0", {}, {}});
    try {
        client.Wait(id);
        std::printf("RESULT peer-lost-not-reported: the call returned\n");
        return 1;
    } catch (const Error& e) {
        const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        const bool named = e.kind() == ErrorKind::DeviceLost && std::string(e.what()).find("rank 1 (host ") != std::string::npos;
        std::printf("RESULT %s rank=1 after_ms=%ld bound_ms=%ld: %s\n", named ? "peer-lost-reported" : "wrong-error", ms,
                    static_cast<long>(t.liveness().silence_bound.count()), e.what());
        std::fflush(stdout);
        for (int r = 2; r < t.size(); ++r) client.Shutdown(r);
        // Non-zero on purpose: the run failed, and mpirun must end the stopped rank.
        return named ? 3 : 1;
    }
}

// A rank that speaks raw MPI: the same start-up as MpiTransport (two
// communicator duplicates, then an allgather of {processor name, pid}: the
// collectives must match), then garbage on the frame and payload tags.
int Hostile() {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm comm, raw;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_dup(comm, &raw);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    struct Identity {
        char name[MPI_MAX_PROCESSOR_NAME];
        int pid;
    } mine{}, all[8];
    int len = 0;
    MPI_Get_processor_name(mine.name, &len);
    mine.pid = ::getpid();
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, comm);
    constexpr int kFrameTag = 1, kPayloadTag = 2;
    if (rank == 1) {
        const uint32_t garbage[4] = {0xdeadbeef, 1, 0, 0};
        MPI_Send(garbage, sizeof garbage, MPI_BYTE, 0, kFrameTag, comm);
    } else {
        // A valid frame (type 16, no header) announcing one payload of 100
        // bytes; 50 follow (rank 2). Rank 3: it announces 50, 100 follow.
        const size_t announced = rank == 2 ? 100 : 50, sent = rank == 2 ? 50 : 100;
        uint8_t frame[24] = {};
        // The wire as docs/multihost.md gives it (this rank speaks raw MPI,
        // as a peer of another build would).
        const uint32_t magic = 0x52545053, count = 1;
        const uint16_t version = 2, type = 16;
        const uint64_t size = announced;
        std::memcpy(frame, &magic, 4);
        std::memcpy(frame + 4, &version, 2);
        std::memcpy(frame + 6, &type, 2);
        std::memcpy(frame + 12, &count, 4);
        std::memcpy(frame + 16, &size, 8);
        MPI_Send(frame, sizeof frame, MPI_BYTE, 0, kFrameTag, comm);
        std::vector<uint8_t> payload(sent, 7);
        MPI_Send(payload.data(), int(sent), MPI_BYTE, 0, kPayloadTag, comm);
    }
    // Rank 0 ends the job (it exits non-zero with its peers cut off); MPI_Finalize waits for that.
    MPI_Finalize();
    return 0;
}

int Victim(MpiTransport& t) {
    int ok = 0;
    const int checks = 2 * (t.size() - 1);
    for (int source = 1; source < t.size(); ++source) {
        try {
            t.Receive(std::chrono::seconds(20), source);
            std::printf("rank %d: a message was delivered\n", source);
        } catch (const Error& e) {
            std::printf("from rank %d: %s\n", source, e.what());
            const std::string what = e.what();
            const char* expected = source == 1   ? "magic 0xdeadbeef is not SPTR"
                                   : source == 2 ? "payload 0 is 50 bytes, the frame says 100"
                                                 : "payload 0 is longer than the 50 bytes the frame says";
            if (e.kind() == ErrorKind::ProtocolError && what.find("rank " + std::to_string(source)) != std::string::npos &&
                what.find(expected) != std::string::npos)
                ++ok;
        }
        auto lost = t.PeerError(source);
        if (lost && lost->kind() == ErrorKind::DeviceLost && std::string(lost->what()).find("malformed") != std::string::npos)
            ++ok;
        else
            std::printf("rank %d after its error: %s\n", source, lost ? lost->what() : "not lost");
    }
    if (ok == checks) std::printf("RESULT hostile-ok\n");
    else std::printf("RESULT hostile-wrong (%d of %d checks)\n", ok, checks);
    std::fflush(stdout);
    return 3;  // its peers are cut off: the run fails, and mpirun ends them
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "calls";
    const char* bound_env = std::getenv("SPYRE_TEST_LIVENESS_MS");
    MpiTransportOptions options;
    options.liveness.heartbeat_interval = std::chrono::milliseconds(200);
    options.liveness.silence_bound = std::chrono::milliseconds(bound_env ? std::atoi(bound_env) : 3000);
    if (mode == "calls-waiters-poll") options.idle_sleep = std::chrono::hours(1);
    int status = 1;
    int rank = -1;
    if (mode == "hostile") {
        int world_rank = 0;
        // Which rank this is, before any MPI: Open MPI's launcher says.
        if (const char* r = std::getenv("OMPI_COMM_WORLD_RANK")) world_rank = std::atoi(r);
        if (world_rank != 0) return Hostile();
    }
    if (mode == "calls") {
        // Options refused before MPI starts: a transport refused for them
        // left MPI initialised, and the next one failed "MPI is already
        // initialised" (found probing from outside).
        MpiTransportOptions no_beat = options, negative_finalize = options, long_poll = options;
        no_beat.liveness.heartbeat_interval = std::chrono::milliseconds(0);
        negative_finalize.finalize_timeout = std::chrono::milliseconds(-1);
        long_poll.busy_poll = std::chrono::seconds(20);
        for (const auto& [bad, said] : {std::pair{no_beat, "heartbeat interval (0 ms)"},
                                        std::pair{negative_finalize, "finalize_timeout is -1 ms; it must be 0 to a day"},
                                        std::pair{long_poll, "busy_poll is 20000000 us; it must be 0 to 1 s"}}) {
            try {
                MpiTransport refused(bad);
                std::fprintf(stderr, "bad options taken (%s)\n", said);
                return 1;
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::InvalidArgument || !std::strstr(e.what(), said)) {
                    std::fprintf(stderr, "bad options: %s\n", e.what());
                    return 1;
                }
            }
        }
    }
    try {
        MpiTransport t(options);
        rank = t.rank();
        setvbuf(stdout, nullptr, _IOLBF, 0);
        if (mode == "hostile") {
            status = Victim(t);
        } else if (t.rank() != 0 && mode == "controller-fails") {
            try {
                status = Serve(t);
                std::printf("RESULT serve-returned rank=%d\n", t.rank());
            } catch (const Error& e) {
                std::printf("RESULT controller-left rank=%d kind=%s: %s\n", t.rank(), ToString(e.kind()), e.what());
                status = 4;
            }
        } else if (t.rank() != 0) {
            status = Serve(t);
        } else if (mode == "controller-fails") {
            std::printf("RESULT controller-failing\n");
            status = 1;
        } else {
            RemoteChipClient client(t, std::chrono::seconds(45));
            if (mode == "calls" || mode == "calls-waiters-poll") status = Calls(t, client);
            else if (mode == "stop-peer") status = LosePeer(t, client, "sigstop");
            else if (mode == "kill-peer") status = LosePeer(t, client, "sigkill");
            else std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        status = 1;
    }
    std::fflush(stdout);
    return status;
}
