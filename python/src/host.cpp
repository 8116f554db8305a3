// SPDX-License-Identifier: Apache-2.0
// spyre.Host (every card and function this process can use) and
// spyre.Device (one opened function), with the descriptions discovery
// gives and the allocator's and scheduler's statistics.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <exception>

#include "bindings.hpp"
#include "gil.hpp"
#include "int_arg.hpp"
#include "objects.hpp"
#include "spyre/device/host.hpp"

namespace spyre::python {

namespace {

std::shared_ptr<PyHost> OpenHost(HostOptions options) {
    auto host = WithoutGil([&] { return std::make_shared<Host>(Host::Open(std::move(options))); });
    return std::make_shared<PyHost>(PyHost{std::move(host)});
}

DeviceOptions MakeOptions(const std::optional<std::string>& allocator_mode, const std::optional<std::string>& wait_mode) {
    DeviceOptions o;
    if (allocator_mode) {
        if (*allocator_mode == "PF") o.allocator_mode = AllocatorMode::PF;
        else if (*allocator_mode == "VF") o.allocator_mode = AllocatorMode::VF;
        else throw Error(ErrorKind::InvalidArgument, "allocator_mode must be 'PF' or 'VF', not '" + *allocator_mode + "'");
    }
    if (wait_mode) {
        if (*wait_mode == "poll") o.scheduler.wait_mode = driver::WaitMode::Poll;
        else if (*wait_mode == "adaptive") o.scheduler.wait_mode = driver::WaitMode::Adaptive;
        else if (*wait_mode == "blocking") o.scheduler.wait_mode = driver::WaitMode::Blocking;
        else throw Error(ErrorKind::InvalidArgument,
                         "wait_mode must be 'poll', 'adaptive' or 'blocking', not '" + *wait_mode + "'");
    }
    return o;
}

const char* KindName(driver::FunctionKind k) { return k == driver::FunctionKind::PF ? "PF" : "VF"; }

}  // namespace

std::shared_ptr<PyStream> DefaultStream(const SlotPtr& slot, const char* what) {
    // Checked first: a stream read before close() was handed out again,
    // released, where one never read raised "is closed".
    Device& dev = SlotOf(slot, what).Get(what);
    if (auto s = slot->default_stream.lock()) return s;
    // Aliases the device: the stream lives as long as the device does.
    auto s = Adopt(slot, std::shared_ptr<FlexStream>(slot->shared(), &dev.default_stream()));
    slot->default_stream = s;
    return s;
}

void BindHost(py::module_& m) {
    py::class_<DeviceId>(m, "DeviceId",
                         "Card index, function index (0 = PF, n = VF n) and device tree (numbered from 1 in this "
                         "process) of a function.")
        .def_readonly("card", &DeviceId::card)
        .def_readonly("function", &DeviceId::function)
        .def_readonly("tree", &DeviceId::tree)
        .def("__str__", &DeviceId::ToString)
        .def("__repr__", [](const DeviceId& d) { return "DeviceId('" + d.ToString() + "')"; })
        .def("__eq__", [](const DeviceId& a, const DeviceId& b) { return a == b; })
        .def("__hash__", [](const DeviceId& d) { return py::hash(py::make_tuple(d.card, d.function, d.tree)); });

    py::class_<FunctionDescription>(m, "FunctionDescription", "One function as discovery found it.")
        .def_readonly("index", &FunctionDescription::index, "Position in Host.functions (a selector).")
        .def_readonly("pci_address", &FunctionDescription::pci_address, "'0000:01:00.1' (a selector too).")
        .def_property_readonly("kind", [](const FunctionDescription& f) { return KindName(f.kind); }, "'PF' or 'VF'.")
        .def_readonly("id", &FunctionDescription::id)
        .def_readonly("memory_bytes", &FunctionDescription::memory_bytes, "Device memory; 0 when unknown.")
        .def_readonly("held_elsewhere", &FunctionDescription::held_elsewhere)
        .def("__repr__", [](const FunctionDescription& f) {
            return "FunctionDescription(" + std::to_string(f.index) + ", '" + f.pci_address + "', " + KindName(f.kind) +
                   ", " + std::to_string(f.memory_bytes) + " bytes)";
        });

    py::class_<CardDescription>(m, "CardDescription", "One card: its PF and VFs as indices into Host.functions.")
        .def_readonly("card", &CardDescription::card)
        .def_readonly("functions", &CardDescription::functions)
        .def("__repr__", [](const CardDescription& c) {
            std::string s = "CardDescription(" + std::to_string(c.card) + ", [";
            for (size_t i = 0; i < c.functions.size(); ++i) s += (i ? ", " : "") + std::to_string(c.functions[i]);
            return s + "])";
        });

    py::class_<PyHost, std::shared_ptr<PyHost>>(m, "Host",
        "Every Spyre card and function this process can use, found once; opens them as Devices that share "
        "one environment. Host() starts a private embedded mock (1 card, 2 VFs); Host.embedded_mock, "
        "Host.device_root and Host.environment choose otherwise.")
        .def(py::init([](const IntArg<int>& cards, const IntArg<int>& vfs, const std::string& mem) {
                 return OpenHost(HostOptions::EmbeddedMock(cards.In("Host: cards"), vfs.In("Host: vfs"), mem));
             }),
             py::arg("cards") = 1, py::arg("vfs") = 2, py::arg("mem") = "128G")
        .def_static("embedded_mock", [](const IntArg<int>& cards, const IntArg<int>& vfs, const std::string& mem) {
                return OpenHost(HostOptions::EmbeddedMock(cards.In("Host.embedded_mock: cards"),
                                                          vfs.In("Host.embedded_mock: vfs"), mem));
            }, py::arg("cards") = 1, py::arg("vfs") = 2, py::arg("mem") = "128G",
            "A private spyre-mockdev of `cards` cards with `vfs` VFs each and `mem` per card; it stops with the Host "
            "(and the last Device opened from it).")
        .def_static("device_root", [](const std::filesystem::path& root) {
                return OpenHost(HostOptions::DeviceRootAt(root));
            }, py::arg("path"), "The functions under `path`: real device nodes or a mounted spyre-mockdev.")
        .def_static("environment", [] { return OpenHost(HostOptions{}); },
            "As Device.open finds devices: SPYRE_DEV_ROOT, /run/spyre, else a private mock.")
        .def_property_readonly("functions", [](const PyHost& h) { return h.Get("Host.functions").functions(); })
        .def_property_readonly("cards", [](const PyHost& h) { return h.Get("Host.cards").cards(); })
        .def("describe", [](const PyHost& h) { return h.Get("Host.describe").Describe(); })
        .def("find", [](const PyHost& h, const std::string& s) { return h.Get("Host.find").Find(s); },
             py::arg("selector"), "The function a selector names (index or PCI address); NotFound otherwise.")
        .def("open", [](const PyHost& h, py::object selector, std::optional<std::string> allocator_mode,
                        std::optional<std::string> wait_mode) {
                Host& host = h.Get("Host.open");
                // An index or an address; str() of anything else read as a
                // function name ("no spyre function None").
                if (!py::isinstance<py::int_>(selector) && !py::isinstance<py::str>(selector))
                    throw Error(ErrorKind::InvalidArgument,
                                "Host.open: the function is a " +
                                    std::string(py::str(py::type::handle_of(selector).attr("__name__"))) +
                                    ", not an index or a PCI address");
                const std::string sel = py::str(selector);
                DeviceOptions o = MakeOptions(allocator_mode, wait_mode);
                return DeviceSlot::Open(WithoutGil([&] { return host.Open(sel, std::move(o)); }));
            }, py::arg("selector") = "0", py::kw_only(), py::arg("allocator_mode") = py::none(),
            py::arg("wait_mode") = py::none(),
            "Opens one function (index or PCI address) as a Device. Busy if a Device of this Host holds it.")
        .def("open_all", [](const PyHost& h, const std::vector<py::object>& selectors) {
                Host& host = h.Get("Host.open_all");
                std::vector<std::string> sel;
                for (const auto& s : selectors) sel.push_back(py::str(s));
                std::vector<Device> devices = WithoutGil([&] { return host.OpenAll(sel); });
                std::vector<SlotPtr> out;
                for (Device& d : devices) out.push_back(DeviceSlot::Open(std::move(d)));
                return out;
            }, py::arg("selectors"), "Opens several functions; all are checked before any is opened.")
        .def("close", &PyHost::Close, "Forgets the functions; Devices opened from it keep working.")
        .def_property_readonly("closed", [](const PyHost& h) { return !h.host; })
        .def("__enter__", [](std::shared_ptr<PyHost> h) { return h; })
        .def("__exit__", [](PyHost& h, py::args) { h.Close(); })
        .def("__repr__", [](const PyHost& h) {
            return h.host ? "<spyre.Host " + h.host->Describe() + ", " + std::to_string(h.host->functions().size()) +
                                " functions>"
                          : std::string("<spyre.Host closed>");
        });

    py::class_<DeviceSlot, SlotPtr>(m, "Device",
        "One opened function with its allocator, DMA engine, scheduler and default stream. Close it (or use "
        "`with`) to release it and everything made on it; later use raises spyre.InvalidArgument.")
        .def_static("open", [](const std::string& function, std::optional<std::string> allocator_mode,
                               std::optional<std::string> wait_mode) {
                DeviceOptions o = MakeOptions(allocator_mode, wait_mode);
                o.function = function;
                return DeviceSlot::Open(WithoutGil([&] { return Device::Open(std::move(o)); }));
            }, py::arg("function") = "", py::kw_only(), py::arg("allocator_mode") = py::none(),
            py::arg("wait_mode") = py::none(),
            "Device::Open: the environment's device (SPYRE_DEV_ROOT, /run/spyre, else a private mock).")
        .def_property_readonly("id", &DeviceSlot::id)
        .def_property_readonly("pci_address", &DeviceSlot::name)
        .def_property_readonly("closed", &DeviceSlot::closed)
        .def_property_readonly("allocator_mode", [](const DeviceSlot& s) {
            return s.Get("Device.allocator_mode").allocator().mode() == AllocatorMode::PF ? "PF" : "VF";
        })
        .def_property_readonly("dma_backend", [](const DeviceSlot& s) {
            return std::string(driver::ToString(s.Get("Device.dma_backend").dma().backend()));
        })
        .def("memory_stats", [](const DeviceSlot& s) { return s.Get("Device.memory_stats").allocator().Stats(); },
             "The allocator's statistics (AllocatorStats).")
        .def("scheduler_stats", [](const DeviceSlot& s) { return s.Get("Device.scheduler_stats").scheduler().Stats(); })
        .def_property_readonly("scheduler_policy", [](const DeviceSlot& s) {
            return std::string(ToString(s.Get("Device.scheduler_policy").scheduler().policy()));
        })
        .def_property_readonly("default_stream", [](const SlotPtr& s) { return DefaultStream(s); },
                               "The device's default FlexStream.")
        .def("synchronize", [](DeviceSlot& s) {
                const std::shared_ptr<void> hold = s.Hold();  // let go after `d`
                std::shared_ptr<Device> d = s.shared();
                if (!d) s.ThrowClosed("Device.synchronize");
                SynchronizeHandlingSignals(*d);
                if (s.closed()) s.ThrowClosed("Device.synchronize");  // by another thread meanwhile
                Deferred::Instance().Drain();
            }, "Waits (GIL released) for every stream of the device; raises no stream's error (each stays with its stream, whose synchronize or last_error reports it).")
        .def("close", &DeviceSlot::Close,
             "Waits for the device's work, releases every object made on it, then the function.")
        .def("__enter__", [](SlotPtr s) { return s; })
        .def("__exit__", [](DeviceSlot& s, py::args) { s.Close(); })
        .def("__repr__", [](const DeviceSlot& s) {
            return "<spyre.Device " + s.name() + (s.closed() ? " closed>" : ">");
        });

    m.def("_close_all", [] {
        std::vector<SlotPtr> slots;
        {
            std::lock_guard lock(DeviceSlot::RegistryMutex());
            for (auto& w : DeviceSlot::Registry())
                if (auto s = w.lock()) slots.push_back(s);
        }
        // Every device, whatever one raises: Busy (calls of daemon threads
        // that hold a device past close's bound) goes unsaid at exit, as
        // close returned before; another error is raised after the rest.
        std::exception_ptr first;
        for (auto& s : slots) {
            try {
                s->Close();
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::Busy && !first) first = std::current_exception();
            }
        }
        Deferred::Instance().Drain();
        if (first) std::rethrow_exception(first);
    }, "Closes every open Device (spyre registers it with atexit).");
    m.def("_deferred_pending", [] { return Deferred::Instance().pending(); },
          "References the runtime dropped off the GIL, not yet released (tests).");
}

}  // namespace spyre::python
