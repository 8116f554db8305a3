// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the device's program decoder. Each input is decoded
// as sent, then once more with its checksum made right so the fuzzer gets
// past the checksum to the content checks. A program the decoder accepts
// must keep its promises: every operand inside the window, every relocation
// naming a real operand and slot, and the host's reading of the same image
// (the slot uses a task's parameters are checked against) agreeing with it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "execution/program_decoder.hpp"
#include "spyre/error.hpp"
#include "orchestration/program_slots.hpp"

using namespace spyre::mockdev;

namespace {

constexpr uint64_t kWindow = 1u << 20;

void CheckPromises(const DecodedProgram& p, std::span<const uint8_t> bytes) {
    for (const Operand& o : p.operands)
        if (o.desc.addr > kWindow || o.extent > kWindow - o.desc.addr || o.extent == 0) __builtin_trap();

    for (const spyre_program_reloc& r : p.relocs)
        if (r.operand >= p.operands.size() || r.slot >= p.header.slot_count) __builtin_trap();
    // The host checks a task's regions against the same extents, one per
    // relocation in the image's order (orchestration/program_slots), and
    // registers what the device accepts: refusing it breaks the promise.
    spyre::orchestration::ProgramSlots slots;
    try {
        slots = spyre::orchestration::SlotsAt(bytes, "the program");
    } catch (const spyre::Error&) {
        __builtin_trap();
    }
    const std::vector<spyre::orchestration::SlotUse>& uses = slots.uses;
    if (slots.count != int32_t(p.header.slot_count) || uses.size() != p.relocs.size()) __builtin_trap();
    for (size_t i = 0; i < uses.size(); ++i)
        if (uses[i].slot != p.relocs[i].slot || uses[i].bytes != p.operands[p.relocs[i].operand].extent) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    DecodedProgram program;
    if (!DecodeProgram({data, size}, kWindow, program)) CheckPromises(program, {data, size});
    if (size < sizeof(spyre_program_header)) return 0;
    std::vector<uint8_t> sealed(data, data + size);
    const uint32_t sum = spyre::uapi::ProgramChecksum(sealed.data(), sealed.size());
    std::memcpy(sealed.data() + offsetof(spyre_program_header, checksum), &sum, sizeof sum);
    if (!DecodeProgram(sealed, kWindow, program)) CheckPromises(program, sealed);
    return 0;
}
