// SPDX-License-Identifier: Apache-2.0
// Launching: SpyreStream.launch / launch_tiled for one Operation,
// launch_kernel for a whole plan (Launch or LaunchTiled per Operation), and
// the synchronous Program of seed 000. Enqueues return at once; Program's
// calls wait with the GIL released.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "callbacks.hpp"
#include "int_arg.hpp"
#include "objects.hpp"
#include "plan_objects.hpp"

namespace spyre::python {

namespace {

// `user` names what of the call's is on `slot` ("stream", "program", "device").
void CheckPlanOn(const PyPlan& p, const DeviceSlot& slot, const char* what, const char* user = "stream") {
    if (!p.slot)
        throw Error(ErrorKind::InvalidArgument, std::string(what) + ": plan '" + p.name +
                                                    "' is not loaded (spyre.load_execution_plan)");
    slot.CheckSame(*p.slot, std::string(what) + ": plan '" + p.name + "'", user);
}

}  // namespace

void BindLaunch(py::module_& m) {
    py::class_<PySpyreStream, std::shared_ptr<PySpyreStream>> ss(m.attr("SpyreStream"));
    ss.def("launch", [](PySpyreStream& s, const PyOperation& op, const std::vector<std::shared_ptr<PyTensor>>& tensors) {
            const char* what = "SpyreStream.launch";
            CheckPlanOn(*op.plan, *s.slot(), what);
            auto ts = TensorsOf(*s.slot(), tensors, what);
            s.Get(what).Launch(op.Get(what), ts);
        }, py::arg("operation"), py::arg("tensors"),
        "Enqueues the Operation for tensors of exactly its compiled shapes (inputs then outputs).");
    ss.def("launch_tiled", [](PySpyreStream& s, const PyOperation& op, const std::vector<std::shared_ptr<PyTensor>>& tensors,
                              py::object progress) {
            const char* what = "SpyreStream.launch_tiled";
            CheckPlanOn(*op.plan, *s.slot(), what);
            auto ts = TensorsOf(*s.slot(), tensors, what);
            if (progress.is_none()) s.Get(what).LaunchTiled(op.Get(what), ts);
            else s.Get(what).LaunchTiled(op.Get(what), ts, PythonProgress(progress, "launch_tiled progress"));
        }, py::arg("operation"), py::arg("tensors"), py::arg("progress") = py::none(),
        "Enqueues the Operation over tensors larger than its tile (docs/tiling.md); progress(what, done, total, "
        "unit) hears tiles completed.");

    m.def("launch_kernel", [](PySpyreStream& s, const PyPlan& plan, const std::vector<std::shared_ptr<PyTensor>>& tensors) {
        const char* what = "launch_kernel";
        CheckPlanOn(plan, *s.slot(), what);
        auto ts = TensorsOf(*s.slot(), tensors, what);
        LaunchKernel(s.Get(what), plan.Get(what), ts);
    }, py::arg("stream"), py::arg("plan"), py::arg("tensors"),
    "Every Operation of a loaded plan over `tensors` (the plan's tensor_input_metadata order): Launch when "
    "shapes match exactly, LaunchTiled otherwise. Validates all before enqueuing; returns at once.");

    py::class_<PyProgram, std::shared_ptr<PyProgram>>(m, "Program",
        "Seed 000's synchronous program: Instructions (Operations) run in order on its own stream; launch and "
        "launch_tiled wait (GIL released).")
        .def(py::init([](const SlotPtr& slot, std::shared_ptr<PyPlan> plan) {
                 Device& d = DeviceOf(slot, "Program");
                 if (!plan) return Adopt(slot, std::make_shared<Program>(d));
                 CheckPlanOn(*plan, *slot, "Program", "device");
                 return Adopt(slot, std::make_shared<Program>(d, plan->plan));
             }), py::arg("device"), py::arg("plan") = nullptr,
             "An empty program, or one Instruction per Operation of a loaded plan.")
        .def("add_instruction", [](PyProgram& p, const PyOperation& op, const py::object& tensor_indices) {
                CheckPlanOn(*op.plan, *p.slot(), "Program.add_instruction", "program");
                Operation copy = op.Get("Program.add_instruction");
                if (!tensor_indices.is_none()) {
                    const size_t slots = !copy.tensor_indices.empty() ? copy.tensor_indices.size()
                                         : copy.compute()                ? copy.compute()->tensors.size()
                                                                         : 0;
                    std::vector<size_t> indices =
                        IntsFrom<size_t>(tensor_indices, "Program.add_instruction: tensor_indices");
                    if (indices.size() != slots)
                        throw Error(ErrorKind::InvalidArgument,
                                    "Program.add_instruction: tensor_indices has " + std::to_string(indices.size()) +
                                        " items, the operation '" + copy.name + "' has " + std::to_string(slots) +
                                        " tensor slots");
                    copy.tensor_indices = std::move(indices);
                }
                p.Get("Program.add_instruction").AddInstruction(Instruction(std::move(copy)));
            }, py::arg("operation"), py::arg("tensor_indices") = py::none(),
            "Appends the operation. Each instruction takes its tensors from launch()'s list at its operation's "
            "tensor_indices (its plan's numbering): operations of different plans share the tensors of equal "
            "indices unless tensor_indices (one per slot) gives this one others.")
        .def("remove_instruction", [](PyProgram& p, const IntArg<size_t>& index_arg) {
                Program& prog = p.Get("Program.remove_instruction");
                const size_t index = index_arg.In("Program.remove_instruction: index");
                if (index >= prog.instructions().size())
                    throw Error(ErrorKind::InvalidArgument, "Program.remove_instruction(" + std::to_string(index) +
                                                                "): the program has " +
                                                                std::to_string(prog.instructions().size()) + " instructions");
                const Instruction i = prog.instructions()[index];
                prog.RemoveInstruction(i);
            }, py::arg("index"))
        .def_property_readonly("instruction_count", [](const PyProgram& p) { return p.Get("Program").instructions().size(); })
        .def("launch", [](PyProgram& p, const std::vector<std::shared_ptr<PyTensor>>& tensors) {
                auto prog = p.Share("Program.launch");
                auto ts = TensorsOf(*p.slot(), tensors, "Program.launch");
                WithoutGil([&] { prog->Launch(ts); });
                Deferred::Instance().Drain();
            }, py::arg("tensors"), "Strict shapes; runs every instruction in order and waits.")
        .def("launch_tiled", [](PyProgram& p, const std::vector<std::shared_ptr<PyTensor>>& tensors) {
                auto prog = p.Share("Program.launch_tiled");
                auto ts = TensorsOf(*p.slot(), tensors, "Program.launch_tiled");
                WithoutGil([&] { prog->LaunchTiled(ts); });
                Deferred::Instance().Drain();
            }, py::arg("tensors"), "Tiled over larger tensors; waits.");
}

}  // namespace spyre::python
