/*
 adamw_lowp.cuh: AdamW with low-precision optimizer state (smaller memory and traffic), sharing
 the update rule, segment table and rounding of llmc/optim/adamw.cuh. Parameters fp32, or bf16 with or
 without fp32 master weights (as adamw_update); gradients fp32 or bf16 (templates). The CPU
 update (optim_update_cpu, llmc/optim/update.h) does the same operations, and the two
 agree bit for bit (dev/cuda/optimizers.cu checks it).

 (a) bf16 state: m and v (and AMSGrad's vmax) stored as bf16, rounded stochastically after each
     update (streams 1, 2, 3 of llmc/optim/srng.h), so their expectation follows the fp32 recurrence;
     the parameter update uses the unrounded fp32 values. Traffic: 20 B/param with fp32 params and
     grads (p 8, g 4, m 4, v 4).
 (a') fp16 state (AdamW's --opt-state fp16): the same kernel and buffers, m stored as m * 2^14 and v
     as sqrt(v) * 2^14 in fp16 bits (llmc/optim/optim.h says why), rounded stochastically, saturating.
 (b) 8-bit blockwise state (Dettmers et al. 2021; the map and the rules: llmc/optim/quant8.h): each
     tensor (segment) is cut into blocks of ADAMW8_QBLOCK elements from its first element; a block
     stores one code per element and its absmax. m and v are dequantized, updated in fp32 (the
     parameter update uses the fp32 values), then requantized to the nearest code with the new
     absmax (a positive v never to the code of 0: quant8_quantize's nonzero rule). Tensors under
     QUANT8_MIN_ELEMS elements keep fp32 m, v (packed, llmc/optim/optim.h optim_small_build). Traffic: 16 B/param. AMSGrad: vmax as codes of the unsigned map with
     its own absmax (fp32 for the small tensors), 18 B/param. One CUDA block (256 threads x 8 elements) per
     quantization block, grid-stride; block -> tensor from the block table (optim_blocks_build).
 Host: optim_block_tables_upload() copies the block tables to the device; the maps come from
 quant8_maps() (upload once); codes start at ADAMW8_ZERO_M / ADAMW8_ZERO_V (the value 0) and absmax
 at 0 (optim_state_zero_device in llmc/optim/kernels.cuh does all of it).
*/
#ifndef LLMC_ADAMW_LOWP_CUH
#define LLMC_ADAMW_LOWP_CUH

#include <math.h>
#include <stdint.h>
#include "llmc/optim/adamw.cuh"
#include "llmc/optim/quant8.h"

// ----------------------------------------------------------------------------
// (a) bf16 m and v

// (kFp16: the same buffers hold AdamW's fp16 state, m * 2^14 and sqrt(v) * 2^14 as fp16 bits,
// read and stored by llmc/optim/storage.h's storage16_* as the CPU update does)
template <bool kFp16>
__device__ __forceinline__ float state16_load(const __nv_bfloat16* p, size_t i, bool is_v) {
    if constexpr (kFp16) {
        const uint16_t b = reinterpret_cast<const uint16_t*>(p)[i];
        return storage16_load(b, 1, is_v ? OPT_SLOT_V : OPT_SLOT_M);
    } else {
        return (float)p[i];
    }
}
template <bool kFp16>
__device__ __forceinline__ __nv_bfloat16 state16_round(float x, unsigned bits, bool is_v) {
    if constexpr (kFp16) {
        __nv_bfloat16_raw r;
        r.x = storage16_round(x, 1, is_v ? OPT_SLOT_V : OPT_SLOT_M, bits);
        return __nv_bfloat16(r);
    } else {
        return bf16_round_stochastic(x, bits);
    }
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic, bool kFp16>
__device__ __forceinline__ void adamw_bf16_state_one(Tp* params, float* master, const Tg* grads, __nv_bfloat16* mom1,
                                                     __nv_bfloat16* mom2, __nv_bfloat16* vmax, size_t i, size_t pi,
                                                     float wd, float lr_eff, float scale, const AdamWStepArgs& a) {
    float m = state16_load<kFp16>(mom1, i, false), v = state16_load<kFp16>(mom2, i, true);
    float vm = kAmsgrad ? state16_load<kFp16>(vmax, i, true) : 0.0f;
    float p = adamw_element<kAmsgrad>(optim_load_param<Tp, kMaster>(params, master, i, pi), (float)grads[i] * scale, m,
                                      v, vm, wd, lr_eff, a);
    optim_store_param<Tp, kMaster, kStochastic>(params, master, i, pi, p, a.rng_key);
    // the random bits of the element's global index pi
    mom1[i] = state16_round<kFp16>(m, srng_bits(a.rng_key, pi, 1), false);
    mom2[i] = state16_round<kFp16>(v, srng_bits(a.rng_key, pi, 2), true);
    if (kAmsgrad) vmax[i] = state16_round<kFp16>(vm, srng_bits(a.rng_key, pi, 3), true);
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic, bool kFp16>
__global__ void __launch_bounds__(ADAMW_BLOCK, kAmsgrad ? 1 : 2)
adamw_bf16_state_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads,
                        __nv_bfloat16* __restrict__ mom1, __nv_bfloat16* __restrict__ mom2,
                        __nv_bfloat16* __restrict__ vmax, size_t n, const OptimSegment* __restrict__ segments,
                        int nseg, AdamWStepArgs a, const float* __restrict__ clip_scale) {
    constexpr int V = 8; // one 128-bit word of bf16 state
    const float scale = adamw_clip_scale(clip_scale);
    auto one = [&](size_t i, size_t pi, float wd, float lr_eff) {
        adamw_bf16_state_one<Tp, Tg, kMaster, kAmsgrad, kStochastic, kFp16>(params, master, grads, mom1, mom2, vmax, i, pi,
                                                                            wd, lr_eff, scale, a);
    };
    auto chunk = [&](size_t i0, size_t p0, float wd, float lr_eff) {
        float p[V], g[V], m[V], v[V], vm[V] = {};
        optim_load_params<V, Tp, kMaster>(params, master, i0, p0, p);
        adamw_load<V>(grads + i0, g);
        if constexpr (kFp16) {  // the raw 16-bit words, decoded as fp16 state
            const Vec128<__nv_bfloat16> rm = load128cs(mom1 + i0), rv = load128cs(mom2 + i0);
            Vec128<__nv_bfloat16> rvm = {};
            if (kAmsgrad) rvm = load128cs(vmax + i0);
#pragma unroll
            for (int j = 0; j < V; j++) {
                m[j] = state16_load<true>(&rm[0], j, false);
                v[j] = state16_load<true>(&rv[0], j, true);
                if (kAmsgrad) vm[j] = state16_load<true>(&rvm[0], j, true);
            }
        } else {
            adamw_load<V>(mom1 + i0, m);
            adamw_load<V>(mom2 + i0, v);
            if (kAmsgrad) adamw_load<V>(vmax + i0, vm);
        }
        Vec128<__nv_bfloat16> mo, vo, vmo;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const size_t gi = p0 + j; // the global index: the random bits
            p[j] = adamw_element<kAmsgrad>(p[j], g[j] * scale, m[j], v[j], vm[j], wd, lr_eff, a);
            mo[j] = state16_round<kFp16>(m[j], srng_bits(a.rng_key, gi, 1), false);
            vo[j] = state16_round<kFp16>(v[j], srng_bits(a.rng_key, gi, 2), true);
            if (kAmsgrad) vmo[j] = state16_round<kFp16>(vm[j], srng_bits(a.rng_key, gi, 3), true);
        }
        optim_store_params<V, Tp, kMaster, kStochastic>(params, master, i0, p0, p, a.rng_key);
        store128cs(mom1 + i0, mo);
        store128cs(mom2 + i0, vo);
        if (kAmsgrad) store128cs(vmax + i0, vmo);
    };
    adamw_for_each_chunk<V>(segments, nseg, nullptr, a.lr, n, chunk, one);
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic, bool kFp16>
static void adamw_bf16_state_launch(Tp* params, float* master, const Tg* grads, __nv_bfloat16* m, __nv_bfloat16* v,
                                    __nv_bfloat16* vmax, size_t n, const OptimSegment* d_segments, int nseg,
                                    const AdamWStepArgs& a, const float* d_clip_scale, cudaStream_t stream) {
    size_t want = CEIL_DIV(n / 8, (size_t)ADAMW_BLOCK), full = (size_t)cuda_sm_count() * (kAmsgrad ? 1 : 2);
    unsigned grid = (unsigned)(want < full ? (want > 0 ? want : 1) : full);
    launch(adamw_bf16_state_kernel<Tp, Tg, kMaster, kAmsgrad, kStochastic, kFp16>, grid, ADAMW_BLOCK,
           adamw_segments_smem_bytes(nseg), stream, params, master, grads, m, v, vmax, n, d_segments, nseg, a,
           d_clip_scale);
}

template <typename Tp, typename Tg, bool kFp16>
static void adamw_update_state16(Tp* params, float* master, const Tg* grads, __nv_bfloat16* m, __nv_bfloat16* v,
                                 __nv_bfloat16* vmax, size_t n, const OptimSegment* d_segments, int nseg,
                                 const AdamWParams& hp, int step, const float* d_clip_scale, cudaStream_t stream) {
    constexpr bool kBf16 = sizeof(Tp) == 2;  // (16-bit params: bf16 or fp16)
    if (n == 0) return;
    if (step < 1 || nseg < 1 || nseg > ADAMW_MAX_SEGMENTS) ls_fatal("adamw_bf16_state: step %d, %d segments", step, nseg);
    if ((vmax != nullptr) != (hp.amsgrad != 0)) ls_fatal("adamw_bf16_state: AMSGrad needs vmax, and only then");
    optim_check_params(params, master, "adamw_bf16_state");
    adamw_check_aligned(grads, "grads");
    adamw_check_aligned(m, "m");
    adamw_check_aligned(v, "v");
    adamw_check_aligned(vmax, "vmax");
    AdamWStepArgs a = adamw_step_args(hp, step);
    const bool ms = master != nullptr, am = hp.amsgrad != 0, sr = kBf16 && hp.stochastic_rounding;
#define LOWP_ARGS params, master, grads, m, v, vmax, n, d_segments, nseg, a, d_clip_scale, stream
    if constexpr (kBf16) {
        if (ms && am && sr) adamw_bf16_state_launch<Tp, Tg, true, true, true, kFp16>(LOWP_ARGS);
        else if (ms && am) adamw_bf16_state_launch<Tp, Tg, true, true, false, kFp16>(LOWP_ARGS);
        else if (ms && sr) adamw_bf16_state_launch<Tp, Tg, true, false, true, kFp16>(LOWP_ARGS);
        else if (ms) adamw_bf16_state_launch<Tp, Tg, true, false, false, kFp16>(LOWP_ARGS);
        else if (am && sr) adamw_bf16_state_launch<Tp, Tg, false, true, true, kFp16>(LOWP_ARGS);
        else if (am) adamw_bf16_state_launch<Tp, Tg, false, true, false, kFp16>(LOWP_ARGS);
        else if (sr) adamw_bf16_state_launch<Tp, Tg, false, false, true, kFp16>(LOWP_ARGS);
        else adamw_bf16_state_launch<Tp, Tg, false, false, false, kFp16>(LOWP_ARGS);
    } else {
        if (am) adamw_bf16_state_launch<Tp, Tg, false, true, false, kFp16>(LOWP_ARGS);
        else adamw_bf16_state_launch<Tp, Tg, false, false, false, kFp16>(LOWP_ARGS);
    }
#undef LOWP_ARGS
}

// One step with 16-bit m, v (and vmax when hp.amsgrad): bf16, or (fp16) AdamW's fp16 state in
// the same buffers. params fp32, or bf16 / fp16 with master weights (master != NULL: p is read from
// them) or bf16 without; hp.stochastic_rounding rounds 16-bit params. Buffers 16-byte aligned, n elements.
template <typename Tp, typename Tg>
void adamw_update_bf16_state(Tp* params, float* master, const Tg* grads, __nv_bfloat16* m, __nv_bfloat16* v,
                             __nv_bfloat16* vmax, size_t n, const OptimSegment* d_segments, int nseg,
                             const AdamWParams& hp, int step, const float* d_clip_scale, cudaStream_t stream,
                             bool fp16 = false) {
    if (fp16) return adamw_update_state16<Tp, Tg, true>(params, master, grads, m, v, vmax, n, d_segments, nseg, hp, step,
                                                        d_clip_scale, stream);
    adamw_update_state16<Tp, Tg, false>(params, master, grads, m, v, vmax, n, d_segments, nseg, hp, step, d_clip_scale,
                                        stream);
}

// ----------------------------------------------------------------------------
// block tables on the device (llmc/optim/optim.h: optim_blocks_build, optim_small_build)

struct OptimBlockTables {
    size_t* block0;     // (nseg + 1) device: first block of each segment, [nseg] = nblocks
    size_t* small_off;  // (nseg) device: packed fp32-state offset of a small tensor, or OPT_NOT_SMALL
    size_t nblocks, nsmall;
};

// with_small: the int8 rule (tensors under QUANT8_MIN_ELEMS keep fp32 state); else no small tensors.
static inline OptimBlockTables optim_block_tables_upload(const OptimSegment* segs, int nseg, bool with_small) {
    OptimBlockTables t;
    size_t* h = (size_t*)mallocCheck((2 * (size_t)nseg + 1) * sizeof(size_t));
    t.nblocks = optim_blocks_build(segs, nseg, h);
    t.nsmall = with_small ? optim_small_build(segs, nseg, h + nseg + 1) : 0;
    if (!with_small)
        for (int s = 0; s < nseg; s++) h[nseg + 1 + s] = OPT_NOT_SMALL;
    cudaCheck(cudaMalloc((void**)&t.block0, ((size_t)nseg + 1) * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&t.small_off, (size_t)nseg * sizeof(size_t)));
    cudaCheck(cudaMemcpy(t.block0, h, ((size_t)nseg + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(t.small_off, h + nseg + 1, (size_t)nseg * sizeof(size_t), cudaMemcpyHostToDevice));
    free(h);
    return t;
}

static inline void optim_block_tables_free(OptimBlockTables* t) {
    cudaCheck(cudaFree(t->block0));
    cudaCheck(cudaFree(t->small_off));
    t->block0 = t->small_off = nullptr;
}

// The walk of the blockwise kernels (8-bit AdamW here, LAMB's moments in llmc/optim/kernels.cuh) over
// the OPT_BLOCK-element blocks of every tensor (block0 from optim_blocks_build: blocks start at each
// tensor's first element), CUDA block k taking blocks k, k + gridDim.x, ...:
//   body(b, s, sg, rel, len)  block b of segment s (sg = segments[s]): elements sg.offset + rel
//                             ... + len - 1 of the flat buffers, sg.param + rel ... of the
//                             parameters (len < OPT_BLOCK at a tensor's end).
// The segment of the first block by binary search (optim_block_segment), then walking forward. The
// same for every thread of a CUDA block: body may synchronize (barriers are safe).
template <typename Body>
__device__ __forceinline__ void optim_for_each_block(const OptimSegment* segments, const size_t* block0, int nseg,
                                                   Body body) {
    const size_t nblocks = block0[nseg];
    int s = blockIdx.x < nblocks ? optim_block_segment(block0, nseg, blockIdx.x) : 0;
    for (size_t b = blockIdx.x; b < nblocks; b += gridDim.x) {
        while (block0[s + 1] <= b) s++;
        const OptimSegment sg = segments[s];
        const size_t rel = (b - block0[s]) * OPT_BLOCK, rest = sg.count - rel;
        body(b, s, sg, rel, rest < OPT_BLOCK ? rest : (size_t)OPT_BLOCK);
    }
}

// ----------------------------------------------------------------------------
// (b) 8-bit blockwise-quantized m and v

#define ADAMW8_QBLOCK QUANT8_BLOCK        // elements per absmax
#define ADAMW8_THREADS 256                // x 8 elements = one quantization block
#define ADAMW8_ZERO_M QUANT8_ZERO_SIGNED  // code of 0 in the signed map
#define ADAMW8_ZERO_V QUANT8_ZERO_UNSIGNED

__device__ __forceinline__ float adamw8_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic>
__global__ void __launch_bounds__(ADAMW8_THREADS, kAmsgrad ? 3 : 0) // AMSGrad: <= 80 registers (ptxas spills otherwise)
adamw_8bit_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tg* __restrict__ grads, Adamw8Buffers q,
                  const OptimSegment* __restrict__ segments, const size_t* __restrict__ block0,
                  const size_t* __restrict__ small_off, int nseg, AdamWStepArgs a,
                  const float* __restrict__ clip_scale) {
    constexpr int V = 8;
    static_assert(ADAMW8_THREADS * V == ADAMW8_QBLOCK, "one CUDA block per quantization block");
    __shared__ float map_m[256], map_v[256];
    __shared__ float red[kAmsgrad ? 3 : 2][ADAMW8_THREADS / 32];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        map_m[i] = q.maps[i];
        map_v[i] = q.maps[256 + i];
    }
    __syncthreads();
    const float scale = adamw_clip_scale(clip_scale);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    static_assert(ADAMW8_QBLOCK == OPT_BLOCK, "quantization blocks are the blocks of optim_for_each_block");
    optim_for_each_block(segments, block0, nseg, [&](size_t b, int s, const OptimSegment& sg, size_t rel, size_t len) {
        const size_t start = sg.offset + rel;
        const size_t j0 = (size_t)threadIdx.x * V, i0 = start + j0, pi0 = sg.param + rel + j0;
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        const float wd = sg.weight_decay, lr_eff = a.lr * sg.lr_mult;
        const size_t so = small_off[s];
        if (so != OPT_NOT_SMALL) { // a small tensor: fp32 state, packed (uniform per block)
            LS_BRANCH("adamw_8bit.small_tensor");
            for (int j = 0; j < nv; j++) {
                const size_t i = i0 + j, k = so + rel + j0 + j;
                float m = q.m32[k], v = q.v32[k], vm = kAmsgrad ? q.x32[k] : 0.0f;
                float p = adamw_element<kAmsgrad>(optim_load_param<Tp, kMaster>(params, master, i, pi0 + j),
                                                  (float)grads[i] * scale, m, v, vm, wd, lr_eff, a);
                q.m32[k] = m;
                q.v32[k] = v;
                if (kAmsgrad) q.x32[k] = vm;
                optim_store_param<Tp, kMaster, kStochastic>(params, master, i, pi0 + j, p, a.rng_key);
            }
            return;
        }
        const float am_old = q.absmax_m[b], av_old = q.absmax_v[b], ax_old = kAmsgrad ? q.absmax_x[b] : 0.0f;
        float p[V], g[V], m[V], v[V], vmx[V] = {}; // vmx: AMSGrad's vmax
        if constexpr (kAmsgrad) {
#pragma unroll
            for (int j = 0; j < V; j++)
                if (j < nv) vmx[j] = map_v[q.qx[i0 + j]] * ax_old;
        }
        const bool vec = nv == V && i0 % V == 0 && pi0 % V == 0; // 128-bit params/grads, 64-bit codes
        if (vec) {
            LS_BRANCH("adamw_8bit.vector");
            optim_load_params<V, Tp, kMaster>(params, master, i0, pi0, p);
            adamw_load<V>(grads + i0, g);
            uint2 cm = *reinterpret_cast<const uint2*>(q.qm + i0), cv = *reinterpret_cast<const uint2*>(q.qv + i0);
#pragma unroll
            for (int j = 0; j < V; j++) {
                unsigned wm = j < 4 ? cm.x : cm.y, wv = j < 4 ? cv.x : cv.y;
                m[j] = map_m[(wm >> (8 * (j % 4))) & 0xffu] * am_old;
                v[j] = map_v[(wv >> (8 * (j % 4))) & 0xffu] * av_old;
            }
        } else {
            LS_BRANCH("adamw_8bit.by_element");
#pragma unroll
            for (int j = 0; j < V; j++) {
                p[j] = g[j] = m[j] = v[j] = 0.0f;
                if (j < nv) {
                    p[j] = optim_load_param<Tp, kMaster>(params, master, i0 + j, pi0 + j);
                    g[j] = (float)grads[i0 + j];
                    m[j] = map_m[q.qm[i0 + j]] * am_old;
                    v[j] = map_v[q.qv[i0 + j]] * av_old;
                }
            }
        }
        float mx_m = 0.0f, mx_v = 0.0f, mx_x = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++) {
            if (j < nv) {
                p[j] = adamw_element<kAmsgrad>(p[j], g[j] * scale, m[j], v[j], vmx[j], wd, lr_eff, a);
                mx_m = fmaxf(mx_m, fabsf(m[j]));
                mx_v = fmaxf(mx_v, v[j]);
                if (kAmsgrad) mx_x = fmaxf(mx_x, vmx[j]);
            }
        }
        // block absmax (a max: exact in any order)
        mx_m = adamw8_warp_max(mx_m);
        mx_v = adamw8_warp_max(mx_v);
        if (kAmsgrad) mx_x = adamw8_warp_max(mx_x);
        if (lane == 0) {
            red[0][warp] = mx_m;
            red[1][warp] = mx_v;
            if (kAmsgrad) red[kAmsgrad ? 2 : 0][warp] = mx_x;
        }
        __syncthreads();
        float am = 0.0f, av = 0.0f, ax = 0.0f;
        for (int w = 0; w < ADAMW8_THREADS / 32; w++) {
            am = fmaxf(am, red[0][w]);
            av = fmaxf(av, red[1][w]);
            if (kAmsgrad) ax = fmaxf(ax, red[kAmsgrad ? 2 : 0][w]);
        }
        if constexpr (kAmsgrad) { // vmax's codes (the unsigned map) and absmax
            const float inv_x = quant8_inv_absmax(ax);
#pragma unroll
            for (int j = 0; j < V; j++)
                if (j < nv) q.qx[i0 + j] = quant8_quantize(map_v, vmx[j] * inv_x);
            if (threadIdx.x == 0) q.absmax_x[b] = ax;
        }
        const float inv_m = quant8_inv_absmax(am), inv_v = quant8_inv_absmax(av);
        unsigned char cm[V], cv[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            cm[j] = quant8_quantize(map_m, m[j] * inv_m);
            cv[j] = quant8_quantize(map_v, v[j] * inv_v);
        }
        if (vec) {
            optim_store_params<V, Tp, kMaster, kStochastic>(params, master, i0, pi0, p, a.rng_key);
            uint2 om, ov;
            om.x = cm[0] | cm[1] << 8 | cm[2] << 16 | (unsigned)cm[3] << 24;
            om.y = cm[4] | cm[5] << 8 | cm[6] << 16 | (unsigned)cm[7] << 24;
            ov.x = cv[0] | cv[1] << 8 | cv[2] << 16 | (unsigned)cv[3] << 24;
            ov.y = cv[4] | cv[5] << 8 | cv[6] << 16 | (unsigned)cv[7] << 24;
            *reinterpret_cast<uint2*>(q.qm + i0) = om;
            *reinterpret_cast<uint2*>(q.qv + i0) = ov;
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (j < nv) {
                    optim_store_param<Tp, kMaster, kStochastic>(params, master, i0 + j, pi0 + j, p[j], a.rng_key);
                    q.qm[i0 + j] = cm[j];
                    q.qv[i0 + j] = cv[j];
                }
            }
        }
        if (threadIdx.x == 0) {
            q.absmax_m[b] = am;
            q.absmax_v[b] = av;
        }
        __syncthreads(); // red[] is reused by the next quantization block
    });
}

template <typename Tp, typename Tg, bool kMaster, bool kAmsgrad, bool kStochastic>
static void adamw_8bit_launch(Tp* params, float* master, const Tg* grads, const Adamw8Buffers& q,
                              const OptimSegment* d_segments, const OptimBlockTables& t, int nseg, const AdamWStepArgs& a,
                              const float* d_clip_scale, cudaStream_t stream) {
    size_t full = (size_t)cuda_sm_count() * 8;
    unsigned grid = (unsigned)(t.nblocks < full ? t.nblocks : full);
    launch(adamw_8bit_kernel<Tp, Tg, kMaster, kAmsgrad, kStochastic>, grid, ADAMW8_THREADS, 0, stream, params, master, grads, q,
           d_segments, (const size_t*)t.block0, (const size_t*)t.small_off, nseg, a, d_clip_scale);
}

// One step with 8-bit m, v. params fp32, or bf16 with or without master weights; params, master,
// grads 16-byte aligned; q.qm, q.qv (n codes) 8-byte aligned; q.absmax_m/v: t.nblocks floats;
// q.m32/v32: t.nsmall floats; q.maps: the device copy of quant8_maps (signed then unsigned).
// t from optim_block_tables_upload(segs, nseg, true). hp.amsgrad: vmax too (q.qx codes on the
// unsigned map, 8-byte aligned; q.absmax_x; q.x32 of the small tensors).
template <typename Tp, typename Tg>
void adamw_update_8bit(Tp* params, float* master, const Tg* grads, const Adamw8Buffers& q, size_t n,
                       const OptimSegment* d_segments, const OptimBlockTables& t, int nseg, const AdamWParams& hp,
                       int step, const float* d_clip_scale, cudaStream_t stream) {
    constexpr bool kBf16 = sizeof(Tp) == 2;
    if (n == 0 || t.nblocks == 0) return;
    if (step < 1 || nseg < 1 || nseg > ADAMW_MAX_SEGMENTS) ls_fatal("adamw_8bit: step %d, %d segments", step, nseg);
    if (hp.amsgrad && (q.qx == nullptr || ((uintptr_t)q.qx & 7u))) ls_fatal("adamw_8bit: AMSGrad needs vmax codes, 8-byte aligned");
    optim_check_params(params, master, "adamw_8bit");
    adamw_check_aligned(grads, "grads");
    if (((uintptr_t)q.qm & 7u) || ((uintptr_t)q.qv & 7u)) ls_fatal("adamw_8bit: code buffers must be 8-byte aligned");
    AdamWStepArgs a = adamw_step_args(hp, step);
    const bool ms = master != nullptr, sr = kBf16 && hp.stochastic_rounding, am = hp.amsgrad != 0;
#define Q8_ARGS params, master, grads, q, d_segments, t, nseg, a, d_clip_scale, stream
    if constexpr (kBf16) {
        if (ms && am && sr) adamw_8bit_launch<Tp, Tg, true, true, true>(Q8_ARGS);
        else if (ms && am) adamw_8bit_launch<Tp, Tg, true, true, false>(Q8_ARGS);
        else if (ms && sr) adamw_8bit_launch<Tp, Tg, true, false, true>(Q8_ARGS);
        else if (ms) adamw_8bit_launch<Tp, Tg, true, false, false>(Q8_ARGS);
        else if (am && sr) adamw_8bit_launch<Tp, Tg, false, true, true>(Q8_ARGS);
        else if (am) adamw_8bit_launch<Tp, Tg, false, true, false>(Q8_ARGS);
        else if (sr) adamw_8bit_launch<Tp, Tg, false, false, true>(Q8_ARGS);
        else adamw_8bit_launch<Tp, Tg, false, false, false>(Q8_ARGS);
    } else {
        if (am) adamw_8bit_launch<Tp, Tg, false, true, false>(Q8_ARGS);
        else adamw_8bit_launch<Tp, Tg, false, false, false>(Q8_ARGS);
    }
#undef Q8_ARGS
}

#endif // LLMC_ADAMW_LOWP_CUH
