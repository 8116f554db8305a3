// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/remote_chip.hpp"

#include <limits>

#include "spyre/host/transport.hpp"

namespace spyre::host {

uint64_t WireSpec::bytes() const {
    if (shape.empty() || shape.size() > 8)
        throw Error(ErrorKind::InvalidArgument, "tensor shape " + ShapeText(shape) + " has " + std::to_string(shape.size()) +
                                                    " dims (1 to 8)");
    uint64_t n = ElementSize(dtype);
    for (int64_t d : shape) {
        // Bounded so that no product overflows: a tensor is at most a payload.
        if (d < 1 || static_cast<uint64_t>(d) > kMaxPayloadBytes || n * static_cast<uint64_t>(d) > kMaxPayloadBytes)
            throw Error(ErrorKind::InvalidArgument, "tensor shape " + ShapeText(shape) + ": dims must be >= 1 and the tensor at most " +
                                                        std::to_string(kMaxPayloadBytes) + " bytes");
        n *= static_cast<uint64_t>(d);
    }
    return n;
}

namespace {
std::string Describe(const RemoteFailure& f) {
    return "task '" + f.task + "' on rank " + std::to_string(f.rank) + " (host " + f.host_name + "), device " +
           (f.device.empty() ? "-" : f.device) + ", function '" + f.function + "': " + ToString(f.cause) + ": " + f.message;
}
ErrorContext Context(const RemoteFailure& f) {
    ErrorContext c;
    c.device = "rank " + std::to_string(f.rank) + "@" + f.host_name + (f.device.empty() ? "" : ":" + f.device);
    c.device_code = f.device_code;
    c.host_kernel_code = f.host_kernel_code;
    return c;
}
}  // namespace

RemoteChipError::RemoteChipError(RemoteFailure failure)
    : Error(failure.cause, Describe(failure), Context(failure)), failure_(std::move(failure)) {}

}  // namespace spyre::host
