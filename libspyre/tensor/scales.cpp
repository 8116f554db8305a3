// SPDX-License-Identifier: Apache-2.0
#include "spyre/tensor/scales.hpp"

#include <algorithm>

#include "spyre/error.hpp"

namespace spyre {

namespace {

[[noreturn]] void Invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

void RequireRank(const HostLayout& t, int rank, const char* name, const char* op) {
    if (t.rank() != rank)
        Invalid(std::string(op) + ": " + name + " must have rank " + std::to_string(rank) + ", has " +
                std::to_string(t.rank()));
}

void RequireEqual(int64_t x, int64_t y, const std::string& what) {
    if (x != y) Invalid(what + " differ: " + std::to_string(x) + " vs " + std::to_string(y));
}

// Marks size-1 operation dimensions as elided in every tensor.
void Elide(OperationScales& op) {
    for (size_t d = 0; d < op.dim_sizes.size(); ++d)
        if (op.dim_sizes[d] == 1)
            for (auto& s : op.scales) s[d] = kScaleElided;
}

// InvalidArgument unless `device` lays out `host`'s canonical form, in its
// dtype; `tensor` ("tensor 1: ", or empty) names it.
void CheckDescribes(const DeviceLayout& device, const HostLayout& host, const std::string& tensor) {
    if (device.dtype() != host.dtype())
        Invalid(tensor + "host " + host.ToString() + " is " + ToString(host.dtype()) + ", " + device.ToString() + " is not");
    if (device.host_size() != host.Canonical().size())
        Invalid(tensor + device.ToString() + " does not describe host " + host.ToString());
}

// InvalidArgument unless `op` is whole: a name per dimension, one scale per
// dimension in each tensor's list, each a host dimension index, absent, or
// elided (only where the dimension has size 1). Hand-made operations
// reach CheckCompatible too, and it indexes all of them.
void CheckWhole(const OperationScales& op) {
    const size_t dims = op.dim_sizes.size();
    if (op.dim_names.size() != dims)
        Invalid("operation has " + std::to_string(dims) + " dimension sizes but " + std::to_string(op.dim_names.size()) +
                " dimension names");
    for (size_t t = 0; t < op.scales.size(); ++t) {
        if (op.scales[t].size() != dims)
            Invalid("tensor " + std::to_string(t) + " has " + std::to_string(op.scales[t].size()) +
                    " scales for an operation of " + std::to_string(dims) + " dimensions");
        for (size_t d = 0; d < dims; ++d) {
            const int s = op.scales[t][d];
            if (s < 0 && s != kScaleAbsent && s != kScaleElided)
                Invalid("tensor " + std::to_string(t) + ": scale " + std::to_string(s) + " of operation dimension " +
                        op.dim_names[d] + " names no host dimension");
            if (s == kScaleElided && op.dim_sizes[d] != 1)
                Invalid("tensor " + std::to_string(t) + ": operation dimension " + op.dim_names[d] + " of size " +
                        std::to_string(op.dim_sizes[d]) + " is marked elided (only a size-1 dimension is)");
        }
    }
}

}  // namespace

OperationScales MatmulScales(const HostLayout& a, const HostLayout& b) {
    RequireRank(a, 2, "A", "matmul");
    RequireRank(b, 2, "B", "matmul");
    RequireEqual(a.size()[1], b.size()[0], "matmul: K of A (dimension 1) and of B (dimension 0)");
    OperationScales op{{"M", "K", "N"}, {a.size()[0], a.size()[1], b.size()[1]},
                       {{0, 1, kScaleAbsent}, {kScaleAbsent, 0, 1}, {0, kScaleAbsent, 1}},
                       {a.size()[0], b.size()[1]}};
    Elide(op);
    return op;
}

OperationScales BatchedMatmulScales(const HostLayout& a, const HostLayout& b) {
    RequireRank(a, 3, "A", "batched matmul");
    RequireRank(b, 3, "B", "batched matmul");
    RequireEqual(a.size()[0], b.size()[0], "batched matmul: B of A and of B (dimension 0)");
    RequireEqual(a.size()[2], b.size()[1], "batched matmul: K of A (dimension 2) and of B (dimension 1)");
    OperationScales op{{"B", "M", "K", "N"}, {a.size()[0], a.size()[1], a.size()[2], b.size()[2]},
                       {{0, 1, 2, kScaleAbsent}, {0, kScaleAbsent, 1, 2}, {0, 1, kScaleAbsent, 2}},
                       {a.size()[0], a.size()[1], b.size()[2]}};
    Elide(op);
    return op;
}

OperationScales ElementwiseScales(const std::vector<HostLayout>& inputs) {
    if (inputs.empty()) Invalid("elementwise: no inputs");
    int rank = 0;
    for (const auto& t : inputs) rank = std::max(rank, t.rank());
    OperationScales op;
    op.dim_sizes.assign(rank, 1);
    for (int d = 0; d < rank; ++d) op.dim_names.push_back("d" + std::to_string(d));
    for (size_t i = 0; i < inputs.size(); ++i) {
        const int shift = rank - inputs[i].rank();
        for (int h = 0; h < inputs[i].rank(); ++h) {
            const int64_t s = inputs[i].size()[h];
            int64_t& o = op.dim_sizes[shift + h];
            if (s != 1 && o != 1 && s != o)
                Invalid("elementwise: input " + std::to_string(i) + " dimension " + std::to_string(h) + " has size " +
                        std::to_string(s) + ", which does not broadcast to " + std::to_string(o));
            o = std::max(o, s);
        }
    }
    for (const auto& t : inputs) {
        std::vector<int> s(rank, kScaleAbsent);
        const int shift = rank - t.rank();
        for (int h = 0; h < t.rank(); ++h)
            if (t.size()[h] == op.dim_sizes[shift + h]) s[shift + h] = h;
        op.scales.push_back(std::move(s));
    }
    std::vector<int> out(rank);
    for (int d = 0; d < rank; ++d) out[d] = d;
    op.scales.push_back(out);
    op.output_size = op.dim_sizes;
    Elide(op);
    return op;
}

OperationScales ReductionScales(const HostLayout& input, int axis, bool keep_dim) {
    const int given = axis;  // named as the caller wrote it
    if (axis < 0) axis += input.rank();
    if (axis < 0 || axis >= input.rank())
        Invalid("reduction: axis " + std::to_string(given) + " out of range for rank " + std::to_string(input.rank()) +
                " (-rank..rank-1)");
    OperationScales op;
    std::vector<int> in(input.rank()), out(input.rank());
    int next = 0;  // host dimension of the output
    for (int d = 0; d < input.rank(); ++d) {
        op.dim_names.push_back("d" + std::to_string(d));
        op.dim_sizes.push_back(input.size()[d]);
        in[d] = d;
        if (d == axis) {
            out[d] = kScaleAbsent;  // reduced away (kept only as a size-1 dimension)
            if (keep_dim) {
                op.output_size.push_back(1);
                ++next;
            }
        } else {
            out[d] = next++;
            op.output_size.push_back(input.size()[d]);
        }
    }
    op.scales = {in, out};
    Elide(op);
    return op;
}

int CanonicalDim(const HostLayout& host, int h) {
    if (h < 0 || h >= host.rank())
        Invalid("host dimension " + std::to_string(h) + " out of range for rank " + std::to_string(host.rank()));
    if (host.size()[h] == 1) return -1;
    int c = 0;
    for (int d = 0; d < h; ++d) c += host.size()[d] != 1;
    return c;
}

std::vector<std::vector<int>> OperationToDeviceDims(const std::vector<int>& scales, const HostLayout& host,
                                                    const DeviceLayout& device) {
    CheckDescribes(device, host, "");
    std::vector<std::vector<int>> out;
    for (int s : scales) {
        if ((s < 0 && s != kScaleAbsent && s != kScaleElided) || s >= host.rank())
            Invalid("scale " + std::to_string(s) + " names no host dimension of rank " + std::to_string(host.rank()) +
                    " (0..rank-1, or " + std::to_string(kScaleAbsent) + ": absent, " + std::to_string(kScaleElided) +
                    ": elided)");
        const int c = s >= 0 ? CanonicalDim(host, s) : -1;
        out.push_back(c >= 0 ? device.DeviceDimsOf(c) : std::vector<int>{});
    }
    return out;
}

void CheckCompatible(const OperationScales& op, const std::vector<HostLayout>& hosts,
                     const std::vector<DeviceLayout>& devices) {
    if (hosts.size() != op.scales.size() || devices.size() != op.scales.size())
        Invalid("operation has " + std::to_string(op.scales.size()) + " tensors, got " + std::to_string(hosts.size()) +
                " host and " + std::to_string(devices.size()) + " device layouts");
    CheckWhole(op);
    for (size_t t = 0; t < hosts.size(); ++t) {
        CheckDescribes(devices[t], hosts[t], "tensor " + std::to_string(t) + ": ");
        for (size_t d = 0; d < op.dim_sizes.size(); ++d) {
            const int s = op.scales[t][d];
            if (s < 0) continue;
            if (s >= hosts[t].rank() || hosts[t].size()[s] != op.dim_sizes[d])
                Invalid("operation dimension " + op.dim_names[d] + " (size " + std::to_string(op.dim_sizes[d]) +
                        ") does not match host dimension " + std::to_string(s) + " of tensor " + std::to_string(t));
        }
    }
    // Tensors that hold the same operation dimension in their stick must tile it alike.
    for (size_t d = 0; d < op.dim_sizes.size(); ++d) {
        std::vector<int64_t> tiling;
        size_t first = 0;
        for (size_t t = 0; t < hosts.size(); ++t) {
            const int s = op.scales[t][d];
            if (s < 0) continue;
            const int c = CanonicalDim(hosts[t], s);
            const auto& dev = devices[t];
            if (c < 0 || dev.dim_map().back() != c) continue;
            std::vector<int64_t> mine;
            for (int j : dev.DeviceDimsOf(c)) mine.push_back(dev.device_size()[j]);
            if (tiling.empty()) {
                tiling = mine;
                first = t;
            } else if (mine != tiling) {
                Invalid("operation dimension " + op.dim_names[d] + " is tiled differently in the sticks of tensor " +
                        std::to_string(first) + " and tensor " + std::to_string(t));
            }
        }
    }
}

}  // namespace spyre
