/* mbgen core: the generic numerics behind every generated mechanism module.
 *
 * A generated module defines one `mb_model` (its kernels and their sparsity, see
 * mb_model.h) and returns it from mb_model_get(); every function below takes that model
 * and works for any mechanism. The text between the cdef markers is also what cffi is
 * built from, and the generated C and the core include this same file, so a prototype
 * that does not match its definition is a compile error.
 *
 * Conventions: arrays are row-major doubles; a batch of `count` states is read with a
 * stride per input (0 broadcasts one vector to every state); outputs are dense and
 * contiguous per state. Functions that loop over states return the number of states that
 * failed (their status[] entry says why) or MB_NO_MEMORY; one bad state never stops the
 * others. Nothing here keeps hidden global state: calls are safe from several threads.
 */
#ifndef MBGEN_H
#define MBGEN_H

#ifdef __cplusplus
extern "C" {
#endif

/* cdef:begin */
typedef struct mb_model mb_model;
typedef struct mb_plan mb_plan;
typedef struct mb_workspace mb_workspace;

/* Status of one state (and return code of whole calls, for MB_NO_MEMORY). */
enum {
    MB_OK = 0,
    MB_SINGULAR_PHIQ = 1,      /* Φq lost rank: dead point, bifurcation, or bad choice of z */
    MB_SINGULAR_MASS = 2,      /* mass matrix singular on the motion subspace */
    MB_NO_CONVERGENCE = 3,     /* Newton did not converge */
    MB_INCONSISTENT = 4,       /* rows redundant at q0 do not hold: over-constrained */
    MB_NOT_FINITE = 5,         /* an input or a result is NaN or infinite */
    MB_BAD_ARGUMENT = 6,       /* sizes or indices that do not fit the model */
    MB_NO_MEMORY = -1
};

/* Kernels every model provides (sensor kernels have no entries without sensors, the
 * coefficient kernels - dry-friction bounds, then actuator gains - none without either). The
 * second vector input `x` is q̇, v, λ or q̈ depending on the kernel (see generated-code.md). */
enum {
    MB_K_PHI, MB_K_PHI_Q, MB_K_PHIQ_V_Q, MB_K_DPHIQ_QD, MB_K_DPHIQ_QD_Q, MB_K_DPHIQ_QD_QD,
    MB_K_PHIQT_LAM_Q, MB_K_MASS, MB_K_MASS_V_Q, MB_K_FORCES, MB_K_FORCES_Q, MB_K_FORCES_QD,
    MB_K_ENERGY, MB_K_PHI_P, MB_K_MASS_P, MB_K_FORCES_P, MB_K_MASS_V_P, MB_K_PHIQT_LAM_P,
    MB_K_PHIQ_V_P, MB_K_DPHIQ_QD_P, MB_K_SENSORS, MB_K_SENSORS_Q, MB_K_SENSORS_QD,
    MB_K_SENSORS_P, MB_K_COEFFICIENTS, MB_K_COEFFICIENTS_P, MB_K_ACCELEROMETERS,
    MB_K_ACCELEROMETERS_Q, MB_K_ACCELEROMETERS_QDD, MB_K_ACCELEROMETERS_P,
    MB_K_REDUCED_CONSTANTS, MB_K_REDUCED_TERMS, MB_K_REDUCED_BASIS, MB_K_REDUCED_BASIS_Q,
    MB_K_REDUCED_ACCELERATIONS,
    MB_KERNEL_COUNT
};

/* Linear-algebra path of the dynamics and kinematics: AUTO takes the unrolled KKT code
 * where the module has it, else SPARSE from a few coordinates on, else DENSE; UNROLLED
 * falls back to SPARSE where there is none; SPARSE never takes the unrolled code. */
enum { MB_METHOD_AUTO = 0, MB_METHOD_DENSE = 1, MB_METHOD_SPARSE = 2, MB_METHOD_UNROLLED = 3 };

/* Integrators and projections of mb_simulate (semi-implicit Euler: q̇ first, then q with
 * the new q̇). */
enum { MB_EULER = 0, MB_RK4 = 1, MB_TRAPEZOIDAL = 2, MB_SEMI_IMPLICIT_EULER = 3 };
enum { MB_PROJECT_NONE = 0, MB_PROJECT_MANIFOLD = 1, MB_PROJECT_ENERGY = 2 };

typedef struct {
    double pivot_tol;   /* relative pivot under which Φq counts as rank-deficient */
    double mass_tol;    /* relative pivot under which the reduced mass counts as singular */
    double newton_tol;  /* position-problem tolerance on max |Φ| inside the integrators, in
                           the file's length unit squared (mb_model_options: 1e-12 size²) */
    int max_iter;       /* Newton iteration limit inside the integrators */
    double alpha;       /* Baumgarte stabilization: c -= 2 alpha Φq q̇ + beta² Φ */
    double beta;
    int method;         /* MB_METHOD_* */
    int refine;         /* iterative-refinement steps of the sparse solves */
} mb_options;

/* The defaults for a mechanism 1 m across; mb_model_options scales the tolerance on Φ
 * with the model's size (results then do not depend on the unit of length). */
void mb_default_options(mb_options* options);
void mb_model_options(const mb_model* model, mb_options* options);
double mb_length_scale(const mb_model* model);  /* the mechanism's size, in its unit */
const char* mb_status_text(int status);
const mb_model* mb_model_get(void);
int mb_model_size(const mb_model* model, int what);  /* 0 n, 1 m, 2 parameters */
int mb_kernel_nnz(const mb_model* model, int kernel);

/* The constraint rows used by the dynamics (independent at q0) and the factorization
 * structure chosen for them; NULL when out of memory or a row index is out of range. */
mb_plan* mb_plan_new(const mb_model* model, const int* rows, int nrows);
void mb_plan_free(mb_plan* plan);
int mb_plan_uses_sparse(const mb_plan* plan, const mb_options* options);
/* The dynamics' KKT system runs on the module's unrolled code (mb_model.h). */
int mb_plan_uses_unrolled(const mb_plan* plan, const mb_options* options);
int mb_plan_factor_size(const mb_plan* plan);  /* nonzeros of the sparse L factor */

/* Sparse values (count x nnz) of one kernel. */
int mb_eval(const mb_model* model, int kernel, long count, const double* q, long q_stride,
    const double* x, long x_stride, const double* p, long p_stride, double* out);

/* The same as dense arrays (count x rows x cols; cols = 1 for vectors), zeros included. */
int mb_eval_dense(const mb_model* model, int kernel, long count, const double* q,
    long q_stride, const double* x, long x_stride, const double* p, long p_stride, int rows,
    int cols, double* out);

/* Several kernels at one state in one call, each as a dense array (what a factor needs at
 * once: Φ with Φq, a sensor model with its Jacobians): kernel[k], whose second input is
 * x[k] (NULL when it takes none), into out[k] of rows[k] x cols[k]. */
int mb_eval_dense_set(const mb_model* model, int count, const int* kernel, const double* q,
    double** x, const double* p, const int* rows, const int* cols, double** out);

/* q̈ (n), λ (m, zero on rows outside the plan) and optionally the exact Jacobians
 * ∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂Q (n x n each). Any output pointer may be NULL. */
int mb_forward_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, double* qdd, double* lam, double* Jq,
    double* Jqd, double* JQ, int* status);

/* The same for one state, in a workspace made once and reused (what a factor callback or
 * an outside integrator calls): no allocation per call. Returns the state's status. A
 * workspace belongs to one thread; `jacobians` reserves the memory Jq, Jqd, JQ need. The
 * workspace keeps `options` by pointer: it must outlive the workspace. */
mb_workspace* mb_workspace_new(const mb_plan* plan, const mb_options* options,
    int jacobians);
void mb_workspace_free(mb_workspace* workspace);
int mb_forward_dynamics_one(mb_workspace* workspace, const double* q, const double* qd,
    const double* Qext, const double* p, double* qdd, double* lam, double* Jq,
    double* Jqd, double* JQ);

/* mb_forward_dynamics and mb_independent_dynamics in a workspace of mb_workspace_new(plan,
 * options, 1) that the caller keeps between calls (one per thread: what the Python
 * bindings do), so a call allocates nothing after the workspace's first (which makes the
 * lanes' scratch it keeps); the same results. A workspace without Jacobian memory asked
 * for Jacobians gives every state MB_BAD_ARGUMENT. */
int mb_forward_dynamics_in(mb_workspace* workspace, long count, const double* q,
    long q_stride, const double* qd, long qd_stride, const double* Qext, long Q_stride,
    const double* p, long p_stride, double* qdd, double* lam, double* Jq, double* Jqd,
    double* JQ, int* status);
int mb_independent_dynamics_in(mb_workspace* workspace, long count, const double* q,
    long q_stride, const double* qd, long qd_stride, const double* Qext, long Q_stride,
    const double* p, long p_stride, const int* zfix, int nz, double* zdd, double* Jz,
    double* Jzd, double* JzQ, int* status);

/* ∂q̈/∂p (count x n x np) at (q, q̇, Q): the implicit derivative of the dynamics with
 * respect to the model parameters at fixed state (lengths, masses, inertias, centre-of-mass
 * offsets, gravity, force values: anything the YAML makes a parameter). */
int mb_forward_dynamics_params(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, double* Jp, int* status);

/* Independent coordinates z (nz indices, chosen by full pivoting per state when nz = 0):
 * their indices `ind` (d), R = ∂q/∂z (n x d) and S c (n) with c = -Φ̇q q̇ (qd may be NULL). */
int mb_partition(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* p, long p_stride, const int* zfix, int nz,
    int* ind, double* R, double* Sc, const double* qd, long qd_stride, int* status);

/* Newton on Φ(q) = 0 in place from each state's guess (which keeps its assembly branch):
 * the coordinates zfix keep their values, or (minimum_norm) q moves the least. */
int mb_solve_position(const mb_plan* plan, const mb_options* options, long count, double* q,
    const double* p, long p_stride, const int* zfix, int nz, int minimum_norm, double tol,
    int max_iter, int* status);

/* Velocities in place: Φq q̇ = 0 keeping q̇[zfix], or the nearest admissible q̇. */
int mb_solve_velocity(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, double* qd, const double* p, long p_stride,
    const int* zfix, int nz, int minimum_norm, int* status);

/* Accelerations q̈ (n) with q̈[zfix] = z̈ and Φq q̈ = c. */
int mb_solve_acceleration(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* zdd,
    long zdd_stride, const double* p, long p_stride, const int* zfix, int nz, double* qdd,
    int* status);

/* Dynamics in independent coordinates at consistent states: z̈ (d) and ∂z̈/∂z, ∂z̈/∂ż
 * (d x d) and ∂z̈/∂Q (d x n), moving along the constraint manifold. */
int mb_independent_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, const int* zfix, int nz, double* zdd,
    double* Jz, double* Jzd, double* JzQ, int* status);

/* Inverse dynamics at given (q, q̇, q̈): the forces u (na) on the actuated coordinates
 * act[] (as many as the degrees of freedom) and λ (m), from B u − Φqᵀ λ = M q̈ − Q;
 * optionally ∂u/∂q, ∂u/∂q̇, ∂u/∂q̈ (na x n each). Actuated coordinates that cannot serve
 * as independent coordinates: MB_SINGULAR_PHIQ. */
int mb_inverse_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* qdd,
    long qdd_stride, const double* p, long p_stride, const int* act, int na, double* u,
    double* lam, double* Jq, double* Jqd, double* Jqdd, int* status);

/* Positions along a path: sample s (count x n, in place) gets q[zfix] = zval[s] and the
 * rest by Newton from the extrapolation of the samples solved before it (sample 0: from
 * its own values), so the whole path stays on one assembly branch. */
int mb_solve_position_path(const mb_plan* plan, const mb_options* options, long count,
    double* q, const double* zval, const double* p, const int* zfix, int nz, double tol,
    int max_iter, int* status);

/* The max |Φ| at which the integrators' manifold projection (mb_simulate, mb_sweep)
 * stops: a tenth of options->newton_tol, since it runs at every step and its error
 * accumulates where a position solve's does not. It gets there within options->max_iter
 * iterations or the step fails with MB_NO_CONVERGENCE. */
double mb_projection_tol(const mb_options* options);

/* Fixed-step simulation from (q0, q̇0): nsteps steps of dt, writing nsteps + 1 states.
 * Qtable (optional): external forces at every half step, (2 nsteps + 1) x n. Returns the
 * status of the step that failed (its index in *failed_step), MB_OK otherwise. */
int mb_simulate(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const int* zfix, int nz, int method,
    int independent, int project, double dt, long nsteps, const double* Qtable,
    double* out_q, double* out_qd, double* out_qdd, long* failed_step);

/* mb_simulate in pieces: a stepper holds a run's integrator (its state from (q0, q̇0), the
 * settings as for mb_simulate, p, zfix and options read where they are, so they must
 * outlive it) and each mb_stepper_run takes nsteps more steps of dt from where the last
 * one ended, writing nsteps + 1 states (the first: where it starts). Runs in pieces
 * give the numbers of one run; a piece whose first force differs from the last one's
 * final force starts by evaluating q̈ with it. After a failed run the stepper is at the
 * failed step: free it. mb_stepper_new returns MB_NO_MEMORY or MB_BAD_ARGUMENT (nz). */
typedef struct mb_stepper mb_stepper;
int mb_stepper_new(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const int* zfix, int nz, int method,
    int independent, int project, mb_stepper** out);
int mb_stepper_run(mb_stepper* stepper, double dt, long nsteps, const double* Qtable,
    double* out_q, double* out_qd, double* out_qdd, long* failed_step);
void mb_stepper_free(mb_stepper* stepper);

/* A particle filter's prediction (particles.c): each of `count` consistent states (q, q̇
 * in place, count x n each) moves one step of dt by `method` (MB_RK4, MB_EULER or
 * MB_SEMI_IMPLICIT_EULER) with the acceleration noise noise[s] (count x d) on its
 * independent coordinates z, chosen per state by full pivoting at the step's start; then
 * q and q̇ move by dq, dqd (count x n each, NULL for none) taken along the constraints
 * (z by (RᵀR)⁻¹Rᵀ dq, R = ∂q/∂z), and the dependent coordinates follow from Φ = 0 and
 * Φq q̇ = 0 at the new z, ż. A state that fails keeps its old values. */
int mb_predict_particles(const mb_plan* plan, const mb_options* options, long count,
    double* q, double* qd, const double* noise, const double* dq, const double* dqd,
    const double* p, int method, double dt, int* status);

/* Whether mb_predict_particles integrates MB_LANES (8) states at once in the module's lane
 * functions (mechanisms small enough for a one-piece unrolled KKT, no stabilization):
 * the same states, bit for bit, in less time. */
int mb_predict_uses_lanes(const mb_plan* plan, const mb_options* options);

/* A sweep's runs (sweep.c): `count` runs, each with its own parameters p (count x np),
 * constant generalized force Qext (count x n, NULL: none) and state q, q̇ (count x n each,
 * in place: the start, then the end), advance by `steps` steps of dt as mb_simulate would
 * (method, independent, project as there; not MB_PROJECT_ENERGY in lanes). out_q, out_qd
 * (count x steps x n, NULL allowed) receive the state after every step, NaN where a run
 * has none. A run whose status is not MB_OK is skipped; one that fails gets its status
 * and, in failed_step (-1 on entry), the steps of this call it took (its state stays the
 * last good one). Returns MB_OK or MB_NO_MEMORY. */
int mb_sweep(const mb_plan* plan, const mb_options* options, long count, double* q,
    double* qd, const double* p, const double* Qext, int method, int independent,
    int project, double dt, long steps, double* out_q, double* out_qd, int* status,
    long* failed_step);

/* Whether mb_sweep steps blocks of MB_LANES (8) runs at once for these settings (the
 * explicit integrators in dependent coordinates, on a module with lane functions). */
int mb_sweep_uses_lanes(const mb_plan* plan, const mb_options* options, int method,
                        int independent, int project);

/* Weighted quantiles of each column of values (count x columns, row-major) with weights
 * (count; zero or non-finite weights and non-finite values are left out): for every level in
 * levels (nlevels, in [0, 1]) the smallest value whose cumulative weight in ascending
 * order reaches level x the total, into out (nlevels x columns; NaN for a column with no
 * weight). O(count) per column and level. */
int mb_weighted_quantiles(long count, int columns, const double* values,
                          const double* weights, int nlevels, const double* levels,
                          double* out);

/* Variational integrator (trapezoidal discrete Lagrangian, constraints by multipliers at
 * every step, RATTLE-type; see variational.c) from a consistent (q0, q̇0): nsteps steps of
 * dt (negative: backwards). Root finding by Newton with the exact Jacobian (newton = 1)
 * or by the quasi-Newton update with the step's KKT matrix (newton = 0); options->method
 * picks the sparse O(n) or the dense path, options->newton_tol bounds the last position
 * correction and options->max_iter the iterations. order 2: one step per dt; order 4:
 * Yoshida's symmetric composition of three (still variational, 3x the work). Qtable as
 * for mb_simulate (interpolated by cubics between its half steps for order 4). out_qdd
 * (accelerations of the dynamics at each state) and iterations (per step, all stages)
 * may be NULL. Returns the status of the step that failed (its index in *failed_step). */
int mb_simulate_variational(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, int newton, int order, double dt, long nsteps,
    const double* Qtable, double* out_q, double* out_qd, double* out_qdd, int* iterations,
    long* failed_step);

/* SPOOK, the regularized stepper (see variational.c): per active row a compliance ε ≥ 0
 * (constraints act as springs of stiffness 1/ε; 0: stiff) and a damping time τ ≥ 0 [s];
 * one KKT solve per step, semi-implicit. Dry friction (nf <= 12 elements: coordinate,
 * bound c >= 0 of the force, stiction rate s > 0) is solved exactly per step as a
 * friction impulse d = -dt c sat(q̇⁺/s) on its coordinate, replacing the smoothed
 * -c tanh(q̇/s) that the forces kernel carries. out_lam (nsteps + 1) x r, NULL allowed:
 * the constraint forces of each step (mbgen's sign, M q̈ + Φqᵀ λ = Q; last row 0). */
int mb_simulate_spook(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const double* compliance, const double* damping,
    int nf, const int* friction_index, const double* friction_bound,
    const double* stiction, double dt, long nsteps, const double* Qtable, double* out_q,
    double* out_qd, double* out_qdd, double* out_lam, long* failed_step);

/* Residual (n + r) of one variational step at the unknowns (v, Λ): the mean velocity
 * v = (q1 - q0)/h and the constraint impulses Λ on the plan's rows; optionally its
 * Jacobian ((n + r) x (n + r)), the matrix of the Newton iteration. */
int mb_variational_residual(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* Qext, const double* p, double h, const double* v,
    const double* impulse, double* residual, double* jacobian);
/* The band of A⁻¹ (S[d + i (b + 1)] = A⁻¹(i + d, i), d ≤ b) for A = L Lᵀ banded, from L in
 * LAPACK's lower band storage (ab[d + i ld] = L(i + d, i)); see dense.c. */
void mb_banded_inverse(int n, int b, const double* ab, int ld, double* S);
/* The errorEKF in independent coordinates over a readings file (kalman.c; reference:
 * mbgen/estimation/kalman.py): state (z, ż, f) of size s = 2d + nf, f the generalized
 * forces at coordinates forces[nf] (a random walk of σf² dt per step), z = zfix (d, in
 * place: the choice at the end). From the consistent q, q̇ (n each), force (nf) and P
 * (s x s), all in place, for each of `steps` steps of dt: RK4 of (z, ż) with the exact
 * transition (none before step 0), then the update with its row of readings (steps x
 * (ns + na): sensors, accelerometers; NaN: none) and noises noise_s, noise_a. Writes each
 * step's q, q̇, q̈ and σ of q, q̇ (steps x n each), f and its σ (steps x nf), the normalized
 * innovation squared (NaN: no reading) and lost (nis > lost_limit x readings). z is chosen
 * again where max |∂q/∂z| exceeds `reselect` times full pivoting's (switches: how often).
 * Stops at a step that fails (its status returned, *done: the steps written). */
int mb_kalman_run(const mb_plan* plan, const mb_options* options, const double* p, int nf,
    const int* forces, int* zfix, double* q, double* qd, double* force, double* P,
    double sigma_a, double sigma_f, int ns, const double* noise_s, int na,
    const double* noise_a, double dt, double lost_limit, double reselect, long steps,
    const double* readings, double* out_q, double* out_qd, double* out_qdd, double* out_sq,
    double* out_sqd, double* out_f, double* out_sf, double* out_nis, int* out_lost,
    int* switches, long* done);
/* The UKF on the same state, arguments and outputs (kalman.c; reference:
 * mbgen/estimation/ukf.py): the scaled unscented transform's alpha, beta, kappa; sigma
 * points of (x, ε) carried through RK4, of (x̄, P) read by the sensors, each assembled on
 * the branch. */
int mb_ukf_run(double alpha, double beta, double kappa, const mb_plan* plan,
    const mb_options* options, const double* p, int nf, const int* forces, int* zfix,
    double* q, double* qd, double* force, double* P, double sigma_a, double sigma_f, int ns,
    const double* noise_s, int na, const double* noise_a, double dt, double lost_limit,
    double reselect, long steps, const double* readings, double* out_q, double* out_qd,
    double* out_qdd, double* out_sq, double* out_sqd, double* out_f, double* out_sf,
    double* out_nis, int* out_lost, int* switches, long* done);
/* cdef:end */

#ifdef __cplusplus
}
#endif

#endif
