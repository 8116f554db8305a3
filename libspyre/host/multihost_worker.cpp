// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/multihost_worker.hpp"

#include <cstring>

#include "local_chip_executor.hpp"
#include "remote_chip_executor.hpp"
#include "spyre/host/remote_chip_service.hpp"

namespace spyre {

struct MultiHostWorker::Impl {
    host::Transport& transport;
    Host& host;
    std::shared_ptr<ChipRegistry> registry = std::make_shared<ChipRegistry>();
    std::optional<Worker> worker;
    std::vector<std::shared_ptr<host::RemoteRank>> remote_ranks;

    Impl(host::Transport& t, Host& h) : transport(t), host(h) {}

    // A call a remote rank placed on local device `call.device`: one chip task
    // with affinity to it, run as a one-task program on the local Worker.
    void Answer(const host::RemoteCall& call, std::vector<host::WireTensor>& outputs);
};

MultiHostWorker::MultiHostWorker(host::Transport& transport, Host& host, DistributedConfig config,
                                 std::chrono::milliseconds reply_timeout)
    : impl_(std::make_unique<Impl>(transport, host)) {
    auto executors = host::OpenLocalChipExecutors(host, config, impl_->registry);
    if (transport.rank() == 0) {
        for (int r = 1; r < transport.size(); ++r) {
            auto remote = std::make_shared<host::RemoteRank>(transport, r, reply_timeout);
            const host::RankDescription d = remote->client.Describe(r);
            for (size_t i = 0; i < config.device_ids.size(); ++i) {
                const int id = config.device_ids[i];
                if (size_t(id) >= d.functions.size())
                    throw Error(ErrorKind::NotFound, "DistributedConfig: device_ids[" + std::to_string(i) + "] is " +
                                                         std::to_string(id) + ", but rank " + std::to_string(r) + " (" +
                                                         d.host_name + ") has " + std::to_string(d.functions.size()) +
                                                         " function(s)");
                // Its place among the serving rank's devices is its place in device_ids.
                const unsigned room = i < d.chip_tasks_at_once.size() ? d.chip_tasks_at_once[i] : 1;
                executors.push_back(std::make_unique<host::RemoteChipExecutor>(
                    remote, i, "rank " + std::to_string(r) + " (" + d.host_name + ") " + d.functions[size_t(id)].pci_address,
                    room));
            }
            impl_->remote_ranks.push_back(std::move(remote));
        }
    }
    impl_->worker.emplace(std::move(executors), std::move(config), impl_->registry);
}

MultiHostWorker::~MultiHostWorker() {
    if (!impl_ || impl_->transport.rank() != 0) return;
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
    service.SetRouter([this](const host::RemoteCall& call, std::vector<host::WireTensor>& outputs) { impl_->Answer(call, outputs); },
                      impl_->registry->List(), std::move(rooms));
    service.Serve(0);
}

void MultiHostWorker::Impl::Answer(const host::RemoteCall& call, std::vector<host::WireTensor>& outputs) {
    size_t device = 0;
    try {
        device = std::stoul(call.device);
    } catch (const std::exception&) {
        device = worker->device_count();
    }
    if (device >= worker->device_count())
        throw Error(ErrorKind::NotFound, "chip call '" + call.task + "' names device '" + call.device + "'; this rank serves " +
                                             std::to_string(worker->device_count()) + " device(s)");
    std::vector<uint8_t> access = call.access;
    if (access.empty()) {  // inputs, then outputs
        access.assign(call.inputs.size(), host::RemoteCall::kIn);
        access.insert(access.end(), call.outputs.size(), host::RemoteCall::kOut);
    }
    std::vector<HostTensor> args;
    std::vector<TensorArg> task_args;
    std::vector<size_t> returned;  // args that go back, in order
    size_t in = 0, out = 0;
    for (uint8_t a : access) {
        HostTensor t;
        if (a == host::RemoteCall::kOut) {
            const host::WireSpec& spec = call.outputs.at(out++);
            t = HostTensor::Zeros(spec.shape, spec.dtype);
        } else {
            const host::WireTensor& src = call.inputs.at(in++);
            t = HostTensor::Zeros(src.spec.shape, src.spec.dtype);
            std::memcpy(t.data(), src.data.data(), src.data.size());
            if (a == host::RemoteCall::kInOut) ++out;
        }
        if (a != host::RemoteCall::kIn) returned.push_back(args.size());
        task_args.push_back({t, host::AccessOf(a)});
        args.push_back(std::move(t));
    }
    const HostProgram one{call.task, args.size(), {}, [&](HostGraph& g, std::span<const HostTensor>) {
                              g.Chip(call.function, task_args, {.name = call.task, .device = device});
                          }};
    worker->Run(one, args);  // a failure is a HostRunError: kind, device code and the device named
    for (size_t i = 0; i < returned.size(); ++i) {
        const HostTensor& t = args[returned[i]];
        std::memcpy(outputs[i].data.data(), t.data(), t.bytes());
    }
}

}  // namespace spyre
