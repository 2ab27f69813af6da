/*
 step_guard.h: decides whether a training step's update is applied. A step is skipped when its
 loss or gradient norm is NaN/Inf, or when its z-score against the previous `window` steps is
 above a threshold (llm.c's -sl for the loss, -sg for the norm; 0 turns a check off). The
 parameters and optimizer state are then left as they were. After max_consecutive skips in a row
 the run should stop: something is broken, and more steps only burn time.

 The z-score compares the new value with the mean and standard deviation of the last `window`
 finite values (population std, two passes over the window in double, so no cancellation); it is
 0 until the window is full. Every finite value enters the window, skipped or not, so the window
 follows a genuine change of level instead of skipping forever.
*/
#ifndef LLMC_STEP_GUARD_H
#define LLMC_STEP_GUARD_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

typedef struct {
    double* values;  // ring buffer of the last `window` values
    int window;
    int count;       // values seen, up to window
    int next;        // where the next value goes
} OutlierWindow;

static inline void outlier_window_init(OutlierWindow* w, int window) {
    w->values = (double*)callocCheck((size_t)window, sizeof(double));
    w->window = window;
    w->count = 0;
    w->next = 0;
}

static inline void outlier_window_free(OutlierWindow* w) {
    free(w->values);
    w->values = NULL;
}

// z-score of x against the window (0 until it is full, or when every value is the same).
static inline double outlier_window_zscore(const OutlierWindow* w, double x) {
    if (w->count < w->window) { return 0.0; }
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < w->window; i++) { mean += w->values[i]; }
    mean /= w->window;
    for (int i = 0; i < w->window; i++) { var += (w->values[i] - mean) * (w->values[i] - mean); }
    double sd = sqrt(var / w->window);
    return sd > 0.0 ? (x - mean) / sd : 0.0;
}

static inline void outlier_window_push(OutlierWindow* w, double x) {
    w->values[w->next] = x;
    w->next = (w->next + 1) % w->window;
    if (w->count < w->window) { w->count++; }
}

typedef struct {
    float loss_z;         // -sl: skip when the loss's z-score is above this (0: off)
    float norm_z;         // -sg: the same for the gradient norm
    int max_consecutive;  // stop after this many skips in a row
    OutlierWindow loss, norm;
    int skipped;          // skipped steps in this run
    int in_a_row;         // skipped steps since the last applied update
} StepGuard;

static inline void step_guard_init(StepGuard* g, float loss_z, float norm_z, int window, int max_consecutive) {
    memset(g, 0, sizeof(*g));
    g->loss_z = loss_z;
    g->norm_z = norm_z;
    g->max_consecutive = max_consecutive;
    outlier_window_init(&g->loss, window);
    outlier_window_init(&g->norm, window);
}

static inline void step_guard_free(StepGuard* g) {
    outlier_window_free(&g->loss);
    outlier_window_free(&g->norm);
}

// Returns 1 when the step's update must be skipped, with the reason in why; 0 to apply it.
// Counts the skips and feeds the windows.
static inline int step_guard_check(StepGuard* g, float loss, float norm, char* why, size_t len) {
    int skip = 1;
    if (!isfinite(loss)) {
        snprintf(why, len, "loss is %f", loss);
    } else if (!isfinite(norm)) {
        snprintf(why, len, "gradient norm is %f", norm);
    } else {
        double zl = outlier_window_zscore(&g->loss, loss), zn = outlier_window_zscore(&g->norm, norm);
        if (g->loss_z > 0.0f && zl > g->loss_z) {
            snprintf(why, len, "loss z-score %.2f > %g (-sl)", zl, g->loss_z);
        } else if (g->norm_z > 0.0f && zn > g->norm_z) {
            snprintf(why, len, "gradient norm z-score %.2f > %g (-sg)", zn, g->norm_z);
        } else {
            skip = 0;
        }
    }
    if (isfinite(loss)) { outlier_window_push(&g->loss, loss); }
    if (isfinite(norm)) { outlier_window_push(&g->norm, norm); }
    if (skip) {
        g->skipped++;
        g->in_a_row++;
    } else {
        g->in_a_row = 0;
        if (why && len) { why[0] = '\0'; }
    }
    return skip;
}

// 1 when the run must stop: max_consecutive skips in a row.
static inline int step_guard_give_up(const StepGuard* g) { return g->in_a_row >= g->max_consecutive; }

// Parses a comma list of steps ("3,5,9", counting from 1) for --inject-nan; 0 on a malformed list.
static inline int step_list_parse(const char* s, int* steps, int max_steps, int* count) {
    *count = 0;
    if (s == NULL || *s == '\0') { return 1; }
    const char* p = s;
    while (*p) {
        char* end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000000L || *count >= max_steps) { return 0; }
        steps[(*count)++] = (int)v;
        if (*end == ',') {
            p = end + 1;
            if (*p == '\0') { return 0; }
        } else if (*end == '\0') {
            p = end;
        } else {
            return 0;
        }
    }
    return 1;
}

static inline int step_list_has(const int* steps, int count, int step) {
    for (int i = 0; i < count; i++) {
        if (steps[i] == step) { return 1; }
    }
    return 0;
}

#endif // LLMC_STEP_GUARD_H
