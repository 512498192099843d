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
    const int d = model->joint_d;
    double* saved = w->joint + 3 * d * d;
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

/* Mz⁻¹ = L⁻ᵀ L⁻¹ from Mz's Cholesky factor L: mb_cholesky_solve on the identity, with the
 * pivots' reciprocals multiplied (d divisions instead of 2 d²); per lane the same in
 * joint_lanes_finish_d */
static inline __attribute__((always_inline)) void joint_inverse(const double* L, const int d,
                                                                double* inverse)
{
    double reciprocal[d];
    for (int i = 0; i < d; ++i) reciprocal[i] = 1.0 / L[i * d + i];
    for (int i = 0; i < d * d; ++i) inverse[i] = i % (d + 1) == 0;
    for (int i = 0; i < d; ++i)
        for (int c = 0; c < d; ++c) {
            double v = inverse[i * d + c];
            for (int k = 0; k < i; ++k) v -= L[i * d + k] * inverse[k * d + c];
            inverse[i * d + c] = v * reciprocal[i];
        }
    for (int i = d - 1; i >= 0; --i)
        for (int c = 0; c < d; ++c) {
            double v = inverse[i * d + c];
            for (int k = i + 1; k < d; ++k) v -= L[k * d + i] * inverse[k * d + c];
            inverse[i * d + c] = v * reciprocal[i];
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
    double* B = inverse + d * d;       /* d x d: a right-hand side */
    mb_copy(L, mass, (long)d * d);
    int st = mb_cholesky(L, d, w->opt->mass_tol);
    if (st) return st;
    joint_inverse(L, d, inverse);
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
    if (JzQ) {  /* Mz⁻¹ Jᵀ from J's nonzeros, without a dense Jᵀ */
        mb_zero(JzQ, (long)d * n);
        for (int e = 0; e < basis->nnz; ++e) {
            const double* column = inverse + basis->col[e];  /* Mz⁻¹'s column, stride d */
            double* to = JzQ + basis->row[e];
            for (int a = 0; a < d; ++a) to[(long)a * n] += column[a * d] * J[e];
        }
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

/* Arrays of MB_LANES states side by side, every one [entry][lane]. */
typedef struct {
    double *q, *qd, *Q, *k, *t, *J, *Jq;  /* the inputs, constants, terms, J and ∂J/∂z */
    double *L, *inverse, *B;              /* d x d each, as in joint_finish_d */
    double *zdd, *Jz, *Jzd, *JzQ;         /* the results */
    int bad[MB_LANES];                    /* Mz not positive definite: redone alone */
} joint_lanes;

#define W MB_LANES
#define LANE(i) ((long)(i) * W)
/* The finish in lanes is written out for each d up to this: unrolled for d = 4 to 6 too it
 * made the core's compilation 1.3 -> 3.4 s for 13 % of a 6-DOF arm's z̈ (365 -> 317 ns);
 * there each state's finish runs alone from its lane's terms. */
#define LANE_FINISH_D 3

/* MB_LANES doubles, one per lane, as one value: its arithmetic is the scalar code's lane
 * by lane (so the same numbers), and vectorized whatever the compiler proves about aliasing
 * (GNU C's vector extension, split into the machine's widest registers). Read and written
 * in place through `lanes_at` (may_alias, aligned as a double), never passed by value. */
typedef double lanes_v __attribute__((vector_size(W * sizeof(double))));
typedef int64_t lanes_mask __attribute__((vector_size(W * sizeof(double))));
typedef double lanes_at __attribute__((vector_size(W * sizeof(double)), aligned(8), may_alias));
#define AT(p) (*(lanes_at*)(p))
/* where mask (all ones or zero per lane): a, else b */
#define SELECT(mask, a, b) ((lanes_v)(((lanes_mask)(a) & (mask)) | ((lanes_mask)(b) & ~(mask))))

/* bad[b] |= whether one of the len values of lane b (from [entry][lane]) is infinite or
 * NaN: an OR over the exponent bits, as mb_all_finite, which vectorizes over the lanes */
static inline void lanes_not_finite(const double* restrict v, int len, int64_t* restrict bad)
{
    const uint64_t exponent = 0x7ff0000000000000ULL;
    for (int i = 0; i < len; ++i)
        for (int b = 0; b < W; ++b) {
            uint64_t bits;
            memcpy(&bits, v + LANE(i) + b, sizeof bits);
            bad[b] |= (bits & exponent) == exponent;
        }
}

/* out (d x cols) = A (d x d) B (d x cols) in every lane, summed in joint_times' order */
static inline __attribute__((always_inline)) void lanes_times(const double* A, const int d,
                                                               const double* B, int cols,
                                                               double* out)
{
    for (int a = 0; a < d; ++a)
        for (int c = 0; c < cols; ++c) {
            lanes_v sum = {0};
            for (int x = 0; x < d; ++x) sum += AT(A + LANE(a * d + x)) * AT(B + LANE(x * cols + c));
            AT(out + LANE(a * cols + c)) = sum;
        }
}

/* joint_finish_d for MB_LANES states at once, lane by lane the same operations (so the
 * same numbers): a state's finish is a chain of a square root, divisions and short sums,
 * which one state at a time leaves the CPU waiting. The caller checks the states' inputs
 * and results and redoes bad lanes alone. */
static inline __attribute__((always_inline)) void joint_lanes_finish_d(
    joint_lanes* a, const int d, const int n, const mb_kernel* basis, const mb_kernel* basis_z,
    double tol, int with_Q, int want_Jz, int want_Jzd, int want_JzQ)
{
    const double* mass = a->t;
    const double* bias = mass + LANE(d * d);
    const double* bias_z = bias + LANE(d);
    const double* bias_zd = bias_z + LANE(d * d);
    const double* mass_z = bias_zd + LANE(d * d);
    double *L = a->L, *inverse = a->inverse, *B = a->B;
    const lanes_v zero = {0}, one = zero + 1.0;
    lanes_v scale = zero;
    lanes_mask bad = {0};
    mb_copy(L, mass, LANE(d * d));
    for (int i = 0; i < d; ++i) {
        const lanes_v x = AT(L + LANE(i * d + i));
        scale = SELECT(x > scale, x, scale);
    }
    for (int j = 0; j < d; ++j) {  /* mb_cholesky */
        lanes_v s = AT(L + LANE(j * d + j));
        for (int k = 0; k < j; ++k) s -= AT(L + LANE(j * d + k)) * AT(L + LANE(j * d + k));
        const lanes_mask ok = s > tol * scale;
        bad |= ~ok;
        double* pivot = L + LANE(j * d + j);
        AT(pivot) = SELECT(ok, s, one);  /* a bad lane is redone alone */
        for (int b = 0; b < W; ++b) pivot[b] = sqrt(pivot[b]);
        for (int i = j + 1; i < d; ++i) {
            lanes_v t = AT(L + LANE(i * d + j));
            for (int k = 0; k < j; ++k) t -= AT(L + LANE(i * d + k)) * AT(L + LANE(j * d + k));
            AT(L + LANE(i * d + j)) = t / AT(pivot);
        }
    }
    double reciprocal[LANE(LANE_FINISH_D)];  /* joint_inverse per lane */
    for (int i = 0; i < d; ++i) AT(reciprocal + LANE(i)) = one / AT(L + LANE(i * d + i));
    for (int i = 0; i < d * d; ++i) AT(inverse + LANE(i)) = i % (d + 1) == 0 ? one : zero;
    for (int i = 0; i < d; ++i)
        for (int c = 0; c < d; ++c) {
            lanes_v v = AT(inverse + LANE(i * d + c));
            for (int k = 0; k < i; ++k)
                v -= AT(L + LANE(i * d + k)) * AT(inverse + LANE(k * d + c));
            AT(inverse + LANE(i * d + c)) = v * AT(reciprocal + LANE(i));
        }
    for (int i = d - 1; i >= 0; --i)
        for (int c = 0; c < d; ++c) {
            lanes_v v = AT(inverse + LANE(i * d + c));
            for (int k = i + 1; k < d; ++k)
                v -= AT(L + LANE(k * d + i)) * AT(inverse + LANE(k * d + c));
            AT(inverse + LANE(i * d + c)) = v * AT(reciprocal + LANE(i));
        }
    for (int i = 0; i < d; ++i) AT(B + LANE(i)) = -AT(bias + LANE(i));
    if (with_Q)
        for (int e = 0; e < basis->nnz; ++e) {
            double* to = B + LANE(basis->col[e]);
            AT(to) = AT(to) + AT(a->J + LANE(e)) * AT(a->Q + LANE(basis->row[e]));
        }
    lanes_times(inverse, d, B, 1, a->zdd);
    if (want_Jzd) {
        for (int i = 0; i < d * d; ++i) AT(B + LANE(i)) = -AT(bias_zd + LANE(i));
        lanes_times(inverse, d, B, d, a->Jzd);
    }
    if (want_Jz) {
        for (int i = 0; i < d; ++i)
            for (int l = 0; l < d; ++l) {
                lanes_v s = AT(bias_z + LANE(i * d + l));
                for (int x = 0; x < d; ++x)
                    s += AT(mass_z + LANE((i * d + x) * d + l)) * AT(a->zdd + LANE(x));
                AT(B + LANE(i * d + l)) = -s;
            }
        if (with_Q)
            for (int e = 0; e < basis_z->nnz; ++e) {
                double* to = B + LANE(basis_z->col[e]);
                AT(to) = AT(to) + AT(a->Jq + LANE(e)) * AT(a->Q + LANE(basis_z->row[e]));
            }
        lanes_times(inverse, d, B, d, a->Jz);
    }
    if (want_JzQ) {
        mb_zero(a->JzQ, LANE(d * n));
        for (int e = 0; e < basis->nnz; ++e) {
            const lanes_v J = AT(a->J + LANE(e));
            for (int i = 0; i < d; ++i) {
                double* to = a->JzQ + LANE(i * n + basis->row[e]);
                AT(to) = AT(to) + AT(inverse + LANE(i * d + basis->col[e])) * J;
            }
        }
    }
    /* the terms need not read every coordinate (not z's own): the whole state is checked */
    int64_t not_finite[W];
    for (int b = 0; b < W; ++b) not_finite[b] = bad[b];
    lanes_not_finite(a->q, n, not_finite);
    lanes_not_finite(a->qd, n, not_finite);
    if (with_Q) lanes_not_finite(a->Q, n, not_finite);
    lanes_not_finite(a->zdd, d, not_finite);
    if (want_Jz) lanes_not_finite(a->Jz, d * d, not_finite);
    if (want_Jzd) lanes_not_finite(a->Jzd, d * d, not_finite);
    if (want_JzQ) lanes_not_finite(a->JzQ, d * n, not_finite);
    for (int b = 0; b < W; ++b) a->bad[b] = not_finite[b] != 0;
}

static void joint_lanes_finish(joint_lanes* a, const mb_ws* w, int with_Q, int want_Jz,
                               int want_Jzd, int want_JzQ)
{
    const mb_model* model = w->model;
    const mb_kernel* basis = &model->kernel[MB_K_REDUCED_BASIS];
    const mb_kernel* basis_z = &model->kernel[MB_K_REDUCED_BASIS_Q];
    const double tol = w->opt->mass_tol;
    switch (model->joint_d) {
    case 1: joint_lanes_finish_d(a, 1, w->n, basis, basis_z, tol, with_Q, want_Jz, want_Jzd,
                                 want_JzQ); break;
    case 2: joint_lanes_finish_d(a, 2, w->n, basis, basis_z, tol, with_Q, want_Jz, want_Jzd,
                                 want_JzQ); break;
    case 3: joint_lanes_finish_d(a, 3, w->n, basis, basis_z, tol, with_Q, want_Jz, want_Jzd,
                                 want_JzQ); break;
    }
}

/* Whether the finish runs in lanes: d is small, and the J kernels it needs have lane
 * functions (the code generator gives them where their code stays short). */
static int finish_in_lanes(const mb_model* model, int with_Q, int want_Jz, int want_JzQ)
{
    const mb_kernel* basis = &model->kernel[MB_K_REDUCED_BASIS];
    const mb_kernel* basis_z = &model->kernel[MB_K_REDUCED_BASIS_Q];
    return model->joint_d <= LANE_FINISH_D
           && (!(with_Q || want_JzQ) || !basis->nnz || basis->lanes)
           && (!(with_Q && want_Jz) || !basis_z->nnz || basis_z->lanes);
}

int mb_joint_space_batch(mb_ws* w, long count, const double* q, long q_stride,
                         const double* qd, long qd_stride, const double* Qext, long Q_stride,
                         const double* p, long p_stride, double* zdd, double* Jz, double* Jzd,
                         double* JzQ, int* status)
{
    const mb_model* model = w->model;
    const int kernel = terms_kernel(Jz, Jzd, JzQ);
    const mb_kernel* terms = &model->kernel[kernel];
    const mb_kernel* basis = &model->kernel[MB_K_REDUCED_BASIS];
    const mb_kernel* basis_z = &model->kernel[MB_K_REDUCED_BASIS_Q];
    const int n = w->n, d = model->joint_d, nk = model->kernel[MB_K_REDUCED_CONSTANTS].nnz;
    const long dd = (long)d * d, dn = (long)d * n;
    const int with_Q = Qext != NULL;
    const long blocks = terms->lanes ? count / W : 0;
    const int in_lanes = finish_in_lanes(model, with_Q, Jz != NULL, JzQ != NULL);
    const size_t per_lane = (size_t)(3 * n + nk + terms->nnz + basis->nnz + basis_z->nnz
                                     + 3 * dd + d + 2 * dd + dn);
    double* scratch = blocks ? (double*)malloc(sizeof(double) * (W * per_lane + nk + 1))
                             : NULL;
    if (blocks && !scratch) return MB_NO_MEMORY;
    joint_lanes a;
    a.q = scratch;
    if (blocks) {
        a.qd = a.q + LANE(n); a.Q = a.qd + LANE(n); a.k = a.Q + LANE(n);
        a.t = a.k + LANE(nk); a.J = a.t + LANE(terms->nnz); a.Jq = a.J + LANE(basis->nnz);
        a.L = a.Jq + LANE(basis_z->nnz); a.inverse = a.L + LANE(dd); a.B = a.inverse + LANE(dd);
        a.zdd = a.B + LANE(dd); a.Jz = a.zdd + LANE(d); a.Jzd = a.Jz + LANE(dd);
        a.JzQ = a.Jzd + LANE(dd);
    }
    double* lane_k = blocks ? a.JzQ + LANE(dn) : NULL;  /* one lane's constants */
    double* t = w->kv[kernel];                          /* ... and terms */
    /* one parameter set for all: its constants once, in every lane */
    const double* shared = p_stride ? NULL : joint_constants(w, p);
    for (int i = 0; shared && blocks && i < nk; ++i)
        for (int b = 0; b < W; ++b) a.k[LANE(i) + b] = shared[i];
    int failed = 0;
    for (long s = 0; s < count; ++s) {
        const double* qs = q + s * q_stride;
        const double* qds = qd + s * qd_stride;
        const double* Qs = Qext ? Qext + s * Q_stride : NULL;
        double* Jz_s = Jz ? Jz + s * dd : NULL;
        double* Jzd_s = Jzd ? Jzd + s * dd : NULL;
        double* JzQ_s = JzQ ? JzQ + s * dn : NULL;
        const int b = (int)(s % W);
        int st = MB_OK;
        if (s / W < blocks) {
            if (b == 0) {  /* the block in lanes */
                mb_transpose(qs, q_stride, W, n, a.q, W);
                mb_transpose(qds, qd_stride, W, n, a.qd, W);
                if (Qext) mb_transpose(Qs, Q_stride, W, n, a.Q, W);
                for (int c = 0; !shared && c < W; ++c) {
                    const double* k = joint_constants(w, p + (s + c) * p_stride);
                    for (int i = 0; i < nk; ++i) a.k[LANE(i) + c] = k[i];
                }
                terms->lanes(a.q, a.qd, a.k, a.t);
                if (in_lanes) {
                    if ((with_Q || JzQ) && basis->nnz) basis->lanes(a.q, a.qd, a.k, a.J);
                    if (with_Q && Jz && basis_z->nnz) basis_z->lanes(a.q, a.qd, a.k, a.Jq);
                    joint_lanes_finish(&a, w, with_Q, Jz != NULL, Jzd != NULL, JzQ != NULL);
                    mb_transpose(a.zdd, W, d, W, zdd + s * d, d);
                    if (Jz) mb_transpose(a.Jz, W, (int)dd, W, Jz_s, dd);
                    if (Jzd) mb_transpose(a.Jzd, W, (int)dd, W, Jzd_s, dd);
                    if (JzQ) mb_transpose(a.JzQ, W, (int)dn, W, JzQ_s, dn);
                }
            }
            if (!in_lanes) {  /* this state's finish alone, from its lane's terms */
                for (int i = 0; i < terms->nnz; ++i) t[i] = a.t[LANE(i) + b];
                for (int i = 0; !shared && i < nk; ++i) lane_k[i] = a.k[LANE(i) + b];
                st = joint_finish(w, t, qs, qds, Qs, shared ? shared : lane_k, zdd + s * d,
                                  Jz_s, Jzd_s, JzQ_s);
            } else if (a.bad[b]) {  /* its status (and its NaN) from the one-state path */
                st = mb_joint_space_one(w, qs, qds, Qs, p + s * p_stride, zdd + s * d, Jz_s,
                                        Jzd_s, JzQ_s);
            }
        } else {
            st = mb_joint_space_one(w, qs, qds, Qs, p + s * p_stride, zdd + s * d, Jz_s,
                                    Jzd_s, JzQ_s);
        }
        if (st) mb_independent_nan(s, d, n, zdd, Jz, Jzd, JzQ);
        status[s] = st;
        failed += st != MB_OK;
    }
    free(scratch);
    return failed;
}

#undef LANE
#undef W
