// SPDX-License-Identifier: Apache-2.0
// The chip function remote-call tests register: C = A + B (fp32, same
// shape) run on the serving rank's device with a kernel-builder program,
// and its CPU reference.
#pragma once

#include <cstring>
#include <vector>

#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/device/device.hpp"
#include "spyre/host/remote_chip.hpp"
#include "spyre/memory/allocator.hpp"
#include "spyre/stream/flex_stream.hpp"

namespace spyre::test {

inline void DeviceAdd(Device& dev, const host::RemoteCall& call, std::vector<host::WireTensor>& outputs) {
    if (call.inputs.size() != 2 || outputs.size() != 1)
        throw Error(ErrorKind::InvalidArgument, "add takes 2 inputs and 1 output");
    const BuiltKernel k = KernelBuilder().Elementwise(ElementwiseOp::Add, call.inputs[0].spec.shape,
                                                      call.inputs[1].spec.shape, DType::FP32);
    const uint64_t a_bytes = k.inputs[0].bytes, b_bytes = k.inputs[1].bytes, c_bytes = k.outputs[0].bytes;
    if (a_bytes != call.inputs[0].data.size() || b_bytes != call.inputs[1].data.size() || c_bytes != outputs[0].data.size())
        throw Error(ErrorKind::InvalidArgument, "add: operands are not dense fp32 tensors of one shape");
    SpyreAllocator& alloc = dev.allocator();
    DeviceAllocation a = alloc.Allocate(a_bytes), b = alloc.Allocate(b_bytes), c = alloc.Allocate(c_bytes);
    const std::vector<uint64_t> addrs = {alloc.DeviceAddress(a.handle, a_bytes), alloc.DeviceAddress(b.handle, b_bytes),
                                         alloc.DeviceAddress(c.handle, c_bytes)};
    const std::vector<uint8_t> program = k.Bind(addrs);
    DeviceAllocation p = alloc.Allocate(program.size());
    FlexStream& s = dev.default_stream();
    s.CopyToDevice(program.data(), p.handle, program.size());
    s.CopyToDevice(call.inputs[0].data.data(), a.handle, a_bytes);
    s.CopyToDevice(call.inputs[1].data.data(), b.handle, b_bytes);
    s.Launch(p.handle);
    s.CopyFromDevice(outputs[0].data.data(), c.handle, c_bytes);
    try {
        s.Synchronize();
    } catch (...) {
        s.Reset();
        for (DeviceAllocation* x : {&a, &b, &c, &p}) alloc.Free(x->handle);
        throw;
    }
    for (DeviceAllocation* x : {&a, &b, &c, &p}) alloc.Free(x->handle);
}

// A launch of bytes that are no program: the device faults (DeviceError with a device code).
inline void DeviceFault(Device& dev, const host::RemoteCall&, std::vector<host::WireTensor>&) {
    SpyreAllocator& alloc = dev.allocator();
    DeviceAllocation junk = alloc.Allocate(4096);
    const std::vector<uint8_t> garbage(4096, 0xAB);
    FlexStream& s = dev.default_stream();
    s.CopyToDevice(garbage.data(), junk.handle, garbage.size());
    s.Launch(junk.handle, 256);
    try {
        s.Synchronize();
    } catch (...) {
        s.Reset();
        alloc.Free(junk.handle);
        throw;
    }
    alloc.Free(junk.handle);
}

inline host::WireTensor Fp32Tensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
    host::WireTensor t{{shape, DType::FP32}, std::vector<uint8_t>(values.size() * sizeof(float))};
    std::memcpy(t.data.data(), values.data(), t.data.size());
    return t;
}

inline std::vector<uint8_t> CpuAdd(const host::WireTensor& a, const host::WireTensor& b) {
    const size_t n = a.data.size() / sizeof(float);
    std::vector<float> x(n), y(n), z(n);
    std::memcpy(x.data(), a.data.data(), a.data.size());
    std::memcpy(y.data(), b.data.data(), b.data.size());
    for (size_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
    std::vector<uint8_t> out(a.data.size());
    std::memcpy(out.data(), z.data(), out.size());
    return out;
}

}  // namespace spyre::test
