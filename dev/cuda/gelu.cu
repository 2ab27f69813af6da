/*
 gelu.cu: the GELU kernel lab (tanh approximation, as train_gpt2.c), forward and in-place
 backward, against a float64 CPU reference (--check) or timed at GPT-2 124M shapes (--bench).
 Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  scalar: one element per thread, the same device math
   2  production: llmc/gelu.cuh (included, not copied): one 16-byte vector per thread, streaming
      loads of the input, a one-thread tail for n % x128::size

 --check: random inputs (fresh seed each run, printed; -s fixes it), normal with a wide spread plus
 0, +-1e-3, +-3, +-10, +-20 (tanh saturated) and large values; n = 1 and 7 (tail only), 8, 4099
 (tail), 100003 (many blocks); the forward also in place (out == inp). Tolerance per element,
 |device - ref| <= 1e-5 * S + u * ulp_floatX(ref), the float64 reference rounded to floatX, with S
 the largest |ref| or, if larger, the scale of the terms that cancel: max|x| for the forward
 (0.5 x (1 + tanh u) for x < 0), 1.25 max|dout| for the backward (gelu' is a difference of terms
 up to ~1.25 near x = -0.75); with a single element, max|ref| alone would demand 1e-5 of a
 cancelled result:
   fp32 u = 0: tanhf is within a few ulp, the polynomial a few roundings, far below 1e-5 of the
     largest value;
   bf16 u = 1: the device rounds its fp32 value to bf16, which lands one bf16 step (2^-7
     relative at most) from the rounded float64 value when the two straddle a rounding boundary.
 Also the float64 derivative against central differences of the float64 forward, and the
 launchers' checks (misaligned pointers are rejected).
 --bench: n = 8192 * 3072 (the MLP activation of GPT-2 124M at B*T = 8192), median of -r
 repeats after an L2 flush; GB/s of the minimum traffic against a device-to-device copy.

 usage: gelu [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write launchers with the production signatures, add a kVersions row.
*/
#include "llmc/cuda_common.h"
#include "llmc/cuda_precision.h"
#include "llmc/gelu.cuh"

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
// version 1: scalar

template <bool kBackward>
static __global__ void gelu_v1_kernel(floatX* out, const floatX* inp, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = to_float(inp[i]);
    out[i] = kBackward ? from_float(to_float(out[i]) * gelu_derivative(x)) : from_float(gelu_value(x));
}

static void gelu_forward_v1(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
    if (n > 0) launch(gelu_v1_kernel<false>, (unsigned)CEIL_DIV(n, (size_t)256), 256, 0, stream, out, inp, n);
}

static void gelu_backward_inplace_v1(floatX* d_in_out, const floatX* inp, size_t n, cudaStream_t stream) {
    if (n > 0) launch(gelu_v1_kernel<true>, (unsigned)CEIL_DIV(n, (size_t)256), 256, 0, stream, d_in_out, inp, n);
}

// ----------------------------------------------------------------------------
// the versions

struct Version {
    const char* name;
    void (*forward)(floatX*, const floatX*, size_t, cudaStream_t);
    void (*backward)(floatX*, const floatX*, size_t, cudaStream_t);
};

static const Version kVersions[] = {
    {"1 scalar", gelu_forward_v1, gelu_backward_inplace_v1},
    {"2 production", gelu_forward, gelu_backward_inplace},
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


// ----------------------------------------------------------------------------
// float64 reference

static double ref_gelu(double x) {
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

static double ref_gelu_derivative(double x) {
    const double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static bool check_reference_gradient() {
    double worst = 0.0;
    const double h = 1e-6;
    for (double x = -12.0; x <= 12.0; x += 0.037) {
        const double fd = (ref_gelu(x + h) - ref_gelu(x - h)) / (2 * h);
        worst = std::max(worst, fabs(fd - ref_gelu_derivative(x)));
    }
    const bool ok = worst < 1e-8;
    if (!ok || !g_quiet) printf("  float64 reference derivative vs central differences: worst %.2e  %s\n", worst, ok ? "ok" : "FAIL");
    return ok;
}

// ----------------------------------------------------------------------------
// check

static const size_t kSizes[] = {1, 7, 8, 4099, 100003};
static const double kRel = 1e-5;
static const double kUlps = FLOATX_IS_BF16 ? 1.0 : 0.0;

static std::vector<double> gelu_inputs(Rng& rng, size_t n) {
    static const double special[] = {0.0, 1e-3, -1e-3, 3.0, -3.0, 10.0, -10.0, 20.0, -20.0, 40.0, -40.0};
    std::vector<double> x = random_floatX(rng, n, 0.0, 3.0);
    for (size_t i = 0; i < n; i++) {
        if (rng.uniform() < 0.05) x[i] = as_floatX(special[(size_t)(rng.uniform() * 11)]);
    }
    return x;
}

static bool check_size(const Version& v, size_t n, Rng& rng) {
    std::vector<double> x = gelu_inputs(rng, n), d = random_floatX(rng, n, 0.0, 1.0);
    std::vector<double> y(n), dx(n);
    for (size_t i = 0; i < n; i++) {
        y[i] = as_floatX(ref_gelu(x[i]));
        dx[i] = as_floatX(d[i] * ref_gelu_derivative(x[i]));
    }
    floatX *d_x = upload_X(x), *d_out = dev_alloc<floatX>(n), *d_d = upload_X(d);
    double worst = 0.0;
    int bad = 0;
    // error scales: gelu(x) = 0.5 x (1 + tanh(u)) cancels for x < 0, with terms up to |x|;
    // gelu'(x) is a sum of terms of at most ~1.25 that cancels near x = -0.75
    double max_x = 0.0, max_d = 0.0;
    for (size_t i = 0; i < n; i++) {
        max_x = std::max(max_x, fabs(x[i]));
        max_d = std::max(max_d, 1.25 * fabs(d[i]));
    }
    v.forward(d_out, d_x, n, 0);
    cudaCheck(cudaDeviceSynchronize());
    bad += compare("out", download_X(d_out, n), y, kRel, kUlps, &worst, max_x);
    v.backward(d_d, d_x, n, 0);
    cudaCheck(cudaDeviceSynchronize());
    bad += compare("dinp", download_X(d_d, n), dx, kRel, kUlps, &worst, max_d);
    v.forward(d_x, d_x, n, 0); // in place
    cudaCheck(cudaDeviceSynchronize());
    bad += compare("out (in place)", download_X(d_x, n), y, kRel, kUlps, &worst, max_x);
    for (void* p : {(void*)d_x, (void*)d_out, (void*)d_d}) cudaCheck(cudaFree(p));
    if (bad || !g_quiet) {
        char name[64];
        snprintf(name, sizeof name, "n = %zu", n);
        printf("  %-14s %-40s worst err/tol %.3f  %s\n", v.name, name, worst, bad ? "FAIL" : "ok");
    }
    return bad == 0;
}

// The launchers must reject what they cannot do.
static bool check_preconditions() {
    bool ok = true;
    floatX* a = dev_alloc<floatX>(64);
    ok &= expect_fatal("gelu_forward, misaligned output", [&] { gelu_forward(a + 1, a + 16, 16, 0); });
    ok &= expect_fatal("gelu_backward_inplace, misaligned input", [&] { gelu_backward_inplace(a, a + 17, 16, 0); });
    cudaCheck(cudaFree(a));
    return ok;
}

static int run_check(const std::vector<const Version*>& versions, uint64_t seed) {
    int failed = 0, total = 0;
#if LS_HARNESS
    const char* where = "CPU harness";
#else
    const char* where = "GPU";
#endif
    if (!g_quiet) printf("gelu --check (%s, %s, seed %llu)\n", PRECISION_NAME, where, (unsigned long long)seed);
    total++;
    failed += !check_reference_gradient();
    for (size_t k = 0; k < sizeof kSizes / sizeof kSizes[0]; k++) {
        for (const Version* v : versions) {
            total++;
            Rng rng{seed ^ (uint64_t)k * 0x100000001b3ULL}; // the same inputs for every version
            failed += !check_size(*v, kSizes[k], rng);
        }
    }
    total++;
    failed += !check_preconditions();
    printf("gelu --check (%s): %d of %d checks passed%s\n", PRECISION_NAME, total - failed, total,
           failed ? " (reproduce with -s <the seed above>)" : "");
    if (failed && g_quiet) printf("  seed %llu\n", (unsigned long long)seed);
    return failed ? 1 : 0;
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const size_t n = LS_HARNESS ? (size_t)64 * 384 : (size_t)8192 * 3072;
    const size_t bytes = n * sizeof(floatX);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("gelu bench (%s): n = %zu, device \"%s\"%s\n", PRECISION_NAME, n, prop.name,
           LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "");
    const double copy = copy_gbs(bytes, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    floatX *x = upload_X(random_floatX(rng, n, 0.0, 1.0)), *out = dev_alloc<floatX>(n);
    floatX* d = upload_X(random_floatX(rng, n, 0.0, 1e-3));
    printf("  %-14s %-10s %10s %9s %8s   (bytes: the minimum traffic)\n", "version", "op", "median ms", "GB/s", "% copy");
    for (const Version* v : versions) {
        struct Op { const char* name; double bytes; float ms; };
        Op ops[2] = {
            {"forward", 2.0 * bytes, time_ms(repeats, [&] { v->forward(out, x, n, 0); })},
            {"backward", 3.0 * bytes, time_ms(repeats, [&] { v->backward(d, x, n, 0); })},
        };
        for (const Op& op : ops) {
            const double gbs = op.bytes / (op.ms * 1e-3) / 1e9;
            printf("  %-14s %-10s %10.4f %9.1f %7.1f%%\n", v->name, op.name, op.ms, gbs, 100.0 * gbs / copy);
        }
    }
    for (void* p : {(void*)x, (void*)out, (void*)d}) cudaCheck(cudaFree(p));
    return 0;
}

// ----------------------------------------------------------------------------
static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [-s SEED] [-r REPEATS] [-q]\n"
            "  --check     compare with the float64 reference on small shapes (default)\n"
            "  --bench     time at GPT-2 124M shapes (n = 8192 * 3072)\n"
            "  -v VERSION  1 (scalar), 2 (production) or all (default)\n"
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
