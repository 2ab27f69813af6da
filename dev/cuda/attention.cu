/*
 attention.cu: the lab of llmc/kernels/attention.cuh (causal self-attention, forward and backward: this
 file's kernels for the head split/merge and the softmax, GEMMs through llmc/kernels/matmul.cuh) and of
 llmc/kernels/cudnn_att.cuh (the flash path, --attention cudnn: cuDNN on a GPU, its CPU implementation
 under the harness).
 One driver, two modes:
   --check  small shapes (T not a multiple of 8 or of the 8-row block, T = 1, head sizes 16 and
            64) against a float64 reference: qkvr (an exact copy), att, out, dqkv; the forward and
            backward twice (bitwise identical); the reference backward against central
            differences of the reference forward. The flash path on the same inputs: out, the
            LSE stats and dqkv against the same reference, twice (bitwise identical: cuDNN's
            deterministic backward). It runs under the harness in both precisions and on a GPU in
            the BF16 build (cuDNN).
   --bench  B=8, T=1024, NH=12, hs=64 (GPT-2 124M): forward and backward time, each step on its
            own, TFLOP/s of the GEMMs against a square GEMM, GB/s of the kernels against the
            device-to-device copy bandwidth, both measured in the same run; then the flash path's
            forward and backward (deterministic and atomic) times.
 Only the production version is kept: the T x T products are the library's, and the kernels
 around them are single passes over memory.

 Tolerances (per element, against the float64 reference from the same floatX inputs; qkvr is a
 copy and must match exactly):
   FP32: |got - ref| <= 1e-5 * max|ref|. Every intermediate is fp32; expf and the fp32 sums of the
         softmax and of the GEMMs give < 7e-7 of max|ref| here (worst over 400 seeds: 0.07 of it).
   Flash path: out and dqkv as the matmul path's below (on a GPU cuDNN rounds the probabilities to
         bf16 before the value product, as the matmul path does); stats (fp32 in both builds):
         |got - ref| <= 1e-5 * max|ref| (FP32) or 2^-12 * max|ref| (BF16: the GPU's fast exp),
         against errors of a few fp32 ulps of the scores here.
   BF16: att: |got - bf16(ref)| <= 2 ulp + 2^-5 * |ref|. A probability p_j = exp(s_j) / sum
         inherits the errors e_j of the bf16 scores s_j (|e_j| <= 2^-9 |s_j|, |s| <= ~3 here) as
         a relative error e_j - sum_i p_i e_i, at most ~1.2% whatever the size of p_j, plus its
         own rounding (one ulp; two allowed, lab.h's kLabUlpsLowp).
         out, dqkv: |got - bf16(ref)| <= 2 ulp + 2^-5 * max|ref|. On their way the device rounds
         the scores, the probabilities, datt and d(scores) to bf16 (2^-9 relative each) and sums
         T terms of them per output, so errors of a few 2^-9 of the largest values are expected.
         Worst seen over 400 seeds, all tensors: 0.43 of the tolerance.
 Inputs are fresh random numbers on every run (the seed is printed; --seed S reproduces a run).
 usage: see usage() below.
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/attention.cuh"
#include "llmc/kernels/cudnn_att.cuh"

// The flash path runs where it exists: the harness (every precision) and the BF16 GPU build.
#define LAB_FLASH (LS_HARNESS || FLOATX_IS_BF16)

// ----------------------------------------------------------------------------
// float64 reference (the CPU trainer's loops, in double)

// qkv (B,T,3C) -> out (B,T,C), att (B,NH,T,T) zero above the diagonal.
static void ref_forward(std::vector<double>& out, std::vector<double>& att, const std::vector<double>& qkv, int B, int T,
                        int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    out.assign((size_t)B * T * C, 0.0);
    att.assign((size_t)B * NH * T * T, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = &qkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                double* a = &att[(((size_t)b * NH + h) * T + t) * T];
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double* k = &qkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[j] = s * scale;
                    mx = std::max(mx, a[j]);
                }
                for (int j = 0; j <= t; j++) sum += (a[j] = exp(a[j] - mx));
                for (int j = 0; j <= t; j++) a[j] /= sum;
                double* o = &out[((size_t)b * T + t) * C + (size_t)h * hs];
                for (int j = 0; j <= t; j++) {
                    const double* v = &qkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs];
                    for (int i = 0; i < hs; i++) o[i] += a[j] * v[i];
                }
            }
}

// dout (B,T,C) -> dqkv (B,T,3C), given qkv and the forward's att.
static void ref_backward(std::vector<double>& dqkv, const std::vector<double>& dout, const std::vector<double>& qkv,
                         const std::vector<double>& att, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    dqkv.assign((size_t)B * T * 3 * C, 0.0);
    std::vector<double> da(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* a = &att[(((size_t)b * NH + h) * T + t) * T];
                const double* d = &dout[((size_t)b * T + t) * C + (size_t)h * hs];
                double dot = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double* v = &qkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs];
                    double* dv = &dqkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs];
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) {
                        s += d[i] * v[i];
                        dv[i] += a[j] * d[i];
                    }
                    da[j] = s;
                    dot += a[j] * s;
                }
                const double* q = &qkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                double* dq = &dqkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                for (int j = 0; j <= t; j++) {
                    double g = a[j] * (da[j] - dot) * scale;
                    const double* k = &qkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    double* dk = &dqkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    for (int i = 0; i < hs; i++) {
                        dq[i] += g * k[i];
                        dk[i] += g * q[i];
                    }
                }
            }
}

#if LAB_FLASH
// lse (B,NH,T): log sum_j<=t exp(q_t . k_j / sqrt(hs)), the flash path's stats.
static void ref_lse(std::vector<double>& lse, const std::vector<double>& qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    lse.assign((size_t)B * NH * T, 0.0);
    std::vector<double> s(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double* q = &qkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs];
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double* k = &qkv[((size_t)b * T + j) * 3 * C + C + (size_t)h * hs];
                    s[j] = 0.0;
                    for (int i = 0; i < hs; i++) s[j] += q[i] * k[i];
                    s[j] *= scale;
                    mx = std::max(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
}
#endif

// The reference backward against central differences of L = sum(dout * out) on a tiny shape.
static bool ref_selfcheck(void) {
    const int B = 1, T = 5, C = 8, NH = 2;
    std::vector<float> qf = uniform_floatX((size_t)B * T * 3 * C, 501, 1.5f), gf = uniform_floatX((size_t)B * T * C, 502, 1.0f);
    std::vector<double> qkv(qf.begin(), qf.end()), g(gf.begin(), gf.end()), out, att, dqkv;
    ref_forward(out, att, qkv, B, T, C, NH);
    ref_backward(dqkv, g, qkv, att, B, T, C, NH);
    auto loss = [&]() {
        std::vector<double> o, a;
        ref_forward(o, a, qkv, B, T, C, NH);
        double L = 0.0;
        for (size_t i = 0; i < o.size(); i++) L += g[i] * o[i];
        return L;
    };
    const double h = 1e-6;
    double worst = 0.0;
    for (size_t i = 0; i < qkv.size(); i++) {
        double keep = qkv[i];
        qkv[i] = keep + h;
        double lp = loss();
        qkv[i] = keep - h;
        double lm = loss();
        qkv[i] = keep;
        worst = std::max(worst, fabs((lp - lm) / (2 * h) - dqkv[i]) / (1e-6 + fabs(dqkv[i])));
    }
    bool ok = worst < 1e-5;
    if (!g_quiet || !ok) {
        printf("  reference vs central differences (h = 1e-6): worst relative error %.2e %s\n", worst, ok ? "ok" : "FAIL");
    }
    return ok;
}

// ----------------------------------------------------------------------------
// check

struct CheckCase {
    int B, T, C, NH;
    const char* note;
};
static const CheckCase kChecks[] = {
    {2, 32, 64, 4, "hs 16, T a multiple of 8 (128-bit rows)"},
    {1, 37, 48, 3, "T = 37: scalar rows, T not a multiple of the 8-row block"},
    {2, 64, 128, 2, "hs 64"},
    {3, 20, 96, 6, "B = 3, T = 20"},
    {1, 1, 32, 2, "T = 1"},
};

struct Bufs {
    floatX *qkv, *out, *qkvr, *att, *dout, *dqkv, *dqkvr, *datt, *scratch;
};

// The buffers of one shape, qkv (B,T,3C) and dout (B,T,C) uploaded from the host.
static Bufs bufs_alloc(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int C, int NH) {
    const size_t BTC = (size_t)B * T * C, att_n = (size_t)B * NH * T * T;
    Bufs d;
    d.qkv = upload_X(qkv);
    d.dout = upload_X(dout);
    d.out = dev_alloc<floatX>(BTC);
    d.qkvr = dev_alloc<floatX>(3 * BTC);
    d.att = dev_alloc<floatX>(att_n);
    d.dqkv = dev_alloc<floatX>(3 * BTC);
    d.dqkvr = dev_alloc<floatX>(3 * BTC);
    d.datt = dev_alloc<floatX>(att_n);
    const size_t sb = attention_backward_scratch_bytes(B, T, C, NH);
    d.scratch = NULL;
    if (sb > 0) cudaCheck(cudaMalloc(&d.scratch, sb));
    return d;
}

static void bufs_free(Bufs& d) {
    floatX* bufs[] = {d.qkv, d.out, d.qkvr, d.att, d.dout, d.dqkv, d.dqkvr, d.datt};
    for (floatX* p : bufs) cudaCheck(cudaFree(p));
    if (d.scratch) cudaCheck(cudaFree(d.scratch));
}

static bool check_case(const CheckCase& k, uint64_t seed) {
    const int B = k.B, T = k.T, C = k.C, NH = k.NH, hs = C / NH;
    const size_t BTC = (size_t)B * T * C, att_n = (size_t)B * NH * T * T;
    std::vector<float> qkv = uniform_floatX(3 * BTC, seed + 1, 1.5f), dout = uniform_floatX(BTC, seed + 2, 1.0f);
    Bufs d = bufs_alloc(qkv, dout, B, T, C, NH);

    std::vector<float> got[2][4]; // qkvr, att, out, dqkv of two runs
    for (int rep = 0; rep < 2; rep++) {
        attention_forward(d.out, d.qkvr, d.att, d.qkv, B, T, C, NH, 0);
        attention_backward(d.dqkv, d.dqkvr, d.datt, d.scratch, d.dout, d.qkvr, d.att, B, T, C, NH, 0);
        cudaCheck(cudaDeviceSynchronize());
        got[rep][0] = download_X<float>(d.qkvr, 3 * BTC);
        got[rep][1] = download_X<float>(d.att, att_n);
        got[rep][2] = download_X<float>(d.out, BTC);
        got[rep][3] = download_X<float>(d.dqkv, 3 * BTC);
    }

    std::vector<double> qkv64(qkv.begin(), qkv.end()), dout64(dout.begin(), dout.end()), r_out, r_att, r_dqkv;
    ref_forward(r_out, r_att, qkv64, B, T, C, NH);
    ref_backward(r_dqkv, dout64, qkv64, r_att, B, T, C, NH);
    std::vector<double> r_qkvr(3 * BTC); // the head split is a copy: compared exactly
    for (int c = 0; c < 3; c++)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++)
                    for (int i = 0; i < hs; i++)
                        r_qkvr[((((size_t)c * B + b) * NH + h) * T + t) * hs + i] =
                            qkv[((size_t)b * T + t) * 3 * C + (size_t)c * C + (size_t)h * hs + i];

    // tolerances: see the banner
    const double rel_out = FLOATX_IS_LOWP ? 4 * kFloatXEps : 1e-5;
    const double rel_att_max = FLOATX_IS_LOWP ? 0.0 : 1e-5, rel_att = FLOATX_IS_LOWP ? 4 * kFloatXEps : 0.0;
    long bad = 0;
    double worst = 0.0, worst_copy = 0.0;
    bad += compare_shaped("qkvr", got[0][0], r_qkvr, {3, B, NH, T, hs}, 0.0, 0.0, &worst_copy);
    bad += compare_shaped("att", got[0][1], r_att, {B, NH, T, T}, rel_att_max, rel_att, &worst);
    bad += compare_shaped("out", got[0][2], r_out, {B, T, C}, rel_out, 0.0, &worst);
    bad += compare_shaped("dqkv", got[0][3], r_dqkv, {B, T, 3 * C}, rel_out, 0.0, &worst);
    if (!same_bits(got[0], got[1])) {
        printf("      not deterministic: two runs differ\n");
        bad++;
    }
    if (!g_quiet || bad) {
        printf("  B=%d T=%3d C=%3d NH=%d hs=%2d  worst err/tol %.3f  %s  (%s)\n", B, T, C, NH, hs, worst,
               bad ? "FAIL" : "ok", k.note);
    }
#if LAB_FLASH
    // the flash path (llmc/kernels/cudnn_att.cuh) on the same inputs: out, stats, dqkv
    {
        const size_t nstats = (size_t)B * NH * T;
        const size_t ws = attention_cudnn_scratch_bytes(B, T, NH, C, 1);
        floatX *out = dev_alloc<floatX>(BTC), *dqkv = dev_alloc<floatX>(3 * BTC);
        float* stats = dev_alloc<float>(nstats);
        void* scratch = NULL;
        cudaCheck(cudaMalloc(&scratch, ws));
        std::vector<float> fgot[2][2];
        std::vector<double> fstats[2];
        for (int rep = 0; rep < 2; rep++) {
            attention_forward_cudnn(out, stats, d.qkv, B, T, NH, C, scratch, ws, 0);
            attention_backward_cudnn(dqkv, d.dout, d.qkv, out, stats, B, T, NH, C, 1, scratch, ws, 0);
            cudaCheck(cudaDeviceSynchronize());
            fgot[rep][0] = download_X<float>(out, BTC);
            fgot[rep][1] = download_X<float>(dqkv, 3 * BTC);
            fstats[rep] = download_f(stats, nstats);
        }
        std::vector<double> r_lse;
        ref_lse(r_lse, qkv64, B, T, C, NH);
        long fbad = 0;
        double fworst = 0.0;
        fbad += compare_shaped("flash out", fgot[0][0], r_out, {B, T, C}, rel_out, 0.0, &fworst);
        fbad += compare_shaped("flash dqkv", fgot[0][1], r_dqkv, {B, T, 3 * C}, rel_out, 0.0, &fworst);
        fbad += compare("flash stats", fstats[0], r_lse, FLOATX_IS_LOWP ? 0x1.0p-12 : 1e-5, 0.0, &fworst);
        if (!same_bits(fgot[0], fgot[1]) || fstats[0] != fstats[1]) {
            printf("      flash path not deterministic: two runs differ\n");
            fbad++;
        }
        if (!g_quiet || fbad) {
            printf("  B=%d T=%3d C=%3d NH=%d hs=%2d  worst err/tol %.3f  %s  (flash path, %s)\n", B, T, C, NH, hs,
                   fworst, fbad ? "FAIL" : "ok", LS_HARNESS ? "CPU implementation" : "cuDNN");
        }
        cudaCheck(cudaFree(out));
        cudaCheck(cudaFree(dqkv));
        cudaCheck(cudaFree(stats));
        cudaCheck(cudaFree(scratch));
        bad += fbad;
    }
#endif
    bufs_free(d);
    return bad == 0;
}

// ----------------------------------------------------------------------------
// bench

static int bench(int B, int T, int C, int NH, int S, int repeats) {
    const int hs = C / NH, BNH = B * NH, rows = BNH * T;
    const size_t BTC = (size_t)B * T * C, att_n = (size_t)BNH * T * T;
    Bufs d = bufs_alloc(uniform_floatX(3 * BTC, 1, 1.5f), uniform_floatX(BTC, 2, 1.0f), B, T, C, NH);

    // ceilings: an S^3 GEMM, and a device-to-device copy as large as att
    const GemmShape sq = gemm_shape(S, S, S, 0, 1);
    const double ceil_tf = square_gemm_tflops(S, repeats, 3, 4, [&](floatX* dd, const floatX* a, const floatX* b) {
        matmul_gemm(dd, a, b, sq, GEMM_EPI_NONE, NULL, NULL, 0);
    });
    const double copy = copy_gbs(d.datt, d.att, att_n * sizeof(floatX), repeats, L2_WARM);

    printf("attention bench (%s): B=%d T=%d C=%d NH=%d hs=%d, %s\n", PRECISION_NAME, B, T, C, NH, hs,
           lab_device().c_str());
    printf("  ceilings: %d^3 GEMM %.4g TFLOP/s, device copy %.4g GB/s (median of %d)\n", S, ceil_tf, copy, repeats);
    const double gemm_flops = 2.0 * BNH * (double)T * T * hs; // one T x T x hs product, full square
    const double xs = sizeof(floatX);
    auto warm_ms = [&](auto body) { return time_ms(repeats, body, L2_WARM); }; // as the library will run them
    float fwd = warm_ms([&] { attention_forward(d.out, d.qkvr, d.att, d.qkv, B, T, C, NH, 0); });
    float bwd = warm_ms([&] {
        attention_backward(d.dqkv, d.dqkvr, d.datt, d.scratch, d.dout, d.qkvr, d.att, B, T, C, NH, 0);
    });
    printf("  forward  %9.4f ms  (%.4g TFLOP/s of GEMM work, %.1f%% of the ceiling)\n", fwd,
           tflops_of(2 * gemm_flops, fwd), 100.0 * tflops_of(2 * gemm_flops, fwd) / ceil_tf);
    printf("  backward %9.4f ms  (%.4g TFLOP/s of GEMM work, %.1f%% of the ceiling)\n", bwd,
           tflops_of(4 * gemm_flops, bwd), 100.0 * tflops_of(4 * gemm_flops, bwd) / ceil_tf);
#if LAB_FLASH
    {   // the flash path (llmc/kernels/cudnn_att.cuh): the causal half of the same products, no T x T buffers
        const size_t ws = attention_cudnn_scratch_bytes(B, T, NH, C, 1);
        float* stats = dev_alloc<float>((size_t)BNH * T);
        void* scratch = NULL;
        cudaCheck(cudaMalloc(&scratch, ws));
        const float ffwd = warm_ms([&] { attention_forward_cudnn(d.out, stats, d.qkv, B, T, NH, C, scratch, ws, 0); });
        for (int det = 1; det >= 0; det--) {
            const float fbwd = warm_ms([&] {
                attention_backward_cudnn(d.dqkv, d.dout, d.qkv, d.out, stats, B, T, NH, C, det, scratch, ws, 0);
            });
            printf("  flash (%s, %s backward): forward %.4f ms, backward %.4f ms, together %.4f ms\n",
                   LS_HARNESS ? "CPU implementation" : "cuDNN", det ? "deterministic" : "atomic", ffwd, fbwd,
                   ffwd + fbwd);
        }
        cudaCheck(cudaFree(stats));
        cudaCheck(cudaFree(scratch));
    }
#endif

    // the steps one by one (the same calls the launchers make)
    struct Step {
        const char* name;
        double flops, bytes; // one of them is the measure
        float ms;
    };
    const floatX *q = d.qkvr, *k = d.qkvr + BTC, *v = d.qkvr + 2 * BTC;
    floatX *dq = d.dqkvr, *dk = d.dqkvr + BTC, *dv = d.dqkvr + 2 * BTC;
    const float scale = 1.0f / sqrtf((float)hs);
    // softmax traffic: the causal part read (about half the row; twice in the backward: att and datt)
    // and the whole row written
    const double tri = (double)BNH * T * (T + 1) / 2.0;
    std::vector<Step> steps = {
        {"fwd split heads", 0, 2.0 * 3 * BTC * xs,
         warm_ms([&] { attention_split_heads(d.qkvr, d.qkv, B, T, 3, NH, hs, 0); })},
        {"fwd scores GEMM", gemm_flops, 0, warm_ms([&] {
             matmul_gemm(d.att, q, k, attention_head_gemm(T, T, hs, 0, 1, BNH, scale), GEMM_EPI_NONE, NULL, NULL, 0);
         })},
        {"fwd softmax", 0, (tri + att_n) * xs, warm_ms([&] { attention_softmax_forward(d.att, rows, T, 0); })},
        {"bwd split heads", 0, 2.0 * BTC * xs,
         warm_ms([&] { attention_split_heads(dq, d.dout, B, T, 1, NH, hs, 0); })},
        {"bwd datt GEMM", gemm_flops, 0, warm_ms([&] {
             matmul_gemm(d.datt, dq, v, attention_head_gemm(T, T, hs, 0, 1, BNH, 1.0f), GEMM_EPI_NONE, NULL, NULL, 0);
         })},
        {"bwd dv GEMM", gemm_flops, 0, warm_ms([&] {
             matmul_gemm(dv, d.att, dq, attention_head_gemm(T, hs, T, 1, 0, BNH, 1.0f), GEMM_EPI_NONE, NULL, NULL, 0);
         })},
        {"bwd softmax", 0, (2 * tri + att_n) * xs,
         warm_ms([&] { attention_softmax_backward(d.datt, d.att, rows, T, 0); })},
        {"bwd dk GEMM", gemm_flops, 0, warm_ms([&] {
             matmul_gemm(dk, d.datt, q, attention_head_gemm(T, hs, T, 1, 0, BNH, scale), GEMM_EPI_NONE, NULL, NULL, 0);
         })},
        {"bwd dq GEMM", gemm_flops, 0, warm_ms([&] {
             matmul_gemm(dq, d.datt, k, attention_head_gemm(T, hs, T, 0, 0, BNH, scale), GEMM_EPI_NONE, NULL, NULL, 0);
         })},
        {"bwd merge heads", 0, 2.0 * 3 * BTC * xs,
         warm_ms([&] { attention_merge_heads(d.dqkv, d.dqkvr, B, T, 3, NH, hs, 0); })},
    };
    printf("  %-16s %9s %12s %9s\n", "step", "ms", "rate", "% ceil");
    for (const Step& s : steps) {
        if (s.flops > 0) {
            const double tf = tflops_of(s.flops, s.ms);
            printf("  %-16s %9.4f %7.4g TF/s %8.1f%%\n", s.name, s.ms, tf, 100.0 * tf / ceil_tf);
        } else {
            const double gbs = gbs_of(s.bytes, s.ms);
            printf("  %-16s %9.4f %7.4g GB/s %8.1f%%\n", s.name, s.ms, gbs, 100.0 * gbs / copy);
        }
    }
    bufs_free(d);
    return 0;
}

// ----------------------------------------------------------------------------

static void usage(const char* prog) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [--seed S] [-q] [-b B] [-t T] [-c C] [--nh NH] [-s S] [-r REPEATS]\n"
            "  --check      small shapes against a float64 reference (default)\n"
            "  --bench      time forward, backward and each step (B=8 T=1024 C=768 NH=12 by default)\n"
            "  --seed S     seed of the random inputs for --check, 0..2^62 (default: a fresh one per run, printed)\n"
            "  -q           --check prints failures and the summary only\n"
            "  -b B         --bench batch, 1..1024\n"
            "  -t T         --bench sequence length, 1..65536\n"
            "  -c C         --bench channels, 8..16384 (C/NH a multiple of 8)\n"
            "  --nh NH      --bench heads, 1..1024\n"
            "  -s S         --bench size of the square ceiling GEMM, a multiple of 8 in 8..32768 (default 8192)\n"
            "  -r REPEATS   --bench timed repeats, 1..1000 (default 20)\n",
            prog);
    exit(2);
}

int main(int argc, char** argv) {
    bool do_bench = false, bench_flag = false;
    long long B = 8, T = 1024, C = 768, NH = 12, S = 8192, repeats = 20, seed = -1;
    LabArgv args(argc, argv, usage);
    while (args.next()) {
        if (args.mode(&do_bench)) continue;
        if (args.is("--seed")) seed = args.integer(0, 1LL << 62);
        else if (args.is("-b")) { B = args.integer(1, 1024); bench_flag = true; }
        else if (args.is("-t")) { T = args.integer(1, 65536); bench_flag = true; }
        else if (args.is("-c")) { C = args.integer(8, 16384); bench_flag = true; }
        else if (args.is("--nh")) { NH = args.integer(1, 1024); bench_flag = true; }
        else if (args.is("-s")) { S = args.integer(8, 32768); bench_flag = true; }
        else if (args.is("-r")) { repeats = args.integer(1, 1000); bench_flag = true; }
        else args.reject();
    }
    if (bench_flag && !do_bench) args.fail("-b, -t, -c, --nh, -s and -r apply to --bench");
    if (C % NH != 0 || (C / NH) % 8 != 0) args.fail("-c %lld / --nh %lld: C must be NH times a multiple of 8", C, NH);
    if (S % 8 != 0) args.fail("-s %lld: a multiple of 8 expected", S);

    if (seed < 0) seed = lab_fresh_seed();
    matmul_init(MATMUL_WORKSPACE_DEFAULT);
    int rc = 0;
    if (do_bench) {
        rc = bench((int)B, (int)T, (int)C, (int)NH, (int)S, (int)repeats);
    } else {
        if (!g_quiet) printf("attention --check (%s, %s), seed %lld\n", PRECISION_NAME, lab_where(true).c_str(), seed);
        int failed = 0, total = 1;
        if (!ref_selfcheck()) failed++;
        uint64_t case_seed = mix64((uint64_t)seed);
        for (const CheckCase& k : kChecks) {
            case_seed += 10;
            total++;
            if (!check_case(k, case_seed)) failed++;
        }
        printf("attention --check (%s): %d of %d checks passed, %s (seed %lld)\n", PRECISION_NAME, total - failed, total,
               lab_worst_note().c_str(), seed);
        rc = failed ? 1 : 0;
    }
    attention_cudnn_free();
    matmul_free();
    return rc;
}
