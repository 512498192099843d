/* What a generated mechanism module provides to the core: its kernels and their sparsity.
 *
 * The generated file defines one `static const mb_model` with designated initializers per
 * kernel ([MB_K_PHI] = ...), so a kernel that the core does not know, or one it needs that
 * is missing, fails to compile instead of failing at run time.
 */
#ifndef MB_MODEL_H
#define MB_MODEL_H

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "mbgen.h"
#endif

/* out[k] = value of nonzero k at (q, x, p); x is q̇, v or λ depending on the kernel. */
typedef void (*mb_kernel_fn)(const double* q, const double* x, const double* p, double* out);

/* States evaluated side by side by the lane functions, every array [entry][lane]. */
#define MB_LANES 8

typedef struct {
    mb_kernel_fn eval;  /* NULL when the kernel has no entries (e.g. no sensors) */
    int nnz;
    const int* row;     /* first index of each nonzero */
    const int* col;     /* second index of each nonzero (NULL for vectors) */
    mb_kernel_fn lanes; /* eval for MB_LANES states at once ([entry][lane] arrays, p
                         * shared); only for the kernels the batched prediction uses */
} mb_kernel;

/* The dynamics' KKT factorization [M + γAᵀA, Aᵀ; A, 0] (A: the rows independent at q0,
 * sparse.c's elimination order) unrolled for this mechanism's pattern
 * (mbgen/codegen/kkt.py): the same arithmetic as sparse.c without its index loops.
 * Generated while the factor stays short (the inverse and Jacobian products only for
 * small mechanisms). */
typedef struct {
    int size;          /* n + r */
    int nnz_l;         /* entries of L */
    int r;             /* constraint rows in A ... */
    const int* rows;   /* ... and which, ascending */
    const int* perm;   /* node at each elimination position (size) */
    const int* Lp;     /* L by compressed columns in elimination positions: starts (size + 1) */
    const int* Li;     /* ... and rows, ascending in each column (nnz_l) */
    /* L, D (the pivots' inverses) and γ from mass and Φq values (kernel order); status
     * as mb_sparse_factor */
    int (*factor)(const double* mv, const double* a, double mass_tol, double pivot_tol,
                  double* L, double* D, double* gamma);
    void (*solve)(const double* L, const double* D, double* x);  /* x <- K⁻¹ x, node order */
    /* K⁻¹ in node order; NULL where it would be too long (the generic loop reads L by Lp,
     * Li instead) */
    void (*inverse)(const double* L, const double* D, double* Z);
    /* ∂q̈/∂q and ∂q̈/∂q̇ (n x n, either NULL) from that Z and the values of the kernels in
     * dynamics.c's jacobian_terms (kv by MB_K_*; aux: Φq q̇ differentiated in q, read only
     * when alpha != 0); NULL: the core's generic products */
    void (*jacobians)(const double* Z, double* const* kv, const double* aux, double alpha,
                      double beta, double* Jq, double* Jqd);
    /* factor and solve for MB_LANES states at once ([entry][lane] arrays; NULL for
     * factors split into several functions): bad[l] = 1 where the factor's checks failed
     * (the lane computes on; redo that state with factor for its status) */
    void (*factor_lanes)(const double* mv, const double* a, double mass_tol,
                         double pivot_tol, double* L, double* D, double* gamma, int* bad);
    void (*solve_lanes)(const double* L, const double* D, double* x);
    /* inverse and jacobians for MB_LANES states at once ([entry][lane] arrays, kv's
     * arrays too); NULL unless both exist and the factor has lanes */
    void (*inverse_lanes)(const double* L, const double* D, double* Z);
    void (*jacobians_lanes)(const double* Z, double* const* kv, const double* aux,
                            double alpha, double beta, double* Jq, double* Jqd);
} mb_kkt;

struct mb_model {
    int n, m, np;
    double length;  /* the mechanism's size [m] (largest |x|, |y| of its points; 1 if 0) */
    mb_kernel kernel[MB_KERNEL_COUNT];
    const int* coordinate_order;  /* fill-reducing elimination order of q (length n) */
    const mb_kkt* kkt;            /* NULL: the generic sparse code */
    /* the independent coordinates of the joint-space kernels (MB_K_REDUCED_*: a spatial
     * open chain's joint angles, symbolic/reduced.py); joint_d = 0: none */
    int joint_d;
    const int* joint_z;
};

#endif
