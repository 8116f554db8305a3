// SPDX-License-Identifier: Apache-2.0
// The library's process-wide tables outlive the process's exit: a thread
// still calling into libspyre while another returns from main (a Python
// daemon thread inside Host.open when the program ends) must not find them
// destroyed. Each case forks a child whose thread loops on one table while
// the main thread exits; freed memory is scribbled over (M_PERTURB), so a
// table destroyed under the thread is read as garbage: a crash.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "spyre/host/host_tensor.hpp"
#include "spyre/memory/device_handle.hpp"

namespace spyre {
namespace {

// Forks `rounds` children; each starts a thread calling `call(i)` for
// i = 0, 1, ... until the process ends, lets it run a while, and exits
// (static destructors run). Returns a description of each child that did
// not exit with status 0.
std::vector<std::string> ExitWhileAThreadCalls(const std::function<void(uint64_t)>& call, int rounds = 24) {
    std::vector<std::string> failures;
    for (int round = 0; round < rounds; ++round) {
        const pid_t child = fork();
        if (child < 0) return {"fork failed"};
        if (child == 0) {
            mallopt(M_PERTURB, 177);
            std::atomic<bool> started{false};
            std::thread([&] {
                for (uint64_t i = 0;; ++i) {
                    call(i);
                    started.store(true, std::memory_order_relaxed);
                }
            }).detach();
            while (!started.load(std::memory_order_relaxed)) std::this_thread::yield();
            std::this_thread::sleep_for(std::chrono::milliseconds(2 + round % 5));
            std::exit(0);
        }
        int status = 0;
        if (waitpid(child, &status, 0) != child) return {"waitpid failed"};
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures.push_back("round " + std::to_string(round) +
                               (WIFSIGNALED(status) ? ": signal " + std::to_string(WTERMSIG(status))
                                                    : ": exit status " + std::to_string(WEXITSTATUS(status))));
    }
    return failures;
}

TEST(ProcessExit, DeviceTreeNumbersOutliveTheExit) {
    // Every Device open numbers its device tree (DeviceId::tree).
    const auto failures = ExitWhileAThreadCalls([](uint64_t i) {
        const uint32_t n = DeviceTreeNumber("/run/spyre-exit-test/devices", uint32_t(i % 3));
        if (n == 0 || n > 3) std::abort();
    });
    EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
}

TEST(ProcessExit, WrappedHostTensorsOutliveTheExit) {
    // Storages wrapped over memory owned elsewhere register their span.
    const auto failures = ExitWhileAThreadCalls([](uint64_t i) {
        static thread_local std::vector<float> data(64);
        HostTensor t = HostTensor::Wrap(data.data() + i % 2, {8}, DType::FP32, nullptr);
        if (!t) std::abort();
    });
    EXPECT_TRUE(failures.empty()) << ::testing::PrintToString(failures);
}

}  // namespace
}  // namespace spyre
