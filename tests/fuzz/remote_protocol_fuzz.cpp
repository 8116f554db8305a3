// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for what another rank sends (level 4, docs/multihost.md):
// the transport's frame decoder (libspyre/host/transport/frame.cpp) and the
// remote chip-call decoders (libspyre/host/remote_protocol.cpp). Promises:
// each decoder returns or throws spyre::Error (nothing else, no crash); a
// decoded describe reply, call or call error encodes again and decodes to
// the same fields; a decoded frame encodes to the same bytes.
//
// Input: u8 selector, then
//   selector % 4 == 0: a frame (a frame that announces more than 64 MiB of
//     payloads is skipped: the receiver zero-fills what a frame announces,
//     up to 2 GiB by design, which is memory, not parsing);
//   otherwise: u8 payload count (at most 4), that many u16 payload sizes,
//     the payloads, and the rest is the header of a describe reply (1), a
//     call (2) or a call error (3).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "host/remote_protocol.hpp"
#include "host/transport/frame.hpp"
#include "spyre/error.hpp"

using namespace spyre;
using namespace spyre::host;

namespace {

constexpr int kSource = 3;

void Require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "broken promise: %s\n", what);
        __builtin_trap();
    }
}

bool SameSpec(const WireSpec& a, const WireSpec& b) { return a.shape == b.shape && a.dtype == b.dtype; }

// What a decoder made of the bytes, or nothing when it refused them with
// spyre::Error (the only exception allowed out: any other fails the run).
template <typename Decode>
auto Decoded(Decode decode) -> std::optional<decltype(decode())> {
    try {
        return decode();
    } catch (const Error&) {
        return std::nullopt;
    }
}

void CheckFrame(std::span<const uint8_t> bytes) {
    // The announced payload sizes (u32 count at 12, u64 sizes from 16).
    if (bytes.size() >= wire::kFrameFixedBytes) {
        uint32_t count = 0;
        std::memcpy(&count, bytes.data() + 12, 4);
        uint64_t total = 0;
        for (uint32_t i = 0; i < count && 16 + 8 * size_t(i) + 8 <= bytes.size(); ++i) {
            uint64_t size = 0;
            std::memcpy(&size, bytes.data() + 16 + 8 * size_t(i), 8);
            total += size > (1ull << 40) ? (1ull << 40) : size;
        }
        if (total > (64ull << 20)) return;
    }
    const std::optional<Message> decoded = Decoded([&] { return wire::DecodeFrame(kSource, bytes); });
    if (!decoded) return;
    const Message& m = *decoded;
    Require(m.source == kSource, "a decoded frame names its source");
    std::vector<uint8_t> again;
    try {
        again = wire::EncodeFrame(m);
    } catch (const Error&) {
        Require(false, "a decoded frame encodes again");
    }
    Require(again.size() <= bytes.size() && std::memcmp(again.data(), bytes.data(), again.size()) == 0,
            "a decoded frame encodes to the bytes it came from");
}

void CheckDescribeReply(const Message& m) {
    const std::optional<RankDescription> decoded = Decoded([&] { return remote::DecodeDescribeReply(m); });
    if (!decoded) return;
    const RankDescription& d = *decoded;
    Message again = remote::EncodeDescribeReply(remote::ReplyId(m), d);
    again.source = m.source;
    const RankDescription e = remote::DecodeDescribeReply(again);
    Require(e.rank == d.rank && e.host_name == d.host_name && e.pid == d.pid && e.host == d.host,
            "a describe reply round-trips its rank fields");
    Require(e.functions.size() == d.functions.size(), "a describe reply round-trips its functions");
    for (size_t i = 0; i < d.functions.size(); ++i)
        Require(e.functions[i].pci_address == d.functions[i].pci_address && e.functions[i].is_vf == d.functions[i].is_vf &&
                    e.functions[i].card == d.functions[i].card && e.functions[i].function == d.functions[i].function &&
                    e.functions[i].memory_bytes == d.functions[i].memory_bytes,
                "a describe reply round-trips each function");
    Require(e.chip_functions == d.chip_functions && e.chip_tasks_at_once == d.chip_tasks_at_once,
            "a describe reply round-trips its chip functions and rooms");
    for (uint32_t room : d.chip_tasks_at_once) Require(room >= 1 && room <= 256, "a decoded room is 1..256");
}

void CheckCall(Message m) {
    auto decoded = Decoded([&] { return remote::DecodeCall(m); });
    if (!decoded) return;
    RemoteCall& call = decoded->second;
    for (const WireTensor& t : call.inputs) Require(t.data.size() == t.spec.bytes(), "a decoded input has its spec's bytes");
    const RemoteCall copy = call;
    Message again = remote::EncodeCall(decoded->first, call);
    again.source = m.source;
    auto [id, back] = remote::DecodeCall(again);
    Require(id == decoded->first, "a call round-trips its id");
    Require(back.task == copy.task && back.function == copy.function && back.device == copy.device &&
                back.access == copy.access,
            "a call round-trips its names and access");
    Require(back.inputs.size() == copy.inputs.size() && back.outputs.size() == copy.outputs.size(),
            "a call round-trips its tensor counts");
    for (size_t i = 0; i < copy.inputs.size(); ++i)
        Require(SameSpec(back.inputs[i].spec, copy.inputs[i].spec) && back.inputs[i].data == copy.inputs[i].data,
                "a call round-trips each input");
    for (size_t i = 0; i < copy.outputs.size(); ++i)
        Require(SameSpec(back.outputs[i], copy.outputs[i]), "a call round-trips each output spec");
}

void CheckCallError(const Message& m) {
    const std::optional<RemoteFailure> decoded = Decoded([&] { return remote::DecodeCallError(m); });
    if (!decoded) return;
    const RemoteFailure& f = *decoded;
    Message again = remote::EncodeCallError(remote::ReplyId(m), f);
    again.source = m.source;
    const RemoteFailure g = remote::DecodeCallError(again);
    Require(g.task == f.task && g.rank == f.rank && g.host_name == f.host_name && g.device == f.device &&
                g.function == f.function && g.cause == f.cause && g.message == f.message && g.device_code == f.device_code,
            "a call error round-trips every field");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t selector = data[0] % 4;
    std::span<const uint8_t> rest(data + 1, size - 1);
    try {
        if (selector == 0) {
            CheckFrame(rest);
            return 0;
        }
        if (rest.empty()) return 0;
        const size_t count = rest[0] % 5;
        size_t at = 1;
        std::vector<size_t> sizes;
        for (size_t i = 0; i < count && at + 2 <= rest.size(); ++i, at += 2) sizes.push_back(size_t(rest[at]) | size_t(rest[at + 1]) << 8);
        Message m;
        m.source = kSource;
        for (size_t s : sizes) {
            const size_t n = std::min(s, rest.size() - at);
            m.payloads.emplace_back(rest.begin() + long(at), rest.begin() + long(at + n));
            at += n;
        }
        m.header.assign(rest.begin() + long(at), rest.end());
        try {
            (void)remote::ReplyId(m);
        } catch (const Error&) {
        }
        if (selector == 1) {
            m.type = remote::kDescribeReply;
            CheckDescribeReply(m);
        } else if (selector == 2) {
            m.type = remote::kCall;
            CheckCall(std::move(m));
        } else {
            m.type = remote::kCallError;
            CheckCallError(m);
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "a round trip threw: %s\n", e.what());
        Require(false, "what decoded encodes and decodes again");
    } catch (...) {
        Require(false, "only spyre::Error leaves a decoder");
    }
    return 0;
}
