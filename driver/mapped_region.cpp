// SPDX-License-Identifier: Apache-2.0
// MappedRegion, and what fork() does to it. A device mapping is MAP_SHARED:
// a child forked while it lives would share it with the parent, and a store
// through a pointer the child kept (an orchestration buffer, a Python view)
// landed in the parent's live device memory, although every call of the
// child's Device is refused (found probing from outside). So the live
// mappings are listed, and in a forked child each becomes private zero
// pages at the same address: the child's views read zeros and keep what it
// writes, as a view kept past close does (docs/python.md).
#include "spyre/driver/function.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "spyre/error.hpp"

namespace spyre::driver {

namespace {

struct LiveMappings {
    std::mutex mu;
    std::map<void*, size_t> regions;  // base -> size
};

LiveMappings& Live() {
    static auto* live = new LiveMappings;  // never destroyed: mappings may outlive static destructors
    return *live;
}

// In the child, single-threaded: replaces each mapping in place. Where that
// fails the mapping goes, so a store faults instead of reaching the parent.
void PrivatiseInChild() {
    for (const auto& [base, size] : Live().regions)
        if (::mmap(base, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
                   0) == MAP_FAILED)
            ::munmap(base, size);
    Live().mu.unlock();
}

// Registered when the library loads; the lock is held across fork() so the
// child's list is whole.
const bool g_fork_hook = [] {
    Live();
    ::pthread_atfork([] { Live().mu.lock(); }, [] { Live().mu.unlock(); }, PrivatiseInChild);
    return true;
}();

// Unmapped under the lock: a child forked in between would keep a shared
// mapping nobody lists.
void Forget(void* base, size_t size) noexcept {
    if (!base) return;
    std::lock_guard lock(Live().mu);
    Live().regions.erase(base);
    ::munmap(base, size);
}

}  // namespace

MappedRegion::MappedRegion(void* base, size_t size) : base_(base), size_(size) {
    if (!base_) return;
    try {
        std::lock_guard lock(Live().mu);
        Live().regions.emplace(base_, size_);
    } catch (const std::bad_alloc&) {
        ::munmap(std::exchange(base_, nullptr), std::exchange(size_, 0));
        throw Error(ErrorKind::OutOfMemory, "cannot note a device mapping of " + std::to_string(size) + " bytes");
    }
}

MappedRegion::MappedRegion(MappedRegion&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedRegion& MappedRegion::operator=(MappedRegion&& o) noexcept {
    if (this != &o) {
        Forget(base_, size_);
        base_ = std::exchange(o.base_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

MappedRegion::~MappedRegion() { Forget(base_, size_); }

}  // namespace spyre::driver
