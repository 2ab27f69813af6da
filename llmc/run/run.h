/*
 run.h: a training run around the loop each trainer's main writes: flags and start-up
 (run_setup, run_start), what happens between steps (val loss, samples, checkpoints, a stop
 signal: run_between_steps), the batches, the learning rate, the step's loss, the skip guard and
 the step line (run_step_end), and the summary (run_finish). Written once for both trainers; the
 trainer's side is llmc/run/trainer.h. A main:

   Run run;
   if (!run_setup(&run, argc, argv)) return run.exit_code;        // --help, --memory-report
   GPT2 model;
   gpt2_build(&model, run.model_source, run.o.seed, run.o.B, run.o.T, &run.o);
   if (run_start(&run, &model))                                   // banner, data, -y resume
       for (int step = run.start_step; run_between_steps(&run, &model, step); step++) {
           ... one step (trainer.h) ...
           if (!run_step_end(&run, &model, step, loss, norm, skip)) break;
       }
   return run_finish(&run, &model);
*/
#ifndef LLMC_RUN_RUN_H
#define LLMC_RUN_RUN_H

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include "llmc/io/checkpoint.h"
#include "llmc/dist/comm.h"
#include "llmc/io/dataloader.h"
#include "llmc/run/logger.h"
#include "llmc/optim/optim.h"
#include "llmc/run/progress.h"
#include "llmc/optim/schedulers.h"
#include "llmc/run/step_guard.h"
#include "llmc/run/loss_scale.h"
#include "llmc/io/tokenizer.h"
#ifndef TOKENIZER_DECODE_ONLY
#include "llmc/io/hellaswag.h"
#endif
#include "llmc/run/default_data.h"
#include "llmc/run/run_dir.h"
#include "llmc/run/train_options.h"
#include "llmc/run/trainer.h"

// ----------------------------------------------------------------------------
// sampling

// How a sample is drawn: the prompt's tokens (after <|endoftext|>), the temperature and top-k.
typedef struct {
    const int* prompt;
    int n_prompt;
    float temperature;  // 0: the likeliest token
    int top_k;          // 0: all tokens
} SampleOptions;

// Whether (value a, id ia) ranks below (b, ib): a smaller logit, or an equal one of a larger id.
static inline int sample_below(float a, int ia, float b, int ib) { return a < b || (a == b && ia > ib); }

// The k likeliest tokens of logits[0..V) as a min-heap (heap[0]: the k-th), ids in heap (k).
static LS_UNUSED void sample_top_k(const float* logits, int V, int k, int* heap) {
    int n = 0;
    for (int i = 0; i < V; i++) {
        int at;
        if (n < k) {  // sift up from the end
            at = n++;
            while (at > 0 && sample_below(logits[i], i, logits[heap[(at - 1) / 2]], heap[(at - 1) / 2])) {
                heap[at] = heap[(at - 1) / 2];
                at = (at - 1) / 2;
            }
            heap[at] = i;
            continue;
        }
        if (!sample_below(logits[heap[0]], heap[0], logits[i], i)) { continue; }
        at = 0;  // replace the k-th and sift down
        for (;;) {
            int c = 2 * at + 1;
            if (c >= k) { break; }
            if (c + 1 < k && sample_below(logits[heap[c + 1]], heap[c + 1], logits[heap[c]], heap[c])) { c++; }
            if (!sample_below(logits[heap[c]], heap[c], logits[i], i)) { break; }
            heap[at] = heap[c];
            at = c;
        }
        heap[at] = i;
    }
}

// Draws the next token from logits[0..V) with a uniform coin in [0, 1): softmax(logits /
// temperature) over the top_k likeliest tokens (0: all; ties go to the lower id), in id order;
// temperature 0: the likeliest token (the lowest id among equals). heap: top_k ints of scratch.
static LS_UNUSED int sample_logits(const float* logits, int V, float temperature, int top_k, float coin, int* heap) {
    int best = 0;
    for (int i = 1; i < V; i++) { if (logits[i] > logits[best]) { best = i; } }
    if (temperature == 0.0f || top_k == 1) { return best; }
    float cut = -INFINITY;  // tokens below (cut, cut_id) are left out
    int cut_id = V;
    if (top_k > 0 && top_k < V) {
        sample_top_k(logits, V, top_k, heap);
        cut = logits[heap[0]];
        cut_id = heap[0];
    }
    const double inv_t = 1.0 / (double)temperature, top = (double)logits[best];
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        if (!sample_below(logits[i], i, cut, cut_id)) { sum += exp(((double)logits[i] - top) * inv_t); }
    }
    double target = (double)coin * sum, cdf = 0.0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (sample_below(logits[i], i, cut, cut_id)) { continue; }
        cdf += exp(((double)logits[i] - top) * inv_t);
        last = i;
        if (cdf > target) { return i; }
    }
    return last;
}

// Generates a sample of gen_T tokens (at most the model's T): <|endoftext|>, the prompt, and what
// the model continues it with, printed decoded (or as ids without a tokenizer).
static LS_UNUSED void gpt2_sample(GPT2* model, const Tokenizer* tok, const SampleOptions* so, int gen_T, uint64_t* rng) {
    int T = gen_T < model->T ? gen_T : model->T;
    // (B, T) of the model: room for the padded shapes of gpt2_eval_shape, token 0 beyond the sample's
    int* tokens = (int*)callocCheck((size_t)model->B * model->T, sizeof(int));
    int* heap = (int*)mallocCheck((size_t)(so->top_k > 0 ? so->top_k : 1) * sizeof(int));
    tokens[0] = GPT2_EOT < model->config.vocab_size ? GPT2_EOT : 0;
    const int start = 1 + so->n_prompt < T ? 1 + so->n_prompt : T;
    for (int t = 1; t < start; t++) { tokens[t] = so->prompt[t - 1]; }
    printf("generating:\n---\n");
    for (int t = start; t < T; t++) {
        int Bp, Tp;
        gpt2_eval_shape(model, 1, t, &Bp, &Tp);
        gpt2_forward(model, tokens, NULL, Bp, Tp);  // row 0: the sample's first t tokens, then padding
        const float* logits = gpt2_logits_row(model, t - 1);
        tokens[t] = sample_logits(logits, model->config.vocab_size, so->temperature, so->top_k, xorshift_f32(rng), heap);
    }
    if (tok) {
        size_t cap = (size_t)T * 800 + 1;  // a token decodes to at most ~765 printable bytes
        char* text = (char*)mallocCheck(cap);
        tokenizer_decode_to_buf(tok, tokens + 1, (size_t)(T - 1), text, cap);
        printf("%s", text);
        free(text);
    } else {
        for (int t = 1; t < T; t++) { printf("%d ", tokens[t]); }
    }
    printf("\n---\n");
    free(heap);
    free(tokens);
}

// ----------------------------------------------------------------------------
// checkpoints: <dir>/model_<step>.bin, <dir>/state_<step>_<rank>.bin, then <dir>/DONE_<step>

static LS_UNUSED void checkpoint_paths(const char* dir, int step, int rank, char* model_path, char* state_path, char* done_path,
                             size_t len) {
    snprintf(model_path, len, "%s/model_%08d.bin", dir, step);
    snprintf(state_path, len, "%s/state_%08d_%05d.bin", dir, step, rank);
    snprintf(done_path, len, "%s/DONE_%08d", dir, step);
}

// Rank 0 writes the model file, every rank its state file; the DONE marker comes last, from rank
// 0 once every rank has written (a checkpoint without it is incomplete and -y ignores it).
static LS_UNUSED void checkpoint_save(GPT2* model, const char* dir, const RunState* rs, const Comm* comm) {
    char model_path[1200], state_path[1200], done_path[1200];
    checkpoint_paths(dir, rs->step, rs->process_rank, model_path, state_path, done_path, sizeof(model_path));
    printf("checkpoint: writing step %d ... ", rs->step);
    fflush(stdout);
    double t0 = wall_seconds();
    gpt2_checkpoint_write(model, model_path, state_path, rs);
    comm_barrier(comm);
    if (comm->rank == 0) {
        AtomicFile af;
        atomic_file_open(&af, done_path);
        atomic_file_commit(&af);
    }
    printf("wrote %s and its state in %.1f s\n", model_path, wall_seconds() - t0);
}

// Steps of the complete checkpoints in dir (DONE files), ascending; returns the count (<= max).
static LS_UNUSED int checkpoint_list(const char* dir, int* steps, int max) {
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL && n < max) {
        int step;
        char tail;
        if (sscanf(e->d_name, "DONE_%8d%c", &step, &tail) == 1) { steps[n++] = step; }  // NOLINT(cert-err34-c): 8 digits cannot overflow; %c rejects trailing text
    }
    closedir(d);
    for (int i = 1; i < n; i++) {  // insertion sort: a few hundred at most
        int x = steps[i], j = i - 1;
        while (j >= 0 && steps[j] > x) { steps[j + 1] = steps[j]; j--; }
        steps[j + 1] = x;
    }
    return n;
}

// -nk / -nm: deletes complete checkpoints beyond the newest keep_last, except those at multiples
// of keep_every. The DONE marker goes first, so an interrupted deletion leaves an incomplete
// checkpoint that -y ignores, never a DONE without its files.
static LS_UNUSED void checkpoint_prune(const char* dir, int keep_last, int keep_every, int num_processes) {
    if (keep_last <= 0) { return; }
    int steps[4096];
    int n = checkpoint_list(dir, steps, 4096);
    for (int i = 0; i < n - keep_last; i++) {
        if (keep_every > 0 && steps[i] % keep_every == 0) { continue; }
        char m[1200], st[1200], done[1200];
        checkpoint_paths(dir, steps[i], 0, m, st, done, sizeof(m));
        if (remove(done) != 0) { continue; }
        remove(m);
        for (int r = 0; r < num_processes; r++) {
            checkpoint_paths(dir, steps[i], r, m, st, done, sizeof(m));
            remove(st);
        }
        printf("checkpoint: removed step %d (-nk %d)\n", steps[i], keep_last);
    }
}

// SIGINT / SIGTERM: the first asks the loop to finish the step, save and exit 0; a second one ends
// the process at once (the default action).
static volatile sig_atomic_t train_stop_signal = 0;

static void train_on_signal(int sig) {
    if (train_stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    train_stop_signal = sig;
}

static LS_UNUSED void train_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = train_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// Removes the temporary files ("<name>.tmp.<pid>") a killed run left in dir.
static LS_UNUSED void checkpoint_remove_temporaries(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, ".tmp.") != NULL) {
            char path[1200];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (remove(path) == 0) { printf("removed %s (left by an interrupted write)\n", path); }
        }
    }
    closedir(d);
}

// Returns the step of the newest complete checkpoint in dir (its DONE file exists), or -1.
static LS_UNUSED int checkpoint_latest(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return -1; }
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail;
        if (sscanf(e->d_name, "DONE_%8d%c", &step, &tail) == 1 && step > best) { best = step; }  // NOLINT(cert-err34-c): as above
    }
    closedir(d);
    return best;
}

// ----------------------------------------------------------------------------
// training

static LS_UNUSED float evaluate_val_loss(GPT2* model, DataLoader* val, int max_steps) {
    dataloader_reset(val);
    size_t steps = dataloader_steps_per_epoch(val);
    if (max_steps >= 0 && (size_t)max_steps < steps) { steps = (size_t)max_steps; }
    double sum = 0.0;
    Progress progress;
    progress_begin(&progress, "val loss (batches)", (double)steps);
    for (size_t i = 0; i < steps; i++) {
        dataloader_next_batch(val);
        sum += gpt2_forward(model, val->inputs, val->targets, val->B, val->T);
        progress_update(&progress, (double)(i + 1));
    }
    progress_end(&progress);
    return steps ? (float)(sum / (double)steps) : NAN;
}

// ----------------------------------------------------------------------------
// the run

typedef struct {
    Comm comm;                   // the processes (o.comm points here: a Run is never copied)
    TrainOptions o;              // the flags
    TrainOptions defaults;       // before the flags: data_check_inputs tells given paths from defaults
    int nan_steps[64], num_nan_steps;  // --inject-nan
    const char* model_source;    // -e, or the model file of the checkpoint -y resumes
    char model_path[1200], state_path[1200];
    int start_step, total_steps, accum;
    float loss_scale;            // 1 / (accum * processes): each micro-step's share of the step's loss
    DataLoader train, val;
    int do_val;
    Tokenizer tokenizer;
    int have_tokenizer;
    int do_train;                // 0: -x 0, no training (no train data): sample -e's model
    TokenList prompt;            // --prompt's tokens
    int have_encoder;            // the tokenizer encodes (--prompt, --hellaswag)
#ifndef TOKENIZER_DECODE_ONLY
    Hellaswag hella;             // --hellaswag's examples, tokenized
#endif
    SampleOptions sample;        // the prompt, temperature and top-k of the samples
    LrSchedule sched;
    float lr;                    // this step's learning rate (run_lr); the rest of the optimizer is set once, at build
    uint64_t sample_rng;
    Logger logger;
    StepGuard guard;
    LossScale scaler;            // --loss-scale (off: S = 1)
    int overflowed;              // this step's update was skipped for a gradient overflow
    float scale_shown;           // the S the step lines last showed
    char skip_why[128];          // why the guard skipped this step's update
    double mem_mib;              // device (or host) memory of the model, for the log
    int stopping;                // a SIGINT/SIGTERM reached every process: save and stop
    int exit_code;
    double t_start, t_step, train_seconds;
    int timed_steps, steps_done;
    float best_val;
    char last_checkpoint[1200];
    RunDirLock dir_lock;         // -o, owned by this run (rank 0 holds the lock)
} Run;

// --memory-report: the memory model's table for the flags (-pn N: of one of N processes); nothing
// is allocated and no device is touched.
static LS_UNUSED void run_memory_report(Run* r) {
    Comm report_comm = r->comm;
    if (r->o.num_processes > report_comm.size) { report_comm.size = r->o.num_processes; }
    TrainOptions o = r->o;
    o.comm = &report_comm;
    GPT2Config mc;
    if (!gpt2_config_from_descriptor(o.model, &mc)) { model_file_read_header(o.model, &mc); }
    char err[200];
    if (!gpt2_config_valid(&mc, err, sizeof(err))) { ls_fatal("flag -e: '%s': %s", o.model, err); }
    int accum = train_options_accum_steps(&o, &mc, report_comm.size);
    gpt2_describe(&mc, gpt2_num_parameters(&mc), &o, accum);
    trainer_memory_report(&mc, &o);
}

// The train and val shards (their headers and sizes checked now) and the number of steps.
static LS_UNUSED void run_open_data(Run* r, int vocab) {
    const TrainOptions* o = &r->o;
    r->do_train = o->max_steps != 0;
    if (r->do_train) {
        dataloader_init(&r->train, o->train_data, o->B, o->T, r->comm.rank, r->comm.size, !o->overfit, (uint64_t)o->seed, vocab);
    }
    r->do_val = o->val_every > 0;
    if (r->do_val) { dataloader_init(&r->val, o->val_data, o->B, o->T, r->comm.rank, r->comm.size, 0, (uint64_t)o->seed, vocab); }
    r->total_steps = o->max_steps >= 0 ? o->max_steps : (int)(dataloader_steps_per_epoch(&r->train) / (size_t)r->accum);
    if (r->total_steps < 1 && o->max_steps != 0) { r->total_steps = 1; }
}

// -o: the run directory, owned by this run from here on (llmc/run/run_dir.h). Rank 0 takes the
// lock; every process learns the outcome, so a refused run ends on every rank with one line (rank
// 0's), exit 1.
static LS_UNUSED void run_dir_open(Run* r) {
    const char* dir = r->o.output_dir;
    int held = 1;
    if (r->comm.rank == 0) {
        held = run_dir_lock(&r->dir_lock, dir);
        if (held && r->dir_lock.owner[0]) {
            printf("run directory %s: taking over run.lock from %s, a run that did not end normally\n", dir, r->dir_lock.owner);
        }
    }
    if (comm_allreduce_sum_f64(&r->comm, held ? 0.0 : 1.0) == 0.0) { return; }
    if (r->comm.rank == 0) {
        ls_error("flag -o: %s is in use by another run (%s, run.lock): wait for it to end, or pass another -o", dir,
                 r->dir_lock.owner[0] ? r->dir_lock.owner : "pid not written yet");
    }
    // no process exits before rank 0's line is out: mpirun ends the job at the first exit
    comm_allreduce_sum_f64(&r->comm, 0.0);
    fflush(stdout);
    exit(1);
}

// The flags, the processes, the trainer's device, then (not for --dry-run) the input files and the
// run directory, checked before the banner, and the model source (the newest complete checkpoint
// with -y). Returns 0 when the run ends here (--help, --memory-report; exit_code 0).
static LS_UNUSED int run_setup(Run* r, int argc, char** argv) {
    memset(r, 0, sizeof(*r));
    r->dir_lock.fd = -1;
    comm_init(&r->comm, &argc, &argv);
    TrainOptions* o = &r->o;
    train_options_defaults(o);
    trainer_defaults(o);
    r->defaults = *o;
    o->comm = &r->comm;
    if (cli_parse(argc, argv, train_flags, TRAIN_FLAG_COUNT, TRAINER_FLAGS, o)) {
        cli_print_help(stdout, argv[0], TRAINER_SUMMARY, train_flags, TRAIN_FLAG_COUNT, TRAINER_FLAGS, o);
        comm_finalize(&r->comm);
        return 0;
    }
    train_options_processes(o, &r->comm);  // -pi fs|tcp: the count and rank from -pn, -pr
    if (r->comm.rank != 0 && freopen("/dev/null", "w", stdout) == NULL) { ls_fatal("cannot silence rank %d", r->comm.rank); }
    // mpirun's processes compare flags now, over MPI; the others once trainer_init has connected them
    if (o->init_method == INIT_MPI) { comm_check_same_args(&r->comm, argc, argv, per_rank_flags); }
    if (o->checkpoint_every > 0 && o->output_dir == NULL) { cli_error("flag -n needs -o (where to write checkpoints)"); }
    if (o->resume && o->output_dir == NULL) { cli_error("flag -y needs -o (where the checkpoints are)"); }
    if (!step_list_parse(o->inject_nan, r->nan_steps, 64, &r->num_nan_steps)) {
        cli_error("flag --inject-nan: expected a comma list of at most 64 steps >= 1, e.g. 3,5");
    }
    GPT2Config probe;  // -e: a descriptor, or a model file that must be there
    if (!gpt2_config_from_descriptor(o->model, &probe) && !file_exists(o->model)) {
        ls_fatal("flag -e: '%s' is neither a model file (no such file) nor a descriptor (d6 d12 d24 d36 d48, or e.g. "
                 "L4C256H4)", o->model);
    }
    if (o->memory_report) {
        run_memory_report(r);
        comm_finalize(&r->comm);
        return 0;
    }
    trainer_init(o);  // may install a backend for the collectives (comm.ops: the GPU trainer's NCCL)
    if (o->init_method != INIT_MPI) { comm_check_same_args(&r->comm, argc, argv, per_rank_flags); }
    if (!o->dry_run) {
        data_check_inputs(o, &r->defaults);  // the paths given must be there
        if (o->output_dir) { run_dir_open(r); }
        data_make_defaults(o, &r->defaults, &r->comm);  // missing default data: `make data` now
    }
    r->model_source = o->model;
    if (o->resume) {
        char done_path[1200];
        if (!o->dry_run) { checkpoint_remove_temporaries(o->output_dir); }
        r->start_step = checkpoint_latest(o->output_dir);
        if (r->start_step >= 0) {
            checkpoint_paths(o->output_dir, r->start_step, r->comm.rank, r->model_path, r->state_path, done_path,
                             sizeof(r->model_path));
            r->model_source = r->model_path;
        } else {  // llm.c's -y: nothing to resume is a fresh start
            printf("-y 1: no complete checkpoint in %s: starting from step 0\n", o->output_dir);
            r->start_step = 0;
            o->resume = 0;
        }
    }
    if (!gpt2_config_from_descriptor(r->model_source, &probe)) { model_file_read_header(r->model_source, &probe); }
    r->accum = train_options_accum_steps(o, &probe, r->comm.size);  // T and the batch against the model
    r->loss_scale = 1.0f / (float)(r->accum * r->comm.size);
    if (!o->dry_run) { run_open_data(r, probe.vocab_size); }
    return 1;
}

// -y: the optimizer state, the data position and the sampler of the checkpoint.
static LS_UNUSED void run_resume(Run* r, GPT2* model) {
    RunState rs;
    state_file_read_header(r->state_path, &rs);
    if (rs.num_processes != r->comm.size || rs.process_rank != r->comm.rank) {
        ls_fatal("state file '%s' was written by rank %d of %d processes; this is rank %d of %d (resume with the same count)",
                 r->state_path, rs.process_rank, rs.num_processes, r->comm.rank, r->comm.size);
    }
    gpt2_state_read(model, r->state_path, &rs);
    if (rs.step != r->start_step) { ls_fatal("state file '%s': step %d, expected %d", r->state_path, rs.step, r->start_step); }
    if (r->do_train) { dataloader_seek(&r->train, rs.data_epoch, (size_t)rs.data_sample); }
    r->sample_rng = rs.sampler_rng;
    if (r->scaler.on && rs.loss_scale > 0.0f) {  // (a file from a run without loss scaling: the flags' start)
        r->scaler.scale = rs.loss_scale;
        r->scaler.good = rs.loss_scale_good;
    }
    snprintf(r->last_checkpoint, sizeof(r->last_checkpoint), "%s", r->model_path);
    logger_resume(&r->logger, r->start_step);
    printf("resumed from step %d\n", r->start_step);
}

// --prompt encoded with the tokenizer file (it must leave room to generate within -g and -t), and
// the samples' temperature and top-k.
// The tokenizer made ready to encode, for `flag` (--prompt, --hellaswag): the decoder file must be there.
static LS_UNUSED void run_encoder(Run* r, const char* flag) {
#ifdef TOKENIZER_DECODE_ONLY
    (void)r;
    ls_fatal("flag %s: this build has no encoder (built without PCRE2 and cJSON: install libpcre2-dev and "
             "libcjson-dev, then rebuild)", flag);
#else
    if (r->have_encoder) { return; }
    if (!r->have_tokenizer) {
        ls_fatal("flag %s: the tokenizer file %s is not there to encode with (`make data` makes it, or pass --tokenizer)",
                 flag, r->o.tokenizer);
    }
    tokenizer_prepare_encode(&r->tokenizer, r->o.tokenizer);
    r->have_encoder = 1;
#endif
}

static LS_UNUSED void run_prompt(Run* r, const GPT2* model) {
    const TrainOptions* o = &r->o;
    r->sample = (SampleOptions){NULL, 0, o->temperature, o->top_k};
    if (o->prompt == NULL) { return; }
    run_encoder(r, "--prompt");
#ifdef TOKENIZER_DECODE_ONLY
    (void)model;
#else
    if (o->prompt[0] == '\0') { ls_fatal("flag --prompt: empty (leave it out to sample from <|endoftext|>)"); }
    tokenizer_encode(&r->tokenizer, o->prompt, strlen(o->prompt), 0, &r->prompt);
    const int room = (o->gen_T < model->T ? o->gen_T : model->T) - 1;
    if (r->prompt.len >= (size_t)room) {
        ls_fatal("flag --prompt: %zu tokens leave no room to generate in a sample of %d (-g %d, at most -t %d, "
                 "<|endoftext|> first)", r->prompt.len, room + 1, o->gen_T, model->T);
    }
    for (size_t i = 0; i < r->prompt.len; i++) {
        if (r->prompt.data[i] >= model->config.vocab_size) {
            ls_fatal("flag --prompt: token %d is outside the model's vocabulary of %d (tokenizer %s)", r->prompt.data[i],
                     model->config.vocab_size, o->tokenizer);
        }
    }
    r->sample.prompt = r->prompt.data;
    r->sample.n_prompt = (int)r->prompt.len;
    printf("prompt: %zu tokens\n", r->prompt.len);
#endif
}

// --hellaswag: the examples read and tokenized for sequences of the model's T.
static LS_UNUSED void run_hellaswag_load(Run* r, const GPT2* model) {
    const TrainOptions* o = &r->o;
    if (!o->hellaswag) { return; }
    run_encoder(r, "--hellaswag");
#ifdef TOKENIZER_DECODE_ONLY
    (void)model;
#else
    if (!file_exists(o->hellaswag_file)) {
        ls_fatal("flag --hellaswag-file: '%s' not found (`make hellaswag` downloads HellaSwag's validation set)", o->hellaswag_file);
    }
    double t0 = wall_seconds();
    hellaswag_load(&r->hella, o->hellaswag_file, &r->tokenizer, model->T, o->hellaswag_max);
    printf("hellaswag: %d examples from %s (%d with the context's start cut to fit -t %d, %d left out) in %.1f s\n",
           r->hella.n, o->hellaswag_file, r->hella.truncated, model->T, r->hella.skipped, wall_seconds() - t0);
#endif
}

#ifndef TOKENIZER_DECODE_ONLY
// HellaSwag's accuracy (llmc/io/hellaswag.h): process k of P scores examples k, k + P, ...; rows go
// through the model in batches of its B rows, each batch as long as its longest row (or padded to
// the trainer's shape for it, gpt2_eval_shape). A row's score is its loss summed over the ending's
// tokens; the answer is the lowest sum (acc) or the lowest mean per token (acc_norm), the first
// ending on a tie. Prints and logs both.
static LS_UNUSED void run_hellaswag(Run* r, GPT2* model, int step) {
    const Hellaswag* h = &r->hella;
    const int B = model->B, P = r->comm.size, E = HELLASWAG_ENDINGS;
    int* inputs = (int*)mallocCheck((size_t)B * model->T * sizeof(int));
    int* targets = (int*)mallocCheck((size_t)B * model->T * sizeof(int));
    int* batch = (int*)mallocCheck((size_t)B * sizeof(int));
    double* sums = (double*)callocCheck((size_t)h->n * E, sizeof(double));
    double tv = wall_seconds(), counts[3] = {0.0, 0.0, 0.0};  // right by sum, right by mean, examples
    const int mine = h->n > r->comm.rank ? (h->n - r->comm.rank + P - 1) / P : 0;
    Progress progress;
    progress_begin(&progress, "hellaswag (examples)", (double)mine);
    int nb = 0;
    for (int k = 0; k < mine * E; k++) {
        batch[nb++] = (r->comm.rank + (k / E) * P) * E + k % E;  // row e * 4 + i
        if (nb < B && k + 1 < mine * E) { continue; }
        int Tb = 1;
        for (int b = 0; b < nb; b++) {
            const int len = hellaswag_row_len(h, batch[b] / E, batch[b] % E) - 1;
            if (len > Tb) { Tb = len; }
        }
        int Bp, Tp;  // (nb, Tb) or a padded shape (gpt2_eval_shape): token 0 beyond the rows
        gpt2_eval_shape(model, nb, Tb, &Bp, &Tp);
        for (int b = 0; b < Bp; b++) {
            const int len = b < nb ? hellaswag_row_len(h, batch[b] / E, batch[b] % E) - 1 : 0;
            const int* row = b < nb ? hellaswag_row(h, batch[b] / E, batch[b] % E) : NULL;
            for (int t = 0; t < Tp; t++) {
                inputs[b * Tp + t] = t < len ? row[t] : 0;
                targets[b * Tp + t] = t < len ? row[t + 1] : 0;
            }
        }
        gpt2_forward(model, inputs, targets, Bp, Tp);
        const float* losses = gpt2_token_losses(model);
        for (int b = 0; b < nb; b++) {
            const int e = batch[b] / E, len = hellaswag_row_len(h, e, batch[b] % E) - 1;
            double sum = 0.0;  // the ending's tokens: targets ctx_len .. len, at positions ctx_len - 1 ..
            for (int t = h->ctx_len[e] - 1; t < len; t++) { sum += losses[b * Tp + t]; }
            sums[batch[b]] = sum;
        }
        nb = 0;
        progress_update(&progress, (double)(k + 1) / E);
    }
    progress_end(&progress);
    for (int e = r->comm.rank; e < h->n; e += P) {
        int best = 0, best_norm = 0;
        for (int i = 1; i < E; i++) {
            if (sums[e * E + i] < sums[e * E + best]) { best = i; }
            if (sums[e * E + i] / h->end_len[e * E + i] < sums[e * E + best_norm] / h->end_len[e * E + best_norm]) { best_norm = i; }
        }
        counts[0] += best == h->label[e];
        counts[1] += best_norm == h->label[e];
        counts[2] += 1.0;
    }
    comm_allreduce_sum_f64_n(&r->comm, counts, 3);
    const double acc = counts[0] / counts[2], acc_norm = counts[1] / counts[2];
    printf("hellaswag: acc %.4f (%.0f/%.0f), acc_norm %.4f (%.0f/%.0f) (%.1f s)\n", acc, counts[0], counts[2], acc_norm,
           counts[1], counts[2], wall_seconds() - tv);
    logger_hellaswag(&r->logger, step, acc, acc_norm, (int)counts[2]);
    free(sums);
    free(batch);
    free(targets);
    free(inputs);
}
#endif

// The data, the tokenizer (for samples), the schedule, the log; the resume (-y). Returns 0 for
// --dry-run (the banner and memory table only).
static LS_UNUSED int run_start(Run* r, GPT2* model) {
    TrainOptions* o = &r->o;
    printf("model source: %s\n", r->model_source);
    trainer_describe(model, o, r->accum);
    if (r->comm.size > 1) {
        printf("data parallel: %d processes, %s\n", r->comm.size, o->zero_stage ? "ZeRO-1 (optimizer state sharded)" : "gradients all-reduced");
    }
    if (o->dry_run) { return 0; }
    if (o->profile) {  // a warm-up step, then the profiled one; no val loss, samples or checkpoints
        r->total_steps = r->start_step + 2;
        r->do_val = 0;
        o->sample_every = 0;
        o->checkpoint_every = 0;
    }
    if (r->do_train) {
        printf("train: %zu batches per epoch in %d shard(s); %d steps\n", dataloader_steps_per_epoch(&r->train),
               r->train.num_shards, r->total_steps);
    } else {
        printf("train: -x 0, no training: %s, then exit\n", o->sample_every > 0 ? "a sample" : "nothing to sample (-s 0)");
    }
    if ((o->sample_every > 0 || o->prompt || o->hellaswag) && file_exists(o->tokenizer)) {
        tokenizer_init_from_file(&r->tokenizer, o->tokenizer);
        r->have_tokenizer = 1;
    } else if (o->sample_every > 0 && !o->prompt && !o->hellaswag) {
        printf("note: tokenizer file %s not found (run `make data`); samples print token ids\n", o->tokenizer);
    }
    run_prompt(r, model);
    run_hellaswag_load(r, model);
    r->sched = (LrSchedule){(LrScheduleType)o->lr_schedule, o->lr, o->final_lr_frac, o->warmup, r->total_steps};
    r->lr = o->lr;
    r->sample_rng = 1337 + (uint64_t)o->seed;
    snprintf(r->last_checkpoint, sizeof(r->last_checkpoint), "(none)");
    logger_init(&r->logger, r->comm.rank == 0 ? o->output_dir : NULL, o->resume);  // every rank writes its state file
    loss_scale_init(&r->scaler, o->loss_scale, o->loss_scale_window);  // (a resume continues its state)
    if (o->resume) { run_resume(r, model); }
    if (r->do_train && r->start_step >= r->total_steps) {  // (the loop ends before its first step)
        printf("-y 1: the checkpoint of step %d is at or past the last step (%d, -x %d): nothing to train; the val loss and "
               "sample of the run's end follow\n", r->start_step, r->total_steps, o->max_steps);
    }
    if (r->scaler.on) {
        printf("loss scaling: S = %g, %s\n", r->scaler.scale, o->loss_scale_window > 0 ? "dynamic" : "static");
        r->scale_shown = r->scaler.scale;
    }
    if (o->overfit && r->do_train) { dataloader_next_batch(&r->train); }
    train_install_signals();
    for (int i = 0; i < MEM_COUNT; i++) { r->mem_mib += mib(model->mem.bytes[i]); }
    step_guard_init(&r->guard, o->skip_loss_z, o->skip_norm_z, o->outlier_window, o->max_skips);
    r->t_start = wall_seconds();
    r->best_val = INFINITY;
    return 1;
}

// Before step `step` (and once after the last): the stop signal, val loss (every -v steps and at
// the end), a sample (-s), a checkpoint (-n, the end, a stop). Returns 0 when the loop ends.
static LS_UNUSED int run_between_steps(Run* r, GPT2* model, int step) {
    const TrainOptions* o = &r->o;
    int last_step = step >= r->total_steps;  // (past it: a resumed run whose checkpoint is at or past -x)
    // every process stops at the same step, or the collectives would wait forever
    r->stopping = comm_allreduce_sum_f64(&r->comm, train_stop_signal != 0 ? 1.0 : 0.0) > 0.0;
    if (r->stopping) {
        printf("received %s: stopping after step %d%s\n", train_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", step,
               o->output_dir ? ", writing a checkpoint" : " (no -o: nothing is saved)");
    }
    if (r->do_val && !r->stopping && (step % o->val_every == 0 || last_step)) {
        double tv = wall_seconds();
        float val_loss = (float)(comm_allreduce_sum_f64(&r->comm, evaluate_val_loss(model, &r->val, o->val_max_steps)) / r->comm.size);
        printf("val loss %f at step %d (%.1f s)\n", val_loss, step, wall_seconds() - tv);
        logger_val(&r->logger, step, val_loss);
        if (val_loss < r->best_val) { r->best_val = val_loss; }
    }
#ifndef TOKENIZER_DECODE_ONLY
    if (o->hellaswag && !r->stopping && ((o->val_every > 0 && step % o->val_every == 0) || last_step)) { run_hellaswag(r, model, step); }
#endif
    if (o->sample_every > 0 && !r->stopping && r->comm.rank == 0 && ((step > 0 && step % o->sample_every == 0) || last_step)) {
        gpt2_sample(model, r->have_tokenizer ? &r->tokenizer : NULL, &r->sample, o->gen_T, &r->sample_rng);
    }
    if (o->output_dir && step > r->start_step &&
        ((o->checkpoint_every > 0 && (step % o->checkpoint_every == 0 || last_step)) || r->stopping)) {
        RunState rs;  // the trainer fills in its optimizer state's size and tag
        memset(&rs, 0, sizeof(rs));
        rs.num_processes = r->comm.size;
        rs.process_rank = r->comm.rank;
        rs.step = step;
        rs.has_m_v = 1;
        rs.num_params = model->num_parameters;
        rs.data_epoch = r->train.epoch;
        rs.data_sample = r->train.step_in_epoch;
        rs.sampler_rng = r->sample_rng;
        rs.loss_scale = r->scaler.on ? r->scaler.scale : 0.0f;
        rs.loss_scale_good = r->scaler.good;
        checkpoint_save(model, o->output_dir, &rs, &r->comm);
        if (r->comm.rank == 0) { checkpoint_prune(o->output_dir, o->keep_last, o->keep_every, r->comm.size); }
        snprintf(r->last_checkpoint, sizeof(r->last_checkpoint), "%s/model_%08d.bin", o->output_dir, step);
    }
    if (last_step || r->stopping) { return 0; }
    if (o->profile && step == r->start_step + 1) { trainer_profile(model, o, 1); }
    r->t_step = wall_seconds();
    return 1;
}

// The next training batch (-a: the same one every time).
static LS_UNUSED const DataLoader* run_next_batch(Run* r) {
    if (!r->o.overfit) { dataloader_next_batch(&r->train); }
    return &r->train;
}

// Testing (--inject-nan): whether step `step` (from 0) gets NaN gradients.
static LS_UNUSED int run_inject_nan(const Run* r, int step) { return step_list_has(r->nan_steps, r->num_nan_steps, step + 1); }

// The learning rate of step `step` (from 0), also left in r->lr for the update.
static LS_UNUSED float run_lr(Run* r, int step) { return r->lr = lr_schedule_get(&r->sched, step); }

// The step's mean loss over the micro-steps and the processes, from this process's sum of means.
static LS_UNUSED double run_mean_loss(Run* r, double loss_sum) {
    return comm_allreduce_sum_f64(&r->comm, loss_sum) / (r->accum * r->comm.size);
}

// The scale of a micro-step's loss gradient: its share of the step's mean, times loss scaling's S.
static LS_UNUSED float run_grad_scale(const Run* r) { return r->loss_scale * r->scaler.scale; }

// What the gradient norm and the update divide out: 1 / S (1 without loss scaling).
static LS_UNUSED float run_inv_loss_scale(const Run* r) { return 1.0f / r->scaler.scale; }

// Whether the update must be skipped: with loss scaling, a gradient overflow (S halves; not a
// guard skip), then a NaN/Inf or outlier loss or norm (llmc/run/step_guard.h).
static LS_UNUSED int run_guard(Run* r, double loss, float norm) {
    const float before = r->scaler.scale;
    const int overflow = loss_scale_step(&r->scaler, loss, norm);
    r->overflowed = overflow != 0;
    if (overflow < 0) {
        ls_fatal("loss scaling: the gradients are not finite even at loss scale %g (--loss-scale); the parameters are "
                 "those of the last update", before);
    }
    if (overflow) {
        snprintf(r->skip_why, sizeof(r->skip_why), "gradient overflow at loss scale %g (now %g; overflows so far: %d)",
                 before, r->scaler.scale, r->scaler.overflows);
        return 1;
    }
    return step_guard_check(&r->guard, (float)loss, norm, r->skip_why, sizeof(r->skip_why));
}

// After the update: the step line and log; the profile table; a skipped update's line, and the
// end of the run after --max-skips skipped in a row (exit code 3). Returns 0 when the loop ends.
static LS_UNUSED int run_step_end(Run* r, GPT2* model, int step, double loss, float norm, int skip) {
    const TrainOptions* o = &r->o;
    double t1 = wall_seconds(), dt = t1 - r->t_step;
    if (step > r->start_step) { r->train_seconds += dt; r->timed_steps++; }  // the first step warms up
    double avg = r->timed_steps ? r->train_seconds / r->timed_steps : dt;
    double tok_s = (double)o->B * o->T * r->accum * r->comm.size / dt;
    char extra[96];
    trainer_step_extra(model, o, tok_s, extra, sizeof(extra));
    if (r->scaler.on && r->scaler.scale != r->scale_shown) {  // loss scaling's S, in the line where it changed
        size_t used = strlen(extra);
        snprintf(extra + used, sizeof(extra) - used, " loss scale %g |", r->scaler.scale);
        r->scale_shown = r->scaler.scale;
    }
    print_step_line(step + 1, r->total_steps, (float)loss, norm, r->lr, 1000.0 * dt, extra, tok_s, t1 - r->t_start,
                    avg * (r->total_steps - step - 1));
    logger_train(&r->logger, step + 1, (float)loss, r->lr, norm, 1000.0 * dt, tok_s, r->mem_mib, skip,
                 r->scaler.on ? r->scaler.scale : 0.0f);
    if (o->profile && step == r->start_step + 1) { trainer_profile(model, o, 0); }
    r->steps_done++;
    if (!skip) { return 1; }
    if (r->overflowed) {  // loss scaling's own skip: S was halved, the guard counts nothing
        printf("step %d: update skipped, %s\n", step + 1, r->skip_why);
        return 1;
    }
    StepGuard* g = &r->guard;
    printf("step %d: update skipped, %s (%d skipped, %d in a row)\n", step + 1, r->skip_why, g->skipped, g->in_a_row);
    if (!step_guard_give_up(g)) { return 1; }
    printf("stopping: %d updates in a row were skipped (--max-skips %d); the parameters are those of step %d; "
           "last good checkpoint %s\n", g->in_a_row, o->max_skips, step + 1 - g->in_a_row, r->last_checkpoint);
    fflush(stdout);
    if (r->comm.rank == 0) {  // every rank decides the same (the loss and the norm are global)
        fprintf(stderr, "leanstep: error: %d updates in a row skipped (NaN/Inf or outliers), stopped at step %d; last good "
                "checkpoint %s\n", g->in_a_row, step + 1, r->last_checkpoint);
    }
    r->exit_code = 3;
    return 0;
}

// The run in one paragraph (not after --dry-run), then everything freed. Returns the exit code.
static LS_UNUSED int run_finish(Run* r, GPT2* model) {
    if (!r->o.dry_run) {
        char took[32];
        format_duration(wall_seconds() - r->t_start, took, sizeof(took));
        double tokens_per_step = (double)r->o.B * r->o.T * r->accum * r->comm.size;
        printf("summary: %d steps (%d to %d), %.0f tokens, %s", r->steps_done, r->start_step, r->start_step + r->steps_done,
               r->steps_done * tokens_per_step, took);
        if (r->timed_steps > 0) {
            printf(", %.2f ms and %.0f tok/s per step (average of %d)", 1000.0 * r->train_seconds / r->timed_steps,
                   tokens_per_step * r->timed_steps / r->train_seconds, r->timed_steps);
        }
        if (isfinite(r->best_val)) { printf(", best val loss %f", r->best_val); }
        if (r->guard.skipped > 0) { printf(", %d updates skipped", r->guard.skipped); }
        if (r->scaler.on) { printf(", %d gradient overflows (loss scale now %g)", r->scaler.overflows, r->scaler.scale); }
        printf(", last checkpoint %s\n", r->last_checkpoint);
        step_guard_free(&r->guard);
        logger_free(&r->logger);
        if (r->have_tokenizer) { tokenizer_free(&r->tokenizer); }
        tokenlist_free(&r->prompt);
#ifndef TOKENIZER_DECODE_ONLY
        if (r->o.hellaswag) { hellaswag_free(&r->hella); }
#endif
        if (r->do_val) { dataloader_free(&r->val); }
        if (r->do_train) { dataloader_free(&r->train); }
    }
    run_dir_unlock(&r->dir_lock);
    gpt2_free(model);
    comm_finalize(&r->comm);
    return r->exit_code;
}

#endif // LLMC_RUN_RUN_H
