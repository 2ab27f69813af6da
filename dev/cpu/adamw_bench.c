/*
 adamw_bench.c: the CPU AdamW of llmc/optim/optim.h, alone (adamw_update_cpu over GPT-2's 16
   tensors) and as train_gpt2.c runs it (the optimizer engine's fp32 AdamW view of the whole model:
   optim_engine_step_cpu over the per-layer segments), against
   (a) a bandwidth probe with exactly AdamW's access pattern: read p, g, m, v; write p, m, v in
       place, with one FMA per stream and no math (the memory ceiling for this update), and
   (b) PyTorch's CPU torch.optim.AdamW (Debian python3-torch) on the same 124M parameters, run by
       dev/cpu/adamw_torch.py in the same invocation when a torch interpreter is found.
 Sizes: GPT-2 124M's 16 tensors from the parameter table (or --desc). Median of repeats. The
 percentages are of the fastest of the probe and the leanstep kernels (all move the same bytes):
 a kernel that beats the probe (noise, a busy machine) sets the ceiling, and a line says so, so no
 percentage exceeds 100%.

   adamw_bench [--desc d12] [--repeats 7] [--torch-python /usr/bin/python3|none] [--rules | --host-step]

 --rules: instead, every rule (but Muon, whose Newton-Schulz products are matmuls) in every state
   storage through the engine as train_gpt2.c runs it, with the bytes each one moves per parameter
   (llmc/optim/update.h's count) and its share of the probe's bandwidth.
 --host-step: instead, the GPU trainer's host update of --offload cpu (bf16 build) for AdamW in each
   state precision: the bf16 gradients widened, the engine's step over the fp32 master weights
   (indexed by offset), the parameters rounded to bf16 with the GPU's random bits
   (llmc/optim/engine.h: optim_host_widen_bf16, optim_host_round_bf16), each part timed, with its
   bytes per parameter and share of the probe (measured over at most 2^27 elements: a bandwidth,
   whatever the size). A precision whose buffers do not fit in the available memory is named, not run.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "llmc/utils.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/optim/optim.h"
#include "llmc/optim/engine.h"
#include "llmc/run/logger.h"
#include "llmc/run/memory.h"
#include "dev/cpu/bench_util.h"

// a / b in percent, rounded down: only the ceiling itself reads 100% (a share of 99.6% printed as
// 100% would hide that something beat the row).
static double bench_share(double a, double b) { return floor(100.0 * a / b + 1e-9); }

// The rules table: optim_engine_step_cpu over the model's view for each rule and storage. The
// ceiling is the fastest of the probe and the rows (as in the AdamW table: no share above 100%).
static void bench_rules(const ParamTable* pt, float* p, const float* g, int repeats, double t_probe) {
    enum { MAX_ROWS = 32 };
    char name[MAX_ROWS][48];
    double ms[MAX_ROWS], bpp[MAX_ROWS], gbs[MAX_ROWS];
    int rows = 0;
    const size_t n = pt->total;
    for (int k = OPT_ADAMW; k < OPT_MUON; k++) {
        for (int s = OPT_STATE_FP32; s <= OPT_STATE_LAST; s++) {
            for (int ams = 0; ams <= (k == OPT_ADAMW) && rows < MAX_ROWS; ams++) {
                OptimConfig cfg = optim_config_default((OptimKind)k);
                cfg.state = (OptimStatePrecision)s;
                cfg.amsgrad = ams;
                char why[256];
                if (!optim_config_check(&cfg, why, sizeof why)) continue;  // (fp16 is AdamW's)
                OptimEngine e;
                optim_engine_init(&e, &cfg, pt, NULL, 0.1f, 0, 1, 0);
                e.memory = mallocCheck(e.bytes);
                memset(e.memory, 0, e.bytes);
                e.work = e.work_bytes > 0 ? mallocCheck(e.work_bytes) : NULL;
                optim_engine_set_view_cpu(&e, OPTIM_VIEW_MODEL);
                double* t = (double*)mallocCheck((size_t)repeats * sizeof(double));
                for (int r = -1; r < repeats; r++) {
                    double t0 = wall_seconds();
                    optim_engine_step_cpu(&e, p, g, 1e-4f, r + 2, 1.0f);
                    if (r >= 0) t[r] = wall_seconds() - t0;
                }
                snprintf(name[rows], sizeof name[rows], "%s%s | %s", optim_kind_name(cfg.kind), ams ? " (amsgrad)" : "",
                         optim_precision_name(cfg.state));
                ms[rows] = 1e3 * bench_median(t, repeats);
                bpp[rows] = optim_update_bytes_per_param(&cfg);
                gbs[rows] = bpp[rows] * (double)n / (ms[rows] / 1e3) / 1e9;
                rows++;
                optim_engine_free_cpu(&e);
                free(e.memory);
                free(e.work);
                free(t);
            }
        }
    }
    double ceiling = 28.0 * (double)n / t_probe / 1e9;
    const char* best = NULL;
    for (int r = 0; r < rows; r++) {
        if (gbs[r] > ceiling) { ceiling = gbs[r]; best = name[r]; }
    }
    if (best != NULL) {
        printf("the probe measured %.1f GB/s, below %s's %.1f GB/s (noise or a busy machine): the shares are of the "
               "fastest\n\n", 28.0 * (double)n / t_probe / 1e9, best, ceiling);
    }
    printf("| rule | state | ms | B/param | GB/s | %% of ceiling |\n|---|---|---|---|---|---|\n");
    for (int r = 0; r < rows; r++) {
        printf("| %s | %.1f | %.0f | %.1f | %.0f%% |\n", name[r], ms[r], bpp[r], gbs[r], bench_share(gbs[r], ceiling));
    }
}

// --host-step: see the banner. n parameters of table pt; t_probe over probe_n elements.
static void bench_host_step(const ParamTable* pt, int repeats, double t_probe, size_t probe_n) {
    const size_t n = pt->total;
    const double probe_gbs = 28.0 * (double)probe_n / t_probe / 1e9;
    printf("| state | widen (ms) | update (ms) | round (ms) | host step (ms) | B/param | GB/s | %% of probe |\n"
           "|---|---|---|---|---|---|---|---|\n");
    for (int s = OPT_STATE_FP32; s <= OPT_STATE_LAST; s++) {
        if (s == OPT_STATE_FP16) continue;  // (AdamW's fp16 state moves bf16's bytes)
        OptimConfig cfg = optim_config_default(OPT_ADAMW);
        cfg.state = (OptimStatePrecision)s;
        OptimEngine e;
        optim_engine_init(&e, &cfg, pt, NULL, 0.1f, 0, 1, 0);
        const size_t need = e.bytes + n * (sizeof(float) * 2 + sizeof(uint16_t)), avail = memory_host_available();
        if (avail > 0 && need + ((size_t)1 << 30) > avail) {
            printf("| %s | not run: needs %.1f GB, %.1f GB available | | | | | | |\n", optim_precision_name(cfg.state),
                   (double)need / 1e9, (double)avail / 1e9);
            continue;
        }
        OptimHostTimer h;
        optim_host_timer_init(&h, &cfg, pt, NULL);  // (AdamW: no products)
        double* t = (double*)mallocCheck(3 * (size_t)repeats * sizeof(double));
        for (int r = -1; r < repeats; r++) {
            double sec[3];
            optim_host_timer_step(&h, r + 2, 1, sec);
            if (r >= 0) { t[r] = sec[0]; t[repeats + r] = sec[1]; t[2 * repeats + r] = sec[2]; }
        }
        const double tw = bench_median(t, repeats), tu = bench_median(t + repeats, repeats);
        const double tr = bench_median(t + 2 * repeats, repeats), tt = tw + tu + tr;
        const double bpp = 6.0 + optim_update_bytes_per_param(&cfg) + 6.0;  // widen: 2 in, 4 out; round: 4 in, 2 out
        const double gbs = bpp * (double)n / tt / 1e9;
        printf("| %s | %.1f | %.1f | %.1f | %.1f | %.0f | %.1f | %.0f%% |\n", optim_precision_name(cfg.state), 1e3 * tw,
               1e3 * tu, 1e3 * tr, 1e3 * tt, bpp, gbs, floor(100.0 * gbs / probe_gbs));
        optim_host_timer_free(&h);
        optim_engine_free_cpu(&e);
        free(t);
    }
}

int main(int argc, char** argv) {
    const char* desc = "d12";
    const char* torch_python = "/usr/bin/python3";
    int repeats = 7, rules = 0, host_step = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rules") == 0) { rules = 1; continue; }
        if (strcmp(argv[i], "--host-step") == 0) { host_step = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "adamw_bench: flag %s needs a value\n", argv[i]); return 2; }
        if (strcmp(argv[i], "--desc") == 0) { desc = argv[++i]; }
        else if (strcmp(argv[i], "--repeats") == 0) { repeats = atoi(argv[++i]); }
        else if (strcmp(argv[i], "--torch-python") == 0) { torch_python = argv[++i]; }
        else { fprintf(stderr, "adamw_bench: unknown flag %s (--desc D --repeats N --torch-python PATH|none --rules --host-step)\n", argv[i]); return 2; }
    }
    if (repeats < 1 || repeats > 1000) { fprintf(stderr, "adamw_bench: --repeats must be in [1, 1000]\n"); return 2; }
    GPT2Config c;
    if (!gpt2_config_from_descriptor(desc, &c)) { fprintf(stderr, "adamw_bench: --desc '%s' is not a descriptor\n", desc); return 2; }
    ParamTable pt;
    param_table_build(&pt, &c);
    size_t n = pt.total;
    if (host_step) {  // the probe over at most 2^27 elements (2 GB), then the host step at full size
        const size_t pn = n < ((size_t)1 << 27) ? n : ((size_t)1 << 27);
        float* b = (float*)mallocCheck(4 * pn * sizeof(float));
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < 4 * pn; i++) b[i] = 0.001f * (float)(i % 37);
        double* tp = (double*)mallocCheck((size_t)repeats * sizeof(double));
        for (int r = -1; r < repeats; r++) {
            double t0 = wall_seconds();
            probe_adamw_pattern(b, b + pn, b + 2 * pn, b + 3 * pn, pn, 0.999f);
            if (r >= 0) tp[r] = wall_seconds() - t0;
        }
        const double t_probe = bench_median(tp, repeats);
        free(b);
        free(tp);
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        printf("adamw_bench --host-step: %s, %zu parameters, %d threads, median of %d; the probe: %.1f GB/s\n\n", desc, n,
               threads, repeats, 28.0 * (double)pn / t_probe / 1e9);
        bench_host_step(&pt, repeats, t_probe, pn);
        return 0;
    }
    float* p = (float*)mallocCheck(n * sizeof(float));
    float* g = (float*)mallocCheck(n * sizeof(float));
    float* m = (float*)mallocCheck(n * sizeof(float));
    float* v = (float*)mallocCheck(n * sizeof(float));
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {  // first touch by the threads that will use the pages
        p[i] = 0.01f * (float)(i % 101); g[i] = 0.001f * (float)(i % 37) - 0.018f; m[i] = 0.0f; v[i] = 0.0f;
    }
    if (rules) {
        double* tp = (double*)mallocCheck((size_t)repeats * sizeof(double));
        for (int r = -1; r < repeats; r++) {
            double t0 = wall_seconds();
            probe_adamw_pattern(p, g, m, v, n, 0.999f);
            if (r >= 0) tp[r] = wall_seconds() - t0;
        }
        const double t_probe = bench_median(tp, repeats);
        int threads = 1;
#ifdef _OPENMP
        threads = omp_get_max_threads();
#endif
        printf("adamw_bench --rules: %s, %zu parameters, %d threads, median of %d; the probe: %.1f ms, %.1f GB/s\n\n", desc,
               n, threads, repeats, 1e3 * t_probe, 28.0 * (double)n / t_probe / 1e9);
        bench_rules(&pt, p, g, repeats, t_probe);
        free(tp); free(p); free(g); free(m); free(v);
        return 0;
    }
    OptimSegment segs[NUM_PARAMETER_TENSORS];
    int nseg = optim_segments_build(&pt, 0.1f, segs);
    const float lr = 1e-4f;
    // the trainer's path: the engine's whole-model view, its state block first-touched as above
    const OptimConfig cfg = optim_config_default(OPT_ADAMW);  // betas 0.9 0.95, eps 1e-8
    OptimEngine e;
    optim_engine_init(&e, &cfg, &pt, NULL, 0.1f, 0, 1, 0);
    e.memory = mallocCheck(e.bytes);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < e.bytes / sizeof(float); i++) { ((float*)e.memory)[i] = 0.0f; }
    optim_engine_set_view_cpu(&e, OPTIM_VIEW_MODEL);
    double* t_adamw = (double*)mallocCheck((size_t)repeats * sizeof(double));
    double* t_probe = (double*)mallocCheck((size_t)repeats * sizeof(double));
    double* t_engine = (double*)mallocCheck((size_t)repeats * sizeof(double));
    for (int r = -1; r < repeats; r++) {
        double t0 = wall_seconds();
        probe_adamw_pattern(p, g, m, v, n, 0.999f);
        double t1 = wall_seconds();
        adamw_update_cpu(p, g, m, v, segs, nseg, &cfg, lr, r + 2, 1.0f);
        double t2 = wall_seconds();
        optim_engine_step_cpu(&e, p, g, lr, r + 2, 1.0f);
        double t3 = wall_seconds();
        if (r >= 0) { t_probe[r] = t1 - t0; t_adamw[r] = t2 - t1; t_engine[r] = t3 - t2; }
    }
    double bytes = 28.0 * (double)n;  // read p g m v, write p m v
    double tp = bench_median(t_probe, repeats), ta = bench_median(t_adamw, repeats), te = bench_median(t_engine, repeats);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("adamw_bench: %s, %zu parameters in %d tensors, %d threads, median of %d\n\n", desc, n, nseg, threads, repeats);
    double t_torch = 0.0;
    if (strcmp(torch_python, "none") != 0 && file_exists(torch_python)) {
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "%s dev/cpu/adamw_torch.py --desc %s --repeats %d --threads %d", torch_python, desc, repeats, threads);
        FILE* fp = popen(cmd, "r");
        char line[256];
        while (fp && fgets(line, sizeof(line), fp)) {
            double ms;
            if (sscanf(line, "torch_adamw_ms %lf", &ms) == 1) { t_torch = ms / 1e3; }
        }
        if (fp) { pclose(fp); }
    }
    double t_best = tp;  // the ceiling: the fastest of the rows
    const char* best = "the probe";
    if (ta < t_best) { t_best = ta; best = "adamw_update_cpu"; }
    if (te < t_best) { t_best = te; best = "optim_engine_step_cpu"; }
    if (t_torch > 0 && t_torch < t_best) { t_best = t_torch; best = "torch.optim.AdamW"; }
    if (t_best < tp) {
        printf("the probe measured %.1f GB/s, below %s's %.1f GB/s (noise or a busy machine): the percentages are of "
               "the fastest\n\n", bytes / tp / 1e9, best, bytes / t_best / 1e9);
    }
    printf("| kernel | ms | GB/s (28 B/param) | %% of ceiling | vs PyTorch |\n|---|---|---|---|---|\n");
    printf("| probe (AdamW access pattern) | %.1f | %.1f | %.0f%% | |\n", 1e3 * tp, bytes / tp / 1e9, bench_share(t_best, tp));
    char vs[64] = "-";
    if (t_torch > 0) { snprintf(vs, sizeof(vs), "%.2fx faster", t_torch / ta); }
    printf("| leanstep adamw_update_cpu (%d tensors) | %.1f | %.1f | %.0f%% | %s |\n", nseg, 1e3 * ta, bytes / ta / 1e9,
           bench_share(t_best, ta), vs);
    if (t_torch > 0) { snprintf(vs, sizeof(vs), "%.2fx faster", t_torch / te); }
    printf("| leanstep optim_engine_step_cpu (the trainer's, %d segments) | %.1f | %.1f | %.0f%% | %s |\n", e.st.nseg,
           1e3 * te, bytes / te / 1e9, bench_share(t_best, te), vs);
    if (t_torch > 0) {
        printf("| torch.optim.AdamW (CPU) | %.1f | %.1f | %.0f%% | 1.00x |\n", 1e3 * t_torch, bytes / t_torch / 1e9,
               bench_share(t_best, t_torch));
    } else {
        printf("| torch.optim.AdamW (CPU) | not measured: no torch interpreter at %s | | | |\n", torch_python);
    }
    optim_engine_free_cpu(&e);
    free(e.memory);
    free(p); free(g); free(m); free(v); free(t_adamw); free(t_probe); free(t_engine);
    return 0;
}
