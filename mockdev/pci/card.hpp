// SPDX-License-Identifier: Apache-2.0
//
// One mock card: its device memory (a shared-memory object per function), its
// compute cores, its card-wide policy, its PF and the VFs enabled through
// sriov_numvfs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "pci/card_memory.hpp"
#include "pci/card_policy.hpp"
#include "execution/card_cores.hpp"
#include "pci/function.hpp"
#include "pci/writer_first_mutex.hpp"

namespace spyre::mockdev {

struct CardParams {
    unsigned index = 0;
    uint64_t mem_size = 0;
    std::string shm_prefix;  // objects go in its ShmDirectory, which must exist
    std::chrono::microseconds poll{50};
    unsigned cores = 0;            // compute workers; 0 = CardCores::DefaultWorkers()
    uint32_t watchdog_ms = 10000;  // every function's WATCHDOG_MS
};

class Card {
public:
    // Creates the card memory and the PF (throws std::system_error).
    explicit Card(const CardParams& params);
    ~Card();

    Card(const Card&) = delete;
    Card& operator=(const Card&) = delete;

    // Servers of all functions (VFs enabled later start at once) and the
    // card's heartbeat thread.
    void Start();
    void Shutdown();  // heartbeat stopped; every function: server stopped, device_state GONE

    unsigned index() const { return params_.index; }
    unsigned num_vfs() const;
    // fn 0 = PF, i = VF i; null if that function does not exist (now).
    std::shared_ptr<Function> FindFunction(unsigned fn) const;
    std::vector<std::shared_ptr<Function>> Functions() const;  // PF first

    // Who holds a function changes only under ChangingHolder (exclusive). A
    // file access that checks holders and then acts keeps KeepingHolders
    // (shared) across both, so what it checked still holds when it acts: a
    // write let through while a function was unheld cannot land after the
    // function's next owner got its fresh memory. One lock for the card, as
    // a check may look at several functions (the PF's holder, the VFs whose
    // slices the PF's resource2 reaches).
    std::shared_lock<WriterFirstMutex> KeepingHolders() const { return std::shared_lock(holders_); }
    std::unique_lock<WriterFirstMutex> ChangingHolder() { return std::unique_lock(holders_); }

    // sriov_numvfs write, with Linux's rules: 0 or -errno.
    int SetNumVfs(unsigned num_vfs);
    // The card's cores (for tests: their wake-up counters).
    const CardCores& compute() const { return compute_; }

private:
    int DisableVfs();

    FunctionParams FunctionAt(unsigned index, MemorySlice slice) const;
    // The heartbeat thread: beats every function every
    // SPYRE_HEARTBEAT_PERIOD_MS, apart from lanes and cores, which a long
    // task keeps busy for seconds.
    void BeatUntilStopped(std::stop_token stop);

    const CardParams params_;
    CardMemory memory_;
    CardPolicy policy_;
    CardCores compute_;  // outlives the functions that use it
    // Taken before any of the functions' own locks; a waiting open or
    // release goes before later readers (writer_first_mutex.hpp).
    mutable WriterFirstMutex holders_;
    mutable std::mutex mutex_;  // guards vfs_ and started_
    std::shared_ptr<Function> pf_;
    std::vector<std::shared_ptr<Function>> vfs_;
    bool started_ = false;
    std::mutex beat_mutex_;
    std::condition_variable_any beat_wake_;
    std::jthread heartbeat_;  // last: stopped and joined before the functions go
};

}  // namespace spyre::mockdev
