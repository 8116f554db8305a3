// SPDX-License-Identifier: Apache-2.0
// Remote chip calls (seed 003's level 4): what one rank asks of another's
// devices. A chip call names a function registered on the serving rank, a
// device of that rank, and host tensors (shape, dtype, bytes): the inputs'
// bytes travel with the request, the outputs' bytes come back with the reply.
// A failure comes back as a RemoteChipError: which task, rank, host, device
// and function, and the serving side's error kind, message and device code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spyre/error.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::host {

struct WireSpec {
    std::vector<int64_t> shape;  // 1 to 8 dims, each >= 1
    DType dtype = DType::FP32;
    // Bytes of a dense tensor of this spec; InvalidArgument for a bad shape.
    uint64_t bytes() const;
};

// A tensor's bytes as they travel between ranks.
struct WireTensor {
    WireSpec spec;
    std::vector<uint8_t> data;  // spec.bytes() bytes, dense, row-major
};

struct RemoteCall {
    std::string task;      // the caller's task name (for errors)
    std::string function;  // a name registered with the serving rank's RemoteChipService
    std::string device;    // a selector of the serving rank's Host ("0", "0000:01:00.0")
    std::vector<WireTensor> inputs;
    std::vector<WireSpec> outputs;  // what the call must return
    // How the chip function takes its arguments, in order (a level-3 chip
    // task's In, Out and InOut arguments): inputs are the In and InOut ones
    // in order, outputs the Out and InOut ones. Empty: the inputs, then the
    // outputs. kOutInPlace: an Out argument over exactly the bytes of an In
    // argument (an in-place call), which starts as those bytes: an output
    // that sends none of its own.
    enum : uint8_t { kIn = 0, kOut = 1, kInOut = 2, kOutInPlace = 3 };
    std::vector<uint8_t> access;
    // For each kOutInPlace argument, in order: the place in `access` of the
    // In argument whose bytes it names (the serving rank gives the chip
    // function both over one buffer, as this rank's devices would).
    std::vector<uint32_t> in_place_of;
};

// One function of a remote rank's Host, as its discovery saw it.
struct RemoteFunction {
    std::string pci_address;
    bool is_vf = false;
    uint16_t card = 0;
    uint16_t function = 0;
    uint64_t memory_bytes = 0;
};

struct RankDescription {
    int rank = -1;
    std::string host_name;
    int pid = 0;
    std::string host;                          // Host::Describe() there
    std::vector<RemoteFunction> functions;     // Host::functions() there
    std::vector<std::string> chip_functions;   // registered call names, sorted
    // Chip tasks each device of its level-4 Worker runs at once, in that
    // Worker's device order (a call's `device` indexes it); empty when it
    // serves no Worker: the caller then sends one call per device at a time.
    std::vector<uint32_t> chip_tasks_at_once;
    // The PCI addresses of those devices, in the same order (empty without
    // a Worker): rank 0 checks that every rank opened the device_ids it did.
    std::vector<std::string> served_devices;
};

// What the serving rank said went wrong.
struct RemoteFailure {
    std::string task;
    int rank = -1;
    std::string host_name;
    std::string device;
    std::string function;
    ErrorKind cause = ErrorKind::Internal;  // the serving side's error kind
    std::string message;                    // its message
    uint32_t device_code = 0;               // SPYRE_ERR_* when the device faulted
    bool host_kernel_code = false;          // device_code is a host kernel's own return code instead
};

// A failed remote call: still a spyre::Error, of the cause's kind, whose
// message names task, rank, host, device and function.
class RemoteChipError : public Error {
public:
    explicit RemoteChipError(RemoteFailure failure);
    const RemoteFailure& failure() const noexcept { return failure_; }

private:
    RemoteFailure failure_;
};

}  // namespace spyre::host
SPYRE_API_END
