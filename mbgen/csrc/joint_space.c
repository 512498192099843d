/* Dynamics in a spatial open chain's joint angles z (mbgen/symbolic/reduced.py).
 *
 * Where the generated module has the joint-space kernels, z̈ and its Jacobians along the
 * constraint manifold come from d equations instead of the KKT system's n + m:
 *     Mz z̈ = Jᵀ Qext − bz,
 *     ∂z̈/∂z = −Mz⁻¹ (∂Mz/∂z z̈ + ∂bz/∂z − ∂Jᵀ/∂z Qext),  ∂z̈/∂ż = −Mz⁻¹ ∂bz/∂ż,
 *     ∂z̈/∂Qext = Mz⁻¹ Jᵀ,
 * with Mz = JᵀMJ and bz = Jᵀ(M J̇ż − Q) (Q: the model's forces) in the state q, q̇ itself.
 * The same quantities as mb_independent_one's KKT path at consistent states.
 */
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

int mb_joint_space_applies(const mb_plan* plan, const mb_options* options, const int* zfix,
                           int nz)
{
    const mb_model* model = plan->model;
    if (!model->joint_d || options->method != MB_METHOD_AUTO || nz != model->joint_d
        || plan->d != nz)
        return 0;
    for (int k = 0; k < nz; ++k)
        if (zfix[k] != model->joint_z[k]) return 0;
    return 1;
}

/* The parameter parts k, evaluated again only when p changed since the last call. */
static const double* joint_constants(mb_ws* w, const double* p)
{
    const mb_model* model = w->model;
    const int d = model->joint_d, n = w->n;
    double* saved = w->joint + 2 * d * d + d * (d > n ? d : n);
    double* k = w->kv[MB_K_REDUCED_CONSTANTS];
    if (!w->joint_cached || memcmp(saved, p, sizeof(double) * (size_t)model->np) != 0) {
        mb_eval_one(model, MB_K_REDUCED_CONSTANTS, NULL, NULL, p, k);
        mb_copy(saved, p, model->np);
        w->joint_cached = 1;
    }
    return k;
}

/* out (d x cols) = A (d x d) B (d x cols); out is not B */
static inline void joint_times(const double* A, int d, const double* B, int cols, double* out)
{
    for (int a = 0; a < d; ++a) {
        double* row = out + (long)a * cols;
        for (int c = 0; c < cols; ++c) row[c] = 0.0;
        for (int b = 0; b < d; ++b) {
            const double f = A[a * d + b];
            const double* from = B + (long)b * cols;
            for (int c = 0; c < cols; ++c) row[c] += f * from[c];
        }
    }
}

/* The rest of one state from its terms t (the reduced_terms kernel's values, or without
 * Jacobians the reduced_accelerations kernel's, its first d² + d): Mz⁻¹ once
 * (d is small), then every result is one product with it. Inlined into `joint_finish`
 * once per small d, where the constant d unrolls its loops. */
static inline __attribute__((always_inline)) int joint_finish_d(
    mb_ws* w, const int d, const double* t, const double* q, const double* qd,
    const double* Qext, const double* k, double* zdd, double* Jz, double* Jzd, double* JzQ)
{
    const mb_model* model = w->model;
    const int n = w->n;
    /* the terms need not read every coordinate (not z's own): check the whole state */
    if (!mb_all_finite(q, n) || !mb_all_finite(qd, n) || (Qext && !mb_all_finite(Qext, n)))
        return MB_NOT_FINITE;
    const double* mass = t;            /* Mz, d x d */
    const double* bias = t + d * d;    /* bz, d */
    const double* bias_z = bias + d;   /* ∂bz/∂z, d x d */
    const double* bias_zd = bias_z + d * d;
    const double* mass_z = bias_zd + d * d;  /* ∂Mz/∂z, [a][b][l] */
    double* L = w->joint;              /* d x d: Mz's factor */
    double* inverse = L + d * d;       /* d x d: Mz⁻¹ */
    double* B = inverse + d * d;       /* d x max(d, n): a right-hand side */
    mb_copy(L, mass, (long)d * d);
    int st = mb_cholesky(L, d, w->opt->mass_tol);
    if (st) return st;
    for (int i = 0; i < d * d; ++i) inverse[i] = i % (d + 1) == 0;
    mb_cholesky_solve(L, d, inverse, d);
    for (int a = 0; a < d; ++a) B[a] = -bias[a];
    const mb_kernel* basis = &model->kernel[MB_K_REDUCED_BASIS];
    double* J = w->kv[MB_K_REDUCED_BASIS];
    if (Qext || JzQ) {
        basis->eval(q, NULL, k, J);
        if (Qext)
            for (int e = 0; e < basis->nnz; ++e) B[basis->col[e]] += J[e] * Qext[basis->row[e]];
    }
    joint_times(inverse, d, B, 1, zdd);
    if (Jzd) {
        for (int i = 0; i < d * d; ++i) B[i] = -bias_zd[i];
        joint_times(inverse, d, B, d, Jzd);
    }
    if (Jz) {
        for (int a = 0; a < d; ++a)
            for (int l = 0; l < d; ++l) {
                double s = bias_z[a * d + l];
                for (int b = 0; b < d; ++b) s += mass_z[(a * d + b) * d + l] * zdd[b];
                B[a * d + l] = -s;
            }
        if (Qext) {
            const mb_kernel* basis_z = &model->kernel[MB_K_REDUCED_BASIS_Q];
            double* Jq = w->kv[MB_K_REDUCED_BASIS_Q];
            if (basis_z->eval) basis_z->eval(q, NULL, k, Jq);
            for (int e = 0; e < basis_z->nnz; ++e)  /* column k d + l: ∂J_ik/∂z_l */
                B[basis_z->col[e]] += Jq[e] * Qext[basis_z->row[e]];
        }
        joint_times(inverse, d, B, d, Jz);
    }
    if (JzQ) {
        mb_zero(B, (long)d * n);
        for (int e = 0; e < basis->nnz; ++e) B[basis->col[e] * n + basis->row[e]] = J[e];
        joint_times(inverse, d, B, n, JzQ);
    }
    if (!mb_all_finite(zdd, d) || (Jz && !mb_all_finite(Jz, (long)d * d))
        || (Jzd && !mb_all_finite(Jzd, (long)d * d))
        || (JzQ && !mb_all_finite(JzQ, (long)d * n)))
        return MB_NOT_FINITE;
    return MB_OK;
}

static int joint_finish(mb_ws* w, const double* t, const double* q, const double* qd,
                        const double* Qext, const double* k, double* zdd, double* Jz,
                        double* Jzd, double* JzQ)
{
    switch (w->model->joint_d) {
    case 1: return joint_finish_d(w, 1, t, q, qd, Qext, k, zdd, Jz, Jzd, JzQ);
    case 2: return joint_finish_d(w, 2, t, q, qd, Qext, k, zdd, Jz, Jzd, JzQ);
    case 3: return joint_finish_d(w, 3, t, q, qd, Qext, k, zdd, Jz, Jzd, JzQ);
    default:
        return joint_finish_d(w, w->model->joint_d, t, q, qd, Qext, k, zdd, Jz, Jzd, JzQ);
    }
}

/* The kernel of the terms asked for: all of them, or Mz and bz alone (z̈ without its
 * Jacobians: the same first d² + d values) */
static int terms_kernel(const double* Jz, const double* Jzd, const double* JzQ)
{
    return Jz || Jzd || JzQ ? MB_K_REDUCED_TERMS : MB_K_REDUCED_ACCELERATIONS;
}

int mb_joint_space_one(mb_ws* w, const double* q, const double* qd, const double* Qext,
                       const double* p, double* zdd, double* Jz, double* Jzd, double* JzQ)
{
    const double* k = joint_constants(w, p);
    const int kernel = terms_kernel(Jz, Jzd, JzQ);
    double* t = w->kv[kernel];
    w->model->kernel[kernel].eval(q, qd, k, t);
    return joint_finish(w, t, q, qd, Qext, k, zdd, Jz, Jzd, JzQ);
}

int mb_joint_space_batch(mb_ws* w, long count, const double* q, long q_stride,
                         const double* qd, long qd_stride, const double* Qext, long Q_stride,
                         const double* p, long p_stride, double* zdd, double* Jz, double* Jzd,
                         double* JzQ, int* status)
{
    const mb_model* model = w->model;
    const int kernel = terms_kernel(Jz, Jzd, JzQ);
    const mb_kernel* terms = &model->kernel[kernel];
    const int n = w->n, d = model->joint_d, nk = model->kernel[MB_K_REDUCED_CONSTANTS].nnz;
    const long dd = (long)d * d, dn = (long)d * n;
    const int nt = terms->nnz;
    const long blocks = terms->lanes ? count / MB_LANES : 0;
    /* [entry][lane]: q, q̇, the constants, the terms; then one lane's constants */
    double* scratch = blocks ? (double*)malloc(sizeof(double) * ((size_t)MB_LANES
                                               * (size_t)(2 * n + nk + nt) + nk + 1)) : NULL;
    if (blocks && !scratch) return MB_NO_MEMORY;
    double *ql = scratch, *qdl = ql + MB_LANES * n, *kl = qdl + MB_LANES * n;
    double* tl = kl + MB_LANES * (long)nk;
    double* lane_k = tl + MB_LANES * (long)nt;
    double* t = w->kv[kernel];
    /* one parameter set for all: its constants once, in every lane */
    const double* shared = p_stride ? NULL : joint_constants(w, p);
    for (int i = 0; shared && blocks && i < nk; ++i)
        for (int b = 0; b < MB_LANES; ++b) kl[i * MB_LANES + b] = shared[i];
    int failed = 0;
    for (long s = 0; s < count; ++s) {
        const double* qs = q + s * q_stride;
        const double* ps = p + s * p_stride;
        const double* Qs = Qext ? Qext + s * Q_stride : NULL;
        const long l = s % MB_LANES;
        int st;
        if (s / MB_LANES < blocks) {
            if (l == 0) {  /* the block's terms in lanes */
                for (int b = 0; b < MB_LANES; ++b) {
                    for (int i = 0; i < n; ++i) {
                        ql[i * MB_LANES + b] = q[(s + b) * q_stride + i];
                        qdl[i * MB_LANES + b] = qd[(s + b) * qd_stride + i];
                    }
                    const double* k = shared ? NULL
                                             : joint_constants(w, p + (s + b) * p_stride);
                    for (int i = 0; k && i < nk; ++i) kl[i * MB_LANES + b] = k[i];
                }
                terms->lanes(ql, qdl, kl, tl);
            }
            for (int i = 0; i < nt; ++i) t[i] = tl[i * MB_LANES + l];
            for (int i = 0; !shared && i < nk; ++i) lane_k[i] = kl[i * MB_LANES + l];
            st = joint_finish(w, t, qs, qd + s * qd_stride, Qs, shared ? shared : lane_k,
                              zdd + s * d, Jz ? Jz + s * dd : NULL,
                              Jzd ? Jzd + s * dd : NULL, JzQ ? JzQ + s * dn : NULL);
        } else {
            st = mb_joint_space_one(w, qs, qd + s * qd_stride, Qs, ps, zdd + s * d,
                                    Jz ? Jz + s * dd : NULL, Jzd ? Jzd + s * dd : NULL,
                                    JzQ ? JzQ + s * dn : NULL);
        }
        if (st) mb_independent_nan(s, d, n, zdd, Jz, Jzd, JzQ);
        status[s] = st;
        failed += st != MB_OK;
    }
    free(scratch);
    return failed;
}
