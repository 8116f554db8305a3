// SPDX-License-Identifier: Apache-2.0
#include "run_while.hpp"

#include <pthread.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "heartbeat_watch.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/error.hpp"

namespace spyre::driver {

namespace {

// What the work's thread and its caller share (the thread may outlive the caller).
struct Answer {
    std::atomic<uint32_t> done{0};
    std::exception_ptr error;  // written before `done`
};

}  // namespace

bool RunWhile(std::function<void()> work, const std::function<bool()>& keep_waiting, std::chrono::milliseconds look) {
    const auto answer = std::make_shared<Answer>();
    std::thread thread;
    try {
        thread = std::thread([answer, work] {
            try {
                work();
            } catch (...) {
                answer->error = std::current_exception();
            }
            answer->done.store(1, std::memory_order_release);
            FutexWake(&answer->done, FutexScope::Private);
        });
    } catch (const std::system_error&) {
        work();
        return true;
    }
    while (answer->done.load(std::memory_order_acquire) == 0) {
        FutexWait(&answer->done, 0, look, FutexScope::Private);
        if (answer->done.load(std::memory_order_acquire) == 0 && !keep_waiting()) {
            thread.detach();
            return false;
        }
    }
    thread.join();
    if (answer->error) std::rethrow_exception(answer->error);
    return true;
}

namespace run_while_detail {

std::chrono::milliseconds Bound() { return HeartbeatWatch::BoundFromEnvironment(); }

namespace {
struct Unanswered {
    std::mutex mu;
    std::map<std::string, int> calls;  // tree -> calls given up on and still running
};
// Never destroyed: a call given up on may end on its thread while the
// process exits.
Unanswered& unanswered() {
    static auto* u = new Unanswered;
    return *u;
}
std::once_flag fork_handlers;

// A forked child has none of the threads that wait for those answers, so
// nothing would ever clear its marks: it starts with none. The lock is
// held across the fork, so the child's copy of the map is whole.
void ForgetUnansweredInChild() {
    std::call_once(fork_handlers, [] {
        pthread_atfork([] { unanswered().mu.lock(); }, [] { unanswered().mu.unlock(); },
                       [] {
                           unanswered().mu.unlock();
                           unanswered().calls.clear();
                       });
    });
}
}  // namespace

Pending::~Pending() {
    if (!abandoned_) return;
    Unanswered& u = unanswered();
    std::lock_guard lock(u.mu);
    if (--u.calls[tree_] == 0) u.calls.erase(tree_);
}

void Pending::Abandon() {
    ForgetUnansweredInChild();  // registered with the first mark
    Unanswered& u = unanswered();
    std::lock_guard lock(u.mu);
    abandoned_ = true;
    ++u.calls[tree_];
}

void Pending::ThrowIfUnanswered(const std::string& tree, const std::string& what, std::chrono::milliseconds bound) {
    Unanswered& u = unanswered();
    std::lock_guard lock(u.mu);
    if (u.calls.count(tree))
        throw Error(ErrorKind::DeviceLost, what + " was not asked: an earlier request to " + tree +
                                               " got no answer within " + std::to_string(bound.count()) +
                                               " ms and still has none (SPYRE_HEARTBEAT_TIMEOUT_MS; is spyre-mockdev "
                                               "stopped or hung?)");
}

void ThrowNotAnswering(const std::string& what, std::chrono::milliseconds bound) {
    throw Error(ErrorKind::DeviceLost, what + " did not answer within " + std::to_string(bound.count()) +
                                           " ms (SPYRE_HEARTBEAT_TIMEOUT_MS; is spyre-mockdev stopped or hung?)");
}

}  // namespace run_while_detail

}  // namespace spyre::driver
