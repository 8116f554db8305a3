// SPDX-License-Identifier: Apache-2.0
#include "host/transport/frame.hpp"

#include <cstdio>

#include "host/transport/byte_codec.hpp"
#include "host/transport/payload_buffers.hpp"

namespace spyre::host::wire {

std::vector<uint8_t> EncodeFrame(const Message& message) {
    if (message.header.size() > kMaxHeaderBytes)
        throw Error(ErrorKind::InvalidArgument, "message header of " + std::to_string(message.header.size()) +
                                                    " bytes is over the limit of " + std::to_string(kMaxHeaderBytes));
    if (message.payloads.size() > kMaxPayloads)
        throw Error(ErrorKind::InvalidArgument, "message with " + std::to_string(message.payloads.size()) +
                                                    " payloads is over the limit of " + std::to_string(kMaxPayloads));
    ByteWriter w;
    w.Put<uint32_t>(kFrameMagic);
    w.Put<uint16_t>(kFrameVersion);
    w.Put<uint16_t>(message.type);
    w.Put<uint32_t>(static_cast<uint32_t>(message.header.size()));
    w.Put<uint32_t>(static_cast<uint32_t>(message.payloads.size()));
    uint64_t total = 0;
    for (size_t i = 0; i < message.payloads.size(); ++i) {
        total += message.payloads[i].size();
        if (message.payloads[i].size() > kMaxPayloadBytes)
            throw Error(ErrorKind::InvalidArgument, "payload " + std::to_string(i) + " of " +
                                                        std::to_string(message.payloads[i].size()) +
                                                        " bytes is over the limit of " + std::to_string(kMaxPayloadBytes));
        w.Put<uint64_t>(message.payloads[i].size());
    }
    if (total > kMaxMessagePayloadBytes)
        throw Error(ErrorKind::InvalidArgument, "message payloads of " + std::to_string(total) +
                                                    " bytes in all are over the limit of " + std::to_string(kMaxMessagePayloadBytes));
    std::vector<uint8_t> frame = w.Take();
    frame.insert(frame.end(), message.header.begin(), message.header.end());
    return frame;
}

std::vector<uint8_t> EncodeUserFrame(const Message& message) {
    if (message.type < kFirstUserMessageType)
        throw Error(ErrorKind::InvalidArgument, "message type " + std::to_string(message.type) +
                                                    " is the transport's own (types below " +
                                                    std::to_string(kFirstUserMessageType) + "): not sent");
    return EncodeFrame(message);
}

Message DecodeFrame(int source, std::span<const uint8_t> frame, PayloadBuffers* buffers) {
    ByteReader r(frame, "frame from rank " + std::to_string(source));
    const uint32_t magic = r.Get<uint32_t>("magic");
    if (magic != kFrameMagic) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%08x", magic);
        r.Fail(std::string("magic ") + hex + " is not SPTR");
    }
    const uint16_t version = r.Get<uint16_t>("version");
    if (version != kFrameVersion) r.Fail("version " + std::to_string(version) + " (this side speaks " + std::to_string(kFrameVersion) + ")");
    Message m;
    m.source = source;
    m.type = r.Get<uint16_t>("type");
    const uint32_t header_bytes = r.Get<uint32_t>("header size");
    const uint32_t count = r.Get<uint32_t>("payload count");
    if (header_bytes > kMaxHeaderBytes) r.Fail("header of " + std::to_string(header_bytes) + " bytes is over the limit");
    if (count > kMaxPayloads) r.Fail(std::to_string(count) + " payloads is over the limit");
    std::vector<uint64_t> sizes(count);
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; ++i) {
        sizes[i] = r.Get<uint64_t>("payload size");
        if (sizes[i] > kMaxPayloadBytes) r.Fail("payload " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " bytes is over the limit");
        total += sizes[i];
    }
    // Checked before anything is allocated: a hostile frame cannot make us reserve terabytes.
    if (total > kMaxMessagePayloadBytes) r.Fail("payloads of " + std::to_string(total) + " bytes in all are over the limit");
    if (r.remaining() != header_bytes)
        r.Fail("header is " + std::to_string(r.remaining()) + " bytes, the frame says " + std::to_string(header_bytes));
    m.payloads.resize(count);
    for (uint32_t i = 0; i < count; ++i) {
        if (buffers) m.payloads[i] = buffers->Take(sizes[i]);
        else m.payloads[i].resize(sizes[i]);
    }
    m.header.assign(frame.end() - header_bytes, frame.end());
    return m;
}

}  // namespace spyre::host::wire
