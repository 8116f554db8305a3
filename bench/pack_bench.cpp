// SPDX-License-Identifier: Apache-2.0
// Pack and unpack throughput (host layout <-> device layout), printed beside
// memcpy of the same bytes measured in the same run.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "bench_main.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/tensor/pack.hpp"

using namespace spyre;

namespace {

std::map<std::string, double> g_memcpy_seconds;  // shape name -> seconds per memcpy

struct Shape {
    const char* name;
    std::vector<int64_t> size;
};
const Shape kShapes[] = {{"4096x4096_fp16", {4096, 4096}}, {"4000x4000_fp16_padded", {4000, 4000}}};

double TimePer(benchmark::State& state, std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(state.iterations());
}

void BM_Memcpy(benchmark::State& state, const Shape& shape) {
    const HostLayout host = HostLayout::Contiguous(shape.size, DType::FP16);
    const size_t bytes = size_t(host.numel()) * 2;
    std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        std::memcpy(b.data(), a.data(), bytes);
        benchmark::ClobberMemory();
    }
    g_memcpy_seconds[shape.name] = TimePer(state, t0);
    state.SetBytesProcessed(int64_t(bytes) * state.iterations());
}

void BM_Pack(benchmark::State& state, const Shape& shape, bool unpack) {
    const HostLayout host = HostLayout::Contiguous(shape.size, DType::FP16);
    const DeviceLayout device = DeviceLayout::Default(host);
    const size_t bytes = size_t(host.numel()) * 2;
    std::vector<uint8_t> h(bytes, 3), image(size_t(device.device_bytes()), 4);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        if (unpack)
            Unpack(image.data(), device, host, h.data());
        else
            Pack(h.data(), host, device, image.data());
        benchmark::ClobberMemory();
    }
    const double secs = TimePer(state, t0);
    state.SetBytesProcessed(int64_t(bytes) * state.iterations());
    if (g_memcpy_seconds.count(shape.name)) state.counters["x_memcpy"] = g_memcpy_seconds[shape.name] / secs;
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    for (const Shape& s : kShapes) {
        benchmark::RegisterBenchmark((std::string("baseline/memcpy/") + s.name).c_str(), BM_Memcpy, s)->UseRealTime();
        benchmark::RegisterBenchmark((std::string("pack/") + s.name).c_str(), BM_Pack, s, false)->UseRealTime();
        benchmark::RegisterBenchmark((std::string("unpack/") + s.name).c_str(), BM_Pack, s, true)->UseRealTime();
    }
    return spyre::bench::RunBenchmarks("pack_bench", std::chrono::seconds(120));
}
