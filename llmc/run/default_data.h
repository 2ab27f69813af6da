/*
 default_data.h: the trainers' input files checked before training, and the default data made on
 first use.

 Paths given with -i, -j or --tokenizer must exist: if not, one line naming the flag and the file;
 nothing is ever fetched for a path the user gave. With the default train data (TinyShakespeare's
 shards and GPT-2's decoder file under data/, relative to the current directory), whatever of it
 is missing is made: the trainer runs the data step, `make data` in the current directory
 (dev/data/prepare_data.c: from $LEANSTEP_DATA_MIRROR when set, else the canonical URLs;
 sha256-checked, with progress), then continues, so `./train_gpt2cu` on a fresh checkout trains.
 With several processes, rank 0 runs the data step and the others wait for it at a barrier.
*/
#ifndef LLMC_DEFAULT_DATA_H
#define LLMC_DEFAULT_DATA_H

#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/dist/comm.h"
#include "llmc/run/train_options.h"
#include "llmc/utils.h"

extern char** environ;

// Does the glob pattern match at least one file?
static inline int data_pattern_matches(const char* pattern) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    int found = rc == 0 && g.gl_pathc > 0;
    if (rc == 0) { globfree(&g); }
    return found;
}

// Runs `make --no-print-directory data` here and waits for it. The make variables of a make that
// may have started this trainer are left out of its environment: the data step runs on its own.
static inline void default_data_run_make(const char* missing) {
    if (!file_exists("Makefile") || !file_exists("dev/data/prepare_data.c")) {
        ls_fatal("default data file %s not found, and the current directory is not the leanstep directory where "
                 "`make data` makes it: run the trainer from there, or pass -i/-j", missing);
    }
    const char* mirror = getenv("LEANSTEP_DATA_MIRROR");
    printf("data: %s not found: making the default data (TinyShakespeare) with `make data`, from %s%s\n", missing,
           mirror && mirror[0] ? "LEANSTEP_DATA_MIRROR=" : "the canonical URLs", mirror && mirror[0] ? mirror : "");
    fflush(stdout);
    size_t n_env = 0;
    while (environ[n_env] != NULL) { n_env++; }
    char** env = (char**)mallocCheck((n_env + 1) * sizeof(char*));
    size_t kept = 0;
    for (size_t i = 0; i < n_env; i++) {
        const char* e = environ[i];
        if (strncmp(e, "MAKEFLAGS=", 10) == 0 || strncmp(e, "MFLAGS=", 7) == 0 || strncmp(e, "MAKELEVEL=", 10) == 0) { continue; }
        env[kept++] = environ[i];
    }
    env[kept] = NULL;
    char arg0[] = "make", arg1[] = "--no-print-directory", arg2[] = "data";
    char* argv[] = {arg0, arg1, arg2, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "make", NULL, NULL, argv, env);
    free(env);
    if (rc != 0) {
        ls_fatal("default data file %s not found, and `make data` cannot start (%s): install make, or pass -i/-j",
                 missing, strerror(rc));
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) { ls_fatal("waiting for `make data`: %s", strerror(errno)); }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ls_fatal("`make data` failed (%s %d) making the default data; its error is above (without network: set "
                 "LEANSTEP_DATA_MIRROR to a mirror directory), or pass -i/-j",
                 WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
}

// Checks the input files the user named before the run uses them (before its banner). d holds the
// options as they were before the flags were parsed: a path still pointing at d's string is the
// default (not given). -x 0 trains nothing: no train data is read.
static inline void data_check_inputs(const TrainOptions* o, const TrainOptions* d) {
    int use_train = o->max_steps != 0, use_val = o->val_every > 0;
    int use_tok = o->sample_every > 0 || o->prompt != NULL || o->hellaswag;
    if (o->hellaswag && !file_exists(o->hellaswag_file)) {
        ls_fatal("flag --hellaswag-file: '%s' not found (`make hellaswag` downloads HellaSwag's validation set)",
                 o->hellaswag_file);
    }
    if (use_train && o->train_data != d->train_data && !data_pattern_matches(o->train_data)) {
        ls_fatal("flag -i: no files match '%s' (the default data, TinyShakespeare, is made by `make data`)", o->train_data);
    }
    if (use_val && o->val_data != d->val_data && !data_pattern_matches(o->val_data)) {
        ls_fatal("flag -j: no files match '%s' (the default data, TinyShakespeare, is made by `make data`)", o->val_data);
    }
    if (use_tok && o->tokenizer != d->tokenizer && !file_exists(o->tokenizer)) {
        ls_fatal("flag --tokenizer: file '%s' not found (the default, %s, is made by `make data`)", o->tokenizer,
                 d->tokenizer);
    }
    if (use_train && o->train_data != d->train_data) {  // the user's data: nothing is made for it
        if (use_val && o->val_data == d->val_data && !data_pattern_matches(o->val_data)) {
            ls_fatal("flag -j: the default '%s' is not there (pass -j with -i, or -v 0 for no val loss; `make data` "
                     "makes TinyShakespeare's)", o->val_data);
        }
    }
}

// The default files this run reads (TinyShakespeare, the tokenizer) are made by `make data` when
// missing: the long step, so it comes after every flag and path has been checked.
static inline void data_make_defaults(const TrainOptions* o, const TrainOptions* d, const Comm* comm) {
    int use_train = o->max_steps != 0, use_val = o->val_every > 0;
    int use_tok = o->sample_every > 0 || o->prompt != NULL || o->hellaswag;
    if (use_train && o->train_data != d->train_data) { return; }  // the user's data: nothing is made for it
    const char* missing = NULL;  // the first default file that is missing
    if (use_train && !data_pattern_matches(o->train_data)) { missing = o->train_data; }
    else if (use_val && o->val_data == d->val_data && !data_pattern_matches(o->val_data)) { missing = o->val_data; }
    else if (use_tok && o->tokenizer == d->tokenizer && !file_exists(o->tokenizer)) { missing = o->tokenizer; }
    if (comm->rank == 0 && missing != NULL) { default_data_run_make(missing); }
    if (comm->size > 1) { comm_barrier(comm); }  // the others wait for rank 0's data step
}

#endif // LLMC_DEFAULT_DATA_H
