// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/multihost_worker.hpp"

#include <algorithm>
#include <atomic>

#include "host/remote_protocol.hpp"
#include "local_chip_executor.hpp"
#include "remote_chip_executor.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/host/remote_chip_service.hpp"
#include "spyre/trace/trace.hpp"
#include "trace/recorder.hpp"
#include "thrown_value.hpp"

namespace spyre {

namespace {

// A served device's chip-task slots: a count of free ones, and the
// eventcount a call sleeps on while none is free.
class Slots {
public:
    explicit Slots(unsigned n) : free_(int(n)) {}
    void Acquire() {
        for (;;) {
            int f = free_.load(std::memory_order_acquire);
            while (f > 0)
                if (free_.compare_exchange_weak(f, f - 1, std::memory_order_acquire)) return;
            // No bound (as the semaphore had none): 1 s is how often a sleeper looks again.
            freed_.SleepUnless([&] { return free_.load(std::memory_order_acquire) > 0; }, std::chrono::seconds(1));
        }
    }
    void Release() {
        free_.fetch_add(1, std::memory_order_seq_cst);
        freed_.NotifyAfterSeqCstUpdate();
    }

private:
    std::atomic<int> free_;
    EventCount freed_;
};

}  // namespace

struct MultiHostWorker::Impl {
    // A device of this rank as calls from rank 0 reach it: its executor
    // (owned by `worker`), and a slot per chip task it runs at once.
    struct Served {
        ChipExecutor* executor;
        std::unique_ptr<Slots> slots;
    };
    host::Transport& transport;
    Host& host;
    std::shared_ptr<ChipRegistry> registry = std::make_shared<ChipRegistry>();
    std::optional<Worker> worker;
    std::vector<std::shared_ptr<host::RemoteRank>> remote_ranks;
    std::vector<Served> served;
    int block_dim = 1;

    Impl(host::Transport& t, Host& h) : transport(t), host(h) {}

    // A call a remote rank placed on local device `call.device`, run on that
    // device's executor directly: the call's tensors are its own, so no
    // dependency tracking or placement is needed, and a one-task run on
    // the Worker would add two thread hand-overs to every call.
    void Answer(host::RemoteCall& call, std::vector<host::WireTensor>& outputs);
};

MultiHostWorker::MultiHostWorker(host::Transport& transport, Host& host, DistributedConfig config,
                                 std::chrono::milliseconds reply_timeout)
    : impl_(std::make_unique<Impl>(transport, host)) {
    auto executors = host::OpenLocalChipExecutors(host, config, impl_->registry);
    impl_->block_dim = config.block_dim;
    for (auto& e : executors)
        impl_->served.push_back({e.get(), std::make_unique<Slots>(std::clamp(e->Concurrency(), 1u, 256u))});
    if (transport.rank() == 0) {
        for (int r = 1; r < transport.size(); ++r) {
            auto remote = std::make_shared<host::RemoteRank>(transport, r, reply_timeout);
            const host::RankDescription d = remote->client.Describe(r);
            const std::string rank_name = "rank " + std::to_string(r) + " (" + d.host_name + ")";
            // Every rank opens the same device_ids: a rank that opened others
            // would run each call on a device rank 0 names differently.
            if (!d.served_devices.empty() && d.served_devices.size() != config.device_ids.size())
                throw Error(ErrorKind::InvalidArgument,
                            "DistributedConfig: rank 0's device_ids name " + std::to_string(config.device_ids.size()) +
                                " device(s), but " + rank_name + " serves " + std::to_string(d.served_devices.size()) +
                                ": every rank must open the same device_ids");
            for (size_t i = 0; i < config.device_ids.size(); ++i) {
                const int id = config.device_ids[i];
                if (size_t(id) >= d.functions.size())
                    throw Error(ErrorKind::NotFound, "DistributedConfig: device_ids[" + std::to_string(i) + "] is " +
                                                         std::to_string(id) + ", but " + rank_name + " has " +
                                                         std::to_string(d.functions.size()) + " function(s)");
                if (i < d.served_devices.size() && d.served_devices[i] != d.functions[size_t(id)].pci_address)
                    throw Error(ErrorKind::InvalidArgument,
                                "DistributedConfig: device_ids[" + std::to_string(i) + "] is " + std::to_string(id) +
                                    ", " + d.functions[size_t(id)].pci_address + " on " + rank_name + ", but that rank serves " +
                                    d.served_devices[i] + " as its device " + std::to_string(i) +
                                    ": every rank must open the same device_ids, in the same order");
                // Its place among the serving rank's devices is its place in device_ids.
                const unsigned room = i < d.chip_tasks_at_once.size() ? d.chip_tasks_at_once[i] : 1;
                executors.push_back(std::make_unique<host::RemoteChipExecutor>(
                    remote, i, rank_name + " " + d.functions[size_t(id)].pci_address, room));
            }
            impl_->remote_ranks.push_back(std::move(remote));
        }
    }
    impl_->worker.emplace(std::move(executors), std::move(config), impl_->registry);
}

MultiHostWorker::~MultiHostWorker() {
    if (!impl_ || impl_->transport.rank() != 0) return;
    // Runs in flight (a RunHandle may outlive this) finish first: ~Worker
    // waits for them, and their chip tasks on other ranks need those served.
    impl_->worker.reset();
    for (auto& r : impl_->remote_ranks) {
        if (impl_->transport.PeerError(r->rank)) continue;  // lost: nobody to tell
        try {
            r->client.Shutdown(r->rank);
        } catch (const Error&) {
            // Lost meanwhile: the transport reports it to whoever waits on it.
        }
    }
}

int MultiHostWorker::rank() const { return impl_->transport.rank(); }
int MultiHostWorker::ranks() const { return impl_->transport.size(); }
Worker& MultiHostWorker::worker() { return *impl_->worker; }

void MultiHostWorker::Serve() {
    if (rank() == 0) throw Error(ErrorKind::InvalidArgument, "MultiHostWorker::Serve: rank 0 runs the programs, it does not serve");
    host::RemoteChipService service(impl_->transport, impl_->host);
    // As many calls at once as this rank's devices run chip tasks at once,
    // and rank 0 told how many each takes.
    std::vector<uint32_t> rooms;
    for (size_t d = 0; d < impl_->worker->device_count(); ++d) rooms.push_back(impl_->worker->ChipTasksAtOnce(d));
    service.SetRouter([this](host::RemoteCall& call, std::vector<host::WireTensor>& outputs) { impl_->Answer(call, outputs); },
                      impl_->registry->List(), std::move(rooms));
    std::vector<std::string> addresses;
    for (const Impl::Served& d : impl_->served) addresses.push_back(d.executor->Describe());
    service.SetServedDevices(std::move(addresses));
    service.Serve(0);
}

void MultiHostWorker::Impl::Answer(host::RemoteCall& call, std::vector<host::WireTensor>& outputs) {
    const size_t device = host::remote::DeviceIndex(call.device).value_or(served.size());
    if (device >= served.size())
        throw Error(ErrorKind::NotFound, "chip call '" + call.task + "' names device '" + call.device + "'; this rank serves " +
                                             std::to_string(served.size()) + " device(s)");
    std::vector<uint8_t> access = call.access;
    if (access.empty()) {  // inputs, then outputs
        access.assign(call.inputs.size(), host::RemoteCall::kIn);
        access.insert(access.end(), call.outputs.size(), host::RemoteCall::kOut);
    }
    // The task's tensors are the message's own bytes (no copies): an In or
    // InOut argument wraps its received payload, an Out argument the reply's
    // buffer; an InOut's payload becomes the reply's after the run. Both
    // outlive the run (the service sends the reply after this returns).
    ChipCall chip{.task_name = call.task, .function = call.function, .args = {}, .block_dim = block_dim,
                  .entry = registry->Find(call.function), .one_shot = true};
    // (input, output) of each InOut and in-place Out: the output's bytes
    // are the input's buffer after the run.
    std::vector<std::pair<size_t, size_t>> in_outs;
    std::vector<size_t> input_of(access.size(), 0);  // an In argument's input
    size_t in = 0, out = 0;
    for (size_t i = 0; i < access.size(); ++i) {
        const uint8_t a = access[i];
        HostTensor t;
        if (a == host::RemoteCall::kOut) {
            host::WireTensor& dst = outputs.at(out++);
            t = HostTensor::Wrap(dst.data.data(), dst.spec.shape, dst.spec.dtype, nullptr);
        } else if (a != host::RemoteCall::kOutInPlace) {
            input_of[i] = in;
            host::WireTensor& src = call.inputs.at(in++);
            t = HostTensor::Wrap(src.data.data(), src.spec.shape, src.spec.dtype, nullptr);
            if (a == host::RemoteCall::kInOut) in_outs.emplace_back(in - 1, out++);
        } else {
            out++;  // its tensor is its In argument's, below (that one may come later)
        }
        chip.args.push_back({TensorArg{std::move(t), host::AccessOf(a)}});
    }
    // An in-place Out shares its In argument's buffer, as the caller's
    // two arguments share their bytes: the chip function sees what a run
    // on the caller's own devices sees (DecodeCall checked the pairs).
    for (size_t i = 0, k = 0, o = 0; i < access.size(); ++i) {
        if (access[i] == host::RemoteCall::kIn) continue;
        const size_t output = o++;
        if (access[i] != host::RemoteCall::kOutInPlace) continue;
        const uint32_t of = call.in_place_of.at(k++);
        chip.args[i].arg.tensor = chip.args.at(of).arg.tensor;
        in_outs.emplace_back(input_of[of], output);
    }
    if (!chip.entry)
        throw Error(ErrorKind::NotFound, "no chip function '" + call.function + "' is registered (" + registry->Names() + ")");
    Served& d = served[device];
    // As a local run names a failure: the task, the function and the device.
    auto failed = [&](ErrorKind kind, const std::string& why, ErrorContext context) {
        return Error(kind, "CHIP task '" + call.task + "' (chip function '" + call.function + "' on " + d.executor->Describe() +
                               ") failed: " + why,
                     std::move(context));
    };
    d.slots->Acquire();
    struct Release {
        Slots& s;
        ~Release() { s.Release(); }
    } release{*d.slots};
    try {
        const uint64_t start_ns = trace::Enabled() ? trace::detail::NowNs() : 0;
        const ChipCallStats moved = d.executor->Run(chip);
        if (start_ns != 0) [[unlikely]]  // the span a one-task run on the Worker would draw
            trace::detail::HostTaskSpan(trace::detail::NamedTrack("host-level " + d.executor->Describe()), call.function,
                                        d.executor->Describe(), start_ns, trace::detail::NowNs(), 0, moved.bytes_uploaded,
                                        moved.bytes_downloaded);
    } catch (const Error& e) {
        throw failed(e.kind(), e.message(), e.context());
    } catch (const std::exception& e) {
        throw failed(ErrorKind::TaskFailed, e.what(), {});
    } catch (...) {  // as a local run names it; escaping would end this rank
        throw failed(ErrorKind::TaskFailed, spyre::detail::DescribeThrownValue(), {});
    }
    // The same spec: the same size. An input that two in-place outputs
    // name (a peer may send that) is copied into the second.
    std::vector<size_t> given_to(call.inputs.size(), SIZE_MAX);
    for (auto [i, o] : in_outs) {
        if (given_to[i] == SIZE_MAX) {
            outputs[o].data.swap(call.inputs[i].data);
            given_to[i] = o;
        } else {
            outputs[o].data = outputs[given_to[i]].data;
        }
    }
}

}  // namespace spyre
