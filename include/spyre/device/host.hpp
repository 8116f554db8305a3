// SPDX-License-Identifier: Apache-2.0
// Host: every Spyre card and function this process can use, found once, and
// the opener of any subset of them as Devices that share one environment
// (one device root; at most one private spyre-mockdev). Seed 003's host-level
// orchestration (a level-3 Worker over many chips) stands on it.
//
// The functions come from a HostBackend. The only backend today is local:
// device nodes under a device root (real nodes, a mounted mock, or an
// embedded mock with N cards and M VFs per card). The interface is what a
// remote host would implement later (a list of functions and an opener);
// docs/host.md says what stays to do for that.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spyre/device/device.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// One function as discovery found it (a snapshot taken when the Host opened).
struct FunctionDescription {
    size_t index = 0;                 // position in Host::functions(): a selector
    std::string pci_address;          // "0000:01:00.1": a selector too
    driver::FunctionKind kind = driver::FunctionKind::PF;
    DeviceId id;                      // card index and function index (0 = PF, n = VF n)
    uint64_t memory_bytes = 0;        // MEM_SIZE, its window (a PF with VFs: the whole card); 0 when unknown
    std::optional<bool> held_elsewhere;  // another process held it at discovery; nullopt: unknown
};

// One card: its PF (when visible) and its VFs, as indices into functions().
struct CardDescription {
    uint16_t card = 0;
    std::vector<size_t> functions;  // PF first, then VFs by function index
};

struct HostOptions {
    enum class Source {
        Environment,   // as Device::Open: SPYRE_DEV_ROOT, /run/spyre, else a private mock (FLEX_DEVICE honoured)
        DeviceRoot,    // the functions under `device_root`
        EmbeddedMock,  // a private spyre-mockdev started with `embedded_mock`, whatever the environment says
    };
    Source source = Source::Environment;
    std::filesystem::path device_root;  // Source::DeviceRoot
    driver::MockOptions embedded_mock;  // Source::EmbeddedMock, or Environment when it starts a mock

    // A private spyre-mockdev of `cards` cards with `vfs` VFs each, `mem` per card.
    static HostOptions EmbeddedMock(int cards, int vfs, std::string mem) {
        HostOptions o;
        o.source = Source::EmbeddedMock;
        o.embedded_mock.cards = cards;
        o.embedded_mock.vfs = vfs;
        o.embedded_mock.mem = std::move(mem);
        return o;
    }
    // The functions under `root` (real nodes or a mounted spyre-mockdev).
    static HostOptions DeviceRootAt(std::filesystem::path root) {
        HostOptions o;
        o.source = Source::DeviceRoot;
        o.device_root = std::move(root);
        return o;
    }
};

// Where a Host's functions come from and how one is opened. Local devices
// are the only implementation; a remote host would be another.
class HostBackend {
public:
    virtual ~HostBackend() = default;
    // "local:/run/spyre", "local:embedded mock at /tmp/...": for messages.
    virtual std::string Describe() const = 0;
    virtual const std::vector<FunctionDescription>& Functions() const = 0;
    // Opens one function of Functions() as a Device. The Device keeps what
    // it needs of the backend alive (its environment) on its own.
    virtual Device Open(const FunctionDescription& function, DeviceOptions options) = 0;
};

class Host {
public:
    // Discovers every visible function once (SPYRE_DEVICES filters and
    // orders them as for Device::Open). Throws NotFound when there is no
    // device and the options ask for one.
    static Host Open(HostOptions options = {});
    // A host over any backend (tests, and later a remote host).
    explicit Host(std::shared_ptr<HostBackend> backend);

    Host(Host&&) noexcept;
    Host& operator=(Host&&) noexcept;
    ~Host();

    const std::vector<FunctionDescription>& functions() const;
    std::vector<CardDescription> cards() const;
    std::string Describe() const;

    // The function a selector names: its index in functions() ("2") or its
    // PCI address ("0000:02:00.1" or "02:00.1"). Throws InvalidArgument
    // (empty, or neither an index nor a PCI address) or NotFound (no such
    // function).
    const FunctionDescription& Find(const std::string& selector) const;

    // Opens one function as a Device; `options.function` is ignored. A
    // function that a Device of this Host still holds is a Busy error
    // naming it (a Device outliving its Host counts too: the function stays
    // held until the Device goes). Devices share the Host's environment and
    // keep it alive: they may outlive the Host.
    Device Open(const std::string& selector, DeviceOptions options = {});
    // Opens several at once: every selector is checked (and duplicates
    // refused) before any is opened. Same order as `selectors`.
    std::vector<Device> OpenAll(const std::vector<std::string>& selectors, const DeviceOptions& options = {});

private:
    struct SPYRE_INTERNAL State;
    std::shared_ptr<State> state_;
};

}  // namespace spyre
SPYRE_API_END
