/*
 layernorm.cu: the LayerNorm kernel lab. Forward, forward fused with the residual add, and
 backward, against a float64 CPU reference (--check) or timed at GPT-2 124M shapes (--bench).
 Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  naive: one thread per row, scalar loads, fp32 two-pass statistics; backward: one thread per
      row for dinp, then one thread per channel for dweight/dbias (rows in order, like the CPU)
   2  production: llmc/layernorm.cuh (included, not copied): warp per row, 16-byte vectors, the row
      cached in shared memory; backward: per-warp accumulators in shared memory and a fixed-order
      two-level reduction (deterministic)

 --check: random inputs (fresh seed each run, printed; -s fixes it) for small shapes with odd
 cases: C = 8 (one vector), C = 800 (not a multiple of the block or of 32 vectors), N not a
 multiple of the rows per block, a large mean next to a small spread (mean >> std), more rows than
 the backward pass has blocks (empty blocks). Tolerance per element, with the reference computed
 in float64 from the same (floatX-rounded) inputs and then rounded to floatX:
   |device - ref| <= 1e-5 * max|ref| + u * ulp_floatX(ref)
   fp32 build: u = 0: fp32 arithmetic (tree sums, FMA contraction on the GPU) errs by a few ulp of
              the largest terms, well under 1e-5 of the largest output.
   bf16 build: u = 1 for bf16 outputs: the device rounds an fp32 value that differs from the
              float64 one by ~1e-6 relative, so near a rounding boundary the two roundings can land
              on neighbouring bf16 values (1 ulp = 2^-7 relative at most, i.e. the ~1e-2 scale);
              mean, rstd stay fp32 (u = 0).
   dweight, dbias of version 1 (sequential fp32 sums over N rows): 1e-4 instead of 1e-5 (kVersions).
 Also: the float64 backward against central finite differences of the float64 forward, bitwise
 repeatability of the backward pass (production), and the launchers' precondition checks (a bad C,
 a misaligned pointer must end the program with an error).
 --bench: N = 8192, C = 768 (on the CPU harness: small shapes, host times), median of -r repeats,
 each after an L2 flush, GB/s of the minimum traffic and its share of a device-to-device copy.

 usage: layernorm [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write its three launchers with the production signatures, add a kVersions row.
*/
#include "llmc/cuda_common.h"
#include "llmc/cuda_precision.h"
#include "llmc/layernorm.cuh"

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

static __global__ void layernorm_forward_v1_kernel(floatX* residual, floatX* out, float* mean, float* rstd,
                                                   const floatX* inp1, const floatX* inp2, const floatX* weight,
                                                   const floatX* bias, int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const floatX* x = inp1 + off;
    if (inp2 != nullptr) {
        for (int i = 0; i < C; i++) residual[off + i] = from_float(to_float(inp1[off + i]) + to_float(inp2[off + i]));
        x = residual + off;
    }
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += to_float(x[i]);
    m /= (float)C;
    float var = 0.0f;
    for (int i = 0; i < C; i++) {
        const float d = to_float(x[i]) - m;
        var += d * d;
    }
    const float s = 1.0f / sqrtf(var / (float)C + LAYERNORM_EPS);
    for (int i = 0; i < C; i++) {
        out[off + i] = from_float((to_float(x[i]) - m) * s * to_float(weight[i]) + to_float(bias[i]));
    }
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = s;
}

static void layernorm_forward_v1(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                 const floatX* bias, int N, int C, cudaStream_t stream) {
    launch(layernorm_forward_v1_kernel, (unsigned)CEIL_DIV(N, 128), 128, 0, stream, (floatX*)nullptr, out, mean, rstd,
           inp, (const floatX*)nullptr, weight, bias, N, C);
}

static void fused_residual_layernorm_forward_v1(floatX* residual, floatX* normed, float* mean, float* rstd,
                                                const floatX* inp1, const floatX* inp2, const floatX* weight,
                                                const floatX* bias, int N, int C, cudaStream_t stream) {
    launch(layernorm_forward_v1_kernel, (unsigned)CEIL_DIV(N, 128), 128, 0, stream, residual, normed, mean, rstd,
           inp1, inp2, weight, bias, N, C);
}

static __global__ void layernorm_backward_v1_rows_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                         const floatX* weight, const float* mean, const float* rstd,
                                                         int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float mean_dn = 0.0f, mean_dn_norm = 0.0f;
    for (int i = 0; i < C; i++) {
        const float norm = (to_float(inp[off + i]) - m) * s, dn = to_float(weight[i]) * to_float(dout[off + i]);
        mean_dn += dn;
        mean_dn_norm += dn * norm;
    }
    mean_dn /= (float)C;
    mean_dn_norm /= (float)C;
    for (int i = 0; i < C; i++) {
        const float norm = (to_float(inp[off + i]) - m) * s, dn = to_float(weight[i]) * to_float(dout[off + i]);
        dinp[off + i] = from_float(to_float(dinp[off + i]) + (dn - mean_dn - norm * mean_dn_norm) * s);
    }
}

static __global__ void layernorm_backward_v1_cols_kernel(floatX* dweight, floatX* dbias, const floatX* dout,
                                                         const floatX* inp, const float* mean, const float* rstd,
                                                         int N, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int n = 0; n < N; n++) {
        const float d = to_float(dout[(size_t)n * C + i]);
        dw += (to_float(inp[(size_t)n * C + i]) - mean[n]) * rstd[n] * d;
        db += d;
    }
    dweight[i] = from_float(to_float(dweight[i]) + dw);
    dbias[i] = from_float(to_float(dbias[i]) + db);
}

static void layernorm_backward_v1(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                                  const floatX* inp, const floatX* weight, const float* mean, const float* rstd, int N,
                                  int C, cudaStream_t stream) {
    (void)scratch;
    launch(layernorm_backward_v1_rows_kernel, (unsigned)CEIL_DIV(N, 128), 128, 0, stream, dinp, dout, inp, weight,
           mean, rstd, N, C);
    launch(layernorm_backward_v1_cols_kernel, (unsigned)CEIL_DIV(C, 128), 128, 0, stream, dweight, dbias, dout, inp,
           mean, rstd, N, C);
}

static size_t layernorm_backward_v1_scratch_bytes(int N, int C) {
    (void)N;
    (void)C;
    return 16;
}

// ----------------------------------------------------------------------------
// the versions

struct Version {
    const char* name;
    void (*forward)(floatX*, float*, float*, const floatX*, const floatX*, const floatX*, int, int, cudaStream_t);
    void (*fused)(floatX*, floatX*, float*, float*, const floatX*, const floatX*, const floatX*, const floatX*, int,
                  int, cudaStream_t);
    void (*backward)(floatX*, floatX*, floatX*, float*, const floatX*, const floatX*, const floatX*, const float*,
                     const float*, int, int, cudaStream_t);
    size_t (*scratch_bytes)(int, int);
    double rel_dparams; // tolerance of dweight, dbias (relative to the largest value): see below
};

// dweight and dbias are sums over N rows. Version 1 adds the rows one after another in fp32, whose
// error grows like sqrt(N) ulps of the running sum: about 1e-5 relative at N = 20000, so it gets
// 1e-4. Version 2 sums short runs and then partial sums in fixed trees: 1e-5 like everything else.
static const Version kVersions[] = {
    {"1 naive", layernorm_forward_v1, fused_residual_layernorm_forward_v1, layernorm_backward_v1,
     layernorm_backward_v1_scratch_bytes, 1e-4},
    {"2 production", layernorm_forward, fused_residual_layernorm_forward, layernorm_backward,
     layernorm_backward_scratch_bytes, 1e-5},
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

struct RefForward {
    std::vector<double> residual, out, mean, rstd; // residual: fused only (rounded to floatX)
};

// out = layernorm(x) * w + b, statistics of x (N,C).
static void ref_layernorm(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                          int N, int C, RefForward& r) {
    r.out.assign((size_t)N * C, 0.0);
    r.mean.assign(N, 0.0);
    r.rstd.assign(N, 0.0);
    for (int n = 0; n < N; n++) {
        const double* xr = &x[(size_t)n * C];
        double m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) m += xr[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        const double s = 1.0 / sqrt(v / C + (double)LAYERNORM_EPS);
        for (int i = 0; i < C; i++) r.out[(size_t)n * C + i] = (xr[i] - m) * s * w[i] + b[i];
        r.mean[n] = m;
        r.rstd[n] = s;
    }
}

// dinp += , dweight += , dbias +=  given the statistics the device uses (mean, rstd as floats).
static void ref_backward(std::vector<double>& dinp, std::vector<double>& dw, std::vector<double>& db,
                         const std::vector<double>& dout, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& mean, const std::vector<double>& rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const size_t off = (size_t)n * C;
        double a = 0.0, b = 0.0;
        for (int i = 0; i < C; i++) {
            const double norm = (x[off + i] - mean[n]) * rstd[n], dn = w[i] * dout[off + i];
            a += dn;
            b += dn * norm;
        }
        a /= C;
        b /= C;
        for (int i = 0; i < C; i++) {
            const double norm = (x[off + i] - mean[n]) * rstd[n], dn = w[i] * dout[off + i];
            dinp[off + i] += (dn - a - norm * b) * rstd[n];
            dw[i] += norm * dout[off + i];
            db[i] += dout[off + i];
        }
    }
}

// The float64 backward against central differences of L = sum(dout * layernorm(x)) (statistics
// recomputed from the perturbed x, as the gradient assumes).
static bool check_reference_gradient(Rng& rng) {
    const int N = 3, C = 8;
    std::vector<double> x(N * C), w(C), b(C), dout(N * C);
    for (double& v : x) v = rng.normal();
    for (double& v : w) v = 1.0 + 0.3 * rng.normal();
    for (double& v : b) v = 0.3 * rng.normal();
    for (double& v : dout) v = rng.normal();
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
        RefForward r;
        ref_layernorm(xx, ww, bb, N, C, r);
        double l = 0.0;
        for (size_t i = 0; i < r.out.size(); i++) l += dout[i] * r.out[i];
        return l;
    };
    RefForward r;
    ref_layernorm(x, w, b, N, C, r);
    std::vector<double> dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
    ref_backward(dx, dw, db, dout, x, w, r.mean, r.rstd, N, C);
    const double h = 1e-5;
    double worst = 0.0;
    auto probe = [&](std::vector<double>& p, size_t i, double analytic) {
        const double keep = p[i];
        p[i] = keep + h;
        const double lp = loss(x, w, b);
        p[i] = keep - h;
        const double lm = loss(x, w, b);
        p[i] = keep;
        worst = std::max(worst, fabs((lp - lm) / (2 * h) - analytic) / (1.0 + fabs(analytic)));
    };
    for (size_t i = 0; i < x.size(); i++) probe(x, i, dx[i]);
    for (int i = 0; i < C; i++) {
        probe(w, i, dw[i]);
        probe(b, i, db[i]);
    }
    const bool ok = worst < 1e-7;
    if (!ok || !g_quiet) printf("  float64 reference backward vs central differences: worst %.2e  %s\n", worst, ok ? "ok" : "FAIL");
    return ok;
}

// ----------------------------------------------------------------------------
// check

struct Case {
    const char* name;
    int N, C;
    double offset, spread; // inputs: offset + spread * normal
    bool forward;          // also check the forward passes (costly on the harness for large N)
};

static const Case kCases[] = {
    {"N=64 C=96", 64, 96, 0.0, 1.0, true},
    {"N=37 C=8 (one vector per row)", 37, 8, 0.0, 1.0, true},
    {"N=5 C=800 (not a multiple of 256)", 5, 800, 0.0, 1.0, true},
    {"N=300 C=72 (partial blocks)", 300, 72, 0.0, 2.0, true},
    {"N=64 C=96, mean 30 >> std 1", 64, 96, 30.0, 1.0, true},
    {"N=20000 C=8 (backward: empty blocks)", 20000, 8, 0.0, 1.0, false},
};

static const double kRel = 1e-5;                     // of the largest reference magnitude
static const double kUlps = FLOATX_IS_BF16 ? 1.0 : 0.0; // for floatX outputs

static bool check_case(const Version& v, const Case& cs, Rng& rng) {
    const int N = cs.N, C = cs.C;
    const size_t NC = (size_t)N * C;
    std::vector<double> inp1 = random_floatX(rng, NC, cs.offset, cs.spread);
    std::vector<double> inp2 = random_floatX(rng, NC, 0.0, cs.spread);
    std::vector<double> w = random_floatX(rng, C, 1.0, 0.3), b = random_floatX(rng, C, 0.0, 0.3);
    std::vector<double> dout = random_floatX(rng, NC, 0.0, 1.0), dinp0 = random_floatX(rng, NC, 0.0, 1.0);
    std::vector<double> dw0 = random_floatX(rng, C, 0.0, 1.0), db0 = random_floatX(rng, C, 0.0, 1.0);

    floatX *d_inp1 = upload_X(inp1), *d_inp2 = upload_X(inp2), *d_w = upload_X(w), *d_b = upload_X(b);
    floatX *d_out = dev_alloc<floatX>(NC), *d_res = dev_alloc<floatX>(NC);
    float *d_mean = dev_alloc<float>(N), *d_rstd = dev_alloc<float>(N);
    double worst = 0.0;
    int bad = 0;
    auto rounded = [](std::vector<double> x) {
        for (double& e : x) e = as_floatX(e);
        return x;
    };

    RefForward r;
    if (cs.forward) {
        // plain forward
        ref_layernorm(inp1, w, b, N, C, r);
        v.forward(d_out, d_mean, d_rstd, d_inp1, d_w, d_b, N, C, 0);
        cudaCheck(cudaDeviceSynchronize());
        bad += compare("out", download_X(d_out, NC), rounded(r.out), kRel, kUlps, &worst);
        bad += compare("mean", download_f(d_mean, N), r.mean, kRel, 0.0, &worst);
        bad += compare("rstd", download_f(d_rstd, N), r.rstd, kRel, 0.0, &worst);
        // fused residual forward: the statistics are those of the rounded residual
        std::vector<double> res(NC);
        for (size_t i = 0; i < NC; i++) res[i] = as_floatX(inp1[i] + inp2[i]);
        RefForward rf;
        ref_layernorm(res, w, b, N, C, rf);
        v.fused(d_res, d_out, d_mean, d_rstd, d_inp1, d_inp2, d_w, d_b, N, C, 0);
        cudaCheck(cudaDeviceSynchronize());
        bad += compare("fused residual", download_X(d_res, NC), res, kRel, kUlps, &worst);
        bad += compare("fused out", download_X(d_out, NC), rounded(rf.out), kRel, kUlps, &worst);
        bad += compare("fused mean", download_f(d_mean, N), rf.mean, kRel, 0.0, &worst);
        bad += compare("fused rstd", download_f(d_rstd, N), rf.rstd, kRel, 0.0, &worst);
    } else {
        ref_layernorm(inp1, w, b, N, C, r); // statistics for the backward pass
    }

    // backward, with the statistics as the device holds them (floats)
    std::vector<float> mean_f(r.mean.begin(), r.mean.end()), rstd_f(r.rstd.begin(), r.rstd.end());
    cudaCheck(cudaMemcpy(d_mean, mean_f.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_rstd, rstd_f.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<double> mean_d(mean_f.begin(), mean_f.end()), rstd_d(rstd_f.begin(), rstd_f.end());
    floatX *d_dout = upload_X(dout), *d_dinp = upload_X(dinp0), *d_dw = upload_X(dw0), *d_db = upload_X(db0);
    const size_t scratch_bytes = v.scratch_bytes(N, C);
    float* d_scratch = dev_alloc<float>(scratch_bytes / sizeof(float));
    v.backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp1, d_w, d_mean, d_rstd, N, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> dinp = dinp0, dw = dw0, db = db0;
    ref_backward(dinp, dw, db, dout, inp1, w, mean_d, rstd_d, N, C);
    bad += compare("dinp", download_X(d_dinp, NC), rounded(dinp), kRel, kUlps, &worst);
    bad += compare("dweight", download_X(d_dw, C), rounded(dw), v.rel_dparams, kUlps, &worst);
    bad += compare("dbias", download_X(d_db, C), rounded(db), v.rel_dparams, kUlps, &worst);
    { // the same inputs again: the same bits (no atomics in any version)
        std::vector<uint8_t> b1 = download_bytes(d_dinp, NC * sizeof(floatX)), w1 = download_bytes(d_dw, C * sizeof(floatX)),
                             c1 = download_bytes(d_db, C * sizeof(floatX));
        copy_to_X(d_dinp, dinp0);
        copy_to_X(d_dw, dw0);
        copy_to_X(d_db, db0);
        v.backward(d_dinp, d_dw, d_db, d_scratch, d_dout, d_inp1, d_w, d_mean, d_rstd, N, C, 0);
        cudaCheck(cudaDeviceSynchronize());
        if (download_bytes(d_dinp, NC * sizeof(floatX)) != b1 || download_bytes(d_dw, C * sizeof(floatX)) != w1 ||
            download_bytes(d_db, C * sizeof(floatX)) != c1) {
            printf("      backward: a second run on the same inputs gave different bits\n");
            bad++;
        }
    }
    for (void* p : {(void*)d_inp1, (void*)d_inp2, (void*)d_w, (void*)d_b, (void*)d_out, (void*)d_res, (void*)d_mean,
                    (void*)d_rstd, (void*)d_dout, (void*)d_dinp, (void*)d_dw, (void*)d_db, (void*)d_scratch}) {
        cudaCheck(cudaFree(p));
    }
    if (bad || !g_quiet) printf("  %-14s %-40s worst err/tol %.3f  %s\n", v.name, cs.name, worst, bad ? "FAIL" : "ok");
    return bad == 0;
}

// The launchers must reject what they cannot do.
static bool check_preconditions() {
    bool ok = true;
    const int X = x128::size;
    floatX* a = dev_alloc<floatX>(64 * 64);
    float* f = dev_alloc<float>(64 * 64);
    ok &= expect_fatal("layernorm_forward, C not a multiple of the vector", [&] {
        layernorm_forward(a, f, f, a, a, a, 4, X + 2, 0);
    });
    ok &= expect_fatal("layernorm_forward, misaligned input", [&] { layernorm_forward(a, f, f, a + 1, a, a, 4, 2 * X, 0); });
    ok &= expect_fatal("fused_residual_layernorm_forward, N = 0", [&] {
        fused_residual_layernorm_forward(a, a, f, f, a, a, a, a, 0, 2 * X, 0);
    });
    ok &= expect_fatal("layernorm_backward, C too large for shared memory", [&] {
        layernorm_backward(a, a, a, f, a + 64 * 32, a + 64 * 16, a, f, f, 1, 6144 + 8, 0);
    });
    ok &= expect_fatal("layernorm_backward, dinp aliases dout", [&] {
        layernorm_backward(a, a, a, f, a, a + 64 * 16, a, f, f, 2, 2 * X, 0);
    });
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(f));
    return ok;
}

static int run_check(const std::vector<const Version*>& versions, uint64_t seed) {
    int failed = 0, total = 0;
#if LS_HARNESS
    const char* where = "CPU harness";
#else
    const char* where = "GPU";
#endif
    if (!g_quiet) printf("layernorm --check (%s, %s, seed %llu)\n", PRECISION_NAME, where, (unsigned long long)seed);
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
    printf("layernorm --check (%s): %d of %d checks passed%s\n", PRECISION_NAME, total - failed, total,
           failed ? " (reproduce with -s <the seed above>)" : "");
    if (failed && g_quiet) printf("  seed %llu\n", (unsigned long long)seed);
    return failed ? 1 : 0;
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int N = LS_HARNESS ? 256 : 8 * 1024, C = LS_HARNESS ? 96 : 768;
    const size_t NC = (size_t)N * C, row_bytes = NC * sizeof(floatX);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("layernorm bench (%s): N = %d, C = %d, device \"%s\"%s\n", PRECISION_NAME, N, C, prop.name,
           LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "");
    const double copy = copy_gbs(row_bytes * 2, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    floatX *inp1 = upload_X(random_floatX(rng, NC, 0.0, 1.0)), *inp2 = upload_X(random_floatX(rng, NC, 0.0, 1.0));
    floatX *w = upload_X(random_floatX(rng, C, 1.0, 0.1)), *b = upload_X(random_floatX(rng, C, 0.0, 0.1));
    floatX *out = dev_alloc<floatX>(NC), *res = dev_alloc<floatX>(NC), *dinp = upload_X(std::vector<double>(NC, 0.0));
    floatX *dw = upload_X(std::vector<double>(C, 0.0)), *db = upload_X(std::vector<double>(C, 0.0));
    float *mean = dev_alloc<float>(N), *rstd = dev_alloc<float>(N);
    layernorm_forward(out, mean, rstd, inp1, w, b, N, C, 0); // statistics for the backward pass
    printf("  %-14s %-10s %10s %9s %8s   (bytes: the minimum traffic)\n", "version", "op", "median ms", "GB/s", "% copy");
    for (const Version* v : versions) {
        float* scratch = dev_alloc<float>(v->scratch_bytes(N, C) / sizeof(float));
        struct Op { const char* name; double bytes; float ms; };
        Op ops[3] = {
            {"forward", 2.0 * row_bytes, time_ms(repeats, [&] { v->forward(out, mean, rstd, inp1, w, b, N, C, 0); })},
            {"fused", 4.0 * row_bytes, time_ms(repeats, [&] { v->fused(res, out, mean, rstd, inp1, inp2, w, b, N, C, 0); })},
            {"backward", 4.0 * row_bytes,
             time_ms(repeats, [&] { v->backward(dinp, dw, db, scratch, out, inp1, w, mean, rstd, N, C, 0); })},
        };
        for (const Op& op : ops) {
            const double gbs = op.bytes / (op.ms * 1e-3) / 1e9;
            printf("  %-14s %-10s %10.4f %9.1f %7.1f%%\n", v->name, op.name, op.ms, gbs, 100.0 * gbs / copy);
        }
        cudaCheck(cudaFree(scratch));
    }
    for (void* p : {(void*)inp1, (void*)inp2, (void*)w, (void*)b, (void*)out, (void*)res, (void*)dinp, (void*)dw,
                    (void*)db, (void*)mean, (void*)rstd}) {
        cudaCheck(cudaFree(p));
    }
    return 0;
}

// ----------------------------------------------------------------------------

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [-s SEED] [-r REPEATS] [-q]\n"
            "  --check     compare with the float64 reference on small shapes (default)\n"
            "  --bench     time at GPT-2 124M shapes (N = 8192, C = 768)\n"
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
