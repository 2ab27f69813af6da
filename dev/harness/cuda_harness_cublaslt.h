/*
 cuda_harness_cublaslt.h: the cuBLASLt calls of llmc/kernels/matmul.cuh, computed on the CPU, for the
 CPU-harness builds. dev/harness/cublasLt.h includes it after the toolkit's <cublasLt.h>, whose
 declarations it implements (a signature that drifts from cuBLASLt's does not compile), so the
 trainer's own cuBLASLt code (descriptors, the plan cache, the heuristic query, the fallback when
 an epilogue has no algorithm) runs in CI as on a GPU.

 Implemented: the handle; matmul descriptors (compute type 32F or 32F_FAST_TF32, scale type 32F,
 TRANSA/TRANSB N or T, epilogues DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, with the bias
 pointer, the aux pointer and its leading dimension); matrix layouts (CUDA_R_32F, CUDA_R_16BF,
 CUDA_R_16F, column-major, batch count, strided batch offset); preferences (workspace bytes, the
 minimum alignments of A, B, C, D, the reduction scheme mask: recorded, a CPU GEMM has no split-K);
 the heuristic (one algorithm, no workspace); cublasLtMatmul with host alpha and beta; the version
 and status strings. Anything else (another attribute, epilogue, type, order, operation) stops the
 run with one line naming it: a use this file does not model cannot pass unnoticed.

 Numerics, per element of D: fp32 products of the fp32-widened inputs, accumulated in fp32 in
 order of k (the harness build has -ffp-contract=off: no fused multiply-adds), then alpha * acc +
 beta * C, + bias, the epilogue in fp32 (GELU and its derivative from llmc/kernels/gelu.cuh, the
 functions of the separate GELU kernels) and one rounding to D's type (nearest even).
 FAST_TF32 first rounds the inputs to TF32 (10-bit mantissa, to nearest, ties away from zero).
 An element's value does not depend on the blocking or the threads.

 What a GPU would reject or leave undefined stops the run with one line: a matrix address (or a
 batch stride) less aligned than the alignment its algorithm was chosen for
 (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), layouts that do not fit the operation, an
 epilogue without its bias or aux pointer, a handle or descriptor not created (or destroyed).

 LEANSTEP_HARNESS_CUBLASLT_GELU=0: the heuristic finds no algorithm for the GELU epilogues (as on a
 cuBLASLt without those kernels), so the trainer's separate-kernel fallback runs instead.

 cublasLtMatmul reads its arguments and the descriptors' values when it is called (as cuBLASLt
 does) and queues the GEMM on its stream (cuda_harness_streams.h). Enough work takes one OpenMP
 team: a single matrix is split by blocks of D, a batch by matrices.
*/
#ifndef LLMC_CUDA_HARNESS_CUBLASLT_H
#define LLMC_CUDA_HARNESS_CUBLASLT_H

#ifndef LS_HARNESS_CUBLASLT_H
#error "include <cublasLt.h> (dev/harness/cublasLt.h in the harness build), not cuda_harness_cublaslt.h"
#endif

#include <stdint.h>
#include <string.h>
#include <vector>
#include "llmc/kernels/gelu.cuh" // gelu_value, gelu_derivative: the epilogues' GELU

struct cublasLtContext { // the handle (cublasLt.h declares the struct, the library defines it)
    uint32_t magic;
};

namespace ls_harness {
namespace lt {

constexpr uint32_t kHandle = 0x4c54484e, kDesc = 0x4c544453, kLayout = 0x4c544c59, kPref = 0x4c545046;
constexpr uint64_t kAlgo = 0x4c5441474f000001ull;

struct Desc {
    uint32_t magic;
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
};

struct Layout {
    uint32_t magic;
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};

struct Pref {
    uint32_t magic;
    uint64_t max_workspace;
    uint32_t reduction_mask;
    uint32_t align[4]; // A, B, C, D
};

// The GELU epilogues have algorithms unless LEANSTEP_HARNESS_CUBLASLT_GELU=0.
inline bool gelu_epilogues() {
    static const bool on = env_long("LEANSTEP_HARNESS_CUBLASLT_GELU", 1, 0, 1) != 0;
    return on;
}

inline const char* epilogue_name(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
        case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
        case CUBLASLT_EPILOGUE_RELU: return "RELU";
        case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
        case CUBLASLT_EPILOGUE_GELU: return "GELU";
        case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
        case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
        case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
        default: return "unknown";
    }
}
// The names of the attributes, for the one-line refusals.
#define LS_LT_NAME(x) \
    case x: return #x;
inline const char* desc_attr_name(cublasLtMatmulDescAttributes_t a) {
    switch (a) {
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_SCALE_TYPE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_POINTER_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_TRANSA)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_TRANSB)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_TRANSC)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_FILL_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_BIAS_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_FAST_ACCUM)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_A_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_B_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_C_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_D_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR)
        default: return "an attribute this cuBLASLt does not know";
    }
}
inline const char* layout_attr_name(cublasLtMatrixLayoutAttribute_t a) {
    switch (a) {
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_TYPE)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_ORDER)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_ROWS)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_COLS)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_LD)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET)
        LS_LT_NAME(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE)
        default: return "an attribute this cuBLASLt does not know";
    }
}
inline const char* pref_attr_name(cublasLtMatmulPreferenceAttributes_t a) {
    switch (a) {
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_SEARCH_MODE)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT)
        LS_LT_NAME(CUBLASLT_MATMUL_PREF_IMPL_MASK)
        default: return "an attribute this cuBLASLt does not know";
    }
}
#undef LS_LT_NAME

inline bool epilogue_has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
inline bool epilogue_gelu(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
inline bool epilogue_aux(uint32_t e) { return epilogue_gelu(e) || e == CUBLASLT_EPILOGUE_DGELU; }

inline size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
inline const char* type_name(cudaDataType_t t) {
    return t == CUDA_R_32F ? "CUDA_R_32F" : t == CUDA_R_16BF ? "CUDA_R_16BF" : t == CUDA_R_16F ? "CUDA_R_16F" : "?";
}

inline Desc* desc_of(cublasLtMatmulDesc_t d, const char* fn) {
    Desc* x = reinterpret_cast<Desc*>(d);
    if (x == nullptr || x->magic != kDesc) die("cuBLASLt: %s: matmul descriptor %p not created or destroyed", fn, (void*)d);
    return x;
}
inline Layout* layout_of(cublasLtMatrixLayout_t l, const char* fn, const char* which) {
    Layout* x = reinterpret_cast<Layout*>(l);
    if (x == nullptr || x->magic != kLayout) die("cuBLASLt: %s: layout %s %p not created or destroyed", fn, which, (void*)l);
    return x;
}
inline Pref* pref_of(cublasLtMatmulPreference_t p, const char* fn) {
    Pref* x = reinterpret_cast<Pref*>(p);
    if (x == nullptr || x->magic != kPref) die("cuBLASLt: %s: preference %p not created or destroyed", fn, (void*)p);
    return x;
}
inline void handle_check(cublasLtHandle_t h, const char* fn) {
    if (h == nullptr || h->magic != kHandle) die("cuBLASLt: %s: handle %p not created or destroyed", fn, (void*)h);
}

// An attribute's value of the size cuBLASLt stores it in; false (CUBLAS_STATUS_INVALID_VALUE) otherwise.
template <typename V>
inline bool attr_read(V* v, const void* buf, size_t bytes) {
    if (buf == nullptr || bytes != sizeof(V)) return false;
    memcpy(v, buf, sizeof(V));
    return true;
}

// One call, in row-major terms: for i < batch, D_i (M,N) = epilogue(alpha op(A_i) (M,K) op(B_i) (K,N) + beta C_i).
// cuBLASLt's column-major D (m,n) is the row-major (n,m) matrix with the same leading dimension, so
// M = n, N = m, A is cuBLASLt's B and B its A, with the same transposes (see Problem's builder).
struct Gemm {
    int M, N, K, trans_a, trans_b, batch;
    long long lda, ldb, ldc, ldd, ld_aux, stride_a, stride_b, stride_c, stride_d;
    float alpha, beta;
    uint32_t epilogue;
    bool tf32;
    cudaDataType_t type;
    const void *a, *b, *c, *bias;
    void *d, *aux;
};

// The operation the descriptors describe, checked; dies on what cuBLASLt would reject.
inline Gemm problem(const char* fn, const Desc& op, const Layout& la, const Layout& lb, const Layout& lc,
                    const Layout& ld) {
    if (la.type != lb.type || la.type != lc.type || la.type != ld.type) {
        die("cuBLASLt: %s: A, B, C, D of types %s, %s, %s, %s: the harness implements one type for all four", fn,
            type_name(la.type), type_name(lb.type), type_name(lc.type), type_name(ld.type));
    }
    const uint64_t m = ld.rows, n = ld.cols;
    const uint64_t ka = op.transa == CUBLAS_OP_N ? la.cols : la.rows, ma = op.transa == CUBLAS_OP_N ? la.rows : la.cols;
    const uint64_t kb = op.transb == CUBLAS_OP_N ? lb.rows : lb.cols, nb = op.transb == CUBLAS_OP_N ? lb.cols : lb.rows;
    if (ma != m || nb != n || ka != kb || lc.rows != m || lc.cols != n) {
        die("cuBLASLt: %s: op(A) (%llu,%llu) op(B) (%llu,%llu) do not make C/D (%llu,%llu)/(%llu,%llu)", fn,
            (unsigned long long)ma, (unsigned long long)ka, (unsigned long long)kb, (unsigned long long)nb,
            (unsigned long long)lc.rows, (unsigned long long)lc.cols, (unsigned long long)m, (unsigned long long)n);
    }
    if (m == 0 || n == 0 || ka == 0 || m > 0x7fffffff || n > 0x7fffffff || ka > 0x7fffffff) {
        die("cuBLASLt: %s: m=%llu n=%llu k=%llu (1 to 2^31-1 each)", fn, (unsigned long long)m, (unsigned long long)n,
            (unsigned long long)ka);
    }
    const Layout* ls[4] = {&la, &lb, &lc, &ld};
    const char* names = "ABCD";
    for (int i = 0; i < 4; i++) {
        if (ls[i]->ld < (int64_t)ls[i]->rows) {
            die("cuBLASLt: %s: %c has leading dimension %lld below its %llu rows", fn, names[i], (long long)ls[i]->ld,
                (unsigned long long)ls[i]->rows);
        }
        if (ls[i]->batch != ld.batch) {
            die("cuBLASLt: %s: %c has batch count %d, D %d", fn, names[i], (int)ls[i]->batch, (int)ld.batch);
        }
    }
    if (epilogue_aux(op.epilogue) && (ld.batch != 1)) {
        die("cuBLASLt: %s: epilogue %s with batch count %d (the harness implements 1)", fn, epilogue_name(op.epilogue),
            (int)ld.batch);
    }
    Gemm g;
    memset(&g, 0, sizeof g);
    g.M = (int)n;
    g.N = (int)m;
    g.K = (int)ka;
    g.trans_a = op.transb == CUBLAS_OP_T;
    g.trans_b = op.transa == CUBLAS_OP_T;
    g.batch = ld.batch;
    g.lda = lb.ld;
    g.ldb = la.ld;
    g.ldc = lc.ld;
    g.ldd = ld.ld;
    g.ld_aux = op.aux_ld;
    g.stride_a = lb.stride;
    g.stride_b = la.stride;
    g.stride_c = lc.stride;
    g.stride_d = ld.stride;
    g.epilogue = op.epilogue;
    g.tf32 = op.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    g.type = ld.type;
    return g;
}

// TF32: the fp32 value with a 10-bit mantissa, rounded to nearest, ties away from zero.
inline float tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

// for (i < n) f(i), shared out among the threads of the enclosing OpenMP team when `team` (an
// orphaned worksharing loop: every thread of the team must call it), else by the calling thread.
template <typename F>
inline void team_for(int n, bool team, F f) {
    if (team) {
#pragma omp for schedule(static)
        for (int i = 0; i < n; i++) f(i);
    } else {
        for (int i = 0; i < n; i++) f(i);
    }
}

// One matrix: op(A), op(B) to fp32 row-major buffers A32 (M,K), B32 (K,N), then D in blocks of 8
// rows x 256 columns: for each k the block's rows add a_ik * B32[k, cols] to accumulators that stay
// in L1 (the inner loop runs along a contiguous row and vectorizes, and each row of B32 is read
// once per 8 rows of D), then the epilogue in fp32 and one rounding per output element.
constexpr int kMR = 8, kNB = 256;
template <typename T>
inline void gemm_one(const Gemm& s, T* D, const T* A, const T* Bm, const T* Cm, float* __restrict__ A32,
                     float* __restrict__ B32, bool team) {
    const int M = s.M, N = s.N, K = s.K;
    auto in = [&](T x) { return s.tf32 ? tf32_round(elem_to_float(x)) : elem_to_float(x); };
    if (s.trans_a) { // A stored (K,M): read rows, write columns
        team_for(K, team, [&](int k) {
            for (int m = 0; m < M; m++) A32[(size_t)m * K + k] = in(A[k * s.lda + m]);
        });
    } else {
        team_for(M, team, [&](int m) {
            for (int k = 0; k < K; k++) A32[(size_t)m * K + k] = in(A[m * s.lda + k]);
        });
    }
    if (s.trans_b) { // B stored (N,K)
        team_for(N, team, [&](int n) {
            for (int k = 0; k < K; k++) B32[(size_t)k * N + n] = in(Bm[n * s.ldb + k]);
        });
    } else {
        team_for(K, team, [&](int k) {
            for (int n = 0; n < N; n++) B32[(size_t)k * N + n] = in(Bm[k * s.ldb + n]);
        });
    }
    // (the worksharing loops above end with a barrier: A32 and B32 are complete)
    const T* bias = epilogue_has_bias(s.epilogue) ? (const T*)s.bias : nullptr;
    T* aux = epilogue_aux(s.epilogue) ? (T*)s.aux : nullptr;
    const bool gelu = epilogue_gelu(s.epilogue), dgelu = s.epilogue == CUBLASLT_EPILOGUE_DGELU;
    const int mblocks = (M + kMR - 1) / kMR, nblocks = (N + kNB - 1) / kNB;
    team_for(mblocks * nblocks, team, [&](int job) {
        const int m0 = job / nblocks * kMR, n0 = job % nblocks * kNB;
        const int mr = M - m0 < kMR ? M - m0 : kMR;
        const int nb = N - n0 < kNB ? N - n0 : kNB;
        float acc[kMR][kNB];
        for (int i = 0; i < mr; i++)
            for (int n = 0; n < nb; n++) acc[i][n] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float* __restrict__ brow = B32 + (size_t)k * N + n0;
            for (int i = 0; i < mr; i++) {
                const float av = A32[(size_t)(m0 + i) * K + k];
                float* __restrict__ ai = acc[i];
                for (int n = 0; n < nb; n++) ai[n] += av * brow[n];
            }
        }
        for (int i = 0; i < mr; i++) {
            T* drow = D + (m0 + i) * s.ldd + n0;
            const T* crow = Cm + (m0 + i) * s.ldc + n0;
            T* xrow = aux != nullptr ? aux + (m0 + i) * s.ld_aux + n0 : nullptr;
            const T* brow = bias != nullptr ? bias + n0 : nullptr;
            for (int n = 0; n < nb; n++) {
                float v = s.alpha * acc[i][n];
                if (s.beta != 0.0f) v += s.beta * elem_to_float(crow[n]);
                if (brow != nullptr) v += elem_to_float(brow[n]);
                if (gelu) {
                    xrow[n] = elem_from_float<T>(v);
                    v = gelu_value(v);
                } else if (dgelu) {
                    v *= gelu_derivative(elem_to_float(xrow[n]));
                }
                drow[n] = elem_from_float<T>(v);
            }
        }
    });
}

// The whole call. One OpenMP team, and only for enough work (the team's threads would otherwise
// spin next to the harness): a single matrix is split by blocks of D, a batch by matrices.
template <typename T>
inline void gemm_run(const Gemm& s) {
    const bool par = (double)s.batch * s.M * s.N * s.K >= 2097152.0;
    const size_t na = (size_t)s.M * s.K, nb = (size_t)s.K * s.N;
    auto mat = [&](int i, float* A32, float* B32, bool team) {
        gemm_one<T>(s, (T*)s.d + i * s.stride_d, (const T*)s.a + i * s.stride_a, (const T*)s.b + i * s.stride_b,
                    (const T*)s.c + i * s.stride_c, A32, B32, team);
    };
    if (s.batch == 1) {
        std::vector<float> A32(na), B32(nb);
#pragma omp parallel if (par)
        mat(0, A32.data(), B32.data(), true);
    } else {
#pragma omp parallel if (par)
        {
            std::vector<float> A32(na), B32(nb);
#pragma omp for schedule(static)
            for (int i = 0; i < s.batch; i++) mat(i, A32.data(), B32.data(), false);
        }
    }
}

// The largest power of two (up to 4096) dividing the address and the batch stride in bytes.
inline uint32_t alignment_of(const void* p, long long stride_elems, size_t elem_bytes, int batch) {
    uintptr_t x = (uintptr_t)p | (uintptr_t)4096;
    if (batch > 1) x |= (uintptr_t)(stride_elems * (long long)elem_bytes);
    return (uint32_t)(x & (~x + 1));
}

} // namespace lt
} // namespace ls_harness

// ----------------------------------------------------------------------------
// the API (exact prototypes of cublasLt.h and cublas_api.h)

extern "C" {

inline const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

inline const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        default: return "an error the harness's cuBLASLt does not return";
    }
}
inline const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
inline const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// The cuBLASLt version whose API this file implements (the toolkit's headers).
inline size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasLtContext{ls_harness::lt::kHandle};
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    ls_harness::lt::handle_check(handle, "cublasLtDestroy");
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    using namespace ls_harness;
    if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
        die("cuBLASLt: cublasLtMatmulDescCreate: compute type %d (the harness implements CUBLAS_COMPUTE_32F and "
            "CUBLAS_COMPUTE_32F_FAST_TF32)", (int)compute);
    }
    if (scale != CUDA_R_32F) die("cuBLASLt: cublasLtMatmulDescCreate: scale type %d (CUDA_R_32F expected)", (int)scale);
    lt::Desc* d = new lt::Desc;
    memset(d, 0, sizeof *d);
    d->magic = lt::kDesc;
    d->compute = compute;
    d->scale = scale;
    d->transa = d->transb = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    ls_harness::lt::Desc* d = ls_harness::lt::desc_of(desc, "cublasLtMatmulDescDestroy");
    d->magic = 0;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
    using namespace ls_harness;
    static const char* fn = "cublasLtMatmulDescSetAttribute";
    lt::Desc* d = lt::desc_of(desc, fn);
    bool ok = false;
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
        case CUBLASLT_MATMUL_DESC_TRANSB: {
            int32_t v;
            ok = lt::attr_read(&v, buf, bytes);
            if (ok && v != CUBLAS_OP_N && v != CUBLAS_OP_T) {
                die("cuBLASLt: %s: CUBLASLT_MATMUL_DESC_TRANS%c = %d (the harness implements CUBLAS_OP_N and CUBLAS_OP_T)",
                    fn, attr == CUBLASLT_MATMUL_DESC_TRANSA ? 'A' : 'B', (int)v);
            }
            if (ok) (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = v;
            break;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE: {
            uint32_t v;
            ok = lt::attr_read(&v, buf, bytes);
            if (ok && v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_BIAS && !lt::epilogue_aux(v)) {
                die("cuBLASLt: %s: CUBLASLT_MATMUL_DESC_EPILOGUE = %u (%s; the harness implements DEFAULT, BIAS, "
                    "GELU_AUX, GELU_AUX_BIAS and DGELU)", fn, v, lt::epilogue_name(v));
            }
            if (ok) d->epilogue = v;
            break;
        }
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = lt::attr_read(&d->bias, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = lt::attr_read(&d->aux, buf, bytes); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = lt::attr_read(&d->aux_ld, buf, bytes); break;
        default:
            die("cuBLASLt: %s: %s (%d) is not implemented by the harness", fn, lt::desc_attr_name(attr), (int)attr);
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    using namespace ls_harness;
    if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (type != CUDA_R_32F && type != CUDA_R_16BF && type != CUDA_R_16F) {
        die("cuBLASLt: cublasLtMatrixLayoutCreate: data type %d (the harness implements CUDA_R_32F, CUDA_R_16BF, "
            "CUDA_R_16F)", (int)type);
    }
    lt::Layout* l = new lt::Layout;
    memset(l, 0, sizeof *l);
    l->magic = lt::kLayout;
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    l->batch = 1;
    *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    ls_harness::lt::Layout* l = ls_harness::lt::layout_of(layout, "cublasLtMatrixLayoutDestroy", "");
    l->magic = 0;
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
    using namespace ls_harness;
    static const char* fn = "cublasLtMatrixLayoutSetAttribute";
    lt::Layout* l = lt::layout_of(layout, fn, "");
    bool ok = false;
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
            ok = lt::attr_read(&l->batch, buf, bytes);
            if (ok && l->batch < 1) die("cuBLASLt: %s: CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = %d", fn, (int)l->batch);
            break;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = lt::attr_read(&l->stride, buf, bytes); break;
        case CUBLASLT_MATRIX_LAYOUT_ORDER: {
            int32_t v;
            ok = lt::attr_read(&v, buf, bytes);
            if (ok && v != CUBLASLT_ORDER_COL) {
                die("cuBLASLt: %s: CUBLASLT_MATRIX_LAYOUT_ORDER = %d (the harness implements CUBLASLT_ORDER_COL)", fn, (int)v);
            }
            break;
        }
        default:
            die("cuBLASLt: %s: %s (%d) is not implemented by the harness", fn, lt::layout_attr_name(attr), (int)attr);
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    using namespace ls_harness;
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    lt::Pref* p = new lt::Pref;
    memset(p, 0, sizeof *p);
    p->magic = lt::kPref;
    p->reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    for (uint32_t& a : p->align) a = 256; // cuBLASLt's defaults
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    ls_harness::lt::Pref* p = ls_harness::lt::pref_of(pref, "cublasLtMatmulPreferenceDestroy");
    p->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
    using namespace ls_harness;
    static const char* fn = "cublasLtMatmulPreferenceSetAttribute";
    lt::Pref* p = lt::pref_of(pref, fn);
    bool ok = false;
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = lt::attr_read(&p->max_workspace, buf, bytes); break;
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
            ok = lt::attr_read(&p->reduction_mask, buf, bytes);
            if (ok && (p->reduction_mask & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK) != 0) {
                die("cuBLASLt: %s: CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 0x%x (bits of 0x%x expected)", fn,
                    p->reduction_mask, (unsigned)CUBLASLT_REDUCTION_SCHEME_MASK);
            }
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
            uint32_t v;
            ok = lt::attr_read(&v, buf, bytes);
            if (ok && (v == 0 || (v & (v - 1)) != 0)) {
                die("cuBLASLt: %s: minimum alignment %u bytes (a power of two expected)", fn, v);
            }
            if (ok) p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
            break;
        }
        default:
            die("cuBLASLt: %s: %s (%d) is not implemented by the harness", fn, lt::pref_attr_name(attr), (int)attr);
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm for every supported operation: no workspace; it remembers the alignments it may
// assume (cublasLtMatmul checks the matrices against them).
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op_desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
    using namespace ls_harness;
    static const char* fn = "cublasLtMatmulAlgoGetHeuristic";
    lt::handle_check(handle, fn);
    const lt::Desc& op = *lt::desc_of(op_desc, fn);
    const lt::Pref& p = *lt::pref_of(pref, fn);
    if (requested <= 0 || results == nullptr || returned == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    lt::problem(fn, op, *lt::layout_of(a, fn, "A"), *lt::layout_of(b, fn, "B"), *lt::layout_of(c, fn, "C"),
                *lt::layout_of(d, fn, "D"));
    if (lt::epilogue_aux(op.epilogue)) {
        // the GELU epilogues' aux matrix: D's shape, a leading dimension that is a multiple of 8
        const lt::Layout& ld = *lt::layout_of(d, fn, "D");
        if (!lt::gelu_epilogues() || op.aux_ld < (int64_t)ld.rows || op.aux_ld % 8 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = lt::kAlgo;
    for (int i = 0; i < 4; i++) results[0].algo.data[1 + i] = p.align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op_desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
                              const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    using namespace ls_harness;
    static const char* fn = "cublasLtMatmul";
    (void)workspace, (void)workspace_bytes; // the algorithm needs none
    lt::handle_check(handle, fn);
    const lt::Desc& op = *lt::desc_of(op_desc, fn);
    const lt::Layout *la = lt::layout_of(a, fn, "A"), *lb = lt::layout_of(b, fn, "B");
    const lt::Layout *lc = lt::layout_of(c, fn, "C"), *ld = lt::layout_of(d, fn, "D");
    lt::Gemm g = lt::problem(fn, op, *la, *lb, *lc, *ld);
    if (alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || C == nullptr || D == nullptr) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (algo != nullptr) {
        if (algo->data[0] != lt::kAlgo) {
            die("cuBLASLt: %s: algo %p did not come from cublasLtMatmulAlgoGetHeuristic", fn, (const void*)algo);
        }
        const void* ptrs[4] = {A, B, C, D};
        const lt::Layout* ls[4] = {la, lb, lc, ld};
        for (int i = 0; i < 4; i++) {
            const uint32_t have = lt::alignment_of(ptrs[i], ls[i]->stride, lt::type_bytes(ls[i]->type), ls[i]->batch);
            if (have < algo->data[1 + i]) {
                die("cuBLASLt: %s: %c = %p (batch stride %lld elements) is aligned to %u bytes, below the %u bytes "
                    "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES) its algorithm was chosen for", fn, "ABCD"[i], ptrs[i],
                    (long long)ls[i]->stride, have, (unsigned)algo->data[1 + i], "ABCD"[i]);
            }
        }
    }
    if (lt::epilogue_has_bias(op.epilogue) && op.bias == nullptr) {
        die("cuBLASLt: %s: epilogue %s without CUBLASLT_MATMUL_DESC_BIAS_POINTER", fn, lt::epilogue_name(op.epilogue));
    }
    if (lt::epilogue_aux(op.epilogue) && (op.aux == nullptr || op.aux_ld < (int64_t)ld->rows)) {
        die("cuBLASLt: %s: epilogue %s without CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER or with AUX_LD %lld below %llu "
            "rows", fn, lt::epilogue_name(op.epilogue), (long long)op.aux_ld, (unsigned long long)ld->rows);
    }
    memcpy(&g.alpha, alpha, sizeof g.alpha); // host pointers (CUBLASLT_POINTER_MODE_HOST), read now
    memcpy(&g.beta, beta, sizeof g.beta);
    g.a = B; // row-major: A is cuBLASLt's B, B its A (see Gemm)
    g.b = A;
    g.c = C;
    g.d = D;
    g.bias = op.bias;
    g.aux = op.aux;
    stream_task(stream, "cublasLtMatmul (CPU)", [g] {
        if (g.type == CUDA_R_32F) lt::gemm_run<float>(g);
        else if (g.type == CUDA_R_16BF) lt::gemm_run<__nv_bfloat16>(g);
        else lt::gemm_run<__half>(g);
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

#endif // LLMC_CUDA_HARNESS_CUBLASLT_H
