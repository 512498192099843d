/* One state at a time from Python, without cffi's per-call cost (runtime/single.py), and
 * the batched dynamics' common path (Batch, below; runtime/dynamics.py).
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
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

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

/* The batched API's common path (runtime/dynamics.py): q, q̇ and Q (or None) that are
 * C-contiguous float64 arrays of one shape, (n,) or (N, n), read in place; new outputs;
 * the call in the workspace one thread keeps (mb_forward_dynamics_in and friends, no
 * allocation in C). Anything else returns None and the caller takes its general path,
 * which checks and converts as before; so do failed states: the statuses come back and
 * the caller words the error. */
using ForwardIn = decltype(&mb_forward_dynamics_in);
using IndependentIn = decltype(&mb_independent_dynamics_in);
using Strict = py::array_t<double, py::array::c_style>;
using Indices = py::array_t<int, py::array::c_style | py::array::forcecast>;
constexpr long RELEASE_FROM = 64;  // states from which the call lets other threads run

struct Batch {
    ForwardIn forward;
    IndependentIn independent;
    mb_workspace* workspace;
    const double* parameters;
    int n, m, d;

    Batch(std::uintptr_t forward, std::uintptr_t independent, std::uintptr_t workspace,
          std::uintptr_t parameters, int n, int m, int d)
        : forward(reinterpret_cast<ForwardIn>(forward)),
          independent(reinterpret_cast<IndependentIn>(independent)),
          workspace(reinterpret_cast<mb_workspace*>(workspace)),
          parameters(reinterpret_cast<const double*>(parameters)), n(n), m(m), d(d) {}

    /* the states' count (-1: not the common path) and whether they came with a leading N */
    long states(py::handle q, py::handle qd, py::handle Q, bool& batched) const {
        if (!Strict::check_(q) || !Strict::check_(qd) || (!Q.is_none() && !Strict::check_(Q)))
            return -1;
        const auto a = py::reinterpret_borrow<py::array>(q);
        const auto b = py::reinterpret_borrow<py::array>(qd);
        if (a.ndim() != b.ndim() || a.ndim() < 1 || a.ndim() > 2) return -1;
        for (py::ssize_t k = 0; k < a.ndim(); ++k)
            if (a.shape(k) != b.shape(k)) return -1;
        if (a.shape(a.ndim() - 1) != n) return -1;
        if (!Q.is_none()) {
            const auto c = py::reinterpret_borrow<py::array>(Q);
            if (c.ndim() != a.ndim()) return -1;
            for (py::ssize_t k = 0; k < a.ndim(); ++k)
                if (c.shape(k) != a.shape(k)) return -1;
        }
        batched = a.ndim() == 2;
        return batched ? static_cast<long>(a.shape(0)) : 1;
    }

    static const double* data(py::handle x) {
        return x.is_none() ? nullptr
                           : static_cast<const double*>(py::reinterpret_borrow<py::array>(x).data());
    }

    static Output make(bool batched, long count, std::initializer_list<py::ssize_t> shape) {
        std::vector<py::ssize_t> full;
        if (batched) full.push_back(count);
        full.insert(full.end(), shape);
        return Output(full);
    }

    py::object forward_dynamics(py::handle q, py::handle qd, py::handle Q, bool jacobians) {
        bool batched = false;
        const long count = states(q, qd, Q, batched);
        if (count < 0) return py::none();
        const long stride = count > 1 ? n : 0;
        Output qdd = make(batched, count, {n});
        std::optional<Output> jq, jqd, jQ;
        if (jacobians) {
            jq = make(batched, count, {n, n});
            jqd = make(batched, count, {n, n});
            jQ = make(batched, count, {n, n});
        }
        py::array_t<int> status(count);
        const double *qp = data(q), *qdp = data(qd), *Qp = data(Q);
        double* out[4] = {qdd.mutable_data(), jacobians ? jq->mutable_data() : nullptr,
                          jacobians ? jqd->mutable_data() : nullptr,
                          jacobians ? jQ->mutable_data() : nullptr};
        int* st = status.mutable_data();
        int failed;
        {
            std::optional<py::gil_scoped_release> free;
            if (count >= RELEASE_FROM) free.emplace();
            failed = forward(workspace, count, qp, stride, qdp, stride, Qp, Qp ? stride : 0,
                             parameters, 0, out[0], nullptr, out[1], out[2], out[3], st);
        }
        if (jacobians) return py::make_tuple(qdd, *jq, *jqd, *jQ, status, failed);
        return py::make_tuple(qdd, status, failed);
    }

    py::object independent_dynamics(py::handle q, py::handle qd, py::handle Q,
                                    const Indices& zfix, bool jacobians) {
        bool batched = false;
        const long count = states(q, qd, Q, batched);
        if (count < 0) return py::none();
        const long stride = count > 1 ? n : 0;
        Output zdd = make(batched, count, {d});
        std::optional<Output> jz, jzd, jzQ;
        if (jacobians) {
            jz = make(batched, count, {d, d});
            jzd = make(batched, count, {d, d});
            jzQ = make(batched, count, {d, n});
        }
        py::array_t<int> status(count);
        const double *qp = data(q), *qdp = data(qd), *Qp = data(Q);
        double* out[3] = {jacobians ? jz->mutable_data() : nullptr,
                          jacobians ? jzd->mutable_data() : nullptr,
                          jacobians ? jzQ->mutable_data() : nullptr};
        int* st = status.mutable_data();
        const int* z = zfix.data();
        const int nz = static_cast<int>(zfix.size());
        int failed;
        {
            std::optional<py::gil_scoped_release> free;
            if (count >= RELEASE_FROM) free.emplace();
            failed = independent(workspace, count, qp, stride, qdp, stride, Qp,
                                 Qp ? stride : 0, parameters, 0, z, nz, zdd.mutable_data(),
                                 out[0], out[1], out[2], st);
        }
        if (jacobians) return py::make_tuple(zdd, *jz, *jzd, *jzQ, status, failed);
        return py::make_tuple(zdd, status, failed);
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
    py::class_<Batch>(module, "Batch")
        .def(py::init<std::uintptr_t, std::uintptr_t, std::uintptr_t, std::uintptr_t, int, int,
                      int>())
        .def("forward_dynamics", &Batch::forward_dynamics)
        .def("independent_dynamics", &Batch::independent_dynamics);
}
