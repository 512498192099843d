/* Internal interfaces shared by the core's sources (not part of the public API). */
#ifndef MB_CORE_H
#define MB_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "mb_model.h"
#endif

/* Symbolic structure of the sparse KKT factorization for one set of active rows
 * (sparse.c). Nodes 0..n-1 are coordinates, n..n+r-1 the active constraint rows. */
typedef struct {
    int size;            /* N = n + r */
    int *perm, *iperm;   /* elimination position -> node, node -> position */
    int *Kp, *Ki;        /* upper triangle of the permuted KKT matrix, CSC (Ki sorted) */
    int *parent, *Lp;    /* elimination tree and column pointers of L */
    int *Li;             /* row indices of L (static: computed by the analysis) */
    int *rowp, *row_node, *row_slot; /* row k of L: nodes i (topological order) and the
                                        slots of L(k, i), for rowp[k] <= t < rowp[k+1] */
    int *mass_map;       /* mass nonzero -> slot in Kx (-1: lower triangle, skipped) */
    int *a_map;          /* Φq nonzero -> slot of (coordinate, row) in Kx (-1: inactive) */
    int *ata_map;        /* pairs of nonzeros of one active row -> slot of their product */
    int *ata_k1, *ata_k2;/* the pair's Φq nonzeros */
    int ata_count;
    int *diag;           /* node -> slot of its diagonal in Kx */
    int nnz_k, nnz_l;
} mb_sparse;

struct mb_plan {
    const mb_model* model;
    int r, d;            /* active rows, degrees of freedom n - r */
    int* rows;           /* active constraint rows (r) */
    int* rowpos;         /* constraint row -> position among active rows, or -1 */
    int unrolled;        /* the model's unrolled KKT factorization fits this plan */
    double* identity;    /* W = I in the mass kernel's layout, for the unrolled code to
                            factor the kinematic problems; NULL when some diagonal entry
                            is not in the mass pattern (coordinates without inertia) */
    mb_sparse sp;
};

/* Scratch of MB_LANES states side by side (lanes.c; defined below). */
typedef struct mb_lanes mb_lanes;

/* Scratch memory of the calls: one block, sized for the plan (model.c); the public
 * mb_workspace of the one-state calls, and of the batched calls a caller keeps one for
 * (mb_forward_dynamics_in: their lanes' scratch and a second workspace, made on first use
 * and freed with it). */
typedef struct mb_workspace mb_ws;
struct mb_workspace {
    const mb_plan* plan;
    const mb_model* model;
    const mb_options* opt;
    int n, m, r, d;
    double* kv[MB_KERNEL_COUNT];   /* kernel values */
    double *Q, *c, *qdd, *lam, *tmp_n, *tmp_n2, *tmp_r, *residual;
    /* dense null-space path */
    double *A, *LU, *F, *R, *Kd, *X, *Y, *T, *W, *V, *G, *Sc;
    int *prow, *pcol, *allowed, *ind;
    /* sparse KKT path */
    double *Kx, *Lx, *D, *y, *x, *res, *Z, *akkt, *aux;
    double* JT;                   /* a Jacobian's transpose, n x N */
    /* a Jacobian's term entries by column (n + 1 starts): each entry's row of the inverse
     * and coefficient, in the terms' order within a column */
    const double** jrow;
    double* jcoef;
    int* jstart;
    double* X2;
    /* after an inverse: row `node` of [P G]ᵀ (its first n entries: column `node` of
     * [P G]) at zbase + (zorder ? zorder[node] : node) * (n + r) */
    const double* zbase;
    const int* zorder;
    int* held;
    double gamma;
    const double* sigma;          /* compliance block of the last factorization, or NULL */
    int factored_sparse;          /* the last solve used the sparse factors */
    int factored_unrolled;        /* ... and they are the model's unrolled ones (node order) */
    /* joint_space.c: scratch, and whether kv[MB_K_REDUCED_CONSTANTS] holds the constants
     * of the parameters saved in it */
    double* joint;
    int joint_cached;
    /* the batched calls' scratch beyond the block, made on first use (NULL until then) */
    mb_lanes* lanes;              /* q̈ in lanes (lanes.c's mb_lanes_new) */
    double* lane_jacobians;       /* the Jacobians in lanes (dynamics.c) */
    struct mb_workspace* kinematics; /* mb_independent_dynamics' second workspace */
};

/* Workspace contents: Jacobian memory; the dense dynamics' blocks even when the options
 * choose the sparse path (they are always there when the options choose dense). */
enum { MB_WS_JACOBIANS = 1, MB_WS_DENSE = 2 };

mb_ws* mb_ws_new(const mb_plan* plan, const mb_options* opt, int flags);
void mb_ws_free(mb_ws* w);

/* Inline (called a dozen times per state): one kernel at one state (no-op for an empty
 * kernel), and whether len values are all finite. */
static inline void mb_eval_one(const mb_model* model, int kernel, const double* q,
                               const double* x, const double* p, double* out)
{
    const mb_kernel* k = &model->kernel[kernel];
    if (k->eval) k->eval(q, x, p, out);
}

static inline int mb_all_finite(const double* v, long len)
{
    /* no early exit: an OR over the exponent bits (all ones: infinite or NaN) vectorizes,
     * and the values checked are finite all but never */
    const uint64_t exponent = 0x7ff0000000000000ULL;
    uint64_t bad = 0;
    for (long i = 0; i < len; ++i) {
        uint64_t bits;
        memcpy(&bits, v + i, sizeof bits);
        bad |= (bits & exponent) == exponent;
    }
    return !bad;
}

/* The dynamics' KKT system runs on the module's unrolled code under these options (the
 * public mb_plan_uses_unrolled; inline so sparse.c needs nothing from model.c). */
static inline int mb_unrolled_applies(const mb_plan* plan, const mb_options* options)
{
    return plan->unrolled && options->refine == 0 &&
           (options->method == MB_METHOD_AUTO || options->method == MB_METHOD_UNROLLED);
}

/* sparse.c */
int mb_sparse_analyze(mb_plan* plan);
void mb_sparse_release(mb_sparse* sp);
int mb_sparse_factor(mb_ws* w, const double* q, const double* p, int kinematic,
                     const int* zfix, int nz, const double* sigma);
void mb_sparse_rhs(const mb_ws* w, const double* f, const double* c, double* b);
void mb_sparse_solve(mb_ws* w, const double* b, double* x);
void mb_sparse_inverse(mb_ws* w);
int mb_sparse_slot(const mb_sparse* sp, int node_i, int node_j);
void mb_sparse_ldu(const mb_sparse* sp, const double* Ku, const double* Kl, double* Lx,
                   double* Ux, double* D, double* y, double* x);
void mb_sparse_ldu_solve(const mb_sparse* sp, const double* Lx, const double* Ux,
                         const double* D, double* y);

/* dense.c */
void mb_dense_build_A(mb_ws* w);
int mb_dense_partition(mb_ws* w, const int* zfix, int nz, int full);
void mb_dense_build_A_lanes(const mb_plan* plan, const double* a, double* A);
int mb_dense_partition_lanes(mb_ws* const* ws, const double* a, double* LU, int* ind);
void mb_dense_solve_S(const mb_ws* w, const double* b, double* x);
int mb_dense_factor_mass(mb_ws* w, const double* q, const double* p);
void mb_dense_accelerations(mb_ws* w, double* qdd);
void mb_dense_multipliers(mb_ws* w, const double* qdd, double* lam);
void mb_dense_jacobian_blocks(mb_ws* w, const double* P, int ld);
void mb_dense_inverse_columns(mb_ws* w, double* Z);
int mb_lu_factor(double* A, int k, int* piv, double tol);
void mb_lu_solve(const double* LU, int k, const int* piv, double* B, int cols);
void mb_dense_apply(mb_ws* w, const double* B, int cols, double* out, int with_G);
int mb_dense_min_norm(mb_ws* w, const double* b, double* x);

/* dynamics.c */
int mb_dynamics_one(mb_ws* w, const double* q, const double* qd, const double* Qext,
                    const double* p, double* qdd, double* lam, int need_jacobian_data);
void mb_dynamics_jacobians(mb_ws* w, const double* q, const double* qd, const double* p,
                           double* Jq, double* Jqd, double* JQ);
int mb_position_one(mb_ws* w, double* q, const double* p, const int* zfix, int nz,
                    int minimum_norm, double tol, int max_iter);
int mb_velocity_one(mb_ws* w, const double* q, double* qd, const double* p,
                    const int* zfix, int nz, int minimum_norm);
int mb_choose_z(mb_ws* w, const double* q, const double* p, int* ind);
int mb_independent_one(mb_ws* w, mb_ws* wk, const double* q, const double* qd,
                       const double* Qext, const double* p, const int* zfix, int nz,
                       double* zdd, double* Jz, double* Jzd, double* JzQ);

/* joint_space.c: whether the joint-space kernels give z̈ for these independent
 * coordinates under these options (the model has them for exactly these, and the method
 * is MB_METHOD_AUTO), and z̈ with its Jacobians (any NULL) at one state from them. */
int mb_joint_space_applies(const mb_plan* plan, const mb_options* options, const int* zfix,
                           int nz);
int mb_joint_space_one(mb_ws* w, const double* q, const double* qd, const double* Qext,
                       const double* p, double* zdd, double* Jz, double* Jzd, double* JzQ);
/* ... for count states (strides as mb_independent_dynamics), the terms in lanes where
 * the module has them; NaN and a status where a state fails; returns the failures */
int mb_joint_space_batch(mb_ws* w, long count, const double* q, long q_stride,
                         const double* qd, long qd_stride, const double* Qext, long Q_stride,
                         const double* p, long p_stride, double* zdd, double* Jz, double* Jzd,
                         double* JzQ, int* status);

/* Cholesky factor L (lower triangle) of the symmetric d x d K in place; MB_SINGULAR_MASS
 * where a pivot is not above tol times the largest diagonal entry. Inline: with a constant
 * d (joint_space.c's small d) the compiler unrolls the loops. */
static inline int mb_cholesky(double* K, int d, double tol)
{
    double scale = 0.0;
    for (int i = 0; i < d; ++i) if (K[i * d + i] > scale) scale = K[i * d + i];
    for (int j = 0; j < d; ++j) {
        double s = K[j * d + j];
        for (int k = 0; k < j; ++k) s -= K[j * d + k] * K[j * d + k];
        if (!(s > tol * scale)) return s != s ? MB_NOT_FINITE : MB_SINGULAR_MASS;
        const double l = sqrt(s);
        K[j * d + j] = l;
        for (int i = j + 1; i < d; ++i) {
            double t = K[i * d + j];
            for (int k = 0; k < j; ++k) t -= K[i * d + k] * K[j * d + k];
            K[i * d + j] = t / l;
        }
    }
    return MB_OK;
}

/* Solves (L Lᵀ) X = B in place, B is d x cols: row by row, so the loops over the columns
 * vectorize (each entry sees the same operations in the same order as column by column). */
static inline void mb_cholesky_solve(const double* L, int d, double* B, int cols)
{
    for (int i = 0; i < d; ++i) {
        double* row = B + (long)i * cols;
        for (int k = 0; k < i; ++k) {
            const double f = L[i * d + k];
            const double* done = B + (long)k * cols;
            for (int c = 0; c < cols; ++c) row[c] -= f * done[c];
        }
        const double pivot = L[i * d + i];
        for (int c = 0; c < cols; ++c) row[c] /= pivot;
    }
    for (int i = d - 1; i >= 0; --i) {
        double* row = B + (long)i * cols;
        for (int k = i + 1; k < d; ++k) {
            const double f = L[k * d + i];
            const double* done = B + (long)k * cols;
            for (int c = 0; c < cols; ++c) row[c] -= f * done[c];
        }
        const double pivot = L[i * d + i];
        for (int c = 0; c < cols; ++c) row[c] /= pivot;
    }
}

/* Scratch of MB_LANES states side by side, every array [entry][lane] (lanes.c). */
struct mb_lanes {
    double *q, *qd, *e, *x1, *v1;  /* n each: the start, the noise force, the result */
    double *Re, *LU;  /* n: R ε; r n + r: the partition's scratch, then its factors */
    double *ph, *A, *res, *y, *delta; /* the projection's: m, r n, r, r, n */
    double *kv, *kx, *xs, *sx, *sv; /* RK4's stages, n each */
    double *f, *dd, *a, *mv, *b, *L, *D, *gamma;
    double* p;  /* np: each lane's parameters, which the lane kernels read */
    int bad[MB_LANES];
};

/* lanes.c: whether this plan and these options have q̈ in lanes (the one-piece unrolled
 * KKT path, no stabilization, lane functions for its kernels); the lanes' scratch (free()
 * it) and q̈ of MB_LANES states at once, each lane bit for bit what mb_dynamics_one gives
 * it on the unrolled path */
int mb_dynamics_uses_lanes(const mb_plan* plan, const mb_options* options);
mb_lanes* mb_lanes_new(const mb_plan* plan);
/* s->p from parameter sets p + l * stride (stride 0: one set in every lane) */
void mb_lanes_load_p(mb_lanes* s, int np, const double* p, long stride);
void mb_dynamics_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s,
                       const double* q, const double* qd, const double* e, int evaluated,
                       double* qdd);
/* One step of dt by MB_EULER, MB_SEMI_IMPLICIT_EULER or MB_RK4 for the lanes: (s->q, s->qd)
 * under the force s->e to (s->x1, s->v1), given Φq and M at s->q in s->a and s->mv; each
 * lane bit for bit what the one-state step gives it, s->bad[l] set where it failed. */
void mb_integrate_lanes(const mb_plan* plan, const mb_options* options, mb_lanes* s,
                        int method, double dt);

/* Copy and clear a few doubles inline: at a small mechanism's sizes (n ~ 4-20) a call
 * into the C library costs more than the work (~10 % of the double pendulum's q̈ with
 * Jacobians went to memmove). The core is built with -fno-tree-loop-distribute-patterns
 * so the compiler does not turn these loops back into those calls. */
static inline void mb_copy(double* restrict dst, const double* restrict src, long count)
{
    for (long i = 0; i < count; ++i) dst[i] = src[i];
}

static inline void mb_zero(double* dst, long count)
{
    for (long i = 0; i < count; ++i) dst[i] = 0.0;
}

/* x += h v (n each) */
static inline void mb_add_scaled(double* restrict x, const double* restrict v, double h, int n)
{
    for (int i = 0; i < n; ++i) x[i] += h * v[i];
}

/* dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols: states into
 * lanes ([entry][lane]) and back. In 4 x 4 blocks of four loads, eight shuffles and four
 * stores (GNU C vectors) where element by element each value is a strided load. */
#if defined(__clang__)
#define MB_SHUFFLE4(a, b, i, j, k, l) __builtin_shufflevector(a, b, i, j, k, l)
#else
#define MB_SHUFFLE4(a, b, i, j, k, l) __builtin_shuffle(a, b, (mb_index4){i, j, k, l})
#endif
typedef double mb_double4 __attribute__((vector_size(4 * sizeof(double))));
typedef int64_t mb_index4 __attribute__((vector_size(4 * sizeof(double))));

static inline void mb_transpose(const double* restrict src, long src_stride, int rows, int cols,
                                double* restrict dst, long dst_stride)
{
    /* dst's rows one group of four after another, each written front to back (a batch's
     * outputs, out of cache: written row by row, as the states one at a time would) */
    int j = 0;
    for (; j + 4 <= cols; j += 4) {
        double* to = dst + j * dst_stride;
        int i = 0;
        for (; i + 4 <= rows; i += 4) {
            const double* from = src + i * src_stride + j;
            mb_double4 r0, r1, r2, r3;
            memcpy(&r0, from, sizeof r0);
            memcpy(&r1, from + src_stride, sizeof r1);
            memcpy(&r2, from + 2 * src_stride, sizeof r2);
            memcpy(&r3, from + 3 * src_stride, sizeof r3);
            const mb_double4 t0 = MB_SHUFFLE4(r0, r1, 0, 4, 2, 6);  /* r0j r1j, j = 0, 2 */
            const mb_double4 t1 = MB_SHUFFLE4(r0, r1, 1, 5, 3, 7);  /* j = 1, 3 */
            const mb_double4 t2 = MB_SHUFFLE4(r2, r3, 0, 4, 2, 6);
            const mb_double4 t3 = MB_SHUFFLE4(r2, r3, 1, 5, 3, 7);
            const mb_double4 c0 = MB_SHUFFLE4(t0, t2, 0, 1, 4, 5);
            const mb_double4 c1 = MB_SHUFFLE4(t1, t3, 0, 1, 4, 5);
            const mb_double4 c2 = MB_SHUFFLE4(t0, t2, 2, 3, 6, 7);
            const mb_double4 c3 = MB_SHUFFLE4(t1, t3, 2, 3, 6, 7);
            memcpy(to + i, &c0, sizeof c0);
            memcpy(to + dst_stride + i, &c1, sizeof c1);
            memcpy(to + 2 * dst_stride + i, &c2, sizeof c2);
            memcpy(to + 3 * dst_stride + i, &c3, sizeof c3);
        }
        for (; i < rows; ++i)
            for (int k = 0; k < 4; ++k) to[k * dst_stride + i] = src[i * src_stride + j + k];
    }
    for (; j < cols; ++j)
        for (int i = 0; i < rows; ++i) dst[j * dst_stride + i] = src[i * src_stride + j];
}

/* A failed state's outputs (v may be NULL: not asked for). */
static inline void mb_fill_nan(double* v, long len)
{
    if (v) for (long i = 0; i < len; ++i) v[i] = NAN;
}

/* ... of state s of mb_independent_dynamics (z̈, ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q; any NULL) */
static inline void mb_independent_nan(long s, int d, int n, double* zdd, double* Jz,
                                      double* Jzd, double* JzQ)
{
    const long dd = (long)d * d, dn = (long)d * n;
    mb_fill_nan(zdd + s * d, d);
    mb_fill_nan(Jz ? Jz + s * dd : NULL, dd);
    mb_fill_nan(Jzd ? Jzd + s * dd : NULL, dd);
    mb_fill_nan(JzQ ? JzQ + s * dn : NULL, dn);
}

#endif
