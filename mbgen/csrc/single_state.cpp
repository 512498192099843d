/* One state at a time from Python, without cffi's per-call cost (runtime/single.py).
 *
 * A State holds the addresses of one evaluator's C state (its cffi module's
 * mb_forward_dynamics_one, workspace and parameters, kept alive by the Python owner) and
 * its output arrays. Inputs are taken as they come: a C-contiguous float64 array is read
 * in place, anything else converted once; outputs are the State's own arrays, overwritten
 * by the next call, as the evaluator documents. A failed state raises what the Python
 * owner's ``failure(status, q)`` makes, so both paths raise the same errors.
 */
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "mbgen.h"

namespace {

namespace py = pybind11;
using Input = py::array_t<double, py::array::c_style | py::array::forcecast>;
using Output = py::array_t<double, py::array::c_style>;
using ForwardOne = decltype(&mb_forward_dynamics_one);

struct State {
    ForwardOne forward;
    mb_workspace* workspace;
    const double* parameters;
    int n, m;
    py::object failure;  // failure(status, q) -> the exception to raise
    Output qdd, lam, jq, jqd, jQ;

    State(std::uintptr_t forward, std::uintptr_t workspace, std::uintptr_t parameters, int n,
          int m, py::object failure)
        : forward(reinterpret_cast<ForwardOne>(forward)),
          workspace(reinterpret_cast<mb_workspace*>(workspace)),
          parameters(reinterpret_cast<const double*>(parameters)), n(n), m(m),
          failure(std::move(failure)), qdd(n), lam(m > 0 ? m : 1), jq({n, n}), jqd({n, n}),
          jQ({n, n}) {}

    const double* vector(const Input& x, const char* name) const {
        if (x.ndim() != 1 || x.shape(0) != n)
            throw std::invalid_argument(std::string(name) + " must have " +
                                        std::to_string(n) + " entries");
        return x.data();
    }

    void run(const Input& q, const Input& qd, const std::optional<Input>& Q, double* lam_out,
             bool jacobians) {
        const double* Qp = Q ? vector(*Q, "Q") : nullptr;
        const int status = forward(workspace, vector(q, "q"), vector(qd, "qd"), Qp, parameters,
                                   qdd.mutable_data(), lam_out,
                                   jacobians ? jq.mutable_data() : nullptr,
                                   jacobians ? jqd.mutable_data() : nullptr,
                                   jacobians ? jQ.mutable_data() : nullptr);
        if (status) {
            py::object error = failure(status, q);
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
            throw py::error_already_set();
        }
    }

    Output forward_dynamics(const Input& q, const Input& qd, const std::optional<Input>& Q) {
        run(q, qd, Q, nullptr, false);
        return qdd;
    }

    py::tuple with_multipliers(const Input& q, const Input& qd, const std::optional<Input>& Q) {
        run(q, qd, Q, lam.mutable_data(), false);
        return py::make_tuple(qdd, lam[py::slice(0, m, 1)]);
    }

    py::tuple jacobians(const Input& q, const Input& qd, const std::optional<Input>& Q) {
        run(q, qd, Q, nullptr, true);
        return py::make_tuple(qdd, jq, jqd, jQ);
    }
};

}  // namespace

PYBIND11_MODULE(MBGEN_MODULE_NAME, module) {
    module.doc() = "mbgen's one-state calls from Python (runtime/single.py)";
    py::class_<State>(module, "State")
        .def(py::init<std::uintptr_t, std::uintptr_t, std::uintptr_t, int, int, py::object>())
        .def("forward_dynamics", &State::forward_dynamics, py::arg("q"), py::arg("qd"),
             py::arg("Q") = py::none())
        .def("forward_dynamics_with_multipliers", &State::with_multipliers, py::arg("q"),
             py::arg("qd"), py::arg("Q") = py::none())
        .def("forward_dynamics_jacobians", &State::jacobians, py::arg("q"), py::arg("qd"),
             py::arg("Q") = py::none());
}
