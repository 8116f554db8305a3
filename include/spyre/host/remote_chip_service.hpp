// SPDX-License-Identifier: Apache-2.0
// RemoteChipService: the serving side of remote chip calls on one rank. It
// owns nothing but a name -> handler table; the rank's Host opens the devices
// calls name (each once, kept open). The level-3 runtime plugs its chip
// function registry in through Register.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "spyre/device/host.hpp"
#include "spyre/host/remote_chip.hpp"
#include "spyre/host/transport.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::dependency {
class SPYRE_INTERNAL JobThreads;
}  // namespace spyre::dependency

namespace spyre::host {

// Runs `call` on `device`, filling `outputs` (already sized as the call's
// output specs). A spyre::Error it throws goes back to the caller as a
// RemoteChipError of the same kind; any other exception as Internal.
using RemoteCallHandler = std::function<void(Device& device, const RemoteCall& call, std::vector<WireTensor>& outputs)>;

class RemoteChipService {
public:
    RemoteChipService(Transport& transport, Host& host);
    ~RemoteChipService();

    // InvalidArgument for an empty name or one registered already.
    void Register(const std::string& name, RemoteCallHandler handler);

    // Sends every call to `router` instead of the handler table: for a
    // serving rank whose devices something else keeps open (the level-4
    // runtime's chip executors). `functions` is what Describe lists, and
    // `chip_tasks_at_once` (each device's room, which Describe lists too, so
    // the caller keeps that many calls in flight per device). When they add
    // up to more than 1, each device's calls run on threads of its own, that
    // many at once (the router must be thread-safe), and each reply goes
    // out when its call ends: a call still running on one device (its
    // caller may have given up on it) holds no thread another device's
    // calls need. Otherwise each call is answered before the next message
    // is read.
    // The router may take the call's input bytes (it is the last to read them).
    using Router = std::function<void(RemoteCall& call, std::vector<WireTensor>& outputs)>;
    void SetRouter(Router router, std::vector<std::string> functions, std::vector<uint32_t> chip_tasks_at_once = {});
    // The PCI addresses of the router's devices, in its order: Describe
    // lists them, so the caller can check they are the ones it meant.
    void SetServedDevices(std::vector<std::string> pci_addresses) { served_devices_ = std::move(pci_addresses); }

    // Messages of other types (another protocol sharing the transport) go
    // to `handler`; without one they are logged and dropped.
    void SetOtherMessageHandler(std::function<void(Message)> handler) { other_ = std::move(handler); }

    // Answers requests until `controller` sends Shutdown (a Shutdown from
    // any other rank is logged and ignored: it ended the service for the
    // controller, found probing from outside). Throws the
    // transport's errors (a lost peer, the controller gone); a controller
    // that leaves the run without Shutdown (it failed before it could) ends
    // it at once with the transport's DeviceLost ("left the run"). A
    // malformed request is answered with an error and serving goes on.
    void Serve(int controller = 0);
    // Answers at most one message within `timeout`; false when none came or
    // it was a Shutdown. For callers that interleave their own work.
    bool ServeOne(std::chrono::milliseconds timeout);

    uint64_t calls_served() const { return calls_served_.load(); }

private:
    void Answer(Message request);
    void AnswerCall(Message request);
    Device& OpenDevice(const std::string& selector);

    Transport& transport_;
    Host& host_;
    std::map<std::string, RemoteCallHandler> handlers_;
    std::function<void(Message)> other_;
    Router router_;
    std::vector<std::string> router_functions_;
    std::vector<uint32_t> router_rooms_;
    std::vector<std::string> served_devices_;
    std::map<std::string, Device> devices_;  // by PCI address
    // Each device's call threads (by device index), when SetRouter's rooms
    // add up to more than 1.
    std::vector<std::unique_ptr<dependency::JobThreads>> device_threads_;
    bool shutdown_ = false;
    int controller_ = -1;  // Serve's: the one rank whose Shutdown counts (-1: any, ServeOne)
    std::atomic<uint64_t> calls_served_{0};
};

}  // namespace spyre::host
SPYRE_API_END
