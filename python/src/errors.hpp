// SPDX-License-Identifier: Apache-2.0
// The exception translation's helpers for the other areas (errors.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>

#include "spyre/error.hpp"

namespace spyre::python {

namespace py = pybind11;

// The Python exception object for `error` (its class, message and context),
// not raised: FlexStream.last_error returns one.
py::object ToPython(const Error& error);

// A Python exception caught while running user code for the runtime (a
// stream callback, a progress callback): as Error(TaskFailed) naming where,
// with the Python type and message. The GIL is held.
Error FromPython(const py::error_already_set& e, const std::string& where);

// str(obj) as UTF-8, whatever the object holds: lone surrogates escaped
// (backslashreplace), and repr(obj) when its __str__ raises. The GIL is held.
std::string TextOf(py::handle obj);

// `text` (a message, a path: bytes from C++) as a Python str, bytes that
// are not UTF-8 escaped (backslashreplace): a strict decode raised
// UnicodeDecodeError in place of the error it carried. The GIL is held.
py::str TextFromBytes(const std::string& text);

// repr(obj) for a message: one line (runs of whitespace made one space)
// and at most `max` characters, cut with "...". The GIL is held.
std::string ShortRepr(py::handle obj, size_t max = 80);

// The ErrorKind of a spyre.Error raised in Python (by its `kind`, or the
// class of one Python code made), else nullopt; and its message.
std::optional<ErrorKind> SpyreKindOf(const py::error_already_set& e);
std::string SpyreMessageOf(const py::error_already_set& e);

}  // namespace spyre::python
