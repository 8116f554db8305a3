// SPDX-License-Identifier: Apache-2.0
#include "local_chip_executor.hpp"

#include "spyre/uapi/spyre_regs.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "spyre/trace/trace.hpp"

namespace spyre::host {

LocalChipExecutor::LocalChipExecutor(Device device, const DistributedConfig& config,
                                     std::shared_ptr<const ChipRegistry> registry)
    : device_(std::move(device)), registry_(std::move(registry)) {
    OrchestratorOptions o;
    o.heap_size = config.chip_heap_bytes;
    o.host_threads = unsigned(config.aicpu_thread_num);
    o.ready_queues = config.runtime == "tensormap_and_ringbuffer_lockfree" ? ReadyQueueKind::LockFree : ReadyQueueKind::Locked;
    orch_.emplace(Orchestrator::Create(device_, o));
    cache_limit_ = std::min(kCacheBytes, device_.allocator().Stats().capacity / 4);
}

LocalChipExecutor::~LocalChipExecutor() {
    plans_.clear();
    plan_stream_.reset();
    copies_.clear();
    orch_.reset();  // before the device it runs on
}

std::string LocalChipExecutor::Describe() const { return device_.pci_address(); }

void LocalChipExecutor::LoadKernel(int32_t kernel_id, const std::vector<uint8_t>& program) {
    DeviceBuffer buffer = device_.AllocateBuffer(program.size());
    device_.default_stream().CopyToDevice(program.data(), buffer.handle(), program.size());
    device_.default_stream().Synchronize();
    orch_->RegisterDeviceKernel(kernel_id, device_.allocator().DeviceAddress(buffer.handle(), program.size()));
    kernels_.push_back(std::move(buffer));
}

void LocalChipExecutor::LoadPlan(const std::string& name, const CompilerOutput& plan) {
    if (!plan_stream_) plan_stream_.emplace(SpyreStream::Default(device_));
    plans_[name] = LoadExecutionPlan(*plan_stream_, plan);
}

// The plan's tensors are the call's arguments, dense row-major in their device copies.
void LocalChipExecutor::RunPlan(const ExecutionPlan& plan, const ChipCall& call, const std::vector<Copy*>& copies) {
    if (plan.tensor_input_metadata.size() != call.args.size())
        throw Error(ErrorKind::InvalidArgument, "chip plan '" + call.function + "' takes " +
                                                    std::to_string(plan.tensor_input_metadata.size()) + " tensors, the task '" +
                                                    call.task_name + "' passes " + std::to_string(call.args.size()));
    std::vector<SpyreTensor> tensors;
    for (size_t i = 0; i < call.args.size(); ++i) {
        const HostTensor& t = call.args[i].arg.tensor;
        const std::vector<int64_t> shape = t.shape();
        std::vector<int64_t> stride(shape.size());
        int64_t step = int64_t(ElementSize(t.dtype()));
        for (size_t d = shape.size(); d-- > 0;) stride[d] = step, step *= shape[d];
        tensors.emplace_back(copies[i]->buffer.handle(), shape, stride, t.dtype(), t.bytes());
    }
    LaunchKernel(*plan_stream_, plan, tensors);
    plan_stream_->Synchronize();  // a device fault surfaces here, with its code
}

LocalChipExecutor::Copy& LocalChipExecutor::CopyFor(const HostTensor& t, const std::vector<Key>& keep) {
    const Key key{t.storage_id(), t.byte_offset(), t.bytes()};
    auto it = copies_.find(key);
    if (it == copies_.end()) {
        Copy c;
        try {
            c.buffer = device_.AllocateBuffer(t.bytes());
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::OutOfMemory) throw;
            const uint64_t limit = std::exchange(cache_limit_, 0);
            Evict(keep);
            cache_limit_ = limit;
            c.buffer = device_.AllocateBuffer(t.bytes());
        }
        c.mapped = orch_->HostAddress(device_.allocator().DeviceAddress(c.buffer.handle(), t.bytes()), t.bytes());
        c.storage = t.storage();
        copy_bytes_ += t.bytes();
        it = copies_.emplace(key, std::move(c)).first;
    }
    it->second.last_use = ++use_clock_;
    return it->second;
}

// Drops copies of storages that are gone, then the least recently used
// until the cache fits (never one this call uses).
void LocalChipExecutor::Evict(const std::vector<Key>& keep) {
    auto drop = [&](std::map<Key, Copy>::iterator it) {
        copy_bytes_ -= std::get<2>(it->first);
        return copies_.erase(it);
    };
    for (auto it = copies_.begin(); it != copies_.end();) it = it->second.storage.expired() ? drop(it) : std::next(it);
    while (copy_bytes_ > cache_limit_) {
        auto oldest = copies_.end();
        for (auto it = copies_.begin(); it != copies_.end(); ++it)
            if (std::find(keep.begin(), keep.end(), it->first) == keep.end() &&
                (oldest == copies_.end() || it->second.last_use < oldest->second.last_use))
                oldest = it;
        if (oldest == copies_.end()) break;
        drop(oldest);
    }
}

ChipCallStats LocalChipExecutor::Run(const ChipCall& call) {
    const ChipRegistry::Entry* fn = registry_->Find(call.function);
    if (!fn) {
        ErrorContext where;
        where.device = Describe();
        throw Error(ErrorKind::NotFound, "chip function '" + call.function + "' is not registered (registered: " +
                                             registry_->Names() + ")", where);
    }
    ChipCallStats stats;
    ChipContext ctx{*orch_, device_, {}, {}, {}, call.block_dim};
    std::vector<uint64_t> pto_args;
    std::vector<Key> used;
    std::vector<Copy*> copies;
    for (const ChipArg& a : call.args) used.emplace_back(a.arg.tensor.storage_id(), a.arg.tensor.byte_offset(), a.arg.tensor.bytes());
    for (const ChipArg& a : call.args) {
        const HostTensor& t = a.arg.tensor;
        Copy& c = CopyFor(t, used);
        copies.push_back(&c);
        if (a.arg.access != Access::Out) {
            if (a.current_on_device) {
                stats.bytes_reused += t.bytes();
            } else {
                std::memcpy(c.mapped, t.data(), t.bytes());  // the function's memory, mapped
                stats.bytes_uploaded += t.bytes();
            }
        }
        ctx.args.push_back(c.mapped);
        ctx.bytes.push_back(t.bytes());
        ctx.shapes.push_back(t.shape());
        pto_args.push_back(uint64_t(c.mapped));
    }
    const bool traced = trace::Enabled();
    if (traced) [[unlikely]]
        stats.run_start_ns = trace::detail::NowNs();
    if (fn->plan) {
        auto plan = plans_.find(call.function);
        if (plan == plans_.end())
            throw Error(ErrorKind::NotFound, "chip plan '" + call.function + "' is not loaded on " + Describe());
        RunPlan(*plan->second, call, copies);
    } else {
        std::exception_ptr thrown;
        try {
            auto scope = orch_->BeginScope();
            if (fn->pto) fn->pto(orch_->handle(), pto_args.data());
            else fn->cpp(ctx);
        } catch (...) {
            thrown = std::current_exception();
        }
        orch_->WaitAll();  // the device tasks' failure first: it names the kernel and the device code
        if (thrown) std::rethrow_exception(thrown);
    }
    if (traced) [[unlikely]]
        stats.run_end_ns = trace::detail::NowNs();
    for (size_t i = 0; i < call.args.size(); ++i) {
        const TensorArg& a = call.args[i].arg;
        if (a.access == Access::In) continue;
        std::memcpy(a.tensor.data(), copies[i]->mapped, a.tensor.bytes());
        stats.bytes_downloaded += a.tensor.bytes();
    }
    Evict(used);
    return stats;
}

std::vector<std::unique_ptr<ChipExecutor>> OpenLocalChipExecutors(Host& host, const DistributedConfig& config,
                                                                  const std::shared_ptr<const ChipRegistry>& registry) {
    Validate(config);
    const auto& fns = host.functions();
    std::vector<std::string> selectors;
    for (size_t i = 0; i < config.device_ids.size(); ++i) {
        const int id = config.device_ids[i];
        if (size_t(id) >= fns.size())
            throw Error(ErrorKind::NotFound, "DistributedConfig: device_ids[" + std::to_string(i) + "] is " +
                                                 std::to_string(id) + ", but " + host.Describe() + " has " +
                                                 std::to_string(fns.size()) + " function(s) (0.." +
                                                 std::to_string(int(fns.size()) - 1) + ")");
        selectors.push_back(std::to_string(id));
    }
    std::vector<Device> devices = host.OpenAll(selectors);
    std::vector<std::unique_ptr<ChipExecutor>> executors;
    for (Device& dev : devices) {
        const uint32_t cores = dev.function().Read32(SPYRE_REG_NUM_CORES);
        if (uint32_t(config.block_dim) > cores)
            throw Error(ErrorKind::InvalidArgument, "DistributedConfig: block_dim is " + std::to_string(config.block_dim) +
                                                        ", but " + dev.pci_address() + " has " + std::to_string(cores) +
                                                        " cores");
        executors.push_back(std::make_unique<LocalChipExecutor>(std::move(dev), config, registry));
    }
    return executors;
}


}  // namespace spyre::host
