/* What a generated mechanism module provides to the core: its kernels and their sparsity.
 *
 * The generated file defines one `static const mb_model` with designated initializers per
 * kernel ([MB_K_PHI] = ...), so a kernel that the core does not know, or one it needs that
 * is missing, fails to compile instead of failing at run time.
 */
#ifndef MB_MODEL_H
#define MB_MODEL_H

#include "mbgen.h"

/* out[k] = value of nonzero k at (q, x, p); x is q̇, v or λ depending on the kernel. */
typedef void (*mb_kernel_fn)(const double* q, const double* x, const double* p, double* out);

typedef struct {
    mb_kernel_fn eval;  /* NULL when the kernel has no entries (e.g. no sensors) */
    int nnz;
    const int* row;     /* first index of each nonzero */
    const int* col;     /* second index of each nonzero (NULL for vectors) */
} mb_kernel;

struct mb_model {
    int n, m, np;
    mb_kernel kernel[MB_KERNEL_COUNT];
    const int* coordinate_order;  /* fill-reducing elimination order of q (length n) */
};

#endif
