/*
 train_loop.h: the training loop both trainers share: flags, start-up, val loss, sampling,
 checkpoints and resume, the step loop and its log lines. Only where the arithmetic runs differs.

 Contract: the including trainer first defines
   GPT2                         a struct with .config (GPT2Config), .num_parameters, .B, .T, and
                                .mem (MemCounter: what it allocated)
   gpt2_build(GPT2*, const char* model_or_descriptor, uint64_t seed, int B, int T, const TrainOptions*)
   gpt2_free(GPT2*)
   float gpt2_forward(GPT2*, const int* inputs, const int* targets, int B, int T)   host token arrays;
                                targets may be NULL; returns the mean loss (or -1 without targets)
   gpt2_forward_train(GPT2*, const int* inputs, const int* targets, int B, int T, float loss_scale)
                                the forward pass of a training micro-step, before gpt2_backward with
                                the same loss_scale (the GPU trainer writes the loss and the dlogits
                                in one pass and does not wait for the device)
   double gpt2_loss_sum(GPT2*)  the sum of the mean losses of the gpt2_forward_train calls since
                                gpt2_begin_step (may wait for the device: call it late)
   gpt2_begin_step(GPT2*, int step)    start of training step `step` (from 0): zero the gradients,
                                        choose what trains this step (BAdam)
   gpt2_backward(GPT2*, const int* inputs, const int* targets, int B, int T, float loss_scale)
   float gpt2_grad_norm(GPT2*, const AdamWHyper*)   reduce the gradients over the processes and
                                return their global norm (before clipping); nothing changes yet
   gpt2_update(GPT2*, const AdamWHyper*, int step)    clip with that norm and update; `step` from 1
   gpt2_poison_grads(GPT2*)     testing (--inject-nan): make the gradients NaN after a backward
   const float* gpt2_logits_row(GPT2*, int t)                    host fp32 logits of (b=0, t)
   gpt2_checkpoint_write(GPT2*, const char* model_path, const char* state_path, const RunState*)
   gpt2_state_read(GPT2*, const char* state_path, RunState*)
   TRAINER_FLAGS (CLI_CPU or CLI_GPU), TRAINER_SUMMARY, trainer_defaults(TrainOptions*),
   trainer_init(const TrainOptions*)  after the flags: the device; with several processes it may
                                install a Comm backend (o->comm->ops) for the loop's collectives,
   trainer_describe(const GPT2*, const TrainOptions*, int accum),
   trainer_step_extra(const GPT2*, const TrainOptions*, double tok_per_s, char* buf, size_t len)
   trainer_memory_report(const GPT2Config*, const TrainOptions*)  the predicted table, no allocation
                                text for the step line before tok/s, e.g. " 45.1% bf16 MFU |" (or "")
   trainer_profile(GPT2*, const TrainOptions*, int begin)   --profile: begin = 1 before the profiled
                                step, 0 after it (print the table); a no-op where there is no --profile
 and then calls train_main(argc, argv) from main.
*/
#ifndef LLMC_TRAIN_LOOP_H
#define LLMC_TRAIN_LOOP_H

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include "llmc/checkpoint.h"
#include "llmc/comm.h"
#include "llmc/dataloader.h"
#include "llmc/logger.h"
#include "llmc/optim/optim.h"
#include "llmc/progress.h"
#include "llmc/optim/schedulers.h"
#include "llmc/step_guard.h"
#include "llmc/tokenizer.h"
#include "llmc/default_data.h"
#include "llmc/train_options.h"

// ----------------------------------------------------------------------------
// sampling

// Draws a token from softmax(logits[0..V)) with a uniform coin in [0, 1).
static LS_UNUSED int sample_softmax(const float* logits, int V, float coin) {
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) { if (logits[i] > maxval) { maxval = logits[i]; } }
    double sum = 0.0;
    for (int i = 0; i < V; i++) { sum += exp((double)(logits[i] - maxval)); }
    double target = (double)coin * sum, cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)(logits[i] - maxval));
        if (cdf > target) { return i; }
    }
    return V - 1;
}

// Generates gen_T tokens after <|endoftext|> and prints them decoded (or as ids without a
// tokenizer).
static LS_UNUSED void gpt2_sample(GPT2* model, const Tokenizer* tok, int gen_T, uint64_t* rng) {
    int T = gen_T < model->T ? gen_T : model->T;
    int* tokens = (int*)mallocCheck((size_t)T * sizeof(int));
    tokens[0] = GPT2_EOT < model->config.vocab_size ? GPT2_EOT : 0;
    printf("generating:\n---\n");
    for (int t = 1; t < T; t++) {
        gpt2_forward(model, tokens, NULL, 1, t);
        const float* logits = gpt2_logits_row(model, t - 1);
        tokens[t] = sample_softmax(logits, model->config.vocab_size, xorshift_f32(rng));
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

static LS_UNUSED void usage_error(const char* prog, const char* msg) {
    fprintf(stderr, "%s: error: %s (see --help)\n", prog, msg);
    exit(2);
}

static LS_UNUSED int train_main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    TrainOptions o;
    train_options_defaults(&o);
    trainer_defaults(&o);
    const TrainOptions defaults = o;  // data_check_inputs tells given paths from defaults
    o.comm = &comm;
    if (cli_parse(argc, argv, train_flags, TRAIN_FLAG_COUNT, TRAINER_FLAGS, &o)) {
        cli_print_help(stdout, argv[0], TRAINER_SUMMARY, train_flags, TRAIN_FLAG_COUNT, TRAINER_FLAGS, &o);
        comm_finalize(&comm);
        return 0;
    }
    train_options_processes(argv[0], &o, &comm);  // -pi fs|tcp: the count and rank from -pn, -pr
    if (comm.rank != 0 && freopen("/dev/null", "w", stdout) == NULL) { ls_fatal("cannot silence rank %d", comm.rank); }
    // mpirun's processes compare flags now, over MPI; the others once trainer_init has connected them
    if (o.init_method == INIT_MPI) { comm_check_same_args(&comm, argc, argv, per_rank_flags); }
    if (o.checkpoint_every > 0 && o.output_dir == NULL) { usage_error(argv[0], "flag -n needs -o (where to write checkpoints)"); }
    if (o.resume && o.output_dir == NULL) { usage_error(argv[0], "flag -y needs -o (where the checkpoints are)"); }
    int nan_steps[64], num_nan_steps = 0;
    if (!step_list_parse(o.inject_nan, nan_steps, 64, &num_nan_steps)) {
        usage_error(argv[0], "flag --inject-nan: expected a comma list of at most 64 steps >= 1, e.g. 3,5");
    }
    if (o.memory_report) {  // the memory model alone: no allocation, no device
        Comm report_comm = comm;  // -pn N: the table of one of N processes
        if (o.num_processes > comm.size) { report_comm.size = o.num_processes; }
        o.comm = &report_comm;
        GPT2Config mc;
        if (!gpt2_config_from_descriptor(o.model, &mc)) { model_file_read_header(o.model, &mc); }
        char err[200];
        if (!gpt2_config_valid(&mc, err, sizeof(err))) { ls_fatal("flag -e: '%s': %s", o.model, err); }
        int accum = train_options_accum_steps(argv[0], &o, &mc, report_comm.size);
        gpt2_describe(&mc, gpt2_num_parameters(&mc), &o, accum);
        trainer_memory_report(&mc, &o);
        comm_finalize(&comm);
        return 0;
    }
    trainer_init(&o);  // may install a backend for the collectives (comm.ops: the GPU trainer's NCCL)
    if (o.init_method != INIT_MPI) { comm_check_same_args(&comm, argc, argv, per_rank_flags); }

    // the model, from the newest checkpoint when resuming
    int start_step = 0;
    char model_path[1200], state_path[1200], done_path[1200];
    const char* model_source = o.model;
    if (o.resume) {
        checkpoint_remove_temporaries(o.output_dir);
        start_step = checkpoint_latest(o.output_dir);
        if (start_step < 0) { ls_fatal("-y 1: no complete checkpoint (DONE_* file) in '%s'", o.output_dir); }
        checkpoint_paths(o.output_dir, start_step, comm.rank, model_path, state_path, done_path, sizeof(model_path));
        model_source = model_path;
    }
    GPT2Config probe;  // check T and the batch against the model before allocating
    if (!gpt2_config_from_descriptor(model_source, &probe)) { model_file_read_header(model_source, &probe); }
    int accum = train_options_accum_steps(argv[0], &o, &probe, comm.size);
    GPT2 model;
    gpt2_build(&model, model_source, (uint64_t)o.seed, o.B, o.T, &o);
    const GPT2Config* c = &model.config;
    printf("model source: %s\n", model_source);
    trainer_describe(&model, &o, accum);
    if (comm.size > 1) {
        printf("data parallel: %d processes, %s\n", comm.size, o.zero_stage ? "ZeRO-1 (optimizer state sharded)" : "gradients all-reduced");
    }
    if (o.dry_run) { gpt2_free(&model); comm_finalize(&comm); return 0; }

    data_check_inputs(&o, &defaults, &comm);  // a missing default: `make data` runs now
    DataLoader train, val;
    dataloader_init(&train, o.train_data, o.B, o.T, comm.rank, comm.size, !o.overfit, (uint64_t)o.seed, c->vocab_size);
    int do_val = o.val_every > 0;
    if (do_val) { dataloader_init(&val, o.val_data, o.B, o.T, comm.rank, comm.size, 0, (uint64_t)o.seed, c->vocab_size); }
    int total_steps = o.max_steps >= 0 ? o.max_steps : (int)(dataloader_steps_per_epoch(&train) / (size_t)accum);
    if (total_steps < 1 && o.max_steps != 0) { total_steps = 1; }
    if (o.profile) {  // a warm-up step, then the profiled one; no val loss, samples or checkpoints
        total_steps = start_step + 2;
        do_val = 0;
        o.sample_every = 0;
        o.checkpoint_every = 0;
    }
    printf("train: %zu batches per epoch in %d shard(s); %d steps\n", dataloader_steps_per_epoch(&train),
           train.num_shards, total_steps);

    Tokenizer tokenizer;
    int have_tokenizer = 0;
    if (o.sample_every > 0) {
        if (file_exists(o.tokenizer)) {
            tokenizer_init_from_file(&tokenizer, o.tokenizer);
            have_tokenizer = 1;
        } else {
            printf("note: tokenizer file %s not found (run `make data`); samples print token ids\n", o.tokenizer);
        }
    }
    LrSchedule sched = {(LrScheduleType)o.lr_schedule, o.lr, o.final_lr_frac, o.warmup, total_steps};
    AdamWHyper hyper = {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip};
    uint64_t sample_rng = 1337 + (uint64_t)o.seed;
    Logger logger;  // rank 0 logs; every rank writes its state file into the directory
    if (o.output_dir) { ensure_dir(o.output_dir); }
    logger_init(&logger, comm.rank == 0 ? o.output_dir : NULL, o.resume);

    if (o.resume) {
        RunState rs;
        state_file_read_header(state_path, &rs);
        if (rs.num_processes != comm.size || rs.process_rank != comm.rank) {
            ls_fatal("state file '%s' was written by rank %d of %d processes; this is rank %d of %d (resume with the same count)",
                     state_path, rs.process_rank, rs.num_processes, comm.rank, comm.size);
        }
        gpt2_state_read(&model, state_path, &rs);
        if (rs.step != start_step) { ls_fatal("state file '%s': step %d, expected %d", state_path, rs.step, start_step); }
        dataloader_seek(&train, rs.data_epoch, (size_t)rs.data_sample);
        sample_rng = rs.sampler_rng;
        printf("resumed from step %d\n", start_step);
    }
    if (o.overfit) { dataloader_next_batch(&train); }
    train_install_signals();
    double mem_mib = 0.0;
    for (int i = 0; i < MEM_COUNT; i++) { mem_mib += mib(model.mem.bytes[i]); }

    StepGuard guard;
    step_guard_init(&guard, o.skip_loss_z, o.skip_norm_z, o.outlier_window, o.max_skips);
    int exit_code = 0;
    double t_start = wall_seconds(), train_seconds = 0.0;
    int timed_steps = 0, steps_done = 0;
    float best_val = INFINITY;
    char last_checkpoint[1200] = "(none)";
    for (int step = start_step; step <= total_steps; step++) {
        int last_step = step == total_steps;
        // every process stops at the same step, or the collectives would wait forever
        int stopping = comm_allreduce_sum_f64(&comm, train_stop_signal != 0 ? 1.0 : 0.0) > 0.0;
        if (stopping) {
            printf("received %s: stopping after step %d%s\n", train_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", step,
                   o.output_dir ? ", writing a checkpoint" : " (no -o: nothing is saved)");
        }
        if (do_val && !stopping && (step % o.val_every == 0 || last_step)) {
            double tv = wall_seconds();
            float val_loss = (float)(comm_allreduce_sum_f64(&comm, evaluate_val_loss(&model, &val, o.val_max_steps)) / comm.size);
            printf("val loss %f (%.1f s)\n", val_loss, wall_seconds() - tv);
            logger_val(&logger, step, val_loss);
            if (val_loss < best_val) { best_val = val_loss; }
        }
        if (o.sample_every > 0 && !stopping && comm.rank == 0 && ((step > 0 && step % o.sample_every == 0) || last_step)) {
            gpt2_sample(&model, have_tokenizer ? &tokenizer : NULL, o.gen_T, &sample_rng);
        }
        if (o.output_dir && step > start_step &&
            ((o.checkpoint_every > 0 && (step % o.checkpoint_every == 0 || last_step)) || stopping)) {
            RunState rs = {comm.size, comm.rank, step, 1, model.num_parameters, train.epoch, train.step_in_epoch, sample_rng};
            checkpoint_save(&model, o.output_dir, &rs, &comm);
            if (comm.rank == 0) { checkpoint_prune(o.output_dir, o.keep_last, o.keep_every, comm.size); }
            snprintf(last_checkpoint, sizeof(last_checkpoint), "%s/model_%08d.bin", o.output_dir, step);
        }
        if (last_step || stopping) { break; }

        int profiling = o.profile && step == start_step + 1;
        if (profiling) { trainer_profile(&model, &o, 1); }
        double t0 = wall_seconds();
        gpt2_begin_step(&model, step);
        float loss_scale = 1.0f / (float)(accum * comm.size);
        for (int micro = 0; micro < accum; micro++) {
            if (!o.overfit) { dataloader_next_batch(&train); }
            gpt2_forward_train(&model, train.inputs, train.targets, o.B, o.T, loss_scale);
            gpt2_backward(&model, train.inputs, train.targets, o.B, o.T, loss_scale);
        }
        if (step_list_has(nan_steps, num_nan_steps, step + 1)) { gpt2_poison_grads(&model); }
        hyper.lr = lr_schedule_get(&sched, step);
        float norm = gpt2_grad_norm(&model, &hyper);
        // the loss is read once the step's work has been queued (and waited for by the norm)
        double loss = comm_allreduce_sum_f64(&comm, gpt2_loss_sum(&model)) / (accum * comm.size);
        char why[128];
        int skip = step_guard_check(&guard, (float)loss, norm, why, sizeof(why));
        if (!skip) { gpt2_update(&model, &hyper, step + 1); }
        double t1 = wall_seconds();
        if (step > start_step) { train_seconds += t1 - t0; timed_steps++; }  // the first step warms up
        double avg = timed_steps ? train_seconds / timed_steps : (t1 - t0);
        double tok_s = (double)o.B * o.T * accum * comm.size / (t1 - t0);
        char extra[64];
        trainer_step_extra(&model, &o, tok_s, extra, sizeof(extra));
        print_step_line(step + 1, total_steps, (float)loss, norm, hyper.lr, 1000.0 * (t1 - t0), extra, tok_s,
                        t1 - t_start, avg * (total_steps - step - 1));
        logger_train(&logger, step + 1, (float)loss, hyper.lr, norm, 1000.0 * (t1 - t0), tok_s, mem_mib, skip);
        if (profiling) { trainer_profile(&model, &o, 0); }
        steps_done++;
        if (skip) {
            printf("step %d: update skipped, %s (%d skipped, %d in a row)\n", step + 1, why, guard.skipped, guard.in_a_row);
            if (step_guard_give_up(&guard)) {
                printf("stopping: %d updates in a row were skipped (--max-skips %d); the parameters are those of step %d; "
                       "last good checkpoint %s\n", guard.in_a_row, o.max_skips, step + 1 - guard.in_a_row, last_checkpoint);
                fflush(stdout);
                if (comm.rank == 0) {  // every rank decides the same (the loss and the norm are global)
                    fprintf(stderr, "%s: error: %d updates in a row skipped (NaN/Inf or outliers), stopped at step %d; last good checkpoint %s\n",
                            argv[0], guard.in_a_row, step + 1, last_checkpoint);
                }
                exit_code = 3;
                break;
            }
        }
    }
    // the run in one paragraph
    char took[32];
    format_duration(wall_seconds() - t_start, took, sizeof(took));
    double tokens_per_step = (double)o.B * o.T * accum * comm.size;
    printf("summary: %d steps (%d to %d), %.0f tokens, %s", steps_done, start_step, start_step + steps_done,
           steps_done * tokens_per_step, took);
    if (timed_steps > 0) {
        printf(", %.2f ms and %.0f tok/s per step (average of %d)", 1000.0 * train_seconds / timed_steps,
               tokens_per_step * timed_steps / train_seconds, timed_steps);
    }
    if (isfinite(best_val)) { printf(", best val loss %f", best_val); }
    if (guard.skipped > 0) { printf(", %d updates skipped", guard.skipped); }
    printf(", last checkpoint %s\n", last_checkpoint);
    step_guard_free(&guard);
    logger_free(&logger);
    if (have_tokenizer) { tokenizer_free(&tokenizer); }
    if (do_val) { dataloader_free(&val); }
    dataloader_free(&train);
    gpt2_free(&model);
    comm_finalize(&comm);
    return exit_code;
}

#endif // LLMC_TRAIN_LOOP_H
