/* Inverse dynamics and prescribed motion.
 *
 * Forces u on chosen coordinates (the actuators, B selects them) and multipliers λ that
 * make (q, q̇, q̈) a motion of the mechanism:
 *     B u − Aᵀ λ = M q̈ − Q(q, q̇)          (A: the active rows of Φq)
 * a square system C [u; λ] = b with C = [B  −Aᵀ] when the actuators are as many as the
 * degrees of freedom; C is singular exactly when the actuated coordinates cannot serve as
 * independent coordinates. Jacobians by implicit differentiation (B is constant):
 *     C ∂[u;λ]/∂q = (M q̈)_q − Q_q + (Aᵀλ)_q,   C ∂[u;λ]/∂q̇ = −Q_q̇,   C ∂[u;λ]/∂q̈ = M.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

/* Scatter a kernel's values into a dense n x n block, adding sign · value. */
static void scatter(const mb_model* model, int kernel, const double* values, double sign,
                    double* out, int n)
{
    const mb_kernel* k = &model->kernel[kernel];
    for (int e = 0; e < k->nnz; ++e) out[k->row[e] * n + k->col[e]] += sign * values[e];
}

static int inverse_one(mb_ws* w, double* C, int* piv, double* rhs, const double* q,
                       const double* qd, const double* qdd, const double* p, const int* act,
                       int na, double* u, double* lam, double* Jq, double* Jqd, double* Jqdd)
{
    const mb_model* model = w->model;
    const int n = w->n, r = w->r;
    const size_t nn = (size_t)n * n;
    if (!mb_all_finite(q, n) || !mb_all_finite(qd, n) || !mb_all_finite(qdd, n))
        return MB_NOT_FINITE;
    double* mv = w->kv[MB_K_MASS];
    double* a = w->kv[MB_K_PHI_Q];
    mb_eval_one(model, MB_K_MASS, q, NULL, p, mv);
    mb_eval_one(model, MB_K_PHI_Q, q, NULL, p, a);
    mb_eval_one(model, MB_K_FORCES, q, qd, p, w->Q);
    /* C = [B  −Aᵀ] */
    memset(C, 0, sizeof(double) * nn);
    for (int j = 0; j < na; ++j) C[act[j] * n + j] = 1.0;
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = w->plan->rowpos[ka->row[e]];
        if (k >= 0) C[ka->col[e] * n + na + k] = -a[e];
    }
    /* b = M q̈ − Q */
    for (int i = 0; i < n; ++i) rhs[i] = -w->Q[i];
    const mb_kernel* km = &model->kernel[MB_K_MASS];
    for (int e = 0; e < km->nnz; ++e) rhs[km->row[e]] += mv[e] * qdd[km->col[e]];
    int st = mb_lu_factor(C, n, piv, w->opt->pivot_tol);
    if (st) return st;
    mb_lu_solve(C, n, piv, rhs, 1);
    if (!mb_all_finite(rhs, n)) return MB_NOT_FINITE;
    memcpy(u, rhs, sizeof(double) * (size_t)na);
    memset(w->lam, 0, sizeof(double) * (size_t)w->m);
    for (int k = 0; k < r; ++k) w->lam[w->plan->rows[k]] = rhs[na + k];
    if (lam) memcpy(lam, w->lam, sizeof(double) * (size_t)w->m);
    double* J = w->Z;  /* n x n right-hand sides, then solutions */
    for (int wrt = 0; wrt < 3; ++wrt) {
        double* out = wrt == 0 ? Jq : wrt == 1 ? Jqd : Jqdd;
        if (!out) continue;
        memset(J, 0, sizeof(double) * nn);
        if (wrt == 0) {
            mb_eval_one(model, MB_K_MASS_V_Q, q, qdd, p, w->kv[MB_K_MASS_V_Q]);
            mb_eval_one(model, MB_K_FORCES_Q, q, qd, p, w->kv[MB_K_FORCES_Q]);
            mb_eval_one(model, MB_K_PHIQT_LAM_Q, q, w->lam, p, w->kv[MB_K_PHIQT_LAM_Q]);
            scatter(model, MB_K_MASS_V_Q, w->kv[MB_K_MASS_V_Q], 1.0, J, n);
            scatter(model, MB_K_FORCES_Q, w->kv[MB_K_FORCES_Q], -1.0, J, n);
            scatter(model, MB_K_PHIQT_LAM_Q, w->kv[MB_K_PHIQT_LAM_Q], 1.0, J, n);
        } else if (wrt == 1) {
            mb_eval_one(model, MB_K_FORCES_QD, q, qd, p, w->kv[MB_K_FORCES_QD]);
            scatter(model, MB_K_FORCES_QD, w->kv[MB_K_FORCES_QD], -1.0, J, n);
        } else {
            scatter(model, MB_K_MASS, mv, 1.0, J, n);
        }
        mb_lu_solve(C, n, piv, J, n);
        memcpy(out, J, sizeof(double) * (size_t)na * n);  /* the rows of u */
    }
    return MB_OK;
}

int mb_inverse_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* qdd,
    long qdd_stride, const double* p, long p_stride, const int* act, int na, double* u,
    double* lam, double* Jq, double* Jqd, double* Jqdd, int* status)
{
    const int n = plan->model->n, m = plan->model->m;
    if (na != plan->d) return MB_BAD_ARGUMENT;
    for (int j = 0; j < na; ++j) {
        if (act[j] < 0 || act[j] >= n) return MB_BAD_ARGUMENT;
        for (int k = 0; k < j; ++k) if (act[k] == act[j]) return MB_BAD_ARGUMENT;
    }
    mb_ws* w = mb_ws_new(plan, options, MB_WS_JACOBIANS);
    double* C = (double*)malloc(sizeof(double) * ((size_t)n * n + n + 1));
    int* piv = (int*)malloc(sizeof(int) * ((size_t)n + 1));
    int failed = 0;
    if (!w || !C || !piv) { mb_ws_free(w); free(C); free(piv); return MB_NO_MEMORY; }
    const long nj = (long)na * n;
    for (long s = 0; s < count; ++s) {
        double* out[5] = {u + s * na, lam ? lam + s * m : NULL, Jq ? Jq + s * nj : NULL,
                          Jqd ? Jqd + s * nj : NULL, Jqdd ? Jqdd + s * nj : NULL};
        status[s] = inverse_one(w, C, piv, C + (size_t)n * n, q + s * q_stride,
                                qd + s * qd_stride, qdd + s * qdd_stride, p + s * p_stride,
                                act, na, out[0], out[1], out[2], out[3], out[4]);
        if (status[s] != MB_OK) {
            failed++;
            for (long i = 0; i < na; ++i) out[0][i] = NAN;
            if (out[1]) for (long i = 0; i < m; ++i) out[1][i] = NAN;
            for (int k = 2; k < 5; ++k)
                if (out[k]) for (long i = 0; i < nj; ++i) out[k][i] = NAN;
        }
    }
    mb_ws_free(w);
    free(C);
    free(piv);
    return failed;
}

int mb_solve_position_path(const mb_plan* plan, const mb_options* options, long count,
    double* q, const double* zval, const double* p, const int* zfix, int nz, double tol,
    int max_iter, int* status)
{
    const int n = plan->model->n;
    if (nz != plan->d) return MB_BAD_ARGUMENT;
    mb_ws* w = mb_ws_new(plan, options, 0);
    double* guess = (double*)malloc(sizeof(double) * ((size_t)n + 1));
    int failed = 0;
    if (!w || !guess) { mb_ws_free(w); free(guess); return MB_NO_MEMORY; }
    long good = -1, before = -1;  /* the last two solved samples */
    for (long s = 0; s < count; ++s) {
        double* qs = q + s * n;
        if (good >= 0) {  /* extrapolate the path: the branch of the samples before */
            const double* a = q + good * n;
            const double* b = before >= 0 ? q + before * n : a;
            const double scale = before >= 0 ? (double)(s - good) / (double)(good - before) : 0;
            for (int i = 0; i < n; ++i) guess[i] = a[i] + scale * (a[i] - b[i]);
        } else {
            memcpy(guess, qs, sizeof(double) * (size_t)n);
        }
        for (int j = 0; j < nz; ++j) guess[zfix[j]] = zval[s * nz + j];
        memcpy(qs, guess, sizeof(double) * (size_t)n);
        status[s] = mb_position_one(w, qs, p, zfix, nz, 0, tol, max_iter);
        if (status[s] == MB_OK) {
            before = good;
            good = s;
        } else {
            failed++;
            for (int i = 0; i < n; ++i) qs[i] = NAN;
        }
    }
    mb_ws_free(w);
    free(guess);
    return failed;
}
