// SPDX-License-Identifier: Apache-2.0
#include "execution/program_executor.hpp"

#include <cstddef>
#include <cstring>

#include "execution/kernels.hpp"
#include "log.hpp"

namespace spyre::mockdev {

namespace {

// ERR_ADDR: the bad address itself for range and alignment faults, else the
// program the fault is in.
CbOutcome ProgramFail(const ProgramFault& f, uint64_t program_addr) {
    LOG_DEBUG("program at 0x%llx refused: %s (%s)", static_cast<unsigned long long>(program_addr), f.what,
              spyre_error_name(f.code));
    const bool names_address = f.code == SPYRE_ERR_ADDR_RANGE || f.code == SPYRE_ERR_MISALIGNED;
    return Fail(f.code, names_address ? f.addr : program_addr);
}

}  // namespace

CbOutcome ProgramExecutor::Load(uint64_t addr, uint64_t size, std::vector<uint8_t>& bytes,
                                const DecodedProgram*& program) {
    if (addr % SPYRE_PROGRAM_ALIGN != 0) return Fail(SPYRE_ERR_MISALIGNED, addr);
    if (size == 0) {
        // LAUNCH with program_size 0: the size is the header's total_size.
        const auto header = memory_.Span(addr, sizeof(spyre_program_header));
        if (!header) return Fail(SPYRE_ERR_ADDR_RANGE, addr);
        spyre_program_header h;
        std::memcpy(&h, header->data(), sizeof h);
        size = h.total_size;
    }
    if (size < sizeof(spyre_program_header) || size > SPYRE_PROGRAM_MAX_SIZE) return Fail(SPYRE_ERR_PROGRAM_FORMAT, addr);
    const auto span = memory_.Span(addr, size);
    if (!span) return Fail(SPYRE_ERR_ADDR_RANGE, addr);
    bytes.assign(span->begin(), span->end());  // compared and decoded as copied: the driver may write meanwhile
    CachedProgram* victim = &cache_[0];
    for (CachedProgram& entry : cache_) {
        if (entry.decoded && entry.bytes == bytes) {
            entry.used = ++use_clock_;
            program = entry.decoded.get();
            return {};
        }
        if (entry.used < victim->used) victim = &entry;  // never used: 0
    }
    auto decoded = std::make_unique<DecodedProgram>();
    ++decodes_;
    if (ProgramFault f = DecodeProgram(bytes, memory_.size(), *decoded)) return ProgramFail(f, addr);
    if (launching_ && victim->decoded) superseded_.push_back(std::move(victim->decoded));  // maybe the running program's
    victim->bytes = bytes;
    victim->decoded = std::move(decoded);
    victim->used = ++use_clock_;
    program = victim->decoded.get();
    return {};
}

CbOutcome ProgramExecutor::MapOperands(const DecodedProgram& program) {
    operand_data_.clear();
    for (const Operand& o : program.operands) {
        const auto span = memory_.Span(o.desc.addr, o.extent);
        if (!span) return Fail(SPYRE_ERR_ADDR_RANGE, o.desc.addr);  // the decoder checked; kept as the one rule
        operand_data_.push_back(span->data());
    }
    return {};
}

CbOutcome ProgramExecutor::Launch(uint64_t addr, uint64_t size, const Budget& budget) {
    // The cache's decode, not a copy: a CORRECT op in the program may load
    // (and cache) another program meanwhile, which keeps this one alive.
    const DecodedProgram* program = nullptr;
    if (CbOutcome loaded = Load(addr, size, bytes_, program); loaded.status) return loaded;
    if (ProgramFault f = CheckOverlaps(*program)) return ProgramFail(f, addr);
    if (CbOutcome mapped = MapOperands(*program); mapped.status) return mapped;
    // The wait for the cores is bounded by arbitration (card_cores.hpp), not
    // by this program's watchdog, which bounds its run from when it has them.
    uint16_t status;
    const auto card = compute_.Acquire(budget.AbortOnly(), status);
    if (!card) return Fail(status, addr);
    const Budget run = card.waited() ? budget.From(Budget::Clock::now()) : budget;
    struct Running {
        ProgramExecutor& executor;
        explicit Running(ProgramExecutor& e) : executor(e) { executor.launching_ = true; }
        ~Running() {
            executor.launching_ = false;
            executor.superseded_.clear();
        }
    } running(*this);
    for (const spyre_program_op& op : program->ops)
        if (CbOutcome done = RunOp(*program, op, addr, run); done.status) return done;
    return CbOutcome{SPYRE_ERR_NONE, program->ops.size(), 0};
}

CbOutcome ProgramExecutor::RunTask(uint64_t addr, uint64_t size, uint64_t args_addr, uint64_t arg_count,
                                   const Budget& budget) {
    const DecodedProgram* loaded = nullptr;
    if (CbOutcome out = Load(addr, size, bytes_, loaded); out.status) return out;
    if (CbOutcome relocated = RelocateDecoded(addr, args_addr, arg_count, *loaded, task_program_); relocated.status)
        return relocated;
    if (ProgramFault f = CheckOverlaps(task_program_)) return ProgramFail(f, addr);
    if (CbOutcome mapped = MapOperands(task_program_); mapped.status) return mapped;
    for (const spyre_program_op& op : task_program_.ops)
        if (CbOutcome done = RunOp(task_program_, op, addr, budget, true); done.status) return done;
    return CbOutcome{SPYRE_ERR_NONE, task_program_.ops.size(), 0};
}

CbOutcome ProgramExecutor::RunOp(const DecodedProgram& program, const spyre_program_op& op, uint64_t program_addr,
                                 const Budget& budget, bool one_core) {
    const KernelContext ctx{compute_, budget, one_core};
    auto t = [&](int i) { return Tensor{program.operands[op.operands[i]], operand_data_[op.operands[i]]}; };
    uint16_t status = SPYRE_ERR_NONE;
    switch (op.opcode) {
    case SPYRE_PROG_OP_MATMUL:
        status = RunMatmul(ctx, t(0), t(1), t(2), op.flags & SPYRE_PROG_OPF_ACCUMULATE);
        break;
    case SPYRE_PROG_OP_ADD:
    case SPYRE_PROG_OP_SUB:
    case SPYRE_PROG_OP_MUL:
    case SPYRE_PROG_OP_DIV: status = RunBinary(ctx, op.opcode, t(0), t(1), t(2)); break;
    case SPYRE_PROG_OP_RELU:
    case SPYRE_PROG_OP_GELU: status = RunUnary(ctx, op.opcode, t(0), t(1)); break;
    case SPYRE_PROG_OP_SOFTMAX: status = RunSoftmax(ctx, op.u.axis.axis, t(0), t(1)); break;
    case SPYRE_PROG_OP_REDUCE_SUM:
    case SPYRE_PROG_OP_REDUCE_MAX: status = RunReduce(ctx, op.opcode, op.u.axis.axis, t(0), t(1)); break;
    case SPYRE_PROG_OP_COPY: status = RunCopy(ctx, op.u.copy.perm, t(0), t(1)); break;
    case SPYRE_PROG_OP_FILL: status = RunFill(ctx, op.u.fill.value, t(0)); break;
    case SPYRE_PROG_OP_CORRECT:
        return Correct(op.u.correct.target_addr, op.u.correct.input_addr, op.u.correct.entry_count);
    default: status = SPYRE_ERR_UNKNOWN_OP; break;  // the decoder admits none
    }
    return status == SPYRE_ERR_NONE ? CbOutcome{} : Fail(status, program_addr);
}

CbOutcome ProgramExecutor::Relocate(uint64_t program_addr, uint64_t input_addr, uint64_t entry_count,
                                    std::vector<uint8_t>& bytes, const DecodedProgram& loaded,
                                    DecodedProgram& relocated) const {
    if (entry_count != loaded.header.slot_count) return Fail(SPYRE_ERR_RELOCATION, program_addr);
    if (input_addr % sizeof(uint64_t) != 0) return Fail(SPYRE_ERR_MISALIGNED, input_addr);
    const auto table = memory_.Span(input_addr, entry_count * sizeof(uint64_t));  // entry_count < 2^16
    if (!table) return Fail(SPYRE_ERR_ADDR_RANGE, input_addr);

    for (const spyre_program_reloc& r : loaded.relocs)
        std::memcpy(bytes.data() + loaded.header.operands_offset + r.operand * sizeof(spyre_program_operand) +
                        offsetof(spyre_program_operand, addr),
                    table->data() + r.slot * sizeof(uint64_t), sizeof(uint64_t));
    const uint32_t checksum = uapi::ProgramChecksum(bytes.data(), bytes.size());
    std::memcpy(bytes.data() + offsetof(spyre_program_header, checksum), &checksum, sizeof checksum);
    // The relocated program must validate too (its new addresses inside the window).
    if (ProgramFault f = DecodeProgram(bytes, memory_.size(), relocated)) return ProgramFail(f, program_addr);
    return {};
}

CbOutcome ProgramExecutor::RelocateDecoded(uint64_t program_addr, uint64_t input_addr, uint64_t entry_count,
                                           const DecodedProgram& loaded, DecodedProgram& relocated) {
    if (entry_count != loaded.header.slot_count) return Fail(SPYRE_ERR_RELOCATION, program_addr);
    if (input_addr % sizeof(uint64_t) != 0) return Fail(SPYRE_ERR_MISALIGNED, input_addr);
    const auto table = memory_.Span(input_addr, entry_count * sizeof(uint64_t));  // entry_count < 2^16
    if (!table) return Fail(SPYRE_ERR_ADDR_RANGE, input_addr);

    // Copies into the executor's own vectors: no allocation once they have grown.
    // The header is the loaded one, checksum included (nothing reads it).
    relocated.header = loaded.header;
    relocated.ops = loaded.ops;
    relocated.operands = loaded.operands;
    relocated.relocs = loaded.relocs;
    relocated_.assign(loaded.operands.size(), 0);
    for (const spyre_program_reloc& r : loaded.relocs) {  // validated: operand in range, each once
        std::memcpy(&relocated.operands[r.operand].desc.addr, table->data() + r.slot * sizeof(uint64_t),
                    sizeof(uint64_t));  // read once: the driver may write the table meanwhile
        relocated_[r.operand] = 1;
    }
    // In index order, as a decode of the relocated bytes checks them, so the
    // first bad operand is the one reported; the others passed at load.
    for (size_t i = 0; i < relocated.operands.size(); ++i) {
        if (!relocated_[i]) continue;
        const spyre_program_operand desc = relocated.operands[i].desc;
        if (ProgramFault f = CheckOperand(desc, memory_.size(), relocated.operands[i])) return ProgramFail(f, program_addr);
    }
    return {};
}

CbOutcome ProgramExecutor::Correct(uint64_t target_addr, uint64_t input_addr, uint64_t entry_count) {
    if (input_addr % sizeof(uint64_t) != 0) return Fail(SPYRE_ERR_MISALIGNED, input_addr);
    if (target_addr % SPYRE_PROGRAM_ALIGN != 0) return Fail(SPYRE_ERR_MISALIGNED, target_addr);
    const auto header = memory_.Span(target_addr, sizeof(spyre_program_header));
    if (!header) return Fail(SPYRE_ERR_ADDR_RANGE, target_addr);
    // A target that is not a program is refused before its size is trusted.
    spyre_program_header h;
    std::memcpy(&h, header->data(), sizeof h);
    if (h.magic != SPYRE_PROGRAM_MAGIC) return Fail(SPYRE_ERR_PROGRAM_MAGIC, target_addr);
    const DecodedProgram* loaded = nullptr;
    if (CbOutcome out = Load(target_addr, h.total_size, target_bytes_, loaded); out.status) return out;
    if (CbOutcome relocated = Relocate(target_addr, input_addr, entry_count, target_bytes_, *loaded, target_);
        relocated.status)
        return relocated;
    const auto target = memory_.Span(target_addr, target_bytes_.size());  // checked by Load
    std::memcpy(target->data(), target_bytes_.data(), target_bytes_.size());
    return CbOutcome{SPYRE_ERR_NONE, target_.relocs.size(), 0};
}

}  // namespace spyre::mockdev
