// SPDX-License-Identifier: Apache-2.0
#include "host/remote_protocol.hpp"

#include <algorithm>

#include "host/transport/byte_codec.hpp"

namespace spyre::host::remote {

namespace {

using wire::ByteReader;
using wire::ByteWriter;

constexpr size_t kMaxTensors = kMaxCallTensors;
constexpr size_t kMaxFunctions = 4096;
constexpr uint32_t kMaxChipTasksAtOnce = 256;  // a device's task queues bound it far lower

std::string What(const char* kind, const Message& m) { return std::string(kind) + " from rank " + std::to_string(m.source); }

void PutSpec(ByteWriter& w, const WireSpec& spec) {
    spec.bytes();  // validates before anything leaves
    w.Put<uint8_t>(static_cast<uint8_t>(spec.dtype));
    w.Put<uint8_t>(static_cast<uint8_t>(spec.shape.size()));
    for (int64_t d : spec.shape) w.Put<int64_t>(d);
}

WireSpec GetSpec(ByteReader& r) {
    WireSpec spec;
    const uint8_t dtype = r.Get<uint8_t>("dtype");
    if (dtype > static_cast<uint8_t>(DType::INT32)) r.Fail("dtype " + std::to_string(dtype) + " is unknown");
    spec.dtype = static_cast<DType>(dtype);
    const uint8_t rank = r.Get<uint8_t>("tensor rank");
    if (rank < 1 || rank > kMaxCallRank) r.Fail("tensor rank " + std::to_string(rank) + " (1 to " + std::to_string(kMaxCallRank) + ")");
    for (uint8_t i = 0; i < rank; ++i) spec.shape.push_back(r.Get<int64_t>("dim"));
    try {
        spec.bytes();
    } catch (const Error& e) {
        r.Fail(e.message());
    }
    return spec;
}

std::vector<WireSpec> GetSpecs(ByteReader& r, const char* what) {
    const uint32_t n = r.Get<uint32_t>(what);
    if (n > kMaxTensors) r.Fail(std::string(what) + ": " + std::to_string(n) + " tensors (at most " + std::to_string(kMaxTensors) + ")");
    std::vector<WireSpec> specs;
    for (uint32_t i = 0; i < n; ++i) specs.push_back(GetSpec(r));
    return specs;
}

Message Make(uint16_t type, ByteWriter& w) {
    Message m;
    m.type = type;
    m.header = w.Take();
    return m;
}

// Whether `value` names an ErrorKind: a switch over every kind, so a kind
// added to the enum without a case here is a -Wswitch warning.
bool IsErrorKind(uint8_t value) {
    switch (static_cast<ErrorKind>(value)) {
    case ErrorKind::InvalidArgument:
    case ErrorKind::NotFound:
    case ErrorKind::Busy:
    case ErrorKind::PermissionDenied:
    case ErrorKind::Unsupported:
    case ErrorKind::DeviceError:
    case ErrorKind::DeviceLost:
    case ErrorKind::Timeout:
    case ErrorKind::NotReady:
    case ErrorKind::OutOfMemory:
    case ErrorKind::IoError:
    case ErrorKind::ProtocolError:
    case ErrorKind::Internal:
    case ErrorKind::WrongDevice:
    case ErrorKind::TaskFailed: return true;
    }
    return false;
}

}  // namespace

Message EncodeDescribe(uint64_t id) {
    ByteWriter w;
    w.Put<uint64_t>(id);
    return Make(kDescribe, w);
}

Message EncodeDescribeReply(uint64_t id, const RankDescription& d) {
    ByteWriter w;
    w.Put<uint64_t>(id);
    w.Put<int32_t>(d.rank);
    w.PutString(d.host_name);
    w.Put<int32_t>(d.pid);
    w.PutString(d.host);
    w.Put<uint32_t>(static_cast<uint32_t>(d.functions.size()));
    for (const RemoteFunction& f : d.functions) {
        w.PutString(f.pci_address);
        w.Put<uint8_t>(f.is_vf ? 1 : 0);
        w.Put<uint16_t>(f.card);
        w.Put<uint16_t>(f.function);
        w.Put<uint64_t>(f.memory_bytes);
    }
    w.Put<uint32_t>(static_cast<uint32_t>(d.chip_functions.size()));
    for (const std::string& name : d.chip_functions) w.PutString(name);
    w.Put<uint32_t>(static_cast<uint32_t>(d.chip_tasks_at_once.size()));
    for (uint32_t room : d.chip_tasks_at_once) w.Put<uint32_t>(room);
    w.Put<uint32_t>(static_cast<uint32_t>(d.served_devices.size()));
    for (const std::string& address : d.served_devices) w.PutString(address);
    return Make(kDescribeReply, w);
}

RankDescription DecodeDescribeReply(const Message& m) {
    ByteReader r(m.header, What("describe reply", m));
    RankDescription d;
    r.Get<uint64_t>("id");
    d.rank = r.Get<int32_t>("rank");
    d.host_name = r.GetString("host name");
    d.pid = r.Get<int32_t>("pid");
    d.host = r.GetString("host description");
    const uint32_t n = r.Get<uint32_t>("function count");
    if (n > kMaxFunctions) r.Fail(std::to_string(n) + " functions");
    for (uint32_t i = 0; i < n; ++i) {
        RemoteFunction f;
        f.pci_address = r.GetString("PCI address");
        f.is_vf = r.Get<uint8_t>("kind") != 0;
        f.card = r.Get<uint16_t>("card");
        f.function = r.Get<uint16_t>("function");
        f.memory_bytes = r.Get<uint64_t>("memory bytes");
        d.functions.push_back(std::move(f));
    }
    const uint32_t names = r.Get<uint32_t>("chip function count");
    if (names > kMaxFunctions) r.Fail(std::to_string(names) + " chip functions");
    for (uint32_t i = 0; i < names; ++i) d.chip_functions.push_back(r.GetString("chip function"));
    const uint32_t rooms = r.Get<uint32_t>("device count");
    if (rooms > kMaxFunctions) r.Fail(std::to_string(rooms) + " devices");
    for (uint32_t i = 0; i < rooms; ++i) {
        const uint32_t room = r.Get<uint32_t>("chip tasks at once");
        if (room == 0 || room > kMaxChipTasksAtOnce)
            r.Fail("device " + std::to_string(i) + " runs " + std::to_string(room) + " chip tasks at once (1.." +
                   std::to_string(kMaxChipTasksAtOnce) + ")");
        d.chip_tasks_at_once.push_back(room);
    }
    const uint32_t served = r.Get<uint32_t>("served device count");
    if (served > kMaxFunctions) r.Fail(std::to_string(served) + " served devices");
    for (uint32_t i = 0; i < served; ++i) d.served_devices.push_back(r.GetString("served device"));
    r.ExpectEnd();
    if (d.rank != m.source) r.Fail("it says it is rank " + std::to_string(d.rank));
    return d;
}

// The argument order must account for every input and output exactly once,
// and each in-place Out name an In argument of its own shape and type.
template <typename Fail>
void CheckAccess(const RemoteCall& call, Fail&& fail) {
    const std::vector<uint8_t>& access = call.access;
    if (access.empty()) {
        if (!call.in_place_of.empty()) fail("in-place outputs without an argument order");
        return;
    }
    size_t in = 0, out = 0, in_place = 0;
    std::vector<size_t> input_of(access.size(), SIZE_MAX);  // argument -> its input
    for (size_t i = 0; i < access.size(); ++i) {
        const uint8_t a = access[i];
        if (a > RemoteCall::kOutInPlace)
            fail("argument access " + std::to_string(a) + " is none of In, Out, InOut, in-place Out");
        if (a == RemoteCall::kIn || a == RemoteCall::kInOut) input_of[i] = in++;
        out += a != RemoteCall::kIn;
        in_place += a == RemoteCall::kOutInPlace;
    }
    if (in != call.inputs.size() || out != call.outputs.size())
        fail("its argument order names " + std::to_string(in) + " inputs and " + std::to_string(out) +
             " outputs, the call carries " + std::to_string(call.inputs.size()) + " and " +
             std::to_string(call.outputs.size()));
    if (in_place != call.in_place_of.size())
        fail("it has " + std::to_string(in_place) + " in-place outputs and names the inputs of " +
             std::to_string(call.in_place_of.size()));
    size_t k = 0;
    out = 0;
    for (size_t i = 0; i < access.size(); ++i) {
        if (access[i] == RemoteCall::kIn) continue;
        const size_t output = out++;
        if (access[i] != RemoteCall::kOutInPlace) continue;
        const uint32_t of = call.in_place_of[k++];
        if (of >= access.size() || access[of] != RemoteCall::kIn)
            fail("in-place output " + std::to_string(i) + " names argument " + std::to_string(of) + ", not an In argument");
        const WireSpec& in_spec = call.inputs[input_of[of]].spec;
        const WireSpec& out_spec = call.outputs[output];
        if (in_spec.dtype != out_spec.dtype || in_spec.shape != out_spec.shape)
            fail("in-place output " + std::to_string(i) + " is " + ShapeText(out_spec.shape) + " " + ToString(out_spec.dtype) +
                 ", its In argument " + std::to_string(of) + " " + ShapeText(in_spec.shape) + " " + ToString(in_spec.dtype));
    }
}

Message EncodeCall(uint64_t id, RemoteCall& call) {
    if (call.inputs.size() > kMaxTensors || call.outputs.size() > kMaxTensors)
        throw Error(ErrorKind::InvalidArgument, "chip call '" + call.task + "': at most " + std::to_string(kMaxTensors) +
                                                    " inputs and outputs");
    ByteWriter w;
    w.Put<uint64_t>(id);
    w.PutString(call.task);
    w.PutString(call.function);
    w.PutString(call.device);
    w.Put<uint32_t>(static_cast<uint32_t>(call.inputs.size()));
    for (size_t i = 0; i < call.inputs.size(); ++i) {
        const WireTensor& t = call.inputs[i];
        PutSpec(w, t.spec);
        if (t.data.size() != t.spec.bytes())
            throw Error(ErrorKind::InvalidArgument, "chip call '" + call.task + "': input " + std::to_string(i) + " has " +
                                                        std::to_string(t.data.size()) + " bytes, its shape " +
                                                        ShapeText(t.spec.shape) + " needs " + std::to_string(t.spec.bytes()));
    }
    // The reply must fit a message too: refused here, before the serving
    // rank allocates and runs what it could not send back.
    uint64_t output_bytes = 0;
    for (const WireSpec& s : call.outputs) output_bytes += s.bytes();
    if (output_bytes > kMaxMessagePayloadBytes)
        throw Error(ErrorKind::InvalidArgument, "chip call '" + call.task + "': its outputs' " + std::to_string(output_bytes) +
                                                    " bytes in all are over the limit of " +
                                                    std::to_string(kMaxMessagePayloadBytes) + " of one reply");
    w.Put<uint32_t>(static_cast<uint32_t>(call.outputs.size()));
    for (const WireSpec& s : call.outputs) PutSpec(w, s);
    CheckAccess(call, [&](const std::string& why) { throw Error(ErrorKind::InvalidArgument, "chip call '" + call.task + "': " + why); });
    w.Put<uint32_t>(static_cast<uint32_t>(call.access.size()));
    for (uint8_t a : call.access) w.Put<uint8_t>(a);
    for (uint32_t of : call.in_place_of) w.Put<uint32_t>(of);
    Message m = Make(kCall, w);
    for (WireTensor& t : call.inputs) m.payloads.push_back(std::move(t.data));
    return m;
}

// The head of a call, before its tensors: its id, task, function and device.
static uint64_t ReadCallHead(ByteReader& r, RemoteCall& call) {
    const uint64_t id = r.Get<uint64_t>("id");
    call.task = r.GetString("task");
    call.function = r.GetString("function");
    call.device = r.GetString("device");
    return id;
}

std::pair<uint64_t, RemoteCall> DecodeCall(Message& m) {
    ByteReader r(m.header, What("chip call", m));
    RemoteCall call;
    const uint64_t id = ReadCallHead(r, call);
    for (WireSpec& s : GetSpecs(r, "inputs")) call.inputs.push_back(WireTensor{std::move(s), {}});
    call.outputs = GetSpecs(r, "outputs");
    const uint32_t arguments = r.Get<uint32_t>("argument count");
    if (arguments > 2 * kMaxTensors) r.Fail(std::to_string(arguments) + " arguments");
    for (uint32_t i = 0; i < arguments; ++i) call.access.push_back(r.Get<uint8_t>("argument access"));
    for (uint8_t a : call.access)
        if (a == RemoteCall::kOutInPlace) call.in_place_of.push_back(r.Get<uint32_t>("in-place output's input"));
    CheckAccess(call, [&](const std::string& why) { r.Fail(why); });
    r.ExpectEnd();
    if (m.payloads.size() != call.inputs.size())
        r.Fail(std::to_string(call.inputs.size()) + " inputs but " + std::to_string(m.payloads.size()) + " payloads");
    for (size_t i = 0; i < call.inputs.size(); ++i) {
        if (m.payloads[i].size() != call.inputs[i].spec.bytes())
            r.Fail("input " + std::to_string(i) + " is " + std::to_string(m.payloads[i].size()) + " bytes, its shape " +
                   ShapeText(call.inputs[i].spec.shape) + " needs " + std::to_string(call.inputs[i].spec.bytes()));
        call.inputs[i].data = std::move(m.payloads[i]);
    }
    return {id, std::move(call)};
}

std::optional<std::string> CallDevice(const Message& m) {
    try {
        ByteReader r(m.header, What("chip call", m));
        RemoteCall head;
        ReadCallHead(r, head);
        return std::move(head.device);
    } catch (const Error&) {
        return std::nullopt;
    }
}

std::optional<size_t> DeviceIndex(const std::string& device) {
    if (device.empty() || device.size() > 9 ||
        !std::all_of(device.begin(), device.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    return std::stoul(device);
}

Message EncodeCallReply(uint64_t id, std::vector<WireTensor>& outputs) {
    ByteWriter w;
    w.Put<uint64_t>(id);
    Message m = Make(kCallReply, w);
    for (WireTensor& t : outputs) m.payloads.push_back(std::move(t.data));
    return m;
}

Message EncodeCallError(uint64_t id, const RemoteFailure& f) {
    ByteWriter w;
    w.Put<uint64_t>(id);
    w.Put<uint8_t>(static_cast<uint8_t>(f.cause));
    w.Put<uint32_t>(f.device_code);
    w.Put<uint8_t>(f.host_kernel_code ? 1 : 0);
    w.Put<int32_t>(f.rank);
    w.PutString(f.host_name);
    w.PutString(f.task);
    w.PutString(f.device);
    w.PutString(f.function);
    w.PutString(f.message);
    return Make(kCallError, w);
}

RemoteFailure DecodeCallError(const Message& m) {
    ByteReader r(m.header, What("call error", m));
    RemoteFailure f;
    r.Get<uint64_t>("id");
    const uint8_t kind = r.Get<uint8_t>("error kind");
    if (!IsErrorKind(kind)) r.Fail("error kind " + std::to_string(kind) + " is unknown");
    f.cause = static_cast<ErrorKind>(kind);
    f.device_code = r.Get<uint32_t>("device code");
    const uint8_t host_kernel = r.Get<uint8_t>("host kernel flag");
    if (host_kernel > 1) r.Fail("host kernel flag " + std::to_string(host_kernel) + " is not 0 or 1");
    f.host_kernel_code = host_kernel == 1;
    f.rank = r.Get<int32_t>("rank");
    f.host_name = r.GetString("host name");
    f.task = r.GetString("task");
    f.device = r.GetString("device");
    f.function = r.GetString("function");
    f.message = r.GetString("message", 64 * 1024);
    r.ExpectEnd();
    return f;
}

Message EncodeShutdown() { return Message{.type = kShutdown}; }

uint64_t ReplyId(const Message& m) {
    ByteReader r(m.header, What("reply", m));
    return r.Get<uint64_t>("id");
}

bool CallFits(std::span<const TensorArg> args) {
    size_t inputs = 0, outputs = 0;
    uint64_t input_bytes = 0, output_bytes = 0;
    for (const TensorArg& a : args) {
        if (a.tensor.bytes() > kMaxPayloadBytes) return false;
        if (a.tensor.rank() < 1 || a.tensor.rank() > kMaxCallRank) return false;
        if (a.access != Access::Out) ++inputs, input_bytes += a.tensor.bytes();
        if (a.access != Access::In) ++outputs, output_bytes += a.tensor.bytes();
    }
    return inputs <= kMaxTensors && outputs <= kMaxTensors && input_bytes <= kMaxMessagePayloadBytes &&
           output_bytes <= kMaxMessagePayloadBytes;
}

}  // namespace spyre::host::remote
