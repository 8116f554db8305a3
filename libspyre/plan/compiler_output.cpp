// SPDX-License-Identifier: Apache-2.0
// CompilerOutput: the compiler's directory in memory (files in, files out, a
// content hash). Parsing lives in execution_plan.cpp.
#include <cerrno>
#include <fstream>
#include <iterator>
#include <system_error>

#include "plan/plan_format.hpp"
#include "spyre/error.hpp"
#include "spyre/plan/execution_plan.hpp"

namespace spyre {

namespace fs = std::filesystem;

namespace {

Error FsError(const std::string& what, const fs::path& path, const std::error_code& ec) {
    ErrorContext context;
    context.sys_errno = ec.value();
    const ErrorKind kind = ec == std::errc::no_such_file_or_directory ? ErrorKind::NotFound
                           : ec == std::errc::permission_denied        ? ErrorKind::PermissionDenied
                                                                       : ErrorKind::IoError;
    return Error(kind, what + " " + path.string() + ": " + ec.message(), context);
}

std::vector<uint8_t> ReadFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FsError("cannot open", path, std::error_code(errno, std::generic_category()));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) throw FsError("cannot read", path, std::error_code(errno, std::generic_category()));
    return bytes;
}

void WriteFile(const fs::path& path, const void* data, size_t size) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (out) out.write(static_cast<const char*>(data), std::streamsize(size));
    if (out) out.close();
    if (!out) throw FsError("cannot write", path, std::error_code(errno, std::generic_category()));
}

// FNV-1a, 64-bit: small, stable and good enough to key a plan cache (not a
// defence against deliberate collisions).
class Fnv1a64 {
public:
    void Add(const void* data, size_t size) {
        const auto* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < size; ++i) hash_ = (hash_ ^ p[i]) * 0x100000001b3ull;
    }
    // Length first, little-endian, so ("ab","c") and ("a","bc") differ.
    void AddSized(const void* data, size_t size) {
        uint8_t length[8];
        for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(size) >> (8 * i));
        Add(length, sizeof length);
        Add(data, size);
    }
    uint64_t value() const { return hash_; }

private:
    uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace

CompilerOutput CompilerOutput::ReadDirectory(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        if (ec && ec != std::errc::no_such_file_or_directory) throw FsError("cannot stat", dir, ec);
        throw Error(fs::exists(dir, ec) ? ErrorKind::InvalidArgument : ErrorKind::NotFound,
                    "compiler output " + dir.string() + " is not a directory");
    }
    const fs::path manifest_path = dir / plan_format::kManifestFile;
    if (!fs::exists(manifest_path, ec))
        throw Error(ErrorKind::NotFound, "compiler output " + dir.string() + " has no " +
                                             std::string(plan_format::kManifestFile) + " (" +
                                             manifest_path.string() + ")");
    if (!fs::is_regular_file(manifest_path, ec))
        throw Error(ErrorKind::InvalidArgument, manifest_path.string() + " is not a regular file");

    CompilerOutput out;
    out.origin = dir.string();
    const std::vector<uint8_t> manifest = ReadFile(manifest_path);
    out.manifest.assign(manifest.begin(), manifest.end());
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name == plan_format::kManifestFile) continue;
        // The format has no subdirectories; something else here is not ours to ignore.
        if (!it->is_regular_file(ec))
            throw Error(ErrorKind::InvalidArgument,
                        "compiler output " + dir.string() + ": " + name + " is not a regular file");
        out.blobs.emplace(name, ReadFile(it->path()));
    }
    if (ec) throw FsError("cannot list", dir, ec);
    return out;
}

void CompilerOutput::WriteDirectory(const fs::path& dir) const {
    for (const auto& [name, bytes] : blobs)
        if (!plan_format::IsBlobName(name))
            throw Error(ErrorKind::InvalidArgument, "blob name \"" + name + "\" is not a plain file name");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw FsError("cannot create", dir, ec);
    if (!fs::is_empty(dir, ec) || ec) {
        if (ec) throw FsError("cannot list", dir, ec);
        throw Error(ErrorKind::InvalidArgument, "cannot write compiler output into " + dir.string() + ": not empty");
    }
    WriteFile(dir / plan_format::kManifestFile, manifest.data(), manifest.size());
    for (const auto& [name, bytes] : blobs) WriteFile(dir / name, bytes.data(), bytes.size());
}

uint64_t CompilerOutput::ContentHash() const {
    Fnv1a64 hash;
    hash.AddSized(manifest.data(), manifest.size());
    for (const auto& [name, bytes] : blobs) {  // std::map: name order
        hash.AddSized(name.data(), name.size());
        hash.AddSized(bytes.data(), bytes.size());
    }
    return hash.value();
}

}  // namespace spyre
