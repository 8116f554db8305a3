// SPDX-License-Identifier: Apache-2.0
// The kernel builder (spyre's stand-in compiler): KernelBuilder's operations
// (matmul, add/sub/mul/div with broadcasting, relu, gelu, softmax, reduce,
// transpose, copy, fill) as BuiltKernels, and their compiler output.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "dtype.hpp"
#include "int_arg.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/compiler/plan_writer.hpp"

namespace spyre::python {

namespace {

py::bytes Bytes(const std::vector<uint8_t>& v) { return py::bytes(reinterpret_cast<const char*>(v.data()), v.size()); }

BuiltKernel Binary(const KernelBuilder& k, ElementwiseOp op, const std::vector<int64_t>& a,
                   const std::optional<std::vector<int64_t>>& b, py::handle dtype) {
    return k.Elementwise(op, a, b ? *b : a, DTypeFrom(dtype, "KernelBuilder.elementwise"));
}

}  // namespace

void BindCompiler(py::module_& m) {
    py::enum_<ElementwiseOp>(m, "ElementwiseOp")
        .value("Add", ElementwiseOp::Add).value("Sub", ElementwiseOp::Sub)
        .value("Mul", ElementwiseOp::Mul).value("Div", ElementwiseOp::Div);
    py::enum_<ReduceKind>(m, "ReduceKind").value("Sum", ReduceKind::Sum).value("Max", ReduceKind::Max);

    py::class_<KernelTensor>(m, "KernelTensor", "One tensor a kernel reads or writes, as it expects it.")
        .def_readonly("shape", &KernelTensor::shape)
        .def_readonly("strides", &KernelTensor::strides, "In elements.")
        .def_readonly("dtype", &KernelTensor::dtype)
        .def_readonly("layout", &KernelTensor::layout)
        .def_readonly("bytes", &KernelTensor::bytes)
        .def_readonly("loops", &KernelTensor::loops);

    py::class_<BuiltKernel>(m, "BuiltKernel", "A device program with its correction binary and tensor metadata.")
        .def_readonly("name", &BuiltKernel::name)
        .def_property_readonly("program", [](const BuiltKernel& k) { return Bytes(k.program); })
        .def_property_readonly("correction", [](const BuiltKernel& k) { return Bytes(k.correction); })
        .def_readonly("correction_input_size", &BuiltKernel::correction_input_size)
        .def_readonly("inputs", &BuiltKernel::inputs)
        .def_readonly("outputs", &BuiltKernel::outputs)
        .def_readonly("reduction_loops", &BuiltKernel::reduction_loops)
        .def_readonly("untileable_loops", &BuiltKernel::untileable_loops)
        .def("compiler_output", [](const BuiltKernel& k, const std::string& name) {
                return CompilerOutputFromKernel(name, k);
            }, py::arg("name"), "A one-operation plan named `name` (load with load_execution_plan).")
        .def("__repr__", [](const BuiltKernel& k) { return "<spyre.BuiltKernel '" + k.name + "'>"; });

    const char* dt = "dtype: a spyre.DType, numpy dtype or name (fp16/fp32 for arithmetic).";
    py::class_<KernelBuilder>(m, "KernelBuilder",
        "Emits device programs for a tile shape and dtype. Every method raises InvalidArgument naming the "
        "dimension, axis or dtype that is wrong. Shapes are 1 to 8 dims, each >= 1.")
        .def(py::init<TensorLayout>(), py::arg("layout") = TensorLayout::Dense)
        .def("matmul", [](const KernelBuilder& k, const IntArg<int64_t>& m_, const IntArg<int64_t>& k_,
                          const IntArg<int64_t>& n, py::handle dtype, bool acc) {
                return k.Matmul(m_.In("KernelBuilder.matmul: m"), k_.In("KernelBuilder.matmul: k"),
                                n.In("KernelBuilder.matmul: n"), DTypeFrom(dtype, "KernelBuilder.matmul"), acc);
            }, py::arg("m"), py::arg("k"), py::arg("n"), py::arg("dtype") = DType::FP32, py::arg("accumulate") = false,
            "C[m,n] = A[m,k] @ B[k,n] (C += with accumulate).")
        .def("elementwise", [](const KernelBuilder& k, ElementwiseOp op, const IntList<int64_t>& a,
                               const IntList<int64_t>& b, py::handle dtype) {
                return k.Elementwise(op, a, b, DTypeFrom(dtype, "KernelBuilder.elementwise"));
            }, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("dtype") = DType::FP32,
            "C = A op B with numpy broadcasting.")
        .def("relu", [](const KernelBuilder& k, const IntList<int64_t>& s, py::handle d) {
                return k.Relu(s, DTypeFrom(d, "KernelBuilder.relu"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32)
        .def("gelu", [](const KernelBuilder& k, const IntList<int64_t>& s, py::handle d) {
                return k.Gelu(s, DTypeFrom(d, "KernelBuilder.gelu"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32, "erf form.")
        .def("softmax", [](const KernelBuilder& k, const IntList<int64_t>& s, py::handle d) {
                return k.Softmax(s, DTypeFrom(d, "KernelBuilder.softmax"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32, "Along the last dim.")
        .def("reduce", [](const KernelBuilder& k, ReduceKind kind, const IntList<int64_t>& s, const IntArg<int>& axis,
                          py::handle d) {
                return k.Reduce(kind, s, axis.In("KernelBuilder.reduce: axis"), DTypeFrom(d, "KernelBuilder.reduce"));
            }, py::arg("kind"), py::arg("shape"), py::arg("axis"), py::arg("dtype") = DType::FP32,
            "Output keeps the reduced dim with size 1.")
        .def("transpose", [](const KernelBuilder& k, const IntList<int64_t>& s, const IntList<int>& perm, py::handle d) {
                return k.Transpose(s, perm, DTypeFrom(d, "KernelBuilder.transpose"));
            }, py::arg("shape"), py::arg("perm"), py::arg("dtype") = DType::FP32, "Output dim i is input dim perm[i].")
        .def("copy", [](const KernelBuilder& k, const IntList<int64_t>& s, py::handle d) {
                return k.Copy(s, DTypeFrom(d, "KernelBuilder.copy"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32)
        .def("fill", [](const KernelBuilder& k, const IntList<int64_t>& s, double v, py::handle d) {
                return k.Fill(s, v, DTypeFrom(d, "KernelBuilder.fill"));
            }, py::arg("shape"), py::arg("value"), py::arg("dtype") = DType::FP32)
        .def("tensor", [](const KernelBuilder& k, const IntList<int64_t>& s, py::handle d) {
                return k.Tensor(s, DTypeFrom(d, "KernelBuilder.tensor"));
            }, py::arg("shape"), py::arg("dtype") = DType::FP32, "The tensor this builder lays out for `shape`.");
    (void)dt;
    py::class_<KernelBuilder> builder(m.attr("KernelBuilder"));
    struct Named {
        const char* name;
        ElementwiseOp op;
        const char* doc;
    };
    for (const Named& e : {Named{"add", ElementwiseOp::Add, "C = A + B (b defaults to a's shape; numpy broadcasting)."},
                           Named{"sub", ElementwiseOp::Sub, "C = A - B (b defaults to a's shape)."},
                           Named{"mul", ElementwiseOp::Mul, "C = A * B (b defaults to a's shape)."},
                           Named{"div", ElementwiseOp::Div, "C = A / B (b defaults to a's shape)."}}) {
        const ElementwiseOp op = e.op;
        builder.def(e.name, [op](const KernelBuilder& k, const IntList<int64_t>& a,
                                 const std::optional<IntList<int64_t>>& b, py::handle d) {
                        return Binary(k, op, a, b ? std::optional<std::vector<int64_t>>(*b) : std::nullopt, d);
                    },
                    py::arg("a"), py::arg("b") = py::none(), py::arg("dtype") = DType::FP32, e.doc);
    }

    m.def("compiler_output_from_kernel", &CompilerOutputFromKernel, py::arg("name"), py::arg("kernel"),
          "One kernel as a plan: operation and plan both named `name`.");
    m.def("compiler_output_from_kernels", [](const std::string& plan_name,
                                             const std::vector<std::pair<std::string, BuiltKernel>>& kernels) {
        return CompilerOutputFromKernels(plan_name, kernels);
    }, py::arg("plan_name"), py::arg("kernels"), "Several kernels as one plan: [(operation name, kernel), ...].");
}

}  // namespace spyre::python
