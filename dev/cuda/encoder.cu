/*
 encoder.cu: the encoder (token + position embedding) kernel lab, forward and backward, against a
 float64 CPU reference (--check) or timed at GPT-2 124M shapes (--bench). Built for both
 precisions (PRECISION=BF16 default, -DENABLE_FP32).

 Versions (-v):
   1  production: llmc/kernels/encoder.cuh (included, not copied): forward one thread per 16-byte chunk;
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
 same inputs and seed give the same bits (determinism), three backward calls queued without a
 synchronization give the bits of the same calls synchronized one by one (the pinned staging of
 their uploads), and the launchers' precondition checks.
 --bench: B = 8, T = 1024, C = 768, Vp = 50304 (tokens drawn with Zipf-like frequencies), median
 of -r repeats after an L2 flush; GB/s of the minimum traffic against a device-to-device copy. The
 backward time includes the host-side grouping of positions (also shown alone).

 usage: encoder [--check | --bench] [-v 1|all] [-s SEED] [-r REPEATS] [-q]
 To add a version: write launchers with the production signatures, add a kVersions row.
*/
#include "dev/cuda/lab.h"
#include "llmc/kernels/encoder.cuh"

#include <chrono>

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
static const double kUlpsForward = FLOATX_IS_LOWP ? 1.0 : 0.0;
static const double kUlpsBackward = FLOATX_IS_LOWP ? 2.0 : 0.0;

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
    // three calls queued back to back (no synchronization between), each on other tokens, give the
    // bits of the same calls with a synchronization after each: the host must not rewrite a call's
    // pinned staging before its upload has run (under the harness, a queued copy from pinned memory
    // reads it when it runs)
    std::vector<int> toks[3] = {tok, std::vector<int>(tok.rbegin(), tok.rend()), tok};
    std::rotate(toks[2].begin(), toks[2].begin() + N / 2, toks[2].end());
    int* d_toks[3];
    for (int k = 0; k < 3; k++) d_toks[k] = upload_i(toks[k]);
    std::vector<uint8_t> bits[2][2]; // [queued][dwte, dwpe]
    for (int queued = 0; queued < 2; queued++) {
        copy_to_X(d_dwte, dwte0);
        copy_to_X(d_dwpe, dwpe0);
        for (int k = 0; k < 3; k++) {
            v.backward(d_dwte, d_dwpe, d_scratch, d_dout, d_toks[k], toks[k].data(), B, T, C, seed + k, 0);
            if (!queued) cudaCheck(cudaDeviceSynchronize());
        }
        cudaCheck(cudaDeviceSynchronize());
        bits[queued][0] = download_bytes(d_dwte, wte_bits.size());
        bits[queued][1] = download_bytes(d_dwpe, wpe_bits.size());
    }
    if (bits[0][0] != bits[1][0] || bits[0][1] != bits[1][1]) {
        printf("      backward: three calls queued without a synchronization differ from the same calls synchronized\n");
        bad++;
    }
    for (int* d : d_toks) cudaCheck(cudaFree(d));
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
    LabCheck check("encoder", seed);
    check.cases(versions, kCases, check_case);
    if (FLOATX_IS_LOWP) {  // (stochastic rounding: the 16-bit builds)
        for (const Version* v : versions) {
            Rng rng{seed ^ 0xb1a5ULL};
            check.add(check_unbiased(*v, rng));
        }
    }
    check.add(check_preconditions());
    return check.end();
}

// ----------------------------------------------------------------------------
// bench

static int run_bench(const std::vector<const Version*>& versions, int repeats) {
    const int B = LS_HARNESS ? 4 : 8, T = LS_HARNESS ? 64 : 1024, C = LS_HARNESS ? 96 : 768;
    const int V = LS_HARNESS ? 1000 : 50257, Vp = LS_HARNESS ? 1024 : 50304, N = B * T;
    const size_t NC = (size_t)N * C;
    printf("encoder bench (%s): B = %d, T = %d, C = %d, Vp = %d, %s\n", PRECISION_NAME, B, T, C, Vp, lab_device().c_str());
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
    lab_bench_header(10, "the minimum traffic");
    for (const Version* v : versions) {
        float* scratch = dev_alloc<float>(v->scratch_bytes(B, T, C) / sizeof(float));
        std::vector<int> staging(2 * (size_t)N + 1);
        auto h0 = std::chrono::steady_clock::now();
        for (int r = 0; r < repeats; r++) encoder_group_positions(staging.data(), tok.data(), N);
        const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count() / repeats;
        unsigned seed = 0;
        BenchOp ops[2] = {
            {"forward", 3.0 * NC * sizeof(floatX), time_ms(repeats, [&] { v->forward(out, d_tok, wte, wpe, B, T, C, 0); })},
            {"backward", (2.0 * NC + 2.0 * ngroups * C + 2.0 * T * C) * sizeof(floatX),
             time_ms(repeats, [&] { v->backward(dwte, dwpe, scratch, out, d_tok, tok.data(), B, T, C, ++seed, 0); })},
        };
        lab_bench_rows(v->name, ops, copy, 10);
        printf("  %-14s host-side grouping of the positions alone: %.4f ms\n", v->name, host_ms);
        cudaCheck(cudaFree(scratch));
    }
    for (void* p : {(void*)d_tok, (void*)wte, (void*)wpe, (void*)out, (void*)dwte, (void*)dwpe}) cudaCheck(cudaFree(p));
    return 0;
}

// ----------------------------------------------------------------------------
static void usage(const char* prog) {
    lab_usage(prog, "time at GPT-2 124M shapes (B = 8, T = 1024, C = 768, Vp = 50304)", "1 (production)");
}

int main(int argc, char** argv) { return lab_main(argc, argv, usage, kVersions, run_check, run_bench); }
