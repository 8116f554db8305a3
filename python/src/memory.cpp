// SPDX-License-Identifier: Apache-2.0
// Device memory: spyre.DeviceBuffer (Device.alloc) and the allocator's
// statistics. Copies between host arrays and buffers are FlexStream
// methods (streams.cpp).
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "int_arg.hpp"
#include "objects.hpp"

namespace spyre::python {

void BindMemory(py::module_& m) {
    py::class_<RegionStats>(m, "RegionStats", "One memory region the allocator reserved.")
        .def_readonly("region_id", &RegionStats::region_id)
        .def_readonly("device_base", &RegionStats::device_base)
        .def_readonly("capacity", &RegionStats::capacity)
        .def_readonly("in_use", &RegionStats::in_use);
    py::class_<AllocatorStats>(m, "AllocatorStats", "SpyreAllocator statistics (Device.memory_stats()).")
        .def_readonly("capacity", &AllocatorStats::capacity)
        .def_readonly("bytes_in_use", &AllocatorStats::bytes_in_use)
        .def_readonly("bytes_free", &AllocatorStats::bytes_free)
        .def_readonly("largest_free_block", &AllocatorStats::largest_free_block)
        .def_readonly("peak_bytes_in_use", &AllocatorStats::peak_bytes_in_use)
        .def_readonly("live_allocations", &AllocatorStats::live_allocations)
        .def_readonly("allocations", &AllocatorStats::allocations)
        .def_readonly("regions", &AllocatorStats::regions)
        .def_readonly("reservation", &AllocatorStats::reservation)
        .def("__repr__", [](const AllocatorStats& s) {
            return "AllocatorStats(capacity=" + std::to_string(s.capacity) + ", bytes_in_use=" +
                   std::to_string(s.bytes_in_use) + ", live_allocations=" + std::to_string(s.live_allocations) + ")";
        });
    py::class_<SchedulerStats>(m, "SchedulerStats", "What the device's scheduler did so far.")
        .def_readonly("ring_cbs", &SchedulerStats::ring_cbs)
        .def_readonly("doorbells", &SchedulerStats::doorbells)
        .def_readonly("inline_copies", &SchedulerStats::inline_copies)
        .def_readonly("dma_copies", &SchedulerStats::dma_copies)
        .def_readonly("callbacks", &SchedulerStats::callbacks)
        .def_readonly("dropped", &SchedulerStats::dropped)
        .def_readonly("host_events", &SchedulerStats::host_events)
        .def_readonly("tasks_sent", &SchedulerStats::tasks_sent)
        .def_readonly("task_doorbells", &SchedulerStats::task_doorbells)
        .def_readonly("tasks_reaped", &SchedulerStats::tasks_reaped)
        .def_readonly("task_backstops", &SchedulerStats::task_backstops)
        .def_readonly("task_sleeps", &SchedulerStats::task_sleeps)
        .def_readonly("task_yields", &SchedulerStats::task_yields);

    py::class_<PyBuffer, std::shared_ptr<PyBuffer>>(m, "DeviceBuffer",
        "One device allocation (Device.alloc). Freed by free(), when garbage collected, or when its device "
        "closes: always after the work already queued on the device's streams.")
        .def_property_readonly("size", [](const PyBuffer& b) { return b.Get("DeviceBuffer.size").size(); })
        .def_property_readonly("nbytes", [](const PyBuffer& b) { return b.Get("DeviceBuffer.nbytes").size(); })
        .def_property_readonly("device", [](const PyBuffer& b) { return b.slot(); })
        .def_property_readonly("handle", [](const PyBuffer& b) { return b.Get("DeviceBuffer.handle").handle().ToString(); },
                               "'pf:0x...' or 'vf:region N+0x...'.")
        .def_property_readonly("freed", &PyBuffer::released)
        .def("free", [](PyBuffer& b) { b.Free("DeviceBuffer.free"); },
             "Frees the memory now (after queued work); later use raises InvalidArgument, as free() does once the "
             "device is closed.")
        .def("__repr__", [](const PyBuffer& b) {
            if (b.released()) return std::string("<spyre.DeviceBuffer freed>");
            const DeviceBuffer& d = b.Get("DeviceBuffer");
            return "<spyre.DeviceBuffer " + std::to_string(d.size()) + " bytes at " + d.handle().ToString() + " on " +
                   b.slot()->name() + ">";
        });

    // Device.alloc lives here, beside the buffer it makes.
    py::class_<DeviceSlot, SlotPtr> device(m.attr("Device"));
    device.def("alloc", [](const SlotPtr& s, const IntArg<int64_t>& nbytes_arg) {
            SlotOf(s, "Device.alloc");
            const int64_t nbytes = nbytes_arg.In("Device.alloc: nbytes");
            if (nbytes <= 0)
                throw Error(ErrorKind::InvalidArgument, "Device.alloc(" + std::to_string(nbytes) +
                                                            "): the size must be at least 1 byte",
                            ErrorContext{.device = s->name()});
            Device& d = s->Get("Device.alloc");
            return Adopt(s, std::make_shared<DeviceBuffer>(d.AllocateBuffer(uint64_t(nbytes))));
        }, py::arg("nbytes"), "Allocates `nbytes` of device memory (128-byte aligned); OutOfMemory when no free block fits, InvalidArgument when the device's pool is smaller than `nbytes` in all.");
}

}  // namespace spyre::python
