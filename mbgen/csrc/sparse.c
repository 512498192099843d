/* Sparse LDLᵀ of the augmented KKT matrix with a static elimination order.
 *
 *     K = [ H   Aᵀ ]    H = W + γ AᵀA,   A = active rows of Φq,
 *         [ A   0  ]    W = M (dynamics) or I (kinematics).
 *
 * With rhs [f + γ Aᵀ c; c] the solution equals that of [W Aᵀ; A 0] (A x = c makes the
 * added terms cancel), but H is positive definite whenever the problem is well posed
 * (W positive definite on the null space of A), even where M is singular.
 *
 * Order: the compiler's fill-reducing order of the coordinates, each constraint row placed
 * right after the last coordinate it involves. Then every coordinate pivot is a reduced
 * H (> 0) and every row pivot is -(reduced A H⁻¹ Aᵀ) (< 0, and -> 0 exactly when the
 * rows lose rank), so no pivoting is needed and both singularities are detected by sign
 * and size. Factorization: up-looking LDLᵀ (T. Davis, "Algorithm 849: a concise sparse
 * Cholesky factorization package", 2005); inverse entries by the Takahashi recurrence.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#define MB_HAVE_GATHER 1
#endif
#endif

typedef struct { int col, row; } entry;

static int entry_cmp(const void* a, const void* b)
{
    const entry* x = (const entry*)a;
    const entry* y = (const entry*)b;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/* Slot of the upper-triangle entry (i, j) of the permuted matrix (nodes, any order). */
static int slot(const mb_sparse* sp, int node_i, int node_j)
{
    int a = sp->iperm[node_i], b = sp->iperm[node_j];
    if (a > b) { int t = a; a = b; b = t; }
    int lo = sp->Kp[b], hi = sp->Kp[b + 1] - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (sp->Ki[mid] == a) return mid;
        if (sp->Ki[mid] < a) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

int mb_sparse_slot(const mb_sparse* sp, int node_i, int node_j)
{
    return slot(sp, node_i, node_j);
}

static void elimination_order(const mb_plan* plan, mb_sparse* sp)
{
    const mb_model* model = plan->model;
    const mb_kernel* a = &model->kernel[MB_K_PHI_Q];
    const int n = model->n, r = plan->r;
    int* qpos = sp->iperm;  /* scratch: position of each coordinate in the q order */
    int* last = sp->parent; /* scratch: last q position of each active row */
    for (int t = 0; t < n; ++t) qpos[model->coordinate_order ? model->coordinate_order[t] : t] = t;
    for (int k = 0; k < r; ++k) last[k] = -1;
    for (int e = 0; e < a->nnz; ++e) {
        const int k = plan->rowpos[a->row[e]];
        if (k >= 0 && qpos[a->col[e]] > last[k]) last[k] = qpos[a->col[e]];
    }
    int pos = 0;
    for (int k = 0; k < r; ++k) if (last[k] < 0) sp->perm[pos++] = n + k;  /* empty rows */
    for (int t = 0; t < n; ++t) {
        sp->perm[pos++] = model->coordinate_order ? model->coordinate_order[t] : t;
        for (int k = 0; k < r; ++k) if (last[k] == t) sp->perm[pos++] = n + k;
    }
    for (int i = 0; i < sp->size; ++i) sp->iperm[sp->perm[i]] = i;
}

static int add_entry(const mb_sparse* sp, entry* list, int count, int node_i, int node_j)
{
    int a = sp->iperm[node_i], b = sp->iperm[node_j];
    if (a > b) { int t = a; a = b; b = t; }
    list[count].col = b;
    list[count].row = a;
    return count + 1;
}

/* The entries of Φq's active rows, grouped by row: row k's are
 * row_entries[row_start[k] .. row_start[k + 1]). Returns the number of pairs in AᵀA
 * (each row's entries taken two at a time, with repetition). */
static int group_by_row(const mb_plan* plan, int* row_start, int* row_entries, int* fill)
{
    const mb_kernel* a = &plan->model->kernel[MB_K_PHI_Q];
    const int r = plan->r;
    for (int e = 0; e < a->nnz; ++e) {
        const int k = plan->rowpos[a->row[e]];
        if (k >= 0) row_start[k + 1]++;
    }
    for (int k = 0; k < r; ++k) row_start[k + 1] += row_start[k];
    for (int k = 0; k < r; ++k) fill[k] = row_start[k];
    for (int e = 0; e < a->nnz; ++e) {
        const int k = plan->rowpos[a->row[e]];
        if (k >= 0) row_entries[fill[k]++] = e;
    }
    int pairs = 0;
    for (int k = 0; k < r; ++k) {
        const int len = row_start[k + 1] - row_start[k];
        pairs += len * (len + 1) / 2;
    }
    return pairs;
}

/* The pattern of the permuted upper triangle of K (columns Kp, rows Ki): the diagonal,
 * M, ∂Q/∂q̇ (the variational Newton), AᵀA and A. */
static int upper_pattern(const mb_plan* plan, mb_sparse* sp, const int* row_start,
                         const int* row_entries, int pairs)
{
    const mb_model* model = plan->model;
    const mb_kernel* a = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* mass = &model->kernel[MB_K_MASS];
    const mb_kernel* damping = &model->kernel[MB_K_FORCES_QD];
    const int n = model->n, r = plan->r, N = sp->size;
    const int max_entries = N + mass->nnz + damping->nnz + pairs + a->nnz;
    entry* list = (entry*)malloc(sizeof(entry) * (size_t)(max_entries + 1));
    if (!list) return MB_NO_MEMORY;
    int count = 0;
    for (int i = 0; i < N; ++i) count = add_entry(sp, list, count, i, i);
    for (int e = 0; e < mass->nnz; ++e)
        count = add_entry(sp, list, count, mass->row[e], mass->col[e]);
    for (int e = 0; e < damping->nnz; ++e)
        count = add_entry(sp, list, count, damping->row[e], damping->col[e]);
    for (int k = 0; k < r; ++k)
        for (int s = row_start[k]; s < row_start[k + 1]; ++s) {
            for (int t = s; t < row_start[k + 1]; ++t)
                count = add_entry(sp, list, count, a->col[row_entries[s]],
                                  a->col[row_entries[t]]);
            count = add_entry(sp, list, count, n + k, a->col[row_entries[s]]);
        }
    qsort(list, (size_t)count, sizeof(entry), entry_cmp);
    int unique = 0;
    for (int e = 0; e < count; ++e)
        if (unique == 0 || list[e].col != list[unique - 1].col ||
            list[e].row != list[unique - 1].row)
            list[unique++] = list[e];
    sp->nnz_k = unique;
    sp->Kp = (int*)calloc((size_t)N + 1, sizeof(int));
    sp->Ki = (int*)malloc(sizeof(int) * (size_t)(unique + 1));
    if (!sp->Kp || !sp->Ki) { free(list); return MB_NO_MEMORY; }
    for (int e = 0; e < unique; ++e) {
        sp->Kp[list[e].col + 1]++;
        sp->Ki[e] = list[e].row;
    }
    for (int j = 0; j < N; ++j) sp->Kp[j + 1] += sp->Kp[j];
    free(list);
    return MB_OK;
}

/* The slot in K of every kernel entry: the diagonal, M, A and each pair of AᵀA. */
static int kernel_slots(const mb_plan* plan, mb_sparse* sp, const int* row_start,
                        const int* row_entries, int pairs)
{
    const mb_model* model = plan->model;
    const mb_kernel* a = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* mass = &model->kernel[MB_K_MASS];
    const int n = model->n, r = plan->r;
    for (int i = 0; i < sp->size; ++i) sp->diag[i] = slot(sp, i, i);
    for (int e = 0; e < mass->nnz; ++e)
        sp->mass_map[e] = sp->iperm[mass->row[e]] <= sp->iperm[mass->col[e]]
                              ? slot(sp, mass->row[e], mass->col[e]) : -1;
    for (int e = 0; e < a->nnz; ++e) {
        const int k = plan->rowpos[a->row[e]];
        sp->a_map[e] = k >= 0 ? slot(sp, n + k, a->col[e]) : -1;
    }
    sp->ata_count = pairs;
    sp->ata_map = (int*)malloc(sizeof(int) * (size_t)(pairs + 1));
    sp->ata_k1 = (int*)malloc(sizeof(int) * (size_t)(pairs + 1));
    sp->ata_k2 = (int*)malloc(sizeof(int) * (size_t)(pairs + 1));
    if (!sp->ata_map || !sp->ata_k1 || !sp->ata_k2) return MB_NO_MEMORY;
    int pair = 0;
    for (int k = 0; k < r; ++k)
        for (int s = row_start[k]; s < row_start[k + 1]; ++s)
            for (int t = s; t < row_start[k + 1]; ++t) {
                const int e1 = row_entries[s], e2 = row_entries[t];
                sp->ata_k1[pair] = e1;
                sp->ata_k2[pair] = e2;
                /* a pair on one coordinate counts once, two coordinates once per side */
                sp->ata_map[pair++] = slot(sp, a->col[e1], a->col[e2]);
            }
    return MB_OK;
}

/* Elimination tree and column counts of L (Lp). */
static void elimination_tree(mb_sparse* sp, int* flag, int* lnz)
{
    const int N = sp->size;
    for (int k = 0; k < N; ++k) {
        sp->parent[k] = -1;
        flag[k] = k;
        lnz[k] = 0;
        for (int p = sp->Kp[k]; p < sp->Kp[k + 1]; ++p)
            for (int i = sp->Ki[p]; i < k && flag[i] != k; i = sp->parent[i]) {
                if (sp->parent[i] == -1) sp->parent[i] = k;
                lnz[i]++;
                flag[i] = k;
            }
    }
    sp->Lp[0] = 0;
    for (int k = 0; k < N; ++k) sp->Lp[k + 1] = sp->Lp[k] + lnz[k];
    sp->nnz_l = sp->Lp[N];
}

/* L's whole pattern, so the factorization only does arithmetic: row k of L is the reach
 * of K's column k in the tree, listed in the topological order the up-looking algorithm
 * needs (rowp, row_node, row_slot). */
static int factor_pattern(mb_sparse* sp, int* flag, int* lnz, int* stack)
{
    const int N = sp->size;
    sp->Li = (int*)malloc(sizeof(int) * (size_t)(sp->nnz_l + 1));
    sp->rowp = (int*)malloc(sizeof(int) * ((size_t)N + 1));
    sp->row_node = (int*)malloc(sizeof(int) * (size_t)(sp->nnz_l + 1));
    sp->row_slot = (int*)malloc(sizeof(int) * (size_t)(sp->nnz_l + 1));
    if (!sp->Li || !sp->rowp || !sp->row_node || !sp->row_slot) return MB_NO_MEMORY;
    int t = 0;
    for (int k = 0; k < N; ++k) flag[k] = -1;
    for (int k = 0; k < N; ++k) {
        int top = N;
        flag[k] = k;
        lnz[k] = 0;
        sp->rowp[k] = t;
        for (int p = sp->Kp[k]; p < sp->Kp[k + 1]; ++p) {
            int i = sp->Ki[p], len = 0;
            for (; flag[i] != k; i = sp->parent[i]) {
                stack[len++] = i;
                flag[i] = k;
            }
            while (len > 0) stack[--top] = stack[--len];
        }
        for (; top < N; ++top) {
            const int i = stack[top];
            const int slot_ik = sp->Lp[i] + lnz[i]++;
            sp->Li[slot_ik] = k;
            sp->row_node[t] = i;
            sp->row_slot[t++] = slot_ik;
        }
    }
    sp->rowp[N] = t;
    return MB_OK;
}

int mb_sparse_analyze(mb_plan* plan)
{
    mb_sparse* sp = &plan->sp;
    const mb_model* model = plan->model;
    const mb_kernel* a = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* mass = &model->kernel[MB_K_MASS];
    const int N = model->n + plan->r;
    memset(sp, 0, sizeof(*sp));
    sp->size = N;
    int* row_start = (int*)calloc((size_t)plan->r + 1, sizeof(int));
    int* row_entries = (int*)malloc(sizeof(int) * (size_t)(a->nnz + 1));
    int* flag = (int*)malloc(sizeof(int) * (size_t)N);
    int* lnz = (int*)malloc(sizeof(int) * (size_t)N);
    int* stack = (int*)malloc(sizeof(int) * (size_t)N);
    sp->perm = (int*)malloc(sizeof(int) * (size_t)N);
    sp->iperm = (int*)malloc(sizeof(int) * (size_t)N);
    sp->parent = (int*)malloc(sizeof(int) * (size_t)N);
    sp->Lp = (int*)malloc(sizeof(int) * ((size_t)N + 1));
    sp->diag = (int*)malloc(sizeof(int) * (size_t)N);
    sp->mass_map = (int*)malloc(sizeof(int) * (size_t)(mass->nnz + 1));
    sp->a_map = (int*)malloc(sizeof(int) * (size_t)(a->nnz + 1));
    int status = MB_NO_MEMORY;
    if (row_start && row_entries && flag && lnz && stack && sp->perm && sp->iperm &&
        sp->parent && sp->Lp && sp->diag && sp->mass_map && sp->a_map) {
        const int pairs = group_by_row(plan, row_start, row_entries, sp->parent);
        elimination_order(plan, sp);
        status = upper_pattern(plan, sp, row_start, row_entries, pairs);
        if (status == MB_OK) status = kernel_slots(plan, sp, row_start, row_entries, pairs);
        if (status == MB_OK) {
            elimination_tree(sp, flag, lnz);
            status = factor_pattern(sp, flag, lnz, stack);
        }
    }
    free(row_start);
    free(row_entries);
    free(flag);
    free(lnz);
    free(stack);
    if (status != MB_OK) mb_sparse_release(sp);
    return status;
}

void mb_sparse_release(mb_sparse* sp)
{
    free(sp->perm); free(sp->iperm); free(sp->Kp); free(sp->Ki); free(sp->parent);
    free(sp->Lp); free(sp->mass_map); free(sp->a_map); free(sp->ata_map); free(sp->ata_k1);
    free(sp->ata_k2); free(sp->diag); free(sp->Li); free(sp->rowp); free(sp->row_node);
    free(sp->row_slot);
    memset(sp, 0, sizeof(*sp));
}

/* b = [f + γ Aᵀ c; c] for the factored K (f NULL: 0); c on the active rows. */
void mb_sparse_rhs(const mb_ws* w, const double* f, const double* c, double* b)
{
    const mb_kernel* ka = &w->model->kernel[MB_K_PHI_Q];
    const int n = w->n;
    if (f) mb_copy(b, f, n);
    else mb_zero(b, n);
    for (int e = 0; e < ka->nnz; ++e) {
        const int k = w->plan->rowpos[ka->row[e]];
        if (k >= 0) b[ka->col[e]] += w->gamma * w->akkt[e] * c[k];
    }
    mb_copy(b + n, c, w->r);
}

/* Assemble and factor K at (q, p), Φq values already in w->kv. W = M, or W = I when
 * `kinematic` (then the coordinates zfix are held: their columns of A are dropped and only
 * W's 1 remains).
 * `sigma` (r, or NULL for 0): a compliance block, K = [W Aᵀ; A -Σ] (SPOOK). Augmenting
 * keeps it symmetric in the scaled unknown ỹ = (1 - γσ) y: the row block becomes
 * -σ / (1 - γσ) with γσ ≤ ½, and mb_sparse_solve returns y (sigma must outlive the
 * solves; mb_sparse_inverse stays in the scaled unknowns). */
int mb_sparse_factor(mb_ws* w, const double* q, const double* p, int kinematic,
                     const int* zfix, int nz, const double* sigma)
{
    const mb_plan* plan = w->plan;
    const mb_sparse* sp = &plan->sp;
    const mb_model* model = w->model;
    const mb_kernel* ka = &model->kernel[MB_K_PHI_Q];
    const mb_kernel* km = &model->kernel[MB_K_MASS];
    const int n = w->n, N = sp->size;
    double* a = w->akkt;
    double* Kx = w->Kx;
    w->factored_sparse = w->factored_unrolled = 0;
    w->sigma = sigma;
    if (!nz && !sigma && (!kinematic || plan->identity) &&
        mb_unrolled_applies(plan, w->opt)) {
        /* W = M, or W = I given in the mass kernel's layout */
        if (!kinematic) mb_eval_one(model, MB_K_MASS, q, NULL, p, w->kv[MB_K_MASS]);
        mb_copy(a, w->kv[MB_K_PHI_Q], ka->nnz);  /* mb_sparse_rhs */
        const int st = model->kkt->factor(kinematic ? plan->identity : w->kv[MB_K_MASS], a,
                                          w->opt->mass_tol, w->opt->pivot_tol, w->Lx, w->D,
                                          &w->gamma);
        if (st) return st;
        w->factored_sparse = w->factored_unrolled = 1;
        return MB_OK;
    }
    mb_copy(a, w->kv[MB_K_PHI_Q], ka->nnz);
    if (nz) {  /* held coordinates: their columns leave A (O(n + nnz), no search) */
        int* held = w->held;
        for (int i = 0; i < n; ++i) held[i] = 0;
        for (int j = 0; j < nz; ++j) held[zfix[j]] = 1;
        for (int e = 0; e < ka->nnz; ++e)
            if (held[ka->col[e]]) a[e] = 0.0;
    }
    double hmax = 0.0, amax2 = 0.0;
    double* mv = w->kv[MB_K_MASS];
    if (kinematic) {
        hmax = 1.0;
    } else {
        mb_eval_one(model, MB_K_MASS, q, NULL, p, mv);
        for (int e = 0; e < km->nnz; ++e)
            if (km->row[e] == km->col[e] && mv[e] > hmax) hmax = mv[e];
    }
    {
        double* norm2 = w->tmp_r;
        mb_zero(norm2, w->r);
        for (int e = 0; e < ka->nnz; ++e) {
            const int k = plan->rowpos[ka->row[e]];
            if (k >= 0) norm2[k] += a[e] * a[e];
        }
        for (int k = 0; k < w->r; ++k) if (norm2[k] > amax2) amax2 = norm2[k];
    }
    if (!(amax2 > 0.0) && w->r > 0) return MB_SINGULAR_PHIQ;
    const double scale = hmax > 0.0 ? hmax : 1.0;
    double gamma = w->r > 0 ? scale / amax2 : 0.0;
    if (sigma)
        for (int k = 0; k < w->r; ++k)
            if (sigma[k] > 0.0 && gamma * sigma[k] > 0.5) gamma = 0.5 / sigma[k];
    w->gamma = gamma;
    mb_zero(Kx, sp->nnz_k);
    if (kinematic)
        for (int i = 0; i < n; ++i) Kx[sp->diag[i]] = 1.0;
    else
        for (int e = 0; e < km->nnz; ++e)
            if (sp->mass_map[e] >= 0) Kx[sp->mass_map[e]] += mv[e];
    if (sigma)
        for (int k = 0; k < w->r; ++k)
            Kx[sp->diag[n + k]] = -sigma[k] / (1.0 - gamma * sigma[k]);
    for (int t = 0; t < sp->ata_count; ++t)
        Kx[sp->ata_map[t]] += gamma * a[sp->ata_k1[t]] * a[sp->ata_k2[t]];
    for (int e = 0; e < ka->nnz; ++e)
        if (sp->a_map[e] >= 0) Kx[sp->a_map[e]] += a[e];

    /* up-looking LDLᵀ on the static pattern */
    const int* Kp = sp->Kp; const int* Ki = sp->Ki; const int* Lp = sp->Lp;
    const int* Li = sp->Li;
    double* y = w->y; double* Lx = w->Lx; double* D = w->D;
    for (int k = 0; k < N; ++k) {
        for (int pp = Kp[k]; pp < Kp[k + 1]; ++pp) y[Ki[pp]] = Kx[pp];
        double d = y[k];
        y[k] = 0.0;
        for (int t = sp->rowp[k]; t < sp->rowp[k + 1]; ++t) {
            const int i = sp->row_node[t], end = sp->row_slot[t];
            const double yi = y[i];
            y[i] = 0.0;
            for (int pp = Lp[i]; pp < end; ++pp) y[Li[pp]] -= Lx[pp] * yi;
            const double l = yi / D[i];
            d -= l * yi;
            Lx[end] = l;
        }
        D[k] = d;
        const int node = sp->perm[k];
        if (node < n) {
            if (!(d > w->opt->mass_tol * scale))
                return d != d ? MB_NOT_FINITE : MB_SINGULAR_MASS;
        } else if (!(-d * gamma > w->opt->pivot_tol)) {
            return d != d ? MB_NOT_FINITE : MB_SINGULAR_PHIQ;
        }
    }
    w->factored_sparse = 1;
    return MB_OK;
}

/* y (permuted) <- K⁻¹ y with the current factors. */
static void ldl_solve(const mb_ws* w, double* y)
{
    const mb_sparse* sp = &w->plan->sp;
    const int N = sp->size;
    const int* Lp = sp->Lp; const int* Li = sp->Li; const double* Lx = w->Lx;
    for (int j = 0; j < N; ++j) {
        const double yj = y[j];
        if (yj != 0.0) for (int p = Lp[j]; p < Lp[j + 1]; ++p) y[Li[p]] -= Lx[p] * yj;
    }
    for (int j = 0; j < N; ++j) y[j] /= w->D[j];
    for (int j = N - 1; j >= 0; --j) {
        double s = y[j];
        for (int p = Lp[j]; p < Lp[j + 1]; ++p) s -= Lx[p] * y[Li[p]];
        y[j] = s;
    }
}

/* x = K⁻¹ b (node order: n coordinates then r rows), with w->opt->refine steps of
 * iterative refinement against the assembled K. b and x may alias. With a compliance
 * block the rows come back unscaled (see mb_sparse_factor). */
void mb_sparse_solve(mb_ws* w, const double* b, double* x)
{
    const mb_sparse* sp = &w->plan->sp;
    const int N = sp->size;
    double* sol = w->x;
    double* res = w->res;
    if (w->factored_unrolled) {
        if (x != b) mb_copy(x, b, N);
        w->model->kkt->solve(w->Lx, w->D, x);
        return;
    }
    for (int i = 0; i < N; ++i) res[i] = b[sp->perm[i]];
    mb_copy(sol, res, N);
    ldl_solve(w, sol);
    for (int it = 0; it < w->opt->refine; ++it) {
        for (int i = 0; i < N; ++i) res[i] = b[sp->perm[i]];
        for (int j = 0; j < N; ++j)
            for (int p = sp->Kp[j]; p < sp->Kp[j + 1]; ++p) {
                const int i = sp->Ki[p];
                res[i] -= w->Kx[p] * sol[j];
                if (i != j) res[j] -= w->Kx[p] * sol[i];
            }
        ldl_solve(w, res);
        for (int i = 0; i < N; ++i) sol[i] += res[i];
    }
    for (int i = 0; i < N; ++i) x[sp->perm[i]] = sol[i];
    for (int k = 0; w->sigma && k < w->r; ++k) x[w->n + k] /= 1.0 - w->gamma * w->sigma[k];
}

/* The coordinate columns of K⁻¹ (w->zbase, w->zorder: see mb_ws). By the Takahashi
 * recurrence Z_ij = δ_ij / D_i - Σ_{k>i} L_ki Z_kj in elimination order (in w->X2), one
 * row at a time from the last; each row is mirrored at once because the rows above read
 * Z_kj on both sides of the diagonal. Then each row's coordinate entries are gathered to
 * node order in its first n places, in place (the rows stay in elimination order, found
 * through zorder), so every consumer reads contiguous coordinate rows without a second
 * N x N array (the 100-bar chain's two would not fit L2). */
void mb_sparse_inverse(mb_ws* w)
{
    const mb_kkt* kkt = w->model->kkt;
    if (w->factored_unrolled && kkt->inverse) {
        kkt->inverse(w->Lx, w->D, w->Z);
        w->zbase = w->Z;
        w->zorder = NULL;
        return;
    }
    const mb_sparse* sp = &w->plan->sp;
    const int N = sp->size, n = w->n;
    /* an unrolled factor: its own pattern, and D holds the pivots' inverses */
    const int* Lp = w->factored_unrolled ? kkt->Lp : sp->Lp;
    const int* Li = w->factored_unrolled ? kkt->Li : sp->Li;
    const double* Lx = w->Lx;
    double* Z = w->X2;
    for (int i = N - 1; i >= 0; --i) {
        double* zi = Z + (size_t)i * N;
        mb_zero(zi + i + 1, N - i - 1);
        for (int p = Lp[i]; p < Lp[i + 1]; ++p) {
            const double l = Lx[p];
            const double* zk = Z + (size_t)Li[p] * N;
            for (int j = i + 1; j < N; ++j) zi[j] -= l * zk[j];
        }
        double diag = w->factored_unrolled ? w->D[i] : 1.0 / w->D[i];
        for (int p = Lp[i]; p < Lp[i + 1]; ++p) diag -= Lx[p] * zi[Li[p]];
        zi[i] = diag;
        for (int j = i + 1; j < N; ++j) Z[(size_t)j * N + i] = zi[j];
    }
    double* gathered = w->res;
    for (int i = 0; i < N; ++i) {
        double* row = Z + (size_t)i * N;
        int b = 0;
#ifdef MB_HAVE_GATHER
        for (; b + 4 <= n; b += 4)
            _mm256_storeu_pd(gathered + b, _mm256_i32gather_pd(
                row, _mm_loadu_si128((const __m128i*)(sp->iperm + b)), 8));
#endif
        for (; b < n; ++b) gathered[b] = row[sp->iperm[b]];
        mb_copy(row, gathered, n);
    }
    w->zbase = Z;
    w->zorder = sp->iperm;
}

/* Unsymmetric K = L D U on the same static pattern (no pivoting), for matrices whose
 * pattern is that of the symmetric K: Ku[s] holds K(a, b) and Kl[s] holds K(b, a) for the
 * slot s of the upper-triangle entry (a < b, permuted positions); diagonals are in Ku.
 * Row k of L and column k of U are the same reach as row k of the LDLᵀ factor, so this is
 * the up-looking algorithm above run on both triangles: twice the arithmetic, same
 * structure. y, x: N zeros on entry and on return. */
void mb_sparse_ldu(const mb_sparse* sp, const double* Ku, const double* Kl, double* Lx,
                   double* Ux, double* D, double* y, double* x)
{
    const int* Kp = sp->Kp; const int* Ki = sp->Ki; const int* Lp = sp->Lp;
    const int* Li = sp->Li;
    for (int k = 0; k < sp->size; ++k) {
        for (int pp = Kp[k]; pp < Kp[k + 1]; ++pp) {
            y[Ki[pp]] = Ku[pp];
            x[Ki[pp]] = Kl[pp];
        }
        double d = y[k];
        y[k] = x[k] = 0.0;
        for (int t = sp->rowp[k]; t < sp->rowp[k + 1]; ++t) {
            const int i = sp->row_node[t], end = sp->row_slot[t];
            const double yi = y[i], xi = x[i];
            y[i] = x[i] = 0.0;
            for (int pp = Lp[i]; pp < end; ++pp) {
                y[Li[pp]] -= Lx[pp] * yi;
                x[Li[pp]] -= Ux[pp] * xi;
            }
            Lx[end] = xi / D[i];
            Ux[end] = yi / D[i];
            d -= Lx[end] * yi;
        }
        D[k] = d;
    }
}

/* y (permuted) <- K⁻¹ y with mb_sparse_ldu's factors. */
void mb_sparse_ldu_solve(const mb_sparse* sp, const double* Lx, const double* Ux,
                         const double* D, double* y)
{
    const int N = sp->size;
    const int* Lp = sp->Lp; const int* Li = sp->Li;
    for (int j = 0; j < N; ++j) {
        const double yj = y[j];
        if (yj != 0.0) for (int p = Lp[j]; p < Lp[j + 1]; ++p) y[Li[p]] -= Lx[p] * yj;
    }
    for (int j = 0; j < N; ++j) y[j] /= D[j];
    for (int j = N - 1; j >= 0; --j) {
        double s = y[j];
        for (int p = Lp[j]; p < Lp[j + 1]; ++p) s -= Ux[p] * y[Li[p]];
        y[j] = s;
    }
}
