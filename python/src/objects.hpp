// SPDX-License-Identifier: Apache-2.0
// What the Python objects hold. A Device (DeviceSlot) owns the spyre::Device;
// every object made on it (streams, buffers, tensors, events, plans,
// programs) is an Owned<T> that keeps the slot and registers with it, so
// Device.close() releases them all (waiting for their work first) and any
// later use raises spyre.InvalidArgument naming the closed device, instead
// of reaching freed memory. Objects of two devices mixed in one call raise
// spyre.WrongDevice. All state changes happen with the GIL held; waits and
// destructors that wait run with it released (gil.hpp).
#pragma once

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "callbacks.hpp"
#include "gil.hpp"
#include "spyre/device/device.hpp"
#include "spyre/device/host.hpp"
#include "spyre/error.hpp"
#include "spyre/launch/program.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

namespace spyre::python {

namespace py = pybind11;

template <typename T>
class Owned;

// Whether the calling process is a child forked since `made_by` (a pid)
// made an object: its close only lets go of the child's copy (the C++
// objects leave the parent's device and threads alone), as destroying it
// does, instead of waiting for work and threads that are the parent's.
inline bool ForkedSince(pid_t made_by) noexcept { return ::getpid() != made_by; }

class Child {
public:
    virtual ~Child() = default;
    // Drops the C++ object (the device is closing).
    virtual void Release() noexcept = 0;
};

class DeviceSlot {
public:
    explicit DeviceSlot(Device device)
        : device_(std::make_shared<Device>(std::move(device))), id_(device_->id()), name_(device_->pci_address()) {}
    ~DeviceSlot() { DestroyWithoutGil(device_); }
    DeviceSlot(const DeviceSlot&) = delete;
    DeviceSlot& operator=(const DeviceSlot&) = delete;

    // The device; InvalidArgument naming `what` once closed (or closing).
    Device& Get(const char* what) const {
        if (closed()) ThrowClosed(what);
        return *device_;
    }
    const std::shared_ptr<Device>& shared() const { return device_; }
    // From the start of Close: another thread using one of the device's
    // objects meanwhile (released one by one, the GIL let go while each
    // waits) is told the device is closed, not that the object was freed.
    bool closed() const noexcept { return closing_.load(std::memory_order_acquire) || !device_; }
    const DeviceId& id() const noexcept { return id_; }
    const std::string& name() const noexcept { return name_; }

    [[noreturn]] void ThrowClosed(const char* what) const {
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": device " + name_ + " is closed",
                    ErrorContext{.device = name_});
    }
    // WrongDevice when `other` is not this device.
    // A closed device's objects say so first: reopened, it is another slot
    // of the same function, and "belongs to X, stream to X" explains nothing.
    void CheckSame(const DeviceSlot& other, const std::string& what, const char* user) const {
        if (&other == this) return;
        if (other.closed()) other.ThrowClosed(what.c_str());
        if (closed()) ThrowClosed(user);
        ThrowWrongDevice(other.id_, id_, what, user);
    }

    void Adopt(const std::shared_ptr<Child>& child) {
        std::lock_guard lock(mutex_);
        if (children_.size() >= prune_at_) {
            std::erase_if(children_, [](const std::weak_ptr<Child>& c) { return c.expired(); });
            prune_at_ = std::max<size_t>(64, children_.size() * 2);
        }
        children_.push_back(child);
    }

    // Releases every object made on the device, waits for the device's
    // work, lets the device go, and waits (up to kUsersWait) for calls of
    // other threads that hold its objects (Hold) to let go of them, so the
    // function is closed when this returns and may be opened again (it
    // returned at once while another thread waited on a stream: the work
    // still ran, and Host.open was Busy). The GIL is held; it is released
    // while things wait.
    void Close() {
        // In a stream callback (of this device or another): it runs on a
        // device's scheduler thread, where no wait for device work is
        // allowed. Of this device, close dropped the device there, which
        // then joined its own thread (an abort); of another, the wait was
        // refused and the device's queued copies were dropped unrun.
        if (t_callback_device)
            throw Error(ErrorKind::InvalidArgument,
                        "Device.close: called from a stream callback" +
                            std::string(t_callback_device == this ? " of this device" : "") +
                            ", which runs on a device's scheduler thread, where close cannot wait for device " + name_ +
                            "'s work; close it after the callback",
                        ErrorContext{.device = name_});
        // In a host kernel of a runtime on this device: the call that runs
        // it (submit, wait_all, run) holds the device, so close waited out
        // kUsersWait (10 s) for itself, then returned with the call still
        // holding the function. (Reached through another thread, it is the
        // Busy below.)
        if (t_kernel_device == this)
            throw Error(ErrorKind::InvalidArgument,
                        "Device.close: called from a host kernel of an Orchestrator on device " + name_ +
                            ", whose task the device's close would wait for; close it after the task",
                        ErrorContext{.device = name_});
        if (closing_.exchange(true)) {
            // Another thread closes it: return once that close is done
            // (a second close returned at once, before the function was free).
            WaitHandlingSignals([&](std::chrono::nanoseconds slice) { return WaitClosedFor(slice); });
            WithoutGil([&] {  // off the main thread (no signals there)
                while (!WaitClosedFor(std::chrono::seconds(1))) {
                }
            });
            return;
        }
        if (!device_) {  // closed by its destructor's path already
            closed_.store(true, std::memory_order_release);
            return;
        }
        std::vector<std::weak_ptr<Child>> children;
        {
            std::lock_guard lock(mutex_);
            children.swap(children_);
        }
        // Streams first (they wait for their work), then everything else.
        for (auto& weak : children)
            if (auto c = weak.lock()) c->Release();
        if (ForkedSince(opened_by_)) {  // the atexit hook of a forked child raised, or crashed
            DestroyWithoutGil(device_);
            closed_.store(true, std::memory_order_release);
            return;
        }
        try {
            SynchronizeHandlingSignals(*device_);  // streams other threads still hold
        } catch (const Error& e) {
            // Device::Synchronize throws no stream's error; a lost device
            // has no work. Anything else would drop queued work: say so.
            if (e.kind() != ErrorKind::DeviceLost) {
                DestroyWithoutGil(device_);
                closed_.store(true, std::memory_order_release);
                throw;
            }
        } catch (...) {
            DestroyWithoutGil(device_);  // a Ctrl-C: the close goes on without waiting
            closed_.store(true, std::memory_order_release);
            throw;
        }
        DestroyWithoutGil(device_);
        bool let_go = false;
        WithoutGil([&] { let_go = WaitForUsers(); });
        closed_.store(true, std::memory_order_release);
        // It returned as if closed, and the function stayed open (Busy)
        // until those calls ended.
        if (!let_go)
            throw Error(ErrorKind::Busy,
                        "Device.close: calls of other threads still hold device " + name_ + " after " +
                            std::to_string(kUsersWait.count()) +
                            " s (one may wait for this call: a wait_all whose runtime's host kernel closes the "
                            "device); its objects are released, and the function is free once they end",
                        ErrorContext{.device = name_});
    }

    // Held by a call that uses the device's objects without the GIL: Close
    // waits for it to end.
    std::shared_ptr<void> Hold() {
        users_.fetch_add(1, std::memory_order_acq_rel);
        return std::shared_ptr<void>(nullptr, [this](void*) { users_.fetch_sub(1, std::memory_order_acq_rel); });
    }
    static constexpr std::chrono::seconds kUsersWait{10};

    // Every slot ever opened, for spyre's atexit hook (close what is open
    // before the interpreter finalizes: queued Python callbacks need it).
    static std::vector<std::weak_ptr<DeviceSlot>>& Registry() {
        static auto* r = new std::vector<std::weak_ptr<DeviceSlot>>;
        return *r;
    }
    static std::mutex& RegistryMutex() {
        static auto* m = new std::mutex;
        return *m;
    }
    static std::shared_ptr<DeviceSlot> Open(Device device) {
        auto slot = std::make_shared<DeviceSlot>(std::move(device));
        std::lock_guard lock(RegistryMutex());
        auto& r = Registry();
        std::erase_if(r, [](const std::weak_ptr<DeviceSlot>& s) { return s.expired(); });
        r.push_back(slot);
        return slot;
    }

private:
    bool WaitClosedFor(std::chrono::nanoseconds slice) const {
        const auto until = std::chrono::steady_clock::now() + slice;
        while (!closed_.load(std::memory_order_acquire)) {
            if (std::chrono::steady_clock::now() >= until) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }
    // Whether the other threads' calls let go within kUsersWait.
    bool WaitForUsers() noexcept {
        const auto deadline = std::chrono::steady_clock::now() + kUsersWait;
        while (users_.load(std::memory_order_acquire) != 0) {
            if (std::chrono::steady_clock::now() >= deadline) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }
    std::shared_ptr<Device> device_;
    const pid_t opened_by_ = ::getpid();
    std::atomic<bool> closing_{false};
    std::atomic<int> users_{0};
    std::atomic<bool> closed_{false};  // Close done
    DeviceId id_;
    std::string name_;
    std::mutex mutex_;
    std::vector<std::weak_ptr<Child>> children_;
    size_t prune_at_ = 64;

public:
    // The Python object of the default stream, while one exists.
    std::weak_ptr<Owned<FlexStream>> default_stream;
};

using SlotPtr = std::shared_ptr<DeviceSlot>;

// `object` (owned by `owner`) for a call that waits without the GIL: the
// slot's Close waits for the reference to go (DeviceSlot::Hold). Destroyed
// from the last member up: the owner, then the hold, then the slot it counts in.
template <typename T, typename Owner>
std::shared_ptr<T> HeldByCall(const SlotPtr& slot, std::shared_ptr<Owner> owner, T* object) {
    struct Held {
        SlotPtr slot;
        std::shared_ptr<void> hold;
        std::shared_ptr<Owner> owner;
    };
    auto held = std::make_shared<Held>(Held{slot, slot->Hold(), std::move(owner)});
    return std::shared_ptr<T>(held, object);
}

// A binding's device argument: pybind11 passes None as a null pointer,
// which is InvalidArgument naming the call, not a crash.
inline DeviceSlot& SlotOf(const SlotPtr& slot, const char* what) {
    if (!slot) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the device is None");
    return *slot;
}
// Its open device (SlotOf, then DeviceSlot::Get).
inline Device& DeviceOf(const SlotPtr& slot, const char* what) { return SlotOf(slot, what).Get(what); }

// A Host (spyre.Host); the host level's Worker opens its devices through it.
struct PyHost {
    std::shared_ptr<Host> host;
    Host& Get(const char* what) const {
        if (!host) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the Host is closed");
        return *host;
    }
    void Close() { DestroyWithoutGil(host); }
    ~PyHost() { Close(); }
};

// A C++ object of one device, as a Python object holds it.
template <typename T>
class Owned : public Child {
public:
    Owned(SlotPtr slot, std::shared_ptr<T> object) : slot_(std::move(slot)), object_(std::move(object)) {}
    ~Owned() override { DestroyWithoutGil(object_); }

    // The object; InvalidArgument naming `what` once its device is closed
    // (or the object was freed).
    T& Get(const char* what) const {
        if (!object_) Closed(what);
        return *object_;
    }
    // A reference that keeps it alive through a wait without the GIL; the
    // device's Close waits for it to go (DeviceSlot::Hold).
    std::shared_ptr<T> Share(const char* what) const {
        if (!object_) Closed(what);
        return HeldByCall(slot_, object_, object_.get());
    }
    const SlotPtr& slot() const noexcept { return slot_; }
    bool released() const noexcept { return !object_; }
    void Release() noexcept override { DestroyWithoutGil(object_); }
    // The object, no longer this one's (released from here on): for a
    // caller that lets go of it elsewhere.
    std::shared_ptr<T> Take() noexcept { return std::move(object_); }
    // Python's free(): Release, but once the device is closed it raises as
    // every other use does (it returned silently); a second free() on an
    // open device does nothing, as a second file close().
    void Free(const char* what) {
        if (slot_->closed()) slot_->ThrowClosed(what);
        Release();
    }

private:
    [[noreturn]] void Closed(const char* what) const {
        if (slot_->closed()) slot_->ThrowClosed(what);
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": the object was freed",
                    ErrorContext{.device = slot_->name()});
    }
    SlotPtr slot_;
    std::shared_ptr<T> object_;
};

template <typename T>
std::shared_ptr<Owned<T>> Adopt(const SlotPtr& slot, std::shared_ptr<T> object) {
    auto owned = std::make_shared<Owned<T>>(slot, std::move(object));
    slot->Adopt(owned);
    return owned;
}

using PyStream = Owned<FlexStream>;
using PyEvent = Owned<Event>;
using PyBuffer = Owned<DeviceBuffer>;
using PyTensor = Owned<SpyreTensor>;
using PySpyreStream = Owned<SpyreStream>;
using PyProgram = Owned<Program>;

// An ExecutionPlan: parsed only (no slot), or loaded on a device.
struct PyPlan : Child {
    std::shared_ptr<const ExecutionPlan> plan;
    std::shared_ptr<const CompilerOutput> source;  // what it was parsed from, for save()
    SlotPtr slot;                                  // set once loaded
    std::string name;                              // kept for messages after a release

    const ExecutionPlan& Get(const char* what) const {
        if (!plan) {
            if (slot && slot->closed()) slot->ThrowClosed(what);
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": plan '" + name + "' was released");
        }
        return *plan;
    }
    void Release() noexcept override { DestroyWithoutGil(plan); }
    ~PyPlan() override { DestroyWithoutGil(plan); }
};

// The C++ tensors of a Python list, all on `slot`'s device.
inline std::vector<SpyreTensor> TensorsOf(const DeviceSlot& slot, const std::vector<std::shared_ptr<PyTensor>>& tensors,
                                          const char* what) {
    std::vector<SpyreTensor> out;
    out.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        if (!tensors[i]) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": tensor " + std::to_string(i) + " is None");
        slot.CheckSame(*tensors[i]->slot(), std::string(what) + ": tensor " + std::to_string(i), "stream");
        out.push_back(tensors[i]->Get(what));
    }
    return out;
}

// The stream a call runs on: `stream` when given, else the device's default.
// The device's default stream; `what` names the caller in errors.
std::shared_ptr<PyStream> DefaultStream(const SlotPtr& slot, const char* what = "Device.default_stream");

}  // namespace spyre::python
