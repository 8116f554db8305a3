// SPDX-License-Identifier: Apache-2.0
#include "host/transport/peer_liveness.hpp"

namespace spyre::host {

std::string PeerInfo::Describe() const {
    return "rank " + std::to_string(rank) + " (host " + host_name + ", pid " + std::to_string(pid) + ")";
}

namespace wire {

namespace {
int64_t Ns(PeerLiveness::Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Error PeerLostError(const PeerInfo& peer, const std::string& why) {
    ErrorContext ctx;
    ctx.device = "rank " + std::to_string(peer.rank) + "@" + peer.host_name;
    return Error(ErrorKind::DeviceLost, peer.Describe() + " is lost: " + why, std::move(ctx));
}

void PeerLiveness::CheckOptions(const LivenessOptions& options) {
    // A zero or negative interval passed the check below and made every
    // wait re-check at once: an idle rank spun a core.
    if (options.heartbeat_interval.count() <= 0)
        throw Error(ErrorKind::InvalidArgument, "liveness: the heartbeat interval (" +
                                                    std::to_string(options.heartbeat_interval.count()) +
                                                    " ms) must be at least 1 ms");
    // Past a day the bound's nanoseconds, and twice a huge interval,
    // overflowed: an interval of 2^62 ms passed the check below, and an
    // idle rank spun a core (found probing from outside).
    if (options.silence_bound > std::chrono::hours(24))
        throw Error(ErrorKind::InvalidArgument, "liveness: the silence bound (" +
                                                    std::to_string(options.silence_bound.count()) +
                                                    " ms) must be at most a day (86400000 ms)");
    if (options.heartbeat_interval >= options.silence_bound ||
        options.silence_bound - options.heartbeat_interval <= options.heartbeat_interval)
        throw Error(ErrorKind::InvalidArgument, "liveness: the silence bound (" +
                                                    std::to_string(options.silence_bound.count()) +
                                                    " ms) must exceed two heartbeat intervals (" +
                                                    std::to_string(options.heartbeat_interval.count()) + " ms)");
}

PeerLiveness::PeerLiveness(int self, std::vector<PeerInfo> peers, LivenessOptions options)
    : self_(self), peers_(std::move(peers)), options_(options),
      last_seen_ns_(new std::atomic<int64_t>[peers_.size()]), last_evaluate_ns_(Ns(Clock::now())),
      lost_(peers_.size()), left_(peers_.size()) {
    CheckOptions(options_);
    const int64_t now = Ns(Clock::now());
    for (size_t i = 0; i < peers_.size(); ++i) last_seen_ns_[i].store(now, std::memory_order_relaxed);
}

void PeerLiveness::Seen(int rank, Clock::time_point now) {
    if (rank >= 0 && rank < size()) last_seen_ns_[rank].store(Ns(now), std::memory_order_relaxed);
}

bool PeerLiveness::Evaluate(Clock::time_point now) {
    const int64_t t = Ns(now);
    const int64_t bound = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.silence_bound).count();
    const int64_t previous = last_evaluate_ns_.exchange(t, std::memory_order_relaxed);
    if (t - previous > bound / 2) {
        // We were not running (stopped, starved): peers' silence is ours.
        for (int r = 0; r < size(); ++r) last_seen_ns_[r].store(t, std::memory_order_relaxed);
        return false;
    }
    bool newly = false;
    for (int r = 0; r < size(); ++r) {
        if (r == self_) continue;
        const int64_t silent = t - last_seen_ns_[r].load(std::memory_order_relaxed);
        if (silent <= bound) continue;
        std::lock_guard lock(mutex_);
        if (lost_[r] || left_[r]) continue;
        lost_[r] = PeerLostError(peers_[r], "silent for " + std::to_string(silent / 1000000) + " ms (liveness bound " +
                                                std::to_string(options_.silence_bound.count()) + " ms)");
        newly = true;
    }
    return newly;
}

void PeerLiveness::MarkLost(int rank, Error error) {
    if (rank < 0 || rank >= size()) return;
    std::lock_guard lock(mutex_);
    if (!lost_[rank]) lost_[rank] = std::move(error);
}

void PeerLiveness::MarkLeft(int rank) {
    if (rank < 0 || rank >= size()) return;
    ErrorContext ctx;
    ctx.device = "rank " + std::to_string(rank) + "@" + peers_[rank].host_name;
    std::lock_guard lock(mutex_);
    if (!left_[rank])
        left_[rank] = Error(ErrorKind::DeviceLost,
                            peers_[rank].Describe() + " left the run: its transport shut down, nothing more comes from it",
                            std::move(ctx));
}

std::optional<Error> PeerLiveness::Lost(int rank) const {
    if (rank < 0 || rank >= size()) return std::nullopt;
    std::lock_guard lock(mutex_);
    return lost_[rank] ? lost_[rank] : left_[rank];
}

std::optional<Error> PeerLiveness::AnyLost() const {
    std::lock_guard lock(mutex_);
    for (const auto& e : lost_)
        if (e) return e;
    return std::nullopt;
}

const PeerInfo& PeerLiveness::peer(int rank) const {
    if (rank < 0 || rank >= size())
        throw Error(ErrorKind::InvalidArgument, "rank " + std::to_string(rank) + " is out of range (the run has " +
                                                    std::to_string(size()) + " ranks)");
    return peers_[rank];
}

}  // namespace wire
}  // namespace spyre::host
