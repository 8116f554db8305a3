// SPDX-License-Identifier: Apache-2.0
// Internal: the file a recording is written to, so that it arrives whole.
// A regular file (no symlink) in a directory this process may write is
// written beside its path and renamed over it: processes that record to
// one path leave one of their traces, never a mix, and a write that fails
// keeps what the file held. Anything else is written in place, as the
// user named it: through a symlink (/dev/stdout), into a device or a pipe,
// or into a file of a directory we may not write (under an exclusive
// lock, emptied first, and emptied again when the write fails: no half
// file). A pipe no process reads is refused, not waited for.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace spyre::trace::detail {

class TraceFile {
public:
    // At Start: InvalidArgument when `path` cannot be written. Empties
    // nothing, and opens no pipe (its reader would read the end).
    static void Check(const std::string& path);

    explicit TraceFile(std::string path);  // IoError
    ~TraceFile();                          // not committed: the write is undone as said above
    TraceFile(const TraceFile&) = delete;
    TraceFile& operator=(const TraceFile&) = delete;

    void Write(std::string_view text) { std::fwrite(text.data(), 1, text.size(), out_); }
    // The file in its place; IoError when any write failed.
    void Commit();

    // For a crashed process's signal handler (async-signal-safe): undoes
    // the write of the file being written, as the destructor would (the
    // temporary removed, a file written in place emptied). A no-op when no
    // file is open.
    static void UndoUnfinished() noexcept;

private:
    std::string path_;
    std::string written_;  // the temporary beside path_, or path_ itself
    bool beside_ = false;
    bool regular_ = false;  // written in place: a regular file (locked, emptied)
    std::FILE* out_ = nullptr;
};

}  // namespace spyre::trace::detail
