/*
 matmul.cu: the lab of llmc/kernels/matmul.cuh (the Linear layers: cuBLASLt, on the CPU under the harness,
 the header's own bias-gradient kernels, llmc/kernels/gelu.cuh when GELU is not fused).
 One driver, two modes:
   --check  small shapes against a float64 CPU reference: forward (bias or not, GELU epilogue or
            not), backward (dinp with and without the GELU derivative, dweight and dbias
            accumulating into non-zero buffers), N not a multiple of 64, column tiles cut by OC;
            every backward twice (bitwise identical: determinism); and the reference itself
            against central finite differences. Under the harness version 2 must find every GELU
            epilogue; with --gelu-fallback it must take the separate kernels instead (CI runs
            that under LEANSTEP_HARNESS_CUBLASLT_GELU=0: a cuBLASLt without those kernels).
   --bench  TFLOP/s of the GPT-2 124M layer shapes (N = B*T = 8192, C = 768: qkv 768->2304,
            attproj 768->768, fc 768->3072 + GELU, fcproj 3072->768 (+ GELU backward), lm_head
            768->50304), forward and backward, against a large square GEMM measured in the same
            run as the ceiling.
 Versions (-v), the two ways the launchers run a GELU layer:
   1   unfused: matmul_set_gelu_fusion(0): BIAS epilogue, then llmc/kernels/gelu.cuh's kernels
   2   fused:   matmul_set_gelu_fusion(2): cuBLASLt GELU_AUX_BIAS and DGELU epilogues
 (Own GEMM kernels are not kept as a ladder: the production path is the library's.)

 Tolerances (per element, against the float64 reference computed from the same floatX inputs):
   FP32: |got - ref| <= 1e-5 * max|ref|. fp32 accumulation over K <= 300 products of unit-size
         numbers errs by ~sqrt(K) * 2^-24 of the typical magnitude: the worst seen over 300 seeds
         is 0.19 of the tolerance. On a GPU, outputs of cuBLASLt's GELU epilogues get 1e-3: its
         GELU may use a fast tanh (|error| ~ 2^-11), one reason the FP32 build defaults to version 1.
   BF16: |got - bf16(ref)| <= 2 ulp(bf16(ref)) + 2^-8 * max|ref|, and 2^-7 * max|ref| for the
         outputs of a GELU layer (out, and dinp when pre_gelu is given). The reference is rounded
         to bf16 first; fp32 accumulation can put the exact value on the other side of a rounding
         boundary (one ulp; two are allowed, lab.h's kLabUlpsLowp). The max term covers one extra
         rounding on the way of a value no larger than max|ref| (dweight and dbias round the
         running sum into bf16): half an ulp, 2^-9 * max|ref|. Version 1 rounds the pre-activation (or dout @ w) to bf16 before the
         GELU (or its derivative, up to 1.13) is applied: up to 1.13 * 2^-9 * max|ref| more, on
         top of the two half-ulps of the final roundings, hence 2^-7 there (worst seen over 300
         seeds: 0.89 of the 2^-8 tolerance, so 2^-8 would be too tight).
 Inputs are fresh random numbers on every run (the seed is printed; --seed S reproduces a run).
 usage: see usage() below.
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/matmul.cuh"

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
    std::vector<float> p = uniform_floatX((size_t)N * C, 901, 2.0f), w = uniform_floatX((size_t)OC * C, 902, 1.0f),
                       b = uniform_floatX(OC, 903, 1.0f), g = uniform_floatX((size_t)N * OC, 904, 1.0f);
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
    {300, 40, 264, true, false, "5 dbias slices, OC cuts a column tile"},
    {4100, 16, 1024, true, false, "dbias: 8 rows in flight per thread, then a tail row"},
    {16, 64, 1024, false, false, "wide OC (classifier-like)"},
};

static bool check_case(const CheckCase& k, const Version& ver, uint64_t seed) {
    const int N = k.N, C = k.C, OC = k.OC;
    matmul_set_gelu_fusion(ver.gelu_fusion);
    std::vector<float> inp = uniform_floatX((size_t)N * C, seed + 1, 1.0f);
    std::vector<float> w = uniform_floatX((size_t)OC * C, seed + 2, 2.0f / sqrtf((float)C));
    std::vector<float> b = uniform_floatX(OC, seed + 3, 0.5f);
    std::vector<float> dout = uniform_floatX((size_t)N * OC, seed + 4, 1.0f);
    std::vector<float> pre_in = uniform_floatX((size_t)N * C, seed + 5, 3.0f); // the GELU input before this layer
    std::vector<float> dw0 = uniform_floatX((size_t)OC * C, seed + 6, 1.0f), db0 = uniform_floatX(OC, seed + 7, 1.0f);

    floatX *d_inp = upload_X(inp), *d_w = upload_X(w), *d_b = upload_X(b), *d_dout = upload_X(dout);
    floatX *d_pre_in = upload_X(pre_in), *d_dw = upload_X(dw0), *d_db = upload_X(db0);
    floatX *d_out = dev_alloc<floatX>((size_t)N * OC), *d_pre = dev_alloc<floatX>((size_t)N * OC);
    floatX* d_dinp = dev_alloc<floatX>((size_t)N * C);
    float* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, matmul_backward_scratch_bytes(N, OC)));

    const bool gpu_fused_gelu = !LS_HARNESS && ver.gelu_fusion > 0 && k.gelu;
    const double rel_plain = FLOATX_IS_LOWP ? kFloatXEps / 2 : 1e-5;
    const double rel_gelu = FLOATX_IS_LOWP ? kFloatXEps : (gpu_fused_gelu ? 1e-3 : 1e-5);
    long bad = 0;
    double worst = 0.0;

    // forward
    matmul_forward(d_out, k.gelu ? d_pre : NULL, d_inp, d_w, k.bias ? d_b : NULL, N, C, OC, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> r_out, r_pre;
    ref_forward(r_out, r_pre, inp, w, k.bias ? &b : NULL, N, C, OC, k.gelu);
    bad += compare_shaped("out", download_X<float>(d_out, (size_t)N * OC), r_out, {N, OC}, k.gelu ? rel_gelu : rel_plain,
                          0.0, &worst, ", ");
    if (k.gelu) {
        bad += compare_shaped("pre_gelu", download_X<float>(d_pre, (size_t)N * OC), r_pre, {N, OC}, rel_plain, 0.0, &worst,
                              ", ");
    }

    // backward, twice from the same state: the results must be identical bits
    std::vector<float> got[2][3];
    for (int rep = 0; rep < 2; rep++) {
        copy_to_X(d_dw, dw0);
        copy_to_X(d_db, db0);
        matmul_backward(d_dinp, d_dw, k.bias ? d_db : NULL, d_scratch, d_dout, d_inp, d_w, k.gelu ? d_pre_in : NULL, N,
                        C, OC, 0);
        cudaCheck(cudaDeviceSynchronize());
        got[rep][0] = download_X<float>(d_dinp, (size_t)N * C);
        got[rep][1] = download_X<float>(d_dw, (size_t)OC * C);
        got[rep][2] = download_X<float>(d_db, OC);
    }
    std::vector<double> r_dinp, r_dw, r_db;
    ref_backward(r_dinp, r_dw, r_db, dout, inp, w, k.gelu ? &pre_in : NULL, dw0, db0, N, C, OC);
    bad += compare_shaped("dinp", got[0][0], r_dinp, {N, C}, k.gelu ? rel_gelu : rel_plain, 0.0, &worst, ", ");
    bad += compare_shaped("dweight", got[0][1], r_dw, {OC, C}, rel_plain, 0.0, &worst, ", ");
    if (k.bias) {
        bad += compare_shaped("dbias", got[0][2], r_db, {1, OC}, rel_plain, 0.0, &worst, ", ");
    } else {
        for (int o = 0; o < OC; o++) { // dbias == NULL: the buffer is untouched
            if (got[0][2][o] != db0[o]) {
                if (bad < 10) printf("      dbias[%d] changed although dbias was NULL\n", o);
                bad++;
            }
        }
    }
    if (!same_bits(got[0], got[1])) {
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

// GELU GEMMs cuBLASLt had no algorithm for (the launchers used the separate kernels instead).
static int unfused_gelu_plans() {
    const MatmulState& st = matmul_state();
    int n = 0;
    for (int i = 0; i < st.nplans; i++) n += !st.plans[i].supported && st.plans[i].key.epilogue != GEMM_EPI_NONE;
    return n;
}

// ----------------------------------------------------------------------------
// bench

static floatX* device_random(size_t n, uint64_t seed, float scale) { return upload_X(uniform_floatX(n, seed, scale)); }

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
    // the ceiling: an S x S x S GEMM through the same code path
    const GemmShape sq = gemm_shape(S, S, S, 0, 1);
    const double ceiling = square_gemm_tflops(S, repeats, 11, 12, [&](floatX* d, const floatX* a, const floatX* b) {
        matmul_gemm(d, a, b, sq, GEMM_EPI_NONE, NULL, NULL, 0);
    });
    printf("matmul bench (%s), %s\n", PRECISION_NAME, lab_device().c_str());
    printf("  ceiling: %d x %d x %d GEMM, %.4g TFLOP/s (median of %d)\n", S, S, S, ceiling, repeats);
    printf("  %-8s %6s %6s %6s %-4s %9s %9s %7s %9s %9s %7s\n", "layer", "N", "C_in", "OC", "v", "fwd ms", "TFLOP/s",
           "% ceil", "bwd ms", "TFLOP/s", "% ceil");
    for (const BenchLayer& L : layers) {
        const int Cin = L.cin_mult * C, OC = L.cout_mult ? L.cout_mult * C : Vp;
        floatX *inp = device_random((size_t)N * Cin, 21, 1.0f), *w = device_random((size_t)OC * Cin, 22, 0.05f);
        floatX *b = device_random(OC, 23, 0.1f), *dout = device_random((size_t)N * OC, 24, 1.0f);
        floatX* pre_in = device_random((size_t)N * Cin, 25, 1.0f);
        floatX *out = dev_alloc<floatX>((size_t)N * OC), *pre = dev_alloc<floatX>((size_t)N * OC);
        floatX *dinp = dev_alloc<floatX>((size_t)N * Cin), *dw = dev_alloc<floatX>((size_t)OC * Cin);
        floatX* db = dev_alloc<floatX>(OC);
        cudaCheck(cudaMemset(dw, 0, (size_t)OC * Cin * sizeof(floatX)));
        cudaCheck(cudaMemset(db, 0, (size_t)OC * sizeof(floatX)));
        float* scratch;
        cudaCheck(cudaMalloc(&scratch, matmul_backward_scratch_bytes(N, OC)));
        const double flops = 2.0 * N * (double)Cin * OC;
        for (const Version* v : versions) {
            if (v != versions[0] && !L.gelu_fwd && !L.gelu_bwd) break; // versions differ only on GELU layers
            matmul_set_gelu_fusion(v->gelu_fusion);
            const float fwd = time_ms(repeats, [&] {
                matmul_forward(out, L.gelu_fwd ? pre : NULL, inp, w, L.bias ? b : NULL, N, Cin, OC, 0);
            }, L2_WARM);
            const float bwd = time_ms(repeats, [&] {
                matmul_backward(dinp, dw, L.bias ? db : NULL, scratch, dout, inp, w, L.gelu_bwd ? pre_in : NULL, N, Cin,
                                OC, 0);
            }, L2_WARM);
            const double tf = tflops_of(flops, fwd), tb = tflops_of(2.0 * flops, bwd);
            printf("  %-8s %6d %6d %6d %-4s %9.4f %9.4g %6.1f%% %9.4f %9.4g %6.1f%%\n", L.name, N, Cin, OC,
                   (L.gelu_fwd || L.gelu_bwd) ? v->id : "-", fwd, tf, 100.0 * tf / ceiling, bwd, tb, 100.0 * tb / ceiling);
        }
        floatX* bufs[] = {inp, w, b, dout, pre_in, out, pre, dinp, dw, db};
        for (floatX* p : bufs) cudaCheck(cudaFree(p));
        cudaCheck(cudaFree(scratch));
    }
    // the bias gradient alone (memory-bound: dout read once, after an L2 flush) against the device copy
    const double copy = copy_gbs((size_t)N * 4 * C * sizeof(floatX), repeats);
    printf("  bias gradient (matmul_backward_bias), vs device copy %.0f GB/s (read + write):\n", copy);
    printf("  %-8s %6s %6s %6s %9s %9s %7s\n", "layer", "N", "OC", "splits", "ms", "GB/s", "% copy");
    for (const BenchLayer& L : layers) {
        if (!L.bias) continue;
        const int OC = L.cout_mult * C;
        floatX *dout = device_random((size_t)N * OC, 24, 1.0f), *db = dev_alloc<floatX>(OC);
        cudaCheck(cudaMemset(db, 0, (size_t)OC * sizeof(floatX)));
        float* scratch;
        cudaCheck(cudaMalloc(&scratch, matmul_backward_scratch_bytes(N, OC)));
        const float ms = time_ms(repeats, [&] {
            matmul_backward_bias(db, scratch, dout, N, OC, 0);
        }, L2_FLUSHED);
        const double gbs = gbs_of((double)N * OC * sizeof(floatX), ms);
        printf("  %-8s %6d %6d %6d %9.4f %9.0f %6.1f%%\n", L.name, N, OC, matmul_dbias_splits(N, OC), ms, gbs,
               100.0 * gbs / copy);
        cudaCheck(cudaFree(dout));
        cudaCheck(cudaFree(db));
        cudaCheck(cudaFree(scratch));
    }
    return 0;
}

// ----------------------------------------------------------------------------

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [--seed S] [-q] [--gelu-fallback]\n"
            "          [-n N] [-c C] [--vocab VP] [-s S] [-r REPEATS] [--tf32]   (--bench only)\n"
            "  --check      small shapes against a float64 reference (default)\n"
            "  --bench      GPT-2 layer shapes: time and TFLOP/s against an S^3 GEMM\n"
            "  -v VERSION   1 (unfused GELU), 2 (cuBLASLt GELU epilogues) or all (default)\n"
            "  --seed S     seed of the random inputs, 0..2^62 (default: a fresh one per run, printed)\n"
            "  -q           --check prints failures and the summary only\n"
            "  --gelu-fallback  --check: version 2 must fall back to the separate GELU kernels (a cuBLASLt\n"
            "               without GELU epilogues: LEANSTEP_HARNESS_CUBLASLT_GELU=0 under the harness)\n"
            "  -n N         rows B*T, 1..1048576 (default 8192)\n"
            "  -c C         channels, a multiple of 8 in 8..16384 (default 768)\n"
            "  --vocab VP   padded vocabulary of lm_head, a multiple of 8 in 8..262144 (default 50304)\n"
            "  -s S         size of the square ceiling GEMM, a multiple of 8 in 8..32768 (default 8192)\n"
            "  -r REPEATS   timed repeats, 1..1000 (default 20)\n"
            "  --tf32       FP32 build: let cuBLASLt use TF32 tensor cores\n",
            prog);
    exit(2);
}

int main(int argc, char** argv) {
    bool do_bench = false, tf32 = false, bench_flag = false, gelu_fallback = false;
    const char* version = "all";
    long long N = 8192, C = 768, Vp = 50304, S = 8192, repeats = 20, seed = -1;
    LabArgv args(argc, argv, usage);
    while (args.next()) {
        if (args.mode(&do_bench)) continue;
        if (args.is("-v")) version = args.value();
        else if (args.is("--seed")) seed = args.integer(0, 1LL << 62);
        else if (args.is("--gelu-fallback")) gelu_fallback = true;
        else if (args.is("-n")) { N = args.integer(1, 1 << 20); bench_flag = true; }
        else if (args.is("-c")) { C = args.integer(8, 16384, 8); bench_flag = true; }
        else if (args.is("--vocab")) { Vp = args.integer(8, 262144, 8); bench_flag = true; }
        else if (args.is("-s")) { S = args.integer(8, 32768, 8); bench_flag = true; }
        else if (args.is("-r")) { repeats = args.integer(1, 1000); bench_flag = true; }
        else if (args.is("--tf32")) { tf32 = true; bench_flag = true; }
        else args.reject();
    }
    if (bench_flag && !do_bench) args.fail("-n, -c, --vocab, -s, -r and --tf32 apply to --bench");
    if (tf32 && FLOATX_IS_BF16) args.fail("--tf32 applies to the FP32 build");
    if (gelu_fallback && do_bench) args.fail("--gelu-fallback applies to --check");
    std::vector<const Version*> versions;
    for (const Version& v : kVersions)
        if (strcmp(version, "all") == 0 || strcmp(version, v.id) == 0) versions.push_back(&v);
    if (versions.empty()) args.fail("-v '%s': expected 1, 2 or all", version);

    if (seed < 0) seed = lab_fresh_seed();
    matmul_init(MATMUL_WORKSPACE_DEFAULT);
    if (tf32) matmul_set_tf32(1);
    if (gelu_fallback) matmul_state().fusion_noted = 1; // the fallback's one-line note is expected here
    int rc = 0;
    if (do_bench) {
        rc = bench(versions, (int)N, (int)C, (int)Vp, (int)S, (int)repeats);
    } else {
        if (!g_quiet) printf("matmul --check (%s, %s), seed %lld\n", PRECISION_NAME, lab_where(true).c_str(), seed);
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
        // which path version 2's GELU layers took: the fallback exactly when it is expected (on a GPU
        // without --gelu-fallback either is right)
        if (versions.back()->gelu_fusion > 0 && (gelu_fallback || LS_HARNESS)) {
            total++;
            const int n = unfused_gelu_plans();
            const bool ok = gelu_fallback ? n > 0 : n == 0;
            if (!ok) failed++;
            if (!ok || !g_quiet) {
                printf("  v2: %d GELU GEMM shape(s) without a cuBLASLt algorithm (separate kernels), %s expected  %s\n", n,
                       gelu_fallback ? "some" : "none", ok ? "ok" : "FAIL");
            }
        }
        printf("matmul --check (%s): %d of %d checks passed, %s (seed %lld)\n", PRECISION_NAME, total - failed, total,
               lab_worst_note().c_str(), seed);
        rc = failed ? 1 : 0;
    }
    matmul_free();
    return rc;
}
