// SPDX-License-Identifier: Apache-2.0
// HandleTable::Retire against calls of other threads: it closes the handle
// to new calls at once and returns only once the calls in flight left (it
// sleeps on the slot's eventcount meanwhile).
#include "orchestration/handle_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>

#include "spyre/error.hpp"

namespace spyre::orchestration {
namespace {

TEST(HandleTable, RetireWaitsForTheCallsOfOtherThreads) {
    HandleTable& table = HandleTable::Instance();
    int dummy = 0;  // never dereferenced: the table only hands the pointer back
    auto* state = reinterpret_cast<RuntimeState*>(&dummy);
    ::Runtime* handle = table.Register(state, /*c_owned=*/true);

    std::optional<HandleTable::Call> call(table.Enter(handle, "test"));
    std::atomic<bool> retired{false};
    RuntimeState* returned = nullptr;
    std::thread destroyer([&] {
        returned = table.Retire(handle, /*from_c=*/true);
        retired.store(true);
    });
    // Once the handle refuses new calls, Retire is past closing it and waits.
    for (;;) {
        try {
            table.Enter(handle, "probe");
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            break;
        }
        std::this_thread::yield();
    }
    EXPECT_FALSE(retired.load()) << "Retire returned while another thread's call was in flight";
    call.reset();  // the call leaves: Retire is woken and frees the slot
    destroyer.join();
    EXPECT_TRUE(retired.load());
    EXPECT_EQ(returned, state);
    EXPECT_THROW(table.Enter(handle, "after"), Error);
}

}  // namespace
}  // namespace spyre::orchestration
