// SPDX-License-Identifier: Apache-2.0
// spyre.Error and one subclass per spyre::ErrorKind, raised for every
// spyre::Error a call throws, with the same message and context as
// attributes. Each subclass also derives from the Python exception a
// Python programmer would catch for it (InvalidArgument is a ValueError,
// Timeout a TimeoutError, ...). Any other C++ exception becomes
// spyre.Internal (std::bad_alloc: spyre.OutOfMemory): none escapes untyped.
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "errors.hpp"
#include "spyre/error.hpp"

namespace spyre::python {

namespace {

struct KindName {
    ErrorKind kind;
    const char* name;  // the Python class name: the enumerator's
};
constexpr KindName kKinds[] = {
    {ErrorKind::InvalidArgument, "InvalidArgument"}, {ErrorKind::NotFound, "NotFound"},
    {ErrorKind::Busy, "Busy"},                       {ErrorKind::PermissionDenied, "PermissionDenied"},
    {ErrorKind::Unsupported, "Unsupported"},         {ErrorKind::DeviceError, "DeviceError"},
    {ErrorKind::DeviceLost, "DeviceLost"},           {ErrorKind::Timeout, "Timeout"},
    {ErrorKind::NotReady, "NotReady"},               {ErrorKind::OutOfMemory, "OutOfMemory"},
    {ErrorKind::IoError, "IoError"},                 {ErrorKind::ProtocolError, "ProtocolError"},
    {ErrorKind::Internal, "Internal"},               {ErrorKind::WrongDevice, "WrongDevice"},
    {ErrorKind::TaskFailed, "TaskFailed"},
};
constexpr size_t kKindCount = sizeof kKinds / sizeof kKinds[0];

// The builtin each kind also derives from (nullptr: only spyre.Error).
PyObject* BuiltinBase(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidArgument:
        case ErrorKind::WrongDevice: return PyExc_ValueError;
        case ErrorKind::NotFound: return PyExc_LookupError;
        case ErrorKind::PermissionDenied: return PyExc_PermissionError;
        case ErrorKind::Unsupported: return PyExc_NotImplementedError;
        case ErrorKind::Timeout: return PyExc_TimeoutError;
        case ErrorKind::OutOfMemory: return PyExc_MemoryError;
        default: return nullptr;
    }
}

const char* Doc(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidArgument: return "The caller passed something malformed (also a ValueError).";
        case ErrorKind::NotFound: return "No such device, node, register or file (also a LookupError).";
        case ErrorKind::Busy: return "The resource is claimed by someone else.";
        case ErrorKind::PermissionDenied: return "The OS refused access (also a PermissionError).";
        case ErrorKind::Unsupported: return "A valid request the device or host cannot do (also NotImplementedError).";
        case ErrorKind::DeviceError: return "The device reported a fault; device_code says which.";
        case ErrorKind::DeviceLost: return "The device (or the daemon serving it) went away.";
        case ErrorKind::Timeout: return "A bounded wait ran out (also a TimeoutError).";
        case ErrorKind::NotReady: return "A result asked for is not there yet (an event still pending).";
        case ErrorKind::OutOfMemory: return "Host or device memory exhausted (also a MemoryError).";
        case ErrorKind::IoError: return "A system call failed unexpectedly; errno says which.";
        case ErrorKind::ProtocolError: return "The device does not speak this contract.";
        case ErrorKind::Internal: return "A bug in spyre (or a C++ exception of another type).";
        case ErrorKind::WrongDevice: return "Objects of different devices mixed in one call (also a ValueError).";
        case ErrorKind::TaskFailed: return "User code run as a task (a callback, a SubWorker) raised.";
    }
    return "";
}

const char* NameOf(ErrorKind kind) {
    for (const KindName& k : kKinds)
        if (k.kind == kind) return k.name;
    return "Internal";
}

PyObject* g_base = nullptr;
PyObject* g_classes[kKindCount] = {};

PyObject* ClassOf(ErrorKind kind) {
    for (size_t i = 0; i < kKindCount; ++i)
        if (kKinds[i].kind == kind) return g_classes[i];
    return g_base;
}

py::object Build(const Error& e) {
    PyObject* cls = ClassOf(e.kind());
    py::object exc = py::reinterpret_steal<py::object>(PyObject_CallOneArg(cls, TextFromBytes(e.what()).ptr()));
    if (!exc) throw py::error_already_set();
    const ErrorContext& c = e.context();
    auto opt = [](const auto& v) -> py::object { return v ? py::cast(*v) : py::none(); };
    py::dict context;
    context["device"] = TextFromBytes(c.device);
    context["register"] = TextFromBytes(c.reg);
    context["offset"] = opt(c.offset);
    context["address"] = opt(c.address);
    context["stream"] = opt(c.stream);
    context["op_index"] = opt(c.op_index);
    context["kernel_id"] = opt(c.kernel_id);
    context["sys_errno"] = c.sys_errno;
    context["errno"] = c.sys_errno;  // the same: the key's first name
    context["device_code"] = c.device_code;
    context["host_kernel_code"] = c.host_kernel_code;
    exc.attr("kind") = NameOf(e.kind());
    exc.attr("message") = TextFromBytes(e.message());
    exc.attr("context") = context;
    for (const char* key : {"device", "offset", "address", "stream", "op_index", "kernel_id", "device_code",
                            "host_kernel_code", "sys_errno"})
        exc.attr(key) = context[key];
    exc.attr("register") = context["register"];
    return exc;
}

// Raises `e` as its Python class with its attributes set.
void Raise(const Error& e) {
    try {
        py::object exc = Build(e);
        PyErr_SetObject(ClassOf(e.kind()), exc.ptr());
    } catch (py::error_already_set& failed) {
        failed.restore();  // building it raised: that error stands
    }
}

}  // namespace

py::object ToPython(const Error& error) { return Build(error); }

py::str TextFromBytes(const std::string& text) {
    PyObject* s = PyUnicode_DecodeUTF8(text.data(), Py_ssize_t(text.size()), "backslashreplace");
    if (!s) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(s);
}

std::string TextOf(py::handle obj) {
    // A user's exception is reported even when its text is not: a failure
    // here would replace it with one of our own (UnicodeEncodeError).
    py::object text = py::reinterpret_steal<py::object>(PyObject_Str(obj.ptr()));
    if (!text) {
        PyErr_Clear();
        text = py::reinterpret_steal<py::object>(PyObject_Repr(obj.ptr()));
    }
    if (!text) {
        PyErr_Clear();
        return "<str() and repr() of it raised>";
    }
    const py::object bytes =
        py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(text.ptr(), "utf-8", "backslashreplace"));
    if (!bytes) {
        PyErr_Clear();
        return "<not text>";
    }
    return {PyBytes_AS_STRING(bytes.ptr()), size_t(PyBytes_GET_SIZE(bytes.ptr()))};
}

std::string ShortRepr(py::handle obj, size_t max) {
    py::object repr = py::reinterpret_steal<py::object>(PyObject_Repr(obj.ptr()));
    if (!repr) {
        PyErr_Clear();
        return "<its repr() raised>";
    }
    const std::string text = TextOf(repr);
    std::string out;
    for (char c : text) {
        const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (space && (out.empty() || out.back() == ' ')) continue;
        out += space ? ' ' : c;
    }
    if (out.size() > max) {
        size_t cut = max;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
        out = out.substr(0, cut) + "...";
    }
    return out;
}

Error FromPython(const py::error_already_set& e, const std::string& where) {
    const py::object name = py::getattr(e.type(), "__name__", py::none());
    const std::string type = name.is_none() ? "exception" : TextOf(name);
    return Error(ErrorKind::TaskFailed, where + " raised " + type + ": " + TextOf(e.value()));
}

std::optional<ErrorKind> SpyreKindOf(const py::error_already_set& e) {
    if (py::hasattr(e.value(), "kind") && py::hasattr(e.value(), "message")) {
        const std::string kind = TextOf(e.value().attr("kind"));
        for (const auto& k : kKinds)
            if (kind == k.name) return k.kind;
        return std::nullopt;
    }
    // One Python code made itself (`raise spyre.InvalidArgument("...")`, as
    // the DSL's refusals are) has neither: its class says (it was
    // TaskFailed: found probing from outside).
    for (size_t i = 0; i < kKindCount; ++i)
        if (g_classes[i] && PyObject_IsInstance(e.value().ptr(), g_classes[i]) == 1) return kKinds[i].kind;
    return std::nullopt;
}

std::string SpyreMessageOf(const py::error_already_set& e) {
    return TextOf(py::hasattr(e.value(), "message") ? e.value().attr("message") : e.value());
}

void BindErrors(py::module_& m) {
    g_base = PyErr_NewExceptionWithDoc(
        "spyre._spyre.Error",
        "Every spyre failure. Attributes: kind (the ErrorKind's name), message (without decoration), "
        "context (dict), and its entries device, register, offset, address, stream, op_index, kernel_id, "
        "device_code, host_kernel_code, sys_errno.",
        PyExc_Exception, nullptr);
    m.add_object("Error", py::handle(g_base));
    for (size_t i = 0; i < kKindCount; ++i) {
        const ErrorKind kind = kKinds[i].kind;
        const std::string name = kKinds[i].name;
        PyObject* builtin = BuiltinBase(kind);
        py::tuple bases = builtin ? py::make_tuple(py::handle(g_base), py::handle(builtin))
                                  : py::make_tuple(py::handle(g_base));
        g_classes[i] = PyErr_NewExceptionWithDoc(("spyre._spyre." + name).c_str(), Doc(kind), bases.ptr(), nullptr);
        if (!g_classes[i]) throw py::error_already_set();
        m.add_object(name.c_str(), py::handle(g_classes[i]));
    }
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        try {
            std::rethrow_exception(p);
        } catch (const Error& e) {
            Raise(e);
        } catch (const py::error_already_set&) {
            throw;
        } catch (const py::cast_error& e) {
            // A value inside an argument (a list's item, a tuple's field)
            // that does not convert: the caller's, like the argument checks.
            Raise(Error(ErrorKind::InvalidArgument,
                        std::string("a value of the wrong type or out of range in the arguments: ") + e.what()));
        } catch (const py::builtin_exception&) {
            throw;
        } catch (const std::bad_alloc&) {
            Raise(Error(ErrorKind::OutOfMemory, "host memory exhausted (std::bad_alloc)"));
        } catch (const std::exception& e) {
            Raise(Error(ErrorKind::Internal, std::string("unexpected C++ exception: ") + e.what()));
        }
    });
    m.def("_raise_for_test", [](const std::string& kind, const std::string& message) {
        for (const KindName& k : kKinds)
            if (kind == k.name)
                throw Error(k.kind, message, ErrorContext{.device = "0000:01:00.0", .address = 0x1000, .stream = 3,
                                                     .op_index = 7, .device_code = 5});
        if (kind == "std::runtime_error") throw std::runtime_error(message);
        if (kind == "std::bad_alloc") throw std::bad_alloc();
        throw Error(ErrorKind::InvalidArgument, "_raise_for_test: unknown kind '" + kind + "'");
    }, "Raises a spyre::Error of `kind` with a fixed context (tests of the translation).");
}

}  // namespace spyre::python
