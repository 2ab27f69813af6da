/*
 blas_env.h: the OpenBLAS kernel the CPU programs run with, and the start-up that applies it
 together with the OpenMP settings of llmc/run/openmp_env.h (one re-execution for both).

 OpenBLAS built with DYNAMIC_ARCH (Debian's libopenblas0-openmp / -pthread) picks its kernels
 from the CPU's family and model when it is loaded. On virtual machines that hide the model it
 falls back to an old core: on a 2-core Xeon VM with AVX-512 it chose Prescott (SSE3), and
 sgemm ran at 44 GFLOP/s against 254 with OPENBLAS_CORETYPE=SkylakeX. The core can
 only be chosen through OPENBLAS_CORETYPE, read at load time, so cpu_env_apply() sets it from
 cpuid and runs the program again, once. After that run starts, a small sgemm self-check
 against a plain loop confirms the choice; when it disagrees, crashes, or OpenBLAS did not take
 the core, one warning, and the program goes on (run again if needed) with OpenBLAS's own choice.

 The user's OPENBLAS_CORETYPE always wins. LEANSTEP_BLAS_CORE carries the decision across the
 re-execution ("chose:CORE:DETECTED" or "rejected:CORE:DETECTED:REASON"), so that nothing loops.
 Test hooks (dev/test/test_blas_env.py), LEANSTEP_BLAS_TEST containing: "pretend-fallback"
 (decide as if OpenBLAS had detected Prescott), "corrupt" (the self-check's reference is off by
 1% of its magnitude), "crash" (the self-check raises SIGILL, as a kernel with a missing
 instruction would), "not-taken" (as if OpenBLAS had ignored OPENBLAS_CORETYPE).
*/
#ifndef LLMC_BLAS_ENV_H
#define LLMC_BLAS_ENV_H

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "llmc/run/openmp_env.h"

// ----------------------------------------------------------------------------
// the choice: cpuid features and OpenBLAS's core name in, the core to ask for out (pure functions)

enum {
    BLAS_CPU_AVX2_FMA = 1 << 0,  // AVX2 and FMA3, and the OS saves the ymm registers
    BLAS_CPU_AVX512 = 1 << 1,    // AVX-512 F, DQ, BW and VL, and the OS saves the zmm and mask registers
    BLAS_CPU_AVX512_BF16 = 1 << 2,
    BLAS_CPU_AMD = 1 << 3,       // vendor AuthenticAMD or HygonGenuine
};

// OpenBLAS's x86 core names (0.3.x, force_coretype's list and later ones) by the instruction set
// their kernels use: 0 SSE2, 1 SSE3, 2 SSSE3, 3 SSE4, 4 AVX, 5 AVX2+FMA, 6 AVX-512, 7 AVX-512 +
// BF16, 8 AVX-512 + AMX/FP16. -1: a name not in the table (a newer OpenBLAS: left alone).
static inline int blas_core_level(const char* core) {
    static const struct { const char* name; int level; } cores[] = {
        {"Unknown", 0}, {"Katmai", 0}, {"Coppermine", 0}, {"Northwood", 0}, {"Banias", 0}, {"Athlon", 0},
        {"Opteron", 0}, {"Prescott", 1}, {"Opteron_SSE3", 1}, {"Barcelona", 1}, {"Core2", 2}, {"Penryn", 2},
        {"Dunnington", 2}, {"Atom", 2}, {"Nano", 2}, {"Bobcat", 2}, {"Nehalem", 3}, {"Sandybridge", 4},
        {"Bulldozer", 4}, {"Piledriver", 4}, {"Steamroller", 4}, {"Excavator", 4}, {"Haswell", 5},
        {"Zen", 5}, {"SkylakeX", 6}, {"Cooperlake", 7}, {"SapphireRapids", 8},
    };
    if (core == NULL) { return -1; }
    for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); i++) {
        if (strcasecmp(core, cores[i].name) == 0) { return cores[i].level; }
    }
    return -1;
}

// The core to set with OPENBLAS_CORETYPE, or NULL to keep OpenBLAS's own choice: the best core
// the CPU runs (AVX-512 + BF16: Cooperlake, AVX-512: SkylakeX, AVX2 + FMA: Haswell, or Zen on
// AMD) when OpenBLAS detected a weaker one. Only AVX2 and better are chosen (the machines whose
// loss is large); a core name not in the table is never overridden.
static inline const char* blas_choose_core(unsigned features, const char* detected) {
    const char* best = NULL;
    if ((features & BLAS_CPU_AVX512) && (features & BLAS_CPU_AVX512_BF16)) { best = "Cooperlake"; }
    else if (features & BLAS_CPU_AVX512) { best = "SkylakeX"; }
    else if (features & BLAS_CPU_AVX2_FMA) { best = (features & BLAS_CPU_AMD) ? "Zen" : "Haswell"; }
    if (best == NULL) { return NULL; }
    int have = blas_core_level(detected);
    if (have < 0 || have >= blas_core_level(best)) { return NULL; }
    return best;
}

// What this CPU supports, as BLAS_CPU_* bits (0 off x86).
static inline unsigned blas_cpu_features(void) {
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) { return 0; }
    unsigned max_leaf = a;
    char vendor[13];
    memcpy(vendor, &b, 4); memcpy(vendor + 4, &d, 4); memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    if (strcmp(vendor, "AuthenticAMD") == 0 || strcmp(vendor, "HygonGenuine") == 0) { f |= BLAS_CPU_AMD; }
    if (max_leaf < 7 || !__get_cpuid(1, &a, &b, &c, &d)) { return f; }
    unsigned fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u;
    if (!osxsave || !avx) { return f; }
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    int os_ymm = (xcr0_lo & 0x6) == 0x6, os_zmm = (xcr0_lo & 0xe6) == 0xe6;  // xmm|ymm; + opmask|zmm
    __cpuid_count(7, 0, a, b, c, d);
    unsigned avx2 = (b >> 5) & 1u;
    int avx512 = ((b >> 16) & 1u) && ((b >> 17) & 1u) && ((b >> 30) & 1u) && ((b >> 31) & 1u);  // F DQ BW VL
    unsigned subleaves = a;
    if (os_ymm && avx2 && fma) { f |= BLAS_CPU_AVX2_FMA; }
    if (os_zmm && avx2 && fma && avx512) {
        f |= BLAS_CPU_AVX512;
        if (subleaves >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            if ((a >> 5) & 1) { f |= BLAS_CPU_AVX512_BF16; }
        }
    }
#endif
    return f;
}

// ----------------------------------------------------------------------------
// the self-check: cblas_sgemm in the trainer's three layouts against a plain loop

// Fills v[0..n) with values in [-1, 1) from a fixed sequence.
static inline void blas_check_fill(float* v, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
}

// C = alpha op(A) op(B) + beta C (row-major, as cblas) in double: the reference, and the sum of
// |terms| that bounds each element's rounding error.
static inline void blas_check_reference(int ta, int tb, int M, int N, int K, const float* A, const float* B,
                                        float beta, const float* C0, double* ref, double* mag) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0.0, m = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += a * b;
                m += fabs(a * b);
            }
            ref[(size_t)i * N + j] = s + (double)beta * C0[(size_t)i * N + j];
            mag[(size_t)i * N + j] = m + fabs((double)beta * C0[(size_t)i * N + j]);
        }
    }
}

// Runs the checks; returns 1 when every element is within the bound, else 0 with the reason in
// why. Bound: an fp32 dot product of K terms in any order (FMA or not), plus the beta term, is
// within gamma_{K+2} = (K+2)u / (1 - (K+2)u) of the sum of |terms| (Higham, Accuracy and
// Stability, 3.1), u = 2^-24; the check allows twice that (K = 61..160: 7.6e-6..2e-5 relative).
// A wrong kernel (a missing or misplaced term) is off by about one term, >= 1/K of that sum.
static inline int blas_selfcheck(int corrupt, char* why, size_t len) {
    // (M, N, K, transA, transB, beta): small odd shapes (edge paths of the kernels, one thread)
    // and one large enough for OpenBLAS's threads; the layouts of train_gpt2.c's matmuls.
    static const int cases[][6] = {
        {37, 29, 61, 0, 1, 0}, {37, 29, 61, 0, 0, 0}, {29, 37, 61, 1, 0, 1}, {128, 96, 160, 0, 1, 0}, {96, 128, 160, 1, 0, 1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int M = cases[c][0], N = cases[c][1], K = cases[c][2], ta = cases[c][3], tb = cases[c][4];
        float beta = cases[c][5] ? 1.0f : 0.0f;
        float* A = (float*)malloc((size_t)M * K * sizeof(float));
        float* B = (float*)malloc((size_t)K * N * sizeof(float));
        float* C = (float*)malloc((size_t)M * N * sizeof(float));
        float* C0 = (float*)malloc((size_t)M * N * sizeof(float));
        double* ref = (double*)malloc((size_t)M * N * sizeof(double));
        double* mag = (double*)malloc((size_t)M * N * sizeof(double));
        if (!A || !B || !C || !C0 || !ref || !mag) {
            free(A); free(B); free(C); free(C0); free(ref); free(mag);
            snprintf(why, len, "out of memory");
            return 0;
        }
        blas_check_fill(A, M * K, 1u + (unsigned)c);
        blas_check_fill(B, K * N, 101u + (unsigned)c);
        blas_check_fill(C0, M * N, 201u + (unsigned)c);
        memcpy(C, C0, (size_t)M * N * sizeof(float));
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                    A, ta ? M : K, B, tb ? K : N, beta, C, N);
        blas_check_reference(ta, tb, M, N, K, A, B, beta, C0, ref, mag);
        if (corrupt) { ref[0] += 0.01 * mag[0]; }  // test hook: a result 1% of the magnitude off
        double u = ldexp(1.0, -24), gamma = (K + 2) * u / (1.0 - (K + 2) * u);
        int ok = 1;
        for (int i = 0; i < M * N && ok; i++) {
            double err = fabs((double)C[i] - ref[i]);
            if (!(err <= 2.0 * gamma * mag[i])) {
                snprintf(why, len, "sgemm %dx%dx%d%s%s element %d: %.7g, expected %.7g", M, N, K, ta ? " A^T" : "",
                         tb ? " B^T" : "", i, (double)C[i], ref[i]);
                ok = 0;
            }
        }
        free(A); free(B); free(C); free(C0); free(ref); free(mag);
        if (!ok) { return 0; }
    }
    return 1;
}

// ----------------------------------------------------------------------------
// the start-up: one re-execution for the OpenMP and BLAS settings, the check after it

#define BLAS_ENV_MARK "LEANSTEP_BLAS_CORE"

static char blas_env_note[320];  // how the core was chosen, for blas_env_describe()

static inline int blas_env_test(const char* what) {
    const char* t = getenv("LEANSTEP_BLAS_TEST");
    return t != NULL && strstr(t, what) != NULL;
}

// The environment for running again without leanstep's core: built before the self-check, so that
// a crash inside OpenBLAS can exec it from the signal handler (async-signal-safe: execve, write).
static char** blas_env_fallback_envp;
static char** blas_env_argv;
static char blas_env_crash_msg[200];
static size_t blas_env_crash_len;

static __attribute__((unused)) void blas_env_on_crash(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, blas_env_crash_msg, blas_env_crash_len);
    (void)w;
    execve("/proc/self/exe", blas_env_argv, blas_env_fallback_envp);
    _exit(1);
}

// A copy of environ without OPENBLAS_CORETYPE and with the mark set to mark (malloc'd, never freed:
// it is either exec'd or dropped with the process image).
static inline char** blas_env_without_core(const char* mark) {
    extern char** environ;
    size_t n = 0;
    while (environ[n]) { n++; }
    char** envp = (char**)malloc((n + 2) * sizeof(char*));
    if (envp == NULL) { return NULL; }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) == 0 || strncmp(environ[i], BLAS_ENV_MARK "=", sizeof(BLAS_ENV_MARK)) == 0) { continue; }
        envp[k++] = environ[i];
    }
    size_t ml = strlen(BLAS_ENV_MARK) + 1 + strlen(mark) + 1;
    envp[k] = (char*)malloc(ml);
    if (envp[k] == NULL) { free(envp); return NULL; }
    snprintf(envp[k], ml, "%s=%s", BLAS_ENV_MARK, mark);
    envp[k + 1] = NULL;
    return envp;
}

// Called when this run was started by cpu_env_apply with leanstep's core (mark "chose:CORE:WAS"):
// keeps it when OpenBLAS took it and the self-check passes; otherwise warns once and continues
// with OpenBLAS's own choice (running again when the kernels in this process are leanstep's).
static inline void blas_env_verify(char** argv, const char* core, const char* was) {
    char why[200] = "";
    const char* now = blas_env_test("not-taken") ? "Prescott" : openblas_get_corename();
    int took = strcasecmp(now, core) == 0;
    if (!took) {
        snprintf(why, sizeof(why), "OpenBLAS did not take OPENBLAS_CORETYPE=%s (it runs %s)", core, now);
    } else {
        char mark[300];
        snprintf(mark, sizeof(mark), "rejected:%s:%s:crashed in the sgemm self-check", core, was);
        blas_env_fallback_envp = blas_env_without_core(mark);
        blas_env_argv = argv;
        snprintf(blas_env_crash_msg, sizeof(blas_env_crash_msg), "warning: the OpenBLAS core leanstep chose (%s) "
                 "crashed in the sgemm self-check; running again with OpenBLAS's own choice\n", core);
        blas_env_crash_len = strlen(blas_env_crash_msg);
        struct sigaction sa, old[4];
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = blas_env_on_crash;
        sigemptyset(&sa.sa_mask);
        const int sigs[4] = {SIGILL, SIGSEGV, SIGBUS, SIGFPE};
        for (int i = 0; i < 4; i++) { sigaction(sigs[i], &sa, &old[i]); }
        if (blas_env_test("crash")) { raise(SIGILL); }
        int ok = blas_env_fallback_envp != NULL && blas_selfcheck(blas_env_test("corrupt"), why, sizeof(why));
        for (int i = 0; i < 4; i++) { sigaction(sigs[i], &old[i], NULL); }
        if (ok) {
            snprintf(blas_env_note, sizeof(blas_env_note), "chosen by leanstep from cpuid: OpenBLAS detected %s; self-check passed", was);
            return;
        }
        if (blas_env_fallback_envp == NULL) { snprintf(why, sizeof(why), "out of memory"); }
    }
    fprintf(stderr, "warning: the OpenBLAS core leanstep chose (%s) is not used: %s; running with OpenBLAS's own choice\n",
            core, why);
    snprintf(blas_env_note, sizeof(blas_env_note), "OpenBLAS's own choice; leanstep's %s rejected: %s", core, why);
    unsetenv("OPENBLAS_CORETYPE");
    char mark[400];  // "rejected:" + core (< 64) + was (< 64) + why (< 200)
    snprintf(mark, sizeof(mark), "rejected:%s:%s:%s", core, was, why);
    setenv(BLAS_ENV_MARK, mark, 1);
    if (!took) { return; }  // the kernels in this process are OpenBLAS's own already
    execv("/proc/self/exe", argv);
    fprintf(stderr, "leanstep: error: cannot run again without OPENBLAS_CORETYPE=%s; set OPENBLAS_CORETYPE to %s and rerun\n",
            core, was);
    exit(1);
}

// First thing in main of every program that runs OpenBLAS with OpenMP: OMP_WAIT_POLICY=passive
// (llmc/run/openmp_env.h) and the BLAS core (above), applied by running the program again once;
// after that run starts, the check of leanstep's core. Nothing here is fatal but a core that
// failed its check and cannot be dropped.
static inline void cpu_env_apply(char** argv) {
    const char* mark = getenv(BLAS_ENV_MARK);
    const char* user_core = getenv("OPENBLAS_CORETYPE");
    if (mark != NULL && strncmp(mark, "chose:", 6) == 0 && user_core != NULL) {  // the run after ours
        const char* sep = strchr(mark + 6, ':');
        char core[64], was[64];
        if (sep != NULL && (size_t)(sep - (mark + 6)) < sizeof(core)) {
            snprintf(core, sizeof(core), "%.*s", (int)(sep - (mark + 6)), mark + 6);
            snprintf(was, sizeof(was), "%s", sep + 1);
            if (strcasecmp(core, user_core) == 0) {
                blas_env_verify(argv, core, was);
                if (!openmp_env_prefer_passive()) { return; }  // (set by the first run, unless the user unset it)
                execv("/proc/self/exe", argv);
                return;
            }
        }
    }
    int rerun = openmp_env_prefer_passive();
    if (user_core != NULL) {
        snprintf(blas_env_note, sizeof(blas_env_note), "set by OPENBLAS_CORETYPE=%s", user_core);
    } else if (mark != NULL && strncmp(mark, "rejected:", 9) == 0) {  // the run after a failed check
        const char* core_end = strchr(mark + 9, ':');
        const char* was_end = core_end ? strchr(core_end + 1, ':') : NULL;
        if (was_end != NULL) {  // "rejected:CORE:WAS:REASON"
            snprintf(blas_env_note, sizeof(blas_env_note), "OpenBLAS's own choice; leanstep's %.*s rejected: %s",
                     (int)(core_end - (mark + 9)), mark + 9, was_end + 1);
        } else {
            snprintf(blas_env_note, sizeof(blas_env_note), "OpenBLAS's own choice; leanstep's rejected");
        }
    } else {
        const char* detected = blas_env_test("pretend-fallback") ? "Prescott" : openblas_get_corename();
        const char* core = blas_choose_core(blas_cpu_features(), detected);
        snprintf(blas_env_note, sizeof(blas_env_note), "OpenBLAS's own choice");
        if (core != NULL) {
            char m[160];
            snprintf(m, sizeof(m), "chose:%s:%s", core, detected);
            if (setenv("OPENBLAS_CORETYPE", core, 1) == 0 && setenv(BLAS_ENV_MARK, m, 1) == 0) { rerun = 1; }
        }
    }
    if (!rerun) { return; }
    execv("/proc/self/exe", argv);
    if (user_core == NULL) { unsetenv("OPENBLAS_CORETYPE"); }  // no second run: this process keeps what it loaded
    if (mark == NULL) { unsetenv(BLAS_ENV_MARK); }
    if (user_core == NULL) { snprintf(blas_env_note, sizeof(blas_env_note), "OpenBLAS's own choice (leanstep could not run itself again)"); }
}

// One line naming the BLAS in use: "OpenBLAS 0.3.21, core SkylakeX (chosen by leanstep ...)".
static inline const char* blas_env_describe(void) {
    static char line[512];
    const char* config = openblas_get_config();
    int n = 0;  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": the first two words
    for (int spaces = 0; config[n] != '\0' && !(config[n] == ' ' && ++spaces == 2); n++) {}
    snprintf(line, sizeof(line), "%.*s, core %s (%s)", n, config, openblas_get_corename(),
             blas_env_note[0] ? blas_env_note : "OpenBLAS's own choice");
    return line;
}

#endif // LLMC_BLAS_ENV_H
