/* Discrete-time steppers that solve a KKT system per step: the variational integrator
 * and SPOOK (at the end of the file).
 *
 * Variational integrator: the discrete Euler–Lagrange equations of the trapezoidal discrete
 * Lagrangian with the holonomic constraints enforced by multipliers at every step
 * (RATTLE-type), forces by the discrete Lagrange–d'Alembert principle.
 *
 * M is constant in natural coordinates, so with v = (q1 - q0) / h one step is
 *
 *   (A)  M (v - q̇0) - h/2 (Q(q0, v) + Qext0) + Φq(q0)ᵀ Λ = 0,   Φ(q0 + h v) / h = 0
 *   (B)  M q̇1 + Φq(q1)ᵀ Μ = M v + h/2 (Q(q1, v) + Qext1),          Φq(q1) q̇1 = 0
 *
 * (A) is n + r equations in (v, Λ), (B) one linear KKT solve. With p = M q̇ they are the
 * position-momentum form of D2 Ld(q-1, q0) + D1 Ld(q0, q1) + f⁺ + f⁻ = Φq(q0)ᵀ(Μ + Λ) for
 * Ld = h (½ vᵀ M v) - h/2 (V(q0) + V(q1)) and the forces f∓ = h/2 F(q0|q1, v); for
 * conservative forces it is RATTLE: symplectic, and it keeps every momentum the
 * constraints and forces keep.
 *
 * Root finding of (A), on the active rows of the plan:
 * - Newton with the exact Jacobian  J = [M - h/2 ∂Q/∂q̇(q0, v)   Φq(q0)ᵀ]
 *                                       [Φq(q1)                  0      ],
 *   unsymmetric (Φq at both ends of the step), factored as L D U on the static pattern of
 *   the symmetric KKT matrix (sparse.c; ∂Q/∂q̇ is part of that pattern) in its elimination
 *   order: O(n) on chains and trees. As for the dynamics, H gains γ Φq(q0)ᵀ Φq(q1) with
 *   the right-hand side [r1 + γ Φq(q0)ᵀ r2; r2], which makes massless coordinates pivot.
 * - Quasi-Newton with J ≈ K(q0) = [M  Φq(q0)ᵀ; Φq(q0)  0]: the matrix of the previous
 *   step's (B), so one symmetric factorization per step serves (B) and every iteration of
 *   the next (A). It is the impulse-based update of Lee et al. (Δq = h M⁻¹ e) with the
 *   constraints added; it converges linearly at a rate of order h.
 * - The dense path (options->method dense) solves the same systems by LU with partial
 *   pivoting: the O(n³) baseline.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

typedef struct {
    const mb_plan* plan;
    const mb_model* model;
    const mb_options* opt;
    mb_ws* w;            /* the symmetric factorization of (B) and its kernel values */
    int n, r, N, sparse;
    double *mass, *B, *A, *damp, *Q;  /* M, Φq(q0), Φq(q1), ∂Q/∂q̇, Q */
    double *q1, *phi, *res, *dx, *rhs;
    /* sparse Newton: L D U of J */
    double *Ku, *Kl, *Lx, *Ux, *Dg, *y, *x;
    int *mass_slot, *damp_slot, *a_slot, *b_slot, *ata_ab, *ata_ba;  /* slot * 2 + lower */
    /* dense path */
    double *J, *K;
    int *pivJ, *pivK;
} vi;

static void vi_free(vi* s)
{
    mb_ws_free(s->w);
    free(s->mass);
    free(s->mass_slot);
    memset(s, 0, sizeof(*s));
}

/* Where entry (node_i, node_j) of J lives: its slot, and whether it is below the diagonal
 * (in Kl) in the elimination order. */
static int locate(const mb_sparse* sp, int node_i, int node_j)
{
    const int s = mb_sparse_slot(sp, node_i, node_j);
    return 2 * s + (sp->iperm[node_i] > sp->iperm[node_j]);
}

static int vi_init(vi* s, const mb_plan* plan, const mb_options* opt)
{
    memset(s, 0, sizeof(*s));
    const mb_model* model = plan->model;
    const mb_sparse* sp = &plan->sp;
    const mb_kernel* km = &model->kernel[MB_K_MASS];
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* kd = &model->kernel[MB_K_FORCES_QD];
    s->plan = plan;
    s->model = model;
    s->opt = opt;
    s->n = model->n;
    s->r = plan->r;
    s->N = s->n + s->r;
    s->sparse = mb_plan_uses_sparse(plan, opt);
    const size_t n = (size_t)s->n, N = (size_t)s->N, m = (size_t)model->m;
    const size_t dense = s->sparse ? 0 : 2 * N * N;
    const size_t sparse = s->sparse ? 2 * (size_t)sp->nnz_k + 2 * (size_t)sp->nnz_l + 3 * N : 0;
    const size_t doubles = (size_t)km->nnz + 2 * (size_t)ka->nnz + (size_t)kd->nnz + n
                           + n + m + 3 * N + N + sparse + dense + 8;
    const size_t ints = s->sparse ? (size_t)km->nnz + (size_t)kd->nnz + 2 * (size_t)ka->nnz
                                    + 2 * (size_t)sp->ata_count + 6
                                  : 2 * N + 2;
    s->w = mb_ws_new(plan, opt, 0);
    s->mass = (double*)calloc(doubles, sizeof(double));
    s->mass_slot = (int*)calloc(ints, sizeof(int));
    if (!s->w || !s->mass || !s->mass_slot) { vi_free(s); return MB_NO_MEMORY; }
    double* d = s->mass + km->nnz + 1;
    s->B = d; d += ka->nnz + 1;
    s->A = d; d += ka->nnz + 1;
    s->damp = d; d += kd->nnz + 1;
    s->Q = d; d += n;
    s->q1 = d; d += n;
    s->phi = d; d += m + 1;
    s->res = d; d += N;
    s->dx = d; d += N;
    s->rhs = d; d += N;
    if (s->sparse) {
        s->Ku = d; d += sp->nnz_k;
        s->Kl = d; d += sp->nnz_k;
        s->Lx = d; d += sp->nnz_l;
        s->Ux = d; d += sp->nnz_l;
        s->Dg = d; d += N;
        s->y = d; d += N;
        s->x = d;
        int* slots = s->mass_slot;
        s->damp_slot = slots + km->nnz + 1;
        s->a_slot = s->damp_slot + kd->nnz + 1;
        s->b_slot = s->a_slot + ka->nnz + 1;
        s->ata_ab = s->b_slot + ka->nnz + 1;
        s->ata_ba = s->ata_ab + sp->ata_count + 1;
        for (int e = 0; e < km->nnz; ++e) slots[e] = locate(sp, km->row[e], km->col[e]);
        for (int e = 0; e < kd->nnz; ++e)
            s->damp_slot[e] = locate(sp, kd->row[e], kd->col[e]);
        for (int e = 0; e < ka->nnz; ++e) {
            const int k = plan->rowpos[ka->row[e]];
            s->a_slot[e] = k >= 0 ? locate(sp, s->n + k, ka->col[e]) : -1;
            s->b_slot[e] = k >= 0 ? locate(sp, ka->col[e], s->n + k) : -1;
        }
        for (int t = 0; t < sp->ata_count; ++t) {
            const int c1 = ka->col[sp->ata_k1[t]], c2 = ka->col[sp->ata_k2[t]];
            s->ata_ab[t] = locate(sp, c1, c2);
            s->ata_ba[t] = c1 == c2 ? -1 : locate(sp, c2, c1);
        }
    } else {
        s->J = d; d += N * N;
        s->K = d;
        s->pivJ = s->mass_slot;
        s->pivK = s->mass_slot + N + 1;
    }
    return MB_OK;
}

static void add(double* Ku, double* Kl, int where, double value)
{
    if (where & 1) Kl[where >> 1] += value;
    else Ku[where >> 1] += value;
}

/* out (n) = M x */
static void mass_times(const vi* s, const double* x, double* out)
{
    const mb_kernel* km = &s->model->kernel[MB_K_MASS];
    memset(out, 0, sizeof(double) * (size_t)s->n);
    for (int e = 0; e < km->nnz; ++e) out[km->row[e]] += s->mass[e] * x[km->col[e]];
}

/* out (n) += Φq(q0)ᵀ lam over the active rows (values in s->B) */
static void add_constraint_forces(const vi* s, const double* lam, double* out)
{
    const mb_kernel* ka = &s->model->kernel[MB_K_PHI_Q];
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k >= 0) out[ka->col[e]] += s->B[e] * lam[k];
    }
}

/* Residual (N) of (A) at (v, Λ): the state's M and Φq(q0) are in s->mass and s->B. */
static int residual(vi* s, const double* q0, const double* qd0, const double* Qext,
                    const double* p, double h, const double* v, const double* lam, double* res)
{
    const int n = s->n;
    for (int i = 0; i < n; ++i) {
        s->q1[i] = q0[i] + h * v[i];
        s->dx[i] = v[i] - qd0[i];
    }
    mb_eval_one(s->model, MB_K_FORCES, q0, v, p, s->Q);
    mass_times(s, s->dx, res);
    for (int i = 0; i < n; ++i) res[i] -= 0.5 * h * (s->Q[i] + (Qext ? Qext[i] : 0.0));
    add_constraint_forces(s, lam, res);
    mb_eval_one(s->model, MB_K_PHI, s->q1, NULL, p, s->phi);
    for (int k = 0; k < s->r; ++k) res[n + k] = s->phi[s->plan->rows[k]] / h;
    return mb_all_finite(res, s->N) ? MB_OK : MB_NOT_FINITE;
}

/* The values J needs beyond M and Φq(q0): Φq(q1) and ∂Q/∂q̇(q0, v). */
static void newton_kernels(vi* s, const double* q0, const double* v, const double* p)
{
    mb_eval_one(s->model, MB_K_PHI_Q, s->q1, NULL, p, s->A);
    mb_eval_one(s->model, MB_K_FORCES_QD, q0, v, p, s->damp);
}

/* Dense J (N x N, node order) at the last residual's (q0, v, q1). */
static void dense_jacobian(vi* s, const double* q0, const double* v, const double* p,
                           double h, double* J)
{
    const mb_model* model = s->model;
    const mb_kernel* km = &model->kernel[MB_K_MASS];
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* kd = &model->kernel[MB_K_FORCES_QD];
    const int n = s->n, N = s->N;
    newton_kernels(s, q0, v, p);
    memset(J, 0, sizeof(double) * (size_t)N * N);
    for (int e = 0; e < km->nnz; ++e) J[km->row[e] * N + km->col[e]] += s->mass[e];
    for (int e = 0; e < kd->nnz; ++e) J[kd->row[e] * N + kd->col[e]] -= 0.5 * h * s->damp[e];
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k < 0) continue;
        J[ka->col[e] * N + n + k] += s->B[e];
        J[(n + k) * N + ka->col[e]] += s->A[e];
    }
}

/* Scale of M and the squared norm of the largest active row of Φq: γ of the augmentation. */
static double augmentation(const vi* s, const double* a, double* scale)
{
    const mb_kernel* km = &s->model->kernel[MB_K_MASS];
    const mb_kernel* ka = &s->model->kernel[MB_K_PHI_Q];
    double hmax = 0.0, amax2 = 0.0;
    for (int e = 0; e < km->nnz; ++e)
        if (km->row[e] == km->col[e] && s->mass[e] > hmax) hmax = s->mass[e];
    double* norm2 = s->w->tmp_r;
    memset(norm2, 0, sizeof(double) * (size_t)s->r);
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k >= 0) norm2[k] += a[e] * a[e];
    }
    for (int k = 0; k < s->r; ++k) if (norm2[k] > amax2) amax2 = norm2[k];
    *scale = hmax > 0.0 ? hmax : 1.0;
    return s->r > 0 && amax2 > 0.0 ? *scale / amax2 : 0.0;
}

/* Sparse Newton: dx = J⁻¹ res by L D U of the augmented J. */
static int sparse_newton_solve(vi* s, const double* q0, const double* v, const double* p,
                               double h)
{
    const mb_model* model = s->model;
    const mb_sparse* sp = &s->plan->sp;
    const mb_kernel* km = &model->kernel[MB_K_MASS];
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* kd = &model->kernel[MB_K_FORCES_QD];
    const int n = s->n, N = s->N;
    newton_kernels(s, q0, v, p);
    double scale;
    const double gamma = augmentation(s, s->B, &scale);
    double *Ku = s->Ku, *Kl = s->Kl;
    memset(Ku, 0, sizeof(double) * (size_t)sp->nnz_k);
    memset(Kl, 0, sizeof(double) * (size_t)sp->nnz_k);
    for (int e = 0; e < km->nnz; ++e) add(Ku, Kl, s->mass_slot[e], s->mass[e]);
    for (int e = 0; e < kd->nnz; ++e) add(Ku, Kl, s->damp_slot[e], -0.5 * h * s->damp[e]);
    for (int e = 0; e < ka->nnz; ++e)
        if (s->a_slot[e] >= 0) {
            add(Ku, Kl, s->a_slot[e], s->A[e]);
            add(Ku, Kl, s->b_slot[e], s->B[e]);
        }
    for (int t = 0; t < sp->ata_count; ++t) {
        const int e1 = sp->ata_k1[t], e2 = sp->ata_k2[t];
        add(Ku, Kl, s->ata_ab[t], gamma * s->B[e1] * s->A[e2]);
        if (s->ata_ba[t] >= 0) add(Ku, Kl, s->ata_ba[t], gamma * s->B[e2] * s->A[e1]);
    }
    mb_sparse_ldu(sp, Ku, Kl, s->Lx, s->Ux, s->Dg, s->y, s->x);
    for (int k = 0; k < N; ++k) {
        const double d = s->Dg[k];
        if (d != d) return MB_NOT_FINITE;
        if (sp->perm[k] < n ? !(d > s->opt->mass_tol * scale)
                            : !(-d * gamma > s->opt->pivot_tol))
            return sp->perm[k] < n ? MB_SINGULAR_MASS : MB_SINGULAR_PHIQ;
    }
    /* right-hand side [r1 + γ Φq(q0)ᵀ r2; r2], permuted */
    memcpy(s->rhs, s->res, sizeof(double) * (size_t)N);
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k >= 0) s->rhs[ka->col[e]] += gamma * s->B[e] * s->res[n + k];
    }
    double* y = s->y;
    for (int i = 0; i < N; ++i) y[i] = s->rhs[sp->perm[i]];
    mb_sparse_ldu_solve(sp, s->Lx, s->Ux, s->Dg, y);
    for (int i = 0; i < N; ++i) {
        s->dx[sp->perm[i]] = y[i];
        y[i] = 0.0;
    }
    return MB_OK;
}

/* Factor K(q) = [M Φq(q)ᵀ; Φq(q) -Σ] with Φq values `a` ((B), the quasi-Newton, and
 * SPOOK's velocity update; sigma (r) NULL: Σ = 0). */
static int factor_kkt(vi* s, const double* q, const double* a, const double* p,
                      const double* sigma)
{
    if (s->sparse) {
        memcpy(s->w->kv[MB_K_PHI_Q], a,
               sizeof(double) * (size_t)s->model->kernel[MB_K_PHI_Q].nnz);
        return mb_sparse_factor(s->w, q, p, 0, NULL, 0, sigma);
    }
    const mb_kernel* km = &s->model->kernel[MB_K_MASS];
    const mb_kernel* ka = &s->model->kernel[MB_K_PHI_Q];
    const int n = s->n, N = s->N;
    double* K = s->K;
    memset(K, 0, sizeof(double) * (size_t)N * N);
    for (int e = 0; e < km->nnz; ++e) K[km->row[e] * N + km->col[e]] += s->mass[e];
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k < 0) continue;
        K[ka->col[e] * N + n + k] += a[e];
        K[(n + k) * N + ka->col[e]] += a[e];
    }
    for (int k = 0; sigma && k < s->r; ++k) K[(n + k) * N + n + k] = -sigma[k];
    return mb_lu_factor(K, N, s->pivK, 1e-13);
}

/* x (N) = K⁻¹ [f; c] with the last factor_kkt (c NULL: 0). */
static void solve_kkt(vi* s, const double* f, const double* c, double* x)
{
    const int n = s->n, N = s->N;
    if (s->sparse) {
        double* zero = s->w->tmp_r;
        if (!c) memset(zero, 0, sizeof(double) * (size_t)s->r);
        mb_sparse_rhs(s->w, f, c ? c : zero, s->rhs);
        mb_sparse_solve(s->w, s->rhs, x);
        return;
    }
    memcpy(x, f, sizeof(double) * (size_t)n);
    if (c) memcpy(x + n, c, sizeof(double) * (size_t)s->r);
    else memset(x + n, 0, sizeof(double) * (size_t)s->r);
    mb_lu_solve(s->K, N, s->pivK, x, 1);
}

/* One step from (q0, q̇0) whose M and Φq(q0) are in s->mass, s->B, and (quasi-Newton)
 * whose K(q0) is factored. v, lam: guess in, solution out. Leaves K(q1) factored and
 * Φq(q1) in s->B for the next step. */
static int vi_step(vi* s, const double* q0, const double* qd0, const double* Qext0,
                   const double* Qext1, const double* p, double h, int newton, double* v,
                   double* lam, double* q1, double* qd1, int* iterations)
{
    const int n = s->n, N = s->N;
    int st = MB_OK, it = 0, converged = 0;
    *iterations = 0;
    for (it = 0; it < s->opt->max_iter && !converged; ++it) {
        if ((st = residual(s, q0, qd0, Qext0, p, h, v, lam, s->res))) return st;
        if (!newton) {
            solve_kkt(s, s->res, s->res + n, s->dx);
        } else if (s->sparse) {
            if ((st = sparse_newton_solve(s, q0, v, p, h))) return st;
        } else {
            dense_jacobian(s, q0, v, p, h, s->J);
            if ((st = mb_lu_factor(s->J, N, s->pivJ, 1e-13))) return st;
            memcpy(s->dx, s->res, sizeof(double) * (size_t)N);
            mb_lu_solve(s->J, N, s->pivJ, s->dx, 1);
        }
        double step = 0.0;
        for (int i = 0; i < n; ++i) {
            v[i] -= s->dx[i];
            if (fabs(h * s->dx[i]) > step) step = fabs(h * s->dx[i]);
        }
        for (int k = 0; k < s->r; ++k) lam[k] -= s->dx[n + k];
        if (!(step == step)) return MB_NOT_FINITE;
        /* the step is a length, newton_tol a length squared (size² × 1e-12): the same
         * relative tolerance is newton_tol / size */
        converged = step <= s->opt->newton_tol / s->model->length;
    }
    *iterations = it;
    if (!converged) return MB_NO_CONVERGENCE;
    /* (B): the new velocities, and K(q1) for the next step */
    for (int i = 0; i < n; ++i) q1[i] = q0[i] + h * v[i];
    mb_eval_one(s->model, MB_K_PHI_Q, q1, NULL, p, s->B);
    if ((st = factor_kkt(s, q1, s->B, p, NULL))) return st;
    mb_eval_one(s->model, MB_K_FORCES, q1, v, p, s->Q);
    mass_times(s, v, s->res);
    for (int i = 0; i < n; ++i) s->res[i] += 0.5 * h * (s->Q[i] + (Qext1 ? Qext1[i] : 0.0));
    solve_kkt(s, s->res, NULL, s->dx);
    memcpy(qd1, s->dx, sizeof(double) * (size_t)n);
    return mb_all_finite(qd1, n) ? MB_OK : MB_NOT_FINITE;
}

/* M and Φq at the first state, and K(q0) factored for the quasi-Newton. */
static int vi_start(vi* s, const double* q0, const double* p)
{
    mb_eval_one(s->model, MB_K_MASS, q0, NULL, p, s->mass);
    mb_eval_one(s->model, MB_K_PHI_Q, q0, NULL, p, s->B);
    return factor_kkt(s, q0, s->B, p, NULL);
}

/* q̈ of the dynamics at the states 0..last of a run (nothing when wd is NULL); returns the
 * run's status st, or else the first failure among them (its state in *failed_step). */
static int run_accelerations(mb_ws* wd, long last, const double* q, const double* qd,
                             const double* Qtable, const double* p, int n, double* qdd,
                             int st, long* failed_step)
{
    for (long j = 0; wd && j <= last; ++j) {
        const int sj = mb_dynamics_one(wd, q + j * n, qd + j * n,
                                       Qtable ? Qtable + 2 * j * n : NULL, p, qdd + j * n,
                                       NULL, 0);
        if (sj && !st) { st = sj; *failed_step = j; }
    }
    return st;
}

/* Generalized forces at u half steps into the run (rows 0..rows-1 of the table): cubic
 * through the four nearest rows (exact to O(dt⁴), which the order-4 stages need; linear
 * with fewer rows), extrapolated from the last rows beyond the table; NULL without one. */
static const double* forces_at(const double* table, long rows, int n, double u, double* buf)
{
    if (!table) return NULL;
    const int points = rows >= 4 ? 4 : (rows >= 2 ? 2 : 1);
    long first = (long)floor(u) - (points == 4 ? 1 : 0);
    if (first > rows - points) first = rows - points;
    if (first < 0) first = 0;
    double weight[4];
    for (int a = 0; a < points; ++a) {
        weight[a] = 1.0;
        for (int b = 0; b < points; ++b)
            if (b != a) weight[a] *= (u - (double)(first + b)) / (double)(a - b);
    }
    for (int j = 0; j < n; ++j) {
        double value = 0.0;
        for (int a = 0; a < points; ++a) value += weight[a] * table[(first + a) * n + j];
        buf[j] = value;
    }
    return buf;
}

int mb_simulate_variational(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, int newton, int order, double dt, long nsteps,
    const double* Qtable, double* out_q, double* out_qd, double* out_qdd, int* iterations,
    long* failed_step)
{
    /* order 4: the symmetric triple jump of Yoshida (1990) of the order-2 step */
    const double cube = cbrt(2.0), outer = 1.0 / (2.0 - cube), inner = -cube / (2.0 - cube);
    const double fraction[3] = {outer, inner, outer};
    const int stages = order == 4 ? 3 : 1;
    const int n = plan->model->n;
    *failed_step = -1;
    if (!(fabs(dt) > 0.0 && fabs(dt) < INFINITY) || nsteps < 0 || (order != 2 && order != 4))
        return MB_BAD_ARGUMENT;
    vi s;
    int st = vi_init(&s, plan, options);
    if (st) return st;
    mb_ws* wd = out_qdd ? mb_ws_new(plan, options, 0) : NULL;
    double* v = (double*)calloc(8 * (size_t)n + (size_t)plan->r + 1, sizeof(double));
    if ((out_qdd && !wd) || !v) {
        vi_free(&s); mb_ws_free(wd); free(v);
        return MB_NO_MEMORY;
    }
    double* accel = v + n;  /* the last stage's mean acceleration: the next guess */
    double *qa = accel + n, *qda = qa + n, *qb = qda + n, *qdb = qb + n;
    double *F0 = qdb + n, *F1 = F0 + n;
    double* lam = F1 + n;
    const long rows = 2 * nsteps + 1;
    memcpy(out_q, q0, sizeof(double) * (size_t)n);
    memcpy(out_qd, qd0, sizeof(double) * (size_t)n);
    st = vi_start(&s, q0, p);
    long k = 0;
    for (k = 0; k < nsteps && !st; ++k) {
        const double* q = out_q + k * n;
        const double* qd = out_qd + k * n;
        double at = 0.0;  /* fraction of the step done */
        int its = 0;
        for (int stage = 0; stage < stages && !st; ++stage) {
            const double h = (stages == 1 ? 1.0 : fraction[stage]) * dt;
            double* qn = stage == stages - 1 ? out_q + (k + 1) * n : (stage ? qb : qa);
            double* qdn = stage == stages - 1 ? out_qd + (k + 1) * n : (stage ? qdb : qda);
            const double next = at + h / dt;
            for (int i = 0; i < n; ++i) v[i] = qd[i] + 0.5 * h * accel[i];
            int used = 0;
            st = vi_step(&s, q, qd, forces_at(Qtable, rows, n, 2.0 * (k + at), F0),
                         forces_at(Qtable, rows, n, 2.0 * (k + next), F1), p, h, newton, v,
                         lam, qn, qdn, &used);
            its += used;
            for (int i = 0; i < n; ++i) accel[i] = (qdn[i] - qd[i]) / h;
            q = qn;
            qd = qdn;
            at = next;
        }
        if (iterations) iterations[k] = its;
    }
    if (st) *failed_step = k > 0 ? k - 1 : 0;  /* the step that did not finish */
    st = run_accelerations(wd, st ? k - 1 : nsteps, out_q, out_qd, Qtable, p, n, out_qdd, st,
                           failed_step);
    vi_free(&s);
    mb_ws_free(wd);
    free(v);
    return st;
}

/* SPOOK (Lacoursière 2007): the regularized, semi-implicit stepper of the identification
 * paper. Per active row a compliance ε and a damping time τ give Υ = 1 / (1 + 4τ/h) and
 * Σ = 4 ε Υ / h²; the velocity update is
 *     [M  Φqᵀ; Φq  -Σ] [v₁; μ] = [M v + h (Q(q, v) + Qext); -(4/h) Υ Φ(q) + Υ Φq v]
 * at (q, v) (μ = -λ_SPOOK: mbgen's sign, an impulse), then q₁ = q + h v₁. Σ makes the
 * constraints springs of stiffness 1/ε (critically damped over τ); ε = 0 keeps them
 * stiff, stabilized like Baumgarte's method. */
/* Dry friction of a SPOOK run: per element the coordinate, the bound c of its force and
 * the stiction rate s; scratch for the box problem. */
typedef struct {
    int nf;
    const int* index;
    const double* bound;
    const double* stiction;
    double *Y, *G, *lu, *d, *vfree, *col;  /* Y: nf columns of K⁻¹ [e_j; 0] (N each) */
    int *state, *piv;                      /* state: -1 lower bound, 0 inside, +1 upper */
} spook_friction;

/* Impulses d (nf) of the box problem with A = G + diag(s / b), b = h c (the bounds):
 * A d + v = g with g_j = 0 inside (|d_j| < b_j), g_j <= 0 at d_j = +b_j, g_j >= 0 at
 * d_j = -b_j - the exact regularized Coulomb law d_j = -h c_j sat(v⁺_j / s_j). A is SPD,
 * so the solution is unique: block principal pivoting from the last step's active set,
 * then (should it cycle) enumeration of every active set. */
static int box_state_solves(spook_friction* f, const double* b, const double* v)
{
    const int nf = f->nf;
    int nfree = 0, map[64];
    for (int i = 0; i < nf; ++i) {
        if (f->state[i]) f->d[i] = f->state[i] * b[i];
        else map[nfree++] = i;
    }
    for (int a = 0; a < nfree; ++a) {
        const int i = map[a];
        double rhs = -v[i];
        for (int j = 0; j < nf; ++j)
            if (f->state[j]) rhs -= f->G[i * nf + j] * f->d[j];
        f->col[a] = rhs;
        for (int c = 0; c < nfree; ++c)
            f->lu[a * nfree + c] = f->G[i * nf + map[c]]
                                   + (a == c ? f->stiction[i] / b[i] : 0.0);
    }
    if (nfree) {
        if (mb_lu_factor(f->lu, nfree, f->piv, 1e-15)) return -1;
        mb_lu_solve(f->lu, nfree, f->piv, f->col, 1);
        for (int a = 0; a < nfree; ++a) f->d[map[a]] = f->col[a];
    }
    int changed = 0;
    const double tol = 1e-12;
    for (int i = 0; i < nf; ++i) {
        double g = v[i] + (f->state[i] ? f->state[i] * f->stiction[i] : 0.0);
        for (int j = 0; j < nf; ++j) g += f->G[i * nf + j] * f->d[j];
        if (!f->state[i] && fabs(f->d[i]) > b[i] * (1.0 + tol)) {
            f->state[i] = f->d[i] > 0 ? 1 : -1;
            ++changed;
        } else if (f->state[i] * g > tol * (fabs(v[i]) + f->stiction[i])) {
            f->state[i] = 0;
            ++changed;
        }
    }
    return changed;
}

static int box_friction(spook_friction* f, const double* b, const double* v)
{
    const int nf = f->nf;
    for (int it = 0; it < 4 * nf + 4; ++it) {
        const int changed = box_state_solves(f, b, v);
        if (changed < 0) return MB_SINGULAR_MASS;
        if (!changed) return MB_OK;
    }
    long total = 1;
    for (int i = 0; i < nf; ++i) total *= 3;
    for (long code = 0; code < total; ++code) {
        long c = code;
        for (int i = 0; i < nf; ++i, c /= 3) f->state[i] = (int)(c % 3) - 1;
        if (box_state_solves(f, b, v) == 0) return MB_OK;
    }
    return MB_NO_CONVERGENCE;
}

static int spook_step(vi* s, const double* q, const double* v, const double* Qext,
                      const double* p, double h, const double* sigma, const double* upsilon,
                      spook_friction* fr, double* q1, double* v1, double* force)
{
    const int n = s->n, N = s->N;
    const mb_kernel* ka = &s->model->kernel[MB_K_PHI_Q];
    mb_eval_one(s->model, MB_K_PHI_Q, q, NULL, p, s->B);
    int st = factor_kkt(s, q, s->B, p, sigma);
    if (st) return st;
    mb_eval_one(s->model, MB_K_FORCES, q, v, p, s->Q);
    mass_times(s, v, s->res);
    for (int i = 0; i < n; ++i) s->res[i] += h * (s->Q[i] + (Qext ? Qext[i] : 0.0));
    for (int j = 0; j < fr->nf; ++j)  /* the exact law below replaces Q's smoothed one */
        s->res[fr->index[j]] += h * fr->bound[j] * tanh(v[fr->index[j]] / fr->stiction[j]);
    mb_eval_one(s->model, MB_K_PHI, q, NULL, p, s->phi);
    double* c = s->res + n;
    for (int k = 0; k < s->r; ++k) c[k] = -4.0 / h * upsilon[k] * s->phi[s->plan->rows[k]];
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = s->plan->rowpos[ka->row[e]];
        if (k >= 0) c[k] += upsilon[k] * s->B[e] * v[ka->col[e]];
    }
    solve_kkt(s, s->res, c, s->dx);
    if (fr->nf) {
        double* b = fr->vfree + fr->nf;  /* bounds h c of this step */
        for (int j = 0; j < fr->nf; ++j) {
            double* y = fr->Y + (size_t)j * N;
            memset(y, 0, sizeof(double) * (size_t)N);
            y[fr->index[j]] = 1.0;
            solve_kkt(s, y, NULL, y);
            fr->vfree[j] = s->dx[fr->index[j]];
            b[j] = h * fr->bound[j];
        }
        for (int i = 0; i < fr->nf; ++i)
            for (int j = 0; j < fr->nf; ++j)
                fr->G[i * fr->nf + j] = fr->Y[(size_t)j * N + fr->index[i]];
        if ((st = box_friction(fr, b, fr->vfree))) return st;
        for (int j = 0; j < fr->nf; ++j)
            for (int i = 0; i < N; ++i) s->dx[i] += fr->Y[(size_t)j * N + i] * fr->d[j];
    }
    for (int i = 0; i < n; ++i) {
        v1[i] = s->dx[i];
        q1[i] = q[i] + h * v1[i];
    }
    for (int k = 0; force && k < s->r; ++k) force[k] = s->dx[n + k] / h;
    return mb_all_finite(s->dx, s->N) ? MB_OK : MB_NOT_FINITE;
}

int mb_simulate_spook(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* p, const double* compliance, const double* damping,
    int nf, const int* friction_index, const double* friction_bound,
    const double* stiction, double dt, long nsteps, const double* Qtable, double* out_q,
    double* out_qd, double* out_qdd, double* out_lam, long* failed_step)
{
    const int n = plan->model->n, r = plan->r, N = n + r;
    *failed_step = -1;
    if (!(dt > 0.0 && dt < INFINITY) || nsteps < 0 || nf < 0 || nf > 12) return MB_BAD_ARGUMENT;
    for (int k = 0; k < r; ++k)
        if (!(compliance[k] >= 0.0 && compliance[k] < INFINITY && damping[k] >= 0.0
              && damping[k] < INFINITY))
            return MB_BAD_ARGUMENT;
    /* friction elements with a zero bound do nothing: keep the others */
    int* keep = (int*)calloc((size_t)nf + 1, sizeof(int));
    if (!keep) return MB_NO_MEMORY;
    int kept = 0;
    for (int j = 0; j < nf; ++j) {
        if (friction_index[j] < 0 || friction_index[j] >= n
            || !(friction_bound[j] >= 0.0 && friction_bound[j] < INFINITY)
            || !(stiction[j] > 0.0 && stiction[j] < INFINITY)) {
            free(keep);
            return MB_BAD_ARGUMENT;
        }
        if (friction_bound[j] > 0.0) keep[kept++] = j;
    }
    vi s;
    int st = vi_init(&s, plan, options);
    if (st) { free(keep); return st; }
    mb_ws* wd = out_qdd ? mb_ws_new(plan, options, 0) : NULL;
    const size_t fd = (size_t)kept * (N + 2 * kept + 7) + 1;
    double* sigma = (double*)malloc(sizeof(double) * (2 * (size_t)r + 1 + fd));
    int* fi = (int*)calloc(3 * (size_t)kept + 1, sizeof(int));
    if ((out_qdd && !wd) || !sigma || !fi) {
        vi_free(&s); mb_ws_free(wd); free(sigma); free(fi); free(keep);
        return MB_NO_MEMORY;
    }
    double* upsilon = sigma + r;
    for (int k = 0; k < r; ++k) {
        upsilon[k] = 1.0 / (1.0 + 4.0 * damping[k] / dt);
        sigma[k] = 4.0 * compliance[k] * upsilon[k] / (dt * dt);
    }
    spook_friction fr;
    memset(&fr, 0, sizeof(fr));
    fr.nf = kept;
    double* x = upsilon + r + 1;
    int* index = fi;
    double* bound = x; x += kept;
    double* slip = x; x += kept;
    for (int a = 0; a < kept; ++a) {
        index[a] = friction_index[keep[a]];
        bound[a] = friction_bound[keep[a]];
        slip[a] = stiction[keep[a]];
    }
    fr.index = index; fr.bound = bound; fr.stiction = slip;
    fr.Y = x; x += (size_t)kept * N;
    fr.G = x; x += (size_t)kept * kept;
    fr.lu = x; x += (size_t)kept * kept;
    fr.d = x; x += kept;
    fr.vfree = x; x += 2 * (size_t)kept;  /* v of the free step, then the bounds h c */
    fr.col = x;
    fr.state = fi + kept;
    fr.piv = fi + 2 * kept;
    free(keep);
    memcpy(out_q, q0, sizeof(double) * (size_t)n);
    memcpy(out_qd, qd0, sizeof(double) * (size_t)n);
    mb_eval_one(s.model, MB_K_MASS, q0, NULL, p, s.mass);
    long k = 0;
    for (k = 0; k < nsteps && !st; ++k)
        st = spook_step(&s, out_q + k * n, out_qd + k * n, Qtable ? Qtable + 2 * k * n : NULL,
                        p, dt, sigma, upsilon, &fr, out_q + (k + 1) * n,
                        out_qd + (k + 1) * n, out_lam ? out_lam + k * r : NULL);
    if (st) *failed_step = k > 0 ? k - 1 : 0;
    if (out_lam) memset(out_lam + nsteps * r, 0, sizeof(double) * (size_t)r);
    st = run_accelerations(wd, st ? k - 1 : nsteps, out_q, out_qd, Qtable, p, n, out_qdd, st,
                           failed_step);
    vi_free(&s);
    mb_ws_free(wd);
    free(sigma);
    free(fi);
    return st;
}

int mb_variational_residual(const mb_plan* plan, const mb_options* options, const double* q0,
    const double* qd0, const double* Qext, const double* p, double h, const double* v,
    const double* impulse, double* residual_out, double* jacobian)
{
    if (!(h > 0.0)) return MB_BAD_ARGUMENT;
    vi s;
    int st = vi_init(&s, plan, options);
    if (st) return st;
    mb_eval_one(s.model, MB_K_MASS, q0, NULL, p, s.mass);
    mb_eval_one(s.model, MB_K_PHI_Q, q0, NULL, p, s.B);
    st = residual(&s, q0, qd0, Qext, p, h, v, impulse, residual_out);
    if (jacobian) dense_jacobian(&s, q0, v, p, h, jacobian);
    vi_free(&s);
    return st;
}
