// SPDX-License-Identifier: Apache-2.0
// ExecutionPlan(CompilerOutput): reads plan.json, checks it against its blobs
// and builds the Operations. Nothing here touches a device; everything the
// manifest claims is verified before anything is built.
#include "spyre/plan/execution_plan.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "plan/manifest_node.hpp"
#include "plan/plan_format.hpp"
#include "plan/written_operands.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre {

namespace {

using plan_format::Node;

// Loop indices are small: an op has at most a few tensors of rank <= 8.
constexpr int64_t kMaxLoop = 63;

std::string Join(const std::string& dir, std::string_view file) {
    return dir.empty() ? std::string(file) : dir + "/" + std::string(file);
}

// Bytes from a tensor's first element to one past its last, or nullopt on overflow.
std::optional<uint64_t> ExtentBytes(const TensorSpec& t) {
    uint64_t last = 0;
    for (size_t d = 0; d < t.shape.size(); ++d) {
        uint64_t step;
        if (__builtin_mul_overflow(uint64_t(t.shape[d] - 1), uint64_t(t.strides[d]), &step) ||
            __builtin_add_overflow(last, step, &last))
            return std::nullopt;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(last + 1, ElementSize(t.dtype), &bytes)) return std::nullopt;
    return bytes;
}

class PlanReader {
public:
    explicit PlanReader(const CompilerOutput& out)
        : out_(out), manifest_file_(Join(out.origin, plan_format::kManifestFile)) {}

    void Read(ExecutionPlan& plan) {
        const nlohmann::json manifest = plan_format::ParseManifest(out_.manifest, manifest_file_);
        const Node root(manifest, manifest_file_);
        ReadHeader(root);
        plan.name = root.Field("name").NonEmptyString();

        std::map<std::string, std::string> tensor_names;  // name -> path of its first use
        for (const Node& t : root.Field("tensors").Elements()) {
            plan.tensor_input_metadata.push_back(ReadTensor(t));
            const auto [it, fresh] = tensor_names.emplace(plan.tensor_input_metadata.back().name, t.path());
            if (!fresh) t.Field("name").Fail("\"" + it->first + "\" is also the name of " + it->second);
        }
        const std::vector<Node> ops = root.Field("operations").Elements();
        for (size_t i = 0; i < ops.size(); ++i) {
            try {
                plan.operations.push_back(ReadOperation(ops[i], plan.tensor_input_metadata));
            } catch (const Error& e) {  // say which operation in the context too
                ErrorContext context = e.context();
                context.op_index = i;
                throw Error(e.kind(), e.message(), context);
            }
        }
        for (const Node& p : root.Field("init_packets").Elements()) {
            p.AllowOnly({"name", "binary", "size", "crc32"});
            InitPacket& packet = plan.init_packets.emplace_back();
            packet.name = p.Field("name").NonEmptyString();
            packet.binary = ReadBlob(p);
            DecodeProgram(p, packet.binary);  // it runs once at load: a program the device takes
        }
        for (const auto& [name, bytes] : out_.blobs)
            if (!referenced_.contains(name))
                throw Error(ErrorKind::InvalidArgument,
                            Join(out_.origin, name) + ": not referenced by " + std::string(plan_format::kManifestFile));
        plan.content_hash = out_.ContentHash();
    }

private:
    // Format and version come first, so a newer manifest is reported as such
    // rather than as a list of unknown fields.
    void ReadHeader(const Node& root) {
        const Node format = root.Field("format");
        if (format.String() != plan_format::kFormat)
            format.Fail("\"" + format.String() + "\" is not \"" + std::string(plan_format::kFormat) + "\"");
        const Node version = root.Field("version");
        const int64_t v = version.Int(INT64_MIN, INT64_MAX);
        if (v != plan_format::kVersion)
            version.Fail(std::to_string(v) + " is not supported (this reader knows version " +
                         std::to_string(plan_format::kVersion) + ")");
        root.AllowOnly({"format", "version", "name", "tensors", "operations", "init_packets"});
    }

    TensorSpec ReadTensor(const Node& n) const {
        n.AllowOnly({"name", "shape", "strides", "dtype", "role", "loops", "bytes"});
        TensorSpec t;
        t.name = n.Field("name").NonEmptyString();

        const Node shape = n.Field("shape");
        for (const Node& d : shape.Elements()) t.shape.push_back(d.Int(1, INT64_MAX));
        if (t.shape.empty() || t.shape.size() > SPYRE_PROGRAM_MAX_RANK)
            shape.Fail("has " + std::to_string(t.shape.size()) + " dims; tensors have 1 to 8");
        const size_t rank = t.shape.size();

        const Node strides = n.Field("strides");
        for (const Node& s : strides.Elements()) t.strides.push_back(s.Int(0, INT64_MAX));
        if (t.strides.size() != rank)
            strides.Fail("has " + std::to_string(t.strides.size()) + " entries for a rank-" + std::to_string(rank) +
                         " shape");

        const Node dtype = n.Field("dtype");
        const std::optional<DType> parsed_dtype = plan_format::ParseDType(dtype.String());
        if (!parsed_dtype) dtype.Fail("unknown dtype \"" + dtype.String() + "\" (fp16, bf16, fp32, int8 or int32)");
        t.dtype = *parsed_dtype;

        const Node role = n.Field("role");
        const std::optional<TensorRole> parsed_role = plan_format::ParseRole(role.String());
        if (!parsed_role) role.Fail("unknown role \"" + role.String() + "\" (input or output)");
        t.role = *parsed_role;

        const Node loops = n.Field("loops");
        for (const Node& l : loops.Elements()) t.loops.push_back(int(l.Int(0, kMaxLoop)));
        if (t.loops.size() != rank)
            loops.Fail("has " + std::to_string(t.loops.size()) + " entries for a rank-" + std::to_string(rank) +
                       " shape");

        const Node bytes = n.Field("bytes");
        // Sizes are int64 everywhere past the reader (allocations, copies).
        t.bytes = uint64_t(bytes.Int(0, INT64_MAX));
        const std::optional<uint64_t> extent = ExtentBytes(t);
        if (!extent) n.Fail("shape and strides reach past 2^64 bytes");
        if (t.bytes < *extent)
            bytes.Fail(std::to_string(t.bytes) + " is less than the " + std::to_string(*extent) +
                       " bytes its shape and strides reach");
        return t;
    }

    Operation ReadOperation(const Node& n, const std::vector<TensorSpec>& plan_tensors) {
        n.AllowOnly({"name", "tensors", "compute", "correction"});
        SpyreCompute compute;
        compute.name = n.Field("name").NonEmptyString();

        const Node tensors = n.Field("tensors");
        std::vector<size_t> tensor_indices;
        for (const Node& index : tensors.Elements()) {
            const int64_t i = index.Int(0, INT64_MAX);
            if (uint64_t(i) >= plan_tensors.size())
                index.Fail("tensor " + std::to_string(i) + " is out of range: the plan has " +
                           std::to_string(plan_tensors.size()) + " tensors");
            const TensorSpec& t = plan_tensors[size_t(i)];
            // Correction slots are inputs then outputs, as the binary expects them.
            if (t.role == TensorRole::Input && !compute.tensors.empty() && compute.tensors.back().role == TensorRole::Output)
                index.Fail("input tensor \"" + t.name + "\" follows an output; an operation lists inputs, then outputs");
            compute.tensors.push_back(t);
            compute.expected_input_shapes.push_back(t.shape);
            tensor_indices.push_back(size_t(i));
        }
        if (compute.tensors.empty()) tensors.Fail("must list at least one tensor");
        const std::map<int, int64_t> loop_sizes = CheckLoops(tensors, compute.tensors);
        const size_t slots = compute.tensors.size();

        const Node c = n.Field("compute");
        c.AllowOnly({"binary", "size", "crc32", "reduction_loops", "untileable_loops"});
        compute.binary = ReadBlob(c);
        const ProgramImage program = DecodeProgram(c, compute.binary);
        if (program.slot_count != slots)
            BlobFail(c, "binary", "program has " + std::to_string(program.slot_count) +
                                      " correction slots; the operation has " + std::to_string(slots) + " tensors");
        CheckOperandsMatchTensors(c, program, compute.tensors);
        CheckWritesGoToOutputs(c, program, compute.tensors);
        compute.reduction_loops = ReadLoopList(c.Field("reduction_loops"), loop_sizes);
        compute.untileable_loops = ReadLoopList(c.Field("untileable_loops"), loop_sizes);
        CheckReductionLoops(c.Field("reduction_loops"), compute);

        Operation op(std::move(compute));
        op.tensor_indices = std::move(tensor_indices);
        if (const std::optional<Node> k = n.OptionalField("correction")) op.correction = ReadCorrection(*k, slots);
        // Only the correction puts a launch's tensor addresses into the
        // program: without one its operands would stay where the compiler
        // left them (address 0) and the launch would write there.
        else if (!program.relocs.empty())
            n.Fail("has no correction (absent or null), but its program has " + std::to_string(program.relocs.size()) +
                   " relocation(s) for its tensors: nothing would put their addresses in it");
        return op;
    }

    // Each op writes its last operand (uapi/spyre_program.h). A slot bound
    // to an input tensor would have the launch overwrite the caller's input
    // (or fault OVERLAP when the same tensor is also read).
    void CheckWritesGoToOutputs(const Node& entry, const ProgramImage& program,
                                const std::vector<TensorSpec>& tensors) const {
        const std::vector<bool> written = WrittenOperands(program);
        for (const spyre_program_reloc& r : program.relocs) {
            if (r.operand >= written.size() || r.slot >= tensors.size() || !written[r.operand]) continue;
            if (tensors[r.slot].role != TensorRole::Output)
                BlobFail(entry, "binary", "writes operand " + std::to_string(r.operand) + " (slot " +
                                              std::to_string(r.slot) + "), but the operation binds input tensor \"" +
                                              tensors[r.slot].name + "\" there; a written slot takes an output");
        }
    }

    // The tiler trusts the manifest's shapes and strides, so they must be the
    // ones the binary was built with: each relocated operand against the
    // tensor of its slot (right-aligned: an operand may add leading size-1
    // dims). Malformed tables are left to the device, which validates them.
    void CheckOperandsMatchTensors(const Node& entry, const ProgramImage& program,
                                   const std::vector<TensorSpec>& tensors) const {
        for (const spyre_program_reloc& r : program.relocs) {
            if (r.operand >= program.operands.size() || r.slot >= tensors.size()) continue;
            const spyre_program_operand& o = program.operands[r.operand];
            const TensorSpec& t = tensors[r.slot];
            bool same = o.rank >= t.shape.size() && o.rank <= SPYRE_PROGRAM_MAX_RANK && o.dtype == ProgramDType(t.dtype);
            const size_t lead = same ? o.rank - t.shape.size() : 0;
            for (size_t d = 0; same && d < o.rank; ++d)
                same = d < lead ? o.shape[d] == 1
                                : o.shape[d] == uint64_t(t.shape[d - lead]) && o.strides[d] == uint64_t(t.strides[d - lead]);
            if (!same)
                BlobFail(entry, "binary", "operand " + std::to_string(r.operand) + " (slot " + std::to_string(r.slot) +
                                              ") is not tensor \"" + t.name + "\" as the manifest describes it " +
                                              "(dtype, shape or strides differ)");
        }
    }

    // Every dim on one loop has the loop's size, or 1 (broadcast). Returns the sizes.
    static std::map<int, int64_t> CheckLoops(const Node& where, const std::vector<TensorSpec>& tensors) {
        std::map<int, std::pair<int64_t, std::string>> seen;  // loop -> size, which dim set it
        for (const TensorSpec& t : tensors) {
            for (size_t d = 0; d < t.shape.size(); ++d) {
                const std::string dim = "tensor \"" + t.name + "\" dim " + std::to_string(d);
                auto [it, fresh] = seen.emplace(t.loops[d], std::pair{t.shape[d], dim});
                if (fresh || t.shape[d] == 1) continue;
                if (it->second.first == 1) {
                    it->second = {t.shape[d], dim};
                } else if (it->second.first != t.shape[d]) {
                    where.Fail("loop " + std::to_string(t.loops[d]) + " is " + std::to_string(it->second.first) +
                               " in " + it->second.second + " but " + std::to_string(t.shape[d]) + " in " + dim);
                }
            }
        }
        std::map<int, int64_t> sizes;
        for (const auto& [loop, size_and_dim] : seen) sizes[loop] = size_and_dim.first;
        return sizes;
    }

    static std::vector<int> ReadLoopList(const Node& list, const std::map<int, int64_t>& loop_sizes) {
        std::vector<int> loops;
        for (const Node& l : list.Elements()) {
            const int loop = int(l.Int(0, kMaxLoop));
            if (!loop_sizes.contains(loop)) l.Fail("loop " + std::to_string(loop) + " indexes none of the operation's tensors");
            if (std::find(loops.begin(), loops.end(), loop) != loops.end())
                l.Fail("loop " + std::to_string(loop) + " is listed twice");
            loops.push_back(loop);
        }
        return loops;
    }

    // A reduction loop indexes no output, except through a kept size-1 dim (reduce).
    static void CheckReductionLoops(const Node& list, const SpyreCompute& compute) {
        for (size_t r = 0; r < compute.reduction_loops.size(); ++r)
            for (const TensorSpec& t : compute.tensors) {
                if (t.role != TensorRole::Output) continue;
                for (size_t d = 0; d < t.shape.size(); ++d)
                    if (t.loops[d] == compute.reduction_loops[r] && t.shape[d] != 1)
                        list.Elements()[r].Fail("reduction loop " + std::to_string(t.loops[d]) + " indexes output \"" +
                                                t.name + "\" dim " + std::to_string(d) + " (size " +
                                                std::to_string(t.shape[d]) + ")");
            }
    }

    CorrectionMetadata ReadCorrection(const Node& k, size_t slots) {
        k.AllowOnly({"binary", "size", "crc32", "input_size"});
        CorrectionMetadata m;
        const Node input_size = k.Field("input_size");
        m.input_size = input_size.Uint();
        if (m.input_size != slots * sizeof(uint64_t))
            input_size.Fail("is " + std::to_string(m.input_size) + "; the operation has " + std::to_string(slots) +
                            " tensors, so " + std::to_string(slots * sizeof(uint64_t)) + " (one u64 address each)");
        m.binary = ReadBlob(k);
        const ProgramImage program = DecodeProgram(k, m.binary);
        if (program.ops.size() != 1 || program.ops[0].opcode != SPYRE_PROG_OP_CORRECT)
            BlobFail(k, "binary", "not a correction program: it must hold exactly one CORRECT op");
        if (program.ops[0].u.correct.entry_count != slots)
            BlobFail(k, "binary", "corrects " + std::to_string(program.ops[0].u.correct.entry_count) +
                            " slots; the operation has " + std::to_string(slots) + " tensors");
        return m;
    }

    // The blob an entry's "binary" names, after checking its size and CRC-32
    // against the entry's "size" and "crc32".
    std::vector<uint8_t> ReadBlob(const Node& entry) {
        const Node binary = entry.Field("binary");
        const std::string name = binary.String();
        if (!plan_format::IsBlobName(name))
            binary.Fail("\"" + name + "\" is not a plain file name inside the plan directory");
        const auto it = out_.blobs.find(name);
        if (it == out_.blobs.end())
            binary.Fail("blob \"" + name + "\" missing" + (out_.origin.empty() ? "" : " from " + out_.origin));
        const std::vector<uint8_t>& bytes = it->second;

        const Node size = entry.Field("size");
        if (size.Uint() != bytes.size())
            BlobFail(entry, "size", "size " + std::to_string(bytes.size()) + ", manifest says " + std::to_string(size.Uint()));
        const Node crc = entry.Field("crc32");
        const std::optional<uint32_t> expected = plan_format::ParseCrc32(crc.String());
        if (!expected) crc.Fail("\"" + crc.String() + "\" is not a CRC-32 (0x and 1 to 8 hex digits)");
        const uint32_t actual = plan_format::Crc32(bytes);
        if (actual != *expected)
            BlobFail(entry, "crc32", "CRC-32 " + plan_format::Crc32Text(actual) + ", manifest says " +
                                         plan_format::Crc32Text(*expected));
        referenced_.insert(name);
        return bytes;
    }

    ProgramImage DecodeProgram(const Node& entry, const std::vector<uint8_t>& bytes) const {
        try {
            return ProgramImage::Decode(bytes);
        } catch (const Error& e) {
            BlobFail(entry, "binary", "not a valid program: " + e.message());
        }
    }

    // An error about a blob's content: names the blob file first, then the
    // manifest entry that refers to it.
    // `entry` is the manifest object whose "binary" names the blob; `field`
    // the one of its fields the blob contradicts.
    [[noreturn]] void BlobFail(const Node& entry, std::string_view field, const std::string& what) const {
        const Node at = entry.Field(field);
        throw Error(ErrorKind::InvalidArgument, Join(out_.origin, entry.Field("binary").String()) + ": " + what +
                                                    " (" + std::string(plan_format::kManifestFile) + " " + at.path() + ")");
    }

    const CompilerOutput& out_;
    const std::string manifest_file_;
    std::set<std::string> referenced_;
};

}  // namespace

ExecutionPlan::ExecutionPlan(const CompilerOutput& compiler_output) { PlanReader(compiler_output).Read(*this); }

std::vector<const CorrectionMetadata*> ExecutionPlan::correction_metadata() const {
    std::vector<const CorrectionMetadata*> out;
    out.reserve(operations.size());
    for (const Operation& op : operations) out.push_back(op.correction ? &*op.correction : nullptr);
    return out;
}

}  // namespace spyre
