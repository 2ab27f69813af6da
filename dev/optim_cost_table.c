/*
 optim_cost_table.c: what each cell of the optimizer engine's matrix costs, in bytes of optimizer
 state per parameter of GPT-2 124M (d12), GPU and host, computed by the engine itself
 (train_options_optim_sizes: the sizes the trainers allocate and their memory models check).

   make optim-cost-table      (prints the Markdown table that docs/optimizers.md shows)

 Columns: the state on the device for one process; per process with ZeRO-1 over 2 and 8
 processes; with --badam 4 (the largest block's state; d12's largest block is the embeddings);
 with --offload (host: the whole state in pinned memory; GPU: two chunks of staging at the
 default --offload-chunk). Not in the table, the same for every optimizer: gradients (4 B/param
 fp32, 2 B bf16; BAdam: the block's), fp32 master weights of the bf16 build (4 B/param, indexed as
 the state: sharded by ZeRO-1, one block with BAdam, in host memory with --offload).
 A refused cell prints the refusal's reason.
*/
#include <stdio.h>
#include <string.h>
#include "llmc/run/train_options.h"

typedef struct {
    const char* name;
    int kind, state, amsgrad, nesterov;
    float momentum;
} Row;

static double per_param(size_t bytes, size_t n) { return (double)bytes / (double)n; }

static void cell(double v) { printf(" %.3f |", v); }

// ZeRO-1 over procs: the state of the process that holds the most.
static size_t zero_most_bytes(const TrainOptions* o, const GPT2Config* c, int procs) {
    size_t most = 0;
    for (int r = 0; r < procs; r++) {
        const size_t b = train_options_optim_sizes(o, c, r, procs).bytes;
        if (b > most) most = b;
    }
    return most;
}

int main(void) {
    GPT2Config c, c48;
    gpt2_config_from_descriptor("d12", &c);
    gpt2_config_from_descriptor("d48", &c48);
    const size_t n48 = gpt2_num_parameters(&c48);
    const size_t n = gpt2_num_parameters(&c);
    static const Row rows[] = {
        {"adamw", OPT_ADAMW, OPT_STATE_FP32, 0, 0, -1.0f},      {"adamw", OPT_ADAMW, OPT_STATE_BF16, 0, 0, -1.0f},
        {"adamw", OPT_ADAMW, OPT_STATE_INT8, 0, 0, -1.0f},      {"adamw", OPT_ADAMW, OPT_STATE_FP16, 0, 0, -1.0f},
        {"adamw + amsgrad", OPT_ADAMW, OPT_STATE_FP32, 1, 0, -1.0f},
        {"adamw + amsgrad", OPT_ADAMW, OPT_STATE_BF16, 1, 0, -1.0f}, {"adamw + amsgrad", OPT_ADAMW, OPT_STATE_INT8, 1, 0, -1.0f},
        {"adamw + amsgrad", OPT_ADAMW, OPT_STATE_FP16, 1, 0, -1.0f},
        {"sgd (momentum 0.9)", OPT_SGD, OPT_STATE_FP32, 0, 0, -1.0f}, {"sgd (momentum 0.9)", OPT_SGD, OPT_STATE_BF16, 0, 0, -1.0f},
        {"sgd (momentum 0.9)", OPT_SGD, OPT_STATE_INT8, 0, 0, -1.0f}, {"sgd + nesterov", OPT_SGD, OPT_STATE_FP32, 0, 1, -1.0f},
        {"sgd (momentum 0)", OPT_SGD, OPT_STATE_FP32, 0, 0, 0.0f},   {"sgd (momentum 0)", OPT_SGD, OPT_STATE_INT8, 0, 0, 0.0f},
        {"lamb", OPT_LAMB, OPT_STATE_FP32, 0, 0, -1.0f},
        {"lamb", OPT_LAMB, OPT_STATE_BF16, 0, 0, -1.0f},        {"lamb", OPT_LAMB, OPT_STATE_INT8, 0, 0, -1.0f},
        {"lion", OPT_LION, OPT_STATE_FP32, 0, 0, -1.0f},        {"lion", OPT_LION, OPT_STATE_BF16, 0, 0, -1.0f},
        {"lion", OPT_LION, OPT_STATE_INT8, 0, 0, -1.0f},        {"lion", OPT_LION, OPT_STATE_FP16, 0, 0, -1.0f},
        {"muon", OPT_MUON, OPT_STATE_FP32, 0, 1, -1.0f},        {"muon", OPT_MUON, OPT_STATE_BF16, 0, 1, -1.0f},
        {"muon", OPT_MUON, OPT_STATE_INT8, 0, 1, -1.0f},
        {"adamw", OPT_ADAMW, OPT_STATE_4BIT, 0, 0, -1.0f},      {"adamw + amsgrad", OPT_ADAMW, OPT_STATE_4BIT, 1, 0, -1.0f},
        {"sgd (momentum 0.9)", OPT_SGD, OPT_STATE_4BIT, 0, 0, -1.0f}, {"lion", OPT_LION, OPT_STATE_4BIT, 0, 0, -1.0f},
        {"lamb", OPT_LAMB, OPT_STATE_4BIT, 0, 0, -1.0f},        {"muon", OPT_MUON, OPT_STATE_4BIT, 0, 1, -1.0f},
        {"adam-mini", OPT_ADAM_MINI, OPT_STATE_FP32, 0, 0, -1.0f}, {"adam-mini", OPT_ADAM_MINI, OPT_STATE_BF16, 0, 0, -1.0f},
        {"adam-mini", OPT_ADAM_MINI, OPT_STATE_INT8, 0, 0, -1.0f}, {"adam-mini", OPT_ADAM_MINI, OPT_STATE_4BIT, 0, 0, -1.0f},
    };
    printf("| optimizer | state | GPU, 1 process | d48: GPU, 1 process | -z 1, per process of 2 | -z 1, per process of 8 | --badam 4 | --offload: host | --offload: GPU staging |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const Row* r = &rows[i];
        TrainOptions o;
        train_options_defaults(&o);
        o.optimizer = r->kind;
        o.opt_state = r->state;
        o.amsgrad = r->amsgrad;
        o.nesterov = r->nesterov;
        o.momentum = r->momentum;
        if (r->kind == OPT_LION) { o.beta2 = 0.99f; }
        printf("| %s | %s |", r->name, optim_precision_choices[r->state]);
        OptimConfig cfg = optim_config_default((OptimKind)r->kind);
        cfg.state = (OptimStatePrecision)r->state;
        cfg.amsgrad = r->amsgrad;
        cfg.nesterov = r->nesterov;
        if (r->momentum >= 0.0f) { cfg.momentum = r->momentum; }
        char why[256];
        if (!optim_config_check(&cfg, why, sizeof(why))) {
            printf(" refused: %s | | | | | | |\n", why);
            continue;
        }
        OptimSizes one = train_options_optim_sizes(&o, &c, 0, 1);
        cell(per_param(one.bytes, n));
        cell(per_param(train_options_optim_sizes(&o, &c48, 0, 1).bytes, n48));
        o.zero_stage = 1;  // the largest process's state (Muon's parts hold whole matrices: they differ)
        cell(per_param(zero_most_bytes(&o, &c, 2), n));
        cell(per_param(zero_most_bytes(&o, &c, 8), n));
        o.zero_stage = 0;
        o.badam = 4;
        cell(per_param(train_options_optim_sizes(&o, &c, 0, 1).bytes, n));
        o.badam = 0;
        o.offload = 1;
        OptimSizes off = train_options_optim_sizes(&o, &c, 0, 1);
        cell(per_param(off.bytes, n));
        printf(" %.1f MiB |\n", 2.0 * (double)off.stage_bytes / (1024.0 * 1024.0));
    }
    printf("\nGPT-2 124M (d12), %zu parameters (d48: GPT-2 1.5B, %zu); bytes of optimizer state per parameter of the model (Muon: its\n"
           "Newton-Schulz scratch aside: 0.27 B/param on the CPU, the largest batched piece on the GPU); -z 1: the\n"
           "process that holds the most (Muon's parts hold whole matrices; int8's and 4bit's small tensors stay fp32).\n"
           "Adam-mini: its parts and offload chunks cut around whole blocks (int8: also whole absmax blocks; 4bit: whole\n"
           "tensors).\n", n, n48);
    // Muon's GPU cost on paper: its Newton-Schulz FLOPs against a training step's at llm.c's batch
    // (-d 524288 tokens; 6 N + 12 L T C per token: the matmuls forward and backward, and attention)
    ParamTable pt;
    param_table_build(&pt, &c);
    const int nseg = optim_segments_count_layers(&pt);
    OptimSegment* segs = (OptimSegment*)mallocCheck((size_t)nseg * sizeof(OptimSegment));
    optim_segments_build_layers(&pt, 0.0f, segs);
    const double ns = muon_table_ns_flops(segs, nseg, 0), ns_joined = muon_table_ns_flops(segs, nseg, 1);
    const double step = 524288.0 * (6.0 * (double)n + 12.0 * c.num_layers * (double)c.max_seq_len * c.channels);
    printf("Muon's Newton-Schulz: %.2f TFLOP per optimizer step (--muon-qkv joined: %.2f), %.2f%% of a training\n"
           "step's %.0f TFLOP at -d 524288 (T = %d).\n", ns / 1e12, ns_joined / 1e12, 100.0 * ns / step, step / 1e12,
           c.max_seq_len);
    free(segs);
    return 0;
}
