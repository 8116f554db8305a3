// SPDX-License-Identifier: Apache-2.0
// spyre.FlexStream (async copies, launches, callbacks, events, sticky
// errors), spyre.Event and spyre.SpyreStream. Enqueues keep the GIL (they
// return in well under a microsecond); every wait releases it, so Python
// threads drive separate streams concurrently.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.hpp"
#include "callbacks.hpp"
#include "errors.hpp"
#include "host_buffer.hpp"
#include "int_arg.hpp"
#include "objects.hpp"

namespace spyre::python {

namespace {

// The buffer's handle at `offset` for `size` bytes, on the stream's device.
DeviceHandle Range(const PyStream& s, const PyBuffer& b, int64_t offset, uint64_t size, const char* what) {
    s.slot()->CheckSame(*b.slot(), std::string(what) + ": DeviceBuffer", "stream");
    const DeviceBuffer& buf = b.Get(what);
    if (offset < 0 || uint64_t(offset) > buf.size())
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + ": offset " + std::to_string(offset) + " is outside the " +
                        std::to_string(buf.size()) + "-byte DeviceBuffer",
                    ErrorContext{.device = s.slot()->name()});
    if (size > buf.size() - uint64_t(offset))
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + ": " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
                        " do not fit the " + std::to_string(buf.size()) + "-byte DeviceBuffer",
                    ErrorContext{.device = s.slot()->name()});
    if (size == 0)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": nothing to copy (0 bytes)",
                    ErrorContext{.device = s.slot()->name()});
    return buf.handle().Offset(uint64_t(offset), size, buf.allocation());
}

void Copy(PyStream& s, bool to_device, py::handle host, PyBuffer& b, int64_t offset, std::optional<int64_t> nbytes) {
    const char* what = to_device ? "FlexStream.copy_to_device" : "FlexStream.copy_from_device";
    FlexStream& stream = s.Get(what);
    HostView view = ViewOf(host, !to_device, what);
    uint64_t size = view.bytes;
    if (nbytes) {
        if (*nbytes < 0)
            throw Error(ErrorKind::InvalidArgument,
                        std::string(what) + ": nbytes=" + std::to_string(*nbytes) + " is negative (it must be >= 0)");
        if (uint64_t(*nbytes) > view.bytes)
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": nbytes=" + std::to_string(*nbytes) +
                                                        " but the host array holds " + std::to_string(view.bytes));
        size = uint64_t(*nbytes);
    }
    const DeviceHandle handle = Range(s, b, offset, size, what);
    EnqueueCopy(s.slot()->Get(what), stream, to_device, view.data, view.keeper, handle, size);
}

void Wait(const std::shared_ptr<FlexStream>& s) {
    SynchronizeHandlingSignals(*s);
    Deferred::Instance().Drain();
}

}  // namespace

void BindStreams(py::module_& m) {
    py::enum_<StreamStatus>(m, "StreamStatus")
        .value("Idle", StreamStatus::Idle)
        .value("Busy", StreamStatus::Busy)
        .value("Faulted", StreamStatus::Faulted);

    py::class_<PyStream, std::shared_ptr<PyStream>>(m, "FlexStream",
        "An asynchronous, ordered queue of device work (seed 001), as CUDA streams. Every enqueue validates and "
        "returns at once; errors are sticky until reset().")
        .def_property_readonly("index", [](const PyStream& s) { return s.Get("FlexStream.index").stream_index(); })
        .def_property_readonly("priority", [](const PyStream& s) { return s.Get("FlexStream.priority").priority(); })
        .def_property_readonly("device", [](const PyStream& s) { return s.slot(); })
        .def("copy_to_device", [](PyStream& s, py::handle src, PyBuffer& dst, const IntArg<int64_t>& offset,
                                  const std::optional<IntArg<int64_t>>& nbytes) {
                Copy(s, true, src, dst, offset.In("FlexStream.copy_to_device: offset"),
                     nbytes ? std::optional(nbytes->In("FlexStream.copy_to_device: nbytes")) : std::nullopt);
            },
             py::arg("src"), py::arg("dst"), py::arg("offset") = 0, py::arg("nbytes") = py::none(),
             "Enqueues a copy of host `src` (any C-contiguous buffer: numpy array, bytes, ...) into `dst` at "
             "`offset`. `src` is kept alive until the copy completes; do not change it meanwhile.")
        .def("copy_from_device", [](PyStream& s, PyBuffer& src, py::handle dst, const IntArg<int64_t>& offset,
                                    const std::optional<IntArg<int64_t>>& nbytes) {
                Copy(s, false, dst, src, offset.In("FlexStream.copy_from_device: offset"),
                     nbytes ? std::optional(nbytes->In("FlexStream.copy_from_device: nbytes")) : std::nullopt);
            },
             py::arg("src"), py::arg("dst"), py::arg("offset") = 0, py::arg("nbytes") = py::none(),
             "Enqueues a copy of `src` at `offset` into the writable, C-contiguous host `dst` (len(dst) bytes "
             "or `nbytes`). `dst` is kept alive until the copy completes.")
        .def("launch", [](PyStream& s, PyBuffer& program, const IntArg<int64_t>& offset_arg, const IntArg<int64_t>& nbytes_arg) {
                FlexStream& stream = s.Get("FlexStream.launch");
                const int64_t offset = offset_arg.In("FlexStream.launch: offset");
                const int64_t nbytes = nbytes_arg.In("FlexStream.launch: nbytes");
                if (nbytes < 0)  // it was taken as 2^64 - 1 bytes
                    throw Error(ErrorKind::InvalidArgument, "FlexStream.launch: nbytes=" + std::to_string(nbytes) +
                                                                " is negative (it must be >= 0; 0: the size in the "
                                                                "program's header)");
                const DeviceBuffer& b = program.Get("FlexStream.launch");
                const uint64_t size = nbytes ? uint64_t(nbytes) : b.size() - uint64_t(std::max<int64_t>(offset, 0));
                const DeviceHandle h = Range(s, program, offset, size, "FlexStream.launch");
                if (nbytes) stream.Launch(h, size);
                else stream.Launch(h);
            }, py::arg("program"), py::arg("offset") = 0, py::arg("nbytes") = 0,
            "Enqueues a launch of the device program in `program` at `offset` (size from its header unless given).")
        .def("add_callback", [](PyStream& s, py::function fn) {
                s.Get("FlexStream.add_callback").AddCallback(
                    PythonCallback(std::move(fn), "FlexStream callback", s.slot().get()));
            }, py::arg("fn"),
            "Runs fn() (with the GIL) after the work before it. An exception becomes the stream's sticky "
            "TaskFailed error. fn must not wait on this device's streams.")
        .def("wait", [](PyStream& s, const PyEvent& e) {
                s.slot()->CheckSame(*e.slot(), "FlexStream.wait: event", "stream");
                s.Get("FlexStream.wait").Wait(e.Get("FlexStream.wait"));
            }, py::arg("event"), "Later work waits (on the device) for the event's last record.")
        .def("record", [](PyStream& s, PyEvent& e) {
                s.slot()->CheckSame(*e.slot(), "FlexStream.record: event", "stream");
                e.Get("FlexStream.record").Record(s.Get("FlexStream.record"));
            }, py::arg("event"), "Same as event.record(stream).")
        .def("synchronize", [](PyStream& s) {
                Wait(s.Share("FlexStream.synchronize"));
                if (s.slot()->closed()) s.slot()->ThrowClosed("FlexStream.synchronize");  // by another thread meanwhile
            },
             "Waits (GIL released) for everything enqueued; raises the sticky error if an operation failed.")
        .def("query", [](const PyStream& s) { return s.Get("FlexStream.query").Query(); })
        .def("last_error", [](const PyStream& s) -> py::object {
                auto e = s.Get("FlexStream.last_error").LastError();
                return e ? ToPython(*e) : py::none();
            }, "The sticky error as a spyre.Error instance, or None.")
        .def("reset", [](PyStream& s) {
                auto st = s.Share("FlexStream.reset");
                WithoutGil([&] { st->Reset(); });
            }, "Clears a fault so the stream can be used again (waits for work in flight first).")
        .def_property_readonly("enqueued", [](const PyStream& s) { return s.Get("FlexStream.enqueued").enqueued(); })
        .def_property_readonly("completed", [](const PyStream& s) { return s.Get("FlexStream.completed").completed(); })
        .def("__repr__", [](const PyStream& s) {
            if (s.released()) return std::string("<spyre.FlexStream released>");
            return "<spyre.FlexStream " + std::to_string(s.Get("").stream_index()) + " on " + s.slot()->name() + ">";
        });

    py::class_<DeviceSlot, SlotPtr> device(m.attr("Device"));
    device.def("create_stream", [](const SlotPtr& slot, const IntArg<int>& priority) {
            Device& d = DeviceOf(slot, "Device.create_stream");
            const StreamOptions options{.priority = priority.In("Device.create_stream: priority")};
            return Adopt(slot, std::make_shared<FlexStream>(d.CreateStream(options)));
        }, py::arg("priority") = 0, "A new FlexStream (priority -3 highest .. 3 lowest, 0 default).");

    py::class_<PyEvent, std::shared_ptr<PyEvent>>(m, "Event", "A marker in a stream (CUDA-style).")
        .def(py::init([](const SlotPtr& slot) { return Adopt(slot, std::make_shared<Event>(DeviceOf(slot, "Event"))); }),
             py::arg("device"))
        .def("record", [](PyEvent& e, PyStream& s) {
                s.slot()->CheckSame(*e.slot(), "Event.record: event", "stream");
                e.Get("Event.record").Record(s.Get("Event.record"));
            }, py::arg("stream"), "Enqueues the marker on `stream`; re-recording moves it.")
        .def("query", [](const PyEvent& e) { return e.Get("Event.query").Query(); },
             "True once the last record completed (or there was none).")
        .def("synchronize", [](const PyEvent& e) {
                auto ev = e.Share("Event.synchronize");
                SynchronizeHandlingSignals(*ev);
                if (e.slot()->closed()) e.slot()->ThrowClosed("Event.synchronize");
                Deferred::Instance().Drain();
            }, "Waits (GIL released) for the last record; raises the recording stream's error.")
        .def_property_readonly("device", [](const PyEvent& e) { return e.slot(); })
        .def_static("elapsed_time", [](const PyEvent& a, const PyEvent& b) {
                a.slot()->CheckSame(*b.slot(), "Event.elapsed_time: end", "start");
                return Event::ElapsedTime(a.Get("Event.elapsed_time"), b.Get("Event.elapsed_time"));
            }, py::arg("start"), py::arg("end"), "Milliseconds between two completed events (device timestamps).");

    py::class_<PySpyreStream, std::shared_ptr<PySpyreStream>>(m, "SpyreStream",
        "The entry point for device work (seed 001): Operations decomposed into FlexStream primitives.")
        .def(py::init([](const SlotPtr& slot, const IntArg<int>& priority) {
                 const StreamOptions options{.priority = priority.In("SpyreStream: priority")};
                 return Adopt(slot, std::make_shared<SpyreStream>(DeviceOf(slot, "SpyreStream"), options));
             }),
             py::arg("device"), py::arg("priority") = 0, "A SpyreStream over a new FlexStream of its own.")
        .def_static("default", [](const SlotPtr& slot) {
                Device& d = DeviceOf(slot, "SpyreStream.default");
                // Over the device's default stream; it keeps the device alive.
                auto owner = slot->shared();
                auto ss = std::make_shared<SpyreStream>(SpyreStream::Default(d));
                std::shared_ptr<SpyreStream> held(ss.get(), [ss, owner](SpyreStream*) mutable {
                    ss.reset();
                    owner.reset();
                });
                return Adopt(slot, std::move(held));
            }, py::arg("device"), "Over the device's default stream.")
        .def_property_readonly("flex_stream", [](const PySpyreStream& s) {
                auto ss = s.Share("SpyreStream.flex_stream");
                return Adopt(s.slot(), std::shared_ptr<FlexStream>(ss, &ss->flex_stream()));
            }, "The FlexStream under it (copies, events, callbacks).")
        .def_property_readonly("device", [](const PySpyreStream& s) { return s.slot(); })
        .def("synchronize", [](const PySpyreStream& s) {
                auto ss = s.Share("SpyreStream.synchronize");
                SynchronizeHandlingSignals(ss->flex_stream());
                if (s.slot()->closed()) s.slot()->ThrowClosed("SpyreStream.synchronize");
                Deferred::Instance().Drain();
            }, "Waits (GIL released); raises the stream's sticky error.");
}

}  // namespace spyre::python
