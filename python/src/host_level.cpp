// SPDX-License-Identifier: Apache-2.0
// Seed 003's host level from Python: DistributedConfig, HostTensor <->
// numpy, the level-3 Worker (spyre/host/worker.hpp) with chip functions
// (ready-made C++ ones over kernel-builder programs, or Python callables
// that submit to the chip's Orchestrator), SubWorkers written in Python,
// host programs whose orchestration function is Python, runs (synchronous or
// handles), HostRunError with every failure and skipped task, and every
// run's report (TaskRecord per task).
//
// GIL: run/wait/report/Worker creation and destruction release it; the host
// orchestration function, Python chip functions and SubWorkers take it on
// whatever thread the runtime calls them; the function's chip/sub calls
// release it while they hand the task over (tasks start as they are
// submitted, and a submit waits while the run's window is full, for tasks
// that may be Python SubWorkers). numpy arrays given to a run are
// wrapped (HostTensor::Wrap, no copy) and kept alive by the tensors until
// the run's last task is done with them.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "host_buffer.hpp"
#include "int_arg.hpp"
#include "errors.hpp"
#include "orch_objects.hpp"
#include "spyre/host/chip_functions.hpp"
#include "spyre/host/worker.hpp"

namespace spyre::python {

namespace {

// ---- HostTensor <-> numpy ---------------------------------------------------

void RememberTensor(const HostTensor& t);

// A numpy view of `t` for the runtime's own use (a copy compared with its
// source): gone when the call returns.
py::array ToNumpy(const HostTensor& t) {
    const std::vector<int64_t> dims = t.shape();
    std::vector<py::ssize_t> shape(dims.begin(), dims.end());
    auto* keep = new HostTensor(t);
    py::capsule base(keep, [](void* p) { delete static_cast<HostTensor*>(p); });
    return NumpyView(NumpyDType(t.dtype()), shape, t.data(), base, "HostTensor.numpy");
}

// A numpy view of `t` handed to the caller (a SubWorker's argument too: it
// may keep it), remembered as `t`'s memory: an array over it given to a run
// is `t` (or its rows), not a second storage that nothing orders with `t`.
py::array CallersView(const HostTensor& t) {
    RememberTensor(t);
    return ToNumpy(t);
}

// ---- numpy memory wrapped already -------------------------------------------
// Two wraps of one memory would be two storages, and the Worker finds
// dependencies by storage and byte range: an In of one array and an Out of
// another over the same memory (in one run, or in two in flight) would
// race. So the tensors wrapped here are remembered while anything else
// (a run, the caller) holds them, and an array over memory one of them
// covers becomes that tensor, or a row range of it; an array that overlaps
// one in any other way is refused. An input that was copied (read-only or
// not C-contiguous) is remembered too, by the memory it was copied from:
// an array over that memory that a task may write is refused, since the
// copy would not see the write (whichever of the two came first).
// Guarded by the GIL.
struct WrappedArray {
    uintptr_t lo, hi;  // the bytes the array spans
    HostTensor tensor;
    bool copied = false;  // `tensor` is a copy of those bytes, not over them
    // The copy's bytes go back into the array when its run ends (a
    // writable run input that is not C-contiguous, PyRun::copied).
    bool writes_back = false;
    // A copy's source array, kept while the record is: its memory must not
    // be freed and reused by an unrelated array, which would then read as
    // overlapping the copy.
    py::object source;
};

std::vector<WrappedArray>& WrappedArrays() {
    static auto* wrapped = new std::vector<WrappedArray>;  // never destroyed: its arrays outlive no interpreter
    return *wrapped;
}

// Forgets the tensors nothing else holds (and lets their arrays go): a
// storage whose only holders are records (several, for a copy's source and
// the copy's own views, or for row views) goes with all of them.
void ForgetUnheldArrays() {
    auto& wrapped = WrappedArrays();
    std::unordered_map<const void*, long> records;
    for (const WrappedArray& w : wrapped) ++records[w.tensor.storage().get()];
    std::erase_if(wrapped, [&](const WrappedArray& w) {
        return w.tensor.storage().use_count() == records[w.tensor.storage().get()];
    });
}

struct ByteSpan {
    uintptr_t lo, hi;
};

// `t`'s memory, as WrappedArrays knows a wrapped array's (unless a record of
// its storage covers it already).
void RememberTensor(const HostTensor& t) {
    if (t.bytes() == 0) return;
    const auto lo = reinterpret_cast<uintptr_t>(t.data());
    const uintptr_t hi = lo + t.bytes();
    // Looked for first: a SubWorker's argument is mostly known (its run's
    // input), and a known record is live (`t` holds its storage).
    for (const WrappedArray& w : WrappedArrays())
        if (w.tensor.storage() == t.storage() && (w.copied || (w.lo <= lo && hi <= w.hi)))
            return;  // known, or a copy's private memory
    ForgetUnheldArrays();
    WrappedArrays().push_back({lo, hi, t});
}

ByteSpan SpanOf(const py::array& a) {
    if (a.size() == 0) return {0, 0};
    intptr_t below = 0, above = 0;
    for (py::ssize_t d = 0; d < a.ndim(); ++d) {
        const intptr_t reach = intptr_t(a.shape(d) - 1) * intptr_t(a.strides(d));
        (reach < 0 ? below : above) += reach;
    }
    const auto first = reinterpret_cast<uintptr_t>(a.data());
    return {first + below, first + above + uintptr_t(a.itemsize())};
}

// Refuses a copy of the bytes of `w`'s tensor in `s` while a task in flight
// writes them: the copy could tear. Not when the calling thread is a
// SubWorker holding them: its claim keeps other Workers' writers out, and
// its own Worker's wait for it.
void CheckNotWrittenInFlight(const WrappedArray& w, ByteSpan s, const std::string& what) {
    const uint64_t row_bytes = w.tensor.bytes() / uint64_t(w.tensor.shape()[0]);
    const uint64_t lo = std::max(s.lo, w.lo) - w.lo, hi = std::min(s.hi, w.hi) - w.lo;
    const HostTensor rows = w.tensor.Rows(int64_t(lo / row_bytes), int64_t((hi + row_bytes - 1) / row_bytes));
    if (!rows.WrittenInFlight()) return;
    for (const TensorArg& held : RunningSubWorkerArgs())
        if (held.tensor.Contains(rows)) return;
    throw Error(ErrorKind::InvalidArgument,
                what + ": the array is read-only, so it is copied (its copy may be written), but it views " +
                    rows.Describe() + ", which a task in flight writes: the copy could tear. Wait for that run "
                    "first, or pass a writable view (or the tensor) to be ordered after it");
}

// `t` (over bytes [lo, hi)) or a row range of it, when array bytes `s` of
// `dtype` and `shape` (C-contiguous) are exactly that; nullopt otherwise.
std::optional<HostTensor> WholeOrRows(const HostTensor& t, uintptr_t lo, uintptr_t hi, ByteSpan s, bool contiguous,
                                      DType dtype, const std::vector<int64_t>& shape) {
    const std::vector<int64_t> whole = t.shape();
    if (!contiguous || t.dtype() != dtype || whole.empty() || whole.size() != shape.size() ||
        !std::equal(whole.begin() + 1, whole.end(), shape.begin() + 1) || s.lo < lo || s.hi > hi)
        return std::nullopt;
    const uint64_t row_bytes = t.bytes() / uint64_t(whole[0]);
    if ((s.lo - lo) % row_bytes != 0) return std::nullopt;
    const auto first_row = int64_t((s.lo - lo) / row_bytes);
    if (first_row == 0 && shape[0] == whole[0]) return t;
    return t.Rows(first_row, first_row + shape[0]);
}

// The tensor wrapped already over the memory of `a` (C-contiguous, of
// `dtype` and `shape`), or a row range of one; nullopt when no wrapped
// tensor overlaps it. `contiguous` false: `a` is copied, so any overlap is
// refused (the copy would not see a task's writes). Two copies of one
// memory may both be read, but neither may write back: each sees only its
// own tasks' writes, and the later write-back would undo the earlier.
// `snapshot`: `a` is read-only and its copy may be written (a run's input,
// from_numpy), so it is copied even over a wrapped tensor's memory, which it
// must leave as it is, unless that tensor is one of the call's (`call`).
std::optional<HostTensor> WrappedAlready(const py::array& a, bool contiguous, bool will_copy, bool writes_back,
                                         bool snapshot, std::span<const HostTensor> call, DType dtype,
                                         const std::vector<int64_t>& shape, const std::string& what) {
    ForgetUnheldArrays();
    const ByteSpan s = SpanOf(a);
    const WrappedArray* overlap = nullptr;
    for (const WrappedArray& w : WrappedArrays()) {
        if (s.hi <= w.lo || w.hi <= s.lo) continue;
        const auto in_call = [&] {
            return std::any_of(call.begin(), call.end(), [&](const HostTensor& t) { return t.SameStorage(w.tensor); });
        };
        if (snapshot && !w.copied && !in_call()) {
            CheckNotWrittenInFlight(w, s, what);
            continue;
        }
        if (w.copied) {
            if (will_copy && !w.writes_back && !writes_back) continue;  // two snapshots: neither is written
            if (will_copy)
                throw Error(ErrorKind::InvalidArgument,
                            what + ": the array shares memory with a writable input that is not C-contiguous, copied "
                                   "for this call or a run in flight (the copy's writes land in the array only when its "
                                   "run ends), so neither would see what the other's tasks write: pass a C-contiguous "
                                   "array (numpy.ascontiguousarray) for both");
            throw Error(ErrorKind::InvalidArgument,
                        what + ": the array shares memory with an input that was copied (read-only or not "
                               "C-contiguous) for this call or a run in flight, so that input would not see what a "
                               "task writes here: pass the writable array itself (or its rows) for both");
        }
        overlap = &w;
        if (std::optional<HostTensor> t = WholeOrRows(w.tensor, w.lo, w.hi, s, contiguous, dtype, shape)) return t;
    }
    if (overlap)
        throw Error(ErrorKind::InvalidArgument,
                    what + ": the array shares memory with " + overlap->tensor.Describe() +
                        ", which this call or a run in flight uses, but is neither that array nor a row range of it, "
                        "so their tasks could not be ordered: wrap the memory once (HostTensor.from_numpy) and pass "
                        "the tensor and its rows() views");
    return std::nullopt;
}

// `obj` as a HostTensor: a HostTensor as is, a numpy array (or buffer) wrapped
// without a copy when C-contiguous and writable (kept alive by the tensor),
// or the tensor wrapped over its memory already; a non-contiguous or
// read-only input is copied, such an output refused. `may_write`: what is
// made of an input may be written (a run's input, from_numpy), so a
// read-only one is copied even when it views a wrapped tensor; otherwise
// (a task's In argument) it is that tensor, ordered after its writers.
// `call`: the tensors of the call's other arguments (a snapshot over their
// memory is that argument instead: a copy would miss what its tasks write).
// The element type of `a`: `named` (HostTensor.from_numpy's dtype=) when
// given; bf16 for a uint16 array over a bf16 tensor's memory (its numpy(),
// a return-style result: it was refused when passed back, "uint16 is not
// supported"); else what its numpy dtype says.
DType HostDTypeOf(const py::array& a, std::optional<DType> named, const std::string& what) {
    const bool bits16 = a.dtype().kind() == 'u' && a.dtype().itemsize() == 2;
    if (bits16 && !named) {
        const ByteSpan s = SpanOf(a);
        for (const WrappedArray& w : WrappedArrays())
            if (s.lo < w.hi && w.lo < s.hi && w.tensor.dtype() == DType::BF16) named = DType::BF16;
        if (!named)
            throw Error(ErrorKind::InvalidArgument,
                        what + ": dtype uint16 is not supported (" + SupportedDTypes() +
                            "): wrap bf16 bits with HostTensor.from_numpy(bits, dtype=DType.BF16)");
    }
    return DTypeOfArray(a.dtype(), named, what.c_str());
}

HostTensor ToHostTensor(py::handle obj, bool writable, const std::string& what, bool run_input = false,
                        bool may_write = false, std::span<const HostTensor> call = {},
                        std::optional<DType> named = std::nullopt) {
    if (py::isinstance<HostTensor>(obj)) return obj.cast<HostTensor>();
    // numpy makes an object array of None, refused as "dtype object".
    if (obj.is_none()) throw Error(ErrorKind::InvalidArgument, what + ": None is not a numpy array or HostTensor");
    py::array a;
    try {
        a = py::array::ensure(obj);
    } catch (...) {
    }
    if (!a) {
        PyErr_Clear();
        throw Error(ErrorKind::InvalidArgument, what + ": " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                                                    " is not a numpy array or HostTensor");
    }
    // An output numpy made an array of (a list, a tuple, an __array__ object)
    // is a new array: the results landed in it and were lost (found probing
    // from outside).
    if (writable && a.ptr() != obj.ptr())
        throw Error(ErrorKind::InvalidArgument,
                    what + ": the output is a " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                        ", which results cannot land in: give a numpy array or HostTensor");
    const bool contiguous = a.flags() & py::array::c_style;
    if (!contiguous && writable)
        throw Error(ErrorKind::InvalidArgument, what + ": the output array is not C-contiguous (results could not land in it)");
    if (writable && !a.writeable()) throw Error(ErrorKind::InvalidArgument, what + ": the output array is read-only");
    const DType dtype = HostDTypeOf(a, named, what);
    if (a.ndim() == 0) throw Error(ErrorKind::InvalidArgument, what + ": a 0-d array has no rows");
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    // A non-contiguous or read-only input is copied: a host program may
    // write its inputs too, and the copy is new memory nobody else sees.
    const bool in_place = contiguous && a.writeable();
    const bool writes_back = run_input && !in_place && a.writeable();  // Start's PyRun::copied
    const bool snapshot = (run_input || may_write) && !a.writeable();
    if (std::optional<HostTensor> t =
            WrappedAlready(a, contiguous, !in_place, writes_back, snapshot, call, dtype, shape, what))
        return *t;
    const ByteSpan source = SpanOf(a);
    py::object original;
    if (!in_place) {
        original = a;
        a = py::array::ensure(a.attr("copy")(py::arg("order") = "C"));
    }
    void* data = a.mutable_data();  // before `a` moves into the owner
    HostTensor t = HostTensor::Wrap(data, shape, dtype, KeepAlive(std::move(a)));
    WrappedArrays().push_back({source.lo, source.hi, t, !in_place, writes_back, std::move(original)});
    return t;
}

// The tensor (or row range of one) a numpy array views, for the DSL: an
// array made of a tensor's numpy() that a WORKER block reads is that tensor,
// ordered after its writers, not a copy taken when the block is reached
// (found probing from outside: the block read stale bytes, and its writes
// through the array were lost). Looked up by the tensors' own memory: a
// copied input's is its copy's (what the run's tensor and its numpy() are
// over), not the caller's array it was copied from, which stays a plain
// array. None for an array over no tensor's memory; InvalidArgument for
// one that views a tensor otherwise than whole or as rows.
struct TensorMemory {
    uintptr_t lo, hi;
    const HostTensor* tensor;
};

std::vector<TensorMemory> TensorsUnder(const py::handle& obj) {
    std::vector<TensorMemory> under;
    if (!py::isinstance<py::array>(obj)) return under;
    ForgetUnheldArrays();
    const ByteSpan s = SpanOf(py::reinterpret_borrow<py::array>(obj));
    for (const WrappedArray& w : WrappedArrays()) {
        const auto lo = reinterpret_cast<uintptr_t>(w.tensor.data());
        const uintptr_t hi = lo + w.tensor.bytes();
        if (s.lo < hi && lo < s.hi) under.push_back({lo, hi, &w.tensor});
    }
    return under;
}

bool ViewsATensor(py::handle obj) { return !TensorsUnder(obj).empty(); }

py::object TensorViewedBy(py::handle obj, const std::string& what) {
    const std::vector<TensorMemory> under = TensorsUnder(obj);
    if (under.empty()) return py::none();
    const auto a = py::reinterpret_borrow<py::array>(obj);
    const ByteSpan s = SpanOf(a);
    const DType dtype = HostDTypeOf(a, std::nullopt, what);
    const std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    const bool contiguous = a.flags() & py::array::c_style;
    // Of the tensors the array lies in (a tensor and a row view of it may
    // both be known), the widest it is whole rows of.
    std::optional<HostTensor> best;
    uint64_t best_bytes = 0;
    for (const TensorMemory& m : under)
        if (std::optional<HostTensor> t = WholeOrRows(*m.tensor, m.lo, m.hi, s, contiguous, dtype, shape);
            t && (!best || m.hi - m.lo > best_bytes)) {
            best = std::move(t);
            best_bytes = m.hi - m.lo;
        }
    if (!best)
        throw Error(ErrorKind::InvalidArgument,
                    what + ": the array shares memory with " + under.front().tensor->Describe() +
                        " but is neither that tensor's whole array nor a row range of it, so a task could not be "
                        "ordered with that tensor's other tasks: pass the tensor, or its rows() views");
    return py::cast(*best);
}

Access AccessFrom(py::handle h) {
    if (py::isinstance<py::str>(h)) {
        const std::string s = h.cast<std::string>();
        if (s == "in" || s == "input") return Access::In;
        if (s == "out" || s == "output") return Access::Out;
        if (s == "inout") return Access::InOut;
        throw Error(ErrorKind::InvalidArgument, "tensor access '" + s + "' is not in, out or inout");
    }
    return h.cast<Access>();
}

// A ChipRuntime, or the seed's string name of one (scripts written for the
// seed pass strings).
ChipRuntime RuntimeArg(const py::handle& h) {
    if (py::isinstance<py::str>(h)) return ChipRuntimeFromString(h.cast<std::string>());
    if (py::isinstance<ChipRuntime>(h)) return h.cast<ChipRuntime>();
    throw Error(ErrorKind::InvalidArgument,
                "DistributedConfig: runtime is a " + std::string(py::str(h.get_type().attr("__name__"))) +
                    " (a ChipRuntime or its name)");
}

// DistributedConfig.device_ids: a sequence of int indices (a wrong item is
// InvalidArgument here, not pybind's TypeError for the whole call).
std::vector<int> DeviceIdsFrom(const py::handle& h) {
    if (!py::isinstance<py::sequence>(h) || py::isinstance<py::str>(h))
        throw Error(ErrorKind::InvalidArgument, "DistributedConfig: device_ids is a " +
                                                    std::string(py::str(h.get_type().attr("__name__"))) +
                                                    " (a list of int indices into Host.functions)");
    return IntsFrom<int>(h, "DistributedConfig: device_ids", " (an int index into Host.functions)");
}

std::vector<TensorArg> ArgsFrom(const py::iterable& args, const std::string& what) {
    std::vector<TensorArg> out;
    size_t i = 0;
    for (py::handle a : args) {
        const std::string w = what + ": argument " + std::to_string(i++);
        if (py::isinstance<TensorArg>(a)) {
            out.push_back(a.cast<TensorArg>());
            continue;
        }
        if (py::isinstance<py::tuple>(a) && py::len(a) == 2) {
            py::tuple t = py::reinterpret_borrow<py::tuple>(a);
            const Access acc = AccessFrom(t[0]);
            out.push_back({ToHostTensor(t[1], acc != Access::In, w), acc});
            continue;
        }
        throw Error(ErrorKind::InvalidArgument, w + ": expected spyre.In(t)/Out(t)/InOut(t), i.e. (access, tensor)");
    }
    return out;
}

// ---- HostRunError -----------------------------------------------------------

PyObject* g_run_error = nullptr;                 // spyre.HostRunError
std::map<std::string, PyObject*> g_run_classes;  // kind name -> (HostRunError, kind class)

[[noreturn]] void RaiseRunError(const HostRunError& e) {
    py::object plain = ToPython(e);  // the kind's class with its attributes
    const std::string kind = py::str(plain.attr("kind"));
    PyObject*& cls = g_run_classes[kind];
    if (!cls) {
        py::tuple bases = py::make_tuple(py::handle(g_run_error), py::handle(reinterpret_cast<PyObject*>(Py_TYPE(plain.ptr()))));
        cls = PyErr_NewException(("spyre._spyre.HostRunError_" + kind).c_str(), bases.ptr(), nullptr);
        if (!cls) throw py::error_already_set();
    }
    py::object exc = py::reinterpret_steal<py::object>(PyObject_CallOneArg(cls, TextFromBytes(e.what()).ptr()));
    if (!exc) throw py::error_already_set();
    py::dict d = plain.attr("__dict__");
    for (auto item : d) exc.attr(item.first) = item.second;
    exc.attr("failures") = py::cast(e.failures());
    exc.attr("skipped") = py::cast(e.skipped());
    exc.attr("report") = py::cast(e.report());
    const TaskFailureInfo* first = e.failures().empty() ? nullptr : &e.failures().front();
    exc.attr("task") = first ? py::cast(first->task) : py::none();
    exc.attr("function") = first ? py::cast(first->function) : py::none();
    exc.attr("level") = first ? py::cast(first->level) : py::none();
    exc.attr("cause") = first ? py::cast(first->cause) : py::none();
    if (first) {
        exc.attr("device_code") = first->device_code;
        exc.attr("host_kernel_code") = first->host_kernel_code;
        if (!first->device.empty()) exc.attr("device") = first->device;
    }
    PyErr_SetObject(cls, exc.ptr());
    throw py::error_already_set();
}

// ---- the Worker ---------------------------------------------------------------

// Runs whose wait a signal interrupted (Ctrl-C) and whose handle was then
// let go before they ended: kept here, not waited for on the spot (a
// handle's destruction waits), until they end. Under the GIL.
struct Abandoned {
    std::shared_ptr<RunHandle> handle;
    std::shared_ptr<Worker> worker;  // outlives the handle
};
std::vector<Abandoned>& AbandonedRuns() {
    static auto* runs = new std::vector<Abandoned>;  // never destroyed: may outlive the interpreter's teardown
    return *runs;
}
// Drops the abandoned runs that ended (a handle of an ended run goes at
// once; the Worker may be the last reference, and its threads may want the
// GIL as they stop).
void ForgetEndedAbandonedRuns() {
    std::vector<Abandoned>& runs = AbandonedRuns();
    for (size_t i = 0; i < runs.size();) {
        if (!runs[i].handle->Done()) {
            ++i;
            continue;
        }
        Abandoned a = std::move(runs[i]);
        runs.erase(runs.begin() + std::ptrdiff_t(i));
        DestroyWithoutGil(a.handle);
        DestroyWithoutGil(a.worker);
    }
}

// Waits for `worker`'s abandoned runs (KeyboardInterrupt on a Ctrl-C meanwhile), then drops them.
void AwaitAbandonedRunsOf(const Worker* worker);

// Waits for the run to end. On the main thread in Ctrl-C-aware slices
// (WaitHandlingSignals): a Ctrl-C ends the wait, and the run goes on.
// Elsewhere in slices of WaitFor without the GIL: a SubWorker waiting on a
// nested run (on a pool thread the nested run may need) runs its pool's
// queued jobs meanwhile.
void AwaitHandlingSignals(const std::shared_ptr<RunHandle>& h) {
    WaitHandlingSignals([&](std::chrono::nanoseconds slice) { return h->WaitFor(slice); });
    WithoutGil([&] { while (!h->WaitFor(std::chrono::seconds(1))) {} });
}

void AwaitAbandonedRunsOf(const Worker* worker) {
    std::vector<std::shared_ptr<RunHandle>> mine;  // a copy: other threads may add while this waits
    for (const Abandoned& a : AbandonedRuns())
        if (a.worker.get() == worker) mine.push_back(a.handle);
    for (const auto& h : mine) {
        AwaitHandlingSignals(h);
    }
    ForgetEndedAbandonedRuns();
}

struct PyRun;
void AwaitRunsOf(std::vector<std::weak_ptr<PyRun>>& runs);
// Every run started from Python whose handle lives (under the GIL), for
// the wait at exit.
std::vector<std::weak_ptr<PyRun>>& LiveRuns() {
    static auto* runs = new std::vector<std::weak_ptr<PyRun>>;  // never destroyed: read at exit
    return *runs;
}

struct PyWorker {
    std::shared_ptr<PyHost> host;
    std::shared_ptr<Worker> worker;
    const pid_t made_by = ::getpid();  // in a child forked since, close waits for nothing
    // Its runs whose handles the caller may still hold (under the GIL).
    std::vector<std::weak_ptr<PyRun>> runs;
    // Under the GIL: close began (every later call is refused), and the
    // threads inside Worker::Submit (the GIL let go), whose runs close
    // waits for too. A close that did not wait for them let a run start
    // after it (the device stayed held), or freed the Worker under a
    // submitting thread (a segfault, 16 of 20 processes).
    bool closing = false;
    std::vector<std::thread::id> submitting;
    Worker& Get(const char* what) const {
        if (!worker || closing) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the Worker is closed");
        return *worker;
    }
    // Refuses new runs, waits for the submissions under way and the runs in
    // flight, also those a Ctrl-C interrupted the wait of; a Ctrl-C
    // meanwhile raises here, the Worker still open. Then lets the Worker
    // go, releasing its devices now: a handle the caller keeps no longer
    // keeps the Worker (its result stays).
    void Close() {
        if (worker && HoldsGil() && !ForkedSince(made_by)) {
            if (std::find(submitting.begin(), submitting.end(), std::this_thread::get_id()) != submitting.end())
                throw Error(ErrorKind::InvalidArgument,
                            "Worker.close: called from a host program's orchestration function of this Worker "
                            "(it would wait for itself)");
            closing = true;
            try {
                while (!submitting.empty()) {
                    WithoutGil([] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
                    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                }
                AwaitAbandonedRunsOf(worker.get());
                AwaitRunsOf(runs);
            } catch (...) {
                closing = false;
                throw;
            }
        }
        DestroyWithoutGil(worker);
    }
    ~PyWorker() {
        try {
            Close();
        } catch (py::error_already_set&) {  // a Ctrl-C while it waited: let go without waiting
            DestroyWithoutGil(worker);
        }
    }
};

// What a Python host orchestration function records into (valid during the
// call). Get hands out a copy, taken under the GIL: a thread of the
// function's that submits without the GIL keeps the graph it uses (which
// refuses tasks once the function returned) when the function returns.
struct PyGraph {
    std::optional<HostGraph> graph;
    HostGraph Get(const char* what) const {
        if (!graph) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the host program's graph is closed");
        return *graph;
    }
};

struct PyHostProgram {
    HostProgram program;
};

SubWorkerFn PythonSubWorker(const std::string& name, py::function fn) {
    auto keep = KeepAlive(fn);
    PyObject* raw = fn.ptr();
    return [name, keep, raw](std::span<const HostTensor> args) {
        const RuntimeCall call;
        if (!call) throw Error(ErrorKind::TaskFailed, "SubWorker '" + name + "': the interpreter is finalizing");
        py::gil_scoped_acquire gil;
        try {
            // An In argument's view is read-only, as a chip function's:
            // nothing orders its other readers after this task, and a
            // chip call may reuse a device copy of its old bytes.
            const std::span<const TensorArg> running = RunningSubWorkerArgs();
            py::tuple a(args.size());
            for (size_t i = 0; i < args.size(); ++i) {
                py::array view = CallersView(args[i]);
                if (i < running.size() && running[i].access == Access::In) view.attr("flags").attr("writeable") = false;
                a[i] = std::move(view);
            }
            RefuseUnrunBody(py::handle{raw}(*a), "SubWorker '" + name + "'");
        } catch (py::error_already_set& e) {
            throw FromPython(e, "SubWorker '" + name + "'");
        }
    };
}

// The chip function given to Python: ChipContext's fields, args as numpy views on device memory.
struct PyChipContext {
    std::shared_ptr<PyOrch> orch;
    py::list args;
    std::vector<uint64_t> bytes;
    std::vector<std::vector<int64_t>> shapes;
    int block_dim = 1;
    std::string device;
};

ChipFunction PythonChipFunction(const std::string& name, py::function fn) {
    auto keep = KeepAlive(fn);
    PyObject* raw = fn.ptr();
    return [name, keep, raw](ChipContext& ctx) {
        const RuntimeCall call;
        if (!call) throw Error(ErrorKind::TaskFailed, "chip function '" + name + "': the interpreter is finalizing");
        py::gil_scoped_acquire gil;
        auto orch = std::make_shared<PyOrch>();
        orch->orch = &ctx.orch;
        orch->what = "chip task's Orchestrator";
        orch->call_views = std::make_shared<int>(0);
        struct Invalidate {
            PyOrch* o;
            ~Invalidate() { o->orch = nullptr; }
        } invalidate{orch.get()};
        try {
            // The views' base holds the arguments' device memory: a view
            // the function keeps past its call makes the runtime set those
            // copies aside for it (ChipContext::args_memory), so a late
            // write reaches no later run and no other tensor.
            const py::object memory = ViewOwner(py::none(), ctx.args_memory);
            PyChipContext pc{orch, py::list(), ctx.bytes, ctx.shapes, ctx.block_dim, ctx.device.pci_address()};
            for (size_t i = 0; i < ctx.args.size(); ++i) {
                py::object shape = i < ctx.shapes.size() ? py::cast(ctx.shapes[i]) : py::object(py::none());
                // The tensor's own dtype: one guessed from the element size
                // showed int32 as float32 (bf16: uint16 bits, as elsewhere).
                py::array view = DeviceView(ctx.args[i], ctx.bytes[i], NumpyDType(ctx.dtypes.at(i)), shape, memory,
                                            "chip function '" + name + "'");
                // An In argument's device copy is kept for later runs that read
                // the same bytes: a write through it would be read as theirs.
                if (i < ctx.access.size() && ctx.access[i] == Access::In) view.attr("flags").attr("writeable") = false;
                pc.args.append(std::move(view));
            }
            RefuseUnrunBody(py::handle{raw}(py::cast(std::move(pc))), "chip function '" + name + "'");
            // A view of the runtime's heap ring kept past the call would
            // read, and write, what the next call allocates there.
            if (orch->call_views.use_count() > 1) py::module_::import("gc").attr("collect")();  // views in cycles
            if (const long kept = orch->call_views.use_count() - 1; kept > 0)
                throw Error(ErrorKind::InvalidArgument,
                            "chip function '" + name + "' kept " + std::to_string(kept) +
                                " view(s) of ctx.orch.alloc() or task_output() past its call: that memory is the chip "
                                "runtime's heap ring, which its next call reuses; keep a copy (.copy()) instead");
        } catch (py::error_already_set& e) {
            throw FromPython(e, "chip function '" + name + "'");
        }
    };
}

// Ready-made chip functions over kernel-builder programs.
struct PyChipFunction {
    ChipFunction fn;
    std::string what;
};

PyChipFunction ElementwiseChip(const IntArg<int32_t>& kernel_id_arg, const IntArg<int32_t>& worker_type_arg) {
    const int32_t kernel_id = kernel_id_arg.In("ChipFunction.elementwise: kernel_id");
    const int32_t worker_type = worker_type_arg.In("ChipFunction.elementwise: worker_type");
    return {[kernel_id, worker_type](ChipContext& ctx) {
                if (ctx.args.size() < 2)
                    throw Error(ErrorKind::InvalidArgument, "elementwise chip function: needs inputs and one output");
                // The kernel computes tensors of its own shapes: a larger
                // argument would be computed in part, a smaller one read or
                // written past its end (the runtime's submit refuses that
                // too, in its own words).
                const std::vector<uint64_t> operands = ctx.orch.KernelOperandBytes(kernel_id);
                const std::string what = "elementwise chip function (kernel " + std::to_string(kernel_id) + "): argument ";
                for (size_t i = 0; i < ctx.args.size() && i < operands.size(); ++i)
                    if (ctx.bytes[i] != operands[i])
                        throw Error(ErrorKind::InvalidArgument,
                                    what + std::to_string(i) + " is " + std::to_string(ctx.bytes[i]) +
                                        " bytes, the kernel's operand " + std::to_string(i) + " spans " +
                                        std::to_string(operands[i]) +
                                        (ctx.bytes[i] > operands[i] ? ": it would compute only part of it"
                                                                    : ": the kernel would run past its end"));
                // The same bytes of another dtype (int32 or fp16 for fp32)
                // computed garbage with no error.
                CheckArgumentDTypes(ctx, kernel_id, what);
                CheckArgumentsRead(ctx, ctx.args.size() - 1, what);
                std::vector<TaskParam> p;
                for (size_t i = 0; i < ctx.args.size(); ++i)
                    p.push_back({i + 1 == ctx.args.size() ? PARAM_OUTPUT : PARAM_INPUT, ctx.args[i], ctx.bytes[i], {}});
                ctx.orch.Submit(kernel_id, worker_type, p);
            },
            "elementwise(kernel " + std::to_string(kernel_id) + ")"};
}

PyChipFunction MatmulChip(const IntArg<int32_t>& kernel_id_arg, const IntArg<int64_t>& task_rows, const IntArg<int64_t>& k,
                          const IntArg<int64_t>& n) {
    const int32_t kernel_id = kernel_id_arg.In("ChipFunction.matmul: kernel_id");
    return {RowBlockMatmulChip("matmul chip function", kernel_id, task_rows.In("ChipFunction.matmul: task_rows"),
                               k.In("ChipFunction.matmul: k"), n.In("ChipFunction.matmul: n")),
            "matmul(kernel " + std::to_string(kernel_id) + ")"};
}

// How a host orchestration function's failure names it; InterruptedByTheUser
// reads its cause by this prefix.
std::string OrchestrationFunction(const std::string& name) { return "host orchestration function '" + name + "'"; }

HostProgram MakeProgram(const std::string& name, size_t num_inputs, const py::iterable& outputs, py::function fn) {
    HostProgram p;
    p.name = name;
    p.num_inputs = num_inputs;
    // A shape is a list of ints; anything else was pybind11's cast_error, a
    // RuntimeError naming no output.
    auto shape_of = [](py::handle shape, const std::string& what) {
        if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape) || py::isinstance<py::bytes>(shape))
            throw Error(ErrorKind::InvalidArgument,
                        what + " is " + ATypeName(shape) +
                            ", not a shape (a list of ints) or (shape, dtype)");
        std::vector<int64_t> dims = IntsFrom<int64_t>(shape, what + ":");
        // Refused here, naming the output, not when a run makes the tensor.
        if (dims.empty()) throw Error(ErrorKind::InvalidArgument, what + " has no dims");
        for (size_t d = 0; d < dims.size(); ++d)
            if (dims[d] < 1)
                throw Error(ErrorKind::InvalidArgument,
                            what + ": dim " + std::to_string(d) + " is " + std::to_string(dims[d]) + " (each must be >= 1)");
        return dims;
    };
    size_t index = 0;
    for (py::handle o : outputs) {
        const std::string what = "HostProgram: output " + std::to_string(index++);
        HostProgram::OutputSpec spec;
        // (shape, dtype) has a sequence first; (2, 3) is a shape.
        if (py::isinstance<py::tuple>(o) && py::len(o) == 2 && py::isinstance<py::sequence>(py::reinterpret_borrow<py::tuple>(o)[0])) {
            py::tuple t = py::reinterpret_borrow<py::tuple>(o);
            spec.shape = shape_of(t[0], what);
            spec.dtype = DTypeFrom(t[1], "HostProgram outputs");
        } else {
            spec.shape = shape_of(o, what);
        }
        p.outputs.push_back(std::move(spec));
    }
    auto keep = KeepAlive(fn);
    PyObject* raw = fn.ptr();
    p.fn = [keep, raw, name](HostGraph& g, std::span<const HostTensor> args) {
        py::gil_scoped_acquire gil;
        auto pg = std::make_shared<PyGraph>();
        pg->graph = g;
        struct Invalidate {
            PyGraph* g;
            ~Invalidate() { g->graph.reset(); }
        } invalidate{pg.get()};
        try {
            py::list a;
            for (const HostTensor& t : args) a.append(py::cast(t));
            RefuseUnrunBody(py::handle{raw}(py::cast(pg), a), OrchestrationFunction(name));
        } catch (py::error_already_set& e) {
            // A spyre error of a bad recording (a bad chip call) keeps its kind.
            const std::optional<ErrorKind> kind = SpyreKindOf(e);
            if (kind == ErrorKind::InvalidArgument || kind == ErrorKind::NotFound || kind == ErrorKind::WrongDevice ||
                kind == ErrorKind::Unsupported)
                throw Error(*kind, OrchestrationFunction(name) + ": " + SpyreMessageOf(e));
            throw FromPython(e, OrchestrationFunction(name));
        }
    };
    return p;
}

bool IsReadOnlyArray(py::handle obj) {
    if (py::isinstance<HostTensor>(obj)) return false;
    // A numpy array says so itself; anything else is made one to ask
    // (ToHostTensor makes it again: such arguments are rare).
    if (py::isinstance<py::array>(obj)) return !py::reinterpret_borrow<py::array>(obj).writeable();
    try {
        const py::array a = py::array::ensure(obj);
        return a && !a.writeable();
    } catch (...) {
        PyErr_Clear();
        return false;
    }
}

// A run's arguments as tensors. Read-only input arrays come last: one over
// memory another argument of the call is (or views) is that tensor, its
// tasks ordered with the other's; one over another held tensor's memory is
// a copy (WrappedAlready's `snapshot`).
std::vector<HostTensor> RunArgs(const HostProgram& p, const py::list& args) {
    std::vector<HostTensor> out(args.size());
    std::vector<size_t> read_only;
    auto what = [&](size_t i) { return "host program '" + p.name + "': argument " + std::to_string(i); };
    for (size_t i = 0; i < args.size(); ++i) {
        const bool output = i >= p.num_inputs;
        if (!output && IsReadOnlyArray(args[i]))
            read_only.push_back(i);
        else
            out[i] = ToHostTensor(args[i], output, what(i), !output);
    }
    for (size_t i : read_only) out[i] = ToHostTensor(args[i], false, what(i), true, false, out);
    return out;
}

struct PyRun {
    std::shared_ptr<Worker> worker;  // outlives the handle
    std::shared_ptr<RunHandle> handle;
    py::list inplace;  // the caller's output arrays (in-place style), else empty
    // Writable inputs that were not C-contiguous: the run used a copy, and
    // what its tasks wrote there goes back into the array when it ends.
    struct CopiedInput {
        py::array array;
        HostTensor copy;
        py::array before;  // the copy's bytes when the run began
    };
    std::vector<CopiedInput> copied;
    py::object result;
    py::object error;
    std::mutex wait_mu;  // one thread waits on the handle; the others then read what it got
    bool interrupted = false;  // a signal ended a wait: letting go must not wait for the run
    ~PyRun();
};

// AwaitHandlingSignals on `r`'s run; a Ctrl-C marks it interrupted (the
// handle may be waited for again, and letting it go leaves the run in
// flight, AbandonedRuns).
void AwaitRun(PyRun& r) {
    try {
        AwaitHandlingSignals(r.handle);
    } catch (py::error_already_set&) {
        r.interrupted = true;
        throw;
    }
}

// Whether the run's host orchestration function, which runs on the
// caller's (main) thread, raised KeyboardInterrupt: it saw Ctrl-C. Only
// its own failure counts, by the cause MakeProgram gives it: a SubWorker
// or chip function's (on a pool thread), or a message that merely says
// "raised KeyboardInterrupt", came out as KeyboardInterrupt too.
bool InterruptedByTheUser(const HostRunError& e) {
    for (const TaskFailureInfo& f : e.failures())
        if (f.orchestrator && !f.skipped &&
            f.cause.starts_with(OrchestrationFunction(f.function) + " raised KeyboardInterrupt: "))
            return true;
    return false;
}

// The copied inputs a task wrote, back into the caller's arrays (each
// compared before any is written: two copies of overlapping memory, one of
// them written, must not have the other's stale bytes land last). Once.
//
// Only the elements whose bytes the run changed: compared with the array as
// it is now, a write the caller made after the run was undone, and a task's
// -0.0 over 0.0 (or another NaN) was equal and lost (found probing from
// outside).
void CopyBackInputs(PyRun& r) {
    struct Changed {
        py::array array, now;
        py::object where;
    };
    std::vector<Changed> changed;
    py::module_ np = py::module_::import("numpy");
    for (const PyRun::CopiedInput& c : r.copied) {
        py::array now = ToNumpy(c.copy);
        // Element by element, as bytes: both are C-contiguous.
        const auto bytes = [&](const py::array& a) {
            return a.attr("view")(np.attr("uint8")).attr("reshape")(-1, now.itemsize());
        };
        py::object where = np.attr("not_equal")(bytes(now), bytes(c.before))
                               .attr("any")(py::arg("axis") = 1)
                               .attr("reshape")(now.attr("shape"));
        if (where.attr("any")().cast<bool>()) changed.push_back({c.array, now, where});
    }
    r.copied.clear();
    for (Changed& c : changed) np.attr("copyto")(c.array, c.now, py::arg("where") = c.where);
}

PyRun::~PyRun() {
    if (interrupted && handle && HoldsGil() && !handle->Done()) {
        AbandonedRuns().push_back({std::move(handle), std::move(worker)});
        return;
    }
    // A handle let go without a wait: the copied inputs' writes still go
    // back, once the run ends (they were lost). A wait refused (from one
    // of the run's own tasks) or a failed run copies back what it can.
    if (!copied.empty() && handle && HoldsGil()) {
        std::shared_ptr<RunHandle> h = handle;
        try {
            WithoutGil([&] { h->Wait(); });
        } catch (...) {
        }
        try {
            if (h->Done()) CopyBackInputs(*this);
        } catch (...) {
            // Nothing to raise to from a destructor: the run's own error was
            // the caller's to wait for.
        }
    }
    DestroyWithoutGil(handle);
    DestroyWithoutGil(worker);
}

py::object Finish(PyRun& r) {
    // Every waiter waits for the run itself, before the lock: a SubWorker
    // waiting runs its pool's queued jobs meanwhile (the run may need its
    // very thread), and one of the run's own tasks is refused at once
    // (InvalidArgument). Behind the lock, a waiter holding it would keep
    // both from happening while another thread (the main one) waited.
    if (!r.result && !r.error) {
        AwaitRun(r);
    }
    // Then one waiter makes the result (the handle's one Wait, which now
    // returns at once) and the others read it. Taken without the GIL when
    // another thread holds it: that one takes the GIL again to store its
    // result before it lets go.
    std::unique_lock lock(r.wait_mu, std::defer_lock);
    if (!lock.try_lock()) WithoutGil([&] { lock.lock(); });
    if (r.result) return r.result;
    if (r.error) {
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(r.error.ptr())), r.error.ptr());
        throw py::error_already_set();
    }
    std::vector<HostTensor> outs;
    try {
        std::shared_ptr<RunHandle> h = r.handle;
        outs = WithoutGil([&] { return h->Wait(); });
        CopyBackInputs(r);
        ForgetUnheldArrays();  // the ended run's arrays the caller dropped go now, not at the next call
    } catch (const HostRunError& e) {
        CopyBackInputs(r);  // what the tasks that ran wrote, as an array wrapped in place has it
        ForgetUnheldArrays();
        if (InterruptedByTheUser(e)) {
            // Ctrl-C stops the program, as it does any Python code; the run's
            // failure is its context.
            py::object run_error;
            try {
                RaiseRunError(e);
            } catch (py::error_already_set& pe) {
                run_error = pe.value();
            }
            r.error = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(PyExc_KeyboardInterrupt));
            PyException_SetContext(r.error.ptr(), run_error.release().ptr());
            PyErr_SetObject(PyExc_KeyboardInterrupt, r.error.ptr());
            throw py::error_already_set();
        }
        try {
            RaiseRunError(e);
        } catch (py::error_already_set& pe) {
            r.error = pe.value();
            throw;
        }
    }
    if (!r.inplace.empty()) {
        r.result = r.inplace.size() == 1 ? py::object(r.inplace[0]) : py::object(py::tuple(r.inplace));
    } else {
        py::list l;
        for (const HostTensor& t : outs) l.append(CallersView(t));
        r.result = l.size() == 1 ? py::object(l[0]) : py::object(py::tuple(l));
    }
    return r.result;
}

void AwaitRunsOf(std::vector<std::weak_ptr<PyRun>>& runs) {
    std::vector<std::shared_ptr<PyRun>> live;  // a copy: other threads may start runs while this waits
    for (const auto& weak : runs)
        if (std::shared_ptr<PyRun> r = weak.lock()) live.push_back(std::move(r));
    for (const auto& r : live) {
        if (r->handle) AwaitRun(*r);
    }
    for (const auto& r : live) DestroyWithoutGil(r->worker);
    std::erase_if(runs, [](const std::weak_ptr<PyRun>& weak) { return weak.expired(); });
}

std::shared_ptr<PyRun> Start(PyWorker& w, const PyHostProgram& p, const py::iterable& given, const char* call) {
    ForgetEndedAbandonedRuns();
    w.Get(call);
    auto run = std::make_shared<PyRun>();
    run->worker = w.worker;
    std::erase_if(w.runs, [](const std::weak_ptr<PyRun>& weak) { return weak.expired(); });
    w.runs.push_back(run);
    std::erase_if(LiveRuns(), [](const std::weak_ptr<PyRun>& weak) { return weak.expired(); });
    LiveRuns().push_back(run);
    Worker& worker = *run->worker;
    const py::list args(given);  // read twice below: a generator would be empty the second time
    std::vector<HostTensor> tensors = RunArgs(p.program, args);
    size_t i = 0;
    for (py::handle a : args) {
        if (i >= p.program.num_inputs) {
            run->inplace.append(a);
        } else if (!py::isinstance<HostTensor>(a)) {
            py::array array = py::array::ensure(a);  // RunArgs took it: an array or a buffer
            if (array.writeable() && !(array.flags() & py::array::c_style))
                run->copied.push_back({array, tensors[i], py::array(ToNumpy(tensors[i]).attr("copy")())});
        }
        ++i;
    }
    w.submitting.push_back(std::this_thread::get_id());
    struct Submitted {
        PyWorker& w;
        ~Submitted() { w.submitting.erase(std::find(w.submitting.begin(), w.submitting.end(), std::this_thread::get_id())); }
    } submitted{w};
    RunHandle h = WithoutGil([&] { return worker.Submit(p.program, std::move(tensors)); });
    run->handle = std::make_shared<RunHandle>(std::move(h));
    return run;
}

}  // namespace

void BindHostLevel(py::module_& m) {
    // At exit the program waits for the runs a Ctrl-C left in flight, as
    // Python waits for its threads; a second Ctrl-C leaves them.
    // So do the runs whose handles the program still holds, never waited
    // for: a SubWorker (Python) still running when the interpreter
    // finalizes was ended under its feet (an abort or a segfault at exit).
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
        size_t left = 0;
        try {
            // A run no wait may take (its Worker made by the process a
            // forked child came from: its threads are the parent's) is not
            // this exit's to wait for; its refusal is not printed either.
            const auto await = [](const std::shared_ptr<RunHandle>& h) {
                try {
                    AwaitHandlingSignals(h);
                } catch (const Error&) {
                }
            };
            const std::vector<Abandoned> runs = AbandonedRuns();  // a copy: other threads may add while this waits
            left = runs.size();
            for (const Abandoned& a : runs) await(a.handle);
            std::vector<std::shared_ptr<RunHandle>> held;
            for (const auto& weak : LiveRuns())
                if (auto r = weak.lock(); r && r->handle) held.push_back(r->handle);
            left = held.size();
            for (const auto& h : held) await(h);
        } catch (py::error_already_set&) {
            PySys_WriteStderr("spyre: exiting without waiting for run(s) still in flight (%zu)\n", left);
            return;
        }
        ForgetEndedAbandonedRuns();
    }));
    g_run_error = PyErr_NewExceptionWithDoc(
        "spyre._spyre.HostRunError",
        "A host-level run failed. Also an instance of the first failure's kind (TaskFailed for a raising SubWorker, "
        "DeviceError for a chip task the device refused), also when the host orchestration function raised. Attributes: "
        "failures (TaskFailureInfo list: task, task_id, level, device, function, kind, cause, device_code, "
        "orchestrator, kernel_id), skipped (task names), report (TaskRecord list: every task), and the first failure's task, "
        "function, level, cause, device, device_code.",
        m.attr("Error").ptr(), nullptr);
    m.add_object("HostRunError", py::handle(g_run_error));
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        try {
            std::rethrow_exception(p);
        } catch (const HostRunError& e) {
            try {
                RaiseRunError(e);
            } catch (py::error_already_set& pe) {
                pe.restore();
            }
        }
    });

    py::enum_<Level>(m, "Level", "Seed 003's execution levels.")
        .value("CORE_GROUP", Level::CoreGroup)
        .value("CHIP", Level::Chip)
        .value("HOST", Level::Host);
    py::enum_<Access>(m, "Access", "How a task uses a tensor argument.")
        .value("In", Access::In)
        .value("Out", Access::Out)
        .value("InOut", Access::InOut);

    py::enum_<ChipRuntime>(m, "ChipRuntime", "The chip runtime of a level-3 Worker (seed 004's, locked or lock-free ready queues).")
        .value("TensorMapAndRingBuffer", ChipRuntime::TensorMapAndRingBuffer)
        .value("TensorMapAndRingBufferLockFree", ChipRuntime::TensorMapAndRingBufferLockFree);

    py::class_<DistributedConfig> config(m, "DistributedConfig", "Seed 003's configuration of a level-3 Worker.");
    config.def(py::init([](const py::object& device_ids, const IntArg<int>& num_sub_workers, const py::object& runtime,
                         const IntArg<int>& block_dim, const IntArg<int>& aicpu_thread_num,
                         const IntArg<uint64_t>& chip_heap_bytes, const IntArg<int>& chip_tasks_per_device,
                         const IntArg<int>& max_tasks_in_flight, const IntArg<uint32_t>& cheap_chip_task_ns) {
                 DistributedConfig c;
                 c.device_ids = DeviceIdsFrom(device_ids);
                 c.num_sub_workers = num_sub_workers.In("DistributedConfig: num_sub_workers");
                 c.runtime = RuntimeArg(runtime);
                 c.block_dim = block_dim.In("DistributedConfig: block_dim");
                 c.aicpu_thread_num = aicpu_thread_num.In("DistributedConfig: aicpu_thread_num");
                 c.chip_heap_bytes = chip_heap_bytes.In("DistributedConfig: chip_heap_bytes");
                 c.chip_tasks_per_device = chip_tasks_per_device.In("DistributedConfig: chip_tasks_per_device");
                 c.max_tasks_in_flight = max_tasks_in_flight.In("DistributedConfig: max_tasks_in_flight");
                 c.cheap_chip_task_ns = cheap_chip_task_ns.In("DistributedConfig: cheap_chip_task_ns");
                 return c;
             }),
             py::arg("device_ids") = py::make_tuple(0), py::arg("num_sub_workers") = 0,
             py::arg("runtime") = ChipRuntime::TensorMapAndRingBuffer, py::arg("block_dim") = 1, py::arg("aicpu_thread_num") = 1,
             py::arg("chip_heap_bytes") = DistributedConfig{}.chip_heap_bytes, py::arg("chip_tasks_per_device") = 0,
             py::arg("max_tasks_in_flight") = DistributedConfig{}.max_tasks_in_flight,
             py::arg("cheap_chip_task_ns") = DistributedConfig{}.cheap_chip_task_ns)
        .def_property(
            "device_ids", [](const DistributedConfig& c) { return c.device_ids; },
            [](DistributedConfig& c, const py::object& ids) { c.device_ids = DeviceIdsFrom(ids); },
            "Indices into Host.functions: the chip task devices.")
        .def_property(
            "runtime", [](const DistributedConfig& c) { return c.runtime; },
            [](DistributedConfig& c, const py::object& runtime) { c.runtime = RuntimeArg(runtime); },
            "A ChipRuntime, or its seed name: 'tensormap_and_ringbuffer' or 'tensormap_and_ringbuffer_lockfree'.")
        .def("validate", [](const DistributedConfig& c) { Validate(c); }, "InvalidArgument naming a bad field.")
        .def("__repr__", [](const DistributedConfig& c) {
            std::string ids;
            for (int d : c.device_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(d);
            return "DistributedConfig(device_ids=[" + ids + "], num_sub_workers=" + std::to_string(c.num_sub_workers) +
                   ", runtime='" + ToString(c.runtime) + "', block_dim=" + std::to_string(c.block_dim) +
                   ", aicpu_thread_num=" + std::to_string(c.aicpu_thread_num) +
                   ", chip_heap_bytes=" + std::to_string(c.chip_heap_bytes) +
                   ", chip_tasks_per_device=" + std::to_string(c.chip_tasks_per_device) +
                   ", max_tasks_in_flight=" + std::to_string(c.max_tasks_in_flight) +
                   ", cheap_chip_task_ns=" + std::to_string(c.cheap_chip_task_ns) + ")";
        });
    DefIntProperty(config, "num_sub_workers", &DistributedConfig::num_sub_workers, "Host threads running SubWorkers.");
    DefIntProperty(config, "block_dim", &DistributedConfig::block_dim, "Cores a chip task spreads over.");
    DefIntProperty(config, "aicpu_thread_num", &DistributedConfig::aicpu_thread_num, "Host threads of each chip runtime.");
    DefIntProperty(config, "chip_heap_bytes", &DistributedConfig::chip_heap_bytes, "Bytes of each chip runtime's heap ring.");
    DefIntProperty(config, "chip_tasks_per_device", &DistributedConfig::chip_tasks_per_device,
                   "Chip tasks one device runs at once (0: as many as it has room for).");
    DefIntProperty(config, "max_tasks_in_flight", &DistributedConfig::max_tasks_in_flight,
                   "Tasks of one run submitted and unfinished at most; a submit waits for room.");
    DefIntProperty(config, "cheap_chip_task_ns", &DistributedConfig::cheap_chip_task_ns,
                   "A chip task whose function's runs averaged under this runs on the submitting thread (0: never).");

    py::class_<TaskFailureInfo>(m, "TaskFailureInfo", "One failed (or skipped) task: a host-level run's, or an orchestration runtime's.")
        .def_readonly("task", &TaskFailureInfo::task)
        .def_readonly("task_id", &TaskFailureInfo::task_id)
        .def_readonly("level", &TaskFailureInfo::level)
        .def_readonly("device", &TaskFailureInfo::device)
        .def_readonly("function", &TaskFailureInfo::function)
        .def_property_readonly("kind", [](const TaskFailureInfo& f) {
            return py::str(ToPython(Error(f.kind, "")).attr("kind"));
        })
        .def_readonly("cause", &TaskFailureInfo::cause)
        .def_readonly("device_code", &TaskFailureInfo::device_code)
        .def_readonly("host_kernel_code", &TaskFailureInfo::host_kernel_code,
                      "device_code is the host's own (a host kernel's return value, or pto_task_fail's code), not a device error code.")
        .def_readonly("run", &TaskFailureInfo::run,
                      "The run the failed task belongs to (its program's name): an earlier run's, for a failure "
                      "that skipped tasks of this run.")
        .def_readonly("orchestrator", &TaskFailureInfo::orchestrator,
                      "The host orchestration function itself raised (what it submitted before still ran).")
        .def_readonly("kernel_id", &TaskFailureInfo::kernel_id,
                      "The kernel that failed, when the chip function's runtime reported one (-1: none).")
        .def_readonly("skipped", &TaskFailureInfo::skipped,
                      "Skipped, not run: a task it depends on failed (kind, cause: that task's).")
        .def_readonly("root_task_id", &TaskFailureInfo::root_task_id,
                      "The failed task behind this record (a failed task's own id).")
        .def_readonly("root_kernel_id", &TaskFailureInfo::root_kernel_id)
        .def("__repr__", [](const TaskFailureInfo& f) {
            return "<TaskFailureInfo " + f.task + " (" + ToString(f.level) + ", " + f.function + "): " + f.cause + ">";
        });

    py::enum_<TaskState>(m, "TaskState", "How a task of a host-level run ended.")
        .value("DONE", TaskState::Done)
        .value("FAILED", TaskState::Failed)
        .value("SKIPPED", TaskState::Skipped);

    py::class_<TaskRecord>(m, "TaskRecord",
        "One task of a finished host-level run: name, task_id, level, device ('' for a SubWorker), state, and "
        "start_ns/end_ns on the device clock (CLOCK_MONOTONIC; a chip task's as its device ran it, a SubWorker's "
        "around its call; 0 for a skipped task).")
        .def_readonly("name", &TaskRecord::name)
        .def_readonly("task_id", &TaskRecord::task_id)
        .def_readonly("level", &TaskRecord::level)
        .def_readonly("device", &TaskRecord::device)
        .def_readonly("state", &TaskRecord::state)
        .def_readonly("start_ns", &TaskRecord::start_ns)
        .def_readonly("end_ns", &TaskRecord::end_ns)
        .def("__repr__", [](const TaskRecord& r) {
            return "<TaskRecord " + r.name + " (" + ToString(r.level) + (r.device.empty() ? "" : ", " + r.device) + "): " +
                   ToString(r.state) + ">";
        });

    py::class_<HostTensor>(m, "HostTensor",
        "A host-level tensor (row-major host memory, shared by copies). numpy() is a view (no copy); "
        "from_numpy wraps a C-contiguous array without copying (the tensor keeps it alive). Write it (or the "
        "array it wraps) freely between runs, or from the orchestration function before submitting the tasks that "
        "read it; not while a task that uses it is in flight.")
        .def_static("zeros", [](const IntList<int64_t>& shape, py::handle dtype) {
                return HostTensor::Zeros(shape, DTypeFrom(dtype, "HostTensor.zeros"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32)
        .def_static("full", [](const IntList<int64_t>& shape, float value) { return HostTensor::Full(shape, value); },
                    py::arg("shape"), py::arg("value"), "fp32.")
        .def_static("from_numpy", [](py::handle a, py::handle dtype) {
                const std::optional<DType> named =
                    dtype.is_none() ? std::nullopt : std::optional(DTypeFrom(dtype, "HostTensor.from_numpy: dtype"));
                return ToHostTensor(a, false, "HostTensor.from_numpy", false, true, {}, named);
            }, py::arg("array"), py::arg("dtype") = py::none(),
            "Wraps the array (no copy when C-contiguous); dtype=DType.BF16 names a uint16 array's bits bf16.")
        .def("numpy", [](const HostTensor& t) { return CallersView(t); }, "A numpy view of the tensor (no copy).")
        .def("__array__", [](const HostTensor& t, py::object dtype, py::object) {
                py::array a = CallersView(t);
                return dtype.is_none() ? py::object(a) : a.attr("astype")(dtype);
            }, py::arg("dtype") = py::none(), py::arg("copy") = py::none())
        .def_property_readonly("shape", [](const HostTensor& t) { return py::tuple(py::cast(t.shape())); })
        .def_property_readonly("dtype", &HostTensor::dtype)
        .def_property_readonly("nbytes", &HostTensor::bytes)
        .def_property_readonly("storage_id", &HostTensor::storage_id)
        .def("rows", [](const HostTensor& t, const IntArg<int64_t>& begin, const IntArg<int64_t>& end) {
                return t.Rows(begin.In("HostTensor.rows: begin"), end.In("HostTensor.rows: end"));
            }, py::arg("begin"), py::arg("end"), "Rows [begin, end) as a view.")
        .def("describe", &HostTensor::Describe)
        .def("__repr__", [](const HostTensor& t) { return "<spyre.HostTensor " + t.Describe() + ">"; });

    m.def("_views_a_tensor", &ViewsATensor, py::arg("value"), "Internal (the DSL): whether a numpy array views a tensor.");
    m.def("_tensor_viewed_by", &TensorViewedBy, py::arg("value"), py::arg("what"),
          "Internal (the DSL): the tensor a numpy array views, or None.");

    py::class_<TensorArg>(m, "TensorArg", "A task's tensor argument and how the task uses it.")
        .def_readonly("tensor", &TensorArg::tensor)
        .def_readonly("access", &TensorArg::access);

    py::class_<PyGraph, std::shared_ptr<PyGraph>>(m, "HostGraph",
        "What a host orchestration function submits tasks into (each starts once ready); valid while it runs.")
        .def("create_tensor", [](PyGraph& g, const IntList<int64_t>& shape, py::handle dtype) {
                return g.Get("HostGraph.create_tensor").CreateTensor(shape, DTypeFrom(dtype, "HostGraph.create_tensor"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32, "An intermediate host tensor (zero-filled).")
        .def("chip", [](PyGraph& g, const std::string& function, const py::iterable& args, std::optional<std::string> name,
                        const std::optional<IntArg<size_t>>& device) {
                HostGraph graph = g.Get("HostGraph.chip");
                ChipOptions o;
                if (name) o.name = *name;
                if (device) o.device = device->In("HostGraph.chip: device");
                std::vector<TensorArg> a = ArgsFrom(args, "chip task '" + function + "'");
                // Released while the task is handed over: a full window
                // waits for tasks that may need the GIL (Python SubWorkers).
                return WithoutGil([&] { return graph.Chip(function, std::move(a), std::move(o)); });
            }, py::arg("function"), py::arg("args"), py::kw_only(), py::arg("name") = py::none(), py::arg("device") = py::none(),
            "A chip task: a registered chip function over [In(a), Out(f), ...]; device: index into the Worker's devices.")
        .def("sub", [](PyGraph& g, py::object name_or_fn, const py::iterable& args, std::optional<std::string> name) {
                HostGraph graph = g.Get("HostGraph.sub");
                SubOptions o;
                if (name) o.name = *name;
                if (py::isinstance<py::str>(name_or_fn)) {
                    const std::string n = name_or_fn.cast<std::string>();
                    std::vector<TensorArg> a = ArgsFrom(args, "SubWorker '" + n + "'");
                    return WithoutGil([&] { return graph.Sub(n, std::move(a), std::move(o)); });
                }
                // A callable is the SubWorker of its own name ("<lambda>" for a lambda).
                const py::object fn_name = py::getattr(name_or_fn, "__name__", py::none());
                const std::string n = fn_name.is_none() ? std::string(py::str(py::type::handle_of(name_or_fn).attr("__name__")))
                                                        : std::string(py::str(fn_name));
                SubWorkerFn fn = PythonSubWorker(n, CallableArg(name_or_fn, "HostGraph.sub", " (a function, or a registered name)"));
                std::vector<TensorArg> a = ArgsFrom(args, "SubWorker '" + n + "'");
                return WithoutGil([&] { return graph.Sub(n, std::move(fn), std::move(a), std::move(o)); });
            }, py::arg("subworker"), py::arg("args"), py::kw_only(), py::arg("name") = py::none(),
            "A SubWorker task: a registered SubWorker's name, or a Python callable taking numpy arrays. name: the "
            "task's name in errors and the run's report (default '<SubWorker>#<n>'), as chip's.");

    py::class_<PyHostProgram>(m, "HostProgram",
        "A host orchestration function fn(graph, tensors) with its signature: num_inputs inputs, then outputs "
        "[(shape, dtype) or shape] (run in place with every argument, or with the inputs only: return style).")
        .def(py::init([](const std::string& name, const IntArg<size_t>& num_inputs, const py::iterable& outputs, py::function fn) {
                 return PyHostProgram{MakeProgram(name, num_inputs.In("HostProgram: num_inputs"), outputs, fn)};
             }),
             py::arg("name"), py::arg("num_inputs"), py::arg("outputs"), py::arg("fn"))
        .def_property_readonly("name", [](const PyHostProgram& p) { return p.program.name; })
        .def_property_readonly("num_inputs", [](const PyHostProgram& p) { return p.program.num_inputs; })
        .def_property_readonly("outputs", [](const PyHostProgram& p) {
            py::list l;
            for (const auto& o : p.program.outputs) l.append(py::make_tuple(o.shape, o.dtype));
            return l;
        });

    py::class_<PyChipContext>(m, "ChipContext",
        "What a Python chip function gets: orch (the chip's Orchestrator: submit tasks on it), args (numpy views "
        "on the device memory of the task's tensors), bytes, shapes, block_dim, device. Valid during the call.")
        .def_readonly("orch", &PyChipContext::orch)
        .def_readonly("args", &PyChipContext::args)
        .def_readonly("bytes", &PyChipContext::bytes)
        .def_readonly("shapes", &PyChipContext::shapes)
        .def_readonly("block_dim", &PyChipContext::block_dim)
        .def_readonly("device", &PyChipContext::device);

    py::class_<PyChipFunction>(m, "ChipFunction",
        "A ready-made C++ chip function over kernel-builder programs (no Python runs per task).")
        .def_static("elementwise", &ElementwiseChip, py::arg("kernel_id"), py::arg("worker_type") = int(WORKER_VECTOR),
                    "One task of kernel_id over (inputs..., output): add/sub/mul/div kernels.")
        .def_static("matmul", &MatmulChip, py::arg("kernel_id"), py::arg("task_rows"), py::arg("k"), py::arg("n"),
                    "C = A @ B, A's rows split into block_dim tasks of task_rows rows (kernel: task_rows x k x n).")
        .def_static("empty", [] { return PyChipFunction{[](ChipContext&) {}, "empty"}; }, "Submits nothing (benchmarks).")
        .def("__repr__", [](const PyChipFunction& f) { return "<spyre.ChipFunction " + f.what + ">"; });

    py::class_<PyRun, std::shared_ptr<PyRun>>(m, "RunHandle", "A host-level run in flight.")
        .def("wait", [](PyRun& r) { return Finish(r); },
             "Waits (GIL released); returns the outputs (one array, or a tuple) or raises HostRunError.")
        .def("done", [](PyRun& r) { return r.result || r.error || r.handle->Done(); })
        .def("report", [](PyRun& r) {
                std::shared_ptr<RunHandle> h = r.handle;
                AwaitRun(r);  // Ctrl-C ends the wait, as wait's
                return WithoutGil([&] { return h->Report(); });
            },
            "Every task of the run (TaskRecord list, submission order); waits for the run (GIL released), never "
            "raises its failure.");

    py::class_<PyWorker, std::shared_ptr<PyWorker>>(m, "Worker",
        "Seed 003's level-3 Worker over the Host's devices (config.device_ids). Close it (or use `with`) before "
        "its Host.")
        .def(py::init([](const std::shared_ptr<PyHost>& host, const DistributedConfig& config) {
                 if (!host) throw Error(ErrorKind::InvalidArgument, "Worker: the host is None");
                 Host& h = host->Get("Worker");
                 auto w = std::make_shared<PyWorker>();
                 w->host = host;
                 w->worker = WithoutGil([&] { return std::make_shared<Worker>(h, config); });
                 return w;
             }),
             py::arg("host"), py::arg("config") = DistributedConfig{})
        .def("register_kernel", [](PyWorker& w, const IntArg<int32_t>& kernel_id_arg, py::object program) {
                const int32_t kernel_id = kernel_id_arg.In("Worker.register_kernel: kernel_id");
                if (py::hasattr(program, "program")) program = program.attr("program");
                // Any bytes-like program, as Orchestrator.register_device_kernel takes.
                const HostView view = ViewOf(program, false, "Worker.register_kernel: program");
                const auto* first = static_cast<const uint8_t*>(view.data);
                std::vector<uint8_t> v(first, first + view.bytes);
                Worker& worker = w.Get("Worker.register_kernel");
                WithoutGil([&] { worker.RegisterKernel(kernel_id, v); });
            }, py::arg("kernel_id"), py::arg("program"),
            "A device program (BuiltKernel or bytes), uploaded to every device as kernel_id.")
        .def("register_chip_function", [](PyWorker& w, const std::string& name, py::object fn) {
                Worker& worker = w.Get("Worker.register_chip_function");
                if (py::isinstance<PyChipFunction>(fn)) worker.RegisterChipFunction(name, fn.cast<PyChipFunction>().fn);
                else worker.RegisterChipFunction(name, PythonChipFunction(name, CallableArg(fn, "Worker.register_chip_function")));
            }, py::arg("name"), py::arg("fn"),
            "A ChipFunction, or a Python callable fn(ctx: ChipContext) submitting core tasks on ctx.orch.")
        .def("register_sub_worker", [](PyWorker& w, const std::string& name, py::object fn) {
                w.Get("Worker.register_sub_worker")
                    .RegisterSubWorker(name, PythonSubWorker(name, CallableArg(fn, "Worker.register_sub_worker")));
            }, py::arg("name"), py::arg("fn"),
            "fn(*arrays): numpy views of the task's tensors (no copy), with the GIL; raising fails the task (TaskFailed).")
        .def("run", [](PyWorker& w, const PyHostProgram& p, const py::iterable& args) {
                auto run = Start(w, p, args, "Worker.run");
                return Finish(*run);
            }, py::arg("program"), py::arg("args"),
            "Runs the program (GIL released while waiting): every argument (in place; returns the output arrays) or "
            "the inputs only (return style: new arrays). One output: the array; several: a tuple.")
        .def("submit", [](PyWorker& w, const PyHostProgram& p, const py::iterable& args) { return Start(w, p, args, "Worker.submit"); },
             py::arg("program"), py::arg("args"), "Starts a run; returns a RunHandle (wait(), done()).")
        .def_property_readonly("device_count", [](PyWorker& w) { return w.Get("Worker.device_count").device_count(); })
        .def("describe_device", [](PyWorker& w, const IntArg<size_t>& i) {
                return w.Get("Worker.describe_device").DescribeDevice(i.In("Worker.describe_device: index"));
            },
             py::arg("index"))
        .def("chip_tasks_at_once", [](PyWorker& w, const IntArg<size_t>& i) {
                return w.Get("Worker.chip_tasks_at_once").ChipTasksAtOnce(i.In("Worker.chip_tasks_at_once: index"));
            },
             py::arg("index"))
        .def("stats", [](PyWorker& w, const IntArg<size_t>& i) {
                Worker::DeviceStats s = w.Get("Worker.stats").Stats(i.In("Worker.stats: index"));
                py::dict d;
                d["chip_tasks"] = s.chip_tasks;
                d["bytes_uploaded"] = s.moved.bytes_uploaded;
                d["bytes_reused"] = s.moved.bytes_reused;
                d["bytes_checked"] = s.moved.bytes_checked;
                d["bytes_downloaded"] = s.moved.bytes_downloaded;
                return d;
            }, py::arg("device"))
        .def_property_readonly("config", [](PyWorker& w) { return w.Get("Worker.config").config(); })
        .def_property_readonly("closed", [](PyWorker& w) { return !w.worker || w.closing; })
        .def("close", [](PyWorker& w) { w.Close(); }, "Waits for the runs in flight, then stops the threads.")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](PyWorker& w, py::object, py::object, py::object) {
            w.Close();
            return false;
        });

    // The C++ baseline of the host-level dispatch benchmark (python/bench).
    py::module_ b = m.attr("_bench");
    b.def("host_dispatch", [](PyWorker& w, int runs, int tasks) {
        Worker& worker = w.Get("_bench.host_dispatch");
        HostTensor a = HostTensor::Zeros({8}), out = HostTensor::Zeros({8});
        HostProgram p{"bench_empty", 1, {{{8}}}, [tasks](HostGraph& g, std::span<const HostTensor> x) {
                          for (int i = 0; i < tasks; ++i) g.Chip("chip_empty", {In(x[0])});
                      }};
        py::gil_scoped_release release;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < runs; ++r) worker.Run(p, {a, out});
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / runs;
    }, py::arg("worker"), py::arg("runs"), py::arg("tasks"),
    "Mean us per Worker::Run of a program of `tasks` chip tasks of 'chip_empty' (registered by the caller), "
    "from C++: the baseline beside the same runs from Python.");
}

}  // namespace spyre::python
