// SPDX-License-Identifier: Apache-2.0
// The GIL rules of the module, in one place:
//   - every wait (Synchronize, Event.synchronize, copies that wait) runs with
//     the GIL released (WithoutGil);
//   - a Python object the device still reads or writes (the source of a
//     queued copy) is kept alive by a KeepAlive handle; the handle may die on
//     any thread (the scheduler's, a waiter's), so it never decrefs there
//     without the GIL: it hands the reference to Deferred, which drops it at
//     once when the GIL is held, else from the interpreter's pending calls;
//   - a Python callable run by the runtime (a stream callback) takes the GIL
//     itself, is counted while it runs (RuntimeCalls: the exit waits for
//     it), and is skipped once the exit has begun.
#pragma once

#include <pybind11/pybind11.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace spyre::python {

namespace py = pybind11;

// True when this thread may run Python now (holds the GIL, interpreter alive).
inline bool HoldsGil() noexcept { return Py_IsInitialized() && !_Py_IsFinalizing() && PyGILState_Check(); }

// References dropped by threads that may not hold the GIL.
class Deferred {
public:
    static Deferred& Instance() {
        static Deferred* instance = new Deferred;  // never destroyed: threads may push during exit
        return *instance;
    }
    // Takes over one reference to `object`.
    void Release(PyObject* object) noexcept {
        if (!object) return;
        if (HoldsGil()) {
            Py_DECREF(object);
            return;
        }
        {
            std::lock_guard lock(mutex_);
            pending_.push_back(object);
        }
        if (!scheduled_.exchange(true) && Py_AddPendingCall(&Deferred::Run, nullptr) != 0) scheduled_ = false;
    }
    // Drops what others handed over; the GIL is held.
    void Drain() {
        std::vector<PyObject*> objects;
        {
            std::lock_guard lock(mutex_);
            objects.swap(pending_);
        }
        for (PyObject* o : objects) Py_DECREF(o);
    }
    size_t pending() {
        std::lock_guard lock(mutex_);
        return pending_.size();
    }

private:
    static int Run(void*) {
        Instance().scheduled_ = false;
        Instance().Drain();
        return 0;
    }
    std::mutex mutex_;
    std::vector<PyObject*> pending_;
    std::atomic<bool> scheduled_{false};
};

// Keeps `object` alive for as long as the returned handle lives; the
// handle may be dropped on any thread. The GIL is held when it is made.
inline std::shared_ptr<const void> KeepAlive(py::object object) {
    PyObject* raw = object.release().ptr();
    return std::shared_ptr<const void>(raw, [](const void* p) {
        Deferred::Instance().Release(static_cast<PyObject*>(const_cast<void*>(p)));
    });
}

// The Python callables the runtime runs on its own threads (stream and
// progress callbacks, host kernels, SubWorkers, chip functions), counted
// while they run. The exit waits for them: a callable still running when
// the interpreter finalizes was ended under its feet (a segfault, or
// "thread state must be current" and an abort). Once the exit has begun
// none starts; each caller skips it as it skips a finalizing interpreter.
class RuntimeCalls {
public:
    static RuntimeCalls& Instance() {
        static RuntimeCalls* instance = [] {
            auto* calls = new RuntimeCalls;  // never destroyed: threads may call during exit
            pthread_atfork(nullptr, nullptr, [] { Instance().StartOverInChild(); });
            return calls;
        }();
        return *instance;
    }
    // Whether a call may start; each true is matched by one Leave(). No
    // lock: a count raised before the look at closed_ (both seq_cst) is
    // seen by the exit's wait, one raised after it is dropped again.
    bool Enter() noexcept {
        running_.fetch_add(1);
        if (closed_.load()) {
            running_.fetch_sub(1);
            return false;
        }
        ++t_calls_;
        return true;
    }
    void Leave() noexcept {
        --t_calls_;
        running_.fetch_sub(1);
    }
    // Whether a thread that let the GIL go may take it back: no, once the
    // exit has begun, for any thread but the exiting one and those inside
    // a runtime call (the exit waits for those). Each true is matched by
    // one GilTaken(). On every return from a call made without the GIL, so
    // no lock.
    bool MayTakeGilBack() noexcept {
        taking_gil_.fetch_add(1);
        if (closed_.load() && t_calls_ == 0 && !pthread_equal(exiting_thread_, pthread_self())) {
            taking_gil_.fetch_sub(1);
            return false;
        }
        return true;
    }
    void GilTaken() noexcept { taking_gil_.fetch_sub(1); }
    // At exit, the GIL held: no call starts from now on, and no other
    // thread takes the GIL back from a spyre call; waits (the GIL released)
    // for the calls running and for the threads already taking it back, up
    // to `give_up` returning true (a second Ctrl-C: the caller leaves
    // them). Returns how many were left.
    template <typename GiveUp>
    int CloseAndWait(GiveUp&& give_up) {
        exiting_thread_ = pthread_self();  // published by the store below
        closed_.store(true);
        for (;;) {
            PyThreadState* state = PyEval_SaveThread();
            int left = 0;
            for (int look = 0; look < 50; ++look) {  // 50 ms between looks for a Ctrl-C
                left = running_.load() + taking_gil_.load();
                if (left == 0) break;
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            PyEval_RestoreThread(state);
            if (left == 0 || give_up()) return left;
        }
    }

private:
    // A forked child has only the forking thread: the other threads' calls
    // stayed with the parent (its exit waited for good for them).
    void StartOverInChild() noexcept {
        running_.store(t_calls_);
        taking_gil_.store(0);
    }
    std::atomic<int> running_{0};     // runtime calls in progress
    std::atomic<int> taking_gil_{0};  // threads between MayTakeGilBack and GilTaken
    std::atomic<bool> closed_{false};
    pthread_t exiting_thread_{};
    static inline thread_local int t_calls_ = 0;  // runtime calls the calling thread is inside
};

// Takes the GIL back after a call made without it. Python ends a thread
// that takes it once the interpreter finalizes (pthread_exit); unwound
// through a noexcept frame, that aborted the process ("terminate called
// without an active exception"): a daemon thread inside a spyre call when
// the program returned. Once the exit has begun (spyre's last exit
// handler, before the interpreter finalizes), such a thread is parked
// instead, as Python would end it: it never runs Python again, and the
// process is exiting. Those already on their way back are waited for by
// that handler, so none is inside PyEval_RestoreThread when finalization
// starts (a look at _Py_IsFinalizing before it raced with it: 1 run in 7).
inline void TakeGilBack(PyThreadState* state) noexcept {
    while (_Py_IsFinalizing() || !RuntimeCalls::Instance().MayTakeGilBack()) pause();
    PyEval_RestoreThread(state);
    RuntimeCalls::Instance().GilTaken();
}

// One runtime call of a Python callable, while it lives (RuntimeCalls).
class RuntimeCall {
public:
    RuntimeCall() noexcept : entered_(Py_IsInitialized() && !_Py_IsFinalizing() && RuntimeCalls::Instance().Enter()) {}
    ~RuntimeCall() {
        if (entered_) RuntimeCalls::Instance().Leave();
    }
    RuntimeCall(const RuntimeCall&) = delete;
    RuntimeCall& operator=(const RuntimeCall&) = delete;
    // False: the interpreter is exiting, skip the call.
    explicit operator bool() const noexcept { return entered_; }

private:
    bool entered_;
};

// Runs `f` with the GIL released (when this thread holds it).
template <typename F>
decltype(auto) WithoutGil(F&& f) {
    if (!HoldsGil()) return std::forward<F>(f)();
    PyThreadState* state = PyEval_SaveThread();
    using Result = decltype(std::forward<F>(f)());
    if constexpr (std::is_void_v<Result>) {
        try {
            std::forward<F>(f)();
        } catch (...) {
            TakeGilBack(state);
            throw;
        }
        TakeGilBack(state);
    } else {
        Result result = [&]() -> Result {
            try {
                return std::forward<F>(f)();
            } catch (...) {
                TakeGilBack(state);
                throw;
            }
        }();
        TakeGilBack(state);
        return result;
    }
}

// Whether the calling thread is Python's main thread, the only one that
// handles signals.
inline bool OnMainThread() {
    static const unsigned long main_thread =
        py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    return PyThread_get_thread_ident() == main_thread;
}

// The most a Ctrl-C waits for a wait that looks for it.
inline constexpr std::chrono::nanoseconds kSignalLook = std::chrono::milliseconds(50);

// On the main thread: calls `wait_for(slice)` (a timed wait: whether what
// it waits for has come) with the GIL released until it returns true,
// handling signals between two slices as the interpreter would between two
// bytecodes: a handler that raises (SIGINT's KeyboardInterrupt) ends the
// wait with its exception. Elsewhere it returns at once (no thread but the
// main one sees signals): the caller then waits as it would have.
template <typename WaitFor>
void WaitHandlingSignals(WaitFor&& wait_for) {
    if (!OnMainThread()) return;
    for (;;) {
        if (WithoutGil([&] { return wait_for(kSignalLook); })) return;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
}

// `waitable.Synchronize()` (a stream's, an event's, a device's) with the
// GIL released, on the main thread first in Ctrl-C-aware slices of its
// SynchronizeFor (which reports nothing): the Synchronize after them
// returns at once when they saw the work done, and throws what it would have.
template <typename Waitable>
void SynchronizeHandlingSignals(Waitable& waitable) {
    WaitHandlingSignals([&](std::chrono::nanoseconds slice) { return waitable.SynchronizeFor(slice); });
    WithoutGil([&] { waitable.Synchronize(); });
}

// Destroys what `p` owns with the GIL released: destructors of streams,
// programs and devices wait for the device (and for queued Python callbacks,
// which need the GIL).
template <typename T>
void DestroyWithoutGil(std::shared_ptr<T>& p) noexcept {
    std::shared_ptr<T> local = std::move(p);
    if (!local) return;
    if (HoldsGil()) {
        PyThreadState* state = PyEval_SaveThread();
        local.reset();
        TakeGilBack(state);
    } else {
        local.reset();
    }
}

}  // namespace spyre::python
