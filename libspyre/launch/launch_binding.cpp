// SPDX-License-Identifier: Apache-2.0
#include "launch/launch_binding.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "device/device_internals.hpp"
#include "launch/operation_access.hpp"
#include "launch/same_device.hpp"
#include "launch/variant_cache.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/uapi/spyre_program.h"
#include "stream/control_blocks.hpp"

namespace spyre::detail {

uint16_t UnboundRelocations(const std::vector<uint8_t>& bytes) {
    spyre_program_header h;
    if (bytes.size() < sizeof h) return 0;
    std::memcpy(&h, bytes.data(), sizeof h);
    if (h.magic != SPYRE_PROGRAM_MAGIC || h.reloc_count == 0) return 0;
    const uint64_t relocs_end = uint64_t(h.relocs_offset) + uint64_t(h.reloc_count) * sizeof(spyre_program_reloc);
    if (relocs_end > bytes.size()) return 0;
    uint16_t unbound = 0;
    for (uint16_t i = 0; i < h.reloc_count; ++i) {
        spyre_program_reloc r;
        std::memcpy(&r, bytes.data() + h.relocs_offset + i * sizeof r, sizeof r);
        const uint64_t at = uint64_t(h.operands_offset) + uint64_t(r.operand) * sizeof(spyre_program_operand) +
                            offsetof(spyre_program_operand, addr);
        if (r.operand >= h.operand_count || at + sizeof(uint64_t) > bytes.size()) return 0;
        uint64_t addr;
        std::memcpy(&addr, bytes.data() + at, sizeof addr);
        // No buffer is at address 0 (SpyreAllocator::kNullGuard): an
        // operand there is one nothing bound, also in a program bound in part.
        if (addr == 0) ++unbound;
    }
    return unbound;
}

namespace {

[[noreturn]] void Invalid(const std::string& message) { throw Error(ErrorKind::InvalidArgument, message); }

std::vector<uint8_t> AddressTable(std::span<const uint64_t> addresses) {
    std::vector<uint8_t> bytes(addresses.size() * sizeof(uint64_t));
    for (size_t i = 0; i < addresses.size(); ++i)
        for (int b = 0; b < 8; ++b) bytes[i * 8 + size_t(b)] = uint8_t(addresses[i] >> (8 * b));
    return bytes;
}

// What a launch goes by: the compute and correction as loaded (an edited
// copy of a loaded Operation runs the program on the device, which was
// built for these), or the Operation's own when no plan loaded it.
const SpyreCompute* LaunchedCompute(const Operation& op) {
    if (const LoadedOperation* loaded = OperationAccess::Loaded(op)) return &loaded->compute;
    return op.compute() ? &*op.compute() : nullptr;
}

const std::optional<CorrectionMetadata>& LaunchedCorrection(const Operation& op) {
    if (const LoadedOperation* loaded = OperationAccess::Loaded(op)) return loaded->correction;
    return op.correction;
}

const SpyreCompute& LoadedCompute(const Operation& op) {
    const SpyreCompute& compute = *LaunchedCompute(op);
    if (!compute.device_handle())
        Invalid(OpName(op) + ": its compute binary is not on the device (load the plan first)");
    return compute;
}


// Count and dtype: wrong for any kind of launch.
void CheckCountAndDTypes(const Operation& op, std::span<const SpyreTensor> tensors) {
    const auto& specs = LaunchedCompute(op)->tensors;
    if (tensors.size() != specs.size())
        Invalid(OpName(op) + " takes " + std::to_string(specs.size()) + " tensors, got " + std::to_string(tensors.size()));
    for (size_t i = 0; i < specs.size(); ++i)
        if (tensors[i].data_type() != specs[i].dtype)
            Invalid(OpName(op) + " tensor " + std::to_string(i) + " ('" + specs[i].name + "') is " +
                    ToString(tensors[i].data_type()) + ", the compute expects " + ToString(specs[i].dtype));
}

// An output whose elements overlap each other (a stride of 0, or rows
// closer than a row is long) would hold whichever tile wrote last: every
// element of an output is written once. Dimensions ordered by stride, each
// must step past all the elements the ones inside it reach.
void CheckOutputsDoNotOverlapThemselves(const Operation& op, std::span<const SpyreTensor> tensors) {
    const auto& specs = LaunchedCompute(op)->tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].role != TensorRole::Output) continue;
        const std::vector<int64_t>& shape = tensors[i].shape();
        const std::vector<int64_t> strides = tensors[i].element_strides();
        std::vector<size_t> dims;
        for (size_t d = 0; d < shape.size(); ++d)
            if (shape[d] > 1) dims.push_back(d);
        std::sort(dims.begin(), dims.end(),
                  [&](size_t a, size_t b) { return std::llabs(strides[a]) < std::llabs(strides[b]); });
        int64_t reach = 1;  // elements the dimensions so far span
        for (size_t d : dims) {
            const int64_t step = std::llabs(strides[d]);
            if (step < reach)
                Invalid(OpName(op) + " tensor " + std::to_string(i) + " ('" + specs[i].name +
                        "') is an output whose elements overlap: dimension " + std::to_string(d) + " steps " +
                        std::to_string(strides[d]) + " elements, but the dimensions inside it span " +
                        std::to_string(reach) + " (strides " + ShapeText(strides) +
                        "); an output must have each element once");
            reach += step * (shape[d] - 1);
        }
    }
}

// A tiled launch over an output that overlaps an input without being it
// (the same address, dtype, layout, shape and strides): each tile passes
// the device's OVERLAP check on its own, yet reads bytes an earlier tile
// wrote (found probing from outside: an Add over views shifted by a tile
// gave 768 of 1024 elements wrong, with no error), or fails midway with
// tiles written. One launch of the whole is OVERLAP (docs/hardware.md);
// the tiled one is refused before any tile runs.
void CheckTiledOutputsDoNotOverlapInputs(const Operation& op, std::span<const SpyreTensor> tensors,
                                         std::span<const uint64_t> addresses) {
    const auto& specs = LaunchedCompute(op)->tensors;
    auto reach = [&](size_t i) {  // bytes from the first element to past the last
        unsigned __int128 r = ElementSize(tensors[i].data_type());
        for (size_t d = 0; d < tensors[i].shape().size(); ++d)
            r += (unsigned __int128)(tensors[i].shape()[d] - 1) * uint64_t(tensors[i].stride()[d]);
        return r;
    };
    for (size_t o = 0; o < specs.size(); ++o) {
        if (specs[o].role != TensorRole::Output) continue;
        for (size_t i = 0; i < specs.size(); ++i) {
            if (specs[i].role != TensorRole::Input) continue;
            const SpyreTensor& out = tensors[o];
            const SpyreTensor& in = tensors[i];
            const bool apart = addresses[o] + reach(o) <= addresses[i] || addresses[i] + reach(i) <= addresses[o];
            const bool same = addresses[o] == addresses[i] && out.data_type() == in.data_type() &&
                              out.layout() == in.layout() && out.shape() == in.shape() && out.stride() == in.stride();
            if (apart || same) continue;
            Invalid(OpName(op) + " tensor " + std::to_string(o) + " ('" + specs[o].name +
                    "') is an output that overlaps input tensor " + std::to_string(i) + " ('" + specs[i].name +
                    "') without being it: a tiled launch would read bytes its earlier tiles wrote (one launch of "
                    "the whole is OVERLAP); give the output memory of its own, or the very input for an "
                    "in-place elementwise op");
        }
    }
}

// An exact launch runs the compute as compiled: anything else would read
// and write the wrong bytes.
void CheckCompiledShapes(const Operation& op, std::span<const SpyreTensor> tensors) {
    const auto& specs = LaunchedCompute(op)->tensors;
    for (size_t i = 0; i < specs.size(); ++i) {
        const SpyreTensor& t = tensors[i];
        const TensorSpec& spec = specs[i];
        const std::string who = OpName(op) + " tensor " + std::to_string(i) + " ('" + spec.name + "')";
        if (t.shape().size() != spec.shape.size())
            Invalid(who + " has rank " + std::to_string(t.shape().size()) + ", expected " +
                    std::to_string(spec.shape.size()));
        // Shapes first: a wrong shape usually brings wrong strides along, and
        // the shape is what the caller got wrong.
        for (size_t d = 0; d < spec.shape.size(); ++d)
            if (t.shape()[d] != spec.shape[d])
                Invalid(who + " dimension " + std::to_string(d) + " is " + std::to_string(t.shape()[d]) +
                        ", compiled for " + std::to_string(spec.shape[d]) + " (shape " + ShapeText(t.shape()) + " vs " +
                        ShapeText(spec.shape) + "; LaunchTiled handles larger tensors)");
        const std::vector<int64_t> strides = t.element_strides();
        for (size_t d = 0; d < spec.shape.size(); ++d)
            if (strides[d] != spec.strides[d])
                Invalid(who + " dimension " + std::to_string(d) + " has stride " + std::to_string(strides[d]) +
                        " elements, compiled for " + std::to_string(spec.strides[d]));
    }
}

bool MatchesCompiled(const Operation& op, std::span<const SpyreTensor> tensors) {
    const auto& specs = LaunchedCompute(op)->tensors;
    for (size_t i = 0; i < specs.size(); ++i)
        if (tensors[i].shape() != specs[i].shape || tensors[i].element_strides() != specs[i].strides) return false;
    return true;
}

// The steps of one launch, in order: preprocessing (the correction input
// filled from `addresses`), then the compute. `variant` replaces the
// compiled program and its correction for a tile that needs another one.
void Decompose(DeviceCore& core, std::vector<ControlBlock>& group, const Operation& op,
               std::span<const uint64_t> addresses, const VariantProgram* variant) {
    const auto& steps = op.preprocess();
    for (size_t i = 0; i < steps.size(); ++i) {
        if (const auto* copy = std::get_if<PreProcessCompute::CopyToDevice>(&steps[i].step())) {
            if (op.correction_step() && *op.correction_step() == i) {
                // The correction input: the tensors' addresses, one u64 per slot.
                if (addresses.size() * sizeof(uint64_t) != copy->size)
                    Invalid(OpName(op) + " step " + std::to_string(i) + ": the correction input takes " +
                            std::to_string(copy->size / 8) + " tensor addresses, got " +
                            std::to_string(addresses.size()));
                group.push_back(
                    OwnedCopyToDevice(core, variant ? variant->table.handle() : copy->device_handle, AddressTable(addresses)));
            } else {
                if (!copy->host_address)
                    Invalid(OpName(op) + " step " + std::to_string(i) + ": CopyToDevice without a host address");
                group.push_back(CopyToDevice(core, copy->host_address, copy->device_handle, copy->size));
            }
        } else if (const auto* back = std::get_if<PreProcessCompute::CopyFromDevice>(&steps[i].step())) {
            if (!back->host_address)
                Invalid(OpName(op) + " step " + std::to_string(i) + ": CopyFromDevice without a host address");
            group.push_back(CopyFromDevice(core, back->host_address, back->device_handle, back->size));
        } else {
            const auto& launch = std::get<PreProcessCompute::DeviceLaunch>(steps[i].step());
            const auto& correction = LaunchedCorrection(op);
            const bool is_correction = correction && correction->binary_handle() &&
                                       launch.device_handle == *correction->binary_handle();
            if (variant && is_correction)
                group.push_back(Launch(core, variant->correction.handle(), variant->correction_size));
            else
                group.push_back(Launch(core, launch.device_handle, launch.size));
        }
    }
    if (const SpyreCompute* compute = LaunchedCompute(op)) {
        if (variant)
            group.push_back(Launch(core, variant->program.handle(), variant->program_size));
        else
            group.push_back(Launch(core, *LoadedCompute(op).device_handle(), compute->binary_size()));
    }
}

}  // namespace

void CheckBoundToItsTensors(const Operation& op) {
    const SpyreCompute* compute = LaunchedCompute(op);
    if (!compute) return;
    const auto& correction = LaunchedCorrection(op);
    if (correction && correction->binary_handle() && op.correction_step()) return;
    if (const uint16_t relocs = UnboundRelocations(compute->binary))
        Invalid(OpName(op) + " has no loaded correction, but its program has " + std::to_string(relocs) +
                " relocation(s) for its tensors unbound (address 0 as compiled): nothing would put their addresses "
                "in it, and it would run at device address 0 (or, copied from a loaded plan, at its last launch's "
                "tensors); launch an Operation of a loaded plan (LoadExecutionPlan), or a copy of one, or bind the "
                "program on the host (BuiltKernel::Bind)");
}

void CheckHostBoundOperands(const DeviceCore& core, const Operation& op) {
    const SpyreCompute* compute = LaunchedCompute(op);
    if (!compute || compute->binary.empty()) return;
    const auto& correction = LaunchedCorrection(op);
    if (correction && correction->binary_handle() && op.correction_step()) return;
    ProgramImage image;
    try {
        image = ProgramImage::Decode(compute->binary);
    } catch (const Error&) {
        return;  // no program image: AddInstruction refuses it, the device faults it
    }
    std::vector<bool> checked(image.operands.size());
    for (const spyre_program_op& o : image.ops)
        for (uint16_t n : o.operands) {
            if (n == SPYRE_OPERAND_NONE || n >= image.operands.size() || checked[n]) continue;
            checked[n] = true;
            const uint64_t extent = spyre_operand_extent(&image.operands[n]);
            if (extent == 0) continue;  // a descriptor the device refuses
            try {
                core.CheckAddressToWrite(image.operands[n].addr, extent);
            } catch (const Error& e) {
                throw Error(e.kind(),
                            OpName(op) + " runs its program as bound on the host, and its operand " + std::to_string(n) +
                                " is not a live buffer of this device: " + e.message() +
                                "; bind it again (BuiltKernel::Bind) to buffers the device holds",
                            e.context());
            }
        }
}

std::string OpName(const Operation& op) { return op.name.empty() ? std::string("operation") : "operation '" + op.name + "'"; }

Error AtOperation(const Error& e, size_t index) {
    ErrorContext context = e.context();
    context.op_index = index;
    return Error(e.kind(), e.message(), context);
}

namespace {

// An exact launch of an Operation already checked against the device.
BoundLaunch BindAddresses(DeviceCore& core, const Operation& op, std::span<const DeviceHandle> handles, const char* entry) {
    BoundLaunch bound;
    bound.op = &op;
    const SpyreCompute* compute = LaunchedCompute(op);
    if (compute) LoadedCompute(op);
    CheckBoundToItsTensors(op);
    CheckHostBoundOperands(core, op);
    // One handle per tensor slot (none for a compute whose addresses are
    // fixed in its binary): a different count is a caller's mistake.
    if (compute && !compute->tensors.empty() && !handles.empty() && handles.size() != compute->tensors.size())
        Invalid(OpName(op) + " takes " + std::to_string(compute->tensors.size()) + " tensors, got " +
                std::to_string(handles.size()) + " device handles");
    for (size_t i = 0; i < handles.size(); ++i) {
        const uint64_t bytes = compute && i < compute->tensors.size() && compute->tensors[i].bytes ? compute->tensors[i].bytes : 1;
        CheckSameDevice(handles[i].device(), core.id(), [&] { return std::string(entry) + ": handle " + std::to_string(i); },
                        "stream");
        try {
            bound.addresses.push_back(core.AddressToWrite(handles[i], bytes));
        } catch (const Error& e) {
            // The range's size is the plan's, not the caller's: say so.
            if (e.kind() != ErrorKind::InvalidArgument || bytes == 1) throw;
            throw Error(e.kind(),
                        OpName(op) + " tensor " + std::to_string(i) + " ('" + compute->tensors[i].name +
                            "'): the plan compiled it for " + std::to_string(bytes) +
                            " bytes (its tensors[].bytes), which must lie in one live allocation: " + e.message(),
                        e.context());
        }
    }
    return bound;
}

}  // namespace

BoundLaunch BindLaunch(DeviceCore& core, const Operation& op, std::span<const DeviceHandle> handles, const char* entry) {
    CheckOperationDevice(op, core.id(), entry, "stream");
    return BindAddresses(core, op, handles, entry);
}

BoundLaunch BindLaunch(DeviceCore& core, const Operation& op, std::span<const SpyreTensor> tensors, LaunchMode mode,
                       const char* entry) {
    CheckOperationDevice(op, core.id(), entry, "stream");
    CheckTensorDevices(tensors, core.id(), entry, "stream");
    const SpyreCompute* compute = LaunchedCompute(op);
    if (mode == LaunchMode::Tiled && !compute) Invalid(OpName(op) + " has no compute to tile");
    // A compute without tensor metadata has its addresses fixed: nothing to check.
    const bool described = compute && !compute->tensors.empty();
    if (described) {
        LoadedCompute(op);
        CheckCountAndDTypes(op, tensors);
        CheckOutputsDoNotOverlapThemselves(op, tensors);
    }
    if (!described || mode == LaunchMode::Exact || MatchesCompiled(op, tensors)) {
        if (described) CheckCompiledShapes(op, tensors);
        std::vector<DeviceHandle> handles;
        for (const SpyreTensor& t : tensors) handles.push_back(t.device_handle());
        return BindAddresses(core, op, handles, entry);
    }

    BoundLaunch bound;
    bound.op = &op;
    for (const SpyreTensor& t : tensors) bound.tiled.push_back(TiledTensor{t.shape(), t.element_strides(), t.data_type()});
    auto make_plan = [&] {
        try {
            return PlanTiling(*compute, bound.tiled);
        } catch (const Error& e) {
            throw Error(e.kind(), OpName(op) + ": " + e.message(), e.context());
        }
    };
    LoadedOperation* loaded = OperationAccess::Loaded(op);
    std::shared_ptr<const TilingPlan> plan =
        loaded ? loaded->tilings.Get(bound.tiled, make_plan) : std::make_shared<const TilingPlan>(make_plan());
    if (plan->exact) {
        // Other strides on size-1 dims only: the compiled program runs as it is.
        bound.tiled.clear();
        CheckHostBoundOperands(core, op);
    } else {
        const auto& correction = LaunchedCorrection(op);
        if (!correction || !correction->binary_handle() || !op.correction_step() || !OperationAccess::Loaded(op))
            Invalid(OpName(op) + " has no program correction: its tensor addresses are fixed, so it cannot be tiled");
        bound.tiling = std::move(plan);
    }
    for (const SpyreTensor& t : tensors)
        bound.addresses.push_back(core.AddressToWrite(t.device_handle(), t.size_bytes()));
    if (bound.tiling) CheckTiledOutputsDoNotOverlapInputs(op, tensors, bound.addresses);
    return bound;
}

std::vector<SpyreTensor> SelectTensors(const Operation& op, std::span<const SpyreTensor> all) {
    std::vector<SpyreTensor> selected;
    if (op.tensor_indices.empty()) {
        const size_t n = LaunchedCompute(op) ? LaunchedCompute(op)->tensors.size() : 0;
        if (all.size() < n)
            Invalid(OpName(op) + " takes " + std::to_string(n) + " tensors, got " + std::to_string(all.size()));
        selected.assign(all.begin(), all.begin() + ptrdiff_t(n));
        return selected;
    }
    for (size_t t : op.tensor_indices) {
        if (t >= all.size())
            Invalid(OpName(op) + " binds tensor " + std::to_string(t) + ", only " + std::to_string(all.size()) + " given");
        selected.push_back(all[t]);
    }
    return selected;
}

void Enqueue(FlexStream& stream, const BoundLaunch& launch, const ProgressCallback& progress) {
    DeviceCore& core = *DeviceInternals::Core(stream);
    const Operation& op = *launch.op;
    if (!launch.tiling) {
        std::vector<ControlBlock> group;
        Decompose(core, group, op, launch.addresses, nullptr);
        stream.EnqueueGroup(group);
        if (progress) stream.AddCallback([progress] { progress({"LaunchTiled", 1, 1, "tiles"}); });
        return;
    }
    const TilingPlan& plan = *launch.tiling;
    // Variant programs come from the Operation's cache; a miss uploads the
    // program before any tile is enqueued.
    std::vector<const VariantProgram*> variants(plan.variants.size(), nullptr);
    LoadedOperation& loaded = *OperationAccess::Loaded(op);
    for (size_t v = 0; v < plan.variants.size(); ++v)
        if (!plan.variants[v].compiled) variants[v] = &loaded.variants.Get(core, loaded, launch.tiled, plan.variants[v]);
    // Every tile's group is built before any is enqueued, so a bad step
    // leaves nothing half done. One group per tile keeps its copy -> correct
    // -> compute together.
    std::vector<std::vector<ControlBlock>> groups(plan.iterations.size());
    std::vector<uint64_t> addresses(launch.addresses.size());
    for (size_t i = 0; i < plan.iterations.size(); ++i) {
        const TileIteration& it = plan.iterations[i];
        for (size_t s = 0; s < addresses.size(); ++s) addresses[s] = launch.addresses[s] + it.byte_offsets[s];
        Decompose(core, groups[i], op, addresses, variants[it.variant]);
    }
    if (!progress) {
        for (auto& g : groups) stream.EnqueueGroup(g);
        return;
    }
    // Progress as the tiles complete: a callback runs once the stream
    // reaches it, so done rises in stream order.
    const uint64_t total = groups.size();
    const uint64_t step = std::max<uint64_t>(1, total / 100);
    for (uint64_t i = 0; i < total; ++i) {
        stream.EnqueueGroup(groups[i]);
        if ((i + 1) % step == 0 || i + 1 == total)
            stream.AddCallback([progress, done = i + 1, total] { progress({"LaunchTiled", done, total, "tiles"}); });
    }
}

}  // namespace spyre::detail
