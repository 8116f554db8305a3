// SPDX-License-Identifier: Apache-2.0
// ExecutionPlan and its on-disk compiler output: kernel loop maps, a byte-exact
// round trip kernel -> directory -> plan, the content hash, a table of
// malformed manifests and blobs (each must name the file and the field), and
// a fuzz-ish loop that may only ever see spyre::Error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "spyre/error.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/uapi/spyre_program.h"
#include "spyre/compiler/plan_writer.hpp"

using namespace spyre;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
public:
    TempDir() {
        static int counter = 0;
        path_ = fs::temp_directory_path() /
                ("spyre_plan_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

std::string Crc(const std::vector<uint8_t>& bytes) {
    char text[11];
    std::snprintf(text, sizeof text, "0x%08x", uapi::Crc32(0, bytes.data(), bytes.size()));
    return text;
}

// Edits the manifest as JSON.
void Edit(CompilerOutput& out, const std::function<void(json&)>& change) {
    json j = json::parse(out.manifest);
    change(j);
    out.manifest = j.dump(2);
}

// What the parser did with an input: parsed it, or rejected it with a spyre::Error.
// Any other exception fails the test.
enum class Outcome { Parsed, Rejected };
Outcome TryParse(const CompilerOutput& out, std::string* message = nullptr) {
    try {
        ExecutionPlan plan(out);
        return Outcome::Parsed;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        if (message) *message = e.what();
        return Outcome::Rejected;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "not a spyre::Error: " << e.what();
    } catch (...) {
        ADD_FAILURE() << "not a std::exception";
    }
    return Outcome::Rejected;
}

void ExpectSameTensor(const TensorSpec& spec, const KernelTensor& kernel, TensorRole role, const std::string& name) {
    EXPECT_EQ(spec.name, name);
    EXPECT_EQ(spec.shape, kernel.shape) << name;
    EXPECT_EQ(spec.strides, kernel.strides) << name;
    EXPECT_EQ(spec.dtype, kernel.dtype) << name;
    EXPECT_EQ(spec.role, role) << name;
    EXPECT_EQ(spec.loops, kernel.loops) << name;
    EXPECT_EQ(spec.bytes, kernel.bytes) << name;
}

std::vector<std::pair<std::string, BuiltKernel>> SampleKernels() {
    const KernelBuilder dense;
    const KernelBuilder sticks(TensorLayout::Sticks);
    return {
        {"matmul", sticks.Matmul(64, 32, 48, DType::FP16, true)},
        {"add", dense.Elementwise(ElementwiseOp::Add, {4, 1, 8}, {3, 8}, DType::FP32)},
        {"softmax", dense.Softmax({5, 7}, DType::FP32)},
        {"reduce", dense.Reduce(ReduceKind::Sum, {6, 9, 4}, 1, DType::FP16)},
        {"transpose", dense.Transpose({2, 3, 4}, {2, 0, 1}, DType::INT8)},
        {"fill", dense.Fill({3, 3}, 1.5, DType::BF16)},
    };
}

}  // namespace

// ---------------------------------------------------------------- loop maps

TEST(KernelLoops, MatmulMapsMKN) {
    const BuiltKernel k = KernelBuilder().Matmul(8, 4, 2, DType::FP32);
    EXPECT_EQ(k.inputs[0].loops, (std::vector<int>{0, 1}));
    EXPECT_EQ(k.inputs[1].loops, (std::vector<int>{1, 2}));
    EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{0, 2}));
    EXPECT_EQ(k.reduction_loops, std::vector<int>{1});
    EXPECT_TRUE(k.untileable_loops.empty());
}

TEST(KernelLoops, ElementwiseRightAlignsInputsOnTheOutputLoops) {
    const BuiltKernel k = KernelBuilder().Elementwise(ElementwiseOp::Mul, {4, 1, 8}, {3, 8}, DType::FP32);
    EXPECT_EQ(k.outputs[0].shape, (std::vector<int64_t>{4, 3, 8}));
    EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(k.inputs[0].loops, (std::vector<int>{0, 1, 2}));  // its size-1 dim shares loop 1
    EXPECT_EQ(k.inputs[1].loops, (std::vector<int>{1, 2}));
    EXPECT_TRUE(k.reduction_loops.empty());
}

TEST(KernelLoops, UnaryAndCopyAndFillAreIdentity) {
    const KernelBuilder b;
    for (const BuiltKernel& k : {b.Relu({2, 3}, DType::FP32), b.Gelu({2, 3}, DType::FP16), b.Copy({2, 3}, DType::INT32)}) {
        EXPECT_EQ(k.inputs[0].loops, (std::vector<int>{0, 1})) << k.name;
        EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{0, 1})) << k.name;
        EXPECT_TRUE(k.untileable_loops.empty()) << k.name;
    }
    EXPECT_EQ(b.Fill({2, 3, 4}, 0, DType::FP32).outputs[0].loops, (std::vector<int>{0, 1, 2}));
}

TEST(KernelLoops, SoftmaxAxisIsUntileable) {
    const BuiltKernel k = KernelBuilder().Softmax({4, 5, 6}, DType::FP32);
    EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(k.untileable_loops, std::vector<int>{2});
    EXPECT_TRUE(k.reduction_loops.empty());
}

TEST(KernelLoops, ReduceAxisIsAnUntileableReduction) {
    const BuiltKernel k = KernelBuilder().Reduce(ReduceKind::Max, {4, 5, 6}, -2, DType::FP32);
    EXPECT_EQ(k.inputs[0].loops, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(k.outputs[0].shape, (std::vector<int64_t>{4, 1, 6}));
    EXPECT_EQ(k.reduction_loops, std::vector<int>{1});
    EXPECT_EQ(k.untileable_loops, std::vector<int>{1});
}

TEST(KernelLoops, TransposeOutputDimWalksTheInputDimOfPerm) {
    const BuiltKernel k = KernelBuilder().Transpose({2, 3, 4}, {2, 0, 1}, DType::FP32);
    EXPECT_EQ(k.inputs[0].loops, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(k.outputs[0].loops, (std::vector<int>{2, 0, 1}));
    EXPECT_EQ(k.outputs[0].shape, (std::vector<int64_t>{4, 2, 3}));
}

// ---------------------------------------------------------------- operation

TEST(Operation, ConstructorsAndStepNames) {
    const DeviceHandle h = PFDeviceHandle{0x1000};
    std::vector<PreProcessCompute> steps = {PreProcessCompute::CopyToDevice{nullptr, h, 8},
                                            PreProcessCompute::DeviceLaunch{h, 0},
                                            PreProcessCompute::CopyFromDevice{nullptr, h, 8}};
    EXPECT_STREQ(steps[0].name(), "CopyToDevice");
    EXPECT_STREQ(steps[1].name(), "DeviceLaunch");
    EXPECT_STREQ(steps[2].name(), "CopyFromDevice");

    SpyreCompute compute;
    compute.name = "mm";
    const Operation only_compute(compute);
    EXPECT_TRUE(only_compute.compute().has_value());
    EXPECT_TRUE(only_compute.preprocess().empty());
    EXPECT_EQ(only_compute.name, "mm");

    const Operation both(compute, steps);
    EXPECT_EQ(both.preprocess().size(), 3u);
    EXPECT_TRUE(both.compute().has_value());

    const Operation only_steps(steps);
    EXPECT_FALSE(only_steps.compute().has_value());
    EXPECT_EQ(only_steps.preprocess().size(), 3u);
}

TEST(ExecutionPlan, DefaultIsEmpty) {
    const ExecutionPlan plan;
    EXPECT_TRUE(plan.operations.empty());
    EXPECT_TRUE(plan.tensor_input_metadata.empty());
    EXPECT_TRUE(plan.init_packets.empty());
    EXPECT_TRUE(plan.correction_metadata().empty());
    EXPECT_EQ(plan.content_hash, 0u);
}

// ---------------------------------------------------------------- round trip

TEST(ExecutionPlan, RoundTripThroughADirectoryKeepsEveryByte) {
    const auto kernels = SampleKernels();
    const InitPacket init{"weights", KernelBuilder().Fill({16}, 1.0, DType::FP32).program};
    const CompilerOutput written = CompilerOutputFromKernels("sample", kernels, {init});
    TempDir dir;
    written.WriteDirectory(dir.path());
    const CompilerOutput read = CompilerOutput::ReadDirectory(dir.path());
    EXPECT_EQ(read.manifest, written.manifest);
    EXPECT_EQ(read.blobs, written.blobs);
    EXPECT_EQ(read.origin, dir.path().string());
    EXPECT_EQ(read.ContentHash(), written.ContentHash());

    const ExecutionPlan plan(read);
    EXPECT_EQ(plan.name, "sample");
    EXPECT_EQ(plan.content_hash, written.ContentHash());
    ASSERT_EQ(plan.operations.size(), kernels.size());
    size_t tensor_count = 0;
    const auto corrections = plan.correction_metadata();
    ASSERT_EQ(corrections.size(), kernels.size());
    for (size_t i = 0; i < kernels.size(); ++i) {
        const auto& [name, kernel] = kernels[i];
        SCOPED_TRACE(name);
        const Operation& op = plan.operations[i];
        EXPECT_EQ(op.name, name);
        EXPECT_TRUE(op.preprocess().empty());
        EXPECT_TRUE(op.device_handles().empty());
        ASSERT_TRUE(op.compute().has_value());
        const SpyreCompute& c = *op.compute();
        EXPECT_EQ(c.name, name);
        EXPECT_FALSE(c.device_handle().has_value());
        std::vector<size_t> indices(kernel.tensor_count());  // each kernel got its own plan tensors, in order
        for (size_t t = 0; t < indices.size(); ++t) indices[t] = tensor_count + t;
        EXPECT_EQ(op.tensor_indices, indices);
        for (size_t t = 0; t < indices.size(); ++t) EXPECT_EQ(plan.tensor_input_metadata[indices[t]].name, c.tensors[t].name);
        EXPECT_EQ(c.binary, kernel.program);
        EXPECT_EQ(c.binary_size(), 0u);  // set when loaded
        EXPECT_EQ(c.reduction_loops, kernel.reduction_loops);
        EXPECT_EQ(c.untileable_loops, kernel.untileable_loops);
        ASSERT_EQ(c.tensors.size(), kernel.tensor_count());
        ASSERT_EQ(c.expected_input_shapes.size(), kernel.tensor_count());
        for (size_t t = 0; t < kernel.inputs.size(); ++t) {
            ExpectSameTensor(c.tensors[t], kernel.inputs[t], TensorRole::Input, name + ".input" + std::to_string(t));
            EXPECT_EQ(c.expected_input_shapes[t], kernel.inputs[t].shape);
        }
        for (size_t t = 0; t < kernel.outputs.size(); ++t) {
            const size_t slot = kernel.inputs.size() + t;
            ExpectSameTensor(c.tensors[slot], kernel.outputs[t], TensorRole::Output, name + ".output" + std::to_string(t));
            EXPECT_EQ(c.expected_input_shapes[slot], kernel.outputs[t].shape);
        }
        ASSERT_TRUE(op.correction.has_value());
        EXPECT_EQ(corrections[i], &*op.correction);
        EXPECT_EQ(op.correction->binary, kernel.correction);
        EXPECT_EQ(op.correction->binary_size(), 0u);
        EXPECT_EQ(op.correction->input_size, kernel.correction_input_size);
        EXPECT_FALSE(op.correction->binary_handle().has_value());
        EXPECT_FALSE(op.correction->input_handle().has_value());
        tensor_count += kernel.tensor_count();
    }
    EXPECT_EQ(plan.tensor_input_metadata.size(), tensor_count);
    ASSERT_EQ(plan.init_packets.size(), 1u);
    EXPECT_EQ(plan.init_packets[0].name, "weights");
    EXPECT_EQ(plan.init_packets[0].binary, init.binary);
    EXPECT_FALSE(plan.init_packets[0].device_handle().has_value());
}

// Only the correction binds a launch's tensors into the program: without it
// the operands stayed at address 0, and launches wrote there.
TEST(ExecutionPlan, AnOperationWithoutCorrectionIsRefusedWhenItsProgramNeedsOne) {
    for (const bool null : {false, true}) {
        CompilerOutput out = CompilerOutputFromKernel("relu", KernelBuilder().Relu({4}, DType::FP32));
        Edit(out, [null](json& j) {
            if (null)
                j["operations"][0]["correction"] = nullptr;
            else
                j["operations"][0].erase("correction");
        });
        out.blobs.erase("relu.correction.bin");
        std::string message;
        ASSERT_EQ(TryParse(out, &message), Outcome::Rejected) << (null ? "null" : "absent");
        EXPECT_NE(message.find("operations[0]: has no correction (absent or null)"), std::string::npos) << message;
    }
}

TEST(ExecutionPlan, ManifestUsesTheDocumentedFieldNames) {
    const CompilerOutput out = CompilerOutputFromKernel("mm", KernelBuilder().Matmul(4, 3, 2, DType::FP32));
    const json j = json::parse(out.manifest);
    EXPECT_EQ(j["format"], "spyre-execution-plan");
    EXPECT_EQ(j["version"], 1);
    EXPECT_EQ(j["tensors"][1]["name"], "mm.input1");
    EXPECT_EQ(j["tensors"][1]["loops"], json::array({1, 2}));
    EXPECT_EQ(j["tensors"][2]["role"], "output");
    EXPECT_EQ(j["operations"][0]["tensors"], json::array({0, 1, 2}));
    EXPECT_EQ(j["operations"][0]["compute"]["binary"], "mm.bin");
    EXPECT_EQ(j["operations"][0]["compute"]["crc32"], Crc(out.blobs.at("mm.bin")));
    EXPECT_EQ(j["operations"][0]["correction"]["input_size"], 24);
    EXPECT_EQ(out.blobs.size(), 2u);
}

// ---------------------------------------------------------------- content hash

TEST(ContentHash, IsStableAndSeesEveryByteAndName) {
    const auto kernels = SampleKernels();
    const CompilerOutput a = CompilerOutputFromKernels("sample", kernels);
    const CompilerOutput b = CompilerOutputFromKernels("sample", kernels);
    EXPECT_EQ(a.ContentHash(), b.ContentHash());
    // Pinned: FNV-1a 64 over an empty manifest's 8-byte length prefix. Changing
    // the algorithm invalidates every plan cache, so it must be deliberate.
    EXPECT_EQ(CompilerOutput{}.ContentHash(), 0xa8c7f832281a39c5ull);

    CompilerOutput flipped = a;
    flipped.blobs.at("matmul.bin")[100] ^= 0x01;
    EXPECT_NE(flipped.ContentHash(), a.ContentHash());

    CompilerOutput renamed = a;
    auto node = renamed.blobs.extract("fill.bin");
    node.key() = "fill2.bin";
    renamed.blobs.insert(std::move(node));
    EXPECT_NE(renamed.ContentHash(), a.ContentHash());

    CompilerOutput elsewhere = a;  // where it was read from is not content
    elsewhere.origin = "/somewhere/else";
    EXPECT_EQ(elsewhere.ContentHash(), a.ContentHash());
}

// ---------------------------------------------------------------- directory I/O

TEST(CompilerOutputDirectory, MissingDirectoryOrManifestIsNotFound) {
    TempDir dir;
    try {
        CompilerOutput::ReadDirectory(dir.path());
        FAIL() << "read a missing directory";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::NotFound);
        EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
    }
    fs::create_directories(dir.path());
    try {
        CompilerOutput::ReadDirectory(dir.path());
        FAIL() << "read a directory without plan.json";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::NotFound);
        EXPECT_NE(std::string(e.what()).find("plan.json"), std::string::npos) << e.what();
    }
}

TEST(CompilerOutputDirectory, WriteRefusesANonEmptyDirectoryAndBadBlobNames) {
    TempDir dir;
    const CompilerOutput out = CompilerOutputFromKernel("relu", KernelBuilder().Relu({4}, DType::FP32));
    out.WriteDirectory(dir.path());
    try {
        out.WriteDirectory(dir.path());
        FAIL() << "wrote over an existing plan";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("not empty"), std::string::npos) << e.what();
    }
    CompilerOutput escaping = out;
    escaping.blobs["../escape.bin"] = {1};
    TempDir other;
    EXPECT_THROW(escaping.WriteDirectory(other.path()), Error);
    EXPECT_FALSE(fs::exists(other.path().parent_path() / "escape.bin"));
}

TEST(CompilerOutputDirectory, ASubdirectoryInThePlanIsRejected) {
    TempDir dir;
    CompilerOutputFromKernel("relu", KernelBuilder().Relu({4}, DType::FP32)).WriteDirectory(dir.path());
    fs::create_directory(dir.path() / "nested");
    try {
        CompilerOutput::ReadDirectory(dir.path());
        FAIL() << "read a plan with a subdirectory";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
    }
}

TEST(CompilerOutputWriter, RejectsDuplicateAndUnsafeKernelNames) {
    const BuiltKernel k = KernelBuilder().Relu({4}, DType::FP32);
    EXPECT_THROW(CompilerOutputFromKernels("p", {{"a", k}, {"a", k}}), Error);
    EXPECT_THROW(CompilerOutputFromKernels("p", {{"../a", k}}), Error);
    EXPECT_THROW(CompilerOutputFromKernels("p", {{"", k}}), Error);
}

// ---------------------------------------------------------------- malformed inputs

namespace {

// One malformed input: how to break a valid matmul plan, and what the message
// must contain (the file and the field path at least).
struct Malformed {
    const char* name;
    std::function<void(CompilerOutput&)> corrupt;
    std::vector<std::string> expect;
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

// The base: matmul A[64,32] B[32,16] C[64,16] fp32, tensors 0, 1, 2, as if read from plans/mm.
CompilerOutput BasePlan() {
    CompilerOutput out = CompilerOutputFromKernel("mm", KernelBuilder().Matmul(64, 32, 16, DType::FP32));
    out.origin = "plans/mm";
    return out;
}

auto EditJson(std::function<void(json&)> change) {
    return [change](CompilerOutput& out) { Edit(out, change); };
}

// Replaces a blob and makes the manifest agree on its size and CRC-32, so
// the parser gets as far as the blob's content.
void ReplaceBlobConsistently(CompilerOutput& out, const std::string& blob, std::vector<uint8_t> bytes,
                             const json::json_pointer& entry) {
    const size_t size = bytes.size();
    const std::string crc = Crc(bytes);
    out.blobs[blob] = std::move(bytes);
    Edit(out, [&](json& j) {
        j[entry]["size"] = size;
        j[entry]["crc32"] = crc;
    });
}

// Writes the manifest with the value at `where` replaced by raw JSON text
// (numbers nlohmann cannot hold, bytes that are not UTF-8).
auto EditRaw(const json::json_pointer& where, std::string text) {
    return [where, text](CompilerOutput& out) {
        Edit(out, [&](json& j) { j[where] = "@RAW@"; });
        const size_t at = out.manifest.find("\"@RAW@\"");
        out.manifest.replace(at, 7, text);
    };
}

const json::json_pointer kCompute("/operations/0/compute");
const json::json_pointer kCorrection("/operations/0/correction");

const Malformed kMalformed[] = {
    {"TruncatedJson", [](CompilerOutput& o) { o.manifest.resize(o.manifest.size() / 2); },
     {"plans/mm/plan.json", "not valid JSON at byte"}},
    // The parser's words without its internal id ("[json.exception.parse_error.101] ").
    {"GarbageJson", [](CompilerOutput& o) { o.manifest = "{garbage"; },
     {"plans/mm/plan.json: not valid JSON at byte 2: parse error at line 1, column 2"}},
    {"EmptyManifest", [](CompilerOutput& o) { o.manifest.clear(); }, {"plans/mm/plan.json", "byte"}},
    // The parser ended the text at a NUL: what followed was accepted unread.
    {"NulThenGarbage", [](CompilerOutput& o) { o.manifest += std::string("\0 not json {{{", 14); },
     {"plans/mm/plan.json", "not valid JSON at byte", "a NUL byte (the manifest is text)"}},
    {"TopLevelIsAnArray", [](CompilerOutput& o) { o.manifest = "[1, 2]"; }, {"plans/mm/plan.json", "must be an object"}},
    {"DuplicateKey", [](CompilerOutput& o) { o.manifest.insert(1, "\"name\": \"shadow\","); },
     {"plans/mm/plan.json", "duplicate key \"name\""}},
    {"WrongFormat", EditJson([](json& j) { j["format"] = "onnx"; }), {"plans/mm/plan.json", "format:", "onnx"}},
    {"FutureVersion", EditJson([](json& j) { j["version"] = 2; }), {"plans/mm/plan.json", "version:", "not supported"}},
    {"UnknownTopLevelField", EditJson([](json& j) { j["comment"] = "hi"; }),
     {"plans/mm/plan.json", "unknown field \"comment\""}},
    {"MissingTensors", EditJson([](json& j) { j.erase("tensors"); }), {"plans/mm/plan.json", "missing field \"tensors\""}},
    {"MissingDtype", EditJson([](json& j) { j["tensors"][0].erase("dtype"); }),
     {"plans/mm/plan.json", "tensors[0]:", "missing field \"dtype\""}},
    {"ShapeIsAString", EditJson([](json& j) { j["tensors"][1]["shape"] = "32x16"; }),
     {"plans/mm/plan.json", "tensors[1].shape:", "must be an array"}},
    {"NegativeDim", EditJson([](json& j) { j["tensors"][2]["shape"][1] = -16; }),
     {"plans/mm/plan.json", "tensors[2].shape[1]:", "must be >= 1"}},
    {"ZeroDim", EditJson([](json& j) { j["tensors"][0]["shape"][0] = 0; }), {"tensors[0].shape[0]:", "must be >= 1"}},
    {"FractionalDim", EditJson([](json& j) { j["tensors"][0]["shape"][0] = 2.5; }),
     {"tensors[0].shape[0]:", "must be an integer"}},
    {"RankNine", EditJson([](json& j) { j["tensors"][0]["shape"] = json::array({1, 1, 1, 1, 1, 1, 1, 1, 1}); }),
     {"tensors[0].shape:", "1 to 8"}},
    {"StridesTooShort", EditJson([](json& j) { j["tensors"][0]["strides"] = json::array({1}); }),
     {"tensors[0].strides:", "rank-2"}},
    {"UnknownDtype", EditJson([](json& j) { j["tensors"][1]["dtype"] = "fp64"; }),
     {"plans/mm/plan.json", "tensors[1].dtype:", "unknown dtype \"fp64\""}},
    {"BadRole", EditJson([](json& j) { j["tensors"][0]["role"] = "scratch"; }),
     {"tensors[0].role:", "unknown role"}},
    {"LoopsLengthNotRank", EditJson([](json& j) { j["tensors"][0]["loops"] = json::array({0}); }),
     {"plans/mm/plan.json", "tensors[0].loops:", "rank-2"}},
    {"NegativeLoop", EditJson([](json& j) { j["tensors"][0]["loops"][1] = -1; }),
     {"tensors[0].loops[1]:", "must be >= 0"}},
    {"BytesSmallerThanExtent", EditJson([](json& j) { j["tensors"][2]["bytes"] = 100; }),
     {"tensors[2].bytes:", "less than"}},
    {"NegativeBytes", EditJson([](json& j) { j["tensors"][2]["bytes"] = -1; }), {"tensors[2].bytes:", ">= 0"}},
    {"DuplicateTensorName", EditJson([](json& j) { j["tensors"][1]["name"] = "mm.input0"; }),
     {"tensors[1].name:", "also the name of tensors[0]"}},
    {"TensorIndexOutOfRange", EditJson([](json& j) { j["operations"][0]["tensors"][1] = 7; }),
     {"plans/mm/plan.json", "operations[0].tensors[1]:", "out of range"}},
    {"InputAfterOutput", EditJson([](json& j) { j["operations"][0]["tensors"] = json::array({0, 2, 1}); }),
     {"operations[0].tensors[2]:", "follows an output"}},
    {"LoopSizesDisagree", EditJson([](json& j) { j["tensors"][1]["loops"] = json::array({0, 2}); }),
     {"operations[0].tensors:", "loop 0 is 64", "but 32"}},
    {"EmptyOperationName", EditJson([](json& j) { j["operations"][0]["name"] = ""; }),
     {"operations[0].name:", "must not be empty"}},
    {"UnknownComputeField", EditJson([](json& j) { j["operations"][0]["compute"]["reduction_loop"] = json::array({1}); }),
     {"operations[0].compute:", "unknown field \"reduction_loop\""}},
    {"BlobMissing", EditJson([](json& j) { j["operations"][0]["compute"]["binary"] = "x.bin"; }),
     {"plans/mm/plan.json", "operations[0].compute.binary:", "blob \"x.bin\" missing"}},
    {"BlobPathTraversal", EditJson([](json& j) { j["operations"][0]["compute"]["binary"] = "../x"; }),
     {"plans/mm/plan.json", "operations[0].compute.binary:", "\"../x\" is not a plain file name"}},
    {"BlobAbsolutePath", EditJson([](json& j) { j["operations"][0]["compute"]["binary"] = "/etc/passwd"; }),
     {"operations[0].compute.binary:", "not a plain file name"}},
    {"TruncatedBlob", [](CompilerOutput& o) { o.blobs["mm.bin"].resize(o.blobs["mm.bin"].size() - 4); },
     {"plans/mm/mm.bin", "manifest says", "operations[0].compute.size"}},
    {"SizeIsFloat", EditJson([](json& j) { j["operations"][0]["compute"]["size"] = 584.0; }),
     {"operations[0].compute.size:", "must be an integer"}},
    {"CrcMismatch", [](CompilerOutput& o) { o.blobs["mm.bin"][200] ^= 0x40; },
     {"plans/mm/mm.bin", "CRC-32", "operations[0].compute.crc32"}},
    {"CrcNotHex", EditJson([](json& j) { j["operations"][0]["compute"]["crc32"] = "0xZZ"; }),
     {"operations[0].compute.crc32:", "not a CRC-32"}},
    {"CorruptProgramHeader",
     [](CompilerOutput& o) {
         std::vector<uint8_t> bytes = o.blobs["mm.bin"];
         bytes[0] ^= 0xFF;  // magic
         ReplaceBlobConsistently(o, "mm.bin", bytes, kCompute);
     },
     {"plans/mm/mm.bin", "not a valid program", "bad magic", "operations[0].compute.binary"}},
    {"ProgramShorterThanHeader",
     [](CompilerOutput& o) { ReplaceBlobConsistently(o, "mm.bin", {1, 2, 3}, kCompute); },
     {"plans/mm/mm.bin", "not a valid program", "shorter than its header"}},
    {"ProgramSlotsDisagree", EditJson([](json& j) { j["operations"][0]["tensors"] = json::array({0, 1, 2, 2}); }),
     {"plans/mm/mm.bin", "3 correction slots", "4 tensors"}},
    {"TensorDisagreesWithBinary", EditJson([](json& j) { j["tensors"][2]["dtype"] = "fp16"; }),
     {"plans/mm/mm.bin", "operand 2 (slot 2)", "mm.output0", "operations[0].compute.binary"}},
    {"StridesDisagreeWithBinary",
     EditJson([](json& j) {
         j["tensors"][0]["strides"] = json::array({64, 1});
         j["tensors"][0]["bytes"] = 64 * 64 * 4;
     }),
     {"plans/mm/mm.bin", "operand 0 (slot 0)", "mm.input0"}},
    {"WrittenSlotBoundToAnInput", EditJson([](json& j) { j["tensors"][2]["role"] = "input"; }),
     {"plans/mm/mm.bin", "writes operand 2 (slot 2), but the operation binds input tensor \"mm.output0\" there",
      "operations[0].compute.binary"}},
    {"ReductionLoopNotOfTheOp", EditJson([](json& j) { j["operations"][0]["compute"]["reduction_loops"] = json::array({5}); }),
     {"operations[0].compute.reduction_loops[0]:", "indexes none"}},
    {"ReductionLoopIndexesOutput",
     EditJson([](json& j) { j["operations"][0]["compute"]["reduction_loops"] = json::array({0}); }),
     {"operations[0].compute.reduction_loops[0]:", "indexes output"}},
    {"UntileableLoopTwice",
     EditJson([](json& j) { j["operations"][0]["compute"]["untileable_loops"] = json::array({2, 2}); }),
     {"operations[0].compute.untileable_loops[1]:", "listed twice"}},
    {"CorrectionInputSizeWrong", EditJson([](json& j) { j["operations"][0]["correction"]["input_size"] = 16; }),
     {"plans/mm/plan.json", "operations[0].correction.input_size:", "24"}},
    {"CorrectionIsNotACorrectionProgram",
     [](CompilerOutput& o) { ReplaceBlobConsistently(o, "mm.correction.bin", o.blobs["mm.bin"], kCorrection); },
     {"plans/mm/mm.correction.bin", "not a correction program", "operations[0].correction.binary"}},
    {"UnreferencedBlob", [](CompilerOutput& o) { o.blobs["stray.bin"] = {1, 2, 3}; },
     {"plans/mm/stray.bin", "not referenced by plan.json"}},
    {"NumberOverflowsADouble", EditRaw(json::json_pointer("/tensors/2/bytes"), "1e999"),
     {"plans/mm/plan.json", "tensors[2].bytes", "1e999"}},
    {"NegativeNumberOverflowsADouble", EditRaw(json::json_pointer("/version"), "-1e999"),
     {"plans/mm/plan.json", "version", "-1e999"}},
    {"NumberOverflowInAnArray", EditRaw(json::json_pointer("/tensors/0/shape/1"), "2.5e400"),
     {"plans/mm/plan.json", "tensors[0].shape[1]", "2.5e400"}},
    {"NumberOverflowInAnOperation", EditRaw(json::json_pointer("/operations/0/compute/size"), "1E+999"),
     {"plans/mm/plan.json", "operations[0].compute.size", "1E+999"}},
    // An integer that no 64 bits hold is out of range, not "not an integer"
    // (2^64 was "must be an integer, not number"; found probing from outside).
    {"IntegerBeyond64Bits", EditRaw(json::json_pointer("/operations/0/compute/size"), "123456789012345678901234567890"),
     {"plans/mm/plan.json", "operations[0].compute.size:", "out of range: must be an integer <= 18446744073709551615"}},
    {"IntegerTwoToThe64", EditRaw(json::json_pointer("/operations/0/compute/size"), "18446744073709551616"),
     {"plans/mm/plan.json", "operations[0].compute.size:",
      "out of range: must be an integer <= 18446744073709551615, got 1.8446744073709552e+19"}},
    // A tensor's bytes past int64 was read; an exact launch then refused it
    // while a tiled one ran (found probing from outside).
    {"BytesBeyondInt64", EditRaw(json::json_pointer("/tensors/2/bytes"), "9223372036854775808"),
     {"plans/mm/plan.json", "tensors[2].bytes:", "must be <= 9223372036854775807, got 9223372036854775808"}},
    {"BytesBeyond64Bits", EditRaw(json::json_pointer("/tensors/2/bytes"), "18446744073709551616"),
     {"plans/mm/plan.json", "tensors[2].bytes:",
      "out of range: must be an integer <= 9223372036854775807, got 1.8446744073709552e+19"}},
    {"NegativeIntegerBeyond64Bits", EditRaw(json::json_pointer("/tensors/0/shape/0"), "-9223372036854775809"),
     {"plans/mm/plan.json", "tensors[0].shape[0]:", "out of range: must be an integer >= 1"}},
    {"SignedIntegerBeyond63Bits", EditRaw(json::json_pointer("/tensors/0/shape/0"), "9223372036854775808"),
     {"plans/mm/plan.json", "tensors[0].shape[0]:", "must be <= 9223372036854775807, got 9223372036854775808"}},
    {"IntegerWithAnExponent", EditRaw(json::json_pointer("/tensors/2/bytes"), "1e19"),
     {"plans/mm/plan.json", "tensors[2].bytes:", "must be an integer, not number"}},
    {"StringNotUtf8", EditRaw(json::json_pointer("/tensors/1/name"), "\"mm\xff\xfe\""),
     {"plans/mm/plan.json", "tensors[1].name", "not valid JSON", "UTF-8"}},
    {"KeyNotUtf8", [](CompilerOutput& o) { o.manifest.insert(1, "\"\xc3\x28\": 1,"); },
     {"plans/mm/plan.json", "not valid JSON", "UTF-8"}},
    {"InitPacketCrcMismatch",
     [](CompilerOutput& o) {
         o.blobs["init0.bin"] = {9, 9};
         Edit(o, [](json& j) {
             j["init_packets"].push_back({{"name", "w"}, {"binary", "init0.bin"}, {"size", 2}, {"crc32", "0x0"}});
         });
     },
     {"plans/mm/init0.bin", "init_packets[0].crc32"}},
    // An init packet runs once at load: bytes the device cannot run are
    // refused here, not as a device error while loading.
    {"InitPacketNotAProgram",
     [](CompilerOutput& o) {
         o.blobs["init0.bin"] = std::vector<uint8_t>(4096, 0);
         Edit(o, [](json& j) {
             j["init_packets"].push_back(
                 {{"name", "weights"}, {"binary", "init0.bin"}, {"size", 4096}, {"crc32", "0xc71c0011"}});
         });
     },
     {"plans/mm/init0.bin", "not a valid program", "init_packets[0].binary"}},
};

class MalformedPlan : public ::testing::TestWithParam<Malformed> {};

}  // namespace

TEST(MalformedPlanBase, IsValid) { EXPECT_NO_THROW(ExecutionPlan{BasePlan()}); }

TEST_P(MalformedPlan, IsRejectedNamingTheFileAndField) {
    CompilerOutput out = BasePlan();
    GetParam().corrupt(out);
    try {
        ExecutionPlan plan(out);
        FAIL() << "accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        for (const std::string& part : GetParam().expect)
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "\"" << part << "\" not in: " << e.what();
        if (std::string(e.what()).find("operations[0]") != std::string::npos) {
            EXPECT_EQ(e.context().op_index, std::optional<uint64_t>(0)) << e.what();
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedPlan, ::testing::ValuesIn(kMalformed),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- fuzz-ish

TEST(ExecutionPlanFuzz, TruncatedManifestsOnlyEverThrowSpyreErrors) {
    const CompilerOutput base = CompilerOutputFromKernels("sample", SampleKernels());
    for (size_t at = 0; at < base.manifest.size(); at += 7) {
        CompilerOutput out = base;
        out.manifest.resize(at);
        std::string message;
        // Only the final newline may go without breaking the JSON.
        if (TryParse(out, &message) == Outcome::Parsed) {
            EXPECT_GE(at + 1, base.manifest.size());
        } else {
            EXPECT_NE(message.find("plan.json"), std::string::npos) << message;
        }
    }
}

// A deeply nested manifest's refusal names the outermost and innermost
// levels only: the field path grew 3 bytes per level (9 MB for 3 million
// '[': found probing from outside).
TEST(ExecutionPlanFuzz, ADeeplyNestedManifestGetsAShortMessage) {
    for (const std::string manifest : {std::string(100'000, '['), "{\"format\": " + std::string(50'000, '[') + "1"}) {
        CompilerOutput out;
        out.manifest = manifest;
        std::string message;
        ASSERT_NE(TryParse(out, &message), Outcome::Parsed);
        EXPECT_LT(message.size(), 1000u) << message.substr(0, 200);
        EXPECT_NE(message.find("plan.json: "), std::string::npos) << message.substr(0, 200);
        EXPECT_NE(message.find(" levels)..."), std::string::npos) << message.substr(0, 200);
        EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message.substr(0, 200);
    }
}

TEST(ExecutionPlanFuzz, FlippedBlobBytesAreCaughtByTheChecksums) {
    const CompilerOutput base = CompilerOutputFromKernels("sample", SampleKernels());
    std::mt19937 rng(7);
    for (int trial = 0; trial < 400; ++trial) {
        CompilerOutput out = base;
        auto it = std::next(out.blobs.begin(), long(rng() % out.blobs.size()));
        it->second[rng() % it->second.size()] ^= uint8_t(1 + rng() % 255);
        std::string message;
        ASSERT_EQ(TryParse(out, &message), Outcome::Rejected) << it->first;
        EXPECT_NE(message.find(it->first), std::string::npos) << message;
    }
}

// With the manifest agreeing on size and CRC, corrupt programs reach the
// program decoder and the slot checks: still only spyre::Error.
TEST(ExecutionPlanFuzz, CorruptProgramsWithMatchingChecksumsOnlyEverThrowSpyreErrors) {
    const CompilerOutput base = BasePlan();
    std::mt19937 rng(11);
    for (int trial = 0; trial < 400; ++trial) {
        CompilerOutput out = base;
        const bool correction = trial % 2;
        const std::string blob = correction ? "mm.correction.bin" : "mm.bin";
        std::vector<uint8_t> bytes = out.blobs[blob];
        for (int flips = 1 + int(rng() % 4); flips > 0; --flips) bytes[rng() % bytes.size()] ^= uint8_t(1 + rng() % 255);
        if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
        ReplaceBlobConsistently(out, blob, bytes, correction ? kCorrection : kCompute);
        TryParse(out);
    }
}

TEST(ExecutionPlanFuzz, FlippedManifestBytesOnlyEverThrowSpyreErrors) {
    const CompilerOutput base = CompilerOutputFromKernels("sample", SampleKernels());
    std::mt19937 rng(3);
    for (int trial = 0; trial < 2000; ++trial) {
        CompilerOutput out = base;
        out.manifest[rng() % out.manifest.size()] = char(rng());
        TryParse(out);
    }
}

// Every number of the manifest in turn replaced by one no double can hold:
// always a spyre::Error naming plan.json and the field, never nlohmann's
// out_of_range.
TEST(ExecutionPlanFuzz, OverflowingNumbersAnywhereAreSpyreErrorsNamingTheField) {
    const CompilerOutput base = BasePlan();
    const std::string& text = base.manifest;
    int replaced = 0;
    for (size_t at = 0; at < text.size(); ++at) {
        const bool starts_number = (std::isdigit(static_cast<unsigned char>(text[at])) || text[at] == '-') &&
                                   at > 0 && (text[at - 1] == ' ' || text[at - 1] == '[' || text[at - 1] == '\n');
        if (!starts_number) continue;
        size_t end = at + 1;
        while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
        CompilerOutput out = base;
        out.manifest.replace(at, end - at, "-1e999");
        std::string message;
        ASSERT_EQ(TryParse(out, &message), Outcome::Rejected) << out.manifest;
        EXPECT_NE(message.find("plans/mm/plan.json: "), std::string::npos) << message;
        EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
        // The field: a path segment before the message ("version: ", "tensors[0].shape[1]: ", ...).
        EXPECT_EQ(message.find("plans/mm/plan.json: not valid JSON"), std::string::npos) << message;
        ++replaced;
    }
    EXPECT_GT(replaced, 20);
}
