/*
 lab.h: the kit every kernel lab in dev/cuda shares (style.md habit 9: one harness), so that a lab
 file holds only its versions, its float64 reference, its cases and its bench. Host code, C++17;
 compiles under nvcc and under the CPU harness (g++, dev/harness/cuda_harness.h). Everything is static
 inline (or a template): a lab uses what it needs without unused-function warnings.

   random inputs      mix64 (splitmix64's output function); lab_fresh_seed (LEANSTEP_LAB_SEED when
                      set, as make test's deciding runs set it, else clock and pid; the lab prints
                      it, its seed flag reproduces the run); Rng (a splitmix64 stream:
                      uniform, normal) and random_floatX (normals rounded to floatX); uniform_floatX
                      (uniforms whose element i depends on (seed, i) only).
   floatX on the host as_floatX (the value a floatX stores), ulp_floatX; dev_alloc, upload_X,
                      copy_to_X, download_X (floatX <-> host float or double), download_f,
                      download_bytes, upload_i.
   comparison         compare: flat index, |got - ref| <= rel * max(max|ref|, scale) + ulps *
                      ulp(ref), the caller rounds ref; compare_shaped: row-major indices, ref
                      rounded to floatX here, |got - ref| <= rel_max * max|ref| + rel * |ref| +
                      1 ulp (bf16, fp16). Both print the first 10 mismatches and count them,
                      and note their largest err/tol (lab_note_worst, as the labs' own
                      comparisons do): g_lab_worst, which the last line of every --check prints.
   expected failures  expect_fatal: a launcher's precondition check must end a child process with
                      an error.
   timing             median; time_ms (events on the default stream, one warm-up, median of the
                      repeats, each after an L2 flush or back to back); copy_gbs (the device-to-
                      device copy: the ceiling of bandwidth-bound kernels); square_gemm_tflops (the
                      ceiling of GEMM-bound ones); gbs_of, tflops_of; BenchOp tables
                      (lab_bench_header, lab_bench_rows) and the timing columns of any bandwidth
                      table (lab_gbs_columns). The optimizer labs' own kit: lab_optim.h.
   banners, checks    lab_where ("CPU harness" or "GPU"), lab_device (the device of a bench);
                      LabCheck (a ladder --check: first line, every case with every version, the
                      count, last line); same_bits (two runs' outputs, for determinism).
   command line       LabArgv: argv one flag at a time, values checked (missing, not an integer,
                      out of range), every error "prog: what" and then the lab's usage (exit 2).
                      lab_main: the whole main() of a ladder lab (numbered versions with one
                      launcher signature): [--check | --bench] [-v N|all] [-s SEED] [-r REPEATS]
                      [-q]; lab_usage: its help text.

 To use it in a lab: #include "dev/cuda/lab.h" (it includes llmc/cuda/cuda_common.h and
 llmc/cuda/cuda_precision.h; the lab's llmc/kernels/<op>.cuh next to it). A ladder lab's main is
     static void usage(const char* prog) { lab_usage(prog, "what --bench times", "1 (naive), 2 (production)"); }
     int main(int argc, char** argv) { return lab_main(argc, argv, usage, kVersions, run_check, run_bench); }
 with run_check(versions, seed) and run_bench(versions, repeats) returning the exit status. A lab
 with other flags walks LabArgv itself (matmul.cu, attention.cu).
*/
#ifndef DEV_CUDA_LAB_H
#define DEV_CUDA_LAB_H

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"

// 1 in the CPU-harness build (dev/harness/cuda_harness.h defines it), 0 under nvcc: labs pick smaller
// shapes and harness-only checks with it.
#ifndef LS_HARNESS
#define LS_HARNESS 0
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

inline bool g_quiet = false; // -q: print failures and the summary only

// ----------------------------------------------------------------------------
// random inputs

// splitmix64's output function: a bijection of 64-bit values that mixes every bit into every bit.
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A seed for a run without -s/--seed: LEANSTEP_LAB_SEED when it is set (make test's deciding runs set
// it: the same inputs every run, whatever each lab's seed flag is called), else the clock and the
// process id, in [0, 2^62) (every lab's seed flag takes it). Printed by the lab, so that a failure can
// be reproduced.
static inline long long lab_fresh_seed() {
    const char* env = getenv("LEANSTEP_LAB_SEED");
    if (env != nullptr && *env != '\0') {
        char* end = nullptr;
        const long long s = strtoll(env, &end, 10);
        if (*end != '\0' || s < 0) ls_fatal("LEANSTEP_LAB_SEED='%s': a seed >= 0 expected", env);
        return s;
    }
    const uint64_t t = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return (long long)(mix64(t ^ ((uint64_t)getpid() << 32)) >> 2);
}

struct Rng { // splitmix64
    uint64_t s;
    uint64_t next() { return mix64(s += 0x9e3779b97f4a7c15ULL); }
    double uniform() { return (double)(next() >> 11) * 0x1.0p-53; } // [0, 1)
    double normal() { return sqrt(-2.0 * log(1.0 - uniform())) * cos(6.283185307179586 * uniform()); }
};

// The value a floatX stores for x.
static inline double as_floatX(double x) { return (double)to_float(from_float((float)x)); }

// floatX's significant bits (bf16 8, fp16 11) and its relative precision 2^(1 - bits) (fp32: 2^-23).
static constexpr int kFloatXBits = FLOATX_IS_BF16 ? 8 : FLOATX_IS_FP16 ? 11 : 24;
static constexpr double kFloatXEps = FLOATX_IS_BF16 ? 0x1.0p-7 : FLOATX_IS_FP16 ? 0x1.0p-10 : 0x1.0p-23;

// One unit in the last place of a bf16 or fp16 at |x| (0 in the fp32 build: atol covers fp32 errors;
// fp16's subnormals below 2^-14 have the fixed ulp 2^-24).
static inline double ulp_floatX(double x) {
    if (!FLOATX_IS_LOWP) return 0.0;
    int e;
    frexp(fabs(x), &e);
    if (FLOATX_IS_FP16 && e - kFloatXBits < -24) return 0x1.0p-24;
    return x == 0.0 ? (FLOATX_IS_FP16 ? 0x1.0p-24 : 0x1.0p-133) : ldexp(1.0, e - kFloatXBits); // |x| in [2^(e-1), 2^e)
}

// n values offset + scale * normal, rounded to floatX, from the stream r.
static inline std::vector<double> random_floatX(Rng& r, size_t n, double offset, double scale) {
    std::vector<double> v(n);
    for (double& x : v) x = as_floatX(offset + scale * r.normal());
    return v;
}

// n values uniform in [-scale, scale), rounded to floatX so that the device and the reference see
// the same numbers. Element i depends on (seed, i) only: each (seed, tensor) pair gives fresh values.
static inline std::vector<float> uniform_floatX(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        const double u = (double)(mix64(seed * 0x9e3779b97f4a7c15ULL + i) >> 11) * 0x1.0p-53;
        v[i] = (float)as_floatX((2.0 * u - 1.0) * scale);
    }
    return v;
}

// ----------------------------------------------------------------------------
// floatX on the host: device buffers from and to host float or double vectors

// n elements of T on the device (at least one, so that n = 0 is a valid pointer).
template <typename T>
static inline T* dev_alloc(size_t n) {
    T* p = nullptr;
    cudaCheck(cudaMalloc((void**)&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}

// h rounded to floatX into d (h.size() elements).
template <typename H>
static inline void copy_to_X(floatX* d, const std::vector<H>& h) {
    std::vector<floatX> t(h.size());
    for (size_t i = 0; i < h.size(); i++) t[i] = from_float((float)h[i]);
    cudaCheck(cudaMemcpy(d, t.data(), h.size() * sizeof(floatX), cudaMemcpyHostToDevice));
}

// A new device buffer holding h rounded to floatX.
template <typename H>
static inline floatX* upload_X(const std::vector<H>& h) {
    floatX* d = dev_alloc<floatX>(h.size());
    copy_to_X(d, h);
    return d;
}

// n floatX from the device as H (double by default; exact).
template <typename H = double>
static inline std::vector<H> download_X(const floatX* d, size_t n) {
    std::vector<floatX> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<H> h(n);
    for (size_t i = 0; i < n; i++) h[i] = to_float(t[i]);
    return h;
}

static inline std::vector<double> download_f(const float* d, size_t n) {
    std::vector<float> t(n);
    cudaCheck(cudaMemcpy(t.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return std::vector<double>(t.begin(), t.end());
}

static inline std::vector<uint8_t> download_bytes(const void* d, size_t bytes) {
    std::vector<uint8_t> t(bytes);
    cudaCheck(cudaMemcpy(t.data(), d, bytes, cudaMemcpyDeviceToHost));
    return t;
}

static inline int* upload_i(const std::vector<int>& h) {
    int* d = dev_alloc<int>(h.size());
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// ----------------------------------------------------------------------------
// comparison

// The largest error / tolerance of every comparison this run made (a NaN counts as infinite): the
// last line of every --check prints it (lab_worst_note), so that a tolerance far above what the
// kernel needs shows, and a failure says by how much.
inline double g_lab_worst = 0.0;
static inline void lab_note_worst(double ratio) { g_lab_worst = std::max(g_lab_worst, ratio == ratio ? ratio : INFINITY); }
static inline std::string lab_worst_note() {
    char b[48];
    snprintf(b, sizeof b, "worst err/tol %.3f", g_lab_worst);
    return b;
}

// Tolerances keep a margin of 2 over what a correct kernel can reach. Where the tolerance is a
// bound that one rounding can nearly attain (a stochastic rounding lands up to one step away; a
// rounded output, near a rounding boundary, one floatX step from the float64 reference rounded to
// floatX), the labs multiply it by kLabMargin, so that a correct kernel's printed worst err/tol
// stays at most 0.5 and a failure means twice the bound. Errors of a fraction of one step are
// seen elsewhere: the FP32 builds of the same kernels, and the optimizers' bit-exact CPU twins.
static const double kLabMargin = 2.0;
static const double kLabUlpsLowp = kLabMargin; // one floatX step, with the margin

// |got - ref| <= rel * max(max|ref|, scale) + ulps * ulp_floatX(ref) for every element (NaN fails);
// ref is what the device should store (rounded to floatX by the caller where the output is floatX).
// scale: the magnitude of the terms the outputs are computed from, where that can exceed the
// outputs (cancellation). Prints the first 10 mismatches; returns the number of mismatches;
// *worst = max error / tolerance (infinite for a NaN).
static inline int compare(const char* what, const std::vector<double>& got, const std::vector<double>& ref, double rel,
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
        w = std::max(w, err == err ? err / tol : INFINITY);
    }
    if (bad > 10) printf("      %s: %d mismatches in all\n", what, bad);
    *worst = std::max(*worst, w);
    lab_note_worst(w);
    return bad;
}

// Flat index i of a row-major tensor of shape dims as coordinates joined by sep ("2,0,17").
static inline std::string lab_index(size_t i, const std::vector<int>& dims, const char* sep) {
    std::string s;
    for (int d = (int)dims.size() - 1; d >= 0; d--) { // last dimension fastest
        s.insert(0, (d ? sep : "") + std::to_string(i % dims[d]));
        i /= dims[d];
    }
    return s;
}

// got (a floatX output, shape dims) against the float64 reference, which is rounded to floatX here
// in the bf16 build: |got - r| <= rel_max * max|ref| + rel * |r| + u with r the reference as
// compared and u kLabUlpsLowp floatX ulps of r (bf16 and fp16 builds; 0 at r = 0) or 0 (fp32). The first 10 mismatches
// are printed with their coordinates (joined by sep); returns their count; *worst gets the
// largest err/tol.
static inline long compare_shaped(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
                                  const std::vector<int>& dims, double rel_max, double rel, double* worst,
                                  const char* sep = ",") {
    double mx = 0.0;
    for (double r : ref) mx = std::max(mx, fabs(r));
    long bad = 0;
    double w = 0.0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double r = FLOATX_IS_LOWP ? as_floatX(ref[i]) : ref[i];
        const double tol = rel_max * mx + rel * fabs(r) + (FLOATX_IS_LOWP && r != 0.0 ? kLabUlpsLowp * ulp_floatX(r) : 0.0) + 1e-30;
        const double err = fabs((double)got[i] - r);
        if (!(err <= tol)) { // NaN fails
            if (bad < 10) {
                printf("      %s[%s]: got %.8g, expected %.8g (err %.3g > tol %.3g)\n", what,
                       lab_index(i, dims, sep).c_str(), got[i], r, err, tol);
            }
            bad++;
        }
        w = std::max(w, err != err ? INFINITY : err / tol);
    }
    if (bad > 10) printf("      %s: %ld mismatches in all (of %zu)\n", what, bad, ref.size());
    *worst = std::max(*worst, w);
    lab_note_worst(w);
    return bad;
}

// ----------------------------------------------------------------------------
// expected failures

// Runs body in a child process: it must end with an error exit (a launcher's ls_fatal). Prints a
// line per check (only the failures with -q); returns true when the child was rejected.
template <typename F>
static inline bool expect_fatal(const char* what, F body) {
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

// ----------------------------------------------------------------------------
// timing

static inline float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// GB/s of `bytes` moved in `ms`; TFLOP/s of `flops` in `ms`.
static inline double gbs_of(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }
static inline double tflops_of(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

// What the L2 holds when a timed run starts: L2_FLUSHED, nothing of the operands (a memset of twice
// the L2 before each run: bandwidth-bound kernels are measured from DRAM); L2_WARM, whatever the
// previous run left (runs back to back).
enum LabL2 { L2_FLUSHED, L2_WARM };

// Median milliseconds of body over `repeats` runs after one warm-up run (which also lets a library
// pick its algorithm), timed with events on the default stream.
template <typename F>
static inline float time_ms(int repeats, F body, LabL2 l2 = L2_FLUSHED) {
    void* flush = nullptr;
    size_t flush_bytes = 0;
    if (l2 == L2_FLUSHED) {
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, 0));
        flush_bytes = (size_t)std::max(prop.l2CacheSize, 1 << 20) * 2;
        flush = dev_alloc<uint8_t>(flush_bytes);
    }
    cudaEvent_t a, e;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&e));
    body(); // warm-up
    std::vector<float> ms;
    for (int r = 0; r < repeats; r++) {
        if (flush != nullptr) cudaCheck(cudaMemsetAsync(flush, r & 0xff, flush_bytes, 0));
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
    if (flush != nullptr) cudaCheck(cudaFree(flush));
    return median(ms);
}

// Device-to-device copy bandwidth (bytes read + written per second, GB/s) of `bytes` from src to
// dst: the ceiling a bandwidth-bound kernel is measured against.
static inline double copy_gbs(void* dst, const void* src, size_t bytes, int repeats, LabL2 l2) {
    const float ms =
        time_ms(repeats, [&] { cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); }, l2);
    return gbs_of(2.0 * bytes, ms);
}

// The same on two new buffers of `bytes`, each run after an L2 flush.
static inline double copy_gbs(size_t bytes, int repeats) {
    void* src = dev_alloc<uint8_t>(bytes);
    void* dst = dev_alloc<uint8_t>(bytes);
    cudaCheck(cudaMemset(src, 1, bytes));
    const double gbs = copy_gbs(dst, src, bytes, repeats, L2_FLUSHED);
    cudaCheck(cudaFree(src));
    cudaCheck(cudaFree(dst));
    return gbs;
}

// TFLOP/s of an S x S x S GEMM, d = a @ b^T with a, b uniform_floatX of seeds seed_a, seed_b (L2 warm):
// the ceiling a GEMM-bound lab is measured against. gemm(d, a, b) runs the product through the
// lab's own code path (llmc/kernels/matmul.cuh's matmul_gemm).
template <typename Gemm>
static inline double square_gemm_tflops(int S, int repeats, uint64_t seed_a, uint64_t seed_b, Gemm gemm) {
    floatX* a = upload_X(uniform_floatX((size_t)S * S, seed_a, 1.0f));
    floatX* b = upload_X(uniform_floatX((size_t)S * S, seed_b, 1.0f));
    floatX* d = dev_alloc<floatX>((size_t)S * S);
    const float ms = time_ms(repeats, [&] { gemm(d, a, b); }, L2_WARM);
    for (floatX* p : {a, b, d}) cudaCheck(cudaFree(p));
    return tflops_of(2.0 * S * (double)S * S, ms);
}

// One timed operation of a bandwidth-bound bench: the bytes it must move, its median time.
struct BenchOp {
    const char* name;
    double bytes;
    float ms;
};

// The timing columns that end every row of a bandwidth-bound bench table: the median time, GB/s
// of `bytes` moved in it, and its share of the device-to-device copy bandwidth `copy`; and their
// header.
static inline void lab_gbs_columns_header() { printf(" %10s %9s %8s", "median ms", "GB/s", "% copy"); }
static inline void lab_gbs_columns(double bytes, float ms, double copy) {
    const double gbs = gbs_of(bytes, ms);
    printf(" %10.4f %9.1f %7.1f%%", ms, gbs, 100.0 * gbs / copy);
}

// The table of a bandwidth-bound ladder bench: a header (op_width: the width of the op column;
// bytes_note: what the bytes count), then a row per operation of a version, GB/s and its share
// of the device-to-device copy bandwidth `copy`.
static inline void lab_bench_header(int op_width, const char* bytes_note) {
    printf("  %-14s %-*s", "version", op_width, "op");
    lab_gbs_columns_header();
    printf("   (bytes: %s)\n", bytes_note);
}
template <size_t N>
static inline void lab_bench_rows(const char* version, const BenchOp (&ops)[N], double copy, int op_width) {
    for (const BenchOp& op : ops) {
        printf("  %-14s %-*s", version, op_width, op.name);
        lab_gbs_columns(op.bytes, op.ms, copy);
        printf("\n");
    }
}

// ----------------------------------------------------------------------------
// banners and check bookkeeping

// Where the kernels run: "CPU harness" (with its thread order when with_order) or "GPU".
static inline std::string lab_where(bool with_order = false) {
#if LS_HARNESS
    std::string w = "CPU harness";
    if (with_order) w += std::string(", order ") + ls_harness::order_name(ls_harness::config().order);
    return w;
#else
    (void)with_order;
    return "GPU";
#endif
}

// The end of a bench banner: `device "NAME"`, and under the CPU harness the note that the times are
// host times.
static inline std::string lab_device() {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const char* note = LS_HARNESS ? " (CPU harness: host times, not GPU times)" : "";
    return std::string("device \"") + prop.name + "\"" + note;
}

// The bookkeeping of a ladder lab's --check: the first line (not with -q), "gelu --check (bf16, GPU,
// seed 42)"; a count of the checks and of the failures; the last line, "gelu --check (bf16): 7 of 7
// checks passed, worst err/tol 0.123 (seed 42)", after a failure with how to reproduce it.
struct LabCheck {
    const char* lab;
    uint64_t seed;
    int failed = 0, total = 0;

    LabCheck(const char* lab_, uint64_t seed_) : lab(lab_), seed(seed_) {
        if (!g_quiet) {
            printf("%s --check (%s, %s, seed %llu)\n", lab, PRECISION_NAME, lab_where().c_str(),
                   (unsigned long long)seed);
        }
    }
    void add(bool ok) {
        total++;
        failed += !ok;
    }
    // Every case with every version, check(version, case, rng) -> ok; the inputs of case k come from
    // the stream Rng{seed ^ k * 0x100000001b3}, the same for every version.
    template <typename Version, typename Case, size_t N, typename Check>
    void cases(const std::vector<const Version*>& versions, const Case (&all)[N], Check check) {
        for (size_t k = 0; k < N; k++) {
            for (const Version* v : versions) {
                Rng rng{seed ^ (uint64_t)k * 0x100000001b3ULL};
                add(check(*v, all[k], rng));
            }
        }
    }
    // Prints the last line; returns the exit status.
    int end() const {
        printf("%s --check (%s): %d of %d checks passed, %s (seed %llu)%s\n", lab, PRECISION_NAME, total - failed, total,
               lab_worst_note().c_str(), (unsigned long long)seed, failed ? " (reproduce with -s and this seed)" : "");
        return failed ? 1 : 0;
    }
};

// Whether the outputs of two runs are the same bits (determinism).
template <size_t N>
static inline bool same_bits(const std::vector<float> (&a)[N], const std::vector<float> (&b)[N]) {
    for (size_t t = 0; t < N; t++) {
        if (a[t].size() != b[t].size()) return false;
        if (memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) return false;
    }
    return true;
}

// ----------------------------------------------------------------------------
// command line

// A lab's usage(): prints its help to stderr and exits with status 2.
typedef void (*LabUsage)(const char* prog);

// The command line, one argument at a time:
//     LabArgv args(argc, argv, usage);
//     while (args.next()) {
//         if (args.is("-q")) g_quiet = true;
//         else if (args.is("-r")) repeats = args.integer(1, 1000);
//         else args.reject(); // -h, --help: usage; anything else: unknown
//     }
struct LabArgv {
    int argc;
    char** argv;
    LabUsage usage;
    int i = 0; // the argument at hand

    LabArgv(int argc_, char** argv_, LabUsage usage_) : argc(argc_), argv(argv_), usage(usage_) {}
    const char* prog() const { return argv[0]; }
    bool next() { return ++i < argc; }
    bool is(const char* flag) const { return strcmp(argv[i], flag) == 0; }
    // The flags of every lab: --check, --bench (into *bench), -q (g_quiet). True when the argument
    // at hand is one of them (then the caller goes on to the next).
    bool mode(bool* bench) const {
        if (is("--check")) *bench = false;
        else if (is("--bench")) *bench = true;
        else if (is("-q")) g_quiet = true;
        else return false;
        return true;
    }

    // "prog: <message>" on stderr, then usage (exit 2).
    [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) const {
        fprintf(stderr, "%s: ", argv[0]);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        usage(argv[0]);
        exit(2);
    }
    // The argument at hand is not a flag of the lab: -h and --help show the usage, anything else
    // is an error.
    [[noreturn]] void reject() const {
        if (is("-h") || is("--help")) {
            usage(argv[0]);
            exit(2);
        }
        fail("unknown argument '%s'", argv[i]);
    }
    // The value of the flag at hand (the next argument).
    const char* value() {
        if (i + 1 >= argc) fail("%s needs a value", argv[i]);
        return argv[++i];
    }
    // The value of the flag at hand as an integer in [lo, hi] (and a multiple of `multiple`).
    long long integer(long long lo, long long hi, long long multiple = 1) {
        const char* flag = argv[i];
        const char* s = value();
        char* end = nullptr;
        errno = 0;
        const long long v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi || v % multiple != 0) {
            char also[48] = "";
            if (multiple > 1) snprintf(also, sizeof also, " that is a multiple of %lld", multiple);
            fail("%s '%s': expected an integer in [%lld, %lld]%s", flag, s, lo, hi, also);
        }
        return v;
    }
};

// The help text of a ladder lab (lab_main's flags): `bench` says what --bench times, `versions`
// lists the versions ("1 (naive), 2 (production)").
[[noreturn]] static inline void lab_usage(const char* prog, const char* bench, const char* versions) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [-v VERSION] [-s SEED] [-r REPEATS] [-q]\n"
            "  --check     compare with the float64 reference on small shapes (default)\n"
            "  --bench     %s\n"
            "  -v VERSION  %s or all (default)\n"
            "  -s SEED     random inputs of --check (default: a fresh seed, printed)\n"
            "  -r REPEATS  timed repeats of --bench, 1..1000 (default 20)\n"
            "  -q          --check prints failures and the summary only\n",
            prog, bench, versions);
    exit(2);
}

// The main() of a ladder lab: versions kVersions[0..N) are chosen with -v 1..N or all;
// run_check(versions, seed) and run_bench(versions, repeats) return the exit status.
template <typename Version, size_t N, typename Check, typename Bench>
static inline int lab_main(int argc, char** argv, LabUsage usage, const Version (&all)[N], Check run_check,
                           Bench run_bench) {
    bool bench = false;
    const char* version = "all";
    long long repeats = 20;
    uint64_t seed = (uint64_t)lab_fresh_seed();
    LabArgv args(argc, argv, usage);
    while (args.next()) {
        if (args.mode(&bench)) continue;
        if (args.is("-v")) version = args.value();
        else if (args.is("-s")) seed = (uint64_t)args.integer(0, INT64_MAX);
        else if (args.is("-r")) repeats = args.integer(1, 1000);
        else args.reject();
    }
    std::vector<const Version*> versions;
    for (size_t k = 0; k < N; k++) {
        if (strcmp(version, "all") == 0 || atoi(version) == (int)k + 1) versions.push_back(&all[k]);
    }
    if (versions.empty() || (strcmp(version, "all") != 0 && std::to_string(atoi(version)) != version)) {
        args.fail("-v '%s': expected 1..%d or all", version, (int)N);
    }
    return bench ? run_bench(versions, (int)repeats) : run_check(versions, seed);
}

#endif // DEV_CUDA_LAB_H
