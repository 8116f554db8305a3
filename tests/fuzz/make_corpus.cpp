// SPDX-License-Identifier: Apache-2.0
// Writes the fuzz target's seed corpus: one valid program per kind of op,
// in both layouts, with addresses inside the fuzz target's 1 MiB window.
// Regenerate with `ninja -C build fuzz-corpus` after a format change.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "spyre/kernel_builder.hpp"
#include "spyre/program_image.hpp"

using namespace spyre;

namespace {

void Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir + "/" + name + ".bin", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + dir + "/" + name + ".bin");
}

// The kernel's program with its tensors placed one after another from 64 KiB.
std::vector<uint8_t> Placed(const BuiltKernel& k) {
    std::vector<uint64_t> addrs;
    uint64_t next = 64 << 10;
    auto place = [&](const KernelTensor& t) {
        addrs.push_back(next);
        next += (t.bytes + 127) / 128 * 128;
    };
    for (const KernelTensor& t : k.inputs) place(t);
    for (const KernelTensor& t : k.outputs) place(t);
    return k.Bind(addrs);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    for (TensorLayout layout : {TensorLayout::Dense, TensorLayout::Sticks}) {
        const KernelBuilder b(layout);
        const std::string tag = layout == TensorLayout::Dense ? "_dense" : "_sticks";
        Write(dir, "matmul_fp16_acc" + tag, Placed(b.Matmul(16, 24, 8, DType::FP16, true)));
        Write(dir, "div_broadcast" + tag, Placed(b.Elementwise(ElementwiseOp::Div, {3, 1, 5}, {4, 1}, DType::FP32)));
        Write(dir, "gelu" + tag, Placed(b.Gelu({7, 9}, DType::FP32)));
        Write(dir, "softmax" + tag, Placed(b.Softmax({2, 3, 70}, DType::FP16)));
        Write(dir, "reduce_max" + tag, Placed(b.Reduce(ReduceKind::Max, {6, 5, 9}, 1, DType::FP32)));
        Write(dir, "transpose" + tag, Placed(b.Transpose({2, 3, 4}, {2, 0, 1}, DType::INT8)));
        Write(dir, "fill" + tag, Placed(b.Fill({3, 3}, 7.0, DType::INT32)));
    }
    BuiltKernel k = KernelBuilder().Relu({4}, DType::FP32);
    SetCorrectionTarget(k.correction, 4096, 8192);
    Write(dir, "correction", k.correction);
    Write(dir, "empty", ProgramImage{}.Encode());
    return 0;
}
