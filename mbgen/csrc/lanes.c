/* q̈ of MB_LANES (8) states side by side, and one explicit step of them: the lane
 * machinery that the batched forward dynamics (dynamics.c), the particle filter's
 * prediction (particles.c) and a sweep's runs (sweep.c) share.
 *
 * Every array is [entry][lane] (struct mb_lanes, core.h); the module's lane functions
 * (mbgen/codegen/lanes.py, templates/c.j2) and the loops here compute in each lane what
 * the one-state code computes for its state, bit for bit, so the compiler can keep the
 * lanes in SIMD registers without changing a result. A lane whose state fails a check is
 * marked in s->bad, for its caller to do it again alone. */
#include <stdlib.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

/* The lanes run the unrolled KKT path of mb_dynamics_one (forces, Φq, the mass and the
 * KKT factor and solve, no stabilization), so they compute what it would, bit for bit. */
int mb_dynamics_uses_lanes(const mb_plan* plan, const mb_options* options)
{
    const mb_model* model = plan->model;
    const mb_kkt* kkt = model->kkt;
    return kkt && kkt->factor_lanes && kkt->solve_lanes && plan->r > 0 &&
           mb_plan_uses_sparse(plan, options) && mb_plan_uses_unrolled(plan, options) &&
           options->alpha == 0.0 && options->beta == 0.0 &&
           model->kernel[MB_K_PHI_Q].lanes && model->kernel[MB_K_MASS].lanes &&
           model->kernel[MB_K_DPHIQ_QD].lanes &&
           (model->kernel[MB_K_FORCES].lanes || !model->kernel[MB_K_FORCES].nnz);
}

mb_lanes* mb_lanes_new(const mb_plan* plan)
{
    const mb_model* model = plan->model;
    const size_t n = (size_t)model->n, N = n + (size_t)plan->r, W = MB_LANES;
    const size_t r = (size_t)plan->r;
    const size_t m = (size_t)model->m;
    const size_t sizes[] = {n, n, n, n, n, n, r * n + r, m, r * n, r, r, n, n, n, n, n, n,
                            (size_t)model->kernel[MB_K_FORCES].nnz + 1,
                            (size_t)model->kernel[MB_K_DPHIQ_QD].nnz,
                            (size_t)model->kernel[MB_K_PHI_Q].nnz,
                            (size_t)model->kernel[MB_K_MASS].nnz, N,
                            (size_t)(model->kkt ? model->kkt->nnz_l : 0) + 1, N, 1,
                            (size_t)model->np};
    size_t total = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) total += sizes[k] * W;
    mb_lanes* s = (mb_lanes*)malloc(sizeof(mb_lanes) + sizeof(double) * total);
    if (!s) return NULL;
    double* next = (double*)(s + 1);
    double** arrays[] = {&s->q, &s->qd, &s->e, &s->x1, &s->v1, &s->Re, &s->LU, &s->ph,
                         &s->A, &s->res, &s->y, &s->delta, &s->kv, &s->kx, &s->xs, &s->sx,
                         &s->sv, &s->f, &s->dd, &s->a, &s->mv, &s->b, &s->L, &s->D,
                         &s->gamma, &s->p};
    for (size_t k = 0; k < sizeof arrays / sizeof *arrays; ++k) {
        *arrays[k] = next;
        next += sizes[k] * W;
    }
    return s;
}

void mb_lanes_load_p(mb_lanes* s, int np, const double* p, long stride)
{
    for (int k = 0; k < np; ++k)
        for (int l = 0; l < MB_LANES; ++l) s->p[k * MB_LANES + l] = p[l * stride + k];
}

/* q̈ (n x lanes) at (q, q̇) under the extra force e with the lanes' parameters s->p;
 * s->bad[l] |= 1 where lane l failed. evaluated: s->a and s->mv hold Φq and M at this q
 * already. */
void mb_dynamics_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s,
                       const double* q, const double* qd, const double* e, int evaluated,
                       double* qdd)
{
    const double* p = s->p;
    enum { W = MB_LANES };
    const mb_model* model = plan->model;
    const mb_kernel *kf = &model->kernel[MB_K_FORCES], *ka = &model->kernel[MB_K_PHI_Q];
    const int n = model->n, r = plan->r;
    double *b = s->b, *c = s->b + n * W;
    int bad[W];
    for (int i = 0; i < n; ++i)
        for (int l = 0; l < W; ++l)
            s->bad[l] |= !(isfinite(q[i * W + l]) && isfinite(qd[i * W + l]));
    for (int i = 0; i < n * W; ++i) b[i] = 0.0;
    if (kf->lanes) {
        kf->lanes(q, qd, p, s->f);
        for (int k = 0; k < kf->nnz; ++k)
            for (int l = 0; l < W; ++l) b[kf->row[k] * W + l] = s->f[k * W + l];
    }
    for (int i = 0; i < n * W; ++i) b[i] += e[i];
    model->kernel[MB_K_DPHIQ_QD].lanes(q, qd, p, s->dd);
    for (int k = 0; k < r; ++k)
        for (int l = 0; l < W; ++l) c[k * W + l] = -s->dd[plan->rows[k] * W + l];
    if (!evaluated) {
        ka->lanes(q, NULL, p, s->a);
        model->kernel[MB_K_MASS].lanes(q, NULL, p, s->mv);
    }
    model->kkt->factor_lanes(s->mv, s->a, options->mass_tol, options->pivot_tol, s->L, s->D,
                             s->gamma, bad);
    for (int k = 0; k < ka->nnz; ++k) {  /* as mb_sparse_rhs */
        const int row = plan->rowpos[ka->row[k]];
        if (row < 0) continue;
        double* bc = b + ka->col[k] * W;
        for (int l = 0; l < W; ++l) bc[l] += s->gamma[l] * s->a[k * W + l] * c[row * W + l];
    }
    model->kkt->solve_lanes(s->L, s->D, b);
    for (int i = 0; i < n; ++i)
        for (int l = 0; l < W; ++l) {
            qdd[i * W + l] = b[i * W + l];
            s->bad[l] |= !isfinite(b[i * W + l]);
        }
    for (int l = 0; l < W; ++l) s->bad[l] |= bad[l];
}

/* integrate() for the lanes: (s->q, s->qd) under s->e to (s->x1, s->v1), with Φq and M
 * at s->q in s->a and s->mv; s->bad[l] set where lane l failed. */
void mb_integrate_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s, int method,
                        double dt)
{
    const int nw = plan->model->n * MB_LANES;
    double *kv = s->kv, *kx = s->kx, *xs = s->xs, *sx = s->sx, *sv = s->sv;
    for (int l = 0; l < MB_LANES; ++l) s->bad[l] = 0;
    mb_dynamics_lanes(plan, options, s, s->q, s->qd, s->e, 1, kv);
    mb_copy(s->x1, s->q, nw);
    mb_copy(s->v1, s->qd, nw);
    if (method != MB_RK4) {
        mb_add_scaled(s->v1, kv, dt, nw);
        mb_add_scaled(s->x1, method == MB_EULER ? s->qd : s->v1, dt, nw);
        return;
    }
    static const double c[3] = {0.5, 0.5, 1.0}, weight[3] = {2.0, 2.0, 1.0};
    mb_copy(kx, s->qd, nw);
    mb_copy(sx, s->qd, nw);
    mb_copy(sv, kv, nw);
    for (int k = 0; k < 3; ++k) {
        for (int i = 0; i < nw; ++i) {
            xs[i] = s->q[i] + c[k] * dt * kx[i];
            kx[i] = s->qd[i] + c[k] * dt * kv[i];
        }
        mb_dynamics_lanes(plan, options, s, xs, kx, s->e, 0, kv);
        mb_add_scaled(sx, kx, weight[k], nw);
        mb_add_scaled(sv, kv, weight[k], nw);
    }
    mb_add_scaled(s->x1, sx, dt / 6.0, nw);
    mb_add_scaled(s->v1, sv, dt / 6.0, nw);
}
