// SPDX-License-Identifier: Apache-2.0
// The frame: what precedes a message's payloads on the wire (MPI sends it as
// one message, then each payload as one more). Layout, little-endian:
//   u32 magic "SPTR", u16 version, u16 type, u32 header bytes,
//   u32 payload count, then one u64 size per payload, then the header.
// Both transports encode and decode every message through here, so the
// in-process tests check the same validation MPI traffic gets.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spyre/host/transport.hpp"

namespace spyre::host::wire {

inline constexpr uint32_t kFrameMagic = 0x52545053;  // "SPTR"
inline constexpr uint16_t kFrameVersion = 2;  // 2: a call error says whether its code is a host kernel's
inline constexpr size_t kFrameFixedBytes = 16;
// The largest frame a valid message can need.
inline constexpr size_t kMaxFrameBytes = kFrameFixedBytes + 8 * kMaxPayloads + kMaxHeaderBytes;
// Transport-internal message types.
inline constexpr uint16_t kHeartbeatType = 1;
inline constexpr uint16_t kLeavingType = kPeerLeftMessageType;  // sent by a transport as it shuts down

// Throws InvalidArgument when the message is over the limits.
std::vector<uint8_t> EncodeFrame(const Message& message);
// EncodeFrame of a caller's message (Transport::Send): also InvalidArgument
// for a type below kFirstUserMessageType, the transport's own (a caller's
// "peer left" cut its sender off at the receiver for good: found probing).
std::vector<uint8_t> EncodeUserFrame(const Message& message);

class PayloadBuffers;

// The message a frame announces: type, header, and payloads sized (zeroed)
// as the frame says, ready to receive into (taken from `buffers` when
// given). Throws ProtocolError naming `source` for anything malformed.
Message DecodeFrame(int source, std::span<const uint8_t> frame, PayloadBuffers* buffers = nullptr);

}  // namespace spyre::host::wire
