// SPDX-License-Identifier: Apache-2.0
// IntArg<T>: an int parameter of an unsigned C++ type (a count, an index, a
// size, a status). pybind11 refuses an int outside the parameter's type with
// a TypeError for the whole call ("incompatible function arguments"), which
// names neither the argument nor the value; IntArg takes any int (and what
// stands for one, numpy.int64) and the binding converts it where it can say
// which argument is out of range, as spyre.InvalidArgument. A value that is
// no int at all (a float, a str) is still pybind11's TypeError.
#pragma once

#include <pybind11/pybind11.h>

#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "spyre/error.hpp"

namespace spyre::python {

namespace py = pybind11;

// Why the int `v` does not fit T ("is V (must be >= LO)", "... <= HI");
// empty when it fits.
template <typename T>
std::string OutsideOf(const py::handle& v) {
    const py::int_ lo(std::numeric_limits<T>::min()), hi(std::numeric_limits<T>::max());
    auto text = [](const py::handle& h) { return py::str(h).cast<std::string>(); };
    if (v < lo) return "is " + text(v) + " (must be >= " + text(lo) + ")";
    if (v > hi) return "is " + text(v) + " (must be <= " + text(hi) + ")";
    return {};
}

// `v` (an int) as T, when it fits. Compared in C++: the bounds become
// Python ints only for OutsideOf's message.
template <typename T>
bool FitInto(const py::handle& v, T& out) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) {
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return false;
        }
        if (!std::in_range<T>(x)) return false;
        out = T(x);
        return true;
    }
    if constexpr (std::is_unsigned_v<T>) {
        if (overflow > 0) {  // past 2**63: an unsigned 64-bit value may still hold it
            const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
            if (u == ~0ull && PyErr_Occurred()) {
                PyErr_Clear();
                return false;
            }
            if (!std::in_range<T>(u)) return false;
            out = T(u);
            return true;
        }
    }
    return false;
}

// "a float", "an int", "a str": what `v` is, for messages.
inline std::string ATypeName(py::handle v) {
    const std::string name = py::str(v.get_type().attr("__name__"));
    return (std::string_view("aeiouAEIOU").find(name.empty() ? 'x' : name[0]) != std::string_view::npos ? "an " : "a ") +
           name;
}

// The int `h` stands for (an int, numpy.int64, anything with __index__), or
// a null object when it stands for none (a float, a str, a numpy array of
// more than one element, whose __index__ raises).
inline py::object IndexOf(py::handle h) {
    if (!h || PyFloat_Check(h.ptr()) || !PyIndex_Check(h.ptr())) return {};  // a null object (py::int_{} is 0)
    PyObject* v = PyNumber_Index(h.ptr());
    if (!v) PyErr_Clear();
    return py::reinterpret_steal<py::object>(v);
}

template <typename T>
struct IntArg {
    static_assert(std::is_integral_v<T>);
    py::object value;  // an int (IndexOf's)

    // The value as T; InvalidArgument "<what> is -1 (must be >= 0)" when it
    // does not fit.
    T In(const std::string& what) const {
        T out{};
        if (!FitInto(value, out)) throw Error(ErrorKind::InvalidArgument, what + " " + OutsideOf<T>(value));
        return out;
    }
};

// The int `v` (any object) as T; InvalidArgument "<what> is -1 (must be
// >= 0)" when it does not fit, "<what> is a float" when it is no int.
template <typename T>
T IntOf(py::handle v, const std::string& what) {
    const py::object index = IndexOf(v);
    if (!index) throw Error(ErrorKind::InvalidArgument, what + " is " + ATypeName(v));
    return IntArg<T>{index}.In(what);
}

// The ints of `items` (an iterable) as T. InvalidArgument names `what` and
// the item: "<what> item 1 is a float<hint>" (`hint` says what an item
// is), "<what> item 0 is 1180591620717411303424 (must be <= 9223372036854775807)".
template <typename T>
std::vector<T> IntsFrom(py::handle items, const std::string& what, const std::string& hint = {}) {
    std::vector<T> out;
    size_t i = 0;
    for (py::handle item : items) {
        auto which = [&] { return what + " item " + std::to_string(i) + " "; };
        const py::object v = IndexOf(item);
        if (!v)
            throw Error(ErrorKind::InvalidArgument,
                        which() + "is a " + std::string(py::str(item.get_type().attr("__name__"))) + hint);
        T x{};
        if (!FitInto(v, x)) throw Error(ErrorKind::InvalidArgument, which() + OutsideOf<T>(v));
        out.push_back(x);
        ++i;
    }
    return out;
}

// IntList<T>: a list (any sequence but str and bytes) of ints as
// std::vector<T>, for shapes and permutations. An item that is no int, or
// one T cannot hold, is InvalidArgument naming its position (IntsFrom: "a
// list of ints: item 0 is 1180591620717411303424 (must be <= ...)"), where
// pybind11's list conversion was a TypeError for the whole call. The
// function's own checks name the argument for values that fit.
template <typename T>
struct IntList : std::vector<T> {
    using std::vector<T>::vector;
};

// Defines `name` on `cls` as a property of the integer `field` whose setter
// takes IntArg: `config.field = -1` on an unsigned field, or 2**70 on any,
// is InvalidArgument naming "<class name>: <name>".
template <typename Class, typename Object, typename T>
void DefIntProperty(Class& cls, const char* name, T Object::*field, const char* doc) {
    const std::string what = std::string(py::str(cls.attr("__name__"))) + ": " + name;
    cls.def_property(
        name, [field](const Object& object) { return object.*field; },
        [field, what](Object& object, const IntArg<T>& v) { object.*field = v.In(what); }, doc);
}

}  // namespace spyre::python

namespace pybind11::detail {

template <typename T>
struct type_caster<spyre::python::IntArg<T>> {
    PYBIND11_TYPE_CASTER(spyre::python::IntArg<T>, const_name("int"));

    bool load(handle src, bool /*convert*/) {
        // As pybind11's own int caster: no float, no str; a bool is an int.
        value.value = spyre::python::IndexOf(src);
        return bool(value.value);
    }
    static handle cast(const spyre::python::IntArg<T>& v, return_value_policy, handle) {
        return v.value.inc_ref();
    }
};

template <typename T>
struct type_caster<spyre::python::IntList<T>> {
    PYBIND11_TYPE_CASTER(spyre::python::IntList<T>, const_name("List[int]"));

    bool load(handle src, bool /*convert*/) {
        // As pybind11's list conversion: a sequence, not a str or bytes.
        if (!src || !isinstance<sequence>(src) || isinstance<str>(src) || isinstance<bytes>(src)) return false;
        static_cast<std::vector<T>&>(value) = spyre::python::IntsFrom<T>(src, "a list of ints:");
        return true;
    }
    static handle cast(const spyre::python::IntList<T>& v, return_value_policy policy, handle parent) {
        return list_caster<std::vector<T>, T>::cast(v, policy, parent);
    }
};

}  // namespace pybind11::detail
