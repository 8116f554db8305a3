// SPDX-License-Identifier: Apache-2.0
#include "pci/shm_guard.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <system_error>
#include <thread>

#include "pci/shm_object.hpp"

namespace spyre::mockdev {

// What the handler needs of one guarded mapping. Immutable once published:
// a change publishes a new one, so the handler never reads half an update.
struct ShmGuard::Target {
    uintptr_t base;
    uint64_t len;
    int fd;         // the daemon's own descriptor of the object mapped there
    uint64_t size;  // the size the daemon gave the object
    ShmRepairCount* repairs;
};

namespace {

// 16 cards of 17 functions: 2 objects per function and 17 memory mappings
// per card make 816; room to spare for what tests build in one process.
constexpr unsigned kSlots = 2048;

// Read by the handler without locks (async-signal-safe); written under g_mutex.
std::atomic<const ShmGuard::Target*> g_slots[kSlots];
// Handlers running now. A replaced target (and the fd it names, which its
// owner closes next) is let go only once this is 0: a handler that loaded
// it before the swap is done with it, and any later one sees the new one.
std::atomic<unsigned> g_handlers{0};
// Bumped on every repair, to tell a fault that another thread already
// repaired from one that no repair can fix.
std::atomic<uint64_t> g_repairs{0};

std::mutex g_mutex;  // guards g_used; never taken by the handler
bool g_used[kSlots];
struct sigaction g_previous;
std::once_flag g_installed;

// A fault in a guarded mapping whose object is whole: another thread sized
// it back meanwhile, or the mapping was just replaced by a fresh object.
// Retried, but a thread that keeps faulting at one address with no repair
// anywhere in between has a fault sizing cannot fix (tmpfs full): not ours.
constexpr unsigned kWholeRetries = 100;
__attribute__((tls_model("initial-exec"))) thread_local uintptr_t t_last_addr = 0;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_last_repairs = 0;
__attribute__((tls_model("initial-exec"))) thread_local unsigned t_retries = 0;

enum class Found { Nothing, Whole, Repaired };

// Sizes back every guarded object mapped at `addr` that is shorter than the
// daemon made it. Only async-signal-safe calls: fstat, ftruncate, atomics.
Found RepairAt(uintptr_t addr) {
    g_handlers.fetch_add(1);
    Found found = Found::Nothing;
    for (auto& slot : g_slots) {
        const ShmGuard::Target* t = slot.load();
        if (t == nullptr || addr - t->base >= t->len) continue;
        if (found == Found::Nothing) found = Found::Whole;
        struct stat st;
        if (::fstat(t->fd, &st) == 0 && uint64_t(st.st_size) < t->size && ::ftruncate(t->fd, off_t(t->size)) == 0) {
            t->repairs->fetch_add(1);
            g_repairs.fetch_add(1);
            found = Found::Repaired;
        }
    }
    g_handlers.fetch_sub(1);
    return found;
}

// True if the faulting access should run again.
bool Retry(const siginfo_t* info) {
    if (info->si_code <= 0) return false;  // sent by a process (kill), not raised by a fault
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    const uint64_t repairs_before = g_repairs.load();
    switch (RepairAt(addr)) {
    case Found::Nothing: return false;
    case Found::Repaired: t_retries = 0; return true;
    case Found::Whole:
        if (addr != t_last_addr || repairs_before != t_last_repairs) t_retries = 0;
        t_last_addr = addr;
        t_last_repairs = repairs_before;
        return ++t_retries <= kWholeRetries;
    }
    return false;
}

void OnSigbus(int, siginfo_t* info, void*) {
    const int saved = errno;
    if (!Retry(info)) {
        // Not ours: the disposition from before takes it. A fault comes back
        // when the access runs again; a sent signal is sent again.
        ::sigaction(SIGBUS, &g_previous, nullptr);
        if (info->si_code <= 0) ::raise(SIGBUS);
    }
    errno = saved;
}

void Install() {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    if (::sigaction(SIGBUS, &action, &g_previous) != 0)
        throw std::system_error(errno, std::generic_category(), "install the SIGBUS handler");
}

}  // namespace

ShmGuard::ShmGuard(void* base, uint64_t len, ShmRepairCount& repairs)
    : base_(reinterpret_cast<uintptr_t>(base)), len_(len), repairs_(repairs) {
    std::call_once(g_installed, Install);
    std::lock_guard lock(g_mutex);
    for (slot_ = 0; slot_ < kSlots && g_used[slot_]; ++slot_) {
    }
    if (slot_ == kSlots) throw std::system_error(ENOSPC, std::generic_category(), "guard a shared-memory mapping");
    g_used[slot_] = true;
}

ShmGuard::~ShmGuard() {
    Publish(nullptr);
    std::lock_guard lock(g_mutex);
    g_used[slot_] = false;
}

void ShmGuard::CutBackGrowth() noexcept {
    g_handlers.fetch_add(1);  // as a handler: Publish lets go of a target only once none uses it
    const Target* t = g_slots[slot_].load();
    struct stat st;
    if (t != nullptr && ::fstat(t->fd, &st) == 0 && uint64_t(st.st_size) > t->size &&
        ::ftruncate(t->fd, off_t(t->size)) == 0)
        t->repairs->fetch_add(1);
    g_handlers.fetch_sub(1);
}

void ShmGuard::Watch(const ShmFile& file) { Publish(new Target{base_, len_, file.fd(), file.size(), &repairs_}); }

void ShmGuard::Publish(const Target* target) {
    const Target* old = g_slots[slot_].exchange(target);
    while (g_handlers.load() != 0) std::this_thread::yield();  // a handler may still use `old`
    delete old;
}

}  // namespace spyre::mockdev
