/*
 trainer.h: what each trainer (train_gpt2.c, train_gpt2.cu) provides to the shared run code
 (llmc/run/run.h) and to the tests (test_gpt2.c, test_gpt2.cu). The trainer includes this file
 before its own definitions, so the compiler checks every definition against these declarations
 (a different signature is an error, a missing one that is used an undefined reference). They are
 LS_UNUSED: a program that includes a trainer for a part of it (a test, a benchmark) need not
 call them all. Each
 trainer defines `struct GPT2` (with .config, .num_parameters, .B, .T and .mem, what it allocated)
 and TRAINER_FLAGS (CLI_CPU or CLI_GPU) and TRAINER_SUMMARY (the --help line), then includes
 llmc/run/run.h and writes its main, the training loop itself.

 One training step, as both mains write it (step counts from 0, the update's t from 1):
   gpt2_begin_step -> accum x (gpt2_forward_train, gpt2_backward) -> gpt2_grad_norm ->
   gpt2_loss_sum -> gpt2_update
*/
#ifndef LLMC_RUN_TRAINER_H
#define LLMC_RUN_TRAINER_H

#include <stddef.h>
#include <stdint.h>
#include "llmc/config.h"
#include "llmc/io/checkpoint.h"
#include "llmc/optim/optim.h"
#include "llmc/run/memory.h"
#include "llmc/run/train_options.h"
#include "llmc/utils.h"

typedef struct GPT2 GPT2;

// ----------------------------------------------------------------------------
// the model

// Builds the model from a model file or a descriptor (random init from seed) and allocates
// everything for batches up to (B, T): parameters, gradients, optimizer state, activations.
static LS_UNUSED void gpt2_build(GPT2* model, const char* model_or_descriptor, uint64_t seed, int B, int T, const TrainOptions* opts);
static LS_UNUSED void gpt2_free(GPT2* model);
// Forward pass on host token arrays (B, T); targets may be NULL. Returns the mean loss (-1 without
// targets); the logits of (b = 0, t) are then gpt2_logits_row(model, t), host fp32.
static LS_UNUSED float gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T);
static LS_UNUSED const float* gpt2_logits_row(GPT2* model, int t);
// After gpt2_forward with targets: the loss of each position, (B, T) of that call, host fp32.
static LS_UNUSED const float* gpt2_token_losses(GPT2* model);
// The shape (*Bp, *Tp) >= (B, T), within the model's, at which a forward pass outside training
// (sampling, HellaSwag) should run a batch of (B, T): (B, T) itself, or a padded shape from a small
// set where each new shape costs (the GPU trainer's cuDNN graphs). The caller fills the positions
// beyond its own with valid tokens; causal attention keeps them from its own, whose logits and
// losses are then at b * Tp + t.
static LS_UNUSED void gpt2_eval_shape(const GPT2* model, int B, int T, int* Bp, int* Tp);

// ----------------------------------------------------------------------------
// one training step

// Start of training step `step` (from 0): zero the gradients, choose what trains (BAdam).
static LS_UNUSED void gpt2_begin_step(GPT2* model, int step);
// The forward pass of a training micro-step, before gpt2_backward with the same loss_scale (the
// GPU trainer writes the loss and the dlogits in one pass and does not wait for the device).
static LS_UNUSED void gpt2_forward_train(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale);
// Adds the gradient of (mean loss * loss_scale) to the parameter gradients.
static LS_UNUSED void gpt2_backward(GPT2* model, const int* inputs, const int* targets, int B, int T, float loss_scale);
// The sum of the mean losses of the gpt2_forward_train calls since gpt2_begin_step (may wait for
// the device: call it late).
static LS_UNUSED double gpt2_loss_sum(GPT2* model);
// Reduces the gradients over the processes and returns their global norm before clipping, with
// inv_loss_scale (loss scaling's 1/S, llmc/run/loss_scale.h; 1: none) divided out (and folded
// into the update's scale); nothing changes yet (the loop may skip the update).
static LS_UNUSED float gpt2_grad_norm(GPT2* model, float grad_clip, float inv_loss_scale);
// Clips with that norm (to grad_clip, 0: off) and updates with learning rate lr (the optimizer's
// other hyperparameters were set at gpt2_build, from the options); `step` counts from 1.
static LS_UNUSED void gpt2_update(GPT2* model, float lr, int step);
// Testing (--inject-nan): makes the gradients NaN after a backward pass.
static LS_UNUSED void gpt2_poison_grads(GPT2* model);

// ----------------------------------------------------------------------------
// checkpoints

static LS_UNUSED void gpt2_checkpoint_write(GPT2* model, const char* model_path, const char* state_path, const RunState* rs);
static LS_UNUSED void gpt2_state_read(GPT2* model, const char* state_path, RunState* rs);

// ----------------------------------------------------------------------------
// the trainer's side of a run

// Its defaults where they differ from train_options_defaults (e.g. the CPU trainer's T = 64).
static LS_UNUSED void trainer_defaults(TrainOptions* o);
// After the flags: threads, the device; with several processes it may install a Comm backend
// (o->comm->ops) for the run's collectives.
static LS_UNUSED void trainer_init(const TrainOptions* o);
// The predicted memory table (--memory-report: no allocation).
static LS_UNUSED void trainer_memory_report(const GPT2Config* c, const TrainOptions* o);
// The start-up banner and memory table of a built model.
static LS_UNUSED void trainer_describe(const GPT2* model, const TrainOptions* o, int accum);
// Text for the step line before tok/s, e.g. " 45.1% bf16 MFU |" (or "").
static LS_UNUSED void trainer_step_extra(const GPT2* model, const TrainOptions* o, double tok_per_s, char* buf, size_t len);
// --profile: begin = 1 before the profiled step, 0 after it (prints the table); a no-op where
// there is no --profile.
static LS_UNUSED void trainer_profile(GPT2* model, const TrainOptions* o, int begin);

#endif // LLMC_RUN_TRAINER_H
