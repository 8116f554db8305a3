// SPDX-License-Identifier: Apache-2.0
// ExecutionPlan (seed 001): CompilerOutput (plan.json + blobs, read from and
// written to a directory), the parsed plan and its Operations, and
// load_execution_plan (binaries to device; cached per device by content).
#include <map>

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include "bindings.hpp"
#include "errors.hpp"
#include "int_arg.hpp"
#include "callbacks.hpp"
#include "objects.hpp"
#include "plan_objects.hpp"

namespace spyre::python {

namespace {

std::shared_ptr<PyPlan> Parsed(std::shared_ptr<const CompilerOutput> source) {
    auto p = std::make_shared<PyPlan>();
    p->plan = WithoutGil([&] { return std::make_shared<const ExecutionPlan>(*source); });
    p->source = std::move(source);
    p->name = p->plan->name;
    return p;
}

std::shared_ptr<PyPlan> Load(PySpyreStream& ps, py::object source, py::object progress) {
    const char* what = "load_execution_plan";
    std::shared_ptr<const CompilerOutput> output;
    if (py::isinstance<CompilerOutput>(source)) {
        output = std::make_shared<const CompilerOutput>(source.cast<const CompilerOutput&>());
    } else if (py::isinstance<PyPlan>(source)) {
        const auto& p = source.cast<const PyPlan&>();
        if (!p.source)
            throw Error(ErrorKind::InvalidArgument, std::string(what) + ": plan '" + p.name + "' has no compiler output to load");
        output = p.source;
    } else {
        if (!py::isinstance<py::str>(source) && !py::isinstance(source, py::module_::import("os").attr("PathLike")))
            throw Error(ErrorKind::InvalidArgument,
                        std::string(what) + ": source is a " +
                            std::string(py::str(py::type::handle_of(source).attr("__name__"))) +
                            ", not a directory path, a CompilerOutput or an ExecutionPlan");
        const std::filesystem::path dir = source.cast<std::filesystem::path>();
        output = WithoutGil([&] { return std::make_shared<const CompilerOutput>(CompilerOutput::ReadDirectory(dir)); });
    }
    auto ss = ps.Share(what);
    ProgressCallback cb = PythonProgress(progress, "load_execution_plan progress");
    auto p = std::make_shared<PyPlan>();
    p->plan = WithoutGil([&] { return LoadExecutionPlan(*ss, *output, cb); });
    Deferred::Instance().Drain();
    p->source = std::move(output);
    p->slot = ps.slot();
    p->name = p->plan->name;
    ps.slot()->Adopt(p);
    return p;
}

// A file's text or a path for Python, and back: bytes that are not UTF-8
// round-trip as lone surrogates (surrogateescape, as os.fsdecode does); a
// strict decode raised UnicodeDecodeError for a plan.json holding one.
py::str FileText(const std::string& bytes) {
    PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), Py_ssize_t(bytes.size()), "surrogateescape");
    if (!s) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(s);
}

std::string FileBytes(const py::object& value, const char* what) {
    if (py::isinstance<py::bytes>(value)) return value.cast<std::string>();
    if (!py::isinstance<py::str>(value))
        throw Error(ErrorKind::InvalidArgument, std::string(what) + " must be str or bytes, got " + ShortRepr(value));
    const py::object b = py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(value.ptr(), "utf-8", "surrogateescape"));
    if (!b) {
        PyErr_Clear();
        throw Error(ErrorKind::InvalidArgument, std::string(what) + " holds a character that is not UTF-8 text");
    }
    return {PyBytes_AS_STRING(b.ptr()), size_t(PyBytes_GET_SIZE(b.ptr()))};
}

// One entry of CompilerOutput.blobs: a file name (str) -> bytes or bytearray.
std::pair<std::string, std::vector<uint8_t>> Blob(const py::handle& name, const py::handle& data) {
    const bool is_bytes = py::isinstance<py::bytes>(data);
    if (!py::isinstance<py::str>(name) || !(is_bytes || py::isinstance<py::bytearray>(data)))
        throw Error(ErrorKind::InvalidArgument, "CompilerOutput.blobs: entry " + std::string(py::repr(name)) + " is " +
                                                    ATypeName(name) + " -> " + ATypeName(data) +
                                                    "; give file names (str) -> bytes");
    const auto* at = reinterpret_cast<const uint8_t*>(is_bytes ? PyBytes_AS_STRING(data.ptr())
                                                                : PyByteArray_AS_STRING(data.ptr()));
    const size_t size = size_t(is_bytes ? PyBytes_GET_SIZE(data.ptr()) : PyByteArray_GET_SIZE(data.ptr()));
    return {name.cast<std::string>(), std::vector<uint8_t>(at, at + size)};
}

const char* RoleName(TensorRole r) { return r == TensorRole::Input ? "input" : "output"; }

}  // namespace

void BindPlan(py::module_& m) {
    py::class_<CompilerOutput, std::shared_ptr<CompilerOutput>>(m, "CompilerOutput",
        "The raw compiler output: plan.json and the binary blobs by file name (docs/execution_plan.md).")
        .def(py::init<>())
        .def_property("manifest", [](const CompilerOutput& c) { return FileText(c.manifest); },
            [](CompilerOutput& c, const py::object& text) { c.manifest = FileBytes(text, "manifest"); },
            "The plan.json text (bytes that are not UTF-8 as lone surrogates, as os.fsdecode gives them).")
        .def_property("origin", [](const CompilerOutput& c) { return FileText(c.origin); },
            [](CompilerOutput& c, const py::object& text) { c.origin = FileBytes(text, "origin"); })
        .def_property("blobs",
            [](const py::object& self) {
                return py::module_::import("spyre._plan_blobs").attr("CompilerOutputBlobs")(self);
            },
            [](CompilerOutput& c, const py::object& mapping) {
                if (!py::hasattr(mapping, "items"))
                    throw Error(ErrorKind::InvalidArgument,
                                "CompilerOutput.blobs: give a mapping of file names (str) -> bytes, not " +
                                    ATypeName(mapping));
                // Checked whole before c changes: a bad entry leaves the old blobs.
                std::map<std::string, std::vector<uint8_t>> blobs;
                for (const py::handle item : mapping.attr("items")()) {
                    const auto entry = item.cast<py::tuple>();
                    auto [name, bytes] = Blob(entry[0], entry[1]);
                    blobs.insert_or_assign(std::move(name), std::move(bytes));
                }
                c.blobs = std::move(blobs);
            }, "File name -> bytes: a live view (item assignment and del change the output).")
        .def("_blob", [](const CompilerOutput& c, const py::object& name) {
                const auto it = py::isinstance<py::str>(name) ? c.blobs.find(name.cast<std::string>()) : c.blobs.end();
                if (it == c.blobs.end()) throw py::key_error(std::string(py::repr(name)));
                return py::bytes(reinterpret_cast<const char*>(it->second.data()), it->second.size());
            })
        .def("_set_blob", [](CompilerOutput& c, const py::object& name, const py::object& data) {
                auto [file, bytes] = Blob(name, data);
                c.blobs.insert_or_assign(std::move(file), std::move(bytes));
            })
        .def("_del_blob", [](CompilerOutput& c, const py::object& name) {
                if (!py::isinstance<py::str>(name) || c.blobs.erase(name.cast<std::string>()) == 0)
                    throw py::key_error(std::string(py::repr(name)));
            })
        .def("_blob_names", [](const CompilerOutput& c) {
                std::vector<std::string> names;
                for (const auto& entry : c.blobs) names.push_back(entry.first);
                return names;
            })
        .def("_blob_count", [](const CompilerOutput& c) { return c.blobs.size(); })
        .def_static("read_directory", [](const std::filesystem::path& dir) {
                return WithoutGil([&] { return CompilerOutput::ReadDirectory(dir); });
            }, py::arg("path"))
        .def("write_directory", [](const CompilerOutput& c, const std::filesystem::path& dir) {
                WithoutGil([&] { c.WriteDirectory(dir); });
            }, py::arg("path"), "Writes plan.json and the blobs into `path` (absent or empty).")
        .def("content_hash", &CompilerOutput::ContentHash);

    py::enum_<TensorRole>(m, "TensorRole").value("Input", TensorRole::Input).value("Output", TensorRole::Output);
    py::class_<TensorSpec>(m, "TensorSpec", "A tensor as a compute expects it (compiler metadata).")
        .def_readonly("name", &TensorSpec::name)
        .def_readonly("shape", &TensorSpec::shape)
        .def_readonly("strides", &TensorSpec::strides, "In elements.")
        .def_readonly("dtype", &TensorSpec::dtype)
        .def_readonly("role", &TensorSpec::role)
        .def_readonly("loops", &TensorSpec::loops)
        .def_readonly("bytes", &TensorSpec::bytes)
        .def("__repr__", [](const TensorSpec& t) {
            return "TensorSpec('" + t.name + "', " + ShapeText(std::span<const int64_t>(t.shape)) + ", " +
                   ToString(t.dtype) + ", " + RoleName(t.role) + ")";
        });

    py::class_<PyOperation>(m, "Operation", "One Operation of an ExecutionPlan: a compute and its preprocessing.")
        .def_property_readonly("name", [](const PyOperation& o) { return o.Get("Operation.name").name; })
        .def_property_readonly("index", [](const PyOperation& o) { return o.index; })
        .def_property_readonly("tensor_indices", [](const PyOperation& o) { return o.Get("Operation.tensor_indices").tensor_indices; },
                               "The plan tensor bound to each slot.")
        .def_property_readonly("tensors", [](const PyOperation& o) {
                const auto& c = o.Get("Operation.tensors").compute();
                return c ? c->tensors : std::vector<TensorSpec>{};
            }, "The compute's tensors (inputs then outputs).")
        .def_property_readonly("has_compute", [](const PyOperation& o) { return o.Get("Operation.has_compute").compute().has_value(); })
        .def_property_readonly("has_correction", [](const PyOperation& o) { return o.Get("Operation.has_correction").correction.has_value(); })
        .def_property_readonly("preprocess_steps", [](const PyOperation& o) {
                std::vector<std::string> s;
                for (const auto& p : o.Get("Operation.preprocess_steps").preprocess()) s.push_back(p.name());
                return s;
            })
        .def_property_readonly("plan", [](const PyOperation& o) { return o.plan; })
        .def("__repr__", [](const PyOperation& o) {
            return "<spyre.Operation " + std::to_string(o.index) + " '" + o.Get("Operation").name + "'>";
        });

    py::class_<PyPlan, std::shared_ptr<PyPlan>>(m, "ExecutionPlan",
        "The compiler's output parsed and validated (seed 001); loaded on a device by load_execution_plan.")
        .def(py::init([](const CompilerOutput& c) { return Parsed(std::make_shared<const CompilerOutput>(c)); }),
             py::arg("compiler_output"), "Parses and validates; InvalidArgument names the file and field.")
        .def_static("read", [](const std::filesystem::path& dir) {
                auto out = WithoutGil([&] { return std::make_shared<const CompilerOutput>(CompilerOutput::ReadDirectory(dir)); });
                return Parsed(std::move(out));
            }, py::arg("path"), "Reads and parses a plan directory (plan.json + blobs).")
        .def_static("load", &Load, py::arg("stream"), py::arg("source"), py::arg("progress") = py::none(),
                    "Same as spyre.load_execution_plan.")
        .def("save", [](const PyPlan& p, const std::filesystem::path& dir) {
                if (!p.source)
                    throw Error(ErrorKind::InvalidArgument, "ExecutionPlan.save: plan '" + p.name + "' has no compiler output");
                WithoutGil([&] { p.source->WriteDirectory(dir); });
            }, py::arg("path"), "Writes the plan's compiler output (plan.json + blobs) into `path` (absent or empty).")
        .def_property_readonly("compiler_output", [](const PyPlan& p) -> py::object {
                return p.source ? py::cast(CompilerOutput(*p.source)) : py::none();
            })
        .def_property_readonly("name", [](const PyPlan& p) { return p.name; })
        .def_property_readonly("content_hash", [](const PyPlan& p) { return p.Get("ExecutionPlan.content_hash").content_hash; })
        .def_property_readonly("loaded", [](const PyPlan& p) { return p.slot != nullptr; })
        .def_property_readonly("device", [](const PyPlan& p) -> py::object {
                return p.slot ? py::cast(p.slot) : py::none();
            })
        .def_property_readonly("tensor_input_metadata", [](const PyPlan& p) {
                return p.Get("ExecutionPlan.tensor_input_metadata").tensor_input_metadata;
            }, "Every tensor of the plan, in the order launch_kernel binds them.")
        .def_property_readonly("operations", [](const std::shared_ptr<PyPlan>& p) {
                std::vector<PyOperation> ops;
                for (size_t i = 0; i < p->Get("ExecutionPlan.operations").operations.size(); ++i) ops.push_back({p, i});
                return ops;
            })
        .def("__repr__", [](const PyPlan& p) {
            return "<spyre.ExecutionPlan '" + p.name + "'" + (p.slot ? " loaded on " + p.slot->name() : std::string()) + ">";
        });

    m.def("load_execution_plan", &Load, py::arg("stream"), py::arg("source"), py::arg("progress") = py::none(),
          "Loads a plan on `stream`'s device: source is a CompilerOutput, a parsed ExecutionPlan or a directory. "
          "progress(what, done, total, unit) hears the binaries copied. Waits with the GIL released.");
}

}  // namespace spyre::python
