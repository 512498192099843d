/* Many runs of one mechanism side by side (mbgen sweep): each run has its own parameters,
 * state and constant generalized force, and one call advances all of them by a number of
 * steps.
 *
 * Where the module has lane functions (small mechanisms, mb_dynamics_uses_lanes), blocks
 * of MB_LANES runs step together: the explicit integrators in lanes (lanes.c), then
 * the projection onto Φ = 0, Φq q̇ = 0 by minimum-norm Newton in lanes, with the Gram
 * matrix A Aᵀ of the kept rows factored by Cholesky per lane. A run's result does not
 * depend on which runs share its block (a short last block is padded with copies of its
 * last run), so a study gives the same numbers however it is cut into chunks. Elsewhere
 * (other integrators, independent coordinates, mechanisms without lanes) each run goes
 * through mb_simulate alone. A run that fails is marked in its status and skipped from
 * then on; it never stops the others. */
#include <stdlib.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

enum { W = MB_LANES };

int mb_sweep_uses_lanes(const mb_plan* plan, const mb_options* options, int method,
                        int independent, int project)
{
    const mb_model* model = plan->model;
    return !independent && project != MB_PROJECT_ENERGY &&
           (method == MB_EULER || method == MB_SEMI_IMPLICIT_EULER || method == MB_RK4) &&
           mb_dynamics_uses_lanes(plan, options) && model->kernel[MB_K_PHI].lanes;
}

/* Per lane, G = A Aᵀ (r x r of the kept rows, A: r x n, both [entry][lane]) factored in
 * place by Cholesky (lower triangle); bad[l] = 1 where Φq lost rank. */
static void gram_factor_lanes(const double* A, int r, int n, double* G, int* bad)
{
    for (int i = 0; i < r; ++i)
        for (int j = 0; j <= i; ++j) {
            double* g = G + (i * r + j) * W;
            for (int l = 0; l < W; ++l) g[l] = 0.0;
            for (int k = 0; k < n; ++k)
                for (int l = 0; l < W; ++l)
                    g[l] += A[(i * n + k) * W + l] * A[(j * n + k) * W + l];
        }
    for (int j = 0; j < r; ++j) {
        double* gjj = G + (j * r + j) * W;
        for (int l = 0; l < W; ++l) {
            double d = gjj[l];
            for (int k = 0; k < j; ++k) d -= G[(j * r + k) * W + l] * G[(j * r + k) * W + l];
            bad[l] |= !(d > 1e-24 * gjj[l]);  /* also NaN */
            gjj[l] = bad[l] ? 1.0 : sqrt(d);
        }
        for (int i = j + 1; i < r; ++i) {
            double* gij = G + (i * r + j) * W;
            for (int l = 0; l < W; ++l) {
                double sum = gij[l];
                for (int k = 0; k < j; ++k)
                    sum -= G[(i * r + k) * W + l] * G[(j * r + k) * W + l];
                gij[l] = sum / gjj[l];
            }
        }
    }
}

/* x -= Aᵀ (A Aᵀ)⁻¹ b in the lanes where todo[l], from gram_factor_lanes' G; b (r) is
 * overwritten. */
static void min_norm_step_lanes(const double* A, const double* G, int r, int n, double* b,
                                double* x, const int* todo)
{
    for (int i = 0; i < r; ++i) {  /* L y = b */
        for (int k = 0; k < i; ++k)
            for (int l = 0; l < W; ++l) b[i * W + l] -= G[(i * r + k) * W + l] * b[k * W + l];
        for (int l = 0; l < W; ++l) b[i * W + l] /= G[(i * r + i) * W + l];
    }
    for (int i = r - 1; i >= 0; --i) {  /* Lᵀ y = y */
        for (int k = i + 1; k < r; ++k)
            for (int l = 0; l < W; ++l) b[i * W + l] -= G[(k * r + i) * W + l] * b[k * W + l];
        for (int l = 0; l < W; ++l) b[i * W + l] /= G[(i * r + i) * W + l];
    }
    for (int i = 0; i < r; ++i)  /* lanes not to move step by 0: no branch in the loop below */
        for (int l = 0; l < W; ++l) b[i * W + l] = todo[l] ? b[i * W + l] : 0.0;
    for (int i = 0; i < r; ++i)
        for (int j = 0; j < n; ++j)
            for (int l = 0; l < W; ++l) x[j * W + l] -= A[(i * n + j) * W + l] * b[i * W + l];
}

/* (s->x1, s->v1) onto Φ = 0 (to mb_projection_tol within options->max_iter, as
 * mb_simulate's manifold projection) and Φq q̇ = 0, moving each the least; s->bad[l] set
 * where a lane failed, unconverged[l] too where its projection did not get there.
 * G: r x r lanes. */
static void project_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s,
                          double* G, int* unconverged)
{
    const mb_model* model = plan->model;
    const int r = plan->r, n = model->n;
    int todo[W];
    const double tol = mb_projection_tol(options);
    for (int l = 0; l < W; ++l) todo[l] = !s->bad[l];
    for (int it = 0; it <= options->max_iter; ++it) {
        model->kernel[MB_K_PHI].lanes(s->x1, NULL, s->p, s->ph);
        int any = 0;
        for (int l = 0; l < W; ++l) {
            double err = 0.0;
            for (int i = 0; i < r; ++i) {
                const double v = s->ph[plan->rows[i] * W + l];
                s->res[i * W + l] = v;
                err = fabs(v) > err || v != v ? fabs(v) : err;
            }
            s->bad[l] |= todo[l] && !(err < INFINITY);
            todo[l] = todo[l] && !s->bad[l] && err > tol;
            any |= todo[l];
        }
        if (!any) break;
        if (it == options->max_iter) {
            for (int l = 0; l < W; ++l) {
                unconverged[l] = todo[l];
                s->bad[l] |= todo[l];
            }
            break;
        }
        model->kernel[MB_K_PHI_Q].lanes(s->x1, NULL, s->p, s->a);
        mb_dense_build_A_lanes(plan, s->a, s->A);
        gram_factor_lanes(s->A, r, n, G, s->bad);
        for (int l = 0; l < W; ++l) todo[l] = todo[l] && !s->bad[l];
        min_norm_step_lanes(s->A, G, r, n, s->res, s->x1, todo);
    }
    model->kernel[MB_K_PHI_Q].lanes(s->x1, NULL, s->p, s->a);
    mb_dense_build_A_lanes(plan, s->a, s->A);
    gram_factor_lanes(s->A, r, n, G, s->bad);
    for (int i = 0; i < r; ++i) {
        for (int l = 0; l < W; ++l) s->res[i * W + l] = 0.0;
        for (int j = 0; j < n; ++j)
            for (int l = 0; l < W; ++l)
                s->res[i * W + l] += s->A[(i * n + j) * W + l] * s->v1[j * W + l];
    }
    for (int l = 0; l < W; ++l) todo[l] = !s->bad[l];
    min_norm_step_lanes(s->A, G, r, n, s->res, s->v1, todo);
}

/* A failed lane's status: the one-state dynamics at its last good state say why, or the
 * step's result was not finite. */
static int lane_failure(mb_ws* w, const double* q, const double* qd, const double* e,
                        const double* p, double* qdd)
{
    const int st = mb_dynamics_one(w, q, qd, e, p, qdd, NULL, 0);
    return st ? st : MB_NOT_FINITE;
}

/* Runs k0 .. k0 + W - 1 (the ones past count: copies of the last) over `steps` steps in
 * lanes. */
static void sweep_block(const mb_plan* plan, const mb_options* options, mb_lanes* s,
    double* G, mb_ws* w, long k0, long count, double* q, double* qd, const double* p,
    const double* Qext, int method, int project, double dt, long steps, double* out_q,
    double* out_qd, int* status, long* failed_step, double* scratch)
{
    const mb_model* model = plan->model;
    const int n = model->n, np = model->np;
    long run[W];
    int live[W];
    for (int l = 0; l < W; ++l) {
        run[l] = k0 + l < count ? k0 + l : count - 1;
        live[l] = k0 + l < count && status[run[l]] == MB_OK;
        for (int i = 0; i < n; ++i) {
            s->q[i * W + l] = q[run[l] * n + i];
            s->qd[i * W + l] = qd[run[l] * n + i];
            s->e[i * W + l] = Qext ? Qext[run[l] * n + i] : 0.0;
        }
        for (int k = 0; k < np; ++k) s->p[k * W + l] = p[run[l] * np + k];
    }
    for (long step = 0; step < steps; ++step) {
        int any = 0;
        for (int l = 0; l < W; ++l) any |= live[l];
        if (!any) break;
        model->kernel[MB_K_PHI_Q].lanes(s->q, NULL, s->p, s->a);
        model->kernel[MB_K_MASS].lanes(s->q, NULL, s->p, s->mv);
        mb_integrate_lanes(plan, options, s, method, dt);
        int unconverged[W] = {0};
        if (project != MB_PROJECT_NONE) project_lanes(plan, options, s, G, unconverged);
        for (int l = 0; l < W; ++l) {
            if (!live[l]) continue;
            const long k = run[l];
            for (int i = 0; i < n && !s->bad[l]; ++i)
                s->bad[l] = !(isfinite(s->x1[i * W + l]) && isfinite(s->v1[i * W + l]));
            if (s->bad[l]) {
                for (int i = 0; i < n; ++i) scratch[i] = s->e[i * W + l];
                status[k] = unconverged[l] ? MB_NO_CONVERGENCE
                    : lane_failure(w, q + k * n, qd + k * n, scratch, p + k * np,
                                   scratch + n);
                failed_step[k] = step;
                live[l] = 0;
                continue;
            }
            for (int i = 0; i < n; ++i) {
                q[k * n + i] = s->q[i * W + l] = s->x1[i * W + l];
                qd[k * n + i] = s->qd[i * W + l] = s->v1[i * W + l];
            }
            if (out_q) mb_copy(out_q + (k * steps + step) * n, q + k * n, n);
            if (out_qd) mb_copy(out_qd + (k * steps + step) * n, qd + k * n, n);
        }
    }
}

/* Run k alone through mb_simulate; table: (2 steps + 1) x n, path: 3 (steps + 1) x n. */
static void sweep_alone(const mb_plan* plan, const mb_options* options, long k, double* q,
    double* qd, const double* p, const double* Qext, int method, int independent,
    int project, double dt, long steps, double* out_q, double* out_qd, int* status,
    long* failed_step, double* table, double* path)
{
    const int n = plan->model->n;
    const size_t rows = (size_t)steps + 1;
    double *pq = path, *pqd = path + rows * n, *pqdd = pqd + rows * n;
    for (long t = 0; Qext && t <= 2 * steps; ++t) mb_copy(table + t * n, Qext + k * n, n);
    long failed = -1;
    const int st = mb_simulate(plan, options, q + k * n, qd + k * n, p + k * plan->model->np,
                               NULL, 0, method, independent, project, dt, steps,
                               Qext ? table : NULL, pq, pqd, pqdd, &failed);
    /* path rows surely written: 0 .. failed - 1 whichever way mb_simulate failed */
    const long good = st ? failed : steps + 1;
    if (st) {
        status[k] = st;
        failed_step[k] = failed > 0 ? failed - 1 : 0;  /* the steps it took */
    }
    if (good > 1) {
        mb_copy(q + k * n, pq + (good - 1) * n, n);
        mb_copy(qd + k * n, pqd + (good - 1) * n, n);
    }
    for (long t = 1; t < good; ++t) {
        if (out_q) mb_copy(out_q + (k * steps + t - 1) * n, pq + t * n, n);
        if (out_qd) mb_copy(out_qd + (k * steps + t - 1) * n, pqd + t * n, n);
    }
}

int mb_sweep(const mb_plan* plan, const mb_options* options, long count, double* q,
    double* qd, const double* p, const double* Qext, int method, int independent,
    int project, double dt, long steps, double* out_q, double* out_qd, int* status,
    long* failed_step)
{
    const mb_model* model = plan->model;
    const int n = model->n, r = plan->r;
    if (count <= 0 || steps <= 0) return count < 0 || steps < 0 ? MB_BAD_ARGUMENT : MB_OK;
    const int lanes = mb_sweep_uses_lanes(plan, options, method, independent, project);
    const size_t nw = 2 * (size_t)n + (lanes ? (size_t)r * r * W
                                             : (2 * (size_t)steps + 1 + 3 * ((size_t)steps + 1)) * n);
    double* scratch = (double*)malloc(sizeof(double) * nw);
    mb_lanes* s = lanes ? mb_lanes_new(plan) : NULL;
    mb_ws* w = lanes ? mb_ws_new(plan, options, 0) : NULL;
    int st = MB_OK;
    if (!scratch || (lanes && (!s || !w))) {
        st = MB_NO_MEMORY;
    } else if (lanes) {
        for (long k0 = 0; k0 < count; k0 += W)
            sweep_block(plan, options, s, scratch + 2 * n, w, k0, count, q, qd, p, Qext,
                        method, project, dt, steps, out_q, out_qd, status, failed_step,
                        scratch);
    } else {
        double* table = scratch + 2 * n;
        double* path = table + (2 * steps + 1) * n;
        for (long k = 0; k < count; ++k)
            if (status[k] == MB_OK)
                sweep_alone(plan, options, k, q, qd, p, Qext, method, independent, project,
                            dt, steps, out_q, out_qd, status, failed_step, table, path);
    }
    for (long k = 0; k < count && !st; ++k) {  /* NaN where a run has no state */
        if (status[k] == MB_OK) continue;
        const long first = failed_step[k] >= 0 ? failed_step[k] : 0;
        for (long i = first * n; i < steps * n; ++i) {
            if (out_q) out_q[k * steps * n + i] = NAN;
            if (out_qd) out_qd[k * steps * n + i] = NAN;
        }
    }
    free(scratch);
    free(s);
    mb_ws_free(w);
    return st;
}
