/*
 schedulers.h: learning-rate schedules, shared by both trainers.

 All start with a linear warmup lr*(step+1)/warmup over `warmup` steps, then:
   cosine    decay from lr to lr*final_frac along half a cosine until the last step
   linear    decay from lr to lr*final_frac linearly
   constant  stay at lr
   wsd       warmup-stable-decay: stay at lr, then over the last 20% of the steps cool down
             to lr*final_frac with the 1-sqrt shape (Hägele et al. 2024)
 `step` counts from 0; `total` is the number of steps of the run.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

typedef enum { LR_COSINE = 0, LR_LINEAR, LR_CONSTANT, LR_WSD } LrScheduleType;

static const char* const lr_schedule_names[] = {"cosine", "linear", "constant", "wsd"};
#define LR_SCHEDULE_COUNT 4

typedef struct {
    LrScheduleType type;
    float lr;          // peak learning rate
    float final_frac;  // final lr = lr * final_frac
    int warmup;        // warmup steps
    int total;         // total steps of the run
} LrSchedule;

// Returns the schedule type named `name`, or -1.
static inline int lr_schedule_parse(const char* name) {
    for (int i = 0; i < LR_SCHEDULE_COUNT; i++) {
        if (strcmp(name, lr_schedule_names[i]) == 0) { return i; }
    }
    return -1;
}

static inline float lr_schedule_get(const LrSchedule* s, int step) {
    float lr = s->lr, lr_min = s->lr * s->final_frac;
    if (step < s->warmup) { return lr * (float)(step + 1) / (float)s->warmup; }
    int span = s->total - s->warmup;  // steps after warmup
    if (span <= 1) { return s->type == LR_CONSTANT ? lr : lr_min; }
    float progress = (float)(step - s->warmup) / (float)(span - 1);  // 0 .. 1
    if (progress > 1.0f) { progress = 1.0f; }
    switch (s->type) {
        case LR_COSINE: return lr_min + 0.5f * (1.0f + cosf((float)M_PI * progress)) * (lr - lr_min);
        case LR_LINEAR: return lr - progress * (lr - lr_min);
        case LR_CONSTANT: return lr;
        case LR_WSD: {
            int decay_steps = (int)(0.2f * (float)s->total);
            int decay_start = s->total - decay_steps;
            if (decay_steps < 1 || step < decay_start) { return lr; }
            float d = (float)(step - decay_start + 1) / (float)decay_steps;  // (0, 1]
            return lr_min + (1.0f - sqrtf(d)) * (lr - lr_min);
        }
    }
    return lr;
}

#endif // LLMC_SCHEDULERS_H
