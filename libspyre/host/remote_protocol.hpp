// SPDX-License-Identifier: Apache-2.0
// The remote chip-call messages on top of Transport (docs/multihost.md has
// the field tables). Every decoder checks what it reads and throws
// ProtocolError naming the message and its source rank.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "spyre/host/chip_executor.hpp"
#include "spyre/host/remote_chip.hpp"
#include "spyre/host/transport.hpp"

namespace spyre::host::remote {

// A call carries at most this many inputs, and as many outputs; each
// tensor at most kMaxPayloadBytes, all inputs at most kMaxMessagePayloadBytes.
inline constexpr size_t kMaxCallTensors = 256;
// A tensor on the wire has 1 to this many dims.
inline constexpr size_t kMaxCallRank = 8;
// Whether a chip call of these arguments fits the messages above (placement
// sends one that does not to this rank's devices only).
bool CallFits(std::span<const TensorArg> args);

enum MessageType : uint16_t {
    kDescribe = kFirstUserMessageType,  // id
    kDescribeReply,                     // id, RankDescription
    kCall,                              // id, task, function, device, input specs, output specs; payloads: inputs
    kCallReply,                         // id; payloads: outputs
    kCallError,                         // id, RemoteFailure
    kShutdown,                          // nothing
};

Message EncodeDescribe(uint64_t id);
Message EncodeDescribeReply(uint64_t id, const RankDescription& description);
RankDescription DecodeDescribeReply(const Message& message);

// The inputs' bytes are moved into the payloads.
Message EncodeCall(uint64_t id, RemoteCall& call);
// The inputs' bytes are moved out of the payloads; shapes and sizes checked.
std::pair<uint64_t, RemoteCall> DecodeCall(Message& message);
// The device a call names, read from its header alone (nullopt when the
// header is malformed: DecodeCall then says how).
std::optional<std::string> CallDevice(const Message& message);
// The place among the serving rank's devices that a call's device names
// ("0", "1", ...); nullopt unless it is a plain decimal number. The one rule
// both for choosing the device's call threads and for running the call.
std::optional<size_t> DeviceIndex(const std::string& device);

Message EncodeCallReply(uint64_t id, std::vector<WireTensor>& outputs);
Message EncodeCallError(uint64_t id, const RemoteFailure& failure);
RemoteFailure DecodeCallError(const Message& message);

Message EncodeShutdown();

// The call id a reply (DescribeReply, CallReply, CallError) carries first.
uint64_t ReplyId(const Message& message);

}  // namespace spyre::host::remote
