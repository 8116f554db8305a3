// SPDX-License-Identifier: Apache-2.0
#include "launch/variant_cache.hpp"

#include "spyre/error.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre::detail {

namespace {

DeviceBuffer Upload(DeviceCore& core, const std::vector<uint8_t>& bytes) {
    DeviceBuffer buffer = DeviceBuffer::Allocate(core.shared_from_this(), bytes.size());
    core.dma->Wait(core.dma->CopyToDevice(bytes.data(), buffer.handle(), bytes.size()));
    core.KeepForPrograms(buffer.handle());
    return buffer;
}

}  // namespace

const VariantProgram& VariantCache::Get(DeviceCore& core, const LoadedOperation& op, std::span<const TiledTensor> tensors,
                                        const TileVariant& variant) {
    Key key{variant.shapes, {}, variant.accumulate};
    for (size_t s = 0; s < tensors.size(); ++s) {
        std::vector<int64_t>& strides = key.strides.emplace_back(tensors[s].strides);
        for (size_t d = 0; d < strides.size(); ++d)
            if (variant.shapes[s][d] == 1) strides[d] = 0;  // never written into the program
    }
    std::lock_guard lock(mu_);
    if (auto it = programs_.find(key); it != programs_.end()) return *it->second;

    const SpyreCompute& compute = op.compute;
    const CorrectionMetadata& c = *op.correction;
    auto v = std::make_unique<VariantProgram>();
    const std::vector<uint8_t> program = SpecializeProgram(compute.binary, compute, tensors, variant);
    v->program_size = program.size();
    v->table = DeviceBuffer::Allocate(core.shared_from_this(), c.input_size);
    v->program = Upload(core, program);
    std::vector<uint8_t> correction = c.binary;
    SetCorrectionTarget(correction, core.allocator->DeviceAddress(v->program.handle(), program.size()),
                        core.allocator->DeviceAddress(v->table.handle(), c.input_size));
    v->correction_size = correction.size();
    v->correction = Upload(core, correction);
    return *programs_.emplace(std::move(key), std::move(v)).first->second;
}

size_t TilingPlanCache::size() const {
    std::lock_guard lock(mu_);
    return plans_.size();
}

size_t VariantCache::size() const {
    std::lock_guard lock(mu_);
    return programs_.size();
}

}  // namespace spyre::detail
