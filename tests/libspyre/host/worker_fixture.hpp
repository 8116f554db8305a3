// SPDX-License-Identifier: Apache-2.0
// What the level-3 Worker's tests share: an embedded spyre-mockdev of
// cards x VFs, its VFs as devices, and a fixture over 2 cards x 2 VFs with
// seed 003's chip functions and its verify SubWorker registered.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "l3_chip_functions.hpp"
#include "mock_fixture.hpp"
#include "spyre/host.hpp"

namespace spyre::l3 {

inline HostOptions Mock(uint16_t cards, uint16_t vfs) { return HostOptions::EmbeddedMock(cards, vfs, "2G"); }

// The VFs of `host`: the devices the Worker uses.
inline std::vector<int> Vfs(const Host& host) {
    std::vector<int> ids;
    for (const auto& f : host.functions())
        if (f.kind == driver::FunctionKind::VF) ids.push_back(int(f.index));
    return ids;
}

class WorkerTest : public ::testing::Test {
protected:
    void SetUp() override {
        SPYRE_REQUIRE_FUSE();
        host_.emplace(Host::Open(Mock(2, 2)));
        DistributedConfig c;
        c.device_ids = Vfs(*host_);  // 01:00.1, 01:00.2, 02:00.1, 02:00.2
        c.num_sub_workers = 2;
        c.block_dim = 2;
        worker_.emplace(*host_, c);
        RegisterChipFunctions(*worker_);
        worker_->RegisterSubWorker("verify", [](std::span<const HostTensor> t) {
            for (float x : t[0].floats())
                if (x != 5.0f) throw std::runtime_error("SubWorker verify failed: expected 5.0, got " + std::to_string(x));
        });
    }
    std::vector<Worker::DeviceStats> AllStats() {
        std::vector<Worker::DeviceStats> s;
        for (size_t d = 0; d < worker_->device_count(); ++d) s.push_back(worker_->Stats(d));
        return s;
    }
    std::optional<Host> host_;
    std::optional<Worker> worker_;
};

}  // namespace spyre::l3
