/* Weighted quantiles by histogram refinement: O(count) per column in a few passes where
 * sorting would be O(count log count), so a particle filter's 95 % interval costs less
 * than its weights. Binning is monotone in the value, so the answer lies in the first
 * bin whose cumulative weight reaches the level; that bin's values are binned again over
 * their own range until few are left, then sorted. */
#include <stdlib.h>

#ifndef MBGEN_SINGLE_FILE  /* the exported library (codegen/ship.py) holds its text */
#include "core.h"
#endif

enum { BINS = 1024, SMALL = 32, GROUP = 4 };

typedef struct {
    double* hist;  /* BINS */
    int* bin;      /* each value's bin */
    double lo, span;
} histogram;

/* Bins v (count, all within [lo, hi]) with the weights w; returns 0 when lo == hi. */
static int fill_range(histogram* h, const double* v, const double* w, long count, double lo,
                      double hi)
{
    h->lo = lo;
    h->span = hi - lo;
    if (!(h->span > 0.0)) return 0;
    for (int b = 0; b < BINS; ++b) h->hist[b] = 0.0;
    /* (v - lo) / span in [0, 1]: never inf or NaN; a product by BINS / span where that is
     * finite (a division costs several products), rounded the same way for every value,
     * so the binning stays monotone */
    const double scale = BINS / h->span;
    for (long s = 0; s < count; ++s) {
        const long b = scale < INFINITY ? (long)((v[s] - lo) * scale)
                                        : (long)((v[s] - lo) / h->span * BINS);
        const int bin = b < BINS ? (int)b : BINS - 1;
        h->bin[s] = bin;
        h->hist[bin] += w[s];
    }
    return 1;
}

/* Bins v (count) over [min v, max v] with the weights w; returns 0 when all are equal. */
static int fill(histogram* h, const double* v, const double* w, long count)
{
    double lo = v[0], hi = v[0];
    for (long s = 1; s < count; ++s) {
        lo = v[s] < lo ? v[s] : lo;
        hi = v[s] > hi ? v[s] : hi;
    }
    return fill_range(h, v, w, count, lo, hi);
}

/* The first bin whose cumulative weight reaches *target, *target made relative to it
 * (the last bin, the maximum's, is never empty). */
static int find_bin(const histogram* h, double* target)
{
    int bin = 0;
    double before = 0.0;
    while (bin < BINS - 1 && before + h->hist[bin] < *target) before += h->hist[bin++];
    *target -= before;
    return bin;
}

/* The values of bin `bin` copied to (v1, w1); returns how many. */
static long take_bin(const histogram* h, const double* v, const double* w, long count,
                     int bin, double* v1, double* w1)
{
    long kept = 0;
    for (long s = 0; s < count; ++s)
        if (h->bin[s] == bin) {
            v1[kept] = v[s];
            w1[kept++] = w[s];
        }
    return kept;  /* > 0, and < count: the minimum and the maximum are in different bins */
}

/* The smallest of v (count > 0, positive weights w, both overwritten) whose cumulative
 * weight in ascending order reaches target. */
static double weighted_select(double* v, double* w, long count, double target,
                              histogram* h)
{
    while (count > SMALL) {
        if (!fill(h, v, w, count)) return v[0];
        count = take_bin(h, v, w, count, find_bin(h, &target), v, w);
    }
    for (long i = 1; i < count; ++i)  /* insertion sort of the few left */
        for (long k = i; k > 0 && v[k - 1] > v[k]; --k) {
            const double tv = v[k], tw = w[k];
            v[k] = v[k - 1]; w[k] = w[k - 1];
            v[k - 1] = tv; w[k - 1] = tw;
        }
    double cumulative = 0.0;
    for (long i = 0; i < count; ++i) {
        cumulative += w[i];
        if (cumulative >= target) return v[i];
    }
    return v[count - 1];
}

/* The values x[s * stride] (count) with a positive finite weight and a finite value,
 * copied with their weights to (v, w), with their range; returns how many. Every value is
 * written and the count moves only for the kept ones (no jump on the test), and two
 * running minima and maxima let consecutive values not wait for each other. */
static long gather(const double* x, int stride, const double* weights, long count,
                   double* restrict v, double* restrict w, double* lo, double* hi)
{
    long kept = 0;
    double lo0 = INFINITY, lo1 = INFINITY, hi0 = -INFINITY, hi1 = -INFINITY;
    for (long s = 0; s < count; ++s) {
        const double value = x[s * stride], weight = weights[s];
        const int keep = weight > 0.0 && weight < INFINITY && fabs(value) < INFINITY;
        v[kept] = value;
        w[kept] = weight;
        kept += keep;
        const double low = keep ? value : INFINITY, high = keep ? value : -INFINITY;
        if (s & 1) {
            lo1 = low < lo1 ? low : lo1;
            hi1 = high > hi1 ? high : hi1;
        } else {
            lo0 = low < lo0 ? low : lo0;
            hi0 = high > hi0 ? high : hi0;
        }
    }
    *lo = lo0 < lo1 ? lo0 : lo1;
    *hi = hi0 > hi1 ? hi0 : hi1;
    return kept;
}

int mb_weighted_quantiles(long count, int columns, const double* values,
                          const double* weights, int nlevels, const double* levels,
                          double* out)
{
    const size_t size = (size_t)(count > 0 ? count : 1);
    double* v = (double*)malloc(sizeof(double) * ((2 + 2 * GROUP) * size + 2 * BINS));
    int* bin = (int*)malloc(sizeof(int) * 2 * size);
    if (!v || !bin) { free(v); free(bin); return MB_NO_MEMORY; }
    double *w = v + size, *group = w + size;  /* a (value, weight) buffer per level */
    /* the column's histogram, kept for every level, and one for refining a level's bin */
    histogram h = {group + 2 * GROUP * size, bin, 0.0, 0.0};
    histogram refine = {h.hist + BINS, bin + size, 0.0, 0.0};
    unsigned char want[BINS];  /* per bin: the levels (bits) whose answer lies in it */
    for (int j = 0; j < columns; ++j) {
        double lo, hi;
        const long kept = gather(values + j, columns, weights, count, v, w, &lo, &hi);
        const int spread = kept > SMALL && fill_range(&h, v, w, kept, lo, hi);
        double total = 0.0;  /* the histogram's sum: a shorter chain of additions */
        if (spread)
            for (int b = 0; b < BINS; ++b) total += h.hist[b];
        else
            for (long s = 0; s < kept; ++s) total += w[s];
        /* up to GROUP levels per pass over the column: each takes its bin's values */
        for (int g = 0; g < nlevels; g += GROUP) {
            const int nl = nlevels - g < GROUP ? nlevels - g : GROUP;
            double target[GROUP];
            long k[GROUP] = {0};
            if (spread) for (int b = 0; b < BINS; ++b) want[b] = 0;
            for (int l = 0; l < nl; ++l) {
                target[l] = levels[g + l] * total;
                if (spread) want[find_bin(&h, &target[l])] |= (unsigned char)(1u << l);
            }
            for (long s = 0; s < kept; ++s) {
                const unsigned mask = spread ? want[h.bin[s]] : (1u << nl) - 1u;
                if (!mask) continue;  /* most values: none of the levels' bins */
                for (int l = 0; l < nl; ++l)
                    if (mask >> l & 1u) {
                        double* buffer = group + 2 * l * size;
                        buffer[k[l]] = v[s];
                        buffer[size + k[l]++] = w[s];
                    }
            }
            for (int l = 0; l < nl; ++l) {
                double* buffer = group + 2 * l * size;
                out[(g + l) * columns + j] =
                    k[l] ? weighted_select(buffer, buffer + size, k[l], target[l], &refine)
                         : NAN;
            }
        }
    }
    free(v);
    free(bin);
    return MB_OK;
}
