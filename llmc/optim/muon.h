/*
 muon.h: Muon, momentum orthogonalized by Newton-Schulz, for the 2-D weight matrices of the
 transformer blocks (qkv, attention projection, MLP fc and projection); AdamW for every other
 tensor (embeddings, which GPT-2 ties to the output head, layernorms, biases) in the same step.

 Per matrix W (rows x cols) with gradient G (times the clip scale), momentum B, step lr:
   B <- mu B + G;  U = G + mu B (Nesterov, the default) or U = B
   X = U / (|U|_F + 1e-7), transposed when rows > cols (so X X^T is the small product)
   5 times:  A = X X^T;  B' = b A + c A A;  X <- a X + B' X      (a, b, c) = (3.4445, -4.7750, 2.0315)
   W <- W (1 - lr wd) - lr s X
 with the shape scale s = 0.2 sqrt(max(rows, cols)) (MUON_SCALE_RMS, the default: the update's RMS
 is about AdamW's, so AdamW's learning rate and weight decay carry over) or sqrt(max(1, rows/cols))
 (MUON_SCALE_ORIG, the original). The quintic's coefficients push every singular value of X that
 is not vanishingly small into about [0.7, 1.2] in five steps: an approximate U V^T of U's SVD.
 qkv (3C x C) is orthogonalized as three C x C matrices (q, k and v apart: OptimSegment.mat_parts
 = 3) unless the configuration joins them (one 3C x C matrix).
 The other tensors: AdamW with the configuration's betas and eps, at lr * adamw_lr_mult.

 State: m (n elements, the step's buffer indexes): the matrices' momentum B and the AdamW tensors'
 first moment; v (the AdamW tensors' elements only, packed: adam_off[s] is segment s's first
 element there, OPT_NOT_SMALL for a matrix; 4-bit: each tensor from a whole block). fp32, bf16
 (rounded stochastically), int8 (blockwise) or 4-bit, stored as every rule's state
 (llmc/optim/storage.h); the AdamW tensors through the template's update (llmc/optim/update.h) as
 AdamW. fp32 GPT-2 124M: 4 B/param + 4 B per AdamW element (the embeddings: 32% of the model)
 = 5.27 B/param, where AdamW keeps 8 (+0.27 of scratch); 4-bit: 0.71.
 The Newton-Schulz products run through a matrix-multiply hook (OptimGemm: OpenBLAS's sgemm on
 the CPU), so the optimizer library needs no BLAS of its own; the scratch (X, its next value,
 A and B') is the largest matrix's, carved after the state.
*/
#ifndef LLMC_OPTIM_MUON_H
#define LLMC_OPTIM_MUON_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#include "llmc/optim/optim.h"

#define MUON_NS_STEPS 5
#define MUON_NS_A 3.4445f
#define MUON_NS_B (-4.7750f)
#define MUON_NS_C 2.0315f
#define MUON_NS_EPS 1e-7f

// C (M, N) = alpha op(A) op(B) + beta C, row-major, op(X) = X or X^T; lda, ldb, ldc: row strides.
typedef void (*OptimGemm)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                          const float* B, int ldb, float beta, float* C, int ldc);

// Muon's batched matrix multiply on the device (the GPU trainer: matmul_gemm of
// llmc/kernels/matmul.cuh, in the build's floatX, fp32 accumulation): for i < batch,
// D_i = alpha op(A_i) op(B_i) + beta D_i, row-major, matrix i at i * stride; stream a cudaStream_t.
typedef void (*OptimGemmBatched)(int trans_a, int trans_b, int M, int N, int K, float alpha, const void* A,
                                 long long lda, long long stride_a, const void* B, long long ldb, long long stride_b,
                                 float beta, void* D, long long ldd, long long stride_d, int batch, void* stream);

// The shape scale of a (rows x cols) matrix's orthogonalized update.
static inline float muon_shape_scale(int scale_kind, size_t rows, size_t cols) {
    if (scale_kind == MUON_SCALE_ORIG) return rows > cols ? sqrtf((float)rows / (float)cols) : 1.0f;
    return 0.2f * sqrtf((float)(rows > cols ? rows : cols));
}

// Rows of one orthogonalized matrix of segment s (its parts joined or apart).
static inline size_t muon_rows(const OptimSegment* s, int qkv_joined) {
    return qkv_joined || s->mat_parts <= 1 ? s->mat_rows : s->mat_rows / (size_t)s->mat_parts;
}

// Scratch floats for the largest matrix of the table: X and its next value (k x K each), A and
// B' (k x k each), k = min(rows, cols), K = max.
static inline size_t muon_scratch_floats(const OptimSegment* segs, int nseg, int qkv_joined) {
    size_t most = 0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].mat_rows == 0) continue;
        const size_t r = muon_rows(&segs[s], qkv_joined), c = segs[s].mat_cols, k = r < c ? r : c;
        const size_t need = 2 * r * c + 2 * k * k;
        if (need > most) most = need;
    }
    return most;
}

// Newton-Schulz's FLOPs for `count` (rows x cols) matrices: per step A = X X^T (2 k^2 K), A A
// (2 k^3) and B' X (2 k^2 K), k = min(rows, cols), K = max.
static inline double muon_ns_flops(size_t count, size_t rows, size_t cols) {
    const double k = (double)(rows < cols ? rows : cols), K = (double)(rows < cols ? cols : rows);
    return (double)count * MUON_NS_STEPS * (4.0 * k * k * K + 2.0 * k * k * k);
}

// One step's Newton-Schulz FLOPs over a table's matrices.
static inline double muon_table_ns_flops(const OptimSegment* segs, int nseg, int qkv_joined) {
    double f = 0.0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].mat_rows == 0) continue;
        const size_t r = muon_rows(&segs[s], qkv_joined), c = segs[s].mat_cols;
        f += muon_ns_flops(segs[s].count / (r * c), r, c);
    }
    return f;
}

// Muon's whole scratch: Newton-Schulz's and the momentum update U of the largest matrix segment.
static inline size_t muon_work_floats(const OptimSegment* segs, int nseg, int qkv_joined) {
    size_t most = 0;
    for (int s = 0; s < nseg; s++) {
        if (segs[s].mat_rows != 0 && segs[s].count > most) most = segs[s].count;
    }
    return muon_scratch_floats(segs, nseg, qkv_joined) + most;
}

// The AdamW tensors' packed v: adam_off[s] is segment s's first element there, or OPT_NOT_SMALL
// for a Muon matrix; each tensor's elements rounded up to a multiple of `align` (4-bit state:
// OPT_BLOCK, so that a tensor's codes start a block of their own). Returns the packed length.
static inline size_t muon_adam_build(const OptimSegment* segs, int nseg, size_t align, size_t* adam_off) {
    size_t k = 0;
    for (int s = 0; s < nseg; s++) {
        adam_off[s] = segs[s].mat_rows != 0 ? OPT_NOT_SMALL : k;
        if (segs[s].mat_rows == 0) k += (segs[s].count + align - 1) / align * align;
    }
    return k;
}
// The packing's alignment for a state precision.
static inline size_t muon_adam_align(OptimStatePrecision state) { return state == OPT_STATE_4BIT ? OPT_BLOCK : 1; }

// ----------------------------------------------------------------------------
// runs: consecutive segments the GPU steps together (llmc/optim/muon.cuh)

// A run is either AdamW tensors (consecutive in the step's buffers and in the packed v: one AdamW
// sub-state over them), or matrices of one shape, weight decay and lr multiplier whose parameters
// are contiguous too (the layers of one tensor): one batched Newton-Schulz.
#define MUON_MAX_RUNS 64
typedef struct {
    int first, nseg;      // segments [first, first + nseg) of the table
    int matrix;           // 1: Muon matrices; 0: AdamW tensors
    size_t off, count;    // elements in the step's buffers
    size_t aoff;          // AdamW: the first element in the packed v
    size_t param;         // matrices: the first parameter (the rest follow)
    size_t rows, cols;    // matrices: one orthogonalized matrix
    int batch;            // matrices: how many (count / (rows * cols))
    int per_seg;          // matrices: how many in each segment (its segments have one size)
} MuonRun;

static inline int muon_runs_build(const OptimSegment* segs, int nseg, int qkv_joined, const size_t* adam_off,
                                  MuonRun* out) {
    int k = 0;
    for (int s = 0; s < nseg; s++) {
        const OptimSegment* sg = &segs[s];
        const int matrix = sg->mat_rows != 0;
        const size_t rows = matrix ? muon_rows(sg, qkv_joined) : 0, cols = sg->mat_cols;
        MuonRun* r = k > 0 ? &out[k - 1] : NULL;
        const OptimSegment* prev = s > 0 ? &segs[s - 1] : NULL;
        int joins = r != NULL && r->matrix == matrix;
        if (joins && matrix) {
            joins = r->rows == rows && r->cols == cols && prev->count == sg->count &&
                    prev->weight_decay == sg->weight_decay && prev->lr_mult == sg->lr_mult &&
                    prev->param + prev->count == sg->param;
        }
        if (joins) {
            r->nseg++;
            r->count += sg->count;
            if (matrix) r->batch += (int)(sg->count / (rows * cols));
            continue;
        }
        if (k == MUON_MAX_RUNS) ls_fatal("optimizer: Muon's segment table has over %d runs", MUON_MAX_RUNS);
        const int per_seg = matrix ? (int)(sg->count / (rows * cols)) : 0;
        MuonRun n = {s, 1, matrix, sg->offset, sg->count, matrix ? 0 : adam_off[s], sg->param, rows, cols, per_seg,
                     per_seg};
        out[k++] = n;
    }
    return k;
}

// Blocks of fp32 partial sums per matrix (its Frobenius norm, summed in a fixed order).
#define MUON_NORM_CHUNKS 32
// The GPU orthogonalizes a run in pieces of at most this many elements (at least one matrix): the
// scratch stays near the CPU's (GPT-2 124M: fc one matrix at a time, qkv's C x C seven).
#ifndef MUON_PIECE_ELEMS  // (test_gpt2.cu sets it small: every run in several pieces)
#define MUON_PIECE_ELEMS ((size_t)1 << 22)
#endif

// Matrices per batched piece of a run: whole segments (int8 state's blocks never straddle two).
static inline int muon_piece(const MuonRun* r) {
    const size_t per = r->rows * r->cols, fit = MUON_PIECE_ELEMS / (per > 0 ? per : 1);
    const size_t seg = r->per_seg > 0 ? (size_t)r->per_seg : 1, whole = fit / seg * seg;
    const size_t pc = whole < seg ? seg : whole;
    return pc < (size_t)r->batch ? (int)pc : r->batch;
}

// The GPU step's scratch for a table: elems of the parameters' type (X and its next value for the
// largest piece of a matrix run, A and B' for its batch: 8-element aligned each) and fp32 floats
// (the norms' partial sums).
static inline void muon_device_work(const OptimSegment* segs, int nseg, int qkv_joined, size_t* elems, size_t* floats) {
    size_t* aoff = (size_t*)mallocCheck((size_t)(nseg > 0 ? nseg : 1) * sizeof(size_t));
    muon_adam_build(segs, nseg, 1, aoff);
    MuonRun runs[MUON_MAX_RUNS];
    const int nr = muon_runs_build(segs, nseg, qkv_joined, aoff, runs);
    free(aoff);
    size_t most = 0, kk = 0, nb = 0;
    for (int i = 0; i < nr; i++) {
        if (!runs[i].matrix) continue;
        const size_t k = runs[i].rows < runs[i].cols ? runs[i].rows : runs[i].cols, pc = (size_t)muon_piece(&runs[i]);
        if (pc * runs[i].rows * runs[i].cols > most) most = pc * runs[i].rows * runs[i].cols;
        if (pc * k * k > kk) kk = pc * k * k;
        if (pc > nb) nb = pc;
    }
    most = (most + 7) / 8 * 8;
    kk = (kk + 7) / 8 * 8;
    *elems = 2 * most + 2 * kk;
    *floats = nb * MUON_NORM_CHUNKS;
}

// Newton-Schulz on x (k x K, k <= K, row-major), in place; y (k x K), a and b (k x k) scratch.
// (X and X' trade buffers each step; the result lands in x.)
static inline void muon_newton_schulz(OptimGemm gemm, float* x, float* y, float* a, float* b, int k, int K) {
    float *cur = x, *next = y;
    for (int it = 0; it < MUON_NS_STEPS; it++) {
        gemm(0, 1, k, k, K, 1.0f, cur, K, cur, K, 0.0f, a, k);               // A = X X^T
        memcpy(b, a, (size_t)k * k * sizeof(float));
        gemm(0, 0, k, k, k, MUON_NS_C, a, k, a, k, MUON_NS_B, b, k);         // B' = b A + c A A
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < (size_t)k * K; i++) next[i] = MUON_NS_A * cur[i];
        gemm(0, 0, k, K, k, 1.0f, b, k, cur, K, 1.0f, next, K);              // X' = a X + B' X
        float* t = cur;
        cur = next;
        next = t;
    }
    if (cur != x) memcpy(x, cur, (size_t)k * K * sizeof(float));
}

// One orthogonalized matrix: u (rows x cols, row-major) in, its Newton-Schulz output in the same
// orientation out (in u). scratch: muon_scratch_floats of the table.
static inline void muon_orthogonalize(OptimGemm gemm, float* u, size_t rows, size_t cols, float* scratch) {
    const int tall = rows > cols;
    const size_t k = tall ? cols : rows, K = tall ? rows : cols, n = rows * cols;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)u[i] * (double)u[i];
    const float inv = 1.0f / ((float)sqrt(ss) + MUON_NS_EPS);
    float *x = scratch, *y = scratch + n, *a = scratch + 2 * n, *b = a + k * k;
    if (tall) {  // X = U^T / norm (a row of X per task: its writes stream)
        #pragma omp parallel for schedule(static)
        for (size_t c = 0; c < cols; c++)
            for (size_t r = 0; r < rows; r++) x[c * rows + r] = u[r * cols + c] * inv;
    } else {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = u[i] * inv;
    }
    muon_newton_schulz(gemm, x, y, a, b, (int)k, (int)K);
    if (tall) {
        #pragma omp parallel for schedule(static)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) u[r * cols + c] = x[c * rows + r];
    } else {
        memcpy(u, x, n * sizeof(float));
    }
}

// Muon's state as the step sees it: the state per slot (the first moments by the step's offsets;
// the AdamW tensors' second moments packed by adam_off, int8's absmax and small fp32 state by the
// same block and small index as m's), the table, and the scratch.
typedef struct {
    OptimSlots slots;
    const OptimTable* t;
    const size_t* adam_off;
    float* work;
} MuonBuffers;

// AdamW on segment s of Muon's AdamW tensors: the template's update (llmc/optim/update.h) on a
// one-segment table rebased to the segment (its grads and state pointers moved to it; v at the
// packed offset; the parameters keep their global index, which also keys stochastic rounding).
static inline void muon_adamw_segment(const MuonBuffers* M, const OptimConfig* c, int s, float* params,
                                      const float* grads, const OptimStepArgs* a, float grad_scale) {
    const OptimTable* t = M->t;
    OptimSegment one = t->segs[s];
    one.offset = 0;
    const size_t off = t->segs[s].offset, vo = M->adam_off[s], b0 = t->block0[s], so = t->small_off[s];
    const size_t block0[2] = {0, t->block0[s + 1] - b0}, small_off[1] = {so == OPT_NOT_SMALL ? OPT_NOT_SMALL : 0};
    const OptimTable t1 = {&one, 1, block0, small_off, t->ix, NULL, t->params_at_offset};
    OptimSlots r = M->slots;
    const size_t at[2] = {off, vo};  // where m's and v's elements start
    const size_t q4b[2] = {b0, vo / OPT_BLOCK};  // 4-bit: m's first block, v's (its packing is block-aligned)
    for (int k = OPT_SLOT_M; k <= OPT_SLOT_V; k++) {
        if (r.f32[k] != NULL) r.f32[k] += at[k];
        if (r.h16[k] != NULL) r.h16[k] += at[k];
        if (r.q8[k] != NULL) r.q8[k] += at[k];
        if (r.absmax[k] != NULL) r.absmax[k] += b0;
        if (r.small[k] != NULL && so != OPT_NOT_SMALL) r.small[k] += so;
        if (r.q4[k] != NULL) r.q4[k] += q4b[k] * QUANT4_BLOCK_BYTES;
    }
    // 4-bit: m's group absmax by block; v's scales: the segment's alone (the new ones nrank1 further)
    size_t rank1_off[1] = {OPT_NOT_SMALL};
    if (r.absmax4 != NULL) r.absmax4 += b0 * QUANT4_GROUPS;
    r.rank1_len = 0;
    if (r.rank1[OPT_SLOT_V] != NULL && r.rank1_off[s] != OPT_NOT_SMALL) {
        r.rank1[OPT_SLOT_V] += r.rank1_off[s];
        rank1_off[0] = 0;
        r.rank1_len = optim_rank1_floats(&one);
    }
    r.rank1_off = rank1_off;
    OptimConfig cw = *c;
    cw.kind = OPT_ADAMW;
    cw.amsgrad = 0;
    optim_update_cpu(&cw, a, &t1, &r, t->params_at_offset ? params + off : params, grads + off, grad_scale, NULL, NULL, NULL);
}

// A matrix segment's momentum into u (the segment's elements): B <- mu B + g, stored in the state's
// storage; u = g + mu B (Nesterov, from the unrounded B) or B.
static inline void muon_momentum_segment(const MuonBuffers* M, const OptimConfig* c, int s, const float* grads,
                                         const OptimStepArgs* a, float grad_scale, float* u) {
    const OptimTable* t = M->t;
    const size_t b0 = t->block0[s], b1 = t->block0[s + 1];
    #pragma omp parallel
    {
        float buf[OPT_BLOCK];
        #pragma omp for schedule(static)
        for (size_t b = b0; b < b1; b++) {
            const OptimBlockAt at = optim_block_at(t->segs, t->block0, t->nseg, b);
            float* m = update_block_load(&M->slots, c->state, OPT_SLOT_M, t, &at, b, buf);
            const float* g = grads + at.start;
            float* ub = u + at.rel;
            #pragma omp simd
            for (size_t j = 0; j < at.len; j++) ub[j] = rule_muon_momentum(g[j] * grad_scale, &m[j], c->nesterov, a);
            update_block_store(&M->slots, c->state, OPT_SLOT_M, t, &at, b, m, a->rng_key, 0);
        }
    }
}

// One Muon step over the table's segments (see the top); AdamW's scalars are a's (betas, eps, bias
// corrections), its learning rate a->lr * c->adamw_lr_mult.
static inline void muon_update_cpu(OptimGemm gemm, const MuonBuffers* M, float* params, const float* grads,
                                   const OptimConfig* c, const OptimStepArgs* a, float grad_scale) {
    const OptimSegment* segs = M->t->segs;
    const int nseg = M->t->nseg;
    OptimStepArgs aw = *a;
    aw.lr = a->lr * c->adamw_lr_mult;
    float* u = M->work != NULL ? M->work + muon_scratch_floats(segs, nseg, c->muon_qkv_joined) : NULL;  // (NULL: no matrices)
    for (int s = 0; s < nseg; s++) {
        const OptimSegment* sg = &segs[s];
        if (sg->mat_rows == 0) {
            muon_adamw_segment(M, c, s, params, grads, &aw, grad_scale);
            continue;
        }
        if (u == NULL) ls_fatal("optimizer: Muon's scratch is not allocated");
        muon_momentum_segment(M, c, s, grads, a, grad_scale, u);
        const size_t n = sg->count, rows = muon_rows(sg, c->muon_qkv_joined), cols = sg->mat_cols;
        for (size_t part = 0; part < n / (rows * cols); part++) muon_orthogonalize(gemm, u + part * rows * cols, rows, cols, M->work);
        const float lr = a->lr * sg->lr_mult, step = lr * muon_shape_scale(c->muon_scale, rows, cols);
        const float keep = 1.0f - lr * sg->weight_decay;
        float* p = params + (M->t->params_at_offset ? sg->offset : sg->param);
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) p[i] = rule_muon_apply(p[i], u[i], step, keep);
    }
}

#endif // LLMC_OPTIM_MUON_H
