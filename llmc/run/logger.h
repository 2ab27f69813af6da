/*
 logger.h: the per-step line, ETA, and the logs of the output directory.

 main.log (llm.c's format): "s:<step> trl:<train loss>" and "s:<step> tel:<val loss>".
 log.jsonl: one JSON object per line, {"step":..,"loss":..,"lr":..,"norm":..,"ms":..,"tok_s":..,
   "mem_mib":..} for a training step, {"step":..,"val_loss":..} for an evaluation,
   {"step":..,"skipped":"<why>"} for a step whose update was skipped, and {"step":..,"resumed":true}
   where a run resumed (-y) from the checkpoint of that step. `make plot RUN=DIR` reads it.
 Both are appended to, so a resumed run continues the same files.
*/
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include "llmc/utils.h"

typedef struct {
    FILE* main_log;  // NULL without an output directory
    FILE* jsonl;     // NULL without an output directory
} Logger;

static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Creates dir if needed (one level).
static inline void ensure_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) { ls_fatal("output directory '%s' exists and is not a directory", dir); }
        return;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { ls_fatal("cannot create output directory '%s': %s", dir, strerror(errno)); }
}

static inline void logger_init(Logger* lg, const char* dir, int append) {
    lg->main_log = NULL;
    lg->jsonl = NULL;
    if (dir == NULL) { return; }
    ensure_dir(dir);
    char path[1100];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    lg->main_log = fopenCheck(path, append ? "a" : "w");
    snprintf(path, sizeof(path), "%s/log.jsonl", dir);
    lg->jsonl = fopenCheck(path, append ? "a" : "w");
}

// JSON has no NaN or Infinity: non-finite values are written as null.
static inline void json_number(FILE* f, const char* key, double x) {
    if (isfinite(x)) { fprintf(f, ",\"%s\":%.9g", key, x); } else { fprintf(f, ",\"%s\":null", key); }
}

static inline void logger_train(Logger* lg, int step, float loss, float lr, float norm, double ms, double tok_s,
                                double mem_mib, int skipped, float loss_scale) {
    if (lg->main_log) { fprintf(lg->main_log, "s:%d trl:%f\n", step, loss); fflush(lg->main_log); }
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d", step);
        json_number(lg->jsonl, "loss", loss);
        json_number(lg->jsonl, "lr", lr);
        json_number(lg->jsonl, "norm", norm);
        json_number(lg->jsonl, "ms", ms);
        json_number(lg->jsonl, "tok_s", tok_s);
        json_number(lg->jsonl, "mem_mib", mem_mib);
        if (loss_scale > 0.0f) { json_number(lg->jsonl, "loss_scale", loss_scale); }  // (0: loss scaling off)
        if (skipped) { fprintf(lg->jsonl, ",\"skipped\":true"); }
        fprintf(lg->jsonl, "}\n");
        fflush(lg->jsonl);
    }
}

static inline void logger_val(Logger* lg, int step, float loss) {
    if (lg->main_log) { fprintf(lg->main_log, "s:%d tel:%f\n", step, loss); fflush(lg->main_log); }
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d", step);
        json_number(lg->jsonl, "val_loss", loss);
        fprintf(lg->jsonl, "}\n");
        fflush(lg->jsonl);
    }
}

static inline void logger_hellaswag(Logger* lg, int step, double acc, double acc_norm, int n) {
    if (lg->main_log) { fprintf(lg->main_log, "s:%d hella:%f\n", step, acc_norm); fflush(lg->main_log); }
    if (lg->jsonl) {
        fprintf(lg->jsonl, "{\"step\":%d", step);
        json_number(lg->jsonl, "hellaswag_acc", acc);
        json_number(lg->jsonl, "hellaswag_acc_norm", acc_norm);
        fprintf(lg->jsonl, ",\"hellaswag_n\":%d}\n", n);
        fflush(lg->jsonl);
    }
}

static inline void logger_skip(Logger* lg, int step, const char* why) {
    if (lg->jsonl) { fprintf(lg->jsonl, "{\"step\":%d,\"skipped\":\"%s\"}\n", step, why); fflush(lg->jsonl); }
}

static inline void logger_resume(Logger* lg, int step) {
    if (lg->jsonl) { fprintf(lg->jsonl, "{\"step\":%d,\"resumed\":true}\n", step); fflush(lg->jsonl); }
}

static inline void logger_free(Logger* lg) {
    if (lg->main_log) { fclose(lg->main_log); lg->main_log = NULL; }
    if (lg->jsonl) { fclose(lg->jsonl); lg->jsonl = NULL; }
}

// "1h02m", "3m07s" or "12s"
static inline void format_duration(double seconds, char* buf, size_t len) {
    if (seconds < 0) { seconds = 0; }
    long s = (long)(seconds + 0.5);
    if (s >= 3600) { snprintf(buf, len, "%ldh%02ldm", s / 3600, (s % 3600) / 60); }
    else if (s >= 60) { snprintf(buf, len, "%ldm%02lds", s / 60, s % 60); }
    else { snprintf(buf, len, "%lds", s); }
}

// The per-step line, in llm.c's CUDA format plus elapsed time and ETA; `extra` (e.g. MFU) goes
// before the throughput.
static inline void print_step_line(int step, int total, float loss, float norm, float lr, double ms, const char* extra,
                                   double tok_per_s, double elapsed_s, double eta_s) {
    char el[32], eta[32];
    format_duration(elapsed_s, el, sizeof(el));
    format_duration(eta_s, eta, sizeof(eta));
    printf("step %4d/%d | loss %f | norm %.4f | lr %.2e | %.2f ms |%s %.0f tok/s | elapsed %s | eta %s\n", step, total,
           loss, norm, lr, ms, extra, tok_per_s, el, eta);
    fflush(stdout);
}

#endif // LLMC_LOGGER_H
