/*
 test_common.h: what test_gpt2.c and test_gpt2.cu share: the CHECK macro and its failure count,
 a max-difference metric, the reader of the PyTorch reference's debug-state file
 (dev/reference/gpt2_ref.py state: llm.c's version 2 layout plus the appended loss trajectory),
 and the comparisons with it. Include it after the trainer: ref_check_steps drives the trainer
 through the interface of llmc/run/trainer.h (gpt2_build, gpt2_forward, ...).
*/
#ifndef DEV_TEST_TEST_COMMON_H
#define DEV_TEST_TEST_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/io/checkpoint.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/utils.h"

static int failures = 0;

// LEANSTEP_TEST_FAIL_FAST=1: exit 1 at the first failed check. test_ref_mutants.py runs against a
// reference with a planted bug, where the run only has to fail: the checks after the first failure
// would cost a minute per run under the CPU harness and could not change the outcome.
static inline void check_failed(void) {
    failures++;
    const char* e = getenv("LEANSTEP_TEST_FAIL_FAST");
    if (e != NULL && strcmp(e, "1") == 0) {
        printf("LEANSTEP_TEST_FAIL_FAST=1: stopping at the first failed check\n");
        fflush(stdout);
        exit(1);
    }
}
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); check_failed(); } } while (0)

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

// Tolerances of one precision: relative to max |ref| (logits, each gradient tensor) or to |ref|
// (loss, the losses of the steps).
typedef struct {
    double logits, loss, grad, steps;
} RefTolerances;

// Logits (B*T rows of Vp, host fp32) and the mean loss against the reference.
static LS_UNUSED void ref_check_forward(const float* logits, int Vp, float loss, const RefState* s, int V,
                                        const RefTolerances* tol) {
    double md = 0.0, mr = 0.0;
    for (size_t bt = 0; bt < (size_t)s->B * s->T; bt++) {
        double d, r;
        max_diff(logits + bt * Vp, s->logits + bt * V, (size_t)V, &d, &r);
        if (d > md) { md = d; }
        if (r > mr) { mr = r; }
    }
    CHECK(md <= tol->logits * mr, "logits: max diff %.3g > %.0e * max|ref| = %.3g", md, tol->logits, tol->logits * mr);
    printf("logits: max diff %.3g (max |ref| %.3g)\n", md, mr);
    CHECK(fabs(loss - s->loss) <= tol->loss * fabs(s->loss), "loss: ours %.7f ref %.7f", loss, s->loss);
    printf("loss: ours %.7f ref %.7f\n", loss, s->loss);
}

// Every parameter tensor's gradient (host fp32, the parameters' layout) against the reference.
static LS_UNUSED void ref_check_grads(const float* grads, const ParamTable* pt, const RefState* s,
                                      const RefTolerances* tol, int verbose) {
    double worst = 0.0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        double md, mr;
        max_diff(grads + t->offset, s->grads + t->offset, t->count, &md, &mr);
        double rel = md / (mr + 1e-30);
        if (rel > worst) { worst = rel; }
        if (verbose) { printf("  grad %-9s max diff / max|ref| = %.3g\n", t->name, rel); }
        CHECK(md <= tol->grad * mr, "grad %s: max diff %.3g > %.0e * max|ref| = %.3g", t->name, md, tol->grad, tol->grad * mr);
    }
    printf("gradients: %d tensors, worst max diff / max|ref| = %.3g\n", NUM_PARAMETER_TENSORS, worst);
}

// The reference's AdamW steps (lr 1e-4, betas 0.9 0.95, eps 1e-8, wd 0.1, clip 1) on its batch,
// from the model file: the loss of every step.
// A test may define REF_BUILD_OPTS (the options of this model's gpt2_build) before the include.
#ifndef REF_BUILD_OPTS
#define REF_BUILD_OPTS NULL
#endif
// ... and REF_LOSS_SCALE, the loss scaling of the steps (llmc/run/loss_scale.h; a power of two)
#ifndef REF_LOSS_SCALE
#define REF_LOSS_SCALE 1.0f
#endif
// The options of the reference's steps (gpt2_ref.py state: betas 0.9 0.95, eps 1e-8, weight decay
// 0.1, clip 1), on top of base (NULL: the flags' defaults).
static LS_UNUSED TrainOptions ref_options(const TrainOptions* base) {
    TrainOptions o;
    if (base != NULL) {
        o = *base;
    } else {
        train_options_defaults(&o);  // (what gpt2_build does without options: the matmul attention)
    }
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    o.eps = 1e-8f;
    o.weight_decay = 0.1f;
    o.grad_clip = 1.0f;
    return o;
}

// The steps of a reference written with another optimizer (gpt2_ref.py state --optimizer): the
// trainer built with opts (ref_options: the reference's flags) at learning rate lr.
static LS_UNUSED void ref_check_steps_with(const char* model_path, const RefState* s, const RefTolerances* tol,
                                           const TrainOptions* opts, float lr) {
    GPT2 model;
    gpt2_build(&model, model_path, 0, s->B, s->T, opts);
    for (int step = 0; step < s->n_steps; step++) {
        gpt2_begin_step(&model, step);
        gpt2_forward_train(&model, s->inputs, s->targets, s->B, s->T, REF_LOSS_SCALE);
        gpt2_backward(&model, s->inputs, s->targets, s->B, s->T, REF_LOSS_SCALE);
        gpt2_grad_norm(&model, opts->grad_clip, 1.0f / REF_LOSS_SCALE);
        float l = (float)gpt2_loss_sum(&model);
        gpt2_update(&model, lr, step + 1);
        CHECK(fabs(l - s->losses[step]) <= tol->steps * fabs(s->losses[step]), "step %d: loss %.6f ref %.6f", step, l,
              s->losses[step]);
        printf("step %d: loss %.6f ref %.6f\n", step, l, s->losses[step]);
    }
    gpt2_free(&model);
}

static LS_UNUSED void ref_check_steps(const char* model_path, const RefState* s, const RefTolerances* tol) {
    const TrainOptions o = ref_options(REF_BUILD_OPTS);
    ref_check_steps_with(model_path, s, tol, &o, 1e-4f);
}

// Muon's steps against gpt2_ref.py state --optimizer muon (lr 1e-3, momentum 0.95 with Nesterov,
// the AdamW tensors at the same lr, betas 0.9 0.95, eps 1e-8, wd 0.1, clip 1): the trainer built
// with o (the test's defaults) and --optimizer muon.
// The steps of another optimizer (kind) at learning rate lr against a gpt2_ref.py state of it
// (--optimizer muon, adam-mini).
static LS_UNUSED void ref_check_optimizer(const char* model_path, const char* state_path, const RefTolerances* tol,
                                          TrainOptions* o, OptimKind kind, float lr) {
    GPT2Config c;
    ParamTable pt;
    RefState s;
    ref_load(model_path, state_path, &c, &pt, &s);
    o->optimizer = kind;
    const TrainOptions ro = ref_options(o);
    printf("%s:\n", optim_kind_name(kind));
    ref_check_steps_with(model_path, &s, tol, &ro, lr);
    ref_state_free(&s);
}
static LS_UNUSED void ref_check_muon(const char* model_path, const char* state_path, const RefTolerances* tol,
                                     TrainOptions* o) {
    ref_check_optimizer(model_path, state_path, tol, o, OPT_MUON, 1e-3f);
}

#endif // DEV_TEST_TEST_COMMON_H
