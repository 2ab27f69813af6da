/*
 watchdog.h: a timeout for waits that depend on other processes (NCCL init, a collective's
 completion), so that a rank that died or hangs cannot hang the rest of the run forever.

   watchdog_start(rank, timeout_s);   once: starts the watchdog thread
   watchdog_arm("what");              before a wait that needs every rank
   watchdog_disarm();                 after it

 A wait armed for longer than timeout_s prints one line naming the wait and the rank, and the
 process exits with status 1 (_exit: the stuck thread cannot run atexit handlers safely). Under
 mpirun that ends the job; with -pi fs|tcp every surviving rank times out the same way.
*/
#ifndef LLMC_WATCHDOG_H
#define LLMC_WATCHDOG_H

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "llmc/utils.h"

typedef struct {
    pthread_mutex_t mu;
    double deadline;   // monotonic seconds; 0: nothing armed
    const char* what;  // the armed wait (a string literal)
    double timeout_s;
    int rank;
    int started;
} Watchdog;

static Watchdog watchdog_state = {PTHREAD_MUTEX_INITIALIZER, 0.0, NULL, 0.0, 0, 0};

static inline double watchdog_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void* watchdog_main(void* arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&watchdog_state.mu);
        double deadline = watchdog_state.deadline;
        const char* what = watchdog_state.what;
        pthread_mutex_unlock(&watchdog_state.mu);
        if (deadline > 0.0 && watchdog_now() > deadline) {
            fflush(stdout);
            fprintf(stderr, "leanstep: error: rank %d: %s did not complete within %.0f s (--comm-timeout): another rank "
                    "died or hangs; exiting\n", watchdog_state.rank, what ? what : "a collective", watchdog_state.timeout_s);
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

static inline void watchdog_start(int rank, double timeout_s) {
    if (watchdog_state.started) { return; }
    watchdog_state.rank = rank;
    watchdog_state.timeout_s = timeout_s;
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog_main, NULL) != 0) { ls_fatal("watchdog: cannot start its thread"); }
    pthread_detach(th);
    watchdog_state.started = 1;
}

static inline void watchdog_arm(const char* what) {
    pthread_mutex_lock(&watchdog_state.mu);
    watchdog_state.what = what;
    watchdog_state.deadline = watchdog_now() + watchdog_state.timeout_s;
    pthread_mutex_unlock(&watchdog_state.mu);
}

static inline void watchdog_disarm(void) {
    pthread_mutex_lock(&watchdog_state.mu);
    watchdog_state.deadline = 0.0;
    pthread_mutex_unlock(&watchdog_state.mu);
}

#endif // LLMC_WATCHDOG_H
