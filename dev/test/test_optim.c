/*
 test_optim.c: the CPU optimizer family (llmc/optim/optim.h, llmc/optim/state.h). One driver, three modes.

   test_optim [--units] [-q]  unit tests, one line each (-q: failures only), exit 1 on a failure
                          (about a second; `make test-optim`):
                          every optimizer x state precision against a float64 reference written
                          here from the formulas, bits independent of the thread count, the clip
                          scale, int8's fp32 small tensors, LAMB's trust ratio edge cases, bf16
                          stochastic rounding, the 8-bit maps, the config checks, the state bytes.
   test_optim --run ...   raw-file driver for dev/reference/optim_ref.py (PyTorch): runs S steps
                          of one configuration on parameters and gradients read from a file and
                          writes the parameters after every step (usage below).
   test_optim --bench     GB/s of every optimizer (--only WORD: those whose name has WORD) at GPT-2
                          124M (d12; --desc to change) against a probe with AdamW's access
                          pattern (dev/cpu/adamw_bench.c's), and the state bytes per parameter of
                          every optimizer x state precision.

 Tolerances of the float64 comparisons (t = steps so far):
   fp32 state: p within 1e-6 t |p| + 1e-5 lr t (a few fp32 roundings per step; the error of an
     update is a few ulps of lr); m, v within 2e-6 t |x| + 1e-6 max_t |x| (the largest value the
     element has had: cancellation in the moments).
   bf16 state (every optimizer): m, v within min(t, 1/(1-d)) 2^-7 max_t |x| (one bf16 rounding per
     step, decaying with the moment's decay d: SGD's momentum, Lion's beta2, beta1 / beta2 for AdamW's
     and LAMB's m / v); p within 0.1 lr t (the update sees rounded moments).
   int8 state (every optimizer): m within min(t, 1/(1-d)) 0.0072 x the block's max_t |m| (half the
     largest code gap, llmc/optim/quant8.h), v likewise with 0.0037; p within 0.5 lr t (m / sqrt(v) of
     elements far below their block's absmax changes by tens of %).
   LAMB with bf16/int8 state: the step of an element is lr * trust * |u|: p within the bounds above
     with lr * max(1, trust), doubled for int8 (|u| of an element whose v quantizes toward 0 is not
     bounded by Adam's ratio; measured 0.77 lr per step); the trust ratio within the fp32 bound plus
     the relative bounds of m and sqrt(v) (km 2^-7 + kv 2^-8 bf16, km 0.0072 + kv 0.0019 int8).
   LAMB's trust ratio within 1e-6 + (e1 + e2 / 2) S relative: e1, e2 are the relative errors of the
     fp32 bias corrections 1 / (1 - beta^t) (1 - beta2^t cancels: e2 ~ 7e-6 at t = 2 for beta2 =
     0.999), which scale the Adam part `upd` of u = upd + wd p by (1 + e1 - e2 / 2); to first order
     ||u|| then moves by that times S = |sum(upd u)| / sum(u^2) (~1; a 3-element tensor shows 1.3).
     trust * upd is invariant, so the parameters keep the fp32 bound.
   Lion: sign(c) is discontinuous at 0; an element whose float64 c is nonzero but within 1e-5 of
     the size of its terms is excluded from then on (counted; must stay under 0.1%); with bf16/int8
     state also one within beta1 times m's bound (under 5%; measured 0.9% bf16, 2.3% int8).
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/run/logger.h"
#include "llmc/optim/optim.h"
#include "llmc/optim/engine.h"
#include "llmc/optim/state.h"
#include "llmc/optim/views.h"
#include "dev/cpu/bench_util.h"
#include "llmc/run/blas_gemm.h"

static int g_failed = 0;
static int g_quiet = 0; // -q: failures and the summary only

static void report(const char* name, int ok, const char* detail) {
    if (!ok || !g_quiet) printf("  %-54s %s%s%s\n", name, ok ? "ok" : "FAIL", detail[0] ? "  " : "", detail);
    if (!ok) g_failed++;
}

// ----------------------------------------------------------------------------
// deterministic data

static double unit01(uint64_t seed, uint64_t i) { // uniform in [0, 1)
    return (double)(srng_mix64(seed * 0x9e3779b97f4a7c15ULL ^ (i + 1) * 0xd1b54a32d192ed03ULL) >> 11) * 0x1.0p-53;
}
static double normalish(uint64_t seed, uint64_t i) { // mean 0, variance 1 (sum of 4 uniforms)
    return (unit01(seed, 4 * i) + unit01(seed, 4 * i + 1) + unit01(seed, 4 * i + 2) + unit01(seed, 4 * i + 3) - 2.0) * 1.732;
}

typedef struct {
    OptimSegment segs[64];
    int nseg;
    size_t n;
} Problem;

static void mini_set(OptimSegment* sg, size_t lead, size_t lead_block, size_t block) {
    sg->mini_lead = lead;
    sg->mini_lead_block = lead_block;
    sg->mini_block = block;
}

static void add_seg(Problem* pb, size_t count, float wd, float lr_mult) {
    pb->segs[pb->nseg] = optim_segment(pb->n, count, wd, lr_mult, pb->nseg);
    pb->nseg++;
    pb->n += count;
}

// Tensors of awkward sizes: single elements, odd sizes (boundaries inside SIMD words), sizes at
// the int8 threshold and at block multiples +-1, a zero-gradient tensor, a multi-block one.
static Problem problem_mixed(void) {
    Problem pb;
    memset(&pb, 0, sizeof pb);
    size_t sizes[] = {1, 7, 4096, 4095, 5003, 2048, 2049, 3, 6145, 48 * 64, 64, 9000, 13, 4097};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        add_seg(&pb, sizes[k], k % 2 ? 0.1f : 0.0f, k % 3 == 2 ? 0.5f : 1.0f);
    // Adam-mini's blocks (the others: one per tensor): heads then rows (as qkv), rows, odd rows
    mini_set(&pb.segs[2], 2048, 512, 64);    // 4096: 4 heads of 512, 32 rows of 64
    mini_set(&pb.segs[5], 0, 0, 256);        // 2048: 8 rows of 256
    mini_set(&pb.segs[9], 0, 0, 48);        // 3072: 64 rows of 48
    mini_set(&pb.segs[11], 3000, 1000, 120);  // 9000: 3 heads of 1000, 50 rows of 120
    return pb;
}

static void init_params(const Problem* pb, float* p) {
    for (int s = 0; s < pb->nseg; s++) {
        const OptimSegment* sg = &pb->segs[s];
        for (size_t k = 0; k < sg->count; k++) { // norm-like tensors near 1, the others N(0, 0.02)-like
            size_t i = sg->offset + k;
            p[i] = (float)(s % 4 == 3 ? 1.0 + 0.1 * normalish(11, i) : 0.02 * normalish(11, i));
        }
    }
}

// Gradients of step t: a per-tensor scale (1e-4 .. 1e-2) times a unit variate; tensor 10 has zero
// gradients (LAMB: u = wd * p only).
static void make_grads(const Problem* pb, int t, float* g) {
    for (int s = 0; s < pb->nseg; s++) {
        const OptimSegment* sg = &pb->segs[s];
        double sc = s == 10 ? 0.0 : pow(10.0, -4.0 + 2.0 * unit01(77, (uint64_t)s));
        for (size_t k = 0; k < sg->count; k++) {
            size_t i = sg->offset + k;
            g[i] = (float)(sc * normalish(5, (uint64_t)t * 0x100000000ULL + i));
        }
    }
}

static float clip_scale_of_step(int t) { return t % 2 ? 0.7f : 1.0f; } // odd steps clip

// ----------------------------------------------------------------------------
// float64 reference of every optimizer, from the formulas (independent of llmc/optim/optim.h)

typedef struct {
    double *p, *m, *v, *vmax;
    double *m_hist, *v_hist, *p_hist; // largest |m|, v, |p| the element has had
    unsigned char* excluded;          // Lion: elements past an ambiguous sign
    double* merr;                     // bf16/int8 state: the bound on the stored m's error (of the last step)
    double trust[64];
    double sens[64];                  // LAMB: sum(upd u) / sum(u^2), u = upd + wd p (see the banner)
} Ref;

static void ref_init(Ref* r, const float* p0, size_t n) {
    r->p = (double*)callocCheck(n, sizeof(double));
    r->m = (double*)callocCheck(n, sizeof(double));
    r->v = (double*)callocCheck(n, sizeof(double));
    r->vmax = (double*)callocCheck(n, sizeof(double));
    r->m_hist = (double*)callocCheck(n, sizeof(double));
    r->v_hist = (double*)callocCheck(n, sizeof(double));
    r->p_hist = (double*)callocCheck(n, sizeof(double));
    r->excluded = (unsigned char*)callocCheck(n, 1);
    r->merr = (double*)callocCheck(n, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        r->p[i] = p0[i];
        r->p_hist[i] = fabs(r->p[i]);
    }
}

static void ref_free(Ref* r) {
    free(r->p); free(r->m); free(r->v); free(r->vmax); free(r->m_hist); free(r->v_hist); free(r->p_hist);
    free(r->excluded);
    free(r->merr);
}

static void ref_step(Ref* r, const Problem* pb, const OptimConfig* c, const float* grads, double scale, double lr0,
                     int t) {
    const double b1 = c->beta1, b2 = c->beta2, eps = c->eps, mu = c->momentum, damp = c->dampening;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int s = 0; s < pb->nseg; s++) {
        const OptimSegment* sg = &pb->segs[s];
        const double lr = lr0 * sg->lr_mult, wd = sg->weight_decay;
        double pp = 0.0, uu = 0.0, du = 0.0;
        if (c->kind == OPT_ADAM_MINI) {  // per block (the lead's, then the rest's): the mean of g^2, one v
            for (size_t e = 0, len; e < sg->count; e += len) {
                len = e < sg->mini_lead ? sg->mini_lead_block : sg->mini_block;
                double g2 = 0.0;
                for (size_t k = e; k < e + len; k++) g2 += ((double)grads[sg->offset + k] * scale) * ((double)grads[sg->offset + k] * scale);
                const double vb = b2 * r->v[sg->offset + e] + (1.0 - b2) * g2 / (double)len;
                for (size_t k = e; k < e + len; k++) {
                    const size_t i = sg->offset + k;
                    const double g = (double)grads[i] * scale, p = r->p[i];
                    r->v[i] = vb;
                    r->m[i] = b1 * r->m[i] + (1.0 - b1) * g;
                    r->p[i] = p - lr * ((r->m[i] / bc1) / (sqrt(vb / bc2) + eps) + wd * p);
                }
            }
            continue;
        }
        for (size_t k = 0; k < sg->count; k++) {
            size_t i = sg->offset + k;
            double g = (double)grads[i] * scale, p = r->p[i];
            if (c->kind == OPT_ADAMW || c->kind == OPT_LAMB) {
                r->m[i] = b1 * r->m[i] + (1.0 - b1) * g;
                r->v[i] = b2 * r->v[i] + (1.0 - b2) * g * g;
                double vv = r->v[i];
                if (c->amsgrad) {
                    r->vmax[i] = fmax(r->vmax[i], r->v[i]);
                    vv = r->vmax[i];
                }
                double upd = (r->m[i] / bc1) / (sqrt(vv / bc2) + eps), u = upd + wd * p;
                if (c->kind == OPT_ADAMW) r->p[i] = p - lr * u;
                pp += p * p;
                uu += u * u;
                du += upd * u;
            } else if (c->kind == OPT_SGD) {
                double d = g;
                if (mu != 0.0) {
                    r->m[i] = t == 1 ? g : mu * r->m[i] + (1.0 - damp) * g;
                    d = c->nesterov ? g + mu * r->m[i] : r->m[i];
                }
                r->p[i] = p - lr * (d + wd * p);
            } else { // Lion
                double t1 = b1 * r->m[i], t2 = (1.0 - b1) * g, cc = t1 + t2;
                // exact 0s agree; with bf16/int8 state the sign is known only beyond the stored m's error
                if (fabs(cc) <= 1e-5 * (fabs(t1) + fabs(t2)) + b1 * r->merr[i] && cc != 0.0) r->excluded[i] = 1;
                double sgn = cc > 0.0 ? 1.0 : cc < 0.0 ? -1.0 : 0.0;
                r->p[i] = p - lr * (sgn + wd * p);
                r->m[i] = b2 * r->m[i] + (1.0 - b2) * g;
            }
        }
        if (c->kind == OPT_LAMB) {
            double pn = sqrt(pp), un = sqrt(uu);
            double trust = pn > 0.0 && un > 0.0 ? pn / un : 1.0;
            r->trust[s] = trust;
            r->sens[s] = uu > 0.0 ? fabs(du) / uu : 0.0;
            for (size_t k = 0; k < sg->count; k++) {
                size_t i = sg->offset + k;
                double p = r->p[i];
                double u = (r->m[i] / bc1) / (sqrt(r->v[i] / bc2) + eps) + wd * p;
                r->p[i] = p - lr * trust * u;
            }
        }
    }
    for (size_t i = 0; i < pb->n; i++) {
        r->m_hist[i] = fmax(r->m_hist[i], fabs(r->m[i]));
        r->v_hist[i] = fmax(r->v_hist[i], fabs(r->v[i]));
        r->p_hist[i] = fmax(r->p_hist[i], fabs(r->p[i]));
    }
}

// ----------------------------------------------------------------------------
// comparisons

typedef struct {
    long long bad, excluded;
    double worst; // max |err| / tol
    size_t first_bad;
    double got, want, tol;
} Cmp;

static void cmp_add(Cmp* c, size_t i, double got, double want, double tol) {
    double r = fabs(got - want) / tol;
    if (r != r) r = INFINITY;
    if (r > 1.0) {
        if (c->bad == 0) { c->first_bad = i; c->got = got; c->want = want; c->tol = tol; }
        c->bad++;
    }
    if (r > c->worst) c->worst = r;
}

static void cmp_detail(const Cmp* c, const char* what, char* buf, size_t size) {
    size_t len = strlen(buf);
    if (c->bad) {
        snprintf(buf + len, size - len, "%s: %lld bad, first [%zu] got %.9g want %.9g tol %.3g; ", what, c->bad,
                 c->first_bad, c->got, c->want, c->tol);
    } else {
        snprintf(buf + len, size - len, "%s %.3f ", what, c->worst);
    }
}

// The optimizer's m, v of element i as fp32 values (whatever the storage).
static void state_values(const OptimState* st, const Problem* pb, size_t i, int s, double* m, double* v) {
    *m = *v = 0.0;
    if (st->m != NULL) *m = st->m[i];
    if (st->v != NULL) *v = st->v[i];
    const int fp16 = st->cfg.state == OPT_STATE_FP16;
    if (st->m16 != NULL) *m = storage16_load(st->m16[i], fp16, OPT_SLOT_M);
    if (st->v16 != NULL) *v = storage16_load(st->v16[i], fp16, OPT_SLOT_V);
    if (st->qm != NULL) {
        const size_t k = i - pb->segs[s].offset;
        if (st->small_off[s] != OPT_NOT_SMALL) {
            *m = st->m32[st->small_off[s] + k];
            if (st->v32 != NULL) *v = st->v32[st->small_off[s] + k];
        } else {
            size_t b = st->block0[s] + k / OPT_BLOCK;
            *m = (double)st->maps[st->qm[i]] * st->absmax_m[b];
            if (st->qv != NULL) *v = (double)st->maps[256 + st->qv[i]] * st->absmax_v[b];
        }
    }
}

static const char* config_name(const OptimConfig* c, char* buf, size_t size) {
    snprintf(buf, size, "%s%s%s%s state %s", optim_kind_name(c->kind), c->amsgrad ? "+amsgrad" : "",
             c->nesterov ? "+nesterov" : "",
             c->kind == OPT_SGD ? (c->momentum == 0.0f ? " (no momentum)" : c->dampening != 0.0f ? " (dampening)" : "") : "",
             optim_precision_name(c->state));
    return buf;
}

// The decay of the first moment per step (its rounding errors shrink by it): SGD's momentum,
// Lion's beta2, AdamW's and LAMB's beta1.
static double lowp_m_decay(const OptimConfig* c) {
    return c->kind == OPT_SGD ? c->momentum : c->kind == OPT_LION ? c->beta2 : c->beta1;
}

// S steps of cfg on the mixed problem against the float64 reference.
static void test_vs_float64(const OptimConfig* cfg, int steps, float lr) {
    Problem pb = problem_mixed();
    const size_t n = pb.n;
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* g = (float*)mallocCheck(n * sizeof(float));
    init_params(&pb, p);
    Ref r;
    ref_init(&r, p, n);
    OptimState st;
    optim_state_init(&st, cfg, pb.segs, pb.nseg, n, NULL);
    Cmp cp = {0}, cm = {0}, cv = {0}, ct = {0};
    for (int t = 1; t <= steps; t++) {
        make_grads(&pb, t, g);
        float scale = clip_scale_of_step(t);
        optim_step_cpu(&st, p, g, lr, t, scale);
        ref_step(&r, &pb, cfg, g, (double)scale, (double)lr, t);
        for (int s = 0; s < pb.nseg; s++) {
            const OptimSegment* sg = &pb.segs[s];
            const double lr_eff = (double)lr * sg->lr_mult;
            double bm = 0.0, bv = 0.0; // int8: the block's largest reference |m|, v so far
            // the scale of a step: lr; LAMB's is lr * trust * |u|, and int8 state leaves |u| of an element
            // far below its block's absmax unbounded by Adam's ratio (v rounds toward 0): 2 lr * trust
            // (measured: 0.77 lr per step at worst)
            const double lowp_step = cfg->kind != OPT_LAMB ? lr_eff
                                   : lr_eff * fmax(1.0, r.trust[s]) * (cfg->state == OPT_STATE_INT8 ? 2.0 : 1.0);
            for (size_t k = 0; k < sg->count; k++) {
                const size_t i = sg->offset + k;
                if (cfg->kind == OPT_LION && r.excluded[i]) continue;
                if (cfg->state == OPT_STATE_INT8 && k % OPT_BLOCK == 0) {
                    bm = bv = 0.0;
                    for (size_t j = k; j < sg->count && j < k + OPT_BLOCK; j++) {
                        bm = fmax(bm, r.m_hist[sg->offset + j]);
                        bv = fmax(bv, r.v_hist[sg->offset + j]);
                    }
                }
                double ptol = 1e-6 * t * fabs(r.p[i]) + 1e-5 * lr_eff * t + 1e-30;
                double mtol = 2e-6 * t * fabs(r.m[i]) + 1e-6 * r.m_hist[i] + 1e-30;
                double vtol = 2e-6 * t * fabs(r.v[i]) + 1e-6 * r.v_hist[i] + 1e-30;
                const int small = st.small_off[s] != OPT_NOT_SMALL;
                const double km = fmin(t, 1.0 / (1.0 - lowp_m_decay(cfg))), kv = fmin(t, 1.0 / (1.0 - cfg->beta2));
                if (cfg->state == OPT_STATE_BF16) {
                    mtol = km * 0x1p-7 * r.m_hist[i] + 1e-30;
                    vtol = kv * 0x1p-7 * r.v_hist[i] + 1e-30;
                    ptol += 0.1 * lowp_step * t;
                } else if (cfg->state == OPT_STATE_FP16) {
                    // fp16 keeps 2^-10 of m and of sqrt(v) (so 2^-9 of v) per stochastic rounding, down to
                    // its subnormals' fixed step 2^-24 of the stored value (2^-38 of m, of sqrt(v))
                    const double sub = 0x1p-38;
                    mtol = km * (0x1p-10 * r.m_hist[i] + sub) + 1e-30;
                    vtol = kv * (0x1p-9 * r.v_hist[i] + 2.0 * sub * sqrt(r.v_hist[i]) + sub * sub) + 1e-30;
                    ptol += 0.0125 * lowp_step * t;
                } else if (cfg->state == OPT_STATE_INT8 && !small) {
                    mtol = km * 0.0072 * bm + 1e-30;
                    vtol = kv * 0.0037 * bv + 1e-30;
                    ptol += 0.5 * lowp_step * t;
                }
                if (cfg->state != OPT_STATE_FP32 && (cfg->state != OPT_STATE_INT8 || !small)) r.merr[i] = mtol;
                cmp_add(&cp, i, p[i], r.p[i], ptol);
                double m, v;
                state_values(&st, &pb, i, s, &m, &v);
                if (cfg->kind != OPT_SGD || cfg->momentum != 0.0f) cmp_add(&cm, i, m, r.m[i], mtol);
                if (cfg->kind == OPT_ADAMW || cfg->kind == OPT_LAMB) cmp_add(&cv, i, v, r.v[i], vtol);
                if (cfg->kind == OPT_ADAM_MINI) {  // (v per block, fp32 at every storage: the block's own index)
                    const size_t first = st.mini0[s], lead = sg->mini_lead ? sg->mini_lead / sg->mini_lead_block : 0;
                    const size_t bi = k < sg->mini_lead ? k / sg->mini_lead_block : lead + (k - sg->mini_lead) / sg->mini_block;
                    cmp_add(&cv, i, st.vmini[first + bi], r.v[i], 2e-6 * t * fabs(r.v[i]) + 1e-6 * r.v_hist[i] + 1e-30);
                }
                if (cfg->amsgrad && cfg->state == OPT_STATE_FP32) cmp_add(&cv, i, st.vmax[i], r.vmax[i], vtol);
            }
            if (cfg->kind == OPT_LAMB) { // the fp32 bias corrections scale u, hence the ratio (not trust * u)
                double e1 = fabs((1.0f / (1.0f - powf(cfg->beta1, (float)t))) * (1.0 - pow(cfg->beta1, t)) - 1.0);
                double e2 = fabs((1.0f / (1.0f - powf(cfg->beta2, (float)t))) * (1.0 - pow(cfg->beta2, t)) - 1.0);
                double rel = 1e-6 + (e1 + 0.5 * e2) * r.sens[s];
                // bf16/int8 state: ||u|| moves with the relative errors of m and sqrt(v) (the bounds
                // above, relative to the largest values, which dominate the norm)
                const double km = fmin(t, 1.0 / (1.0 - cfg->beta1)), kv = fmin(t, 1.0 / (1.0 - cfg->beta2));
                if (cfg->state == OPT_STATE_BF16) rel += km * 0x1p-7 + 0.5 * kv * 0x1p-7;
                if (cfg->state == OPT_STATE_INT8) rel += km * 0.0072 + 0.5 * kv * 0.0037;
                cmp_add(&ct, (size_t)s, st.trust[s], r.trust[s], rel * r.trust[s]);
            }
        }
    }
    long long excl = 0;
    for (size_t i = 0; i < n; i++) excl += r.excluded[i];
    char name[192], cname[96], detail[512] = "";
    snprintf(name, sizeof name, "%s vs float64, %d steps", config_name(cfg, cname, sizeof cname), steps);
    cmp_detail(&cp, "p", detail, sizeof detail);
    if (cfg->kind != OPT_SGD || cfg->momentum != 0.0f) cmp_detail(&cm, "m", detail, sizeof detail);
    if (cfg->kind == OPT_ADAMW || cfg->kind == OPT_LAMB || cfg->kind == OPT_ADAM_MINI) cmp_detail(&cv, "v", detail, sizeof detail);
    if (cfg->kind == OPT_LAMB) cmp_detail(&ct, "trust", detail, sizeof detail);
    if (cfg->kind == OPT_LION) {
        size_t len = strlen(detail);
        snprintf(detail + len, sizeof detail - len, "(%lld of %zu excluded: sign of ~0)", excl, n);
    }
    // Lion: fp32 state leaves < 0.1% ambiguous; bf16/int8 state's error bound on m makes more signs
    // unknown (those with |c| within beta1 times it): < 5%
    const long long excl_max = cfg->state == OPT_STATE_FP32 ? (long long)n / 1000 : (long long)n / 20;
    report(name, cp.bad == 0 && cm.bad == 0 && cv.bad == 0 && ct.bad == 0 && excl <= excl_max, detail);
    optim_state_free(&st);
    ref_free(&r);
    free(p);
    free(g);
}

// ----------------------------------------------------------------------------
// bit-level properties

// Runs `steps` steps of cfg with `threads` OpenMP threads; returns params and the whole state
// block (malloc'd, caller frees). pre_scaled: multiply the gradients by the clip scale in float
// first and pass scale 1.
static void run_cfg(const OptimConfig* cfg, const Problem* pb, int steps, int threads, int pre_scaled,
                    float** p_out, unsigned char** state_out, size_t* state_bytes) {
    const size_t n = pb->n;
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* g = (float*)mallocCheck(n * sizeof(float));
    init_params(pb, p);
    OptimState st;
    optim_state_init(&st, cfg, pb->segs, pb->nseg, n, NULL);
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    for (int t = 1; t <= steps; t++) {
        make_grads(pb, t, g);
        float scale = clip_scale_of_step(t);
        if (pre_scaled) {
            for (size_t i = 0; i < n; i++) g[i] = g[i] * scale;
            scale = 1.0f;
        }
        optim_step_cpu(&st, p, g, 1e-3f, t, scale);
    }
#ifdef _OPENMP
    omp_set_num_threads(saved);
#endif
    *state_out = (unsigned char*)mallocCheck(st.bytes);
    memcpy(*state_out, st.memory, st.bytes);
    *state_bytes = st.bytes;
    *p_out = p;
    optim_state_free(&st);
    free(g);
}

static long long count_diff_bits(const void* a, const void* b, size_t bytes) {
    const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
    long long d = 0;
    for (size_t i = 0; i < bytes; i++) d += x[i] != y[i];
    return d;
}

// Same bits with 1 and 2 threads, and with the clip scale given or applied to the gradients.
static void test_bits(const OptimConfig* cfg) {
    Problem pb = problem_mixed();
    float *p1, *p2, *p3;
    unsigned char *s1, *s2, *s3;
    size_t b1, b2, b3;
    run_cfg(cfg, &pb, 4, 1, 0, &p1, &s1, &b1);
    run_cfg(cfg, &pb, 4, 2, 0, &p2, &s2, &b2);
    run_cfg(cfg, &pb, 4, 2, 1, &p3, &s3, &b3);
    long long dt = count_diff_bits(p1, p2, pb.n * 4) + count_diff_bits(s1, s2, b1);
    long long ds = count_diff_bits(p1, p3, pb.n * 4) + count_diff_bits(s1, s3, b1);
    char name[192], cname[96], detail[128];
    snprintf(name, sizeof name, "%s: bits, 1 vs 2 threads; clip scale", config_name(cfg, cname, sizeof cname));
    snprintf(detail, sizeof detail, "%lld / %lld bytes differ", dt, ds);
    report(name, dt == 0 && ds == 0 && b1 == b2 && b1 == b3, detail);
    free(p1); free(p2); free(p3); free(s1); free(s2); free(s3);
}

// Views: the same steps through states that each hold a part of the model (segments with offset
// rebased into the part's gradients and state, param the global index) give the whole model's
// parameter bits: ZeRO-1 shards (3; int8 cut at the tensor's block boundaries, LAMB at tensor
// boundaries), BAdam blocks (the even and the odd tensors, compact), and one state holding the
// tensors in reverse order cut into OPT_BLOCK pieces (LAMB's trust ratio over a tensor's pieces;
// 4-bit state: whole, its v scales are a segment's).
#define VIEW_MAX_SEGS 256

typedef struct {
    OptimSegment segs[VIEW_MAX_SEGS];
    int nseg;
    size_t n;
} ViewPart;

static void view_part_add(ViewPart* vp, OptimSegment sg) {
    if (vp->nseg == VIEW_MAX_SEGS) ls_fatal("test_optim: a view of more than %d segments", VIEW_MAX_SEGS);
    sg.offset = vp->n;
    vp->segs[vp->nseg++] = sg;
    vp->n += sg.count;
}

// Returns the number of parts (<= 3) of view `which` (0 zero, 1 badam, 2 pieces).
static int view_build(const Problem* pb, const OptimConfig* c, int which, ViewPart* parts) {
    memset(parts, 0, 3 * sizeof(ViewPart));
    if (which == 0) {
        const OptimCut rule = optim_cut_of(c);
        size_t shard = zero_shard_elems(pb->n, 3);
        size_t cut[4] = {0, optim_cut_snap(pb->segs, pb->nseg, shard, rule), optim_cut_snap(pb->segs, pb->nseg, 2 * shard, rule), pb->n};
        OptimSegment tmp[64];
        int np = 0;
        for (int r = 0; r < 3; r++) {
            if (cut[r + 1] <= cut[r] || cut[r] >= pb->n) continue;
            int k = optim_segments_cut(pb->segs, pb->nseg, cut[r], cut[r + 1], tmp);
            for (int s = 0; s < k; s++) view_part_add(&parts[np], tmp[s]);
            np++;
        }
        return np;
    }
    if (which == 1) {
        for (int s = 0; s < pb->nseg; s++) view_part_add(&parts[s % 2], pb->segs[s]);
        return parts[1].nseg > 0 ? 2 : 1;
    }
    // (4-bit: v's scales span a segment; Adam-mini: pieces of whole blocks, optim_cut_of)
    const size_t step_max = c->state == OPT_STATE_4BIT ? (size_t)-1 : OPT_BLOCK;
    for (int s = pb->nseg - 1; s >= 0; s--) {
        for (size_t r = 0, len; r < pb->segs[s].count; r += len) {
            OptimSegment piece = pb->segs[s];
            len = pb->segs[s].count - r < step_max ? pb->segs[s].count - r : step_max;
            if (c->kind == OPT_ADAM_MINI) {
                len = optim_cut_snap(&pb->segs[s], 1, pb->segs[s].offset + r + len, optim_cut_of(c)) - pb->segs[s].offset - r;
            }
            piece.param += r;
            piece.trel += r;
            piece.count = len;
            view_part_add(&parts[0], piece);
        }
    }
    return 1;
}

static void test_views(const OptimConfig* cfg) {
    static const char* const names[3] = {"zero", "badam", "pieces"};
    Problem pb = problem_mixed();
    float *pw;
    unsigned char* sw;
    size_t bw;
    run_cfg(cfg, &pb, 4, 2, 0, &pw, &sw, &bw);
    free(sw);
    float* p = (float*)mallocCheck(pb.n * 4);
    float* g = (float*)mallocCheck(pb.n * 4);
    float* gp = (float*)mallocCheck(pb.n * 4);
    ViewPart* parts = (ViewPart*)mallocCheck(3 * sizeof(ViewPart));
    for (int which = 0; which < 3; which++) {
        const int np = view_build(&pb, cfg, which, parts);
        OptimState st[3];
        for (int k = 0; k < np; k++) optim_state_init(&st[k], cfg, parts[k].segs, parts[k].nseg, parts[k].n, NULL);
        init_params(&pb, p);
        for (int t = 1; t <= 4; t++) {
            make_grads(&pb, t, g);
            for (int k = 0; k < np; k++) {
                for (int s = 0; s < parts[k].nseg; s++) {
                    const OptimSegment* sg = &parts[k].segs[s];
                    memcpy(gp + sg->offset, g + sg->param, sg->count * sizeof(float));
                }
                optim_step_cpu(&st[k], p, gp, 1e-3f, t, clip_scale_of_step(t));
            }
        }
        for (int k = 0; k < np; k++) optim_state_free(&st[k]);
        char name[192], cname[96], detail[96];
        snprintf(name, sizeof name, "%s: view %s (%d parts) == whole model (bits)", config_name(cfg, cname, sizeof cname),
                 names[which], np);
        long long d = count_diff_bits(p, pw, pb.n * 4);
        snprintf(detail, sizeof detail, "%lld bytes differ", d);
        report(name, d == 0, detail);
    }
    free(parts); free(p); free(g); free(gp); free(pw);
}

// ----------------------------------------------------------------------------
// 4-bit state against float64, step by step (llmc/optim/quant4.h, written again here from its
// definitions): before each step the state is decoded with this file's own reading of the codes
// (the map's values as decimals, (i + 1) / 16 times the rank-1 scale min(R[r], C[c])); from it and
// the gradient the float64 step gives the new moments, the parameters (updated from the unrounded
// moments), v's new row and column maxima and every new code. Per step, so no error accumulates:
//   parameters within 1e-6 |p| + 1e-5 lr (fp32 arithmetic of one step); scales, group absmax and
//   the small tensors' fp32 state within 1e-5 of the size of their terms (m = b1 m + (1 - b1) g
//   cancels: |b1 m| + |(1 - b1) g|; v's terms are positive); codes equal, except where the float64 value lies within 1e-4 relative of
//   the midpoint between two codes (fp32 arithmetic may round across it; counted, < 0.5%). Lion: elements whose c is within 1e-5 of its
//   terms are skipped (sign ambiguous). Segments: problem_mixed (vectors: rows of 128) and matrices
//   of odd widths, one starting mid-row (a cut piece, trel 200).

static const double kMap4[16] = {-0.8875, -0.6625, -0.4375, -0.2125, -0.0775, -0.0325, -0.0055, 0.0,
                                 0.0055,  0.0325,  0.0775,  0.2125,  0.4375,  0.6625,  0.8875,  1.0};

static unsigned q4_code_at(const unsigned char* codes, size_t b, size_t j) {
    return (codes[b * (OPT_BLOCK / 2) + j / 2] >> (4 * (j % 2))) & 15u;
}

// Nearest code of the signed map to x (ties lower); *amb set when x is within 1e-4 of a midpoint.
static unsigned q4_nearest_signed(double x, int* amb) {
    unsigned best = 0;
    for (unsigned k = 1; k < 16; k++)
        if (fabs(kMap4[k] - x) < fabs(kMap4[best] - x)) best = k;
    for (unsigned k = 0; k + 1 < 16; k++) {
        const double mid = (kMap4[k] + kMap4[k + 1]) / 2;
        if (fabs(x - mid) <= 1e-4 * (fabs(mid) + 1e-3)) *amb = 1;
    }
    return best;
}
static unsigned q4_nearest_linear(double x, int* amb) {
    unsigned best = 0;
    for (unsigned k = 1; k < 16; k++)
        if (fabs((k + 1) / 16.0 - x) < fabs((best + 1) / 16.0 - x)) best = k;
    for (unsigned k = 1; k < 16; k++) {
        const double mid = (k + 0.5) / 16.0;
        if (fabs(x - mid) <= 1e-4 * mid) *amb = 1;
    }
    return best;
}

static Problem problem_quant4(void) {
    Problem pb = problem_mixed();
    const size_t shapes[3][3] = {{37, 130, 0}, {64, 96, 0}, {66, 77, 200}};  // rows, cols, trel
    for (int k = 0; k < 3; k++) {
        add_seg(&pb, shapes[k][0] * shapes[k][1] - shapes[k][2], 0.1f, 1.0f);
        pb.segs[pb.nseg - 1].cols = shapes[k][1];
        pb.segs[pb.nseg - 1].trel = shapes[k][2];
        pb.segs[pb.nseg - 1].tensor_count = shapes[k][0] * shapes[k][1];
    }
    return pb;
}

// The decoded state of element k of segment s (slot: 0 m, 1 v, 2 vmax).
static double q4_value(const OptimState* st, int s, size_t k, int slot) {
    const OptimSegment* sg = &st->segs[s];
    const float* small[3] = {st->m32, st->v32, st->vmax32};
    if (st->small_off[s] != OPT_NOT_SMALL) return small[slot][st->small_off[s] + k];
    const size_t b = st->block0[s] + k / OPT_BLOCK, j = k % OPT_BLOCK;
    if (slot == 0) return kMap4[q4_code_at(st->q4m, b, j)] * st->absmax4_m[b * (OPT_BLOCK / 128) + j / 128];
    const size_t w = sg->cols ? sg->cols : 128, rows = (sg->trel + sg->count - 1) / w - sg->trel / w + 1;
    const float* R = (slot == 1 ? st->rank1_v : st->rank1_vmax) + st->rank1_off[s];
    const size_t e = sg->trel + k, r = e / w - sg->trel / w, c = e % w;
    const double sc = fmin(R[r], R[rows + c]);
    return (q4_code_at(slot == 1 ? st->q4v : st->q4vmax, b, j) + 1) / 16.0 * sc;
}

static void test_quant4_vs_float64(const OptimConfig* cfg, int steps) {
    Problem pb = problem_quant4();
    const size_t n = pb.n;
    const float lr = cfg->kind == OPT_SGD ? 0.05f : 1e-3f;
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* g = (float*)mallocCheck(n * sizeof(float));
    double* x = (double*)mallocCheck(3 * n * sizeof(double));  // the new m, v, vmax in float64
    double* p0 = (double*)mallocCheck(n * sizeof(double));
    double* old = (double*)mallocCheck(3 * n * sizeof(double));
    double* size = (double*)mallocCheck(n * sizeof(double));  // m's terms' magnitude
    init_params(&pb, p);
    OptimState st;
    optim_state_init(&st, cfg, pb.segs, pb.nseg, n, NULL);
    const int nslot = optim_slots(cfg), ams = cfg->amsgrad;
    Cmp cp = {0}, cs = {0}, csm = {0};
    long long codes = 0, wrong = 0, amb = 0, skipped = 0;
    const double b1 = cfg->beta1, b2 = cfg->beta2, mu = cfg->momentum;
    for (int t = 1; t <= steps; t++) {
        make_grads(&pb, t, g);
        const double scale = clip_scale_of_step(t);
        for (int s = 0; s < pb.nseg; s++)
            for (size_t k = 0; k < pb.segs[s].count; k++)
                for (int q = 0; q < nslot; q++) old[q * n + pb.segs[s].offset + k] = q4_value(&st, s, k, q);
        for (size_t i = 0; i < n; i++) p0[i] = p[i];
        optim_step_cpu(&st, p, g, lr, t, (float)scale);
        const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (int s = 0; s < pb.nseg; s++) {
            const OptimSegment* sg = &pb.segs[s];
            const double wd = sg->weight_decay, lrs = lr * sg->lr_mult;
            for (size_t k = 0; k < sg->count; k++) {
                const size_t i = sg->offset + k;
                const double gi = (double)g[i] * scale, m0 = old[i];
                double want;
                if (cfg->kind == OPT_ADAMW || cfg->kind == OPT_LAMB) {
                    x[i] = b1 * m0 + (1 - b1) * gi;
                    size[i] = b1 * fabs(m0) + (1 - b1) * fabs(gi);
                    x[n + i] = b2 * old[n + i] + gi * gi * (1 - b2);
                    double d = x[n + i];
                    if (ams) d = x[2 * n + i] = fmax(old[2 * n + i], d);
                    want = p0[i] - lrs * ((x[i] / bc1) / (sqrt(d / bc2) + cfg->eps) + wd * p0[i]);
                    if (cfg->kind == OPT_LAMB) continue;  // (below, from the moments as stored)
                } else if (cfg->kind == OPT_SGD) {
                    x[i] = t == 1 ? gi : mu * m0 + (1 - cfg->dampening) * gi;
                    size[i] = t == 1 ? fabs(gi) : mu * fabs(m0) + (1 - cfg->dampening) * fabs(gi);
                    want = p0[i] - lrs * ((cfg->nesterov ? gi + mu * x[i] : x[i]) + wd * p0[i]);
                } else {  // Lion
                    const double t1 = b1 * m0, t2 = (1 - b1) * gi, c = t1 + t2;
                    x[i] = b2 * m0 + (1 - b2) * gi;
                    size[i] = b2 * fabs(m0) + (1 - b2) * fabs(gi);
                    want = p0[i] - lrs * ((c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0) + wd * p0[i]);
                    if (c != 0.0 && fabs(c) <= 1e-5 * (fabs(t1) + fabs(t2))) { skipped++; continue; }
                }
                cmp_add(&cp, i, p[i], want, 1e-6 * fabs(want) + 1e-5 * lrs + 1e-30);
            }
            if (cfg->kind == OPT_LAMB) {  // the trust ratio of the direction applied: the moments as stored
                double pp = 0.0, uu = 0.0;
                double* u = (double*)mallocCheck(sg->count * sizeof(double));
                for (size_t k = 0; k < sg->count; k++) {
                    const double m = q4_value(&st, s, k, 0), v = q4_value(&st, s, k, 1), pk = p0[sg->offset + k];
                    u[k] = (m / bc1) / (sqrt(v / bc2) + cfg->eps) + wd * pk;
                    pp += pk * pk;
                    uu += u[k] * u[k];
                }
                const double trust = pp > 0 && uu > 0 ? sqrt(pp) / sqrt(uu) : 1.0;
                for (size_t k = 0; k < sg->count; k++) {
                    const size_t i = sg->offset + k;
                    const double want = p0[i] - lrs * trust * u[k];
                    cmp_add(&cp, i, p[i], want, 1e-6 * fabs(want) + 1e-5 * lrs * (trust > 1 ? trust : 1) + 1e-30);
                }
                free(u);
            }
            if (st.small_off[s] != OPT_NOT_SMALL) {  // fp32 state
                for (size_t k = 0; k < sg->count; k++)
                    for (int q = 0; q < nslot; q++) {
                        const double w = x[q * n + sg->offset + k], sz = q == 0 ? size[sg->offset + k] : fabs(w);
                        cmp_add(&csm, sg->offset + k, q4_value(&st, s, k, q), w, 1e-5 * sz + 1e-30);
                    }
                continue;
            }
            // m: per group of 128 from each block's start, the absmax and the codes
            for (size_t k0 = 0; k0 < sg->count; k0 += 128) {
                const size_t k1 = k0 + 128 < sg->count ? k0 + 128 : sg->count;
                double am = 0.0, sz = 0.0;
                for (size_t k = k0; k < k1; k++) {
                    am = fmax(am, fabs(x[sg->offset + k]));
                    sz = fmax(sz, size[sg->offset + k]);
                }
                const size_t b = st.block0[s] + k0 / OPT_BLOCK, j0 = k0 % OPT_BLOCK;
                cmp_add(&cs, sg->offset + k0, st.absmax4_m[b * (OPT_BLOCK / 128) + j0 / 128], am, 1e-5 * sz + 1e-30);
                for (size_t k = k0; k < k1; k++) {
                    int a = 0;
                    const unsigned want = q4_nearest_signed(am > 0 ? x[sg->offset + k] / am : 0.0, &a);
                    codes++;
                    if (a) amb++;
                    else wrong += q4_code_at(st.q4m, b, k % OPT_BLOCK) != want;
                }
            }
            // v, vmax: the rows' and columns' maxima, and the codes
            for (int q = 1; q < nslot; q++) {
                const size_t w = sg->cols ? sg->cols : 128, r0 = sg->trel / w;
                const size_t rows = (sg->trel + sg->count - 1) / w - r0 + 1;
                double* R = (double*)callocCheck(rows + w, sizeof(double));
                for (size_t k = 0; k < sg->count; k++) {
                    const size_t e = sg->trel + k;
                    const double v = x[q * n + sg->offset + k];
                    R[e / w - r0] = fmax(R[e / w - r0], v);
                    R[rows + e % w] = fmax(R[rows + e % w], v);
                }
                const float* got = (q == 1 ? st.rank1_v : st.rank1_vmax) + st.rank1_off[s];
                for (size_t r = 0; r < rows + w; r++) cmp_add(&cs, sg->offset, got[r], R[r], 1e-5 * R[r] + 1e-30);
                for (size_t k = 0; k < sg->count; k++) {
                    const size_t e = sg->trel + k, b = st.block0[s] + k / OPT_BLOCK;
                    const double sc = fmin(R[e / w - r0], R[rows + e % w]);
                    int a = 0;
                    const unsigned want = q4_nearest_linear(sc > 0 ? x[q * n + sg->offset + k] / sc : 0.0, &a);
                    codes++;
                    if (a) amb++;
                    else wrong += q4_code_at(q == 1 ? st.q4v : st.q4vmax, b, k % OPT_BLOCK) != want;
                }
                free(R);
            }
        }
    }
    char name[160], cname[96], detail[320] = "";
    snprintf(name, sizeof name, "%s: %d steps vs float64 (codes, scales, params)", config_name(cfg, cname, sizeof cname), steps);
    cmp_detail(&cp, "p", detail, sizeof detail);
    cmp_detail(&cs, "scales", detail, sizeof detail);
    cmp_detail(&csm, "small", detail, sizeof detail);
    size_t len = strlen(detail);
    snprintf(detail + len, sizeof detail - len, "codes %lld, wrong %lld, near a midpoint %lld, lion skipped %lld", codes,
             wrong, amb, skipped);
    report(name, cp.bad == 0 && cs.bad == 0 && csm.bad == 0 && wrong == 0 && amb * 200 < codes && skipped * 1000 < (long long)n,
           detail);
    optim_state_free(&st);
    free(p); free(g); free(x); free(p0); free(old); free(size);
}

// Step 1 of AMSGrad is AdamW's step 1 (vmax = max(0, v) = v); int8 state leaves the small tensors'
// updates bit-identical to fp32 AdamW; the dispatcher's fp32 AdamW is adamw_update_cpu.
// fp16 on raw bits (llmc/optim/srng.h, the fp16 optimizer state): every one of the 65536 patterns
// decodes to the value the format defines (float64 formula); stochastic rounding of random x in
// every range (subnormal, normal, near the top) lands on one of x's two fp16 neighbours, is unbiased
// (mean within 6 sigma of x over 4096 draws), saturates at 65504, and keeps exact values exact.
static uint64_t next_u64(uint64_t* state) { return srng_mix64(*state += 0x9e3779b97f4a7c15ULL); }

static void test_fp16_bits(void) {
    int ok = 1;
    char detail[160] = "";
    for (uint32_t h = 0; h < 65536; h++) {
        const int e = (int)(h >> 10 & 31u), f = (int)(h & 1023u);
        if (e == 31) continue;  // inf / NaN: checked below
        double want = e == 0 ? ldexp((double)f, -24) : ldexp(1.0 + f / 1024.0, e - 15);
        if (h & 0x8000u) want = -want;
        if ((double)fp16_bits_to_float((uint16_t)h) != want) {
            if (ok) snprintf(detail, sizeof detail, "decode 0x%04x: %g, want %g", h, (double)fp16_bits_to_float((uint16_t)h), want);
            ok = 0;
        }
    }
    ok &= isinf(fp16_bits_to_float(0x7c00u)) && isnan(fp16_bits_to_float(0x7e00u)) && fp16_bits_round_stochastic(NAN, 0) == 0x7e00u;
    ok &= fp16_bits_round_stochastic(1e30f, 0) == 0x7bffu && fp16_bits_round_stochastic(-65519.0f, 0xffffffffu) == 0xfbffu;
    uint64_t rng = 12345;
    const double ranges[4] = {-20.0, -15.0, -3.0, 15.0};  // log2 |x|: subnormal, the boundary, normal, near 65504
    for (int r = 0; r < 4; r++) {
        for (int trial = 0; trial < 64; trial++) {
            const float x = (float)ldexp(1.0 + (double)(next_u64(&rng) >> 11) * 0x1p-53, (int)ranges[r]) * (trial & 1 ? -1.0f : 1.0f);
            // the two neighbours: the float64 floor and ceiling on fp16's grid at x's exponent
            int ex;
            frexp(fabs((double)x), &ex);
            const double ulp = ldexp(1.0, (ex - 11 < -24 ? -24 : ex - 11));
            const double lo = floor(fabs((double)x) / ulp) * ulp, hi = lo + ulp;
            double sum = 0.0;
            const int draws = 4096;
            for (int d = 0; d < draws; d++) {
                const double y = fabs((double)fp16_bits_to_float(fp16_bits_round_stochastic(x, (unsigned)(next_u64(&rng) >> 32))));
                if (y != lo && y != (hi > 65504.0 ? 65504.0 : hi)) {
                    if (ok) snprintf(detail, sizeof detail, "round %.9g -> %.9g, not %.9g or %.9g", (double)x, y, lo, hi);
                    ok = 0;
                }
                sum += y;
            }
            const double mean = sum / draws, sigma = 0.5 * ulp / sqrt((double)draws);
            if (hi <= 65504.0 && fabs(mean - fabs((double)x)) > 6.0 * sigma + 1e-3 * ulp) {
                if (ok) snprintf(detail, sizeof detail, "%.9g: mean of rounding %.9g (6 sigma %.3g)", (double)x, mean, 6 * sigma);
                ok = 0;
            }
        }
    }
    for (uint32_t h = 0; h < 0x7c00u; h += 37) {  // exact values stay exact
        const float x = fp16_bits_to_float((uint16_t)h);
        ok &= fp16_bits_round_stochastic(x, 0xffffffffu) == h && fp16_bits_round_stochastic(x, 0) == h;
    }
    report("fp16 bits: decode, stochastic rounding, saturation", ok, detail);
}

static void test_adamw_identities(void) {
    Problem pb = problem_mixed();
    OptimConfig base = optim_config_default(OPT_ADAMW);
    OptimConfig ams = base, q8 = base;
    ams.amsgrad = 1;
    q8.state = OPT_STATE_INT8;
    float *pa, *pb1, *pq;
    unsigned char *sa, *sb, *sq;
    size_t ba, bb, bq;
    run_cfg(&base, &pb, 1, 2, 0, &pa, &sa, &ba);
    run_cfg(&ams, &pb, 1, 2, 0, &pb1, &sb, &bb);
    report("adamw+amsgrad step 1 == adamw step 1 (bits)", count_diff_bits(pa, pb1, pb.n * 4) == 0, "");
    free(pa); free(pb1); free(sa); free(sb);
    run_cfg(&base, &pb, 5, 2, 0, &pa, &sa, &ba);
    run_cfg(&q8, &pb, 5, 2, 0, &pq, &sq, &bq);
    long long same = 0, small = 0, big_same = 0, big = 0;
    for (int s = 0; s < pb.nseg; s++) {
        const OptimSegment* sg = &pb.segs[s];
        long long d = count_diff_bits(pa + sg->offset, pq + sg->offset, sg->count * 4);
        if (sg->count < QUANT8_MIN_ELEMS) { small += (long long)sg->count; same += d == 0 ? (long long)sg->count : 0; }
        else { big += (long long)sg->count; big_same += d == 0; }
    }
    char detail[128];
    snprintf(detail, sizeof detail, "%lld of %lld small-tensor params equal; quantized tensors differ", same, small);
    report("adamw int8: tensors < QUANT8_MIN_ELEMS update as fp32 AdamW", same == small && big_same == 0 && big > 0, detail);
    free(pa); free(pq); free(sa); free(sq);

    // the dispatcher's fp32 AdamW and adamw_update_cpu
    float* p = (float*)mallocCheck(pb.n * 4);
    float* q = (float*)mallocCheck(pb.n * 4);
    float* g = (float*)mallocCheck(pb.n * 4);
    float* m = (float*)callocCheck(pb.n, 4);
    float* v = (float*)callocCheck(pb.n, 4);
    init_params(&pb, p);
    memcpy(q, p, pb.n * 4);
    OptimState st;
    optim_state_init(&st, &base, pb.segs, pb.nseg, pb.n, NULL);
    for (int t = 1; t <= 3; t++) {
        make_grads(&pb, t, g);
        optim_step_cpu(&st, p, g, 2e-3f, t, 0.5f);
        adamw_update_cpu(q, g, m, v, pb.segs, pb.nseg, &base, 2e-3f, t, 0.5f);
    }
    report("optim_step_cpu adamw fp32 == adamw_update_cpu (bits)",
           count_diff_bits(p, q, pb.n * 4) == 0 && count_diff_bits(st.m, m, pb.n * 4) == 0, "");
    optim_state_free(&st);
    free(p); free(q); free(g); free(m); free(v);
}

// LAMB: a tensor of zeros has ||p|| = 0 -> trust 1 (the step is lr * u); a tensor with zero
// gradients and no weight decay has u = 0 -> trust 1, and stays as it is.
static void test_lamb_edges(void) {
    Problem pb;
    memset(&pb, 0, sizeof pb);
    add_seg(&pb, 100, 0.0f, 1.0f); // zero params
    add_seg(&pb, 50, 0.0f, 1.0f);  // zero grads, no decay
    add_seg(&pb, 5000, 0.1f, 1.0f);
    float* p = (float*)mallocCheck(pb.n * 4);
    float* g = (float*)mallocCheck(pb.n * 4);
    for (size_t i = 0; i < pb.n; i++) {
        p[i] = i < 100 ? 0.0f : (float)(0.5 + 0.01 * normalish(3, i));
        g[i] = i >= 100 && i < 150 ? 0.0f : (float)(0.01 * normalish(4, i));
    }
    float keep[50];
    memcpy(keep, p + 100, sizeof keep);
    OptimConfig c = optim_config_default(OPT_LAMB);
    OptimState st;
    optim_state_init(&st, &c, pb.segs, pb.nseg, pb.n, NULL);
    optim_step_cpu(&st, p, g, 0.01f, 1, 1.0f);
    // step 1: m_hat = g, v_hat = g^2 -> u = g / (|g| + eps) ~ sign(g)
    int ok_zero = st.trust[0] == 1.0f;
    for (size_t i = 0; i < 100 && ok_zero; i++) {
        float u = g[i] / (fabsf(g[i]) + c.eps);
        ok_zero = fabsf(p[i] + 0.01f * u) <= 1e-7f;
    }
    int ok_still = st.trust[1] == 1.0f && memcmp(keep, p + 100, sizeof keep) == 0;
    double pp = 0.0, uu = 0.0; // tensor 2: trust = ||p|| / ||u|| from the initial p
    for (size_t i = 150; i < pb.n; i++) {
        double p0 = 0.5 + 0.01 * normalish(3, i), gi = (double)(float)(0.01 * normalish(4, i));
        double u = (double)(float)p0 * 0.1 + gi / (fabs(gi) + c.eps);
        pp += (double)(float)p0 * (double)(float)p0;
        uu += u * u;
    }
    double want = sqrt(pp) / sqrt(uu);
    char detail[128];
    snprintf(detail, sizeof detail, "trust %.7g %.7g %.7g (want 1, 1, %.7g)", st.trust[0], st.trust[1], st.trust[2], want);
    report("lamb: zero params / zero update -> trust 1; ratio", ok_zero && ok_still && fabs(st.trust[2] - want) <= 1e-6 * want, detail);
    optim_state_free(&st);
    free(p);
    free(g);
}

// Lion's step is lr * (sign(c) + wd p): every parameter moves by exactly lr (no decay) at step 1.
static void test_lion_sign(void) {
    Problem pb;
    memset(&pb, 0, sizeof pb);
    add_seg(&pb, 1000, 0.0f, 1.0f);
    float p[1000], g[1000];
    for (int i = 0; i < 1000; i++) { p[i] = 0.25f; g[i] = i == 7 ? 0.0f : (float)normalish(9, (uint64_t)i) * 1e-3f; }
    OptimConfig c = optim_config_default(OPT_LION);
    OptimState st;
    optim_state_init(&st, &c, pb.segs, pb.nseg, pb.n, NULL);
    optim_step_cpu(&st, p, g, 1.0f / 64, 1, 1.0f);
    int ok = 1;
    for (int i = 0; i < 1000; i++) {
        float want = g[i] > 0 ? 0.25f - 1.0f / 64 : g[i] < 0 ? 0.25f + 1.0f / 64 : 0.25f;
        ok &= p[i] == want;
    }
    report("lion: step 1 moves every parameter by lr * sign(g) exactly", ok, "");
    optim_state_free(&st);
}

// ----------------------------------------------------------------------------
// bf16 rounding and the 8-bit maps

static void test_bf16_rounding(void) {
    // round to nearest even on raw bits: ties, NaN, infinity, the largest finite value
    struct { uint32_t in; uint16_t want; } cases[] = {
        {0x3f808000u, 0x3f80u}, {0x3f818000u, 0x3f82u}, {0x3f808001u, 0x3f81u}, {0x7fc00001u, 0x7fffu},
        {0x7f800000u, 0x7f80u}, {0xff800000u, 0xff80u}, {0x7f7fffffu, 0x7f80u}, {0x80000000u, 0x8000u},
    };
    int ok = 1;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float x;
        memcpy(&x, &cases[k].in, 4);
        ok &= bf16_bits_round_nearest(x) == cases[k].want;
    }
    // stochastic rounding is unbiased: the mean over many draws of x between two bf16 neighbours
    const float xs[3] = {1.0f + 0x1p-9f, -3.14159f, 1e-20f};
    double worst = 0.0;
    for (int k = 0; k < 3; k++) {
        double sum = 0.0;
        const int N = 200000;
        unsigned long long key = srng_step_key(42, k + 1);
        for (int i = 0; i < N; i++) sum += bf16_bits_to_float(bf16_bits_round_stochastic(xs[k], srng_bits(key, (size_t)i, 1)));
        uint32_t u;
        memcpy(&u, &xs[k], 4);
        const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); // toward zero, away from zero
        double ulp = fabs((double)bf16_bits_to_float(hi) - bf16_bits_to_float(lo));
        double bias = fabs(sum / N - xs[k]) / ulp; // std of the mean <= 0.5 / sqrt(N) = 0.0011
        worst = fmax(worst, bias);
        // and every draw is one of the two neighbours
        for (int i = 0; i < 1000; i++) {
            uint16_t r = bf16_bits_round_stochastic(xs[k], srng_bits(key, (size_t)i, 2));
            ok &= r == lo || r == hi;
        }
    }
    char detail[96];
    snprintf(detail, sizeof detail, "worst |mean - x| = %.4f ulp (<= 0.006)", worst);
    report("bf16 rounding: nearest-even cases, stochastic unbiased", ok && worst <= 0.006, detail);
}

static void test_quant8(void) {
    float maps[QUANT8_MAP_FLOATS];
    quant8_maps(maps, maps + 256);
    const float *sm = maps, *um = maps + 256;
    int ok = sm[0] == -1.0f && sm[255] == 1.0f && um[0] == 0.0f && um[255] == 1.0f;
    ok &= sm[QUANT8_ZERO_SIGNED] == 0.0f && um[QUANT8_ZERO_UNSIGNED] == 0.0f;
    for (int k = 1; k < 256; k++) ok &= sm[k] >= sm[k - 1] && um[k] > um[k - 1];
    for (int k = 0; k < 127; k++) ok &= sm[k] == -sm[255 - k];
    for (int k = 0; k < 256; k++) {
        if (k != 127) ok &= quant8_quantize(sm, sm[k]) == k; // -0 (127) quantizes to +0 (128)
        ok &= quant8_quantize(um, um[k]) == k;
    }
    // round trip of random blocks: within half the largest code gap of the absmax
    double worst_s = 0.0, worst_u = 0.0;
    float x[QUANT8_BLOCK], y[QUANT8_BLOCK];
    unsigned char codes[QUANT8_BLOCK];
    for (int rep = 0; rep < 20; rep++) {
        for (int j = 0; j < QUANT8_BLOCK; j++) x[j] = (float)(normalish(100 + rep, (uint64_t)j) * pow(10.0, -3.0 * unit01(200 + rep, (uint64_t)j)));
        float am = quant8_block_quantize(x, QUANT8_BLOCK, sm, 1, codes);
        quant8_block_dequantize(codes, QUANT8_BLOCK, am, sm, y);
        for (int j = 0; j < QUANT8_BLOCK; j++) worst_s = fmax(worst_s, fabs((double)y[j] - x[j]) / am);
        for (int j = 0; j < QUANT8_BLOCK; j++) x[j] = x[j] * x[j];
        am = quant8_block_quantize(x, QUANT8_BLOCK, um, 0, codes);
        quant8_block_dequantize(codes, QUANT8_BLOCK, am, um, y);
        for (int j = 0; j < QUANT8_BLOCK; j++) worst_u = fmax(worst_u, fabs((double)y[j] - x[j]) / am);
    }
    // the CPU's index gives the binary search's codes: every map entry, its neighbours and the
    // midpoints between entries (the tie rule), +-0, +-inf, NaN, and 4 floats in each bucket
    Quant8Index ix[2];
    ok &= quant8_index_build(sm, &ix[0]) && quant8_index_build(um, &ix[1]);
    long long mism = 0, tried = 0;
    for (int w = 0; w < 2; w++) {
        const float* mp = w ? um : sm;
        float probes[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0000001f, -1.0000001f, 2.0f, -2.0f};
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++, tried++) mism += quant8_quantize_fast(&ix[w], probes[k]) != quant8_quantize(mp, probes[k]);
        for (int k = 0; k < 256; k++) {
            float mid = k < 255 ? (float)(0.5 * ((double)mp[k] + mp[k + 1])) : mp[k];
            float xs4[6] = {mp[k], nextafterf(mp[k], -2.0f), nextafterf(mp[k], 2.0f), mid, nextafterf(mid, -2.0f), nextafterf(mid, 2.0f)};
            for (int j = 0; j < 6; j++, tried++) mism += quant8_quantize_fast(&ix[w], xs4[j]) != quant8_quantize(mp, xs4[j]);
        }
        for (uint32_t b = 0; b < 65536; b++) {
            const uint32_t lows[4] = {0u, 0xffffu, 0x8000u, (uint32_t)(srng_mix64(b) & 0xffffu)};
            for (int j = 0; j < 4; j++, tried++) {
                uint32_t bits = b << 16 | lows[j];
                float x;
                memcpy(&x, &bits, 4);
                mism += quant8_quantize_fast(&ix[w], x) != quant8_quantize(mp, x);
            }
        }
    }
    ok &= mism == 0;
    char detail[192];
    snprintf(detail, sizeof detail, "round trip <= %.5f (signed, bound 0.00704), %.5f (unsigned, bound 0.00352) of absmax; "
             "fast quantize: %lld of %lld differ", worst_s, worst_u, mism, tried);
    report("quant8: maps sorted/symmetric, codes round-trip, error bound", ok && worst_s <= 0.9 / 128 + 1e-7 && worst_u <= 0.9 / 256 + 1e-7, detail);
}

// The zero-point rule (quant8_nonzero_rule): in the unsigned map (v) a positive value never takes
// the code of 0, however small against the block's absmax (a rare token's v in a block of the token
// embedding: read back as 0 it made the step m / eps), in the binary search, the CPU's index and a
// block round trip; 0 keeps code 0, and the signed map (m) still rounds tiny values to 0.
static void test_quant8_nonzero(void) {
    float maps[QUANT8_MAP_FLOATS];
    quant8_maps(maps, maps + 256);
    const float *sm = maps, *um = maps + 256;
    Quant8Index ix[2];
    int ok = quant8_index_build(sm, &ix[0]) && quant8_index_build(um, &ix[1]);
    long long zero = 0, tried = 0;
    for (uint32_t bits = 1; bits <= 0x3f800000u; bits += 997u) { // positive floats up to 1, every bucket
        float x;
        memcpy(&x, &bits, 4);
        tried++;
        zero += quant8_quantize(um, x) == QUANT8_ZERO_UNSIGNED || quant8_quantize_fast(&ix[1], x) == QUANT8_ZERO_UNSIGNED;
    }
    ok &= quant8_quantize(um, 0.0f) == QUANT8_ZERO_UNSIGNED && quant8_quantize_fast(&ix[1], 0.0f) == QUANT8_ZERO_UNSIGNED;
    ok &= quant8_quantize(um, 1e-30f) == 1 && quant8_quantize_fast(&ix[1], 1e-30f) == 1;
    ok &= quant8_quantize(sm, 1e-30f) == QUANT8_ZERO_SIGNED && quant8_quantize_fast(&ix[0], 1e-30f) == QUANT8_ZERO_SIGNED;
    // a block: one large v, the rest spread over 30 decades below it, and exact zeros
    float v[QUANT8_BLOCK], y[QUANT8_BLOCK];
    unsigned char codes[QUANT8_BLOCK];
    for (int j = 0; j < QUANT8_BLOCK; j++) v[j] = j % 7 == 3 ? 0.0f : (float)pow(10.0, -30.0 * unit01(300, (uint64_t)j));
    v[0] = 1.0f;
    for (int fast = 0; fast < 2; fast++) {
        float am = fast ? quant8_block_quantize_fast(v, QUANT8_BLOCK, &ix[1], 0, codes) : quant8_block_quantize(v, QUANT8_BLOCK, um, 0, codes);
        quant8_block_dequantize(codes, QUANT8_BLOCK, am, um, y);
        for (int j = 0; j < QUANT8_BLOCK; j++, tried++) zero += (v[j] > 0.0f) != (y[j] > 0.0f);
    }
    char detail[160];
    snprintf(detail, sizeof detail, "%lld of %lld positive values read back as 0 (or 0 as positive)", zero, tried);
    report("quant8: a positive v never quantizes to the code of 0 (unsigned map); m still rounds to 0", ok && zero == 0, detail);
}

// ----------------------------------------------------------------------------
// configuration, segments, bytes

static void test_config_check(void) {
    char why[256];
    int ok = 1;
    struct { OptimKind kind; OptimStatePrecision st; int ams, nest; float mom, damp; const char* needle; } bad[] = {
        {OPT_SGD, OPT_STATE_BF16, 0, 0, 0.0f, 0.0f, "--opt-state bf16 with --optimizer sgd --momentum 0: plain SGD keeps no state"},
        {OPT_SGD, OPT_STATE_INT8, 0, 0, 0.0f, 0.0f, "--opt-state int8 with --optimizer sgd --momentum 0"},
        {OPT_LAMB, OPT_STATE_FP32, 1, 0, 0.0f, 0.0f, "--amsgrad"},
        {OPT_ADAMW, OPT_STATE_FP32, 0, 1, 0.0f, 0.0f, "--nesterov"},
        {OPT_SGD, OPT_STATE_FP32, 0, 1, 0.0f, 0.0f, "--nesterov needs --momentum"},
        {OPT_SGD, OPT_STATE_FP32, 0, 1, 0.9f, 0.1f, "--nesterov needs --momentum"},
        {OPT_LION, OPT_STATE_FP32, 0, 0, 0.9f, 0.0f, "--momentum"},
        {OPT_SGD, OPT_STATE_FP32, 0, 0, 1.5f, 0.0f, "--momentum 1.5"},
        {OPT_SGD, OPT_STATE_FP16, 0, 0, 0.9f, 0.0f, "--opt-state fp16 is AdamW's"},
        {OPT_LION, OPT_STATE_FP16, 0, 0, 0.0f, 0.0f, "--optimizer lion takes fp32, bf16, int8 or 4bit"},
        {OPT_LAMB, OPT_STATE_FP16, 0, 0, 0.0f, 0.0f, "--opt-state fp16 is AdamW's"},
        {OPT_SGD, OPT_STATE_4BIT, 0, 0, 0.0f, 0.0f, "--opt-state 4bit with --optimizer sgd --momentum 0"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        OptimConfig c = optim_config_default(bad[k].kind);
        c.state = bad[k].st;
        c.amsgrad = bad[k].ams;
        c.nesterov = bad[k].nest;
        c.momentum = bad[k].mom;
        c.dampening = bad[k].damp;
        int accepted = optim_config_check(&c, why, sizeof why);
        if (accepted || strstr(why, bad[k].needle) == NULL) {
            printf("    config %zu: %s: '%s'\n", k, accepted ? "accepted" : "message lacks the flag", why);
            ok = 0;
        }
    }
    OptimKind kinds[4] = {OPT_ADAMW, OPT_SGD, OPT_LAMB, OPT_LION};
    for (int k = 0; k < 4; k++) {
        OptimConfig c = optim_config_default(kinds[k]);
        ok &= optim_config_check(&c, why, sizeof why);
        for (int p = OPT_STATE_FP32; p <= OPT_STATE_INT8; p++) { // every precision of every optimizer with state
            c.state = (OptimStatePrecision)p;
            c.amsgrad = kinds[k] == OPT_ADAMW;
            c.nesterov = kinds[k] == OPT_SGD;
            ok &= optim_config_check(&c, why, sizeof why);
            c.amsgrad = c.nesterov = 0;
        }
        c.state = OPT_STATE_FP32;
        OptimKind back = OPT_ADAMW;
        ok &= optim_kind_parse(optim_kind_name(kinds[k]), &back) && back == kinds[k];
    }
    OptimStatePrecision sp = OPT_STATE_FP32;
    ok &= optim_precision_parse("int8", &sp) && sp == OPT_STATE_INT8 && optim_precision_parse("fp16", &sp) &&
          sp == OPT_STATE_FP16 && optim_precision_parse("4bit", &sp) && sp == OPT_STATE_4BIT && !optim_precision_parse("fp8", &sp);
    OptimKind kk = OPT_ADAMW;
    ok &= !optim_kind_parse("adam", &kk);
    report("config checks name the conflicting flags; names parse", ok, "");
}

// The per-layer segments of GPT-2 124M.
static int gpt2_segments(const char* desc, OptimSegment** segs, size_t* n) {
    GPT2Config c;
    if (!gpt2_config_from_descriptor(desc, &c)) ls_fatal("test_optim: --desc '%s' is not a model descriptor", desc);
    ParamTable pt;
    param_table_build(&pt, &c);
    int nseg = optim_segments_count_layers(&pt);
    *segs = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    int k = optim_segments_build_layers(&pt, 0.1f, *segs);
    if (k != nseg) ls_fatal("test_optim: %d segments built, %d counted", k, nseg);
    *n = pt.total;
    return nseg;
}

// The step plan (llmc/optim/views.h) against BAdam's rules written out, and a BAdam block's
// view through the engine against the per-slice AdamW the trainers run today (bits).
static void test_plan(void) {
    GPT2Config c;
    if (!gpt2_config_from_descriptor("L3C16H2", &c)) ls_fatal("test_optim: bad descriptor");
    ParamTable pt;
    param_table_build(&pt, &c);
    Badam bd;
    badam_init(&bd, &pt, 2, BADAM_ASCENDING, 1, 7); // K = 2, D = 4 (3 layers + embeddings)
    OptimRun run = {&pt, &bd}, off = {&pt, NULL};
    int ok = 1;
    for (int step = 0; step < 17; step++) {
        OptimPlan p = optim_plan_step(&run, step, step != 5);
        const int block = (step / 2) % 4;
        ok &= p.block == block && p.num_slices == (block < 3 ? 12 : 4);
        ok &= p.lowest_layer == (block < 3 ? block : 0) && p.opt_step == step % 2 + 1;
        ok &= p.reset == (step % 2 == 0 || step == 5);
        OptimPlan q = optim_plan_step(&off, step, step != 0);
        ok &= q.block == -1 && q.num_slices == 0 && q.lowest_layer == 0 && q.opt_step == step + 1 && q.reset == (step == 0);
    }
    report("step plan: BAdam block, slices, lowest layer, reset, step counter", ok, "");
    // block 1's view: compact, contiguous, the slices' places; its update == the per-slice AdamW
    OptimPlan p = optim_plan_step(&run, 2, 1);
    OptimSegment segs[BADAM_MAX_SLICES];
    size_t n_state;
    int nseg = optim_view_badam(&pt, p.slices, p.num_slices, 0.1f, segs, &n_state);
    int vok = n_state == badam_block_elems(&bd, &pt, 1) && nseg == p.num_slices;
    for (int k = 0; k < nseg; k++) vok &= segs[k].param == p.slices[k].offset && segs[k].offset == p.slices[k].compact;
    float* a = (float*)mallocCheck(pt.total * sizeof(float));
    float* b = (float*)mallocCheck(pt.total * sizeof(float));
    float* g = (float*)mallocCheck(n_state * sizeof(float));
    float* m = (float*)callocCheck(n_state, sizeof(float));
    float* v = (float*)callocCheck(n_state, sizeof(float));
    params_init_random(&pt, a, 42);
    memcpy(b, a, pt.total * sizeof(float));
    OptimConfig cfg = optim_config_default(OPT_ADAMW);
    OptimState st;
    optim_state_init(&st, &cfg, segs, nseg, n_state, NULL);
    for (int t = 1; t <= 3; t++) {
        for (size_t i = 0; i < n_state; i++) g[i] = (float)(1e-3 * normalish(9, (uint64_t)t * 1000003u + i));
        optim_step_cpu(&st, a, g, 1e-3f, t, 0.8f);
        for (int k = 0; k < p.num_slices; k++) { // the trainers' BAdam update today
            const BadamSlice* sl = &p.slices[k];
            const ParamTensor* tt = &pt.t[sl->tensor];
            OptimSegment one = optim_segment(0, sl->count, tt->decay ? 0.1f : 0.0f, tt->lr_mult, 0);
            adamw_update_cpu(b + sl->offset, g + sl->compact, m + sl->compact, v + sl->compact, &one, 1, &cfg, 1e-3f, t, 0.8f);
        }
    }
    long long d = count_diff_bits(a, b, pt.total * sizeof(float)) + count_diff_bits(st.m, m, n_state * sizeof(float));
    char detail[64];
    snprintf(detail, sizeof detail, "%lld bytes differ", d);
    report("BAdam block view through the engine == per-slice AdamW (bits)", vok && d == 0, detail);
    optim_state_free(&st);
    free(a); free(b); free(g); free(m); free(v);
    // where tables may be cut
    Problem pb = problem_mixed(); // tensor 2: [8, 4104), 4096 elements
    OptimConfig q8 = optim_config_default(OPT_ADAMW), lamb = optim_config_default(OPT_LAMB), sgd = optim_config_default(OPT_SGD);
    q8.state = OPT_STATE_INT8;
    int cok = optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&q8)) == 8 + OPT_BLOCK;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&lamb)) == 8 + 4096;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&sgd)) == 100;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 8, optim_cut_of(&lamb)) == 8;
    OptimConfig lion8 = optim_config_default(OPT_LION), lamb8 = lamb; // int8 state of any optimizer: blocks, LAMB's: tensors
    lion8.state = lamb8.state = OPT_STATE_INT8;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&lion8)) == 8 + OPT_BLOCK;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&lamb8)) == 8 + 4096;
    // Muon: its matrices whole, its other tensors as AdamW's (tensor 2 as a 64 x 64 matrix, then not)
    OptimConfig mu = optim_config_default(OPT_MUON), mu8 = mu, mu4 = mu;
    mu8.state = OPT_STATE_INT8;
    mu4.state = OPT_STATE_4BIT;
    pb.segs[2].mat_rows = pb.segs[2].mat_cols = 64;
    pb.segs[2].mat_parts = 1;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu)) == 8 + 4096;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu8)) == 8 + 4096;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu4)) == 8 + 4096;
    pb.segs[2].mat_rows = pb.segs[2].mat_cols = 0;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu)) == 100;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu8)) == 8 + OPT_BLOCK;
    cok &= optim_cut_snap(pb.segs, pb.nseg, 100, optim_cut_of(&mu4)) == 8 + 4096;  // (4-bit: v's scales, whole tensors)
    report("cut rules: int8 at blocks, LAMB at tensors, Muon around matrices, elementwise anywhere", cok, "");
}

// ZeRO-1's parts (llmc/optim/views.h optim_view_parts) over GPT-2 tables: equal shards for AdamW;
// for Muon from 0 to n, no matrix split, int8 cuts at their tensor's blocks, 4-bit at tensors, and
// each process's state (a matrix element weighs 1, any other 2: its m and v) within a matrix's
// weight plus an int8 block's of an equal share (4-bit: the largest tensor's weight).
static void test_zero_parts(void) {
    const char* descs[] = {"L12C768H12", "L2C16H2T16V512", "L4C128H4"};
    int ok = 1;
    double worst = 0.0, worst4 = 0.0;
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++) {
        OptimSegment* segs;
        size_t n;
        const int nseg = gpt2_segments(descs[d], &segs, &n);
        double total = 0.0, maxmat = 0.0, maxadam = 0.0;
        for (int s = 0; s < nseg; s++) {
            total += (segs[s].mat_rows ? 1.0 : 2.0) * (double)segs[s].count;
            if (segs[s].mat_rows && (double)segs[s].count > maxmat) maxmat = (double)segs[s].count;
            if (!segs[s].mat_rows && 2.0 * (double)segs[s].count > maxadam) maxadam = 2.0 * (double)segs[s].count;
        }
        for (int procs = 2; procs <= 8; procs++) {
            size_t parts[9];
            OptimConfig aw = optim_config_default(OPT_ADAMW);
            ok &= optim_view_parts(&aw, segs, nseg, n, procs, parts) == 1;
            for (int r = 0; r <= procs; r++) ok &= parts[r] == (size_t)r * zero_shard_elems(n, procs);
            for (int q = 0; q < 3; q++) {
                OptimConfig mu = optim_config_default(OPT_MUON);
                mu.state = q == 2 ? OPT_STATE_4BIT : q ? OPT_STATE_INT8 : OPT_STATE_FP32;
                ok &= optim_view_parts(&mu, segs, nseg, n, procs, parts) == 0;
                ok &= parts[0] == 0 && parts[procs] == n;
                for (int r = 0; r < procs; r++) {
                    ok &= parts[r] <= parts[r + 1];
                    double w = 0.0;
                    for (int s = 0; s < nseg; s++) {
                        const size_t a = segs[s].offset, b = a + segs[s].count;
                        const size_t lo = a > parts[r] ? a : parts[r], hi = b < parts[r + 1] ? b : parts[r + 1];
                        if (lo >= hi) continue;
                        w += (segs[s].mat_rows ? 1.0 : 2.0) * (double)(hi - lo);
                        if (segs[s].mat_rows) ok &= lo == a && hi == b;  // whole matrices
                        if (q == 1 && lo > a) ok &= (lo - a) % OPT_BLOCK == 0;  // int8: at its blocks
                        if (q == 2) ok &= lo == a && hi == b;                   // 4-bit: whole tensors
                    }
                    const double off = fabs(w - total / procs);
                    ok &= off <= (q == 2 ? (maxmat > maxadam ? maxmat : maxadam) : maxmat + 2.0 * OPT_BLOCK + 64.0);
                    double* w_of = q == 2 ? &worst4 : &worst;  // (GPT-2 124M)
                    if (d == 0 && off / (total / procs) > *w_of) *w_of = off / (total / procs);
                }
            }
        }
        free(segs);
    }
    char detail[128];
    snprintf(detail, sizeof detail, "GPT-2 124M, 2-8 processes: worst state %.2f%% off an equal share (4-bit: %.0f%%)",
             100.0 * worst, 100.0 * worst4);
    report("ZeRO-1 parts: AdamW equal shards; Muon whole matrices, int8 at blocks, 4-bit at tensors, the state shared", ok, detail);
}

// Adam-mini's ZeRO-1 parts: each cut at the start of a block of one v (checked from the blocks' own
// definition: the lead's multiples of mini_lead_block, then of mini_block), int8 also at its absmax
// blocks; each part within one block (int8: a few) of the equal shard.
static void test_zero_parts_mini(void) {
    const char* descs[] = {"L12C768H12", "L2C16H2T16V512", "L4C128H4"};
    int ok = 1;
    for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++) {
        OptimSegment* segs;
        size_t n;
        const int nseg = gpt2_segments(descs[d], &segs, &n);
        for (int procs = 2; procs <= 8; procs++) {
            for (int q = 0; q < 2; q++) {
                OptimConfig c = optim_config_default(OPT_ADAM_MINI);
                c.state = q ? OPT_STATE_INT8 : OPT_STATE_FP32;
                size_t parts[9];
                ok &= optim_view_parts(&c, segs, nseg, n, procs, parts) == 0 && parts[0] == 0 && parts[procs] == n;
                const size_t shard = zero_shard_elems(n, procs);
                for (int r = 1; r < procs; r++) {
                    ok &= parts[r] >= (size_t)r * shard && parts[r] - (size_t)r * shard <= (q ? 24 : 1) * 49152;
                    for (int s = 0; s < nseg; s++) {
                        const OptimSegment* g = &segs[s];
                        if (parts[r] <= g->offset || parts[r] >= g->offset + g->count) continue;
                        const size_t e = parts[r] - g->offset;  // (trel 0: whole-model segments)
                        ok &= e < g->mini_lead ? e % g->mini_lead_block == 0 : (e - g->mini_lead) % g->mini_block == 0;
                        if (q) ok &= e % OPT_BLOCK == 0;
                    }
                }
            }
        }
        free(segs);
    }
    report("ZeRO-1 parts: Adam-mini cut at whole blocks of one v (int8: and absmax blocks), near equal shards", ok, "");
}

typedef struct { const char* name; OptimConfig cfg; int bytes_moved; } Variant;

static int variants(Variant* v) {
    int k = 0;
    OptimConfig a = optim_config_default(OPT_ADAMW);
    v[k++] = (Variant){"adamw fp32", a, 28};
    a.amsgrad = 1;
    v[k++] = (Variant){"adamw fp32 amsgrad", a, 36};
    a.amsgrad = 0;
    a.state = OPT_STATE_BF16;
    v[k++] = (Variant){"adamw bf16 state", a, 20};
    a.amsgrad = 1;
    v[k++] = (Variant){"adamw bf16 state amsgrad", a, 24};
    a.amsgrad = 0;
    a.state = OPT_STATE_FP16;
    v[k++] = (Variant){"adamw fp16 state", a, 20};
    a.amsgrad = 1;
    v[k++] = (Variant){"adamw fp16 state amsgrad", a, 24};
    a.amsgrad = 0;
    a.state = OPT_STATE_INT8;
    v[k++] = (Variant){"adamw int8 state", a, 16};
    OptimConfig s = optim_config_default(OPT_SGD);
    v[k++] = (Variant){"sgd momentum", s, 20};
    s.nesterov = 1;
    v[k++] = (Variant){"sgd nesterov", s, 20};
    s.nesterov = 0;
    s.momentum = 0.0f;
    v[k++] = (Variant){"sgd (no momentum)", s, 12};
    v[k++] = (Variant){"lamb", optim_config_default(OPT_LAMB), 40};
    v[k++] = (Variant){"lion", optim_config_default(OPT_LION), 20};
    // bf16 and int8 state of the others (llmc/optim/update.h); int8 moves ~1 B + absmax per element
    a = optim_config_default(OPT_ADAMW);
    a.amsgrad = 1;
    a.state = OPT_STATE_INT8;
    v[k++] = (Variant){"adamw int8 state amsgrad", a, 18};
    for (int p = OPT_STATE_BF16; p <= OPT_STATE_INT8; p++) {
        const int b = p == OPT_STATE_BF16 ? 2 : 1;
        s = optim_config_default(OPT_SGD);
        s.state = (OptimStatePrecision)p;
        v[k++] = (Variant){p == OPT_STATE_BF16 ? "sgd momentum bf16 state" : "sgd momentum int8 state", s, 12 + 2 * b};
        s.nesterov = 1;
        v[k++] = (Variant){p == OPT_STATE_BF16 ? "sgd nesterov bf16 state" : "sgd nesterov int8 state", s, 12 + 2 * b};
        OptimConfig l = optim_config_default(OPT_LAMB);
        l.state = (OptimStatePrecision)p;
        v[k++] = (Variant){p == OPT_STATE_BF16 ? "lamb bf16 state" : "lamb int8 state", l, 24 + 6 * b};
        l = optim_config_default(OPT_LION);
        l.state = (OptimStatePrecision)p;
        v[k++] = (Variant){p == OPT_STATE_BF16 ? "lion bf16 state" : "lion int8 state", l, 12 + 2 * b};
    }
    // 4-bit state (llmc/optim/quant4.h): half a byte per value, counted as 1
    a = optim_config_default(OPT_ADAMW);
    a.state = OPT_STATE_4BIT;
    v[k++] = (Variant){"adamw 4bit state", a, 14};
    a.amsgrad = 1;
    v[k++] = (Variant){"adamw 4bit state amsgrad", a, 15};
    s = optim_config_default(OPT_SGD);
    s.state = OPT_STATE_4BIT;
    v[k++] = (Variant){"sgd momentum 4bit state", s, 13};
    s.nesterov = 1;
    v[k++] = (Variant){"sgd nesterov 4bit state", s, 13};
    OptimConfig l4 = optim_config_default(OPT_LION);
    l4.state = OPT_STATE_4BIT;
    v[k++] = (Variant){"lion 4bit state", l4, 13};
    l4 = optim_config_default(OPT_LAMB);
    l4.state = OPT_STATE_4BIT;
    v[k++] = (Variant){"lamb 4bit state", l4, 22};
    return k;
}

static void test_segments_and_bytes(void) {
    OptimSegment* segs;
    size_t n;
    int nseg = gpt2_segments("d12", &segs, &n);
    int ok = nseg == 4 + 12 * 12 && segs[0].offset == 0;
    size_t next = 0, small = 0;
    for (int s = 0; s < nseg; s++) {
        ok &= segs[s].offset == next;
        next += segs[s].count;
        if (segs[s].count < QUANT8_MIN_ELEMS) small += segs[s].count;
    }
    ok &= next == n;
    size_t block0[4 + 12 * 12 + 1];
    size_t nblocks = optim_blocks_build(segs, nseg, block0);
    Variant v[32];
    int nv = variants(v);
    const size_t want[] = {8 * n, 12 * n, 4 * n, 6 * n, 4 * n, 6 * n, 2 * n, 4 * n, 4 * n, 0, 8 * n, 4 * n,  // (fp16: as bf16)
                           3 * n,                                                  // adamw int8 amsgrad
                           2 * n, 2 * n, 4 * n, 2 * n, 1 * n, 1 * n, 2 * n, 1 * n,  // bf16, int8: sgd x2, lamb, lion
                           n, 3 * n / 2, n / 2, n / 2, n / 2, n};                   // 4bit: adamw, amsgrad, sgd x2, lion, lamb
    char detail[256] = "";
    for (int k = 0; k < nv; k++) {
        size_t b = optim_state_bytes(&v[k].cfg, segs, nseg, n);
        size_t extra = 0; // beyond the per-parameter arrays: what each layout adds, 64-byte aligned
        const OptimConfig* c = &v[k].cfg;
        const size_t moments = c->kind == OPT_SGD || c->kind == OPT_LION ? 1 : c->amsgrad ? 3 : 2; // int8: absmax, fp32 small
        if (c->state == OPT_STATE_INT8) extra = moments * 4 * (nblocks + small) + 4 * QUANT8_MAP_FLOATS;
        if (c->state == OPT_STATE_4BIT) {  // codes padded to whole blocks, m's group absmax, v's row and column scales
            size_t r1 = 0;
            for (int s = 0; s < nseg; s++) {
                if (segs[s].count >= QUANT8_MIN_ELEMS) r1 += optim_segment_rows(&segs[s]) + optim_segment_width(&segs[s]);
            }
            extra = moments * (nblocks * QUANT4_BLOCK_BYTES - n / 2 + 4 * small) + 4 * nblocks * QUANT4_GROUPS +
                    (moments - 1) * 2 * 4 * r1 + 4 * QUANT4_MAP_FLOATS;
        }
        if (c->kind == OPT_LAMB) extra += 8 * nblocks + 4 * (size_t)nseg;
        if (b < want[k] + extra || b > want[k] + extra + 64 * 16) {
            size_t len = strlen(detail);
            snprintf(detail + len, sizeof detail - len, "%s: %zu B, want %zu + %zu; ", v[k].name, b, want[k], extra);
            ok = 0;
        }
    }
    // a borrowed block is used, not freed
    Problem pb = problem_mixed();
    OptimConfig c = optim_config_default(OPT_LAMB);
    size_t bytes = optim_state_bytes(&c, pb.segs, pb.nseg, pb.n);
    void* mem = NULL;
    if (posix_memalign(&mem, 64, bytes) != 0) ls_fatal("posix_memalign failed");
    OptimState st;
    optim_state_init(&st, &c, pb.segs, pb.nseg, pb.n, mem);
    ok &= st.memory == mem && !st.owns_memory && st.bytes == bytes && (void*)st.m == mem;
    optim_state_free(&st);
    optim_state_free(&st); // a freed state frees nothing
    free(mem);
    report("segments per layer (148 for d12); state bytes = formula", ok, detail);
    free(segs);
}

// ----------------------------------------------------------------------------
// --run: the raw-file driver for dev/reference/optim_ref.py

static void run_usage(void) {
    fprintf(stderr,
            "usage: test_optim --run --optimizer adamw|sgd|lamb|lion|muon|adam-mini [--opt-state fp32|bf16|int8] [--amsgrad]\n"
            "         [--nesterov] [--momentum M] [--dampening D] [--beta1 B] [--beta2 B] [--eps E] --lr LR\n"
            "         [--muon-plain] [--muon-scale rms|orig] [--muon-joined] [--adamw-lr-mult X]\n"
            "         --steps S --segments COUNT:WD:LRMULT[:ROWS[:PARTS[:HEADS]]],... --in FILE --out FILE\n"
            "  ROWS: a Muon matrix of ROWS x COUNT/ROWS (PARTS stacked matrices, as qkv's 3); Adam-mini: v per\n"
            "  row, and with PARTS 3 and HEADS q and k per head (a vector: one v)\n"
            "  FILE in: n float32 parameters, then S x n float32 gradients (n = the sum of COUNTs)\n"
            "  FILE out: S x n float32, the parameters after each step\n"
            "       test_optim --ns ROWS COLS --in FILE --out FILE\n"
            "  Muon's Newton-Schulz of one ROWS x COLS float32 matrix (normalized, 5 quintic steps)\n");
    exit(2);
}

// --ns ROWS COLS --in F --out F: Newton-Schulz of one matrix (dev/reference/optim_ref.py's properties)
static int ns_main(int argc, char** argv) {
    if (argc != 8 || strcmp(argv[4], "--in") != 0 || strcmp(argv[6], "--out") != 0) run_usage();
    const long rows = atol(argv[2]), cols = atol(argv[3]);
    if (rows < 1 || cols < 1 || rows > 65536 || cols > 65536) ls_fatal("--ns %s %s: expected sizes in [1, 65536]", argv[2], argv[3]);
    const size_t n = (size_t)rows * (size_t)cols;
    OptimSegment seg = optim_segment(0, n, 0.0f, 1.0f, 0);
    seg.mat_rows = (size_t)rows;
    seg.mat_cols = (size_t)cols;
    seg.mat_parts = 1;
    float* u = (float*)mallocCheck(n * sizeof(float));
    float* scratch = (float*)mallocCheck(muon_scratch_floats(&seg, 1, 0) * sizeof(float));
    FILE* f = fopenCheck(argv[5], "rb");
    freadCheck(u, sizeof(float), n, f, argv[5]);
    fcloseCheck(f);
    muon_orthogonalize(blas_gemm, u, (size_t)rows, (size_t)cols, scratch);
    f = fopenCheck(argv[7], "wb");
    fwriteCheck(u, sizeof(float), n, f, argv[7]);
    fcloseCheck(f);
    free(u);
    free(scratch);
    return 0;
}

static int run_main(int argc, char** argv) {
    OptimKind kind = OPT_ADAMW;
    OptimStatePrecision state = OPT_STATE_FP32;
    int have_kind = 0, steps = 0, amsgrad = 0, nesterov = -1, muon_scale = MUON_SCALE_RMS, muon_joined = 0;
    float adamw_lr_mult = 1.0f;
    float lr = 0.0f;
    const char *in = NULL, *out = NULL, *segspec = NULL;
    float beta1 = NAN, beta2 = NAN, eps = NAN, momentum = NAN, dampening = 0.0f;
    for (int i = 2; i < argc; i++) {
        const char* a = argv[i];
        if (strcmp(a, "--amsgrad") == 0) { amsgrad = 1; continue; }
        if (strcmp(a, "--nesterov") == 0) { nesterov = 1; continue; }
        if (strcmp(a, "--muon-plain") == 0) { nesterov = 0; continue; }
        if (strcmp(a, "--muon-joined") == 0) { muon_joined = 1; continue; }
        if (i + 1 >= argc) run_usage();
        const char* val = argv[++i];
        if (strcmp(a, "--optimizer") == 0) {
            if (!optim_kind_parse(val, &kind)) ls_fatal("--optimizer '%s': expected adamw, sgd, lamb, lion, muon or adam-mini", val);
            have_kind = 1;
        } else if (strcmp(a, "--opt-state") == 0) {
            if (!optim_precision_parse(val, &state)) ls_fatal("--opt-state '%s': expected fp32, bf16 or int8", val);
        } else if (strcmp(a, "--momentum") == 0) momentum = strtof(val, NULL);
        else if (strcmp(a, "--dampening") == 0) dampening = strtof(val, NULL);
        else if (strcmp(a, "--adamw-lr-mult") == 0) adamw_lr_mult = strtof(val, NULL);
        else if (strcmp(a, "--muon-scale") == 0) {
            if (strcmp(val, "rms") != 0 && strcmp(val, "orig") != 0) ls_fatal("--muon-scale '%s': expected rms or orig", val);
            muon_scale = strcmp(val, "orig") == 0 ? MUON_SCALE_ORIG : MUON_SCALE_RMS;
        }
        else if (strcmp(a, "--beta1") == 0) beta1 = strtof(val, NULL);
        else if (strcmp(a, "--beta2") == 0) beta2 = strtof(val, NULL);
        else if (strcmp(a, "--eps") == 0) eps = strtof(val, NULL);
        else if (strcmp(a, "--lr") == 0) lr = strtof(val, NULL);
        else if (strcmp(a, "--steps") == 0) steps = atoi(val);
        else if (strcmp(a, "--segments") == 0) segspec = val;
        else if (strcmp(a, "--in") == 0) in = val;
        else if (strcmp(a, "--out") == 0) out = val;
        else run_usage();
    }
    if (!have_kind || !in || !out || !segspec || steps < 1 || steps > 1000) run_usage();
    OptimConfig c = optim_config_default(kind);
    c.state = state;
    c.amsgrad = amsgrad;
    if (nesterov >= 0) c.nesterov = nesterov;
    c.muon_scale = muon_scale;
    c.muon_qkv_joined = muon_joined;
    c.adamw_lr_mult = adamw_lr_mult;
    if (!isnan(beta1)) c.beta1 = beta1;
    if (!isnan(beta2)) c.beta2 = beta2;
    if (!isnan(eps)) c.eps = eps;
    if (!isnan(momentum)) c.momentum = momentum;
    c.dampening = dampening;
    char why[256];
    if (!optim_config_check(&c, why, sizeof why)) ls_fatal("%s", why);
    // segments "count:wd:lrmult,..."
    int cap = 16, nseg = 0;
    OptimSegment* segs = (OptimSegment*)mallocCheck((size_t)cap * sizeof(OptimSegment));
    size_t n = 0;
    for (const char* s = segspec; *s;) {
        char* end;
        unsigned long long cnt = strtoull(s, &end, 10);
        float wd = 0.0f, lm = 1.0f;
        unsigned long long rows = 0, parts = 1, heads = 0;
        if (*end == ':') wd = strtof(end + 1, &end);
        if (*end == ':') lm = strtof(end + 1, &end);
        if (*end == ':') rows = strtoull(end + 1, &end, 10);
        if (*end == ':') parts = strtoull(end + 1, &end, 10);
        if (*end == ':') heads = strtoull(end + 1, &end, 10);
        if (cnt == 0 || (*end != ',' && *end != '\0') || (rows > 0 && (cnt % rows != 0 || parts < 1 || rows % parts != 0)) ||
            (heads > 0 && (parts != 3 || (rows / parts) % heads != 0))) {
            ls_fatal("--segments '%s': expected COUNT:WD:LRMULT[:ROWS[:PARTS[:HEADS]]],... (ROWS dividing COUNT, PARTS "
                     "ROWS, HEADS a qkv part's rows)", segspec);
        }
        if (nseg == cap) { cap *= 2; segs = (OptimSegment*)realloc(segs, (size_t)cap * sizeof(OptimSegment)); if (!segs) ls_fatal("oom"); }
        segs[nseg] = optim_segment(n, (size_t)cnt, wd, lm, nseg);
        if (rows > 0) {
            segs[nseg].mat_rows = (size_t)rows;
            segs[nseg].mat_cols = (size_t)(cnt / rows);
            segs[nseg].mat_parts = (int)parts;
            segs[nseg].mini_block = (size_t)(cnt / rows);  // Adam-mini: rows, and q and k per head
            if (heads > 0) {
                segs[nseg].mini_lead = 2 * (size_t)(cnt / 3);
                segs[nseg].mini_lead_block = (size_t)(cnt / 3 / heads);
            }
        }
        nseg++;
        n += (size_t)cnt;
        s = *end == ',' ? end + 1 : end;
    }
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* g = (float*)mallocCheck((size_t)steps * n * sizeof(float));
    FILE* f = fopenCheck(in, "rb");
    freadCheck(p, sizeof(float), n, f, in);
    freadCheck(g, sizeof(float), (size_t)steps * n, f, in);
    fcloseCheck(f);
    OptimState st;
    optim_state_init(&st, &c, segs, nseg, n, NULL);
    st.gemm = blas_gemm;
    f = fopenCheck(out, "wb");
    for (int t = 1; t <= steps; t++) {
        optim_step_cpu(&st, p, g + (size_t)(t - 1) * n, lr, t, 1.0f);
        fwriteCheck(p, sizeof(float), n, f, out);
    }
    fcloseCheck(f);
    optim_state_free(&st);
    free(p);
    free(g);
    free(segs);
    return 0;
}

// ----------------------------------------------------------------------------
// --bench

static int bench_main(int argc, char** argv) {
    const char* desc = "d12";
    const char* only = "";
    int repeats = 5;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc) ls_fatal("test_optim --bench: %s needs a value (--desc D --repeats N --only WORD)", argv[i]);
        if (strcmp(argv[i], "--desc") == 0) desc = argv[++i];
        else if (strcmp(argv[i], "--repeats") == 0) repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--only") == 0) only = argv[++i];
        else ls_fatal("test_optim --bench: unknown flag %s (--desc D --repeats N --only WORD)", argv[i]);
    }
    if (repeats < 1 || repeats > 100) ls_fatal("test_optim --bench: --repeats must be in [1, 100]");
    OptimSegment* segs;
    size_t n;
    int nseg = gpt2_segments(desc, &segs, &n);
    float* p = (float*)mallocCheck(n * 4);
    float* g = (float*)mallocCheck(n * 4);
    float* m = (float*)mallocCheck(n * 4);
    float* v = (float*)mallocCheck(n * 4);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        p[i] = 0.01f * (float)(i % 101); g[i] = 0.001f * (float)(i % 37) - 0.018f; m[i] = 0.0f; v[i] = 0.0f;
    }
    double* t = (double*)mallocCheck((size_t)repeats * sizeof(double));
    for (int r = -1; r < repeats; r++) {
        double t0 = wall_seconds();
        probe_adamw_pattern(p, g, m, v, n, 0.999f);
        if (r >= 0) t[r] = wall_seconds() - t0;
    }
    const double t_probe = bench_median(t, repeats), probe_gbs = 28.0 * (double)n / t_probe / 1e9;
    free(m);
    free(v);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("test_optim --bench: %s, %zu parameters in %d tensors, %d threads, median of %d\n\n", desc, n, nseg, threads,
           repeats);
    printf("| optimizer | state B/param | moved B/param | ms | GB/s | %% of probe |\n|---|---|---|---|---|---|\n");
    printf("| probe (AdamW access pattern) | | 28 | %.1f | %.1f | 100%% |\n", 1e3 * t_probe, probe_gbs);
    Variant vs[32];
    int nv = variants(vs);
    for (int k = 0; k < nv; k++) {
        if (strstr(vs[k].name, only) == NULL) continue;
        OptimState st;
        optim_state_init(&st, &vs[k].cfg, segs, nseg, n, NULL);
        for (int r = -1; r < repeats; r++) {
            double t0 = wall_seconds();
            optim_step_cpu(&st, p, g, 1e-4f, r + 2, 1.0f);
            if (r >= 0) t[r] = wall_seconds() - t0;
        }
        double tm = bench_median(t, repeats), ms = 1e3 * tm, gbs = vs[k].bytes_moved * (double)n / tm / 1e9;
        printf("| %s | %.3f | %d | %.1f | %.1f | %.0f%% |\n", vs[k].name, (double)st.bytes / (double)n,
               vs[k].bytes_moved, ms, gbs, 100.0 * gbs / probe_gbs);
        optim_state_free(&st);
    }
    free(p);
    free(g);
    free(t);
    free(segs);
    return 0;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--run") == 0) return run_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--ns") == 0) return ns_main(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return bench_main(argc, argv);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0) g_quiet = 1;
        else if (strcmp(argv[i], "--units") != 0) {
            fprintf(stderr, "usage: test_optim [--units] [-q] | --run ... | --bench [--desc D] [--repeats N] [--only WORD]\n");
            return 2;
        }
    }
    if (!g_quiet) printf("test_optim: the CPU optimizer family (llmc/optim/optim.h, llmc/optim/state.h)\n");
    Variant vs[32];
    int nv = variants(vs);
    for (int k = 0; k < nv; k++) {
        if (vs[k].cfg.state == OPT_STATE_4BIT) test_quant4_vs_float64(&vs[k].cfg, 6);
        else test_vs_float64(&vs[k].cfg, 5, 1e-3f);
    }
    OptimConfig damp = optim_config_default(OPT_SGD);
    damp.dampening = 0.2f;
    test_vs_float64(&damp, 5, 1e-3f);
    for (int k = 0; k < nv; k++) test_bits(&vs[k].cfg);
    for (int k = 0; k < nv; k++) test_views(&vs[k].cfg);
    for (int prec = OPT_STATE_FP32; prec <= OPT_STATE_LAST; prec++) {  // Adam-mini's m at every storage
        OptimConfig mini = optim_config_default(OPT_ADAM_MINI);
        mini.state = (OptimStatePrecision)prec;
        if (prec != OPT_STATE_4BIT) test_vs_float64(&mini, 5, 1e-3f);
        test_bits(&mini);
        test_views(&mini);
    }
    test_fp16_bits();
    test_adamw_identities();
    test_plan();
    test_zero_parts();
    test_zero_parts_mini();
    test_lamb_edges();
    test_lion_sign();
    test_bf16_rounding();
    test_quant8();
    test_quant8_nonzero();
    test_config_check();
    test_segments_and_bytes();
    printf("test_optim: %s (%d failed)\n", g_failed ? "FAILED" : "all passed", g_failed);
    return g_failed ? 1 : 0;
}
