// SPDX-License-Identifier: Apache-2.0
// Python callables the runtime calls from its own threads: they take the GIL
// (skipped once the exit has begun, RuntimeCalls), and a Python exception
// becomes spyre::Error(TaskFailed) where the runtime expects an error.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>

#include "errors.hpp"
#include "gil.hpp"
#include "spyre/common/progress.hpp"

namespace spyre::python {

// The device (its DeviceSlot) whose stream callback this thread runs, or
// null: its close() there would wait for, and join, the thread it runs on.
inline thread_local const void* t_callback_device = nullptr;
// The device (its DeviceSlot) of the runtime whose host kernel this thread
// runs, or null: its close() there would wait for the call running the
// kernel (a submit, wait_all or run holds the device) and so for itself.
inline thread_local const void* t_kernel_device = nullptr;

// Sets one of those markers for a call, and back to the outer call's after.
class ThreadMark {
public:
    ThreadMark(const void*& mark, const void* value) : mark_(mark), outer_(mark) { mark_ = value; }
    ~ThreadMark() { mark_ = outer_; }
    ThreadMark(const ThreadMark&) = delete;
    ThreadMark& operator=(const ThreadMark&) = delete;

private:
    const void*& mark_;
    const void* outer_;
};

// A generator or coroutine function returns at once, its body not run:
// nothing was submitted or computed, and the task or run would succeed
// empty.
inline void RefuseUnrunBody(const py::object& result, const std::string& what) {
    PyObject* r = result.ptr();
    if (!PyGen_Check(r) && !PyCoro_CheckExact(r) && !PyAsyncGen_CheckExact(r)) return;
    result.attr("close")();  // no "never awaited" warning on top
    throw Error(ErrorKind::InvalidArgument, what + " is a generator or coroutine function: calling it returned a " +
                                                std::string(py::str(py::type::handle_of(result).attr("__name__"))) +
                                                " and ran none of its body (write it as a plain function)");
}

inline std::function<void()> PythonCallback(py::function fn, const char* where, const void* device = nullptr) {
    std::shared_ptr<const void> keep = KeepAlive(fn);
    PyObject* raw = fn.ptr();
    return [keep, raw, where, device] {
        const RuntimeCall call;
        if (!call) return;
        const ThreadMark mark(t_callback_device, device);
        py::gil_scoped_acquire gil;
        try {
            py::handle callable(raw);
            callable();
        } catch (py::error_already_set& e) {
            throw FromPython(e, where);
        }
    };
}

// `obj` as a function to call: InvalidArgument naming `what` otherwise
// (pybind11's cast said only "Object of type 'int' is not an instance of
// 'function'", a TypeError); `hint` ends the message.
inline py::function CallableArg(const py::object& obj, const std::string& what, const char* hint = "") {
    if (!PyCallable_Check(obj.ptr()))
        throw Error(ErrorKind::InvalidArgument, what + ": a " +
                                                    std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                                                    " is not callable" + hint);
    return py::reinterpret_borrow<py::function>(obj);
}

// progress(what, done, total, unit) from a Python callable (None: no progress).
inline ProgressCallback PythonProgress(const py::object& fn, const char* where) {
    if (fn.is_none()) return {};
    // Checked now: a non-callable failed only at its first call, as the
    // stream's sticky error raised by a later, unrelated call.
    if (!PyCallable_Check(fn.ptr()))
        throw Error(ErrorKind::InvalidArgument, std::string(where) + " is a " +
                                                    std::string(py::str(py::type::handle_of(fn).attr("__name__"))) +
                                                    ", not a callable");
    std::shared_ptr<const void> keep = KeepAlive(fn);
    PyObject* raw = fn.ptr();
    return [keep, raw, where](const ProgressInfo& p) {
        const RuntimeCall call;
        if (!call) return;
        py::gil_scoped_acquire gil;
        try {
            py::handle callable(raw);
            callable(std::string(p.what), p.done, p.total, std::string(p.unit));
        } catch (py::error_already_set& e) {
            throw FromPython(e, where);
        }
    };
}

}  // namespace spyre::python
