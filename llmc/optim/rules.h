/*
 rules.h: the optimizer's update rules, each one element's (p, g, state) in fp32, and the
 hyperparameters they read. Plain C that nvcc and the CPU harness compile too: the CPU loops
 (llmc/optim/update.h) and the GPU kernels (llmc/optim/update.cuh) call these same functions, with
 the state loaded and stored by llmc/optim/storage.h, so a CPU step and a GPU step give the same bits.
 Explicit fmaf wherever a rule fuses (the build has -ffp-contract=off; nvcc's division and sqrtf
 are IEEE-rounded), so no compiler chooses what to fuse.

 With t = step (1, 2, ...), g the clipped gradient, lr this step's rate times the tensor's lr_mult,
 wd the tensor's weight decay (decoupled for every rule: p -= lr * wd * p, never added to g):
   AdamW   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
           p -= lr ((m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd p)
           AMSGrad: vmax = max(vmax, v) divides instead of v (torch.optim.AdamW(amsgrad=True))
   SGD     buf = g at step 1, else mu buf + (1 - dampening) g;  d = nesterov ? g + mu buf : buf
           (momentum 0: d = g, no state);  p -= lr (d + wd p)   (torch.optim.SGD)
   Lion    c = b1 m + (1 - b1) g;  p -= lr (sign(c) + wd p);  m = b2 m + (1 - b2) g   (Chen et al. 2023)
   Adam-mini  AdamW with one v per block of the tensor (its rows, heads: llmc/params.h), from the
           block's mean of g^2: v_b = b2 v_b + (1 - b2) mean_b(g^2) (Zhang et al. 2024; the mean's
           fixed-order sum: llmc/optim/update.h)
   LAMB    AdamW's moments; u = m^ / (sqrt(v^) + eps) + wd p;  p -= lr trust u, trust = |p| / |u| per
           tensor (You et al. 2019; the sums: llmc/optim/update.h)
   Muon    B = mu B + g;  U = g + mu B (Nesterov) or B; orthogonalized per matrix (llmc/optim/muon.h);
           p = p (1 - lr wd) - lr s U
 The bias corrections and 1 - beta are computed once per step (optim_step_args): with -O3 a powf
 inside the loop is not hoisted (errno), and the loop runs ~25x slower.
*/
#ifndef LLMC_OPTIM_RULES_H
#define LLMC_OPTIM_RULES_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#include "llmc/optim/srng.h"
#include "llmc/optim/storage.h"

typedef enum { OPT_ADAMW = 0, OPT_SGD = 1, OPT_LAMB = 2, OPT_LION = 3, OPT_MUON = 4, OPT_ADAM_MINI = 5 } OptimKind;
#define OPT_KIND_LAST OPT_ADAM_MINI
#define MUON_SCALE_RMS 0   // Muon's shape scale 0.2 sqrt(max(rows, cols)) (llmc/optim/muon.h)
#define MUON_SCALE_ORIG 1  // sqrt(max(1, rows / cols))

// The hyperparameters of a run: set once, never changed by a step (lr, the schedule's, is given per
// step; weight decay and lr multipliers come from the segments; the gradient scale from the clip).
typedef struct {
    OptimKind kind;
    OptimStatePrecision state;   // storage of every state value (llmc/optim/storage.h)
    float beta1, beta2, eps;   // AdamW, LAMB: moment decay rates, eps; Lion: beta1 interpolates the
                               // update, beta2 the momentum (eps unused)
    float momentum, dampening; // SGD (momentum 0: plain SGD, no state); Muon's momentum (no dampening)
    int nesterov;              // SGD, Muon: Nesterov momentum (needs momentum > 0, dampening 0)
    int muon_scale;            // Muon: MUON_SCALE_RMS or MUON_SCALE_ORIG
    int muon_qkv_joined;       // Muon: qkv orthogonalized as one (3C x C) matrix (0: q, k, v apart)
    float adamw_lr_mult;       // Muon: the AdamW tensors' learning rate over the matrices'
    int amsgrad;               // AdamW: divide by the running max of v
    unsigned long long seed;   // stochastic rounding (16-bit state; bf16 params on the GPU)
} OptimConfig;

// The state values each element keeps (0 .. OPT_SLOTS): m, v, vmax in slot order.
static inline int optim_slots(const OptimConfig* c) {
    switch (c->kind) {
        case OPT_ADAMW: return c->amsgrad ? 3 : 2;
        case OPT_LAMB: return 2;
        case OPT_SGD: return c->momentum != 0.0f ? 1 : 0;
        case OPT_LION:
        case OPT_MUON:       // (Muon's AdamW tensors: v too, llmc/optim/muon.h)
        case OPT_ADAM_MINI:  // (its v per block: OptimState.vmini)
            return 1;
    }
    return 0;
}

// Per-step scalars, computed once on the host from the configuration and the step (a plain struct:
// a kernel argument). lr is this step's, before the segment's lr_mult.
typedef struct {
    float lr;
    float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float inv_bias_corr1, inv_bias_corr2;   // 1 / (1 - beta^t): AdamW, LAMB
    float momentum, one_minus_dampening;    // SGD, Muon
    int first_step;                         // SGD: the momentum buffer starts as g (PyTorch)
    unsigned long long rng_key;             // srng_step_key(seed, step)
} OptimStepArgs;

static inline OptimStepArgs optim_step_args(const OptimConfig* c, float lr, int step) {
    OptimStepArgs a;
    a.lr = lr;
    a.beta1 = c->beta1;
    a.beta2 = c->beta2;
    a.one_minus_beta1 = 1.0f - c->beta1;
    a.one_minus_beta2 = 1.0f - c->beta2;
    a.eps = c->eps;
    a.inv_bias_corr1 = 1.0f / (1.0f - powf(c->beta1, (float)step));
    a.inv_bias_corr2 = 1.0f / (1.0f - powf(c->beta2, (float)step));
    a.momentum = c->momentum;
    a.one_minus_dampening = 1.0f - c->dampening;
    a.first_step = step == 1;
    a.rng_key = srng_step_key(c->seed, step);
    return a;
}

// ----------------------------------------------------------------------------
// AdamW (and LAMB's moments and direction)

// The new second moment from v and the clipped gradient g (4-bit state computes it twice: its
// scales first, llmc/optim/update.h).
OPTIM_HD float rule_adam_v(float g, float v, const OptimStepArgs* a) { return fmaf(a->beta2, v, (a->one_minus_beta2 * g) * g); }

// m, v in place from the clipped gradient g.
OPTIM_HD void rule_adam_moments(float g, float* m, float* v, const OptimStepArgs* a) {
    *m = fmaf(a->beta1, *m, a->one_minus_beta1 * g);
    *v = rule_adam_v(g, *v, a);
}

// AMSGrad's new vmax from the new v. As a compare (it vectorizes, fmaxf does not): v, vmax >= +0,
// and a NaN v keeps vmax, never NaN.
OPTIM_HD float rule_vmax(float v, float vmax) { return v > vmax ? v : vmax; }

// The direction m^ / (sqrt(v^) + eps) + wd p (LAMB's u too).
OPTIM_HD float rule_adam_direction(float p, float m, float v, float wd, const OptimStepArgs* a) {
    const float upd = (m * a->inv_bias_corr1) / (sqrtf(v * a->inv_bias_corr2) + a->eps);
    return fmaf(wd, p, upd);
}

// One AdamW element: m, v in place; returns the new p.
OPTIM_HD float rule_adamw(float p, float g, float* m, float* v, float lr, float wd, const OptimStepArgs* a) {
    rule_adam_moments(g, m, v, a);
    return fmaf(-lr, rule_adam_direction(p, *m, *v, wd, a), p);
}

// AMSGrad: AdamW dividing by vmax = max(vmax, v) (rule_vmax), all three in place; returns the new p.
OPTIM_HD float rule_amsgrad(float p, float g, float* m, float* v, float* vmax, float lr, float wd,
                            const OptimStepArgs* a) {
    rule_adam_moments(g, m, v, a);
    const float d = rule_vmax(*v, *vmax);
    *vmax = d;
    return fmaf(-lr, rule_adam_direction(p, *m, d, wd, a), p);
}

// Adam-mini: a block's new v from its mean of g^2; then each element's AdamW step with the block's v
// (m in place; returns the new p).
OPTIM_HD float rule_adam_mini_v(float mean_g2, float v, const OptimStepArgs* a) {
    return fmaf(a->beta2, v, a->one_minus_beta2 * mean_g2);
}
OPTIM_HD float rule_adam_mini(float p, float g, float* m, float v, float lr, float wd, const OptimStepArgs* a) {
    *m = fmaf(a->beta1, *m, a->one_minus_beta1 * g);
    return fmaf(-lr, rule_adam_direction(p, *m, v, wd, a), p);
}

// ----------------------------------------------------------------------------
// SGD, Lion

// SGD with momentum: buf in place (g itself at the first step, as PyTorch); returns the new p.
OPTIM_HD float rule_sgd(float p, float g, float* buf, int nesterov, float lr, float wd, const OptimStepArgs* a) {
    const float b = a->first_step ? g : fmaf(a->momentum, *buf, a->one_minus_dampening * g);
    *buf = b;
    const float d = nesterov ? fmaf(a->momentum, b, g) : b;
    return fmaf(-lr, fmaf(wd, p, d), p);
}

// SGD without momentum (no state).
OPTIM_HD float rule_sgd_plain(float p, float g, float lr, float wd) { return fmaf(-lr, fmaf(wd, p, g), p); }

// sign(c) as Lion uses it: +-1, and 0 (or NaN) passed through.
OPTIM_HD float rule_sign(float c) { return c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c); }

// Lion: m in place; returns the new p.
OPTIM_HD float rule_lion(float p, float g, float* m, float lr, float wd, const OptimStepArgs* a) {
    const float c = fmaf(a->beta1, *m, a->one_minus_beta1 * g);
    *m = fmaf(a->beta2, *m, a->one_minus_beta2 * g);
    return fmaf(-lr, fmaf(wd, p, rule_sign(c)), p);
}

// ----------------------------------------------------------------------------
// LAMB's update (its moments: rule_adam_moments), Muon's momentum and update

// step_lr: lr * lr_mult * the tensor's trust ratio.
OPTIM_HD float rule_lamb_apply(float p, float m, float v, float step_lr, float wd, const OptimStepArgs* a) {
    return fmaf(-step_lr, rule_adam_direction(p, m, v, wd, a), p);
}

// The trust ratio of a tensor from its sums of squares of p and u.
OPTIM_HD float rule_lamb_trust(double sum_p2, double sum_u2) {
    const double pn = sqrt(sum_p2), un = sqrt(sum_u2);
    return (pn > 0.0 && un > 0.0) ? (float)(pn / un) : 1.0f;
}

// Muon's momentum B in place; returns the direction U (Nesterov: from the unrounded B).
OPTIM_HD float rule_muon_momentum(float g, float* b, int nesterov, const OptimStepArgs* a) {
    const float nb = fmaf(a->momentum, *b, g);
    *b = nb;
    return nesterov ? fmaf(a->momentum, nb, g) : nb;
}

// Muon's update of p from the orthogonalized direction x: step = lr * the shape scale, keep = 1 - lr wd.
OPTIM_HD float rule_muon_apply(float p, float x, float step, float keep) { return fmaf(-step, x, p * keep); }

#endif // LLMC_OPTIM_RULES_H
