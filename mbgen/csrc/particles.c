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
 * problem.
 *
 * Blocks of MB_LANES particles go through each phase side by side, their arrays
 * [entry][lane], in the module's lane functions (mbgen/codegen/lanes.py) and the core's
 * lane loops (lanes.c and below), which the C compiler puts in SIMD registers: each lane
 * computes what the one-particle code computes for it, bit for bit, and a lane whose
 * state fails a check is done again alone for its status. */
#include <stdlib.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

/* The generalized force f = M R ε that gives z̈ the noise ε (d) at q: the dynamics keep
 * Φq q̈ = c under it at every stage, so the noise cannot pull the state off the
 * constraints, and (RᵀMR)⁻¹ Rᵀ f = ε. noise_direction makes Re (n) = R ε, mass_apply
 * f = M Re. */
static void noise_direction(const double* R, int n, int d, const double* noise, double* Re)
{
    for (int i = 0; i < n; ++i) {
        double sum = 0.0;
        for (int j = 0; j < d; ++j) sum += R[i * d + j] * noise[j];
        Re[i] = sum;
    }
}

/* f = M x for `lanes` states side by side (f, x: [n][lanes]; mass: the mass kernel's
 * values, [entry][lanes]), summed in the kernel's entry order whatever the lanes. */
static void mass_apply(const mb_kernel* k, int n, int lanes, const double* mass,
                       const double* x, double* f)
{
    mb_zero(f, (long)n * lanes);
    for (int e = 0; e < k->nnz; ++e) {
        double* fe = f + k->row[e] * lanes;
        const double *me = mass + e * lanes, *xe = x + k->col[e] * lanes;
        for (int l = 0; l < lanes; ++l) fe[l] += me[l] * xe[l];
    }
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
        mb_add_scaled(v1, kv, dt, n);
        mb_add_scaled(x1, method == MB_EULER ? qd : v1, dt, n);
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
        mb_add_scaled(sx, kx, weight[k], n);
        mb_add_scaled(sv, kv, weight[k], n);
    }
    mb_add_scaled(x1, sx, dt / 6.0, n);
    mb_add_scaled(v1, sv, dt / 6.0, n);
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

/* Back onto Φ = 0 and Φq q̇ = 0 keeping z and ż (x, v in place) by the exact solvers, for a
 * state the chord steps left outside the tolerances. */
static int exact(mb_ws* wk, double* x, double* v, const double* p, const int* ind,
                 double tol, int max_iter)
{
    const int st = mb_position_one(wk, x, p, ind, wk->d, 0, tol, max_iter);
    return st ? st : mb_velocity_one(wk, x, v, p, ind, wk->d, 0);
}

/* Back onto Φ = 0 and Φq q̇ = 0 keeping z and ż (x, v in place), by Newton steps with the
 * dependent block of Φq that wk factored at the step's start: one step moves the state
 * little, so these chord steps converge in one or two where exact Newton would factor
 * again for each. A state they leave outside the tolerances goes to the exact solvers. */
static int project(mb_ws* wk, double* x, double* v, const double* p, const int* ind,
                   double tol, int max_iter)
{
    const int r = wk->r, n = wk->n;
    double *ph = wk->kv[MB_K_PHI], *b = wk->residual, *delta = wk->Sc;
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
    /* velocities: the residual Φq q̇ against the size of its terms, Φq at x dense once
     * (row by row, each sum stays in a register) */
    if (placed) {
        mb_eval_one(wk->model, MB_K_PHI_Q, x, NULL, p, wk->kv[MB_K_PHI_Q]);
        mb_dense_build_A(wk);
    }
    for (int it = 0; it < CHORD_STEPS && placed && !moving; ++it) {
        moving = 1;
        for (int i = 0; i < r; ++i) {
            const double* row = wk->A + i * n;
            double sum = 0.0, size = 0.0;
            for (int j = 0; j < n; ++j) {
                sum += row[j] * v[j];
                size += fabs(row[j] * v[j]);
            }
            b[i] = sum;
            moving &= fabs(sum) <= 1e-14 * size + 1e-300;
        }
        if (!moving) {
            mb_dense_solve_S(wk, b, delta);
            for (int i = 0; i < n; ++i) v[i] -= delta[i];
        }
    }
    return placed && moving ? MB_OK : exact(wk, x, v, p, ind, tol, max_iter);
}

/* Everything one call shares: the inputs, the dynamics' workspace, and per lane the
 * workspace that holds its particle's choice of z and factors for the projection. */
typedef struct {
    const mb_model* model;
    const mb_options* options;
    double *q, *qd;
    const double *noise, *dq, *dqd, *p;
    int method, n, d;
    int integrate_lanes;   /* blocks integrate in lanes (else each particle alone) */
    double dt;
    mb_ws* w;
    mb_ws* wk[MB_LANES];
    int* ind;              /* d per lane, then d pivots */
    double *mass, *gram, *work, *Re;
} predictor;

/* Particle s (lane l) up to the integration: finite, z chosen (R into wk[l]), and the
 * noise force e (n). */
static int start(predictor* P, int l, long s, double* e)
{
    const int n = P->n, d = P->d;
    const double *qs = P->q + s * n, *vs = P->qd + s * n;
    int st = mb_all_finite(qs, n) && mb_all_finite(vs, n) ? MB_OK : MB_NOT_FINITE;
    if (!st) st = mb_choose_z(P->wk[l], qs, P->p, P->ind + l * d);  /* R = ∂q/∂z */
    if (!st) {
        noise_direction(P->wk[l]->R, n, d, P->noise + s * d, P->Re);
        mb_eval_one(P->model, MB_K_MASS, qs, NULL, P->p, P->mass);
        mass_apply(&P->model->kernel[MB_K_MASS], n, 1, P->mass, P->Re, e);
    }
    return st;
}

/* Particle s's new state (x1, v1), when finite. */
static int store(predictor* P, long s, const double* x1, const double* v1)
{
    const int n = P->n;
    if (!(mb_all_finite(x1, n) && mb_all_finite(v1, n))) return MB_NOT_FINITE;
    mb_copy(P->q + s * n, x1, n);
    mb_copy(P->qd + s * n, v1, n);
    return MB_OK;
}

/* The kernel's moves of particle s (lane l) on its integrated (x1, v1) (n each). */
static int jitter(predictor* P, int l, long s, double* x1, double* v1)
{
    const int n = P->n, d = P->d;
    if (!P->dq && !P->dqd) return MB_OK;
    return tangent_moves(P->wk[l]->R, n, d, P->dq ? P->dq + s * n : NULL,
                         P->dqd ? P->dqd + s * n : NULL, x1, v1, P->gram,
                         P->ind + MB_LANES * d);
}

/* Particle s (lane l) from the integrated (x1, v1) (n each, overwritten): the kernel's
 * moves, the projection, and its new state stored when all went well. */
static int finish(predictor* P, int l, long s, double* x1, double* v1)
{
    int st = jitter(P, l, s, x1, v1);
    if (!st) st = project(P->wk[l], x1, v1, P->p, P->ind + l * P->d,
                          P->options->newton_tol, P->options->max_iter);
    return st ? st : store(P, s, x1, v1);
}

/* ---- MB_LANES particles at once ------------------------------------------------------ */

typedef mb_lanes lanes;  /* core.h; q̈ and the step in lanes are lanes.c's */

/* The prediction integrates in lanes wherever the dynamics have them. */
int mb_predict_uses_lanes(const mb_plan* plan, const mb_options* options)
{
    return mb_dynamics_uses_lanes(plan, options);
}

/* start() for particles s0 .. s0 + MB_LANES - 1, one per lane: Φq and M at their q,
 * evaluated once in lanes, serve the choice of z (in lanes too), the noise force (s->e)
 * and the first stage of the dynamics. Returns the mask of the lanes that chose z alone
 * (their factors are in their workspace only). */
static int start_lanes(predictor* P, lanes* s, long s0, int* status)
{
    enum { W = MB_LANES };
    const int n = P->n, d = P->d;
    const mb_model* model = P->model;
    for (int l = 0; l < W; ++l)
        for (int i = 0; i < n; ++i) {
            s->q[i * W + l] = P->q[(s0 + l) * n + i];
            s->qd[i * W + l] = P->qd[(s0 + l) * n + i];
        }
    model->kernel[MB_K_PHI_Q].lanes(s->q, NULL, s->p, s->a);
    model->kernel[MB_K_MASS].lanes(s->q, NULL, s->p, s->mv);
    const int redo = mb_dense_partition_lanes(P->wk, s->a, s->LU, P->ind);
    for (int l = 0; l < W; ++l) {
        const long k = s0 + l;
        const double *qk = P->q + k * n, *vk = P->qd + k * n;
        int st = mb_all_finite(qk, n) && mb_all_finite(vk, n) ? MB_OK : MB_NOT_FINITE;
        if (!st && (redo >> l & 1)) st = mb_choose_z(P->wk[l], qk, P->p, P->ind + l * d);
        if (!st) noise_direction(P->wk[l]->R, n, d, P->noise + k * d, P->Re);
        for (int i = 0; i < n; ++i) s->Re[i * W + l] = st ? 0.0 : P->Re[i];
        status[k] = st;
    }
    mass_apply(&model->kernel[MB_K_MASS], n, W, s->mv, s->Re, s->e);
    return redo;
}

/* x (n x lanes) = S b (r x lanes) for every lane, as mb_dense_solve_S with the lanes'
 * factors (s->LU, each lane's prow and pcol). */
static void solve_S_lanes(const predictor* P, const lanes* s, const double* b, double* x)
{
    enum { W = MB_LANES };
    const int r = P->w->r, n = P->n;
    double* y = s->y;
#define F(i, k) (s->LU + ((i) * n + (k)) * W)
    for (int i = 0; i < r; ++i) {
        for (int l = 0; l < W; ++l) y[i * W + l] = b[P->wk[l]->prow[i] * W + l];
        for (int k = 0; k < i; ++k)
            for (int l = 0; l < W; ++l) y[i * W + l] -= F(i, k)[l] * y[k * W + l];
    }
    for (int i = r - 1; i >= 0; --i) {
        for (int k = i + 1; k < r; ++k)
            for (int l = 0; l < W; ++l) y[i * W + l] -= F(i, k)[l] * y[k * W + l];
        for (int l = 0; l < W; ++l) y[i * W + l] /= F(i, i)[l];
    }
#undef F
    mb_zero(x, (long)n * W);
    for (int k = 0; k < r; ++k)
        for (int l = 0; l < W; ++l) x[P->wk[l]->pcol[k] * W + l] = y[k * W + l];
}

/* x -= δ (n x lanes) in the lanes of mask `step` only. */
static void step_lanes(double* x, const double* delta, const int* step, int n)
{
    enum { W = MB_LANES };
    for (int i = 0; i < n; ++i)
        for (int l = 0; l < W; ++l)
            x[i * W + l] = step[l] ? x[i * W + l] - delta[i * W + l] : x[i * W + l];
}

static int any_lane(const int* flags)
{
    int any = 0;
    for (int l = 0; l < MB_LANES; ++l) any |= flags[l];
    return any;
}

/* project()'s chord steps for the lanes in the mask `live` at once (s->x1, s->v1 in
 * place), each lane doing what project() does to its state; placed and moving: as there,
 * per lane (a lane left outside the tolerances goes to the exact solvers). */
static void chord_lanes(const predictor* P, lanes* s, int live, int* placed, int* moving)
{
    enum { W = MB_LANES };
    const mb_plan* plan = P->w->plan;
    const mb_kernel* ka = &P->model->kernel[MB_K_PHI_Q];
    const int r = plan->r, n = P->n;
    const double tol = P->options->newton_tol;
    double *b = s->res, *A = s->A;
    int todo[W], ok[W];
    double err[W];
    for (int l = 0; l < W; ++l) {
        placed[l] = moving[l] = 0;
        todo[l] = live >> l & 1;
    }
    for (int it = 0; it < CHORD_STEPS && any_lane(todo); ++it) {
        P->model->kernel[MB_K_PHI].lanes(s->x1, NULL, s->p, s->ph);
        for (int l = 0; l < W; ++l) err[l] = 0.0;
        for (int i = 0; i < r; ++i)
            for (int l = 0; l < W; ++l) {
                b[i * W + l] = s->ph[plan->rows[i] * W + l];
                err[l] = fabs(b[i * W + l]) > err[l] ? fabs(b[i * W + l]) : err[l];
            }
        for (int l = 0; l < W; ++l) {
            placed[l] |= todo[l] && err[l] <= tol;
            todo[l] = todo[l] && !(err[l] <= tol);
        }
        if (!any_lane(todo)) break;
        solve_S_lanes(P, s, b, s->delta);
        step_lanes(s->x1, s->delta, todo, n);
    }
    /* velocities: Φq at x dense once, then the residual row by row (project()) */
    if (!any_lane(placed)) return;
    ka->lanes(s->x1, NULL, s->p, s->a);
    mb_dense_build_A_lanes(plan, s->a, A);
    for (int l = 0; l < W; ++l) todo[l] = placed[l];
    for (int it = 0; it < CHORD_STEPS && any_lane(todo); ++it) {
        for (int l = 0; l < W; ++l) ok[l] = 1;
        for (int i = 0; i < r; ++i) {
            double sum[W], size[W];
            for (int l = 0; l < W; ++l) sum[l] = size[l] = 0.0;
            for (int j = 0; j < n; ++j)
                for (int l = 0; l < W; ++l) {
                    sum[l] += A[(i * n + j) * W + l] * s->v1[j * W + l];
                    size[l] += fabs(A[(i * n + j) * W + l] * s->v1[j * W + l]);
                }
            for (int l = 0; l < W; ++l) {
                b[i * W + l] = sum[l];
                ok[l] &= fabs(sum[l]) <= 1e-14 * size[l] + 1e-300;
            }
        }
        for (int l = 0; l < W; ++l) {
            moving[l] |= todo[l] && ok[l];
            todo[l] = todo[l] && !ok[l];
        }
        if (!any_lane(todo)) break;
        solve_S_lanes(P, s, b, s->delta);
        step_lanes(s->v1, s->delta, todo, n);
    }
}

/* Particles s0 .. s0 + MB_LANES - 1: started together, integrated together (when the
 * module has lane functions for the dynamics), projected together and stored one by
 * one; a lane the lanes could not integrate is integrated alone (the one-state dynamics
 * give its status), and one that chose z alone is projected alone. x1, v1, e: n each;
 * work as integrate(). */
static int predict_block(predictor* P, lanes* s, long s0, double* e, double* x1, double* v1,
                         int* status)
{
    enum { W = MB_LANES };
    const int n = P->n;
    int failed = 0, live = 0, placed[W], moving[W];
    const int alone = start_lanes(P, s, s0, status);
    if (P->integrate_lanes)
        mb_integrate_lanes(P->w->plan, P->options, s, P->method, P->dt);
    else
        for (int l = 0; l < W; ++l) s->bad[l] = 1;
    for (int l = 0; l < W; ++l) {
        const long k = s0 + l;
        int st = status[k];
        if (!st && s->bad[l]) {
            for (int i = 0; i < n; ++i) e[i] = s->e[i * W + l];
            st = integrate(P->w, P->method, P->q + k * n, P->qd + k * n, P->p, e, P->dt, x1,
                           v1, P->work);
        } else if (!st) {
            for (int i = 0; i < n; ++i) {
                x1[i] = s->x1[i * W + l];
                v1[i] = s->v1[i * W + l];
            }
        }
        if (!st) st = jitter(P, l, k, x1, v1);
        for (int i = 0; i < n && !st; ++i) {
            s->x1[i * W + l] = x1[i];
            s->v1[i * W + l] = v1[i];
        }
        status[k] = st;
        live |= (!st && !(alone >> l & 1)) << l;
    }
    chord_lanes(P, s, live, placed, moving);
    for (int l = 0; l < W; ++l) {
        const long k = s0 + l;
        int st = status[k];
        if (!st) {
            for (int i = 0; i < n; ++i) {
                x1[i] = s->x1[i * W + l];
                v1[i] = s->v1[i * W + l];
            }
            mb_ws* wk = P->wk[l];
            const int* ind = P->ind + l * P->d;
            const double tol = P->options->newton_tol;
            if (alone >> l & 1)
                st = project(wk, x1, v1, P->p, ind, tol, P->options->max_iter);
            else if (!(placed[l] && moving[l]))
                st = exact(wk, x1, v1, P->p, ind, tol, P->options->max_iter);
        }
        if (!st) st = store(P, k, x1, v1);
        status[k] = st;
        failed += st != MB_OK;
    }
    return failed;
}

int mb_predict_particles(const mb_plan* plan, const mb_options* options, long count,
    double* q, double* qd, const double* noise, const double* dq, const double* dqd,
    const double* p, int method, double dt, int* status)
{
    const mb_model* model = plan->model;
    const int n = model->n, d = plan->d;
    if (method != MB_EULER && method != MB_SEMI_IMPLICIT_EULER && method != MB_RK4)
        return MB_BAD_ARGUMENT;
    /* blocks of MB_LANES particles choose z and project in lanes wherever Φ, Φq and M
     * have lane functions, and integrate in lanes where the dynamics have them too */
    const int use_lanes = count >= MB_LANES && plan->r > 0 && model->kernel[MB_K_PHI].lanes &&
                          model->kernel[MB_K_PHI_Q].lanes && model->kernel[MB_K_MASS].lanes;
    predictor P = {model, options, q, qd, noise, dq, dqd, p, method, n, d,
                   mb_predict_uses_lanes(plan, options), dt, mb_ws_new(plan, options, 0),
                   {NULL}, NULL, NULL, NULL, NULL, NULL};
    int ok = P.w != NULL;
    for (int l = 0; l < (use_lanes ? MB_LANES : 1); ++l)
        ok &= (P.wk[l] = mb_ws_new(plan, options, 0)) != NULL;
    const size_t mass_nnz = (size_t)model->kernel[MB_K_MASS].nnz;
    /* e, x1, v1, Re, work (5 n), mass, gram */
    double* scratch = (double*)malloc(sizeof(double) * (9 * (size_t)n + mass_nnz
                                                        + (size_t)d * (d + 2) + 1));
    P.ind = (int*)malloc(sizeof(int) * ((MB_LANES + 1) * (size_t)d + 1));
    lanes* s = use_lanes ? mb_lanes_new(plan) : NULL;
    int failed = 0;
    if (!ok || !scratch || !P.ind || (use_lanes && !s)) {
        failed = MB_NO_MEMORY;
    } else {
        double *e = scratch, *x1 = e + n, *v1 = x1 + n;
        P.Re = v1 + n;
        P.work = P.Re + n;
        P.mass = P.work + 5 * n;
        P.gram = P.mass + mass_nnz;
        if (s) mb_lanes_load_p(s, model->np, p, 0);
        long k = 0;
        for (; use_lanes && k + MB_LANES <= count; k += MB_LANES)
            failed += predict_block(&P, s, k, e, x1, v1, status);
        for (; k < count; ++k) {
            int st = start(&P, 0, k, e);
            if (!st) st = integrate(P.w, method, q + k * n, qd + k * n, p, e, dt, x1, v1,
                                    P.work);
            if (!st) st = finish(&P, 0, k, x1, v1);
            status[k] = st;
            failed += st != MB_OK;
        }
    }
    mb_ws_free(P.w);
    for (int l = 0; l < MB_LANES; ++l) mb_ws_free(P.wk[l]);
    free(scratch);
    free(P.ind);
    free(s);
    return failed;
}
