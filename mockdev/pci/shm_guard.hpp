// SPDX-License-Identifier: Apache-2.0
//
// Survives a holder that shrinks its own shared-memory object. A holder maps
// its objects read-write by name, so it can also ftruncate one; the daemon's
// MAP_SHARED mapping of it then faults (SIGBUS) past the new end, which would
// kill the daemon and every other function with it. A ShmGuard registers one
// daemon mapping of such an object with a process-wide SIGBUS handler: a
// fault inside it sizes the object back (ftruncate) and the access is
// retried. What the holder cut off reads as zeros: it destroyed only its own
// data. Any other SIGBUS goes to the disposition from before (by default the
// daemon dies, as it would have anyway).
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>

namespace spyre::mockdev {

class ShmFile;

// How often a function's objects were sized back (its owner reads it; the
// handler adds to it).
using ShmRepairCount = std::atomic<uint64_t>;

class ShmGuard {
public:
    // Guards [base, base + len) of the daemon's address space, counting in
    // `repairs` (which must outlive the guard). Nothing is guarded until
    // Watch. Installs the handler on first use. Throws std::system_error.
    ShmGuard(void* base, uint64_t len, ShmRepairCount& repairs);
    // Unregisters, after any handler that may still use the file is done.
    ~ShmGuard();
    ShmGuard(const ShmGuard&) = delete;
    ShmGuard& operator=(const ShmGuard&) = delete;

    // `file` is what is mapped there now. Call it while the previous file is
    // still open: once Watch returns, no handler uses the previous one's fd.
    void Watch(const ShmFile& file);
    // Sizes the object mapped there back down when a holder grew it past
    // the size the daemon gave it (ftruncate), counting a repair: pages
    // past the end are /dev/shm space the card does not count, which the
    // holder could fill. For a normal thread (the card's heartbeat); a
    // holder's own mapping past the end then faults in the holder.
    void CutBackGrowth() noexcept;

    struct Target;  // what the handler reads (shm_guard.cpp)

private:
    void Publish(const Target* target);

    unsigned slot_;
    uintptr_t base_;
    uint64_t len_;
    ShmRepairCount& repairs_;
};

// A thread that blocks every signal must still take the ones a fault raises:
// the kernel kills the process when a thread faults with the signal blocked,
// whatever the handler. Removes SIGBUS, SIGSEGV, SIGFPE and SIGILL from `set`.
inline void KeepFaultSignals(sigset_t* set) {
    for (int sig : {SIGBUS, SIGSEGV, SIGFPE, SIGILL}) sigdelset(set, sig);
}

}  // namespace spyre::mockdev
