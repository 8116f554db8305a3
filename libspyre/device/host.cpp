// SPDX-License-Identifier: Apache-2.0
#include "spyre/device/host.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "forked.hpp"
#include "moved_from.hpp"

namespace spyre {

// Functions under one device root, found once; every Device opened from it
// shares (and keeps alive) the one environment.
class LocalHostBackend final : public HostBackend {
public:
    explicit LocalHostBackend(std::shared_ptr<const driver::DeviceEnvironment> env) : env_(std::move(env)) {
        const std::vector<driver::FunctionInfo> found = env_->root().Functions();
        for (size_t i = 0; i < found.size(); ++i) {
            const driver::FunctionStatus st = driver::ReadFunctionStatus(found[i]);
            functions_.push_back(FunctionDescription{
                .index = i,
                .pci_address = found[i].pci_address,
                .kind = found[i].is_vf ? driver::FunctionKind::VF : driver::FunctionKind::PF,
                .id = DeviceId{st.card, st.function, DeviceTreeNumber(found[i].sysfs_dir.parent_path().string(), st.daemon_pid)},
                .memory_bytes = st.memory_bytes,
                .held_elsewhere = st.held,
            });
            infos_.push_back(found[i]);
        }
    }

    std::string Describe() const override {
        return std::string("local:") + (env_->embedded() ? "embedded spyre-mockdev at " : "") +
               env_->root().path().string();
    }
    const std::vector<FunctionDescription>& Functions() const override { return functions_; }
    Device Open(const FunctionDescription& function, DeviceOptions options) override {
        return Device::OpenIn(env_, infos_.at(function.index), std::move(options));
    }

private:
    std::shared_ptr<const driver::DeviceEnvironment> env_;
    std::vector<FunctionDescription> functions_;
    std::vector<driver::FunctionInfo> infos_;  // same order as functions_
};

struct Host::State {
    std::shared_ptr<HostBackend> backend;
    // Its devices (a private mock's included) stay the parent's on fork():
    // a child opening one took the parent's function (found probing).
    detail::MadeInProcess made_in;
    std::mutex mu;
    // Functions this Host has opened, by index: held while the core lives.
    struct Opened {
        std::weak_ptr<DeviceCore> core;
        std::weak_ptr<const void> lifetime;  // DeviceCore::lifetime: it is not closed before this expires
    };
    std::map<size_t, Opened> opened;
};

Host::Host(std::shared_ptr<HostBackend> backend) : state_(std::make_shared<State>()) {
    if (!backend) throw Error(ErrorKind::InvalidArgument, "a Host needs a backend");
    state_->backend = std::move(backend);
}
Host::Host(Host&&) noexcept = default;
Host& Host::operator=(Host&&) noexcept = default;
Host::~Host() = default;

Host Host::Open(HostOptions options) {
    driver::DeviceEnvironment env = [&] {
        switch (options.source) {
        case HostOptions::Source::DeviceRoot:
            if (options.device_root.empty())
                throw Error(ErrorKind::InvalidArgument, "HostOptions::Source::DeviceRoot needs a device_root");
            return driver::DeviceEnvironment::AtRoot(options.device_root);
        case HostOptions::Source::EmbeddedMock: return driver::DeviceEnvironment::Embedded(options.embedded_mock);
        case HostOptions::Source::Environment: break;
        }
        return driver::DeviceEnvironment::Acquire(options.embedded_mock);
    }();
    return Host(std::make_shared<LocalHostBackend>(std::make_shared<const driver::DeviceEnvironment>(std::move(env))));
}

const std::vector<FunctionDescription>& Host::functions() const {
    return detail::LiveState(state_, "Host").backend->Functions();
}

std::string Host::Describe() const { return detail::LiveState(state_, "Host").backend->Describe(); }

std::vector<CardDescription> Host::cards() const {
    std::map<uint16_t, std::vector<const FunctionDescription*>> by_card;
    for (const FunctionDescription& f : functions()) by_card[f.id.card].push_back(&f);
    std::vector<CardDescription> out;
    for (auto& [card, fns] : by_card) {
        std::sort(fns.begin(), fns.end(), [](auto* a, auto* b) { return a->id.function < b->id.function; });
        CardDescription c{.card = card, .functions = {}};
        for (const FunctionDescription* f : fns) c.functions.push_back(f->index);
        out.push_back(std::move(c));
    }
    return out;
}

const FunctionDescription& Host::Find(const std::string& selector) const {
    const auto& fns = functions();
    const driver::FunctionSelector sel = driver::ParseFunctionSelector(selector);
    if (sel.index) {
        const size_t i = *sel.index;
        if (i >= fns.size())
            throw Error(ErrorKind::NotFound, "function index " + selector + " out of range: " +
                                                 std::to_string(fns.size()) + " spyre function(s) on " + Describe());
        return fns[i];
    }
    for (const FunctionDescription& f : fns)
        if (f.pci_address == sel.pci_address) return f;
    throw Error(ErrorKind::NotFound, "no spyre function " + selector + " on " + Describe() +
                                         " (a selector is an index into functions() or a PCI address)");
}

std::vector<Device> Host::OpenAll(const std::vector<std::string>& selectors, const DeviceOptions& options) {
    std::vector<const FunctionDescription*> chosen;
    std::set<size_t> seen;
    for (const std::string& s : selectors) {
        const FunctionDescription& f = Find(s);
        if (!seen.insert(f.index).second)
            throw Error(ErrorKind::InvalidArgument,
                        "function " + f.pci_address + " is named twice in one Host::OpenAll (selector \"" + s + "\")",
                        ErrorContext{.device = f.pci_address});
        chosen.push_back(&f);
    }
    std::vector<Device> out;
    out.reserve(chosen.size());
    for (const FunctionDescription* f : chosen) out.push_back(Open(f->pci_address, options));
    return out;
}

Device Host::Open(const std::string& selector, DeviceOptions options) {
    detail::LiveState(state_, "Host::Open").made_in.Check("Host::Open", "Host", "create a Host again in the child");
    const FunctionDescription& f = Find(selector);
    // A Device being closed on a thread of its own (DeviceCore::closing),
    // or in its destructor now, is waited for, up to kClosingWait: its
    // owner let go of it, so the caller could not tell when to open it
    // again (found probing from outside: Busy for 100-180 ms after a Worker
    // destroyed from its own SubWorker had ended its runs).
    constexpr auto kClosingWait = std::chrono::seconds(10);
    const auto deadline = std::chrono::steady_clock::now() + kClosingWait;
    for (;;) {
        std::unique_lock lock(state_->mu);
        auto it = state_->opened.find(f.index);
        std::shared_ptr<DeviceCore> open = it != state_->opened.end() ? it->second.core.lock() : nullptr;
        // A core whose last reference went may still be closing its node.
        const bool in_destructor = !open && it != state_->opened.end() && !it->second.lifetime.expired();
        if (!open && !in_destructor) {
            options.function = f.pci_address;
            Device device = state_->backend->Open(f, std::move(options));
            const std::shared_ptr<DeviceCore>& core = DeviceInternals::Core(device);
            state_->opened[f.index] = {core, core->lifetime};
            return device;
        }
        const bool closing = in_destructor || open->closing.load(std::memory_order_acquire);
        lock.unlock();
        open.reset();  // outside the lock: it may be the last reference by now
        if (!closing)
            throw Error(ErrorKind::Busy,
                        "function " + f.pci_address + " is already open as a Device of this Host, or a Worker of it runs chip tasks there " +
                            "(close that Device or destroy that Worker first)",
                        ErrorContext{.device = f.pci_address});
        if (std::chrono::steady_clock::now() >= deadline)
            throw Error(ErrorKind::Busy,
                        "function " + f.pci_address + " is still being closed (by a Worker destroyed from one of its own "
                        "tasks, or a Device going on another thread): waited 10 s",
                        ErrorContext{.device = f.pci_address});
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

}  // namespace spyre
