/* Options, status texts, plans, workspaces and batched kernel evaluation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

/* The sparse path wins from about this many coordinates (benchmarks/scaling.py: with its
 * static factorization pattern it is as fast as the dense one at n = 4, faster above). */
#define MB_SPARSE_FROM_N 4

/* max |Φ| the position problem stops at, for a mechanism 1 m across (scaled by size²) */
#define MB_NEWTON_TOL 1e-12

void mb_default_options(mb_options* options)
{
    options->pivot_tol = 1e-10;
    options->mass_tol = 1e-12;
    options->newton_tol = MB_NEWTON_TOL;
    options->max_iter = 25;
    options->alpha = 0.0;
    options->beta = 0.0;
    options->method = MB_METHOD_AUTO;
    options->refine = 0;
}

void mb_model_options(const mb_model* model, mb_options* options)
{
    mb_default_options(options);
    options->newton_tol = MB_NEWTON_TOL * model->length * model->length;
}

double mb_length_scale(const mb_model* model)
{
    return model->length;
}

const char* mb_status_text(int status)
{
    switch (status) {
    case MB_OK: return "ok";
    case MB_SINGULAR_PHIQ:
        return "the constraint Jacobian Φq loses rank (dead point, bifurcation, or a chosen z "
               "that cannot parametrize the mechanism here)";
    case MB_SINGULAR_MASS:
        return "the mass matrix is singular on the motion subspace (RᵀMR not positive "
               "definite)";
    case MB_NO_CONVERGENCE: return "Newton iterations did not converge";
    case MB_INCONSISTENT:
        return "constraint rows that are redundant at q0 do not hold at the solution: the "
               "model is over-constrained (its constraints contradict each other), or Newton "
               "reached an assembly mode where the redundancy is lost (start from a closer "
               "guess)";
    case MB_NOT_FINITE: return "an input or an intermediate result is not finite";
    case MB_BAD_ARGUMENT: return "sizes or coordinate indices do not fit the mechanism";
    case MB_NO_MEMORY: return "out of memory";
    default: return "unknown status";
    }
}

int mb_model_size(const mb_model* model, int what)
{
    return what == 0 ? model->n : what == 1 ? model->m : what == 2 ? model->np : -1;
}

int mb_kernel_nnz(const mb_model* model, int kernel)
{
    return kernel >= 0 && kernel < MB_KERNEL_COUNT ? model->kernel[kernel].nnz : -1;
}

int mb_eval(const mb_model* model, int kernel, long count, const double* q, long q_stride,
            const double* x, long x_stride, const double* p, long p_stride, double* out)
{
    if (kernel < 0 || kernel >= MB_KERNEL_COUNT) return MB_BAD_ARGUMENT;
    const mb_kernel* k = &model->kernel[kernel];
    if (!k->eval) return MB_OK;
    for (long s = 0; s < count; ++s)
        k->eval(q + s * q_stride, x ? x + s * x_stride : NULL, p + s * p_stride,
                out + s * k->nnz);
    return MB_OK;
}

int mb_eval_dense(const mb_model* model, int kernel, long count, const double* q,
                  long q_stride, const double* x, long x_stride, const double* p,
                  long p_stride, int rows, int cols, double* out)
{
    if (kernel < 0 || kernel >= MB_KERNEL_COUNT) return MB_BAD_ARGUMENT;
    const mb_kernel* k = &model->kernel[kernel];
    const long size = (long)rows * cols;
    for (int e = 0; e < k->nnz; ++e)
        if (k->row[e] >= rows || (k->col ? k->col[e] : 0) >= cols) return MB_BAD_ARGUMENT;
    double small[64];
    double* values = k->nnz <= 64 ? small : (double*)malloc(sizeof(double) * (size_t)k->nnz);
    if (!values) return MB_NO_MEMORY;
    for (long s = 0; s < count; ++s) {
        double* dst = out + s * size;
        memset(dst, 0, sizeof(double) * (size_t)size);
        if (!k->eval) continue;
        k->eval(q + s * q_stride, x ? x + s * x_stride : NULL, p + s * p_stride, values);
        for (int e = 0; e < k->nnz; ++e)
            dst[(long)k->row[e] * cols + (k->col ? k->col[e] : 0)] = values[e];
    }
    if (values != small) free(values);
    return MB_OK;
}

int mb_eval_dense_set(const mb_model* model, int count, const int* kernel, const double* q,
                      double** x, const double* p, const int* rows, const int* cols,
                      double** out)
{
    for (int k = 0; k < count; ++k) {
        const int st = mb_eval_dense(model, kernel[k], 1, q, 0, x[k], 0, p, 0, rows[k],
                                     cols[k], out[k]);
        if (st) return st;
    }
    return MB_OK;
}

mb_plan* mb_plan_new(const mb_model* model, const int* rows, int nrows)
{
    if (nrows < 0 || nrows > model->m || nrows > model->n) return NULL;
    mb_plan* plan = (mb_plan*)calloc(1, sizeof(mb_plan));
    if (!plan) return NULL;
    plan->model = model;
    plan->r = nrows;
    plan->d = model->n - nrows;
    plan->rows = (int*)malloc(sizeof(int) * ((size_t)nrows + 1));
    plan->rowpos = (int*)malloc(sizeof(int) * ((size_t)model->m + 1));
    if (!plan->rows || !plan->rowpos) { mb_plan_free(plan); return NULL; }
    for (int i = 0; i < model->m; ++i) plan->rowpos[i] = -1;
    for (int k = 0; k < nrows; ++k) {
        if (rows[k] < 0 || rows[k] >= model->m || plan->rowpos[rows[k]] >= 0) {
            mb_plan_free(plan);
            return NULL;
        }
        plan->rows[k] = rows[k];
        plan->rowpos[rows[k]] = k;
    }
    if (mb_sparse_analyze(plan) != MB_OK) { mb_plan_free(plan); return NULL; }
    /* the rows and elimination order the compiler unrolled for (its L fits the generic
     * one's memory, being the factor of a sub-pattern in the same order) */
    const mb_kkt* kkt = model->kkt;
    plan->unrolled = kkt && nrows == kkt->r && kkt->nnz_l <= plan->sp.nnz_l;
    for (int k = 0; plan->unrolled && k < nrows; ++k) plan->unrolled = rows[k] == kkt->rows[k];
    for (int k = 0; plan->unrolled && k < kkt->size; ++k)
        plan->unrolled = plan->sp.perm[k] == kkt->perm[k];
    if (plan->unrolled) {
        const mb_kernel* mass = &model->kernel[MB_K_MASS];
        int diagonals = 0;
        plan->identity = (double*)calloc((size_t)mass->nnz + 1, sizeof(double));
        if (!plan->identity) { mb_plan_free(plan); return NULL; }
        for (int e = 0; e < mass->nnz; ++e)
            if (mass->row[e] == mass->col[e]) { plan->identity[e] = 1.0; diagonals++; }
        if (diagonals < model->n) { free(plan->identity); plan->identity = NULL; }
    }
    return plan;
}

void mb_plan_free(mb_plan* plan)
{
    if (!plan) return;
    mb_sparse_release(&plan->sp);
    free(plan->identity);
    free(plan->rows);
    free(plan->rowpos);
    free(plan);
}

int mb_plan_uses_sparse(const mb_plan* plan, const mb_options* options)
{
    if (options->method == MB_METHOD_DENSE) return 0;
    if (options->method != MB_METHOD_AUTO) return 1;
    return plan->unrolled || plan->model->n >= MB_SPARSE_FROM_N;
}

int mb_plan_uses_unrolled(const mb_plan* plan, const mb_options* options)
{
    return mb_unrolled_applies(plan, options);
}

int mb_plan_factor_size(const mb_plan* plan)
{
    return plan->sp.nnz_l;
}

/* Carve one allocation into the workspace's arrays (each 8-byte aligned). */
typedef struct { char* base; size_t used; } arena;

static void* take(arena* a, size_t bytes)
{
    void* p = a->base ? a->base + a->used : NULL;
    a->used += (bytes + 15) & ~(size_t)15;
    return p;
}

static void layout(mb_ws* w, arena* a, int flags)
{
    const mb_model* model = w->model;
    const size_t n = (size_t)w->n, r = (size_t)w->r, N = n + r, m = (size_t)w->m;
    const size_t nnz_l = (size_t)w->plan->sp.nnz_l + 1, nnz_k = (size_t)w->plan->sp.nnz_k + 1;
    const size_t D = sizeof(double), I = sizeof(int);
    const size_t wide = n > r ? n : r, d = (size_t)w->d;
    const int dense = (flags & MB_WS_DENSE) || !mb_plan_uses_sparse(w->plan, w->opt);
    for (int k = 0; k < MB_KERNEL_COUNT; ++k)
        w->kv[k] = (double*)take(a, D * ((size_t)model->kernel[k].nnz + 1));
    w->Q = (double*)take(a, D * n);
    w->c = (double*)take(a, D * (r + 1));
    w->qdd = (double*)take(a, D * n);
    w->lam = (double*)take(a, D * (m + 1));
    w->tmp_n = (double*)take(a, D * (N + 1));
    w->tmp_n2 = (double*)take(a, D * (N + 1));
    w->tmp_r = (double*)take(a, D * (r + 1));
    w->residual = (double*)take(a, D * (r + 1));
    w->Sc = (double*)take(a, D * n);
    w->A = (double*)take(a, D * (r * n + 1));
    w->LU = (double*)take(a, D * (r * n + 1));
    w->F = (double*)take(a, D * (r * r + 1));
    w->R = (double*)take(a, D * (n * d + 1));
    if (dense) {  /* the null-space dynamics' blocks */
        w->Kd = (double*)take(a, D * (d * d + 1));
        w->V = (double*)take(a, D * (n * wide + 1));
        w->W = (double*)take(a, D * (n * wide + 1));
    }
    w->prow = (int*)take(a, I * (r + 1));
    w->pcol = (int*)take(a, I * n);
    w->allowed = (int*)take(a, I * n);
    w->ind = (int*)take(a, I * n);
    w->akkt = (double*)take(a, D * ((size_t)model->kernel[MB_K_PHI_Q].nnz + 1));
    w->aux = (double*)take(a, D * ((size_t)model->kernel[MB_K_PHIQ_V_Q].nnz + 1));
    w->Kx = (double*)take(a, D * nnz_k);
    w->Lx = (double*)take(a, D * nnz_l);
    w->D = (double*)take(a, D * N);
    w->y = (double*)take(a, D * N);
    w->x = (double*)take(a, D * N);
    w->res = (double*)take(a, D * N);
    w->held = (int*)take(a, I * n);
    if (model->joint_d) {  /* joint_space.c: Mz's factor and inverse, a right-hand side,
                              the parameters of the constants */
        const size_t j = (size_t)model->joint_d;
        w->joint = (double*)take(a, D * (3 * j * j + (size_t)model->np + 1));
    }
    if (flags & MB_WS_JACOBIANS) {
        if (dense) {
            w->X = (double*)take(a, D * n * n);
            w->Y = (double*)take(a, D * (r * n + 1));
            w->T = (double*)take(a, D * n * wide);
            w->G = (double*)take(a, D * (n * r + 1));
        }
        /* K⁻¹: the unrolled and dense paths write it in Z, the generic sparse path in X2,
         * never both in one state, so they share the memory */
        w->Z = (double*)take(a, D * N * N);
        w->X2 = w->Z;
        w->JT = (double*)take(a, D * n * N);
        /* the most entries one Jacobian's terms can have (dynamics.c, jacobian_terms) */
        const mb_kernel* K = model->kernel;
        const size_t entries = (size_t)K[MB_K_FORCES_Q].nnz + K[MB_K_MASS_V_Q].nnz +
                               K[MB_K_PHIQT_LAM_Q].nnz + K[MB_K_DPHIQ_QD_Q].nnz +
                               2 * (size_t)K[MB_K_PHIQ_V_Q].nnz + K[MB_K_PHI_Q].nnz +
                               K[MB_K_FORCES_QD].nnz + K[MB_K_DPHIQ_QD_QD].nnz + 1;
        w->jrow = (const double**)take(a, sizeof(double*) * entries);
        w->jcoef = (double*)take(a, D * entries);
        w->jstart = (int*)take(a, I * (n + 2));
    }
}

mb_ws* mb_ws_new(const mb_plan* plan, const mb_options* opt, int flags)
{
    mb_ws probe;
    memset(&probe, 0, sizeof(probe));
    probe.plan = plan;
    probe.model = plan->model;
    probe.n = plan->model->n;
    probe.m = plan->model->m;
    probe.r = plan->r;
    probe.d = plan->d;
    probe.opt = opt;
    arena a = {NULL, 0};
    layout(&probe, &a, flags);
    mb_ws* w = (mb_ws*)malloc(sizeof(mb_ws));
    char* block = (char*)calloc(1, a.used + 16);
    if (!w || !block) { free(w); free(block); return NULL; }
    *w = probe;
    w->opt = opt;
    a.base = block;
    a.used = 0;
    layout(w, &a, flags);
    return w;
}

void mb_ws_free(mb_ws* w)
{
    if (!w) return;
    free(w->lanes);
    free(w->lane_jacobians);
    mb_ws_free(w->kinematics);
    free(w->kv[0]);  /* the block starts with the first kernel's values */
    free(w);
}

mb_workspace* mb_workspace_new(const mb_plan* plan, const mb_options* options, int jacobians)
{
    /* either path: the options may change between calls */
    return mb_ws_new(plan, options, MB_WS_DENSE | (jacobians ? MB_WS_JACOBIANS : 0));
}

void mb_workspace_free(mb_workspace* workspace)
{
    mb_ws_free(workspace);
}
