// SPDX-License-Identifier: Apache-2.0
#include "spyre/launch/tiling.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre {

namespace {

[[noreturn]] void Invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }
[[noreturn]] void Unsupported(const std::string& what) { throw Error(ErrorKind::Unsupported, what); }

// The compute's tensors as validated against the actual ones.
struct Slots {
    const SpyreCompute& compute;
    std::span<const TiledTensor> tensors;
    std::vector<std::vector<int>> loops;               // per slot, per dim: its loop
    std::vector<std::vector<int64_t>> compiled_strides;  // per slot (dense row-major when the spec has none)
    int loop_count = 0;

    const std::vector<int64_t>& compiled(size_t slot) const { return compute.tensors[slot].shape; }

    // "tensor 1 (B)", for messages.
    std::string Name(size_t slot) const {
        const std::string& name = compute.tensors[slot].name;
        return "tensor " + std::to_string(slot) + (name.empty() ? "" : " (" + name + ")");
    }

    // "loop 1 (A dim 1, B dim 0)": which dims a loop indexes, for messages.
    std::string LoopName(int loop) const {
        std::string dims;
        for (size_t s = 0; s < loops.size(); ++s)
            for (size_t d = 0; d < loops[s].size(); ++d)
                if (loops[s][d] == loop) {
                    const std::string& name = compute.tensors[s].name;
                    dims += (dims.empty() ? "" : ", ") + (name.empty() ? "tensor " + std::to_string(s) : name) +
                            " dim " + std::to_string(d);
                }
        return "loop " + std::to_string(loop) + (dims.empty() ? "" : " (" + dims + ")");
    }
};

// Checks what PlanTiling and SpecializeProgram both rely on: one tensor per
// slot, ranks, dtypes, sizes and strides, and a sane loop map.
Slots Validate(const SpyreCompute& compute, std::span<const TiledTensor> tensors) {
    if (compute.tensors.empty()) Invalid("compute " + compute.name + " has no tensor metadata to tile against");
    if (tensors.size() != compute.tensors.size())
        Invalid("compute " + compute.name + " has " + std::to_string(compute.tensors.size()) + " tensor slots, got " +
                std::to_string(tensors.size()) + " tensors");
    Slots slots{compute, tensors, {}, {}, 0};
    for (size_t s = 0; s < tensors.size(); ++s) {
        const TensorSpec& spec = compute.tensors[s];
        const TiledTensor& t = tensors[s];
        const size_t rank = spec.shape.size();
        if (rank == 0 || rank > SPYRE_PROGRAM_MAX_RANK)
            Invalid(slots.Name(s) + " is compiled with rank " + std::to_string(rank) + "; 1 to 8 dims are supported");
        if (t.shape.size() != rank)
            Invalid(slots.Name(s) + " has rank " + std::to_string(t.shape.size()) + ", the compute expects rank " +
                    std::to_string(rank) + " " + ShapeText(spec.shape));
        if (t.strides.size() != rank)
            Invalid(slots.Name(s) + " has " + std::to_string(t.strides.size()) + " strides for rank " +
                    std::to_string(rank));
        if (t.dtype != spec.dtype)
            Invalid(slots.Name(s) + " is " + ToString(t.dtype) + ", the compute expects " + ToString(spec.dtype));
        for (size_t d = 0; d < rank; ++d) {
            if (spec.shape[d] < 1)
                Invalid(slots.Name(s) + " is compiled with dim " + std::to_string(d) + " of size " +
                        std::to_string(spec.shape[d]));
            if (t.shape[d] < 1)
                Invalid(slots.Name(s) + " dim " + std::to_string(d) + " is " + std::to_string(t.shape[d]) +
                        "; must be >= 1");
            if (t.strides[d] < 0)  // device strides are unsigned
                Invalid(slots.Name(s) + " stride " + std::to_string(d) + " is " + std::to_string(t.strides[d]) +
                        "; must be >= 0");
        }

        std::vector<int64_t> strides = spec.strides;
        if (strides.empty()) {
            strides.assign(rank, 1);
            for (size_t d = rank - 1; d-- > 0;) strides[d] = strides[d + 1] * spec.shape[d + 1];
        } else if (strides.size() != rank) {
            Invalid(slots.Name(s) + " is compiled with " + std::to_string(strides.size()) + " strides for rank " +
                    std::to_string(rank));
        }
        slots.compiled_strides.push_back(std::move(strides));

        std::vector<int> loops = spec.loops;
        if (loops.empty()) {
            for (size_t d = 0; d < rank; ++d) loops.push_back(int(d));
        } else if (loops.size() != rank) {
            Invalid(slots.Name(s) + " maps " + std::to_string(loops.size()) + " dims to loops but has rank " +
                    std::to_string(rank));
        }
        for (size_t d = 0; d < rank; ++d) {
            // Loops index small per-loop tables; 64 is far beyond any real kernel.
            if (loops[d] < 0 || loops[d] >= 64)
                Invalid(slots.Name(s) + " dim " + std::to_string(d) + " maps to loop " + std::to_string(loops[d]) +
                        "; loops are 0 to 63");
            slots.loop_count = std::max(slots.loop_count, loops[d] + 1);
        }
        slots.loops.push_back(std::move(loops));
    }
    return slots;
}

void CheckLoopList(const Slots& slots, const std::vector<int>& list, const char* what) {
    for (int loop : list)
        if (loop < 0 || loop >= slots.loop_count)
            Invalid(std::string(what) + " names loop " + std::to_string(loop) + ", but the tensors index loops 0 to " +
                    std::to_string(slots.loop_count - 1));
}

bool Contains(const std::vector<int>& list, int v) { return std::find(list.begin(), list.end(), v) != list.end(); }

// A dim that broadcasts: size 1 compiled and actual. It is never tiled and
// never moves the tensor's address.
bool Broadcast(const Slots& slots, size_t s, size_t d) {
    return slots.compiled(s)[d] == 1 && slots.tensors[s].shape[d] == 1;
}

uint64_t MulChecked(uint64_t a, uint64_t b, const std::string& what) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) Invalid(what + " overflows 64 bits");
    return r;
}

const char* OpName(uint16_t opcode) {
    switch (opcode) {
    case SPYRE_PROG_OP_MATMUL: return "matmul";
    case SPYRE_PROG_OP_ADD: return "add";
    case SPYRE_PROG_OP_SUB: return "sub";
    case SPYRE_PROG_OP_MUL: return "mul";
    case SPYRE_PROG_OP_DIV: return "div";
    case SPYRE_PROG_OP_RELU: return "relu";
    case SPYRE_PROG_OP_GELU: return "gelu";
    case SPYRE_PROG_OP_SOFTMAX: return "softmax";
    case SPYRE_PROG_OP_REDUCE_SUM: return "reduce_sum";
    case SPYRE_PROG_OP_REDUCE_MAX: return "reduce_max";
    case SPYRE_PROG_OP_COPY: return "copy";
    case SPYRE_PROG_OP_FILL: return "fill";
    default: return "op";
    }
}

// What the program's own ops ask of tiling, checked against the metadata's
// loop map: a hand-edited plan may drop untileable_loops or map a dim to the
// wrong loop, and tiling by it would compute a wrong answer without an
// error. Two operand dims an op pairs (matmul's K in A and B, an
// elementwise op's dims, a copy's permuted dims) must sit on one loop when
// either is split, and the axis of a softmax or a reduce must not be split.
// Operands the program does not bind to a tensor, and leading dims an
// operand has beyond its tensor's rank, are never tiled. Malformed ops are
// skipped here: the device refuses them with its own error.
class ProgramLoops {
public:
    ProgramLoops(const Slots& slots, const ProgramImage& image) : slots_(slots), image_(image) {
        slot_of_.assign(image.operands.size(), SIZE_MAX);
        for (const spyre_program_reloc& r : image.relocs)
            if (r.operand < image.operands.size() && r.slot < slots.loops.size()) slot_of_[r.operand] = r.slot;
    }

    // Throws when an op pairs dims the loop map puts apart and one of them
    // is split (`split[loop]`).
    void CheckPairs(const std::vector<bool>& split) const {
        for (size_t i = 0; i < image_.ops.size(); ++i) {
            const spyre_program_op& op = image_.ops[i];
            auto pair = [&](int a, unsigned da, int b, unsigned db) {
                const Dim x = At(op, a, da), y = At(op, b, db);
                if (!x.known || !y.known || x.loop == y.loop) return;
                if (!(x.loop >= 0 && split[size_t(x.loop)]) && !(y.loop >= 0 && split[size_t(y.loop)])) return;
                Invalid("op " + std::to_string(i) + " (" + OpName(op.opcode) + ") pairs " + Text(x) + " with " + Text(y) +
                        ", but the compute's loop map puts them on different loops, and tiling would pair the wrong "
                        "elements; fix the tensors' loops in the plan");
            };
            const unsigned rank = Rank(op, 0);
            switch (op.opcode) {
            case SPYRE_PROG_OP_MATMUL:
                pair(0, 0, 2, 0);
                pair(0, 1, 1, 0);
                pair(1, 1, 2, 1);
                break;
            case SPYRE_PROG_OP_ADD:
            case SPYRE_PROG_OP_SUB:
            case SPYRE_PROG_OP_MUL:
            case SPYRE_PROG_OP_DIV:
                for (unsigned d = 0; d < Rank(op, 2); ++d)
                    for (int in = 0; in < 2; ++in)
                        if (Size(op, in, d) != 1) pair(in, d, 2, d);  // a size-1 dim broadcasts
                break;
            case SPYRE_PROG_OP_RELU:
            case SPYRE_PROG_OP_GELU:
            case SPYRE_PROG_OP_SOFTMAX:
                for (unsigned d = 0; d < rank; ++d) pair(0, d, 1, d);
                break;
            case SPYRE_PROG_OP_REDUCE_SUM:
            case SPYRE_PROG_OP_REDUCE_MAX:
                for (unsigned d = 0; d < rank; ++d)
                    if (d != op.u.axis.axis) pair(0, d, 1, d);
                break;
            case SPYRE_PROG_OP_COPY:
                for (unsigned d = 0; d < rank && d < SPYRE_PROGRAM_MAX_RANK; ++d) pair(1, d, 0, op.u.copy.perm[d]);
                break;
            default: break;
            }
        }
    }

    // Why `loop` must stay whole ("op 0 (softmax) needs all of tensor 0 (X)
    // dim 1 at once"), or empty.
    std::string WholeReason(int loop) const {
        for (size_t i = 0; i < image_.ops.size(); ++i) {
            const spyre_program_op& op = image_.ops[i];
            if (op.opcode != SPYRE_PROG_OP_SOFTMAX && op.opcode != SPYRE_PROG_OP_REDUCE_SUM &&
                op.opcode != SPYRE_PROG_OP_REDUCE_MAX)
                continue;
            const Dim x = At(op, 0, op.u.axis.axis);
            if (x.known && x.loop == loop)
                return "op " + std::to_string(i) + " (" + OpName(op.opcode) + ") needs all of " + Text(x) + " at once";
        }
        return {};
    }

private:
    // An operand dim: the tensor dim it is bound to and that dim's loop
    // (-1: never tiled); not known when the op or the dim is malformed.
    struct Dim {
        bool known = false;
        size_t slot = SIZE_MAX;
        unsigned dim = 0;
        int loop = -1;
    };
    const spyre_program_operand* Operand(const spyre_program_op& op, int which) const {
        const uint16_t index = op.operands[which];
        return index < image_.operands.size() ? &image_.operands[index] : nullptr;
    }
    unsigned Rank(const spyre_program_op& op, int which) const {
        const spyre_program_operand* o = Operand(op, which);
        return o ? std::min<unsigned>(o->rank, SPYRE_PROGRAM_MAX_RANK) : 0;
    }
    uint64_t Size(const spyre_program_op& op, int which, unsigned d) const {
        const spyre_program_operand* o = Operand(op, which);
        return o && d < Rank(op, which) ? o->shape[d] : 0;
    }
    Dim At(const spyre_program_op& op, int which, unsigned d) const {
        const spyre_program_operand* o = Operand(op, which);
        if (!o || d >= Rank(op, which)) return {};
        const size_t slot = slot_of_[op.operands[which]];
        if (slot == SIZE_MAX) return {true, slot, d, -1};
        const std::vector<int>& loops = slots_.loops[slot];
        const unsigned lead = Rank(op, which) > loops.size() ? unsigned(Rank(op, which) - loops.size()) : 0;
        if (d < lead) return {true, slot, d, -1};  // a leading dim of size 1 the tensor does not have
        if (d - lead >= loops.size()) return {};
        return {true, slot, d - lead, loops[d - lead]};
    }
    std::string Text(const Dim& x) const {
        if (x.slot == SIZE_MAX) return "an operand no tensor is bound to";
        return slots_.Name(x.slot) + " dim " + std::to_string(x.dim) +
               (x.loop < 0 ? " (never tiled)" : " (loop " + std::to_string(x.loop) + ")");
    }

    const Slots& slots_;
    const ProgramImage& image_;
    std::vector<size_t> slot_of_;  // per operand: the tensor slot bound to it, or SIZE_MAX
};

}  // namespace

TilingPlan PlanTiling(const SpyreCompute& compute, std::span<const TiledTensor> tensors) {
    const Slots slots = Validate(compute, tensors);
    CheckLoopList(slots, compute.reduction_loops, "reduction_loops");
    CheckLoopList(slots, compute.untileable_loops, "untileable_loops");
    const size_t nslots = tensors.size();
    const int nloops = slots.loop_count;

    // Tile of each loop: the compiled size of its non-1 dims (which must agree).
    std::vector<int64_t> tile(size_t(nloops), 1);
    std::vector<std::pair<size_t, size_t>> tile_from(size_t(nloops), {SIZE_MAX, 0});
    for (size_t s = 0; s < nslots; ++s)
        for (size_t d = 0; d < slots.loops[s].size(); ++d) {
            const int loop = slots.loops[s][d];
            const int64_t c = slots.compiled(s)[d];
            if (c == 1) continue;
            auto& from = tile_from[size_t(loop)];
            if (from.first == SIZE_MAX) {
                tile[size_t(loop)] = c;
                from = {s, d};
            } else if (tile[size_t(loop)] != c) {
                Invalid("compiled shapes disagree on " + slots.LoopName(loop) + ": " + slots.Name(from.first) + " dim " +
                        std::to_string(from.second) + " is " + std::to_string(tile[size_t(loop)]) + ", " +
                        slots.Name(s) + " dim " + std::to_string(d) + " is " + std::to_string(c));
            }
        }

    // Extent of each loop: the actual size of every non-broadcast dim on it.
    std::vector<int64_t> extent(size_t(nloops), 0);
    std::vector<std::pair<size_t, size_t>> extent_from(static_cast<size_t>(nloops));
    for (size_t s = 0; s < nslots; ++s)
        for (size_t d = 0; d < slots.loops[s].size(); ++d) {
            if (Broadcast(slots, s, d)) continue;
            const int loop = slots.loops[s][d];
            const int64_t c = slots.compiled(s)[d], a = tensors[s].shape[d];
            const std::string where = slots.Name(s) + " dim " + std::to_string(d);
            if (c == 1 && tile[size_t(loop)] > 1)
                Invalid(where + " is " + std::to_string(a) + ", but it is compiled as a broadcast dim of size 1 on " +
                        slots.LoopName(loop) + " (tile " + std::to_string(tile[size_t(loop)]) + ")");
            if (a < c)
                Invalid(where + " is " + std::to_string(a) + ", smaller than its compiled tile " + std::to_string(c));
            int64_t& e = extent[size_t(loop)];
            if (e == 0) {
                e = a;
                extent_from[size_t(loop)] = {s, d};
            } else if (e != a) {
                const auto [s0, d0] = extent_from[size_t(loop)];
                Invalid("tensors disagree on the extent of " + slots.LoopName(loop) + ": " + slots.Name(s0) + " dim " +
                        std::to_string(d0) + " is " + std::to_string(e) + ", " + where + " is " + std::to_string(a));
            }
        }

    // The binary is optional for planning (a remainder or strided variant
    // needs it later, in SpecializeProgram); when present it is checked.
    std::optional<ProgramImage> image;
    if (!compute.binary.empty()) image = ProgramImage::Decode(compute.binary);

    std::vector<TileLoop> every;
    std::vector<bool> split(size_t(nloops), false);
    for (int loop = 0; loop < nloops; ++loop) {
        const int64_t t = tile[size_t(loop)];
        const int64_t e = extent[size_t(loop)] ? extent[size_t(loop)] : t;
        // ceil(e / t) without e + t - 1, which wraps for an extent near INT64_MAX.
        every.push_back({loop, e, t, e / t + (e % t != 0), e % t, Contains(compute.reduction_loops, loop)});
        split[size_t(loop)] = every.back().count > 1;
    }
    std::optional<ProgramLoops> program;
    if (image) {
        program.emplace(slots, *image);
        program->CheckPairs(split);
    }

    TilingPlan plan;
    std::vector<TileLoop> tiled_plain, tiled_reduction;
    for (const TileLoop& l : every) {
        if (l.count == 1) continue;
        const int loop = l.loop;
        const std::string name = slots.LoopName(loop);
        const std::string split_text = " (extent " + std::to_string(l.extent) + ", tile " + std::to_string(l.tile) + ")";
        if (Contains(compute.untileable_loops, loop))
            Unsupported(name + " would be split" + split_text + ", but the compute marks it untileable");
        if (l.reduction) {
            // Accumulating partial sums is only right if every op is a matmul
            // (C += A*B); any other op would be applied to a partial result.
            if (!image)
                Unsupported(name + " is a reduction that would be split" + split_text +
                            ", but the compute carries no host copy of its binary to check it is a matmul");
            const bool all_matmul = !image->ops.empty() && std::all_of(image->ops.begin(), image->ops.end(), [](const auto& op) {
                return op.opcode == SPYRE_PROG_OP_MATMUL;
            });
            if (!all_matmul)
                Unsupported(name + " is a reduction that would be split" + split_text +
                            "; only a compute made of MATMUL ops can accumulate partial results");
        }
        for (size_t s = 0; s < nslots; ++s) {
            if (compute.tensors[s].role != TensorRole::Output) continue;
            bool varies = false;
            for (size_t d = 0; d < slots.loops[s].size(); ++d)
                varies |= slots.loops[s][d] == loop && !Broadcast(slots, s, d);
            if (l.reduction && varies)
                Invalid(name + " is listed as a reduction, but output " + slots.Name(s) + " is indexed by it");
            // Every tile would write the same output elements, each overwriting the last.
            if (!l.reduction && !varies)
                Unsupported(name + " would be split" + split_text + ", but output " + slots.Name(s) +
                            " does not vary along it; list it in reduction_loops (matmul) or untileable_loops");
        }
        if (program)
            if (const std::string why = program->WholeReason(loop); !why.empty())
                Unsupported(name + " would be split" + split_text + ", but " + why);
        (l.reduction ? tiled_reduction : tiled_plain).push_back(l);
    }
    plan.loops = std::move(tiled_plain);
    plan.loops.insert(plan.loops.end(), tiled_reduction.begin(), tiled_reduction.end());

    uint64_t total = 1;
    for (const TileLoop& l : plan.loops)
        if (__builtin_mul_overflow(total, uint64_t(l.count), &total) || total > uint64_t(kMaxTileIterations))
            Invalid("tiling needs more than " + std::to_string(kMaxTileIterations) + " iterations (" +
                    slots.LoopName(l.loop) + " alone has " + std::to_string(l.count) + " tiles); check the shapes");

    // Position of each loop in plan.loops, -1 if not split.
    std::vector<int> position(size_t(nloops), -1);
    for (size_t i = 0; i < plan.loops.size(); ++i) position[size_t(plan.loops[i].loop)] = int(i);

    // Bytes a tensor's address moves per tile step along each dim. The
    // largest offset (last tile on every loop) is checked for overflow once,
    // so the per-iteration sums below cannot overflow.
    std::vector<std::vector<uint64_t>> step(nslots);
    for (size_t s = 0; s < nslots; ++s) {
        const std::string what = slots.Name(s) + " offset";
        const uint64_t esize = ElementSize(tensors[s].dtype);
        uint64_t largest = 0;
        step[s].assign(slots.loops[s].size(), 0);
        for (size_t d = 0; d < slots.loops[s].size(); ++d) {
            const int pos = position[size_t(slots.loops[s][d])];
            if (pos < 0 || Broadcast(slots, s, d)) continue;
            const TileLoop& l = plan.loops[size_t(pos)];
            step[s][d] = MulChecked(MulChecked(uint64_t(l.tile), uint64_t(tensors[s].strides[d]), what), esize, what);
            if (__builtin_add_overflow(largest, MulChecked(uint64_t(l.count - 1), step[s][d], what), &largest))
                Invalid(what + " overflows 64 bits");
        }
    }

    // A stick-layout operand needs a 128-aligned address, so its tiles must
    // start at multiples of 128 bytes from the (aligned) base.
    if (image)
        for (const spyre_program_reloc& r : image->relocs) {
            if (r.operand >= image->operands.size() || r.slot >= nslots) continue;  // SpecializeProgram reports it
            if (image->operands[r.operand].layout != SPYRE_LAYOUT_STICK) continue;
            for (size_t d = 0; d < step[r.slot].size(); ++d)
                if (step[r.slot][d] % SPYRE_STICK_BYTES)
                    Invalid(slots.Name(r.slot) + ": the compiled program reads it as a stick-layout operand, "
                            "whose tiles must start at multiples of " + std::to_string(SPYRE_STICK_BYTES) +
                            " bytes, but its tiles along dim " + std::to_string(d) + " start every " +
                            std::to_string(step[r.slot][d]) + " bytes (compile the kernel with tiles a stick wide, "
                            "or for the dense layout)");
        }

    // Strides matter only on dims longer than 1.
    for (size_t s = 0; s < nslots; ++s)
        for (size_t d = 0; d < slots.loops[s].size(); ++d)
            if (slots.compiled(s)[d] > 1 && tensors[s].strides[d] != slots.compiled_strides[s][d]) plan.strides_match = false;

    // Variants are keyed by which split loops are on their partial last tile,
    // plus whether the step accumulates: that determines every tile shape.
    std::map<std::vector<bool>, uint32_t> variant_of;
    std::vector<int64_t> index(plan.loops.size(), 0);
    plan.iterations.reserve(size_t(total));
    for (uint64_t it = 0; it < total; ++it) {
        std::vector<bool> key(plan.loops.size() + 1, false);
        bool accumulate = false;
        for (size_t i = 0; i < plan.loops.size(); ++i) {
            key[i] = plan.loops[i].remainder != 0 && index[i] == plan.loops[i].count - 1;
            accumulate |= plan.loops[i].reduction && index[i] > 0;
        }
        key.back() = accumulate;

        auto [found, inserted] = variant_of.try_emplace(key, uint32_t(plan.variants.size()));
        if (inserted) {
            TileVariant v;
            v.accumulate = accumulate;
            bool partial = false;
            for (size_t s = 0; s < nslots; ++s) {
                std::vector<int64_t> shape = slots.compiled(s);
                for (size_t d = 0; d < shape.size(); ++d) {
                    const int pos = position[size_t(slots.loops[s][d])];
                    if (pos >= 0 && key[size_t(pos)] && !Broadcast(slots, s, d)) {
                        shape[d] = plan.loops[size_t(pos)].remainder;
                        partial = true;
                    }
                }
                v.shapes.push_back(std::move(shape));
            }
            v.compiled = !accumulate && !partial && plan.strides_match;
            plan.variants.push_back(std::move(v));
        }

        TileIteration iteration;
        iteration.index = index;
        iteration.variant = found->second;
        iteration.byte_offsets.assign(nslots, 0);
        for (size_t s = 0; s < nslots; ++s)
            for (size_t d = 0; d < step[s].size(); ++d)
                if (step[s][d]) iteration.byte_offsets[s] += uint64_t(index[size_t(position[size_t(slots.loops[s][d])])]) * step[s][d];
        plan.iterations.push_back(std::move(iteration));

        // Odometer: the innermost (last) loop advances fastest.
        for (size_t i = plan.loops.size(); i-- > 0;) {
            if (++index[i] < plan.loops[i].count) break;
            index[i] = 0;
        }
    }
    plan.exact = plan.iterations.size() == 1 && plan.strides_match;
    return plan;
}

std::vector<uint8_t> SpecializeProgram(std::span<const uint8_t> binary, const SpyreCompute& compute,
                                       std::span<const TiledTensor> tensors, const TileVariant& variant) {
    const Slots slots = Validate(compute, tensors);
    if (variant.shapes.size() != tensors.size())
        Invalid("variant has " + std::to_string(variant.shapes.size()) + " tile shapes for " +
                std::to_string(tensors.size()) + " tensor slots");
    for (size_t s = 0; s < tensors.size(); ++s) {
        const std::vector<int64_t>& shape = variant.shapes[s];
        if (shape.size() != tensors[s].shape.size())
            Invalid("variant tile of " + slots.Name(s) + " has rank " + std::to_string(shape.size()) + ", expected " +
                    std::to_string(tensors[s].shape.size()));
        for (size_t d = 0; d < shape.size(); ++d)
            if (shape[d] < 1 || shape[d] > tensors[s].shape[d])
                Invalid("variant tile of " + slots.Name(s) + " dim " + std::to_string(d) + " is " +
                        std::to_string(shape[d]) + "; must be 1 to the tensor's " + std::to_string(tensors[s].shape[d]));
    }

    ProgramImage image = ProgramImage::Decode(binary);
    for (const spyre_program_reloc& r : image.relocs) {
        if (r.slot >= tensors.size())
            Invalid("program relocates slot " + std::to_string(r.slot) + ", but the compute has " +
                    std::to_string(tensors.size()) + " tensor slots");
        if (r.operand >= image.operands.size())
            Invalid("program relocates operand " + std::to_string(r.operand) + " of " +
                    std::to_string(image.operands.size()));
        spyre_program_operand& o = image.operands[r.operand];
        const std::vector<int64_t>& shape = variant.shapes[r.slot];
        const TiledTensor& t = tensors[r.slot];
        if (o.rank < shape.size() || o.rank > SPYRE_PROGRAM_MAX_RANK)
            Invalid("program operand " + std::to_string(r.operand) + " has rank " + std::to_string(o.rank) +
                    ", too small for " + slots.Name(r.slot) + " of rank " + std::to_string(shape.size()));
        if (o.dtype != ProgramDType(t.dtype))
            Invalid("program operand " + std::to_string(r.operand) + " has a different dtype than " +
                    slots.Name(r.slot) + " (" + ToString(t.dtype) + ")");
        // Tensors sit right-aligned in the operand's rank (leading dims of size 1).
        const size_t lead = o.rank - shape.size();
        for (size_t d = 0; d < shape.size(); ++d) {
            o.shape[lead + d] = uint64_t(shape[d]);
            // A size-1 dim's stride is never used; keeping the compiled one
            // keeps layout constraints (sticks) satisfied.
            if (shape[d] > 1) o.strides[lead + d] = uint64_t(t.strides[d]);
        }
        // The device's rule for a stick operand (rows fill whole sticks), here
        // where the tensor can still be named, not as a fault after enqueue.
        if (!spyre_stick_strides_ok(&o))
            Invalid(slots.Name(r.slot) + " is bound to a stick-layout operand, but its rows do not fill whole " +
                        std::to_string(SPYRE_STICK_BYTES) + "-byte sticks (strides " + ShapeText(t.strides) +
                        " elements): give it the Sticks layout");
    }
    if (variant.accumulate)
        for (spyre_program_op& op : image.ops)
            if (op.opcode == SPYRE_PROG_OP_MATMUL) op.flags |= SPYRE_PROG_OPF_ACCUMULATE;
    return image.Encode();
}

std::string Describe(const TilingPlan& plan) {
    std::string s = "tiling: " + std::to_string(plan.iterations.size()) + " iteration" +
                    (plan.iterations.size() == 1 ? "" : "s") + ", " + std::to_string(plan.variants.size()) + " variant" +
                    (plan.variants.size() == 1 ? "" : "s") + (plan.exact ? ", exact" : "") +
                    (plan.strides_match ? "" : ", strides differ from the compiled ones");
    for (const TileLoop& l : plan.loops) {
        s += "\n  loop " + std::to_string(l.loop) + ": extent " + std::to_string(l.extent) + " = " +
             std::to_string(l.count) + " tiles of " + std::to_string(l.tile);
        if (l.remainder) s += " (last " + std::to_string(l.remainder) + ")";
        if (l.reduction) s += ", reduction";
    }
    for (size_t v = 0; v < plan.variants.size(); ++v) {
        s += "\n  variant " + std::to_string(v) + ":";
        for (const auto& shape : plan.variants[v].shapes) s += " " + ShapeText(shape);
        if (plan.variants[v].accumulate) s += " accumulate";
        if (plan.variants[v].compiled) s += " (compiled binary)";
    }
    return s;
}

}  // namespace spyre
