/*
 muon.cuh: Muon on the GPU (llmc/optim/muon.h has the algorithm and the CPU update). The step runs
 over runs of consecutive segments (muon_runs_build):
   AdamW runs (the embeddings, layernorms, biases): optim_launch<OP_ADAMW> (llmc/optim/update.cuh)
     on an AdamW sub-state whose segment table is the run's, rebased, and whose buffers lie inside
     Muon's state (m at the run's offset, v at its packed offset; int8: its blocks and small
     tensors): the kernels of every rule, in every state precision, the same bits as the CPU's
     per-segment AdamW.
   matrix runs (the layers of one weight tensor, one shape): (1) muon_momentum_kernel: B = mu B + g
     (fp32 or bf16 state, stochastic rounding stream 1 at the parameter's index, as the CPU), U in
     the parameters' type; (2) the Frobenius norm of each matrix (fixed-order partial sums: the same
     bits on any grid) and X = U / (|U| + eps); (3) five Newton-Schulz steps, each three batched
     matrix multiplies over the run's matrices (the trainer's OptimGemmBatched: cuBLASLt, bf16 with
     fp32 accumulation in the bf16 build), tall matrices as X^T X without a transpose; (4)
     muon_apply_kernel: W = W (1 - lr wd) - lr s X (master weights, stochastic rounding of bf16
     parameters as every optimizer).
 int8 and 4-bit state: the momentum kernel works per quantization block (muon_momentum_q_kernel),
 a run's pieces hold whole segments so that no block straddles two; the AdamW runs' 4-bit v lies
 packed in whole blocks per tensor (muon_adam_align).
*/
#ifndef LLMC_OPTIM_MUON_CUH
#define LLMC_OPTIM_MUON_CUH

#include <type_traits>
#include <cuda_fp16.h>
#include "llmc/optim/muon.h"
#include "llmc/optim/update.cuh"

#define MUON_THREADS 256

template <typename T>
__device__ __forceinline__ T muon_from_float(float x) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) return __float2bfloat16_rn(x);
    else if constexpr (std::is_same<T, __half>::value) return __float2half_rn(x);
    else return x;
}

// (1) the momentum of n elements (grads, state from element 0 of the run; param0 the run's first
// parameter: the random bits of bf16 state), U in the parameters' type.
template <typename Tg, typename Tw, bool kBf16>
__global__ void muon_momentum_kernel(const Tg* __restrict__ g, float* __restrict__ m32, uint16_t* __restrict__ m16,
                                     Tw* __restrict__ u, size_t n, size_t param0, float mu, int nesterov,
                                     unsigned long long key, const float* __restrict__ clip_scale) {
    const float scale = optim_clip_scale(clip_scale);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = (float)g[i] * scale;
        float b;
        if constexpr (kBf16) {
            b = fmaf(mu, bf16_bits_to_float(m16[i]), gi);
            m16[i] = bf16_bits_round_stochastic(b, srng_bits(key, param0 + i, 1));
        } else {
            b = fmaf(mu, m32[i], gi);
            m32[i] = b;
        }
        u[i] = muon_from_float<Tw>(nesterov ? fmaf(mu, b, gi) : b);
    }
}

// (1) with int8 or 4-bit state: one CUDA block per quantization block b in [b_first, b_first +
// b_count) (whole segments): dequantize (or the small tensor's fp32), B = mu B + g, U, then the
// block's new absmax (int8) or its groups' (4-bit, llmc/optim/quant4.h: over a group's 16 threads,
// aligned lanes of one warp; a thread's 8 codes are one 32-bit word) and the codes: the CPU's
// muon_momentum_segment bit for bit. u holds the piece from state element u_off.
template <typename Tg, typename Tw, bool kQ4>
__global__ void __launch_bounds__(OPT_Q8_THREADS)
muon_momentum_q_kernel(const Tg* __restrict__ grads, OptimSlots q, const OptimSegment* __restrict__ segs,
                       const size_t* __restrict__ block0, const size_t* __restrict__ small_off, int nseg,
                       size_t b_first, size_t b_count, size_t u_off, Tw* __restrict__ u, float mu, int nesterov,
                       const float* __restrict__ clip_scale) {
    constexpr int V = OPT_BLOCK / OPT_Q8_THREADS;
    static_assert(!kQ4 || V == 8, "4-bit: a thread's codes are one 32-bit word");
    __shared__ float red[OPT_Q8_THREADS / 32];
    __shared__ float map4[kQ4 ? QUANT4_MAP_FLOATS : 1];
    if constexpr (kQ4) {
        if (threadIdx.x < QUANT4_MAP_FLOATS) map4[threadIdx.x] = q.map4[threadIdx.x];
        __syncthreads();
    }
    const float scale = optim_clip_scale(clip_scale);
    for (size_t b = b_first + blockIdx.x; b < b_first + b_count; b += gridDim.x) {
        const int s = optim_block_segment(block0, nseg, b);
        const OptimSegment sg = segs[s];
        const size_t rel = (b - block0[s]) * OPT_BLOCK, rest = sg.count - rel, len = rest < OPT_BLOCK ? rest : OPT_BLOCK;
        const size_t j0 = (size_t)threadIdx.x * V, start = sg.offset + rel, so = small_off[s];
        const int nv = j0 < len ? (len - j0 < V ? (int)(len - j0) : V) : 0;
        unsigned char* blk4 = kQ4 ? q.q4[OPT_SLOT_M] + b * QUANT4_BLOCK_BYTES + j0 / 2 : nullptr;
        unsigned word = 0;  // (4-bit: the thread's codes, one word of the block's bytes)
        float am = 0.0f;    // the stored absmax of the block (int8) or of the thread's group (4-bit)
        if (so == OPT_NOT_SMALL && nv > 0) {
            if constexpr (kQ4) {
                word = *reinterpret_cast<const unsigned*>(blk4);
                am = q.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP];
            } else {
                am = q.absmax[0][b];
            }
        }
        float m[V];
        float mx = 0.0f;
#pragma unroll
        for (int j = 0; j < V; j++) {
            m[j] = 0.0f;
            if (j >= nv) continue;
            const size_t i = start + j0 + j;
            float old;
            if (so != OPT_NOT_SMALL) old = q.small[0][so + rel + j0 + j];
            else if constexpr (kQ4) old = map4[(word >> (4 * j)) & 15u] * am;
            else old = q.maps[q.q8[0][i]] * am;
            const float gi = (float)grads[i] * scale;
            m[j] = fmaf(mu, old, gi);
            u[i - u_off] = muon_from_float<Tw>(nesterov ? fmaf(mu, m[j], gi) : m[j]);
            if (so != OPT_NOT_SMALL) q.small[0][so + rel + j0 + j] = m[j];
            mx = fmaxf(mx, fabsf(m[j]));
        }
        if (so != OPT_NOT_SMALL) continue;  // (uniform per CUDA block: no barrier skipped by a part)
        if constexpr (kQ4) {
            mx = quant4_group_max<V>(mx);
            const float inv = quant4_inv(mx);
            unsigned w = 0;
#pragma unroll
            for (int j = 0; j < V; j++) w |= (j < nv ? quant4_quantize_signed(map4, m[j] * inv) : 0u) << (4 * j);
            if (j0 % QUANT4_GROUP == 0 && nv > 0) q.absmax4[b * QUANT4_GROUPS + j0 / QUANT4_GROUP] = mx;
            quant4_store_word(blk4, w, nv);
        } else {
            const float amn = optim_block_max(mx, red), inv = quant8_inv_absmax(amn);
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (j < nv) q.q8[0][start + j0 + j] = quant8_quantize(q.maps, m[j] * inv);
            }
            if (threadIdx.x == 0) q.absmax[0][b] = amn;
        }
    }
}

// (2a) partial sums of squares: block (c, mat) sums chunk c of matrix mat (per elements each).
template <typename Tw>
__global__ void muon_norm_partials_kernel(const Tw* __restrict__ u, size_t per, float* __restrict__ partials) {
    __shared__ float red[MUON_THREADS];
    const size_t mat = blockIdx.y, c = blockIdx.x, len = (per + MUON_NORM_CHUNKS - 1) / MUON_NORM_CHUNKS;
    const size_t lo = c * len, hi = lo + len < per ? lo + len : per;
    const Tw* x = u + mat * per;
    float acc = 0.0f;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float v = (float)x[i];
        acc = fmaf(v, v, acc);
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = MUON_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[mat * MUON_NORM_CHUNKS + c] = red[0];
}

// (2b) X = U / (|U|_F + eps), per matrix (blockIdx.y)
template <typename Tw>
__global__ void muon_normalize_kernel(Tw* __restrict__ u, size_t per, const float* __restrict__ partials) {
    const size_t mat = blockIdx.y;
    float ss = 0.0f;
    for (int c = 0; c < MUON_NORM_CHUNKS; c++) ss += partials[mat * MUON_NORM_CHUNKS + c];
    const float inv = 1.0f / (sqrtf(ss) + MUON_NS_EPS);
    Tw* x = u + mat * per;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < per; i += (size_t)gridDim.x * blockDim.x) {
        x[i] = muon_from_float<Tw>((float)x[i] * inv);
    }
}

// (4) W = W (1 - lr wd) - step X over the run (state/master index off + i, parameter param0 + i)
template <typename Tp, typename Tw, bool kMaster>
__global__ void muon_apply_kernel(Tp* __restrict__ params, float* __restrict__ master, const Tw* __restrict__ x,
                                  size_t n, size_t off, size_t param0, float keep, float step,
                                  unsigned long long key, bool stochastic) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = optim_load_param<Tp, kMaster>(params, master, off + i, param0 + i);
        p = fmaf(-step, (float)x[i], p * keep);
        optim_store_param_rt<Tp, kMaster>(stochastic, params, master, off + i, param0 + i, p, key);
    }
}

static inline unsigned muon_grid(size_t n) {
    const size_t want = (n + MUON_THREADS - 1) / MUON_THREADS, most = (size_t)cuda_sm_count() * 8;
    return (unsigned)(want < most ? (want > 0 ? want : 1) : most);
}

// ----------------------------------------------------------------------------
// the plan: runs, and the AdamW runs' sub-states over Muon's buffers

typedef struct {
    int nruns;
    MuonRun runs[MUON_MAX_RUNS];
    OptimState adam[MUON_MAX_RUNS];  // of the AdamW runs (device tables; buffers inside the parent's)
    size_t most, kkmax;              // the scratch's layout (muon_device_work): X and Y of `most` elements (the
    size_t elems;                    // largest piece), A and B' of kkmax (its batch); elems 0: no matrices
} MuonPlan;

// An AdamW sub-state over run r of st: its table rebased to the run, its buffers pointing into st's.
static inline void muon_adam_substate(const OptimState* st, const MuonRun* r, OptimState* a) {
    OptimSegment* sub = (OptimSegment*)mallocCheck((size_t)r->nseg * sizeof(OptimSegment));
    for (int k = 0; k < r->nseg; k++) {
        sub[k] = st->segs[r->first + k];
        sub[k].offset -= r->off;
    }
    OptimConfig ac = optim_config_default(OPT_ADAMW);
    ac.state = st->cfg.state;
    ac.beta1 = st->cfg.beta1;
    ac.beta2 = st->cfg.beta2;
    ac.eps = st->cfg.eps;
    ac.seed = st->cfg.seed;
    optim_state_setup(a, &ac, sub, r->nseg, r->count, st->memory, 1);  // (pointers replaced below)
    free(sub);
    size_t small = 0;  // the run's first small tensor's packed offset (smalls are packed in segment order)
    for (int k = 0; k < r->nseg; k++) {
        if (st->small_off[r->first + k] != OPT_NOT_SMALL) { small = st->small_off[r->first + k]; break; }
    }
    const size_t b0 = st->block0[r->first];
    a->m = st->m ? st->m + r->off : NULL;
    a->v = st->v ? st->v + r->aoff : NULL;
    a->m16 = st->m16 ? st->m16 + r->off : NULL;
    a->v16 = st->v16 ? st->v16 + r->aoff : NULL;
    a->qm = st->qm ? st->qm + r->off : NULL;
    a->qv = st->qv ? st->qv + r->aoff : NULL;
    a->absmax_m = st->absmax_m ? st->absmax_m + b0 : NULL;
    a->absmax_v = st->absmax_v ? st->absmax_v + b0 : NULL;
    a->m32 = st->m32 ? st->m32 + small : NULL;
    a->v32 = st->v32 ? st->v32 + small : NULL;
    a->maps = st->maps;
    // 4-bit: m's codes and group absmax by block, v's codes at the run's packed blocks (block-aligned
    // per tensor: muon_adam_align), v's scales from the run's first (the step's new ones st's stride on)
    size_t r1 = 0;
    for (int k = 0; k < r->nseg; k++) {
        if (st->rank1_off[r->first + k] != OPT_NOT_SMALL) { r1 = st->rank1_off[r->first + k]; break; }
    }
    a->q4m = st->q4m ? st->q4m + b0 * QUANT4_BLOCK_BYTES : NULL;
    a->q4v = st->q4v ? st->q4v + r->aoff / OPT_BLOCK * QUANT4_BLOCK_BYTES : NULL;
    a->absmax4_m = st->absmax4_m ? st->absmax4_m + b0 * QUANT4_GROUPS : NULL;
    a->rank1_v = st->rank1_v ? st->rank1_v + r1 : NULL;
    a->rank1_stride = st->rank1_stride;
    a->map4 = st->map4;
    a->owns_memory = 0;
    a->on_device = 1;
    cudaCheck(cudaMalloc((void**)&a->d_segs, (size_t)a->nseg * sizeof(OptimSegment)));
    cudaCheck(cudaMalloc((void**)&a->d_block0, ((size_t)a->nseg + 1) * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&a->d_small_off, (size_t)a->nseg * sizeof(size_t)));
    cudaCheck(cudaMalloc((void**)&a->d_rank1_off, (size_t)a->nseg * sizeof(size_t)));
    cudaCheck(cudaMemcpy(a->d_rank1_off, a->rank1_off, (size_t)a->nseg * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->d_segs, a->segs, (size_t)a->nseg * sizeof(OptimSegment), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->d_block0, a->block0, ((size_t)a->nseg + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->d_small_off, a->small_off, (size_t)a->nseg * sizeof(size_t), cudaMemcpyHostToDevice));
}

static inline MuonPlan* muon_plan_build(const OptimState* st) {
    MuonPlan* P = (MuonPlan*)calloc(1, sizeof(MuonPlan));
    if (P == NULL) ls_fatal("optimizer: out of host memory for Muon's plan");
    P->nruns = muon_runs_build(st->segs, st->nseg, st->cfg.muon_qkv_joined, st->adam_off, P->runs);
    for (int r = 0; r < P->nruns; r++) {
        if (!P->runs[r].matrix) muon_adam_substate(st, &P->runs[r], &P->adam[r]);
    }
    size_t floats;
    muon_device_work(st->segs, st->nseg, st->cfg.muon_qkv_joined, &P->elems, &floats);
    for (int r = 0; r < P->nruns; r++) {
        const MuonRun* run = &P->runs[r];
        const size_t pc = run->matrix ? (size_t)muon_piece(run) * run->rows * run->cols : 0;
        if (pc > P->most) P->most = pc;
    }
    P->most = (P->most + 7) / 8 * 8;
    P->kkmax = P->elems > 0 ? (P->elems - 2 * P->most) / 2 : 0;
    return P;
}

static inline void muon_plan_free(OptimState* st) {
    MuonPlan* P = (MuonPlan*)st->muon_plan;
    if (P == NULL) return;
    for (int r = 0; r < P->nruns; r++) {
        if (P->runs[r].matrix) continue;
        OptimState* a = &P->adam[r];
        cudaCheck(cudaFree(a->d_small_off));
        cudaCheck(cudaFree(a->d_rank1_off));
        cudaCheck(cudaFree(a->d_block0));
        cudaCheck(cudaFree(a->d_segs));
        a->on_device = 0;
        optim_state_free(a);
    }
    free(P);
    st->muon_plan = NULL;
}

// ----------------------------------------------------------------------------
// the step

// Five Newton-Schulz steps on the run's batch of (rows x cols) matrices at x; y, A, B' scratch.
template <typename Tw>
static void muon_newton_schulz_gpu(const OptimState* st, const MuonRun* r, Tw* x, Tw* y, Tw* A, Tw* Bm,
                                   cudaStream_t stream) {
    const int R = (int)r->rows, C = (int)r->cols, tall = R > C, k = tall ? C : R, nb = r->batch;
    const long long per = (long long)R * C, kk = (long long)k * k;
    void* s = (void*)stream;
    for (int it = 0; it < MUON_NS_STEPS; it++) {
        if (tall) {  // A = X^T X (C x C)
            st->gemm_batched(1, 0, k, k, R, 1.0f, x, C, per, x, C, per, 0.0f, A, k, kk, nb, s);
        } else {     // A = X X^T (R x R)
            st->gemm_batched(0, 1, k, k, C, 1.0f, x, C, per, x, C, per, 0.0f, A, k, kk, nb, s);
        }
        cudaCheck(cudaMemcpyAsync(Bm, A, (size_t)(kk * nb) * sizeof(Tw), cudaMemcpyDeviceToDevice, stream));
        st->gemm_batched(0, 0, k, k, k, MUON_NS_C, A, k, kk, A, k, kk, MUON_NS_B, Bm, k, kk, nb, s);  // B' = b A + c A A
        cudaCheck(cudaMemcpyAsync(y, x, (size_t)(per * nb) * sizeof(Tw), cudaMemcpyDeviceToDevice, stream));
        if (tall) {  // X' = a X + X B'
            st->gemm_batched(0, 0, R, C, C, 1.0f, x, C, per, Bm, k, kk, MUON_NS_A, y, C, per, nb, s);
        } else {     // X' = a X + B' X
            st->gemm_batched(0, 0, R, C, R, 1.0f, Bm, k, kk, x, C, per, MUON_NS_A, y, C, per, nb, s);
        }
        Tw* t = x;
        x = y;
        y = t;
    }
    if ((MUON_NS_STEPS & 1) != 0) {  // the result is in the other buffer: back into x's place
        cudaCheck(cudaMemcpyAsync(y, x, (size_t)(per * nb) * sizeof(Tw), cudaMemcpyDeviceToDevice, stream));
    }
}

// Orthogonalizes the batch of part (rows x cols) matrices at x in place: each matrix's norm (fixed
// order), X = U / (|U| + eps), five Newton-Schulz steps; y, A, B' and partials are scratch
// (muon_device_work's sizes).
template <typename Tw>
static void muon_orthogonalize_gpu(const OptimState* st, const MuonRun* part, Tw* x, Tw* y, Tw* A, Tw* Bm,
                                   float* partials, cudaStream_t stream) {
    const size_t per = part->rows * part->cols;
    const unsigned nb = (unsigned)part->batch;
    launch(muon_norm_partials_kernel<Tw>, dim3(MUON_NORM_CHUNKS, nb), MUON_THREADS, 0, stream, (const Tw*)x, per, partials);
    launch(muon_normalize_kernel<Tw>, dim3(muon_grid(per) / nb + 1, nb), MUON_THREADS, 0, stream, x, per,
           (const float*)partials);
    muon_newton_schulz_gpu<Tw>(st, part, x, y, A, Bm, stream);
}

template <typename Tp, typename Tg>
void muon_step_gpu(OptimState* st, Tp* params, float* master, const Tg* grads, float lr, int step, bool sr,
                   const float* d_clip_scale, cudaStream_t stream) {
    const OptimConfig* c = &st->cfg;
    if (st->muon_plan == NULL) st->muon_plan = muon_plan_build(st);
    MuonPlan* P = (MuonPlan*)st->muon_plan;
    if (P->elems > 0 && (st->gemm_batched == NULL || st->gemm_elem != (int)sizeof(Tp) || st->work == NULL)) {
        ls_fatal("optimizer: Muon on the GPU needs its batched multiply in the parameters' type and its scratch "
                 "(optim_engine_set_gemm_batched, OptimEngine.work)");
    }
    // the scratch (the plan's layout): X, Y (the largest piece), A, B' (its batch), the partial sums
    const size_t most = P->most, kkmax = P->kkmax;
    Tp* x = (Tp*)st->work;
    Tp* y = x + most;
    Tp* A = y + most;
    Tp* Bm = A + kkmax;
    float* partials = (float*)(Bm + kkmax);
    const unsigned long long key = srng_step_key(c->seed, step);
    for (int ri = 0; ri < P->nruns; ri++) {
        const MuonRun* r = &P->runs[ri];
        if (!r->matrix) {
            OptimState* sub = &P->adam[ri];  // AdamW (amsgrad off: optim_config_check)
            optim_launch<OP_ADAMW, Tp, Tg>(sub, params, master != nullptr ? master + r->off : nullptr, grads + r->off, nullptr,
                                           optim_step_args(&sub->cfg, lr * c->adamw_lr_mult, step), sr, d_clip_scale, stream);
            continue;
        }
        const size_t per = r->rows * r->cols;
        const OptimSegment* sg = &st->segs[r->first];
        const float slr = lr * sg->lr_mult, stp = slr * muon_shape_scale(c->muon_scale, r->rows, r->cols);
        const float keep = 1.0f - slr * sg->weight_decay;
        const int piece = muon_piece(r);
        for (int b0 = 0; b0 < r->batch; b0 += piece) {  // the run's matrices [b0, b0 + nb)
            const int nb = r->batch - b0 < piece ? r->batch - b0 : piece;
            MuonRun part = *r;
            part.batch = nb;
            const size_t n = (size_t)nb * per, off = r->off + (size_t)b0 * per, param = r->param + (size_t)b0 * per;
            if (c->state == OPT_STATE_INT8 || c->state == OPT_STATE_4BIT) {
                const int s0 = r->first + b0 / r->per_seg, ns = nb / r->per_seg;
                const size_t bf = st->block0[s0], bc = st->block0[s0 + ns] - bf;
                const OptimSlots q = optim_state_slots(st);
                const unsigned grid = (unsigned)(bc < (size_t)cuda_sm_count() * 8 ? bc : (size_t)cuda_sm_count() * 8);
                launch(c->state == OPT_STATE_INT8 ? muon_momentum_q_kernel<Tg, Tp, false> : muon_momentum_q_kernel<Tg, Tp, true>,
                       grid > 0 ? grid : 1, OPT_Q8_THREADS, 0, stream, grads, q, (const OptimSegment*)st->d_segs,
                       (const size_t*)st->d_block0, (const size_t*)st->d_small_off, st->nseg, bf, bc, off, x, c->momentum,
                       c->nesterov, d_clip_scale);
            } else if (c->state == OPT_STATE_BF16) {
                launch(muon_momentum_kernel<Tg, Tp, true>, muon_grid(n), MUON_THREADS, 0, stream, grads + off,
                       (float*)nullptr, st->m16 + off, x, n, param, c->momentum, c->nesterov, key, d_clip_scale);
            } else {
                launch(muon_momentum_kernel<Tg, Tp, false>, muon_grid(n), MUON_THREADS, 0, stream, grads + off,
                       st->m + off, (uint16_t*)nullptr, x, n, param, c->momentum, c->nesterov, key, d_clip_scale);
            }
            muon_orthogonalize_gpu<Tp>(st, &part, x, y, A, Bm, partials, stream);
            bool done = false;
            if constexpr (sizeof(Tp) == 2) {
                if (master != nullptr) {
                    launch(muon_apply_kernel<Tp, Tp, true>, muon_grid(n), MUON_THREADS, 0, stream, params, master,
                           (const Tp*)x, n, off, param, keep, stp, key, sr);
                    done = true;
                }
            }
            if (!done) {
                launch(muon_apply_kernel<Tp, Tp, false>, muon_grid(n), MUON_THREADS, 0, stream, params, master,
                       (const Tp*)x, n, off, param, keep, stp, key, sr);
            }
        }
    }
}

#endif // LLMC_OPTIM_MUON_CUH
