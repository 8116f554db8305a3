// SPDX-License-Identifier: Apache-2.0
// Tensors: DType, TensorLayout, the host and device layouts of seed 002,
// and spyre.SpyreTensor to and from numpy (buffer protocol) and DLPack.
//
// No extra host copies: a dense tensor is DMAed straight from the numpy
// array (or DLPack producer's memory), which is kept alive until the copy
// completes, and copied back straight into the destination array. Sticks
// tensors pad rows on the host first (the one staging copy the layout
// needs). __dlpack__ copies the device data into a fresh host buffer and
// exports that (kDLCPU): device memory is not host-addressable through
// libspyre's public API, so a consumer always gets host memory it may read.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>

#include "bindings.hpp"
#include "dtype.hpp"
#include "errors.hpp"
#include "host_buffer.hpp"
#include "int_arg.hpp"
#include "objects.hpp"

namespace spyre::python {

namespace {

std::string ShapeOf(const std::vector<int64_t>& shape) { return ShapeText(std::span<const int64_t>(shape)); }

uint64_t HostBytes(const std::vector<int64_t>& shape, DType dtype) {
    uint64_t n = ElementSize(dtype);
    for (int64_t d : shape) n *= uint64_t(d);
    return n;
}

std::shared_ptr<PyStream> StreamOr(const SlotPtr& slot, const std::shared_ptr<PyStream>& stream, const char* what) {
    SlotOf(slot, what);
    if (!stream) return DefaultStream(slot, what);
    slot->CheckSame(*stream->slot(), std::string(what) + ": stream", "device");
    return stream;
}

// A device tensor from host memory at `data` (contiguous, row-major),
// owned by `keeper` (kept alive until the copy completes).
std::shared_ptr<PyTensor> UploadAsync(const SlotPtr& slot, const std::shared_ptr<PyStream>& stream_arg, const void* data,
                                 uint64_t bytes, std::vector<int64_t> shape, DType dtype, TensorLayout layout,
                                 py::object keeper, const char* what) {
    Device& device = slot->Get(what);
    auto py_stream = StreamOr(slot, stream_arg, what);
    FlexStream& stream = py_stream->Get(what);
    if (shape.empty()) shape = {1};  // a 0-d array is one element
    for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] < 1)
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": shape " + ShapeOf(shape) + " has dim " +
                                                        std::to_string(d) + " < 1 (empty tensors are not supported)");
    if (HostBytes(shape, dtype) != bytes)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": " + std::to_string(bytes) +
                                                    " host bytes for a " + ShapeOf(shape) + " " + ToString(dtype) + " tensor");
    if (layout == TensorLayout::Dense) {
        SpyreTensor t = SpyreTensor::Empty(device, std::move(shape), dtype, layout);
        EnqueueCopy(device, stream, true, const_cast<void*>(data), std::move(keeper), t.device_handle(), t.size_bytes());
        return Adopt(slot, std::make_shared<SpyreTensor>(std::move(t)));
    }
    // Sticks rows that need no padding are the host's bytes as they are:
    // copied as a Dense upload, keeping `keeper` alive until the copy
    // completes (FromHost's direct copy read the array after Python had
    // freed it: wrong data or a crash).
    if (FootprintOf(shape, dtype, layout).bytes == bytes) {
        SpyreTensor t = SpyreTensor::Empty(device, std::move(shape), dtype, layout);
        EnqueueCopy(device, stream, true, const_cast<void*>(data), std::move(keeper), t.device_handle(), t.size_bytes());
        return Adopt(slot, std::make_shared<SpyreTensor>(std::move(t)));
    }
    // Padded: into a staging buffer before this returns. The device and
    // the stream are held through the wait: another thread's close()
    // meanwhile released them under it (a segfault).
    const std::shared_ptr<void> hold = slot->Hold();  // let go after the device and the stream
    const std::shared_ptr<Device> device_held = slot->shared();
    const std::shared_ptr<FlexStream> stream_held = py_stream->Share(what);
    auto t = std::make_shared<SpyreTensor>(
        WithoutGil([&] { return SpyreTensor::FromHost(*device_held, *stream_held, data, shape, dtype, layout); }));
    if (slot->closed()) {  // closed meanwhile: the tensor goes, as the device's others did
        DestroyWithoutGil(t);
        slot->ThrowClosed(what);
    }
    return Adopt(slot, std::move(t));
}

// Upload, then (without a stream given) wait for the copy: device work on
// any other stream (a SpyreStream, a Program) may use the tensor at once.
std::shared_ptr<PyTensor> Upload(const SlotPtr& slot, const std::shared_ptr<PyStream>& stream_arg, const void* data,
                                 uint64_t bytes, std::vector<int64_t> shape, DType dtype, TensorLayout layout,
                                 py::object keeper, const char* what) {
    auto t = UploadAsync(slot, stream_arg, data, bytes, std::move(shape), dtype, layout, std::move(keeper), what);
    if (!stream_arg) {
        auto s = DefaultStream(slot, what)->Share(what);
        try {
            SynchronizeHandlingSignals(*s);
            // Another thread's close() meanwhile freed the tensor with the
            // device's others: the call ends as every call on it would.
            if (slot->closed()) slot->ThrowClosed(what);
        } catch (const py::error_already_set&) {
            // Interrupted (Ctrl-C): nobody will see the tensor. Freeing it
            // here would wait for the stream's work (a buffer is freed after
            // the work queued before), and the interrupt with it: the stream
            // lets go of it once that work is done.
            try {
                s->AddCallback([tensor = t->Take()]() mutable { tensor.reset(); });
            } catch (const Error&) {
                // The stream takes no more work: it goes here after all.
            }
            throw;
        }
        Deferred::Instance().Drain();
    }
    return t;
}

// Enqueues the copy of `t` into host memory `data` (numel * element size
// bytes) owned by `keeper`.
void Download(PyTensor& pt, PyStream& ps, void* data, py::object keeper, const char* what) {
    const SpyreTensor& t = pt.Get(what);
    FlexStream& stream = ps.Get(what);
    ps.slot()->CheckSame(*pt.slot(), std::string(what) + ": tensor", "stream");
    const uint64_t bytes = uint64_t(t.numel()) * ElementSize(t.data_type());
    if (t.layout() == TensorLayout::Dense && t.size_bytes() == bytes) {
        EnqueueCopy(pt.slot()->Get(what), stream, false, data, std::move(keeper), t.device_handle(), bytes);
        return;
    }
    t.CopyToHost(stream, data);
    std::shared_ptr<const void> keep = KeepAlive(std::move(keeper));
    stream.AddCallback([keep] {});  // holds the destination until the unpacking callback has run
}

void CheckDestination(const SpyreTensor& t, py::handle out, const HostView& v, const char* what) {
    const uint64_t bytes = uint64_t(t.numel()) * ElementSize(t.data_type());
    if (py::isinstance<py::array>(out)) {
        auto a = py::reinterpret_borrow<py::array>(out);
        DTypeOfArray(a.dtype(), t.data_type(), what);
        if (uint64_t(a.size()) != uint64_t(t.numel()))
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the array has " + std::to_string(a.size()) +
                                                        " elements, the tensor " + ShapeOf(t.shape()) + " has " +
                                                        std::to_string(t.numel()));
    }
    if (v.bytes != bytes)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the host buffer has " + std::to_string(v.bytes) +
                                                    " bytes, the tensor needs " + std::to_string(bytes));
}

py::array ToNumpy(PyTensor& pt, const std::shared_ptr<PyStream>& stream_arg) {
    const char* what = "SpyreTensor.to_numpy";
    const SpyreTensor& t = pt.Get(what);
    std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
    py::array out = NewNumpyArray(NumpyDType(t.data_type()), shape, what);
    std::shared_ptr<PyStream> stream = stream_arg;
    if (!stream) {
        // Whatever stream wrote the tensor: wait for all of the device's.
        const std::shared_ptr<void> hold = pt.slot()->Hold();  // let go after `dev`
        auto dev = pt.slot()->shared();
        if (!dev) pt.slot()->ThrowClosed(what);
        SynchronizeHandlingSignals(*dev);
        stream = DefaultStream(pt.slot(), what);
    }
    Download(pt, *stream, out.mutable_data(), out, what);
    auto s = stream->Share(what);
    SynchronizeHandlingSignals(*s);
    Deferred::Instance().Drain();
    return out;
}

// ---- DLPack ----

bool DTypeFromDL(DLDataType dl, DType* out) {
    if (dl.lanes != 1) return false;
    if (dl.code == kDLFloat && dl.bits == 16) *out = DType::FP16;
    else if (dl.code == kDLFloat && dl.bits == 32) *out = DType::FP32;
    else if (dl.code == kDLBfloat && dl.bits == 16) *out = DType::BF16;
    else if (dl.code == kDLInt && dl.bits == 8) *out = DType::INT8;
    else if (dl.code == kDLInt && dl.bits == 32) *out = DType::INT32;
    else return false;
    return true;
}

DLDataType DLFromDType(DType d) {
    switch (d) {
        case DType::FP16: return {kDLFloat, 16, 1};
        case DType::BF16: return {kDLBfloat, 16, 1};
        case DType::FP32: return {kDLFloat, 32, 1};
        case DType::INT8: return {kDLInt, 8, 1};
        case DType::INT32: return {kDLInt, 32, 1};
    }
    return {kDLFloat, 32, 1};
}

// What an exported capsule owns: the host copy and the DLPack descriptors.
struct Exported {
    // Shared with the queued copy into it: an export interrupted (Ctrl-C)
    // while it waits frees its Exported, and the copy must still land in
    // live memory.
    std::shared_ptr<uint8_t[]> data;
    std::vector<int64_t> shape;
    DLManagedTensor managed{};
};

void DeleteExported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

py::capsule ExportDLPack(PyTensor& pt) {
    const char* what = "SpyreTensor.__dlpack__";
    const SpyreTensor& t = pt.Get(what);
    auto ex = std::make_unique<Exported>();
    const uint64_t bytes = uint64_t(t.numel()) * ElementSize(t.data_type());
    ex->data = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
    ex->shape = t.shape();
    const std::shared_ptr<void> hold = pt.slot()->Hold();  // let go after `dev`
    auto dev = pt.slot()->shared();
    if (!dev) pt.slot()->ThrowClosed(what);
    SynchronizeHandlingSignals(*dev);
    auto stream = DefaultStream(pt.slot(), what);
    py::capsule keeper(new std::shared_ptr<uint8_t[]>(ex->data),
                       [](void* p) { delete static_cast<std::shared_ptr<uint8_t[]>*>(p); });
    Download(pt, *stream, ex->data.get(), std::move(keeper), what);
    auto s = stream->Share(what);
    SynchronizeHandlingSignals(*s);
    DLTensor& dl = ex->managed.dl_tensor;
    dl.data = ex->data.get();
    dl.device = {kDLCPU, 0};
    dl.ndim = int32_t(ex->shape.size());
    dl.dtype = DLFromDType(t.data_type());
    dl.shape = ex->shape.data();
    dl.strides = nullptr;  // compact row-major
    dl.byte_offset = 0;
    ex->managed.manager_ctx = ex.get();
    ex->managed.deleter = DeleteExported;
    DLManagedTensor* managed = &ex.release()->managed;
    return py::capsule(managed, "dltensor", [](PyObject* cap) {
        // Consumers rename what they take ("used_dltensor"); an untaken one is ours to free.
        if (PyCapsule_IsValid(cap, "dltensor")) {
            auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
            if (m && m->deleter) m->deleter(m);
        } else {
            PyErr_Clear();
        }
    });
}

// InvalidArgument "<what>: the producer's <method> raised <Type>: <text>",
// named as FromPython names a task's exception (an unprintable one too).
Error ProducerError(const py::error_already_set& e, const char* what, const char* method) {
    return Error(ErrorKind::InvalidArgument,
                 FromPython(e, std::string(what) + ": the producer's " + method).message());
}

std::shared_ptr<PyTensor> FromDLPack(py::object obj, const SlotPtr& slot, const std::shared_ptr<PyStream>& stream,
                                     TensorLayout layout) {
    const char* what = "spyre.from_dlpack";
    SlotOf(slot, what);
    py::object capsule = obj;
    if (!PyCapsule_CheckExact(obj.ptr())) {
        if (!py::hasattr(obj, "__dlpack__"))
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": " +
                                                        std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                                                        " has no __dlpack__");
        if (py::hasattr(obj, "__dlpack_device__")) {
            py::object reported;
            try {
                reported = obj.attr("__dlpack_device__")();
            } catch (py::error_already_set& e) {
                if (!e.matches(PyExc_Exception)) throw;  // KeyboardInterrupt, SystemExit: as they are
                throw ProducerError(e, what, "__dlpack_device__");
            }
            std::pair<int, int> dev;
            try {
                dev = reported.cast<std::pair<int, int>>();
            } catch (const py::cast_error&) {
                throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the producer's __dlpack_device__ returned " +
                                                            ShortRepr(reported) +
                                                            ", not (device_type, device_id) ints");
            }
            if (dev.first != kDLCPU)
                throw Error(ErrorKind::Unsupported, std::string(what) + ": the tensor is on DLPack device type " +
                                                        std::to_string(dev.first) +
                                                        ", only host (kDLCPU) tensors can be copied to a Spyre device");
        }
        try {
            capsule = obj.attr("__dlpack__")();
        } catch (py::error_already_set& e) {
            // numpy refuses to export read-only and bool arrays (BufferError);
            // any other failure of the producer is named as its own. Not an
            // Exception (KeyboardInterrupt, SystemExit): left as it is.
            if (!e.matches(PyExc_Exception)) throw;
            if (e.matches(PyExc_BufferError))
                throw Error(ErrorKind::InvalidArgument,
                            std::string(what) + ": the producer refused to export: " + TextOf(e.value()));
            throw ProducerError(e, what, "__dlpack__");
        }
    }
    if (!PyCapsule_IsValid(capsule.ptr(), "dltensor"))
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": not an unused 'dltensor' capsule");
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    const DLTensor& dl = m->dl_tensor;
    if (dl.device.device_type != kDLCPU)
        throw Error(ErrorKind::Unsupported, std::string(what) + ": DLPack device type " +
                                                std::to_string(dl.device.device_type) + " is not host memory");
    DType dtype;
    if (!DTypeFromDL(dl.dtype, &dtype))
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": DLPack dtype (code " + std::to_string(dl.dtype.code) +
                                                    ", " + std::to_string(dl.dtype.bits) + " bits, " +
                                                    std::to_string(dl.dtype.lanes) + " lanes) is not supported (" +
                                                    SupportedDTypes() + ")");
    // A capsule of another producer is foreign input: a negative ndim was
    // an Internal error (a vector of that size), a missing shape a crash.
    if (dl.ndim < 0 || (dl.ndim > 0 && !dl.shape) || !dl.data)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": a malformed DLPack tensor (ndim " +
                                                    std::to_string(dl.ndim) + (dl.shape ? "" : ", no shape") +
                                                    (dl.data ? "" : ", no data") + ")");
    // As from_numpy: a device tensor has at least one dim, and shape ()
    // would come back as (1,).
    if (dl.ndim == 0)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": a 0-d tensor has no dims; give it one (reshape(1))");
    std::vector<int64_t> shape(dl.shape, dl.shape + dl.ndim);
    if (dl.strides) {
        int64_t expect = 1;
        for (int d = dl.ndim - 1; d >= 0; --d) {
            if (shape[d] != 1 && dl.strides[d] != expect)
                throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the tensor is not C-contiguous (dim " +
                                                            std::to_string(d) + "); make it contiguous first");
            expect *= shape[d];
        }
    }
    // Consume it: from here the capsule object below owns the managed tensor.
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    py::capsule owner(m, "spyre.dlpack_owner", [](PyObject* cap) {
        auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "spyre.dlpack_owner"));
        if (t && t->deleter) t->deleter(t);
    });
    const void* data = static_cast<const uint8_t*>(dl.data) + dl.byte_offset;
    const uint64_t bytes = HostBytes(shape, dtype);
    return Upload(slot, stream, data, bytes, shape, dtype, layout, owner, what);
}

}  // namespace

void BindTensor(py::module_& m) {
    py::enum_<DType>(m, "DType", "Element types of device tensors.")
        .value("FP16", DType::FP16)
        .value("BF16", DType::BF16)
        .value("FP32", DType::FP32)
        .value("INT8", DType::INT8)
        .value("INT32", DType::INT32)
        .def_property_readonly("itemsize", [](DType d) { return ElementSize(d); })
        .def_property_readonly("numpy", [](DType d) { return NumpyDType(d); },
                               "The numpy dtype that carries it (uint16 bits for BF16).");
    py::enum_<TensorLayout>(m, "TensorLayout", "How a tensor sits in device memory.")
        .value("Dense", TensorLayout::Dense, "Row-major, no padding.")
        .value("Sticks", TensorLayout::Sticks, "Row-major, each innermost row padded to whole 128-byte sticks.");
    m.attr("STICK_BYTES") = kStickBytes;

    m.def("dtype_of", [](py::handle v) { return DTypeFrom(v, "spyre.dtype_of"); }, py::arg("dtype"),
          "The spyre.DType of a numpy dtype, numpy type, name ('fp32', 'float16', 'bf16') or DType.");

    py::class_<TensorFootprint>(m, "TensorFootprint")
        .def_readonly("strides", &TensorFootprint::strides, "In elements.")
        .def_readonly("bytes", &TensorFootprint::bytes, "From the address to the end, padding included.");
    m.def("footprint", [](const IntList<int64_t>& shape, py::handle dtype, TensorLayout layout) {
        return FootprintOf(shape, DTypeFrom(dtype, "spyre.footprint"), layout);
    }, py::arg("shape"), py::arg("dtype"), py::arg("layout") = TensorLayout::Dense);

    py::class_<HostLayout>(m, "HostLayout", "A host tensor: sizes and strides in elements (seed 002).")
        .def(py::init([](const IntList<int64_t>& size, const IntList<int64_t>& stride, py::handle dtype) {
                 return HostLayout(std::move(size), std::move(stride), DTypeFrom(dtype, "HostLayout"));
             }), py::arg("size"), py::arg("stride"), py::arg("dtype"))
        .def_static("contiguous", [](const IntList<int64_t>& size, py::handle dtype) {
                return HostLayout::Contiguous(std::move(size), DTypeFrom(dtype, "HostLayout.contiguous"));
            }, py::arg("size"), py::arg("dtype"))
        .def_property_readonly("size", &HostLayout::size)
        .def_property_readonly("stride", &HostLayout::stride)
        .def_property_readonly("dtype", &HostLayout::dtype)
        .def_property_readonly("rank", &HostLayout::rank)
        .def("numel", &HostLayout::numel)
        .def("is_contiguous", &HostLayout::IsContiguous)
        .def("canonical", &HostLayout::Canonical)
        .def("offset", [](const HostLayout& l, const IntList<int64_t>& i) { return l.Offset(i); }, py::arg("index"))
        .def("__eq__", [](const HostLayout& a, const HostLayout& b) { return a == b; })
        .def("__repr__", &HostLayout::ToString);

    py::class_<DeviceLayout>(m, "DeviceLayout",
        "A device tensor in 128-byte sticks: device_size row-major, dim_map[j] the host dim device dim j tiles "
        "(-1 synthetic).")
        .def(py::init([](const IntList<int64_t>& host_size, const IntList<int64_t>& device_size, const IntList<int>& dim_map,
                         py::handle dtype) {
                 return DeviceLayout(host_size, std::move(device_size), std::move(dim_map), DTypeFrom(dtype, "DeviceLayout"));
             }), py::arg("host_size"), py::arg("device_size"), py::arg("dim_map"), py::arg("dtype"))
        .def_static("default", &DeviceLayout::Default, py::arg("host"), "Seed 002's default layout for a host tensor.")
        .def_property_readonly("device_size", &DeviceLayout::device_size)
        .def_property_readonly("dim_map", &DeviceLayout::dim_map)
        .def_property_readonly("host_size", &DeviceLayout::host_size)
        .def_property_readonly("dtype", &DeviceLayout::dtype)
        .def("device_elements", &DeviceLayout::device_elements)
        .def("device_bytes", &DeviceLayout::device_bytes)
        .def("device_offset", [](const DeviceLayout& l, const IntList<int64_t>& i) { return l.DeviceOffset(i); },
             py::arg("host_index"))
        .def("host_index", [](const DeviceLayout& l, const IntArg<int64_t>& offset) {
                return l.HostIndex(offset.In("DeviceLayout.host_index: device_offset"));
            }, py::arg("device_offset"), "None for padding.")
        .def("__eq__", [](const DeviceLayout& a, const DeviceLayout& b) { return a == b; })
        .def("__repr__", &DeviceLayout::ToString);

    py::class_<PyTensor, std::shared_ptr<PyTensor>>(m, "SpyreTensor",
        "A tensor resident on a device (seed 001): shape, dtype, layout and its device memory, freed when the "
        "last reference goes (after queued work) or when its device closes.")
        .def_static("empty", [](const SlotPtr& slot, const IntList<int64_t>& shape, py::handle dtype, TensorLayout layout) {
                Device& d = DeviceOf(slot, "SpyreTensor.empty");
                return Adopt(slot, std::make_shared<SpyreTensor>(
                                       SpyreTensor::Empty(d, std::move(shape), DTypeFrom(dtype, "SpyreTensor.empty"), layout)));
            }, py::arg("device"), py::arg("shape"), py::arg("dtype") = DType::FP32, py::arg("layout") = TensorLayout::Dense,
            "An uninitialised device tensor.")
        .def_static("from_numpy", [](const SlotPtr& slot, py::handle array, std::shared_ptr<PyStream> stream,
                                     TensorLayout layout, py::object dtype) {
                const char* what = "SpyreTensor.from_numpy";
                SlotOf(slot, what);
                if (!py::isinstance<py::array>(array))
                    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": expected a numpy array, got " +
                                                                std::string(py::str(py::type::handle_of(array).attr("__name__"))));
                auto a = py::reinterpret_borrow<py::array>(array);
                std::optional<DType> named;
                if (!dtype.is_none()) named = DTypeFrom(dtype, what);
                const DType dt = DTypeOfArray(a.dtype(), named, what);
                // A device tensor has at least one dim: shape () would come back as (1,).
                if (a.ndim() == 0)
                    throw Error(ErrorKind::InvalidArgument,
                                std::string(what) + ": a 0-d array has no dims; give it one (a.reshape(1))");
                HostView v = ViewOf(array, false, what);
                std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
                return Upload(slot, stream, v.data, v.bytes, std::move(shape), dt, layout, v.keeper, what);
            }, py::arg("device"), py::arg("array"), py::arg("stream") = nullptr, py::arg("layout") = TensorLayout::Dense,
            py::arg("dtype") = py::none(),
            "A device tensor holding `array` (C-contiguous), copied straight from the array's memory. With "
            "`stream` the copy is queued there (the array is kept alive until it completes); without, it runs on "
            "the device's default stream and this waits for it (GIL released), so any stream may use the tensor.")
        .def("to_numpy", &ToNumpy, py::arg("stream") = nullptr,
             "A new numpy array with the tensor's data. Without `stream` it first waits for every stream of the "
             "device; with one it is ordered after that stream's work. Waits with the GIL released.")
        .def("numpy", &ToNumpy, py::arg("stream") = nullptr, "Same as to_numpy().")
        .def("copy_to_host", [](PyTensor& t, py::handle out, PyStream& stream) {
                const char* what = "SpyreTensor.copy_to_host";
                HostView v = ViewOf(out, true, what);
                CheckDestination(t.Get(what), out, v, what);
                Download(t, stream, v.data, v.keeper, what);
            }, py::arg("out"), py::arg("stream"),
            "Enqueues the copy into the writable C-contiguous `out` on `stream`; `out` is kept alive until done.")
        .def("copy_from_host", [](PyTensor& t, py::handle src, PyStream& stream) {
                const char* what = "SpyreTensor.copy_from_host";
                const SpyreTensor& st = t.Get(what);
                stream.slot()->CheckSame(*t.slot(), std::string(what) + ": tensor", "stream");
                HostView v = ViewOf(src, false, what);
                CheckDestination(st, src, v, what);
                if (st.layout() != TensorLayout::Dense)
                    throw Error(ErrorKind::Unsupported, std::string(what) + ": only Dense tensors (use from_numpy for Sticks)");
                EnqueueCopy(t.slot()->Get(what), stream.Get(what), true, v.data, v.keeper, st.device_handle(),
                            st.size_bytes());
            }, py::arg("src"), py::arg("stream"), "Enqueues the copy of host `src` into this Dense tensor.")
        .def_property_readonly("shape", [](const PyTensor& t) {
            const auto& s = t.Get("SpyreTensor.shape").shape();
            py::tuple out(s.size());
            for (size_t i = 0; i < s.size(); ++i) out[i] = s[i];
            return out;
        })
        .def_property_readonly("dtype", [](const PyTensor& t) { return t.Get("SpyreTensor.dtype").data_type(); })
        .def_property_readonly("layout", [](const PyTensor& t) { return t.Get("SpyreTensor.layout").layout(); })
        .def_property_readonly("strides", [](const PyTensor& t) { return t.Get("SpyreTensor.strides").stride(); },
                               "Bytes per step along each dim (seed 001).")
        .def_property_readonly("nbytes", [](const PyTensor& t) { return t.Get("SpyreTensor.nbytes").size_bytes(); },
                               "Device bytes, padding included.")
        .def_property_readonly("numel", [](const PyTensor& t) { return t.Get("SpyreTensor.numel").numel(); })
        .def_property_readonly("ndim", [](const PyTensor& t) { return t.Get("SpyreTensor.ndim").shape().size(); })
        .def_property_readonly("device", [](const PyTensor& t) { return t.slot(); })
        .def_property_readonly("freed", &PyTensor::released)
        .def("free", [](PyTensor& t) { t.Free("SpyreTensor.free"); },
             "Drops the device memory now (after queued work); raises InvalidArgument once the device is closed.")
        .def("__dlpack__", [](PyTensor& t, py::object /*stream: the copy waits for every stream*/) { return ExportDLPack(t); }, py::arg("stream") = py::none(),
             "A DLPack capsule of a host copy (kDLCPU): waits for the device's streams, copies, exports.")
        .def("__dlpack_device__", [](const PyTensor&) { return py::make_tuple(int(kDLCPU), 0); })
        .def("__repr__", [](const PyTensor& t) {
            if (t.released()) return std::string("<spyre.SpyreTensor freed>");
            return "<spyre.SpyreTensor " + t.Get("").ToString() + " on " + t.slot()->name() + ">";
        });

    m.def("from_dlpack", &FromDLPack, py::arg("obj"), py::arg("device"), py::arg("stream") = nullptr,
          py::arg("layout") = TensorLayout::Dense,
          "A device tensor from any host DLPack producer (numpy array, torch CPU tensor, a 'dltensor' capsule), "
          "DMAed from the producer's memory. With `stream` the copy is queued there (the producer's memory is kept "
          "alive until it completes); without, this waits for it, as SpyreTensor.from_numpy does.");
}

}  // namespace spyre::python
