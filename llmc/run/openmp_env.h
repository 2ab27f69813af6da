/*
 openmp_env.h: the OpenMP runtime settings the CPU trainer runs best with, applied before the
 runtime reads them.

 libgomp's default wait policy keeps an idle thread spinning for a while before it sleeps. The
 CPU trainer alternates between its own parallel loops and OpenBLAS's (which synchronizes its
 threads with sched_yield), so there is always a thread waiting, and here its spinning slows the
 thread doing the work: bench_train measured L4C256H4 B=4 T=64 at 770 tok/s spinning and 1,912
 tok/s with OMP_WAIT_POLICY=passive, and d12 at 144 against 261 tok/s (2 threads, this project's
 2-core machine). libgomp reads the policy from the environment when it is loaded, before main,
 so the only way to choose it from inside is to run the program again with the variable set.
*/
#ifndef LLMC_OPENMP_ENV_H
#define LLMC_OPENMP_ENV_H

#include <stdlib.h>
#include <unistd.h>

// Unless the user chose a wait policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT), sets
// OMP_WAIT_POLICY=passive for the next exec of this program; returns 1 when it did.
static inline int openmp_env_prefer_passive(void) {
    if (getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL) { return 0; }
    return setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
}

// The same, and re-executes this program when it set the policy; call it first thing in main
// (the CPU programs call cpu_env_apply of llmc/run/blas_env.h, which also sets the BLAS core in
// the same re-execution). If the exec fails the program goes on with the default policy.
static inline void openmp_prefer_passive_wait(char** argv) {
    if (openmp_env_prefer_passive()) { execv("/proc/self/exe", argv); }
}

#endif // LLMC_OPENMP_ENV_H
