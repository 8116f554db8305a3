// SPDX-License-Identifier: Apache-2.0
// spyre.Orchestrator's C++ side (orchestration.cpp), shared with the host
// level (host_level.cpp), whose Python chip functions get a borrowed one.
//
// A PyOrch owns a spyre::Orchestrator created on a Device (it is a Child of
// the device's slot: Device.close() releases it), or borrows the runtime a
// chip task runs on (ChipContext.orch), valid only while the chip function
// runs. Every call that may block (Submit and Alloc stall while the rings are
// full, WaitAll, Scope::End) runs with the GIL released: the tasks they wait
// for may be Python host kernels, which take the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "objects.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/orchestration.hpp"

namespace spyre::python {

namespace py = pybind11;

// Device code a Python host kernel's task fails with when the kernel raises.
inline constexpr uint32_t kPythonKernelRaised = 0x70790001u;

// An owned runtime and the device kernels it runs: a call that waits
// without the GIL shares it (PyOrch::Share), so a close() meanwhile only
// lets go of the Python object's part, and the last holder destroys both.
struct OwnedRuntime {
    // The runtime works on this Device object (it keeps a reference, not a
    // copy): a Device.close() while a call holds the runtime must leave it.
    std::shared_ptr<Device> device;
    std::vector<DeviceBuffer> programs;  // uploaded device kernels (outlive the runtime)
    std::unique_ptr<Orchestrator> orch;  // destroyed first
    ~OwnedRuntime() {
        orch.reset();
        programs.clear();
    }
};

struct PyOrch : Child {
    SlotPtr slot;                           // null for a borrowed runtime
    std::shared_ptr<OwnedRuntime> runtime;  // null for a borrowed runtime
    Orchestrator* orch = nullptr;
    std::string what = "Orchestrator";
    // A chip task's runtime: held by every view of its heap ring that
    // alloc() and task_output() hand out, which the next call reuses, so
    // that a view kept past the call fails the task (PythonChipFunction).
    std::shared_ptr<const void> call_views;

    std::mutex mu;  // guards implicit_sizes and device_blocks
    std::map<int32_t, std::vector<uint64_t>> implicit_sizes;  // task id -> its implicit outputs' bytes
    // device_alloc() buffers while views of them live (DeviceBlock).
    std::map<void*, std::weak_ptr<struct DeviceBlock>> device_blocks;
    int32_t ring_size = 1024;

    Orchestrator& Get(const char* call) const {
        if (!orch) {
            if (slot && slot->closed()) slot->ThrowClosed(call);
            throw Error(ErrorKind::InvalidArgument,
                        std::string(call) + ": the " + what + " is closed (or its chip task has ended)");
        }
        return *orch;
    }
    // The runtime for a call that lets the GIL go: it stays alive until the
    // call drops the reference (RuntimeHold), whoever closes it meanwhile. A
    // borrowed runtime is the chip task's, alive while its function runs.
    // Its Device's close() waits for it to go (DeviceSlot::Hold).
    std::shared_ptr<Orchestrator> Share(const char* call) const {
        Orchestrator& o = Get(call);
        if (!runtime) return std::shared_ptr<Orchestrator>(std::shared_ptr<void>(), &o);
        if (!slot) return std::shared_ptr<Orchestrator>(runtime, &o);
        return HeldByCall(slot, runtime, &o);
    }
    void Release() noexcept override {
        orch = nullptr;
        DestroyWithoutGil(runtime);
    }
    ~PyOrch() override { Release(); }
};

// A call's share of the runtime (PyOrch::Share), dropped without the GIL:
// the last holder destroys the runtime, which waits for Python host kernels.
struct RuntimeHold {
    RuntimeHold(const PyOrch& self, const char* call) : orch(self.Share(call)) {}
    ~RuntimeHold() { DestroyWithoutGil(orch); }
    RuntimeHold(const RuntimeHold&) = delete;
    RuntimeHold& operator=(const RuntimeHold&) = delete;
    Orchestrator& operator*() const { return *orch; }
    Orchestrator* operator->() const { return orch.get(); }
    std::shared_ptr<Orchestrator> orch;
};

// `dtype` as a numpy dtype for a view of device memory; InvalidArgument
// for one that holds Python objects or has no size.
py::dtype ViewDType(py::handle dtype, const std::string& what);
// What a view of a runtime's memory keeps: `owner` (the Python object)
// and `memory` (Orchestrator::MemoryHold), mapped until the view goes,
// even once the runtime is closed (its pages then read zeros); and
// `call` (PyOrch::call_views), so that one kept past its chip call shows.
py::object ViewOwner(py::object owner, std::shared_ptr<const void> memory, std::shared_ptr<const void> call = {});
// A numpy view of `bytes` at `data` (1-D of dtype, or `shape`), kept by `base`.
py::array DeviceView(void* data, uint64_t bytes, py::handle dtype, py::object shape, py::object base,
                     const std::string& what);

}  // namespace spyre::python
