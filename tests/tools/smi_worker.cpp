// SPDX-License-Identifier: Apache-2.0
// The other process of the spyre_smi_tool test: holds one function
// (SPYRE_DEV_ROOT's tree) and does known work on it, then prints what it did
// and keeps the function until its stdin closes.
//   smi_worker ADDRESS TO_DEVICE_MIB FROM_DEVICE_MIB TASKS
// Work: TO_DEVICE_MIB MiB host -> device on a stream (DMA), FROM_DEVICE_MIB
// MiB device -> host through the DMA engine, TASKS orchestration tasks (an
// ADD of 256 floats each) on the device's task queues. Output, one line:
//   ready pid=P to_device=B from_device=B tasks=N region_bases=B0,B1,...
// (the region bases as this holder reads them from the `regs` file).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "device_programs.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;

namespace {

// REGIONn_BASE values of non-empty regions, as the `regs` file shows them to us.
std::string RegionBases(const std::string& address) {
    const char* root = std::getenv("SPYRE_DEV_ROOT");
    std::ifstream regs(std::string(root ? root : "/run/spyre") + "/bus/pci/devices/" + address + "/regs");
    std::string line, out;
    std::vector<std::string> bases(16), sizes(16);
    while (std::getline(regs, line)) {
        std::istringstream in(line);
        std::string name, off, acc, value;
        in >> name >> off >> acc >> value;
        unsigned i = 0;
        char kind[8] = {};
        if (std::sscanf(name.c_str(), "REGION%u_%4s", &i, kind) == 2 && i < 16)
            (std::string(kind) == "BASE" ? bases : sizes)[i] = value;
    }
    for (unsigned i = 0; i < 16; ++i)
        if (!sizes[i].empty() && std::strtoull(sizes[i].c_str(), nullptr, 16) != 0)
            out += (out.empty() ? "" : ",") + std::to_string(std::strtoull(bases[i].c_str(), nullptr, 16));
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s ADDRESS TO_DEVICE_MIB FROM_DEVICE_MIB TASKS\n", argv[0]);
        return 2;
    }
    const std::string address = argv[1];
    const uint64_t to_device = std::strtoull(argv[2], nullptr, 10) << 20;
    const uint64_t from_device = std::strtoull(argv[3], nullptr, 10) << 20;
    const int tasks = std::atoi(argv[4]);
    try {
        DeviceOptions options;
        options.function = address;
        options.allocator.vf_region_sizes = {64ull << 20};  // 64 MiB regions: the second one's base is not 0
        Device dev = Device::Open(options);

        std::vector<uint8_t> host(std::max(to_device, from_device) + 1, 0x5a);
        if (to_device) {
            DeviceBuffer buf = dev.AllocateBuffer(to_device);
            dev.default_stream().CopyToDevice(host.data(), buf.handle(), to_device);
            dev.default_stream().Synchronize();
        }
        if (from_device) {
            DeviceBuffer buf = dev.AllocateBuffer(from_device);
            dev.dma().Wait(dev.dma().CopyFromDevice(host.data(), buf.handle(), from_device));
        }
        if (tasks > 0) {
            Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
            const std::vector<uint8_t> program = test::AddProgram256();
            const DeviceBuffer prog = test::UploadProgram(dev, program);  // an inline copy: no DMA counted
            orch.RegisterDeviceKernel(1, dev.allocator().DeviceAddress(prog.handle(), program.size()));
            std::vector<void*> bufs;
            {
                auto scope = orch.BeginScope();
                for (int t = 0; t < tasks; ++t) {
                    void* a = orch.Alloc(1024);
                    void* b = orch.Alloc(1024);
                    bufs.push_back(a);
                    bufs.push_back(b);
                    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, b, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
                    orch.Submit(1, WORKER_VECTOR, p);
                }
                orch.WaitAll();
            }
            for (void* p : bufs) orch.Free(p);
        }
        std::printf("ready pid=%d to_device=%llu from_device=%llu tasks=%d region_bases=%s\n", int(::getpid()),
                    static_cast<unsigned long long>(to_device), static_cast<unsigned long long>(from_device), tasks,
                    RegionBases(address).c_str());
        std::fflush(stdout);
        std::string rest;
        while (std::getline(std::cin, rest)) {
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "smi_worker: %s\n", e.what());
        return 1;
    }
    return 0;
}
