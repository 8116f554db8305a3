// SPDX-License-Identifier: Apache-2.0
//
// The FUSE front end: a sysfs-like tree per function under bus/pci/devices/
// and a VFIO-like device node per function under dev/spyre/. Every file is
// opened direct_io (register and ring contents are live, never page-cached).
//
//   MOUNT/bus/pci/devices/<addr>/{config,resource0,resource2,resource4,regs,stats,
//                                 stats.json,reset,vendor,device,class[,sriov_totalvfs,sriov_numvfs]}
//   MOUNT/dev/spyre/<addr>
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pci/card.hpp"

struct fuse;

namespace spyre::mockdev {

struct OpenFile;

class FuseFs {
public:
    // `on_ready` runs once the kernel has completed the FUSE handshake: from
    // then on the tree answers requests.
    FuseFs(const std::vector<std::unique_ptr<Card>>& cards, std::function<void()> on_ready);
    ~FuseFs();

    FuseFs(const FuseFs&) = delete;
    FuseFs& operator=(const FuseFs&) = delete;

    // Mounts at `dir`. Logs and returns false on failure, leaving nothing
    // mounted.
    bool Mount(const std::string& dir);
    // Serves requests with the multithreaded loop until `stop_fd` (a
    // StopSignals pipe) becomes readable or an unmount (fusermount3 -u)
    // ends it.
    void Loop(int stop_fd);
    void Unmount();

private:
    friend struct FuseOps;

    std::shared_ptr<Function> FindFunction(std::string_view address, Card** card) const;
    void Track(std::unique_ptr<OpenFile> file);
    void Untrack(OpenFile* file);

    const std::vector<std::unique_ptr<Card>>& cards_;
    std::function<void()> on_ready_;
    struct fuse* fuse_ = nullptr;
    bool mounted_ = false;
    // Opens that wait for a dead holder's release now (FuseOps::Open).
    std::atomic<unsigned> release_waits_{0};
    std::mutex files_mutex_;
    // Open files the kernel never released (unmounted while open) are freed at the end.
    std::unordered_map<OpenFile*, std::unique_ptr<OpenFile>> open_files_;
};

}  // namespace spyre::mockdev
