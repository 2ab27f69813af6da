/*
 fused_classifier.cu: the fused classifier kernel lab: softmax over the first V of Vp logits,
 cross-entropy loss per row, and dlogits = dloss * (softmax - onehot(target)) written in place
 (0 in the padded columns), against a float64 CPU reference (--check) or timed at GPT-2 124M
 shapes (--bench). Built for both precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  naive: one thread per row, three passes over the row (max, sum, write)
   2  production: llmc/kernels/fused_classifier.cuh (included, not copied): one block per row, 16-byte
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
     bf16 u = 2 (the fp32 value is rounded once; a rounding boundary may flip one bf16 step, and
     twice that step is the margin, lab.h's kLabUlpsLowp).
 Also the float64 gradient against central differences of the float64 loss, and the launcher's
 precondition checks.
 --bench: N = 8192, V = 50257, Vp = 50304, median of -r repeats after an L2 flush; GB/s of the
 traffic of the design (dlogits: the row read twice and written once; losses only: read once)
 against a device-to-device copy.

 usage: fused_classifier [--check | --bench] [-v 1|2|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write a launcher with the production signature, add a kVersions row.
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/fused_classifier.cuh"

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
static const double kUlps = FLOATX_IS_LOWP ? kLabUlpsLowp : 0.0;

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
    LabCheck check("fused_classifier", seed);
    Rng rng{seed};
    check.add(check_reference_gradient(rng));
    check.cases(versions, kCases, check_case);
    check.add(check_preconditions());
    return check.end();
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int N = LS_HARNESS ? 16 : 8192, V = LS_HARNESS ? 1000 : 50257, Vp = LS_HARNESS ? 1024 : 50304;
    const size_t NV = (size_t)N * Vp, row_bytes = NV * sizeof(floatX);
    printf("fused_classifier bench (%s): N = %d, V = %d, Vp = %d, %s\n", PRECISION_NAME, N, V, Vp,
           lab_device().c_str());
    const double copy = copy_gbs(row_bytes, repeats);
    printf("  device-to-device copy: %.1f GB/s\n", copy);
    Rng rng{1};
    std::vector<int> tgt(N);
    for (int& t : tgt) t = (int)(rng.uniform() * V);
    int* d_t = upload_i(tgt);
    std::vector<double> x0 = random_floatX(rng, NV, 0.0, 2.0);
    floatX* x = upload_X(x0);
    float* loss = dev_alloc<float>(N);
    lab_bench_header(14, "the design's traffic");
    for (const Version* v : versions) {
        BenchOp ops[2] = {
            {"losses only", 1.0 * row_bytes, time_ms(repeats, [&] { v->run(x, loss, 1.0f / N, d_t, N, V, Vp, 0, 0); })},
            {"with dlogits", 3.0 * row_bytes, time_ms(repeats, [&] { v->run(x, loss, 1.0f / N, d_t, N, V, Vp, 1, 0); })},
        };
        lab_bench_rows(v->name, ops, copy, 14);
        copy_to_X(x, x0); // the next version starts from logits again
    }
    for (void* p : {(void*)d_t, (void*)x, (void*)loss}) cudaCheck(cudaFree(p));
    return 0;
}

// ----------------------------------------------------------------------------
static void usage(const char* prog) {
    lab_usage(prog, "time at GPT-2 124M shapes (N = 8192, V = 50257, Vp = 50304)", "1 (naive), 2 (production)");
}

int main(int argc, char** argv) { return lab_main(argc, argv, usage, kVersions, run_check, run_bench); }
