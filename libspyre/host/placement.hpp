// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task runs (seed 003's q6), decided when it becomes
// ready: the device it names, else the device where it would end soonest,
// weighing each device's queue against the bytes the task would move there.
//
// The cost model, in nanoseconds, per device d:
//   wait(d) = load[d] / room[d] * task_ns[d]
//             the chip tasks queued or running there per task it runs at
//             once, each holding a slot for the device's mean chip task time;
//   move(d) = (input_bytes - current_bytes[d]) * ns_per_byte[d] + call_ns[d]
//             the task's In and InOut bytes not already current there
//             (Residency) over the device's link, plus the fixed cost of a
//             call to another rank (its round trip with nothing in it); a
//             remote device's link costs at least this rank's best one
//             (the bytes go onto a device there too).
// The device with the least wait + move wins; costs within kTieNs are equal,
// and among equals the device holding the most input bytes wins, then this
// rank's devices, then round-robin from `rotate` so equal work spreads. So a
// chain of tasks over one tensor stays where the tensor's copy is, until the
// queue there costs more than moving the bytes to an idle device.
// DeviceCosts learns task_ns and ns_per_byte from the calls that ran.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace spyre {
struct ChipCallStats;
}

namespace spyre::host {

// Costs closer than this are equal (measurement noise is larger).
inline constexpr double kTieNs = 2'000;

struct PlacementInput {
    std::optional<size_t> pinned;
    std::vector<uint32_t> load;           // chip tasks queued or running, per device
    std::vector<uint32_t> room;           // chip tasks it runs at once, per device (>= 1)
    std::vector<bool> remote;             // served by another rank, per device (empty: none)
    bool remote_fits = true;              // the task fits a remote call's messages (remote::CallFits)
    std::vector<uint64_t> current_bytes;  // the task's input bytes already current there, per device
    uint64_t input_bytes = 0;             // the task's In and InOut bytes
    std::vector<double> task_ns;          // mean chip task time, per device (empty: DeviceCosts' priors)
    std::vector<double> ns_per_byte;      // cost of moving a byte there, per device (empty: priors)
    std::vector<double> call_ns;          // fixed cost of a call there, per device (empty: priors)
    // Per device (empty: none): work it holds beyond `load`, as calls to
    // another rank that timed out and still run there.
    std::vector<double> outliving_ns;
    // Per device (empty: none): every chip slot is held by a chip call
    // that waits for a nested run, so a task queued there waits for those
    // runs. Avoided while another allowed device is not.
    std::vector<bool> blocked;
    // Per device (empty: none): lost for good (its rank or card is gone, and
    // every call there fails DeviceLost). Avoided while another allowed
    // device is not.
    std::vector<bool> lost;
    size_t rotate = 0;
};

size_t Place(const PlacementInput& in);

// What placement knows of each device's speed, learnt from its calls (the
// device threads record, the dispatcher reads under its lock; estimates, so
// relaxed atomics and an occasional lost update are fine).
//   task_ns: a moving average (1/8 weight to each call) of how long a call
//     held its slot, uploads and downloads included; kPriorTaskNs before
//     the first call.
//   ns_per_byte: from calls that moved at least kLinkSampleBytes, the call's
//     time over its bytes moved: an upper bound on the link's cost per byte
//     (the call also computed). The estimate takes a lower sample at once
//     and drifts up to a higher one by 1/32 per call, so it tracks the
//     best recent bound. Priors: kPriorLocalNsPerByte (a DMA link),
//     kPriorRemoteNsPerByte (a network hop).
//   call_ns: kRemoteCallNs for a device of another rank, 0 for this rank's.
class DeviceCosts {
public:
    static constexpr double kPriorTaskNs = 100'000;
    static constexpr double kPriorLocalNsPerByte = 0.5;   // 2 GB/s
    static constexpr double kPriorRemoteNsPerByte = 1.0;  // 1 GB/s
    static constexpr double kRemoteCallNs = 50'000;
    static constexpr uint64_t kLinkSampleBytes = 64 * 1024;

    explicit DeviceCosts(const std::vector<bool>& remote);
    // A call on `device` took `elapsed_ns` and moved what `moved` says.
    void Record(size_t device, uint64_t elapsed_ns, const ChipCallStats& moved);
    // Sets in.task_ns, in.ns_per_byte and in.call_ns (no allocation once sized).
    void Fill(PlacementInput& in) const;

private:
    struct Device {
        std::atomic<double> task_ns{kPriorTaskNs};
        std::atomic<double> ns_per_byte{0};
        double call_ns = 0;
    };
    std::unique_ptr<Device[]> devices_;
    size_t count_;
};

}  // namespace spyre::host
