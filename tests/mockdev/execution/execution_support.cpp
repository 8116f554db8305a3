// SPDX-License-Identifier: Apache-2.0
#include "execution_support.hpp"

#include <cstring>
#include <random>

namespace spyre::test {

namespace {

uint16_t Bf16Bits(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

float Bf16Value(uint16_t bits) {
    const uint32_t wide = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &wide, sizeof f);
    return f;
}

template <typename T>
void Store(uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof v);
}

template <typename T>
T Load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

}  // namespace


double RoundTo(DType dtype, double value) {
    switch (dtype) {
    case DType::FP32: return float(value);
    case DType::FP16: return double(static_cast<_Float16>(value));
    case DType::BF16: return Bf16Value(Bf16Bits(float(value)));
    case DType::INT8: return double(int8_t(value));
    case DType::INT32: return double(int32_t(value));
    }
    return value;
}

std::vector<double> RandomValues(size_t n, DType dtype, uint32_t seed, double lo, double hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(n);
    for (double& x : v) x = RoundTo(dtype, dist(gen));
    return v;
}

void ForEachElement(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                    const std::function<void(size_t, int64_t)>& fn) {
    std::vector<int64_t> idx(shape.size(), 0);
    size_t total = 1;
    for (int64_t s : shape) total *= size_t(s);
    for (size_t linear = 0; linear < total; ++linear) {
        int64_t off = 0;
        for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
        fn(linear, off);
        for (size_t d = shape.size(); d-- > 0;) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
}

TestDevice::TestDevice(const driver::FunctionInfo& info)
    : fn_(driver::Function::Open(info)), mem_(fn_.MapRegion(SPYRE_REGION_DEVMEM)) {
    ring_.emplace(fn_);
}

void TestDevice::Reset() {
    ring_.reset();
    ring_.emplace(fn_);
}

uint8_t* TestDevice::At(uint64_t addr, uint64_t len) {
    if (addr > mem_.size() || len > mem_.size() - addr)
        throw Error(ErrorKind::InvalidArgument, "test access outside the function's memory");
    return mem_.data() + addr;
}

uint64_t TestDevice::Alloc(uint64_t bytes) {
    const uint64_t addr = next_;
    next_ = (next_ + bytes + SPYRE_STICK_BYTES - 1) / SPYRE_STICK_BYTES * SPYRE_STICK_BYTES;
    At(addr, bytes);  // fits
    return addr;
}

uint64_t TestDevice::Put(std::span<const uint8_t> bytes) {
    const uint64_t addr = Alloc(bytes.size());
    std::memcpy(At(addr, bytes.size()), bytes.data(), bytes.size());
    return addr;
}

std::vector<driver::Completion> TestDevice::Run(std::span<const spyre_cb> cbs) {
    std::vector<spyre_cb> tagged(cbs.begin(), cbs.end());
    for (spyre_cb& cb : tagged)
        if (cb.user_data == 0) cb.user_data = ++tag_;
    ring_->Submit(tagged);
    std::vector<driver::Completion> done(cbs.size());
    for (size_t got = 0; got < done.size();)
        got += ring_->Wait(std::span(done).subspan(got), done.size() - got, {.mode = driver::WaitMode::Blocking});
    return done;
}

driver::Completion TestDevice::Run(const spyre_cb& cb) { return Run(std::span(&cb, 1))[0]; }

driver::Completion TestDevice::LaunchProgram(std::span<const uint8_t> program) {
    return Run(LaunchCb(Put(program), program.size()));
}

void TestDevice::WriteTensor(uint64_t addr, const KernelTensor& t, const std::vector<double>& values) {
    const size_t size = ElementSize(t.dtype);
    uint8_t* base = At(addr, t.bytes);
    ForEachElement(t.shape, t.strides, [&](size_t i, int64_t off) {
        uint8_t* p = base + size_t(off) * size;
        switch (t.dtype) {
        case DType::FP32: Store(p, float(values.at(i))); break;
        case DType::FP16: Store(p, static_cast<_Float16>(values.at(i))); break;
        case DType::BF16: Store(p, Bf16Bits(float(values.at(i)))); break;
        case DType::INT8: Store(p, int8_t(values.at(i))); break;
        case DType::INT32: Store(p, int32_t(values.at(i))); break;
        }
    });
}

std::vector<double> TestDevice::ReadTensor(uint64_t addr, const KernelTensor& t) {
    const size_t size = ElementSize(t.dtype);
    const uint8_t* base = At(addr, t.bytes);
    std::vector<double> out;
    ForEachElement(t.shape, t.strides, [&](size_t, int64_t off) {
        const uint8_t* p = base + size_t(off) * size;
        switch (t.dtype) {
        case DType::FP32: out.push_back(Load<float>(p)); break;
        case DType::FP16: out.push_back(double(Load<_Float16>(p))); break;
        case DType::BF16: out.push_back(Bf16Value(Load<uint16_t>(p))); break;
        case DType::INT8: out.push_back(Load<int8_t>(p)); break;
        case DType::INT32: out.push_back(Load<int32_t>(p)); break;
        }
    });
    return out;
}

std::vector<uint64_t> TestDevice::Place(const BuiltKernel& kernel, const std::vector<std::vector<double>>& inputs) {
    std::vector<uint64_t> addrs;
    for (size_t i = 0; i < kernel.inputs.size(); ++i) {
        addrs.push_back(Alloc(kernel.inputs[i].bytes));
        WriteTensor(addrs.back(), kernel.inputs[i], inputs.at(i));
    }
    for (const KernelTensor& t : kernel.outputs) addrs.push_back(Alloc(t.bytes));
    return addrs;
}

std::vector<double> TestDevice::RunKernel(const BuiltKernel& kernel, const std::vector<std::vector<double>>& inputs) {
    const std::vector<uint64_t> addrs = Place(kernel, inputs);
    const driver::Completion c = LaunchProgram(kernel.Bind(addrs));
    if (!c.ok()) ADD_FAILURE() << kernel.name << ": LAUNCH failed with " << spyre_error_name(c.status);
    return ReadTensor(addrs[kernel.inputs.size()], kernel.outputs[0]);
}

void ExecutionTest::SetUp() {
    MockDeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    pf_ = std::make_unique<TestDevice>(Pf());
}

void ExecutionTest::TearDown() {
    pf_.reset();
    MockDeviceTest::TearDown();
}

}  // namespace spyre::test
