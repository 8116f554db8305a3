// SPDX-License-Identifier: Apache-2.0
// numpy dtypes <-> spyre::DType. fp16, fp32, int8 and int32 map one to one;
// numpy has no bfloat16, so BF16 data travels as uint16 (the raw bits) and
// is named explicitly (dtype=spyre.DType.BF16). Also NumpyView: the one
// place a numpy array is made over memory of ours, with numpy's refusals
// as our errors.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "spyre/error.hpp"
#include "spyre/tensor/layout.hpp"

namespace spyre::python {

namespace py = pybind11;

inline py::dtype NumpyDType(DType dtype) {
    switch (dtype) {
        case DType::FP16: return py::dtype("float16");
        case DType::BF16: return py::dtype("uint16");
        case DType::FP32: return py::dtype("float32");
        case DType::INT8: return py::dtype("int8");
        case DType::INT32: return py::dtype("int32");
    }
    throw Error(ErrorKind::Internal, "unknown DType");
}

// A numpy array over `data` (kept alive by `base`). numpy refuses some
// shapes ours allow (more dimensions than it has: 32 in numpy 1.x): that is
// the caller's InvalidArgument, named by `what`, not a bare ValueError.
inline py::array NumpyView(const py::dtype& dtype, const std::vector<py::ssize_t>& shape, void* data,
                           const py::handle& base, const std::string& what) {
    try {
        return py::array(dtype, shape, {}, data, base);
    } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ValueError)) throw;
        throw Error(ErrorKind::InvalidArgument, what + ": numpy cannot view a shape of " +
                                                    std::to_string(shape.size()) + " dimensions: " + e.what());
    }
}

// A new numpy array of `shape`, with the same refusal as NumpyView.
inline py::array NewNumpyArray(const py::dtype& dtype, const std::vector<py::ssize_t>& shape, const std::string& what) {
    try {
        return py::array(dtype, shape);
    } catch (py::error_already_set& e) {
        if (!e.matches(PyExc_ValueError)) throw;
        throw Error(ErrorKind::InvalidArgument, what + ": numpy cannot hold a shape of " +
                                                    std::to_string(shape.size()) + " dimensions: " + e.what());
    }
}

inline const char* SupportedDTypes() {
    return "spyre dtypes are fp16 (float16), bf16 (uint16 bits, named with dtype=DType.BF16), fp32 (float32), "
           "int8 and int32";
}

// The DType of a numpy array's dtype; `named` (from a dtype= argument) wins
// when it has the same item size (BF16 over uint16).
inline DType DTypeOfArray(const py::dtype& dt, std::optional<DType> named, const char* what) {
    const std::string name = py::str(py::handle(dt)).cast<std::string>();
    std::optional<DType> found;
    if (dt.kind() == 'f' && dt.itemsize() == 2) found = DType::FP16;
    else if (dt.kind() == 'f' && dt.itemsize() == 4) found = DType::FP32;
    else if (dt.kind() == 'i' && dt.itemsize() == 1) found = DType::INT8;
    else if (dt.kind() == 'i' && dt.itemsize() == 4) found = DType::INT32;
    else if (dt.kind() == 'u' && dt.itemsize() == 2 && named == DType::BF16) found = DType::BF16;
    if (named && found && *named != *found)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": array of dtype " + name + " given with dtype=" +
                                                    ToString(*named) + " (" + SupportedDTypes() + ")");
    if (!found)
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + ": dtype " + name + " is not supported (" + SupportedDTypes() + ")");
    // The device's bytes are this machine's order: a swapped array's bytes
    // would be read as other numbers.
    if (!dt.attr("isnative").cast<bool>())
        throw Error(ErrorKind::InvalidArgument,
                    std::string(what) + ": dtype " + py::str(dt.attr("str")).cast<std::string>() +
                        " is not in this machine's byte order (convert it first: a.astype(a.dtype.newbyteorder('=')))");
    return *found;
}

// A DType from what Python code passes: a spyre.DType, a numpy dtype or
// scalar type, or a name ("fp32", "float32", "bf16").
inline DType DTypeFrom(py::handle value, const char* what) {
    try {
        return value.cast<DType>();
    } catch (const py::cast_error&) {
    }
    if (py::isinstance<py::str>(value)) {
        const std::string s = value.cast<std::string>();
        if (s == "bf16" || s == "bfloat16") return DType::BF16;
        if (s == "fp16") return DType::FP16;
        if (s == "fp32") return DType::FP32;
    }
    py::dtype dt;
    try {
        dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(value));
    } catch (const py::error_already_set&) {
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": " + std::string(py::str(py::repr(value))) +
                                                    " is not a dtype (" + SupportedDTypes() + ")");
    }
    return DTypeOfArray(dt, std::nullopt, what);
}

}  // namespace spyre::python
