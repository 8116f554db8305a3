// SPDX-License-Identifier: Apache-2.0
// Seed 004's orchestration runtime from Python: spyre.Orchestrator over
// spyre::Orchestrator (spyre/orchestration.hpp). Buffers are numpy views on
// the runtime's mapping of device memory (no copy); a task parameter is
// (kind, array-or-None-or-address, size). Host kernels are Python callables
// run on the runtime's host workers with the GIL taken; a raising one fails
// its task (the runtime records what it raised, per task) and wait_all
// raises spyre.TaskFailed with the Python message. Device faults raise
// spyre.DeviceError with task_id, kernel_id, device_code, failures, skipped.
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "errors.hpp"
#include "host_buffer.hpp"
#include "int_arg.hpp"
#include "orch_objects.hpp"

namespace spyre::python {

namespace {

int32_t ParamKind(py::handle k) {
    if (py::isinstance<py::str>(k)) {
        const std::string s = k.cast<std::string>();
        if (s == "in" || s == "input") return PARAM_INPUT;
        if (s == "out" || s == "output") return PARAM_OUTPUT;
        if (s == "inout") return PARAM_INOUT;
        throw Error(ErrorKind::InvalidArgument,
                    "task parameter kind '" + s + "' is not one of in/input, out/output, inout");
    }
    const int v = k.cast<int>();
    if (v != PARAM_INPUT && v != PARAM_OUTPUT && v != PARAM_INOUT)
        throw Error(ErrorKind::InvalidArgument, "task parameter kind " + std::to_string(v) +
                                                    " is not PARAM_INPUT (0), PARAM_OUTPUT (1) or PARAM_INOUT (2)");
    return v;
}

// (kind, buffer, size) entries -> TaskParams; `implicit` gets the sizes of
// implicit outputs (buffer None).
std::vector<TaskParam> ParseParams(const py::iterable& params, std::vector<uint64_t>& implicit) {
    std::vector<TaskParam> out;
    size_t i = 0;
    for (py::handle entry : params) {
        const std::string what = "submit: parameter " + std::to_string(i++);
        // A tuple or list only: tuple() of a numpy array is its elements
        // ("got 256 items" for a buffer passed bare).
        if (!py::isinstance<py::tuple>(entry) && !py::isinstance<py::list>(entry))
            throw Error(ErrorKind::InvalidArgument,
                        what + ": expected a (kind, buffer[, size]) tuple, got " + ATypeName(entry));
        const py::tuple t(py::reinterpret_borrow<py::object>(entry));
        if (t.size() < 2 || t.size() > 3)
            throw Error(ErrorKind::InvalidArgument, what + ": expected (kind, buffer[, size]), got " +
                                                        std::to_string(t.size()) + " items");
        TaskParam p{};
        p.kind = ParamKind(t[0]);
        std::optional<uint64_t> size;
        if (t.size() == 3 && !t[2].is_none()) size = IntOf<uint64_t>(t[2], what + ": size");
        py::handle buf = t[1];
        if (buf.is_none()) {
            if (p.kind != PARAM_OUTPUT)
                throw Error(ErrorKind::InvalidArgument, what + ": only an output may have no buffer (implicit output)");
            if (!size) throw Error(ErrorKind::InvalidArgument, what + ": an implicit output needs its size");
            implicit.push_back(*size);
        } else if (py::isinstance<py::int_>(buf)) {
            p.buffer = reinterpret_cast<void*>(IntOf<uintptr_t>(buf, what + ": address"));
            if (!size) throw Error(ErrorKind::InvalidArgument, what + ": an address needs a size");
        } else {
            HostView v = ViewOf(buf, p.kind != PARAM_INPUT, what);
            p.buffer = v.data;
            if (size && *size > v.bytes)
                throw Error(ErrorKind::InvalidArgument, what + ": size " + std::to_string(*size) +
                                                            " is larger than the array (" + std::to_string(v.bytes) +
                                                            " bytes)");
            if (!size) size = v.bytes;
        }
        p.size = *size;
        out.push_back(p);
    }
    return out;
}

void* AddressOf(py::handle obj, const char* what) {
    if (py::isinstance<py::int_>(obj)) return reinterpret_cast<void*>(IntOf<uintptr_t>(obj, std::string(what) + ": address"));
    return ViewOf(obj, false, what).data;
}

// The runtime's cause of a host kernel that threw. Every host kernel of a
// Python Orchestrator is a Python callable: one that threw raised (or
// returned what is no status), and its message follows the prefix.
constexpr std::string_view kThrewPrefix = "host kernel threw: ";

bool PythonKernelRaised(const TaskFailureInfo& f) {
    return f.kind == ErrorKind::TaskFailed && std::string_view(f.cause).starts_with(kThrewPrefix);
}

// The failure's cause as Python reports it: a Python kernel's message
// without the runtime's prefix.
std::string CauseOf(const TaskFailureInfo& f) {
    return PythonKernelRaised(f) ? f.cause.substr(kThrewPrefix.size()) : f.cause;
}

py::dict FailureDict(const TaskFailureInfo& f) {
    const bool raised = PythonKernelRaised(f);
    py::dict d;
    d["task_id"] = f.task_id;
    d["kernel_id"] = f.kernel_id;
    d["skipped"] = f.skipped;
    d["root_task_id"] = f.root_task_id;
    d["root_kernel_id"] = f.root_kernel_id;
    d["device_code"] = raised ? kPythonKernelRaised : f.device_code;
    d["kind"] = py::str(ToPython(Error(f.kind, "")).attr("kind"));
    d["cause"] = CauseOf(f);
    return d;
}

// A task's failure (a device fault, or a host kernel that raised), which
// names its task; anything else is raised as it is.
bool IsTaskFailure(const Error& e) {
    return (e.kind() == ErrorKind::DeviceError || e.kind() == ErrorKind::TaskFailed) && e.context().op_index;
}

// Raises what WaitAll threw, as TaskFailed (a Python host kernel raised) or
// the error's own kind, with the failed task, its kernel, every failure and
// the skipped tasks as attributes.
[[noreturn]] void RaiseWaitError(const Error& e, const std::vector<TaskFailureInfo>& failures) {
    if (!IsTaskFailure(e)) throw e;
    const int32_t root = e.context().op_index ? int32_t(*e.context().op_index) : -1;
    int32_t kernel = -1;
    const TaskFailureInfo* root_failure = nullptr;
    py::list all, skipped;
    for (const TaskFailureInfo& f : failures) {
        if (int64_t(f.task_id) == root && !f.skipped) kernel = f.kernel_id, root_failure = &f;
        all.append(FailureDict(f));
        if (f.skipped) skipped.append(f.task_id);
    }
    if (kernel < 0)
        for (const TaskFailureInfo& f : failures)
            if (f.root_task_id == root) kernel = f.root_kernel_id;
    if (kernel < 0 && e.context().kernel_id) kernel = *e.context().kernel_id;
    Error out = e;
    if (e.kind() == ErrorKind::TaskFailed) {
        // The runtime names the Python error as what the kernel threw; the
        // counts are what it adds.
        const size_t failed = size_t(std::count_if(failures.begin(), failures.end(),
                                                   [](const TaskFailureInfo& f) { return !f.skipped; }));
        const std::string cause = root_failure ? CauseOf(*root_failure) : e.message();
        out = Error(ErrorKind::TaskFailed,
                    "task " + std::to_string(root) + " (kernel " + std::to_string(kernel) + "): " + cause + " (" +
                        std::to_string(std::max<size_t>(failed, 1)) + " task(s) failed, " +
                        std::to_string(py::len(skipped)) + " dependent task(s) skipped)",
                    e.context());
    }
    py::object exc = ToPython(out);
    exc.attr("task_id") = root;
    exc.attr("kernel_id") = kernel;
    // The marker the docs name for a Python kernel's failure; the message's
    // context names no code for it (the runtime saw an exception).
    if (e.kind() == ErrorKind::TaskFailed) exc.attr("device_code") = kPythonKernelRaised;
    exc.attr("failures") = all;
    exc.attr("skipped") = skipped;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    throw py::error_already_set();
}

// A failure throws: the runtime keeps the message in the task's own
// failure record, which wait_all, failures() and a chip task's error read
// (a kernel of a chip task's Orchestrator outlives that call's PyOrch, so
// it keeps no pointer to it).
HostKernel MakeHostKernel(const std::shared_ptr<PyOrch>& owner, int32_t kernel_id, py::function fn, py::object dtype) {
    PyOrch* self = owner.get();
    ViewDType(dtype, "Orchestrator.register_host_kernel");  // refused now, not at each run
    auto keep = KeepAlive(fn);
    auto keep_dt = KeepAlive(dtype);
    PyObject* raw = fn.ptr();
    PyObject* raw_dt = dtype.ptr();
    // The views' base keeps the runtime's mapping: one kept past close()
    // then reads zeros (it was a segfault); one kept past its task reaches
    // the buffer as long as the task's buffer lives (pto_free, the scope).
    py::object base = ViewOwner(py::none(), self->Get("Orchestrator.register_host_kernel").MemoryHold());
    auto keep_base = KeepAlive(base);
    PyObject* raw_base = base.ptr();
    // Fails the task with `message`: the runtime keeps what a kernel threw
    // in the task's own failure record.
    auto fail = [](const std::string& message) -> uint32_t { throw std::runtime_error(message); };
    const void* device = self->slot.get();  // null for a chip task's runtime
    return [fail, kernel_id, keep, keep_dt, keep_base, raw, raw_dt, raw_base, device](std::span<void* const> buffers,
                                                         std::span<const uint64_t> sizes) -> uint32_t {
        const RuntimeCall call;
        if (!call) return kPythonKernelRaised;
        const ThreadMark mark(t_kernel_device, device);
        const std::vector<int32_t> kinds = Orchestrator::RunningHostTaskParamKinds();
        py::gil_scoped_acquire gil;
        try {
            py::tuple args(buffers.size());
            for (size_t i = 0; i < buffers.size(); ++i) {
                py::array view = DeviceView(buffers[i], sizes[i], raw_dt, py::none(),
                                            py::reinterpret_borrow<py::object>(raw_base),
                                            "host kernel " + std::to_string(kernel_id));
                // Other tasks may read an input at the same time, and a chip
                // call's In argument may be a device copy kept for later runs.
                if (i < kinds.size() && kinds[i] == PARAM_INPUT) view.attr("flags").attr("writeable") = false;
                args[i] = std::move(view);
            }
            py::object r = py::handle(raw)(*args);
            if (r.is_none()) return 0;
            // Anything but an int that fits the task's status fails it: a
            // returned message ("error: ...") used to pass as success.
            const std::string what = "host kernel " + std::to_string(kernel_id) + " returned ";
            // An int, or what stands for one (numpy.int64); a numpy array's
            // __index__ raises: it is no status either.
            const py::object index = IndexOf(r);
            if (!index)
                throw Error(ErrorKind::TaskFailed, what + TextOf(py::type::handle_of(r).attr("__name__")) + " " +
                                                       ShortRepr(r) + ", not an int status or None");
            const py::int_ status = py::reinterpret_borrow<py::int_>(index);
            if (status < py::int_(0) || status > py::int_(UINT32_MAX))
                throw Error(ErrorKind::TaskFailed, what + py::repr(status).cast<std::string>() +
                                                       ", outside a task status (0 .. 2**32-1)");
            return status.cast<uint32_t>();
        } catch (py::error_already_set& e) {
            return fail(FromPython(e, "host kernel " + std::to_string(kernel_id)).message());
        } catch (const Error& e) {
            return fail(e.message());
        }
    };
}

struct PyScope {
    std::shared_ptr<PyOrch> orch;
    std::optional<Orchestrator::Scope> scope;
};

ReadyQueueKind QueueKind(const std::string& s) {
    if (s == "lockfree" || s == "lock_free" || s == "LockFree") return ReadyQueueKind::LockFree;
    if (s == "locked" || s == "Locked") return ReadyQueueKind::Locked;
    throw Error(ErrorKind::InvalidArgument, "Orchestrator: ready_queues '" + s + "' is not 'lockfree' or 'locked'");
}

void WaitAll(PyOrch& self) {
    const RuntimeHold hold(self, "Orchestrator.wait_all");
    Orchestrator& o = *hold;
    std::vector<TaskFailureInfo> snapshot;
    try {
        // Ctrl-C ends the wait (KeyboardInterrupt), the tasks go on; then
        // the wait below reports at once.
        WaitHandlingSignals([&](std::chrono::nanoseconds slice) { return o.WaitAllFor(slice); });
        WithoutGil([&] {
            o.WaitAll([&](const ProgressInfo& p) {
                if (p.done == p.total) snapshot = o.Failures();
            });
        });
    } catch (const Error& e) {
        RaiseWaitError(e, snapshot);
    }
}

// Waits for the tasks in flight (Ctrl-C ends the wait: KeyboardInterrupt,
// the runtime stays open), then frees the runtime, which waits for what is
// left (a closing runtime's tasks, EXTERNAL ones it fails).
void Close(PyOrch& self) {
    if (self.orch) {
        try {
            const RuntimeHold hold(self, "Orchestrator.close");
            Orchestrator& o = *hold;
            WaitHandlingSignals([&](std::chrono::nanoseconds slice) { return o.WaitAllFor(slice); });
        } catch (const Error&) {
            // Nothing to wait for that can end by itself (Busy), or closed
            // meanwhile: the release below settles it.
        }
    }
    self.Release();
}

}  // namespace

py::dtype ViewDType(py::handle dtype, const std::string& what) {
    py::dtype dt;
    try {
        dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
    } catch (py::error_already_set& e) {  // numpy's TypeError for what is no dtype
        if (!e.matches(PyExc_TypeError)) throw;
        throw Error(ErrorKind::InvalidArgument, what + ": " + py::repr(dtype).cast<std::string>() + " is not a dtype (" +
                                                    std::string(py::str(e.value())) + ")");
    }
    // The view is the runtime's raw memory: an element must be plain bytes
    // of a fixed size (an object dtype would read them as pointers).
    if (dt.attr("hasobject").cast<bool>() || dt.itemsize() <= 0)
        throw Error(ErrorKind::InvalidArgument,
                    what + ": dtype " + py::str(dt).cast<std::string>() +
                        (dt.itemsize() <= 0 ? " has no size" : " holds Python objects") +
                        "; a view of device memory takes a plain numeric dtype");
    return dt;
}

py::object ViewOwner(py::object owner, std::shared_ptr<const void> memory, std::shared_ptr<const void> call) {
    struct Held {
        py::object owner;
        std::shared_ptr<const void> memory, call;
    };
    return py::capsule(new Held{std::move(owner), std::move(memory), std::move(call)},
                       [](void* p) { delete static_cast<Held*>(p); });
}

py::array DeviceView(void* data, uint64_t bytes, py::handle dtype, py::object shape, py::object base,
                     const std::string& what) {
    const py::dtype dt = ViewDType(dtype, what);
    const uint64_t item = uint64_t(dt.itemsize());
    std::vector<py::ssize_t> dims;
    if (shape.is_none()) {
        dims.push_back(py::ssize_t(bytes / item));
    } else {
        uint64_t n = item;
        bool too_large = false;
        for (py::handle d : py::iterable(shape)) {
            dims.push_back(d.cast<py::ssize_t>());
            if (dims.back() < 0)
                throw Error(ErrorKind::InvalidArgument, what + ": shape dimension " + std::to_string(dims.size() - 1) +
                                                            " is " + std::to_string(dims.back()));
            too_large |= __builtin_mul_overflow(n, uint64_t(dims.back()), &n);
        }
        if (too_large || n > bytes)
            throw Error(ErrorKind::InvalidArgument,
                        what + ": the shape spans " + (too_large ? std::string("more than 2^64") : std::to_string(n)) +
                            " bytes, more than the buffer (" + std::to_string(bytes) + " bytes)");
    }
    return NumpyView(dt, dims, data, base, what);
}

namespace {

}  // namespace

// A device_alloc() buffer as long as a view of it lives: device_free() gives
// the memory back once the last view goes. Freed at once, a view kept past
// the free wrote into the next allocation at that address (found probing
// from outside).
struct DeviceBlock {
    std::weak_ptr<PyOrch> owner;
    void* at = nullptr;
    uint64_t bytes = 0;       // of the view device_alloc() returned
    bool free_asked = false;  // under the GIL
    ~DeviceBlock() {
        if (!free_asked) return;  // never freed: the runtime frees it when it closes
        if (const std::shared_ptr<PyOrch> o = owner.lock()) {
            try {
                o->Share("Orchestrator.device_free")->DeviceFree(at);
            } catch (const Error&) {
                // Closed meanwhile (its memory went with it), or refused:
                // the runtime frees it when it closes.
            }
        }
    }
};

namespace {

// alloc() and device_alloc(): `size` bytes from `take` as a numpy view
// that keeps the mapping; a shape the view refuses gives them back.
py::array MemoryView(py::object self_obj, const IntArg<uint64_t>& size_arg, py::object dtype, py::object shape,
                     const std::string& what, void* (Orchestrator::*take)(uint64_t), void (Orchestrator::*give)(void*)) {
    PyOrch& self = self_obj.cast<PyOrch&>();
    const uint64_t size = size_arg.In(what + ": size");
    const RuntimeHold hold(self, what.c_str());
    Orchestrator& o = *hold;
    ViewDType(dtype, what);  // before the memory is taken
    void* p = WithoutGil([&] { return (o.*take)(size); });
    try {
        py::object base = ViewOwner(self_obj, o.MemoryHold(), self.call_views);
        std::shared_ptr<DeviceBlock> block;
        if (take == &Orchestrator::DeviceMalloc) {
            block = std::make_shared<DeviceBlock>();
            block->owner = self_obj.cast<std::shared_ptr<PyOrch>>();
            block->at = p;
            {
                std::lock_guard lock(self.mu);
                std::erase_if(self.device_blocks, [](const auto& kv) { return kv.second.expired(); });
                self.device_blocks[p] = block;
            }
            base = py::make_tuple(base, py::capsule(new std::shared_ptr<DeviceBlock>(block), [](void* b) {
                                      delete static_cast<std::shared_ptr<DeviceBlock>*>(b);
                                  }));
        }
        py::array view = DeviceView(p, size, dtype, shape, base, what);
        if (block) block->bytes = uint64_t(view.nbytes());
        return view;
    } catch (...) {
        (o.*give)(p);
        throw;
    }
}

// device_free(): a buffer device_alloc() handed out goes back once its last
// view goes (the one given here too); anything else at once.
void DeviceFree(PyOrch& self, py::handle buffer) {
    void* p = AddressOf(buffer, "Orchestrator.device_free");
    Orchestrator& o = self.Get("Orchestrator.device_free");
    std::shared_ptr<DeviceBlock> block;
    {
        std::lock_guard lock(self.mu);
        if (auto it = self.device_blocks.find(p); it != self.device_blocks.end()) block = it->second.lock();
    }
    if (!block) return o.DeviceFree(p);
    // A slice at the buffer's start names only part of it: freeing the
    // whole buffer through it freed memory the rest of the program still
    // used (found probing from outside).
    if (!py::isinstance<py::int_>(buffer)) {
        const uint64_t given = ViewOf(buffer, false, "Orchestrator.device_free").bytes;
        if (given < block->bytes)
            throw Error(ErrorKind::InvalidArgument, "Orchestrator.device_free: a view of " + std::to_string(given) +
                                                        " of the buffer's " + std::to_string(block->bytes) +
                                                        " bytes (pass the array device_alloc() returned, or its address)");
    }
    if (block->free_asked)
        throw Error(ErrorKind::InvalidArgument, "Orchestrator.device_free: the buffer at device address " +
                                                    std::to_string(o.DeviceAddress(p)) +
                                                    " was freed already (its views keep it until they go)");
    block->free_asked = true;
}

}  // namespace

void BindOrchestration(py::module_& m) {
    m.attr("PARAM_INPUT") = int(PARAM_INPUT);
    m.attr("PARAM_OUTPUT") = int(PARAM_OUTPUT);
    m.attr("PARAM_INOUT") = int(PARAM_INOUT);
    m.attr("WORKER_CUBE") = int(WORKER_CUBE);
    m.attr("WORKER_VECTOR") = int(WORKER_VECTOR);
    m.attr("WORKER_HOST") = int(WORKER_HOST);
    m.attr("WORKER_EXTERNAL") = int(WORKER_EXTERNAL);
    m.attr("PTO_TASK_PENDING") = int(PTO_TASK_PENDING);
    m.attr("PTO_TASK_READY") = int(PTO_TASK_READY);
    m.attr("PTO_TASK_RUNNING") = int(PTO_TASK_RUNNING);
    m.attr("PTO_TASK_COMPLETED") = int(PTO_TASK_COMPLETED);
    m.attr("PTO_TASK_CONSUMED") = int(PTO_TASK_CONSUMED);
    m.attr("PYTHON_KERNEL_RAISED") = kPythonKernelRaised;

    py::class_<PyScope>(m, "OrchestrationScope",
                        "pto_scope_begin on __enter__, pto_scope_end on __exit__ (the GIL released); failures of its tasks are raised by wait_all.")
        .def("__enter__", [](py::object self) {
            PyScope& s = self.cast<PyScope&>();
            if (s.scope) throw Error(ErrorKind::InvalidArgument, "OrchestrationScope: already entered");
            s.scope.emplace(s.orch->Get("Orchestrator.scope").BeginScope());
            return self;
        })
        .def("__exit__", [](PyScope& s, py::object, py::object, py::object) {
            // As C++'s second Scope::End(): a scope ends once.
            if (!s.scope)
                throw Error(ErrorKind::InvalidArgument, "OrchestrationScope: __exit__ of a scope not entered (or already exited)");
            if (!s.orch->orch) {  // the runtime went first: nothing to end
                s.scope.reset();
                return false;
            }
            // Ends the scope; a failed task of it is reported by wait_all (with
            // the task, kernel, code, failures and skipped tasks), not here.
            // Out of order (an inner scope still open) it raises
            // InvalidArgument and stays entered: it used to be dropped
            // unended, holding the ring for good.
            const RuntimeHold hold(*s.orch, "Orchestrator.scope");
            WithoutGil([&] {
                try {
                    s.scope->End();
                } catch (const Error& e) {
                    if (!IsTaskFailure(e)) throw;
                }
            });
            s.scope.reset();
            return false;
        });

    py::class_<PyOrch, std::shared_ptr<PyOrch>>(m, "Orchestrator",
        "Seed 004's orchestration runtime on a Device (spyre::Orchestrator). Buffers are numpy views on the "
        "device memory the runtime maps (no copy), valid while the Orchestrator and its device are open. "
        "submit() takes parameters as (kind, buffer, size): kind PARAM_INPUT/OUTPUT/INOUT or 'in'/'out'/'inout', "
        "buffer a view from alloc()/task_output() (a slice selects a region), None for an implicit output, or "
        "an address; size defaults to the view's bytes. Blocking calls release the GIL; host kernels take it.")
        .def(py::init([](const SlotPtr& slot, const IntArg<int32_t>& task_ring_size_arg, const IntArg<uint64_t>& heap_size,
                         const IntArg<unsigned>& host_threads,
                         const std::string& ready_queues, const std::optional<IntList<uint32_t>>& task_queues) {
                 Device& dev = DeviceOf(slot, "Orchestrator");
                 const int32_t task_ring_size = task_ring_size_arg.In("Orchestrator: task_ring_size");
                 OrchestratorOptions o;
                 o.task_ring_size = task_ring_size;
                 o.heap_size = heap_size.In("Orchestrator: heap_size");
                 o.host_threads = host_threads.In("Orchestrator: host_threads");
                 o.ready_queues = QueueKind(ready_queues);
                 if (task_queues) o.task_queues = *task_queues;
                 auto p = std::make_shared<PyOrch>();
                 p->slot = slot;
                 p->ring_size = task_ring_size;
                 p->runtime = std::make_shared<OwnedRuntime>();
                 p->runtime->device = slot->shared();
                 try {
                     p->runtime->orch =
                         WithoutGil([&] { return std::make_unique<Orchestrator>(Orchestrator::Create(dev, o)); });
                 } catch (const Error& e) {
                     // In Python the holder is most often an earlier
                     // Orchestrator kept alive by its views after `del`.
                     if (e.kind() != ErrorKind::Busy || e.message().find("held by another Orchestrator") == std::string::npos)
                         throw;
                     throw Error(ErrorKind::Busy,
                                 e.message() + " (task_queues= here); an Orchestrator's alloc()/task_output() views "
                                               "keep it alive after `del`",
                                 e.context());
                 }
                 p->orch = p->runtime->orch.get();
                 slot->Adopt(p);
                 return p;
             }),
             py::arg("device"), py::kw_only(), py::arg("task_ring_size") = 1024, py::arg("heap_size") = 64ull << 20,
             py::arg("host_threads") = 0, py::arg("ready_queues") = "lockfree", py::arg("task_queues") = py::none(),
             "Orchestrator::Create: a task ring of task_ring_size slots and a heap ring of heap_size bytes of the "
             "device's memory; ready_queues 'lockfree' or 'locked'; task_queues the core groups it takes (None: all).")
        .def("register_device_kernel", [](PyOrch& self, const IntArg<int32_t>& kernel_id_arg, py::object program) {
                self.Get("Orchestrator.register_device_kernel");
                const int32_t kernel_id = kernel_id_arg.In("Orchestrator.register_device_kernel: kernel_id");
                if (!self.slot)
                    throw Error(ErrorKind::InvalidArgument,
                                "register_device_kernel: a chip task's runtime takes the Worker's kernels (Worker.register_kernel)");
                if (py::hasattr(program, "program")) program = program.attr("program");
                HostView v = ViewOf(program, false, "register_device_kernel: program");
                if (v.bytes == 0) throw Error(ErrorKind::InvalidArgument, "register_device_kernel: empty program");
                Device& dev = self.slot->Get("Orchestrator.register_device_kernel");
                DeviceBuffer buf = dev.AllocateBuffer(v.bytes);
                WithoutGil([&] {
                    dev.default_stream().CopyToDevice(v.data, buf.handle(), v.bytes);
                    dev.default_stream().Synchronize();
                });
                // Again: another thread may have closed it while the GIL was let go.
                self.Get("Orchestrator.register_device_kernel")
                    .RegisterDeviceKernel(kernel_id, dev.allocator().DeviceAddress(buf.handle(), v.bytes));
                self.runtime->programs.push_back(std::move(buf));
            }, py::arg("kernel_id"), py::arg("program"),
            "Uploads `program` (a BuiltKernel or its bytes) to the device and runs it for tasks of kernel_id on "
            "WORKER_CUBE/WORKER_VECTOR: its operands are the task's parameters in order.")
        .def("register_host_kernel", [](const std::shared_ptr<PyOrch>& self, const IntArg<int32_t>& kernel_id_arg, py::object fn,
                                        py::object dtype) {
                const int32_t kernel_id = kernel_id_arg.In("Orchestrator.register_host_kernel: kernel_id");
                self->Get("Orchestrator.register_host_kernel")
                    .RegisterHostKernel(kernel_id, MakeHostKernel(self, kernel_id,
                                                                  CallableArg(fn, "Orchestrator.register_host_kernel"), dtype));
            }, py::arg("kernel_id"), py::arg("fn"), py::arg("dtype") = py::dtype("float32"),
            "fn(*buffers) runs on a host worker (with the GIL; or inside submit when its runs average under a "
            "microsecond, which a Python function does not) for tasks of kernel_id: one 1-D numpy view of "
            "`dtype` per parameter, on the task's memory, valid during the call only. Returning a non-zero int, "
            "anything but an int or None, or raising, fails the task (wait_all raises TaskFailed with the Python "
            "message).")
        .def("scope", [](const std::shared_ptr<PyOrch>& self) {
                self->Get("Orchestrator.scope");
                return PyScope{self, std::nullopt};
            }, "A context manager: pto_scope_begin ... pto_scope_end.")
        .def("submit", [](PyOrch& self, const IntArg<int32_t>& kernel_id_arg, const IntArg<int32_t>& worker_type_arg,
                          const py::iterable& params) {
                const int32_t kernel_id = kernel_id_arg.In("Orchestrator.submit: kernel_id");
                const int32_t worker_type = worker_type_arg.In("Orchestrator.submit: worker_type");
                const RuntimeHold hold(self, "Orchestrator.submit");
                Orchestrator& o = *hold;
                std::vector<uint64_t> implicit;
                std::vector<TaskParam> p = ParseParams(params, implicit);
                const int32_t id = WithoutGil([&] { return o.Submit(kernel_id, worker_type, p); });
                if (!implicit.empty()) {
                    std::lock_guard lock(self.mu);
                    self.implicit_sizes[id] = std::move(implicit);
                    if (self.implicit_sizes.size() > size_t(4 * self.ring_size))
                        self.implicit_sizes.erase(self.implicit_sizes.begin(),
                                                  self.implicit_sizes.lower_bound(id - 2 * self.ring_size));
                }
                return id;
            }, py::arg("kernel_id"), py::arg("worker_type"), py::arg("params"),
            "pto_submit_task: returns the task id. Dependencies come from the regions the parameters name.")
        .def("alloc", [](py::object self_obj, const IntArg<uint64_t>& size, py::object dtype, py::object shape) {
                return MemoryView(self_obj, size, dtype, shape, "Orchestrator.alloc", &Orchestrator::Alloc, &Orchestrator::Free);
            }, py::arg("size"), py::arg("dtype") = py::dtype("float32"), py::arg("shape") = py::none(),
            "pto_alloc: `size` bytes of the heap ring as a numpy view (1-D of dtype, or `shape`).")
        .def("free", [](PyOrch& self, py::object buffer) {
                self.Get("Orchestrator.free").Free(AddressOf(buffer, "Orchestrator.free"));
            }, py::arg("buffer"), "pto_free: no more tasks will reference the buffer alloc() returned.")
        .def("device_alloc", [](py::object self_obj, const IntArg<uint64_t>& size, py::object dtype, py::object shape) {
                return MemoryView(self_obj, size, dtype, shape, "Orchestrator.device_alloc", &Orchestrator::DeviceMalloc,
                                  &Orchestrator::DeviceFree);
            }, py::arg("size"), py::arg("dtype") = py::dtype("float32"), py::arg("shape") = py::none(),
            "pto_device_malloc: `size` zeroed bytes of the function's allocator, outside the heap ring, as a numpy "
            "view: for inputs and results that outlive a scope (a long-lived alloc() pins the heap ring).")
        .def("device_free", [](PyOrch& self, py::object buffer) { DeviceFree(self, buffer); }, py::arg("buffer"),
             "pto_device_free: frees what device_alloc() returned once no view of it is left (this one included); "
             "tasks must be done with it.")
        .def("task_output", [](py::object self_obj, const IntArg<int32_t>& task_id_arg, const IntArg<int32_t>& index_arg,
                               py::object dtype, py::object shape) {
                PyOrch& self = self_obj.cast<PyOrch&>();
                const int32_t task_id = task_id_arg.In("Orchestrator.task_output: task_id");
                const int32_t index = index_arg.In("Orchestrator.task_output: index");
                Orchestrator& o = self.Get("Orchestrator.task_output");
                ViewDType(dtype, "Orchestrator.task_output");
                void* p = o.TaskOutput(task_id, index);
                uint64_t bytes = 0;
                {
                    std::lock_guard lock(self.mu);
                    auto it = self.implicit_sizes.find(task_id);
                    if (it != self.implicit_sizes.end() && size_t(index) < it->second.size()) bytes = it->second[size_t(index)];
                }
                if (bytes == 0)
                    throw Error(ErrorKind::InvalidArgument, "task_output: task " + std::to_string(task_id) +
                                                                " has no implicit output " + std::to_string(index));
                return DeviceView(p, bytes, dtype, shape, ViewOwner(self_obj, o.MemoryHold(), self.call_views), "Orchestrator.task_output");
            }, py::arg("task_id"), py::arg("index") = 0, py::arg("dtype") = py::dtype("float32"), py::arg("shape") = py::none(),
            "pto_task_output: implicit output `index` of a live task, as a numpy view (pass it to later tasks).")
        .def("complete", [](PyOrch& self, const IntArg<int32_t>& id) {
                self.Get("Orchestrator.complete").Complete(id.In("Orchestrator.complete: task_id"));
            }, py::arg("task_id"),
             "pto_task_complete for a WORKER_EXTERNAL task.")
        .def("fail", [](PyOrch& self, const IntArg<int32_t>& id, const IntArg<uint32_t>& code) {
                self.Get("Orchestrator.fail").Fail(id.In("Orchestrator.fail: task_id"), code.In("Orchestrator.fail: error_code"));
            },
             py::arg("task_id"), py::arg("error_code"), "Fails a WORKER_EXTERNAL task with a device code.")
        .def("task_state", [](PyOrch& self, const IntArg<int32_t>& id) {
                return self.Get("Orchestrator.task_state").TaskState(id.In("Orchestrator.task_state: task_id"));
            },
             py::arg("task_id"), "PTO_TASK_* of a task.")
        .def("failures", [](PyOrch& self) {
                py::list l;
                for (const TaskFailureInfo& f : self.Get("Orchestrator.failures").Failures()) l.append(FailureDict(f));
                return l;
            }, "Failed and skipped tasks not yet reported by wait_all (dicts).")
        .def("wait_all", [](PyOrch& self) { WaitAll(self); },
             "Waits (GIL released) for every task; raises DeviceError (a device fault) or TaskFailed (a Python host "
             "kernel raised) with task_id, kernel_id, device_code, failures (dicts) and skipped (task ids).")
        .def("run", [](py::object self_obj, py::function fn, py::args args) {
                auto self = self_obj.cast<std::shared_ptr<PyOrch>>();
                const RuntimeHold hold(*self, "Orchestrator.run");
                Orchestrator& o = *hold;
                // pto_run's rules (no scope of its own, the function's
                // scopes its own, the failed calls it ignored reported):
                // Orchestrator::Run with the GIL released, taken again
                // around the Python function.
                struct Call {
                    py::object self;
                    py::function fn;
                    py::args args;
                    bool interrupted = false;  // fn raised KeyboardInterrupt
                } call{self_obj, fn, args};
                uint64_t raw[] = {uint64_t(uintptr_t(&call))};
                std::vector<TaskFailureInfo> snapshot;
                const pto_orchestration_fn run_fn = [](Runtime*, uint64_t* a) {
                    auto* c = reinterpret_cast<Call*>(uintptr_t(a[0]));
                    py::gil_scoped_acquire gil;
                    try {
                        RefuseUnrunBody(c->fn(c->self, *c->args), "Orchestrator.run: the function");
                    } catch (py::error_already_set& e) {
                        c->interrupted = e.matches(PyExc_KeyboardInterrupt);
                        throw;
                    }
                };
                const ProgressCallback progress = [&](const ProgressInfo& p) {
                    if (p.done == p.total) snapshot = o.Failures();
                };
                // On the main thread the wait for fn's tasks looks for
                // Ctrl-C as wait_all does, and a Ctrl-C that ended fn ends
                // it too: KeyboardInterrupt, the tasks go on.
                struct Stop {};
                const Orchestrator::WaitSlices slices{kSignalLook, [&] {
                    py::gil_scoped_acquire gil;
                    if (call.interrupted) throw Stop{};
                    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
                }};
                try {
                    const bool main = OnMainThread();
                    WithoutGil([&] {
                        if (main)
                            o.Run(run_fn, raw, progress, slices);
                        else
                            o.Run(run_fn, raw, progress);
                    });
                } catch (const Error& e) {
                    RaiseWaitError(e, snapshot);
                }
            }, py::arg("fn"),
            "fn(orchestrator, *args), then wait_all, as pto_run: no scope of its own (a loop of scopes in fn "
            "streams through the rings), scopes fn leaves open ended for it, and the first call of fn that "
            "failed raised even if fn went on.")
        .def("device_address", [](PyOrch& self, py::object b) {
                return self.Get("Orchestrator.device_address").DeviceAddress(AddressOf(b, "Orchestrator.device_address"));
            }, py::arg("buffer"))
        .def_property_readonly("memory_size", [](PyOrch& self) { return self.Get("Orchestrator.memory_size").memory_size(); })
        .def_property_readonly("closed", [](PyOrch& self) { return self.orch == nullptr; })
        .def("close", [](PyOrch& self) { Close(self); },
             "Waits for the tasks on executors and frees the runtime; views from it must not be used after. "
             "Ctrl-C ends the wait (KeyboardInterrupt) and leaves the Orchestrator open.")
        .def("__enter__", [](py::object self) { return self; })
        .def("__exit__", [](PyOrch& self, py::object, py::object, py::object) {
            Close(self);
            return false;
        });
}

}  // namespace spyre::python
