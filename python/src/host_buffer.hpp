// SPDX-License-Identifier: Apache-2.0
// Host memory from Python objects (the buffer protocol: numpy arrays,
// bytearray, memoryview, ...) and the asynchronous copies that use it. A
// queued copy keeps its host object alive through a memoryview held by the
// control block's keep_alive (gil.hpp's KeepAlive), so deleting the array
// while the copy is queued is safe: it is released once the device is done.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "gil.hpp"
#include "spyre/device/device.hpp"
#include "spyre/error.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/trace/trace.hpp"

namespace spyre::python {

namespace py = pybind11;

struct HostView {
    py::object keeper;  // the numpy array, or a memoryview holding the export
    void* data = nullptr;
    uint64_t bytes = 0;
};

// Whether a buffer of format (PEP 3118) `format` may hold objects: no 'O'
// at all, or numpy reads it as a dtype without objects ("T{i:One:f:Obj:}").
// A format numpy cannot read is taken as holding them: skipping field names
// by hand let one named "x:" hide an object field (a crash).
inline bool FormatHasObjects(py::handle obj, std::string_view format) {
    if (format.find('O') == std::string_view::npos) return false;
    try {
        return py::module_::import("numpy").attr("asarray")(obj).attr("dtype").attr("hasobject").cast<bool>();
    } catch (py::error_already_set&) {
        return true;
    }
}

// A C-contiguous view of `obj`; InvalidArgument for an object without the
// buffer protocol, a non-contiguous one, or a read-only one when `writable`.
inline HostView ViewOf(py::handle obj, bool writable, const std::string& what) {
    // numpy arrays directly (the common case, and the cheap one): holding a
    // reference keeps the data in place (numpy refuses to resize an array
    // that is referenced elsewhere).
    if (py::isinstance<py::array>(obj)) {
        auto a = py::reinterpret_borrow<py::array>(obj);
        if (!(a.flags() & py::array::c_style))
            throw Error(ErrorKind::InvalidArgument,
                        what + ": the host array is not C-contiguous (use numpy.ascontiguousarray)");
        if (writable && !a.writeable()) throw Error(ErrorKind::InvalidArgument, what + ": the host array is read-only");
        // Its elements are PyObject pointers: device bytes written there
        // crashed the interpreter at the next touch.
        if (a.dtype().kind() == 'O' || a.dtype().attr("hasobject").cast<bool>())
            throw Error(ErrorKind::InvalidArgument, what + ": dtype object is not supported (its elements are Python "
                                                           "object references, not bytes)");
        HostView v;
        v.data = const_cast<void*>(a.data());
        v.bytes = uint64_t(a.nbytes());
        v.keeper = std::move(a);
        return v;
    }
    PyObject* mv = PyMemoryView_FromObject(obj.ptr());
    if (!mv) {
        PyErr_Clear();
        throw Error(ErrorKind::InvalidArgument,
                    what + ": " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                        " does not export a buffer (pass a numpy array, bytes, bytearray or memoryview)");
    }
    HostView v;
    v.keeper = py::reinterpret_steal<py::object>(mv);
    Py_buffer* view = PyMemoryView_GET_BUFFER(mv);
    if (!PyBuffer_IsContiguous(view, 'C'))
        throw Error(ErrorKind::InvalidArgument,
                    what + ": the host array is not C-contiguous (use numpy.ascontiguousarray)");
    if (writable && view->readonly) throw Error(ErrorKind::InvalidArgument, what + ": the host array is read-only");
    if (view->format && FormatHasObjects(obj, view->format))
        throw Error(ErrorKind::InvalidArgument,
                    what + ": format 'O' is not supported (its elements are Python object references, not bytes)");
    v.data = view->buf;
    v.bytes = uint64_t(view->len);
    return v;
}

// Enqueues host -> device (`to_device`) or device -> host on `stream` of
// `device`, keeping `keeper` (what owns `data`) alive until the device is done with it.
// `handle` must already be checked for `size` bytes.
inline void EnqueueCopy(Device& device, FlexStream& stream, bool to_device, void* data, py::object keeper,
                        const DeviceHandle& handle, uint64_t size) {
    // The span FlexStream's own copy calls draw, around the enqueue's flow arrow.
    SPYRE_TRACE_SCOPE(to_device ? "FlexStream::CopyToDevice" : "FlexStream::CopyFromDevice");
    ControlBlock cb;
    cb.kind = to_device ? ControlBlock::Kind::CopyToDevice : ControlBlock::Kind::CopyFromDevice;
    cb.device_addr = device.allocator().DeviceAddress(handle, size);
    cb.size = size;
    if (to_device) cb.src = data;
    else cb.dst = data;
    cb.keep_alive = KeepAlive(std::move(keeper));
    device.scheduler().QueueOperation(stream.stream_index(), std::move(cb));
}

}  // namespace spyre::python
