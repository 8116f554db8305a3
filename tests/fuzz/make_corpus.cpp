// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpora of the fuzz targets in tests/fuzz (one directory
// each under FUZZ_DIR):
//   corpus/               program decoder: one valid program per kind of op,
//                         in both layouts, addresses inside a 1 MiB window
//   corpus_cb_ring/       whole CB rings + window contents (cb_ring_fuzz.cpp)
//   corpus_plan/          ExecutionPlan compiler outputs (plan_fuzz.cpp)
//   corpus_device_input/  region info, ring geometry, completions (device_input_fuzz.cpp)
//   corpus_regdump/       register files + doorbell pages (regdump_fuzz.cpp)
//   corpus_remote/        frames and remote chip-call messages (remote_protocol_fuzz.cpp)
//   corpus_pto/           pto_* call sequences (pto_api_fuzz.cpp, pto_ops.hpp); the
//                         directory also keeps what long runs found (merged)
// Regenerate with `ninja -C build fuzz-corpus` after a format change.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "spyre/plan/execution_plan.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre.h"
#include "spyre/compiler/plan_writer.hpp"
#include "host/remote_protocol.hpp"
#include "host/transport/frame.hpp"
#include "pto_ops.hpp"
#include "spyre/pto.h"

using namespace spyre;

namespace {

void Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
    std::filesystem::create_directories(dir);
    std::ofstream out(dir + "/" + name + ".bin", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + dir + "/" + name + ".bin");
}

// The kernel's program with its tensors placed one after another from 64 KiB.
std::vector<uint8_t> Placed(const BuiltKernel& k) {
    std::vector<uint64_t> addrs;
    uint64_t next = 64 << 10;
    auto place = [&](const KernelTensor& t) {
        addrs.push_back(next);
        next += (t.bytes + 127) / 128 * 128;
    };
    for (const KernelTensor& t : k.inputs) place(t);
    for (const KernelTensor& t : k.outputs) place(t);
    return k.Bind(addrs);
}


template <typename T>
void Append(std::vector<uint8_t>& out, const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
}

spyre_cb Cb(uint8_t opcode, uint64_t a0 = 0, uint64_t a1 = 0, uint64_t a2 = 0, uint8_t flags = 0) {
    spyre_cb cb{};
    cb.opcode = opcode;
    cb.flags = flags;
    cb.slots = 1;
    cb.user_data = 0x1000 + opcode;
    cb.u.args[0] = a0;
    cb.u.args[1] = a1;
    cb.u.args[2] = a2;
    return cb;
}

// cb_ring_fuzz input: slot count, the ring, then the window's first bytes.
std::vector<uint8_t> Ring(const std::vector<spyre_cb>& ring, const std::vector<uint8_t>& memory = {}) {
    std::vector<uint8_t> out{uint8_t(ring.size())};
    for (const spyre_cb& cb : ring) Append(out, cb);
    out.insert(out.end(), memory.begin(), memory.end());
    return out;
}

void WriteRingCorpus(const std::string& dir, const std::string& program_dir) {
    Write(dir, "nops_linked", Ring({Cb(SPYRE_OP_NOP, 0, 0, 0, SPYRE_CB_F_LINK), Cb(SPYRE_OP_NOP), Cb(0x77, 0, 0, 0, SPYRE_CB_F_LINK),
                                    Cb(SPYRE_OP_NOP)}));
    // Ring streams (1.4): CBs of streams 0 and 63 (one restarting), one past the last stream.
    std::vector<spyre_cb> streams = {Cb(SPYRE_OP_NOP, 0, 0, 0, SPYRE_CB_F_STREAM | SPYRE_CB_F_STREAM_RESTART),
                                     Cb(SPYRE_OP_COPY, ~0ull, 0, 8, SPYRE_CB_F_STREAM | SPYRE_CB_F_LINK),
                                     Cb(SPYRE_OP_NOP, 0, 0, 0, SPYRE_CB_F_STREAM), Cb(SPYRE_OP_NOP, 0, 0, 0, SPYRE_CB_F_STREAM),
                                     Cb(SPYRE_OP_NOP, 0, 0, 0, SPYRE_CB_F_STREAM)};
    streams[3].stream = SPYRE_RING_STREAMS - 1;
    streams[4].stream = SPYRE_RING_STREAMS;
    Write(dir, "ring_streams", Ring(streams));
    // COPY_INLINE of 100 bytes (2 payload slots), a COPY of them, a semaphore written then awaited.
    std::vector<spyre_cb> ring = {Cb(SPYRE_OP_COPY_INLINE, 0, 0x1000, 100, SPYRE_CB_F_LINK), {}, {}};
    ring[0].slots = 3;
    std::memset(static_cast<void*>(&ring[1]), 0x5a, 2 * sizeof(spyre_cb));
    ring.push_back(Cb(SPYRE_OP_COPY, 0x1000, 0x2000, 100));
    ring.push_back(Cb(SPYRE_OP_SEM_WRITE, 0x3000, 5));
    ring.push_back(Cb(SPYRE_OP_SEM_WAIT, 0x3000, 5, 1000000));
    ring.push_back(Cb(SPYRE_OP_SEM_WAIT, 0x3000, 6, 1000));
    Write(dir, "copies_semaphores", Ring(ring));
    // Every program of the decoder corpus at address 0, launched twice (size from the header, then exact).
    for (const auto& entry : std::filesystem::directory_iterator(program_dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        std::vector<uint8_t> program((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        Write(dir, "launch_" + entry.path().stem().string(),
              Ring({Cb(SPYRE_OP_LAUNCH, 0, 0, 0, SPYRE_CB_F_LINK), Cb(SPYRE_OP_LAUNCH, 0, program.size())}, program));
    }
    // Program correction: a relu program at 0 patched from a table at 8192, then launched.
    BuiltKernel k = KernelBuilder().Relu({4}, DType::FP32);
    spyre_program_header h;
    std::memcpy(&h, k.program.data(), sizeof h);
    std::vector<uint8_t> memory(8192 + 8 * h.slot_count, 0);
    std::memcpy(memory.data(), k.program.data(), k.program.size());
    for (uint64_t i = 0; i < h.slot_count; ++i) {
        const uint64_t addr = 0x10000 + i * 0x1000;
        std::memcpy(memory.data() + 8192 + 8 * i, &addr, 8);
    }
    Write(dir, "correct_then_launch",
          Ring({Cb(SPYRE_OP_CORRECT, 0, 8192, h.slot_count, SPYRE_CB_F_LINK), Cb(SPYRE_OP_LAUNCH, 0, 0)}, memory));
    // Tasks (3.0): the same relu program run with the same table as a TASK, one
    // with a reserved word set, one with LINK, a NOP; on the ring each TASK is
    // WRONG_QUEUE, on the task queue the other way round for CORRECT.
    spyre_cb task = Cb(SPYRE_OP_TASK);
    task.u.task.program_addr = 0;
    task.u.task.args_addr = 8192;
    task.u.task.arg_count = h.slot_count;
    spyre_cb reserved = task, linked = task;
    reserved.u.task.reserved = 1;
    linked.flags = SPYRE_CB_F_LINK;
    Write(dir, "tasks", Ring({task, reserved, linked, Cb(SPYRE_OP_NOP), Cb(SPYRE_OP_CORRECT, 0, 8192, h.slot_count)}, memory));
    // After lists (3.1): a chain, a fan-in of four, a task naming itself and
    // one naming a task further back than the fuzzer's lap of 16.
    std::vector<spyre_cb> waiting(20, task);
    for (uint32_t i = 1; i < 8; ++i) {
        waiting[i].u.task.after_count = 1;
        waiting[i].u.task.after[0] = i - 1;
    }
    waiting[8].u.task.after_count = 4;
    for (uint32_t i = 0; i < 4; ++i) waiting[8].u.task.after[i] = 4 + i;
    waiting[9].u.task.after_count = 1;
    waiting[9].u.task.after[0] = 9;
    waiting[19].u.task.after_count = 2;
    waiting[19].u.task.after[0] = 18;
    waiting[19].u.task.after[1] = 1;
    Write(dir, "task_waits", Ring(waiting, memory));
}

// plan_fuzz input: manifest, NUL, then [u8 name length][name][u32 size][bytes] per blob.
std::vector<uint8_t> PlanInput(const CompilerOutput& o) {
    std::vector<uint8_t> out(o.manifest.begin(), o.manifest.end());
    out.push_back(0);
    for (const auto& [name, bytes] : o.blobs) {
        out.push_back(uint8_t(name.size()));
        out.insert(out.end(), name.begin(), name.end());
        Append(out, uint32_t(bytes.size()));
        out.insert(out.end(), bytes.begin(), bytes.end());
    }
    return out;
}

void WritePlanCorpus(const std::string& dir) {
    Write(dir, "matmul", PlanInput(CompilerOutputFromKernel("mm", KernelBuilder().Matmul(4, 8, 4, DType::FP32))));
    Write(dir, "relu_sticks", PlanInput(CompilerOutputFromKernel("relu", KernelBuilder(TensorLayout::Sticks).Relu({3, 5}, DType::FP16))));
    Write(dir, "two_ops", PlanInput(CompilerOutputFromKernels(
                              "pair", {{"gelu", KernelBuilder().Gelu({7, 9}, DType::FP32)}, {"softmax", KernelBuilder().Softmax({2, 70}, DType::FP32)}})));
}

// device_input_fuzz input: region index, region info, the mock's shared
// memory for it, BAR4 size, geometry,
// CQ head, in-flight count, SQ head, CQ tail advance, completion records.
void WriteDeviceInputCorpus(const std::string& dir) {
    auto make = [&](const std::string& name, uint32_t index, uint64_t mmap_size, uint64_t bar4, uint32_t in_flight,
                    uint32_t posted) {
        std::vector<uint8_t> out{uint8_t(index)};
        spyre_region_info ri{};
        ri.argsz = sizeof ri;
        ri.flags = SPYRE_REGION_INFO_FLAG_READ | SPYRE_REGION_INFO_FLAG_WRITE | SPYRE_REGION_INFO_FLAG_MMAP;
        ri.index = index;
        ri.size = SPYRE_BAR4_SIZE;
        ri.offset = SPYRE_REGION_OFFSET(index);
        Append(out, ri);
        spyre_mock_region_shm shm{};
        shm.argsz = sizeof shm;
        shm.index = index;
        std::snprintf(shm.shm_name, sizeof shm.shm_name, "spyre-1.d/c0f0.bar%u.0123456789abcdef", index);
        shm.mmap_size = mmap_size;
        Append(out, shm);
        Append(out, bar4);
        for (uint32_t v : {SPYRE_DEFAULT_DB_OFFSET, SPYRE_DEFAULT_SQ_OFFSET, SPYRE_DEFAULT_CQ_OFFSET, SPYRE_DEFAULT_SQ_ENTRIES,
                           SPYRE_DEFAULT_CQ_ENTRIES, 64u, 32u})
            Append(out, v);
        const uint32_t cq_head = 4090, sq_head = 0xfffffff0u;
        Append(out, cq_head);
        Append(out, uint16_t(in_flight));
        Append(out, sq_head);
        Append(out, uint16_t(posted));
        for (uint32_t i = 0; i < 256; ++i) {
            spyre_cqe e{};
            e.user_data = i;
            e.sq_pos = sq_head + ((i - cq_head % 256) & 255);
            Append(out, e);
        }
        Write(dir, name, out);
    };
    make("bar4_default", SPYRE_REGION_BAR4, SPYRE_BAR4_SIZE, SPYRE_BAR4_SIZE, 8, 8);
    make("bar0_short_mapping", SPYRE_REGION_BAR0, 4096, 1u << 20, 3, 2);
    make("too_many_completions", SPYRE_REGION_DEVMEM, 1u << 21, SPYRE_BAR4_SIZE, 2, 5);
}

// regdump_fuzz input: u16 split, BAR0 bytes, doorbell bytes.
void WriteRegdumpCorpus(const std::string& dir) {
    std::vector<uint8_t> regs(SPYRE_REG_FILE_SIZE, 0);
    auto put32 = [&](uint32_t off, uint32_t v) { std::memcpy(regs.data() + off, &v, 4); };
    put32(SPYRE_REG_MAGIC, SPYRE_MAGIC);
    put32(SPYRE_REG_VERSION, (SPYRE_VERSION_MAJOR << 16) | SPYRE_VERSION_MINOR);
    put32(SPYRE_REG_STATUS, SPYRE_STATUS_READY | SPYRE_STATUS_RING_ENABLED);
    put32(SPYRE_REG_DB_OFFSET, 0);
    std::vector<uint8_t> page(sizeof(spyre_doorbell_page), 0);
    const uint32_t alive = SPYRE_DEVSTATE_ALIVE;
    std::memcpy(page.data() + SPYRE_DB_DEVICE_STATE, &alive, 4);
    auto make = [&](const std::string& name, const std::vector<uint8_t>& bar0, const std::vector<uint8_t>& db) {
        std::vector<uint8_t> out;
        Append(out, uint16_t(bar0.size()));
        out.insert(out.end(), bar0.begin(), bar0.end());
        out.insert(out.end(), db.begin(), db.end());
        Write(dir, name, out);
    };
    make("healthy", regs, page);
    put32(SPYRE_REG_ERR_CODE, SPYRE_ERR_WATCHDOG);
    put32(SPYRE_REG_STATUS, 0xffffffffu);
    put32(SPYRE_REG_DB_OFFSET, 0x2000);
    make("faulted_db_elsewhere", regs, page);
    make("short_snapshots", std::vector<uint8_t>(regs.begin(), regs.begin() + 100), std::vector<uint8_t>(page.begin(), page.begin() + 8));
}

// remote_protocol_fuzz input: a selector, then a frame (0) or a payload
// count, u16 payload sizes, the payloads and the header (1-3).
std::vector<uint8_t> AsRemoteInput(uint8_t selector, const host::Message& m) {
    std::vector<uint8_t> out{selector, uint8_t(m.payloads.size())};
    for (const auto& p : m.payloads) Append(out, uint16_t(p.size()));
    for (const auto& p : m.payloads) out.insert(out.end(), p.begin(), p.end());
    out.insert(out.end(), m.header.begin(), m.header.end());
    return out;
}

void WriteRemoteCorpus(const std::string& dir) {
    using namespace spyre::host;
    RankDescription d;
    d.rank = 3;  // the target decodes as from rank 3
    d.host_name = "node-d";
    d.pid = 4242;
    d.host = "embedded spyre-mockdev: 1 card x 1 VF";
    d.functions = {{"0000:01:00.0", false, 1, 0, 1u << 30}, {"0000:01:00.1", true, 1, 1, 512u << 20}};
    d.chip_functions = {"chip_add", "chip_sub"};
    d.chip_tasks_at_once = {2};
    const Message describe = remote::EncodeDescribeReply(7, d);
    std::vector<uint8_t> frame{0};
    const std::vector<uint8_t> f = wire::EncodeFrame(describe);
    frame.insert(frame.end(), f.begin(), f.end());
    Write(dir, "frame_describe_reply", frame);
    Write(dir, "describe_reply", AsRemoteInput(1, describe));

    RemoteCall call{.task = "chip_add#0", .function = "chip_add", .device = "0"};
    for (float v : {1.5f, -2.0f}) {
        WireTensor t{{{2, 3}, DType::FP32}, std::vector<uint8_t>(24)};
        for (size_t i = 0; i < 6; ++i) std::memcpy(t.data.data() + 4 * i, &v, 4);
        call.inputs.push_back(std::move(t));
    }
    call.outputs = {{{2, 3}, DType::FP32}};
    call.access = {RemoteCall::kIn, RemoteCall::kIn, RemoteCall::kOut};
    Write(dir, "call", AsRemoteInput(2, remote::EncodeCall(8, call)));

    RemoteFailure e{"chip_fault#0", 3, "node-d", "0000:01:00.1", "chip_fault", ErrorKind::DeviceError, "bad address", 5};
    Write(dir, "call_error", AsRemoteInput(3, remote::EncodeCallError(9, e)));
}

// Seed 004's examples and the runtime's edges as pto_api_fuzz input.
void WritePtoCorpus(const std::string& dir) {
    using namespace spyre::fuzz::pto;
    // One parameter: kind, where, which, size class, low bits, spelling.
    auto param = [](uint8_t kind, uint8_t where, uint8_t which, uint8_t size_class, uint8_t low, uint8_t spelling = 0) {
        return std::vector<uint8_t>{kind, where, which, size_class, low, spelling};
    };
    auto submit = [](uint8_t kernel, uint8_t worker, std::vector<std::vector<uint8_t>> params) {
        std::vector<uint8_t> out{SUBMIT, kernel, worker, uint8_t(params.size())};
        for (const auto& p : params) out.insert(out.end(), p.begin(), p.end());
        out.push_back(0);  // not a negative count
        return out;
    };
    auto join = [](std::initializer_list<std::vector<uint8_t>> parts) {
        std::vector<uint8_t> out;
        for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
        return out;
    };
    const std::vector<uint8_t> header{15, 6};  // ring of 16, heap of 8 KiB
    // Example 1: two tasks at depth 0, the second reading the first's implicit output.
    Write(dir, "example1", join({header,
                                 submit(K_WRITE, WORKER_VECTOR, {param(PARAM_INPUT, W_MEMORY, 0, S_SMALL, 64),
                                                                 param(PARAM_INPUT, W_MEMORY, 1, S_SMALL, 64),
                                                                 param(PARAM_OUTPUT, W_NULL, 0, S_SMALL, 64)}),
                                 submit(K_WRITE, WORKER_VECTOR, {param(PARAM_INPUT, W_OUTPUT, 0, S_SMALL, 64),
                                                                 param(PARAM_INPUT, W_MEMORY, 2, S_SMALL, 64),
                                                                 param(PARAM_OUTPUT, W_NULL, 0, S_SMALL, 64)}),
                                 {WAIT}}));
    // Example 2: a scope per tile, a pto_alloc'd tile written, accumulated, copied out, freed.
    std::vector<uint8_t> tiles = header;
    for (uint8_t t = 0; t < 3; ++t)
        tiles = join({tiles, {SCOPE_BEGIN, ALLOC, S_SMALL, 128},
                      submit(K_WRITE, WORKER_CUBE, {param(PARAM_INPUT, W_MEMORY, t, S_SMALL, 64),
                                                    param(PARAM_OUTPUT, W_BUFFER, 0, S_SMALL, 128, 1)}),
                      submit(K_WRITE, WORKER_CUBE, {param(PARAM_INPUT, W_MEMORY, 9, S_SMALL, 64),
                                                    param(PARAM_INOUT, W_BUFFER, 0, S_SMALL, 128, 1)}),
                      submit(K_WRITE, WORKER_VECTOR, {param(PARAM_INPUT, W_BUFFER, 0, S_SMALL, 128),
                                                      param(PARAM_OUTPUT, W_MEMORY, uint8_t(20 + t), S_SMALL, 128)}),
                      {FREE, 0, SCOPE_END}});
    Write(dir, "example2", join({tiles, {WAIT}}));
    // A failed task, a reader of its output skipped; an EXTERNAL task finished late.
    Write(dir, "failure_and_external",
          join({header, submit(K_FAIL, WORKER_HOST, {param(PARAM_OUTPUT, W_MEMORY, 3, S_SMALL, 64)}),
                submit(K_WRITE, WORKER_HOST, {param(PARAM_INPUT, W_MEMORY, 3, S_SMALL, 64),
                                              param(PARAM_OUTPUT, W_MEMORY, 4, S_SMALL, 64)}),
                submit(K_EXT, WORKER_EXTERNAL, {param(PARAM_OUTPUT, W_MEMORY, 5, S_SMALL, 64)}),
                submit(K_WRITE, WORKER_VECTOR, {param(PARAM_INPUT, W_MEMORY, 5, S_SMALL, 64),
                                                param(PARAM_OUTPUT, W_NULL, 0, S_SMALL, 32)}),
                {COMPLETE, 0, 0, QUERY, 1, WAIT}}));
    // Sizes near 2^64 and the whole memory, an unknown kind, too many parameters.
    Write(dir, "edges", join({header, {ALLOC, S_HUGE, 3},
                              submit(K_WRITE, WORKER_VECTOR, {param(PARAM_OUTPUT, W_NULL, 0, S_HUGE, 3)}),
                              submit(K_WRITE, WORKER_VECTOR, {param(PARAM_INPUT, W_MEMORY, 0, S_MEMORY, 0)}),
                              submit(K_WRITE, WORKER_VECTOR, {param(9, W_MEMORY, 0, S_SMALL, 8)}),
                              submit(kKernels, 7, {}),
                              {SUBMIT, K_WRITE, WORKER_HOST, kMaxParams + 1}}));
    // Copies in and out: a buffer, the whole memory, past its end, a null and a foreign pointer.
    Write(dir, "copies", join({header, {ALLOC, S_SMALL, 200},
                               {COPY, 0, W_BUFFER, 0, S_SMALL, 200, 3}, {COPY, 1, W_BUFFER, 0, S_SMALL, 200, 7},
                               {COPY, 0, W_MEMORY, 0, S_MEMORY, 0, 0}, {COPY, 1, W_MEMORY, 1, S_MEMORY, 0, 0},
                               {COPY, 0, W_MEMORY, 255, S_SMALL, 255, 1}, {COPY, 1, W_NULL, 0, S_SMALL, 8, 0},
                               {COPY, 0, W_OUTSIDE, 0, S_SMALL, 8, 0}, {COPY, 1, W_BUFFER, 0, S_HUGE, 1, 0},
                               {WAIT}}));
    // pto_run of a function with a scope it leaves open and a submission.
    Write(dir, "run", join({header, {RUN, 3, SCOPE_BEGIN},
                            submit(K_WRITE, WORKER_HOST, {param(PARAM_OUTPUT, W_NULL, 0, S_SMALL, 16)}),
                            {SCOPE_END, WAIT}}));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s FUZZ_DIR  (tests/fuzz: writes corpus*/ under it)\n", argv[0]);
        return 2;
    }
    const std::string fuzz_dir = argv[1];
    const std::string dir = fuzz_dir + "/corpus";
    for (TensorLayout layout : {TensorLayout::Dense, TensorLayout::Sticks}) {
        const KernelBuilder b(layout);
        const std::string tag = layout == TensorLayout::Dense ? "_dense" : "_sticks";
        Write(dir, "matmul_fp16_acc" + tag, Placed(b.Matmul(16, 24, 8, DType::FP16, true)));
        Write(dir, "div_broadcast" + tag, Placed(b.Elementwise(ElementwiseOp::Div, {3, 1, 5}, {4, 1}, DType::FP32)));
        Write(dir, "gelu" + tag, Placed(b.Gelu({7, 9}, DType::FP32)));
        Write(dir, "softmax" + tag, Placed(b.Softmax({2, 3, 70}, DType::FP16)));
        Write(dir, "reduce_max" + tag, Placed(b.Reduce(ReduceKind::Max, {6, 5, 9}, 1, DType::FP32)));
        Write(dir, "transpose" + tag, Placed(b.Transpose({2, 3, 4}, {2, 0, 1}, DType::INT8)));
        Write(dir, "fill" + tag, Placed(b.Fill({3, 3}, 7.0, DType::INT32)));
    }
    BuiltKernel k = KernelBuilder().Relu({4}, DType::FP32);
    SetCorrectionTarget(k.correction, 4096, 8192);
    Write(dir, "correction", k.correction);
    Write(dir, "empty", ProgramImage{}.Encode());
    WriteRingCorpus(fuzz_dir + "/corpus_cb_ring", dir);
    WritePlanCorpus(fuzz_dir + "/corpus_plan");
    WriteDeviceInputCorpus(fuzz_dir + "/corpus_device_input");
    WriteRegdumpCorpus(fuzz_dir + "/corpus_regdump");
    WriteRemoteCorpus(fuzz_dir + "/corpus_remote");
    WritePtoCorpus(fuzz_dir + "/corpus_pto");
    return 0;
}
