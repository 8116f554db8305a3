// SPDX-License-Identifier: Apache-2.0
// Test support for device execution: a function ready to run programs (its
// ring, its memory mapped through DEVMEM, a bump allocator over it), the CBs
// of the execution opcodes, and tensors written and read in their device
// layout. Host values are doubles in row-major order whatever the dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/compiler/kernel_builder.hpp"

namespace spyre::test {

using driver::CopyCb;
using driver::CorrectCb;
using driver::LaunchCb;
using driver::SemWaitCb;
using driver::SemWriteCb;

// The value as the dtype stores it (fp16/bf16/fp32 rounded to nearest even,
// integers truncated), back as a double.
double RoundTo(DType dtype, double value);

// `n` values uniform in [lo, hi), already representable in `dtype`.
std::vector<double> RandomValues(size_t n, DType dtype, uint32_t seed, double lo = -2.0, double hi = 2.0);

// Calls fn(linear index, element offset) for every element, row-major.
void ForEachElement(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                    const std::function<void(size_t, int64_t)>& fn);

class TestDevice {
public:
    // Opens the function (resetting it) and enables its ring.
    explicit TestDevice(const driver::FunctionInfo& info);

    driver::Function& fn() { return fn_; }
    driver::CommandRing& ring() { return *ring_; }
    // Function-level reset and a fresh ring (what CommandRing's constructor does).
    void Reset();
    // The function's device window (what CBs may address); the PF maps only
    // its own part of it (slice 0 while VFs exist).
    uint64_t mem_size() const { return fn_.device_info().mem_size; }
    // The mapped byte at a device address (function-relative); the range must fit.
    uint8_t* At(uint64_t addr, uint64_t len = 1);

    // 128-aligned bump allocation, from 1 MiB up: address 0 stays unused, so a
    // program that was never corrected cannot hit a test's tensors.
    uint64_t Alloc(uint64_t bytes);
    // Alloc and copy in.
    uint64_t Put(std::span<const uint8_t> bytes);

    // Submits the CBs with one doorbell and waits for all their completions.
    std::vector<driver::Completion> Run(std::span<const spyre_cb> cbs);
    driver::Completion Run(const spyre_cb& cb);
    // Loads `program` into fresh device memory and launches it.
    driver::Completion LaunchProgram(std::span<const uint8_t> program);

    void WriteTensor(uint64_t addr, const KernelTensor& t, const std::vector<double>& values);
    std::vector<double> ReadTensor(uint64_t addr, const KernelTensor& t);

    // Allocates every tensor of `kernel` (inputs then outputs), writes the
    // inputs and returns the addresses in relocation order.
    std::vector<uint64_t> Place(const BuiltKernel& kernel, const std::vector<std::vector<double>>& inputs);
    // Place, bind the addresses into the program, launch, and read the first output.
    std::vector<double> RunKernel(const BuiltKernel& kernel, const std::vector<std::vector<double>>& inputs);

private:
    driver::Function fn_;
    std::optional<driver::CommandRing> ring_;
    driver::MappedRegion mem_;
    uint64_t next_ = 1ull << 20;
    uint64_t tag_ = 0;
};

// A mock device per test, with its PF opened as a TestDevice.
class ExecutionTest : public MockDeviceTest {
protected:
    void SetUp() override;
    void TearDown() override;
    TestDevice& pf() { return *pf_; }

private:
    std::unique_ptr<TestDevice> pf_;
};

// The same with the card's watchdog at 300 ms.
class WatchdogTest : public ExecutionTest {
protected:
    driver::MockOptions Options() const override {
        driver::MockOptions o = ExecutionTest::Options();
        o.extra_args = {"--watchdog-ms", "300"};
        return o;
    }
};

}  // namespace spyre::test
