/*
 blas_gemm.h: Muon's matrix multiply on the host (llmc/optim/muon.h's OptimGemm) through
 OpenBLAS's cblas_sgemm, for the CPU trainer, the GPU trainer's --offload cpu and the tests.
 The optimizer library takes it as a hook, so that it needs no BLAS of its own.
*/
#ifndef LLMC_BLAS_GEMM_H
#define LLMC_BLAS_GEMM_H

#include <cblas.h>

// C (M, N) = alpha op(A) op(B) + beta C, row-major, op(X) = X or X^T; lda, ldb, ldc: row strides.
static inline void blas_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                             const float* B, int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
}

#endif // LLMC_BLAS_GEMM_H
