// SPDX-License-Identifier: Apache-2.0
// The ChipExecutor of a device this process opened: one seed-004
// orchestration runtime on it, device kernels uploaded once, and device
// copies of host tensor ranges kept between calls (keyed by the exact
// range) so that a range the scheduler says is current is not uploaded again.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "spyre/device/device.hpp"
#include "spyre/device/host.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/orchestration.hpp"

namespace spyre::host {

class LocalChipExecutor final : public ChipExecutor {
public:
    LocalChipExecutor(Device device, const DistributedConfig& config, std::shared_ptr<const ChipRegistry> registry);
    ~LocalChipExecutor() override;

    std::string Describe() const override;
    void LoadKernel(int32_t kernel_id, const std::vector<uint8_t>& program) override;
    void LoadPlan(const std::string& name, const CompilerOutput& plan) override;
    ChipCallStats Run(const ChipCall& call) override;

    // Bytes of device copies kept between calls at most: this, or a quarter
    // of the function's memory when that is less.
    static constexpr uint64_t kCacheBytes = 256ull << 20;

private:
    using Key = std::tuple<uint64_t, uint64_t, uint64_t>;  // storage, offset, bytes
    struct Copy {
        DeviceBuffer buffer;
        void* mapped = nullptr;
        std::weak_ptr<HostTensor::Storage> storage;
        uint64_t last_use = 0;
    };
    // The device copy of `t`; when the device is out of memory, copies no
    // key of `keep` names are dropped and the allocation tried once more.
    Copy& CopyFor(const HostTensor& t, const std::vector<Key>& keep);
    void RunPlan(const ExecutionPlan& plan, const ChipCall& call, const std::vector<Copy*>& copies);
    void Evict(const std::vector<Key>& keep);

    Device device_;
    std::optional<Orchestrator> orch_;
    std::optional<SpyreStream> plan_stream_;  // the device's default stream
    std::map<std::string, std::shared_ptr<const ExecutionPlan>> plans_;
    std::shared_ptr<const ChipRegistry> registry_;
    std::vector<DeviceBuffer> kernels_;
    std::map<Key, Copy> copies_;
    uint64_t copy_bytes_ = 0, use_clock_ = 0, cache_limit_ = kCacheBytes;
};

// Opens config.device_ids of `host` (checked first: InvalidArgument or
// NotFound naming the field and value) as executors, in that order.
std::vector<std::unique_ptr<ChipExecutor>> OpenLocalChipExecutors(Host& host, const DistributedConfig& config,
                                                                  const std::shared_ptr<const ChipRegistry>& registry);

}  // namespace spyre::host
