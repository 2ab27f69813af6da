/*
 fused_classifier.cu: the fused classifier kernel lab: softmax over the first V of Vp logits,
 cross-entropy loss per row, and dlogits = dloss * (softmax - onehot(target)) written in place
 (0 in the padded columns), against a float64 CPU reference (--check) or timed at GPT-2 124M
 shapes (--bench). Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  naive: one thread per row, three passes over the row (max, sum, write)
   2  production: llmc/fused_classifier.cuh (included, not copied): one block per row, 16-byte
      loads, online max/sum in one read, block reduction in a fixed order, a second pass writes

 --check: random logits (fresh seed each run, printed; -s fixes it), the padded columns filled
 with NaN (they must be ignored, and become 0); cases: V = 300 of Vp = 384, no padding (V = Vp),
 a single class (V = 1), V = 1001 of 1008 (a vector with one valid column), rows longer than one
 vector per thread (V = 20000), large logits (1000 +- 20: the max must be subtracted), a wide
 spread (scale 30: most probabilities underflow), losses only (the logits must keep their bits);
 targets include 0 and V - 1. Tolerance per element, |device - ref| <= 1e-5 * max|ref| +
 u * ulp_floatX(ref), the float64 reference rounded to floatX for dlogits:
   losses (fp32 in both builds): u = 0; the row's sum is accumulated in fp32 and __expf is
     approximate on the GPU (about 2 ulp + |x| 2^-24 relative), both far below 1e-5 of the loss;
   dlogits: fp32 u = 0 (same argument, relative to the largest |dlogit|, about dloss);
     bf16 u = 1 (the fp32 value is rounded once; a rounding boundary may flip one bf16 step).
 Also the float64 gradient against central differences of the float64 loss, and the launcher's
 precondition checks.
 --bench: N = 8192, V = 50257, Vp = 50304, median of -r repeats after an L2 flush; GB/s of the
 traffic of the design (dlogits: the row read twice and written once; losses only: read once)
 against a device-to-device copy.

 usage: fused_classifier [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write a launcher with the production signature, add a kVersions row.
*/
#include "llmc/cuda_common.h"
#include "llmc/cuda_precision.h"
#include "llmc/fused_classifier.cuh"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <string>
#include <vector>

// ----------------------------------------------------------------------------
// version 1: naive

static __global__ void fused_classifier_v1_kernel(floatX* logits, float* losses, float dloss, const int* targets,
                                                  int N, int V, int Vp, int write_dlogits) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    floatX* x = logits + (size_t)row * Vp;
    float m = -INFINITY;
    for (int j = 0; j < V; j++) m = fmaxf(m, to_float(x[j]));
    float s = 0.0f;
    for (int j = 0; j < V; j++) s += expf(to_float(x[j]) - m);
    const int t = targets[row];
    losses[row] = logf(s) + (m - to_float(x[t]));
    if (!write_dlogits) return;
    for (int j = 0; j < V; j++) x[j] = from_float(dloss * (expf(to_float(x[j]) - m) / s - (j == t ? 1.0f : 0.0f)));
    for (int j = V; j < Vp; j++) x[j] = from_float(0.0f);
}

static void fused_classifier_v1(floatX* logits, float* losses, float dloss, const int* targets, int N, int V, int Vp,
                                int write_dlogits, cudaStream_t stream) {
    launch(fused_classifier_v1_kernel, (unsigned)CEIL_DIV(N, 64), 64, 0, stream, logits, losses, dloss, targets, N, V,
           Vp, write_dlogits);
}

// ----------------------------------------------------------------------------
// the versions

struct Version {
    const char* name;
    void (*run)(floatX*, float*, float, const int*, int, int, int, int, cudaStream_t);
};

static const Version kVersions[] = {
    {"1 naive", fused_classifier_v1},
    {"2 production", fused_classifier},
};
static const int kNumVersions = (int)(sizeof kVersions / sizeof kVersions[0]);

// ----------------------------------------------------------------------------
// lab kit: random inputs, floatX conversions, comparison, timing, expected failures

static bool g_quiet = false;

struct Rng { // splitmix64
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; } // [0, 1)
    double normal() { return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()); }
};

// The value a floatX stores for x.
static double as_floatX(double x) { return (double)to_float(from_float((float)x)); }

// One unit in the last place of a bf16 at |x| (0 in the fp32 build: atol covers fp32 errors).
static double ulp_floatX(double x) {
    if (!FLOATX_IS_BF16) return 0.0;
    int e;
    frexp(fabs(x), &e);
    return x == 0.0 ? 0x1.0p-133 : ldexp(1.0, e - 8); // |x| in [2^(e-1), 2^e): 8 significant bits
}

static std::vector<double> random_floatX(Rng& r, size_t n, double offset, double scale) {
    std::vector<double> v(n);
    for (double& x : v) x = as_floatX(offset + scale * r.normal());
    return v;
}

template <typename T>
static T* dev_alloc(size_t n) {
    T* p = nullptr;
    cudaCheck(cudaMalloc((void**)&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}

static floatX* upload_X(const std::vector<double>& h) {
    std::vector<floatX> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = from_float((float)h[i]);
    floatX* d = dev_alloc<floatX>(h.size());
    cudaCheck(cudaMemcpy(d, t.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

[[maybe_unused]] static void copy_to_X(floatX* d, const std::vector<double>& h) {
    std::vector<floatX> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = from_float((float)h[i]);
    cudaCheck(cudaMemcpy(d, t.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

static std::vector<double> download_X(const floatX* d, size_t n) {
    std::vector<floatX> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<double> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(t[i]);
    return h;
}

[[maybe_unused]] static std::vector<double> download_f(const float* d, size_t n) {
    std::vector<float> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::vector<double>(t.begin(), t.end());
}

[[maybe_unused]] static std::vector<uint8_t> download_bytes(const void* d, size_t bytes) {
    std::vector<uint8_t> t(bytes);
    cudaCheck(cudaMemcpy(t.data(), d, bytes, cudaMemcpyDeviceToHost));
    return t;
}

// |got - ref| <= rel * max(max|ref|, scale) + ulps * ulp_floatX(ref) for every element (NaN fails).
// scale: the magnitude of the terms the outputs are computed from, where that can exceed the
// outputs (cancellation). Prints the first 10 mismatches; returns the number of mismatches;
// *worst = max error / tolerance.
static int compare(const char* what, const std::vector<double>& got, const std::vector<double>& ref, double rel,
                   double ulps, double* worst, double scale = 0.0) {
    double maxref = scale;
    for (double r : ref) maxref = std::max(maxref, fabs(r));
    int bad = 0;
    double w = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double tol = rel * maxref + ulps * ulp_floatX(ref[i]) + 1e-300;
        const double err = fabs(got[i] - ref[i]);
        if (!(err <= tol)) {
            if (bad < 10) {
                printf("      %s[%zu]: got %.9g, expected %.9g (error %.3g, tolerance %.3g)\n", what, i, got[i], ref[i],
                       err, tol);
            }
            bad++;
        }
        if (err == err) w = std::max(w, err / tol);
    }
    if (bad > 10) printf("      %s: %d mismatches in all\n", what, bad);
    *worst = std::max(*worst, bad ? INFINITY : w);
    return bad;
}

// Runs body in a child process: it must end with an error exit (a launcher's ls_fatal).
template <typename F>
static bool expect_fatal(const char* what, F body) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) ls_fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        body();
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) ls_fatal("waitpid: %s", strerror(errno));
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) != 0;
    if (!ok || !g_quiet) printf("  precondition: %-58s %s\n", what, ok ? "rejected: ok" : "NOT REJECTED: FAIL");
    return ok;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Median milliseconds of body over `repeats` runs, each after an L2 flush (a memset of 2x the L2).
template <typename F>
static float time_ms(int repeats, F body) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const size_t flush_bytes = (size_t)std::max(prop.l2CacheSize, 1 << 20) * 2;
    void* flush = dev_alloc<uint8_t>(flush_bytes);
    cudaEvent_t a, e;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&e));
    body(); // warm-up
    std::vector<float> ms;
    for (int r = 0; r < repeats; r++) {
        cudaCheck(cudaMemsetAsync(flush, r & 0xff, flush_bytes, 0));
        cudaCheck(cudaEventRecord(a, 0));
        body();
        cudaCheck(cudaEventRecord(e, 0));
        cudaCheck(cudaEventSynchronize(e));
        float x;
        cudaCheck(cudaEventElapsedTime(&x, a, e));
        ms.push_back(x);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaFree(flush));
    return median(ms);
}

// Device-to-device copy bandwidth (bytes read + written per second) on a `bytes` buffer.
static double copy_gbs(size_t bytes, int repeats) {
    void* src = dev_alloc<uint8_t>(bytes);
    void* dst = dev_alloc<uint8_t>(bytes);
    cudaCheck(cudaMemset(src, 1, bytes));
    float ms = time_ms(repeats, [&] { cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); });
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}


static int* upload_i(const std::vector<int>& h) {
    int* d = dev_alloc<int>(h.size());
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// ----------------------------------------------------------------------------
// float64 reference

// loss of one row (V logits) and, if dlogits != NULL, dloss * (p - onehot(t)).
static double ref_row(const double* x, int V, int t, double dloss, double* dlogits) {
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < V; j++) m = std::max(m, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - m);
    if (dlogits != nullptr) {
        for (int j = 0; j < V; j++) dlogits[j] = dloss * (exp(x[j] - m) / s - (j == t ? 1.0 : 0.0));
    }
    return log(s) + (m - x[t]);
}

static bool check_reference_gradient(Rng& rng) {
    const int V = 17, t = 16;
    std::vector<double> x(V), g(V);
    for (double& e : x) e = 3.0 * rng.normal();
    ref_row(x.data(), V, t, 1.0, g.data());
    double worst = 0.0;
    const double h = 1e-6;
    for (int j = 0; j < V; j++) {
        const double keep = x[j];
        x[j] = keep + h;
        const double lp = ref_row(x.data(), V, t, 1.0, nullptr);
        x[j] = keep - h;
        const double lm = ref_row(x.data(), V, t, 1.0, nullptr);
        x[j] = keep;
        worst = std::max(worst, fabs((lp - lm) / (2 * h) - g[j]));
    }
    const bool ok = worst < 1e-8;
    if (!ok || !g_quiet) printf("  float64 reference gradient vs central differences: worst %.2e  %s\n", worst, ok ? "ok" : "FAIL");
    return ok;
}

// ----------------------------------------------------------------------------
// check

struct Case {
    const char* name;
    int N, V, Vp;
    double offset, scale; // logits: offset + scale * normal
    int write_dlogits;
};

static const Case kCases[] = {
    {"N=64 V=300 Vp=384", 64, 300, 384, 0.0, 2.0, 1},
    {"N=8 V=Vp=64 (no padding)", 8, 64, 64, 0.0, 2.0, 1},
    {"N=16 V=1 Vp=8 (one class)", 16, 1, 8, 0.0, 2.0, 1},
    {"N=32 V=1001 Vp=1008 (one valid in a vector)", 32, 1001, 1008, 0.0, 2.0, 1},
    {"N=4 V=20000 Vp=20032 (long rows)", 4, 20000, 20032, 0.0, 2.0, 1},
    {"N=16 V=300 Vp=384, logits 1000 +- 20", 16, 300, 384, 1000.0, 20.0, 1},
    {"N=16 V=300 Vp=384, scale 30", 16, 300, 384, 0.0, 30.0, 1},
    {"N=16 V=300 Vp=384, losses only", 16, 300, 384, 0.0, 2.0, 0},
};

static const double kRel = 1e-5;
static const double kUlps = FLOATX_IS_BF16 ? 1.0 : 0.0;

static bool check_case(const Version& v, const Case& cs, Rng& rng) {
    const int N = cs.N, V = cs.V, Vp = cs.Vp;
    const size_t NV = (size_t)N * Vp;
    std::vector<double> x(NV, NAN);
    std::vector<int> tgt(N);
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < V; j++) x[(size_t)n * Vp + j] = as_floatX(cs.offset + cs.scale * rng.normal());
        tgt[n] = n == 0 ? V - 1 : n == 1 ? 0 : (int)(rng.uniform() * V);
    }
    const float dloss = 1.0f / (float)N;
    std::vector<double> loss(N), dl(NV, 0.0);
    for (int n = 0; n < N; n++) loss[n] = ref_row(&x[(size_t)n * Vp], V, tgt[n], dloss, &dl[(size_t)n * Vp]);
    for (double& e : dl) e = as_floatX(e);

    floatX* d_x = upload_X(x);
    int* d_t = upload_i(tgt);
    float* d_loss = dev_alloc<float>(N);
    std::vector<uint8_t> before = download_bytes(d_x, NV * sizeof(floatX));
    v.run(d_x, d_loss, dloss, d_t, N, V, Vp, cs.write_dlogits, 0);
    cudaCheck(cudaDeviceSynchronize());
    double worst = 0.0;
    int bad = compare("loss", download_f(d_loss, N), loss, kRel, 0.0, &worst);
    if (cs.write_dlogits) {
        bad += compare("dlogits", download_X(d_x, NV), dl, kRel, kUlps, &worst);
    } else if (download_bytes(d_x, NV * sizeof(floatX)) != before) {
        printf("      losses only: the logits changed\n");
        bad++;
    }
    for (void* p : {(void*)d_x, (void*)d_t, (void*)d_loss}) cudaCheck(cudaFree(p));
    if (bad || !g_quiet) printf("  %-14s %-44s worst err/tol %.3f  %s\n", v.name, cs.name, worst, bad ? "FAIL" : "ok");
    return bad == 0;
}

// The launcher must reject what it cannot do.
static bool check_preconditions() {
    bool ok = true;
    const int X = x128::size;
    floatX* a = dev_alloc<floatX>(64 * 64);
    float* f = dev_alloc<float>(64);
    int* t = dev_alloc<int>(64);
    ok &= expect_fatal("fused_classifier, Vp not a multiple of the vector", [&] {
        fused_classifier(a, f, 1.0f, t, 4, X, X + 2, 1, 0);
    });
    ok &= expect_fatal("fused_classifier, V > Vp", [&] { fused_classifier(a, f, 1.0f, t, 4, 2 * X + 1, 2 * X, 1, 0); });
    ok &= expect_fatal("fused_classifier, V = 0", [&] { fused_classifier(a, f, 1.0f, t, 4, 0, 2 * X, 1, 0); });
    ok &= expect_fatal("fused_classifier, misaligned logits", [&] { fused_classifier(a + 1, f, 1.0f, t, 4, X, 2 * X, 1, 0); });
    for (void* p : {(void*)a, (void*)f, (void*)t}) cudaCheck(cudaFree(p));
    return ok;
}

static int run_check(const std::vector<const Version*>& versions, uint64_t seed) {
    int failed = 0, total = 0;
#if LS_HARNESS
    const char* where = "CPU harness";
#else
    const char* where = "GPU";
#endif
    if (!g_quiet) printf("fused_classifier --check (%s, %s, seed %llu)\n", PRECISION_NAME, where, (unsigned long long)seed);
    Rng rng{seed};
    total++;
    failed += !check_reference_gradient(rng);
    for (const Case& cs : kCases) {
        for (const Version* v : versions) {
            total++;
            Rng case_rng{seed ^ (uint64_t)(&cs - kCases) * 0x100000001b3ULL}; // the same inputs for every version
            failed += !check_case(*v, cs, case_rng);
        }
    }
    total++;
    failed += !check_preconditions();
    printf("fused_classifier --check (%s): %d of %d checks passed%s\n", PRECISION_NAME, total - failed, total,
           failed ? " (reproduce with -s <the seed above>)" : "");
    if (failed && g_quiet) printf("  seed %llu\n", (unsigned long long)seed);
    return failed ? 1 : 0;
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int N = LS_HARNESS ? 16 : 8192, V = LS_HARNESS ? 1000 : 50257, Vp = LS_HARNESS ? 1024 : 50304;
    const size_t NV = (size_t)N * Vp, row_bytes = NV * sizeof(floatX);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("fused_classifier bench (%s): N = %d, V = %d, Vp = %d, device \"%s\"%s\n", PRECISION_NAME, N, V, Vp,
           prop.name, LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "");
    const double copy = copy_gbs(row_bytes, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    std::vector<int> tgt(N);
    for (int& t : tgt) t = (int)(rng.uniform() * V);
    int* d_t = upload_i(tgt);
    std::vector<double> x0 = random_floatX(rng, NV, 0.0, 2.0);
    floatX* x = upload_X(x0);
    float* loss = dev_alloc<float>(N);
    printf("  %-14s %-14s %10s %9s %8s   (bytes: the design's traffic)\n", "version", "op", "median ms", "GB/s", "% copy");
    for (const Version* v : versions) {
        struct Op { const char* name; double bytes; float ms; };
        Op ops[2] = {
            {"losses only", 1.0 * row_bytes, time_ms(repeats, [&] { v->run(x, loss, 1.0f / N, d_t, N, V, Vp, 0, 0); })},
            {"with dlogits", 3.0 * row_bytes, time_ms(repeats, [&] { v->run(x, loss, 1.0f / N, d_t, N, V, Vp, 1, 0); })},
        };
        for (const Op& op : ops) {
            const double gbs = op.bytes / (op.ms * 1e-3) / 1e9;
            printf("  %-14s %-14s %10.4f %9.1f %7.1f%%\n", v->name, op.name, op.ms, gbs, 100.0 * gbs / copy);
        }
        copy_to_X(x, x0); // the next version starts from logits again
    }
    for (void* p : {(void*)d_t, (void*)x, (void*)loss}) cudaCheck(cudaFree(p));
    return 0;
}

// ----------------------------------------------------------------------------
static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [-s SEED] [-r REPEATS] [-q]\n"
            "  --check     compare with the float64 reference on small shapes (default)\n"
            "  --bench     time at GPT-2 124M shapes (N = 8192, V = 50257, Vp = 50304)\n"
            "  -v VERSION  1 (naive), 2 (production) or all (default)\n"
            "  -s SEED     random inputs of --check (default: a fresh seed, printed)\n"
            "  -r REPEATS  timed repeats of --bench, 1..1000 (default 20)\n"
            "  -q          --check prints failures and the summary only\n",
            prog);
    exit(2);
}

static long long parse_int(const char* prog, const char* flag, const char* s, long long lo, long long hi) {
    char* end = nullptr;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s '%s': expected an integer in [%lld, %lld]\n", prog, flag, s, lo, hi);
        usage(prog);
    }
    return v;
}

int main(int argc, char** argv) {
    bool bench = false;
    const char* version = "all";
    long long repeats = 20;
    uint64_t seed = (uint64_t)time(nullptr) * 1000003ULL ^ (uint64_t)getpid();
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        auto need = [&]() -> const char* {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value\n", argv[0], a);
                usage(argv[0]);
            }
            return argv[++i];
        };
        if (strcmp(a, "--check") == 0) bench = false;
        else if (strcmp(a, "--bench") == 0) bench = true;
        else if (strcmp(a, "-q") == 0) g_quiet = true;
        else if (strcmp(a, "-v") == 0) version = need();
        else if (strcmp(a, "-s") == 0) seed = (uint64_t)parse_int(argv[0], "-s", need(), 0, INT64_MAX);
        else if (strcmp(a, "-r") == 0) repeats = parse_int(argv[0], "-r", need(), 1, 1000);
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) usage(argv[0]);
        else {
            fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a);
            usage(argv[0]);
        }
    }
    std::vector<const Version*> versions;
    for (int k = 0; k < kNumVersions; k++) {
        if (strcmp(version, "all") == 0 || atoi(version) == k + 1) versions.push_back(&kVersions[k]);
    }
    if (versions.empty() || (strcmp(version, "all") != 0 && std::to_string(atoi(version)) != version)) {
        fprintf(stderr, "%s: -v '%s': expected 1..%d or all\n", argv[0], version, kNumVersions);
        usage(argv[0]);
    }
    return bench ? run_bench(versions, (int)repeats) : run_check(versions, seed);
}
