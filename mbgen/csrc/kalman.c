/* The error-state extended Kalman filter in independent coordinates (errorEKF, with
 * optional force estimation) over a whole readings file in one call: the filter of
 * mbgen/estimation/kalman.py, which is its reference (the same operations in the same
 * order, tested to agree).
 *
 * State x = (z, ż, f) of size s = 2d + nf, covariance P (s x s). A step: RK4 of (z, ż)
 * with the dependent coordinates assembled at every stage from the last stage's (the
 * assembly branch is kept), the transition F = ∂x_k+1/∂x_k and the noise map
 * G = ∂x_k+1/∂ε chained through the stages from the exact ∂z̈/∂z, ∂z̈/∂ż, ∂z̈/∂Q; then
 * P = F P Fᵀ + σa² G Gᵀ (+ σf² dt on the forces). The update takes the step's readings
 * (NaN: none) through H = ∂h/∂x: sensors by h_q R + h_q̇ V and h_q̇ R (R = ∂q/∂z,
 * V = ∂q̇/∂z at fixed ż), accelerometers through q̈'s exact Jacobians, Joseph form; then
 * q, q̇ follow from the position and velocity problems at the corrected z, ż, and z is
 * chosen again by full pivoting where max |R| grew `reselect` times beyond that
 * choice's (P carried by the exact map between the two).
 *
 * The UKF (mb_ukf_run; reference mbgen/estimation/ukf.py) shares the state, the RK4 with
 * stage assembly, the reading noise, the correction's assembly and the re-choice of z,
 * and replaces the linearizations by the unscented transform: the prediction carries the
 * sigma points of (x, ε) through RK4, the update reads the sigma points of (x̄, P), each
 * point assembled on the branch from the mean's q moved to first order. */
#include <math.h>
#include <stdlib.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

typedef struct {
    const mb_plan* plan;
    const mb_model* model;
    const mb_options* opt;
    const double* p;
    mb_workspace* w;    /* dynamics, with Jacobian memory */
    mb_ws* wk;          /* kinematics */
    int n, m, r, d, nf, s, width, ns, na, k;
    const int* forces;
    int* zi;            /* current z (d) */
    int* best;          /* full pivoting's z (d) */
    int* piv;           /* n pivots */
    double *Q, *zdd, *Jz, *Jzd, *JzQ;
    double *start, *x, *dx, *slope, *dslope, *prev, *dprev, *total, *dtotal;
    double *F, *G, *T1, *T2;                  /* s x s scratch; G s x d */
    double *A, *Rm, *Vm, *R2, *V2, *phiq, *rate;
    double *h, *H, *N, *S, *K, *X, *nu, *seen_y;
    double *hq, *hqd, *hv, *qdd, *Jq, *Jqd, *JQ, *aq, *aqdd, *av, *B;
    double *Pa, *chi, *Y, *xm, *ym, *Pxy, *qs, *qds, *qc, *qdc, *pt;  /* the UKF's */
    double *ph, *rhs;  /* the assembly's: m, n */
    double* scratch;
} kf_filter;

static double* kf_take(double** cursor, long count)
{
    double* out = *cursor;
    *cursor += count;
    return out;
}

static void kf_free(kf_filter* f)
{
    mb_workspace_free(f->w);
    mb_ws_free(f->wk);
    free(f->scratch);
    free(f->zi);
}

static int kf_init(kf_filter* f, const mb_plan* plan, const mb_options* opt, const double* p,
                   int nf, const int* forces, int ns, int na)
{
    memset(f, 0, sizeof(*f));
    f->plan = plan;
    f->model = plan->model;
    f->opt = opt;
    f->p = p;
    const int n = plan->model->n, m = plan->model->m, d = plan->d;
    f->n = n, f->m = m, f->r = plan->r, f->d = d, f->nf = nf, f->forces = forces;
    f->s = 2 * d + nf;
    f->width = f->s + d;
    f->ns = ns, f->na = na, f->k = ns + na;
    const long s = f->s, wd = f->width, k = f->k, dd = 2L * d;
    const long mm = m > 0 ? m : 1;
    long total = n + d + 2L * d * d + (long)d * n           /* Q zdd Jz Jzd JzQ */
                 + 4 * dd + 4 * dd * wd + dd               /* start x slope prev total; dx
                                                              dslope dprev dtotal; spare */
                 + 3 * s * s + s * d                       /* F T1 T2 G */
                 + (long)n * n + 4L * n * d + 2 * mm * n     /* A Rm Vm R2 V2 phiq rate */
                 + k + k * s + 3 * k * k + 2 * k * s + k + k  /* h H N S K X nu seen_y */
                 + 3L * ns * n                             /* hq hqd hv */
                 + n + 3L * n * n + 3L * na * n + (long)na * d + 16
                 + (s + d) * (s + d) + (2 * (s + d) + 1) * s      /* Pa chi */
                 + (2 * s + 1) * k + (s + d) + k + s * k + 4L * n + (s + d)  /* Y .. pt */
                 + mm + n;                                  /* ph rhs */
    f->scratch = (double*)malloc(sizeof(double) * (size_t)total);
    f->zi = (int*)malloc(sizeof(int) * (size_t)(2 * d + n + 1));
    f->w = mb_workspace_new(plan, opt, 1);
    f->wk = mb_ws_new(plan, opt, MB_WS_DENSE);
    if (!f->scratch || !f->zi || !f->w || !f->wk) {
        kf_free(f);
        return MB_NO_MEMORY;
    }
    f->best = f->zi + d;
    f->piv = f->best + d;
    double* c = f->scratch;
    f->Q = kf_take(&c, n); f->zdd = kf_take(&c, d); f->Jz = kf_take(&c, (long)d * d);
    f->Jzd = kf_take(&c, (long)d * d); f->JzQ = kf_take(&c, (long)d * n);
    f->start = kf_take(&c, dd); f->x = kf_take(&c, dd); f->slope = kf_take(&c, dd);
    f->prev = kf_take(&c, dd); f->total = kf_take(&c, dd);
    f->dx = kf_take(&c, dd * wd); f->dslope = kf_take(&c, dd * wd); f->dprev = kf_take(&c, dd * wd);
    f->dtotal = kf_take(&c, dd * wd);
    f->F = kf_take(&c, s * s); f->T1 = kf_take(&c, s * s); f->T2 = kf_take(&c, s * s);
    f->G = kf_take(&c, s * d);
    f->A = kf_take(&c, (long)n * n); f->Rm = kf_take(&c, (long)n * d); f->Vm = kf_take(&c, (long)n * d);
    f->R2 = kf_take(&c, (long)n * d); f->V2 = kf_take(&c, (long)n * d);
    f->phiq = kf_take(&c, mm * n); f->rate = kf_take(&c, mm * n);
    f->h = kf_take(&c, k); f->H = kf_take(&c, k * s); f->N = kf_take(&c, k * k); f->S = kf_take(&c, k * k);
    f->K = kf_take(&c, k * s); f->X = kf_take(&c, k * s); f->nu = kf_take(&c, k);
    f->seen_y = kf_take(&c, k);
    f->hq = kf_take(&c, (long)ns * n); f->hqd = kf_take(&c, (long)ns * n);
    f->hv = kf_take(&c, (long)ns * n);
    f->qdd = kf_take(&c, n); f->Jq = kf_take(&c, (long)n * n); f->Jqd = kf_take(&c, (long)n * n);
    f->JQ = kf_take(&c, (long)n * n);
    f->aq = kf_take(&c, (long)na * n); f->aqdd = kf_take(&c, (long)na * n);
    f->av = kf_take(&c, (long)na * n); f->B = kf_take(&c, (long)na * d);
    const long L = s + d;
    f->Pa = kf_take(&c, L * L); f->chi = kf_take(&c, (2 * L + 1) * s);
    f->Y = kf_take(&c, (2 * s + 1) * k); f->xm = kf_take(&c, L); f->ym = kf_take(&c, k);
    f->Pxy = kf_take(&c, s * k); f->qs = kf_take(&c, n); f->qds = kf_take(&c, n);
    f->qc = kf_take(&c, n); f->qdc = kf_take(&c, n); f->pt = kf_take(&c, L);
    f->ph = kf_take(&c, mm); f->rhs = kf_take(&c, n);
    return MB_OK;
}

/* C (rows x cols) = A (rows x inner) B (inner x cols); transposes by flags. */
static void kf_matmul(const double* A, int ta, const double* B, int tb, int rows, int inner,
                   int cols, double* C)
{
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
            double sum = 0.0;
            for (int l = 0; l < inner; ++l)
                sum += (ta ? A[l * rows + i] : A[i * inner + l]) *
                       (tb ? B[j * inner + l] : B[l * cols + j]);
            C[i * cols + j] = sum;
        }
}

/* q, q̇ with q[zi] = z, q̇[zi] = ż, the rest solved from q's other entries (the guess). */
static int kf_factor(kf_filter* f, const double* q, const int* zi);

/* Mechanisms up to this many coordinates are assembled by Newton on the dense augmented
 * matrix [Φq; E_z] (at the four-bar's size several times cheaper than the general sparse
 * KKT path of mb_position_one, which larger ones keep). */
#define KF_DENSE_ASSEMBLY 24

/* q, q̇ with q[zi] = z, q̇[zi] = ż, the rest solved from q's other entries (the guess):
 * Newton to newton_tol within 50 iterations, the rows dropped as redundant checked as
 * mb_position_one does, then Φq q̇ = 0 at the solution. */
static int kf_assemble(kf_filter* f, const double* z, const double* zd, double* q, double* qd)
{
    const int n = f->n, m = f->m, r = f->r, d = f->d;
    const double tol = f->opt->newton_tol;
    for (int j = 0; j < d; ++j) q[f->zi[j]] = z[j];
    if (n > KF_DENSE_ASSEMBLY) {
        int st = mb_position_one(f->wk, q, f->p, f->zi, d, 0, tol, 50);
        if (st) return st;
        mb_zero(qd, n);
        for (int j = 0; j < d; ++j) qd[f->zi[j]] = zd[j];
        return mb_velocity_one(f->wk, q, qd, f->p, f->zi, d, 0);
    }
    int st;
    for (int it = 0;; ++it) {
        if (!mb_all_finite(q, n)) return MB_NOT_FINITE;
        mb_eval_dense(f->model, MB_K_PHI, 1, q, 0, NULL, 0, f->p, 0, m, 1, f->ph);
        double err = 0.0;
        for (int i = 0; i < r; ++i) {
            f->rhs[i] = f->ph[f->plan->rows[i]];
            if (fabs(f->rhs[i]) > err) err = fabs(f->rhs[i]);
        }
        if (err <= tol) break;
        if (!(err < INFINITY)) return MB_NOT_FINITE;
        if (it == 50) return MB_NO_CONVERGENCE;
        if ((st = kf_factor(f, q, f->zi))) return st;
        mb_zero(f->rhs + r, d);
        mb_lu_solve(f->A, n, f->piv, f->rhs, 1);
        for (int i = 0; i < n; ++i) q[i] -= f->rhs[i];
    }
    double qn = 0.0;
    for (int i = 0; i < n; ++i) qn += q[i] * q[i];
    const double consistent = fmax(1e5 * tol, 1e-10 * qn);
    for (int i = 0; i < m; ++i)
        if (fabs(f->ph[i]) > consistent) return MB_INCONSISTENT;
    if ((st = kf_factor(f, q, f->zi))) return st;
    mb_zero(qd, r);
    for (int j = 0; j < d; ++j) qd[r + j] = zd[j];
    mb_lu_solve(f->A, n, f->piv, qd, 1);
    return mb_all_finite(qd, n) ? MB_OK : MB_NOT_FINITE;
}

/* The LU factors of the augmented matrix [Φq (active rows); E_zi] at q in f->A, f->piv. */
static int kf_factor(kf_filter* f, const double* q, const int* zi)
{
    const int n = f->n, m = f->m, r = f->r, d = f->d;
    mb_eval_dense(f->model, MB_K_PHI_Q, 1, q, 0, NULL, 0, f->p, 0, m, n, f->phiq);
    for (int i = 0; i < r; ++i) mb_copy(f->A + (long)i * n, f->phiq + (long)f->plan->rows[i] * n, n);
    mb_zero(f->A + (long)r * n, (long)d * n);
    for (int j = 0; j < d; ++j) f->A[(long)(r + j) * n + zi[j]] = 1.0;
    return mb_lu_factor(f->A, n, f->piv, 1e-14);
}

/* R = ∂q/∂z and V = ∂q̇/∂z at fixed ż (n x d each) for z = zi, from the augmented
 * matrix [Φq (active rows); E_z]: A R = [0; I], A V = [-(Φq q̇)_q R; 0]. */
static int kf_state_maps(kf_filter* f, const double* q, const double* qd, const int* zi, double* R,
                      double* V)
{
    const int n = f->n, r = f->r, d = f->d;
    int st = kf_factor(f, q, zi);
    if (st) return st;
    mb_zero(R, (long)n * d);
    for (int j = 0; j < d; ++j) R[(long)(r + j) * d + j] = 1.0;
    mb_lu_solve(f->A, n, f->piv, R, d);
    if (!V) return MB_OK;
    mb_eval_dense(f->model, MB_K_PHIQ_V_Q, 1, q, 0, qd, 0, f->p, 0, f->m, n, f->rate);
    mb_zero(V, (long)n * d);
    for (int i = 0; i < r; ++i) {
        const double* row = f->rate + (long)f->plan->rows[i] * n;
        for (int j = 0; j < d; ++j) {
            double sum = 0.0;
            for (int l = 0; l < n; ++l) sum += row[l] * R[l * d + j];
            V[i * d + j] = -sum;
        }
    }
    mb_lu_solve(f->A, n, f->piv, V, d);
    return MB_OK;
}

/* One RK4 step of (z, ż) from (q, q̇) (in place, the end's) under f->Q, with eps (d,
 * NULL: none) added to z̈ over the step; with `jacobians`, the chain rule through the
 * stages into f->dtotal (∂ of the stages' weighted sum over (z, ż, f, ε)). */
static int kf_rk4(kf_filter* f, double* q, double* qd, const double* eps, double dt,
                  int jacobians)
{
    const int n = f->n, d = f->d, nf = f->nf, s = f->s, wd = f->width, dd = 2 * d;
    static const double c[4] = {0.0, 0.5, 0.5, 1.0}, weight[4] = {1.0, 2.0, 2.0, 1.0};
    for (int j = 0; j < d; ++j) {
        f->start[j] = q[f->zi[j]];
        f->start[d + j] = qd[f->zi[j]];
    }
    mb_zero(f->prev, dd);
    mb_zero(f->total, dd);
    if (jacobians) {
        mb_zero(f->dprev, (long)dd * wd);
        mb_zero(f->dtotal, (long)dd * wd);
    }
    for (int stage = 0; stage < 4; ++stage) {
        const double ch = c[stage] * dt;
        for (int i = 0; i < dd; ++i) f->x[i] = f->start[i] + ch * f->prev[i];
        if (jacobians)
            for (int i = 0; i < dd; ++i)
                for (int j = 0; j < wd; ++j)
                    f->dx[i * wd + j] = (i == j) + ch * f->dprev[i * wd + j];
        int st;
        if (stage && (st = kf_assemble(f, f->x, f->x + d, q, qd))) return st;
        int status = MB_OK;
        mb_independent_dynamics_in(f->w, 1, q, 0, qd, 0, f->Q, 0, f->p, 0, f->zi, d, f->zdd,
                                   jacobians ? f->Jz : NULL, jacobians ? f->Jzd : NULL,
                                   jacobians ? f->JzQ : NULL, &status);
        if (status) return status;
        for (int i = 0; i < d; ++i) {
            f->slope[i] = f->x[d + i];
            f->slope[d + i] = eps ? f->zdd[i] + eps[i] : f->zdd[i];
        }
        for (int i = 0; i < dd; ++i) f->total[i] += weight[stage] * f->slope[i];
        mb_copy(f->prev, f->slope, dd);
        if (!jacobians) continue;
        for (int i = 0; i < d; ++i)
            for (int j = 0; j < wd; ++j) {
                f->dslope[i * wd + j] = f->dx[(d + i) * wd + j];
                double sum = 0.0;
                for (int l = 0; l < d; ++l)
                    sum += f->Jz[i * d + l] * f->dx[l * wd + j] +
                           f->Jzd[i * d + l] * f->dx[(d + l) * wd + j];
                f->dslope[(d + i) * wd + j] = sum;
            }
        for (int i = 0; i < d; ++i) {
            for (int j = 0; j < nf; ++j)
                f->dslope[(d + i) * wd + dd + j] += f->JzQ[(long)i * n + f->forces[j]];
            f->dslope[(d + i) * wd + s + i] += 1.0;
        }
        for (int i = 0; i < dd; ++i)
            for (int j = 0; j < wd; ++j) f->dtotal[i * wd + j] += weight[stage] * f->dslope[i * wd + j];
        mb_copy(f->dprev, f->dslope, (long)dd * wd);
    }
    for (int i = 0; i < dd; ++i) f->x[i] = f->start[i] + dt / 6.0 * f->total[i];
    return kf_assemble(f, f->x, f->x + d, q, qd);
}

/* f->Q: the generalized forces of the unknown ones' values `force` (nf). */
static void kf_forces(kf_filter* f, const double* force)
{
    mb_zero(f->Q, f->n);
    for (int j = 0; j < f->nf; ++j) f->Q[f->forces[j]] = force[j];
}

/* One step of the errorEKF: RK4 of (z, ż) from (q, q̇) under the forces f, with F, G. */
static int kf_predict(kf_filter* f, double* q, double* qd, const double* force, double* P, double dt,
                   double sigma_a, double sigma_f)
{
    const int d = f->d, nf = f->nf, s = f->s, wd = f->width, dd = 2 * d;
    kf_forces(f, force);
    int st = kf_rk4(f, q, qd, NULL, dt, 1);
    if (st) return st;
    /* F = [dend (z, ż, f columns); 0 I] and G = [dend (ε columns); 0] */
    double *F = f->F, *G = f->G;
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j)
            F[i * s + j] = i < dd ? (i == j) + dt / 6.0 * f->dtotal[i * wd + j] : (i == j);
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < d; ++j)
            G[i * d + j] = i < dd ? dt / 6.0 * f->dtotal[i * wd + s + j] : 0.0;
    kf_matmul(F, 0, P, 0, s, s, s, f->T1);
    kf_matmul(f->T1, 0, F, 1, s, s, s, f->T2);
    kf_matmul(G, 0, G, 1, s, d, s, f->T1);
    for (int i = 0; i < s * s; ++i) f->T2[i] += sigma_a * sigma_a * f->T1[i];
    for (int j = 0; j < nf; ++j) f->T2[(dd + j) * s + dd + j] += sigma_f * sigma_f * dt;
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j) P[i * s + j] = 0.5 * (f->T2[i * s + j] + f->T2[j * s + i]);
    return MB_OK;
}

/* The readings' model h, H and noise N for the seen entries (their count in *count). */
static int kf_measurement(kf_filter* f, const double* q, const double* qd, const double* force,
                       const int* seen, const double* noise_s, const double* noise_a,
                       double sigma_a, int* count)
{
    const int n = f->n, d = f->d, s = f->s, ns = f->ns, na = f->na, nf = f->nf;
    int st = kf_state_maps(f, q, qd, f->zi, f->Rm, f->Vm);
    if (st) return st;
    int seen_s = 0, seen_a = 0;
    for (int i = 0; i < ns; ++i) seen_s += seen[i];
    for (int i = 0; i < na; ++i) seen_a += seen[ns + i];
    const int k = seen_s + seen_a;
    mb_zero(f->H, (long)k * s);
    mb_zero(f->N, (long)k * k);
    int row = 0;
    if (seen_s) {
        mb_eval_dense(f->model, MB_K_SENSORS, 1, q, 0, qd, 0, f->p, 0, ns, 1, f->hv);
        mb_eval_dense(f->model, MB_K_SENSORS_Q, 1, q, 0, qd, 0, f->p, 0, ns, n, f->hq);
        mb_eval_dense(f->model, MB_K_SENSORS_QD, 1, q, 0, qd, 0, f->p, 0, ns, n, f->hqd);
        for (int i = 0; i < ns; ++i) {
            if (!seen[i]) continue;
            const double *a = f->hq + (long)i * n, *b = f->hqd + (long)i * n;
            for (int j = 0; j < d; ++j) {
                double hz = 0.0, hw = 0.0;
                for (int l = 0; l < n; ++l) {
                    hz += a[l] * f->Rm[l * d + j] + b[l] * f->Vm[l * d + j];
                    hw += b[l] * f->Rm[l * d + j];
                }
                f->H[row * s + j] = hz;
                f->H[row * s + d + j] = hw;
            }
            f->h[row] = f->hv[i];
            f->N[row * k + row] = noise_s[i] * noise_s[i];
            ++row;
        }
    }
    if (seen_a) {
        kf_forces(f, force);
        int status = MB_OK;
        mb_forward_dynamics_in(f->w, 1, q, 0, qd, 0, f->Q, 0, f->p, 0, f->qdd, NULL, f->Jq,
                               f->Jqd, f->JQ, &status);
        if (status) return status;
        mb_eval_dense(f->model, MB_K_ACCELEROMETERS, 1, q, 0, f->qdd, 0, f->p, 0, na, 1, f->av);
        mb_eval_dense(f->model, MB_K_ACCELEROMETERS_Q, 1, q, 0, f->qdd, 0, f->p, 0, na, n, f->aq);
        mb_eval_dense(f->model, MB_K_ACCELEROMETERS_QDD, 1, q, 0, f->qdd, 0, f->p, 0, na, n,
                      f->aqdd);
        const int first = row;
        for (int i = 0; i < na; ++i) {
            if (!seen[ns + i]) continue;
            const double *a = f->aq + (long)i * n, *b = f->aqdd + (long)i * n;
            for (int j = 0; j < d; ++j) {
                /* ∂q̈/∂z = Jq R + Jq̇ V, ∂q̈/∂ż = Jq̇ R, ∂q̈/∂f = JQ[:, forces] */
                double hz = 0.0, hw = 0.0, bz = 0.0;
                for (int l = 0; l < n; ++l) {
                    double qz = 0.0, qw = 0.0;
                    for (int o = 0; o < n; ++o) {
                        qz += f->Jq[l * n + o] * f->Rm[o * d + j] + f->Jqd[l * n + o] * f->Vm[o * d + j];
                        qw += f->Jqd[l * n + o] * f->Rm[o * d + j];
                    }
                    hz += a[l] * f->Rm[l * d + j] + b[l] * qz;
                    hw += b[l] * qw;
                    bz += b[l] * f->Rm[l * d + j];
                }
                f->H[row * s + j] = hz;
                f->H[row * s + d + j] = hw;
                f->B[(row - first) * d + j] = bz;
            }
            for (int j = 0; j < nf; ++j) {
                double sum = 0.0;
                for (int l = 0; l < n; ++l) sum += b[l] * f->JQ[l * n + f->forces[j]];
                f->H[row * s + 2 * d + j] = sum;
            }
            f->h[row] = f->av[i];
            ++row;
        }
        /* reading noise plus the z̈ noise the accelerometers see: σa² B Bᵀ */
        int ia = 0;
        for (int i = 0; i < na; ++i) {
            if (!seen[ns + i]) continue;
            for (int j = 0; j < seen_a; ++j) {
                double sum = 0.0;
                for (int l = 0; l < d; ++l) sum += f->B[ia * d + l] * f->B[j * d + l];
                f->N[(first + ia) * k + first + j] = sigma_a * sigma_a * sum +
                                                     (ia == j ? noise_a[i] * noise_a[i] : 0.0);
            }
            ++ia;
        }
    }
    *count = k;
    return MB_OK;
}

/* q, q̇ assembled at (z, ż) + step (2d) on the current branch, then z chosen again by
 * full pivoting where max |R| is `reselect` times that choice's (P carried across). */
static int kf_correct(kf_filter* f, double* q, double* qd, double* P, const double* step,
                      double reselect, int* switched)
{
    const int d = f->d, s = f->s, n = f->n;
    double* dx = f->start;
    int st;
    for (int j = 0; j < d; ++j) {
        dx[j] = q[f->zi[j]] + step[j];
        dx[d + j] = qd[f->zi[j]] + step[d + j];
    }
    if ((st = kf_assemble(f, dx, dx + d, q, qd))) return st;
    /* z again by full pivoting where it is much better conditioned */
    if ((st = mb_choose_z(f->wk, q, f->p, f->best))) return st;
    int same = 1;
    for (int j = 0; j < d; ++j) {
        int found = 0;
        for (int l = 0; l < d; ++l) found |= f->best[j] == f->zi[l];
        same &= found;
    }
    if (same) return MB_OK;
    if ((st = kf_state_maps(f, q, qd, f->zi, f->Rm, f->Vm))) return st;
    if ((st = kf_state_maps(f, q, qd, f->best, f->R2, NULL))) return st;
    double now = 0.0, other = 0.0;
    for (int i = 0; i < n * d; ++i) {
        if (fabs(f->Rm[i]) > now) now = fabs(f->Rm[i]);
        if (fabs(f->R2[i]) > other) other = fabs(f->R2[i]);
    }
    if (now <= reselect * other) return MB_OK;
    /* T = [R[best] 0 0; V[best] R[best] 0; 0 0 I]; P = T P Tᵀ */
    double* T = f->F;
    mb_zero(T, (long)s * s);
    for (int i = 0; i < s; ++i) T[i * s + i] = 1.0;
    for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
            T[i * s + j] = f->Rm[f->best[i] * d + j];
            T[(d + i) * s + j] = f->Vm[f->best[i] * d + j];
            T[(d + i) * s + d + j] = f->Rm[f->best[i] * d + j];
        }
    kf_matmul(T, 0, P, 0, s, s, s, f->T1);
    kf_matmul(f->T1, 0, T, 1, s, s, s, P);
    memcpy(f->zi, f->best, sizeof(int) * (size_t)d);
    *switched = 1;
    return MB_OK;
}

/* What both updates start with: the outputs that read (seen[i]: y[i] finite), the step's
 * results reset (nis NaN: none), and the measurement model at the mean for the k seen
 * rows (kf_measurement); k = 0 when nothing was read. */
static int kf_begin_update(kf_filter* f, const double* q, const double* qd,
                           const double* force, const double* y, int* seen,
                           const double* noise_s, const double* noise_a, double sigma_a,
                           double* nis, int* seen_count, int* switched, int* k)
{
    int any = 0;
    for (int i = 0; i < f->k; ++i) any += (seen[i] = isfinite(y[i]) != 0);
    *nis = NAN;
    *seen_count = 0;
    *switched = 0;
    *k = 0;
    if (!any) return MB_OK;
    return kf_measurement(f, q, qd, force, seen, noise_s, noise_a, sigma_a, k);
}

/* The Kalman update with the step's readings y (ns + na, NaN: none), then the state
 * assembled and z chosen again; nis: the normalized innovation squared (NaN: none). */
static int kf_update(kf_filter* f, double* q, double* qd, double* force, double* P, const double* y,
                  const double* noise_s, const double* noise_a, double sigma_a,
                  double reselect, double* nis, int* seen_count, int* switched)
{
    const int d = f->d, s = f->s;
    int seen[f->k > 0 ? f->k : 1];
    int k = 0;
    int st = kf_begin_update(f, q, qd, force, y, seen, noise_s, noise_a, sigma_a, nis,
                             seen_count, switched, &k);
    if (st || !k) return st;
    for (int i = 0, row = 0; i < f->k; ++i)
        if (seen[i]) { f->nu[row] = y[i] - f->h[row]; ++row; }
    /* S = H P Hᵀ + N; X = S⁻¹ H P (k x s), K = Xᵀ */
    kf_matmul(f->H, 0, P, 0, k, s, s, f->X);
    kf_matmul(f->X, 0, f->H, 1, k, s, k, f->S);
    for (int i = 0; i < k * k; ++i) f->S[i] += f->N[i];
    if ((st = mb_cholesky(f->S, k, 1e-300))) return st;
    mb_cholesky_solve(f->S, k, f->X, s);
    for (int i = 0; i < k; ++i)
        for (int j = 0; j < s; ++j) f->K[j * k + i] = f->X[i * s + j];
    double* white = f->seen_y;
    mb_copy(white, f->nu, k);
    mb_cholesky_solve(f->S, k, white, 1);
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += f->nu[i] * white[i];
    *nis = sum;
    *seen_count = k;
    /* dx = K ν; P = (I − K H) P (I − K H)ᵀ + K N Kᵀ */
    double* A = f->F;
    kf_matmul(f->K, 0, f->H, 0, s, k, s, A);
    for (int i = 0; i < s * s; ++i) A[i] = -A[i];
    for (int i = 0; i < s; ++i) A[i * s + i] += 1.0;
    kf_matmul(A, 0, P, 0, s, s, s, f->T1);
    kf_matmul(f->T1, 0, A, 1, s, s, s, f->T2);
    kf_matmul(f->K, 0, f->N, 0, s, k, k, f->X);   /* X: s x k now */
    kf_matmul(f->X, 0, f->K, 1, s, k, s, f->T1);
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j)
            P[i * s + j] = 0.5 * (f->T2[i * s + j] + f->T1[i * s + j] + f->T2[j * s + i] +
                                  f->T1[j * s + i]);
    double* step = f->total;  /* s > 2d with forces: use x for the tail */
    for (int i = 0; i < s; ++i) {
        double v = 0.0;
        for (int l = 0; l < k; ++l) v += f->K[i * k + l] * f->nu[l];
        if (i < 2 * d) step[i] = v; else force[i - 2 * d] += v;
    }
    return kf_correct(f, q, qd, P, step, reselect, switched);
}

/* -- the UKF (reference: mbgen/estimation/ukf.py) ------------------------------------ */

/* The unscented transform's scale c for `size` (ut: α, β, κ), the mean's and the
 * covariance's weight of point 0 and every other point's weight. */
static double ukf_weights(const double* ut, int size, double* w0, double* w0c, double* w)
{
    const double a = ut[0], lam = a * a * (size + ut[2]) - size, c = size + lam;
    *w0 = lam / c;
    *w0c = lam / c + 1.0 - a * a + ut[1];
    *w = 0.5 / c;
    return c;
}

/* Sigma point p (0: the mean; then + and − column (p − 1)/2 of the lower factor `root`,
 * size x size) of `mean` into x. */
static void ukf_point(const double* mean, const double* root, int size, int p, double* x)
{
    mb_copy(x, mean, size);
    if (!p) return;
    const int j = (p - 1) / 2;
    const double sign = (p - 1) % 2 ? -1.0 : 1.0;
    for (int i = j; i < size; ++i) x[i] += sign * root[i * size + j];
}

/* out (a x b) = Σ_p w_p (X_p − xm)(Y_p − ym)ᵀ over `count` points (X count x a, Y count x
 * b), point 0 weighing w0c and the others w. */
static void ukf_cross(const double* X, const double* xm, int a, const double* Y,
                      const double* ym, int b, int count, double w0c, double w, double* out)
{
    mb_zero(out, (long)a * b);
    for (int p = 0; p < count; ++p) {
        const double wp = p ? w : w0c;
        const double *x = X + (long)p * a, *y = Y + (long)p * b;
        for (int i = 0; i < a; ++i) {
            const double dxi = wp * (x[i] - xm[i]);
            for (int j = 0; j < b; ++j) out[i * b + j] += dxi * (y[j] - ym[j]);
        }
    }
}

/* The weighted mean (cols) of `count` points (count x cols). */
static void ukf_mean(const double* X, int count, int cols, double w0, double w, double* mean)
{
    for (int j = 0; j < cols; ++j) {
        double sum = w0 * X[j];
        for (int p = 1; p < count; ++p) sum += w * X[(long)p * cols + j];
        mean[j] = sum;
    }
}

/* f->qs, f->qds: the sigma point x (z, ż, ...) assembled from the mean's q moved to first
 * order, q + R (z − z̄) (R = ∂q/∂z at the mean in f->Rm). */
static int ukf_state(kf_filter* f, const double* q, const double* x)
{
    const int n = f->n, d = f->d;
    for (int i = 0; i < n; ++i) {
        double v = q[i];
        for (int j = 0; j < d; ++j) v += f->Rm[i * d + j] * (x[j] - q[f->zi[j]]);
        f->qs[i] = v;
    }
    return kf_assemble(f, x, x + d, f->qs, f->qds);
}

/* One UKF prediction: the 2L + 1 sigma points of (x, ε), L = s + d, each assembled on the
 * branch and carried one RK4 step with its ε on z̈; x̄, P their weighted moments (plus
 * σf² dt on the forces); q, q̇ assembled at x̄ from the central point's. */
static int ukf_predict(kf_filter* f, double* q, double* qd, double* force, double* P,
                       double dt, double sigma_a, double sigma_f, const double* ut)
{
    const int n = f->n, d = f->d, nf = f->nf, s = f->s, L = s + d, dd = 2 * d;
    double w0, w0c, w;
    const double c = ukf_weights(ut, L, &w0, &w0c, &w);
    double* root = f->Pa;
    mb_zero(root, (long)L * L);
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j) root[i * L + j] = c * P[i * s + j];
    for (int j = 0; j < d; ++j) root[(s + j) * L + s + j] = c * sigma_a * sigma_a;
    int st = mb_cholesky(root, L, 0.0);
    if (st) return st;
    if ((st = kf_state_maps(f, q, qd, f->zi, f->Rm, NULL))) return st;
    double* mean = f->xm;
    for (int j = 0; j < d; ++j) {
        mean[j] = q[f->zi[j]];
        mean[d + j] = qd[f->zi[j]];
        mean[s + j] = 0.0;
    }
    for (int j = 0; j < nf; ++j) mean[dd + j] = force[j];
    const int count = 2 * L + 1;
    for (int p = 0; p < count; ++p) {
        double* x = f->pt;
        ukf_point(mean, root, L, p, x);
        if (p) {
            if ((st = ukf_state(f, q, x))) return st;
        } else {
            mb_copy(f->qs, q, n);
            mb_copy(f->qds, qd, n);
        }
        kf_forces(f, x + dd);
        if ((st = kf_rk4(f, f->qs, f->qds, x + s, dt, 0))) return st;
        double* out = f->chi + (long)p * s;
        for (int j = 0; j < d; ++j) {
            out[j] = f->qs[f->zi[j]];
            out[d + j] = f->qds[f->zi[j]];
        }
        for (int j = 0; j < nf; ++j) out[dd + j] = x[dd + j];
        if (!p) {
            mb_copy(f->qc, f->qs, n);
            mb_copy(f->qdc, f->qds, n);
        }
    }
    ukf_mean(f->chi, count, s, w0, w, mean);
    ukf_cross(f->chi, mean, s, f->chi, mean, s, count, w0c, w, f->T1);
    for (int j = 0; j < nf; ++j) f->T1[(dd + j) * s + dd + j] += sigma_f * sigma_f * dt;
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j) P[i * s + j] = 0.5 * (f->T1[i * s + j] + f->T1[j * s + i]);
    mb_copy(q, f->qc, n);
    for (int j = 0; j < nf; ++j) force[j] = mean[dd + j];
    return kf_assemble(f, mean, mean + d, q, qd);
}

/* The model's readings (the seen ones, sensors then accelerometers) at q, q̇ under the
 * forces `force` into out. */
static int ukf_readings(kf_filter* f, const double* q, const double* qd, const double* force,
                        const int* seen, double* out)
{
    const int ns = f->ns, na = f->na;
    int any_s = 0, any_a = 0, row = 0;
    for (int i = 0; i < ns; ++i) any_s |= seen[i];
    for (int i = 0; i < na; ++i) any_a |= seen[ns + i];
    if (any_s) {
        mb_eval_dense(f->model, MB_K_SENSORS, 1, q, 0, qd, 0, f->p, 0, ns, 1, f->hv);
        for (int i = 0; i < ns; ++i) if (seen[i]) out[row++] = f->hv[i];
    }
    if (any_a) {
        kf_forces(f, force);
        int status = MB_OK;
        mb_forward_dynamics_in(f->w, 1, q, 0, qd, 0, f->Q, 0, f->p, 0, f->qdd, NULL, NULL,
                               NULL, NULL, &status);
        if (status) return status;
        mb_eval_dense(f->model, MB_K_ACCELEROMETERS, 1, q, 0, f->qdd, 0, f->p, 0, na, 1, f->av);
        for (int i = 0; i < na; ++i) if (seen[ns + i]) out[row++] = f->av[i];
    }
    return MB_OK;
}

/* The unscented update with the step's readings y (NaN: none): the 2s + 1 sigma points of
 * (x̄, P), each assembled on the branch and read; the reading noise the errorEKF's
 * (kf_measurement's N); then kf_correct. */
static int ukf_update(kf_filter* f, double* q, double* qd, double* force, double* P,
                      const double* y, const double* noise_s, const double* noise_a,
                      double sigma_a, double reselect, const double* ut, double* nis,
                      int* seen_count, int* switched)
{
    const int n = f->n, d = f->d, s = f->s, nf = f->nf, dd = 2 * d;
    int seen[f->k > 0 ? f->k : 1];
    int k = 0;
    int st = kf_begin_update(f, q, qd, force, y, seen, noise_s, noise_a, sigma_a, nis,
                             seen_count, switched, &k);
    if (st || !k) return st;  /* f->N the noise, f->Rm R at the mean */
    double w0, w0c, w;
    const double c = ukf_weights(ut, s, &w0, &w0c, &w);
    double* root = f->Pa;
    for (int i = 0; i < s * s; ++i) root[i] = c * P[i];
    if ((st = mb_cholesky(root, s, 0.0))) return st;
    double* mean = f->xm;
    for (int j = 0; j < d; ++j) {
        mean[j] = q[f->zi[j]];
        mean[d + j] = qd[f->zi[j]];
    }
    for (int j = 0; j < nf; ++j) mean[dd + j] = force[j];
    const int count = 2 * s + 1;
    for (int p = 0; p < count; ++p) {
        double* x = f->chi + (long)p * s;
        ukf_point(mean, root, s, p, x);
        if (p) {
            if ((st = ukf_state(f, q, x))) return st;
        } else {
            mb_copy(f->qs, q, n);
            mb_copy(f->qds, qd, n);
        }
        if ((st = ukf_readings(f, f->qs, f->qds, x + dd, seen, f->Y + (long)p * k))) return st;
    }
    ukf_mean(f->Y, count, k, w0, w, f->ym);
    ukf_cross(f->Y, f->ym, k, f->Y, f->ym, k, count, w0c, w, f->S);
    for (int i = 0; i < k * k; ++i) f->S[i] += f->N[i];
    ukf_cross(f->chi, mean, s, f->Y, f->ym, k, count, w0c, w, f->Pxy);
    for (int i = 0, row = 0; i < f->k; ++i)
        if (seen[i]) { f->nu[row] = y[i] - f->ym[row]; ++row; }
    /* X = S⁻¹ Pxyᵀ (k x s): K = Xᵀ */
    if ((st = mb_cholesky(f->S, k, 1e-300))) return st;
    for (int i = 0; i < k; ++i)
        for (int j = 0; j < s; ++j) f->X[i * s + j] = f->Pxy[j * k + i];
    mb_cholesky_solve(f->S, k, f->X, s);
    double* white = f->seen_y;
    mb_copy(white, f->nu, k);
    mb_cholesky_solve(f->S, k, white, 1);
    double sum = 0.0;
    for (int i = 0; i < k; ++i) sum += f->nu[i] * white[i];
    *nis = sum;
    *seen_count = k;
    /* P −= Pxy S⁻¹ Pxyᵀ (= K S Kᵀ); x̄ += K ν */
    kf_matmul(f->Pxy, 0, f->X, 0, s, k, s, f->T1);
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j)
            f->T2[i * s + j] = P[i * s + j] - f->T1[i * s + j];
    for (int i = 0; i < s; ++i)
        for (int j = 0; j < s; ++j) P[i * s + j] = 0.5 * (f->T2[i * s + j] + f->T2[j * s + i]);
    double* step = f->total;
    for (int i = 0; i < s; ++i) {
        double v = 0.0;
        for (int l = 0; l < k; ++l) v += f->X[l * s + i] * f->nu[l];
        if (i < dd) step[i] = v; else force[i - dd] += v;
    }
    return kf_correct(f, q, qd, P, step, reselect, switched);
}

/* σ of q and q̇ (n each) from P through δq = R δz, δq̇ = V δz + R δż. */
static int kf_sigmas(kf_filter* f, const double* q, const double* qd, const double* P, double* sq,
                  double* sqd)
{
    const int n = f->n, d = f->d, s = f->s;
    int st = kf_state_maps(f, q, qd, f->zi, f->Rm, f->Vm);
    if (st) return st;
    for (int i = 0; i < n; ++i) {
        double vq = 0.0, vqd = 0.0;
        for (int a = 0; a < 2 * d; ++a)
            for (int b = 0; b < 2 * d; ++b) {
                const double pab = P[a * s + b];
                const double ra = a < d ? f->Rm[i * d + a] : 0.0;
                const double rb = b < d ? f->Rm[i * d + b] : 0.0;
                const double ta = a < d ? f->Vm[i * d + a] : f->Rm[i * d + a - d];
                const double tb = b < d ? f->Vm[i * d + b] : f->Rm[i * d + b - d];
                vq += ra * pab * rb;
                vqd += ta * pab * tb;
            }
        sq[i] = sqrt(vq > 0.0 ? vq : 0.0);
        sqd[i] = sqrt(vqd > 0.0 ? vqd : 0.0);
    }
    return MB_OK;
}

/* The run of either filter: the errorEKF (ut NULL) or the UKF (ut: α, β, κ). */
static int kf_run(const double* ut, const mb_plan* plan, const mb_options* options, const double* p, int nf,
    const int* forces, int* zfix, double* q, double* qd, double* force, double* P,
    double sigma_a, double sigma_f, int ns, const double* noise_s, int na,
    const double* noise_a, double dt, double lost_limit, double reselect, long steps,
    const double* readings, double* out_q, double* out_qd, double* out_qdd, double* out_sq,
    double* out_sqd, double* out_f, double* out_sf, double* out_nis, int* out_lost,
    int* switches, long* done)
{
    kf_filter f;
    *done = 0;
    *switches = 0;
    const int n = plan->model->n, d = plan->d;
    for (int j = 0; j < nf; ++j) if (forces[j] < 0 || forces[j] >= n) return MB_BAD_ARGUMENT;
    for (int j = 0; j < d; ++j) if (zfix[j] < 0 || zfix[j] >= n) return MB_BAD_ARGUMENT;
    int st = kf_init(&f, plan, options, p, nf, forces, ns, na);
    if (st) return st;
    memcpy(f.zi, zfix, sizeof(int) * (size_t)d);
    const int s = f.s;
    for (long k = 0; k < steps; ++k) {
        if (k && (st = ut ? ukf_predict(&f, q, qd, force, P, dt, sigma_a, sigma_f, ut)
                          : kf_predict(&f, q, qd, force, P, dt, sigma_a, sigma_f)))
            break;
        double nis;
        int count, switched;
        const double* y = readings + k * (long)(ns + na);
        st = ut ? ukf_update(&f, q, qd, force, P, y, noise_s, noise_a, sigma_a, reselect, ut,
                             &nis, &count, &switched)
                : kf_update(&f, q, qd, force, P, y, noise_s, noise_a, sigma_a, reselect, &nis,
                            &count, &switched);
        if (st) break;
        *switches += switched;
        if ((st = kf_sigmas(&f, q, qd, P, out_sq + k * n, out_sqd + k * n))) break;
        kf_forces(&f, force);
        int status = MB_OK;
        mb_forward_dynamics_in(f.w, 1, q, 0, qd, 0, f.Q, 0, p, 0, out_qdd + k * n, NULL, NULL,
                               NULL, NULL, &status);
        if ((st = status)) break;
        if (!mb_all_finite(q, n) || !mb_all_finite(qd, n) || !mb_all_finite(P, (long)s * s)) {
            st = MB_NOT_FINITE;
            break;
        }
        mb_copy(out_q + k * n, q, n);
        mb_copy(out_qd + k * n, qd, n);
        for (int j = 0; j < nf; ++j) {
            out_f[k * nf + j] = force[j];
            const double v = P[(2 * d + j) * s + 2 * d + j];
            out_sf[k * nf + j] = sqrt(v > 0.0 ? v : 0.0);
        }
        out_nis[k] = nis;
        out_lost[k] = count > 0 && nis > lost_limit * count;
        *done = k + 1;
    }
    memcpy(zfix, f.zi, sizeof(int) * (size_t)d);
    kf_free(&f);
    return st;
}

int mb_kalman_run(const mb_plan* plan, const mb_options* options, const double* p, int nf,
    const int* forces, int* zfix, double* q, double* qd, double* force, double* P,
    double sigma_a, double sigma_f, int ns, const double* noise_s, int na,
    const double* noise_a, double dt, double lost_limit, double reselect, long steps,
    const double* readings, double* out_q, double* out_qd, double* out_qdd, double* out_sq,
    double* out_sqd, double* out_f, double* out_sf, double* out_nis, int* out_lost,
    int* switches, long* done)
{
    return kf_run(NULL, plan, options, p, nf, forces, zfix, q, qd, force, P, sigma_a,
                  sigma_f, ns, noise_s, na, noise_a, dt, lost_limit, reselect, steps, readings, out_q, out_qd, out_qdd,
                  out_sq, out_sqd, out_f, out_sf, out_nis, out_lost, switches, done);
}

int mb_ukf_run(double alpha, double beta, double kappa, const mb_plan* plan,
    const mb_options* options, const double* p, int nf,
    const int* forces, int* zfix, double* q, double* qd, double* force, double* P,
    double sigma_a, double sigma_f, int ns, const double* noise_s, int na,
    const double* noise_a, double dt, double lost_limit, double reselect, long steps,
    const double* readings, double* out_q, double* out_qd, double* out_qdd, double* out_sq,
    double* out_sqd, double* out_f, double* out_sf, double* out_nis, int* out_lost,
    int* switches, long* done)
{
    const double ut[3] = {alpha, beta, kappa};
    return kf_run(ut, plan, options, p, nf, forces, zfix, q, qd, force, P, sigma_a,
                  sigma_f, ns, noise_s, na, noise_a, dt, lost_limit, reselect, steps, readings, out_q, out_qd, out_qdd,
                  out_sq, out_sqd, out_f, out_sf, out_nis, out_lost, switches, done);
}
