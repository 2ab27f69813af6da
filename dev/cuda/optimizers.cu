/*
 optimizers.cu: the optimizer family lab. Every optimizer x state precision x parameter format
 through the GPU entry point optim_step_gpu (llmc/optim/engine.cuh; the kernels of
 llmc/optim/update.cuh), one driver with two modes:

   --check (default)  per case and problem, S steps with a clip scale (odd steps 0.7), then
     (1) against the CPU implementation, optim_step_cpu of llmc/optim/state.h, run on the same
         inputs: BIT FOR BIT, parameters and the whole state block (moments, codes, absmax, LAMB's
         block sums and trust ratios). Both sides spell out the same fmaf calls, LAMB's sums have
         one fixed order, the 8-bit codes come from one map (llmc/optim/quant8.h) and the random bits of
         stochastic rounding from one hash (llmc/optim/srng.h). bf16 parameters: the CPU twin keeps fp32
         parameters = the master weights, and without master weights rounds them after each step
         with the device's rule (the same bits), so the kernel's inputs stay identical. The rounding
         of the bf16 parameters (and the twin's) uses the step's random bits as lab_optim.h computes
         them from srng.h's definition, and the device's 8-bit maps must be the ones quant8.h defines
         (lab_quant8_maps): a key or a map wrong on both sides alike does not pass. The problem set
         includes GPT-2's shapes at C = 32 (the int8 kernels' 128-bit branch; lab_optim.h).
     (2) against a float64 reference written here from the formulas, with the tolerances below.
     (3) views: the same steps through states that each hold a part of the model, with the
         segments' offset (grads, state, master) rebased and param (the parameters) global, give
         the whole-model launch's bits (parameters, master weights, every element's state):
           zero    3 shards as ZeRO-1 cuts them (zero_shard_elems; int8 state: cut at the
                   tensor's block boundaries, LAMB: at tensor boundaries, so that absmax blocks
                   and trust ratios are the whole model's)
           badam   2 blocks, the even and the odd tensors, each compact (BAdam's slices)
           chunks  4 parts cut at block boundaries (offload's chunks; LAMB: at tensors)
           pieces  one state: the tensors in reverse order, each cut into OPT_BLOCK pieces
                   (LAMB's trust ratio summed over the pieces of a tensor; the int8 rule by the
                   tensor's size; parameters off the 128-bit grid of the state)
   --bench  device-event timing of one step at n parameters (--gpt2: the 148 tensors of GPT-2 124M,
     n = 124,475,904): GB/s from the bytes each step moves, and % of the device-to-device copy.

 Tolerances against float64 (t = step; the bounds below that one rounding can nearly reach are
 allowed twice over, lab.h's kLabMargin, the state's and bf16 params' rounding terms):
   fp32 params (or the master): 1e-6 t |p| + 1e-5 lr t; bf16 params without master add
     t * ulp_bf16(max |p| so far) (one rounding per step); with master, |bf16 p - master| < 1 ulp.
   fp32 state: 2e-6 t |x| + 1e-6 max_t |x| (cancellation in the moments).
   bf16 state (every optimizer): min(t, 1/(1-d)) 2^-7 max_t |x| (one stochastic rounding per step,
     under 1 ulp = 2^-7 relative, shrinking by the moment's decay d per step: SGD's momentum,
     Lion's beta2, beta1 for m and beta2 for v of AdamW and LAMB); p + 0.1 lr t.
   fp16 state (AdamW: m * 2^14, sqrt(v) * 2^14): the same with 2^-10 for m and 2^-9 for v (sqrt
     halves v's relative error), plus fp16's subnormal step 2^-24 / 2^14; p + 0.0125 lr t.
   int8 state (every optimizer): m min(t, 1/(1-d)) 0.0072 x the block's max_t |m|, v with 0.0037
     (half the largest code gap of the signed / unsigned map, llmc/optim/quant8.h); p + 0.5 lr t
     (see dev/test/test_optim.c). LAMB's p: the step is lr * trust * |u|, so lr becomes
     lr * max(1, trust), and twice that with int8 state (|u| of an element whose v quantizes
     toward 0 is not bounded by Adam's ratio).
   Lion with bf16/int8 state: the sign of c is known only beyond beta1 times m's bound; elements
     within it are excluded like the fp32 ones (< 5% of them; fp32 state: < 0.1%).
   LAMB's update is invariant to the scale of u, but the ratio is not: it is not compared here
     (test_optim does, with its bound); its effect, trust * u, is in the parameters.
   Lion: elements whose float64 c is nonzero but within 1e-5 of its terms are excluded (< 0.1%;
     with bf16/int8 state see above).

 usage: optimizers [--check | --bench] [-c CASE] [-n N | --gpt2] [-s STEPS] [-r REPEATS] [-q]
 To add a case: a row in kCases (an OptimConfig and a parameter format).
*/
#include "dev/cuda/lab_optim.h"
#include "dev/cuda/optim_step_parts.h"
#include "llmc/optim/engine.cuh"
#include "llmc/optim/state.h"

// every rule's launchers in both parameter types: built in the lab's parts (dev/cuda/labs.mk)
OPT_PART_ADAMW(extern, float)
OPT_PART_ADAMW(extern, __nv_bfloat16)
OPT_PART_SGD_LION(extern, float)
OPT_PART_SGD_LION(extern, __nv_bfloat16)
OPT_PART_LAMB_MUON(extern, float)
OPT_PART_LAMB_MUON(extern, __nv_bfloat16)

// ----------------------------------------------------------------------------
// the problems (lab_optim.h): deterministic data

static void init_params(const Problem& pb, std::vector<float>& p) {
    p.resize(pb.n);
    for (size_t s = 0; s < pb.segs.size(); s++) {
        const OptimSegment& sg = pb.segs[s];
#pragma omp parallel for schedule(static) if ((long long)sg.count > OMP_MIN)
        for (long long k = 0; k < (long long)sg.count; k++) {
            size_t i = sg.offset + (size_t)k;
            p[i] = (float)(s % 4 == 3 ? 1.0 + 0.1 * normalish(11, i) : 0.02 * normalish(11, i));
        }
    }
}

// Step t's gradients: a per-tensor scale (1e-4 .. 1e-2) times a unit variate; every 7th tensor 0.
static void make_grads(const Problem& pb, int t, std::vector<float>& g) {
    g.resize(pb.n);
    for (size_t s = 0; s < pb.segs.size(); s++) {
        const OptimSegment& sg = pb.segs[s];
        double sc = s % 7 == 6 ? 0.0 : pow(10.0, -4.0 + 2.0 * unit(77, s));
#pragma omp parallel for schedule(static) if ((long long)sg.count > OMP_MIN)
        for (long long k = 0; k < (long long)sg.count; k++) {
            size_t i = sg.offset + (size_t)k;
            g[i] = (float)(sc * normalish(5, (uint64_t)t * 0x100000000ULL + i));
        }
    }
}

static float clip_scale_of_step(int t) { return t % 2 ? 0.7f : 1.0f; }

// ----------------------------------------------------------------------------
// cases

struct Case {
    const char* id;   // -c selects by id (several rows may share one)
    const char* name;
    OptimConfig cfg;
    bool bf16, master, stochastic;  // bf16: parameters and gradients in bf16 (the trainers step one type, floatX)
    float lr;
};

static OptimConfig cfg_of(OptimKind k, OptimStatePrecision st = OPT_STATE_FP32, int amsgrad = 0,
                              int nesterov = 0, float momentum = -1.0f, float dampening = 0.0f) {
    OptimConfig c = optim_config_default(k);
    c.state = st;
    c.amsgrad = amsgrad;
    c.nesterov = nesterov;
    if (momentum >= 0.0f) c.momentum = momentum;
    c.dampening = dampening;
    c.seed = 1234;
    return c;
}

static const Case kCases[] = {
    {"sgd", "sgd momentum", cfg_of(OPT_SGD), false, false, false, 0.05f},
    {"sgd", "sgd momentum, dampening", cfg_of(OPT_SGD, OPT_STATE_FP32, 0, 0, 0.8f, 0.2f), false, false, false, 0.05f},
    {"sgd", "sgd nesterov", cfg_of(OPT_SGD, OPT_STATE_FP32, 0, 1), false, false, false, 0.05f},
    {"sgd", "sgd plain", cfg_of(OPT_SGD, OPT_STATE_FP32, 0, 0, 0.0f), false, false, false, 0.05f},
    {"sgd", "sgd nesterov bf16+master+SR", cfg_of(OPT_SGD, OPT_STATE_FP32, 0, 1), true, true, true, 0.05f},
    {"sgd", "sgd plain bf16 RN", cfg_of(OPT_SGD, OPT_STATE_FP32, 0, 0, 0.0f), true, false, false, 0.05f},
    {"lion", "lion", cfg_of(OPT_LION), false, false, false, 1e-3f},
    {"lion", "lion bf16 SR (no master)", cfg_of(OPT_LION), true, false, true, 1e-3f},
    {"lamb", "lamb", cfg_of(OPT_LAMB), false, false, false, 1e-2f},
    {"lamb", "lamb bf16+master+SR", cfg_of(OPT_LAMB), true, true, true, 1e-2f},
    {"lamb", "lamb bf16 SR (no master)", cfg_of(OPT_LAMB), true, false, true, 1e-2f},
    {"adamw", "adamw", cfg_of(OPT_ADAMW), false, false, false, 1e-3f},
    {"adamw", "adamw amsgrad", cfg_of(OPT_ADAMW, OPT_STATE_FP32, 1), false, false, false, 1e-3f},
    {"adamw", "adamw bf16+master+SR (the trainer's)", cfg_of(OPT_ADAMW), true, true, true, 1e-3f},
    {"adamw-bf16", "adamw bf16 state", cfg_of(OPT_ADAMW, OPT_STATE_BF16), false, false, false, 1e-3f},
    {"adamw-bf16", "adamw bf16 state amsgrad", cfg_of(OPT_ADAMW, OPT_STATE_BF16, 1), false, false, false, 1e-3f},
    {"adamw-bf16", "adamw bf16 state, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_BF16), true, true, true, 1e-3f},
    {"adamw-fp16", "adamw fp16 state", cfg_of(OPT_ADAMW, OPT_STATE_FP16), false, false, false, 1e-3f},
    {"adamw-fp16", "adamw fp16 state amsgrad", cfg_of(OPT_ADAMW, OPT_STATE_FP16, 1), false, false, false, 1e-3f},
    {"adamw-fp16", "adamw fp16 state, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_FP16), true, true, true, 1e-3f},
    {"adamw-int8", "adamw int8 state", cfg_of(OPT_ADAMW, OPT_STATE_INT8), false, false, false, 1e-3f},
    {"adamw-int8", "adamw int8 state, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_INT8), true, true, true, 1e-3f},
    {"adamw-int8", "adamw int8 state, bf16 RN", cfg_of(OPT_ADAMW, OPT_STATE_INT8), true, false, false, 1e-3f},
    {"adamw-int8", "adamw int8 state amsgrad", cfg_of(OPT_ADAMW, OPT_STATE_INT8, 1), false, false, false, 1e-3f},
    {"adamw-int8", "adamw int8 amsgrad, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_INT8, 1), true, true, true, 1e-3f},
    // bf16 and int8 state of SGD, Lion, LAMB (llmc/optim/update.h)
    {"sgd-bf16", "sgd momentum bf16 state", cfg_of(OPT_SGD, OPT_STATE_BF16), false, false, false, 0.05f},
    {"sgd-bf16", "sgd nesterov bf16 state, bf16+mst+SR", cfg_of(OPT_SGD, OPT_STATE_BF16, 0, 1), true, true, true, 0.05f},
    {"sgd-int8", "sgd momentum int8 state", cfg_of(OPT_SGD, OPT_STATE_INT8), false, false, false, 0.05f},
    {"sgd-int8", "sgd nesterov int8 state", cfg_of(OPT_SGD, OPT_STATE_INT8, 0, 1), false, false, false, 0.05f},
    {"sgd-int8", "sgd nesterov int8 state, bf16 RN", cfg_of(OPT_SGD, OPT_STATE_INT8, 0, 1), true, false, false, 0.05f},
    {"lion-bf16", "lion bf16 state", cfg_of(OPT_LION, OPT_STATE_BF16), false, false, false, 1e-3f},
    {"lion-bf16", "lion bf16 state, bf16 SR (no master)", cfg_of(OPT_LION, OPT_STATE_BF16), true, false, true, 1e-3f},
    {"lion-int8", "lion int8 state", cfg_of(OPT_LION, OPT_STATE_INT8), false, false, false, 1e-3f},
    {"lion-int8", "lion int8 state, bf16+master+SR", cfg_of(OPT_LION, OPT_STATE_INT8), true, true, true, 1e-3f},
    {"lamb-bf16", "lamb bf16 state", cfg_of(OPT_LAMB, OPT_STATE_BF16), false, false, false, 1e-2f},
    {"lamb-bf16", "lamb bf16 state, bf16 SR (no master)", cfg_of(OPT_LAMB, OPT_STATE_BF16), true, false, true, 1e-2f},
    {"lamb-int8", "lamb int8 state", cfg_of(OPT_LAMB, OPT_STATE_INT8), false, false, false, 1e-2f},
    {"lamb-int8", "lamb int8 state, bf16+master+SR", cfg_of(OPT_LAMB, OPT_STATE_INT8), true, true, true, 1e-2f},
    // 4-bit state (llmc/optim/quant4.h): AdamW, AMSGrad, SGD, Lion, LAMB
    {"adamw-4bit", "adamw 4bit state", cfg_of(OPT_ADAMW, OPT_STATE_4BIT), false, false, false, 1e-3f},
    {"adamw-4bit", "adamw 4bit state, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_4BIT), true, true, true, 1e-3f},
    {"adamw-4bit", "adamw 4bit state, bf16 RN", cfg_of(OPT_ADAMW, OPT_STATE_4BIT), true, false, false, 1e-3f},
    {"adamw-4bit", "adamw 4bit state amsgrad", cfg_of(OPT_ADAMW, OPT_STATE_4BIT, 1), false, false, false, 1e-3f},
    {"adamw-4bit", "adamw 4bit amsgrad, bf16+master+SR", cfg_of(OPT_ADAMW, OPT_STATE_4BIT, 1), true, true, true, 1e-3f},
    {"sgd-4bit", "sgd momentum 4bit state", cfg_of(OPT_SGD, OPT_STATE_4BIT), false, false, false, 0.05f},
    {"sgd-4bit", "sgd nesterov 4bit state, bf16 RN", cfg_of(OPT_SGD, OPT_STATE_4BIT, 0, 1), true, false, false, 0.05f},
    {"lion-4bit", "lion 4bit state", cfg_of(OPT_LION, OPT_STATE_4BIT), false, false, false, 1e-3f},
    {"lion-4bit", "lion 4bit state, bf16+master+SR", cfg_of(OPT_LION, OPT_STATE_4BIT), true, true, true, 1e-3f},
    {"lamb-4bit", "lamb 4bit state", cfg_of(OPT_LAMB, OPT_STATE_4BIT), false, false, false, 1e-2f},
    {"lamb-4bit", "lamb 4bit state, bf16+master+SR", cfg_of(OPT_LAMB, OPT_STATE_4BIT), true, true, true, 1e-2f},
    {"lamb-4bit", "lamb 4bit state, bf16 SR (no master)", cfg_of(OPT_LAMB, OPT_STATE_4BIT), true, false, true, 1e-2f},
    {"adam-mini", "adam-mini", cfg_of(OPT_ADAM_MINI), false, false, false, 1e-3f},
    {"adam-mini", "adam-mini bf16+master+SR", cfg_of(OPT_ADAM_MINI), true, true, true, 1e-3f},
    {"adam-mini-bf16", "adam-mini bf16 state, bf16 SR (no master)", cfg_of(OPT_ADAM_MINI, OPT_STATE_BF16), true, false, true, 1e-3f},
    {"adam-mini-fp16", "adam-mini fp16 state", cfg_of(OPT_ADAM_MINI, OPT_STATE_FP16), false, false, false, 1e-3f},
    {"adam-mini-int8", "adam-mini int8 state", cfg_of(OPT_ADAM_MINI, OPT_STATE_INT8), false, false, false, 1e-3f},
    {"adam-mini-4bit", "adam-mini 4bit state, bf16+master+SR", cfg_of(OPT_ADAM_MINI, OPT_STATE_4BIT), true, true, true, 1e-3f},
};

// Bytes one step moves per parameter (reads + writes).
static int bytes_per_param(const Case& c) {
    const OptimConfig& k = c.cfg;
    const int ps = c.bf16 ? 2 : 4, g = ps;
    const int pr = c.master ? 4 : ps, pw = (c.master ? 4 : 0) + ps;
    // one state value (int8: + absmax; 4bit: half a byte, counted as 1)
    const int sb = k.state == OPT_STATE_FP32 ? 4 : k.state == OPT_STATE_INT8 || k.state == OPT_STATE_4BIT ? 1 : 2;
    switch (k.kind) {
        case OPT_ADAMW: return g + (k.amsgrad ? 6 : 4) * sb + pr + pw;
        case OPT_SGD: return g + (k.momentum != 0.0f ? 2 * sb : 0) + pr + pw;
        case OPT_LION: return g + 2 * sb + pr + pw;
        case OPT_LAMB: return (pr + g + 4 * sb) + (pr + 2 * sb + pw); // moments pass (m, v read and written), update pass
        case OPT_MUON: return 0;  // not elementwise: its lab is dev/cuda/muon.cu
        case OPT_ADAM_MINI: return 2 * g + 2 * sb + pr + pw;  // (its v pass reads g too)
    }
    return 0;
}

// ----------------------------------------------------------------------------
// device buffers of one case

struct Dev {
    void* p = nullptr;     // fp32 or bf16
    float* master = nullptr;
    void* g = nullptr;     // fp32 or bf16
    float* scale = nullptr;
    OptimState st = {};
};

static void dev_case_alloc(const Case& c, const Problem& pb, Dev& d) {
    cudaCheck(cudaMalloc(&d.p, pb.n * (c.bf16 ? 2 : 4)));
    cudaCheck(cudaMalloc(&d.g, pb.n * (c.bf16 ? 2 : 4)));
    if (c.master) cudaCheck(cudaMalloc((void**)&d.master, pb.n * 4));
    cudaCheck(cudaMalloc((void**)&d.scale, sizeof(float)));
    optim_state_init_device(&d.st, &c.cfg, pb.segs.data(), (int)pb.segs.size(), pb.n);
}

static void dev_case_free(Dev& d) {
    cudaCheck(cudaFree(d.p));
    cudaCheck(cudaFree(d.g));
    cudaCheck(cudaFree(d.master));
    cudaCheck(cudaFree(d.scale));
    optim_state_free_device(&d.st);
    d = Dev();
}

// Uploads parameters (bf16 params: rounded to nearest; the master = the same values). Returns
// the values the device holds as fp32.
static std::vector<float> dev_upload_params(const Case& c, Dev& d, const std::vector<float>& p0) {
    std::vector<float> held(p0);
    if (c.bf16) {
        std::vector<uint16_t> h(p0.size());
        for (size_t i = 0; i < p0.size(); i++) {
            h[i] = bf16_bits_round_nearest(p0[i]);
            held[i] = bf16_bits_to_float(h[i]);
        }
        cudaCheck(cudaMemcpy(d.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    } else {
        cudaCheck(cudaMemcpy(d.p, p0.data(), p0.size() * 4, cudaMemcpyHostToDevice));
    }
    if (c.master) cudaCheck(cudaMemcpy(d.master, held.data(), held.size() * 4, cudaMemcpyHostToDevice));
    return held;
}

// Uploads step t's gradients; g becomes what the device sees (bf16: rounded to nearest).
static void dev_upload_grads(const Case& c, Dev& d, std::vector<float>& g, float scale) {
    if (c.bf16) {
        std::vector<uint16_t> h(g.size());
        for (size_t i = 0; i < g.size(); i++) {
            h[i] = bf16_bits_round_nearest(g[i]);
            g[i] = bf16_bits_to_float(h[i]);
        }
        cudaCheck(cudaMemcpy(d.g, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    } else {
        cudaCheck(cudaMemcpy(d.g, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMemcpy(d.scale, &scale, sizeof scale, cudaMemcpyHostToDevice));
}

static void dev_step(const Case& c, Dev& d, int t, cudaStream_t stream) {
    const bool sr = c.stochastic;
    if (c.bf16)
        optim_step_gpu(&d.st, (__nv_bfloat16*)d.p, d.master, (const __nv_bfloat16*)d.g, c.lr, t, sr, d.scale, stream);
    else
        optim_step_gpu(&d.st, (float*)d.p, d.master, (const float*)d.g, c.lr, t, sr, d.scale, stream);
}

// The device's parameters as fp32 (the bf16 ones widened), and its master weights.
static std::vector<float> dev_params(const Case& c, const Dev& d, size_t n) {
    std::vector<float> out(n);
    if (c.bf16) {
        std::vector<uint16_t> h(n);
        cudaCheck(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) out[i] = bf16_bits_to_float(h[i]);
    } else {
        cudaCheck(cudaMemcpy(out.data(), d.p, n * 4, cudaMemcpyDeviceToHost));
    }
    return out;
}

// ----------------------------------------------------------------------------
// float64 reference

struct Ref : RefState { // lab_optim.h
    std::vector<unsigned char> excluded; // Lion: elements left out of the comparison (see the banner)
    std::vector<double> merr;            // bf16/int8 state: the bound on the stored m's error (ref_m_bounds)
    std::vector<double> trust;           // LAMB: the trust ratio of each segment
};

static void ref_init(Ref& r, const std::vector<float>& p0) {
    ref_state_init(r, p0);
    r.excluded.assign(p0.size(), 0);
    r.merr.assign(p0.size(), 0.0);
}

// The decay of the first moment per step (its rounding errors shrink by it): SGD's momentum,
// Lion's beta2, AdamW's and LAMB's beta1.
static double lowp_m_decay(const OptimConfig& c) {
    return c.kind == OPT_SGD ? c.momentum : c.kind == OPT_LION ? c.beta2 : c.beta1;
}

// After step t, with bf16 or int8 state: the bound on each element's stored m (one rounding per
// step, decaying: min(t, 1/(1-decay)) times 2^-7 of the largest |m| the element had (bf16), or
// 0.0072 of its block's (int8: half the largest code gap); 0 for fp32 state and int8's small
// tensors. The comparisons allow it, and Lion's sign is ambiguous within beta1 times it.
static void ref_m_bounds(Ref& r, const Problem& pb, const OptimConfig& c, const OptimState& cs, int t) {
    if (c.state == OPT_STATE_FP32) return;
    const double km = std::min<double>(t, 1.0 / (1.0 - lowp_m_decay(c)));
    for (size_t s = 0; s < pb.segs.size(); s++) {
        const OptimSegment& sg = pb.segs[s];
        const bool small = (c.state == OPT_STATE_INT8 || c.state == OPT_STATE_4BIT) && cs.small_off[s] != OPT_NOT_SMALL;
        for (size_t k0 = 0; k0 < sg.count; k0 += OPT_BLOCK) {
            const size_t k1 = std::min(sg.count, k0 + OPT_BLOCK);
            double bm = 0.0;
            for (size_t k = k0; k < k1; k++) bm = std::max(bm, r.m_hist[sg.offset + k]);
            for (size_t k = k0; k < k1; k++) {
                const size_t i = sg.offset + k;
                r.merr[i] = small ? 0.0 : c.state == OPT_STATE_BF16 ? km * 0x1p-7 * r.m_hist[i]
                                        : c.state == OPT_STATE_FP16 ? km * (0x1p-10 * r.m_hist[i] + 0x1p-38)
                                        : c.state == OPT_STATE_4BIT ? km * 0.1125 * bm  // (its group's max <= the block's)
                                                                    : km * 0.0072 * bm;
            }
        }
    }
}

static void ref_step(Ref& r, const Problem& pb, const OptimConfig& c, const std::vector<float>& grads, double scale,
                     double lr0, int t) {
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, mu = c.momentum, damp = c.dampening;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (const OptimSegment& sg : pb.segs) {
        const double lr = lr0 * sg.lr_mult, wd = sg.weight_decay;
        double pp = 0.0, uu = 0.0;
        for (size_t k = 0; k < sg.count; k++) {
            const size_t i = sg.offset + k;
            const double g = (double)grads[i] * scale, p = r.p[i];
            if (c.kind == OPT_ADAM_MINI) {  // v: its block's, set below before the block's first element
                if (optim_mini_start(&sg, optim_mini_index(&sg, sg.trel + k)) == sg.trel + k) {
                    const size_t len = optim_mini_len(&sg, optim_mini_index(&sg, sg.trel + k));
                    double sum = 0.0;
                    for (size_t j = 0; j < len; j++) sum += ((double)grads[i + j] * scale) * ((double)grads[i + j] * scale);
                    const double vb = b2 * r.v[i] + (1.0 - b2) * (sum / (double)len);
                    for (size_t j = 0; j < len; j++) r.v[i + j] = vb;
                }
                r.m[i] = b1 * r.m[i] + (1.0 - b1) * g;
                r.p[i] = p - lr * ((r.m[i] / bc1) / (sqrt(r.v[i] / bc2) + eps) + wd * p);
            } else if (c.kind == OPT_ADAMW || c.kind == OPT_LAMB) {
                r.m[i] = b1 * r.m[i] + (1.0 - b1) * g;
                r.v[i] = b2 * r.v[i] + (1.0 - b2) * g * g;
                double vv = r.v[i];
                if (c.amsgrad) vv = r.vmax[i] = std::max(r.vmax[i], r.v[i]);
                const double u = (r.m[i] / bc1) / (sqrt(vv / bc2) + eps) + wd * p;
                if (c.kind == OPT_ADAMW) r.p[i] = p - lr * u;
                pp += p * p;
                uu += u * u;
            } else if (c.kind == OPT_SGD) {
                double d = g;
                if (mu != 0.0) {
                    r.m[i] = t == 1 ? g : mu * r.m[i] + (1.0 - damp) * g;
                    d = c.nesterov ? g + mu * r.m[i] : r.m[i];
                }
                r.p[i] = p - lr * (d + wd * p);
            } else { // Lion
                const double t1 = b1 * r.m[i], t2 = (1.0 - b1) * g, cc = t1 + t2;
                if (fabs(cc) <= 1e-5 * (fabs(t1) + fabs(t2)) + b1 * r.merr[i] && cc != 0.0) r.excluded[i] = 1;
                r.p[i] = p - lr * ((cc > 0.0 ? 1.0 : cc < 0.0 ? -1.0 : 0.0) + wd * p);
                r.m[i] = b2 * r.m[i] + (1.0 - b2) * g;
            }
        }
        if (c.kind == OPT_LAMB) {
            const double trust = pp > 0.0 && uu > 0.0 ? sqrt(pp) / sqrt(uu) : 1.0;
            r.trust.resize(pb.segs.size());
            r.trust[&sg - pb.segs.data()] = trust;
            for (size_t k = 0; k < sg.count; k++) {
                const size_t i = sg.offset + k;
                const double u = (r.m[i] / bc1) / (sqrt(r.v[i] / bc2) + eps) + wd * r.p[i];
                r.p[i] -= lr * trust * u;
            }
        }
    }
    for (size_t i = 0; i < pb.n; i++) {
        r.m_hist[i] = std::max(r.m_hist[i], fabs(r.m[i]));
        r.v_hist[i] = std::max(r.v_hist[i], fabs(r.v[i]));
        r.p_hist[i] = std::max(r.p_hist[i], fabs(r.p[i]));
    }
}

// The state of element i (of segment s) as values, whatever its storage (host copy of the block).
static void state_values(const OptimState& st, const unsigned char* blk, size_t i, int s, double& m, double& v) {
    auto at = [&](const void* p) { return blk + ((const unsigned char*)p - (const unsigned char*)st.memory); };
    m = v = 0.0;
    if (st.m) m = ((const float*)at(st.m))[i];
    if (st.v) v = ((const float*)at(st.v))[i];
    const int fp16 = st.cfg.state == OPT_STATE_FP16;
    if (st.m16) m = storage16_load(((const uint16_t*)at(st.m16))[i], fp16, OPT_SLOT_M);
    if (st.v16) v = storage16_load(((const uint16_t*)at(st.v16))[i], fp16, OPT_SLOT_V);
    if (st.q4m && st.small_off[s] != OPT_NOT_SMALL) {  // (4-bit codes: compared in test_optim)
        const size_t k = i - st.segs[s].offset;
        m = ((const float*)at(st.m32))[st.small_off[s] + k];
        if (st.v32) v = ((const float*)at(st.v32))[st.small_off[s] + k];
    }
    if (st.qm) {
        const size_t k = i - st.segs[s].offset;
        if (st.small_off[s] != OPT_NOT_SMALL) {
            m = ((const float*)at(st.m32))[st.small_off[s] + k];
            if (st.v32) v = ((const float*)at(st.v32))[st.small_off[s] + k];
        } else {
            const size_t b = st.block0[s] + k / OPT_BLOCK;
            const float* maps = (const float*)at(st.maps);
            m = (double)maps[((const unsigned char*)at(st.qm))[i]] * ((const float*)at(st.absmax_m))[b];
            if (st.qv) v = (double)maps[256 + ((const unsigned char*)at(st.qv))[i]] * ((const float*)at(st.absmax_v))[b];
        }
    }
}

// ----------------------------------------------------------------------------
// --check

struct Worst {
    double p = 0, m = 0, v = 0;
    long long bad = 0;
    std::string first;
};

static void tally(Worst& w, double& slot, const char* what, size_t i, double got, double want, double tol) {
    double r = fabs(got - want) / tol;
    if (r != r) r = INFINITY;
    if (r > 1.0) {
        if (w.bad == 0) {
            char b[192];
            snprintf(b, sizeof b, "%s[%zu] got %.9g want %.9g tol %.3g", what, i, got, want, tol);
            w.first = b;
        }
        w.bad++;
    }
    slot = std::max(slot, r);
    lab_note_worst(r);
}

static long long diff_bytes(const void* a, const void* b, size_t bytes) {
    const unsigned char *x = (const unsigned char*)a, *y = (const unsigned char*)b;
    long long d = 0;
    for (size_t i = 0; i < bytes; i++) d += x[i] != y[i];
    return d;
}

static bool check_views(const Case& c, const Problem& pb, int steps); // (3), below

static bool check_one(const Case& c, const Problem& pb, int steps) {
    const size_t n = pb.n;
    Dev d;
    dev_case_alloc(c, pb, d);
    std::vector<float> p0;
    init_params(pb, p0);
    std::vector<float> tw = dev_upload_params(c, d, p0); // the CPU twin's fp32 parameters
    OptimState cs;
    optim_state_init(&cs, &c.cfg, pb.segs.data(), (int)pb.segs.size(), n, nullptr);
    Ref r;
    ref_init(r, tw);
    std::vector<float> g;
    std::vector<unsigned char> blk(d.st.bytes);
    bool ok = true;
    LabOmpLimit omp((long long)n);
    for (int t = 1; t <= steps; t++) {
        make_grads(pb, t, g);
        const float scale = clip_scale_of_step(t);
        dev_upload_grads(c, d, g, scale);
        dev_step(c, d, t, 0);
        cudaCheck(cudaDeviceSynchronize());
        optim_step_cpu(&cs, tw.data(), g.data(), c.lr, t, scale);
        if (c.bf16 && !c.master) { // the twin reads back what the device stored (the rounding by definition)
            const uint64_t key = lab_sr_key(c.cfg.seed, t);
            for (size_t i = 0; i < n; i++)
                tw[i] = c.stochastic ? lab_sr_bf16(tw[i], lab_sr_bits(key, i, 0)) : __bfloat162float(__float2bfloat16_rn(tw[i]));
        }
        ref_step(r, pb, c.cfg, g, (double)scale, (double)c.lr, t);
        ref_m_bounds(r, pb, c.cfg, cs, t);
        if (t != 1 && t != 2 && t != steps) continue;
        // (1) bits against the CPU implementation
        std::vector<float> dp = dev_params(c, d, n), dm;
        if (c.master) {
            dm.resize(n);
            cudaCheck(cudaMemcpy(dm.data(), d.master, n * 4, cudaMemcpyDeviceToHost));
        }
        cudaCheck(cudaMemcpy(blk.data(), d.st.memory, d.st.bytes, cudaMemcpyDeviceToHost));
        long long dparam = 0;
        if (c.master) {
            dparam = diff_bytes(dm.data(), tw.data(), n * 4);
            const uint64_t key = lab_sr_key(c.cfg.seed, t); // step t's random bits by definition (lab_optim.h)
            for (size_t i = 0; i < n; i++) {
                float want = c.stochastic ? lab_sr_bf16(tw[i], lab_sr_bits(key, i, 0)) : __bfloat162float(__float2bfloat16_rn(tw[i]));
                dparam += memcmp(&dp[i], &want, 4) != 0;
            }
        } else {
            dparam = diff_bytes(dp.data(), tw.data(), n * 4);
        }
        const long long dstate = diff_bytes(blk.data(), cs.memory, cs.bytes);
        // (int8 state: the maps the codes index, against their definition; the float64 comparison
        // below reads the state through them)
        const bool maps_ok = d.st.maps == nullptr || lab_maps_match(d.st.maps);
        const bool same = dparam == 0 && dstate == 0 && cs.bytes == d.st.bytes && maps_ok;
        // (2) against float64
        Worst w;
        const std::vector<float>& pf = c.master ? dm : dp; // the fp32 parameters (or the bf16 ones)
        const bool bf16_p = c.bf16 && !c.master;
        for (size_t s = 0; s < pb.segs.size(); s++) {
            const OptimSegment& sg = pb.segs[s];
            const double lr_eff = (double)c.lr * sg.lr_mult;
            // the scale of a step with bf16/int8 state: lr; LAMB's is lr * trust * |u|, and int8 (4bit) leaves |u|
            // of an element far below its block's absmax unbounded by Adam's ratio (v toward 0): 2 lr * trust
            const double lowp_step = c.cfg.kind != OPT_LAMB ? lr_eff
                                   : lr_eff * std::max(1.0, r.trust[s]) *
                                         (c.cfg.state == OPT_STATE_INT8 || c.cfg.state == OPT_STATE_4BIT ? 2.0 : 1.0);
            double bv = 0.0;
            for (size_t k = 0; k < sg.count; k++) {
                const size_t i = sg.offset + k;
                if (c.cfg.kind == OPT_LION && r.excluded[i]) continue;
                if (c.cfg.state == OPT_STATE_INT8 && k % OPT_BLOCK == 0) {
                    bv = 0.0;
                    for (size_t j = k; j < sg.count && j < k + OPT_BLOCK; j++) bv = std::max(bv, r.v_hist[sg.offset + j]);
                }
                double ptol = 1e-6 * t * fabs(r.p[i]) + 1e-5 * lr_eff * t + 1e-30;
                double mtol = 2e-6 * t * fabs(r.m[i]) + 1e-6 * r.m_hist[i] + 1e-30;
                double vtol = 2e-6 * t * fabs(r.v[i]) + 1e-6 * r.v_hist[i] + 1e-30;
                if (bf16_p) ptol += kLabMargin * t * ulp_bf16(std::max(r.p_hist[i], (double)fabsf(pf[i])));
                const bool small = cs.small_off[s] != OPT_NOT_SMALL;
                const double kv = std::min<double>(t, 1.0 / (1.0 - c.cfg.beta2));
                if (c.cfg.state == OPT_STATE_BF16) {
                    mtol = kLabMargin * r.merr[i] + 1e-30;
                    vtol = kLabMargin * kv * 0x1p-7 * r.v_hist[i] + 1e-30;
                    ptol += 0.1 * lowp_step * t;
                } else if (c.cfg.state == OPT_STATE_FP16) {  // 2^-10 of m and sqrt(v), subnormal steps 2^-38
                    const double sub = 0x1p-38;
                    mtol = kLabMargin * r.merr[i] + 1e-30;
                    vtol = kLabMargin * kv * (0x1p-9 * r.v_hist[i] + 2.0 * sub * sqrt(r.v_hist[i]) + sub * sub) + 1e-30;
                    ptol += 0.0125 * lowp_step * t;
                } else if (c.cfg.state == OPT_STATE_INT8 && !small) {
                    mtol = kLabMargin * r.merr[i] + 1e-30;
                    vtol = kLabMargin * kv * 0.0037 * bv + 1e-30;
                    ptol += 0.5 * lowp_step * t;
                } else if (c.cfg.state == OPT_STATE_4BIT && !small) {  // (its state: test_optim's float64 check)
                    mtol = vtol = INFINITY;
                    ptol += lowp_step * t;
                }
                tally(w, w.p, "p", i, pf[i], r.p[i], ptol);
                if (c.master && fabs((double)dp[i] - dm[i]) >= ulp_bf16(dm[i])) tally(w, w.p, "p(bf16)-master", i, dp[i], dm[i], ulp_bf16(dm[i]));
                double m, v;
                state_values(d.st, blk.data(), i, (int)s, m, v);
                if (c.cfg.kind != OPT_SGD || c.cfg.momentum != 0.0f) tally(w, w.m, "m", i, m, r.m[i], mtol);
                if (c.cfg.kind == OPT_ADAMW || c.cfg.kind == OPT_LAMB) tally(w, w.v, "v", i, v, r.v[i], vtol);
            }
        }
        long long excl = 0;
        for (unsigned char e : r.excluded) excl += e;
        // Lion: < 0.1% ambiguous signs with fp32 state; bf16/int8 state's bound on m leaves more (< 5%)
        // (4bit: m within 11% of its block's max, most signs of c are ambiguous: the bits above are its check)
        const long long excl_max = c.cfg.state == OPT_STATE_FP32 ? (long long)n / 1000
                                 : c.cfg.state == OPT_STATE_4BIT ? (long long)n : (long long)n / 20;
        const bool good = same && w.bad == 0 && excl <= excl_max;
        if (!g_quiet || !good) {
            printf("    %-34s step %d: CPU twin %s (%lld param, %lld state bytes differ); float64 worst err/tol p %.3f m %.3f v %.3f%s%s  %s\n",
                   c.name, t, same ? "bit-identical" : "DIFFERS", dparam, dstate, w.p, w.m, w.v,
                   w.bad ? ", first bad: " : "", w.first.c_str(), good ? "ok" : "FAIL");
        }
        ok = ok && good;
    }
    optim_state_free(&cs);
    dev_case_free(d);
    return check_views(c, pb, std::min(steps, 3)) && ok;
}

// ----------------------------------------------------------------------------
// (3) views

static void upload_as(void* d, const std::vector<float>& x, bool bf16) {
    if (bf16) {
        std::vector<uint16_t> h(x.size());
        for (size_t i = 0; i < x.size(); i++) h[i] = bf16_bits_round_nearest(x[i]); // exact: already bf16 values
        cudaCheck(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    } else {
        cudaCheck(cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    }
}

// A view's part with its own state, gradients and master weights.
struct ViewState {
    ViewPart part;
    OptimState st = {};
    void* g = nullptr;
    float* master = nullptr;
};

static void view_step(const Case& c, void* params, ViewState& vp, int t, const float* scale) {
    const bool sr = c.stochastic;
    if (c.bf16)
        optim_step_gpu(&vp.st, (__nv_bfloat16*)params, vp.master, (const __nv_bfloat16*)vp.g, c.lr, t, sr, scale, 0);
    else
        optim_step_gpu(&vp.st, (float*)params, vp.master, (const float*)vp.g, c.lr, t, sr, scale, 0);
}

// Runs `steps` steps of case c through the whole model (Dev) and through each view, from the same
// parameters and gradients; true when every view ends with the whole model's bits.
static bool check_views(const Case& c, const Problem& pb, int steps) {
    static const char* const kViews[] = {"zero", "badam", "chunks", "pieces"};
    const size_t n = pb.n, pbytes = c.bf16 ? 2 : 4;
    std::vector<float> p0, g;
    init_params(pb, p0);
    Dev d;
    dev_case_alloc(c, pb, d);
    const std::vector<float> held = dev_upload_params(c, d, p0);
    std::vector<std::vector<ViewState>> views;
    std::vector<void*> vparams;
    for (const char* name : kViews) {
        views.emplace_back();
        // (pieces: whole tensors where a piece of OPT_BLOCK would split 4-bit v's scales or an Adam-mini block)
        for (const ViewPart& part : view_build(name, pb, optim_cut_of(&c.cfg),
                                               c.cfg.state == OPT_STATE_4BIT || c.cfg.kind == OPT_ADAM_MINI)) {
            views.back().emplace_back();
            views.back().back().part = part;
        }
        void* vp = nullptr;
        cudaCheck(cudaMalloc(&vp, n * pbytes));
        cudaCheck(cudaMemcpy(vp, d.p, n * pbytes, cudaMemcpyDeviceToDevice));
        vparams.push_back(vp);
        for (ViewState& vs : views.back()) {
            const ViewPart& part = vs.part;
            optim_state_init_device(&vs.st, &c.cfg, part.segs.data(), (int)part.segs.size(), part.n);
            cudaCheck(cudaMalloc(&vs.g, part.n * (c.bf16 ? 2 : 4)));
            if (c.master) {
                cudaCheck(cudaMalloc((void**)&vs.master, part.n * 4));
                upload_as(vs.master, view_gather(part, held), false);
            }
        }
    }
    for (int t = 1; t <= steps; t++) {
        make_grads(pb, t, g);
        dev_upload_grads(c, d, g, clip_scale_of_step(t)); // g: the values the device sees
        dev_step(c, d, t, 0);
        for (size_t v = 0; v < views.size(); v++) {
            for (ViewState& vs : views[v]) {
                upload_as(vs.g, view_gather(vs.part, g), c.bf16);
                view_step(c, vparams[v], vs, t, d.scale);
            }
        }
    }
    cudaCheck(cudaDeviceSynchronize());
    std::vector<unsigned char> wp(n * pbytes), vpb(n * pbytes), wblk(d.st.bytes);
    std::vector<float> wm(c.master ? n : 0);
    cudaCheck(cudaMemcpy(wp.data(), d.p, n * pbytes, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(wblk.data(), d.st.memory, d.st.bytes, cudaMemcpyDeviceToHost));
    if (c.master) cudaCheck(cudaMemcpy(wm.data(), d.master, n * 4, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t v = 0; v < views.size(); v++) {
        cudaCheck(cudaMemcpy(vpb.data(), vparams[v], n * pbytes, cudaMemcpyDeviceToHost));
        long long dparam = diff_bytes(wp.data(), vpb.data(), n * pbytes), dmaster = 0, dstate = 0;
        for (ViewState& vs : views[v]) {
            const ViewPart& part = vs.part;
            std::vector<unsigned char> blk(vs.st.bytes);
            cudaCheck(cudaMemcpy(blk.data(), vs.st.memory, vs.st.bytes, cudaMemcpyDeviceToHost));
            std::vector<float> pm(c.master ? part.n : 0);
            if (c.master) cudaCheck(cudaMemcpy(pm.data(), vs.master, part.n * 4, cudaMemcpyDeviceToHost));
            for (size_t s = 0; s < part.segs.size(); s++) {
                const OptimSegment& sg = part.segs[s];
                for (size_t k = 0; k < sg.count; k++) {
                    const size_t i = sg.offset + k, gi = sg.param + k;
                    double m, vv, wmv, wvv;
                    state_values(vs.st, blk.data(), i, (int)s, m, vv);
                    state_values(d.st, wblk.data(), gi, (int)whole_segment(pb, gi), wmv, wvv);
                    dstate += memcmp(&m, &wmv, sizeof m) != 0 || memcmp(&vv, &wvv, sizeof vv) != 0;
                    if (c.master) dmaster += memcmp(&pm[i], &wm[gi], 4) != 0;
                }
            }
        }
        const bool same = dparam == 0 && dmaster == 0 && dstate == 0;
        if (!g_quiet || !same) {
            printf("    %-34s view %-6s (%zu parts), %d steps: %s (%lld param bytes, %lld master, %lld state elements differ)\n",
                   c.name, kViews[v], views[v].size(), steps, same ? "bit-identical to the whole model" : "DIFFERS",
                   dparam, dmaster, dstate);
        }
        ok = ok && same;
        for (ViewState& vs : views[v]) {
            optim_state_free_device(&vs.st);
            cudaCheck(cudaFree(vs.g));
            cudaCheck(cudaFree(vs.master));
        }
        cudaCheck(cudaFree(vparams[v]));
    }
    dev_case_free(d);
    return ok;
}

// ----------------------------------------------------------------------------
// --bench

static int bench(const std::vector<const Case*>& cases, const Problem& pb, const OptLabArgs& o) {
    const double copy = optlab_bench_begin("optimizers bench", pb, (int)o.repeats);
    printf("  %-36s %8s %8s", "case", "state B", "moved B");
    lab_gbs_columns_header();
    printf("\n");
    std::vector<float> p0, g;
    init_params(pb, p0);
    make_grads(pb, 1, g);
    for (const Case* c : cases) {
        Dev d;
        dev_case_alloc(*c, pb, d);
        dev_upload_params(*c, d, p0);
        std::vector<float> gc(g);
        dev_upload_grads(*c, d, gc, 1.0f);
        int step = 0;
        const float ms = time_ms((int)o.repeats, [&] { dev_step(*c, d, ++step, 0); });
        const int bpp = bytes_per_param(*c);
        printf("  %-36s %8.3f %8d", c->name, (double)d.st.bytes / pb.n, bpp);
        lab_gbs_columns((double)bpp * pb.n, ms, copy);
        printf("\n");
        dev_case_free(d);
    }
    return 0;
}

// ----------------------------------------------------------------------------

[[noreturn]] static void usage(const char* prog) {
    optlab_usage(prog, "-c CASE",
                 "sgd lion lamb adamw adamw-bf16 adamw-int8 sgd-bf16 sgd-int8 lion-bf16 lion-int8 lamb-bf16 lamb-int8, or all (default)",
                 "", "");
}

int main(int argc, char** argv) {
    auto no_extra = [](LabArgv&) { return false; };
    return optlab_main(argc, argv, "optimizers", usage, "-c", kCases, no_extra, check_one, bench);
}
