/*
 global_norm.cu: the gradient global-norm lab: the sum of squares of all gradients and the clip
 scale AdamW multiplies them by, against a float64 CPU reference (--check) or timed at GPT-2 124M
 size (--bench). Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32): the
 gradients are floatX.

 Versions (-v):
   1  atomic: every block adds its sum to one float with atomicAdd. Simple, but the order of the
      additions changes from run to run on a GPU, so the norm (and the clipped step) is not
      reproducible; kept to show why the production kernel exists. Checked for accuracy only.
   2  production: llmc/kernels/global_norm.cuh (included, not copied): a fixed-order two-pass reduction,
      the same bits on every run, device and thread order.

 --check: n in {1, 7, 4099, 100003, 1000003} (tails, one block, many blocks); the sum of squares
 within 1e-5 relative of float64 (fp32 accumulation of up to 1e6 positive terms in a tree: the
 relative error grows like log2(n) * 2^-24 ~ 1e-6); version 2 run twice gives identical bits;
 the clip scale equals clip_scale_of (llmc/optim/optim.h) of the device norm, for a clip below, above
 and at 0 (off).
 --bench: n = 124,475,904 (GPT-2 124M); median time of -r repeats, GB/s against a device-to-device
 copy of the same bytes measured in the same run.

 usage: global_norm [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/optim/optim.h"

#include <time.h>

// ----------------------------------------------------------------------------
// version 1: one float atomic per block

__global__ void global_norm_atomic_kernel(float* sumsq, const floatX* grads, size_t n) {
    __shared__ float block_sum;
    if (threadIdx.x == 0) block_sum = 0.0f;
    __syncthreads();
    float acc = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = to_float(grads[i]);
        acc = fmaf(g, g, acc);
    }
    atomicAdd(&block_sum, acc);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(sumsq, block_sum);
}

static void global_norm_squared_v1(float* d_sumsq, const floatX* grads, size_t n, float* d_scratch, cudaStream_t stream) {
    (void)d_scratch;
    cudaCheck(cudaMemsetAsync(d_sumsq, 0, sizeof(float), stream));
    unsigned grid = (unsigned)std::min<size_t>(CEIL_DIV(n, (size_t)256), 1024);
    launch(global_norm_atomic_kernel, grid, 256, 0, stream, d_sumsq, grads, n);
}

struct Version {
    const char* name;
    void (*sumsq)(float*, const floatX*, size_t, float*, cudaStream_t);
    bool deterministic;
};
static const Version kVersions[] = {
    {"1 atomic", global_norm_squared_v1, false},
    {"2 production", global_norm_squared<floatX>, true},
};
static const int kNumVersions = (int)(sizeof kVersions / sizeof kVersions[0]);

// ----------------------------------------------------------------------------

static void usage(const char* msg) {
    fprintf(stderr, "global_norm: %s\nusage: global_norm [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]\n", msg);
    exit(2);
}

static uint64_t g_rng = 1;
static float rand_normal() {  // Box-Muller on xorshift uniforms
    float u1 = (xorshift_u32(&g_rng) >> 8) * (1.0f / 16777216.0f) + 1e-7f;
    float u2 = (xorshift_u32(&g_rng) >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

// Returns true if the version passes at size n.
static bool check_size(const Version& ver, size_t n) {
    std::vector<floatX> h(n);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        h[i] = from_float(rand_normal() * (i % 17 == 0 ? 30.0f : 1.0f));  // a few large gradients
        double g = to_float(h[i]);
        ref += g * g;
    }
    floatX* d_g = nullptr;
    float* d_f = nullptr;  // partials, sumsq, norm, scale
    cudaCheck(cudaMalloc((void**)&d_g, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_f, (GLOBAL_NORM_MAX_BLOCKS + 3) * sizeof(float)));
    cudaCheck(cudaMemcpy(d_g, h.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    float* sumsq = d_f + GLOBAL_NORM_MAX_BLOCKS;
    float got[2];
    for (int run = 0; run < 2; run++) {
        ver.sumsq(sumsq, d_g, n, d_f, 0);
        cudaCheck(cudaMemcpy(&got[run], sumsq, sizeof(float), cudaMemcpyDeviceToHost));
    }
    bool ok = true;
    double rel = fabs((double)got[0] - ref) / ref;
    lab_note_worst(rel / 1e-5);
    if (!(rel <= 1e-5)) {
        printf("  FAIL %s n=%zu: sum of squares %.9g, float64 %.9g (relative error %.3g > 1e-5)\n", ver.name, n, got[0], ref, rel);
        ok = false;
    }
    if (ver.deterministic && memcmp(&got[0], &got[1], sizeof(float)) != 0) {
        printf("  FAIL %s n=%zu: two runs differ (%.9g vs %.9g)\n", ver.name, n, got[0], got[1]);
        ok = false;
    }
    // the clip scale: below the norm (clips), above (does not), 0 (off)
    float norm_host = sqrtf(got[0]);
    float clips[3] = {0.5f * norm_host, 2.0f * norm_host, 0.0f};
    for (float clip : clips) {
        float res[2];
        global_norm_clip_scale(d_f + GLOBAL_NORM_MAX_BLOCKS + 2, d_f + GLOBAL_NORM_MAX_BLOCKS + 1, sumsq, clip, 0);
        cudaCheck(cudaMemcpy(res, d_f + GLOBAL_NORM_MAX_BLOCKS + 1, 2 * sizeof(float), cudaMemcpyDeviceToHost));
        float want = clip_scale_of(res[0], clip);
        if (memcmp(&res[1], &want, sizeof(float)) != 0 || res[0] != sqrtf(got[1])) {
            printf("  FAIL %s n=%zu clip %g: scale %.9g, expected %.9g (norm %.9g)\n", ver.name, n, clip, res[1], want, res[0]);
            ok = false;
        }
    }
    if (!g_quiet) printf("  %-13s n=%8zu: relative error %.2e%s\n", ver.name, n, rel, ok ? "" : "  <-- FAIL");
    cudaCheck(cudaFree(d_g));
    cudaCheck(cudaFree(d_f));
    return ok;
}

static void bench(int vmin, int vmax, int repeats) {
    const size_t n = 124475904;
    floatX* d_g = nullptr;
    floatX* d_copy = nullptr;
    float* d_f = nullptr;
    cudaCheck(cudaMalloc((void**)&d_g, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_copy, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_f, (GLOBAL_NORM_MAX_BLOCKS + 3) * sizeof(float)));
    cudaCheck(cudaMemset(d_g, 0, n * sizeof(floatX)));
    const double copy = copy_gbs(d_copy, d_g, n * sizeof(floatX), repeats, L2_WARM);
    printf("global_norm bench: n = %zu %s gradients, median of %d\n", n, PRECISION_NAME, repeats);
    printf("| version | ms | GB/s | %% of copy (%.0f GB/s) |\n|---|---|---|---|\n", copy);
    for (int v = vmin; v <= vmax; v++) {
        const float ms =
            time_ms(repeats, [&] { kVersions[v].sumsq(d_f + GLOBAL_NORM_MAX_BLOCKS, d_g, n, d_f, 0); }, L2_WARM);
        const double gbs = gbs_of((double)n * sizeof(floatX), ms);
        printf("| %s | %.3f | %.0f | %.0f%% |\n", kVersions[v].name, ms, gbs, 100.0 * gbs / copy);
    }
    cudaCheck(cudaFree(d_g));
    cudaCheck(cudaFree(d_copy));
    cudaCheck(cudaFree(d_f));
}

int main(int argc, char** argv) {
    int mode_bench = 0, vmin = 0, vmax = kNumVersions - 1, repeats = 20;
    uint64_t seed = (uint64_t)lab_fresh_seed();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) { mode_bench = 0; }
        else if (strcmp(argv[i], "--bench") == 0) { mode_bench = 1; }
        else if (strcmp(argv[i], "-q") == 0) { g_quiet = true; }
        else if (i + 1 < argc && strcmp(argv[i], "-v") == 0) {
            const char* v = argv[++i];
            if (strcmp(v, "all") == 0) { vmin = 0; vmax = kNumVersions - 1; }
            else {
                char* end;
                long k = strtol(v, &end, 10);
                if (*end || k < 1 || k > kNumVersions) { usage("-v takes 1, 2 or all"); }
                vmin = vmax = (int)k - 1;
            }
        } else if (i + 1 < argc && strcmp(argv[i], "-s") == 0) {
            char* end;
            seed = strtoull(argv[++i], &end, 10);
            if (*end) { usage("-s takes a number"); }
        } else if (i + 1 < argc && strcmp(argv[i], "-r") == 0) {
            char* end;
            long r = strtol(argv[++i], &end, 10);
            if (*end || r < 1 || r > 10000) { usage("-r takes 1..10000"); }
            repeats = (int)r;
        } else {
            usage("unknown or incomplete flag");
        }
    }
    if (mode_bench) { bench(vmin, vmax, repeats); return 0; }
    g_rng = seed ? seed : 1;
    if (!g_quiet) { printf("global_norm --check (%s), seed %llu\n", PRECISION_NAME, (unsigned long long)seed); }
    const size_t sizes[] = {1, 7, 4099, 100003, 1000003};
    int failed = 0, total = 0;
    for (int v = vmin; v <= vmax; v++) {
        for (size_t n : sizes) {
            total++;
            failed += !check_size(kVersions[v], n);
        }
    }
    printf("global_norm --check (%s): %d of %d cases passed, %s (seed %llu)\n", PRECISION_NAME, total - failed, total,
           lab_worst_note().c_str(), (unsigned long long)seed);
    return failed ? 1 : 0;
}
