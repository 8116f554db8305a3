// SPDX-License-Identifier: Apache-2.0
#include "pci/card.hpp"

#include <pthread.h>

#include <cerrno>
#include <system_error>

#include "log.hpp"
#include "spyre/uapi/spyre_pci.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

Card::Card(const CardParams& params)
    : params_(params),
      memory_(ShmDirName(params.shm_prefix) + "/c" + std::to_string(params.index), params.mem_size),
      compute_(params.cores ? params.cores : CardCores::DefaultWorkers()) {
    policy_.watchdog_ms.store(params.watchdog_ms);
    policy_.mirror_everywhere = [this] {
        for (const auto& f : Functions()) f->MirrorPolicy();
    };
    pf_ = std::make_shared<Function>(FunctionAt(0, MemorySlice{0, params_.mem_size}), memory_, policy_, compute_);
}

FunctionParams Card::FunctionAt(unsigned index, MemorySlice slice) const {
    return FunctionParams{params_.index, index, slice.base, slice.size, params_.shm_prefix, params_.poll};
}

Card::~Card() {
    Shutdown();
    for (auto& fn : Functions()) fn->UnlinkShm();  // even if a stale handle keeps one alive
}

void Card::Start() {
    std::lock_guard lock(mutex_);
    pf_->Start();
    for (auto& vf : vfs_) vf->Start();
    started_ = true;
    if (!heartbeat_.joinable()) {
        heartbeat_ = std::jthread([this](std::stop_token stop) { BeatUntilStopped(stop); });
        pthread_setname_np(heartbeat_.native_handle(), ("spyre-beat" + std::to_string(params_.index)).substr(0, 15).c_str());
    }
}

void Card::BeatUntilStopped(std::stop_token stop) {
    const auto period = std::chrono::milliseconds(SPYRE_HEARTBEAT_PERIOD_MS);
    std::unique_lock lock(beat_mutex_);
    for (;;) {
        beat_wake_.wait_for(lock, stop, period, [] { return false; });  // the period, or a stop
        if (stop.stop_requested()) return;
        for (auto& fn : Functions()) fn->Beat();
    }
}

void Card::Shutdown() {
    if (heartbeat_.joinable()) {
        heartbeat_.request_stop();
        heartbeat_.join();
    }
    for (auto& fn : Functions()) fn->Shutdown();
}

unsigned Card::num_vfs() const {
    std::lock_guard lock(mutex_);
    return unsigned(vfs_.size());
}

std::shared_ptr<Function> Card::FindFunction(unsigned fn) const {
    std::lock_guard lock(mutex_);
    if (fn == 0) return pf_;
    if (fn <= vfs_.size()) return vfs_[fn - 1];
    return nullptr;
}

std::vector<std::shared_ptr<Function>> Card::Functions() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<Function>> all{pf_};
    all.insert(all.end(), vfs_.begin(), vfs_.end());
    return all;
}

int Card::SetNumVfs(unsigned num_vfs) {
    if (num_vfs > SPYRE_SRIOV_TOTAL_VFS) return -ERANGE;
    std::lock_guard lock(mutex_);
    if (num_vfs == vfs_.size()) return 0;  // Linux: writing the current value is a no-op
    if (num_vfs == 0) return DisableVfs();
    if (!vfs_.empty()) return -EBUSY;  // Linux: disable before changing the count
    // The PF keeps slice 0; regions it was granted beyond that block the VFs.
    if (!pf_->SetRegionLimit(VfMemorySlice(params_.mem_size, num_vfs, 1).base)) {
        LOG_WARN("card %u: cannot enable VFs: PF memory regions reach into the VF slices", params_.index);
        return -EBUSY;
    }

    std::vector<std::shared_ptr<Function>> created;
    try {
        memory_.SetVfs(num_vfs);  // fresh, zeroed objects: nothing of an earlier VF or of the PF shows
        for (unsigned i = 1; i <= num_vfs; ++i) {
            const MemorySlice slice = VfMemorySlice(params_.mem_size, num_vfs, i);
            created.push_back(std::make_shared<Function>(FunctionAt(i, slice), memory_, policy_, compute_));
        }
    } catch (const std::system_error& e) {
        created.clear();
        memory_.SetVfs(0);
        pf_->SetRegionLimit(params_.mem_size);
        LOG_ERROR("card %u: enabling %u VFs failed: %s", params_.index, num_vfs, e.what());
        return -e.code().value();  // `created` unwinds: nothing stays behind
    }
    if (started_)
        for (auto& vf : created) vf->Start();
    vfs_ = std::move(created);
    pf_->SetSriovNumVfs(uint16_t(num_vfs));
    LOG_INFO("card %u: %u VFs enabled", params_.index, num_vfs);
    return 0;
}

int Card::DisableVfs() {
    // All VFs go or none: a VF whose device node is open keeps them all.
    for (size_t i = 0; i < vfs_.size(); ++i) {
        if (!vfs_[i]->TryMarkRemoved()) {
            for (size_t j = 0; j < i; ++j) vfs_[j]->UndoMarkRemoved();
            LOG_WARN("card %u: cannot disable VFs: %s is open", params_.index, vfs_[i]->address().c_str());
            return -EBUSY;
        }
    }
    for (auto& vf : vfs_) {
        vf->Shutdown();
        vf->UnlinkShm();
    }
    vfs_.clear();
    memory_.SetVfs(0);  // the VFs' memory goes with their objects
    pf_->SetSriovNumVfs(0);
    pf_->SetRegionLimit(params_.mem_size);
    LOG_INFO("card %u: VFs disabled", params_.index);
    return 0;
}

}  // namespace spyre::mockdev
