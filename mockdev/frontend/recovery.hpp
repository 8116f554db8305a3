// SPDX-License-Identifier: Apache-2.0
//
// What a spyre-mockdev killed with SIGKILL leaves behind, and how the next
// one recovers from it by itself: a FUSE mount whose daemon is gone (stat
// says ENOTCONN) and shared-memory objects under its prefix. A live daemon's
// mount and objects are never touched: its prefix is marked by an owner file
// (/dev/shm/<prefix>.owner) that it holds an flock on for its whole life.
// What is "under a prefix" is every /dev/shm entry named "<prefix>.*": the
// owner file, the object directory <prefix>.d (ShmDirectory) with the
// objects in it, and objects of older daemons that kept them beside it.
#pragma once

#include <optional>
#include <string>

namespace spyre::mockdev {

// True if `mount` is a mount of a spyre-mockdev whose daemon is gone (and it
// has now been detached), false if it is anything else (left alone).
bool RecoverStaleMount(const std::string& mount);

enum class PrefixState { Free, Live, Stale, Foreign };
// Free: nothing under the prefix. Live: a running daemon owns it. Stale:
// its owner is dead. Foreign: objects without an owner file (not ours to remove).
PrefixState InspectPrefix(const std::string& prefix);

// Removes the objects of every prefix whose owner died (daemons killed with
// SIGKILL under other prefixes). Returns how many objects went.
unsigned SweepDeadPrefixes();

// The claim of one daemon on its shared-memory prefix, held while it lives.
class PrefixClaim {
public:
    // Claims `prefix`: removes a dead owner's objects, refuses a live
    // owner's or foreign ones (nullopt, after logging why).
    static std::optional<PrefixClaim> Take(const std::string& prefix);

    PrefixClaim(PrefixClaim&& o) noexcept;
    PrefixClaim& operator=(PrefixClaim&&) = delete;
    ~PrefixClaim();  // removes the owner file

private:
    PrefixClaim(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
    std::string path_;
    int fd_ = -1;
};

}  // namespace spyre::mockdev
