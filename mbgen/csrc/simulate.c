/* Fixed-step integrators (explicit and semi-implicit Euler, RK4, implicit trapezoidal) in dependent or
 * independent coordinates, with optional projection onto the constraint manifold. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

typedef struct {
    mb_ws* w;           /* dynamics */
    mb_ws* wk;          /* kinematics (independent coordinates) */
    const double* p;
    int independent;    /* integrate z, ż; q, q̇ follow by the position/velocity problems */
    int n, d;
    int* ind;           /* independent coordinates of the current step (d) */
    double *q, *qd;     /* full state of the last evaluation (the solvers' guess) */
    double *Jx, *Jv, *G;/* k x k Newton scratch of the trapezoidal rule */
    int* piv;           /* k pivots of G */
} mb_sim;

/* Accelerations of the integrated variables x (q or z) at (x, ẋ), optionally with their
 * exact Jacobians (k x k) for Newton. */
static int sim_eval(mb_sim* sim, const double* x, const double* xd, const double* Qext,
                    double* xdd, double* Jx, double* Jxd)
{
    const mb_options* opt = sim->w->opt;
    const int n = sim->n;
    int st;
    if (!sim->independent) {
        memcpy(sim->q, x, sizeof(double) * (size_t)n);
        memcpy(sim->qd, xd, sizeof(double) * (size_t)n);
        st = mb_dynamics_one(sim->w, sim->q, sim->qd, Qext, sim->p, xdd, NULL, Jx != NULL);
        if (!st && Jx) mb_dynamics_jacobians(sim->w, sim->q, sim->qd, sim->p, Jx, Jxd, NULL);
        return st;
    }
    for (int j = 0; j < sim->d; ++j) {
        sim->q[sim->ind[j]] = x[j];
        sim->qd[sim->ind[j]] = xd[j];
    }
    st = mb_position_one(sim->wk, sim->q, sim->p, sim->ind, sim->d, 0, opt->newton_tol,
                         opt->max_iter);
    if (!st) st = mb_velocity_one(sim->wk, sim->q, sim->qd, sim->p, sim->ind, sim->d, 0);
    if (st) return st;
    return mb_independent_one(sim->w, sim->wk, sim->q, sim->qd, Qext, sim->p, sim->ind,
                              sim->d, xdd, Jx, Jxd, NULL);
}

static int trapezoidal_step(mb_sim* sim, int k, const double* x0, const double* v0,
                            const double* a0, double dt, const double* Qend, double* x1,
                            double* v1, double* a1, double* F)
{
    double *Jx = sim->Jx, *Jv = sim->Jv, *G = sim->G;
    for (int i = 0; i < k; ++i) v1[i] = v0[i] + dt * a0[i];
    for (int it = 0; it < 30; ++it) {
        for (int i = 0; i < k; ++i) x1[i] = x0[i] + 0.5 * dt * (v0[i] + v1[i]);
        int st = sim_eval(sim, x1, v1, Qend, a1, Jx, Jv);
        if (st) return st;
        double err = 0.0, scale = 1.0;
        for (int i = 0; i < k; ++i) {
            F[i] = v1[i] - v0[i] - 0.5 * dt * (a0[i] + a1[i]);
            if (fabs(F[i]) > err) err = fabs(F[i]);
            if (fabs(v1[i]) > scale) scale = fabs(v1[i]);
        }
        if (err <= 1e-13 * scale) return MB_OK;
        for (int i = 0; i < k; ++i)
            for (int j = 0; j < k; ++j)
                G[i * k + j] = (i == j) - 0.5 * dt * (0.5 * dt * Jx[i * k + j] + Jv[i * k + j]);
        /* G is I + O(dt): a tiny pivot means a broken step, not a choice of tolerance */
        st = mb_lu_factor(G, k, sim->piv, 1e-14);
        if (st) return st == MB_SINGULAR_PHIQ ? MB_SINGULAR_MASS : st;
        mb_lu_solve(G, k, sim->piv, F, 1);
        for (int i = 0; i < k; ++i) v1[i] -= F[i];
    }
    return MB_NO_CONVERGENCE;
}

/* Energy projection for conservative models: scale the (admissible) velocity so that
 * T + V equals the initial energy; scaling keeps Φq q̇ = 0. */
static void restore_energy(const mb_model* model, const double* q, double* qd,
                           const double* p, double energy0)
{
    double e[2];
    mb_eval_one(model, MB_K_ENERGY, q, qd, p, e);
    if (e[0] <= 1e-300 || energy0 - e[1] <= 0.0) return;
    const double s = sqrt((energy0 - e[1]) / e[0]);
    for (int i = 0; i < model->n; ++i) qd[i] *= s;
}

int mb_simulate(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const int* zfix, int nz, int method,
    int independent, int project, double dt, long nsteps, const double* Qtable,
    double* out_q, double* out_qd, double* out_qdd, long* failed_step)
{
    const mb_model* model = plan->model;
    const int n = model->n, r = plan->r;
    const size_t nn = (size_t)n * n;
    mb_sim sim;
    memset(&sim, 0, sizeof(sim));
    sim.w = mb_ws_new(plan, options, MB_WS_JACOBIANS);
    sim.wk = mb_ws_new(plan, options, 0);
    /* Jx, Jv, G (n x n); q, qd, x, v, a, x1, v1, a1, xs, vs, F (n); kx, kv (4 x n) */
    enum { VECTORS = 11 + 2 * 4 };
    double* scratch = (double*)malloc(sizeof(double) * (3 * nn + VECTORS * (size_t)n + 1));
    int* ind = (int*)malloc(sizeof(int) * (2 * (size_t)n + 1));  /* ind, then pivots */
    *failed_step = -1;
    if (!sim.w || !sim.wk || !scratch || !ind) {
        mb_ws_free(sim.w); mb_ws_free(sim.wk); free(scratch); free(ind);
        return MB_NO_MEMORY;
    }
    double* cursor = scratch;
    sim.Jx = cursor; cursor += nn;
    sim.Jv = cursor; cursor += nn;
    sim.G = cursor; cursor += nn;
    sim.q = cursor; cursor += n;
    sim.qd = cursor; cursor += n;
    double *x = cursor, *v = x + n, *a = v + n, *x1 = a + n, *v1 = x1 + n, *a1 = v1 + n;
    double *xs = a1 + n, *vs = xs + n, *F = vs + n, *kx = F + n, *kv = kx + 4 * n;
    sim.p = p;
    sim.independent = independent;
    sim.n = n;
    sim.d = n - r;
    sim.ind = ind;
    sim.piv = ind + n;
    memcpy(sim.q, q0, sizeof(double) * (size_t)n);
    memcpy(sim.qd, qd0, sizeof(double) * (size_t)n);
    int st = (nz && nz != sim.d) ? MB_BAD_ARGUMENT : MB_OK;
    long step = 0;
    double e0[2];
    mb_eval_one(model, MB_K_ENERGY, q0, qd0, p, e0);
    const double energy0 = e0[0] + e0[1];
    for (step = 0; step <= nsteps && !st; ++step) {
        const double* Qk = Qtable ? Qtable + 2 * step * n : NULL;
        int k = n;
        if (independent) {
            if (nz) memcpy(sim.ind, zfix, sizeof(int) * (size_t)nz);
            else if ((st = mb_choose_z(sim.wk, sim.q, p, sim.ind))) break;
            k = sim.d;
            for (int j = 0; j < k; ++j) { x[j] = sim.q[sim.ind[j]]; v[j] = sim.qd[sim.ind[j]]; }
        } else {
            memcpy(x, sim.q, sizeof(double) * (size_t)n);
            memcpy(v, sim.qd, sizeof(double) * (size_t)n);
        }
        st = sim_eval(&sim, x, v, Qk, a, NULL, NULL);
        if (st) break;
        memcpy(out_q + step * n, sim.q, sizeof(double) * (size_t)n);
        memcpy(out_qd + step * n, sim.qd, sizeof(double) * (size_t)n);
        memcpy(out_qdd + step * n, sim.w->qdd, sizeof(double) * (size_t)n);
        if (step == nsteps) break;
        const double* Qmid = Qtable ? Qk + n : NULL;
        const double* Qend = Qtable ? Qk + 2 * n : NULL;
        if (method == MB_EULER) {
            for (int i = 0; i < k; ++i) { x1[i] = x[i] + dt * v[i]; v1[i] = v[i] + dt * a[i]; }
        } else if (method == MB_SEMI_IMPLICIT_EULER) {
            for (int i = 0; i < k; ++i) { v1[i] = v[i] + dt * a[i]; x1[i] = x[i] + dt * v1[i]; }
        } else if (method == MB_RK4) {
            const double h[3] = {0.5 * dt, 0.5 * dt, dt};
            memcpy(kx, v, sizeof(double) * (size_t)k);
            memcpy(kv, a, sizeof(double) * (size_t)k);
            for (int s = 1; s < 4 && !st; ++s) {
                for (int i = 0; i < k; ++i) {
                    xs[i] = x[i] + h[s - 1] * kx[(s - 1) * n + i];
                    vs[i] = v[i] + h[s - 1] * kv[(s - 1) * n + i];
                }
                memcpy(kx + s * n, vs, sizeof(double) * (size_t)k);
                st = sim_eval(&sim, xs, vs, s < 3 ? Qmid : Qend, kv + s * n, NULL, NULL);
            }
            if (st) break;
            for (int i = 0; i < k; ++i) {
                x1[i] = x[i] + dt / 6.0 * (kx[i] + 2 * kx[n + i] + 2 * kx[2 * n + i] + kx[3 * n + i]);
                v1[i] = v[i] + dt / 6.0 * (kv[i] + 2 * kv[n + i] + 2 * kv[2 * n + i] + kv[3 * n + i]);
            }
        } else if (method == MB_TRAPEZOIDAL) {
            st = trapezoidal_step(&sim, k, x, v, a, dt, Qend, x1, v1, a1, F);
            if (st) break;
        } else {
            st = MB_BAD_ARGUMENT;
            break;
        }
        if (independent) {
            for (int j = 0; j < k; ++j) { sim.q[sim.ind[j]] = x1[j]; sim.qd[sim.ind[j]] = v1[j]; }
            st = mb_position_one(sim.wk, sim.q, p, sim.ind, k, 0, options->newton_tol,
                                 options->max_iter);
            if (!st) st = mb_velocity_one(sim.wk, sim.q, sim.qd, p, sim.ind, k, 0);
        } else {
            memcpy(sim.q, x1, sizeof(double) * (size_t)n);
            memcpy(sim.qd, v1, sizeof(double) * (size_t)n);
            if (project != MB_PROJECT_NONE) {
                st = mb_position_one(sim.wk, sim.q, p, NULL, 0, 1, 1e-13, 10);
                if (st == MB_NO_CONVERGENCE) st = MB_OK;  /* best effort at round-off level */
                if (!st) st = mb_velocity_one(sim.wk, sim.q, sim.qd, p, NULL, 0, 1);
                if (!st && project == MB_PROJECT_ENERGY)
                    restore_energy(model, sim.q, sim.qd, p, energy0);
            }
        }
    }
    if (st) *failed_step = step;
    mb_ws_free(sim.w);
    mb_ws_free(sim.wk);
    free(scratch);
    free(ind);
    return st;
}
