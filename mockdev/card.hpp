// SPDX-License-Identifier: Apache-2.0
//
// One mock card: its device memory (one sparse shared-memory object), its
// compute cores, its PF and the VFs the PF has enabled through sriov_numvfs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compute_engine.hpp"
#include "function.hpp"
#include "shm_object.hpp"

namespace spyre::mockdev {

struct CardParams {
    unsigned index = 0;
    uint64_t mem_size = 0;
    std::string shm_prefix;
    std::chrono::microseconds poll{50};
    unsigned cores = 0;            // compute workers; 0 = ComputeEngine::DefaultWorkers()
    uint32_t watchdog_ms = 10000;  // every function's WATCHDOG_MS
};

// Where VF `vf` (1-based) of `num_vfs` finds its memory in the card memory.
// The PF sees the whole card memory; with n VFs enabled the card memory is
// cut into n + 1 equal slices, rounded down to 2 MiB, and VF i owns slice i
// (slice 0 is left to the PF). A first split, to be refined by the memory
// work; the PF's view overlaps its VFs' as a privileged function's would.
struct MemorySlice {
    uint64_t base;
    uint64_t size;
};
MemorySlice VfMemorySlice(uint64_t card_mem_size, unsigned num_vfs, unsigned vf);
constexpr uint64_t kMemSliceAlign = 2ull << 20;

class Card {
public:
    // Creates the card memory and the PF (throws std::system_error).
    explicit Card(const CardParams& params);
    ~Card();

    Card(const Card&) = delete;
    Card& operator=(const Card&) = delete;

    void Start();     // engines of all functions; VFs enabled later start at once
    void Shutdown();  // every function: engine stopped, device_state GONE

    unsigned index() const { return params_.index; }
    unsigned num_vfs() const;
    // fn 0 = PF, i = VF i; null if that function does not exist (now).
    std::shared_ptr<Function> FindFunction(unsigned fn) const;
    std::vector<std::shared_ptr<Function>> Functions() const;  // PF first

    // sriov_numvfs write, with Linux's rules: 0 or -errno.
    int SetNumVfs(unsigned num_vfs);

private:
    int DisableVfs();

    FunctionParams FunctionAt(unsigned index, MemorySlice slice) const;

    const CardParams params_;
    ShmObject memory_;
    ComputeEngine compute_;  // outlives the functions that use it
    mutable std::mutex mutex_;  // guards vfs_ and started_
    std::shared_ptr<Function> pf_;
    std::vector<std::shared_ptr<Function>> vfs_;
    bool started_ = false;
};

}  // namespace spyre::mockdev
