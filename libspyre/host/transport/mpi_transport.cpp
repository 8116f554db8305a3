// SPDX-License-Identifier: Apache-2.0
// MPI under one lock: the progress thread polls while nobody else does, and
// a thread that waits for a message (Receive) or sends one polls or posts
// itself, so a message crosses no thread on either side (MPI_THREAD_SERIALIZED:
// one MPI call at a time, from any thread). Each message is a frame (tag
// kFrameTag) followed by one MPI message per payload (kPayloadTag); MPI keeps
// both in order per (source, tag), and payload receives are posted in frame
// order, so a payload always lands in the message its frame announced.
#include "spyre/host/mpi_transport.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "host/transport/frame.hpp"
#include "host/transport/message_queue.hpp"
#include "host/transport/payload_buffers.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/common/log.hpp"

namespace spyre::host {

namespace {

constexpr int kFrameTag = 1;
constexpr int kPayloadTag = 2;
using Clock = std::chrono::steady_clock;
// How often a Receive past its polling window polls MPI again itself, while
// it sleeps on its message queue (the progress thread polls meanwhile too).
constexpr std::chrono::milliseconds kDriveTick{1};
// The progress thread's period while no Receive sleeps for a message:
// heartbeats and messages nobody waits for yet need no more, and on a host
// with few cores each of its wake-ups takes the core from the rank's work
// (a chip call's wait; docs/multihost.md "Who calls MPI").
constexpr std::chrono::milliseconds kIdlePoll{1};
// How long after a Receive went to sleep the progress thread keeps polling
// every idle_sleep for it: a reply or the next call usually comes within
// that; a rank idle for longer (a server between bursts) falls back to
// kIdlePoll, and its Receive's own tick.
constexpr std::chrono::milliseconds kFastPollFor{10};

// Counts the calling Receive in `n` (drivers, sleepers) while it lives.
class CountedIn {
public:
    explicit CountedIn(std::atomic<int>& n) : n_(n) { n_.fetch_add(1, std::memory_order_acq_rel); }
    ~CountedIn() { n_.fetch_sub(1, std::memory_order_acq_rel); }
    CountedIn(const CountedIn&) = delete;
    CountedIn& operator=(const CountedIn&) = delete;

private:
    std::atomic<int>& n_;
};

// Which payload came longer than its receive (MPI_ERR_TRUNCATE), when that
// is what failed a MPI_Testall of them. Open MPI reports errors only once
// every request completed, so no receive is left posted into the buffers.
std::optional<size_t> TruncatedPayload(int rc, const std::vector<MPI_Status>& statuses) {
    auto truncated = [](int err) {
        int cls = MPI_SUCCESS;
        return err != MPI_SUCCESS && MPI_Error_class(err, &cls) == MPI_SUCCESS && cls == MPI_ERR_TRUNCATE;
    };
    if (rc != MPI_ERR_IN_STATUS) return truncated(rc) && statuses.size() == 1 ? std::optional<size_t>(0) : std::nullopt;
    for (size_t i = 0; i < statuses.size(); ++i)
        if (truncated(statuses[i].MPI_ERROR)) return i;
    return std::nullopt;
}

std::string MpiError(int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
    return std::string(text, static_cast<size_t>(len));
}

void Check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw Error(ErrorKind::IoError, std::string(what) + " failed: " + MpiError(rc));
}

struct Outgoing {
    int destination;
    std::vector<uint8_t> frame;
    std::vector<std::vector<uint8_t>> payloads;
    std::vector<MPI_Request> requests;  // frame first, then payloads; alive until all complete
};

struct Incoming {
    MPI_Request frame_request = MPI_REQUEST_NULL;
    std::vector<uint8_t> frame;
    bool frame_done = false;
    bool truncated = false;               // the frame was longer than any valid frame
    std::optional<Message> message;       // decoded; payloads being received into
    std::optional<Error> error;           // or why it could not be decoded
    std::vector<MPI_Request> payload_requests;
};

struct Job {
    std::function<void(MPI_Comm)> work;
    std::promise<void> done;
};

// InvalidArgument naming an option out of its range. A negative
// finalize_timeout skipped MPI_Finalize with every rank alive, and a
// busy_poll of 20 s made a Receive of 8 s return after 20 (found probing
// from outside). idle_sleep may be long: waiters then poll MPI themselves.
void CheckMpiOptions(const MpiTransportOptions& o) {
    using std::chrono::microseconds, std::chrono::seconds, std::chrono::hours;
    auto refuse = [](const char* name, int64_t value, const char* unit, const char* range) {
        throw Error(ErrorKind::InvalidArgument, std::string("MpiTransportOptions: ") + name + " is " +
                                                    std::to_string(value) + " " + unit + "; it must be " + range);
    };
    if (o.idle_spin < microseconds(0) || o.idle_spin > seconds(1)) refuse("idle_spin", o.idle_spin.count(), "us", "0 to 1 s");
    if (o.busy_poll < microseconds(0) || o.busy_poll > seconds(1)) refuse("busy_poll", o.busy_poll.count(), "us", "0 to 1 s");
    if (o.idle_sleep < microseconds(0)) refuse("idle_sleep", o.idle_sleep.count(), "us", "at least 0");
    if (o.finalize_timeout < std::chrono::milliseconds(0) || o.finalize_timeout > hours(24))
        refuse("finalize_timeout", o.finalize_timeout.count(), "ms", "0 to a day");
}

}  // namespace

struct MpiTransport::State {
    MpiTransportOptions options;
    int rank = -1;
    int size = 0;
    std::vector<PeerInfo> peers;
    std::unique_ptr<wire::PeerLiveness> liveness;
    std::unique_ptr<wire::MessageQueue> messages;

    std::mutex mutex;  // guards the hand-over queues below
    EventCount wake;   // the idle progress thread's: a send, a job, or stop (notified after the unlock)
    std::deque<Outgoing> queue;
    std::deque<Job> jobs;
    bool stop = false;
    std::thread thread;
    // Receives polling MPI themselves: the progress thread leaves it to them.
    std::atomic<int> drivers{0};
    // Receives past their polling window, asleep on the message queue, and
    // when the last of them went to sleep: the progress thread polls every
    // idle_sleep for kFastPollFor after that, else every kIdlePoll.
    std::atomic<int> sleepers{0};
    std::atomic<Clock::rep> slept_at{0};

    // Held for every MPI call after Init, and guards what follows: whoever
    // polls (the progress thread, a waiting Receive, a Send posting its own
    // message) holds it.
    std::mutex mpi;
    bool finished = false;  // MPI finalised (or given up on): nobody polls again
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm raw_comm = MPI_COMM_NULL;
    std::deque<Outgoing> sending;
    wire::PayloadBuffers spare_payloads;  // under `mpi`: sent payloads, for the next received ones
    std::vector<MPI_Request> heartbeat_requests;
    std::vector<uint8_t> heartbeat_frame;
    std::vector<std::deque<std::unique_ptr<Incoming>>> incoming;
    std::vector<bool> broken;  // sent a malformed frame: drained, never delivered
    Clock::time_point next_heartbeat;

    void Init();
    void Run(std::promise<void>& ready);
    bool Poll(bool run_jobs);
    bool Drive();
    bool PostSends();
    bool RunJobs();
    void Beat(Clock::time_point now);
    bool ProbeFrames();
    bool AdvanceIncoming(int source);
    bool TestSends();
    bool InFlight() const;
    void Lose(int rank, const std::string& why);
    void Shutdown();
};

void MpiTransport::State::Lose(int peer_rank, const std::string& why) {
    liveness->MarkLost(peer_rank, wire::PeerLostError(peers[peer_rank], why));
    messages->Wake();
}

void MpiTransport::State::Init() {
    // Before MPI starts: a transport refused for its options left MPI
    // initialised, and a retry with good ones was refused "MPI is already
    // initialised" (found probing from outside).
    wire::PeerLiveness::CheckOptions(options.liveness);
    CheckMpiOptions(options);
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized)
        throw Error(ErrorKind::InvalidArgument,
                    "MPI is already initialised: MpiTransport must own MPI (it serialises every MPI call)");
    int provided = 0;
    // SERIALIZED: any thread may call MPI, one at a time (the `mpi` lock).
    Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED)
        throw Error(ErrorKind::Unsupported, "MPI provides thread level " + std::to_string(provided) + ", SERIALIZED is needed");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    Check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    Check(MPI_Comm_dup(comm, &raw_comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(raw_comm, MPI_ERRORS_RETURN);
    Check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    Check(MPI_Comm_size(comm, &size), "MPI_Comm_size");

    // Every rank's host name and pid, for errors that name a rank.
    struct Identity {
        char name[MPI_MAX_PROCESSOR_NAME];
        int pid;
    } mine{}, *all = nullptr;
    int len = 0;
    MPI_Get_processor_name(mine.name, &len);
    mine.pid = ::getpid();
    std::vector<Identity> table(static_cast<size_t>(size));
    all = table.data();
    Check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, comm), "MPI_Allgather of host names");
    for (int r = 0; r < size; ++r) {
        table[r].name[MPI_MAX_PROCESSOR_NAME - 1] = 0;
        peers.push_back(PeerInfo{r, table[r].name, table[r].pid});
    }
    liveness = std::make_unique<wire::PeerLiveness>(rank, peers, options.liveness);
    messages = std::make_unique<wire::MessageQueue>(*liveness);
    heartbeat_requests.assign(static_cast<size_t>(size), MPI_REQUEST_NULL);
    heartbeat_frame = wire::EncodeFrame(Message{.type = wire::kHeartbeatType});
    incoming.resize(static_cast<size_t>(size));
    broken.assign(static_cast<size_t>(size), false);
    next_heartbeat = Clock::now();
}

bool MpiTransport::State::PostSends() {
    std::deque<Outgoing> batch;
    {
        std::lock_guard lock(mutex);
        batch.swap(queue);
    }
    for (Outgoing& out : batch) {
        MPI_Request r;
        int rc = MPI_Isend(out.frame.data(), static_cast<int>(out.frame.size()), MPI_BYTE, out.destination, kFrameTag, comm, &r);
        if (rc == MPI_SUCCESS) out.requests.push_back(r);
        for (auto& p : out.payloads) {
            if (rc != MPI_SUCCESS) break;
            rc = MPI_Isend(p.data(), static_cast<int>(p.size()), MPI_BYTE, out.destination, kPayloadTag, comm, &r);
            if (rc == MPI_SUCCESS) out.requests.push_back(r);
        }
        if (rc != MPI_SUCCESS) Lose(out.destination, "MPI_Isend to it failed: " + MpiError(rc));
        sending.push_back(std::move(out));
    }
    return !batch.empty();
}

bool MpiTransport::State::RunJobs() {
    std::deque<Job> batch;
    {
        std::lock_guard lock(mutex);
        batch.swap(jobs);
    }
    for (Job& job : batch) {
        try {
            job.work(raw_comm);
            job.done.set_value();
        } catch (const Error&) {
            job.done.set_exception(std::current_exception());
        } catch (const std::exception& e) {
            job.done.set_exception(std::make_exception_ptr(Error(ErrorKind::Internal, std::string("MPI job: ") + e.what())));
        }
    }
    return !batch.empty();
}

void MpiTransport::State::Beat(Clock::time_point now) {
    if (now < next_heartbeat) return;
    next_heartbeat = now + options.liveness.heartbeat_interval;
    for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        MPI_Request& req = heartbeat_requests[r];
        if (req != MPI_REQUEST_NULL) {
            int done = 0;
            // A beat still in flight (a stopped peer's full socket): do not pile more up.
            if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) continue;
        }
        const int rc = MPI_Isend(heartbeat_frame.data(), static_cast<int>(heartbeat_frame.size()), MPI_BYTE, r, kFrameTag,
                                 comm, &req);
        if (rc != MPI_SUCCESS) {
            req = MPI_REQUEST_NULL;
            Lose(r, "MPI_Isend of a heartbeat failed: " + MpiError(rc));
        }
    }
}

bool MpiTransport::State::ProbeFrames() {
    bool any = false;
    for (;;) {
        int flag = 0;
        MPI_Message handle;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, kFrameTag, comm, &flag, &handle, &status) != MPI_SUCCESS || !flag) break;
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        const int source = status.MPI_SOURCE;
        auto in = std::make_unique<Incoming>();
        // A frame longer than any valid one is received truncated (and reported), never allocated in full.
        in->truncated = static_cast<size_t>(count) > wire::kMaxFrameBytes;
        in->frame.resize(in->truncated ? wire::kMaxFrameBytes : static_cast<size_t>(count));
        if (MPI_Imrecv(in->frame.data(), static_cast<int>(in->frame.size()), MPI_BYTE, &handle, &in->frame_request) !=
            MPI_SUCCESS)
            in->frame_request = MPI_REQUEST_NULL;
        liveness->Seen(source);
        incoming[source].push_back(std::move(in));
        any = true;
    }
    return any;
}

bool MpiTransport::State::AdvanceIncoming(int source) {
    auto& queue_of = incoming[source];
    bool any = false;
    // Frames in order: payload receives must be posted in frame order.
    for (auto& in : queue_of) {
        if (in->frame_done) continue;
        int done = 1;
        MPI_Status status;
        const int rc = in->frame_request == MPI_REQUEST_NULL ? MPI_ERR_REQUEST : MPI_Test(&in->frame_request, &done, &status);
        if (rc == MPI_SUCCESS && !done) break;
        in->frame_done = true;
        any = true;
        if (broken[source]) continue;  // drained, dropped
        try {
            if (rc != MPI_SUCCESS || in->truncated)
                throw Error(ErrorKind::ProtocolError, "malformed frame from rank " + std::to_string(source) + ": " +
                                                          (in->truncated ? "longer than any valid frame" : MpiError(rc)));
            Message m = wire::DecodeFrame(source, in->frame, &spare_payloads);
            for (auto& p : m.payloads) {
                MPI_Request r;
                const int prc = MPI_Irecv(p.data(), static_cast<int>(p.size()), MPI_BYTE, source, kPayloadTag, comm, &r);
                if (prc != MPI_SUCCESS)
                    throw Error(ErrorKind::IoError, "MPI_Irecv of a payload from rank " + std::to_string(source) + " failed: " +
                                                        MpiError(prc));
                in->payload_requests.push_back(r);
            }
            in->message = std::move(m);
        } catch (const Error& e) {
            in->error = e;
            broken[source] = true;  // its later payloads cannot be matched to anything: stop reading it
        }
    }
    // Deliver from the front, each once all its payloads are in.
    while (!queue_of.empty() && queue_of.front()->frame_done) {
        Incoming& in = *queue_of.front();
        if (!in.payload_requests.empty()) {
            int done = 0;
            std::vector<MPI_Status> statuses(in.payload_requests.size());
            const int rc = MPI_Testall(static_cast<int>(in.payload_requests.size()), in.payload_requests.data(), &done,
                                       statuses.data());
            const std::optional<size_t> longer = rc == MPI_SUCCESS ? std::nullopt : TruncatedPayload(rc, statuses);
            if (longer && in.message) {
                // Longer than announced: the stream is out of step, as for a shorter one.
                in.error = Error(ErrorKind::ProtocolError,
                                 "malformed message from rank " + std::to_string(source) + ": payload " +
                                     std::to_string(*longer) + " is longer than the " +
                                     std::to_string(in.message->payloads[*longer].size()) + " bytes the frame says");
                broken[source] = true;
            } else if (rc != MPI_SUCCESS) {
                Lose(source, "receiving a payload failed: " + MpiError(rc));
                in.message.reset();
            } else if (!done) {
                break;
            } else {
                for (size_t i = 0; i < statuses.size() && in.message; ++i) {
                    int got = 0;
                    MPI_Get_count(&statuses[i], MPI_BYTE, &got);
                    if (static_cast<size_t>(got) != in.message->payloads[i].size()) {
                        // Shorter than announced: the stream is out of step.
                        in.error = Error(ErrorKind::ProtocolError,
                                         "malformed message from rank " + std::to_string(source) + ": payload " +
                                             std::to_string(i) + " is " + std::to_string(got) + " bytes, the frame says " +
                                             std::to_string(in.message->payloads[i].size()));
                        broken[source] = true;
                    }
                }
            }
        }
        if (in.error) {
            messages->PushError(source, *in.error);
        } else if (in.message && in.message->type == wire::kLeavingType) {
            messages->PushLeft(source);
        } else if (in.message && in.message->type != wire::kHeartbeatType) {
            liveness->Seen(source);
            messages->Push(std::move(*in.message));
        }
        queue_of.pop_front();
        any = true;
    }
    return any;
}

bool MpiTransport::State::TestSends() {
    bool any = false;
    for (auto it = sending.begin(); it != sending.end();) {
        int done = 0;
        const int rc = MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) Lose(it->destination, "sending to it failed: " + MpiError(rc));
        if (done || rc != MPI_SUCCESS) {
            if (done)
                for (auto& p : it->payloads) spare_payloads.Keep(std::move(p));
            it = sending.erase(it);
            any = true;
        } else {
            ++it;
        }
    }
    return any;
}

bool MpiTransport::State::InFlight() const {
    if (!sending.empty()) return true;
    for (const auto& q : incoming)
        if (!q.empty()) return true;
    return false;
}

bool MpiTransport::State::Poll(bool run_jobs) {
    bool any = PostSends();
    if (run_jobs) any |= RunJobs();
    const auto now = Clock::now();
    Beat(now);
    any |= ProbeFrames();
    for (int s = 0; s < size; ++s) any |= AdvanceIncoming(s);
    any |= TestSends();
    if (liveness->Evaluate(Clock::now())) messages->Wake();
    return any;
}

// One poll by a thread that is not the progress thread, unless someone
// else is polling (then that poll serves it too).
bool MpiTransport::State::Drive() {
    std::unique_lock lock(mpi, std::try_to_lock);
    if (!lock || finished) return false;
    Poll(false);
    return true;
}

void MpiTransport::State::Run(std::promise<void>& ready) {
    try {
        Init();
    } catch (const Error&) {
        ready.set_exception(std::current_exception());
        return;
    }
    ready.set_value();
    // Its short sleeps end when asked, not up to 50 us later (the default slack).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    pthread_setname_np(pthread_self(), "spyre-mpi");  // top -H, perf, the idle test
    auto last_work = Clock::now();
    for (;;) {
        bool queued = false;
        {
            std::lock_guard lock(mutex);
            if (stop && queue.empty() && jobs.empty()) break;
            queued = !queue.empty() || !jobs.empty();
        }
        // Work handed to it is its own (jobs run only here); otherwise it
        // polls only while no Receive does: a waiting thread polls for its
        // own message, and a second poller would only take cores from it.
        bool worked = false, in_flight = false;
        {
            std::unique_lock lock(mpi, std::defer_lock);
            if (queued)
                lock.lock();
            else if (drivers.load(std::memory_order_acquire) == 0)
                lock.try_lock();
            if (lock) {
                worked = Poll(true);
                in_flight = InFlight();
            }
        }
        const auto now = Clock::now();
        if (worked) {
            last_work = now;
            continue;
        }
        // A transfer under way that nobody else polls for (MPI progresses
        // only inside calls): poll on, for at most 20 ms without progress.
        if (in_flight && drivers.load(std::memory_order_acquire) == 0 && now - last_work < std::chrono::milliseconds(20)) {
            if (options.busy_poll.count() > 0)
                std::this_thread::sleep_for(options.busy_poll);
            else
                std::this_thread::yield();
            continue;
        }
        wake.SleepUnless(
            [&] {
                std::lock_guard lock(mutex);
                return stop || !queue.empty() || !jobs.empty();
            },
            sleepers.load(std::memory_order_acquire) > 0 &&
                    now - Clock::time_point(Clock::duration(slept_at.load(std::memory_order_acquire))) < kFastPollFor
                ? options.idle_sleep
                : std::max<std::chrono::microseconds>(options.idle_sleep, kIdlePoll));
    }
    std::lock_guard lock(mpi);
    Shutdown();
    finished = true;
}

void MpiTransport::State::Shutdown() {
    const auto bound = options.finalize_timeout;
    auto lost_peer = [&]() -> std::optional<Error> { return liveness->AnyLost(); };
    // Tell every peer still here that nothing more comes from this rank, after
    // all it sent: one waiting for it (a serving rank for its controller)
    // ends at once, not at this barrier's timeout.
    {
        const std::vector<uint8_t> leaving = wire::EncodeFrame(Message{.type = wire::kLeavingType});
        std::lock_guard lock(mutex);
        for (int r = 0; r < size; ++r)
            if (r != rank && !liveness->Lost(r)) queue.push_back(Outgoing{r, leaving, {}, {}});
    }
    PostSends();
    // Flush what was sent; the peers keep hearing our heartbeats meanwhile.
    auto deadline = Clock::now() + bound;
    const auto pause = std::min<std::chrono::microseconds>(options.idle_sleep, std::chrono::milliseconds(1));
    while (!sending.empty() && !lost_peer() && Clock::now() < deadline) {
        if (!Poll(true)) std::this_thread::sleep_for(pause);
    }
    bool met = false;
    if (!lost_peer() && sending.empty()) {
        // Everyone arrives before anyone finalises; a peer that never does is lost, not waited for.
        MPI_Request barrier;
        if (MPI_Ibarrier(comm, &barrier) == MPI_SUCCESS) {
            const auto barrier_start = Clock::now();
            deadline = barrier_start + bound;
            while (!lost_peer()) {
                int done = 0;
                if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
                if (done) {
                    met = true;
                    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - barrier_start);
                    SPYRE_LOG_DEBUG("MPI transport, rank %d: every rank at the final barrier after %lld ms", rank,
                                    static_cast<long long>(waited.count()));
                    break;
                }
                if (Clock::now() >= deadline) break;
                if (!Poll(true)) std::this_thread::sleep_for(pause);
            }
        }
    }
    messages->Close(Error(ErrorKind::DeviceLost, "the MPI transport of rank " + std::to_string(rank) + " has shut down"));
    if (!met) {
        // Requests may still be posted on these buffers, and MPI is never
        // finalised to cancel them: leak them rather than free memory MPI
        // (or a peer's single-copy transfer) may still touch.
        new std::deque<Outgoing>(std::move(sending));
        new std::vector<std::deque<std::unique_ptr<Incoming>>>(std::move(incoming));
        new std::vector<uint8_t>(std::move(heartbeat_frame));
        const auto why = lost_peer();
        SPYRE_LOG_ERROR("MPI transport, rank %d: MPI_Finalize skipped (it would wait for a lost rank): %s", rank,
                        why ? why->what() : "not every rank reached the final barrier within the finalize timeout");
        return;
    }
    for (auto& req : heartbeat_requests)
        if (req != MPI_REQUEST_NULL) MPI_Wait(&req, MPI_STATUS_IGNORE);  // eager beats to live peers: complete
    MPI_Comm_free(&raw_comm);
    MPI_Comm_free(&comm);
    MPI_Finalize();
}

MpiTransport::MpiTransport(MpiTransportOptions options) : state_(std::make_unique<State>()) {
    state_->options = options;
    std::promise<void> ready;
    std::future<void> started = ready.get_future();
    state_->thread = std::thread([this, &ready] { state_->Run(ready); });
    try {
        started.get();
    } catch (...) {
        state_->thread.join();
        throw;
    }
}

MpiTransport::~MpiTransport() {
    {
        std::lock_guard lock(state_->mutex);
        state_->stop = true;
    }
    state_->wake.Notify();
    state_->thread.join();
}

int MpiTransport::rank() const { return state_->rank; }
int MpiTransport::size() const { return state_->size; }
const PeerInfo& MpiTransport::peer(int rank) const { return state_->liveness->peer(rank); }
const LivenessOptions& MpiTransport::liveness() const { return state_->options.liveness; }

void MpiTransport::Send(int destination, Message message) {
    state_->liveness->peer(destination);  // validates the rank
    if (auto lost = state_->liveness->Lost(destination)) throw *lost;
    Outgoing out{destination, wire::EncodeUserFrame(message), std::move(message.payloads), {}};
    {
        std::lock_guard lock(state_->mutex);
        if (state_->stop) throw Error(ErrorKind::InvalidArgument, "Send on an MPI transport that is shutting down");
        state_->queue.push_back(std::move(out));
    }
    // Posted by this thread when nobody polls (no hand-over); else the
    // poller posts it (a Receive's poll, or the progress thread, woken).
    {
        std::unique_lock lock(state_->mpi, std::try_to_lock);
        if (lock && !state_->finished) {
            state_->PostSends();
            return;
        }
    }
    state_->wake.Notify();
}

Message MpiTransport::Receive(std::chrono::milliseconds timeout, int source) {
    State& s = *state_;
    const auto start = Clock::now();
    const auto deadline = start + timeout;
    // Poll MPI for it here, for idle_spin: the message reaches this thread
    // with no hand-over, and no thread yields its core to wait (a yield on
    // a loaded host hands the core to whoever else runs, for a whole slice).
    if (s.options.idle_spin.count() > 0) {
        const CountedIn driving(s.drivers);
        const auto spin_end = std::min(deadline, start + s.options.idle_spin);
        for (;;) {
            if (auto m = s.messages->PopUntil(start, source)) return std::move(*m);
            s.Drive();
            if (Clock::now() >= spin_end) break;
            if (s.options.busy_poll.count() > 0)
                std::this_thread::sleep_for(s.options.busy_poll);
            else
                CpuRelax();
        }
    }
    // Then sleep on the message queue (the progress thread polls every
    // idle_sleep, told so now), polling again every tick.
    s.slept_at.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    const CountedIn asleep(s.sleepers);
    s.wake.Notify();
    for (;;) {
        if (auto m = s.messages->PopUntil(std::min(deadline, Clock::now() + kDriveTick), source)) return std::move(*m);
        if (Clock::now() >= deadline) throw s.messages->TimeoutError(timeout, source);
        s.Drive();
    }
}

std::optional<Error> MpiTransport::PeerError(int rank) const {
    state_->liveness->peer(rank);
    return state_->liveness->Lost(rank);
}

void MpiTransport::RunOnMpiThread(const std::function<void(MPI_Comm)>& work) {
    std::future<void> done;
    {
        std::lock_guard lock(state_->mutex);
        Job job{work, {}};
        done = job.done.get_future();
        state_->jobs.push_back(std::move(job));
    }
    state_->wake.Notify();
    done.get();
}

}  // namespace spyre::host
