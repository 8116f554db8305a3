// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/remote_chip_service.hpp"

#include <algorithm>

#include "dependency/job_threads.hpp"
#include "host/remote_protocol.hpp"
#include "spyre/common/log.hpp"
#include "thrown_value.hpp"

namespace spyre::host {

using dependency::JobThreads;

namespace {

// The threads of the device `call` names, or null: answer it on the
// receiving thread (a serial service, or a call naming no device of ours,
// which fails at once).
JobThreads* ThreadsFor(const std::vector<std::unique_ptr<JobThreads>>& device_threads, const Message& call) {
    if (device_threads.empty()) return nullptr;
    const std::optional<std::string> device = remote::CallDevice(call);
    const std::optional<size_t> index = device ? remote::DeviceIndex(*device) : std::nullopt;
    return index && *index < device_threads.size() ? device_threads[*index].get() : nullptr;
}

}  // namespace

RemoteChipService::RemoteChipService(Transport& transport, Host& host) : transport_(transport), host_(host) {}
RemoteChipService::~RemoteChipService() = default;  // device_threads_ finish their calls first: declared last

void RemoteChipService::SetRouter(Router router, std::vector<std::string> functions, std::vector<uint32_t> chip_tasks_at_once) {
    router_ = std::move(router);
    router_functions_ = std::move(functions);
    router_rooms_ = std::move(chip_tasks_at_once);
    uint64_t concurrency = 0;
    for (uint32_t room : router_rooms_) concurrency += room;
    device_threads_.clear();
    if (concurrency > 1)
        for (uint32_t room : router_rooms_)
            device_threads_.push_back(std::make_unique<JobThreads>(
                int(std::clamp<uint32_t>(room, 1, 256)), "spyre-serve" + std::to_string(device_threads_.size())));
}

void RemoteChipService::Register(const std::string& name, RemoteCallHandler handler) {
    if (name.empty() || !handler) throw Error(ErrorKind::InvalidArgument, "RemoteChipService::Register: empty name or handler");
    if (!handlers_.emplace(name, std::move(handler)).second)
        throw Error(ErrorKind::InvalidArgument, "chip function '" + name + "' is registered already");
}

void RemoteChipService::Serve(int controller) {
    shutdown_ = false;
    controller_ = controller;
    struct Forget {
        int& controller;
        ~Forget() { controller = -1; }
    } forget{controller_};
    int source = kAnySource;
    while (!shutdown_) {
        try {
            Message m = transport_.Receive(transport_.liveness().silence_bound, source);
            if (m.type == kPeerLeftMessageType) {
                // A rank that finished; unless it is the controller, which
                // then never sends Shutdown (it failed before it could).
                if (m.source == controller) {
                    if (auto left = transport_.PeerError(controller)) throw *left;
                    throw Error(ErrorKind::DeviceLost, transport_.peer(controller).Describe() + " left the run");
                }
                continue;
            }
            Answer(std::move(m));
        } catch (const Error& e) {
            switch (e.kind()) {
            case ErrorKind::Timeout:
                continue;
            case ErrorKind::ProtocolError:
                // A hostile frame: its sender is cut off, the others are still served.
                SPYRE_LOG_WARN("remote chip service, rank %d: %s", transport_.rank(), e.what());
                continue;
            case ErrorKind::DeviceLost:
                if (transport_.PeerError(controller) || source == controller) throw;
                // Another peer is lost: the controller decides what happens, keep serving it.
                SPYRE_LOG_WARN("remote chip service, rank %d: %s", transport_.rank(), e.what());
                source = controller;
                continue;
            default:
                throw;
            }
        }
    }
}

bool RemoteChipService::ServeOne(std::chrono::milliseconds timeout) {
    shutdown_ = false;
    try {
        Answer(transport_.Receive(timeout, kAnySource));
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::Timeout) return false;
        throw;
    }
    return !shutdown_;
}

Device& RemoteChipService::OpenDevice(const std::string& selector) {
    const FunctionDescription& f = host_.Find(selector);
    auto it = devices_.find(f.pci_address);
    if (it == devices_.end()) it = devices_.emplace(f.pci_address, host_.Open(f.pci_address)).first;
    return it->second;
}

void RemoteChipService::Answer(Message request) {
    const int from = request.source;
    const PeerInfo& self = transport_.peer(transport_.rank());
    switch (request.type) {
    case kPeerLeftMessageType:  // a rank that finished: nothing to answer
        return;
    case remote::kShutdown:
        if (controller_ >= 0 && from != controller_) {
            SPYRE_LOG_WARN("remote chip service, rank %d: ignored a Shutdown from rank %d (rank %d controls the run)",
                           self.rank, from, controller_);
            return;
        }
        shutdown_ = true;
        return;
    case remote::kDescribe: {
        RankDescription d;
        d.rank = self.rank;
        d.host_name = self.host_name;
        d.pid = self.pid;
        d.host = host_.Describe();
        for (const FunctionDescription& f : host_.functions())
            d.functions.push_back(RemoteFunction{f.pci_address, f.kind == driver::FunctionKind::VF, f.id.card,
                                                 static_cast<uint16_t>(f.id.function), f.memory_bytes});
        for (const auto& [name, handler] : handlers_) d.chip_functions.push_back(name);
        d.chip_functions.insert(d.chip_functions.end(), router_functions_.begin(), router_functions_.end());
        std::sort(d.chip_functions.begin(), d.chip_functions.end());
        d.chip_tasks_at_once = router_rooms_;
        d.served_devices = served_devices_;
        transport_.Send(from, remote::EncodeDescribeReply(remote::ReplyId(request), d));
        return;
    }
    case remote::kCall:
        if (JobThreads* threads = ThreadsFor(device_threads_, request)) {
            threads->Post([this, request = std::move(request)]() mutable {
                try {
                    AnswerCall(std::move(request));
                } catch (const Error& e) {
                    // The caller is lost: nobody to answer, and Serve learns it from the transport.
                    SPYRE_LOG_WARN("remote chip service, rank %d: %s", transport_.rank(), e.what());
                }
            });
        } else {
            AnswerCall(std::move(request));
        }
        return;
    default:
        if (other_) {
            other_(std::move(request));
            return;
        }
        SPYRE_LOG_WARN("remote chip service, rank %d: ignored a message of type %u from rank %d", self.rank,
                       unsigned(request.type), from);
        return;
    }
}

void RemoteChipService::AnswerCall(Message request) {
    const int from = request.source;
    const PeerInfo& self = transport_.peer(transport_.rank());
    uint64_t id = 0;
    RemoteFailure failure{.rank = self.rank, .host_name = self.host_name};
    try {
        id = remote::ReplyId(request);
        auto [call_id, call] = remote::DecodeCall(request);
        failure.task = call.task;
        failure.function = call.function;
        failure.device = call.device;
        std::vector<WireTensor> outputs;
        for (const WireSpec& s : call.outputs) outputs.push_back(WireTensor{s, std::vector<uint8_t>(s.bytes())});
        if (router_) {
            router_(call, outputs);
        } else {
            auto handler = handlers_.find(call.function);
            if (handler == handlers_.end())
                throw Error(ErrorKind::NotFound, "no chip function '" + call.function + "' is registered on this rank");
            Device& device = OpenDevice(call.device);
            failure.device = device.pci_address();
            handler->second(device, call, outputs);
        }
        for (size_t i = 0; i < outputs.size(); ++i)
            if (outputs[i].data.size() != call.outputs[i].bytes())
                throw Error(ErrorKind::Internal, "chip function '" + call.function + "' resized output " + std::to_string(i));
        ++calls_served_;
        transport_.Send(from, remote::EncodeCallReply(call_id, outputs));
        return;
    } catch (const Error& e) {
        if (e.kind() == ErrorKind::DeviceLost && transport_.PeerError(from)) throw;  // nobody to answer
        failure.cause = e.kind();
        failure.message = e.message();
        failure.device_code = e.context().device_code;
        failure.host_kernel_code = e.context().host_kernel_code;
    } catch (const std::exception& e) {
        failure.cause = ErrorKind::Internal;
        failure.message = e.what();
    } catch (...) {  // a handler's own throw: the call fails, the rank serves on
        failure.cause = ErrorKind::TaskFailed;
        failure.message = spyre::detail::DescribeThrownValue();
    }
    transport_.Send(from, remote::EncodeCallError(id, failure));
}

}  // namespace spyre::host
