/*
 bench_util.h: what the CPU benchmarks share (dev/cpu/bench_train.c, dev/cpu/adamw_bench.c and
 test_optim --bench): the median of repeated timings, and the memory probe that AdamW's speed is
 measured against.
*/
#ifndef DEV_CPU_BENCH_UTIL_H
#define DEV_CPU_BENCH_UTIL_H

#include <stddef.h>
#include <stdlib.h>

static int bench_cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// The median of v[0..n) (sorts v).
static inline double bench_median(double* v, int n) {
    qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// AdamW's access pattern (read p g m v, write p m v) with minimal arithmetic: the memory ceiling
// an AdamW pass can reach on this machine (28 bytes per parameter).
static inline void probe_adamw_pattern(float* p, const float* g, float* m, float* v, size_t n, float a) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        m[i] = m[i] * a + gi;
        v[i] = v[i] * a + gi;
        p[i] = p[i] * a + gi;
    }
}

#endif // DEV_CPU_BENCH_UTIL_H
