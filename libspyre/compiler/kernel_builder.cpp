// SPDX-License-Identifier: Apache-2.0
#include "spyre/compiler/kernel_builder.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numeric>

#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre {

namespace {

[[noreturn]] void Invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

void CheckShape(const std::vector<int64_t>& shape, const char* what) {
    if (shape.empty() || shape.size() > SPYRE_PROGRAM_MAX_RANK)
        Invalid(std::string(what) + " has rank " + std::to_string(shape.size()) + "; kernels take 1 to 8 dims");
    for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] < 1)
            Invalid("dimension " + std::to_string(d) + " of " + what + " is " + std::to_string(shape[d]) + "; must be >= 1");
}

void CheckArithmetic(DType dtype, const char* kernel) {
    CheckDType(dtype, kernel);
    if (dtype != DType::FP16 && dtype != DType::FP32)
        Invalid(std::string(kernel) + " takes fp16 or fp32, not " + ToString(dtype));
}

// The tensor as the device sees it, right-aligned into `rank` dims (leading dims of size 1).
spyre_program_operand Describe(const KernelTensor& t, size_t rank) {
    spyre_program_operand o{};
    o.dtype = ProgramDType(t.dtype);
    o.rank = uint8_t(rank);
    o.layout = t.layout == TensorLayout::Sticks ? SPYRE_LAYOUT_STICK : SPYRE_LAYOUT_STRIDED;
    const size_t lead = rank - t.shape.size();
    std::fill(o.shape, o.shape + lead, 1);
    for (size_t i = 0; i < t.shape.size(); ++i) {
        o.shape[lead + i] = uint64_t(t.shape[i]);
        o.strides[lead + i] = uint64_t(t.strides[i]);
    }
    return o;
}

spyre_program_op Op(uint16_t opcode, std::initializer_list<uint16_t> operands) {
    spyre_program_op op{};
    op.opcode = opcode;
    std::fill(std::begin(op.operands), std::end(op.operands), uint16_t(SPYRE_OPERAND_NONE));
    std::copy(operands.begin(), operands.end(), op.operands);
    return op;
}

// A one-op program over the tensors (inputs then outputs): operand i is
// tensor i, relocated from correction slot i. Plus its correction program.
BuiltKernel Finish(std::string name, std::vector<KernelTensor> inputs, std::vector<KernelTensor> outputs,
                   std::vector<spyre_program_operand> operands, const spyre_program_op& op) {
    BuiltKernel k;
    k.name = std::move(name);
    k.inputs = std::move(inputs);
    k.outputs = std::move(outputs);
    const uint16_t n = uint16_t(k.tensor_count());
    ProgramImage program;
    program.ops = {op};
    program.operands = std::move(operands);
    for (uint16_t i = 0; i < n; ++i) program.relocs.push_back(spyre_program_reloc{i, i, 0});
    program.slot_count = n;
    k.program = program.Encode();

    ProgramImage correction;
    spyre_program_op correct = Op(SPYRE_PROG_OP_CORRECT, {});
    correct.u.correct.entry_count = n;
    correction.ops = {correct};
    k.correction = correction.Encode();
    k.correction_input_size = uint64_t(n) * sizeof(uint64_t);
    return k;
}

// Loops 0..rank-1: dim i of the tensor is loop i.
std::vector<int> IdentityLoops(size_t rank) {
    std::vector<int> loops(rank);
    std::iota(loops.begin(), loops.end(), 0);
    return loops;
}

// A tensor right-aligned against an iteration space of `rank` loops (numpy broadcasting).
std::vector<int> RightAlignedLoops(size_t tensor_rank, size_t rank) {
    std::vector<int> loops(tensor_rank);
    std::iota(loops.begin(), loops.end(), int(rank - tensor_rank));
    return loops;
}

// One input, one output of the same shape.
BuiltKernel Unary(const KernelBuilder& b, const char* what, uint16_t opcode, const std::vector<int64_t>& shape,
                  DType dtype, uint32_t axis = 0) {
    CheckShape(shape, what);
    CheckArithmetic(dtype, what);
    KernelTensor x = b.Tensor(shape, dtype);
    x.loops = IdentityLoops(shape.size());
    spyre_program_op op = Op(opcode, {0, 1});
    op.u.axis.axis = axis;
    return Finish(std::string(what) + " " + ToString(dtype) + " " + ShapeText(shape), {x}, {x},
                  {Describe(x, shape.size()), Describe(x, shape.size())}, op);
}

// A fill value as a person writes it, the shortest text that reads back
// as it ("1e+300", not 300 digits).
std::string FillValue(double value) {
    char text[32];
    const auto [end, error] = std::to_chars(text, text + sizeof text, value);
    return error == std::errc() ? std::string(text, end) : std::to_string(value);
}

// A finite fill value that rounds to infinity in `dtype` is refused, as an
// integer fill out of range is (1e10 as fp16 filled infinities).
void CheckFinite(double value, bool rounded_to_infinity, DType dtype) {
    if (std::isfinite(value) && rounded_to_infinity)
        Invalid("fill value " + FillValue(value) + " is not representable as " + ToString(dtype) +
                " (it overflows to infinity)");
}

uint64_t FillBits(double value, DType dtype) {
    switch (dtype) {
    case DType::FP32: {
        const float f = float(value);
        CheckFinite(value, std::isinf(f), dtype);
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        return bits;
    }
    case DType::FP16: {
        const _Float16 h = static_cast<_Float16>(value);  // one rounding, to nearest even
        CheckFinite(value, std::isinf(float(h)), dtype);
        uint16_t bits;
        std::memcpy(&bits, &h, sizeof bits);
        return bits;
    }
    case DType::BF16: {
        const float f = float(value);
        uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        if (std::isnan(f)) return (bits >> 16) | 0x40;  // stays a (quiet) NaN
        CheckFinite(value, std::fabs(value) >= std::ldexp(1.0, 128) - std::ldexp(1.0, 119), dtype);
        // Rounded as from the double, once. Through float it is rounded
        // twice, which errs only where float lands on a bf16 midpoint
        // (low half 0x8000) that the double was not on: the double's own
        // side of it decides (1 + 2^-8 + 2^-40 filled 1.0).
        if ((bits & 0xFFFF) == 0x8000 && double(f) != value)
            return std::fabs(value) > std::fabs(double(f)) ? (bits >> 16) + 1 : bits >> 16;
        return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;  // round to nearest even
    }
    case DType::INT8:
    case DType::INT32: {
        const double lo = dtype == DType::INT8 ? INT8_MIN : INT32_MIN;
        const double hi = dtype == DType::INT8 ? INT8_MAX : INT32_MAX;
        if (value != std::trunc(value) || value < lo || value > hi)
            Invalid("fill value " + FillValue(value) + " is not representable as " + ToString(dtype));
        const uint64_t mask = dtype == DType::INT8 ? 0xFFu : 0xFFFFFFFFu;
        return uint64_t(int64_t(value)) & mask;
    }
    }
    Invalid("unknown dtype");
}

void CheckAddressCount(const BuiltKernel& k, size_t count) {
    if (count != k.tensor_count())
        Invalid(k.name + " has " + std::to_string(k.tensor_count()) + " tensors, got " + std::to_string(count) +
                " addresses");
}

}  // namespace

std::vector<uint8_t> BuiltKernel::CorrectionInput(std::span<const uint64_t> addresses) const {
    CheckAddressCount(*this, addresses.size());
    std::vector<uint8_t> out(addresses.size() * sizeof(uint64_t));
    std::memcpy(out.data(), addresses.data(), out.size());  // little-endian hosts (x86_64, aarch64)
    return out;
}

std::vector<uint8_t> BuiltKernel::Bind(std::span<const uint64_t> addresses) const {
    CheckAddressCount(*this, addresses.size());
    ProgramImage image = ProgramImage::Decode(program);
    for (const spyre_program_reloc& r : image.relocs) image.operands[r.operand].addr = addresses[r.slot];
    return image.Encode();
}

KernelTensor KernelBuilder::Tensor(const std::vector<int64_t>& shape, DType dtype) const {
    CheckShape(shape, "tensor");
    TensorFootprint f = FootprintOf(shape, dtype, layout_);
    return KernelTensor{shape, std::move(f.strides), dtype, layout_, f.bytes};
}

BuiltKernel KernelBuilder::Matmul(int64_t m, int64_t k, int64_t n, DType dtype, bool accumulate) const {
    const std::pair<const char*, int64_t> dims[] = {{"m", m}, {"k", k}, {"n", n}};
    for (auto [name, v] : dims)
        if (v < 1) Invalid(std::string("matmul dimension ") + name + " is " + std::to_string(v) + "; must be >= 1");
    CheckArithmetic(dtype, "matmul");
    KernelTensor a = Tensor({m, k}, dtype), b = Tensor({k, n}, dtype), c = Tensor({m, n}, dtype);
    a.loops = {0, 1};  // loops m=0, k=1, n=2
    b.loops = {1, 2};
    c.loops = {0, 2};
    spyre_program_op op = Op(SPYRE_PROG_OP_MATMUL, {0, 1, 2});
    op.flags = accumulate ? SPYRE_PROG_OPF_ACCUMULATE : 0;
    BuiltKernel kernel = Finish("matmul " + std::string(ToString(dtype)) + " " + ShapeText({m, k}) + "x" + ShapeText({k, n}) +
                      (accumulate ? " accumulate" : ""),
                  {a, b}, {c}, {Describe(a, 2), Describe(b, 2), Describe(c, 2)}, op);
    kernel.reduction_loops = {1};
    return kernel;
}

BuiltKernel KernelBuilder::Elementwise(ElementwiseOp op, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                       DType dtype) const {
    // An op past the named ones read past the table: a garbage opcode, or
    // a std::logic_error from a null name.
    if (int(op) < int(ElementwiseOp::Add) || int(op) > int(ElementwiseOp::Div))
        Invalid("elementwise op " + std::to_string(int(op)) + " is none of Add, Sub, Mul, Div");
    CheckShape(a, "A");
    CheckShape(b, "B");
    CheckArithmetic(dtype, "elementwise");
    const size_t rank = std::max(a.size(), b.size());
    std::vector<int64_t> c(rank);
    for (size_t i = 0; i < rank; ++i) {  // i counts from the right
        const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
        const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
        if (da != db && da != 1 && db != 1)
            Invalid("A " + ShapeText(a) + " and B " + ShapeText(b) + " do not broadcast: dimension " +
                    std::to_string(rank - 1 - i) + " of the result is " + std::to_string(da) + " in A and " +
                    std::to_string(db) + " in B");
        c[rank - 1 - i] = std::max(da, db);
    }
    static constexpr struct {
        uint16_t opcode;
        const char* name;
    } kOps[] = {{SPYRE_PROG_OP_ADD, "add"}, {SPYRE_PROG_OP_SUB, "sub"}, {SPYRE_PROG_OP_MUL, "mul"}, {SPYRE_PROG_OP_DIV, "div"}};
    const auto& which = kOps[int(op)];
    KernelTensor ta = Tensor(a, dtype), tb = Tensor(b, dtype), tc = Tensor(c, dtype);
    ta.loops = RightAlignedLoops(a.size(), rank);
    tb.loops = RightAlignedLoops(b.size(), rank);
    tc.loops = IdentityLoops(rank);
    return Finish(std::string(which.name) + " " + ToString(dtype) + " " + ShapeText(a) + " " + ShapeText(b), {ta, tb},
                  {tc}, {Describe(ta, rank), Describe(tb, rank), Describe(tc, rank)}, Op(which.opcode, {0, 1, 2}));
}

BuiltKernel KernelBuilder::Relu(const std::vector<int64_t>& shape, DType dtype) const {
    return Unary(*this, "relu", SPYRE_PROG_OP_RELU, shape, dtype);
}

BuiltKernel KernelBuilder::Gelu(const std::vector<int64_t>& shape, DType dtype) const {
    return Unary(*this, "gelu", SPYRE_PROG_OP_GELU, shape, dtype);
}

BuiltKernel KernelBuilder::Softmax(const std::vector<int64_t>& shape, DType dtype) const {
    CheckShape(shape, "softmax input");
    BuiltKernel kernel = Unary(*this, "softmax", SPYRE_PROG_OP_SOFTMAX, shape, dtype, uint32_t(shape.size() - 1));
    kernel.untileable_loops = {int(shape.size() - 1)};  // every row needs all of its elements at once
    return kernel;
}

BuiltKernel KernelBuilder::Reduce(ReduceKind kind, const std::vector<int64_t>& shape, int axis, DType dtype) const {
    // A kind past the named ones built a reduce_max.
    if (kind != ReduceKind::Sum && kind != ReduceKind::Max)
        Invalid("reduce kind " + std::to_string(int(kind)) + " is none of Sum, Max");
    const char* what = kind == ReduceKind::Sum ? "reduce_sum" : "reduce_max";
    CheckShape(shape, what);
    CheckArithmetic(dtype, what);
    const int rank = int(shape.size());
    if (axis < -rank || axis >= rank)
        Invalid(std::string(what) + " axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    if (axis < 0) axis += rank;
    std::vector<int64_t> out = shape;
    out[size_t(axis)] = 1;
    KernelTensor x = Tensor(shape, dtype), y = Tensor(out, dtype);
    x.loops = IdentityLoops(shape.size());
    y.loops = IdentityLoops(shape.size());  // the kept size-1 dim sits on the reduction loop
    spyre_program_op op = Op(kind == ReduceKind::Sum ? SPYRE_PROG_OP_REDUCE_SUM : SPYRE_PROG_OP_REDUCE_MAX, {0, 1});
    op.u.axis.axis = uint32_t(axis);
    BuiltKernel kernel = Finish(std::string(what) + " " + ToString(dtype) + " " + ShapeText(shape) + " axis " +
                                    std::to_string(axis),
                                {x}, {y}, {Describe(x, shape.size()), Describe(y, shape.size())}, op);
    kernel.reduction_loops = {axis};
    kernel.untileable_loops = {axis};  // REDUCE overwrites Y: partial results cannot accumulate
    return kernel;
}

BuiltKernel KernelBuilder::Transpose(const std::vector<int64_t>& shape, const std::vector<int>& perm, DType dtype) const {
    CheckShape(shape, "transpose input");
    if (perm.size() != shape.size())
        Invalid("transpose perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(shape.size()));
    std::vector<bool> seen(shape.size());
    std::vector<int64_t> out(shape.size());
    spyre_program_op op = Op(SPYRE_PROG_OP_COPY, {0, 1});
    for (size_t i = 0; i < perm.size(); ++i) {
        if (perm[i] < 0 || size_t(perm[i]) >= shape.size() || seen[size_t(perm[i])])
            Invalid("transpose perm entry " + std::to_string(i) + " (" + std::to_string(perm[i]) +
                    ") makes it no permutation of the dims");
        seen[size_t(perm[i])] = true;
        out[i] = shape[size_t(perm[i])];
        op.u.copy.perm[i] = uint8_t(perm[i]);
    }
    KernelTensor x = Tensor(shape, dtype), y = Tensor(out, dtype);
    x.loops = IdentityLoops(shape.size());
    y.loops.assign(perm.begin(), perm.end());  // output dim i walks input dim perm[i]
    const bool identity = std::is_sorted(perm.begin(), perm.end());
    return Finish(std::string(identity ? "copy " : "transpose ") + ToString(dtype) + " " + ShapeText(shape), {x}, {y},
                  {Describe(x, shape.size()), Describe(y, shape.size())}, op);
}

BuiltKernel KernelBuilder::Copy(const std::vector<int64_t>& shape, DType dtype) const {
    CheckShape(shape, "copy input");  // here, or Transpose's check names a transpose
    std::vector<int> identity(shape.size());
    std::iota(identity.begin(), identity.end(), 0);
    return Transpose(shape, identity, dtype);
}

BuiltKernel KernelBuilder::Fill(const std::vector<int64_t>& shape, double value, DType dtype) const {
    CheckShape(shape, "fill output");
    KernelTensor y = Tensor(shape, dtype);
    y.loops = IdentityLoops(shape.size());
    spyre_program_op op = Op(SPYRE_PROG_OP_FILL, {0});
    op.u.fill.value = FillBits(value, dtype);
    return Finish("fill " + std::string(ToString(dtype)) + " " + ShapeText(shape) + " = " + std::to_string(value), {},
                  {y}, {Describe(y, shape.size())}, op);
}

}  // namespace spyre
