// SPDX-License-Identifier: Apache-2.0
#include "pci/card_memory.hpp"

#include <algorithm>
#include <cstring>

namespace spyre::mockdev {

MemorySlice VfMemorySlice(uint64_t card_mem_size, unsigned num_vfs, unsigned vf) {
    const uint64_t slice = card_mem_size / (num_vfs + 1) / kMemSliceAlign * kMemSliceAlign;
    return MemorySlice{vf * slice, slice};
}

CardMemory::CardMemory(std::string base_name, uint64_t size)
    : base_name_(std::move(base_name)), view_(size), pf_(NewFile(0, size)), pf_guard_(view_.data(), size, repairs_[0]) {
    pf_->MapAt(view_.data(), 0, size);
    pf_guard_.Watch(*pf_);
}

std::unique_ptr<ShmFile> CardMemory::NewFile(unsigned fn, uint64_t size) const {
    return NewShmFile(base_name_ + "f" + std::to_string(fn) + ".mem", size);  // a new name every time
}

CardMemory::Vf CardMemory::NewVf(unsigned fn, MemorySlice slice) {
    Vf vf{slice, NewFile(fn, slice.size), std::make_unique<ShmGuard>(view_.data() + slice.base, slice.size, repairs_[fn])};
    vf.guard->Watch(*vf.file);
    return vf;
}

std::vector<MemorySlice> CardMemory::PfPieces() const {
    std::vector<MemorySlice> pieces;
    uint64_t at = 0;
    for (const Vf& vf : vfs_) {
        if (vf.slice.base > at) pieces.push_back({at, vf.slice.base - at});
        at = vf.slice.base + vf.slice.size;
    }
    if (at < size()) pieces.push_back({at, size() - at});
    return pieces;
}

void CardMemory::SetVfs(unsigned num_vfs) {
    std::lock_guard lock(mutex_);
    if (num_vfs == 0) {
        // The PF's object shows again where the VFs were; it was scrubbed
        // there when they were made, and the VFs' objects go with their data.
        for (const Vf& vf : vfs_) pf_->MapAt(view_.data() + vf.slice.base, vf.slice.base, vf.slice.size);
        vfs_.clear();
        return;
    }
    std::vector<Vf> made;
    for (unsigned i = 1; i <= num_vfs; ++i) {
        repairs_[i].store(0);  // a new VF: no VF of that number guards anything now
        const MemorySlice slice = VfMemorySlice(size(), num_vfs, i);
        made.push_back(NewVf(i, slice));
    }
    for (const Vf& vf : made) {
        vf.file->MapAt(view_.data() + vf.slice.base, 0, vf.slice.size);
        // Whatever the PF left under the slice is unreachable now: free it
        // (where holes cannot be punched the pages just stay allocated; no
        // VF ever sees them, it has its own object).
        (void)pf_->PunchHole(vf.slice.base, vf.slice.size);
    }
    vfs_ = std::move(made);
}

void CardMemory::Renew(unsigned fn) {
    std::lock_guard lock(mutex_);
    if (fn != 0) return RenewVf(fn);
    auto fresh = NewFile(0, size());
    for (const MemorySlice& piece : PfPieces()) fresh->MapAt(view_.data() + piece.base, piece.base, piece.size);
    pf_guard_.Watch(*fresh);  // before the old file closes
    pf_ = std::move(fresh);
    // The PF's owner reached every slice through the device; the slices of
    // held VFs are their holders' own, the others are nobody's: renewed.
    for (unsigned i = 1; i <= vfs_.size(); ++i)
        if (!vfs_[i - 1].held) RenewVf(i);
}

void CardMemory::RenewVf(unsigned fn) {
    if (fn == 0 || fn > vfs_.size()) return;  // no such VF (any more)
    Vf& vf = vfs_[fn - 1];
    auto fresh = NewFile(fn, vf.slice.size);
    fresh->MapAt(view_.data() + vf.slice.base, 0, vf.slice.size);
    vf.guard->Watch(*fresh);  // before the old file closes
    vf.file = std::move(fresh);
}

void CardMemory::CutBackGrowth(unsigned fn) {
    std::lock_guard lock(mutex_);
    if (fn == 0) pf_guard_.CutBackGrowth();
    else if (fn <= vfs_.size()) vfs_[fn - 1].guard->CutBackGrowth();
}

void CardMemory::SetHeld(unsigned fn, bool held) {
    std::lock_guard lock(mutex_);
    if (fn != 0 && fn <= vfs_.size()) vfs_[fn - 1].held = held;
}

std::string CardMemory::ObjectName(unsigned fn) const {
    std::lock_guard lock(mutex_);
    if (fn == 0) return pf_->name();
    return fn <= vfs_.size() ? vfs_[fn - 1].file->name() : std::string();
}

uint64_t CardMemory::MappableSize(unsigned fn) const {
    std::lock_guard lock(mutex_);
    if (fn == 0) return vfs_.empty() ? size() : vfs_.front().slice.base;
    return fn <= vfs_.size() ? vfs_[fn - 1].slice.size : 0;
}

void CardMemory::ReadAt(uint64_t card_offset, void* buf, size_t len) const {
    auto* out = static_cast<uint8_t*>(buf);
    std::lock_guard lock(mutex_);
    while (len > 0) {
        if (card_offset >= size()) {
            std::memset(out, 0, len);
            return;
        }
        // The object that holds card_offset, and how far it goes.
        const ShmFile* file = pf_.get();
        uint64_t file_offset = card_offset;
        uint64_t end = size();
        for (const Vf& vf : vfs_) {
            if (card_offset >= vf.slice.base && card_offset < vf.slice.base + vf.slice.size) {
                file = vf.file.get();
                file_offset = card_offset - vf.slice.base;
                end = vf.slice.base + vf.slice.size;
                break;
            }
            if (vf.slice.base > card_offset) {
                end = vf.slice.base;
                break;
            }
        }
        const size_t n = size_t(std::min<uint64_t>(len, end - card_offset));
        file->ReadAt(file_offset, out, n);
        out += n;
        card_offset += n;
        len -= n;
    }
}

}  // namespace spyre::mockdev
