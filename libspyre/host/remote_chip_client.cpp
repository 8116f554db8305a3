// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/remote_chip_client.hpp"

#include "host/remote_protocol.hpp"

namespace spyre::host {

RemoteChipClient::RemoteChipClient(Transport& transport, std::chrono::milliseconds reply_timeout)
    : transport_(transport), reply_timeout_(reply_timeout) {}

Message RemoteChipClient::AwaitReply(int rank, uint64_t id) {
    if (auto early = early_.find(id); early != early_.end()) {
        Message m = std::move(early->second);
        early_.erase(early);
        return m;
    }
    const auto deadline = std::chrono::steady_clock::now() + reply_timeout_;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        // Throws DeviceLost when `rank` is lost, Timeout past the reply bound.
        Message m = transport_.Receive(std::max(left, std::chrono::milliseconds(0)), rank);
        if (m.type != remote::kDescribeReply && m.type != remote::kCallReply && m.type != remote::kCallError)
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " sent message type " +
                                                      std::to_string(m.type) + " where a reply was due");
        const uint64_t got = remote::ReplyId(m);
        if (got == id) return m;
        if (!pending_.count(got) || pending_.at(got).rank != rank)
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " replied to call " + std::to_string(got) +
                                                      ", which it was never sent");
        early_.emplace(got, std::move(m));
    }
}

RankDescription RemoteChipClient::Describe(int rank) {
    const uint64_t id = next_id_++;
    pending_.emplace(id, Pending{rank, RemoteCall{.task = "describe"}});
    transport_.Send(rank, remote::EncodeDescribe(id));
    Message m;
    try {
        m = AwaitReply(rank, id);
    } catch (...) {
        pending_.erase(id);
        throw;
    }
    pending_.erase(id);
    if (m.type != remote::kDescribeReply)
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " answered a describe request with type " +
                                                  std::to_string(m.type));
    return remote::DecodeDescribeReply(m);
}

uint64_t RemoteChipClient::Submit(int rank, RemoteCall call) {
    const uint64_t id = next_id_++;
    Message m = remote::EncodeCall(id, call);  // moves the inputs' bytes into payloads
    transport_.Send(rank, std::move(m));
    call.inputs.clear();
    pending_.emplace(id, Pending{rank, std::move(call)});
    return id;
}

std::vector<WireTensor> RemoteChipClient::Wait(uint64_t call_id) {
    auto it = pending_.find(call_id);
    if (it == pending_.end())
        throw Error(ErrorKind::InvalidArgument, "chip call " + std::to_string(call_id) + " was not submitted (or was waited for)");
    const Pending p = std::move(it->second);
    Message m;
    try {
        m = AwaitReply(p.rank, call_id);
    } catch (...) {
        pending_.erase(call_id);
        throw;
    }
    pending_.erase(call_id);
    if (m.type == remote::kCallError) throw RemoteChipError(remote::DecodeCallError(m));
    if (m.type != remote::kCallReply)
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " answered chip call '" + p.call.task +
                                                  "' with message type " + std::to_string(m.type));
    if (m.payloads.size() != p.call.outputs.size())
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " returned " + std::to_string(m.payloads.size()) +
                                                  " outputs for chip call '" + p.call.task + "', which has " +
                                                  std::to_string(p.call.outputs.size()));
    std::vector<WireTensor> outputs;
    for (size_t i = 0; i < m.payloads.size(); ++i) {
        if (m.payloads[i].size() != p.call.outputs[i].bytes())
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " returned output " + std::to_string(i) +
                                                      " of chip call '" + p.call.task + "' with " +
                                                      std::to_string(m.payloads[i].size()) + " bytes, not " +
                                                      std::to_string(p.call.outputs[i].bytes()));
        outputs.push_back(WireTensor{p.call.outputs[i], std::move(m.payloads[i])});
    }
    return outputs;
}

void RemoteChipClient::Shutdown(int rank) { transport_.Send(rank, remote::EncodeShutdown()); }

}  // namespace spyre::host
