/*
 matmul.cuh: the GPU trainer's Linear layers (nn.Linear: weight (OC, C), bias (OC)), and one
 general row-major GEMM that attention.cuh also uses.

   matmul_init(workspace_bytes) / matmul_free()       the cuBLASLt handle and workspace
   matmul_forward(out, pre_gelu, inp, weight, bias, N, C, OC, stream)
       out (N,OC) = inp (N,C) @ weight^T + bias; with pre_gelu: pre_gelu = inp @ weight^T + bias and
       out = gelu_tanh(pre_gelu)
   matmul_backward(dinp, dweight, dbias, scratch, dout, inp, weight, pre_gelu, N, C, OC, stream)
       dinp (N,C) = dout @ weight (overwritten; times gelu'(pre_gelu) when pre_gelu != NULL: the
       backward of a GELU that produced this layer's input), dweight (OC,C) += dout^T @ inp,
       dbias (OC) += column sums of dout (deterministic, fp32 partial sums in `scratch`).
       dinp, dweight, dbias may each be NULL: that part is skipped (BAdam's frozen layers pass
       dweight = dbias = NULL and keep only the input gradient)
   matmul_gemm(d, a, b, shape, epilogue, bias, aux, stream)   the general (batched) GEMM

 Where the work is done
   GPU build (nvcc): cuBLASLt, fp32 accumulation (split-K too: its partials are fp32, the
   reduction-scheme preference). BF16 build: bf16 in/out, CUBLAS_COMPUTE_32F.
   FP32 build: fp32 in/out, CUBLAS_COMPUTE_32F (exact fp32 FMAs; TF32 only after
   matmul_set_tf32(1)). Epilogues: BIAS, GELU_AUX_BIAS (forward GELU, writes pre_gelu) and DGELU
   (backward GELU). The bias gradient is this file's own two-kernel column sum (not cuBLASLt's
   BGRADB: that epilogue overwrites instead of accumulating, and its reduction order is the
   library's), so dbias is deterministic and accumulates across micro-steps.
   The CPU-harness builds run this same code: their <cublasLt.h> (dev/harness/) implements the
   cuBLASLt calls below on the CPU, so the plan cache, the heuristic query and the epilogue
   fallback are exercised in CI too.

 GELU fusion (matmul_set_gelu_fusion): 2 = GELU forward and backward in cuBLASLt epilogues
 (the BF16 default), 1 = forward only, 0 = the separate kernels of llmc/kernels/gelu.cuh (the FP32
 default, because the FP32 build is the exact one and the library's GELU may use a fast tanh).
 When cuBLASLt has no kernel for a fused epilogue, the launcher falls back to the separate
 kernels (once noted on stderr). Numerically, fused rounds once (out = bf16(gelu(acc + bias)));
 unfused rounds pre_gelu first (out = bf16(gelu(bf16(acc + bias)))).

 Contracts (checked with ls_fatal at the top of each launcher):
   - matmul_init() before the first launch (it allocates the workspace: nothing is allocated later).
   - C % 8 == 0 and OC % 8 == 0 (16-byte rows for bf16 tensor cores and the vector kernels; the
     aux leading dimension of cuBLASLt's GELU epilogues must be a multiple of 8).
   - every pointer 16-byte aligned; out must not overlap inp, weight or pre_gelu, nor dinp dout,
     inp or weight.
   - scratch: matmul_backward_scratch_bytes(N, OC) bytes of device memory when dbias != NULL.
 To add an epilogue: a GemmEpilogue value and its cuBLASLt mapping in gemm_lt_epilogue() (and, for
 the CI builds, its arithmetic in the harness's cuBLASLt, dev/harness/cuda_harness_cublaslt.h).
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/cuda_precision.h"
#include "llmc/cuda/profile.cuh"
#include "llmc/kernels/gelu.cuh" // the unfused path
#include <cublasLt.h>
#include <cublas_api.h>

// cuBLASLt workspace the trainer should ask for: 32 MiB (NVIDIA's recommendation for Hopper; more
// than enough for Ampere).
#define MATMUL_WORKSPACE_DEFAULT ((size_t)32 << 20)

// ----------------------------------------------------------------------------
// the general GEMM: shapes and epilogues (row-major, like the rest of leanstep)

// For r < repeat, i < batch:  D (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * D, then the epilogue.
// op(A) = A stored (M,K) when trans_a == 0, or A stored (K,M) and transposed when trans_a == 1;
// op(B) = B stored (K,N) when trans_b == 0, or B stored (N,K) and transposed when trans_b == 1.
// ld* are row strides of the stored matrices in elements; matrix (r, i) starts at
// r * repeat_x + i * stride_x. The batch is one strided-batched cuBLASLt call; repeat is a loop of
// such calls with the same descriptors (for layouts one stride cannot describe).
typedef struct {
    int M, N, K;
    int trans_a, trans_b;
    long long lda, ldb, ldd;
    int batch;
    long long stride_a, stride_b, stride_d;
    int repeat;
    long long repeat_a, repeat_b, repeat_d;
    float alpha, beta;
} GemmShape;

// A shape with batch = repeat = 1, alpha = 1, beta = 0 and packed leading dimensions.
static inline GemmShape gemm_shape(int M, int N, int K, int trans_a, int trans_b) {
    GemmShape s;
    memset(&s, 0, sizeof s);
    s.M = M;
    s.N = N;
    s.K = K;
    s.trans_a = trans_a;
    s.trans_b = trans_b;
    s.lda = trans_a ? M : K;
    s.ldb = trans_b ? K : N;
    s.ldd = N;
    s.batch = 1;
    s.repeat = 1;
    s.alpha = 1.0f;
    return s;
}

typedef enum {
    GEMM_EPI_NONE = 0, // D = alpha op(A) op(B) + beta D (+ bias when bias != NULL)
    GEMM_EPI_GELU,     // aux = that value (pre-activation), D = gelu(aux); batch = repeat = 1
    GEMM_EPI_DGELU,    // D = (alpha op(A) op(B) + beta D) * gelu'(aux); batch = repeat = 1
} GemmEpilogue;
// bias: (N), broadcast over the rows of D, added before the activation (GEMM_EPI_NONE, GEMM_EPI_GELU).
// aux: the pre-activation, with D's shape and leading dimension (written by GELU, read by DGELU).

// ----------------------------------------------------------------------------
// state

static inline void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        ls_fatal("%s:%d: cuBLAS error: %s (%s) in %s", file, line, cublasGetStatusName(status),
                 cublasGetStatusString(status), what);
    }
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// What cuBLASLt's heuristic depends on: the cache key of a plan (memset to 0 before filling, compared
// with memcmp).
typedef struct {
    int M, N, K, trans_a, trans_b, batch, epilogue, has_bias, tf32;
    long long lda, ldb, ldd, stride_a, stride_b, stride_d;
    unsigned align_a, align_b, align_d, align_bias, align_aux; // bytes, powers of two <= 256
} GemmKey;

// A cached plan: descriptors plus the algorithm the heuristic chose (supported == 0: it found none).
typedef struct {
    GemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int supported;
} GemmPlan;

#define MATMUL_MAX_PLANS 64

typedef struct {
    int initialized;
    size_t workspace_bytes;
    void* workspace;   // device, workspace_bytes
    int gelu_fusion;   // 0, 1, 2 (see the banner)
    int tf32;          // FP32 build: 1 = TF32 tensor cores
    int fusion_noted;  // the fallback note was printed
    cublasLtHandle_t handle;
    GemmPlan plans[MATMUL_MAX_PLANS];
    int nplans, next_evict;
} MatmulState;

static inline MatmulState& matmul_state(void) {
    static MatmulState s;
    return s;
}

static inline void matmul_require_init(const char* fn) {
    if (!matmul_state().initialized) ls_fatal("%s: call matmul_init() first", fn);
}

static inline void matmul_plans_clear(MatmulState& st) {
    for (int i = 0; i < st.nplans; i++) {
        GemmPlan& p = st.plans[i];
        cublasCheck(cublasLtMatrixLayoutDestroy(p.la));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(p.ld));
        cublasCheck(cublasLtMatmulDescDestroy(p.op));
    }
    st.nplans = 0;
    st.next_evict = 0;
}

// Creates the cuBLASLt handle and allocates the workspace. Calling it again with the same
// size does nothing; with another size it reallocates the workspace (at start-up only).
static inline void matmul_init(size_t workspace_bytes) {
    MatmulState& st = matmul_state();
    if (st.initialized && st.workspace_bytes == workspace_bytes) return;
    if (!st.initialized) {
        st.gelu_fusion = FLOATX_IS_BF16 ? 2 : 0;
        st.tf32 = 0;
        cublasCheck(cublasLtCreate(&st.handle));
    } else {
        cudaCheck(cudaDeviceSynchronize()); // the old workspace may be in use
        matmul_plans_clear(st);             // plans were chosen for the old workspace size
        cudaCheck(cudaFree(st.workspace));
    }
    st.workspace = NULL;
    if (workspace_bytes > 0) cudaCheck(cudaMalloc(&st.workspace, workspace_bytes));
    st.workspace_bytes = workspace_bytes;
    st.initialized = 1;
}

static inline void matmul_free(void) {
    MatmulState& st = matmul_state();
    if (!st.initialized) return;
    matmul_plans_clear(st);
    cublasCheck(cublasLtDestroy(st.handle));
    cudaCheck(cudaFree(st.workspace));
    memset(&st, 0, sizeof st);
}

// Bytes of device memory matmul_init allocated (the memory table's "cuBLASLt workspace").
static inline size_t matmul_workspace_bytes(void) { return matmul_state().workspace_bytes; }

// 0: separate GELU kernels, 1: forward GELU in the cuBLASLt epilogue, 2: forward and backward.
static inline void matmul_set_gelu_fusion(int level) {
    matmul_require_init("matmul_set_gelu_fusion");
    if (level < 0 || level > 2) ls_fatal("matmul_set_gelu_fusion: level %d (0, 1 or 2 expected)", level);
    matmul_state().gelu_fusion = level;
}

// FP32 build: 1 lets cuBLASLt use TF32 tensor cores (10-bit mantissa products). No effect in the BF16
// build.
static inline void matmul_set_tf32(int on) {
    matmul_require_init("matmul_set_tf32");
    matmul_state().tf32 = on != 0;
}

// ----------------------------------------------------------------------------
// the library call

static inline void gemm_check_shape(const GemmShape& s, GemmEpilogue epi, const char* who) {
    if (s.M <= 0 || s.N <= 0 || s.K <= 0 || s.batch <= 0 || s.repeat <= 0) {
        ls_fatal("%s: GEMM with M=%d N=%d K=%d batch=%d repeat=%d (all > 0 expected)", who, s.M, s.N, s.K, s.batch,
                 s.repeat);
    }
    if (s.lda < (s.trans_a ? s.M : s.K) || s.ldb < (s.trans_b ? s.K : s.N) || s.ldd < s.N) {
        ls_fatal("%s: GEMM leading dimensions lda=%lld ldb=%lld ldd=%lld too small for M=%d N=%d K=%d", who, s.lda,
                 s.ldb, s.ldd, s.M, s.N, s.K);
    }
    if (epi != GEMM_EPI_NONE && (s.batch != 1 || s.repeat != 1 || s.ldd % 8 != 0)) {
        ls_fatal("%s: GELU epilogues need batch = repeat = 1 and ldd %% 8 == 0 (ldd = %lld)", who, s.ldd);
    }
}

static inline cudaDataType_t gemm_lt_dtype(void) { return FLOATX_IS_BF16 ? CUDA_R_16BF : FLOATX_IS_FP16 ? CUDA_R_16F : CUDA_R_32F; }

// Largest power of two <= 256 that divides the address and every stride (bytes) a call adds to it.
static inline unsigned gemm_alignment(const void* p, long long stride1, long long stride2) {
    uintptr_t x = (uintptr_t)p | (uintptr_t)(stride1 * (long long)sizeof(floatX)) |
                  (uintptr_t)(stride2 * (long long)sizeof(floatX)) | (uintptr_t)256;
    return (unsigned)(x & (~x + 1));
}

static inline cublasLtEpilogue_t gemm_lt_epilogue(GemmEpilogue epi, int has_bias) {
    switch (epi) {
        case GEMM_EPI_GELU: return has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        case GEMM_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
        default: return has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

static inline void gemm_lt_layout(cublasLtMatrixLayout_t* l, uint64_t rows, uint64_t cols, long long ld, int batch,
                                  long long stride) {
    cublasCheck(cublasLtMatrixLayoutCreate(l, gemm_lt_dtype(), rows, cols, ld));
    if (batch > 1) {
        int32_t count = batch;
        int64_t offset = stride;
        cublasCheck(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        cublasCheck(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                     sizeof offset));
    }
}

// Row-major D = op(A) op(B) is column-major D^T (N,M) = op(B)^T (N,K) op(A)^T (K,M): cuBLASLt's "A" is
// our B and its "B" is our A, with the same transpose flags; the stored matrices keep their leading
// dimensions. A bias over the N columns of D is a bias over the rows of D^T, as cuBLASLt wants.
static inline GemmPlan* gemm_lt_plan(const GemmKey& key, const void* bias, const void* aux) {
    MatmulState& st = matmul_state();
    for (int i = 0; i < st.nplans; i++)
        if (memcmp(&st.plans[i].key, &key, sizeof key) == 0) return &st.plans[i];
    int slot = st.nplans;
    if (slot == MATMUL_MAX_PLANS) { // full: replace the oldest entries in turn
        slot = st.next_evict;
        st.next_evict = (st.next_evict + 1) % MATMUL_MAX_PLANS;
        GemmPlan& old = st.plans[slot];
        cublasCheck(cublasLtMatrixLayoutDestroy(old.la));
        cublasCheck(cublasLtMatrixLayoutDestroy(old.lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(old.ld));
        cublasCheck(cublasLtMatmulDescDestroy(old.op));
    } else {
        st.nplans++;
    }
    GemmPlan& p = st.plans[slot];
    memset(&p, 0, sizeof p);
    p.key = key;
    const cublasComputeType_t compute = (!FLOATX_IS_BF16 && key.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasCheck(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
    const cublasOperation_t op_b = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's A
    const cublasOperation_t op_a = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; // cuBLASLt's B
    cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    const cublasLtEpilogue_t epi = gemm_lt_epilogue((GemmEpilogue)key.epilogue, key.has_bias);
    cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (key.has_bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (key.epilogue != GEMM_EPI_NONE) {
        int64_t aux_ld = key.ldd;
        cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        cublasCheck(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    // stored shapes, column-major view: our B is (K,N) row-major = (N,K) column-major, or (K,N) if transposed
    gemm_lt_layout(&p.la, key.trans_b ? key.K : key.N, key.trans_b ? key.N : key.K, key.ldb, key.batch, key.stride_b);
    gemm_lt_layout(&p.lb, key.trans_a ? key.M : key.K, key.trans_a ? key.K : key.M, key.lda, key.batch, key.stride_a);
    gemm_lt_layout(&p.ld, key.N, key.M, key.ldd, key.batch, key.stride_d);

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = st.workspace_bytes;
    uint32_t al_a = key.align_b, al_b = key.align_a, al_d = key.align_d; // cuBLASLt's A is our B
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    // split-K only with fp32 partials (in the workspace, added in a separate step): the default also
    // allows partials in the output type or added into the output itself, bf16/fp16 roundings that
    // the single-pass product does not make
    uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                                     sizeof reduction));
    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof heur);
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st.handle, p.op, p.la, p.lb, p.ld, p.ld, pref, 1, &heur, &found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (hs != CUBLAS_STATUS_NOT_SUPPORTED) cublas_check(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    p.supported = hs == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p.supported) p.algo = heur.algo;
    return &p;
}

// Returns 0 (and does nothing) when cuBLASLt has no algorithm for a GELU epilogue; any other failure
// is fatal.
static inline int matmul_gemm_lt(floatX* d, const floatX* a, const floatX* b, const GemmShape& s, GemmEpilogue epi,
                                 const floatX* bias, floatX* aux, cudaStream_t stream) {
    MatmulState& st = matmul_state();
    GemmKey key;
    memset(&key, 0, sizeof key);
    key.M = s.M;
    key.N = s.N;
    key.K = s.K;
    key.trans_a = s.trans_a;
    key.trans_b = s.trans_b;
    key.batch = s.batch;
    key.epilogue = (int)epi;
    key.has_bias = bias != NULL && epi != GEMM_EPI_DGELU;
    key.tf32 = st.tf32;
    key.lda = s.lda;
    key.ldb = s.ldb;
    key.ldd = s.ldd;
    if (s.batch > 1) {
        key.stride_a = s.stride_a;
        key.stride_b = s.stride_b;
        key.stride_d = s.stride_d;
    }
    key.align_a = gemm_alignment(a, key.stride_a, s.repeat > 1 ? s.repeat_a : 0);
    key.align_b = gemm_alignment(b, key.stride_b, s.repeat > 1 ? s.repeat_b : 0);
    key.align_d = gemm_alignment(d, key.stride_d, s.repeat > 1 ? s.repeat_d : 0);
    key.align_bias = key.has_bias ? gemm_alignment(bias, 0, 0) : 0;
    key.align_aux = epi != GEMM_EPI_NONE ? gemm_alignment(aux, 0, 0) : 0;
    GemmPlan* p = gemm_lt_plan(key, key.has_bias ? (const void*)bias : NULL, (const void*)aux);
    if (!p->supported) {
        if (epi != GEMM_EPI_NONE) return 0;
        ls_fatal("matmul: cuBLASLt has no algorithm for D (%d,%d) = op(A) (%d,%d) @ op(B) (%d,%d), trans %d/%d, "
                 "ld %lld/%lld/%lld, batch %d, alignment %u/%u/%u bytes, workspace %zu bytes", s.M, s.N, s.M, s.K,
                 s.K, s.N, s.trans_a, s.trans_b, s.lda, s.ldb, s.ldd, s.batch, key.align_a, key.align_b, key.align_d,
                 st.workspace_bytes);
    }
    if (key.has_bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (epi != GEMM_EPI_NONE) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    }
    for (int r = 0; r < s.repeat; r++) {
        const floatX* A = a + r * s.repeat_a;
        const floatX* B = b + r * s.repeat_b;
        floatX* D = d + r * s.repeat_d;
        cublasCheck(cublasLtMatmul(st.handle, p->op, &s.alpha, B, p->la, A, p->lb, &s.beta, D, p->ld, D, p->ld,
                                   &p->algo, st.workspace, st.workspace_bytes, stream));
    }
    return 1;
}

// The general GEMM (see GemmShape). Returns 1, or 0 when a GELU epilogue is not available from the
// library: then nothing was computed and the caller uses the separate kernels.
static inline int matmul_gemm(floatX* d, const floatX* a, const floatX* b, const GemmShape& s, GemmEpilogue epi,
                              const floatX* bias, floatX* aux, cudaStream_t stream) {
    matmul_require_init("matmul_gemm");
    gemm_check_shape(s, epi, "matmul_gemm");
    if (epi != GEMM_EPI_NONE && aux == NULL) ls_fatal("matmul_gemm: a GELU epilogue needs the aux matrix");
    return matmul_gemm_lt(d, a, b, s, epi, bias, aux, stream);
}

// The strided-batched product as a plain function of void pointers to floatX matrices (Muon's
// OptimGemmBatched hook, llmc/optim/muon.h): for i < batch, D_i = alpha op(A_i) op(B_i) + beta D_i.
static inline void matmul_gemm_batched(int trans_a, int trans_b, int M, int N, int K, float alpha, const void* A,
                                       long long lda, long long stride_a, const void* B, long long ldb,
                                       long long stride_b, float beta, void* D, long long ldd, long long stride_d,
                                       int batch, void* stream) {
    GemmShape s = gemm_shape(M, N, K, trans_a, trans_b);
    s.lda = lda;
    s.ldb = ldb;
    s.ldd = ldd;
    s.batch = batch;
    s.stride_a = stride_a;
    s.stride_b = stride_b;
    s.stride_d = stride_d;
    s.alpha = alpha;
    s.beta = beta;
    matmul_gemm((floatX*)D, (const floatX*)A, (const floatX*)B, s, GEMM_EPI_NONE, NULL, NULL, (cudaStream_t)stream);
}

// ----------------------------------------------------------------------------
// kernels: the deterministic bias gradient

// Bias gradient in two deterministic passes. Pass 1: the N rows are cut into `splits` interleaved
// slices (a fixed function of N and OC, so the summation order depends on the shape only, never on
// the device or the thread schedule); block (x, y) sums the 32 * x128::size columns of tile x over
// slice y into fp32 partials (OC per slice). Pass 2: per column, 8 threads add every 8th slice's
// partial, then one adds their 8 sums in order, and accumulates into dbias.
// The pass is memory-bound (dout is read once); what limits it is the bytes in flight: each thread
// issues MATMUL_DBIAS_UNROLL independent 128-bit loads before it adds them (in row order, so the
// sums are those of one load at a time), and the split count aims at MATMUL_DBIAS_TARGET_BLOCKS
// blocks whatever OC is: 256 blocks x 256 threads x 8 x 16 B = 8 MiB in flight, above the
// bandwidth x latency product of an H100/H200 (about 3 MB). GPT-2 124M's OC = 768 layers (3 column
// tiles in bf16) get 64 splits, its 3072 ones 22.
#define MATMUL_DBIAS_BLOCK_Y 8          // block (32, 8): 8 rows of threads walk the rows of the slice
#define MATMUL_DBIAS_UNROLL 8           // row loads in flight per thread
#define MATMUL_DBIAS_MIN_ROWS (MATMUL_DBIAS_BLOCK_Y * MATMUL_DBIAS_UNROLL) // rows per slice, at least
#define MATMUL_DBIAS_TARGET_BLOCKS 256
#define MATMUL_DBIAS_MAX_SPLITS 64      // pass 2 reads at most 8 partials per thread

static inline int matmul_dbias_splits(int N, int OC) {
    const int tiles = CEIL_DIV(OC, 32 * x128::size);
    int s = CEIL_DIV(MATMUL_DBIAS_TARGET_BLOCKS, tiles);
    if (s > CEIL_DIV(N, MATMUL_DBIAS_MIN_ROWS)) s = CEIL_DIV(N, MATMUL_DBIAS_MIN_ROWS);
    if (s > MATMUL_DBIAS_MAX_SPLITS) s = MATMUL_DBIAS_MAX_SPLITS;
    return s < 1 ? 1 : s;
}

// partial (splits, OC) fp32; dout (N, OC); grid (CEIL_DIV(OC, 32 * x128::size), splits), block (32, 8).
// Thread (x, y) of block (bx, by) sums x128::size columns over the rows by * 8 + y + k * splits * 8.
static __global__ void matmul_dbias_partial_kernel(float* partial, const floatX* dout, int N, int OC) {
    constexpr int V = x128::size, U = MATMUL_DBIAS_UNROLL;
    __shared__ float sums[MATMUL_DBIAS_BLOCK_Y][32 * V];
    const int tile = blockIdx.x * 32 * V;
    const int col = tile + threadIdx.x * V;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0.0f;
    if (col < OC) {
        const int stride = gridDim.y * MATMUL_DBIAS_BLOCK_Y;
        int r = blockIdx.y * MATMUL_DBIAS_BLOCK_Y + threadIdx.y;
        for (; r + (U - 1) * stride < N; r += U * stride) { // U rows at a time: loads first, then the sums
            x128 x[U];
#pragma unroll
            for (int u = 0; u < U; u++) x[u] = load128(dout + (size_t)(r + u * stride) * OC + col);
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int e = 0; e < V; e++) acc[e] += to_float(x[u][e]);
            }
        }
        for (; r < N; r += stride) { // the last rows of the slice, fewer than U
            x128 x = load128(dout + (size_t)r * OC + col);
#pragma unroll
            for (int e = 0; e < V; e++) acc[e] += to_float(x[e]);
        }
    }
#pragma unroll
    for (int e = 0; e < V; e++) sums[threadIdx.y][threadIdx.x * V + e] = acc[e];
    __syncthreads();
    for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * V; c += 32 * MATMUL_DBIAS_BLOCK_Y) {
        if (tile + c >= OC) break;
        float s = 0.0f;
        for (int y = 0; y < MATMUL_DBIAS_BLOCK_Y; y++) s += sums[y][c];
        partial[(size_t)blockIdx.y * OC + tile + c] = s;
    }
}

// dbias (OC) += sum over slices of partial (splits, OC): grid CEIL_DIV(OC, 32), block (32, 8); thread
// (x, y) sums the slices y, y + 8, ... of its column (at most 8 loads, all in flight), then thread
// (x, 0) adds the 8 sums in y order.
static __global__ void matmul_dbias_reduce_kernel(floatX* dbias, const float* partial, int splits, int OC) {
    __shared__ float sums[MATMUL_DBIAS_BLOCK_Y][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < OC) {
#pragma unroll
        for (int i = 0; i < MATMUL_DBIAS_MAX_SPLITS / MATMUL_DBIAS_BLOCK_Y; i++) {
            const int slice = threadIdx.y + i * MATMUL_DBIAS_BLOCK_Y;
            if (slice < splits) s += partial[(size_t)slice * OC + c];
        }
    }
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float t = 0.0f;
        for (int y = 0; y < MATMUL_DBIAS_BLOCK_Y; y++) t += sums[y][threadIdx.x];
        dbias[c] = from_float(to_float(dbias[c]) + t);
    }
}

// Bytes of `scratch` matmul_backward needs for the bias gradient of an (N, OC) dout: enough for every
// OC' <= OC too (the split count's cap, not the shape's count, which falls as OC grows), so a caller
// sizes one scratch for all its layers from the widest.
static inline size_t matmul_backward_scratch_bytes(int N, int OC) {
    int cap = CEIL_DIV(N, MATMUL_DBIAS_MIN_ROWS);
    if (cap > MATMUL_DBIAS_MAX_SPLITS) cap = MATMUL_DBIAS_MAX_SPLITS;
    return (size_t)(cap < 1 ? 1 : cap) * (size_t)OC * sizeof(float);
}

// dbias (OC) += column sums of dout (N, OC). OC % x128::size == 0.
static inline void matmul_backward_bias(floatX* dbias, float* scratch, const floatX* dout, int N, int OC,
                                        cudaStream_t stream) {
    const int splits = matmul_dbias_splits(N, OC);
    launch(matmul_dbias_partial_kernel, dim3((unsigned)CEIL_DIV(OC, 32 * x128::size), (unsigned)splits),
           dim3(32, MATMUL_DBIAS_BLOCK_Y), 0, stream, scratch, dout, N, OC);
    launch(matmul_dbias_reduce_kernel, dim3((unsigned)CEIL_DIV(OC, 32)), dim3(32, MATMUL_DBIAS_BLOCK_Y), 0, stream,
           dbias, (const float*)scratch, splits, OC);
}

// ----------------------------------------------------------------------------
// the launchers

static inline void matmul_check_aligned(const void* p, const char* fn, const char* name) {
    if (((uintptr_t)p & 15) != 0) ls_fatal("%s: %s = %p is not 16-byte aligned", fn, name, p);
}

static inline int matmul_overlap(const void* a, size_t abytes, const void* b, size_t bbytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bbytes && y < x + abytes;
}

static inline void matmul_check_dims(const char* fn, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) ls_fatal("%s: N=%d C=%d OC=%d (all > 0 expected)", fn, N, C, OC);
    if (C % 8 != 0 || OC % 8 != 0) ls_fatal("%s: C=%d and OC=%d must be multiples of 8", fn, C, OC);
}

static inline void matmul_note_unfused(const char* epilogue) {
    MatmulState& st = matmul_state();
    if (st.fusion_noted) return;
    st.fusion_noted = 1;
    fprintf(stderr, "leanstep: note: cuBLASLt has no %s kernel here; using the separate GELU kernels\n", epilogue);
}

// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) (bias may be NULL). With pre_gelu (N,OC) != NULL:
// pre_gelu = that value and out = gelu(pre_gelu).
static inline void matmul_forward(floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* weight,
                                  const floatX* bias, int N, int C, int OC, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_MATMUL, stream);
    static const char* fn = "matmul_forward";
    matmul_require_init(fn);
    matmul_check_dims(fn, N, C, OC);
    if (out == NULL || inp == NULL || weight == NULL) ls_fatal("%s: out, inp and weight must not be NULL", fn);
    matmul_check_aligned(out, fn, "out");
    matmul_check_aligned(inp, fn, "inp");
    matmul_check_aligned(weight, fn, "weight");
    if (bias != NULL) matmul_check_aligned(bias, fn, "bias");
    if (pre_gelu != NULL) matmul_check_aligned(pre_gelu, fn, "pre_gelu");
    const size_t xs = sizeof(floatX), no = (size_t)N * OC * xs;
    if (matmul_overlap(out, no, inp, (size_t)N * C * xs) || matmul_overlap(out, no, weight, (size_t)OC * C * xs) ||
        (pre_gelu != NULL && matmul_overlap(out, no, pre_gelu, no))) {
        ls_fatal("%s: out overlaps inp, weight or pre_gelu", fn);
    }
    GemmShape s = gemm_shape(N, OC, C, 0, 1); // weight (OC,C) used transposed
    if (pre_gelu == NULL) {
        matmul_gemm(out, inp, weight, s, GEMM_EPI_NONE, bias, NULL, stream);
        return;
    }
    if (matmul_state().gelu_fusion >= 1) {
        if (matmul_gemm(out, inp, weight, s, GEMM_EPI_GELU, bias, pre_gelu, stream)) return;
        matmul_note_unfused("GELU_AUX_BIAS");
    }
    matmul_gemm(pre_gelu, inp, weight, s, GEMM_EPI_NONE, bias, NULL, stream);
    gelu_forward(out, pre_gelu, (size_t)N * OC, stream);
}

// dinp (N,C) = dout (N,OC) @ weight (OC,C), overwritten, times gelu'(pre_gelu (N,C)) when pre_gelu != NULL
// (dinp may be NULL: no input gradient); dweight (OC,C) += dout^T @ inp (N,C) when dweight != NULL (NULL: a
// frozen weight, the weight GEMM is skipped and inp is not read); dbias (OC) += column sums of dout when
// dbias != NULL, using scratch (matmul_backward_scratch_bytes(N, OC) bytes).
static inline void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout,
                                   const floatX* inp, const floatX* weight, const floatX* pre_gelu, int N, int C,
                                   int OC, cudaStream_t stream) {
    PROFILE_SCOPE(PROF_MATMUL_BACKWARD, stream);
    static const char* fn = "matmul_backward";
    matmul_require_init(fn);
    matmul_check_dims(fn, N, C, OC);
    if (dout == NULL || weight == NULL) ls_fatal("%s: dout and weight must not be NULL", fn);
    if (dweight != NULL && inp == NULL) ls_fatal("%s: dweight needs inp (NULL)", fn);
    if (dbias != NULL && scratch == NULL) ls_fatal("%s: dbias needs scratch (matmul_backward_scratch_bytes)", fn);
    const void* ptrs[] = {dinp, dweight, dbias, scratch, dout, inp, weight, pre_gelu};
    const char* names[] = {"dinp", "dweight", "dbias", "scratch", "dout", "inp", "weight", "pre_gelu"};
    for (int i = 0; i < 8; i++)
        if (ptrs[i] != NULL) matmul_check_aligned(ptrs[i], fn, names[i]);
    const size_t xs = sizeof(floatX), nc = (size_t)N * C * xs;
    if (dinp != NULL && (matmul_overlap(dinp, nc, dout, (size_t)N * OC * xs) || (inp != NULL && matmul_overlap(dinp, nc, inp, nc)) ||
                         matmul_overlap(dinp, nc, weight, (size_t)OC * C * xs))) {
        ls_fatal("%s: dinp overlaps dout, inp or weight", fn);
    }
    if (dbias != NULL) matmul_backward_bias(dbias, scratch, dout, N, OC, stream);
    if (dinp != NULL) {
        GemmShape s = gemm_shape(N, C, OC, 0, 0); // dout (N,OC) @ weight (OC,C)
        bool done = false;
        if (pre_gelu != NULL && matmul_state().gelu_fusion >= 2) {
            done = matmul_gemm(dinp, dout, weight, s, GEMM_EPI_DGELU, NULL, (floatX*)pre_gelu, stream);
            if (!done) matmul_note_unfused("DGELU");
        }
        if (!done) {
            matmul_gemm(dinp, dout, weight, s, GEMM_EPI_NONE, NULL, NULL, stream);
            if (pre_gelu != NULL) gelu_backward_inplace(dinp, pre_gelu, (size_t)N * C, stream);
        }
    }
    if (dweight == NULL) return;
    GemmShape w = gemm_shape(OC, C, N, 1, 0); // dout^T: dout stored (N,OC) used transposed; inp (N,C)
    w.beta = 1.0f;
    matmul_gemm(dweight, dout, inp, w, GEMM_EPI_NONE, NULL, NULL, stream);
}

#endif // LLMC_MATMUL_CUH
