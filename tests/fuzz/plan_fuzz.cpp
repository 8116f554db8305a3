// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the ExecutionPlan reader (libspyre/plan/execution_plan.cpp,
// manifest_node.cpp, plan_format.cpp, program_image.cpp): the in-memory entry
// point ExecutionPlan(const CompilerOutput&), as LoadExecutionPlan uses it
// after CompilerOutput::ReadDirectory. Only spyre::Error may leave it: any
// other exception escapes this function and libFuzzer reports it as a
// crash (deliberately not caught here).
//
// Input: the manifest text up to the first NUL byte, then blobs, each
// [u8 name length][name][u32 size, little-endian][bytes] (truncated
// records are cut short).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "spyre/error.hpp"
#include "spyre/plan/execution_plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    spyre::CompilerOutput out;
    const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
    const size_t manifest_end = nul ? size_t(nul - data) : size;
    out.manifest.assign(reinterpret_cast<const char*>(data), manifest_end);
    size_t at = nul ? manifest_end + 1 : size;
    while (at < size) {
        const size_t name_len = data[at++];
        const size_t name_take = std::min(name_len, size - at);
        std::string name(reinterpret_cast<const char*>(data + at), name_take);
        at += name_take;
        uint32_t blob_len = 0;
        const size_t len_take = std::min<size_t>(4, size - at);
        std::memcpy(&blob_len, data + at, len_take);
        at += len_take;
        const size_t blob_take = std::min<size_t>(blob_len, size - at);
        out.blobs[name].assign(data + at, data + at + blob_take);
        at += blob_take;
    }
    try {
        const spyre::ExecutionPlan plan(out);
        (void)plan;
    } catch (const spyre::Error&) {
        // The reader's only way to refuse input.
    }
    return 0;
}
