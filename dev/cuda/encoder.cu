/*
 encoder.cu: the encoder (token + position embedding) kernel lab, forward and backward, against a
 float64 CPU reference (--check) or timed at GPT-2 124M shapes (--bench). Built for both
 precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  production: llmc/encoder.cuh (included, not copied): forward one thread per 16-byte chunk;
      backward deterministic without atomics (positions grouped by token on the host, one block
      per token; dwpe one thread per chunk summing the batch in order), stochastic rounding in bf16

 --check: random inputs (fresh seed each run, printed; -s fixes it) with odd cases: C = 8 (one
 vector), C = 800 (several vectors per lane), C = 12288 (one warp per backward block), a
 vocabulary of 7 tokens (long groups), every position the same token, the last valid token and
 position, B = T = 1, T < maxT (rows of wpe past T untouched) and rows of wte never used (must
 keep their bits). Tolerance per element, |device - ref| <= 1e-5 * max|ref| + u * ulp_floatX(ref):
   forward (out = wte + wpe, rounded to floatX): ref rounded to floatX first; fp32 u = 0 (one fp32
     add); bf16 u = 1 (the fp32 sum is exact for most pairs; a rounding boundary may still flip).
   backward (dwte, dwpe +=): fp32 u = 0 (fp32 sums of at most B*T terms, far below 1e-5 of the
     largest value); bf16 u = 2 against the unrounded float64 sum: stochastic rounding lands on
     one of the two bf16 neighbours of the fp32 sum (< 1 ulp away), and the neighbour above can be
     in the next binade (ulp twice as large) when the sum lies just below a power of two.
 bf16 also checks that stochastic rounding is unbiased: many increments far below half an ulp of
 the gradient must raise its mean by their sum (round to nearest would drop them all). And: the
 same inputs and seed give the same bits (determinism), and the launchers' precondition checks.
 --bench: B = 8, T = 1024, C = 768, Vp = 50304 (tokens drawn with Zipf-like frequencies), median
 of -r repeats after an L2 flush; GB/s of the minimum traffic against a device-to-device copy. The
 backward time includes the host-side grouping of positions (also shown alone).

 usage: encoder [--check | --bench] [-v 1|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write launchers with the production signatures, add a kVersions row.
*/
#include "llmc/cuda_common.h"
#include "llmc/cuda_precision.h"
#include "llmc/encoder.cuh"

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
#include <chrono>
#include <string>
#include <vector>

// ----------------------------------------------------------------------------
// the versions

struct Version {
    const char* name;
    void (*forward)(floatX*, const int*, const floatX*, const floatX*, int, int, int, cudaStream_t);
    void (*backward)(floatX*, floatX*, float*, const floatX*, const int*, const int*, int, int, int, unsigned int,
                     cudaStream_t);
    size_t (*scratch_bytes)(int, int, int);
};

static const Version kVersions[] = {
    {"1 production", encoder_forward, encoder_backward, encoder_backward_scratch_bytes},
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
// check

struct Case {
    const char* name;
    int B, T, C, V, Vp, maxT;
    int token_kind; // 0 uniform over V, 1 every position token V-1
};

static const Case kCases[] = {
    {"B=2 T=16 C=96 V=50", 2, 16, 96, 50, 56, 24, 0},
    {"B=4 T=64 C=72 V=7 (long groups)", 4, 64, 72, 7, 8, 64, 0},
    {"B=1 T=1 C=8", 1, 1, 8, 3, 8, 1, 0},
    {"B=3 T=37 C=800 V=100", 3, 37, 800, 100, 104, 40, 0},
    {"B=2 T=32 C=16, one token for all", 2, 32, 16, 5, 8, 32, 1},
    {"B=1 T=3 C=12288 (one warp per block)", 1, 3, 12288, 2, 8, 3, 0},
};

static const double kRel = 1e-5;
static const double kUlpsForward = FLOATX_IS_BF16 ? 1.0 : 0.0;
static const double kUlpsBackward = FLOATX_IS_BF16 ? 2.0 : 0.0;

// Tokens of a case: the last valid token V-1 appears at the last position.
static std::vector<int> make_tokens(const Case& cs, Rng& rng) {
    const int N = cs.B * cs.T;
    std::vector<int> tok(N);
    for (int n = 0; n < N; n++) tok[n] = cs.token_kind == 1 ? cs.V - 1 : (int)(rng.uniform() * cs.V);
    tok[N - 1] = cs.V - 1;
    return tok;
}

// Rows [0, rows) of (rows, C) that must keep their bits: `used[r]` false.
static int check_untouched(const char* what, const std::vector<uint8_t>& before, const std::vector<uint8_t>& after,
                           const std::vector<bool>& used, int C) {
    const size_t row = (size_t)C * sizeof(floatX);
    for (size_t r = 0; r < used.size(); r++) {
        if (!used[r] && memcmp(&before[r * row], &after[r * row], row) != 0) {
            printf("      %s: row %zu has no gradient but changed\n", what, r);
            return 1;
        }
    }
    return 0;
}

static bool check_case(const Version& v, const Case& cs, Rng& rng) {
    const int B = cs.B, T = cs.T, C = cs.C, N = B * T;
    const size_t NC = (size_t)N * C;
    std::vector<int> tok = make_tokens(cs, rng);
    std::vector<double> wte = random_floatX(rng, (size_t)cs.Vp * C, 0.0, 1.0);
    std::vector<double> wpe = random_floatX(rng, (size_t)cs.maxT * C, 0.0, 0.5);
    std::vector<double> dout = random_floatX(rng, NC, 0.0, 1.0);
    std::vector<double> dwte0 = random_floatX(rng, (size_t)cs.Vp * C, 0.0, 1.0);
    std::vector<double> dwpe0 = random_floatX(rng, (size_t)cs.maxT * C, 0.0, 1.0);
    const unsigned seed = (unsigned)rng.next();
    int* d_tok = upload_i(tok);
    floatX *d_wte = upload_X(wte), *d_wpe = upload_X(wpe), *d_out = dev_alloc<floatX>(NC);
    double worst = 0.0;
    int bad = 0;

    // forward
    std::vector<double> out(NC);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            out[(size_t)n * C + c] = as_floatX(wte[(size_t)tok[n] * C + c] + wpe[(size_t)(n % T) * C + c]);
        }
    }
    v.forward(d_out, d_tok, d_wte, d_wpe, B, T, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    bad += compare("out", download_X(d_out, NC), out, kRel, kUlpsForward, &worst);

    // backward
    floatX *d_dout = upload_X(dout), *d_dwte = upload_X(dwte0), *d_dwpe = upload_X(dwpe0);
    float* d_scratch = dev_alloc<float>(v.scratch_bytes(B, T, C) / sizeof(float));
    v.backward(d_dwte, d_dwpe, d_scratch, d_dout, d_tok, tok.data(), B, T, C, seed, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> dwte = dwte0, dwpe = dwpe0;
    std::vector<bool> tok_used(cs.Vp, false), pos_used(cs.maxT, false);
    for (int n = 0; n < N; n++) {
        tok_used[tok[n]] = true;
        pos_used[n % T] = true;
        for (int c = 0; c < C; c++) {
            dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
            dwpe[(size_t)(n % T) * C + c] += dout[(size_t)n * C + c];
        }
    }
    bad += compare("dwte", download_X(d_dwte, dwte.size()), dwte, kRel, kUlpsBackward, &worst);
    bad += compare("dwpe", download_X(d_dwpe, dwpe.size()), dwpe, kRel, kUlpsBackward, &worst);
    std::vector<uint8_t> wte_bits = download_bytes(d_dwte, dwte.size() * sizeof(floatX));
    std::vector<uint8_t> wpe_bits = download_bytes(d_dwpe, dwpe.size() * sizeof(floatX));
    {
        std::vector<floatX> t0(dwte0.size()), p0(dwpe0.size());
        for (size_t i = 0; i < t0.size(); i++) t0[i] = from_float((float)dwte0[i]);
        for (size_t i = 0; i < p0.size(); i++) p0[i] = from_float((float)dwpe0[i]);
        std::vector<uint8_t> b0((uint8_t*)t0.data(), (uint8_t*)(t0.data() + t0.size()));
        std::vector<uint8_t> c0((uint8_t*)p0.data(), (uint8_t*)(p0.data() + p0.size()));
        bad += check_untouched("dwte", b0, wte_bits, tok_used, C);
        bad += check_untouched("dwpe", c0, wpe_bits, pos_used, C);
    }
    // determinism: the same inputs and seed, the same bits
    copy_to_X(d_dwte, dwte0);
    copy_to_X(d_dwpe, dwpe0);
    v.backward(d_dwte, d_dwpe, d_scratch, d_dout, d_tok, tok.data(), B, T, C, seed, 0);
    cudaCheck(cudaDeviceSynchronize());
    if (download_bytes(d_dwte, wte_bits.size()) != wte_bits || download_bytes(d_dwpe, wpe_bits.size()) != wpe_bits) {
        printf("      backward: a second run on the same inputs and seed gave different bits\n");
        bad++;
    }
    for (void* p : {(void*)d_tok, (void*)d_wte, (void*)d_wpe, (void*)d_out, (void*)d_dout, (void*)d_dwte,
                    (void*)d_dwpe, (void*)d_scratch}) {
        cudaCheck(cudaFree(p));
    }
    if (bad || !g_quiet) printf("  %-14s %-40s worst err/tol %.3f  %s\n", v.name, cs.name, worst, bad ? "FAIL" : "ok");
    return bad == 0;
}

// bf16: increments of 1e-4 (each far below half an ulp of 1.0, 2^-8) summed per token into
// dwte = 1.0 must raise the mean of dwte by their mean sum: |mean error| within 6 standard errors
// of a rounding that is 0 or 1 ulp (sigma <= ulp / 2 per element). Round-to-nearest would lose
// them all (a bias of about 0.1 ulp here, 30 standard errors).
static bool check_unbiased(const Version& v, Rng& rng) {
    const int B = 4, T = 32, C = 512, V = 16, N = B * T;
    std::vector<int> tok(N);
    for (int& t : tok) t = (int)(rng.uniform() * V);
    std::vector<double> dout((size_t)N * C, as_floatX(1e-4)), dwte((size_t)V * C, 1.0), dwpe((size_t)T * C, 1.0);
    int* d_tok = upload_i(tok);
    floatX *d_dout = upload_X(dout), *d_dwte = upload_X(dwte), *d_dwpe = upload_X(dwpe);
    float* d_scratch = dev_alloc<float>(v.scratch_bytes(B, T, C) / sizeof(float));
    v.backward(d_dwte, d_dwpe, d_scratch, d_dout, d_tok, tok.data(), B, T, C, (unsigned)rng.next(), 0);
    std::vector<double> got = download_X(d_dwte, dwte.size());
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) dwte[(size_t)tok[n] * C + c] += dout[(size_t)n * C + c];
    }
    const double ulp = ulp_floatX(1.0);
    double mean = 0.0, rounded_up = 0.0;
    for (size_t i = 0; i < got.size(); i++) {
        mean += (got[i] - dwte[i]) / ulp;
        rounded_up += got[i] > 1.0;
    }
    const double n = (double)got.size();
    mean /= n;
    const double limit = 6.0 * 0.5 / sqrt(n);
    const bool ok = fabs(mean) <= limit;
    if (!ok || !g_quiet) {
        printf("  %-14s %-40s mean error %+.4f ulp (limit %.4f), %.1f%% rounded up  %s\n", v.name,
               "stochastic rounding is unbiased", mean, limit, 100.0 * rounded_up / n, ok ? "ok" : "FAIL");
    }
    for (void* p : {(void*)d_tok, (void*)d_dout, (void*)d_dwte, (void*)d_dwpe, (void*)d_scratch}) cudaCheck(cudaFree(p));
    return ok;
}

// The launchers must reject what they cannot do.
static bool check_preconditions() {
    bool ok = true;
    const int X = x128::size;
    floatX* a = dev_alloc<floatX>(4 * 12296);
    float* f = dev_alloc<float>(64);
    int* t = dev_alloc<int>(8);
    std::vector<int> tok = {0, 1, 2, 3, 0, 1, 2, 3}, neg = {0, 1, -1, 3, 0, 1, 2, 3};
    ok &= expect_fatal("encoder_forward, C not a multiple of the vector", [&] { encoder_forward(a, t, a, a, 2, 4, X + 2, 0); });
    ok &= expect_fatal("encoder_forward, misaligned wte", [&] { encoder_forward(a, t, a + 1, a, 2, 4, 2 * X, 0); });
    ok &= expect_fatal("encoder_backward, a negative token", [&] {
        encoder_backward(a, a, f, a, t, neg.data(), 2, 4, 2 * X, 1, 0);
    });
    ok &= expect_fatal("encoder_backward, B = 0", [&] { encoder_backward(a, a, f, a, t, tok.data(), 0, 4, 2 * X, 1, 0); });
    ok &= expect_fatal("encoder_backward, C too large for shared memory", [&] {
        encoder_backward(a, a, f, a, t, tok.data(), 1, 1, 12296, 1, 0);
    });
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
    if (!g_quiet) printf("encoder --check (%s, %s, seed %llu)\n", PRECISION_NAME, where, (unsigned long long)seed);
    for (const Case& cs : kCases) {
        for (const Version* v : versions) {
            total++;
            Rng rng{seed ^ (uint64_t)(&cs - kCases) * 0x100000001b3ULL}; // the same inputs for every version
            failed += !check_case(*v, cs, rng);
        }
    }
    if (FLOATX_IS_BF16) {
        for (const Version* v : versions) {
            total++;
            Rng rng{seed ^ 0xb1a5ULL};
            failed += !check_unbiased(*v, rng);
        }
    }
    total++;
    failed += !check_preconditions();
    printf("encoder --check (%s): %d of %d checks passed%s\n", PRECISION_NAME, total - failed, total,
           failed ? " (reproduce with -s <the seed above>)" : "");
    if (failed && g_quiet) printf("  seed %llu\n", (unsigned long long)seed);
    return failed ? 1 : 0;
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int B = LS_HARNESS ? 4 : 8, T = LS_HARNESS ? 64 : 1024, C = LS_HARNESS ? 96 : 768;
    const int V = LS_HARNESS ? 1000 : 50257, Vp = LS_HARNESS ? 1024 : 50304, N = B * T;
    const size_t NC = (size_t)N * C;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("encoder bench (%s): B = %d, T = %d, C = %d, Vp = %d, device \"%s\"%s\n", PRECISION_NAME, B, T, C, Vp,
           prop.name, LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "");
    const double copy = copy_gbs(NC * sizeof(floatX) * 2, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    std::vector<int> tok(N); // Zipf-like: token k with probability ~ k^(-3/4) (a few very common tokens)
    for (int& t : tok) t = std::min(V - 1, (int)(V * pow(rng.uniform(), 4.0)));
    std::vector<bool> seen(V, false);
    int ngroups = 0;
    for (int t : tok) ngroups += !seen[t], seen[t] = true;
    int* d_tok = upload_i(tok);
    floatX *wte = upload_X(random_floatX(rng, (size_t)Vp * C, 0.0, 0.02)), *wpe = upload_X(random_floatX(rng, (size_t)T * C, 0.0, 0.02));
    floatX *out = dev_alloc<floatX>(NC), *dwte = upload_X(std::vector<double>((size_t)Vp * C, 0.0));
    floatX* dwpe = upload_X(std::vector<double>((size_t)T * C, 0.0));
    printf("  %d positions, %d distinct tokens\n", N, ngroups);
    printf("  %-14s %-10s %10s %9s %8s   (bytes: the minimum traffic)\n", "version", "op", "median ms", "GB/s", "% copy");
    for (const Version* v : versions) {
        float* scratch = dev_alloc<float>(v->scratch_bytes(B, T, C) / sizeof(float));
        std::vector<int> staging;
        auto h0 = std::chrono::steady_clock::now();
        for (int r = 0; r < repeats; r++) encoder_group_positions(staging, tok.data(), N);
        const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count() / repeats;
        unsigned seed = 0;
        struct Op { const char* name; double bytes; float ms; };
        Op ops[2] = {
            {"forward", 3.0 * NC * sizeof(floatX), time_ms(repeats, [&] { v->forward(out, d_tok, wte, wpe, B, T, C, 0); })},
            {"backward", (2.0 * NC + 2.0 * ngroups * C + 2.0 * T * C) * sizeof(floatX),
             time_ms(repeats, [&] { v->backward(dwte, dwpe, scratch, out, d_tok, tok.data(), B, T, C, ++seed, 0); })},
        };
        for (const Op& op : ops) {
            const double gbs = op.bytes / (op.ms * 1e-3) / 1e9;
            printf("  %-14s %-10s %10.4f %9.1f %7.1f%%\n", v->name, op.name, op.ms, gbs, 100.0 * gbs / copy);
        }
        printf("  %-14s host-side grouping of the positions alone: %.4f ms\n", v->name, host_ms);
        cudaCheck(cudaFree(scratch));
    }
    for (void* p : {(void*)d_tok, (void*)wte, (void*)wpe, (void*)out, (void*)dwte, (void*)dwpe}) cudaCheck(cudaFree(p));
    return 0;
}

// ----------------------------------------------------------------------------
static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [-s SEED] [-r REPEATS] [-q]\n"
            "  --check     compare with the float64 reference on small shapes (default)\n"
            "  --bench     time at GPT-2 124M shapes (B = 8, T = 1024, C = 768, Vp = 50304)\n"
            "  -v VERSION  1 (production) or all (default)\n"
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
