/* Dense null-space (R-matrix) method on the active rows A of Φq: the path for small
 * mechanisms, and the one that chooses independent coordinates.
 *
 * Full-pivot LU of A picks r dependent and d = n - r independent coordinates z; R (n x d)
 * spans the null space of A and S, the right inverse that solves for the dependent
 * coordinates only. Then
 *     z̈ = (RᵀMR)⁻¹ Rᵀ (Q - M S c),   q̈ = R z̈ + S c,   λ = Sᵀ (Q - M q̈),
 * and the Jacobian blocks are P = R (RᵀMR)⁻¹ Rᵀ and G = (I - P M) S.
 */
#include <math.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

/* Dense A from the Φq values the caller evaluated into w->kv. */
void mb_dense_build_A(mb_ws* w)
{
    const mb_kernel* k = &w->model->kernel[MB_K_PHI_Q];
    const int n = w->n;
    const double* v = w->kv[MB_K_PHI_Q];
    memset(w->A, 0, sizeof(double) * (size_t)w->r * n);
    for (int e = 0; e < k->nnz; ++e) {
        const int i = w->plan->rowpos[k->row[e]];
        if (i >= 0) w->A[i * n + k->col[e]] = v[e];
    }
}

/* mb_dense_build_A for MB_LANES states: A (r x n, [row][col][lane]) from Φq's values a
 * ([entry][lane]). */
void mb_dense_build_A_lanes(const mb_plan* plan, const double* a, double* A)
{
    const mb_kernel* k = &plan->model->kernel[MB_K_PHI_Q];
    const int n = plan->model->n;
    mb_zero(A, (long)plan->r * n * MB_LANES);
    for (int e = 0; e < k->nnz; ++e) {
        const int i = plan->rowpos[k->row[e]];
        if (i >= 0)
            mb_copy(A + (i * n + k->col[e]) * MB_LANES, a + e * MB_LANES, MB_LANES);
    }
}

/* LU of A with column pivoting. `full`: pivot over the whole remaining block (chooses z
 * well); otherwise the largest entry of the pivot row (cheaper; the dynamics do not depend
 * on the choice). With zfix the pivots avoid the given independent columns. */
int mb_dense_partition(mb_ws* w, const int* zfix, int nz, int full)
{
    const int r = w->r, n = w->n, d = w->d;
    double* LU = w->LU;
    int* pcol = w->pcol;
    double amax = 0.0;
    if (zfix && nz != d) return MB_BAD_ARGUMENT;
    memcpy(LU, w->A, sizeof(double) * (size_t)r * n);
    for (int i = 0; i < r; ++i) w->prow[i] = i;
    for (int j = 0; j < n; ++j) { pcol[j] = j; w->allowed[j] = 1; }
    for (int j = 0; j < nz; ++j) {
        if (zfix[j] < 0 || zfix[j] >= n) return MB_BAD_ARGUMENT;
        w->allowed[zfix[j]] = 0;
    }
    for (int i = 0; i < r * n; ++i) if (fabs(LU[i]) > amax) amax = fabs(LU[i]);
    if (!(amax < INFINITY)) return MB_NOT_FINITE;
    for (int k = 0; k < r; ++k) {
        int bi = -1, bj = -1;
        double best = -1.0;
        for (int i = k; i < (full ? r : k + 1); ++i)
            for (int jj = k; jj < n; ++jj) {
                const int col = pcol[jj];
                if (!w->allowed[col]) continue;
                const double a = fabs(LU[i * n + col]);
                if (a > best) { best = a; bi = i; bj = jj; }
            }
        if (bi < 0 || best <= w->opt->pivot_tol * amax || best == 0.0) return MB_SINGULAR_PHIQ;
        if (bi != k) {
            for (int j = 0; j < n; ++j) {
                const double t = LU[k * n + j];
                LU[k * n + j] = LU[bi * n + j];
                LU[bi * n + j] = t;
            }
            const int t = w->prow[k]; w->prow[k] = w->prow[bi]; w->prow[bi] = t;
        }
        { const int t = pcol[k]; pcol[k] = pcol[bj]; pcol[bj] = t; }
        const int pc = pcol[k];
        const double pivot = LU[k * n + pc];
        for (int i = k + 1; i < r; ++i) {
            const double l = LU[i * n + pc] / pivot;
            LU[i * n + pc] = l;
            if (l == 0.0) continue;
            for (int jj = k + 1; jj < n; ++jj) {
                const int col = pcol[jj];
                LU[i * n + col] -= l * LU[k * n + col];
            }
        }
    }
    for (int j = 0; j < nz; ++j) pcol[r + j] = zfix[j];
    for (int i = 0; i < r; ++i)
        for (int k = 0; k < r; ++k) w->F[i * r + k] = LU[i * n + pcol[k]];
    /* R = [-U1⁻¹ U2; I] in the original coordinate order. */
    memset(w->R, 0, sizeof(double) * (size_t)n * (d > 0 ? d : 1));
    double* x = w->tmp_r;
    for (int j = 0; j < d; ++j) {
        const int zc = pcol[r + j];
        for (int k = r - 1; k >= 0; --k) {
            double s = LU[k * n + zc];
            for (int kk = k + 1; kk < r; ++kk) s -= LU[k * n + pcol[kk]] * x[kk];
            x[k] = s / LU[k * n + pcol[k]];
            w->R[pcol[k] * d + j] = -x[k];
        }
        w->R[zc * d + j] = 1.0;
    }
    return MB_OK;
}

/* x (n) = S b, b in active-row order: solves for dependent coordinates, x_z = 0. */
void mb_dense_solve_S(const mb_ws* w, const double* b, double* x)
{
    const int r = w->r;
    const double* F = w->F;
    double* y = w->tmp_r;
    for (int i = 0; i < r; ++i) {
        double s = b[w->prow[i]];
        for (int k = 0; k < i; ++k) s -= F[i * r + k] * y[k];
        y[i] = s;
    }
    for (int i = r - 1; i >= 0; --i) {
        double s = y[i];
        for (int k = i + 1; k < r; ++k) s -= F[i * r + k] * y[k];
        y[i] = s / F[i * r + i];
    }
    memset(x, 0, sizeof(double) * (size_t)w->n);
    for (int k = 0; k < r; ++k) x[w->pcol[k]] = y[k];
}

/* lam (active rows) = Sᵀ y: solves A_depᵀ lam = y_dep. */
static void solve_St(const mb_ws* w, const double* y, double* lam)
{
    const int r = w->r;
    const double* F = w->F;
    double* s = w->tmp_r;
    for (int k = 0; k < r; ++k) {
        double v = y[w->pcol[k]];
        for (int kk = 0; kk < k; ++kk) v -= F[kk * r + k] * s[kk];
        s[k] = v / F[k * r + k];
    }
    for (int k = r - 1; k >= 0; --k)
        for (int i = k + 1; i < r; ++i) s[k] -= F[i * r + k] * s[i];
    for (int k = 0; k < r; ++k) lam[w->prow[k]] = s[k];
}

/* out (n x cols) = M B (n x cols), M sparse (values in w->kv[MB_K_MASS]). */
static void mass_mul(const mb_ws* w, const double* B, int cols, double* out)
{
    const mb_kernel* k = &w->model->kernel[MB_K_MASS];
    const double* mv = w->kv[MB_K_MASS];
    memset(out, 0, sizeof(double) * (size_t)w->n * cols);
    for (int e = 0; e < k->nnz; ++e) {
        const double m = mv[e];
        const double* src = B + k->col[e] * cols;
        double* dst = out + k->row[e] * cols;
        for (int j = 0; j < cols; ++j) dst[j] += m * src[j];
    }
}

/* Cholesky factor of RᵀMR in w->Kd (needs a partition first). */
int mb_dense_factor_mass(mb_ws* w, const double* q, const double* p)
{
    const int d = w->d, n = w->n;
    mb_eval_one(w->model, MB_K_MASS, q, NULL, p, w->kv[MB_K_MASS]);
    if (d == 0) return MB_OK;
    mass_mul(w, w->R, d, w->W);
    for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) {
            double s = 0.0;
            for (int i = 0; i < n; ++i) s += w->R[i * d + a] * w->W[i * d + b];
            w->Kd[a * d + b] = s;
        }
    return mb_cholesky(w->Kd, d, w->opt->mass_tol);
}

/* q̈ from w->Q and w->c (active-row order); keeps S c in w->Sc. */
void mb_dense_accelerations(mb_ws* w, double* qdd)
{
    const int n = w->n, d = w->d;
    double* rhs = w->tmp_n;
    double* z = w->tmp_n2;
    mb_dense_solve_S(w, w->c, w->Sc);
    mass_mul(w, w->Sc, 1, rhs);
    for (int i = 0; i < n; ++i) rhs[i] = w->Q[i] - rhs[i];
    for (int a = 0; a < d; ++a) {
        double s = 0.0;
        for (int i = 0; i < n; ++i) s += w->R[i * d + a] * rhs[i];
        z[a] = s;
    }
    if (d) mb_cholesky_solve(w->Kd, d, z, 1);
    for (int i = 0; i < n; ++i) {
        double s = w->Sc[i];
        for (int a = 0; a < d; ++a) s += w->R[i * d + a] * z[a];
        qdd[i] = s;
    }
}

/* λ (active-row order) = Sᵀ (Q - M q̈). */
void mb_dense_multipliers(mb_ws* w, const double* qdd, double* lam)
{
    double* rhs = w->tmp_n;
    mass_mul(w, qdd, 1, rhs);
    for (int i = 0; i < w->n; ++i) rhs[i] = w->Q[i] - rhs[i];
    solve_St(w, rhs, lam);
}

/* out (n x cols) = P B = R (RᵀMR)⁻¹ Rᵀ B. */
static void apply_P(mb_ws* w, const double* B, int cols, double* out)
{
    const int d = w->d, n = w->n;
    if (d == 0) { memset(out, 0, sizeof(double) * (size_t)n * cols); return; }
    double* tmp = w->V;  /* d x cols */
    for (int a = 0; a < d; ++a)
        for (int c = 0; c < cols; ++c) {
            double s = 0.0;
            for (int i = 0; i < n; ++i) s += w->R[i * d + a] * B[i * cols + c];
            tmp[a * cols + c] = s;
        }
    mb_cholesky_solve(w->Kd, d, tmp, cols);
    for (int i = 0; i < n; ++i)
        for (int c = 0; c < cols; ++c) {
            double s = 0.0;
            for (int a = 0; a < d; ++a) s += w->R[i * d + a] * tmp[a * cols + c];
            out[i * cols + c] = s;
        }
}

/* P = R K⁻¹ Rᵀ = B Bᵀ with B = R L⁻ᵀ (K = RᵀMR = L Lᵀ in w->Kd), rows of stride ld. */
static void explicit_P(mb_ws* w, double* P, int ld)
{
    const int n = w->n, d = w->d;
    const double* L = w->Kd;
    double* B = w->V;  /* n x d */
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < d; ++k) {
            double s = w->R[i * d + k];
            for (int j = 0; j < k; ++j) s -= L[k * d + j] * B[i * d + j];
            B[i * d + k] = s / L[k * d + k];
        }
    for (int a = 0; a < n; ++a)
        for (int b = 0; b <= a; ++b) {
            double s = 0.0;
            for (int k = 0; k < d; ++k) s += B[a * d + k] * B[b * d + k];
            P[a * ld + b] = P[b * ld + a] = s;
        }
}

/* B (k x cols) <- U⁻¹ L⁻¹ B for the packed factors LU (k x k: unit L below, U on and above
 * the diagonal), rows already in pivot order. */
static void lu_substitute(const double* LU, int k, double* B, int cols)
{
    for (int i = 1; i < k; ++i)
        for (int c = 0; c < i; ++c) {
            const double l = LU[i * k + c];
            if (l != 0.0) for (int j = 0; j < cols; ++j) B[i * cols + j] -= l * B[c * cols + j];
        }
    for (int i = k - 1; i >= 0; --i) {
        for (int c = i + 1; c < k; ++c) {
            const double u = LU[i * k + c];
            if (u != 0.0) for (int j = 0; j < cols; ++j) B[i * cols + j] -= u * B[c * cols + j];
        }
        const double inv = 1.0 / LU[i * k + i];
        for (int j = 0; j < cols; ++j) B[i * cols + j] *= inv;
    }
}

/* G = (I - P M) S (n x r): how a change of the constraint right-hand side moves q̈. P:
 * given explicitly (rows of stride ld), or NULL to apply it through the factors. */
void mb_dense_jacobian_blocks(mb_ws* w, const double* P, int ld)
{
    const int r = w->r, n = w->n;
    const double* F = w->F;
    double* Zi = w->V;  /* inverse of the dependent block, rows in pivot order */
    memset(Zi, 0, sizeof(double) * (size_t)r * r);
    for (int i = 0; i < r; ++i) Zi[i * r + w->prow[i]] = 1.0;
    lu_substitute(F, r, Zi, r);
    memset(w->G, 0, sizeof(double) * (size_t)n * r);
    for (int k = 0; k < r; ++k)
        memcpy(w->G + w->pcol[k] * r, Zi + k * r, sizeof(double) * (size_t)r);
    mass_mul(w, w->G, r, w->W);
    if (!P) {
        apply_P(w, w->W, r, w->T);
        for (int i = 0; i < n * r; ++i) w->G[i] -= w->T[i];
        return;
    }
    for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b) {
            const double pab = P[a * ld + b];
            if (pab == 0.0) continue;
            for (int k = 0; k < r; ++k) w->G[a * r + k] -= pab * w->W[b * r + k];
        }
}

/* [P G]ᵀ ((n + r) x n): its row i is what row i of the (symmetric) sparse inverse gives,
 * restricted to the coordinates; P is symmetric, so only G is transposed. */
void mb_dense_inverse_columns(mb_ws* w, double* Z)
{
    const int n = w->n, r = w->r, N = n + r;
    explicit_P(w, Z, N);
    mb_dense_jacobian_blocks(w, Z, N);
    for (int k = 0; k < r; ++k)
        for (int a = 0; a < n; ++a) Z[(size_t)(n + k) * N + a] = w->G[a * r + k];
}

/* out (n x cols) = P B, plus G Y when with_G (Y = w->Y, r x cols, mostly zeros). */
void mb_dense_apply(mb_ws* w, const double* B, int cols, double* out, int with_G)
{
    const int r = w->r, n = w->n;
    apply_P(w, B, cols, out);
    if (!with_G) return;
    for (int i = 0; i < r; ++i)
        for (int j = 0; j < cols; ++j) {
            const double y = w->Y[i * cols + j];
            if (y == 0.0) continue;
            for (int a = 0; a < n; ++a) out[a * cols + j] += w->G[a * r + i] * y;
        }
}

/* Minimum-norm correction x = Aᵀ (A Aᵀ)⁻¹ b (b in active-row order). */
int mb_dense_min_norm(mb_ws* w, const double* b, double* x)
{
    const int r = w->r, n = w->n;
    double* G = w->W;
    double* y = w->tmp_n2;
    for (int i = 0; i < r; ++i)
        for (int j = 0; j <= i; ++j) {
            double s = 0.0;
            for (int k = 0; k < n; ++k) s += w->A[i * n + k] * w->A[j * n + k];
            G[i * r + j] = G[j * r + i] = s;
        }
    if (mb_cholesky(G, r, 1e-12)) return MB_SINGULAR_PHIQ;
    memcpy(y, b, sizeof(double) * (size_t)r);
    mb_cholesky_solve(G, r, y, 1);
    for (int k = 0; k < n; ++k) {
        double s = 0.0;
        for (int i = 0; i < r; ++i) s += w->A[i * n + k] * y[i];
        x[k] = s;
    }
    return MB_OK;
}

/* LU with partial pivoting of A (k x k, in place); piv[c] = row swapped into c. A pivot
 * under tol · max|A| is a singular matrix (MB_SINGULAR_PHIQ). */
int mb_lu_factor(double* A, int k, int* piv, double tol)
{
    double amax = 0.0;
    for (int i = 0; i < k * k; ++i) if (fabs(A[i]) > amax) amax = fabs(A[i]);
    if (!(amax < INFINITY)) return MB_NOT_FINITE;
    for (int c = 0; c < k; ++c) {
        int best = c;
        for (int i = c + 1; i < k; ++i) if (fabs(A[i * k + c]) > fabs(A[best * k + c])) best = i;
        piv[c] = best;
        if (!(fabs(A[best * k + c]) > tol * amax)) return MB_SINGULAR_PHIQ;
        if (best != c)
            for (int j = 0; j < k; ++j) {
                const double t = A[c * k + j];
                A[c * k + j] = A[best * k + j];
                A[best * k + j] = t;
            }
        for (int i = c + 1; i < k; ++i) {
            const double l = A[i * k + c] / A[c * k + c];
            A[i * k + c] = l;
            if (l != 0.0) for (int j = c + 1; j < k; ++j) A[i * k + j] -= l * A[c * k + j];
        }
    }
    return MB_OK;
}

/* Solves A X = B in place with mb_lu_factor's output; B is k x cols. */
void mb_lu_solve(const double* LU, int k, const int* piv, double* B, int cols)
{
    for (int c = 0; c < k; ++c)
        if (piv[c] != c)
            for (int j = 0; j < cols; ++j) {
                const double t = B[c * cols + j];
                B[c * cols + j] = B[piv[c] * cols + j];
                B[piv[c] * cols + j] = t;
            }
    lu_substitute(LU, k, B, cols);
}

/* mb_choose_z's partition (full pivoting, no fixed z) for MB_LANES states at once, with
 * the same pivots and values: ws[l] receives lane l's F, R, prow and pcol, ind + l d its
 * z. a: Φq's values [nnz][lane]; LU: (r n + r) MB_LANES doubles of scratch, its
 * columns swapped in place so that every lane's pivot sits at the same position and the
 * elimination runs across the lanes. Returns a bit mask of the lanes that failed or hold
 * a NaN: redo those with mb_choose_z for their status. */
int mb_dense_partition_lanes(mb_ws* const* ws, const double* a, double* LU, int* ind)
{
    enum { W = MB_LANES };
    const mb_ws* w0 = ws[0];
    const int r = w0->r, n = w0->n, d = w0->d;
    const double tol = w0->opt->pivot_tol;
    double amax[W], best[W], at_i[W], at_j[W], *x = LU + r * n * W;
    int bi[W], bj[W], failed = 0;
#define AT(i, j) (LU + ((i) * n + (j)) * W)
    mb_dense_build_A_lanes(w0->plan, a, LU);
    for (int l = 0; l < W; ++l) amax[l] = 0.0;
    for (int e = 0; e < r * n; ++e)
        for (int l = 0; l < W; ++l) {
            const double v = fabs(LU[e * W + l]);
            amax[l] = v > amax[l] ? v : amax[l];
            failed |= (v != v) << l;
        }
    for (int l = 0; l < W; ++l) {
        failed |= !(amax[l] < INFINITY) << l;
        for (int i = 0; i < r; ++i) ws[l]->prow[i] = i;
        for (int j = 0; j < n; ++j) ws[l]->pcol[j] = j;
    }
    for (int p = 0; p < r; ++p) {
        /* in mb_dense_partition's order, so that ties go the same way; the pivot's row
         * and column as doubles, so that every select is on doubles and vectorizes */
        for (int l = 0; l < W; ++l) best[l] = at_i[l] = at_j[l] = -1.0;
        for (int i = p; i < r; ++i)
            for (int j = p; j < n; ++j)
#pragma GCC unroll 1
                for (int l = 0; l < W; ++l) {  /* a loop, not unrolled: it vectorizes */
                    const double v = fabs(AT(i, j)[l]);
                    const int better = v > best[l];
                    at_i[l] = better ? (double)i : at_i[l];
                    at_j[l] = better ? (double)j : at_j[l];
                    best[l] = better ? v : best[l];
                }
        for (int l = 0; l < W; ++l) {
            mb_ws* w = ws[l];
            bi[l] = (int)at_i[l];
            bj[l] = (int)at_j[l];
            if (bi[l] < 0 || best[l] <= tol * amax[l] || best[l] == 0.0) {
                failed |= 1 << l;
                bi[l] = bj[l] = p;
            }
            for (int j = 0; j < n; ++j) {
                const double t = AT(p, j)[l];
                AT(p, j)[l] = AT(bi[l], j)[l];
                AT(bi[l], j)[l] = t;
            }
            for (int i = 0; i < r; ++i) {
                const double t = AT(i, p)[l];
                AT(i, p)[l] = AT(i, bj[l])[l];
                AT(i, bj[l])[l] = t;
            }
            int t = w->prow[p]; w->prow[p] = w->prow[bi[l]]; w->prow[bi[l]] = t;
            t = w->pcol[p]; w->pcol[p] = w->pcol[bj[l]]; w->pcol[bj[l]] = t;
        }
        for (int i = p + 1; i < r; ++i) {
            for (int l = 0; l < W; ++l) AT(i, p)[l] /= AT(p, p)[l];
            /* mb_dense_partition skips a zero multiplier; here it subtracts a zero */
            for (int j = p + 1; j < n; ++j)
#pragma GCC unroll 1
                for (int l = 0; l < W; ++l) AT(i, j)[l] -= AT(i, p)[l] * AT(p, j)[l];
        }
    }
    for (int l = 0; l < W; ++l) {
        if (failed >> l & 1) continue;
        mb_ws* w = ws[l];
        for (int i = 0; i < r; ++i)
            for (int p = 0; p < r; ++p) w->F[i * r + p] = AT(i, p)[l];
        mb_zero(w->R, (long)n * (d > 0 ? d : 1));
        for (int j = 0; j < d; ++j) {
            ind[l * d + j] = w->pcol[r + j];
            w->R[w->pcol[r + j] * d + j] = 1.0;
        }
    }
    /* R = [-U1⁻¹ U2; I]: the back substitution across the lanes, x [position][lane] */
    for (int j = 0; j < d; ++j)
        for (int p = r - 1; p >= 0; --p) {
            double* xp = x + p * W;
            for (int l = 0; l < W; ++l) {
                double s = AT(p, r + j)[l];
                for (int q = p + 1; q < r; ++q) s -= AT(p, q)[l] * x[q * W + l];
                xp[l] = s / AT(p, p)[l];
            }
            for (int l = 0; l < W; ++l)
                if (!(failed >> l & 1)) ws[l]->R[ws[l]->pcol[p] * d + j] = -xp[l];
        }
#undef AT
    return failed;
}

/* The band of A⁻¹ for a banded symmetric positive definite A = L Lᵀ, from its Cholesky
 * factor in LAPACK's lower band storage (ab[d + i ld] = L(i + d, i), d ≤ b): S[d + i (b + 1)]
 * = (A⁻¹)(i + d, i) for d ≤ b. By Lᵀ A⁻¹ = L⁻¹ (Takahashi), from the last row:
 * (A⁻¹)(i, j) = (δ_ij / L_ii − Σ_{k=i+1}^{i+b} L_ki (A⁻¹)(k, j)) / L_ii for j ≥ i, which
 * reads A⁻¹ only within the band: O(n b²). Why: the marginal variances of a trajectory's
 * unknowns are the diagonal of (JᵀJ)⁻¹; column by column they would cost O(n² b). */
void mb_banded_inverse(int n, int b, const double* ab, int ld, double* S)
{
    const int w = b + 1;
    for (int i = n - 1; i >= 0; --i) {
        const double* column = ab + (size_t)i * ld;  /* L(i + d, i) */
        const int m = b < n - 1 - i ? b : n - 1 - i;
        for (int d = 1; d <= m; ++d) {
            double sum = 0.0;
            for (int k = 1; k <= m; ++k) {
                const int low = k < d ? k : d, high = k < d ? d : k;
                sum += column[k] * S[(size_t)(i + low) * w + (high - low)];
            }
            S[(size_t)i * w + d] = -sum / column[0];
        }
        double sum = 0.0;
        for (int k = 1; k <= m; ++k) sum += column[k] * S[(size_t)i * w + k];
        S[(size_t)i * w] = (1.0 / column[0] - sum) / column[0];
        for (int d = m + 1; d <= b; ++d) S[(size_t)i * w + d] = 0.0;
    }
}
