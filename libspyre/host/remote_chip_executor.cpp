// SPDX-License-Identifier: Apache-2.0
#include "remote_chip_executor.hpp"

#include <algorithm>

#include "host/in_place.hpp"
#include "spyre/common/memory_copy.hpp"

namespace spyre::host {

RemoteChipExecutor::RemoteChipExecutor(std::shared_ptr<RemoteRank> rank, size_t device, std::string description,
                                       unsigned room)
    : rank_(std::move(rank)),
      device_(device),
      device_selector_(std::to_string(device)),
      description_(std::move(description)),
      room_(std::max(room, 1u)) {}

double RemoteChipExecutor::OutlivingWorkNs() const {
    const uint32_t calls = rank_->client.CallsOutlivingTheirBound(rank_->rank, device_selector_);
    return double(calls) * double(std::chrono::nanoseconds(rank_->client.reply_timeout()).count());
}

ChipCallStats RemoteChipExecutor::Run(const ChipCall& call) {
    ChipCallStats stats;
    Run(call, stats);
    return stats;
}

void RemoteChipExecutor::Run(const ChipCall& call, ChipCallStats& stats) {
    RemoteCall remote{.task = call.task_name, .function = call.function, .device = device_selector_};
    std::vector<const HostTensor*> returned;  // Out and InOut, in order
    uint64_t sending = 0;
    for (const ChipArg& a : call.args) {
        const HostTensor& t = a.arg.tensor;
        const WireSpec spec{t.shape(), t.dtype()};
        const Access access = a.arg.access;
        // An Out over exactly the bytes of an In argument (an in-place
        // call) starts as those bytes, as on this rank's devices, and the
        // chip function sees it as Out there too: it goes as an in-place
        // Out naming that In, whose bytes already go. (As Out it started
        // as zeros there; sent as InOut, a function that asks its
        // arguments' access answered otherwise there: both found probing
        // from outside.)
        if (const std::optional<size_t> of = access == Access::Out ? InputNamingTheBytesOf(call, t) : std::nullopt) {
            remote.access.push_back(RemoteCall::kOutInPlace);
            remote.in_place_of.push_back(uint32_t(*of));
            remote.outputs.push_back(spec);
            returned.push_back(&t);
            continue;
        }
        remote.access.push_back(WireAccess(access));
        if (access != Access::Out) {
            const auto* bytes = static_cast<const uint8_t*>(t.data());
            remote.inputs.push_back(WireTensor{spec, std::vector<uint8_t>(bytes, bytes + t.bytes())});
            sending += t.bytes();
        }
        if (access != Access::In) {
            remote.outputs.push_back(spec);
            returned.push_back(&t);
        }
    }
    const uint64_t id = rank_->client.Submit(rank_->rank, std::move(remote));
    stats.bytes_uploaded += sending;  // sent, whatever comes back
    const std::vector<WireTensor> outputs = rank_->client.Wait(id);  // sizes checked against the specs
    for (size_t i = 0; i < returned.size(); ++i) {
        CopyMemory(returned[i]->data(), outputs[i].data.data(), outputs[i].data.size());  // no 4 KiB aliasing stall
        stats.bytes_downloaded += outputs[i].data.size();
    }
}

}  // namespace spyre::host
