// SPDX-License-Identifier: Apache-2.0
#include "placement.hpp"

#include <algorithm>

#include "spyre/host/chip_executor.hpp"

namespace spyre::host {

namespace {

double At(const std::vector<double>& v, size_t d, double prior) { return v.empty() ? prior : v[d]; }

}  // namespace

size_t Place(const PlacementInput& in) {
    if (in.pinned) return *in.pinned;
    const size_t n = in.load.size();
    auto remote = [&](size_t d) { return !in.remote.empty() && in.remote[d]; };
    auto per_byte_at = [&](size_t d) {
        return At(in.ns_per_byte, d, remote(d) ? DeviceCosts::kPriorRemoteNsPerByte : DeviceCosts::kPriorLocalNsPerByte);
    };
    // A byte sent to another rank's device also goes onto that device
    // there: it costs at least what this rank's best link charges. The
    // learnt figures are bounds that include the calls' compute, so a
    // remote device whose calls happened to run faster learnt a lower one,
    // and took most tasks from idle devices here (found probing from outside).
    double local_floor = 0;
    for (size_t d = 0; d < n; ++d)
        if (!remote(d)) local_floor = local_floor == 0 ? per_byte_at(d) : std::min(local_floor, per_byte_at(d));
    auto cost = [&](size_t d) {
        const double wait = double(in.load[d]) / double(in.room[d]) * At(in.task_ns, d, DeviceCosts::kPriorTaskNs);
        const uint64_t current = in.current_bytes.empty() ? 0 : in.current_bytes[d];
        const uint64_t to_move = in.input_bytes > current ? in.input_bytes - current : 0;
        const double per_byte = remote(d) ? std::max(per_byte_at(d), local_floor) : per_byte_at(d);
        const double call = At(in.call_ns, d, remote(d) ? DeviceCosts::kRemoteCallNs : 0);
        const double outliving = in.outliving_ns.empty() ? 0 : in.outliving_ns[d];
        return wait + outliving + double(to_move) * per_byte + call;
    };
    // Among devices within kTieNs of each other: the one holding most of the
    // inputs, then this rank's, then the first from `rotate`.
    auto preferred = [&](size_t a, size_t b) {
        const uint64_t ca = in.current_bytes.empty() ? 0 : in.current_bytes[a];
        const uint64_t cb = in.current_bytes.empty() ? 0 : in.current_bytes[b];
        if (ca != cb) return ca > cb;
        return remote(a) < remote(b);
    };
    // A task too large for a remote call's messages runs here: placed on
    // another rank it would fail where this rank's devices run it (unless
    // every device is remote: then its call says why it cannot go).
    auto fits = [&](size_t d) { return in.remote_fits || !remote(d); };
    // A device `marked` (blocked, lost; empty: none) is avoided while
    // another that fits is not.
    auto avoided_while_another_is_not = [&](const std::vector<bool>& marked) {
        bool another = false;
        for (size_t d = 0; d < n && !marked.empty() && !another; ++d) another = fits(d) && !marked[d];
        return [&marked, another](size_t d) { return another && marked[d]; };
    };
    const auto avoid_blocked = avoided_while_another_is_not(in.blocked);
    const auto avoid_lost = avoided_while_another_is_not(in.lost);
    auto allowed = [&](size_t d) { return fits(d) && !avoid_blocked(d) && !avoid_lost(d); };
    size_t best = in.rotate % n;
    for (size_t i = 0; i < n && !allowed(best); ++i) best = (in.rotate + i + 1) % n;
    double best_cost = cost(best);
    for (size_t i = 1; i < n; ++i) {
        const size_t d = (in.rotate + i) % n;
        if (!allowed(d)) continue;
        const double c = cost(d);
        if (c < best_cost - kTieNs || (c <= best_cost + kTieNs && preferred(d, best))) {
            best = d;
            best_cost = c;
        }
    }
    return best;
}

DeviceCosts::DeviceCosts(const std::vector<bool>& remote)
    : devices_(std::make_unique<Device[]>(remote.size())), count_(remote.size()) {
    for (size_t d = 0; d < count_; ++d) {
        devices_[d].ns_per_byte = remote[d] ? kPriorRemoteNsPerByte : kPriorLocalNsPerByte;
        devices_[d].call_ns = remote[d] ? kRemoteCallNs : 0;
    }
}

void DeviceCosts::Record(size_t device, uint64_t elapsed_ns, const ChipCallStats& moved) {
    Device& d = devices_[device];
    const double t = d.task_ns.load(std::memory_order_relaxed);
    d.task_ns.store(t + (double(elapsed_ns) - t) / 8, std::memory_order_relaxed);
    const uint64_t bytes = moved.bytes_uploaded + moved.bytes_downloaded;
    if (bytes < kLinkSampleBytes) return;
    const double sample = double(elapsed_ns) / double(bytes);
    const double b = d.ns_per_byte.load(std::memory_order_relaxed);
    d.ns_per_byte.store(sample < b ? sample : b + (sample - b) / 32, std::memory_order_relaxed);
}

void DeviceCosts::Fill(PlacementInput& in) const {
    in.task_ns.resize(count_);
    in.ns_per_byte.resize(count_);
    in.call_ns.resize(count_);
    for (size_t d = 0; d < count_; ++d) {
        in.task_ns[d] = devices_[d].task_ns.load(std::memory_order_relaxed);
        in.ns_per_byte[d] = devices_[d].ns_per_byte.load(std::memory_order_relaxed);
        in.call_ns[d] = devices_[d].call_ns;
    }
}

}  // namespace spyre::host
