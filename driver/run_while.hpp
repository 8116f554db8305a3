// SPDX-License-Identifier: Apache-2.0
//
// Work that may wait for ever on a device model that stopped (a FUSE request
// its daemon never reads: SIGSTOP, hung), run so that its caller waits only
// while it has a reason to: the work runs on a thread of its own, and the
// caller looks at `keep_waiting` once per `look` until the work is done.
// When it stops waiting first, the thread is left to the work's answer, or
// to the process's exit (a FUSE request the daemon has not read dies with
// it). So the work must own everything it touches, and what it returns is
// destroyed on that thread when nobody waits for it any more.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace spyre::driver {

// True once `work` ran (rethrowing what it threw); false when `keep_waiting`
// said no first (it is asked only while the work runs: a caller that must
// not start the work asks before). With no thread to spare, `work` runs on
// the caller's thread.
bool RunWhile(std::function<void()> work, const std::function<bool()>& keep_waiting, std::chrono::milliseconds look);

// RunWhile for work with a result: nullopt when given up.
template <typename T, typename Work>
std::optional<T> CallWhile(Work work, const std::function<bool()>& keep_waiting, std::chrono::milliseconds look) {
    const auto result = std::make_shared<std::optional<T>>();
    if (!RunWhile([result, work = std::move(work)] { result->emplace(work()); }, keep_waiting, look)) return std::nullopt;
    return std::move(*result);
}

// CallWhile bounded by time: the work of reaching a device model before the
// driver knows its process or heartbeat (discovery, opening a node). Waits
// up to SPYRE_HEARTBEAT_TIMEOUT_MS (the bound after which a still heartbeat
// counts as lost; 0: for ever, on this thread), then throws DeviceLost
// naming `what` ("the device tree at /mnt/spyre"). While a call given up
// on is still unanswered, later calls on the same `tree` (its devices
// directory) fail at once: a listing of 30 functions' status files asks a
// stopped daemon once, not 30 times.
template <typename T, typename Work>
T CallWithinHeartbeatBound(Work work, const std::string& what, const std::string& tree);

namespace run_while_detail {
std::chrono::milliseconds Bound();  // SPYRE_HEARTBEAT_TIMEOUT_MS (InvalidArgument when malformed)
// A call on `tree`: Abandon() counts it unanswered until it is destroyed,
// which happens on the work's thread once the work is done.
class Pending {
public:
    explicit Pending(std::string tree) : tree_(std::move(tree)) {}
    ~Pending();
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    void Abandon();
    // DeviceLost naming `what` when a call on `tree` is unanswered.
    static void ThrowIfUnanswered(const std::string& tree, const std::string& what, std::chrono::milliseconds bound);

private:
    std::string tree_;
    bool abandoned_ = false;
};
[[noreturn]] void ThrowNotAnswering(const std::string& what, std::chrono::milliseconds bound);
}  // namespace run_while_detail

template <typename T, typename Work>
T CallWithinHeartbeatBound(Work work, const std::string& what, const std::string& tree) {
    const std::chrono::milliseconds bound = run_while_detail::Bound();
    if (bound.count() == 0) return work();
    run_while_detail::Pending::ThrowIfUnanswered(tree, what, bound);
    auto pending = std::make_shared<run_while_detail::Pending>(tree);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    std::optional<T> result = CallWhile<T>(
        [work = std::move(work), pending] { return work(); },
        [deadline] { return std::chrono::steady_clock::now() < deadline; },
        std::min<std::chrono::milliseconds>(bound, std::chrono::milliseconds(100)));
    if (!result) {
        pending->Abandon();
        run_while_detail::ThrowNotAnswering(what, bound);
    }
    return std::move(*result);
}

}  // namespace spyre::driver
