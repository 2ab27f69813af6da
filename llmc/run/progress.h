/*
 progress.h: progress of a long phase (data preparation, evaluation, a download) on stderr.
 Quiet for phases that end within a second; then one line that rewrites itself on a terminal
 (at most 4 times a second), or, in a log file, a line every 10 s. progress_end clears or closes
 the line, so the output that follows starts on a clean line.

   Progress p;
   progress_begin(&p, "val loss", total);        // total 0: unknown (no percentage, no ETA)
   for (...) { ...; progress_update(&p, done); }
   progress_end(&p);
*/
#ifndef LLMC_PROGRESS_H
#define LLMC_PROGRESS_H

#include <stdio.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char* label;
    double total;
    double t_start, t_last;  // seconds (monotonic)
    int tty;                 // stderr is a terminal: rewrite the line in place
    int shown;               // a progress line was printed
} Progress;

static inline double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void progress_begin(Progress* p, const char* label, double total) {
    p->label = label;
    p->total = total;
    p->t_start = p->t_last = progress_now();
    p->tty = isatty(fileno(stderr));
    p->shown = 0;
}

static inline void progress_update(Progress* p, double done) {
    double now = progress_now(), elapsed = now - p->t_start;
    if (elapsed < 1.0 || now - p->t_last < (p->tty ? 0.25 : 10.0)) { return; }
    p->t_last = now;
    p->shown = 1;
    if (p->total > 0 && done > 0) {
        double eta = elapsed * (p->total - done) / done;
        fprintf(stderr, "%s%s: %.0f/%.0f (%.0f%%), %.0f s, eta %.0f s%s", p->tty ? "\r" : "", p->label, done, p->total,
                100.0 * done / p->total, elapsed, eta, p->tty ? "   " : "\n");
    } else {
        fprintf(stderr, "%s%s: %.0f, %.0f s%s", p->tty ? "\r" : "", p->label, done, elapsed, p->tty ? "   " : "\n");
    }
    fflush(stderr);
}

static inline void progress_end(Progress* p) {
    if (p->shown && p->tty) {
        fprintf(stderr, "\r%*s\r", 72, "");
        fflush(stderr);
    }
    p->shown = 0;
}

#endif // LLMC_PROGRESS_H
