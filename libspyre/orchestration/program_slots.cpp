// SPDX-License-Identifier: Apache-2.0
#include "orchestration/program_slots.hpp"

#include <algorithm>
#include <cstring>

#include "plan/written_operands.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_program_rules.hpp"
#include "tensor/program_dtype.hpp"

namespace spyre::orchestration {

namespace {

std::string ShapeOf(const spyre_program_operand& o) {
    const char* dtype = ProgramDTypeName(o.dtype);
    std::string s = std::string(dtype ? dtype : "dtype ?") + " [";
    for (unsigned d = 0; d < o.rank && d < SPYRE_PROGRAM_MAX_RANK; ++d) s += (d ? ", " : "") + std::to_string(o.shape[d]);
    return s + "]";
}

}  // namespace

const char* ParamKindName(int32_t kind) {
    switch (kind) {
    case PARAM_INPUT: return "INPUT";
    case PARAM_OUTPUT: return "OUTPUT";
    case PARAM_INOUT: return "INOUT";
    }
    return "?";
}

ProgramSlots SlotsOf(const ProgramImage& image) {
    const std::vector<bool> written = WrittenOperands(image);
    ProgramSlots slots{int32_t(image.slot_count), {}};
    for (const spyre_program_reloc& r : image.relocs) {
        if (r.operand >= image.operands.size()) continue;  // the device refuses the program
        const spyre_program_operand& o = image.operands[r.operand];
        slots.uses.push_back({r.slot, r.operand, spyre_operand_extent(&o), std::max<uint64_t>(spyre_operand_align(&o), 1),
                              written[r.operand], o.dtype, ShapeOf(o)});
    }
    return slots;
}

namespace {

// The first record the card checks wrong wherever the operands are
// (uapi/spyre_program_rules.hpp), in its order; "" when none is. Only a
// PROGRAM_FORMAT one is refused here: another code (an unknown op, a
// shape) is left to the card, whose fault names the task.
std::string RecordFormatProblem(const ProgramImage& image) {
    auto format = [](const uapi::ProgramProblem& p, const std::string& record) {
        return p.code == SPYRE_ERR_PROGRAM_FORMAT ? record + ": " + p.what : std::string();
    };
    for (size_t i = 0; i < image.operands.size(); ++i)
        if (const uapi::ProgramProblem p = uapi::OperandFieldsProblem(image.operands[i]))
            return format(p, "operand " + std::to_string(i));
    for (size_t i = 0; i < image.ops.size(); ++i)
        if (const uapi::ProgramProblem p = uapi::OpProblem(image.ops[i], image.operands))
            return format(p, "op " + std::to_string(i));
    if (const uapi::ProgramProblem p = uapi::RelocationsProblem(image.relocs, image.operands.size(), image.slot_count))
        return format(p, "its relocations");
    return {};
}

}  // namespace

ProgramSlots CheckedSlots(std::span<const uint8_t> image, const std::string& what) {
    ProgramSlots slots;
    try {
        const ProgramImage decoded = ProgramImage::Decode(image);
        if (const std::string problem = RecordFormatProblem(decoded); !problem.empty())
            throw Error(ErrorKind::InvalidArgument,
                        problem + " (the card would fail every task of it with PROGRAM_FORMAT)");
        slots = SlotsOf(decoded);
    } catch (const Error& e) {
        throw Error(ErrorKind::InvalidArgument, what + " is not a program image: " + e.message());
    }
    for (const SlotUse& u : slots.uses)
        if (u.bytes == 0) throw Error(ErrorKind::InvalidArgument, what + ": " + NoExtent(u));
    return slots;
}

ProgramSlots SlotsAt(std::span<const uint8_t> memory, const std::string& what) {
    spyre_program_header h;
    if (memory.size() < sizeof h)
        throw Error(ErrorKind::InvalidArgument, what + " is not a program image: the function's memory ends " +
                                                    std::to_string(memory.size()) +
                                                    " bytes after it, short of a program header");
    std::memcpy(&h, memory.data(), sizeof h);
    // A size past the memory is decoded as the bytes there are (and refused).
    const size_t size = std::max<size_t>(sizeof h, std::min<uint64_t>(h.total_size, memory.size()));
    return CheckedSlots(memory.first(size), what);
}

std::string NoExtent(const SlotUse& u) {
    return "operand " + std::to_string(u.operand) + " (" + u.shape +
           ") spans no bytes the device can address: its dtype or layout is unknown, or its shape and strides "
           "overflow 64 bits";
}

std::string SlotUseError(int32_t kernel_id, const ProgramSlots& slots, std::span<const uint64_t> sizes,
                         std::span<const uint64_t> addresses, std::span<const int32_t> kinds) {
    if (slots.count >= 0 && sizes.size() != size_t(slots.count))
        return "kernel " + std::to_string(kernel_id) + "'s device program takes " + std::to_string(slots.count) +
               " argument(s), but the task passes " + std::to_string(sizes.size()) + " parameter(s)";
    for (const SlotUse& u : slots.uses) {
        auto program = [&] {
            return "kernel " + std::to_string(kernel_id) + "'s device program (operand " + std::to_string(u.operand) +
                   ", " + u.shape + ")";
        };
        if (u.slot >= sizes.size())
            return program() + " takes argument " + std::to_string(u.slot) + ", but the task passes " +
                   std::to_string(sizes.size()) + " parameter(s)";
        if (u.bytes == 0) return "kernel " + std::to_string(kernel_id) + "'s device program: " + NoExtent(u);
        if (u.bytes > sizes[u.slot])
            return "parameter " + std::to_string(u.slot) + " (" + ParamKindName(kinds[u.slot]) + ") is " +
                   std::to_string(sizes[u.slot]) + " bytes, but " + program() + " spans " + std::to_string(u.bytes) +
                   " bytes";
        if (addresses[u.slot] % u.align != 0)
            return "parameter " + std::to_string(u.slot) + " (" + ParamKindName(kinds[u.slot]) + ") starts at device address " +
                   std::to_string(addresses[u.slot]) + ", but " + program() + " must start on a multiple of " +
                   std::to_string(u.align) + " bytes";
        if (u.written && kinds[u.slot] == PARAM_INPUT)
            return "parameter " + std::to_string(u.slot) + " is an INPUT, but " + program() +
                   " writes it: pass it as OUTPUT or INOUT";
    }
    return {};
}

}  // namespace spyre::orchestration
