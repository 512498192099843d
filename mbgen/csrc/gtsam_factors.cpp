/* mbgen's factors as native error functions of gtsam.CustomFactor (no Python in linearize).
 *
 * A gtsam.CustomFactor stores its error function as a std::function. When Python hands it
 * a function of another pybind11 module whose signature is exactly the CustomFactor's,
 * pybind11 (functional.h) stores the raw C++ function pointer instead of a Python call,
 * so GTSAM calls the functions below directly. They are stateless; what a factor needs
 * (its mechanism's C entry points, its keys, a measurement) is registered from Python
 * under the factor's address. An entry keeps its mechanism (and so the Python evaluator
 * whose C state it calls) alive, like the Python path's closure does, and is dropped once
 * its factor is gone (a weak reference to the factor's own shared pointer), so the
 * registry holds about as many entries as there are live factors.
 *
 * No GTSAM headers: the types of the signature are declared here as GTSAM names them
 * (only their names matter to pybind11's match and to the linker), as is the layout of a
 * stored vector (GenericValue: a vtable pointer, then the value), and Values::at is the
 * one symbol taken from the wheel's library, made global by the Python side before this
 * module is imported. Built with the wheel's string ABI (-D_GLIBCXX_USE_CXX11_ABI=0) and
 * a pybind11 of the wheel's internals version (mbgen/factors/native.py). The residuals
 * and Jacobians are those of mbgen/factors/mechanism.py's Python error functions, which
 * the self-check compares them with before the module is ever used.
 */
#include <pybind11/eigen.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "mbgen.h"

namespace gtsam {
using Key = std::uint64_t;
using Vector = Eigen::VectorXd;
using Matrix = Eigen::MatrixXd;
class CustomFactor {};  // only its address is used
class Value {  // polymorphic, with no data: GTSAM's base of every value
public:
    virtual ~Value();
};
template <class T> class GenericValue : public Value {  // GTSAM's value of type T
public:
    T value_;
};
class Values {
public:
    const Value& at(Key key) const;  // defined in the loaded libgtsam
};
}  // namespace gtsam

namespace {

namespace py = pybind11;
using gtsam::Matrix;
using gtsam::Vector;
using Jacobians = std::optional<std::reference_wrapper<std::vector<Matrix>>>;
using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ForwardOne = decltype(&mb_forward_dynamics_one);
using EvalSet = decltype(&mb_eval_dense_set);
using StatusText = decltype(&mb_status_text);

/* One mechanism's single-state entry points (addresses of the C state of a Python
 * evaluator, which ``owner`` keeps alive) and scratch buffers. Used under the GIL only
 * (GTSAM's linearize runs on the calling thread, which holds it). */
struct Mechanism {
    py::object owner;
    ForwardOne forward;
    EvalSet eval;
    StatusText status_text;
    mb_workspace* workspace;
    const mb_model* model;
    const double* parameters;
    int n, m, sensors;
    std::vector<int> z;
    std::vector<double> phi, phi_q, rate, rate_q, acc_q, acc_qd, acc_v_q, h, h_q, h_qd;
    std::vector<double> qdd, jq, jqd, jQ, forces;

    Mechanism(py::object owner, std::uintptr_t forward, std::uintptr_t eval,
              std::uintptr_t status_text, std::uintptr_t workspace, std::uintptr_t model,
              std::uintptr_t parameters, int n, int m, int sensors, std::vector<int> z)
        : owner(std::move(owner)), forward(reinterpret_cast<ForwardOne>(forward)),
          eval(reinterpret_cast<EvalSet>(eval)),
          status_text(reinterpret_cast<StatusText>(status_text)),
          workspace(reinterpret_cast<mb_workspace*>(workspace)),
          model(reinterpret_cast<const mb_model*>(model)),
          parameters(reinterpret_cast<const double*>(parameters)), n(n), m(m),
          sensors(sensors), z(std::move(z)), phi(m + 1), phi_q(m * n), rate(m), rate_q(m * n),
          acc_q(m * n), acc_qd(m * n), acc_v_q(m * n), h(sensors + 1), h_q(sensors * n),
          h_qd(sensors * n), qdd(n), jq(n * n), jqd(n * n), jQ(n * n), forces(n) {
        for (int i : this->z)
            if (i < 0 || i >= n) throw std::invalid_argument("independent coordinate out of range");
    }

    int dim_z() const { return static_cast<int>(z.size()); }

    [[noreturn]] void fail(int status, const std::string& context) const {
        throw std::runtime_error(context + ": " + status_text(status));
    }

    /* mb_eval_dense_set of up to five kernels: (kernel, second input, rows, cols, out). */
    struct Entry { int kernel; const double* x; int rows, cols; double* out; };
    void evaluate(const double* q, std::initializer_list<Entry> entries) const {
        int kernel[5], rows[5], cols[5];
        double* x[5];
        double* out[5];
        int count = 0;
        for (const Entry& e : entries) {
            kernel[count] = e.kernel;
            x[count] = const_cast<double*>(e.x);
            rows[count] = e.rows;
            cols[count] = e.cols;
            out[count] = e.out;
            ++count;
        }
        const int status = eval(model, count, kernel, q, x, parameters, rows, cols, out);
        if (status) fail(status, "mbgen C core");
    }

    /* q̈ and, with ``jacobians``, ∂q̈/∂q, ∂q̈/∂q̇ (and ∂q̈/∂Q with ``force_jacobian``). */
    void dynamics(const double* q, const double* qd, const double* Q, bool jacobians,
                  bool force_jacobian) {
        const int status = forward(workspace, q, qd, Q, parameters, qdd.data(), nullptr,
                                   jacobians ? jq.data() : nullptr,
                                   jacobians ? jqd.data() : nullptr,
                                   force_jacobian ? jQ.data() : nullptr);
        if (status) fail(status, "forward dynamics failed");
    }
};

enum Kind {
    POSITION, VELOCITY, FORWARD, INVERSE, INDEPENDENT_POSITION, INDEPENDENT_VELOCITY,
    INDEPENDENT_ACCELERATION, INDEPENDENT_DYNAMICS, OBSERVATION, LINEAR
};

struct Factor {
    std::weak_ptr<gtsam::CustomFactor> alive;  // expired: the factor is gone
    std::shared_ptr<Mechanism> mechanism;
    Kind kind;
    std::vector<gtsam::Key> keys;
    std::vector<double> forces;  // known forces (n) or empty
    std::vector<int> actuated;   // inverse dynamics: the columns of Q = B u, or empty
    int row;                     // observation: the sensor output
    double measured;
    std::vector<Matrix> blocks;  // linear: the residual is Σ blocks[i] x[keys[i]] − rhs
    Vector rhs;
};

/* Never destroyed: its entries hold Python objects, which must not be released after
 * the interpreter has finalized. */
std::unordered_map<const void*, Factor>& registry() {
    static auto* factors = new std::unordered_map<const void*, Factor>();
    return *factors;
}

/* Drops the entries of factors that are gone, when the registry has doubled since the
 * last sweep (so a sweep costs O(1) per registration). */
void sweep() {
    static std::size_t after_last_sweep = 0;
    auto& factors = registry();
    if (factors.size() < 2 * after_last_sweep + 64) return;
    for (auto it = factors.begin(); it != factors.end();)
        it = it->second.alive.expired() ? factors.erase(it) : std::next(it);
    after_last_sweep = factors.size();
}

/* The registered factor and its mechanism (GTSAM linearizes one factor at a time). */
const Factor& factor_of(const gtsam::CustomFactor& factor) {
    const auto found = registry().find(&factor);
    if (found == registry().end())
        throw std::runtime_error(
            "mbgen native factor: no registration (a copy of a factor, or a factor whose "
            "MechanismFactors is gone)");
    return found->second;
}

Mechanism& mechanism_of(const Factor& factor) { return *factor.mechanism; }

/* A variable of the factor (no copy), checked to be a vector of ``size`` entries (the
 * kernels read that many). The type check compares type names, as GTSAM's own
 * Values::at<T> does through dynamic_cast. */
const Vector& value(const gtsam::Values& values, gtsam::Key key, int size) {
    const gtsam::Value& held = values.at(key);
    if (typeid(held) != typeid(gtsam::GenericValue<Vector>))
        throw std::invalid_argument("mbgen native factor: variable " + std::to_string(key) +
                                    " is not a vector");
    const Vector& found = static_cast<const gtsam::GenericValue<Vector>&>(held).value_;
    if (found.size() != size)
        throw std::invalid_argument("mbgen native factor: variable " + std::to_string(key) +
                                    " has " + std::to_string(found.size()) +
                                    " entries, not " + std::to_string(size));
    return found;
}

Eigen::Map<const RowMajor> view(const std::vector<double>& data, int rows, int cols) {
    return Eigen::Map<const RowMajor>(data.data(), rows, cols);
}

/* [block; S] with S the selection q ↦ q[z] (rows below ``block``). */
Matrix stacked_selection(const Mechanism& mech, const std::vector<double>& block) {
    const int m = mech.m, n = mech.n, d = static_cast<int>(mech.z.size());
    Matrix out = Matrix::Zero(m + d, n);
    out.topRows(m) = view(block, m, n);
    for (int i = 0; i < d; ++i) out(m + i, mech.z[i]) = 1.0;
    return out;
}

/* [block; 0] with d zero rows. */
Matrix stacked_zeros(const Mechanism& mech, const std::vector<double>& block) {
    const int m = mech.m, n = mech.n, d = static_cast<int>(mech.z.size());
    Matrix out = Matrix::Zero(m + d, n);
    out.topRows(m) = view(block, m, n);
    return out;
}

/* [top; x[z] − y]: a constraint residual (m) over the selection rows' (d). */
Vector with_selection(const Mechanism& mech, const Vector& top, const Vector& x,
                      const Vector& y) {
    const int m = mech.m, d = mech.dim_z();
    Vector residual(m + d);
    residual.head(m) = top;
    for (int i = 0; i < d; ++i) residual[m + i] = x[mech.z[i]] - y[i];
    return residual;
}

/* [0; -I] (m + d) x d: the residual's derivative in z (or ż, z̈). */
Matrix minus_selected(const Mechanism& mech) {
    const int m = mech.m, d = static_cast<int>(mech.z.size());
    Matrix out = Matrix::Zero(m + d, d);
    out.bottomRows(d) = -Matrix::Identity(d, d);
    return out;
}

Vector position_constraints(const gtsam::CustomFactor& self, const gtsam::Values& values,
                            Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    mech.evaluate(q.data(), {{MB_K_PHI, nullptr, mech.m, 1, mech.phi.data()},
                             {MB_K_PHI_Q, nullptr, mech.m, mech.n, mech.phi_q.data()}});
    if (H) H->get()[0] = view(mech.phi_q, mech.m, mech.n);
    return Eigen::Map<const Vector>(mech.phi.data(), mech.m);
}

/* Φq q̇ into mech.rate (and Φq, ∂(Φq q̇)/∂q into mech.phi_q, mech.rate_q). */
void velocity_terms(Mechanism& mech, const Vector& q, const Vector& qd) {
    mech.evaluate(q.data(), {{MB_K_PHI_Q, nullptr, mech.m, mech.n, mech.phi_q.data()},
                             {MB_K_PHIQ_V_Q, qd.data(), mech.m, mech.n, mech.rate_q.data()}});
    Eigen::Map<Vector>(mech.rate.data(), mech.m).noalias() = view(mech.phi_q, mech.m, mech.n) * qd;
}

Vector velocity_constraints(const gtsam::CustomFactor& self, const gtsam::Values& values,
                            Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    velocity_terms(mech, q, qd);
    if (H) {
        H->get()[0] = view(mech.rate_q, mech.m, mech.n);
        H->get()[1] = view(mech.phi_q, mech.m, mech.n);
    }
    return Eigen::Map<const Vector>(mech.rate.data(), mech.m);
}

Vector forward_dynamics(const gtsam::CustomFactor& self, const gtsam::Values& values,
                        Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    mech.dynamics(q.data(), qd.data(), f.forces.empty() ? nullptr : f.forces.data(),
                  H.has_value(), false);
    if (H) {
        H->get()[0] = view(mech.jq, mech.n, mech.n);
        H->get()[1] = view(mech.jqd, mech.n, mech.n);
        H->get()[2] = -Matrix::Identity(mech.n, mech.n);
    }
    return Eigen::Map<const Vector>(mech.qdd.data(), mech.n) - value(values, f.keys[2], mech.n);
}

Vector inverse_dynamics(const gtsam::CustomFactor& self, const gtsam::Values& values,
                        Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    const int inputs = f.actuated.empty() ? mech.n : static_cast<int>(f.actuated.size());
    const Vector& applied = value(values, f.keys[3], inputs);
    const double* Q = applied.data();
    if (!f.actuated.empty()) {
        std::fill(mech.forces.begin(), mech.forces.end(), 0.0);
        for (std::size_t j = 0; j < f.actuated.size(); ++j) mech.forces[f.actuated[j]] = applied[j];
        Q = mech.forces.data();
    }
    // the Python path evaluates the Jacobians even for an error evaluation: so does this
    mech.dynamics(q.data(), qd.data(), Q, true, true);
    if (H) {
        const int n = mech.n;
        H->get()[0] = view(mech.jq, n, n);
        H->get()[1] = view(mech.jqd, n, n);
        H->get()[2] = -Matrix::Identity(n, n);
        if (f.actuated.empty()) {
            H->get()[3] = view(mech.jQ, n, n);
        } else {
            Matrix columns(n, static_cast<int>(f.actuated.size()));
            for (std::size_t j = 0; j < f.actuated.size(); ++j)
                columns.col(j) = view(mech.jQ, n, n).col(f.actuated[j]);
            H->get()[3] = columns;
        }
    }
    return Eigen::Map<const Vector>(mech.qdd.data(), mech.n) - value(values, f.keys[2], mech.n);
}

Vector independent_position(const gtsam::CustomFactor& self, const gtsam::Values& values,
                            Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& z = value(values, f.keys[1], mech.dim_z());
    mech.evaluate(q.data(), {{MB_K_PHI, nullptr, mech.m, 1, mech.phi.data()},
                             {MB_K_PHI_Q, nullptr, mech.m, mech.n, mech.phi_q.data()}});
    if (H) {
        H->get()[0] = stacked_selection(mech, mech.phi_q);
        H->get()[1] = minus_selected(mech);
    }
    return with_selection(mech, Eigen::Map<const Vector>(mech.phi.data(), mech.m), q, z);
}

Vector independent_velocity(const gtsam::CustomFactor& self, const gtsam::Values& values,
                            Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    const Vector& zd = value(values, f.keys[2], mech.dim_z());
    velocity_terms(mech, q, qd);
    if (H) {
        H->get()[0] = stacked_zeros(mech, mech.rate_q);
        H->get()[1] = stacked_selection(mech, mech.phi_q);
        H->get()[2] = minus_selected(mech);
    }
    return with_selection(mech, Eigen::Map<const Vector>(mech.rate.data(), mech.m), qd, zd);
}

Vector independent_acceleration(const gtsam::CustomFactor& self, const gtsam::Values& values,
                                Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    const Vector& qdd = value(values, f.keys[2], mech.n);
    const Vector& zdd = value(values, f.keys[3], mech.dim_z());
    const int m = mech.m, n = mech.n;
    mech.evaluate(q.data(), {{MB_K_PHI_Q, nullptr, m, n, mech.phi_q.data()},
                             {MB_K_DPHIQ_QD, qd.data(), m, 1, mech.rate.data()},
                             {MB_K_DPHIQ_QD_Q, qd.data(), m, n, mech.acc_q.data()},
                             {MB_K_DPHIQ_QD_QD, qd.data(), m, n, mech.acc_qd.data()},
                             {MB_K_PHIQ_V_Q, qdd.data(), m, n, mech.acc_v_q.data()}});
    const Vector top = Eigen::Map<const Vector>(mech.rate.data(), m)
                       + view(mech.phi_q, m, n) * qdd;
    if (H) {
        for (int i = 0; i < m * n; ++i) mech.acc_q[i] += mech.acc_v_q[i];
        H->get()[0] = stacked_zeros(mech, mech.acc_q);
        H->get()[1] = stacked_zeros(mech, mech.acc_qd);
        H->get()[2] = stacked_selection(mech, mech.phi_q);
        H->get()[3] = minus_selected(mech);
    }
    return with_selection(mech, top, qdd, zdd);
}

Vector independent_dynamics(const gtsam::CustomFactor& self, const gtsam::Values& values,
                            Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    const Vector& zdd = value(values, f.keys[2], mech.dim_z());
    mech.dynamics(q.data(), qd.data(), f.forces.empty() ? nullptr : f.forces.data(),
                  H.has_value(), false);
    const int n = mech.n, d = static_cast<int>(mech.z.size());
    if (H) {
        Matrix jq(d, n), jqd(d, n);
        for (int i = 0; i < d; ++i) {
            jq.row(i) = view(mech.jq, n, n).row(mech.z[i]);
            jqd.row(i) = view(mech.jqd, n, n).row(mech.z[i]);
        }
        H->get()[0] = jq;
        H->get()[1] = jqd;
        H->get()[2] = -Matrix::Identity(d, d);
    }
    Vector residual(d);
    for (int i = 0; i < d; ++i) residual[i] = mech.qdd[mech.z[i]] - zdd[i];
    return residual;
}

Vector observation(const gtsam::CustomFactor& self, const gtsam::Values& values,
                   Jacobians H) {
    const Factor& f = factor_of(self);
    Mechanism& mech = mechanism_of(f);
    const Vector& q = value(values, f.keys[0], mech.n);
    const Vector& qd = value(values, f.keys[1], mech.n);
    const int k = mech.sensors, n = mech.n;
    mech.evaluate(q.data(), {{MB_K_SENSORS, qd.data(), k, 1, mech.h.data()},
                             {MB_K_SENSORS_Q, qd.data(), k, n, mech.h_q.data()},
                             {MB_K_SENSORS_QD, qd.data(), k, n, mech.h_qd.data()}});
    if (H) {
        H->get()[0] = view(mech.h_q, k, n).row(f.row);
        H->get()[1] = view(mech.h_qd, k, n).row(f.row);
    }
    Vector residual(1);
    residual[0] = mech.h[f.row] - f.measured;
    return residual;
}

/* Σ A_i x_i − b: an integrator's or another linear relation's factor, with no Python and
 * no conversion to a Hessian (GTSAM's Python API builds Jacobian factors on at most three
 * variables). Its Jacobians are the blocks themselves. */
Vector linear(const gtsam::CustomFactor& self, const gtsam::Values& values, Jacobians H) {
    const Factor& f = factor_of(self);
    Vector residual = -f.rhs;
    for (std::size_t i = 0; i < f.keys.size(); ++i) {
        const Matrix& block = f.blocks[i];
        residual.noalias() += block * value(values, f.keys[i], static_cast<int>(block.cols()));
        if (H) H->get()[i] = block;
    }
    return residual;
}

/* The shared pointer that holds a gtsam.CustomFactor (checked by the caller): pybind11
 * keeps the instance's holder, GTSAM's std::shared_ptr<CustomFactor>, beside its value;
 * the graphs that hold the factor share it. */
const std::shared_ptr<gtsam::CustomFactor>& holder_of(py::handle factor) {
    auto* instance = reinterpret_cast<py::detail::instance*>(factor.ptr());
    auto held = instance->get_value_and_holder();
    if (!held.holder_constructed()) throw std::invalid_argument("factor is not constructed");
    return held.holder<std::shared_ptr<gtsam::CustomFactor>>();
}

void register_factor(std::shared_ptr<Mechanism> mechanism, py::handle factor, int kind,
                     std::vector<gtsam::Key> keys, std::vector<double> forces,
                     std::vector<int> actuated, int row, double measured) {
    static const std::size_t key_count[] = {1, 2, 3, 4, 2, 3, 4, 3, 2};
    if (kind < POSITION || kind >= LINEAR) throw std::invalid_argument("unknown kind");
    if (keys.size() != key_count[kind]) throw std::invalid_argument("wrong number of keys");
    if (!forces.empty() && forces.size() != static_cast<std::size_t>(mechanism->n))
        throw std::invalid_argument("forces: one per coordinate");
    for (int column : actuated)
        if (column < 0 || column >= mechanism->n)
            throw std::invalid_argument("actuated coordinate out of range");
    if (kind == OBSERVATION && (row < 0 || row >= mechanism->sensors))
        throw std::invalid_argument("sensor row out of range");
    const auto& holder = holder_of(factor);
    sweep();
    registry()[holder.get()] =
        Factor{holder, std::move(mechanism), static_cast<Kind>(kind), std::move(keys),
               std::move(forces), std::move(actuated), row, measured, {}, Vector()};
}

void register_linear(py::handle factor, std::vector<gtsam::Key> keys,
                     std::vector<Matrix> blocks, Vector rhs) {
    if (keys.empty() || blocks.size() != keys.size())
        throw std::invalid_argument("one block per key");
    for (const Matrix& block : blocks)
        if (block.rows() != rhs.size())
            throw std::invalid_argument("every block has as many rows as the residual");
    const auto& holder = holder_of(factor);
    sweep();
    registry()[holder.get()] = Factor{holder, nullptr, LINEAR, std::move(keys), {}, {}, 0, 0.0,
                                      std::move(blocks), std::move(rhs)};
}

}  // namespace

PYBIND11_MODULE(MBGEN_MODULE_NAME, module) {
    module.doc() = "mbgen's factors as native gtsam.CustomFactor error functions";
    py::class_<Mechanism, std::shared_ptr<Mechanism>>(module, "Mechanism")
        .def(py::init<py::object, std::uintptr_t, std::uintptr_t, std::uintptr_t,
                      std::uintptr_t, std::uintptr_t, std::uintptr_t, int, int, int,
                      std::vector<int>>())
        .def("register", &register_factor, py::arg("factor"), py::arg("kind"),
             py::arg("keys"), py::arg("forces"), py::arg("actuated"), py::arg("row"),
             py::arg("measured"));
    module.def("register_linear", &register_linear, py::arg("factor"), py::arg("keys"),
               py::arg("blocks"), py::arg("rhs"));
    module.def("registered", [] { return registry().size(); });
    module.def("linear", &linear);
    module.def("position_constraints", &position_constraints);
    module.def("velocity_constraints", &velocity_constraints);
    module.def("forward_dynamics", &forward_dynamics);
    module.def("inverse_dynamics", &inverse_dynamics);
    module.def("independent_position", &independent_position);
    module.def("independent_velocity", &independent_velocity);
    module.def("independent_acceleration", &independent_acceleration);
    module.def("independent_dynamics", &independent_dynamics);
    module.def("observation", &observation);
    module.attr("KINDS") = py::make_tuple(
        "position_constraints", "velocity_constraints", "forward_dynamics",
        "inverse_dynamics", "independent_position", "independent_velocity",
        "independent_acceleration", "independent_dynamics", "observation");
}
