/*
 test_blas_env.c: the OpenBLAS core choice of llmc/run/blas_env.h.

   test_blas_env            the choice on synthetic cpuid bits and core names (a table), and the
                            sgemm self-check: it passes on this machine's OpenBLAS and fails on a
                            reference off by 1%
   test_blas_env --startup  what a CPU program does at start (cpu_env_apply), then prints how many
                            times it started, the BLAS line, and the self-check again;
                            dev/test/test_blas_env.py runs it under the test hooks
                            (LEANSTEP_BLAS_TEST) and checks the fallbacks
*/
#include <stdio.h>
#include <string.h>
#include "llmc/run/blas_env.h"

static int failures = 0;

static void check_choice(unsigned features, const char* detected, const char* expected) {
    const char* got = blas_choose_core(features, detected);
    int ok = (got == NULL && expected == NULL) || (got != NULL && expected != NULL && strcmp(got, expected) == 0);
    if (!ok) {
        printf("FAIL: features 0x%x, OpenBLAS detected %s: chose %s, expected %s\n", features, detected ? detected : "(null)",
               got ? got : "nothing", expected ? expected : "nothing");
        failures++;
    }
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--startup") == 0) {
        // how many times this program started: the environment carries the count across execs
        const char* r = getenv("TEST_BLAS_ENV_RUNS");
        char runs[16];
        snprintf(runs, sizeof(runs), "%d", (r ? atoi(r) : 0) + 1);
        setenv("TEST_BLAS_ENV_RUNS", runs, 1);
        cpu_env_apply(argv);
        printf("runs: %s\n", runs);
        char why[200] = "";
        int ok = blas_selfcheck(0, why, sizeof(why));
        printf("BLAS: %s\n", blas_env_describe());
        printf("OPENBLAS_CORETYPE=%s\n", getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "");
        printf("self-check: %s%s\n", ok ? "passed" : "FAILED: ", why);
        return ok ? 0 : 1;
    }
    if (argc > 1) { fprintf(stderr, "usage: test_blas_env [--startup]\n"); return 2; }

    const unsigned A2 = BLAS_CPU_AVX2_FMA, A5 = BLAS_CPU_AVX2_FMA | BLAS_CPU_AVX512;
    const unsigned BF = A5 | BLAS_CPU_AVX512_BF16, AMD = BLAS_CPU_AMD;
    static const struct { unsigned features; const char* detected; const char* expected; } table[] = {
        // the VM: AVX-512 (+ BF16 on Cooper Lake and later), model hidden, OpenBLAS fell back
        {A5, "Prescott", "SkylakeX"},
        {BF, "Prescott", "Cooperlake"},
        {BF, "Unknown", "Cooperlake"},
        {A5, "Katmai", "SkylakeX"},
        {A5, "Nehalem", "SkylakeX"},
        {A5, "Sandybridge", "SkylakeX"},
        {A5, "Haswell", "SkylakeX"},     // a weaker core than the CPU runs
        {BF, "SkylakeX", "Cooperlake"},
        {A2, "prescott", "Haswell"},     // OpenBLAS compares names without case
        {A2, "Core2", "Haswell"},
        {A2 | AMD, "Barcelona", "Zen"},
        {A2 | AMD, "Prescott", "Zen"},
        {BF | AMD, "Prescott", "Cooperlake"},  // AVX-512 decides before the vendor
        // OpenBLAS's own choice is as good or better: kept
        {A5, "SkylakeX", NULL},
        {BF, "Cooperlake", NULL},
        {A5, "Cooperlake", NULL},
        {BF, "SapphireRapids", NULL},
        {A2, "Haswell", NULL},
        {A2, "Zen", NULL},
        {A2 | AMD, "Haswell", NULL},
        {A5, "Zen", "SkylakeX"},
        // no AVX2 + FMA (or the OS does not save the registers): nothing chosen
        {0, "Prescott", NULL},
        {AMD, "Barcelona", NULL},
        {BLAS_CPU_AVX512_BF16, "Prescott", NULL},
        // a core name this table does not know (a newer OpenBLAS) or none: left alone
        {BF, "GraniteRapids", NULL},
        {A2, "", NULL},
        {A2, NULL, NULL},
    };
    int n = (int)(sizeof(table) / sizeof(table[0]));
    for (int i = 0; i < n; i++) { check_choice(table[i].features, table[i].detected, table[i].expected); }

    // every core the choice can name is one blas_core_level knows, above any fallback core
    const char* chosen[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake"};
    for (int i = 0; i < 4; i++) {
        if (blas_core_level(chosen[i]) < 5) { printf("FAIL: %s has level %d\n", chosen[i], blas_core_level(chosen[i])); failures++; }
    }

    // the self-check: passes on the loaded OpenBLAS, fails when the reference is 1% off
    char why[200] = "";
    if (!blas_selfcheck(0, why, sizeof(why))) { printf("FAIL: the self-check fails on %s: %s\n", openblas_get_corename(), why); failures++; }
    why[0] = '\0';
    if (blas_selfcheck(1, why, sizeof(why))) { printf("FAIL: the self-check passes with a wrong reference\n"); failures++; }
    else if (strstr(why, "expected") == NULL) { printf("FAIL: the self-check's reason names no values: '%s'\n", why); failures++; }

    unsigned f = blas_cpu_features();
    printf("test_blas_env: %d choices, self-check%s; this CPU: AVX2+FMA %d, AVX-512 %d, BF16 %d, AMD %d; OpenBLAS: %s, would choose %s\n",
           n, failures ? " FAILED" : " ok", !!(f & BLAS_CPU_AVX2_FMA), !!(f & BLAS_CPU_AVX512), !!(f & BLAS_CPU_AVX512_BF16),
           !!(f & BLAS_CPU_AMD), openblas_get_corename(),
           blas_choose_core(f, openblas_get_corename()) ? blas_choose_core(f, openblas_get_corename()) : "nothing (kept)");
    printf("OpenBLAS config: %s\n", openblas_get_config());
    if (failures) { printf("test_blas_env: %d FAILED\n", failures); return 1; }
    return 0;
}
