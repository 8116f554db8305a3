// SPDX-License-Identifier: Apache-2.0
// A cut cable under a level-4 run: two ranks of a MultiHostWorker, each in a
// network namespace of its own, joined by a veth pair that
// tests/libspyre/host/run_netns_test.py sets down while a chip task runs on
// rank 1 and up again once rank 0 has reported it.
//
// Rank 0: a cross-rank add is checked against the CPU; then a chip task
// 'held_add' goes to rank 1's device, whose chip function prints
// "RESULT hold-in-flight" (the wrapper cuts the link now) and holds the
// task until the link is back. Rank 0's run must fail with DeviceLost
// naming rank 1 and the task. Once the wrapper says the link is back
// (a file appears), the old run stays failed: nothing rank 1 sent is
// delivered (rank 1, with a longer bound, is still serving and beating),
// and a new run on the same worker fails with the same loss.
// Exit 3: a lost rank fails the job. Lines starting with "RESULT" are what
// the wrapper checks.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "l3_chip_functions.hpp"
#include "spyre/host.hpp"
#include "spyre/host/mpi_transport.hpp"

using namespace spyre;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kLinkBackWait = std::chrono::seconds(30);    // the wrapper's signal, at most
// TCP retransmits with a doubling timeout (0.2, 0.4, ... 3.2 s): a link down
// for about 4 s carries again at most about 3.2 s after it is back.
constexpr auto kStaleWatch = std::chrono::seconds(6);

HostProgram OnRank1(const char* name, const char* function, size_t device) {
    return {name, 2, {{{l3::kTile, l3::kTile}}}, [=](HostGraph& g, std::span<const HostTensor> x) {
                g.Chip(function, {In(x[0]), In(x[1]), Out(x[2])}, {.name = name, .device = device});
            }};
}

bool SumIsRight(const HostTensor& a, const HostTensor& b, const HostTensor& f) {
    for (size_t i = 0; i < f.floats().size(); ++i)
        if (f.floats()[i] != a.floats()[i] + b.floats()[i]) return false;
    return true;
}

// The failure of `task` in a run that lost rank 1, or why it is not one.
std::string LossOf(const HostRunError& e, const std::string& task) {
    for (const TaskFailureInfo& f : e.failures())
        if (f.task == task) {
            if (f.kind != ErrorKind::DeviceLost) return "kind is not DeviceLost";
            if (f.cause.find("rank 1 (host ") == std::string::npos) return "cause does not name rank 1";
            return "";
        }
    return "no failure of task '" + task + "'";
}

bool LinkIsBack(const std::string& path) {
    const auto until = Clock::now() + kLinkBackWait;
    for (int i = 0; i < 3000 && Clock::now() < until; ++i) {
        if (::access(path.c_str(), F_OK) == 0) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

int Controller(MultiHostWorker& mw, host::MpiTransport& t, size_t remote_device, const std::string& link_back) {
    Worker& w = mw.worker();
    HostTensor a = HostTensor::Full({l3::kTile, l3::kTile}, 2.0f), b = HostTensor::Full({l3::kTile, l3::kTile}, 3.5f);
    HostTensor f = HostTensor::Zeros({l3::kTile, l3::kTile});
    w.Run(OnRank1("add_before_cut", "chip_add", remote_device), {a, b, f});
    if (!SumIsRight(a, b, f)) {
        std::printf("RESULT wrong: the add on rank 1 before the cut differs from the CPU\n");
        return 1;
    }
    std::printf("RESULT before-cut-ok on %s\n", w.DescribeDevice(remote_device).c_str());
    const auto start = Clock::now();
    try {
        w.Run(OnRank1("held_add", "chip_hold", remote_device), {a, b, f});
        std::printf("RESULT wrong: the held task returned although its link was cut\n");
        return 1;
    } catch (const HostRunError& e) {
        const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
        const std::string wrong = LossOf(e, "held_add");
        std::printf("RESULT %s rank=1 task=held_add after_ms=%ld bound_ms=%ld: %s\n",
                    wrong.empty() ? "cut-reported" : ("wrong-error (" + wrong + ")").c_str(), ms,
                    static_cast<long>(t.liveness().silence_bound.count()), e.what());
        if (!wrong.empty()) return 1;
    }
    std::fflush(stdout);
    if (!LinkIsBack(link_back)) {
        std::printf("RESULT wrong: the wrapper never said the link is back\n");
        return 1;
    }
    // What rank 1 sends now (the held task's reply, beats) comes through
    // once TCP retransmits what was queued while the link was down, seconds
    // after the link is back: none of it may be delivered.
    int stale = 0;
    const auto until = Clock::now() + kStaleWatch;
    for (int i = 0; i < 100 && Clock::now() < until && stale == 0; ++i) {
        try {
            const host::Message m = t.Receive(std::chrono::milliseconds(100), 1);
            std::printf("delivered from the lost rank 1: message type %u\n", unsigned(m.type));
            ++stale;
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::DeviceLost) ++stale;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
    try {
        w.Run(OnRank1("add_after_link_back", "chip_add", remote_device), {a, b, f});
        ++stale;
    } catch (const HostRunError& e) {
        const std::string wrong = LossOf(e, "add_after_link_back");
        if (!wrong.empty()) ++stale;
        std::printf("after the link came back: %s\n", e.what());
    }
    std::printf(stale == 0 ? "RESULT old-run-stays-failed\n" : "RESULT wrong: the old run heard rank 1 again\n");
    return stale == 0 ? 3 : 1;  // a lost rank fails the job: mpirun ends the rest
}

}  // namespace

int main() {
    const char* bound_env = std::getenv("SPYRE_TEST_LIVENESS_MS");
    const char* link_back = std::getenv("SPYRE_TEST_LINK_BACK");
    host::MpiTransportOptions options;
    options.liveness.heartbeat_interval = std::chrono::milliseconds(200);
    options.liveness.silence_bound = std::chrono::milliseconds(bound_env ? std::atoi(bound_env) : 3000);
    // Rank 1 gives up on rank 0 later than rank 0 on rank 1, so it is still
    // alive, serving and beating when the link comes back.
    const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (world_rank && std::atoi(world_rank) != 0) options.liveness.silence_bound *= 5;
    int rank = -1;
    try {
        host::MpiTransport t(options);
        rank = t.rank();
        setvbuf(stdout, nullptr, _IOLBF, 0);
        if (t.size() != 2 || !link_back) {
            std::fprintf(stderr, "mpi_cut_cable: needs 2 ranks and SPYRE_TEST_LINK_BACK\n");
            return 1;
        }
        Host host = Host::Open(HostOptions::EmbeddedMock(1, 1, "1G"));
        DistributedConfig config{.device_ids = {}, .num_sub_workers = 1};
        for (const auto& fn : host.functions())
            if (fn.kind == driver::FunctionKind::VF) config.device_ids.push_back(int(fn.index));
        MultiHostWorker mw(t, host, config);
        l3::RegisterChipFunctions(mw.worker());
        // Held until the link is back, however late the wrapper cuts it:
        // its reply then crosses the restored link, to a rank 0 that has
        // already failed the task.
        const std::string back = link_back;
        mw.worker().RegisterChipFunction("chip_hold", [&t, back](ChipContext&) {
            std::printf("RESULT hold-in-flight on rank %d\n", t.rank());
            std::fflush(stdout);
            LinkIsBack(back);
        });
        if (rank != 0) {
            mw.Serve();
            return 0;
        }
        return Controller(mw, t, config.device_ids.size(), link_back);
    } catch (const Error& e) {
        std::fprintf(stderr, "mpi_cut_cable, rank %d: %s\n", rank, e.what());
        return 1;
    }
}
