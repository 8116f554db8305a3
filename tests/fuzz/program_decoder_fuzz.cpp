// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the device's program decoder. Each input is decoded
// as sent, then once more with its checksum made right so the fuzzer gets
// past the checksum to the content checks. A program the decoder accepts
// must keep its promises: every operand inside the window, every relocation
// naming a real operand and slot.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "execution/program_decoder.hpp"

using namespace spyre::mockdev;

namespace {

constexpr uint64_t kWindow = 1u << 20;

void CheckPromises(const DecodedProgram& p) {
    for (const Operand& o : p.operands)
        if (o.desc.addr > kWindow || o.extent > kWindow - o.desc.addr || o.extent == 0) __builtin_trap();
    for (const spyre_program_reloc& r : p.relocs)
        if (r.operand >= p.operands.size() || r.slot >= p.header.slot_count) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    DecodedProgram program;
    if (!DecodeProgram({data, size}, kWindow, program)) CheckPromises(program);
    if (size < sizeof(spyre_program_header)) return 0;
    std::vector<uint8_t> sealed(data, data + size);
    const uint32_t sum = spyre::uapi::ProgramChecksum(sealed.data(), sealed.size());
    std::memcpy(sealed.data() + offsetof(spyre_program_header, checksum), &sum, sizeof sum);
    if (!DecodeProgram(sealed, kWindow, program)) CheckPromises(program);
    return 0;
}
