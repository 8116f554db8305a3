// SPDX-License-Identifier: Apache-2.0
// A runtime on a device function: its buffers are addresses in this
// process's mapping of the function's memory, its heap ring one allocation
// of the function's allocator, and its CUBE and VECTOR tasks run on the
// card's cores. pto_runtime_create opens the function for a C caller.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "orchestration/c_calls.hpp"
#include "orchestration/device_worker.hpp"
#include "orchestration/heap_ring.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/common/log.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/uapi/spyre_ioctl.h"
#include "spyre/uapi/spyre_program.h"

namespace spyre::orchestration {

namespace {

// What a device runtime's memory lives in, freed after its task graph.
struct DeviceBacking {
    std::unique_ptr<Device> owned;  // pto_runtime_create opened it
    Device* device = nullptr;
    // The function's memory, mapped: shared, so that views of it a caller
    // keeps past the runtime (RuntimeState::memory) stay mapped.
    std::shared_ptr<driver::MappedRegion> devmem;
    std::optional<DeviceAllocation> heap;
    std::mutex mu;                       // the two below: C callers of any thread
    std::vector<DeviceBuffer> programs;  // pto_register_program's
    std::map<uintptr_t, DeviceBuffer> allocations;  // pto_device_malloc's, by host address
    ~DeviceBacking() {
        // Views of the mapping outlive the runtime (RuntimeState::memory):
        // the pages under them become private zeros, so they touch neither
        // what the allocator hands out next nor a later owner's memory.
        if (devmem && devmem.use_count() > 1 && *devmem &&
            ::mmap(devmem->data(), devmem->size(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
            // Other processes are cut off all the same (hand-over replaces
            // the memory objects); only this process's views still reach it.
            SPYRE_LOG_WARN("a device runtime ended with views of its memory kept: replacing their pages failed (%s); "
                           "they still reach the function's memory in this process",
                           std::strerror(errno));
        if (!heap) return;
        try {
            device->allocator().Free(heap->handle);
        } catch (...) {
            // The device is gone: its memory went with it.
        }
    }
};

}  // namespace

std::unique_ptr<RuntimeState> RuntimeState::OnDevice(Device& device, const OrchestratorOptions& options,
                                                     std::unique_ptr<Device> owned) {
    if (options.heap_size == 0) throw Error(ErrorKind::InvalidArgument, "heap ring size must be > 0");
    // Whole granules: a block is one or more (HeapRing::kAlignment).
    const uint64_t heap_size = HeapRing::RoundUp(options.heap_size);
    if (heap_size == 0)
        throw Error(ErrorKind::InvalidArgument, "heap ring of " + std::to_string(options.heap_size) + " bytes is too large");
    TaskGraphOptions o = TaskGraphOptionsFrom(options);  // checks them before anything is taken
    auto backing = std::make_shared<DeviceBacking>();
    backing->device = &device;
    // Buffers are addresses in this mapping of the function's own memory
    // (region DEVMEM): host workers and the caller read them directly, and
    // device address = offset in the mapping (as the DMA engine uses it).
    backing->devmem = std::make_shared<driver::MappedRegion>(DeviceInternals::Function(device).MapRegion(SPYRE_REGION_DEVMEM));
    backing->heap = device.allocator().Allocate(heap_size);
    o.memory = backing->devmem->data();
    o.memory_size = backing->devmem->size();
    o.heap_offset = device.allocator().DeviceAddress(backing->heap->handle, heap_size);
    o.heap_size = heap_size;
    o.device = device.pci_address();
    backing->owned = std::move(owned);  // declared first: destroyed after what uses it
    auto rt = std::make_unique<RuntimeState>();
    rt->memory = backing->devmem;
    rt->backing = backing;
    rt->device = &device;
    rt->copy_in = [&device](const void* host, uint64_t at, uint64_t size) {
        device.dma().Wait(device.dma().CopyToDeviceAt(host, at, size));
    };
    rt->copy_out = [&device](void* host, uint64_t at, uint64_t size) {
        device.dma().Wait(device.dma().CopyFromDeviceAt(host, at, size));
    };
    rt->graph = std::make_unique<TaskGraph>(o);
    // CUBE and VECTOR kernels with a device program run on the card's cores
    // through the device's task queues (host-only kernels stay on the host).
    if (DeviceWorker::Available(device)) {
        auto worker = std::make_shared<DeviceWorker>(device, *rt->graph, options.task_queues);
        rt->graph->SetExecutor(WORKER_CUBE, worker);
        rt->graph->SetExecutor(WORKER_VECTOR, worker);
    }
    return rt;
}

namespace {

// `image` checked, copied into the function's memory and registered as
// `kernel_id`'s device program.
void RegisterProgram(RuntimeState& state, int32_t kernel_id, std::span<const uint8_t> image, const std::string& what) {
    if (!state.device)
        throw Error(ErrorKind::Unsupported, "a runtime on host memory has no device to run " + what +
                                                ": register a host kernel instead");
    if (image.empty()) throw Error(ErrorKind::InvalidArgument, what + " is empty");
    KernelEntry k;
    // Checked here as the device would at run time: a task's parameters
    // are held against each operand's extent when it is submitted.
    k.slots = CheckedSlots(image, what);
    Device& dev = *state.device;
    DeviceBuffer buffer = dev.AllocateBuffer(image.size());
    dev.dma().Wait(dev.dma().CopyToDevice(image.data(), buffer.handle(), image.size()));
    DeviceInternals::Core(dev)->KeepForPrograms(buffer.handle());
    k.kernel_id = kernel_id;
    k.program_address = dev.allocator().DeviceAddress(buffer.handle(), image.size());
    k.program_bytes = image.size();
    k.has_program = true;
    state.graph->RegisterKernel(std::move(k));
    DeviceBacking& backing = *static_cast<DeviceBacking*>(state.backing.get());
    std::lock_guard lock(backing.mu);
    backing.programs.push_back(std::move(buffer));
}

DeviceBacking& DeviceOf(RuntimeState& state, const char* call) {
    if (!state.device)
        throw Error(ErrorKind::Unsupported, std::string(call) + ": a runtime on host memory has no device memory");
    return *static_cast<DeviceBacking*>(state.backing.get());
}

}  // namespace

void* RuntimeState::DeviceMalloc(uint64_t size) {
    RuntimeState& state = *this;
    DeviceBacking& backing = DeviceOf(state, "pto_device_malloc");
    if (size == 0) throw Error(ErrorKind::InvalidArgument, "pto_device_malloc of 0 bytes");
    DeviceBuffer buffer = state.device->AllocateBuffer(size);
    uint8_t* p = backing.devmem->data() + state.device->allocator().DeviceAddress(buffer.handle(), size);
    std::memset(p, 0, size);  // what the allocator hands out may be another buffer's old bytes
    std::lock_guard lock(backing.mu);
    backing.allocations.emplace(uintptr_t(p), std::move(buffer));
    return p;
}

void RuntimeState::DeviceFree(void* buffer) {
    RuntimeState& state = *this;
    DeviceBacking& backing = DeviceOf(state, "pto_device_free");
    auto not_live = [&] {
        return Error(ErrorKind::InvalidArgument, "pto_device_free: " + Hex(uint64_t(uintptr_t(buffer))) +
                                                     " is not a live pto_device_malloc buffer of this runtime");
    };
    uint64_t size = 0;
    {
        std::lock_guard lock(backing.mu);
        const auto live = backing.allocations.find(uintptr_t(buffer));
        if (live == backing.allocations.end()) throw not_live();
        size = live->second.size();
    }
    // (Outside backing.mu: the graph's lock is never taken inside it.)
    state.graph->CheckNotAProgram(state.graph->DeviceAddress(buffer, size), size, "pto_device_free: the buffer", true);
    decltype(backing.allocations)::node_type freed;
    {
        std::lock_guard lock(backing.mu);
        freed = backing.allocations.extract(uintptr_t(buffer));
    }
    if (!freed) throw not_live();  // freed by another thread meanwhile
    // Before the block can be handed out again (when `freed` goes): a
    // failed task's poison there would skip the next allocation's readers.
    state.graph->ForgetFailuresIn(buffer, freed.mapped().size());
}

namespace {

// A program file: a regular file no larger than a program can be, sized
// before it is read (a FIFO, a device node or a huge file would otherwise
// be read until memory or patience ran out). A file whose size reads 0
// may still hold bytes (/proc and /sys files): it is read to its end, a
// byte past the limit at most.
std::vector<uint8_t> ReadFile(const char* path) {
    if (!path) throw Error(ErrorKind::InvalidArgument, "no program file (NULL)");
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw SystemError(std::string("cannot open program file ") + path);
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw SystemError(std::string("cannot stat program file ") + path);
    if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::InvalidArgument, std::string("program file ") + path + " is not a regular file");
    if (uint64_t(st.st_size) > SPYRE_PROGRAM_MAX_SIZE)
        throw Error(ErrorKind::InvalidArgument, std::string("program file ") + path + " has " + std::to_string(st.st_size) +
                                                    " bytes; a program has at most " +
                                                    std::to_string(SPYRE_PROGRAM_MAX_SIZE));
    const bool sized = st.st_size > 0;
    std::vector<uint8_t> image(sized ? size_t(st.st_size) : size_t(SPYRE_PROGRAM_MAX_SIZE) + 1);
    size_t got = 0;
    while (got < image.size()) {
        const ssize_t n = ::read(fd, image.data() + got, image.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw SystemError(std::string("cannot read program file ") + path);
        if (n == 0) break;  // shrank meanwhile: what is there is decoded (and refused if cut)
        got += size_t(n);
    }
    image.resize(got);
    if (got > SPYRE_PROGRAM_MAX_SIZE)
        throw Error(ErrorKind::InvalidArgument, std::string("program file ") + path + " has more than " +
                                                    std::to_string(SPYRE_PROGRAM_MAX_SIZE) + " bytes; a program has at most " +
                                                    std::to_string(SPYRE_PROGRAM_MAX_SIZE));
    return image;
}

}  // namespace

}  // namespace spyre::orchestration

using spyre::orchestration::CallKind;
using spyre::orchestration::OnRuntime;
using spyre::orchestration::RuntimeState;

extern "C" void* pto_device_malloc(Runtime* rt, uint64_t size) {
    return spyre::orchestration::PointerFrom("pto_device_malloc", rt, CallKind::Changes,
                                             [&](RuntimeState& s) { return s.DeviceMalloc(size); });
}

extern "C" int32_t pto_device_free(Runtime* rt, void* buffer) {
    return OnRuntime("pto_device_free", rt, CallKind::Changes,
                     [&](RuntimeState& s) { s.DeviceFree(buffer); });
}

extern "C" int32_t pto_register_program(Runtime* rt, int32_t kernel_id, const void* image, uint64_t size) {
    return OnRuntime("pto_register_program", rt, CallKind::Changes, [&](RuntimeState& s) {
        if (!image && size) throw spyre::Error(spyre::ErrorKind::InvalidArgument, "no program image (NULL)");
        spyre::orchestration::RegisterProgram(
            s, kernel_id, {static_cast<const uint8_t*>(image), size_t(size)}, "kernel " + std::to_string(kernel_id) + "'s program");
    });
}

extern "C" int32_t pto_register_program_file(Runtime* rt, int32_t kernel_id, const char* path) {
    return OnRuntime("pto_register_program_file", rt, CallKind::Changes, [&](RuntimeState& s) {
        const std::vector<uint8_t> image = spyre::orchestration::ReadFile(path);
        spyre::orchestration::RegisterProgram(s, kernel_id, image, std::string("program file ") + path);
    });
}

extern "C" int32_t pto_register_plan(Runtime* rt, int32_t kernel_id, const char* plan_dir, int32_t op_index) {
    return OnRuntime("pto_register_plan", rt, CallKind::Changes, [&](RuntimeState& s) {
        if (!plan_dir) throw spyre::Error(spyre::ErrorKind::InvalidArgument, "no plan directory (NULL)");
        const spyre::ExecutionPlan plan(spyre::CompilerOutput::ReadDirectory(plan_dir));
        if (op_index < 0 || size_t(op_index) >= plan.operations.size())
            throw spyre::Error(spyre::ErrorKind::InvalidArgument,
                               std::string("plan ") + plan_dir + " has " + std::to_string(plan.operations.size()) +
                                   " operation(s); there is no operation " + std::to_string(op_index));
        const auto& compute = plan.operations[size_t(op_index)].compute();
        if (!compute)
            throw spyre::Error(spyre::ErrorKind::InvalidArgument, std::string("operation ") + std::to_string(op_index) +
                                                                      " of plan " + plan_dir + " has no compute program");
        spyre::orchestration::RegisterProgram(s, kernel_id, compute->binary,
                                              std::string("operation ") + std::to_string(op_index) + " of plan " + plan_dir);
    });
}

extern "C" Runtime* pto_runtime_create(const char* function, int32_t task_ring_size, uint64_t heap_size) {
    using spyre::orchestration::RuntimeState;
    Runtime* out = nullptr;
    spyre::capi::Guard("pto_runtime_create", [&] {
        spyre::DeviceOptions options;
        if (function) options.function = function;
        auto device = std::make_unique<spyre::Device>(spyre::Device::Open(std::move(options)));
        spyre::Device& dev = *device;
        auto state = RuntimeState::OnDevice(dev, {.task_ring_size = task_ring_size, .heap_size = heap_size},
                                            std::move(device));
        out = spyre::orchestration::OwnedByC(std::move(state));
        return 0;
    });
    return out;
}
