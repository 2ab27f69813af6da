/*
 loss_scale.h: loss scaling, the training loop's side (both trainers; the FP16 build needs it, the
 others may use it). The loss's gradient is multiplied by the scale S before the backward pass, so
 that small gradients survive a narrow format; the gradient norm and the update see the gradients
 divided by S again (the trainers fold 1/S into the norm and the clip scale: no extra pass).

 Dynamic scaling (--loss-scale S, the starting scale, with --loss-scale-window W):
   - a step whose scaled gradients are not finite (an overflow) is skipped: no update, the
     parameters and the optimizer state stay as they were, and S halves;
   - after W steps in a row without an overflow, S doubles (up to LOSS_SCALE_MAX);
   - S below LOSS_SCALE_MIN means the gradients are not finite at any scale: the run stops.
 A static scale (--loss-scale-window 0) never changes; its overflows are skipped all the same.
 --loss-scale 0 (the default in the fp32 and bf16 builds) is off: S = 1, nothing changes.
 The scale and the count of good steps are saved in the state file (llmc/io/checkpoint.h), so a
 resumed run continues with them.
*/
#ifndef LLMC_LOSS_SCALE_H
#define LLMC_LOSS_SCALE_H

#include <math.h>

#define LOSS_SCALE_MAX 16777216.0f   // 2^24
#define LOSS_SCALE_MIN (1.0f / 16777216.0f)

typedef struct {
    int on;          // 0: off (scale 1)
    float scale;     // S, a power of two when it started as one
    int window;      // W: good steps before S doubles (0: a static scale)
    int good;        // good steps since the last change of S
    int overflows;   // steps skipped for an overflow, in all
} LossScale;

static inline void loss_scale_init(LossScale* ls, float scale, int window) {
    ls->on = scale > 0.0f;
    ls->scale = ls->on ? scale : 1.0f;
    ls->window = window;
    ls->good = 0;
    ls->overflows = 0;
}

// After the step's gradient norm (of the unscaled gradients: the trainer divided by S): returns 1
// when the step overflowed (a norm that is not finite while the loss is), after halving S; else
// counts the good step and doubles S after W of them. Returns -1 when S fell below LOSS_SCALE_MIN.
static inline int loss_scale_step(LossScale* ls, double loss, float norm) {
    if (!ls->on) return 0;
    if (!isfinite(norm) && isfinite(loss)) {
        ls->overflows++;
        ls->good = 0;
        if (ls->window > 0) ls->scale *= 0.5f;
        return ls->scale < LOSS_SCALE_MIN ? -1 : 1;
    }
    if (ls->window > 0 && ++ls->good >= ls->window) {
        ls->good = 0;
        if (ls->scale * 2.0f <= LOSS_SCALE_MAX) ls->scale *= 2.0f;
    }
    return 0;
}

#endif // LLMC_LOSS_SCALE_H
