/*
 muon.cu: the lab of Muon on the GPU (llmc/optim/muon.cuh; the algorithm and the CPU update in
 llmc/optim/muon.h). The production code only: its orthogonalization (muon_orthogonalize_gpu: the
 fixed-order norms and five Newton-Schulz steps of strided-batched GEMMs through
 llmc/kernels/matmul.cuh's matmul_gemm_batched) and its whole step (muon_step_gpu, what
 optim_step_gpu runs for Muon; calling it alone keeps the other optimizers' kernels out of this
 build). Two modes:

   --check  (1) batches of tall, wide and square random matrices with singular values spread over
            [0.05, 1] x the largest (U diag(s) V^T in floatX), orthogonalized on the device, against
            float64 loops on the same floatX inputs (normalize, the quintic five times):
              FP32 |x - ref| <= 2e-5 max|ref|: fp32 GEMMs over K <= 100 err by ~sqrt(K) 2^-24
                relative per product, and each step multiplies an input error by at most
                |p'(s)| <= a = 3.4445 for the small singular values (p(s) = a s + b s^3 + c s^5),
                so five steps could grow it ~500-fold; measured: 2.1e-6 at worst over 100 cases.
              BF16 |x - ref| <= 0.15 max|ref|: each step rounds X, A and B' to bf16 (2^-9 relative
                each), amplified as above where the singular values are small (0.05 of the
                largest here): measured 5.8e-2 at worst over 180 cases (1.5e-2 typical); the
                output's singular values still land in the quintic's band (~[0.7, 1.2]), which
                is what Muon needs (dev/reference/optim_ref.py checks the band on the CPU's).
            (2) a whole Muon step through muon_step_gpu (matrix runs of two shapes and AdamW
            vectors, fp32, bf16, int8 or 4-bit state) against optim_step_cpu on the same inputs for 4 steps, the
            CPU's products a float64-accumulated loop here: the state block bit for bit (it depends on
            the gradients only: momentum, AdamW's moments, the same rounding bits); FP32 parameters within
            1e-6 |p| + 1e-4 lr t (the orthogonalized update differs by ~1e-5 relative, scaled by
            lr s with s <= 2); BF16 (bf16 parameters with master weights, bf16 products) within
            1e-6 |p| + 0.05 lr t s (the bf16 Newton-Schulz error above, per step).
   --bench  GPT-2 124M's matrix runs (qkv 36 x 768x768, attention projection 12 x 768x768, fc
            12 x 3072x768, projection 12 x 768x3072): ms per orthogonalization of the whole run
            (in the production's pieces), TFLOP/s, and % of the square-GEMM ceiling measured in
            the same run. Newton-Schulz is 3 GEMMs per step: 2 k^2 K + 2 k^3 + 2 k^2 K FLOPs per
            matrix per step (k = min, K = max of its sides).
 usage: muon [--check | --bench] [--seed S] [-r REPEATS] [-q]
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/matmul.cuh"
#include "llmc/optim/engine.cuh"

// ----------------------------------------------------------------------------
// float64 reference

// Newton-Schulz of one (r x c) matrix, row-major, in place.
static void ref_newton_schulz(std::vector<double>& u, int r, int c) {
    const bool tall = r > c;
    const int k = tall ? c : r, K = tall ? r : c;
    double ss = 0.0;
    for (double v : u) ss += v * v;
    const double inv = 1.0 / (sqrt(ss) + (double)MUON_NS_EPS);
    std::vector<double> x((size_t)k * K), y((size_t)k * K), A((size_t)k * k), B((size_t)k * k);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) x[tall ? (size_t)j * r + i : (size_t)i * c + j] = u[(size_t)i * c + j] * inv;
    const double a = MUON_NS_A, b = MUON_NS_B, cc = MUON_NS_C;
    for (int it = 0; it < MUON_NS_STEPS; it++) {
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                double s = 0.0;
                for (int t = 0; t < K; t++) s += x[(size_t)i * K + t] * x[(size_t)j * K + t];
                A[(size_t)i * k + j] = s;
            }
        for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
                double s = 0.0;
                for (int t = 0; t < k; t++) s += A[(size_t)i * k + t] * A[(size_t)t * k + j];
                B[(size_t)i * k + j] = b * A[(size_t)i * k + j] + cc * s;
            }
        for (int i = 0; i < k; i++)
            for (int j = 0; j < K; j++) {
                double s = 0.0;
                for (int t = 0; t < k; t++) s += B[(size_t)i * k + t] * x[(size_t)t * K + j];
                y[(size_t)i * K + j] = a * x[(size_t)i * K + j] + s;
            }
        x.swap(y);
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) u[(size_t)i * c + j] = x[tall ? (size_t)j * r + i : (size_t)i * c + j];
}

// The CPU twin's products (OptimGemm): float64 accumulation.
static void ref_gemm(int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                     float beta, float* C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int t = 0; t < K; t++) {
                s += (double)(ta ? A[(size_t)t * lda + i] : A[(size_t)i * lda + t]) *
                     (double)(tb ? B[(size_t)j * ldb + t] : B[(size_t)t * ldb + j]);
            }
            C[(size_t)i * ldc + j] = (float)(alpha * s + (beta != 0.0f ? (double)beta * C[(size_t)i * ldc + j] : 0.0));
        }
}

// A random (r x c) matrix with singular values log-spread over [0.05, 1].
static std::vector<double> spread_matrix(Rng& rng, int r, int c) {
    const int k = r < c ? r : c;
    auto orth = [&](int n) {  // n x k with orthonormal columns (Gram-Schmidt)
        std::vector<double> q((size_t)n * k);
        for (double& v : q) v = rng.normal();
        for (int j = 0; j < k; j++) {
            for (int p = 0; p < j; p++) {
                double d = 0.0;
                for (int i = 0; i < n; i++) d += q[(size_t)i * k + j] * q[(size_t)i * k + p];
                for (int i = 0; i < n; i++) q[(size_t)i * k + j] -= d * q[(size_t)i * k + p];
            }
            double nn = 0.0;
            for (int i = 0; i < n; i++) nn += q[(size_t)i * k + j] * q[(size_t)i * k + j];
            for (int i = 0; i < n; i++) q[(size_t)i * k + j] /= sqrt(nn);
        }
        return q;
    };
    const std::vector<double> U = orth(r), V = orth(c);
    std::vector<double> m((size_t)r * c, 0.0);
    for (int j = 0; j < k; j++) {
        const double s = exp(log(0.05) * rng.uniform());
        for (int i = 0; i < r; i++)
            for (int t = 0; t < c; t++) m[(size_t)i * c + t] += U[(size_t)i * k + j] * s * V[(size_t)t * k + j];
    }
    return m;
}

// ----------------------------------------------------------------------------
// checks

// A state that only carries the batched multiply (the orthogonalization needs nothing else).
static OptimState gemm_state() {
    OptimState st;
    memset(&st, 0, sizeof st);
    st.gemm_batched = matmul_gemm_batched;
    st.gemm_elem = (int)sizeof(floatX);
    return st;
}

static bool check_orthogonalize(int r, int c, int batch, uint64_t seed) {
    Rng rng{seed};
    const size_t per = (size_t)r * c, k = (size_t)(r < c ? r : c);
    std::vector<double> in;
    for (int b = 0; b < batch; b++) {
        std::vector<double> m = spread_matrix(rng, r, c);
        for (double v : m) in.push_back(as_floatX(v));  // the device's inputs, exactly
    }
    floatX* x = upload_X(in);
    floatX* y = dev_alloc<floatX>(per * batch);
    floatX* A = dev_alloc<floatX>(k * k * batch);
    floatX* B = dev_alloc<floatX>(k * k * batch);
    float* partials = dev_alloc<float>((size_t)batch * MUON_NORM_CHUNKS);
    const OptimState st = gemm_state();
    MuonRun run;
    memset(&run, 0, sizeof run);
    run.matrix = 1;
    run.rows = (size_t)r;
    run.cols = (size_t)c;
    run.batch = batch;
    muon_orthogonalize_gpu<floatX>(&st, &run, x, y, A, B, partials, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<double> got = download_X(x, per * batch);
    std::vector<double> ref(in);
    double worst = 0.0, top = 0.0;
    for (int b = 0; b < batch; b++) {
        std::vector<double> one(ref.begin() + (long)(b * per), ref.begin() + (long)((b + 1) * per));
        ref_newton_schulz(one, r, c);
        std::copy(one.begin(), one.end(), ref.begin() + (long)(b * per));
    }
    for (size_t i = 0; i < ref.size(); i++) top = fmax(top, fabs(ref[i]));
    for (size_t i = 0; i < ref.size(); i++) worst = fmax(worst, fabs(got[i] - ref[i]));
    const double tol = FLOATX_IS_LOWP ? 0.15 : 2e-5;
    const bool ok = worst <= tol * top;
    lab_note_worst(worst / (tol * top));
    if (!ok || !g_quiet) {
        printf("  newton-schulz %4d x %-4d batch %2d: max|x - ref| = %.2e of max|ref| (tolerance %.0e)  %s\n", r, c,
               batch, worst / top, tol, ok ? "ok" : "FAIL");
    }
    for (void* p : {(void*)x, (void*)y, (void*)A, (void*)B, (void*)partials}) cudaCheck(cudaFree(p));
    return ok;
}

// A Muon step through muon_step_gpu against optim_step_cpu: two matrix tensors of 3 layers each
// (a wide 16 x 48 and a tall 128 x 48), AdamW vectors between them.
static bool check_step(OptimStatePrecision prec, uint64_t seed) {
    std::vector<OptimSegment> segs;
    size_t n = 0;
    auto add = [&](size_t count, size_t rows, size_t cols, float wd) {
        OptimSegment s = optim_segment(n, count, wd, 1.0f, (int)segs.size());
        s.mat_rows = rows;
        s.mat_cols = cols;
        s.mat_parts = 1;
        segs.push_back(s);
        n += count;
    };
    add(40, 0, 0, 0.0f);
    for (int l = 0; l < 3; l++) add(16 * 48, 16, 48, 0.1f);
    add(48, 0, 0, 0.0f);
    add(5000, 0, 0, 0.1f);  // (over the int8 size threshold: quantized AdamW state)
    add(4500, 0, 0, 0.0f);  // (a second: 4-bit v packed after the first's whole blocks)
    for (int l = 0; l < 3; l++) add(128 * 48, 128, 48, 0.1f);  // (quantized momentum, a block straddling rows)
    add(32, 0, 0, 0.0f);
    OptimConfig cfg = optim_config_default(OPT_MUON);
    cfg.state = prec;
    cfg.seed = seed;
    const float lr = 0.02f;
    const int steps = 4;
    Rng rng{seed};
    std::vector<float> p(n), g(n);
    for (float& v : p) v = (float)as_floatX(0.1 * rng.normal());  // bf16 build: what the device holds
    OptimState cpu, dev;
    optim_state_init(&cpu, &cfg, segs.data(), (int)segs.size(), n, NULL);
    cpu.gemm = ref_gemm;
    optim_state_init_device(&dev, &cfg, segs.data(), (int)segs.size(), n);
    size_t elems, floats;
    muon_device_work(segs.data(), (int)segs.size(), 0, &elems, &floats);
    dev.work = (float*)dev_alloc<uint8_t>(elems * sizeof(floatX) + floats * sizeof(float));
    dev.gemm_batched = matmul_gemm_batched;
    dev.gemm_elem = (int)sizeof(floatX);
    floatX* dp = upload_X(p);
    floatX* dg = dev_alloc<floatX>(n);
    float* master = FLOATX_IS_LOWP ? dev_alloc<float>(n) : nullptr;
    if (master) cudaCheck(cudaMemcpy(master, p.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> pc(p);
    for (int t = 1; t <= steps; t++) {
        for (float& v : g) v = (float)as_floatX(0.01 * rng.normal());
        copy_to_X(dg, g);
        optim_step_cpu(&cpu, pc.data(), g.data(), lr, t, 1.0f);
        muon_step_gpu(&dev, dp, master, dg, lr, t, true, nullptr, 0);  // (optim_step_gpu's Muon, alone: a short build)
    }
    cudaCheck(cudaDeviceSynchronize());
    std::vector<double> got = master ? download_f(master, n) : download_X(dp, n);
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double tol = 1e-6 * fabs(pc[i]) + (FLOATX_IS_LOWP ? 0.05 * 2.0 : 1e-4) * lr * steps;
        worst = fmax(worst, fabs(got[i] - pc[i]) / tol);
    }
    // the state depends on the gradients only (momentum, AdamW's moments; the same rounding bits):
    // the whole block, bit for bit
    const bool same_state = cpu.bytes == dev.bytes && download_bytes(dev.memory, dev.bytes) ==
                            std::vector<uint8_t>((uint8_t*)cpu.memory, (uint8_t*)cpu.memory + cpu.bytes);
    const bool ok = worst <= 1.0 && same_state;
    lab_note_worst(worst);
    if (!ok || !g_quiet) {
        printf("  step, %s state, %d steps vs optim_step_cpu: worst error %.3f of the tolerance, state block %s  %s\n",
               optim_precision_name(prec), steps, worst, same_state ? "bit-identical" : "DIFFERS", ok ? "ok" : "FAIL");
    }
    optim_state_free(&cpu);
    cudaCheck(cudaFree(dev.work));
    optim_state_free_device(&dev);
    for (void* q : {(void*)dp, (void*)dg, (void*)master}) cudaCheck(cudaFree(q));
    return ok;
}

// ----------------------------------------------------------------------------
// bench

static int bench(int repeats) {
    static const struct { const char* name; int rows, cols, batch; } kRuns[] = {
        {"qkv (q, k, v apart)", 768, 768, 36}, {"attention projection", 768, 768, 12},
        {"fc", 3072, 768, 12}, {"fc projection", 768, 3072, 12}};
    const double ceiling = square_gemm_tflops(4096, repeats, 11, 12, [&](floatX* d, const floatX* a, const floatX* b) {
        GemmShape s = gemm_shape(4096, 4096, 4096, 0, 0);
        matmul_gemm(d, a, b, s, GEMM_EPI_NONE, NULL, NULL, 0);
    });
    printf("muon --bench (%s, %s): GPT-2 124M's Newton-Schulz runs, median of %d; square GEMM 4096: %.1f TFLOP/s\n",
           PRECISION_NAME, lab_device().c_str(), repeats, ceiling);
    printf("| run | matrices | ms | TFLOP/s | %% of the square GEMM |\n|---|---|---|---|---|\n");
    const OptimState st = gemm_state();
    double total = 0.0;
    for (const auto& k : kRuns) {
        MuonRun run;
        memset(&run, 0, sizeof run);
        run.matrix = 1;
        run.rows = (size_t)k.rows;
        run.cols = (size_t)k.cols;
        run.batch = k.batch;
        const int piece = muon_piece(&run);
        const size_t per = (size_t)k.rows * k.cols, kk = (size_t)(k.rows < k.cols ? k.rows : k.cols);
        floatX* x = upload_X(uniform_floatX(per * piece, 5, 1.0f));
        floatX* y = dev_alloc<floatX>(per * piece);
        floatX* A = dev_alloc<floatX>(kk * kk * piece);
        floatX* B = dev_alloc<floatX>(kk * kk * piece);
        float* partials = dev_alloc<float>((size_t)piece * MUON_NORM_CHUNKS);
        const float ms = time_ms(repeats, [&] {
            for (int b0 = 0; b0 < k.batch; b0 += piece) {
                MuonRun part = run;
                part.batch = k.batch - b0 < piece ? k.batch - b0 : piece;
                muon_orthogonalize_gpu<floatX>(&st, &part, x, y, A, B, partials, 0);
            }
        }, L2_WARM);
        const double flops = muon_ns_flops((size_t)k.batch, (size_t)k.rows, (size_t)k.cols);
        total += ms;
        printf("| %s | %d x %d x %d | %.3f | %.1f | %.0f%% |\n", k.name, k.batch, k.rows, k.cols, ms,
               tflops_of(flops, ms), 100.0 * tflops_of(flops, ms) / ceiling);
        for (void* p : {(void*)x, (void*)y, (void*)A, (void*)B, (void*)partials}) cudaCheck(cudaFree(p));
    }
    printf("| all four (one optimizer step's Newton-Schulz) | 72 | %.3f | | |\n", total);
    return 0;
}

static void usage(const char* prog) {
    fprintf(stderr, "usage: %s [--check | --bench] [--seed S] [-r REPEATS] [-q]\n", prog);
}

int main(int argc, char** argv) {
    bool do_bench = false;
    long long seed = -1, repeats = 10;
    LabArgv args(argc, argv, usage);
    while (args.next()) {
        if (args.mode(&do_bench)) continue;
        if (args.is("--seed")) seed = args.integer(0, 1LL << 62);
        else if (args.is("-r")) repeats = args.integer(1, 1000);
        else args.reject();
    }
    if (seed < 0) seed = lab_fresh_seed();
    matmul_init(MATMUL_WORKSPACE_DEFAULT);
    int rc = 0;
    if (do_bench) {
        rc = bench((int)repeats);
    } else {
        if (!g_quiet) printf("muon --check (%s, %s), seed %lld\n", PRECISION_NAME, lab_where(true).c_str(), seed);
        static const int kShapes[][3] = {{32, 32, 3}, {96, 40, 2}, {24, 80, 4}, {3, 50, 1}, {64, 16, 5}};
        int total = 0, failed = 0;
        uint64_t s = mix64((uint64_t)seed);
        for (const auto& k : kShapes) {
            total++;
            if (!check_orthogonalize(k[0], k[1], k[2], s += 7)) failed++;
        }
        for (OptimStatePrecision prec : {OPT_STATE_FP32, OPT_STATE_BF16, OPT_STATE_INT8, OPT_STATE_4BIT}) {
            total++;
            if (!check_step(prec, s += 7)) failed++;
        }
        printf("muon --check (%s): %d of %d checks passed, %s (seed %lld)\n", PRECISION_NAME, total - failed, total,
               lab_worst_note().c_str(), seed);
        rc = failed ? 1 : 0;
    }
    matmul_free();
    return rc;
}
