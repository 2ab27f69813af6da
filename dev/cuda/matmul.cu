/*
 matmul.cu: the lab of llmc/matmul.cuh (the Linear layers: cuBLASLt on a GPU, its CPU fallback under
 the harness, the header's own bias-gradient kernels, llmc/gelu.cuh when GELU is not fused).
 One driver, two modes:
   --check  small shapes against a float64 CPU reference: forward (bias or not, GELU epilogue or
            not), backward (dinp with and without the GELU derivative, dweight and dbias
            accumulating into non-zero buffers), N not a multiple of 64, column tiles cut by OC;
            every backward twice (bitwise identical: determinism); and the reference itself
            against central finite differences.
   --bench  TFLOP/s of the GPT-2 124M layer shapes (N = B*T = 8192, C = 768: qkv 768->2304,
            attproj 768->768, fc 768->3072 + GELU, fcproj 3072->768 (+ GELU backward), lm_head
            768->50304), forward and backward, against a large square GEMM measured in the same
            run as the ceiling.
 Versions (-v), the two ways the launchers run a GELU layer:
   1   unfused: matmul_set_gelu_fusion(0): BIAS epilogue, then llmc/gelu.cuh's kernels
   2   fused:   matmul_set_gelu_fusion(2): cuBLASLt GELU_AUX_BIAS and DGELU epilogues
 (Own GEMM kernels are not kept as a ladder: the production path is the library's.)

 Tolerances (per element, against the float64 reference computed from the same floatX inputs):
   FP32: |got - ref| <= 1e-5 * max|ref|. fp32 accumulation over K <= 300 products of unit-size
         numbers errs by ~sqrt(K) * 2^-24 of the typical magnitude: the worst seen over 300 seeds
         is 0.19 of the tolerance. On a GPU, outputs of cuBLASLt's GELU epilogues get 1e-3: its
         GELU may use a fast tanh (|error| ~ 2^-11), one reason the FP32 build defaults to version 1.
   BF16: |got - bf16(ref)| <= 1 ulp(bf16(ref)) + 2^-8 * max|ref|, and 2^-7 * max|ref| for the
         outputs of a GELU layer (out, and dinp when pre_gelu is given). The reference is rounded
         to bf16 first; fp32 accumulation can put the exact value on the other side of a rounding
         boundary (the ulp). The max term covers one extra rounding on the way of a value no
         larger than max|ref| (dweight and dbias round the running sum into bf16): half an ulp,
         2^-9 * max|ref|. Version 1 rounds the pre-activation (or dout @ w) to bf16 before the
         GELU (or its derivative, up to 1.13) is applied: up to 1.13 * 2^-9 * max|ref| more, on
         top of the two half-ulps of the final roundings, hence 2^-7 there (worst seen over 300
         seeds: 0.89 of the 2^-8 tolerance, so 2^-8 would be too tight).
 Inputs are fresh random numbers on every run (the seed is printed; --seed S reproduces a run).
 usage: see usage() below.
*/
#include "llmc/cuda_common.h"
#include "llmc/cuda_precision.h"
#include "llmc/matmul.cuh"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <vector>

static bool g_quiet = false; // -q: failures and the summary only

// ----------------------------------------------------------------------------
// data: deterministic random floatX-representable values, host <-> device

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A seed for this run when --seed is not given: the clock and the process id (printed, so that a
// failure can be reproduced with --seed).
static long long fresh_seed(void) {
    uint64_t t = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return (long long)(mix64(t ^ ((uint64_t)getpid() << 32)) >> 2);
}

// n values uniform in [-scale, scale), rounded to floatX so that the device and the reference see
// the same numbers. Each (seed, tensor) pair gives fresh values.
static std::vector<float> random_x(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(mix64(seed * 0x9e3779b97f4a7c15ULL + i) >> 11) * 0x1.0p-53;
        v[i] = to_float(from_float((float)((2.0 * u - 1.0) * scale)));
    }
    return v;
}

static floatX* upload(const std::vector<float>& h) {
    std::vector<floatX> x(h.size());
    for (size_t i = 0; i < h.size(); i++) x[i] = from_float(h[i]);
    floatX* d;
    cudaCheck(cudaMalloc(&d, x.size() * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d, x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

static void upload_to(floatX* d, const std::vector<float>& h) {
    std::vector<floatX> x(h.size());
    for (size_t i = 0; i < h.size(); i++) x[i] = from_float(h[i]);
    cudaCheck(cudaMemcpy(d, x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

static std::vector<float> download(const floatX* d, size_t n) {
    std::vector<floatX> x(n);
    cudaCheck(cudaMemcpy(x.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(x[i]);
    return h;
}

// ----------------------------------------------------------------------------
// comparison with stated tolerances

static double round_x(double r) { return (double)to_float(from_float((float)r)); }
static double ulp_x(double y) { return y == 0.0 ? 0.0 : ldexp(1.0, ilogb(y) - (FLOATX_IS_BF16 ? 7 : 23)); }

// Compares got (rows, cols) with the float64 reference: FP32 |got - ref| <= rel * max|ref|;
// BF16 |got - bf16(ref)| <= ulp + rel * max|ref|. Prints the first 10 mismatches with indices.
// Returns the number of mismatches; *worst gets the largest err/tol.
static long compare(const char* what, const std::vector<float>& got, const std::vector<double>& ref, int cols,
                    double rel, double* worst) {
    double mx = 0.0;
    for (double r : ref) mx = std::max(mx, fabs(r));
    long bad = 0;
    double w = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        double r = FLOATX_IS_BF16 ? round_x(ref[i]) : ref[i];
        double tol = rel * mx + (FLOATX_IS_BF16 ? ulp_x(r) : 0.0) + 1e-30;
        double err = fabs((double)got[i] - r);
        if (!(err <= tol)) { // NaN fails
            if (bad < 10) {
                printf("      %s[%zu, %zu]: got %.8g, expected %.8g (err %.3g > tol %.3g)\n", what, i / cols, i % cols,
                       got[i], r, err, tol);
            }
            bad++;
        }
        if (err / tol > w || err != err) w = err != err ? INFINITY : err / tol;
    }
    if (bad > 10) printf("      %s: %ld mismatches in all (of %zu)\n", what, bad, ref.size());
    *worst = std::max(*worst, w);
    return bad;
}

// ----------------------------------------------------------------------------
// float64 reference

static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double ref_gelu_grad(double x) {
    double s = sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// pre (N,OC) = inp (N,C) @ w (OC,C)^T + b; out = gelu(pre) when gelu, else pre.
static void ref_forward(std::vector<double>& out, std::vector<double>& pre, const std::vector<float>& inp,
                        const std::vector<float>& w, const std::vector<float>* b, int N, int C, int OC, bool gelu) {
    out.assign((size_t)N * OC, 0.0);
    pre.assign((size_t)N * OC, 0.0);
#pragma omp parallel for schedule(static) if ((double)N * C * OC > 1e6)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? (double)(*b)[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            pre[(size_t)n * OC + o] = s;
            out[(size_t)n * OC + o] = gelu ? ref_gelu(s) : s;
        }
}

// dinp = (dout @ w) * gelu'(pre_in) (pre_in may be NULL); dw = dw0 + dout^T inp; db = db0 + colsum(dout).
static void ref_backward(std::vector<double>& dinp, std::vector<double>& dw, std::vector<double>& db,
                         const std::vector<float>& dout, const std::vector<float>& inp, const std::vector<float>& w,
                         const std::vector<float>* pre_in, const std::vector<float>& dw0, const std::vector<float>& db0,
                         int N, int C, int OC) {
    dinp.assign((size_t)N * C, 0.0);
    dw.assign((size_t)OC * C, 0.0);
    db.assign(OC, 0.0);
    const bool par = (double)N * C * OC > 1e6;
#pragma omp parallel for schedule(static) if (par)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int o = 0; o < OC; o++) s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
            dinp[(size_t)n * C + c] = pre_in ? s * ref_gelu_grad((*pre_in)[(size_t)n * C + c]) : s;
        }
#pragma omp parallel for schedule(static) if (par)
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double s = dw0[(size_t)o * C + c];
            for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            dw[(size_t)o * C + c] = s;
        }
        double s = db0[o];
        for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
        db[o] = s;
    }
}

// The reference backward against central differences of the reference forward, in float64:
// L = sum(g * y), y = x @ w^T + b, x = gelu(p). Returns true when every derivative agrees.
static bool ref_selfcheck(void) {
    const int N = 3, C = 8, OC = 8;
    std::vector<float> p = random_x((size_t)N * C, 901, 2.0f), w = random_x((size_t)OC * C, 902, 1.0f),
                       b = random_x(OC, 903, 1.0f), g = random_x((size_t)N * OC, 904, 1.0f);
    std::vector<float> zw((size_t)OC * C, 0.0f), zb(OC, 0.0f);
    auto loss = [&](const std::vector<double>& pd, const std::vector<double>& wd, const std::vector<double>& bd) {
        double L = 0.0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double y = bd[o];
                for (int c = 0; c < C; c++) y += ref_gelu(pd[(size_t)n * C + c]) * wd[(size_t)o * C + c];
                L += g[(size_t)n * OC + o] * y;
            }
        return L;
    };
    std::vector<float> x((size_t)N * C);
    for (size_t i = 0; i < x.size(); i++) x[i] = (float)ref_gelu(p[i]); // only used through double below
    std::vector<double> pd(p.begin(), p.end()), wd(w.begin(), w.end()), bd(b.begin(), b.end());
    // analytic, in double throughout (x in double, not the float copy)
    std::vector<double> dp((size_t)N * C, 0.0), dw((size_t)OC * C, 0.0), dbv(OC, 0.0);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double go = g[(size_t)n * OC + o];
            dbv[o] += go;
            for (int c = 0; c < C; c++) {
                dw[(size_t)o * C + c] += go * ref_gelu(pd[(size_t)n * C + c]);
                dp[(size_t)n * C + c] += go * wd[(size_t)o * C + c];
            }
        }
    for (size_t i = 0; i < dp.size(); i++) dp[i] *= ref_gelu_grad(pd[i]);
    // the lab's ref_backward must agree (it takes x rounded to float: dweight to ~1e-7)
    std::vector<double> rdinp, rdw, rdb;
    ref_backward(rdinp, rdw, rdb, g, x, w, &p, zw, zb, N, C, OC);
    bool ok = true;
    for (size_t i = 0; i < dp.size(); i++) ok = ok && fabs(rdinp[i] - dp[i]) <= 1e-12 * (1.0 + fabs(dp[i]));
    for (size_t i = 0; i < dbv.size(); i++) ok = ok && fabs(rdb[i] - dbv[i]) <= 1e-12 * (1.0 + fabs(dbv[i]));
    for (size_t i = 0; i < dw.size(); i++) ok = ok && fabs(rdw[i] - dw[i]) <= 1e-6 * (1.0 + fabs(dw[i])); // x in float there
    const double h = 1e-6;
    double worst = 0.0;
    auto fd = [&](std::vector<double>& v, size_t i, double analytic) {
        double keep = v[i];
        v[i] = keep + h;
        double lp = loss(pd, wd, bd);
        v[i] = keep - h;
        double lm = loss(pd, wd, bd);
        v[i] = keep;
        double num = (lp - lm) / (2 * h), err = fabs(num - analytic) / (1e-6 + fabs(analytic));
        worst = std::max(worst, err);
    };
    for (size_t i = 0; i < pd.size(); i++) fd(pd, i, dp[i]);
    for (size_t i = 0; i < wd.size(); i++) fd(wd, i, dw[i]);
    for (size_t i = 0; i < bd.size(); i++) fd(bd, i, dbv[i]);
    ok = ok && worst < 1e-6;
    if (!g_quiet || !ok) {
        printf("  reference vs central differences (h = 1e-6): worst relative error %.2e %s\n", worst, ok ? "ok" : "FAIL");
    }
    return ok;
}

// ----------------------------------------------------------------------------
// check

struct Version {
    const char* id;
    const char* name;
    int gelu_fusion;
};
static const Version kVersions[] = {
    {"1", "unfused GELU kernels", 0},
    {"2", "cuBLASLt GELU epilogues", 2},
};

struct CheckCase {
    int N, C, OC;
    bool bias, gelu;
    const char* note;
};
static const CheckCase kChecks[] = {
    {64, 32, 48, false, false, "bias NULL"},
    {100, 64, 192, true, false, "N not a multiple of 64"},
    {37, 48, 256, true, true, "GELU, N = 37"},
    {200, 64, 72, false, true, "GELU without bias"},
    {300, 40, 264, true, false, "3 dbias slices, OC cuts a column tile"},
    {16, 64, 1024, false, false, "wide OC (classifier-like)"},
};

static bool check_case(const CheckCase& k, const Version& ver, uint64_t seed) {
    const int N = k.N, C = k.C, OC = k.OC;
    matmul_set_gelu_fusion(ver.gelu_fusion);
    std::vector<float> inp = random_x((size_t)N * C, seed + 1, 1.0f);
    std::vector<float> w = random_x((size_t)OC * C, seed + 2, 2.0f / sqrtf((float)C));
    std::vector<float> b = random_x(OC, seed + 3, 0.5f);
    std::vector<float> dout = random_x((size_t)N * OC, seed + 4, 1.0f);
    std::vector<float> pre_in = random_x((size_t)N * C, seed + 5, 3.0f); // the GELU input before this layer
    std::vector<float> dw0 = random_x((size_t)OC * C, seed + 6, 1.0f), db0 = random_x(OC, seed + 7, 1.0f);

    floatX *d_inp = upload(inp), *d_w = upload(w), *d_b = upload(b), *d_dout = upload(dout), *d_pre_in = upload(pre_in);
    floatX *d_out, *d_pre, *d_dinp, *d_dw = upload(dw0), *d_db = upload(db0);
    cudaCheck(cudaMalloc(&d_out, (size_t)N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_pre, (size_t)N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dinp, (size_t)N * C * sizeof(floatX)));
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, matmul_backward_scratch_bytes(N, OC)));

    const bool gpu_fused_gelu = !LS_HARNESS && ver.gelu_fusion > 0 && k.gelu;
    const double rel_plain = FLOATX_IS_BF16 ? 0x1.0p-8 : 1e-5;
    const double rel_gelu = FLOATX_IS_BF16 ? 0x1.0p-7 : (gpu_fused_gelu ? 1e-3 : 1e-5);
    long bad = 0;
    double worst = 0.0;

    // forward
    matmul_forward(d_out, k.gelu ? d_pre : NULL, d_inp, d_w, k.bias ? d_b : NULL, N, C, OC, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> r_out, r_pre;
    ref_forward(r_out, r_pre, inp, w, k.bias ? &b : NULL, N, C, OC, k.gelu);
    bad += compare("out", download(d_out, (size_t)N * OC), r_out, OC, k.gelu ? rel_gelu : rel_plain, &worst);
    if (k.gelu) bad += compare("pre_gelu", download(d_pre, (size_t)N * OC), r_pre, OC, rel_plain, &worst);

    // backward, twice from the same state: the results must be identical bits
    std::vector<float> got[2][3];
    for (int rep = 0; rep < 2; rep++) {
        upload_to(d_dw, dw0);
        upload_to(d_db, db0);
        matmul_backward(d_dinp, d_dw, k.bias ? d_db : NULL, d_scratch, d_dout, d_inp, d_w, k.gelu ? d_pre_in : NULL, N,
                        C, OC, 0);
        cudaCheck(cudaDeviceSynchronize());
        got[rep][0] = download(d_dinp, (size_t)N * C);
        got[rep][1] = download(d_dw, (size_t)OC * C);
        got[rep][2] = download(d_db, OC);
    }
    std::vector<double> r_dinp, r_dw, r_db;
    ref_backward(r_dinp, r_dw, r_db, dout, inp, w, k.gelu ? &pre_in : NULL, dw0, db0, N, C, OC);
    bad += compare("dinp", got[0][0], r_dinp, C, k.gelu ? rel_gelu : rel_plain, &worst);
    bad += compare("dweight", got[0][1], r_dw, C, rel_plain, &worst);
    if (k.bias) {
        bad += compare("dbias", got[0][2], r_db, OC, rel_plain, &worst);
    } else {
        for (int o = 0; o < OC; o++) { // dbias == NULL: the buffer is untouched
            if (got[0][2][o] != db0[o]) {
                if (bad < 10) printf("      dbias[%d] changed although dbias was NULL\n", o);
                bad++;
            }
        }
    }
    bool same = true;
    for (int t = 0; t < 3; t++) same = same && memcmp(got[0][t].data(), got[1][t].data(), got[0][t].size() * 4) == 0;
    if (!same) {
        printf("      backward is not deterministic: two runs differ\n");
        bad++;
    }
    if (!g_quiet || bad) {
        printf("  N=%4d C=%3d OC=%4d %-5s %-5s v%s %-24s worst err/tol %.3f  %s  (%s)\n", N, C, OC,
               k.bias ? "bias" : "-", k.gelu ? "gelu" : "-", k.gelu ? ver.id : "-", k.gelu ? ver.name : "",
               worst, bad ? "FAIL" : "ok", k.note);
    }
    cudaCheck(cudaFree(d_inp));
    cudaCheck(cudaFree(d_w));
    cudaCheck(cudaFree(d_b));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_pre_in));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_pre));
    cudaCheck(cudaFree(d_dinp));
    cudaCheck(cudaFree(d_dw));
    cudaCheck(cudaFree(d_db));
    cudaCheck(cudaFree(d_scratch));
    return bad == 0;
}

// ----------------------------------------------------------------------------
// bench

template <typename F>
static float median_ms(int repeats, F body) {
    cudaEvent_t a, e;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&e));
    body(); // warm-up (also picks the cuBLASLt algorithm)
    std::vector<float> ms;
    for (int r = 0; r < repeats; r++) {
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
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static floatX* device_random(size_t n, uint64_t seed, float scale) {
    std::vector<float> h = random_x(n, seed, scale);
    return upload(h);
}

// TFLOP/s of an S x S x S GEMM through the same code path: the ceiling the layers are measured against.
static double square_tflops(int S, int repeats) {
    floatX *a = device_random((size_t)S * S, 11, 1.0f), *b = device_random((size_t)S * S, 12, 1.0f), *d;
    cudaCheck(cudaMalloc(&d, (size_t)S * S * sizeof(floatX)));
    GemmShape s = gemm_shape(S, S, S, 0, 1);
    float ms = median_ms(repeats, [&] { matmul_gemm(d, a, b, s, GEMM_EPI_NONE, NULL, NULL, 0); });
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    cudaCheck(cudaFree(d));
    return 2.0 * S * (double)S * S / (ms * 1e-3) / 1e12;
}

struct BenchLayer {
    const char* name;
    int cin_mult, cout_mult; // C_in = cin_mult * C, OC = cout_mult * C (0: the vocabulary)
    bool bias, gelu_fwd, gelu_bwd;
};

static int bench(const std::vector<const Version*>& versions, int N, int C, int Vp, int S, int repeats) {
    const BenchLayer layers[] = {
        {"qkv", 1, 3, true, false, false},    {"attproj", 1, 1, true, false, false},
        {"fc", 1, 4, true, true, false},      {"fcproj", 4, 1, true, false, true},
        {"lm_head", 1, 0, false, false, false},
    };
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    double ceiling = square_tflops(S, repeats);
    printf("matmul bench (%s), device \"%s\"%s\n", PRECISION_NAME, prop.name,
           LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "");
    printf("  ceiling: %d x %d x %d GEMM, %.4g TFLOP/s (median of %d)\n", S, S, S, ceiling, repeats);
    printf("  %-8s %6s %6s %6s %-4s %9s %9s %7s %9s %9s %7s\n", "layer", "N", "C_in", "OC", "v", "fwd ms", "TFLOP/s",
           "% ceil", "bwd ms", "TFLOP/s", "% ceil");
    for (const BenchLayer& L : layers) {
        const int Cin = L.cin_mult * C, OC = L.cout_mult ? L.cout_mult * C : Vp;
        floatX *inp = device_random((size_t)N * Cin, 21, 1.0f), *w = device_random((size_t)OC * Cin, 22, 0.05f);
        floatX *b = device_random(OC, 23, 0.1f), *dout = device_random((size_t)N * OC, 24, 1.0f);
        floatX *pre_in = device_random((size_t)N * Cin, 25, 1.0f), *out, *pre, *dinp, *dw, *db;
        cudaCheck(cudaMalloc(&out, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&pre, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dinp, (size_t)N * Cin * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dw, (size_t)OC * Cin * sizeof(floatX)));
        cudaCheck(cudaMalloc(&db, (size_t)OC * sizeof(floatX)));
        cudaCheck(cudaMemset(dw, 0, (size_t)OC * Cin * sizeof(floatX)));
        cudaCheck(cudaMemset(db, 0, (size_t)OC * sizeof(floatX)));
        float* scratch;
        cudaCheck(cudaMalloc(&scratch, matmul_backward_scratch_bytes(N, OC)));
        const double flops = 2.0 * N * (double)Cin * OC;
        for (const Version* v : versions) {
            if (v != versions[0] && !L.gelu_fwd && !L.gelu_bwd) break; // versions differ only on GELU layers
            matmul_set_gelu_fusion(v->gelu_fusion);
            float fwd = median_ms(repeats, [&] {
                matmul_forward(out, L.gelu_fwd ? pre : NULL, inp, w, L.bias ? b : NULL, N, Cin, OC, 0);
            });
            float bwd = median_ms(repeats, [&] {
                matmul_backward(dinp, dw, L.bias ? db : NULL, scratch, dout, inp, w, L.gelu_bwd ? pre_in : NULL, N, Cin,
                                OC, 0);
            });
            double tf = flops / (fwd * 1e-3) / 1e12, tb = 2.0 * flops / (bwd * 1e-3) / 1e12;
            printf("  %-8s %6d %6d %6d %-4s %9.4f %9.4g %6.1f%% %9.4f %9.4g %6.1f%%\n", L.name, N, Cin, OC,
                   (L.gelu_fwd || L.gelu_bwd) ? v->id : "-", fwd, tf, 100.0 * tf / ceiling, bwd, tb, 100.0 * tb / ceiling);
        }
        floatX* bufs[] = {inp, w, b, dout, pre_in, out, pre, dinp, dw, db};
        for (floatX* p : bufs) cudaCheck(cudaFree(p));
        cudaCheck(cudaFree(scratch));
    }
    return 0;
}

// ----------------------------------------------------------------------------

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [--seed S] [-q]\n"
            "          [-n N] [-c C] [--vocab VP] [-s S] [-r REPEATS] [--tf32]   (--bench only)\n"
            "  --check      small shapes against a float64 reference (default)\n"
            "  --bench      GPT-2 layer shapes: time and TFLOP/s against an S^3 GEMM\n"
            "  -v VERSION   1 (unfused GELU), 2 (cuBLASLt GELU epilogues) or all (default)\n"
            "  --seed S     seed of the random inputs, 0..2^62 (default: a fresh one per run, printed)\n"
            "  -q           --check prints failures and the summary only\n"
            "  -n N         rows B*T, 1..1048576 (default 8192)\n"
            "  -c C         channels, a multiple of 8 in 8..16384 (default 768)\n"
            "  --vocab VP   padded vocabulary of lm_head, a multiple of 8 in 8..262144 (default 50304)\n"
            "  -s S         size of the square ceiling GEMM, a multiple of 8 in 8..32768 (default 8192)\n"
            "  -r REPEATS   timed repeats, 1..1000 (default 20)\n"
            "  --tf32       FP32 build: let cuBLASLt use TF32 tensor cores\n",
            prog);
    exit(2);
}

static long long parse_int(const char* prog, const char* flag, const char* s, long long lo, long long hi,
                           long long multiple) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi || v % multiple != 0) {
        fprintf(stderr, "%s: %s '%s': expected an integer in [%lld, %lld]%s\n", prog, flag, s, lo, hi,
                multiple > 1 ? " that is a multiple of 8" : "");
        usage(prog);
    }
    return v;
}

int main(int argc, char** argv) {
    bool do_bench = false, tf32 = false, bench_flag = false;
    const char* version = "all";
    long long N = 8192, C = 768, Vp = 50304, S = 8192, repeats = 20, seed = -1;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        auto need = [&]() -> const char* {
            if (i + 1 >= argc) { fprintf(stderr, "%s: %s needs a value\n", argv[0], a); usage(argv[0]); }
            return argv[++i];
        };
        if (strcmp(a, "--check") == 0) do_bench = false;
        else if (strcmp(a, "--bench") == 0) do_bench = true;
        else if (strcmp(a, "-q") == 0) g_quiet = true;
        else if (strcmp(a, "-v") == 0) version = need();
        else if (strcmp(a, "--seed") == 0) seed = parse_int(argv[0], a, need(), 0, 1LL << 62, 1);
        else if (strcmp(a, "-n") == 0) { N = parse_int(argv[0], a, need(), 1, 1 << 20, 1); bench_flag = true; }
        else if (strcmp(a, "-c") == 0) { C = parse_int(argv[0], a, need(), 8, 16384, 8); bench_flag = true; }
        else if (strcmp(a, "--vocab") == 0) { Vp = parse_int(argv[0], a, need(), 8, 262144, 8); bench_flag = true; }
        else if (strcmp(a, "-s") == 0) { S = parse_int(argv[0], a, need(), 8, 32768, 8); bench_flag = true; }
        else if (strcmp(a, "-r") == 0) { repeats = parse_int(argv[0], a, need(), 1, 1000, 1); bench_flag = true; }
        else if (strcmp(a, "--tf32") == 0) { tf32 = true; bench_flag = true; }
        else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) usage(argv[0]);
        else { fprintf(stderr, "%s: unknown argument '%s'\n", argv[0], a); usage(argv[0]); }
    }
    if (bench_flag && !do_bench) { fprintf(stderr, "%s: -n, -c, --vocab, -s, -r and --tf32 apply to --bench\n", argv[0]); usage(argv[0]); }
    if (tf32 && FLOATX_IS_BF16) { fprintf(stderr, "%s: --tf32 applies to the FP32 build\n", argv[0]); usage(argv[0]); }
    std::vector<const Version*> versions;
    for (const Version& v : kVersions)
        if (strcmp(version, "all") == 0 || strcmp(version, v.id) == 0) versions.push_back(&v);
    if (versions.empty()) { fprintf(stderr, "%s: -v '%s': expected 1, 2 or all\n", argv[0], version); usage(argv[0]); }

    if (seed < 0) seed = fresh_seed();
    matmul_init(MATMUL_WORKSPACE_DEFAULT);
    if (tf32) matmul_set_tf32(1);
    int rc = 0;
    if (do_bench) {
        rc = bench(versions, (int)N, (int)C, (int)Vp, (int)S, (int)repeats);
    } else {
#if LS_HARNESS
        if (!g_quiet) printf("matmul --check (%s, CPU harness, order %s), seed %lld\n", PRECISION_NAME,
                             ls_harness::order_name(ls_harness::config().order), seed);
#else
        if (!g_quiet) printf("matmul --check (%s, GPU), seed %lld\n", PRECISION_NAME, seed);
#endif
        int failed = 0, total = 0;
        total++;
        if (!ref_selfcheck()) failed++;
        uint64_t case_seed = mix64((uint64_t)seed);
        for (const CheckCase& k : kChecks) {
            case_seed += 10;
            for (const Version* v : versions) {
                if (v != versions[0] && !k.gelu) continue; // the versions differ only with GELU
                total++;
                if (!check_case(k, *v, case_seed)) failed++;
            }
        }
        printf("matmul --check (%s): %d of %d checks passed (seed %lld)\n", PRECISION_NAME, total - failed, total, seed);
        rc = failed ? 1 : 0;
    }
    matmul_free();
    return rc;
}
