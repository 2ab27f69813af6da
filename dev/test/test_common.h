/*
 test_common.h: what test_gpt2.c and test_gpt2.cu share: the CHECK macro and its failure count,
 a max-difference metric, and the reader of the PyTorch reference's debug-state file
 (dev/reference/gpt2_ref.py state: llm.c's version 2 layout plus the appended loss trajectory).
*/
#ifndef DEV_TEST_TEST_COMMON_H
#define DEV_TEST_TEST_COMMON_H

#include <math.h>
#include <stdio.h>
#include "llmc/checkpoint.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/utils.h"

static int failures = 0;

#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

// max |a - b| and max |b| over n elements
static void max_diff(const float* a, const float* b, size_t n, double* maxdiff, double* maxref) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || isnan(d)) { md = isnan(d) ? INFINITY : d; }
        if (fabs((double)b[i]) > mr) { mr = fabs((double)b[i]); }
    }
    *maxdiff = md;
    *maxref = mr;
}

// ----------------------------------------------------------------------------
// model checks against the reference

typedef struct {
    int B, T;
    int* inputs;
    int* targets;
    float* logits;   // (B,T,V)
    float loss;
    float* grads;    // flat, model layout
    int n_steps;
    float* losses;   // (n_steps)
} RefState;

static void ref_state_read(const char* path, const GPT2Config* c, size_t num_params, RefState* s) {
    FILE* fp = fopenCheck(path, "rb");
    int header[256];
    freadCheck(header, sizeof(int), 256, fp, path);
    if (header[0] != 20240327 || header[1] != 2) { ls_fatal("%s: not a debug-state file (magic %d version %d)", path, header[0], header[1]); }
    s->B = header[2];
    s->T = header[3];
    size_t BT = (size_t)s->B * s->T, V = (size_t)c->vocab_size;
    s->inputs = (int*)mallocCheck(BT * sizeof(int));
    s->targets = (int*)mallocCheck(BT * sizeof(int));
    s->logits = (float*)mallocCheck(BT * V * sizeof(float));
    s->grads = (float*)mallocCheck(num_params * sizeof(float));
    freadCheck(s->inputs, sizeof(int), BT, fp, path);
    freadCheck(s->targets, sizeof(int), BT, fp, path);
    freadCheck(s->logits, sizeof(float), BT * V, fp, path);
    freadCheck(&s->loss, sizeof(float), 1, fp, path);
    freadCheck(s->grads, sizeof(float), num_params, fp, path);
    freadCheck(&s->n_steps, sizeof(int), 1, fp, path);
    if (s->n_steps < 0 || s->n_steps > 10000) { ls_fatal("%s: bad step count %d", path, s->n_steps); }
    s->losses = (float*)mallocCheck((size_t)s->n_steps * sizeof(float) + 1);
    freadCheck(s->losses, sizeof(float), (size_t)s->n_steps, fp, path);
    fclose(fp);
}

static void ref_state_free(RefState* s) {
    free(s->inputs); free(s->targets); free(s->logits); free(s->grads); free(s->losses);
}

// The model file's configuration and parameter table, and the reference state written for it.
static LS_UNUSED void ref_load(const char* model_path, const char* state_path, GPT2Config* c, ParamTable* pt, RefState* s) {
    model_file_read_header(model_path, c);
    param_table_build(pt, c);
    ref_state_read(state_path, c, pt->total, s);
}

#endif // DEV_TEST_TEST_COMMON_H
