/*
 shape_sweep.h: `test_gpt2cu --sweep 1`, the GPU trainer at every awkward shape. Included by
 test_gpt2.cu after the trainer and test_common.h.

 For NH in {1, 3, 4, 12} (C = 96: head sizes 96, 32, 24, 8), a 2-layer model with a 300-token
 vocabulary is allocated at (B, T) = (3, 64) and run at T in {1..9, 31, 37, 63, 64} x B in {1, 3}:
   - every activation tensor and every layer's slice of a per-layer one is 256-byte aligned at
     the running (B, T);
   - forward: the logits (max|diff| <= tol * max|ref|) and the mean loss (relative) equal a float64
     forward pass written here from the model's definition (independent of the trainer's kernels);
   - backward: the gradient along a random direction d, sum(g * d), equals the float64 central
     difference (L(p + e d) - L(p - e d)) / 2e to tol * |g| (|g| is the spread of sum(g * d) over
     random signs: a gradient tensor off by a fraction f moves it by about f |g_tensor|);
   - sampling as the trainer does it (no targets, T = 1, 2, ..., 64 at B = 1 for NH = 1, up to 9
     for the others): each step's logits row equals the float64 logits of the sampled sequence.
 And the memory model equals the allocation at odd allocated shapes (-r 0, 1, 2).
 Parameters are random with a larger spread than the init (weights ~ 0.1), so that attention is
 far from uniform and a wrong mask or stride shows in the loss.
 Tolerances: fp32 build logits 1e-4, loss 1e-5, gradient 1e-3; bf16 build (activations rounded to
 8 significant bits at every op) logits 3e-2, loss 1e-2, gradient 5e-2; measured values are printed.
*/
#ifndef DEV_TEST_SHAPE_SWEEP_H
#define DEV_TEST_SHAPE_SWEEP_H

#include <math.h>
#include <stdint.h>

#define SWEEP_C 96
#define SWEEP_V 300
#define SWEEP_MAX_B 3
#define SWEEP_MAX_T 64

#if FLOATX_IS_LOWP
static const double SWEEP_TOL_LOGITS = 3e-2, SWEEP_TOL_LOSS = 1e-2, SWEEP_TOL_GRAD = 5e-2;
#else
static const double SWEEP_TOL_LOGITS = 1e-4, SWEEP_TOL_LOSS = 1e-5, SWEEP_TOL_GRAD = 1e-3;
#endif

static uint64_t sweep_rng_state = 0x9e3779b97f4a7c15ull;

// uniform in [-1, 1)
static double sweep_uniform(void) {
    sweep_rng_state ^= sweep_rng_state << 13;
    sweep_rng_state ^= sweep_rng_state >> 7;
    sweep_rng_state ^= sweep_rng_state << 17;
    return (double)(sweep_rng_state >> 11) / 4503599627370496.0 - 1.0;
}

// ----------------------------------------------------------------------------
// the float64 reference: GPT-2's forward pass for B sequences of T tokens; p is the flat parameter
// buffer in the table's layout. Returns the mean loss over (B, T); logits (B, T, V) when not NULL.

static void ref64_layernorm(double* out, const double* x, const double* w, const double* b, int C) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < C; i++) { mean += x[i]; }
    mean /= C;
    for (int i = 0; i < C; i++) { var += (x[i] - mean) * (x[i] - mean); }
    double rstd = 1.0 / sqrt(var / C + 1e-5);
    for (int i = 0; i < C; i++) { out[i] = (x[i] - mean) * rstd * w[i] + b[i]; }
}

// out (OC) = w (OC, IC) @ x (IC) + b (OC); b may be NULL
static void ref64_linear(double* out, const double* x, const double* w, const double* b, int IC, int OC) {
    for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0.0;
        for (int i = 0; i < IC; i++) { s += w[(size_t)o * IC + i] * x[i]; }
        out[o] = s;
    }
}

static double ref64_forward(const GPT2Config* c, const ParamTable* pt, const double* p, const int* inputs, const int* targets,
                            int B, int T, double* logits) {
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, hs = C / NH;
    const double* P[NUM_PARAMETER_TENSORS];
    size_t stride[NUM_PARAMETER_TENSORS];  // elements per layer
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        P[i] = p + pt->t[i].offset;
        stride[i] = pt->t[i].rows * pt->t[i].cols;
    }
#define W(i, l) (P[i] + (size_t)(l) * stride[i])
    double* x = (double*)mallocCheck((size_t)T * C * sizeof(double));        // residual (T, C)
    double* ln = (double*)mallocCheck((size_t)T * C * sizeof(double));       // (T, C)
    double* qkv = (double*)mallocCheck((size_t)T * 3 * C * sizeof(double));  // (T, 3C)
    double* y = (double*)mallocCheck((size_t)T * C * sizeof(double));        // (T, C)
    double* h = (double*)mallocCheck((size_t)4 * C * sizeof(double));        // (4C)
    double* o = (double*)mallocCheck((size_t)4 * C * sizeof(double));        // (4C)
    double* att = (double*)mallocCheck((size_t)T * sizeof(double));
    double* lrow = (double*)mallocCheck((size_t)V * sizeof(double));
    double total = 0.0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int tok = inputs[b * T + t];
            for (int i = 0; i < C; i++) { x[t * C + i] = P[P_WTE][(size_t)tok * C + i] + P[P_WPE][(size_t)t * C + i]; }
        }
        for (int l = 0; l < L; l++) {
            for (int t = 0; t < T; t++) {
                ref64_layernorm(ln + t * C, x + t * C, W(P_LN1W, l), W(P_LN1B, l), C);
                ref64_linear(qkv + (size_t)t * 3 * C, ln + t * C, W(P_QKVW, l), W(P_QKVB, l), C, 3 * C);
            }
            for (int t = 0; t < T; t++) {  // causal attention, head by head
                for (int hh = 0; hh < NH; hh++) {
                    const double* q = qkv + (size_t)t * 3 * C + hh * hs;
                    double maxv = -INFINITY, sum = 0.0;
                    for (int u = 0; u <= t; u++) {
                        const double* k = qkv + (size_t)u * 3 * C + C + hh * hs;
                        double s = 0.0;
                        for (int i = 0; i < hs; i++) { s += q[i] * k[i]; }
                        att[u] = s / sqrt((double)hs);
                        if (att[u] > maxv) { maxv = att[u]; }
                    }
                    for (int u = 0; u <= t; u++) { att[u] = exp(att[u] - maxv); sum += att[u]; }
                    for (int i = 0; i < hs; i++) {
                        double s = 0.0;
                        for (int u = 0; u <= t; u++) { s += att[u] * qkv[(size_t)u * 3 * C + 2 * C + hh * hs + i]; }
                        y[t * C + hh * hs + i] = s / sum;
                    }
                }
            }
            for (int t = 0; t < T; t++) {
                ref64_linear(o, y + t * C, W(P_ATTPROJW, l), W(P_ATTPROJB, l), C, C);
                for (int i = 0; i < C; i++) { x[t * C + i] += o[i]; }
                ref64_layernorm(ln + t * C, x + t * C, W(P_LN2W, l), W(P_LN2B, l), C);
                ref64_linear(h, ln + t * C, W(P_FCW, l), W(P_FCB, l), C, 4 * C);
                for (int i = 0; i < 4 * C; i++) {  // GELU, tanh form (GPT-2)
                    double u = h[i];
                    h[i] = 0.5 * u * (1.0 + tanh(sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
                }
                ref64_linear(o, h, W(P_FCPROJW, l), W(P_FCPROJB, l), 4 * C, C);
                for (int i = 0; i < C; i++) { x[t * C + i] += o[i]; }
            }
        }
        for (int t = 0; t < T; t++) {
            ref64_layernorm(ln + t * C, x + t * C, P[P_LNFW], P[P_LNFB], C);
            double* row = logits ? logits + ((size_t)b * T + t) * V : lrow;
            ref64_linear(row, ln + t * C, P[P_WTE], NULL, C, V);  // the real vocabulary's rows of wte
            if (targets) {
                double maxv = -INFINITY, sum = 0.0;
                for (int v = 0; v < V; v++) { maxv = row[v] > maxv ? row[v] : maxv; }
                for (int v = 0; v < V; v++) { sum += exp(row[v] - maxv); }
                total += maxv + log(sum) - row[targets[b * T + t]];
            }
        }
    }
#undef W
    free(x); free(ln); free(qkv); free(y); free(h); free(o); free(att); free(lrow);
    return total / ((double)B * T);
}

// ----------------------------------------------------------------------------
// the checks

static int sweep_aligned(const void* p) { return ((uintptr_t)p & 255u) == 0; }

// Every activation tensor, and (at the running B, T) every layer's slice of the per-layer ones.
static void sweep_check_alignment(const GPT2* model, int B, int T, const char* what) {
    const ActivationTensors* a = &model->acts;
    for (int i = 0; i < GPU_NUM_ACTIVATIONS; i++) {
        CHECK(sweep_aligned(a->t[i]), "%s: activation %d at %p is not 256-byte aligned", what, i, a->t[i]);
    }
    size_t BT = (size_t)B * T, C = (size_t)model->config.channels;
    size_t ln = model->recompute >= 2 ? 0 : BT * C, gelu = model->recompute >= 1 ? 0 : 4 * BT * C;
    int bad = 0;
    for (int l = 0; l < model->config.num_layers; l++) {
        const void* slices[] = {
            LAYER(a->ln1, l, ln), LAYER(a->ln1_mean, l, BT), LAYER(a->ln1_rstd, l, BT), LAYER(a->atty, l, BT * C),
            LAYER(a->residual2, l, BT * C), LAYER(a->ln2, l, ln), LAYER(a->ln2_mean, l, BT), LAYER(a->ln2_rstd, l, BT),
            LAYER(a->fch, l, 4 * BT * C), LAYER(a->fch_gelu, l, gelu), LAYER(a->residual3, l, BT * C),
            LAYER(a->qkvr, l, 3 * BT * C),
        };
        for (size_t k = 0; k < sizeof(slices) / sizeof(slices[0]); k++) { bad += !sweep_aligned(slices[k]); }
    }
    CHECK(bad == 0, "%s: %d per-layer slices are not 256-byte aligned at B=%d T=%d", what, bad, B, T);
}

// p (n) floatX on the device -> double on the host
static void sweep_download_params(const GPT2* model, double* out, float* tmp) {
    size_t n = model->num_parameters;
    download_floatx(tmp, model->params_memory, n);
    for (size_t i = 0; i < n; i++) { out[i] = tmp[i]; }
}

typedef struct { double logits, loss, grad; } SweepWorst;

// One (B, T): forward against the float64 logits and loss, backward along a random direction.
static void sweep_shape(GPT2* model, const double* p, double* pd, float* grads, double* logits64, float* logits,
                        int B, int T, SweepWorst* worst) {
    const GPT2Config* c = &model->config;
    int V = c->vocab_size, Vp = c->padded_vocab_size, NH = c->num_heads;
    size_t n = model->num_parameters, BT = (size_t)B * T;
    int inputs[SWEEP_MAX_B * SWEEP_MAX_T], targets[SWEEP_MAX_B * SWEEP_MAX_T];
    for (size_t i = 0; i < BT; i++) {
        inputs[i] = (int)((sweep_uniform() + 1.0) * 0.5 * V) % V;
        targets[i] = (int)((sweep_uniform() + 1.0) * 0.5 * V) % V;
    }
    sweep_check_alignment(model, B, T, "sweep");
    gpt2_begin_step(model, 0);
    float loss = gpt2_forward(model, inputs, targets, B, T);
    download_floatx(logits, model->acts.output, BT * Vp);
    gpt2_backward(model, inputs, targets, B, T, 1.0f);
    download_floatx(grads, model->grads_memory, n);

    double ref = ref64_forward(c, &model->table, p, inputs, targets, B, T, logits64);
    double md = 0.0, mr = 0.0;
    for (size_t r = 0; r < BT; r++) {
        for (int v = 0; v < V; v++) {
            double d = fabs((double)logits[r * Vp + v] - logits64[r * V + v]);
            md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
            mr = fabs(logits64[r * V + v]) > mr ? fabs(logits64[r * V + v]) : mr;
        }
    }
    double lrel = fabs((double)loss - ref) / fabs(ref);
    CHECK(isfinite(loss) && lrel <= SWEEP_TOL_LOSS, "sweep NH=%d B=%d T=%d: loss %.7f, float64 %.7f (rel %.2e)", NH, B, T,
          loss, ref, lrel);
    CHECK(md <= SWEEP_TOL_LOGITS * mr, "sweep NH=%d B=%d T=%d: logits max|diff| %.3e > %.0e * %.3e", NH, B, T, md,
          SWEEP_TOL_LOGITS, mr);

    // backward: sum(g * d) against the float64 central difference along d (d = +-1 per parameter)
    const double e = 1e-4;
    double gd = 0.0, gnorm = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = sweep_uniform() < 0.0 ? -1.0 : 1.0;
        pd[i] = d;
        gd += (double)grads[i] * d;
        gnorm += (double)grads[i] * grads[i];
    }
    gnorm = sqrt(gnorm);  // the spread of sum(g * d) over random signs: a relative error scale
    double* q = (double*)mallocCheck(n * sizeof(double));
    for (size_t i = 0; i < n; i++) { q[i] = p[i] + e * pd[i]; }
    double lp = ref64_forward(c, &model->table, q, inputs, targets, B, T, NULL);
    for (size_t i = 0; i < n; i++) { q[i] = p[i] - e * pd[i]; }
    double lm = ref64_forward(c, &model->table, q, inputs, targets, B, T, NULL);
    free(q);
    double fd = (lp - lm) / (2.0 * e), grel = fabs(gd - fd) / gnorm;
    CHECK(isfinite(gd) && grel <= SWEEP_TOL_GRAD, "sweep NH=%d B=%d T=%d: gradient along d %.6e, float64 difference %.6e "
          "(%.2e of |g|)", NH, B, T, gd, fd, grel);
    if (lrel > worst->loss) { worst->loss = lrel; }
    if (md / mr > worst->logits) { worst->logits = md / mr; }
    if (grel > worst->grad) { worst->grad = grel; }
}

// Sampling as gpt2_sample does it: forward at (1, t) without targets for t = 1 .. T; each step's
// last logits row against the float64 logits of the whole sampled sequence (causal: a prefix's
// logits are the sequence's).
static void sweep_sampling(GPT2* model, const double* p, int T, SweepWorst* worst) {
    const GPT2Config* c = &model->config;
    int V = c->vocab_size;
    int tokens[SWEEP_MAX_T];
    float* rows = (float*)mallocCheck((size_t)T * V * sizeof(float));
    double* ref = (double*)mallocCheck((size_t)T * V * sizeof(double));
    uint64_t rng = 1337;
    tokens[0] = 0;
    for (int t = 1; t <= T; t++) {
        float l = gpt2_forward(model, tokens, NULL, 1, t);
        CHECK(l == -1.0f, "sampling: forward without targets returns -1 (got %f)", l);
        const float* row = gpt2_logits_row(model, t - 1);
        memcpy(rows + (size_t)(t - 1) * V, row, (size_t)V * sizeof(float));
        if (t < T) { tokens[t] = sample_logits(row, V, 1.0f, 0, xorshift_f32(&rng), NULL); }
    }
    ref64_forward(c, &model->table, p, tokens, NULL, 1, T, ref);
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < (size_t)T * V; i++) {
        double d = fabs((double)rows[i] - ref[i]);
        md = d > md || isnan(d) ? (isnan(d) ? INFINITY : d) : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    CHECK(md <= SWEEP_TOL_LOGITS * mr, "sampling NH=%d: logits max|diff| %.3e > %.0e * %.3e", c->num_heads, md,
          SWEEP_TOL_LOGITS, mr);
    if (md / mr > worst->logits) { worst->logits = md / mr; }
    free(rows);
    free(ref);
}

static void sweep_run(void) {
    static const int heads[] = {1, 3, 4, 12};
    static const int Ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 31, 37, 63, 64};
    static const int Bs[] = {1, 3};
    SweepWorst worst = {0.0, 0.0, 0.0};
    int shapes = 0;
    for (size_t h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
        char desc[64];
        snprintf(desc, sizeof(desc), "L2C%dH%dT%dV%d", SWEEP_C, heads[h], SWEEP_MAX_T, SWEEP_V);
        TrainOptions o;  // -r 0, 1, 2 and 0 again: each per-layer layout
        train_options_defaults(&o);
        o.recompute = (int)(h % 3);
        GPT2 model;
        gpt2_build(&model, desc, 1, SWEEP_MAX_B, SWEEP_MAX_T, &o);
        const GPT2Config* c = &model.config;
        size_t n = model.num_parameters;
        // random parameters: weights and embeddings ~ 0.1, layernorm weights ~ 1
        float* host = (float*)mallocCheck(n * sizeof(float));
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            const ParamTensor* t = &model.table.t[i];
            int lnw = i == P_LN1W || i == P_LN2W || i == P_LNFW;
            for (size_t j = 0; j < t->count; j++) {
                host[t->offset + j] = (float)(lnw ? 1.0 + 0.2 * sweep_uniform() : 0.17 * sweep_uniform());
            }
        }
        upload_floatx(model.params_memory, host, n);
        double* p = (double*)mallocCheck(n * sizeof(double));
        double* pd = (double*)mallocCheck(n * sizeof(double));
        sweep_download_params(&model, p, host);  // what the device holds (rounded to floatX)
        size_t rows = (size_t)SWEEP_MAX_B * SWEEP_MAX_T;
        double* logits64 = (double*)mallocCheck(rows * c->vocab_size * sizeof(double));
        float* logits = (float*)mallocCheck(rows * c->padded_vocab_size * sizeof(float));
        for (size_t b = 0; b < sizeof(Bs) / sizeof(Bs[0]); b++) {
            for (size_t t = 0; t < sizeof(Ts) / sizeof(Ts[0]); t++) {
                sweep_shape(&model, p, pd, host, logits64, logits, Bs[b], Ts[t], &worst);
                shapes++;
            }
        }
        sweep_sampling(&model, p, h == 0 ? SWEEP_MAX_T : 9, &worst);  // the whole T once (harness time)
        free(logits); free(logits64); free(pd); free(p); free(host);
        gpt2_free(&model);
    }
    printf("sweep: %d shapes (T 1..9 31 37 63 64, B 1 3, NH 1 3 4 12) + sampling (T 1..%d once, 1..9 per NH): worst logits %.2e of max|ref|, "
           "loss %.2e relative, gradient along d %.2e of |g| (tolerances %.0e %.0e %.0e)\n", shapes, SWEEP_MAX_T,
           worst.logits, worst.loss, worst.grad, SWEEP_TOL_LOGITS, SWEEP_TOL_LOSS, SWEEP_TOL_GRAD);

    // the memory model equals the allocation at odd allocated shapes, and everything is aligned
    static const int alloc[][2] = {{1, 1}, {3, 37}, {1, 7}, {2, 63}};
    for (int r = 0; r <= 2; r++) {
        for (size_t k = 0; k < sizeof(alloc) / sizeof(alloc[0]); k++) {
            TrainOptions o;
            train_options_defaults(&o);
            o.recompute = r;
            GPT2 model;
            gpt2_build(&model, "L2C96H3T64V300", 1, alloc[k][0], alloc[k][1], &o);
            check_memory_model(&model, alloc[k][0], alloc[k][1], 0, "sweep");
            sweep_check_alignment(&model, alloc[k][0], alloc[k][1], "sweep allocation");
            gpt2_free(&model);
        }
    }
    printf("sweep: memory predicted = allocated, every tensor and per-layer slice 256-byte aligned at 4 odd shapes x -r 0 1 2\n");
}

#endif // DEV_TEST_SHAPE_SWEEP_H
