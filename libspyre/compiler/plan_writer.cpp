// SPDX-License-Identifier: Apache-2.0
// The compiler's side of the format: built kernels -> CompilerOutput.
#include <set>

#include <nlohmann/json.hpp>

#include "plan/plan_format.hpp"
#include "spyre/error.hpp"
#include "spyre/compiler/plan_writer.hpp"

namespace spyre {

namespace {

// Insertion-ordered, so plan.json reads top-down: format and version first.
using json = nlohmann::ordered_json;

class Writer {
public:
    explicit Writer(const std::string& plan_name) {
        manifest_ = {{"format", std::string(plan_format::kFormat)},
                     {"version", plan_format::kVersion},
                     {"name", plan_name},
                     {"tensors", json::array()},
                     {"operations", json::array()},
                     {"init_packets", json::array()}};
    }

    void AddKernel(const std::string& op_name, const BuiltKernel& kernel) {
        // The name prefixes the op's blob names, so it must be a plain file name too.
        if (!plan_format::IsBlobName(op_name))
            throw Error(ErrorKind::InvalidArgument, "kernel name \"" + op_name + "\" is not a plain file name");
        if (!op_names_.insert(op_name).second)
            throw Error(ErrorKind::InvalidArgument, "two kernels are named \"" + op_name + "\"");
        json tensor_indices = json::array();
        for (size_t i = 0; i < kernel.inputs.size(); ++i)
            tensor_indices.push_back(AddTensor(op_name + ".input" + std::to_string(i), kernel.inputs[i], TensorRole::Input));
        for (size_t i = 0; i < kernel.outputs.size(); ++i)
            tensor_indices.push_back(
                AddTensor(op_name + ".output" + std::to_string(i), kernel.outputs[i], TensorRole::Output));

        json compute = Blob(op_name + ".bin", kernel.program);
        compute["reduction_loops"] = kernel.reduction_loops;
        compute["untileable_loops"] = kernel.untileable_loops;
        json op = {{"name", op_name}, {"tensors", tensor_indices}, {"compute", compute}};
        if (!kernel.correction.empty()) {
            json correction = Blob(op_name + ".correction.bin", kernel.correction);
            correction["input_size"] = kernel.correction_input_size;
            op["correction"] = correction;
        }
        manifest_["operations"].push_back(op);
    }

    void AddInitPacket(const InitPacket& packet) {
        json entry = Blob("init" + std::to_string(manifest_["init_packets"].size()) + ".bin", packet.binary);
        entry["name"] = packet.name;
        manifest_["init_packets"].push_back(entry);
    }

    CompilerOutput Finish() {
        try {
            out_.manifest = manifest_.dump(2) + "\n";
        } catch (const json::type_error& e) {  // JSON strings must be UTF-8
            throw Error(ErrorKind::InvalidArgument, "a plan, kernel or packet name is not UTF-8: " + plan_format::JsonMessage(e.what()));
        }
        return std::move(out_);
    }

private:
    size_t AddTensor(const std::string& name, const KernelTensor& t, TensorRole role) {
        std::vector<int> loops = t.loops;
        if (loops.empty())  // the kernel gave no map: dim i is loop i (TensorSpec's convention)
            for (size_t d = 0; d < t.shape.size(); ++d) loops.push_back(int(d));
        json& tensors = manifest_["tensors"];
        tensors.push_back({{"name", name},
                           {"shape", t.shape},
                           {"strides", t.strides},
                           {"dtype", ToString(t.dtype)},
                           {"role", plan_format::RoleName(role)},
                           {"loops", loops},
                           {"bytes", t.bytes}});
        return tensors.size() - 1;
    }

    // Stores a blob and returns its manifest entry (binary, size, crc32).
    json Blob(const std::string& file, const std::vector<uint8_t>& bytes) {
        if (!plan_format::IsBlobName(file))
            throw Error(ErrorKind::InvalidArgument, "blob name \"" + file + "\" is not a plain file name");
        if (!out_.blobs.emplace(file, bytes).second)
            throw Error(ErrorKind::InvalidArgument, "two blobs would be named \"" + file + "\"");
        return {{"binary", file}, {"size", bytes.size()}, {"crc32", plan_format::Crc32Text(plan_format::Crc32(bytes))}};
    }

    json manifest_;
    CompilerOutput out_;
    std::set<std::string> op_names_;
};

}  // namespace

CompilerOutput CompilerOutputFromKernels(const std::string& plan_name,
                                         const std::vector<std::pair<std::string, BuiltKernel>>& kernels,
                                         const std::vector<InitPacket>& init_packets) {
    Writer writer(plan_name);
    for (const auto& [op_name, kernel] : kernels) writer.AddKernel(op_name, kernel);
    for (const InitPacket& packet : init_packets) writer.AddInitPacket(packet);
    return writer.Finish();
}

CompilerOutput CompilerOutputFromKernel(const std::string& name, const BuiltKernel& kernel) {
    return CompilerOutputFromKernels(name, {{name, kernel}});
}

}  // namespace spyre
