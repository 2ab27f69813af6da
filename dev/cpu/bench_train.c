/*
 bench_train.c: CPU training throughput of train_gpt2.c, as tokens/s and CPU MFU.

 MFU = achieved FLOP/s / peak, with FLOPs per token = 6N + 6*L*C*T (config.h). The peak is
 measured here, in the same run, as the best of several large cblas_sgemm calls (the same BLAS,
 kernel and thread count the trainer uses), so the ratio says how close the whole step gets to
 what BLAS alone can do on this machine. The trainer's own best FLOP/s is a lower bound on the
 peak too: the peak is the larger of the two, so MFU never exceeds 100% (it would read
 113% on a machine whose sgemm peak measured low). Each configuration: warm-up steps,
 then the median of timed steps (forward + backward + AdamW on a fixed batch).

   bench_train [--steps N] [--configs d12,L4C256H4] [--B 4] [--T 64] [--peer d12=55,...|none]
 The peer columns are quoted figures, not measured here: llm.c's CPU train_gpt2.c at ~55 tok/s for
 124M and ~380 tok/s for L4/C256 with 2 threads, the figures the targets were set against; --peer
 gives others as "desc=tok/s,...", --peer none leaves the columns out. `make bench PEER=...`
 measures llm.c's trainer in the same run instead (dev/cpu/bench_peer.py).
*/
#define TESTING
#include "train_gpt2.c"
#include "dev/cpu/bench_util.h"

// Best sgemm GFLOP/s over a few shapes (square and the trainer's tall-skinny ones).
static double measure_sgemm_peak(void) {
    int shapes[][3] = {{1024, 1024, 1024}, {2048, 2048, 2048}, {256, 3072, 768}, {256, 50304, 768}};
    double best = 0.0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float* A = (float*)mallocCheck((size_t)M * K * sizeof(float));
        float* B = (float*)mallocCheck((size_t)N * K * sizeof(float));
        float* C = (float*)mallocCheck((size_t)M * N * sizeof(float));
        for (size_t i = 0; i < (size_t)M * K; i++) { A[i] = 0.001f * (float)(i % 13); }
        for (size_t i = 0; i < (size_t)N * K; i++) { B[i] = 0.002f * (float)(i % 7); }
        double times[5];
        for (int r = 0; r < 6; r++) {
            double t0 = wall_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
            double t = wall_seconds() - t0;
            if (r > 0) { times[r - 1] = t; }  // the first call warms up
        }
        double gflops = 2.0 * M * N * K / bench_median(times, 5) / 1e9;
        printf("  sgemm %5d x %5d x %5d: %7.1f GFLOP/s (median of 5)\n", M, N, K, gflops);
        if (gflops > best) { best = gflops; }
        free(A); free(B); free(C);
    }
    return best;
}

static double peer_tok_s(const char* peers, const char* desc) {
    const char* p = strstr(peers, desc);
    if (p == NULL || p[strlen(desc)] != '=') { return 0.0; }
    return atof(p + strlen(desc) + 1);
}

int main(int argc, char** argv) {
    cpu_env_apply(argv);  // as the trainer runs
    int steps = 5, B = 4, T = 64;
    const char* configs = "d12,L4C256H4";
    const char* peers = "d12=55,L4C256H4=380";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) { fprintf(stderr, "bench_train: flag %s needs a value\n", argv[i]); return 2; }
        if (strcmp(argv[i], "--steps") == 0) { steps = atoi(argv[++i]); }
        else if (strcmp(argv[i], "--configs") == 0) { configs = argv[++i]; }
        else if (strcmp(argv[i], "--peer") == 0) { peers = argv[++i]; }
        else if (strcmp(argv[i], "--B") == 0) { B = atoi(argv[++i]); }
        else if (strcmp(argv[i], "--T") == 0) { T = atoi(argv[++i]); }
        else { fprintf(stderr, "bench_train: unknown flag %s (--steps N --configs a,b --B n --T n --peer d=tok/s,...)\n", argv[i]); return 2; }
    }
    if (steps < 1 || steps > 1000 || B < 1 || T < 1) { fprintf(stderr, "bench_train: --steps in [1,1000], --B and --T >= 1\n"); return 2; }
    int nconfigs = 1;
    for (const char* p = configs; *p; p++) { nconfigs += *p == ','; }
    if (nconfigs > 16) { fprintf(stderr, "bench_train: --configs takes at most 16 configs, got %d\n", nconfigs); return 2; }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("bench_train: %d threads, B=%d T=%d, %d timed steps per config\n", threads, B, T, steps);
    printf("BLAS: %s\n", blas_env_describe());
    double sgemm_peak = measure_sgemm_peak();
    printf("measured sgemm peak: %.1f GFLOP/s\n", sgemm_peak);
    // the rows wait for every config: the peak is the best of sgemm's and the trainer's FLOP/s
    enum { MAX_ROWS = 16 };
    struct { char desc[64], peer[32], ratio[32]; double params, ms, tok_s, gflops; } rows[MAX_ROWS];
    double peak = sgemm_peak;
    const int quoted = strcmp(peers, "none") != 0;
    int nrows = 0;
    char list[256];
    snprintf(list, sizeof(list), "%s", configs);
    for (char* desc = strtok(list, ","); desc && nrows < MAX_ROWS; desc = strtok(NULL, ",")) {
        GPT2 model;
        gpt2_build(&model, desc, 42, B, T, NULL);
        int V = model.config.vocab_size;
        int* in = (int*)mallocCheck((size_t)B * T * sizeof(int));
        int* tg = (int*)mallocCheck((size_t)B * T * sizeof(int));
        for (int i = 0; i < B * T; i++) { in[i] = (i * 131 + 7) % V; tg[i] = (i * 71 + 3) % V; }
        double* times = (double*)mallocCheck((size_t)steps * sizeof(double));
        for (int s = -2; s < steps; s++) {  // two warm-up steps
            double t0 = wall_seconds();
            gpt2_forward(&model, in, tg, B, T);
            gpt2_zero_grad(&model);
            gpt2_backward(&model, in, tg, B, T, 1.0f);
            gpt2_grad_norm(&model, 1.0f, 1.0f);
            gpt2_update(&model, 1e-4f, s + 3);
            if (s >= 0) { times[s] = wall_seconds() - t0; }
        }
        double t = bench_median(times, steps);
        double tok_s = (double)B * T / t;
        double gflops = tok_s * gpt2_flops_per_token(&model.config, T) / 1e9;
        double peer = peer_tok_s(peers, desc);
        char peer_s[32] = "-", ratio_s[32] = "-";
        if (peer > 0) { snprintf(peer_s, sizeof(peer_s), "%.0f", peer); snprintf(ratio_s, sizeof(ratio_s), "%.2fx", tok_s / peer); }
        snprintf(rows[nrows].desc, sizeof(rows[nrows].desc), "%s", desc);
        snprintf(rows[nrows].peer, sizeof(rows[nrows].peer), "%s", peer_s);
        snprintf(rows[nrows].ratio, sizeof(rows[nrows].ratio), "%s", ratio_s);
        rows[nrows].params = (double)model.num_parameters / 1e6;
        rows[nrows].ms = 1e3 * t;
        rows[nrows].tok_s = tok_s;
        rows[nrows].gflops = gflops;
        nrows++;
        if (gflops > peak) { peak = gflops; }
        free(times); free(in); free(tg);
        gpt2_free(&model);
    }
    if (peak > sgemm_peak) {
        printf("peak: %.1f GFLOP/s, the trainer's own best (above the sgemm measurement: a busy machine or a slow kernel)\n", peak);
    }
    if (quoted) {
        printf("llm.c tok/s: quoted figures (%s), not measured in this run; `make bench PEER=/path/to/llm.c/train_gpt2` "
               "measures it\n", peers);
    }
    printf("\n| config | params | step ms (median) | tok/s | GFLOP/s | CPU MFU |%s\n",
           quoted ? " llm.c tok/s (quoted) | ratio to quoted |" : "");
    printf("|---|---|---|---|---|---|%s\n", quoted ? "---|---|" : "");
    for (int r = 0; r < nrows; r++) {
        printf("| %s | %.1fM | %.1f | %.0f | %.1f | %.1f%% |", rows[r].desc, rows[r].params, rows[r].ms, rows[r].tok_s,
               rows[r].gflops, 100.0 * rows[r].gflops / peak);
        if (quoted) { printf(" %s | %s |", rows[r].peer, rows[r].ratio); }
        printf("\n");
    }
    return 0;
}
