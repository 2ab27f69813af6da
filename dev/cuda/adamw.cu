/*
 adamw.cu: the AdamW kernel lab. A ladder of versions of the fused AdamW update, one driver with
 two modes: --check (against a float64 CPU reference) and --bench (device-event timing, GB/s,
 share of the device-to-device copy bandwidth, ratio to torch.optim.AdamW(fused=True)).

 Versions (-v):
   1   naive: one thread per parameter, the textbook fused kernel (state read and written through
       global memory, bias corrections recomputed with powf in every thread)
   2   registers: each value loaded once, bias corrections from the host, FMA-based lerps
   3   vectorized: 128-bit loads/stores, grid-stride loop, segment table in shared memory (the walk
       of the production kernels, optim_for_each_chunk of llmc/optim/device.cuh)
   4   mixed precision: bf16 params and grads, fp32 master weights, stochastic rounding to bf16
   5   production: optim_launch<OP_ADAMW> of llmc/optim/update.cuh (included, not copied; AdamW is one rule of
       the optimizer's elementwise kernel), in its variants (fp32; bf16 + master +
       stochastic rounding; bf16 without master; fp32 params with bf16 grads; AMSGrad)
   6a  bf16 m and v with stochastic rounding (the same kernel; llmc/optim/storage.h)
   6b  8-bit blockwise-quantized m and v, dynamic map + per-block absmax, blocks per tensor, small
       tensors in fp32 (llmc/optim/update.cuh's int8 kernel, llmc/optim/quant8.h)
 Every version takes per-tensor weight decay and lr multipliers from the same segment table and
 the gradient scale from the deterministic global-norm clip (llmc/kernels/global_norm.cuh), which --check
 also verifies (reproducible bits, agreement with float64). Version 5 fp32 is also compared bit
 for bit with the CPU trainer's adamw_update_cpu (llmc/optim/optim.h): both spell out the same fmaf
 calls and the project builds with -ffp-contract=off, so any differing bit is a failure.

 usage: adamw [--check | --bench] [-v VERSION] [-n N | --gpt2] [-s STEPS] [-r REPEATS] [--torch]
   --check (default) without -n/--gpt2 runs small problems with odd sizes and unaligned tensor
   boundaries, and GPT-2's shapes at C = 32, whose 4096-element tensors start on 16-byte boundaries
   (the 8-bit kernel's 128-bit branch, as in training; lab_optim.h's optlab_problems) (under the CPU
   harness: a few milliseconds each); --gpt2 uses the 148 tensors of
   GPT-2 124M (n = 124,475,904, padded vocabulary) for a GPU.
 To add a version: write its kernel and a run_* launcher with the Case signature, add a row to
 kCases with its bytes per parameter and tolerances.
*/
#include "dev/cuda/lab_optim.h"
#include "dev/cuda/optim_step_parts.h"
#include "llmc/optim/engine.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/optim/optim.h" // the CPU trainer's AdamW, compared bit for bit with version 5

// The hyperparameters of a case (lr is the step's), and the per-step scalars the kernels of
// versions 2-4 take (the production step computes the same, llmc/optim/rules.h optim_step_args).
struct LabHyper {
    float lr, beta1, beta2, eps;
    int amsgrad;             // keep the running max of v
    int stochastic_rounding; // bf16 params: 1 stochastic, 0 to nearest even
    unsigned long long seed;
};

static OptimConfig lab_config(const LabHyper& hp) {
    OptimConfig c = optim_config_default(OPT_ADAMW);
    c.beta1 = hp.beta1;
    c.beta2 = hp.beta2;
    c.eps = hp.eps;
    c.amsgrad = hp.amsgrad;
    c.seed = hp.seed;
    return c;
}

static OptimStepArgs lab_step_args(const LabHyper& hp, int step) {
    const OptimConfig c = lab_config(hp);
    return optim_step_args(&c, hp.lr, step);
}

// ----------------------------------------------------------------------------
// version 1: naive

static __global__ void adamw_v1_kernel(float* p, const float* g, float* m, float* v, size_t n,
                                       const OptimSegment* segs, int nseg, float lr, float beta1, float beta2,
                                       float eps, int step, const float* clip_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int lo = 0, hi = nseg - 1; // the element's tensor: binary search in global memory
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (segs[mid].offset + segs[mid].count > i) hi = mid; else lo = mid + 1;
    }
    float grad = g[i] * *clip_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * grad;
    v[i] = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    float m_hat = m[i] / (1.0f - powf(beta1, (float)step));
    float v_hat = v[i] / (1.0f - powf(beta2, (float)step));
    p[i] -= lr * segs[lo].lr_mult * (m_hat / (sqrtf(v_hat) + eps) + segs[lo].weight_decay * p[i]);
}

// ----------------------------------------------------------------------------
// version 2: registers, host bias corrections, FMA lerp

// lerp(a, b, w) = a + w (b - a), as two FMAs: fma(w, b, fma(-w, a, a))
static __device__ __forceinline__ float lerp_fma(float a, float b, float w) { return fmaf(w, b, fmaf(-w, a, a)); }

static __global__ void adamw_v2_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                       float* __restrict__ v, size_t n, const OptimSegment* __restrict__ segs,
                                       int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (segs[mid].offset + segs[mid].count > i) hi = mid; else lo = mid + 1;
    }
    const float wd = segs[lo].weight_decay, lr_eff = a.lr * segs[lo].lr_mult;
    const float gi = g[i] * *clip_scale;
    float pi = p[i];
    float mi = lerp_fma(gi, m[i], a.beta1);
    float vi = lerp_fma(gi * gi, v[i], a.beta2);
    float upd = (mi * a.inv_bias_corr1) / (sqrtf(vi * a.inv_bias_corr2) + a.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = fmaf(-lr_eff, fmaf(wd, pi, upd), pi);
}

// ----------------------------------------------------------------------------
// version 3: 128-bit vectorized, grid-stride, segment table in shared memory

static __device__ __forceinline__ void v3_element(float& p, float g, float& m, float& v, float wd, float lr_eff,
                                                  const OptimStepArgs& a) {
    m = lerp_fma(g, m, a.beta1);
    v = lerp_fma(g * g, v, a.beta2);
    float upd = (m * a.inv_bias_corr1) / (sqrtf(v * a.inv_bias_corr2) + a.eps);
    p = fmaf(-lr_eff, fmaf(wd, p, upd), p);
}

static __global__ void adamw_v3_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                       float* __restrict__ v, size_t n, const OptimSegment* __restrict__ segs,
                                       int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    const float scale = *clip_scale;
    // whole-model tables only (param == offset: the second index is i's)
    auto one = [&](size_t i, size_t, float wd, float lr_eff, int) { v3_element(p[i], g[i] * scale, m[i], v[i], wd, lr_eff, a); };
    auto chunk = [&](size_t i0, size_t, float wd, float lr_eff, int) {
        const size_t c = i0 / 4;
        float4 P = __ldcs(reinterpret_cast<const float4*>(p) + c), G = __ldcs(reinterpret_cast<const float4*>(g) + c);
        float4 M = __ldcs(reinterpret_cast<const float4*>(m) + c), W = __ldcs(reinterpret_cast<const float4*>(v) + c);
        v3_element(P.x, G.x * scale, M.x, W.x, wd, lr_eff, a);
        v3_element(P.y, G.y * scale, M.y, W.y, wd, lr_eff, a);
        v3_element(P.z, G.z * scale, M.z, W.z, wd, lr_eff, a);
        v3_element(P.w, G.w * scale, M.w, W.w, wd, lr_eff, a);
        __stcs(reinterpret_cast<float4*>(p) + c, P);
        __stcs(reinterpret_cast<float4*>(m) + c, M);
        __stcs(reinterpret_cast<float4*>(v) + c, W);
    };
    optim_for_each_chunk<4>(segs, nseg, nullptr, a.lr, n, chunk, one);
}

// ----------------------------------------------------------------------------
// version 4: bf16 params and grads, fp32 master weights, stochastic rounding

static __device__ __forceinline__ void v4_element(__nv_bfloat16* p, float* master, const __nv_bfloat16* g, float* m,
                                                  float* v, size_t i, float wd, float lr_eff, float scale,
                                                  const OptimStepArgs& a) {
    float x = master[i], mi = m[i], vi = v[i];
    v3_element(x, (float)g[i] * scale, mi, vi, wd, lr_eff, a);
    master[i] = x;
    m[i] = mi;
    v[i] = vi;
    p[i] = bf16_round_stochastic(x, srng_bits(a.rng_key, i, 0));
}

static __global__ void adamw_v4_kernel(__nv_bfloat16* __restrict__ p, float* __restrict__ master,
                                       const __nv_bfloat16* __restrict__ g, float* __restrict__ m,
                                       float* __restrict__ v, size_t n, const OptimSegment* __restrict__ segs,
                                       int nseg, OptimStepArgs a, const float* __restrict__ clip_scale) {
    const float scale = *clip_scale;
    // whole-model tables only (param == offset: the second index is i's)
    auto one = [&](size_t i, size_t, float wd, float lr_eff, int) { v4_element(p, master, g, m, v, i, wd, lr_eff, scale, a); };
    auto chunk = [&](size_t i0, size_t, float wd, float lr_eff, int) {
        Vec128<__nv_bfloat16> gv = load128cs(g + i0), out;
#pragma unroll
        for (int k = 0; k < 2; k++) { // two halves of 4: fewer live registers
            Vec128<float> xs = load128cs(master + i0 + 4 * k), ms = load128cs(m + i0 + 4 * k),
                          vs = load128cs(v + i0 + 4 * k);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                v3_element(xs[e], (float)gv[4 * k + e] * scale, ms[e], vs[e], wd, lr_eff, a);
                out[4 * k + e] = bf16_round_stochastic(xs[e], srng_bits(a.rng_key, i0 + 4 * k + e, 0));
            }
            store128cs(master + i0 + 4 * k, xs);
            store128cs(m + i0 + 4 * k, ms);
            store128cs(v + i0 + 4 * k, vs);
        }
        store128cs(p + i0, out);
    };
    optim_for_each_chunk<8>(segs, nseg, nullptr, a.lr, n, chunk, one);
}

// ----------------------------------------------------------------------------
// the problems (lab_optim.h): deterministic data

static const OptimSegment& seg_of(const Problem& pb, size_t i) {
    size_t lo = 0, hi = pb.segs.size() - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pb.segs[mid].offset + pb.segs[mid].count > i) hi = mid; else lo = mid + 1;
    }
    return pb.segs[lo];
}

// Initial parameters: LayerNorm-like tensors (no decay, small) near 1, others N(0, 0.02)-like.
static float init_param(const Problem& pb, size_t i) {
    const double z = normalish(11, i);
    const OptimSegment& s = seg_of(pb, i);
    return (float)(s.weight_decay == 0.0f && s.count < 4096 && (s.offset / 7) % 2 ? 1.0 + 0.1 * z : 0.02 * z);
}

// Gradients of step t: a per-tensor scale (1e-4 .. 1e-2) times a unit-variance variate.
static void make_grads(const Problem& pb, int t, std::vector<float>& g) {
    g.resize(pb.n);
    for (const OptimSegment& s : pb.segs) {
        double sc = pow(10.0, -4.0 + 2.0 * unit(77, s.offset));
#pragma omp parallel for schedule(static) if (s.count > OMP_MIN)
        for (long long k = 0; k < (long long)s.count; k++) {
            size_t i = s.offset + (size_t)k;
            g[i] = (float)(sc * normalish(5, (uint64_t)t * 0x100000000ULL + i));
        }
    }
}

static double sum_squares(const std::vector<float>& g) {
    double ss = 0.0;
    const long long n = (long long)g.size();
#pragma omp parallel for reduction(+ : ss) schedule(static) if (n > OMP_MIN)
    for (long long i = 0; i < n; i++) ss += (double)g[i] * g[i];
    return ss;
}

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// ----------------------------------------------------------------------------
// cases: a version with its types

enum PType { P_F32, P_BF16 };
enum SType { S_F32, S_BF16, S_Q8 };

struct Case;
struct Bufs;
typedef void (*StepFn)(const Case&, Bufs&, const Problem&, const LabHyper&, int step, cudaStream_t);

struct Case {
    const char* id;       // what -v selects
    const char* name;
    PType ptype;
    bool bf16_grads, master, amsgrad, stochastic;
    SType state;
    StepFn step;
    bool cpu_twin;        // also run the CPU trainer's adamw_update_cpu and compare bits
};

struct Bufs {
    size_t n = 0;
    void* p = nullptr;          // float or bf16
    void* g = nullptr;          // float or bf16
    float* master = nullptr;
    void* m = nullptr;          // float, bf16 or codes
    void* v = nullptr;
    float* vmax = nullptr;
    float* absm = nullptr;      // 8-bit state: per-block absmax
    float* absv = nullptr;
    float* maps = nullptr;
    float* m32 = nullptr;       // 8-bit state: fp32 m, v of the small tensors
    float* v32 = nullptr;
    size_t nblocks = 0, nsmall = 0; // 8-bit state: quantization blocks, small tensors' elements
    OptimSegment* segs = nullptr;
    int nseg = 0;
    float* scale = nullptr;     // [0] clip scale, [1] norm, [2] sum of squares
    float* scratch = nullptr;   // global-norm partials
    OptimState st = {};         // versions 5, 6a, 6b: the optimizer's state (m, v, ... point into it)
    bool prod = false;
};

static unsigned grid_for(size_t work, int block) {
    size_t b = CEIL_DIV(work, (size_t)block), cap = (size_t)cuda_sm_count() * (2048 / block);
    return (unsigned)std::max<size_t>(1, std::min(b, cap));
}

static void run_v1(const Case&, Bufs& b, const Problem&, const LabHyper& hp, int step, cudaStream_t st) {
    launch(adamw_v1_kernel, (unsigned)CEIL_DIV(b.n, (size_t)256), 256, 0, st, (float*)b.p, (const float*)b.g,
           (float*)b.m, (float*)b.v, b.n, b.segs, b.nseg, hp.lr, hp.beta1, hp.beta2, hp.eps, step, b.scale);
}
static void run_v2(const Case&, Bufs& b, const Problem&, const LabHyper& hp, int step, cudaStream_t st) {
    launch(adamw_v2_kernel, (unsigned)CEIL_DIV(b.n, (size_t)256), 256, 0, st, (float*)b.p, (const float*)b.g,
           (float*)b.m, (float*)b.v, b.n, b.segs, b.nseg, lab_step_args(hp, step), b.scale);
}
static void run_v3(const Case&, Bufs& b, const Problem&, const LabHyper& hp, int step, cudaStream_t st) {
    launch(adamw_v3_kernel, grid_for(b.n / 4 + 1, 512), 512, optim_segments_smem_bytes(b.nseg), st, (float*)b.p,
           (const float*)b.g, (float*)b.m, (float*)b.v, b.n, b.segs, b.nseg, lab_step_args(hp, step), b.scale);
}
static void run_v4(const Case&, Bufs& b, const Problem&, const LabHyper& hp, int step, cudaStream_t st) {
    launch(adamw_v4_kernel, grid_for(b.n / 8 + 1, 512), 512, optim_segments_smem_bytes(b.nseg), st,
           (__nv_bfloat16*)b.p, b.master, (const __nv_bfloat16*)b.g, (float*)b.m, (float*)b.v, b.n, b.segs, b.nseg,
           lab_step_args(hp, step), b.scale);
}
// Versions 5, 6a, 6b: the production launch of the AdamW rule, optim_launch (llmc/optim/update.cuh:
// the kernel optim_step_gpu picks for AdamW), on the case's state (alloc_case). (Not optim_step_gpu
// itself: it instantiates every rule, which doubles this lab's build: 25 s against 12 s.)
OPT_PART_ADAMW(extern, float)  // (fp32 and bf16 parameters with their own grads: the lab's parts)
OPT_PART_ADAMW(extern, __nv_bfloat16)
template <typename Tp, typename Tg>
static void run_prod(const Case& c, Bufs& b, const Problem&, const LabHyper& hp, int step, cudaStream_t st) {
    const OptimStepArgs a = optim_step_args(&b.st.cfg, hp.lr, step);
    const bool sr = sizeof(Tp) == 2 && hp.stochastic_rounding != 0;
    if (c.amsgrad) optim_launch<OP_AMSGRAD, Tp, Tg>(&b.st, (Tp*)b.p, b.master, (const Tg*)b.g, nullptr, a, sr, b.scale, st);
    else optim_launch<OP_ADAMW, Tp, Tg>(&b.st, (Tp*)b.p, b.master, (const Tg*)b.g, nullptr, a, sr, b.scale, st);
}

static const Case kCases[] = {
    {"1", "1  naive", P_F32, false, false, false, false, S_F32, run_v1, false},
    {"2", "2  registers+fma", P_F32, false, false, false, false, S_F32, run_v2, false},
    {"3", "3  vectorized", P_F32, false, false, false, false, S_F32, run_v3, false},
    {"4", "4  bf16+master+SR", P_BF16, true, true, false, true, S_F32, run_v4, false},
    {"5", "5  prod fp32", P_F32, false, false, false, false, S_F32, run_prod<float, float>, true},
    {"5", "5  prod bf16+master+SR", P_BF16, true, true, false, true, S_F32, run_prod<__nv_bfloat16, __nv_bfloat16>, false},
    {"5", "5  prod bf16 SR", P_BF16, true, false, false, true, S_F32, run_prod<__nv_bfloat16, __nv_bfloat16>, false},
    {"5", "5  prod fp32 p, bf16 g", P_F32, true, false, false, false, S_F32, run_prod<float, __nv_bfloat16>, false},
    {"5", "5  prod fp32 AMSGrad", P_F32, false, false, true, false, S_F32, run_prod<float, float>, false},
    {"6a", "6a bf16 m,v SR", P_F32, false, false, false, true, S_BF16, run_prod<float, float>, false},
    {"6b", "6b 8-bit m,v", P_F32, false, false, false, false, S_Q8, run_prod<float, float>, false},
};

// The hyperparameters of a case: lr 1e-3, beta1 0.9, beta2 0.95, eps 1e-8, seed 1234, index_base 0;
// AMSGrad and stochastic rounding as the case says.
static LabHyper hyper_of(const Case& c) {
    LabHyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0, 1, 1234};
    h.amsgrad = c.amsgrad;
    h.stochastic_rounding = c.stochastic;
    return h;
}

// Bytes each step moves per parameter (reads + writes).
static int bytes_per_param(const Case& c) {
    int p = c.ptype == P_F32 ? 4 : 2, g = c.bf16_grads ? 2 : 4;
    int st = c.state == S_F32 ? 4 : c.state == S_BF16 ? 2 : 1;
    int b = g + 2 * 2 * st;                       // grads read; m, v read and written
    b += c.master ? 2 * 4 + p : 2 * p;            // master rw + params write, or params rw
    if (c.amsgrad) b += 2 * 4;
    return b;
}

static OptimSegment* segs_upload(const std::vector<OptimSegment>& segs) {
    OptimSegment* d = nullptr;
    cudaCheck(cudaMalloc((void**)&d, segs.size() * sizeof(OptimSegment)));
    cudaCheck(cudaMemcpy(d, segs.data(), segs.size() * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    return d;
}

static void alloc_case(const Case& c, const Problem& pb, Bufs& b) {
    b.n = pb.n;
    size_t pe = c.ptype == P_F32 ? 4 : 2, ge = c.bf16_grads ? 2 : 4;
    cudaCheck(cudaMalloc(&b.p, pb.n * pe));
    cudaCheck(cudaMalloc(&b.g, pb.n * ge));
    if (c.master) cudaCheck(cudaMalloc((void**)&b.master, pb.n * 4));
    b.prod = c.id[0] == '5' || c.id[0] == '6';
    if (b.prod) {  // the optimizer's state, zeroed; the lab reads and resets it through b's pointers
        OptimConfig cfg = lab_config(hyper_of(c));
        cfg.state = c.state == S_F32 ? OPT_STATE_FP32 : c.state == S_BF16 ? OPT_STATE_BF16 : OPT_STATE_INT8;
        optim_state_init_device(&b.st, &cfg, pb.segs.data(), (int)pb.segs.size(), pb.n);
        const OptimSlots sl = optim_state_slots(&b.st);
        b.m = c.state == S_F32 ? (void*)sl.f32[0] : c.state == S_BF16 ? (void*)sl.h16[0] : (void*)sl.q8[0];
        b.v = c.state == S_F32 ? (void*)sl.f32[1] : c.state == S_BF16 ? (void*)sl.h16[1] : (void*)sl.q8[1];
        b.vmax = sl.f32[2];
        b.absm = sl.absmax[0];
        b.absv = sl.absmax[1];
        b.m32 = sl.small[0];
        b.v32 = sl.small[1];
        b.maps = b.st.maps;
        b.nblocks = b.st.nblocks;
        b.nsmall = b.st.nsmall;
    } else {  // versions 1-4: fp32 m, v of their own
        cudaCheck(cudaMalloc(&b.m, pb.n * 4));
        cudaCheck(cudaMalloc(&b.v, pb.n * 4));
    }
    b.segs = segs_upload(pb.segs);
    b.nseg = (int)pb.segs.size();
    cudaCheck(cudaMalloc((void**)&b.scale, 3 * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&b.scratch, GLOBAL_NORM_MAX_BLOCKS * sizeof(float)));
}

static void free_case(Bufs& b) {
    if (b.prod) {
        optim_state_free_device(&b.st);
        b.m = b.v = nullptr;
    }
    void* ps[] = {b.p, b.g, b.master, b.m, b.v, b.segs, b.scale, b.scratch};
    for (void* p : ps) cudaCheck(cudaFree(p));
    b = Bufs();
}

// Initial state: params from init_param (rounded to bf16 for bf16 params; master = the same
// values), m = v = 0. Returns the initial parameters as the device holds them.
static std::vector<float> init_case(const Case& c, const Problem& pb, Bufs& b) {
    std::vector<float> p0(pb.n);
#pragma omp parallel for schedule(static) if (pb.n > OMP_MIN)
    for (long long i = 0; i < (long long)pb.n; i++) {
        float x = init_param(pb, (size_t)i);
        p0[i] = c.ptype == P_BF16 ? bf16_round(x) : x;
    }
    if (c.ptype == P_F32) {
        cudaCheck(cudaMemcpy(b.p, p0.data(), pb.n * 4, cudaMemcpyHostToDevice));
    } else {
        std::vector<__nv_bfloat16> h(pb.n);
        for (size_t i = 0; i < pb.n; i++) h[i] = __float2bfloat16(p0[i]);
        cudaCheck(cudaMemcpy(b.p, h.data(), pb.n * 2, cudaMemcpyHostToDevice));
    }
    if (c.master) cudaCheck(cudaMemcpy(b.master, p0.data(), pb.n * 4, cudaMemcpyHostToDevice));
    if (!b.prod) {  // (the production state starts zeroed: optim_state_init_device)
        cudaCheck(cudaMemset(b.m, 0, pb.n * 4));
        cudaCheck(cudaMemset(b.v, 0, pb.n * 4));
    }
    return p0;
}

// Uploads step t's gradients (rounded to bf16 for bf16 grads; g is updated to what the device sees).
static void upload_grads(const Case& c, Bufs& b, std::vector<float>& g) {
    if (!c.bf16_grads) {
        cudaCheck(cudaMemcpy(b.g, g.data(), b.n * 4, cudaMemcpyHostToDevice));
        return;
    }
    std::vector<__nv_bfloat16> h(b.n);
    for (size_t i = 0; i < b.n; i++) {
        h[i] = __float2bfloat16(g[i]);
        g[i] = __bfloat162float(h[i]);
    }
    cudaCheck(cudaMemcpy(b.g, h.data(), b.n * 2, cudaMemcpyHostToDevice));
}

// Global norm and clip scale on the device, into b.scale = {scale, norm, sumsq}.
static void device_clip_scale(const Case& c, Bufs& b, float max_norm, cudaStream_t st) {
    if (c.bf16_grads) global_norm_squared(b.scale + 2, (const __nv_bfloat16*)b.g, b.n, b.scratch, st);
    else global_norm_squared(b.scale + 2, (const float*)b.g, b.n, b.scratch, st);
    global_norm_clip_scale(b.scale, b.scale + 1, b.scale + 2, max_norm, st);
}

// ----------------------------------------------------------------------------
// float64 reference

typedef RefState Ref; // lab_optim.h

static void ref_step(Ref& r, const Problem& pb, const std::vector<float>& g, double scale, const LabHyper& hp,
                     bool amsgrad, int t) {
    const double b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (const OptimSegment& s : pb.segs) {
        const double wd = s.weight_decay, lr = (double)hp.lr * s.lr_mult;
#pragma omp parallel for schedule(static) if (s.count > OMP_MIN)
        for (long long k = 0; k < (long long)s.count; k++) {
            size_t i = s.offset + (size_t)k;
            double gi = (double)g[i] * scale;
            double m = b1 * r.m[i] + (1.0 - b1) * gi;
            double v = b2 * r.v[i] + (1.0 - b2) * gi * gi;
            double vv = v;
            if (amsgrad) { r.vmax[i] = std::max(r.vmax[i], v); vv = r.vmax[i]; }
            r.p[i] -= lr * ((m / bc1) / (sqrt(vv / bc2) + eps) + wd * r.p[i]);
            r.m[i] = m;
            r.v[i] = v;
            r.p_hist[i] = std::max(r.p_hist[i], fabs(r.p[i]));
            r.m_hist[i] = std::max(r.m_hist[i], fabs(m));
            r.v_hist[i] = std::max(r.v_hist[i], v);
        }
    }
}

// ----------------------------------------------------------------------------
// comparison with stated tolerances

struct Field {
    const char* name;
    std::vector<double> got;
};

// Counts elements with |got - want| > tol(i); prints the first 10. Returns the worst |err|/tol.
template <typename TolFn>
static double compare(const char* what, const Problem& pb, const std::vector<double>& got, const std::vector<double>& want,
                      TolFn tol, size_t& bad) {
    double worst = 0.0;
    long long nbad = 0;
    const long long n = (long long)got.size();
#pragma omp parallel for reduction(max : worst) reduction(+ : nbad) schedule(static) if (n > OMP_MIN)
    for (long long i = 0; i < n; i++) {
        double ratio = fabs(got[i] - want[i]) / tol((size_t)i);
        if (ratio != ratio) ratio = INFINITY; // NaN: a failure
        if (ratio > 1.0) nbad++;
        if (ratio > worst) worst = ratio;
    }
    if (nbad > 0) {
        size_t shown = 0;
        for (long long i = 0; i < n && shown < 10; i++) {
            double err = fabs(got[i] - want[i]), t = tol((size_t)i);
            if (err / t <= 1.0) continue;
            size_t s = &seg_of(pb, (size_t)i) - pb.segs.data();
            printf("      mismatch %s[%lld] (tensor %zu): got %.9g want %.9g |err| %.3g > tol %.3g\n", what, i, s,
                   got[i], want[i], err, t);
            shown++;
        }
        printf("      %s: %lld of %lld elements out of tolerance\n", what, nbad, n);
    }
    bad += (size_t)nbad;
    lab_note_worst(worst);
    return worst;
}

static std::vector<double> download(const void* d, size_t n, int kind) { // kind: 0 f32, 1 bf16
    std::vector<double> out(n);
    if (kind == 0) {
        std::vector<float> h(n);
        cudaCheck(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
#pragma omp parallel for schedule(static) if ((long long)n > OMP_MIN)
        for (long long i = 0; i < (long long)n; i++) out[i] = h[i];
    } else {
        std::vector<__nv_bfloat16> h(n);
        cudaCheck(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
#pragma omp parallel for schedule(static) if ((long long)n > OMP_MIN)
        for (long long i = 0; i < (long long)n; i++) out[i] = __bfloat162float(h[i]);
    }
    return out;
}

// The quantization block of every element (blocks per tensor: optim_blocks_build), and each
// tensor's packed fp32 offset when it is small (optim_small_build).
struct Q8Layout {
    std::vector<size_t> block0, small_off, block_of;
};
static Q8Layout q8_layout(const Problem& pb) {
    Q8Layout L;
    int nseg = (int)pb.segs.size();
    L.block0.resize(nseg + 1);
    L.small_off.resize(nseg);
    optim_blocks_build(pb.segs.data(), nseg, L.block0.data());
    optim_small_build(pb.segs.data(), nseg, L.small_off.data());
    L.block_of.resize(pb.n);
    for (int s = 0; s < nseg; s++)
        for (size_t k = 0; k < pb.segs[s].count; k++) L.block_of[pb.segs[s].offset + k] = L.block0[s] + k / OPT_BLOCK;
    return L;
}

// Dequantized 8-bit state (codes * block absmax, the map by its definition: lab_quant8_maps; small
// tensors from the packed fp32 state).
static std::vector<double> download_q8(const void* codes, const float* absmax, const float* f32, const Problem& pb,
                                       const Bufs& b, bool is_m) {
    const size_t n = pb.n;
    Q8Layout L = q8_layout(pb);
    std::vector<unsigned char> c(n);
    std::vector<float> am(std::max<size_t>(b.nblocks, 1)), small(std::max<size_t>(b.nsmall, 1));
    const std::vector<float> map = lab_quant8_maps();
    cudaCheck(cudaMemcpy(c.data(), codes, n, cudaMemcpyDeviceToHost));
    if (b.nblocks > 0) cudaCheck(cudaMemcpy(am.data(), absmax, b.nblocks * 4, cudaMemcpyDeviceToHost));
    if (b.nsmall > 0) cudaCheck(cudaMemcpy(small.data(), f32, b.nsmall * 4, cudaMemcpyDeviceToHost));
    std::vector<double> out(n);
    for (size_t s = 0; s < pb.segs.size(); s++) {
        const OptimSegment& sg = pb.segs[s];
        for (size_t k = 0; k < sg.count; k++) {
            size_t i = sg.offset + k;
            out[i] = L.small_off[s] != OPT_NOT_SMALL ? (double)small[L.small_off[s] + k]
                                                     : (double)map[(is_m ? 0 : 256) + c[i]] * am[L.block_of[i]];
        }
    }
    return out;
}

// Tolerances (why; the rounding bounds below are allowed twice over, lab.h's kLabMargin):
//  fp32 state: m, v differ from float64 by the rounding of a few fp32 operations per step, and
//   the error of earlier steps decays with beta: rel 2e-6 * t (a handful of 2^-24 ulps per step),
//   abs 1e-6 of the largest |m| (v) the element has had (cancellation in m).
//  fp32 params: each step adds a rounding of p (2^-24 rel) and an update error of a few ulps of
//   lr: rel 1e-6 * t, abs 1e-5 * lr * t. Version 1 recomputes beta^t with powf: same bounds.
//  bf16 params, stochastic, no master: each step's rounding error is below one bf16 ulp of the
//   value then: t * ulp_bf16(max(|p| over the steps, |p| on the device)) (plus the fp32 bound).
//  bf16 params with master: stochastic, exactly the master rounded with the step's random bits as
//   llmc/optim/srng.h defines them (computed here: lab_optim.h's lab_sr_*, not with the kernels'
//   adamw_step_args), and the mean of (p - master) / ulp over the tensor within 0.02 of 0
//   (unbiased; checked when n >= 10,000, where its standard deviation is below 0.004); to nearest,
//   within half an ulp.
//  bf16 m, v (6a): each step adds < 1 ulp (2^-8 relative) and old errors decay by beta:
//   |err| <= min(t, 1/(1-beta)) * 2^-7 * max_t |m| (v). The update then differs by a few % of
//   lr: params abs 0.1 * lr * t.
//  8-bit m, v (6b): one quantization is within half a code gap, at most 0.0071 of the block's
//   absmax for m (0.9/64/2) and 0.0036 for v; errors decay by beta as above. Parameters: the update
//   uses the fp32 values of this step, but m/v carry quantization errors that change m/sqrt(v)
//   by up to tens of % for elements much smaller than their block's absmax: abs 0.5 * lr * t.
static bool check_case(const Case& c, const Problem& pb, const Bufs& b, const Ref& r, const LabHyper& hp, int t) {
    size_t bad = 0;
    const size_t n = pb.n;
    std::vector<double> lr_eff(n);
    for (const OptimSegment& s : pb.segs)
        for (size_t k = 0; k < s.count; k++) lr_eff[s.offset + k] = (double)hp.lr * s.lr_mult;
    std::vector<double> mgot, vgot;
    double eps_state = 2e-6 * t;
    if (c.state == S_F32) {
        mgot = download(b.m, n, 0);
        vgot = download(b.v, n, 0);
    } else if (c.state == S_BF16) {
        mgot = download(b.m, n, 1);
        vgot = download(b.v, n, 1);
    } else {
        mgot = download_q8(b.m, b.absm, b.m32, pb, b, true);
        vgot = download_q8(b.v, b.absv, b.v32, pb, b, false);
        if (!lab_maps_match(b.maps)) bad++; // the kernel's map (quant8_maps) is the definition's
    }
    double wm = 0, wv = 0, wp = 0, wx = 0;
    if (c.state == S_F32) {
        wm = compare("m", pb, mgot, r.m, [&](size_t i) { return eps_state * fabs(r.m[i]) + 1e-6 * r.m_hist[i] + 1e-30; }, bad);
        wv = compare("v", pb, vgot, r.v, [&](size_t i) { return eps_state * fabs(r.v[i]) + 1e-6 * r.v_hist[i] + 1e-30; }, bad);
    } else if (c.state == S_BF16) {
        double km = std::min<double>(t, 1.0 / (1.0 - hp.beta1)), kv = std::min<double>(t, 1.0 / (1.0 - hp.beta2));
        wm = compare("m", pb, mgot, r.m, [&](size_t i) { return kLabMargin * km * 0x1p-7 * r.m_hist[i] + 1e-30; }, bad);
        wv = compare("v", pb, vgot, r.v, [&](size_t i) { return kLabMargin * kv * 0x1p-7 * r.v_hist[i] + 1e-30; }, bad);
    } else {
        Q8Layout L = q8_layout(pb);
        std::vector<double> bm(L.block0.back(), 0.0), bv(bm.size(), 0.0);
        for (size_t i = 0; i < n; i++) {
            bm[L.block_of[i]] = std::max(bm[L.block_of[i]], r.m_hist[i]);
            bv[L.block_of[i]] = std::max(bv[L.block_of[i]], r.v_hist[i]);
        }
        double km = std::min<double>(t, 1.0 / (1.0 - hp.beta1)), kv = std::min<double>(t, 1.0 / (1.0 - hp.beta2));
        wm = compare("m", pb, mgot, r.m, [&](size_t i) { return kLabMargin * km * 0.0072 * bm[L.block_of[i]] + 1e-30; }, bad);
        wv = compare("v", pb, vgot, r.v, [&](size_t i) { return kLabMargin * kv * 0.0037 * bv[L.block_of[i]] + 1e-30; }, bad);
    }
    // parameters: the fp32 ones (params or master) against float64
    std::vector<double> pg = c.master ? download(b.master, n, 0) : download(b.p, n, c.ptype == P_F32 ? 0 : 1);
    double p_abs = c.state == S_F32 ? 1e-5 : c.state == S_BF16 ? 0.1 : 0.5;
    bool bf16_p = c.ptype == P_BF16 && !c.master;
    wp = compare(c.master ? "master" : "p", pb, pg, r.p, [&](size_t i) {
        double tol = 1e-6 * t * fabs(r.p[i]) + p_abs * lr_eff[i] * t + 1e-30;
        if (bf16_p) tol += kLabMargin * t * ulp_bf16(std::max(r.p_hist[i], fabs(pg[i])));
        return tol;
    }, bad);
    if (c.master) { // bf16 params are the rounded master weights
        std::vector<double> pb16 = download(b.p, n, 1);
        double mean = 0.0;
        if (c.stochastic) { // exactly: the master rounded with step t's random bits, by definition (lab_optim.h)
            const uint64_t key = lab_sr_key(hp.seed, t);
            long long wrong = 0;
            for (size_t i = 0; i < n; i++) wrong += lab_sr_bf16((float)pg[i], lab_sr_bits(key, i, 0)) != (float)pb16[i];
            if (wrong) printf("      p(bf16): %lld of %zu elements are not the master rounded with step %d's random bits\n", wrong, n, t);
            bad += (size_t)wrong;
        } else {
            wx = compare("p(bf16)", pb, pb16, pg, [&](size_t i) { return 0.5 * ulp_bf16(pg[i]); }, bad);
        }
#pragma omp parallel for reduction(+ : mean) schedule(static) if ((long long)n > OMP_MIN)
        for (long long i = 0; i < (long long)n; i++) mean += (pb16[i] - pg[i]) / ulp_bf16(pg[i]);
        mean /= (double)n;
        if (c.stochastic && n >= 10000 && fabs(mean) > 0.02) {
            printf("      stochastic rounding biased: mean (p - master)/ulp = %.4f\n", mean);
            bad++;
        }
    }
    if (c.amsgrad) {
        std::vector<double> vm = download(b.vmax, n, 0);
        compare("vmax", pb, vm, r.vmax, [&](size_t i) { return eps_state * fabs(r.vmax[i]) + 1e-6 * r.v_hist[i] + 1e-30; }, bad);
    }
    if (!g_quiet || bad) {
        printf("    %-24s step %2d: worst err/tol  p %.3f  m %.3f  v %.3f%s  %s\n", c.name, t, wp, wm, wv,
               !c.master ? "" : c.stochastic ? "  p(bf16) exact" : (std::string("  p(bf16) ") + std::to_string(wx).substr(0, 5)).c_str(),
               bad ? "FAIL" : "ok");
    }
    return bad == 0;
}

// Global norm: reproducible bits and agreement with float64.
static bool check_global_norm(const Case& c, Bufs& b, const std::vector<float>& g, float max_norm) {
    float h1[3], h2[3];
    device_clip_scale(c, b, max_norm, 0);
    cudaCheck(cudaMemcpy(h1, b.scale, sizeof h1, cudaMemcpyDeviceToHost));
    device_clip_scale(c, b, max_norm, 0);
    cudaCheck(cudaMemcpy(h2, b.scale, sizeof h2, cudaMemcpyDeviceToHost));
    double norm = sqrt(sum_squares(g)), scale = norm > max_norm ? max_norm / norm : 1.0;
    bool same = memcmp(h1, h2, sizeof h1) == 0;
    bool close = fabs(h1[1] - norm) <= 1e-5 * norm && fabs(h1[0] - scale) <= 1e-5 * scale;
    if (!same || !close) {
        printf("    global norm: %.9g (float64 %.9g), scale %.9g (%.9g), two runs %s: FAIL\n", h1[1], norm, h1[0],
               scale, same ? "identical" : "DIFFER");
    }
    return same && close;
}

// The CPU trainer's update (llmc/optim/optim.h) on the same inputs and the device's clip scale. Equal bits
// need the same operations (llmc/optim/rules.h): reported, not a failure.
struct CpuTwin {
    std::vector<float> p, m, v;
    std::vector<OptimSegment> segs;
};

static void cpu_twin_step(CpuTwin& tw, const std::vector<float>& g, const LabHyper& hp, int t, float scale) {
    const OptimConfig c = lab_config(hp);  // (weight decay per segment; the clip scale is given)
    LabOmpLimit omp((long long)tw.p.size());
    adamw_update_cpu(tw.p.data(), g.data(), tw.m.data(), tw.v.data(), tw.segs.data(), (int)tw.segs.size(), &c, hp.lr, t,
                     scale);
}

static bool cpu_twin_report(const CpuTwin& tw, const Bufs& b, int t) {
    const std::vector<float>* host[3] = {&tw.p, &tw.m, &tw.v};
    const void* dev[3] = {b.p, b.m, b.v};
    const char* names[3] = {"p", "m", "v"};
    std::string line;
    bool all_same = true;
    for (int k = 0; k < 3; k++) {
        std::vector<float> d(b.n);
        cudaCheck(cudaMemcpy(d.data(), dev[k], b.n * 4, cudaMemcpyDeviceToHost));
        size_t same = 0;
        long long worst = 0;
        for (size_t i = 0; i < b.n; i++) {
            int32_t x, y;
            memcpy(&x, &d[i], 4);
            memcpy(&y, &(*host[k])[i], 4);
            same += x == y;
            worst = std::max(worst, llabs((long long)x - (long long)y)); // ulps, for equal signs
        }
        all_same &= same == b.n;
        char buf[96];
        snprintf(buf, sizeof buf, "  %s %.2f%% (max %lld ulp)", names[k], 100.0 * same / b.n, worst);
        line += buf;
    }
    if (!g_quiet || !all_same) {
        printf("    %-24s step %2d: bit-identical to llmc/optim/optim.h adamw_update_cpu:%s%s\n", "", t, line.c_str(),
               all_same ? "" : "  <-- FAIL");
    }
    return all_same;
}

static bool check_views(const Case& c, const Problem& pb, const LabHyper& hp, int steps); // below

// Runs `steps` steps of one case; checks after steps 1, 2 and the last; then the views.
static bool check_one(const Case& c, const Problem& pb, const LabHyper& hp, int steps) {
    Bufs b;
    alloc_case(c, pb, b);
    std::vector<float> p0 = init_case(c, pb, b);
    Ref r;
    ref_state_init(r, p0);
    CpuTwin tw;
    if (c.cpu_twin) {
        tw.p = p0;
        tw.m.assign(pb.n, 0.0f);
        tw.v.assign(pb.n, 0.0f);
        tw.segs = pb.segs;
    }
    std::vector<float> g;
    bool ok = true;
    for (int t = 1; t <= steps; t++) {
        make_grads(pb, t, g);
        upload_grads(c, b, g);
        double norm = sqrt(sum_squares(g));
        float max_norm = (float)(t % 2 ? 0.8 * norm : 2.0 * norm); // odd steps clip, even steps do not
        if (t == 1) ok = check_global_norm(c, b, g, max_norm) && ok;
        device_clip_scale(c, b, max_norm, 0);
        c.step(c, b, pb, hp, t, 0);
        cudaCheck(cudaDeviceSynchronize());
        double scale = norm > (double)max_norm ? (double)max_norm / norm : 1.0;
        ref_step(r, pb, g, scale, hp, c.amsgrad, t);
        if (c.cpu_twin) {
            float dscale;
            cudaCheck(cudaMemcpy(&dscale, b.scale, sizeof dscale, cudaMemcpyDeviceToHost));
            cpu_twin_step(tw, g, hp, t, dscale);
        }
        if (t == 1 || t == 2 || t == steps) {
            ok = check_case(c, pb, b, r, hp, t) && ok;
            if (c.cpu_twin) ok = cpu_twin_report(tw, b, t) && ok;
        }
    }
    free_case(b);
    return check_views(c, pb, hp, std::min(steps, 3)) && ok;
}

// ----------------------------------------------------------------------------
// views: the production kernels (versions 5, 6a, 6b) through buffers that hold part of the model

// Versions 5, 6a and 6b take any segment table: run a case's steps over the whole model and over
// the parts of a view (lab_optim.h view_build: ZeRO-1 shards, BAdam blocks, offload chunks,
// pieces; each part with its own gradients, m, v, master and tables, offset rebased, param
// global, the parameters shared); after `steps` steps the parameters, master weights and the
// values of m and v must be the whole model's, bit for bit.
static bool check_views(const Case& c, const Problem& pb, const LabHyper& hp, int steps) {
    if (c.id[0] != '5' && c.id[0] != '6') return true; // versions 1-4 assume param == offset
    static const char* const kViews[] = {"zero", "badam", "chunks", "pieces"};
    const size_t pe = c.ptype == P_F32 ? 4 : 2;
    const int sk = c.state == S_BF16 ? 1 : 0;
    bool ok = true;
    for (const char* name : kViews) {
        Bufs w;
        alloc_case(c, pb, w);
        const std::vector<float> p0 = init_case(c, pb, w);
        std::vector<ViewPart> parts = view_build(name, pb, c.state == S_Q8 ? OPTIM_CUT_BLOCK : OPTIM_CUT_ELEMENT);
        std::vector<Problem> ppb(parts.size());
        std::vector<Bufs> pbuf(parts.size());
        void* params = nullptr;
        cudaCheck(cudaMalloc(&params, pb.n * pe));
        for (size_t k = 0; k < parts.size(); k++) {
            ppb[k].n = parts[k].n;
            ppb[k].segs = parts[k].segs;
            alloc_case(c, ppb[k], pbuf[k]);
            init_case(c, ppb[k], pbuf[k]); // zero state; parameters and master set below
            cudaCheck(cudaFree(pbuf[k].p));
            pbuf[k].p = params;
            if (c.master) cudaCheck(cudaMemcpy(pbuf[k].master, view_gather(parts[k], p0).data(), parts[k].n * 4, cudaMemcpyHostToDevice));
        }
        cudaCheck(cudaMemcpy(params, w.p, pb.n * pe, cudaMemcpyDeviceToDevice)); // the whole model's
        std::vector<float> g;
        for (int t = 1; t <= steps; t++) {
            make_grads(pb, t, g);
            upload_grads(c, w, g); // g: what the device sees
            const float scale = t % 2 ? 0.7f : 1.0f;
            cudaCheck(cudaMemcpy(w.scale, &scale, sizeof scale, cudaMemcpyHostToDevice));
            c.step(c, w, pb, hp, t, 0);
            for (size_t k = 0; k < parts.size(); k++) {
                std::vector<float> gk = view_gather(parts[k], g);
                upload_grads(c, pbuf[k], gk);
                cudaCheck(cudaMemcpy(pbuf[k].scale, &scale, sizeof scale, cudaMemcpyHostToDevice));
                c.step(c, pbuf[k], ppb[k], hp, t, 0);
            }
        }
        cudaCheck(cudaDeviceSynchronize());
        std::vector<unsigned char> wp(pb.n * pe), vp(pb.n * pe);
        cudaCheck(cudaMemcpy(wp.data(), w.p, pb.n * pe, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(vp.data(), params, pb.n * pe, cudaMemcpyDeviceToHost));
        long long dp = 0, dm = 0, ds = 0;
        for (size_t i = 0; i < pb.n * pe; i++) dp += wp[i] != vp[i];
        auto values = [&](const Bufs& b, const Problem& q, bool is_m) {
            if (c.state == S_Q8) return download_q8(is_m ? b.m : b.v, is_m ? b.absm : b.absv, is_m ? b.m32 : b.v32, q, b, is_m);
            return download(is_m ? b.m : b.v, q.n, sk);
        };
        const std::vector<double> wm = values(w, pb, true), wv = values(w, pb, false);
        const std::vector<double> wx = c.master ? download(w.master, pb.n, 0) : std::vector<double>();
        for (size_t k = 0; k < parts.size(); k++) {
            const std::vector<double> m = values(pbuf[k], ppb[k], true), v = values(pbuf[k], ppb[k], false);
            const std::vector<double> x = c.master ? download(pbuf[k].master, parts[k].n, 0) : std::vector<double>();
            for (const OptimSegment& sg : parts[k].segs) {
                for (size_t j = 0; j < sg.count; j++) {
                    const size_t i = sg.offset + j, gi = sg.param + j;
                    ds += memcmp(&m[i], &wm[gi], 8) != 0 || memcmp(&v[i], &wv[gi], 8) != 0;
                    if (c.master) dm += memcmp(&x[i], &wx[gi], 8) != 0;
                }
            }
            pbuf[k].p = nullptr; // shared: freed below
            free_case(pbuf[k]);
        }
        cudaCheck(cudaFree(params));
        free_case(w);
        const bool same = dp == 0 && dm == 0 && ds == 0;
        if (!g_quiet || !same) {
            printf("    %-24s view %-6s (%zu parts), %d steps: %s (%lld param bytes, %lld master, %lld m/v elements differ)\n",
                   c.name, name, parts.size(), steps, same ? "bit-identical to the whole model" : "DIFFERS", dp, dm, ds);
        }
        ok = ok && same;
    }
    return ok;
}

// ----------------------------------------------------------------------------
// bench

// torch.optim.AdamW(fused=True) on the same tensor sizes, through dev/cuda/adamw_torch.py.
static double torch_ms(const Problem& pb, bool gpt2, int repeats) {
    const char* py = getenv("TORCH_PYTHON");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s dev/cuda/adamw_torch.py %s -n %zu -r %d 2>&1", py && *py ? py : "python3",
             gpt2 ? "--gpt2" : "", pb.n, repeats);
    FILE* p = popen(cmd, "r");
    if (p == nullptr) return -1.0;
    char line[512];
    double ms = -1.0;
    while (fgets(line, sizeof line, p) != nullptr) {
        if (sscanf(line, "torch_adamw_fused_ms %lf", &ms) == 1) continue;
        if (ms < 0) printf("    torch: %s", line);
    }
    pclose(p);
    return ms;
}

static int bench(const std::vector<const Case*>& cases, const Problem& pb, const OptLabArgs& o, bool with_torch) {
    const int repeats = (int)o.repeats;
    const double copy = optlab_bench_begin("AdamW bench", pb, repeats);
    const double t_torch = with_torch ? torch_ms(pb, o.gpt2, repeats) : -1.0;
    if (with_torch) {
        if (t_torch > 0) printf("  torch.optim.AdamW(fused=True): %.4f ms per step\n", t_torch);
        else printf("  torch.optim.AdamW(fused=True): not available\n");
    }
    printf("  %-26s %8s", "version", "B/param");
    lab_gbs_columns_header();
    printf(" %9s\n", "vs torch");
    std::vector<float> g;
    make_grads(pb, 1, g);
    for (const Case* c : cases) {
        const LabHyper h = hyper_of(*c);
        Bufs b;
        alloc_case(*c, pb, b);
        init_case(*c, pb, b);
        std::vector<float> gc(g);
        upload_grads(*c, b, gc);
        device_clip_scale(*c, b, INFINITY, 0);
        int step = 0;
        const float ms = time_ms(repeats, [&] { c->step(*c, b, pb, h, ++step, 0); });
        const int bpp = bytes_per_param(*c);
        char vs[32] = "-";
        const bool comparable = c->ptype == P_F32 && !c->bf16_grads && c->state == S_F32 && !c->amsgrad;
        if (t_torch > 0 && comparable) snprintf(vs, sizeof vs, "%.2fx", t_torch / ms);
        printf("  %-26s %8d", c->name, bpp);
        lab_gbs_columns((double)bpp * pb.n, ms, copy);
        printf(" %9s\n", vs);
        free_case(b);
    }
    return 0;
}

// ----------------------------------------------------------------------------

[[noreturn]] static void usage(const char* prog) {
    optlab_usage(prog, "-v VERSION", "1 2 3 4 5 6a 6b, or all (default)", " [--torch]",
                 "  --torch     --bench also times torch.optim.AdamW(fused=True) (dev/cuda/adamw_torch.py)\n");
}

int main(int argc, char** argv) {
    bool with_torch = false;
    auto extra = [&](LabArgv& args) { // the lab's own flag
        if (!args.is("--torch")) return false;
        with_torch = true;
        return true;
    };
    auto check = [](const Case& c, const Problem& pb, int steps) { return check_one(c, pb, hyper_of(c), steps); };
    auto run_bench = [&](const std::vector<const Case*>& cases, const Problem& pb, const OptLabArgs& o) {
        return bench(cases, pb, o, with_torch);
    };
    return optlab_main(argc, argv, "adamw", usage, "-v", kCases, extra, check, run_bench);
}
