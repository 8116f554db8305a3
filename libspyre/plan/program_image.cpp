// SPDX-License-Identifier: Apache-2.0
#include "spyre/plan/program_image.hpp"

#include <cstring>
#include <string>

#include "spyre/error.hpp"

namespace spyre {

namespace {

[[noreturn]] void Invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

// Appends a table; returns its offset (0 for an empty table, as the contract wants).
template <typename Record>
uint32_t Append(std::vector<uint8_t>& out, const std::vector<Record>& table, const char* name) {
    if (table.size() > UINT16_MAX) Invalid(std::string("a program holds at most 65535 ") + name);
    if (table.empty()) return 0;
    const size_t at = out.size();
    out.resize(at + table.size() * sizeof(Record));
    std::memcpy(out.data() + at, table.data(), table.size() * sizeof(Record));
    return uint32_t(at);
}

template <typename Record>
std::vector<Record> Read(std::span<const uint8_t> bytes, uint32_t offset, uint16_t count, const char* name) {
    if (uint64_t(offset) + uint64_t(count) * sizeof(Record) > bytes.size())
        Invalid(std::string("program ") + name + " table runs past its end");
    std::vector<Record> table(count);
    if (count) std::memcpy(table.data(), bytes.data() + offset, count * sizeof(Record));
    return table;
}

}  // namespace

std::vector<uint8_t> ProgramImage::Encode() const {
    std::vector<uint8_t> out(sizeof(spyre_program_header));  // every record size is a multiple of 8: tables stay aligned
    spyre_program_header h{};
    h.magic = SPYRE_PROGRAM_MAGIC;
    h.version = SPYRE_PROGRAM_VERSION;
    h.header_size = sizeof h;
    h.op_count = uint16_t(ops.size());
    h.operand_count = uint16_t(operands.size());
    h.reloc_count = uint16_t(relocs.size());
    h.slot_count = slot_count;
    h.ops_offset = Append(out, ops, "ops");
    h.operands_offset = Append(out, operands, "operands");
    h.relocs_offset = Append(out, relocs, "relocations");
    if (out.size() > SPYRE_PROGRAM_MAX_SIZE)
        Invalid("program of " + std::to_string(out.size()) + " bytes exceeds the device's limit of " +
                std::to_string(SPYRE_PROGRAM_MAX_SIZE));
    h.total_size = uint32_t(out.size());
    std::memcpy(out.data(), &h, sizeof h);
    h.checksum = uapi::ProgramChecksum(out.data(), out.size());
    std::memcpy(out.data(), &h, sizeof h);
    return out;
}

ProgramImage ProgramImage::Decode(std::span<const uint8_t> bytes) {
    spyre_program_header h;
    if (bytes.size() < sizeof h) Invalid("program of " + std::to_string(bytes.size()) + " bytes is shorter than its header");
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.magic != SPYRE_PROGRAM_MAGIC) Invalid("not a program: bad magic");
    if (h.version != SPYRE_PROGRAM_VERSION) Invalid("program version " + std::to_string(h.version) + " is not supported");
    if (h.total_size != bytes.size())
        Invalid("program says it has " + std::to_string(h.total_size) + " bytes, got " + std::to_string(bytes.size()));
    if (h.header_size != sizeof h)
        Invalid("program header_size is " + std::to_string(h.header_size) + ", not " + std::to_string(sizeof h));
    if (h.checksum != uapi::ProgramChecksum(bytes.data(), bytes.size())) Invalid("program checksum mismatch");
    // As the card checks it: a program it would fault with PROGRAM_FORMAT at
    // every task is refused here.
    if (const char* problem = uapi::ProgramLayoutProblem(h)) Invalid(std::string("program header: ") + problem);
    ProgramImage image;
    image.ops = Read<spyre_program_op>(bytes, h.ops_offset, h.op_count, "op");
    image.operands = Read<spyre_program_operand>(bytes, h.operands_offset, h.operand_count, "operand");
    image.relocs = Read<spyre_program_reloc>(bytes, h.relocs_offset, h.reloc_count, "relocation");
    image.slot_count = h.slot_count;
    return image;
}

void SetCorrectionTarget(std::vector<uint8_t>& correction, uint64_t target_addr, uint64_t input_addr) {
    ProgramImage image = ProgramImage::Decode(correction);
    if (image.ops.size() != 1 || image.ops[0].opcode != SPYRE_PROG_OP_CORRECT)
        throw Error(ErrorKind::InvalidArgument, "not a correction program: it must hold exactly one CORRECT op");
    image.ops[0].u.correct.target_addr = target_addr;
    image.ops[0].u.correct.input_addr = input_addr;
    correction = image.Encode();
}

}  // namespace spyre
