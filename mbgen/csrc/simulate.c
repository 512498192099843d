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
    /* the integrated variables (k = n, or d in independent coordinates): the step's
     * start x, v, a and end x1, v1, a1; RK4's stage point xs, vs and slopes kx, kv
     * (4 x n); the trapezoidal residual F */
    double *x, *v, *a, *x1, *v1, *a1, *xs, *vs, *kx, *kv, *F;
    double* scratch;    /* the one allocation all of the above live in */
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

static void sim_free(mb_sim* sim)
{
    mb_ws_free(sim->w);
    mb_ws_free(sim->wk);
    free(sim->scratch);
    free(sim->ind);
}

static int sim_init(mb_sim* sim, const mb_plan* plan, const mb_options* options,
                    const double* q0, const double* qd0, const double* p, int independent)
{
    const int n = plan->model->n;
    const size_t nn = (size_t)n * n;
    memset(sim, 0, sizeof(*sim));
    sim->w = mb_ws_new(plan, options, MB_WS_JACOBIANS);
    sim->wk = mb_ws_new(plan, options, 0);
    /* Jx, Jv, G (n x n); q, qd, x, v, a, x1, v1, a1, xs, vs, F (n); kx, kv (4 x n) */
    enum { VECTORS = 11 + 2 * 4 };
    sim->scratch = (double*)malloc(sizeof(double) * (3 * nn + VECTORS * (size_t)n + 1));
    sim->ind = (int*)malloc(sizeof(int) * (2 * (size_t)n + 1));  /* ind, then pivots */
    if (!sim->w || !sim->wk || !sim->scratch || !sim->ind) {
        sim_free(sim);
        return MB_NO_MEMORY;
    }
    double* cursor = sim->scratch;
    double** blocks[] = {&sim->q, &sim->qd, &sim->x, &sim->v, &sim->a, &sim->x1, &sim->v1,
                         &sim->a1, &sim->xs, &sim->vs, &sim->F};
    sim->Jx = cursor; cursor += nn;
    sim->Jv = cursor; cursor += nn;
    sim->G = cursor; cursor += nn;
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); ++b) {
        *blocks[b] = cursor;
        cursor += n;
    }
    sim->kx = cursor; cursor += 4 * (size_t)n;
    sim->kv = cursor;
    sim->p = p;
    sim->independent = independent;
    sim->n = n;
    sim->d = n - plan->r;
    sim->piv = sim->ind + n;
    memcpy(sim->q, q0, sizeof(double) * (size_t)n);
    memcpy(sim->qd, qd0, sizeof(double) * (size_t)n);
    return MB_OK;
}

/* x, v from the state: q, q̇, or their independent coordinates (given, or chosen at
 * this state); *k is their number. */
static int load_integrated(mb_sim* sim, const int* zfix, int nz, int* k)
{
    if (!sim->independent) {
        *k = sim->n;
        memcpy(sim->x, sim->q, sizeof(double) * (size_t)sim->n);
        memcpy(sim->v, sim->qd, sizeof(double) * (size_t)sim->n);
        return MB_OK;
    }
    if (nz) memcpy(sim->ind, zfix, sizeof(int) * (size_t)nz);
    else {
        const int st = mb_choose_z(sim->wk, sim->q, sim->p, sim->ind);
        if (st) return st;
    }
    *k = sim->d;
    for (int j = 0; j < *k; ++j) {
        sim->x[j] = sim->q[sim->ind[j]];
        sim->v[j] = sim->qd[sim->ind[j]];
    }
    return MB_OK;
}

static int rk4_step(mb_sim* sim, int k, double dt, const double* Qmid, const double* Qend)
{
    const int n = sim->n;
    const double *x = sim->x, *v = sim->v;
    double *kx = sim->kx, *kv = sim->kv, *xs = sim->xs, *vs = sim->vs;
    const double h[3] = {0.5 * dt, 0.5 * dt, dt};
    memcpy(kx, v, sizeof(double) * (size_t)k);
    memcpy(kv, sim->a, sizeof(double) * (size_t)k);
    for (int s = 1; s < 4; ++s) {
        for (int i = 0; i < k; ++i) {
            xs[i] = x[i] + h[s - 1] * kx[(s - 1) * n + i];
            vs[i] = v[i] + h[s - 1] * kv[(s - 1) * n + i];
        }
        memcpy(kx + s * n, vs, sizeof(double) * (size_t)k);
        const int st = sim_eval(sim, xs, vs, s < 3 ? Qmid : Qend, kv + s * n, NULL, NULL);
        if (st) return st;
    }
    for (int i = 0; i < k; ++i) {
        sim->x1[i] = x[i] + dt / 6.0 * (kx[i] + 2 * kx[n + i] + 2 * kx[2 * n + i] + kx[3 * n + i]);
        sim->v1[i] = v[i] + dt / 6.0 * (kv[i] + 2 * kv[n + i] + 2 * kv[2 * n + i] + kv[3 * n + i]);
    }
    return MB_OK;
}

/* x1, v1 from x, v, a by one step of ``method``. */
static int integrate_step(mb_sim* sim, int method, int k, double dt, const double* Qmid,
                          const double* Qend)
{
    const double *x = sim->x, *v = sim->v, *a = sim->a;
    double *x1 = sim->x1, *v1 = sim->v1;
    switch (method) {
    case MB_EULER:
        for (int i = 0; i < k; ++i) { x1[i] = x[i] + dt * v[i]; v1[i] = v[i] + dt * a[i]; }
        return MB_OK;
    case MB_SEMI_IMPLICIT_EULER:
        for (int i = 0; i < k; ++i) { v1[i] = v[i] + dt * a[i]; x1[i] = x[i] + dt * v1[i]; }
        return MB_OK;
    case MB_RK4:
        return rk4_step(sim, k, dt, Qmid, Qend);
    case MB_TRAPEZOIDAL:
        return trapezoidal_step(sim, k, x, v, a, dt, Qend, x1, v1, sim->a1, sim->F);
    default:
        return MB_BAD_ARGUMENT;
    }
}

double mb_projection_tol(const mb_options* options)
{
    return 0.1 * options->newton_tol;
}

/* The state from x1, v1: the dependent coordinates follow the independent ones, or the
 * integrated q, q̇ are projected back onto Φ = 0, Φq q̇ = 0 (and the initial energy). */
static int store_integrated(mb_sim* sim, const mb_options* options, int k, int project,
                            double energy0)
{
    const double* p = sim->p;
    int st = MB_OK;
    if (sim->independent) {
        for (int j = 0; j < k; ++j) {
            sim->q[sim->ind[j]] = sim->x1[j];
            sim->qd[sim->ind[j]] = sim->v1[j];
        }
        st = mb_position_one(sim->wk, sim->q, p, sim->ind, k, 0, options->newton_tol,
                             options->max_iter);
        return st ? st : mb_velocity_one(sim->wk, sim->q, sim->qd, p, sim->ind, k, 0);
    }
    memcpy(sim->q, sim->x1, sizeof(double) * (size_t)sim->n);
    memcpy(sim->qd, sim->v1, sizeof(double) * (size_t)sim->n);
    if (project == MB_PROJECT_NONE) return MB_OK;
    /* the core's own tolerance (1e-12 size², round-off reaches it at any size) and
     * iterations: a projection that does not get there is a status, not a result */
    st = mb_position_one(sim->wk, sim->q, p, NULL, 0, 1, mb_projection_tol(options),
                         options->max_iter);
    if (!st) st = mb_velocity_one(sim->wk, sim->q, sim->qd, p, NULL, 0, 1);
    if (!st && project == MB_PROJECT_ENERGY)
        restore_energy(sim->w->model, sim->q, sim->qd, p, energy0);
    return st;
}

/* A run's stepper: the integrator's state and scratch, kept between mb_stepper_run calls
 * so that runs in pieces take the same steps as one run (mb_simulate is one piece). */
struct mb_stepper {
    mb_sim sim;
    const mb_options* options;
    const int* zfix;
    int nz, method, project;
    int k;              /* the integrated variables' count at the current state */
    double energy0;     /* T + V at the start (MB_PROJECT_ENERGY) */
    int ready;          /* sim.x, sim.v, sim.a hold the current state's, for Q below */
    int has_Q;
    double* Q;          /* the generalized force sim.a was evaluated with (n; has_Q) */
};

int mb_stepper_new(const mb_plan* plan, const mb_options* options, const double* q0,
                   const double* qd0, const double* p, const int* zfix, int nz, int method,
                   int independent, int project, mb_stepper** out)
{
    const int n = plan->model->n;
    *out = NULL;
    mb_stepper* s = (mb_stepper*)calloc(1, sizeof(mb_stepper));
    if (!s) return MB_NO_MEMORY;
    s->Q = (double*)malloc(sizeof(double) * ((size_t)n + 1));
    int st = s->Q ? sim_init(&s->sim, plan, options, q0, qd0, p, independent) : MB_NO_MEMORY;
    if (st) {
        free(s->Q);
        free(s);
        return st;
    }
    if (nz && nz != s->sim.d) {
        mb_stepper_free(s);
        return MB_BAD_ARGUMENT;
    }
    double e0[2];
    mb_eval_one(plan->model, MB_K_ENERGY, q0, qd0, p, e0);
    s->options = options;
    s->zfix = zfix;
    s->nz = nz;
    s->method = method;
    s->project = project;
    s->energy0 = e0[0] + e0[1];
    *out = s;
    return MB_OK;
}

void mb_stepper_free(mb_stepper* s)
{
    if (!s) return;
    sim_free(&s->sim);
    free(s->Q);
    free(s);
}

/* The start of a step: x, v and a at the current state with the force Qk, unless the
 * last evaluation was this one (the same state, the same force bit for bit). */
static int stepper_load(mb_stepper* s, const double* Qk)
{
    const size_t row = sizeof(double) * (size_t)s->sim.n;
    if (s->ready && (Qk ? s->has_Q && memcmp(Qk, s->Q, row) == 0 : !s->has_Q)) return MB_OK;
    s->ready = 0;
    int st = load_integrated(&s->sim, s->zfix, s->nz, &s->k);
    if (!st) st = sim_eval(&s->sim, s->sim.x, s->sim.v, Qk, s->sim.a, NULL, NULL);
    if (st) return st;
    s->has_Q = Qk != NULL;
    if (Qk) memcpy(s->Q, Qk, row);
    s->ready = 1;
    return MB_OK;
}

int mb_stepper_run(mb_stepper* s, double dt, long nsteps, const double* Qtable,
                   double* out_q, double* out_qd, double* out_qdd, long* failed_step)
{
    mb_sim* sim = &s->sim;
    const int n = sim->n;
    const size_t row = sizeof(double) * (size_t)n;
    int st = MB_OK;
    long step = 0;
    *failed_step = -1;
    for (step = 0; step <= nsteps; ++step) {
        const double* Qk = Qtable ? Qtable + 2 * step * n : NULL;
        if ((st = stepper_load(s, Qk))) break;
        memcpy(out_q + step * n, sim->q, row);
        memcpy(out_qd + step * n, sim->qd, row);
        memcpy(out_qdd + step * n, sim->w->qdd, row);
        if (step == nsteps) break;
        s->ready = 0;
        if ((st = integrate_step(sim, s->method, s->k, dt, Qtable ? Qk + n : NULL,
                                 Qtable ? Qk + 2 * n : NULL)))
            break;  /* the step itself failed: reported at its start */
        if ((st = store_integrated(sim, s->options, s->k, s->project, s->energy0))) {
            ++step;  /* the new state that cannot be completed: reported as the next one */
            break;
        }
    }
    if (st) {
        s->ready = 0;
        *failed_step = step;
    }
    return st;
}

int mb_simulate(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const int* zfix, int nz, int method,
    int independent, int project, double dt, long nsteps, const double* Qtable,
    double* out_q, double* out_qd, double* out_qdd, long* failed_step)
{
    mb_stepper* s;
    *failed_step = -1;
    int st = mb_stepper_new(plan, options, q0, qd0, p, zfix, nz, method, independent,
                            project, &s);
    if (st) {
        if (st != MB_NO_MEMORY) *failed_step = 0;
        return st;
    }
    st = mb_stepper_run(s, dt, nsteps, Qtable, out_q, out_qd, out_qdd, failed_step);
    mb_stepper_free(s);
    return st;
}
