/*
 layernorm.cu: the LayerNorm kernel lab. Forward, forward fused with the residual add, and
 backward, against a float64 CPU reference (--check) or timed at GPT-2 124M shapes (--bench).
 Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  naive: one thread per row, scalar loads, fp32 two-pass statistics; backward: one thread per
      row for dinp, then one thread per channel for dweight/dbias (rows in order, like the CPU)
   2  production: llmc/kernels/layernorm.cuh (included, not copied): warp per row, 16-byte vectors, the row
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
   bf16 build: u = 2 for bf16 outputs: the device rounds an fp32 value that differs from the
              float64 one by ~1e-6 relative, so near a rounding boundary the two roundings can land
              on neighbouring bf16 values (1 ulp = 2^-7 relative at most, i.e. the ~1e-2 scale);
              twice that step is the margin (lab.h's kLabUlpsLowp); mean, rstd stay fp32 (u = 0).
   dweight, dbias of version 1 (sequential fp32 sums over N rows): 1e-4 instead of 1e-5 (kVersions).
 Also: the float64 backward against central finite differences of the float64 forward, bitwise
 repeatability of the backward pass (production), and the launchers' precondition checks (a bad C,
 a misaligned pointer must end the program with an error).
 --bench: N = 8192, C = 768 (on the CPU harness: small shapes, host times), median of -r repeats,
 each after an L2 flush, GB/s of the minimum traffic and its share of a device-to-device copy.

 usage: layernorm [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write its three launchers with the production signatures, add a kVersions row.
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/layernorm.cuh"

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
static const double kUlps = FLOATX_IS_LOWP ? kLabUlpsLowp : 0.0; // for floatX outputs

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
    LabCheck check("layernorm", seed);
    Rng rng{seed};
    check.add(check_reference_gradient(rng));
    check.cases(versions, kCases, check_case);
    check.add(check_preconditions());
    return check.end();
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int N = LS_HARNESS ? 256 : 8 * 1024, C = LS_HARNESS ? 96 : 768;
    const size_t NC = (size_t)N * C, row_bytes = NC * sizeof(floatX);
    printf("layernorm bench (%s): N = %d, C = %d, %s\n", PRECISION_NAME, N, C, lab_device().c_str());
    const double copy = copy_gbs(row_bytes * 2, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    floatX *inp1 = upload_X(random_floatX(rng, NC, 0.0, 1.0)), *inp2 = upload_X(random_floatX(rng, NC, 0.0, 1.0));
    floatX *w = upload_X(random_floatX(rng, C, 1.0, 0.1)), *b = upload_X(random_floatX(rng, C, 0.0, 0.1));
    floatX *out = dev_alloc<floatX>(NC), *res = dev_alloc<floatX>(NC), *dinp = upload_X(std::vector<double>(NC, 0.0));
    floatX *dw = upload_X(std::vector<double>(C, 0.0)), *db = upload_X(std::vector<double>(C, 0.0));
    float *mean = dev_alloc<float>(N), *rstd = dev_alloc<float>(N);
    layernorm_forward(out, mean, rstd, inp1, w, b, N, C, 0); // statistics for the backward pass
    lab_bench_header(10, "the minimum traffic");
    for (const Version* v : versions) {
        float* scratch = dev_alloc<float>(v->scratch_bytes(N, C) / sizeof(float));
        BenchOp ops[3] = {
            {"forward", 2.0 * row_bytes, time_ms(repeats, [&] { v->forward(out, mean, rstd, inp1, w, b, N, C, 0); })},
            {"fused", 4.0 * row_bytes, time_ms(repeats, [&] { v->fused(res, out, mean, rstd, inp1, inp2, w, b, N, C, 0); })},
            {"backward", 4.0 * row_bytes,
             time_ms(repeats, [&] { v->backward(dinp, dw, db, scratch, out, inp1, w, mean, rstd, N, C, 0); })},
        };
        lab_bench_rows(v->name, ops, copy, 10);
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
    lab_usage(prog, "time at GPT-2 124M shapes (N = 8192, C = 768)", "1 (naive), 2 (production)");
}

int main(int argc, char** argv) { return lab_main(argc, argv, usage, kVersions, run_check, run_bench); }
