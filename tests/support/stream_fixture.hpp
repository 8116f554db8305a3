// SPDX-License-Identifier: Apache-2.0
// A fixture that opens spyre::Device objects on the test's private mock.
#pragma once

#include <cstdlib>
#include <stdexcept>

#include "mock_fixture.hpp"
#include "spyre/device/device.hpp"

namespace spyre::test {

class StreamTest : public MockDeviceTest {
protected:
    void SetUp() override {
        MockDeviceTest::SetUp();
        if (IsSkipped()) return;
        ::setenv("SPYRE_DEV_ROOT", daemon().mount().c_str(), 1);
        ::unsetenv("FLEX_DEVICE");
        ::unsetenv("SPYRE_DEVICES");
    }
    // The PF (vf < 0) or VF `vf` (numbered from 1, as Vf() numbers them) as
    // a Device with `options`.
    Device OpenDevice(int vf = -1, DeviceOptions options = {}) {
        // Vf(0) would name the PF: a test asking for "VF 0" meant a VF.
        if (vf == 0) throw std::invalid_argument("OpenDevice: VFs are numbered from 1 (OpenDevice() is the PF)");
        options.function = vf < 0 ? Pf().pci_address : Vf(vf).pci_address;
        if (vf >= 0) options.allocator.vf_region_sizes = {256ull << 20};
        return Device::Open(std::move(options));
    }
};

}  // namespace spyre::test
