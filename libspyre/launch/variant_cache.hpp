// SPDX-License-Identifier: Apache-2.0
// Internal: the re-specialised programs LaunchTiled needs for one loaded
// Operation (remainder tiles, actual strides, accumulating reduction steps),
// built and uploaded on first use and kept until the Operation goes (the
// plan, or the last copy of one of its Operations), so repeating a tiled
// launch of the same shapes uploads nothing.
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "device/device_core.hpp"
#include "spyre/launch/tiling.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/plan/operation.hpp"

namespace spyre::detail {

// One variant on device: its program, and its own correction program and
// correction input table (the correction patches this program, not the
// compiled one).
struct VariantProgram {
    DeviceBuffer program;
    DeviceBuffer correction;
    DeviceBuffer table;
    uint64_t program_size = 0;
    uint64_t correction_size = 0;
};

struct LoadedOperation;

class VariantCache {
public:
    // The program of `variant` for a launch of the loaded `op` over `tensors`
    // (specialised from its compute and correction as loaded); on a miss
    // it is specialised and copied to device before this returns (not in
    // stream order: another stream may use it at once). The reference stays
    // valid as long as the cache.
    const VariantProgram& Get(DeviceCore& core, const LoadedOperation& op, std::span<const TiledTensor> tensors,
                              const TileVariant& variant);
    size_t size() const;

private:
    // What specialisation writes into the binary: each slot's tile shape,
    // its strides on dims longer than 1, and whether matmuls accumulate.
    struct Key {
        std::vector<std::vector<int64_t>> shapes;
        std::vector<std::vector<int64_t>> strides;
        bool accumulate = false;
        auto operator<=>(const Key&) const = default;
    };
    mutable std::mutex mu_;
    std::map<Key, std::unique_ptr<const VariantProgram>> programs_;
};

// The tiling of an Operation over tensors of given shapes, strides and
// dtypes, planned once (PlanTiling is a function of them and the compute)
// and kept until the Operation goes, like its variants: a repeated
// LaunchTiled of the same shapes plans nothing. Unbounded, as VariantCache.
class TilingPlanCache {
public:
    // The plan for `tensors`; on a miss `plan()` makes it (an Error it
    // throws is passed on and nothing is kept).
    template <typename Plan>
    std::shared_ptr<const TilingPlan> Get(std::span<const TiledTensor> tensors, Plan&& plan) {
        std::vector<TiledTensor> key(tensors.begin(), tensors.end());
        {
            std::lock_guard lock(mu_);
            if (auto it = plans_.find(key); it != plans_.end()) return it->second;
        }
        auto made = std::make_shared<const TilingPlan>(plan());  // outside the lock: planning takes a while
        std::lock_guard lock(mu_);
        return plans_.try_emplace(std::move(key), std::move(made)).first->second;
    }
    size_t size() const;

private:
    mutable std::mutex mu_;
    std::map<std::vector<TiledTensor>, std::shared_ptr<const TilingPlan>> plans_;
};

// What the runtime keeps beside a loaded Operation (Operation::loaded_).
struct LoadedOperation {
    // The plan's device memory (binaries, tables): a copy of the Operation
    // that outlives its plan still launches.
    std::shared_ptr<const void> plan_memory;
    // The compute and correction as loaded: the program on the device was
    // built for these. Launches check tensors against them and specialise
    // variants from them, so an edited copy of the Operation (smaller
    // tensors, another binary) can neither run the program past its
    // tensors nor put its variants in the cache the other copies share.
    SpyreCompute compute;
    std::optional<CorrectionMetadata> correction;
    VariantCache variants;
    TilingPlanCache tilings;
};

}  // namespace spyre::detail
