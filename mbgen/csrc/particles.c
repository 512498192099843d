/* The prediction step of a particle filter: every particle moved over one step in one call.
 *
 * A particle is a state on the constraint manifold, carried as its independent coordinates
 * and velocities (z, ż) with the configuration q as the position problem's guess, which
 * keeps it on its assembly branch. z is chosen per particle at the start of the step by
 * full pivoting on Φq (the paper's Matrix-R method, refs. in particle_filter.py), the
 * acceleration noise acts on z̈, and after the step the dependent coordinates follow from
 * the position and velocity problems at the new (z, ż). The stages of the explicit
 * integrators evaluate the dependent-coordinate dynamics (the module's fastest q̈, the
 * noise entering as the force M R ε, R = ∂q/∂z), so no stage needs its own position
 * problem. */
#include <stdlib.h>

#include "core.h"

static void add_scaled(double* restrict x, const double* restrict v, double h, int n)
{
    for (int i = 0; i < n; ++i) x[i] += h * v[i];
}

/* The generalized force f = M R ε (n) that gives z̈ the noise ε (d) at q: the dynamics
 * keep Φq q̈ = c under it at every stage, so the noise cannot pull the state off the
 * constraints, and (RᵀMR)⁻¹ Rᵀ f = ε. mass: the mass kernel's values; Re: n doubles. */
static void noise_force(const mb_model* model, const double* R, int d, const double* noise,
                        const double* q, const double* p, double* mass, double* f,
                        double* Re)
{
    const int n = model->n;
    const mb_kernel* k = &model->kernel[MB_K_MASS];
    for (int i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int j = 0; j < d; ++j) sum += R[i * d + j] * noise[j];
        Re[i] = sum;
    }
    mb_eval_one(model, MB_K_MASS, q, NULL, p, mass);
    mb_zero(f, n);
    for (int e = 0; e < k->nnz; ++e) f[k->row[e]] += mass[e] * Re[k->col[e]];
}

/* One step of dt from (q, q̇) under the extra force e (n) to (x1, v1), before the
 * projection; scratch: 5 n. */
static int integrate(mb_ws* w, int method, const double* q, const double* qd,
                     const double* p, const double* e, double dt, double* x1, double* v1,
                     double* scratch)
{
    const int n = w->n;
    double *kv = scratch, *kx = kv + n, *xs = kx + n, *sx = xs + n, *sv = sx + n;
    int st = mb_dynamics_one(w, q, qd, e, p, kv, NULL, 0);
    if (st) return st;
    mb_copy(x1, q, n);
    mb_copy(v1, qd, n);
    if (method != MB_RK4) {  /* explicit or semi-implicit Euler */
        add_scaled(v1, kv, dt, n);
        add_scaled(x1, method == MB_EULER ? qd : v1, dt, n);
        return MB_OK;
    }
    /* RK4 of (q, q̇): stage k moves from the start by c_k dt times the last stage's
     * slopes (kx, kv); the weighted sums of the slopes gather in sx, sv */
    static const double c[3] = {0.5, 0.5, 1.0}, weight[3] = {2.0, 2.0, 1.0};
    mb_copy(kx, qd, n);
    mb_copy(sx, qd, n);
    mb_copy(sv, kv, n);
    for (int k = 0; k < 3; ++k) {
        for (int i = 0; i < n; ++i) {
            xs[i] = q[i] + c[k] * dt * kx[i];
            kx[i] = qd[i] + c[k] * dt * kv[i];
        }
        st = mb_dynamics_one(w, xs, kx, e, p, kv, NULL, 0);
        if (st) return st;
        add_scaled(sx, kx, weight[k], n);
        add_scaled(sv, kv, weight[k], n);
    }
    add_scaled(x1, sx, dt / 6.0, n);
    add_scaled(v1, sv, dt / 6.0, n);
    return MB_OK;
}

/* x += R δz and v += R δż with δz = (RᵀR)⁻¹ Rᵀ δ, δż = (RᵀR)⁻¹ Rᵀ δv: moves δ, δv (n each,
 * NULL for none) of a state in dependent coordinates taken along the constraint manifold
 * (their least-squares part in the tangent space; the rest would only be undone by the
 * projection, or throw the guess off its branch). gram: d x d + 2 d doubles, piv: d ints. */
static int tangent_moves(const double* R, int n, int d, const double* delta,
                         const double* delta_v, double* x, double* v, double* gram, int* piv)
{
    double* dz = gram + d * d;  /* δz, then δż */
    for (int a = 0; a < d; ++a) {
        double rz = 0.0, rv = 0.0;
        for (int i = 0; i < n; ++i) {
            if (delta) rz += R[i * d + a] * delta[i];
            if (delta_v) rv += R[i * d + a] * delta_v[i];
        }
        dz[a] = rz;
        dz[d + a] = rv;
        for (int b = 0; b < d; ++b) {
            double sum = 0.0;
            for (int i = 0; i < n; ++i) sum += R[i * d + a] * R[i * d + b];
            gram[a * d + b] = sum;
        }
    }
    const int st = mb_lu_factor(gram, d, piv, 1e-300);
    if (st) return st;
    mb_lu_solve(gram, d, piv, dz, 1);
    mb_lu_solve(gram, d, piv, dz + d, 1);
    for (int i = 0; i < n; ++i)
        for (int a = 0; a < d; ++a) {
            x[i] += R[i * d + a] * dz[a];
            v[i] += R[i * d + a] * dz[d + a];
        }
    return MB_OK;
}

enum { CHORD_STEPS = 8 };

/* Back onto Φ = 0 and Φq q̇ = 0 keeping z and ż (x, v in place), by Newton steps with the
 * dependent block of Φq that wk factored at the step's start: one step moves the state
 * little, so these chord steps converge in one or two where exact Newton would factor
 * again for each. A state they leave outside the tolerances goes to the exact solvers. */
static int project(mb_ws* wk, double* x, double* v, const double* p, const int* ind,
                   double tol, int max_iter)
{
    const int r = wk->r, n = wk->n;
    const mb_kernel* k = &wk->model->kernel[MB_K_PHI_Q];
    const int* rowpos = wk->plan->rowpos;
    double *ph = wk->kv[MB_K_PHI], *a = wk->kv[MB_K_PHI_Q];
    double *b = wk->residual, *scale = wk->tmp_n2, *delta = wk->Sc;
    int placed = 0, moving = 0;
    for (int it = 0; it < CHORD_STEPS && !placed; ++it) {
        mb_eval_one(wk->model, MB_K_PHI, x, NULL, p, ph);
        double err = 0.0;
        for (int i = 0; i < r; ++i) {
            b[i] = ph[wk->plan->rows[i]];
            if (fabs(b[i]) > err) err = fabs(b[i]);
        }
        if (!(err <= tol)) {
            mb_dense_solve_S(wk, b, delta);
            for (int i = 0; i < n; ++i) x[i] -= delta[i];
        }
        placed = err <= tol;
    }
    /* velocities: the residual Φq q̇ against the size of its terms */
    for (int it = 0; it < CHORD_STEPS && placed && !moving; ++it) {
        mb_eval_one(wk->model, MB_K_PHI_Q, x, NULL, p, a);
        mb_zero(b, r);
        mb_zero(scale, r);
        for (int e = 0; e < k->nnz; ++e) {
            const int i = rowpos[k->row[e]];
            if (i < 0) continue;
            b[i] += a[e] * v[k->col[e]];
            scale[i] += fabs(a[e] * v[k->col[e]]);
        }
        moving = 1;
        for (int i = 0; i < r; ++i) moving &= fabs(b[i]) <= 1e-14 * scale[i] + 1e-300;
        if (!moving) {
            mb_dense_solve_S(wk, b, delta);
            for (int i = 0; i < n; ++i) v[i] -= delta[i];
        }
    }
    if (placed && moving) return MB_OK;
    const int st = mb_position_one(wk, x, p, ind, wk->d, 0, tol, max_iter);
    return st ? st : mb_velocity_one(wk, x, v, p, ind, wk->d, 0);
}

int mb_predict_particles(const mb_plan* plan, const mb_options* options, long count,
    double* q, double* qd, const double* noise, const double* dq, const double* dqd,
    const double* p, int method, double dt, int* status)
{
    const mb_model* model = plan->model;
    const int n = model->n, d = plan->d;
    if (method != MB_EULER && method != MB_SEMI_IMPLICIT_EULER && method != MB_RK4)
        return MB_BAD_ARGUMENT;
    mb_ws* w = mb_ws_new(plan, options, 0);
    mb_ws* wk = mb_ws_new(plan, options, 0);
    const size_t mass_nnz = (size_t)model->kernel[MB_K_MASS].nnz;
    double* scratch = (double*)malloc(sizeof(double) * (9 * (size_t)n + mass_nnz
                                                        + (size_t)d * (d + 2) + 1));
    int* ind = (int*)malloc(sizeof(int) * (2 * (size_t)d + 1));  /* ind, then pivots */
    int failed = 0;
    if (!w || !wk || !scratch || !ind) {
        mb_ws_free(w); mb_ws_free(wk); free(scratch); free(ind);
        return MB_NO_MEMORY;
    }
    double *x1 = scratch, *v1 = x1 + n, *e = v1 + n, *work = e + 2 * n;
    double* mass = work + 5 * n;
    double* gram = mass + mass_nnz;
    int* piv = ind + d;
    for (long s = 0; s < count; ++s) {
        double* qs = q + s * n;
        double* vs = qd + s * n;
        int st = mb_all_finite(qs, n) && mb_all_finite(vs, n) ? MB_OK : MB_NOT_FINITE;
        if (!st) st = mb_choose_z(wk, qs, p, ind);  /* also R = ∂q/∂z into wk->R */
        if (!st) {
            noise_force(model, wk->R, d, noise + s * d, qs, p, mass, e, e + n);
            st = integrate(w, method, qs, vs, p, e, dt, x1, v1, work);
        }
        if (!st) {
            if (dq || dqd)
                st = tangent_moves(wk->R, n, d, dq ? dq + s * n : NULL,
                                   dqd ? dqd + s * n : NULL, x1, v1, gram, piv);
            if (!st) st = project(wk, x1, v1, p, ind, options->newton_tol, options->max_iter);
        }
        if (!st && !(mb_all_finite(x1, n) && mb_all_finite(v1, n))) st = MB_NOT_FINITE;
        if (!st) {
            mb_copy(qs, x1, n);
            mb_copy(vs, v1, n);
        }
        status[s] = st;
        failed += st != MB_OK;
    }
    mb_ws_free(w);
    mb_ws_free(wk);
    free(scratch);
    free(ind);
    return failed;
}
