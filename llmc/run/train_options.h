/*
 train_options.h: the trainers' options and their one flag table (llm.c's train_gpt2cu flags
 with the same meaning, plus long options for the rest). Both trainers parse with this table;
 a trainer sets its own defaults before parsing (the CPU trainer defaults to T = 64).
*/
#ifndef LLMC_TRAIN_OPTIONS_H
#define LLMC_TRAIN_OPTIONS_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include "llmc/run/cli.h"
#include "llmc/dist/comm.h"
#include "llmc/optim/engine.h"
#include "llmc/optim/state.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/optim/schedulers.h"

typedef struct {
    const char* train_data;   // -i glob of train shards
    const char* val_data;     // -j glob of val shards
    const char* model;        // -e model file or descriptor
    const char* output_dir;   // -o directory for logs and checkpoints
    const char* tokenizer;    // --tokenizer decoder file for printing samples
    int checkpoint_every;     // -n
    int keep_last;            // -nk keep the newest N checkpoints (0: all)
    int keep_every;           // -nm checkpoints at multiples of M steps are never deleted (0: none)
    int resume;               // -y
    int B;                    // -b batch size per process
    int T;                    // -t sequence length
    int total_batch;          // -d total batch size in tokens (-1: B*T*processes, no accumulation)
    float lr;                 // -l
    float final_lr_frac;      // -q
    int warmup;               // -u
    float weight_decay;       // -c
    int lr_schedule;          // -k (index into lr_schedule_names)
    int val_every;            // -v
    int val_max_steps;        // -m
    int sample_every;         // -s
    int gen_T;                // -g
    const char* prompt;       // --prompt: the samples continue this text (NULL: from <|endoftext|> alone)
    float temperature;        // --temperature: softmax(logits / temperature) (0: the likeliest token)
    int top_k;                // --top-k: sample among the k likeliest tokens (0: all)
    int hellaswag;            // --hellaswag: HellaSwag accuracy with every val loss (and at the end)
    const char* hellaswag_file;  // --hellaswag-file: the official validation JSONL
    int hellaswag_max;        // --hellaswag-max: examples evaluated (-1: all)
    int overfit;              // -a
    int max_steps;            // -x (-1: one epoch)
    float beta1, beta2, eps;  // AdamW
    float grad_clip;          // global-norm clip (0: off)
    int seed;                 // init, data order and sampling
    int threads;              // OpenMP threads (0: all cores)
    int dry_run;              // parse, build the model, print the memory table, exit
    int memory_report;        // print the memory model's table for this configuration; allocate nothing
    int profile;              // GPU trainer: time one training step per kernel family, print the table, exit
    int badam;                // BAdam: switch the active block every K steps (0: off, full AdamW)
    int badam_order;          // BadamOrder
    int badam_embed;          // 1: the embeddings + final layernorm are a block too
    int optimizer;            // OptimKind
    int opt_state;            // OptimStatePrecision of the optimizer state
    int amsgrad;              // AdamW with AMSGrad
    int nesterov;             // SGD with Nesterov momentum
    float momentum;           // SGD and Muon momentum (-1: the optimizer's default, 0.9 and 0.95)
    int muon_plain;           // Muon with plain momentum (default: Nesterov)
    int muon_scale;           // Muon's shape scale: MUON_SCALE_RMS or MUON_SCALE_ORIG
    int muon_qkv;             // Muon: 0 q, k, v orthogonalized apart, 1 as one matrix
    float muon_adamw_lr;      // Muon: the AdamW tensors' peak learning rate (0: -l's)
    int zero_stage;           // -z 0: gradient all-reduce, 1: ZeRO-1 (sharded optimizer state)
    float loss_scale;         // --loss-scale: loss scaling's starting S (0: off; llmc/run/loss_scale.h)
    int loss_scale_window;    // --loss-scale-window: good steps before S doubles (0: a static S)
    float skip_loss_z;        // -sl skip the update when the loss's z-score is above this (0: off)
    float skip_norm_z;        // -sg the same for the gradient norm
    int outlier_window;       // steps the z-scores look back over
    int max_skips;            // stop after this many skipped updates in a row
    const char* inject_nan;   // testing: comma list of steps whose gradients are made NaN
    Comm* comm;               // the processes of the run (set by train_main, not a flag; NULL: one)
    // GPU trainer, several processes (llmc/dist/nccl_comm.cuh, through CommOptions)
    int init_method;          // -pi InitMethod (llmc/dist/comm.h): mpi (mpirun), fs, tcp
    int num_processes;        // -pn with -pi fs|tcp: the number of processes
    int process_rank;         // -pr with -pi fs|tcp: this process's rank
    const char* fs_path;      // -pf with -pi fs: a directory every process sees
    const char* server_addr;  // -ps with -pi tcp: rank 0's HOST[:PORT]
    float comm_timeout;       // seconds a wait on the other processes may take before the run stops
    // GPU trainer only
    int recompute;            // -r 0: keep all activations, 1: recompute GELU, 2: also layernorms
    int master_weights;       // -w keep fp32 master weights of bf16 parameters
    int offload;              // OffloadMode: the optimizer state (m, v, master) on the device, in pinned
                              // host memory streamed through it in chunks, or on the host with the update
    int offload_chunk;        // elements per streamed chunk
    int offload_delay;        // --offload cpu: 1 = the host update of step t overlaps step t + 1 (DPU)
    int offload_delay_warmup; // steps run undelayed before the delay starts
    // --memory-report's prediction of an offloaded step (GPU trainer)
    float predict_gpu_tflops;  // the forward and backward passes' achieved TFLOP/s
    float predict_pcie_gbs;    // host<->device copies, GB/s each way
    float predict_host_gbs;    // the host's memory bandwidth (0: measured by a probe now)
    int predict_host_threads;  // the host update's threads (0: this run's)
    int attention;            // AttentionKind: the matmul-softmax path or cuDNN's flash attention
} TrainOptions;

static const char* const lr_schedule_choices[] = {"cosine", "linear", "constant", "wsd", NULL};
static const char* const badam_order_choices[] = {"ascending", "descending", "random", NULL};
static const char* const muon_scale_choices[] = {"rms", "orig", NULL};  // MUON_SCALE_RMS, MUON_SCALE_ORIG
static const char* const muon_qkv_choices[] = {"split", "joined", NULL};
typedef enum { OFFLOAD_OFF, OFFLOAD_STREAM, OFFLOAD_CPU } OffloadMode;
static const char* const offload_choices[] = {"off", "stream", "cpu", NULL};
typedef enum { ATTENTION_CUDNN, ATTENTION_CUDNN_FAST, ATTENTION_MATMUL } AttentionKind;
static const char* const attention_choices[] = {"cudnn", "cudnn-fast", "matmul", NULL};
// flags whose values differ between the processes of one run (left out of the same-flags check)
static const char* const per_rank_flags[] = {"-pr", "--process-rank", NULL};

#define OPT(field) offsetof(TrainOptions, field)
static const CliFlag train_flags[] = {
    {"i", "train-data", CLI_STRING, OPT(train_data), 0, 0, NULL, CLI_BOTH, "glob of training token shards"},
    {"j", "val-data", CLI_STRING, OPT(val_data), 0, 0, NULL, CLI_BOTH, "glob of validation token shards"},
    {"e", "model", CLI_STRING, OPT(model), 0, 0, NULL, CLI_BOTH, "model file (llm.c format) or descriptor: d6|d12|d24|d36|d48 or e.g. L4C256H4[T1024][V50257]"},
    {"o", "output-dir", CLI_STRING, OPT(output_dir), 0, 0, NULL, CLI_BOTH, "directory for main.log and checkpoints"},
    {NULL, "tokenizer", CLI_STRING, OPT(tokenizer), 0, 0, NULL, CLI_BOTH, "llm.c tokenizer file used to print samples"},
    {"n", "checkpoint-every", CLI_INT, OPT(checkpoint_every), 0, 1e9, NULL, CLI_BOTH, "write a checkpoint every N steps (0: never; needs -o)"},
    {"nk", "keep-last", CLI_INT, OPT(keep_last), 0, 1e9, NULL, CLI_BOTH, "keep only the newest N checkpoints (0: keep all)"},
    {"nm", "keep-every", CLI_INT, OPT(keep_every), 0, 1e9, NULL, CLI_BOTH, "never delete checkpoints at multiples of M steps (0: none)"},
    {"y", "resume", CLI_SWITCH, OPT(resume), 0, 1, NULL, CLI_BOTH, "resume from the latest checkpoint in -o"},
    {"b", "batch-size", CLI_INT, OPT(B), 1, 65536, NULL, CLI_BOTH, "batch size B per process"},
    {"t", "seq-len", CLI_INT, OPT(T), 1, 1048576, NULL, CLI_BOTH, "sequence length T (at most the model's max)"},
    {"d", "total-batch", CLI_INT, OPT(total_batch), -1, 1e9, NULL, CLI_BOTH, "total batch in tokens, a multiple of B*T*processes (-1: B*T*processes)"},
    {"l", "lr", CLI_FLOAT, OPT(lr), 0, 10, NULL, CLI_BOTH, "peak learning rate"},
    {"q", "final-lr-frac", CLI_FLOAT, OPT(final_lr_frac), 0, 1, NULL, CLI_BOTH, "final learning rate as a fraction of the peak"},
    {"u", "warmup", CLI_INT, OPT(warmup), 0, 1e9, NULL, CLI_BOTH, "learning-rate warmup steps"},
    {"c", "weight-decay", CLI_FLOAT, OPT(weight_decay), 0, 10, NULL, CLI_BOTH, "decoupled weight decay (2-D weights only)"},
    {"k", "lr-schedule", CLI_CHOICE, OPT(lr_schedule), 0, 0, lr_schedule_choices, CLI_BOTH, "learning-rate schedule"},
    {"v", "val-every", CLI_INT, OPT(val_every), 0, 1e9, NULL, CLI_BOTH, "val loss every N steps (0: never)"},
    {"m", "val-max-steps", CLI_INT, OPT(val_max_steps), -1, 1e9, NULL, CLI_BOTH, "batches per val loss (-1: all)"},
    {"s", "sample-every", CLI_INT, OPT(sample_every), 0, 1e9, NULL, CLI_BOTH, "print generated text every N steps (0: never)"},
    {"g", "gen-len", CLI_INT, OPT(gen_T), 1, 1048576, NULL, CLI_BOTH, "tokens per sample, the prompt's included (at most -t)"},
    {NULL, "prompt", CLI_STRING, OPT(prompt), 0, 0, NULL, CLI_BOTH, "samples continue this text (encoded with the tokenizer file; default: from <|endoftext|>)"},
    {NULL, "temperature", CLI_FLOAT, OPT(temperature), 0, 100, NULL, CLI_BOTH, "sampling temperature (0: always the likeliest token)"},
    {NULL, "top-k", CLI_INT, OPT(top_k), 0, 1048576, NULL, CLI_BOTH, "sample among the k likeliest tokens (0: all)"},
    {NULL, "hellaswag", CLI_SWITCH, OPT(hellaswag), 0, 1, NULL, CLI_BOTH, "HellaSwag accuracy (acc, acc_norm) with every val loss (-v) and at the end"},
    {NULL, "hellaswag-file", CLI_STRING, OPT(hellaswag_file), 0, 0, NULL, CLI_BOTH, "HellaSwag's validation JSONL (`make hellaswag` downloads it)"},
    {NULL, "hellaswag-max", CLI_INT, OPT(hellaswag_max), -1, 1e9, NULL, CLI_BOTH, "HellaSwag examples evaluated (-1: all)"},
    {"a", "overfit", CLI_SWITCH, OPT(overfit), 0, 1, NULL, CLI_BOTH, "train on the first batch only (overfit it)"},
    {"x", "max-steps", CLI_INT, OPT(max_steps), -1, 1e9, NULL, CLI_BOTH, "number of steps (-1: one epoch of the train data; 0: no training, sample -e's model (and val loss with -v))"},
    {NULL, "beta1", CLI_FLOAT, OPT(beta1), 0, 0.99999, NULL, CLI_BOTH, "AdamW beta1"},
    {NULL, "beta2", CLI_FLOAT, OPT(beta2), 0, 0.99999, NULL, CLI_BOTH, "AdamW beta2"},
    {NULL, "eps", CLI_FLOAT, OPT(eps), 1e-30, 1, NULL, CLI_BOTH, "AdamW epsilon"},
    {NULL, "grad-clip", CLI_FLOAT, OPT(grad_clip), 0, 1e9, NULL, CLI_BOTH, "clip the global gradient norm to this (0: off)"},
    {NULL, "seed", CLI_INT, OPT(seed), 0, 2147483647, NULL, CLI_BOTH, "seed of init, data order and sampling"},
    {NULL, "threads", CLI_INT, OPT(threads), 0, 4096, NULL, CLI_BOTH, "CPU threads (0: all cores)"},
    {NULL, "dry-run", CLI_SWITCH, OPT(dry_run), 0, 1, NULL, CLI_BOTH, "check flags, build the model, print the memory table and exit"},
    {NULL, "memory-report", CLI_SWITCH, OPT(memory_report), 0, 1, NULL, CLI_BOTH, "print the predicted memory table for these flags and exit (allocates nothing; no GPU needed)"},
    {NULL, "profile", CLI_SWITCH, OPT(profile), 0, 1, NULL, CLI_GPU, "run a warm-up step and one profiled step, print the device time per kernel family (ms, % of the step, calls) and exit"},
    // the optimizer family (llmc/optim/state.h; GPU kernels in llmc/optim/update.cuh)
    {NULL, "optimizer", CLI_CHOICE, OPT(optimizer), 0, 0, optim_kind_choices, CLI_BOTH, "the optimizer"},
    {NULL, "opt-state", CLI_CHOICE, OPT(opt_state), 0, 0, optim_precision_choices, CLI_BOTH, "precision of the optimizer state (m, v; none for plain SGD; fp16: AdamW and Adam-mini only)"},
    {NULL, "amsgrad", CLI_SWITCH, OPT(amsgrad), 0, 1, NULL, CLI_BOTH, "AdamW with AMSGrad (the running max of v)"},
    {NULL, "nesterov", CLI_SWITCH, OPT(nesterov), 0, 1, NULL, CLI_BOTH, "SGD with Nesterov momentum"},
    {NULL, "momentum", CLI_FLOAT, OPT(momentum), -1, 0.9999, NULL, CLI_BOTH, "SGD and Muon momentum (-1: SGD 0.9, Muon 0.95)"},
    {NULL, "muon-plain", CLI_SWITCH, OPT(muon_plain), 0, 1, NULL, CLI_BOTH, "Muon with plain momentum (default: Nesterov)"},
    {NULL, "muon-scale", CLI_CHOICE, OPT(muon_scale), 0, 0, muon_scale_choices, CLI_BOTH, "Muon's update scale per matrix: rms 0.2*sqrt(max(rows, cols)) (AdamW's lr and weight decay carry over) or orig sqrt(max(1, rows/cols))"},
    {NULL, "muon-qkv", CLI_CHOICE, OPT(muon_qkv), 0, 0, muon_qkv_choices, CLI_BOTH, "Muon: orthogonalize q, k, v apart (split) or as one 3C x C matrix (joined)"},
    {NULL, "muon-adamw-lr", CLI_FLOAT, OPT(muon_adamw_lr), 0, 10, NULL, CLI_BOTH, "Muon: peak learning rate of the tensors AdamW updates (embeddings, layernorms, biases; 0: -l's)"},
    {NULL, "badam", CLI_INT, OPT(badam), 0, 1e6, NULL, CLI_BOTH, "BAdam: train one block of layers at a time, switching every K steps (0: off)"},
    {NULL, "badam-order", CLI_CHOICE, OPT(badam_order), 0, 0, badam_order_choices, CLI_BOTH, "BAdam block order"},
    {NULL, "badam-embed", CLI_SWITCH, OPT(badam_embed), 0, 1, NULL, CLI_BOTH, "BAdam: the embeddings and final layernorm form a block (else frozen)"},
    {"z", "zero-stage", CLI_INT, OPT(zero_stage), 0, 1, NULL, CLI_BOTH, "with several processes: 0 all-reduce the gradients, 1 ZeRO-1 (each process updates its shard of the optimizer state)"},
    {NULL, "loss-scale", CLI_FLOAT, OPT(loss_scale), 0, 16777216, NULL, CLI_BOTH, "loss scaling: the starting scale S of the loss's gradient (0: off); an overflow skips the step and halves S"},
    {NULL, "loss-scale-window", CLI_INT, OPT(loss_scale_window), 0, 1e9, NULL, CLI_BOTH, "loss scaling: steps without an overflow before S doubles (0: S stays)"},
    {"sl", "skip-loss-z", CLI_FLOAT, OPT(skip_loss_z), 0, 1e9, NULL, CLI_BOTH, "skip the update when the loss's z-score over the last --outlier-window steps is above this (0: off); NaN/Inf always skip"},
    {"sg", "skip-norm-z", CLI_FLOAT, OPT(skip_norm_z), 0, 1e9, NULL, CLI_BOTH, "skip the update when the gradient norm's z-score is above this (0: off)"},
    {NULL, "outlier-window", CLI_INT, OPT(outlier_window), 2, 1000000, NULL, CLI_BOTH, "steps the -sl/-sg z-scores look back over"},
    {NULL, "max-skips", CLI_INT, OPT(max_skips), 1, 1e9, NULL, CLI_BOTH, "stop the run (exit 3) after this many skipped updates in a row"},
    {NULL, "inject-nan", CLI_STRING, OPT(inject_nan), 0, 0, NULL, CLI_BOTH, "testing: make the gradients NaN at these steps (comma list, e.g. 3,5)"},
    {"pi", "init-method", CLI_CHOICE, OPT(init_method), 0, 0, init_method_choices, CLI_GPU, "how the processes meet: mpi (started by mpirun), fs (a shared directory, -pf) or tcp (rank 0's address, -ps)"},
    {"pn", "num-processes", CLI_INT, OPT(num_processes), 1, 1 << 20, NULL, CLI_BOTH, "with -pi fs|tcp: the number of processes; with --memory-report: the table of one of N processes"},
    {"pr", "process-rank", CLI_INT, OPT(process_rank), -1, 1 << 20, NULL, CLI_GPU, "with -pi fs|tcp: this process's rank, 0 .. -pn minus 1 (-1: $SLURM_PROCID or $RANK)"},
    {"pf", "fs-path", CLI_STRING, OPT(fs_path), 0, 0, NULL, CLI_GPU, "with -pi fs: a directory that every process sees (rank 0 leaves NCCL's id there)"},
    {"ps", "server-addr", CLI_STRING, OPT(server_addr), 0, 0, NULL, CLI_GPU, "with -pi tcp: rank 0's HOST[:PORT] (port 12345 by default)"},
    {NULL, "comm-timeout", CLI_FLOAT, OPT(comm_timeout), 1, 1e6, NULL, CLI_GPU, "seconds a wait on the other processes may take before every rank stops with an error"},
    {"r", "recompute", CLI_INT, OPT(recompute), 0, 2, NULL, CLI_GPU, "recompute in the backward pass: 0 none, 1 GELU, 2 GELU + layernorms"},
    {"w", "master-weights", CLI_SWITCH, OPT(master_weights), 0, 1, NULL, CLI_GPU, "keep fp32 master weights (bf16 build; the fp16 build always keeps them)"},
    {NULL, "offload", CLI_CHOICE, OPT(offload), 0, 0, offload_choices, CLI_GPU, "where the optimizer state (m, v, master weights) lives: off (the GPU), stream (pinned host memory, streamed through the GPU in chunks for the update) or cpu (host memory; gradients go down, the CPU updates, the parameters come up)"},
    {NULL, "offload-chunk", CLI_INT, OPT(offload_chunk), 1024, 1 << 30, NULL, CLI_GPU, "--offload stream: elements per chunk (two chunks of staging on the GPU)"},
    {NULL, "offload-delay", CLI_SWITCH, OPT(offload_delay), 0, 1, NULL, CLI_BOTH, "GPU trainer, --offload cpu: 1 runs step t's host update under step t+1's forward and backward, which use the parameters one update behind (delayed parameter update); CPU trainer: the same schedule, to measure its effect"},
    {NULL, "offload-delay-warmup", CLI_INT, OPT(offload_delay_warmup), 0, 1e9, NULL, CLI_BOTH, "--offload-delay 1: the first steps run undelayed"},
    {NULL, "predict-gpu-tflops", CLI_FLOAT, OPT(predict_gpu_tflops), 1, 1e5, NULL, CLI_GPU, "--memory-report with --offload: the GPU's achieved TFLOP/s in the forward and backward passes, for the predicted step time"},
    {NULL, "predict-pcie-gbs", CLI_FLOAT, OPT(predict_pcie_gbs), 0.1, 1e4, NULL, CLI_GPU, "--memory-report with --offload: host<->device GB/s each way"},
    {NULL, "predict-host-gbs", CLI_FLOAT, OPT(predict_host_gbs), 0, 1e5, NULL, CLI_GPU, "--memory-report with --offload cpu: the host's memory GB/s (0: measured now, AdamW's access pattern)"},
    {NULL, "predict-host-threads", CLI_INT, OPT(predict_host_threads), 0, 4096, NULL, CLI_GPU, "--memory-report with --offload cpu: the host update's threads (0: this run's; its time is measured here and scaled)"},
    {NULL, "attention", CLI_CHOICE, OPT(attention), 0, 0, attention_choices, CLI_GPU, "attention: cudnn (flash attention, no T x T activations, deterministic backward; BF16 build only, its default), cudnn-fast (the same with cuDNN's atomic, non-deterministic backward: no T x T workspace) or matmul (scores, softmax, GEMMs; the FP32 build's)"},
};
#undef OPT
#define TRAIN_FLAG_COUNT ((int)(sizeof(train_flags) / sizeof(train_flags[0])))

static inline void train_options_defaults(TrainOptions* o) {
    memset(o, 0, sizeof(*o));
    o->train_data = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    o->val_data = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    o->model = "d12";
    o->output_dir = NULL;
    o->tokenizer = "data/gpt2_tokenizer.bin";
    o->checkpoint_every = 0;
    o->B = 4;
    o->T = 1024;
    o->total_batch = -1;
    o->lr = 3e-4f;
    o->final_lr_frac = 1.0f;
    o->warmup = 0;
    o->weight_decay = 0.0f;
    o->lr_schedule = LR_COSINE;
    o->val_every = 20;
    o->val_max_steps = 20;
    o->sample_every = 20;
    o->gen_T = 64;
    o->prompt = NULL;
    o->temperature = 1.0f;
    o->top_k = 0;
    o->loss_scale = 0.0f;
    o->loss_scale_window = 2000;
    o->hellaswag = 0;
    o->hellaswag_file = "data/hellaswag/hellaswag_val.jsonl";
    o->hellaswag_max = -1;
    o->overfit = 0;
    o->max_steps = -1;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->grad_clip = 1.0f;
    o->seed = 42;
    o->threads = 0;
    o->optimizer = OPT_ADAMW;
    o->opt_state = OPT_STATE_FP32;
    o->amsgrad = 0;
    o->nesterov = 0;
    o->muon_plain = 0;
    o->muon_scale = MUON_SCALE_RMS;
    o->muon_qkv = 0;
    o->muon_adamw_lr = 0.0f;
    o->momentum = -1.0f;
    o->badam = 0;
    o->badam_order = 0;
    o->badam_embed = 1;
    o->skip_loss_z = 0.0f;
    o->skip_norm_z = 0.0f;
    o->outlier_window = 128;
    o->max_skips = 10;
    o->inject_nan = NULL;
    o->init_method = INIT_MPI;
    o->num_processes = 1;
    o->process_rank = -1;
    o->fs_path = NULL;
    o->server_addr = NULL;
    o->comm_timeout = 600.0f;
    o->recompute = 1;
    o->master_weights = 1;
    o->offload = 0;
    o->offload_chunk = 1 << 24;
    o->offload_delay = 0;
    o->offload_delay_warmup = 10;
    o->predict_gpu_tflops = 400.0f;
    o->predict_pcie_gbs = 25.0f;
    o->predict_host_gbs = 0.0f;
    o->predict_host_threads = 0;
    o->attention = ATTENTION_MATMUL;  // the BF16 GPU trainer defaults to cudnn (its trainer_defaults)
}

// -pi fs|tcp: the processes were not started by mpirun, so the count and this rank come from -pn
// and -pr. Exits 2 naming the flag.
static inline void train_options_processes(const TrainOptions* o, Comm* comm) {
    if (o->init_method == INIT_MPI) {
        if (o->num_processes != 1 && !o->memory_report && o->num_processes != comm->size) {
            cli_error("flag -pn: %d, but %d process%s running (start them with mpirun -np %d)", o->num_processes, comm->size,
                      comm->size == 1 ? " is" : "es are", o->num_processes);
        }
        return;
    }
    const char* bad = NULL;
    char msg[160];
    int rank = o->process_rank;
    if (rank < 0) {  // not given: the launcher's (srun sets SLURM_PROCID), or 0 of one process
        const char* env = getenv("SLURM_PROCID");
        if (env == NULL) { env = getenv("RANK"); }
        char* end = NULL;
        long r = env ? strtol(env, &end, 10) : (o->num_processes == 1 ? 0 : -1);
        rank = (env && (end == env || *end != '\0')) || r > INT_MAX ? -1 : (int)r;
    }
    if (rank < 0 || rank >= o->num_processes) {
        snprintf(msg, sizeof(msg), "flag -pr: %d is not a rank of -pn %d processes (0 .. %d)", rank, o->num_processes,
                 o->num_processes - 1);
        bad = msg;
    } else if (o->init_method == INIT_FS && o->fs_path == NULL && o->num_processes > 1) {
        bad = "flag -pf: -pi fs needs a shared directory";
    } else if (o->init_method == INIT_TCP && o->server_addr == NULL && o->num_processes > 1) {
        bad = "flag -ps: -pi tcp needs rank 0's HOST[:PORT]";
    } else if (comm->size > 1 && comm->size != o->num_processes) {
        snprintf(msg, sizeof(msg), "flag -pn: %d, but mpirun started %d processes", o->num_processes, comm->size);
        bad = msg;
    }
    if (bad) { cli_error("%s", bad); }
    comm->rank = rank;
    comm->size = o->num_processes;
}

// What the communicator needs of the flags (llmc/dist/comm.h): how the processes meet, the timeout.
static inline CommOptions train_options_comm(const TrainOptions* o) {
    CommOptions c = {o->init_method, o->fs_path, o->server_addr, o->comm_timeout};
    return c;
}

// Checks that need the model: T against max_seq_len, the total batch. Exits 2 naming the flag.
static inline int train_options_accum_steps(const TrainOptions* o, const GPT2Config* c, int num_processes) {
    if (o->T > c->max_seq_len) {
        cli_error("flag -t: %d is above the model's max sequence length %d", o->T, c->max_seq_len);
    }
    if (o->gen_T > c->max_seq_len) {
        cli_error("flag -g: %d is above the model's max sequence length %d", o->gen_T, c->max_seq_len);
    }
    long long per_step = (long long)o->B * o->T * num_processes;
    if (o->total_batch == -1) { return 1; }
    if (o->total_batch <= 0 || o->total_batch % per_step != 0) {
        cli_error("flag -d: %d is not a positive multiple of B*T*processes = %lld", o->total_batch, per_step);
    }
    return (int)(o->total_batch / per_step);
}

// The optimizer the flags ask for; fatal (naming the flags) when they do not fit together.
static inline OptimConfig train_options_optimizer(const TrainOptions* o) {
    OptimConfig c = optim_config_default((OptimKind)o->optimizer);
    c.state = (OptimStatePrecision)o->opt_state;
    c.beta1 = o->beta1;
    c.beta2 = o->beta2;
    c.eps = o->eps;
    c.amsgrad = o->amsgrad;
    if (o->momentum >= 0.0f) { c.momentum = o->momentum; }
    if (c.kind == OPT_MUON) {
        c.nesterov = !o->muon_plain;
        c.muon_scale = o->muon_scale;
        c.muon_qkv_joined = o->muon_qkv;
        if (o->muon_adamw_lr > 0.0f && o->lr > 0.0f) { c.adamw_lr_mult = o->muon_adamw_lr / o->lr; }  // the schedule scales both
    } else {
        c.nesterov = o->nesterov;
        if (o->muon_plain || o->muon_scale != MUON_SCALE_RMS || o->muon_qkv != 0 || o->muon_adamw_lr > 0.0f) {
            ls_fatal("--muon-plain, --muon-scale, --muon-qkv and --muon-adamw-lr are Muon options (got --optimizer %s)",
                     optim_kind_name(c.kind));
        }
    }
    c.seed = (unsigned long long)o->seed;
    char why[256];
    if (!optim_config_check(&c, why, sizeof(why))) { ls_fatal("%s", why); }
    return c;
}

// The optimizer engine's sizes (llmc/optim/engine.h) for these flags and model, as the trainers
// allocate them and their memory models print them.
typedef struct {
    size_t bytes;        // the state block: the largest BAdam block's, process `rank`'s ZeRO-1 shard's
                         // (-z 1 over procs > 1), else the whole model's
    size_t max_elems;    // elements of the largest view (the master weights the GPU trainer keeps)
    size_t stage_bytes;  // --offload: the largest chunk's state, and its elements (device staging)
    size_t stage_elems;
    size_t max_shard;    // ZeRO-1: the largest view's part, or 0
    size_t zero_elems;   // ZeRO-1: the gradients' elements, every part of the largest view (optim_engine_zero_elems)
    size_t work_bytes;   // the step's scratch beside the block (Muon's Newton-Schulz on the host)
    size_t gpu_work_bytes[2];  // and on the device, with bf16 [0] or fp32 [1] parameters
} OptimSizes;

static inline OptimSizes train_options_optim_sizes(const TrainOptions* o, const GPT2Config* c, int rank, int procs) {
    OptimConfig cfg = train_options_optimizer(o);
    ParamTable pt;
    param_table_build(&pt, c);
    Badam bd;
    if (o->badam > 0) { badam_init(&bd, &pt, o->badam, o->badam_order, o->badam_embed, 0); }
    const int zero = procs > 1 && o->zero_stage >= 1;
    OptimEngine e;
    optim_engine_init(&e, &cfg, &pt, o->badam > 0 ? &bd : NULL, 0.0f, rank, zero ? procs : 1,
                      zero ? zero_shard_elems(pt.total, procs) : 0);
    OptimSizes z = {e.bytes, e.max_elems, 0, 0, optim_engine_max_shard(&e), optim_engine_zero_elems(&e), e.work_bytes,
                    {optim_engine_device_work_bytes(&e, 2), optim_engine_device_work_bytes(&e, 4)}};
    if (o->offload == OFFLOAD_STREAM) {
        optim_engine_offload_size(&e, optim_chunk_elems(pt.total, (size_t)o->offload_chunk), &z.stage_bytes, &z.stage_elems);
    }
    return z;
}

// The model lines of the start-up banner (the trainer adds its device line and memory table).
static inline void gpt2_describe(const GPT2Config* c, size_t num_parameters, const TrainOptions* o, int accum) {
    printf("model: L=%d C=%d NH=%d V=%d (padded %d) maxT=%d, %zu parameters\n", c->num_layers, c->channels,
           c->num_heads, c->vocab_size, c->padded_vocab_size, c->max_seq_len, num_parameters);
    int procs = o->comm ? o->comm->size : 1;
    printf("batch: B=%d T=%d, gradient accumulation %d, %d tokens per step", o->B, o->T, accum, o->B * o->T * accum * procs);
    if (procs > 1) { printf(" (%d processes)", procs); }
    printf("\n");
    OptimConfig oc = train_options_optimizer(o);
    printf("optimizer: %s", optim_kind_name(oc.kind));
    if (oc.kind == OPT_SGD) {
        printf(" (momentum %g%s)", oc.momentum, oc.nesterov ? ", Nesterov" : "");
    } else if (oc.kind == OPT_LION) {
        printf(" (betas %g %g)", oc.beta1, oc.beta2);
    } else if (oc.kind == OPT_MUON) {
        printf(" (momentum %g%s, scale %s, qkv %s; AdamW for the rest: betas %g %g, eps %g, lr x%g)", oc.momentum,
               oc.nesterov ? " Nesterov" : "", muon_scale_choices[oc.muon_scale], muon_qkv_choices[oc.muon_qkv_joined],
               oc.beta1, oc.beta2, oc.eps, oc.adamw_lr_mult);
    } else {
        printf(" (betas %g %g, eps %g)", oc.beta1, oc.beta2, oc.eps);
    }
    printf(", lr %g, weight decay %g, clip %g, state %s%s\n", o->lr, o->weight_decay, o->grad_clip,
           optim_precision_name(oc.state), oc.amsgrad ? ", AMSGrad" : "");
}

#endif // LLMC_TRAIN_OPTIONS_H
