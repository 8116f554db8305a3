// SPDX-License-Identifier: Apache-2.0
#include "pci/memory_regions.hpp"

#include <algorithm>
#include <vector>

namespace spyre::mockdev {

namespace {
constexpr uint64_t kAlign = SPYRE_REGION_ALIGN;
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
}  // namespace

RegionTable::RegionTable(RegisterFile& regs, uint64_t grantable) : regs_(regs), grantable_(grantable / kAlign * kAlign) {
    std::lock_guard lock(mutex_);
    Publish();
}

uint64_t RegionTable::FindGap(uint64_t size) const {
    std::vector<Entry> used;
    for (const Entry& e : entries_)
        if (e.size) used.push_back(e);
    std::sort(used.begin(), used.end(), [](const Entry& a, const Entry& b) { return a.base < b.base; });
    uint64_t cursor = 0;
    for (const Entry& e : used) {
        if (e.base - cursor >= size) return cursor;
        cursor = e.base + e.size;
    }
    return grantable_ - cursor >= size ? cursor : UINT64_MAX;
}

uint64_t RegionTable::Largest() const {
    std::vector<Entry> used;
    for (const Entry& e : entries_)
        if (e.size) used.push_back(e);
    std::sort(used.begin(), used.end(), [](const Entry& a, const Entry& b) { return a.base < b.base; });
    uint64_t cursor = 0, largest = 0;
    for (const Entry& e : used) {
        largest = std::max(largest, e.base - cursor);
        cursor = e.base + e.size;
    }
    return std::max(largest, grantable_ - cursor);
}

uint32_t RegionTable::Alloc(uint64_t size, uint32_t& index) {
    if (size == 0) return SPYRE_REGION_EINVAL;
    auto free_entry = std::find_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.size == 0; });
    if (free_entry == entries_.end()) return SPYRE_REGION_EFULL;
    size = AlignUp(size);
    const uint64_t base = FindGap(size);
    if (base == UINT64_MAX) return SPYRE_REGION_ENOSPC;
    *free_entry = Entry{base, size};
    index = uint32_t(free_entry - entries_.begin());
    return SPYRE_REGION_OK;
}

void RegionTable::Command(uint32_t cmd) {
    std::lock_guard lock(mutex_);
    const uint32_t arg = regs_.Load32(SPYRE_REG_REGION_ARG);
    uint32_t result = SPYRE_REGION_OK;
    uint32_t index = regs_.Load32(SPYRE_REG_REGION_INDEX);
    switch (cmd) {
    case SPYRE_REGION_CMD_ALLOC: result = Alloc(uint64_t(arg) << 20, index); break;
    case SPYRE_REGION_CMD_FREE:
        if (arg >= entries_.size() || entries_[arg].size == 0) result = SPYRE_REGION_EINVAL;
        else entries_[arg] = Entry{};
        break;
    case SPYRE_REGION_CMD_FREE_ALL: entries_.fill(Entry{}); break;
    default: result = SPYRE_REGION_EINVAL; break;
    }
    regs_.Store32(SPYRE_REG_REGION_INDEX, index);
    regs_.Store32(SPYRE_REG_REGION_RESULT, result);
    Publish();
}

void RegionTable::Clear() {
    std::lock_guard lock(mutex_);
    entries_.fill(Entry{});
    Publish();
}

bool RegionTable::SetGrantable(uint64_t grantable) {
    std::lock_guard lock(mutex_);
    grantable = grantable / kAlign * kAlign;
    for (const Entry& e : entries_)
        if (e.size && e.base + e.size > grantable) return false;
    grantable_ = grantable;
    Publish();
    return true;
}

void RegionTable::Publish() {
    uint32_t count = 0;
    for (uint32_t i = 0; i < entries_.size(); ++i) {
        regs_.Store64(SPYRE_REG_REGION_BASE(i), entries_[i].base);
        regs_.Store64(SPYRE_REG_REGION_SIZE(i), entries_[i].size);
        count += entries_[i].size != 0;
    }
    regs_.Store32(SPYRE_REG_REGION_MAX, SPYRE_REGION_MAX_ENTRIES);
    regs_.Store32(SPYRE_REG_REGION_COUNT, count);
    regs_.Store32(SPYRE_REG_REGION_ALIGN, SPYRE_REGION_ALIGN);
    regs_.Store64(SPYRE_REG_REGION_LARGEST, Largest());
    regs_.Store64(SPYRE_REG_REGION_GRANTABLE, grantable_);
}

}  // namespace spyre::mockdev
