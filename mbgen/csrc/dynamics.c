/* Forward dynamics, exact Jacobians, kinematic problems and independent coordinates,
 * per state on either linear-algebra path (dense.c or sparse.c), and their batched API.
 *
 * Jacobians by implicit differentiation of [M Aᵀ; A 0][q̈; λ] = [Q; c]:
 *     ∂q̈/∂q = P X + G Y,   X = Q_q - (M q̈)_q - (Aᵀλ)_q,   Y = c_q - (A q̈)_q,
 *     ∂q̈/∂q̇ = P Q_q̇ + G c_q̇,   ∂q̈/∂Q = P,
 * where [P G; Gᵀ ·] = [M Aᵀ; A 0]⁻¹ (the augmented matrix of sparse.c has the same P, G).
 * Baumgarte: c = -Φ̇q q̇ - 2α Φq q̇ - β² Φ.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define MB_HAVE_STREAM 1
#ifdef __AVX__
#include <immintrin.h>
#define MB_HAVE_AVX 1
#endif
#endif
#endif
#include <stdint.h>

static int uses_sparse(const mb_ws* w)
{
    return mb_plan_uses_sparse(w->plan, w->opt);
}

/* Φq q̇ on the active rows (Φq values already in w->kv). */
static void phiq_times(const mb_ws* w, const double* v, double* out)
{
    const mb_kernel* k = &w->model->kernel[MB_K_PHI_Q];
    const double* a = w->kv[MB_K_PHI_Q];
    mb_zero(out, w->r);
    for (int e = 0; e < k->nnz; ++e) {
        const int i = w->plan->rowpos[k->row[e]];
        if (i >= 0) out[i] += a[e] * v[k->col[e]];
    }
}

int mb_dynamics_one(mb_ws* w, const double* q, const double* qd, const double* Qext,
                    const double* p, double* qdd, double* lam, int need_jacobian_data)
{
    const int n = w->n, r = w->r;
    const mb_model* model = w->model;
    const double alpha = w->opt->alpha, beta = w->opt->beta;
    int st;
    if (!mb_all_finite(q, n) || !mb_all_finite(qd, n) || (Qext && !mb_all_finite(Qext, n)))
        return MB_NOT_FINITE;
    mb_eval_one(model, MB_K_FORCES, q, qd, p, w->Q);
    if (Qext) for (int i = 0; i < n; ++i) w->Q[i] += Qext[i];
    double* dd = w->kv[MB_K_DPHIQ_QD];
    mb_eval_one(model, MB_K_DPHIQ_QD, q, qd, p, dd);
    mb_eval_one(model, MB_K_PHI_Q, q, NULL, p, w->kv[MB_K_PHI_Q]);
    for (int k = 0; k < r; ++k) w->c[k] = -dd[w->plan->rows[k]];
    if (alpha != 0.0 || beta != 0.0) {
        double* v = w->tmp_r;
        double* ph = w->kv[MB_K_PHI];
        mb_eval_one(model, MB_K_PHI, q, NULL, p, ph);
        phiq_times(w, qd, v);
        for (int k = 0; k < r; ++k)
            w->c[k] -= 2.0 * alpha * v[k] + beta * beta * ph[w->plan->rows[k]];
    }
    double* la = w->tmp_n2;  /* active-row multipliers */
    if (uses_sparse(w)) {
        st = mb_sparse_factor(w, q, p, 0, NULL, 0, NULL);
        if (st) return st;
        double* b = w->tmp_n;
        mb_sparse_rhs(w, w->Q, w->c, b);
        mb_sparse_solve(w, b, b);
        mb_copy(w->qdd, b, n);
        mb_copy(la, b + n, r);
    } else {
        w->factored_sparse = w->factored_unrolled = 0;
        mb_dense_build_A(w);
        st = mb_dense_partition(w, NULL, 0, 0);
        if (!st) st = mb_dense_factor_mass(w, q, p);
        if (st) return st;
        mb_dense_accelerations(w, w->qdd);
        if (lam || need_jacobian_data) mb_dense_multipliers(w, w->qdd, la);
    }
    if (!mb_all_finite(w->qdd, n)) return MB_NOT_FINITE;
    if (qdd) mb_copy(qdd, w->qdd, n);
    if (lam || need_jacobian_data) {
        mb_zero(w->lam, w->m);
        for (int k = 0; k < r; ++k) w->lam[w->plan->rows[k]] = la[k];
        if (lam) mb_copy(lam, w->lam, w->m);
    }
    return MB_OK;
}

/* ---- the right-hand sides of the implicit differentiation, as sparse terms ---------- */
typedef struct {
    const mb_kernel* k;
    const double* v;
    double sign;
    int constraint_rows;  /* rows index constraints (Y) rather than coordinates (X) */
} term;

/* Terms of [X; Y] (wrt = 0, derivatives in q) or [Q_q̇; c_q̇] (wrt = 1). */
static int jacobian_terms(mb_ws* w, const double* q, const double* qd, const double* p,
                          int wrt, term* t)
{
    const mb_model* model = w->model;
    const mb_kernel* K = model->kernel;
    const double alpha = w->opt->alpha, beta = w->opt->beta;
    int count = 0;
    if (wrt == 0) {
        mb_eval_one(model, MB_K_FORCES_Q, q, qd, p, w->kv[MB_K_FORCES_Q]);
        mb_eval_one(model, MB_K_MASS_V_Q, q, w->qdd, p, w->kv[MB_K_MASS_V_Q]);
        mb_eval_one(model, MB_K_PHIQT_LAM_Q, q, w->lam, p, w->kv[MB_K_PHIQT_LAM_Q]);
        mb_eval_one(model, MB_K_DPHIQ_QD_Q, q, qd, p, w->kv[MB_K_DPHIQ_QD_Q]);
        mb_eval_one(model, MB_K_PHIQ_V_Q, q, w->qdd, p, w->kv[MB_K_PHIQ_V_Q]);
        t[count++] = (term){&K[MB_K_FORCES_Q], w->kv[MB_K_FORCES_Q], 1.0, 0};
        t[count++] = (term){&K[MB_K_MASS_V_Q], w->kv[MB_K_MASS_V_Q], -1.0, 0};
        t[count++] = (term){&K[MB_K_PHIQT_LAM_Q], w->kv[MB_K_PHIQT_LAM_Q], -1.0, 0};
        t[count++] = (term){&K[MB_K_DPHIQ_QD_Q], w->kv[MB_K_DPHIQ_QD_Q], -1.0, 1};
        t[count++] = (term){&K[MB_K_PHIQ_V_Q], w->kv[MB_K_PHIQ_V_Q], -1.0, 1};
        if (alpha != 0.0) {
            mb_eval_one(model, MB_K_PHIQ_V_Q, q, qd, p, w->aux);
            t[count++] = (term){&K[MB_K_PHIQ_V_Q], w->aux, -2.0 * alpha, 1};
        }
        if (beta != 0.0)
            t[count++] = (term){&K[MB_K_PHI_Q], w->kv[MB_K_PHI_Q], -beta * beta, 1};
    } else {
        mb_eval_one(model, MB_K_FORCES_QD, q, qd, p, w->kv[MB_K_FORCES_QD]);
        mb_eval_one(model, MB_K_DPHIQ_QD_QD, q, qd, p, w->kv[MB_K_DPHIQ_QD_QD]);
        t[count++] = (term){&K[MB_K_FORCES_QD], w->kv[MB_K_FORCES_QD], 1.0, 0};
        t[count++] = (term){&K[MB_K_DPHIQ_QD_QD], w->kv[MB_K_DPHIQ_QD_QD], -1.0, 1};
        if (alpha != 0.0)
            t[count++] = (term){&K[MB_K_PHI_Q], w->kv[MB_K_PHI_Q], -2.0 * alpha, 1};
    }
    return count;
}

/* top (n) and bottom (r) = terms · v (a sparse matrix-vector product). */
static void terms_times(const mb_ws* w, const term* t, int count, const double* v,
                        double* top, double* bottom)
{
    mb_zero(top, w->n);
    mb_zero(bottom, w->r);
    for (int s = 0; s < count; ++s)
        for (int e = 0; e < t[s].k->nnz; ++e) {
            const double value = t[s].sign * t[s].v[e] * v[t[s].k->col[e]];
            if (!t[s].constraint_rows) top[t[s].k->row[e]] += value;
            else if (w->plan->rowpos[t[s].k->row[e]] >= 0)
                bottom[w->plan->rowpos[t[s].k->row[e]]] += value;
        }
}

/* Jacobians of at least this many entries (128 KB) are written past the caches: a batch
 * of them goes to memory anyway, and a non-temporal store does not read each line in
 * first (the 100-bar chain's three 200 x 200 Jacobians, 1 MB per state). */
#define STREAM_MIN_ENTRIES 16384

#ifdef MB_HAVE_AVX
/* Four entries to 16-byte aligned o, streamed (NumPy's large arrays are 16-byte
 * aligned, not 32; the write-combining buffer joins the halves). */
static void stream4(double* o, __m256d v)
{
    _mm_stream_pd(o, _mm256_castpd256_pd128(v));
    _mm_stream_pd(o + 2, _mm256_extractf128_pd(v, 1));
}

/* put_matrix four entries at a time: the rows copied (col_stride 1) or 4 x 4 blocks
 * transposed in registers (row_stride 1), so the reads are contiguous and the stores
 * vectors (n a multiple of 4, out 16-byte aligned). */
static void stream_blocks(double* out, const double* src, const int* rows,
                          size_t row_stride, size_t col_stride, int n)
{
    if (col_stride == 1) {
        for (int a = 0; a < n; ++a) {
            const double* row = src + (size_t)(rows ? rows[a] : a) * row_stride;
            for (int b = 0; b < n; b += 4)
                stream4(out + (size_t)a * n + b, _mm256_loadu_pd(row + b));
        }
        return;
    }
    for (int a = 0; a < n; a += 4)
        for (int b = 0; b < n; b += 4) {
            /* s[k * col_stride + i] is out[a + i][b + k] */
            const double* s = src + (size_t)a + b * col_stride;
            const __m256d r0 = _mm256_loadu_pd(s), r1 = _mm256_loadu_pd(s + col_stride);
            const __m256d r2 = _mm256_loadu_pd(s + 2 * col_stride);
            const __m256d r3 = _mm256_loadu_pd(s + 3 * col_stride);
            const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
            const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            double* o = out + (size_t)a * n + b;
            stream4(o, _mm256_permute2f128_pd(t0, t2, 0x20));
            stream4(o + n, _mm256_permute2f128_pd(t1, t3, 0x20));
            stream4(o + 2 * (size_t)n, _mm256_permute2f128_pd(t0, t2, 0x31));
            stream4(o + 3 * (size_t)n, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
}
#endif

/* out (n x n) = src[a' * row_stride + b * col_stride], a' = rows[a] (rows NULL: a' = a,
 * and only then may col_stride be other than 1); streamed (see above) if asked, and then
 * the caller fences (stream_fence) before anything reads out. */
static void put_matrix(double* restrict out, const double* restrict src, const int* rows,
                       size_t row_stride, size_t col_stride, int n, int stream)
{
#ifdef MB_HAVE_AVX
    if (stream && n % 4 == 0 && ((uintptr_t)out & 15) == 0 &&
        (col_stride == 1 || row_stride == 1)) {
        stream_blocks(out, src, rows, row_stride, col_stride, n);
        return;
    }
#endif
#ifdef MB_HAVE_STREAM
    if (stream) {
        for (int a = 0; a < n; ++a) {
            const double* row = src + (size_t)(rows ? rows[a] : a) * row_stride;
            for (int b = 0; b < n; ++b) {
                long long bits;
                memcpy(&bits, row + b * col_stride, sizeof bits);
                _mm_stream_si64((long long*)(out + (size_t)a * n + b), bits);
            }
        }
        return;
    }
#endif
    (void)stream;
    for (int a = 0; a < n; ++a) {
        const double* row = src + (size_t)(rows ? rows[a] : a) * row_stride;
        for (int b = 0; b < n; ++b) out[(size_t)a * n + b] = row[b * col_stride];
    }
}

static void stream_fence(int stream)
{
#ifdef MB_HAVE_STREAM
    if (stream) _mm_sfence();
#endif
    (void)stream;
}

/* out (used) = Σ_t coef[t] rows[t][0:used], summed from 0 in the entries' order (as
 * AXPYs into a zeroed column would, bit for bit), sixteen entries at a time in four
 * vector accumulators (independent, so the additions' latency is hidden): a load per
 * entry and term instead of an AXPY's load and store, and no zeroing pass. */
static void column_sum(double* restrict out, const double* const* rows, const double* coef,
                       int count, size_t used)
{
    size_t i = 0;
#ifdef MB_HAVE_AVX
    for (; i + 16 <= used; i += 16) {
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
        for (int t = 0; t < count; ++t) {
            const __m256d c = _mm256_set1_pd(coef[t]);
            const double* z = rows[t] + i;
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(c, _mm256_loadu_pd(z)));
            a1 = _mm256_add_pd(a1, _mm256_mul_pd(c, _mm256_loadu_pd(z + 4)));
            a2 = _mm256_add_pd(a2, _mm256_mul_pd(c, _mm256_loadu_pd(z + 8)));
            a3 = _mm256_add_pd(a3, _mm256_mul_pd(c, _mm256_loadu_pd(z + 12)));
        }
        _mm256_storeu_pd(out + i, a0);
        _mm256_storeu_pd(out + i + 4, a1);
        _mm256_storeu_pd(out + i + 8, a2);
        _mm256_storeu_pd(out + i + 12, a3);
    }
    for (; i + 4 <= used; i += 4) {
        __m256d a0 = _mm256_setzero_pd();
        for (int t = 0; t < count; ++t)
            a0 = _mm256_add_pd(a0, _mm256_mul_pd(_mm256_set1_pd(coef[t]),
                                                 _mm256_loadu_pd(rows[t] + i)));
        _mm256_storeu_pd(out + i, a0);
    }
#endif
    for (; i + 4 <= used; i += 4) {  /* without AVX: four independent sums */
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        for (int t = 0; t < count; ++t) {
            const double c = coef[t], *z = rows[t] + i;
            a0 += c * z[0];
            a1 += c * z[1];
            a2 += c * z[2];
            a3 += c * z[3];
        }
        out[i] = a0;
        out[i + 1] = a1;
        out[i + 2] = a2;
        out[i + 3] = a3;
    }
    for (; i < used; ++i) {
        double acc = 0.0;
        for (int t = 0; t < count; ++t) acc += coef[t] * rows[t][i];
        out[i] = acc;
    }
}

/* ∂q̈/∂q = [P G] [X; Y] and ∂q̈/∂q̇ alike, [P G] being the q rows of the KKT inverse (every
 * path provides them as w->zbase and w->zorder say, the first n entries of row `node`
 * holding column `node` of [P G]: the inverse is symmetric on the sparse paths, the dense
 * path stores [P G]ᵀ). So each term entry (node, column j, value v) adds v times those n contiguous
 * entries to column j of the product (a vectorized AXPY into w->JT, transposed at the
 * end). */
void mb_dynamics_jacobians(mb_ws* w, const double* q, const double* qd, const double* p,
                           double* Jq, double* Jqd, double* JQ)
{
    const int n = w->n;
    const size_t stride = (size_t)(n + w->r), used = (size_t)n;  /* a row of Z; its q part */
    const int stream = (long)n * n >= STREAM_MIN_ENTRIES;
    term t[8];
    if (w->factored_sparse) {
        mb_sparse_inverse(w);
    } else {
        mb_dense_inverse_columns(w, w->Z);
        w->zbase = w->Z;
        w->zorder = NULL;
    }
    const double* Z = w->zbase;
    const int* zorder = w->zorder;
    if (JQ) put_matrix(JQ, Z, zorder, stride, 1, n, stream);
    if (w->factored_unrolled && !zorder && w->model->kkt->jacobians) {
        /* the module's unrolled products, on its inverse in node order */
        if (Jq) jacobian_terms(w, q, qd, p, 0, t);
        if (Jqd) jacobian_terms(w, q, qd, p, 1, t);
        w->model->kkt->jacobians(w->Z, w->kv, w->aux, w->opt->alpha, w->opt->beta, Jq, Jqd);
        stream_fence(stream);
        return;
    }
    for (int wrt = 0; wrt < 2; ++wrt) {
        double* out = wrt == 0 ? Jq : Jqd;
        if (!out) continue;
        const int count = jacobian_terms(w, q, qd, p, wrt, t);
        /* the terms' entries bucketed by column (a stable counting sort), each with the
         * row of the inverse it scales */
        int* start = w->jstart;  /* column j's entries: [start[j], start[j + 1]) */
        for (int j = 0; j <= n + 1; ++j) start[j] = 0;
        for (int s = 0; s < count; ++s) {
            const mb_kernel* k = t[s].k;
            for (int e = 0; e < k->nnz; ++e)
                if (!t[s].constraint_rows || w->plan->rowpos[k->row[e]] >= 0)
                    ++start[k->col[e] + 2];
        }
        for (int j = 2; j <= n + 1; ++j) start[j] += start[j - 1];
        for (int s = 0; s < count; ++s) {  /* start[j + 1]: column j's next free place */
            const mb_kernel* k = t[s].k;
            for (int e = 0; e < k->nnz; ++e) {
                int node = k->row[e];
                if (t[s].constraint_rows) {
                    node = w->plan->rowpos[node];
                    if (node < 0) continue;
                    node += n;
                }
                if (zorder) node = zorder[node];
                const int at = start[k->col[e] + 1]++;
                w->jrow[at] = Z + (size_t)node * stride;
                w->jcoef[at] = t[s].sign * t[s].v[e];
            }
        }
        double* JT = w->JT;  /* n columns of `used` entries */
        for (int j = 0; j < n; ++j)
            column_sum(JT + (size_t)j * used, w->jrow + start[j], w->jcoef + start[j],
                       start[j + 1] - start[j], used);
        put_matrix(out, JT, NULL, 1, used, n, stream);
    }
    stream_fence(stream);
}

/* ---- kinematics ------------------------------------------------------------------------ */

/* Factor the kinematic problem at q: A (z columns held) for corrections A Δ = b. */
static int kinematic_factor(mb_ws* w, const double* q, const double* p, const int* zfix,
                            int nz, int minimum_norm)
{
    mb_eval_one(w->model, MB_K_PHI_Q, q, NULL, p, w->kv[MB_K_PHI_Q]);
    if (uses_sparse(w)) {
        return mb_sparse_factor(w, q, p, 1, minimum_norm ? NULL : zfix,
                                minimum_norm ? 0 : nz, NULL);
    }
    mb_dense_build_A(w);
    if (minimum_norm) return MB_OK;
    return mb_dense_partition(w, zfix, nz, 1);
}

/* Δ (n) with A Δ = b (active rows), Δ[z] = 0 or Δ of least norm, after kinematic_factor. */
static int kinematic_solve(mb_ws* w, const double* b, double* delta, int minimum_norm)
{
    if (w->factored_sparse) {
        double* rhs = w->tmp_n;
        mb_sparse_rhs(w, NULL, b, rhs);
        mb_sparse_solve(w, rhs, rhs);
        mb_copy(delta, rhs, w->n);
        return MB_OK;
    }
    if (minimum_norm) return mb_dense_min_norm(w, b, delta);
    mb_dense_solve_S(w, b, delta);
    return MB_OK;
}

int mb_choose_z(mb_ws* w, const double* q, const double* p, int* ind)
{
    mb_eval_one(w->model, MB_K_PHI_Q, q, NULL, p, w->kv[MB_K_PHI_Q]);
    mb_dense_build_A(w);
    const int st = mb_dense_partition(w, NULL, 0, 1);
    if (!st) for (int j = 0; j < w->d; ++j) ind[j] = w->pcol[w->r + j];
    return st;
}

static int check_indices(const mb_ws* w, const int* zfix, int nz)
{
    if (nz && nz != w->d) return MB_BAD_ARGUMENT;
    for (int j = 0; j < nz; ++j) if (zfix[j] < 0 || zfix[j] >= w->n) return MB_BAD_ARGUMENT;
    return MB_OK;
}

int mb_position_one(mb_ws* w, double* q, const double* p, const int* zfix, int nz,
                    int minimum_norm, double tol, int max_iter)
{
    const int r = w->r, n = w->n, m = w->m;
    double* ph = w->kv[MB_K_PHI];
    double* b = w->residual;
    double* delta = w->Sc;
    int* ind = w->ind;
    int have_z = nz > 0 || minimum_norm;
    int st = check_indices(w, zfix, nz);
    if (st) return st;
    if (nz) memcpy(ind, zfix, sizeof(int) * (size_t)nz);
    for (int it = 0; it <= max_iter; ++it) {
        if (!mb_all_finite(q, n)) return MB_NOT_FINITE;
        mb_eval_one(w->model, MB_K_PHI, q, NULL, p, ph);
        double err = 0.0;
        for (int k = 0; k < r; ++k) {
            b[k] = ph[w->plan->rows[k]];
            if (fabs(b[k]) > err) err = fabs(b[k]);
        }
        if (err <= tol) {
            /* Rows dropped as redundant must hold too, or the model contradicts itself:
             * to within what the kept rows hold (1e5 tol), or round-off in |q|² (no
             * absolute floor, which would pass a contradiction in a small mechanism). */
            double qn = 0.0;
            for (int i = 0; i < n; ++i) qn += q[i] * q[i];
            const double consistent = fmax(1e5 * tol, 1e-10 * qn);
            for (int i = 0; i < m; ++i)
                if (fabs(ph[i]) > consistent) return MB_INCONSISTENT;
            return MB_OK;
        }
        if (!(err < INFINITY)) return MB_NOT_FINITE;
        if (it == max_iter) break;
        if (!have_z) {  /* z by full pivoting at the guess, then kept */
            st = mb_choose_z(w, q, p, ind);
            if (st) return st;
            have_z = 1;
        }
        const int use_nz = minimum_norm ? 0 : w->d;
        st = kinematic_factor(w, q, p, ind, use_nz, minimum_norm);
        if (!st) st = kinematic_solve(w, b, delta, minimum_norm);
        if (st) return st;
        for (int i = 0; i < n; ++i) q[i] -= delta[i];
    }
    return MB_NO_CONVERGENCE;
}

/* v in place so that A v = target (NULL: 0), keeping v[z] or moving v the least. */
static int correct_rates(mb_ws* w, const double* q, double* v, const double* target,
                         const double* p, const int* zfix, int nz, int minimum_norm)
{
    const int n = w->n, r = w->r;
    int* ind = w->ind;
    int st = check_indices(w, zfix, nz);
    if (st) return st;
    if (!mb_all_finite(q, n) || !mb_all_finite(v, n)) return MB_NOT_FINITE;
    if (!minimum_norm) {
        if (!nz) st = mb_choose_z(w, q, p, ind);
        else if (zfix != ind) memcpy(ind, zfix, sizeof(int) * (size_t)nz);
        if (st) return st;
    }
    st = kinematic_factor(w, q, p, ind, w->d, minimum_norm);
    if (st) return st;
    double* b = w->residual;
    double* delta = w->Sc;
    double* Av = w->tmp_n2;
    phiq_times(w, v, Av);
    for (int k = 0; k < r; ++k) b[k] = Av[k] - (target ? target[k] : 0.0);
    st = kinematic_solve(w, b, delta, minimum_norm);
    if (st) return st;
    for (int i = 0; i < n; ++i) v[i] -= delta[i];
    return MB_OK;
}

int mb_velocity_one(mb_ws* w, const double* q, double* qd, const double* p,
                    const int* zfix, int nz, int minimum_norm)
{
    return correct_rates(w, q, qd, NULL, p, zfix, nz, minimum_norm);
}

/* ---- batched API -------------------------------------------------------------------- */

int mb_forward_dynamics_one(mb_workspace* w, const double* q, const double* qd,
    const double* Qext, const double* p, double* qdd, double* lam, double* Jq,
    double* Jqd, double* JQ)
{
    const int jac = Jq || Jqd || JQ;
    if (jac && !w->Z) return MB_BAD_ARGUMENT;  /* made without Jacobian memory */
    if (!w->Kd && !uses_sparse(w)) return MB_BAD_ARGUMENT;  /* made for the sparse path */
    const int st = mb_dynamics_one(w, q, qd, Qext, p, qdd, lam, jac);
    if (st == MB_OK && jac) mb_dynamics_jacobians(w, q, qd, p, Jq, Jqd, JQ);
    return st;
}

/* The kernels of dynamics.c's jacobian_terms that the lanes evaluate (no Baumgarte terms:
 * the lanes run without stabilization) */
static const int jacobian_lane_kernels[] = {MB_K_FORCES_Q, MB_K_MASS_V_Q, MB_K_PHIQT_LAM_Q,
    MB_K_DPHIQ_QD_Q, MB_K_PHIQ_V_Q, MB_K_FORCES_QD, MB_K_DPHIQ_QD_QD};
enum { JACOBIAN_LANE_KERNELS = sizeof jacobian_lane_kernels / sizeof *jacobian_lane_kernels };

/* Whether the module has lane functions for ∂q̈/∂q, ∂q̈/∂q̇ and ∂q̈/∂Q too. */
static int jacobians_have_lanes(const mb_model* model)
{
    const mb_kkt* kkt = model->kkt;
    if (!kkt || !kkt->inverse_lanes || !kkt->jacobians_lanes) return 0;
    for (int k = 0; k < JACOBIAN_LANE_KERNELS; ++k) {
        const mb_kernel* kernel = &model->kernel[jacobian_lane_kernels[k]];
        if (kernel->nnz && !kernel->lanes) return 0;
    }
    return 1;
}

/* Scratch of the Jacobians in lanes, [entry][lane]: the multipliers on every row, the
 * kernels' values (kv by MB_K_*), K⁻¹ and the two Jacobians. */
typedef struct {
    double *lam, *Z, *Jq, *Jqd;
    double* kv[MB_KERNEL_COUNT];
    double* block;
    double* rest;  /* independent_lanes' arrays (independent_lanes_size doubles) */
} jacobian_lanes;

static size_t independent_lanes_size(const mb_plan* plan);

/* J's arrays in w->lane_jacobians, made on the workspace's first call that needs them */
static int jacobian_lanes_get(mb_ws* w, jacobian_lanes* J)
{
    const mb_plan* plan = w->plan;
    const mb_model* model = plan->model;
    const size_t n = (size_t)model->n, N = n + (size_t)plan->r, W = MB_LANES;
    size_t total = (size_t)model->m + N * N + 2 * n * n;
    for (int k = 0; k < JACOBIAN_LANE_KERNELS; ++k)
        total += (size_t)model->kernel[jacobian_lane_kernels[k]].nnz + 1;
    const size_t jacobians = total;
    total += independent_lanes_size(plan);  /* one block for both calls */
    memset(J, 0, sizeof *J);
    if (!w->lane_jacobians) w->lane_jacobians = (double*)malloc(sizeof(double) * total * W);
    J->block = w->lane_jacobians;
    if (!J->block) return MB_NO_MEMORY;
    double* next = J->block;
    J->lam = next; next += (size_t)model->m * W;
    J->Z = next; next += N * N * W;
    J->Jq = next; next += n * n * W;
    J->Jqd = next; next += n * n * W;
    for (int k = 0; k < JACOBIAN_LANE_KERNELS; ++k) {
        J->kv[jacobian_lane_kernels[k]] = next;
        next += ((size_t)model->kernel[jacobian_lane_kernels[k]].nnz + 1) * W;
    }
    J->rest = J->block + jacobians * W;
    return MB_OK;
}

/* After mb_dynamics_lanes: λ of every row (the kept rows' from s->b, the others 0) and the
 * lanes' values of the Jacobian kernels both forward and independent dynamics read
 * (J->kv), at the lanes' q, q̇, q̈ and λ. */
static void jacobian_kernels_in_lanes(const mb_plan* plan, const mb_lanes* s,
                                      jacobian_lanes* J)
{
    enum { W = MB_LANES };
    const mb_model* model = plan->model;
    const int n = model->n, r = plan->r;
    mb_zero(J->lam, (long)model->m * W);
    for (int k = 0; k < r; ++k)
        mb_copy(J->lam + (long)plan->rows[k] * W, s->b + (long)(n + k) * W, W);
    const double* x[JACOBIAN_LANE_KERNELS] = {s->qd, s->x1, J->lam, s->qd, s->x1, s->qd,
                                              s->qd};
    for (int k = 0; k < JACOBIAN_LANE_KERNELS; ++k) {
        const mb_kernel* kernel = &model->kernel[jacobian_lane_kernels[k]];
        if (kernel->nnz) kernel->lanes(s->q, x[k], s->p, J->kv[jacobian_lane_kernels[k]]);
    }
}

/* After mb_dynamics_lanes (s->b: [q̈; λ of the kept rows] in node order, s->x1: q̈): the
 * lanes' ∂q̈/∂q, ∂q̈/∂q̇ (J->Jq, J->Jqd) and K⁻¹ (J->Z), as mb_dynamics_jacobians gives
 * each state on the unrolled path. */
static void jacobians_in_lanes(const mb_plan* plan, mb_lanes* s, jacobian_lanes* J,
                               int want_q, int want_qd)
{
    const mb_model* model = plan->model;
    jacobian_kernels_in_lanes(plan, s, J);
    model->kkt->inverse_lanes(s->L, s->D, J->Z);
    model->kkt->jacobians_lanes(J->Z, J->kv, NULL, 0.0, 0.0, want_q ? J->Jq : NULL,
                                want_qd ? J->Jqd : NULL);
}

/* q̈ (and, with Jq, Jqd, JQ, its Jacobians) of the states [0, count) in blocks of MB_LANES
 * side by side (the module's lane functions, in SIMD registers), each state its own
 * parameters; a lane that fails is done again alone for its status, and the states after
 * the last whole block alone. *done: how many were handled. The lanes' scratch is kept in
 * w (made on its first call). */
static int forward_dynamics_lanes(mb_ws* w, long count, const double* q, long q_stride,
    const double* qd, long qd_stride, const double* Qext, long Q_stride, const double* p,
    long p_stride, double* qdd, double* Jq, double* Jqd, double* JQ, int* status,
    long* done)
{
    enum { W = MB_LANES };
    const mb_plan* plan = w->plan;
    const mb_options* options = w->opt;
    const int n = plan->model->n, N = n + plan->r;
    const long nn = (long)n * n;
    const int jacobians = Jq || Jqd || JQ;
    int failed = 0;
    jacobian_lanes J;
    *done = 0;
    if (!w->lanes) w->lanes = mb_lanes_new(plan);
    mb_lanes* s = w->lanes;
    if (!s || (jacobians && jacobian_lanes_get(w, &J))) return MB_NO_MEMORY;
    for (long s0 = 0; s0 + W <= count; s0 += W) {
        mb_transpose(q + s0 * q_stride, q_stride, W, n, s->q, W);
        mb_transpose(qd + s0 * qd_stride, qd_stride, W, n, s->qd, W);
        if (Qext)
            mb_transpose(Qext + s0 * Q_stride, Q_stride, W, n, s->e, W);
        else
            mb_zero(s->e, (long)n * W);
        for (int l = 0; l < W; ++l) s->bad[l] = 0;
        mb_lanes_load_p(s, plan->model->np, p + s0 * p_stride, p_stride);
        mb_dynamics_lanes(plan, options, s, s->q, s->qd, s->e, 0, s->x1);
        if (jacobians) jacobians_in_lanes(plan, s, &J, Jq != NULL, Jqd != NULL);
        /* every lane's q̈ out (a bad lane's is then written over) */
        if (qdd) mb_transpose(s->x1, W, n, W, qdd + s0 * n, n);
        for (int l = 0; l < W; ++l) {
            const long k = s0 + l;
            double* out[4] = {qdd ? qdd + k * n : NULL, Jq ? Jq + k * nn : NULL,
                              Jqd ? Jqd + k * nn : NULL, JQ ? JQ + k * nn : NULL};
            if (s->bad[l]) {
                status[k] = mb_forward_dynamics_one(w, q + k * q_stride, qd + k * qd_stride,
                                                    Qext ? Qext + k * Q_stride : NULL,
                                                    p + k * p_stride, out[0], NULL, out[1],
                                                    out[2], out[3]);
                if (status[k] != MB_OK) {
                    mb_fill_nan(out[0], n);
                    for (int a = 1; a < 4; ++a) mb_fill_nan(out[a], nn);
                    failed++;
                }
                continue;
            }
            status[k] = MB_OK;
            /* the Jacobians state by state: transposed in 4 x 4 blocks, a batch of 10⁵
             * states measured 10 % slower (benchmarks/peers.py) */
            if (out[1])
                for (long e = 0; e < nn; ++e) out[1][e] = J.Jq[e * W + l];
            if (out[2])
                for (long e = 0; e < nn; ++e) out[2][e] = J.Jqd[e * W + l];
            if (out[3])  /* ∂q̈/∂Q: K⁻¹'s q block */
                for (int a = 0; a < n; ++a)
                    for (int b = 0; b < n; ++b)
                        out[3][a * n + b] = J.Z[((long)a * N + b) * W + l];
        }
        *done = s0 + W;
    }
    return failed;
}

int mb_forward_dynamics_in(mb_workspace* w, long count, const double* q, long q_stride,
    const double* qd, long qd_stride, const double* Qext, long Q_stride, const double* p,
    long p_stride, double* qdd, double* lam, double* Jq, double* Jqd, double* JQ,
    int* status)
{
    const mb_plan* plan = w->plan;
    const mb_options* options = w->opt;
    const int n = plan->model->n, m = plan->model->m;
    const long nn = (long)n * n;
    int failed = 0;
    long first = 0;  /* the states before it are done in lanes */
    if (((Jq || Jqd || JQ) && !w->Z) || (!w->Kd && !uses_sparse(w))) {
        /* made without Jacobian memory, or for the sparse path only */
        for (long s = 0; s < count; ++s) {
            status[s] = MB_BAD_ARGUMENT;
            mb_fill_nan(qdd ? qdd + s * n : NULL, n);
            mb_fill_nan(lam ? lam + s * m : NULL, m);
            mb_fill_nan(Jq ? Jq + s * nn : NULL, nn);
            mb_fill_nan(Jqd ? Jqd + s * nn : NULL, nn);
            mb_fill_nan(JQ ? JQ + s * nn : NULL, nn);
        }
        return (int)count;
    }
    if (!lam && count >= MB_LANES && mb_dynamics_uses_lanes(plan, options) &&
        (!(Jq || Jqd || JQ) || jacobians_have_lanes(plan->model))) {
        failed = forward_dynamics_lanes(w, count, q, q_stride, qd, qd_stride, Qext,
                                        Q_stride, p, p_stride, qdd, Jq, Jqd, JQ, status,
                                        &first);
        if (failed == MB_NO_MEMORY) return MB_NO_MEMORY;
    }
    for (long s = first; s < count; ++s) {
        double* out[5] = {qdd ? qdd + s * n : NULL, lam ? lam + s * m : NULL,
                          Jq ? Jq + s * nn : NULL, Jqd ? Jqd + s * nn : NULL,
                          JQ ? JQ + s * nn : NULL};
        status[s] = mb_forward_dynamics_one(w, q + s * q_stride, qd + s * qd_stride,
                                            Qext ? Qext + s * Q_stride : NULL,
                                            p + s * p_stride, out[0], out[1], out[2],
                                            out[3], out[4]);
        if (status[s] != MB_OK) {
            mb_fill_nan(out[0], n);
            mb_fill_nan(out[1], m);
            for (int k = 2; k < 5; ++k) mb_fill_nan(out[k], nn);
            failed++;
        }
    }
    return failed;
}

int mb_forward_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, double* qdd, double* lam, double* Jq,
    double* Jqd, double* JQ, int* status)
{
    mb_ws* w = mb_ws_new(plan, options, Jq || Jqd || JQ ? MB_WS_JACOBIANS : 0);
    if (!w) return MB_NO_MEMORY;
    const int failed = mb_forward_dynamics_in(w, count, q, q_stride, qd, qd_stride, Qext,
                                              Q_stride, p, p_stride, qdd, lam, Jq, Jqd, JQ,
                                              status);
    mb_ws_free(w);
    return failed;
}

int mb_partition(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* p, long p_stride, const int* zfix, int nz,
    int* ind, double* R, double* Sc, const double* qd, long qd_stride, int* status)
{
    const int n = plan->model->n;
    mb_ws* w = mb_ws_new(plan, options, 0);
    int failed = 0;
    if (!w) return MB_NO_MEMORY;
    const int d = w->d, r = w->r;
    for (long s = 0; s < count; ++s) {
        const double* qs = q + s * q_stride;
        const double* ps = p + s * p_stride;
        int st = check_indices(w, zfix, nz);
        if (!st && !mb_all_finite(qs, n)) st = MB_NOT_FINITE;
        if (!st) {
            mb_eval_one(plan->model, MB_K_PHI_Q, qs, NULL, ps, w->kv[MB_K_PHI_Q]);
            mb_dense_build_A(w);
            st = mb_dense_partition(w, nz ? zfix : NULL, nz, 1);
        }
        status[s] = st;
        if (st) {
            failed++;
            mb_fill_nan(R + s * n * d, (long)n * d);
            mb_fill_nan(Sc ? Sc + s * n : NULL, n);
            continue;
        }
        for (int j = 0; j < d; ++j) ind[s * d + j] = w->pcol[r + j];
        mb_copy(R + s * n * d, w->R, n * d);
        if (Sc && qd) {
            double* dd = w->kv[MB_K_DPHIQ_QD];
            mb_eval_one(plan->model, MB_K_DPHIQ_QD, qs, qd + s * qd_stride, ps, dd);
            for (int k = 0; k < r; ++k) w->c[k] = -dd[plan->rows[k]];
            mb_dense_solve_S(w, w->c, Sc + s * n);
        }
    }
    mb_ws_free(w);
    return failed;
}

int mb_solve_position(const mb_plan* plan, const mb_options* options, long count, double* q,
    const double* p, long p_stride, const int* zfix, int nz, int minimum_norm, double tol,
    int max_iter, int* status)
{
    mb_ws* w = mb_ws_new(plan, options, 0);
    int failed = 0;
    if (!w) return MB_NO_MEMORY;
    for (long s = 0; s < count; ++s) {
        status[s] = mb_position_one(w, q + s * plan->model->n, p + s * p_stride, zfix, nz,
                                    minimum_norm, tol, max_iter);
        failed += status[s] != MB_OK;
    }
    mb_ws_free(w);
    return failed;
}

int mb_solve_velocity(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, double* qd, const double* p, long p_stride,
    const int* zfix, int nz, int minimum_norm, int* status)
{
    const int n = plan->model->n;
    mb_ws* w = mb_ws_new(plan, options, 0);
    int failed = 0;
    if (!w) return MB_NO_MEMORY;
    for (long s = 0; s < count; ++s) {
        status[s] = correct_rates(w, q + s * q_stride, qd + s * n, NULL, p + s * p_stride,
                                  zfix, nz, minimum_norm);
        if (status[s]) mb_fill_nan(qd + s * n, n);
        failed += status[s] != MB_OK;
    }
    mb_ws_free(w);
    return failed;
}

int mb_solve_acceleration(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* zdd,
    long zdd_stride, const double* p, long p_stride, const int* zfix, int nz, double* qdd,
    int* status)
{
    const int n = plan->model->n;
    mb_ws* w = mb_ws_new(plan, options, 0);
    int failed = 0;
    if (!w) return MB_NO_MEMORY;
    const int r = w->r, d = w->d;
    for (long s = 0; s < count; ++s) {
        const double* qs = q + s * q_stride;
        const double* ps = p + s * p_stride;
        double* out = qdd + s * n;
        int* ind = w->ind;
        int st = check_indices(w, zfix, nz);
        if (!st && !nz) st = mb_choose_z(w, qs, ps, ind);
        else if (!st) memcpy(ind, zfix, sizeof(int) * (size_t)d);
        if (!st) {
            double* dd = w->kv[MB_K_DPHIQ_QD];
            double* c = w->c;
            mb_eval_one(plan->model, MB_K_DPHIQ_QD, qs, qd + s * qd_stride, ps, dd);
            for (int k = 0; k < r; ++k) c[k] = -dd[plan->rows[k]];
            mb_zero(out, n);
            for (int j = 0; j < d; ++j) out[ind[j]] = zdd[s * zdd_stride + j];
            st = correct_rates(w, qs, out, c, ps, ind, d, 0);
        }
        status[s] = st;
        if (st) mb_fill_nan(out, n);
        failed += st != MB_OK;
    }
    mb_ws_free(w);
    return failed;
}

/* ---- independent coordinates ------------------------------------------------------------ */

/* q-part of [M Aᵀ; A 0]⁻¹ [top; bottom] with the factors of the last dynamics solve. */
static void dynamics_apply(mb_ws* w, const double* top, const double* bottom, double* out)
{
    const int n = w->n, r = w->r;
    if (w->factored_sparse) {
        double* b = w->tmp_n;
        mb_copy(b, top, n);
        mb_copy(b + n, bottom, r);
        mb_sparse_solve(w, b, b);
        mb_copy(out, b, n);
        return;
    }
    mb_copy(w->X, top, n);
    mb_copy(w->Y, bottom, r);
    mb_dense_apply(w, w->X, 1, out, 1);
}

static int independent_at(mb_ws* w, mb_ws* wk, const double* q, const double* qd,
                          const double* Qext, const double* p, const int* ind, double* zdd,
                          double* Jz, double* Jzd, double* JzQ);

/* z̈ and (optionally) its Jacobians at one consistent state; wk holds the kinematics. */
int mb_independent_one(mb_ws* w, mb_ws* wk, const double* q, const double* qd,
                       const double* Qext, const double* p, const int* zfix, int nz,
                       double* zdd, double* Jz, double* Jzd, double* JzQ)
{
    int* ind = wk->ind;
    int st = check_indices(w, zfix, nz);
    if (st) return st;
    if (nz && mb_joint_space_applies(w->plan, w->opt, zfix, nz))
        return mb_joint_space_one(w, q, qd, Qext, p, zdd, Jz, Jzd, JzQ);
    if (nz) memcpy(ind, zfix, sizeof(int) * (size_t)w->d);
    else if ((st = mb_choose_z(wk, q, p, ind))) return st;
    return independent_at(w, wk, q, qd, Qext, p, ind, zdd, Jz, Jzd, JzQ);
}

/* mb_independent_one's KKT path once z (ind, d) is known */
static int independent_at(mb_ws* w, mb_ws* wk, const double* q, const double* qd,
                          const double* Qext, const double* p, const int* ind, double* zdd,
                          double* Jz, double* Jzd, double* JzQ)
{
    const int n = w->n, r = w->r, d = w->d;
    int st;
    const int jac = Jz || Jzd || JzQ;
    st = mb_dynamics_one(w, q, qd, Qext, p, NULL, NULL, jac);
    if (st) return st;
    for (int j = 0; j < d; ++j) zdd[j] = w->qdd[ind[j]];
    if (!jac) return MB_OK;
    if (!w->factored_sparse) mb_dense_jacobian_blocks(w, NULL, 0);
    st = kinematic_factor(wk, q, p, ind, d, 0);
    if (st) return st;
    term tq[8], tv[8];
    const int cq = jacobian_terms(w, q, qd, p, 0, tq);
    const int cv = jacobian_terms(w, q, qd, p, 1, tv);
    /* (Φq q̇)_q: how the velocity constraint moves with q */
    double* tangent = wk->aux;
    mb_eval_one(w->model, MB_K_PHIQ_V_Q, q, qd, p, tangent);
    const mb_kernel* kt = &w->model->kernel[MB_K_PHIQ_V_Q];
    const mb_kernel* ka = &w->model->kernel[MB_K_PHI_Q];
    double* dq = wk->tmp_n2;      /* n: R e_k */
    double* dqd = wk->qdd;        /* n: ∂q̇/∂z e_k */
    double* b = wk->c;            /* r */
    double* top = w->Q;           /* reused: Q is no longer needed */
    double* bottom = w->c;
    double* top2 = w->Sc;
    double* bottom2 = w->tmp_r;
    double* out = wk->Q;          /* n */
    for (int k = 0; k < d; ++k) {
        /* δq = R e_k: A δq = 0 with δq[z] = e_k */
        mb_zero(b, r);  /* -(column z_k of A) */
        for (int e = 0; e < ka->nnz; ++e) {
            const int i = w->plan->rowpos[ka->row[e]];
            if (i >= 0 && ka->col[e] == ind[k]) b[i] = -w->kv[MB_K_PHI_Q][e];
        }
        if ((st = kinematic_solve(wk, b, dq, 0))) return st;
        dq[ind[k]] = 1.0;
        /* ∂z̈/∂ż e_k: δq̇ = R e_k */
        if (Jzd) {
            terms_times(w, tv, cv, dq, top, bottom);
            dynamics_apply(w, top, bottom, out);
            for (int j = 0; j < d; ++j) Jzd[j * d + k] = out[ind[j]];
        }
        if (Jz) {
            /* δq̇ = -S (Φq q̇)_q δq */
            mb_zero(b, r);
            for (int e = 0; e < kt->nnz; ++e) {
                const int i = w->plan->rowpos[kt->row[e]];
                if (i >= 0) b[i] -= tangent[e] * dq[kt->col[e]];
            }
            if ((st = kinematic_solve(wk, b, dqd, 0))) return st;
            for (int j = 0; j < d; ++j) dqd[ind[j]] = 0.0;
            terms_times(w, tq, cq, dq, top, bottom);
            terms_times(w, tv, cv, dqd, top2, bottom2);
            for (int i = 0; i < n; ++i) top[i] += top2[i];
            for (int i = 0; i < r; ++i) bottom[i] += bottom2[i];
            dynamics_apply(w, top, bottom, out);
            for (int j = 0; j < d; ++j) Jz[j * d + k] = out[ind[j]];
        }
    }
    if (JzQ) {
        mb_zero(bottom, r);
        for (int j = 0; j < d; ++j) {
            mb_zero(top, n);
            top[ind[j]] = 1.0;
            dynamics_apply(w, top, bottom, JzQ + j * n);  /* row z_j of P = column */
        }
    }
    return MB_OK;
}

/* ---- independent coordinates in lanes --------------------------------------------------- */

/* mb_independent_one for MB_LANES states side by side, each lane the one-state code's
 * arithmetic in its order (so bit for bit its results): the dynamics in lanes
 * (mb_dynamics_lanes), the kinematic problem on sparse.c's generic LDLᵀ of the held
 * coordinates' pattern, each of the d directions by one or two kinematic solves and one
 * unrolled KKT solve. [entry][lane] arrays, in J->rest: */
typedef struct {
    double *Kx, *Lx, *D, *y, *akkt, *gamma;  /* the kinematic factor (sparse.c's names) */
    double *tangent, *dq, *dqd, *rhs, *rhs2, *sol, *zdd, *Jz, *Jzd, *JzQ;
    int* chosen;  /* Z_CHUNK x d, then Z_CHUNK: independent_dynamics_lanes' z per state */
} independent_lanes;

/* States chosen per chunk when z is not given: each state's z by full pivoting, as
 * mb_independent_one chooses it, then the chunk's states of one z in blocks of lanes (the
 * few left of each z go alone: at most 7 in 512 per z) */
enum { Z_CHUNK = 512 };

static size_t independent_lanes_size(const mb_plan* plan)
{
    const mb_model* model = plan->model;
    const mb_sparse* sp = &plan->sp;
    const size_t n = (size_t)model->n, N = (size_t)sp->size, d = (size_t)plan->d;
    return (size_t)sp->nnz_k + (size_t)sp->nnz_l + 2 * N + (size_t)model->kernel[MB_K_PHI_Q].nnz +
           1 + (size_t)model->kernel[MB_K_PHIQ_V_Q].nnz + 1 + 2 * n + 3 * N + d + 2 * d * d +
           d * n + (size_t)Z_CHUNK * (d + 1) / MB_LANES + 16;  /* Z_CHUNK (d + 1) ints */
}

static void independent_lanes_carve(const mb_plan* plan, double* next, independent_lanes* K)
{
    enum { W = MB_LANES };
    const mb_model* model = plan->model;
    const mb_sparse* sp = &plan->sp;
    const size_t n = (size_t)model->n, N = (size_t)sp->size, d = (size_t)plan->d;
    const size_t sizes[] = {(size_t)sp->nnz_k, (size_t)sp->nnz_l, N, N,
                            (size_t)model->kernel[MB_K_PHI_Q].nnz + 1, 1,
                            (size_t)model->kernel[MB_K_PHIQ_V_Q].nnz + 1, n, n, N, N, N, d,
                            d * d, d * d, d * n};
    double** arrays[] = {&K->Kx, &K->Lx, &K->D, &K->y, &K->akkt, &K->gamma, &K->tangent,
                         &K->dq, &K->dqd, &K->rhs, &K->rhs2, &K->sol, &K->zdd, &K->Jz,
                         &K->Jzd, &K->JzQ};
    for (size_t k = 0; k < sizeof arrays / sizeof *arrays; ++k) {
        *arrays[k] = next;
        next += sizes[k] * W;
    }
    K->chosen = (int*)next;
}

/* MB_LANES doubles, one per lane, as one value (GNU C's vector extension, as in
 * joint_space.c): the scalar code's arithmetic lane by lane, vectorized whatever the
 * compiler proves about aliasing; read and written in place through kin_at. */
typedef double kin_v __attribute__((vector_size(MB_LANES * sizeof(double))));
typedef int64_t kin_mask __attribute__((vector_size(MB_LANES * sizeof(double))));
typedef double kin_at __attribute__((vector_size(MB_LANES * sizeof(double)), aligned(8),
                                     may_alias));
#define KAT(p) (*(kin_at*)(p))
#define KL(i) ((long)(i) * MB_LANES)
/* where mask (all ones or zero per lane): a, else b */
#define KSELECT(mask, a, b) ((kin_v)(((kin_mask)(a) & (mask)) | ((kin_mask)(b) & ~(mask))))

/* mb_sparse_factor(kinematic, the coordinates held[i] held) on its generic path, in lanes:
 * a_values (Φq's values), bad[l] |= 1 where lane l's checks fail */
static void kinematic_factor_lanes(const mb_plan* plan, const mb_options* options,
                                   const double* a_values, const int* held,
                                   independent_lanes* K, int* bad)
{
    enum { W = MB_LANES };
    const mb_sparse* sp = &plan->sp;
    const mb_kernel* ka = &plan->model->kernel[MB_K_PHI_Q];
    const int n = plan->model->n, N = sp->size, r = plan->r;
    double *a = K->akkt, *Kx = K->Kx, *y = K->y, *Lx = K->Lx, *D = K->D;
    const kin_v zero = {0};
    for (int e = 0; e < ka->nnz; ++e)
        if (held[ka->col[e]]) KAT(a + KL(e)) = zero;
        else KAT(a + KL(e)) = KAT(a_values + KL(e));
    double* norm2 = y;  /* r x W, then zeroed for the factor */
    mb_zero(norm2, (long)r * W);
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = plan->rowpos[ka->row[e]];
        if (k >= 0) KAT(norm2 + KL(k)) += KAT(a + KL(e)) * KAT(a + KL(e));
    }
    kin_v amax2 = zero;
    for (int k = 0; k < r; ++k) {
        const kin_v x = KAT(norm2 + KL(k));
        amax2 = KSELECT(x > amax2, x, amax2);
    }
    const double scale = 1.0;  /* hmax of the kinematic problem */
    const kin_mask singular = ~(amax2 > 0.0);  /* as !(amax2 > 0.0): NaN too */
    kin_v gamma = zero;
    if (r > 0) gamma = scale / amax2;
    KAT(K->gamma) = gamma;
    for (int l = 0; l < W; ++l) bad[l] |= r > 0 && singular[l];
    mb_zero(Kx, (long)sp->nnz_k * W);
    for (int i = 0; i < n; ++i) KAT(Kx + KL(sp->diag[i])) = zero + 1.0;
    for (int t = 0; t < sp->ata_count; ++t)
        KAT(Kx + KL(sp->ata_map[t])) += gamma * KAT(a + KL(sp->ata_k1[t])) *
                                        KAT(a + KL(sp->ata_k2[t]));
    for (int e = 0; e < ka->nnz; ++e)
        if (sp->a_map[e] >= 0) KAT(Kx + KL(sp->a_map[e])) += KAT(a + KL(e));
    /* up-looking LDLᵀ on the static pattern, as mb_sparse_factor */
    const int* Kp = sp->Kp; const int* Ki = sp->Ki; const int* Lp = sp->Lp;
    const int* Li = sp->Li;
    mb_zero(y, (long)N * W);
    kin_mask failed = {0};
    for (int k = 0; k < N; ++k) {
        for (int pp = Kp[k]; pp < Kp[k + 1]; ++pp) KAT(y + KL(Ki[pp])) = KAT(Kx + KL(pp));
        kin_v dk = KAT(y + KL(k));
        KAT(y + KL(k)) = zero;
        for (int t = sp->rowp[k]; t < sp->rowp[k + 1]; ++t) {
            const int i = sp->row_node[t], end = sp->row_slot[t];
            const kin_v yi = KAT(y + KL(i));
            KAT(y + KL(i)) = zero;
            for (int pp = Lp[i]; pp < end; ++pp) KAT(y + KL(Li[pp])) -= KAT(Lx + KL(pp)) * yi;
            const kin_v v = yi / KAT(D + KL(i));
            dk -= v * yi;
            KAT(Lx + KL(end)) = v;
        }
        if (sp->perm[k] < n)
            failed |= ~(dk > options->mass_tol * scale);
        else
            failed |= ~(-dk * gamma > options->pivot_tol);
        KAT(D + KL(k)) = dk;
    }
    for (int l = 0; l < W; ++l) bad[l] |= failed[l] != 0;
}

/* kinematic_solve on the factor above (mb_sparse_rhs, mb_sparse_solve without
 * refinement): delta (n x W) with A delta = b (r x W), delta[z] = 0 */
static void kinematic_solve_lanes(const mb_plan* plan, independent_lanes* K, const double* b,
                                  double* delta)
{
    const mb_sparse* sp = &plan->sp;
    const mb_kernel* ka = &plan->model->kernel[MB_K_PHI_Q];
    const int n = plan->model->n, N = sp->size, r = plan->r;
    const int* Lp = sp->Lp; const int* Li = sp->Li;
    const double *Lx = K->Lx, *D = K->D, *a = K->akkt;
    const kin_v gamma = KAT(K->gamma);
    double *rhs = K->rhs2, *sol = K->sol;
    mb_zero(rhs, KL(n));
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = plan->rowpos[ka->row[e]];
        if (k >= 0) KAT(rhs + KL(ka->col[e])) += gamma * KAT(a + KL(e)) * KAT(b + KL(k));
    }
    mb_copy(rhs + KL(n), b, KL(r));
    for (int i = 0; i < N; ++i) KAT(sol + KL(i)) = KAT(rhs + KL(sp->perm[i]));
    for (int j = 0; j < N; ++j) {  /* ldl_solve, its skip of zeros kept (the sign of 0) */
        const kin_v yj = KAT(sol + KL(j));
        const kin_mask nonzero = yj != 0.0;
        for (int p = Lp[j]; p < Lp[j + 1]; ++p) {
            const kin_v old = KAT(sol + KL(Li[p]));
            KAT(sol + KL(Li[p])) = KSELECT(nonzero, old - KAT(Lx + KL(p)) * yj, old);
        }
    }
    for (int j = 0; j < N; ++j) KAT(sol + KL(j)) /= KAT(D + KL(j));
    for (int j = N - 1; j >= 0; --j) {
        kin_v acc = KAT(sol + KL(j));
        for (int p = Lp[j]; p < Lp[j + 1]; ++p) acc -= KAT(Lx + KL(p)) * KAT(sol + KL(Li[p]));
        KAT(sol + KL(j)) = acc;
    }
    for (int i = 0; i < N; ++i)
        if (sp->perm[i] < n) KAT(delta + KL(sp->perm[i])) = KAT(sol + KL(i));
}

/* terms_times in lanes: [top; bottom] (N x W, node order) = terms · v (n x W) */
static void terms_times_lanes(const mb_plan* plan, const term* t, int count, const double* v,
                              double* top)
{
    const int n = plan->model->n;
    double* bottom = top + KL(n);
    mb_zero(top, KL(n + plan->r));
    for (int s = 0; s < count; ++s)
        for (int e = 0; e < t[s].k->nnz; ++e) {
            int row = t[s].k->row[e];
            if (t[s].constraint_rows && (row = plan->rowpos[row]) < 0) continue;
            KAT((t[s].constraint_rows ? bottom : top) + KL(row)) +=
                t[s].sign * KAT(t[s].v + KL(e)) * KAT(v + KL(t[s].k->col[e]));
        }
}

/* Whether independent dynamics (with Jacobians: jac) run in lanes for this plan */
static int independent_has_lanes(const mb_plan* plan, const mb_options* options, int jac)
{
    if (plan->d <= 0 || !mb_dynamics_uses_lanes(plan, options)) return 0;
    if (!jac) return 1;
    for (int k = 0; k < JACOBIAN_LANE_KERNELS; ++k) {
        const mb_kernel* kernel = &plan->model->kernel[jacobian_lane_kernels[k]];
        if (kernel->nnz && !kernel->lanes) return 0;
    }
    return 1;
}

/* The lanes' z̈ and its Jacobians (into K's arrays) after mb_dynamics_lanes, ind: z */
static void independent_in_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s,
                                 jacobian_lanes* J, independent_lanes* K, const int* ind,
                                 const int* held, int want_z, int want_zd, int want_Q)
{
    enum { W = MB_LANES };
    const mb_model* model = plan->model;
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* kt = &model->kernel[MB_K_PHIQ_V_Q];
    const int n = model->n, r = plan->r, d = plan->d, N = n + r;
    for (int j = 0; j < d; ++j) mb_copy(K->zdd + (long)j * W, s->x1 + (long)ind[j] * W, W);
    if (!(want_z || want_zd || want_Q)) return;
    jacobian_kernels_in_lanes(plan, s, J);
    if (kt->nnz) kt->lanes(s->q, s->qd, s->p, K->tangent);
    kinematic_factor_lanes(plan, options, s->a, held, K, s->bad);
    const mb_kernel* k_ = model->kernel;
    double* const* kv = J->kv;
    const term tq[5] = {{&k_[MB_K_FORCES_Q], kv[MB_K_FORCES_Q], 1.0, 0},
                        {&k_[MB_K_MASS_V_Q], kv[MB_K_MASS_V_Q], -1.0, 0},
                        {&k_[MB_K_PHIQT_LAM_Q], kv[MB_K_PHIQT_LAM_Q], -1.0, 0},
                        {&k_[MB_K_DPHIQ_QD_Q], kv[MB_K_DPHIQ_QD_Q], -1.0, 1},
                        {&k_[MB_K_PHIQ_V_Q], kv[MB_K_PHIQ_V_Q], -1.0, 1}};
    const term tv[2] = {{&k_[MB_K_FORCES_QD], kv[MB_K_FORCES_QD], 1.0, 0},
                        {&k_[MB_K_DPHIQ_QD_QD], kv[MB_K_DPHIQ_QD_QD], -1.0, 1}};
    double *dq = K->dq, *dqd = K->dqd, *top = K->rhs, *b = K->y;  /* y: free after the factor */
    double* top2 = J->Z;  /* N x W of the unused inverse's room */
    for (int k = 0; k < d; ++k) {
        mb_zero(b, (long)r * W);  /* -(column z_k of A) */
        for (int e = 0; e < ka->nnz; ++e) {
            const int i = plan->rowpos[ka->row[e]];
            if (i >= 0 && ka->col[e] == ind[k])
                for (int l = 0; l < W; ++l) b[i * W + l] = -s->a[e * W + l];
        }
        kinematic_solve_lanes(plan, K, b, dq);
        for (int l = 0; l < W; ++l) dq[ind[k] * W + l] = 1.0;
        if (want_zd) {
            terms_times_lanes(plan, tv, 2, dq, top);
            model->kkt->solve_lanes(s->L, s->D, top);
            for (int j = 0; j < d; ++j)
                mb_copy(K->Jzd + ((long)j * d + k) * W, top + (long)ind[j] * W, W);
        }
        if (want_z) {
            mb_zero(b, (long)r * W);
            for (int e = 0; e < kt->nnz; ++e) {
                const int i = plan->rowpos[kt->row[e]];
                if (i >= 0)
                    for (int l = 0; l < W; ++l)
                        b[i * W + l] -= K->tangent[e * W + l] * dq[kt->col[e] * W + l];
            }
            kinematic_solve_lanes(plan, K, b, dqd);
            for (int j = 0; j < d; ++j)
                for (int l = 0; l < W; ++l) dqd[ind[j] * W + l] = 0.0;
            terms_times_lanes(plan, tq, 5, dq, top);
            terms_times_lanes(plan, tv, 2, dqd, top2);
            for (int i = 0; i < N * W; ++i) top[i] += top2[i];
            model->kkt->solve_lanes(s->L, s->D, top);
            for (int j = 0; j < d; ++j)
                mb_copy(K->Jz + ((long)j * d + k) * W, top + (long)ind[j] * W, W);
        }
    }
    if (want_Q)
        for (int j = 0; j < d; ++j) {
            mb_zero(top, (long)N * W);
            for (int l = 0; l < W; ++l) top[ind[j] * W + l] = 1.0;
            model->kkt->solve_lanes(s->L, s->D, top);
            mb_copy(K->JzQ + (long)j * n * W, top, (long)n * W);
        }
}

/* Per-state inputs of mb_independent_dynamics_in and its outputs (any of Jz, Jzd, JzQ
 * NULL) */
typedef struct {
    const double *q, *qd, *Qext, *p;
    long q_stride, qd_stride, Q_stride, p_stride;
    double *zdd, *Jz, *Jzd, *JzQ;
    int* status;
} independent_batch;

/* The states idx[0..MB_LANES) with z = ind (d) in lanes; a lane that fails goes alone
 * (independent_at: its status, NaN outputs). Returns how many failed. */
static int independent_block(mb_ws* w, mb_ws* wk, const independent_batch* B, const long* idx,
                             const int* ind, jacobian_lanes* J, independent_lanes* K)
{
    enum { W = MB_LANES };
    const mb_plan* plan = w->plan;
    const int n = plan->model->n, d = plan->d, np = plan->model->np;
    const long dd = (long)d * d, dn = (long)d * n;
    mb_lanes* s = w->lanes;
    int* held = w->held;
    int failed = 0;
    for (int i = 0; i < n; ++i) held[i] = 0;
    for (int j = 0; j < d; ++j) held[ind[j]] = 1;
    for (int l = 0; l < W; ++l) {
        const long k = idx[l];
        s->bad[l] = 0;
        for (int i = 0; i < n; ++i) {
            s->q[i * W + l] = B->q[k * B->q_stride + i];
            s->qd[i * W + l] = B->qd[k * B->qd_stride + i];
            s->e[i * W + l] = B->Qext ? B->Qext[k * B->Q_stride + i] : 0.0;
            s->bad[l] |= !isfinite(s->e[i * W + l]);
        }
        for (int i = 0; i < np; ++i) s->p[i * W + l] = B->p[k * B->p_stride + i];
    }
    mb_dynamics_lanes(plan, w->opt, s, s->q, s->qd, s->e, 0, s->x1);
    independent_in_lanes(plan, w->opt, s, J, K, ind, held, B->Jz != NULL, B->Jzd != NULL,
                         B->JzQ != NULL);
    for (int l = 0; l < W; ++l) {
        const long k = idx[l];
        double* out[4] = {B->zdd + k * d, B->Jz ? B->Jz + k * dd : NULL,
                          B->Jzd ? B->Jzd + k * dd : NULL, B->JzQ ? B->JzQ + k * dn : NULL};
        if (s->bad[l]) {
            const int st = independent_at(w, wk, B->q + k * B->q_stride,
                B->qd + k * B->qd_stride, B->Qext ? B->Qext + k * B->Q_stride : NULL,
                B->p + k * B->p_stride, ind, out[0], out[1], out[2], out[3]);
            if (st) mb_independent_nan(k, d, n, B->zdd, B->Jz, B->Jzd, B->JzQ);
            B->status[k] = st;
            failed += st != MB_OK;
            continue;
        }
        B->status[k] = MB_OK;
        for (int j = 0; j < d; ++j) out[0][j] = K->zdd[j * W + l];
        for (long e = 0; out[1] && e < dd; ++e) out[1][e] = K->Jz[e * W + l];
        for (long e = 0; out[2] && e < dd; ++e) out[2][e] = K->Jzd[e * W + l];
        for (long e = 0; out[3] && e < dn; ++e) out[3][e] = K->JzQ[e * W + l];
    }
    return failed;
}

/* mb_independent_dynamics_in's states [0, count) in lanes, z given (zfix, nz = d) or
 * chosen per state (nz = 0); the states that fill no block of one z go alone with the
 * z they chose. *done: how many were handled. */
static int independent_dynamics_lanes(mb_ws* w, mb_ws* wk, const independent_batch* B,
                                      long count, const int* zfix, int nz, long* done)
{
    enum { W = MB_LANES };
    const mb_plan* plan = w->plan;
    const int n = plan->model->n, d = plan->d;
    int failed = 0;
    jacobian_lanes J;
    independent_lanes K;
    *done = 0;
    if (!w->lanes) w->lanes = mb_lanes_new(plan);
    if (!w->lanes || jacobian_lanes_get(w, &J)) return MB_NO_MEMORY;
    independent_lanes_carve(plan, J.rest, &K);
    long idx[W];
    if (nz) {
        for (long s0 = 0; s0 + W <= count; s0 += W) {
            for (int l = 0; l < W; ++l) idx[l] = s0 + l;
            failed += independent_block(w, wk, B, idx, zfix, &J, &K);
            *done = s0 + W;
        }
        return failed;
    }
    int* chosen = K.chosen;  /* Z_CHUNK x d */
    int* state = chosen + Z_CHUNK * d;  /* Z_CHUNK: position in the chunk, -1 once done */
    /* MB_LANES kinematic workspaces for the choices in lanes: wk and those chained on it
     * (made on first use, freed with it); without them each state chooses alone */
    mb_ws* ws[W] = {wk};
    for (int l = 1; l < W && ws[l - 1]; ++l) {
        if (!ws[l - 1]->kinematics)
            ws[l - 1]->kinematics = mb_ws_new(plan, w->opt, MB_WS_DENSE);
        ws[l] = ws[l - 1]->kinematics;
    }
    int redo = ~0;  /* lanes of the current group of MB_LANES states chosen alone */
    for (long c0 = 0; c0 < count; c0 += Z_CHUNK) {
        const int size = count - c0 < Z_CHUNK ? (int)(count - c0) : Z_CHUNK;
        for (int t = 0; t < size; ++t) {
            const long k = c0 + t;
            if (ws[W - 1] && t % W == 0 && t + W <= size) {
                /* the next MB_LANES states' choices at once: Φq in lanes, the partition
                 * in lanes (dense.c: the same pivots); a lane it gives up on is chosen
                 * alone below, for its status */
                mb_lanes* s = w->lanes;
                for (int l = 0; l < W; ++l) {
                    for (int i = 0; i < n; ++i)
                        s->q[i * W + l] = B->q[(k + l) * B->q_stride + i];
                    for (int i = 0; i < plan->model->np; ++i)
                        s->p[i * W + l] = B->p[(k + l) * B->p_stride + i];
                }
                plan->model->kernel[MB_K_PHI_Q].lanes(s->q, NULL, s->p, s->a);
                redo = mb_dense_partition_lanes(ws, s->a, s->LU, chosen + t * d);
            } else if (t % W == 0) {
                redo = ~0;
            }
            int st = MB_OK;
            if (redo >> (t % W) & 1)
                st = mb_choose_z(wk, B->q + k * B->q_stride, B->p + k * B->p_stride,
                                 chosen + t * d);
            state[t] = t;
            if (st) {  /* as mb_independent_one: the choice's status */
                mb_independent_nan(k, d, n, B->zdd, B->Jz, B->Jzd, B->JzQ);
                B->status[k] = st;
                failed++;
                state[t] = -1;
            }
        }
        for (int t = 0; t < size; ++t) {
            if (state[t] < 0) continue;
            const int* z = chosen + t * d;
            int members[Z_CHUNK], count_z = 0;  /* the chunk's states of this z */
            for (int u = t; u < size; ++u)
                if (state[u] >= 0 && !memcmp(chosen + u * d, z, sizeof(int) * (size_t)d)) {
                    members[count_z++] = u;
                    state[u] = -1;
                }
            int u = 0;
            for (; u + W <= count_z; u += W) {
                for (int l = 0; l < W; ++l) idx[l] = c0 + members[u + l];
                failed += independent_block(w, wk, B, idx, z, &J, &K);
            }
            for (; u < count_z; ++u) {
                const long k = c0 + members[u];
                const long dd = (long)d * d, dn = (long)d * n;
                const int st = independent_at(w, wk, B->q + k * B->q_stride,
                    B->qd + k * B->qd_stride, B->Qext ? B->Qext + k * B->Q_stride : NULL,
                    B->p + k * B->p_stride, z, B->zdd + k * d, B->Jz ? B->Jz + k * dd : NULL,
                    B->Jzd ? B->Jzd + k * dd : NULL, B->JzQ ? B->JzQ + k * dn : NULL);
                if (st) mb_independent_nan(k, d, n, B->zdd, B->Jz, B->Jzd, B->JzQ);
                B->status[k] = st;
                failed += st != MB_OK;
            }
        }
        *done = c0 + size;
    }
    return failed;
}

#undef KAT
#undef KL
#undef KSELECT

int mb_independent_dynamics_in(mb_workspace* w, long count, const double* q,
    long q_stride, const double* qd, long qd_stride, const double* Qext, long Q_stride,
    const double* p, long p_stride, const int* zfix, int nz, double* zdd, double* Jz,
    double* Jzd, double* JzQ, int* status)
{
    const mb_plan* plan = w->plan;
    const mb_options* options = w->opt;
    const int n = plan->model->n, d = plan->d;
    if (((Jz || Jzd || JzQ) && !w->Z) || (!w->Kd && !uses_sparse(w))) {
        for (long s = 0; s < count; ++s) {  /* a workspace that does not fit the call */
            status[s] = MB_BAD_ARGUMENT;
            mb_independent_nan(s, d, n, zdd, Jz, Jzd, JzQ);
        }
        return (int)count;
    }
    if (nz && mb_joint_space_applies(plan, options, zfix, nz))
        return mb_joint_space_batch(w, count, q, q_stride, qd, qd_stride, Qext, Q_stride, p,
                                    p_stride, zdd, Jz, Jzd, JzQ, status);
    /* the kinematics' workspace: either path's blocks, as the options may change */
    if (!w->kinematics) w->kinematics = mb_ws_new(plan, options, MB_WS_DENSE);
    mb_ws* wk = w->kinematics;
    int failed = 0;
    long first = 0;  /* the states before it are done in lanes */
    if (!wk) return MB_NO_MEMORY;
    if (count >= MB_LANES && independent_has_lanes(plan, options, Jz || Jzd || JzQ) &&
        !check_indices(w, zfix, nz)) {
        const independent_batch batch = {q, qd, Qext, p, q_stride, qd_stride, Q_stride,
                                         p_stride, zdd, Jz, Jzd, JzQ, status};
        failed = independent_dynamics_lanes(w, wk, &batch, count, zfix, nz, &first);
        if (failed == MB_NO_MEMORY) return MB_NO_MEMORY;
    }
    for (long s = first; s < count; ++s) {
        const long dd = (long)d * d, dn = (long)d * n;
        int st = mb_independent_one(w, wk, q + s * q_stride, qd + s * qd_stride,
                                 Qext ? Qext + s * Q_stride : NULL, p + s * p_stride, zfix, nz,
                                 zdd + s * d, Jz ? Jz + s * dd : NULL,
                                 Jzd ? Jzd + s * dd : NULL, JzQ ? JzQ + s * dn : NULL);
        if (st) mb_independent_nan(s, d, n, zdd, Jz, Jzd, JzQ);
        status[s] = st;
        failed += st != MB_OK;
    }
    return failed;
}

int mb_independent_dynamics(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, const int* zfix, int nz, double* zdd,
    double* Jz, double* Jzd, double* JzQ, int* status)
{
    mb_ws* w = mb_ws_new(plan, options, Jz || Jzd || JzQ ? MB_WS_JACOBIANS : 0);
    if (!w) return MB_NO_MEMORY;
    const int failed = mb_independent_dynamics_in(w, count, q, q_stride, qd, qd_stride, Qext,
                                                  Q_stride, p, p_stride, zfix, nz, zdd, Jz,
                                                  Jzd, JzQ, status);
    mb_ws_free(w);
    return failed;
}

/* ---- parameter sensitivities -------------------------------------------------------- */

/* Adds sign * (kernel values) to the dense block out (rows x np), rows taken as they are
 * (coordinates) or through the active-row positions (constraints). */
static void add_parameter_term(const mb_ws* w, int kernel, double sign, int constraint_rows,
                               double* out)
{
    const mb_kernel* k = &w->model->kernel[kernel];
    const int np = w->model->np;
    for (int e = 0; e < k->nnz; ++e) {
        int row = k->row[e];
        if (constraint_rows && (row = w->plan->rowpos[row]) < 0) continue;
        out[row * np + k->col[e]] += sign * w->kv[kernel][e];
    }
}

/* ∂q̈/∂p at one state: K [∂q̈/∂p; ∂λ/∂p] = [Q_p - (M q̈)_p - (Φqᵀλ)_p; c_p - (Φq q̈)_p], one
 * solve per parameter with the factors of the dynamics. rhs: (n + r) x np + n scratch. */
static int parameter_jacobian_one(mb_ws* w, const double* q, const double* qd,
                                  const double* Qext, const double* p, double* rhs,
                                  double* Jp)
{
    const mb_model* model = w->model;
    const int n = w->n, r = w->r, np = model->np;
    const double alpha = w->opt->alpha, beta = w->opt->beta;
    int st = mb_dynamics_one(w, q, qd, Qext, p, NULL, NULL, 1);
    if (st) return st;
    double* top = rhs;
    double* bottom = rhs + (size_t)n * np;
    mb_zero(rhs, (long)(n + r) * np);
    mb_eval_one(model, MB_K_FORCES_P, q, qd, p, w->kv[MB_K_FORCES_P]);
    mb_eval_one(model, MB_K_MASS_V_P, q, w->qdd, p, w->kv[MB_K_MASS_V_P]);
    mb_eval_one(model, MB_K_PHIQT_LAM_P, q, w->lam, p, w->kv[MB_K_PHIQT_LAM_P]);
    mb_eval_one(model, MB_K_DPHIQ_QD_P, q, qd, p, w->kv[MB_K_DPHIQ_QD_P]);
    mb_eval_one(model, MB_K_PHIQ_V_P, q, w->qdd, p, w->kv[MB_K_PHIQ_V_P]);
    add_parameter_term(w, MB_K_FORCES_P, 1.0, 0, top);
    add_parameter_term(w, MB_K_MASS_V_P, -1.0, 0, top);
    add_parameter_term(w, MB_K_PHIQT_LAM_P, -1.0, 0, top);
    add_parameter_term(w, MB_K_DPHIQ_QD_P, -1.0, 1, bottom);
    add_parameter_term(w, MB_K_PHIQ_V_P, -1.0, 1, bottom);
    if (alpha != 0.0) {
        mb_eval_one(model, MB_K_PHIQ_V_P, q, qd, p, w->kv[MB_K_PHIQ_V_P]);
        add_parameter_term(w, MB_K_PHIQ_V_P, -2.0 * alpha, 1, bottom);
    }
    if (beta != 0.0) {
        mb_eval_one(model, MB_K_PHI_P, q, NULL, p, w->kv[MB_K_PHI_P]);
        add_parameter_term(w, MB_K_PHI_P, -beta * beta, 1, bottom);
    }
    if (!w->factored_sparse) mb_dense_jacobian_blocks(w, NULL, 0);  /* G of dynamics_apply */
    double* column = w->tmp_n2;  /* n + r: the right-hand side of one parameter */
    double* result = rhs + (size_t)(n + r) * np;  /* n */
    for (int k = 0; k < np; ++k) {
        for (int i = 0; i < n; ++i) column[i] = top[i * np + k];
        for (int j = 0; j < r; ++j) column[n + j] = bottom[j * np + k];
        dynamics_apply(w, column, column + n, result);
        for (int i = 0; i < n; ++i) Jp[i * np + k] = result[i];
    }
    return mb_all_finite(Jp, (long)n * np) ? MB_OK : MB_NOT_FINITE;
}

int mb_forward_dynamics_params(const mb_plan* plan, const mb_options* options, long count,
    const double* q, long q_stride, const double* qd, long qd_stride, const double* Qext,
    long Q_stride, const double* p, long p_stride, double* Jp, int* status)
{
    const int n = plan->model->n, np = plan->model->np;
    const long size = (long)n * np;
    mb_ws* w = mb_ws_new(plan, options, MB_WS_JACOBIANS);
    double* rhs = (double*)malloc(sizeof(double) * ((size_t)(n + plan->r) * np + n + 1));
    int failed = 0;
    if (!w || !rhs) { mb_ws_free(w); free(rhs); return MB_NO_MEMORY; }
    for (long s = 0; s < count; ++s) {
        status[s] = parameter_jacobian_one(w, q + s * q_stride, qd + s * qd_stride,
                                           Qext ? Qext + s * Q_stride : NULL,
                                           p + s * p_stride, rhs, Jp + s * size);
        if (status[s] != MB_OK) {
            mb_fill_nan(Jp + s * size, size);
            failed++;
        }
    }
    mb_ws_free(w);
    free(rhs);
    return failed;
}
