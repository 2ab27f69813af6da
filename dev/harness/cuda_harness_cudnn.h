/*
 cuda_harness_cudnn.h: the entry points of the cuDNN attention library (llmc/kernels/cudnn_att.cuh
 declares them, llmc/kernels/cudnn_att.cpp implements them with cuDNN), computed on the CPU and
 part of every harness build (emitted where cudnn_att.cuh refers to them): the trainer's
 launchers find them linked in and never open build/libleanstep_cudnn.so. In every precision (the
 library is bf16 only): the flash path of the fp32 and fp16 labs runs here too.

   attention_forward_cudnn_{bf16,fp16,fp32}(out, stats, qkv, B, T, NH, C, scratch, scratch_bytes, stream)
   attention_backward_cudnn_{bf16,fp16,fp32}(dqkv, dout, qkv, out, stats, B, T, NH, C, deterministic, ...)
   attention_cudnn_free_gpu()
   attention_cudnn_graphs_gpu()

 The contract of cudnn_att.cuh, computed in fp32 from the stored inputs: scores s = q.k / sqrt(hs),
 stats = LSE(s), p = exp(s - stats), out = p @ v rounded once; the backward recomputes p from the
 stats (never stores it), D = sum(dout * out) from the stored (rounded) out, as cuDNN does,
 dv = p^T dout, ds = p (dout.v - D), dq = ds k / sqrt(hs), dk = ds^T q / sqrt(hs), each rounded
 once. Deterministic (both backward modes): each (b, h) is summed in a fixed order. The work is
 queued on the stream like a kernel (cuda_harness_streams.h): it runs after the work that writes
 its inputs. No workspace: scratch is not used. There are no graphs to build, but the count is
 kept as the library keeps it: a "graph" per distinct (direction, B, T, NH, C) since the last
 attention_cudnn_free_gpu, so CI checks how many shapes the trainer asks for.
*/
#ifndef LLMC_CUDA_HARNESS_CUDNN_H
#define LLMC_CUDA_HARNESS_CUDNN_H

#ifndef LLMC_CUDA_HARNESS_H
#error "include <cuda_runtime.h> (dev/harness/cuda_runtime.h in the harness build), not cuda_harness_cudnn.h"
#endif

namespace ls_harness {
namespace cudnn {

// The library's graph cache, keys only: (0 forward, 1 backward, 2 deterministic backward), B, T, NH, C.
struct Graphs {
    std::mutex mu;
    std::set<std::tuple<int, int, int, int, int>> keys;
    int built = 0;
};
inline Graphs& graphs() {
    static Graphs g;
    return g;
}
inline void graph_use(int direction, int B, int T, int NH, int C) {
    Graphs& g = graphs();
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.keys.insert(std::make_tuple(direction, B, T, NH, C)).second) g.built++;
}

// One (b, h): q, k, v rows of head h are qkv[(b*T + t)*3C + {0, C, 2C} + h*hs]; dq/dk/dv likewise.
// Forward: out rows, stats (T). s (T) is a work row.
template <typename X>
inline void forward_head(X* out, float* stats, const X* qkv, int T, int NH, int C, int h, float* s) {
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    std::vector<float> acc(hs);
    for (int t = 0; t < T; t++) {
        const X* q = qkv + (size_t)t * C3 + (size_t)h * hs;
        float m = -INFINITY;
        for (int j = 0; j <= t; j++) {
            const X* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            float d = 0.0f;
            for (int i = 0; i < hs; i++) d += elem_to_float(q[i]) * elem_to_float(k[i]);
            s[j] = d * scale;
            m = fmaxf(m, s[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j <= t; j++) sum += expf(s[j] - m);
        const float lse = m + logf(sum);
        stats[t] = lse;
        for (int i = 0; i < hs; i++) acc[i] = 0.0f;
        for (int j = 0; j <= t; j++) {
            const float p = expf(s[j] - lse);
            const X* v = qkv + (size_t)j * C3 + 2 * (size_t)C + (size_t)h * hs;
            for (int i = 0; i < hs; i++) acc[i] += p * elem_to_float(v[i]);
        }
        X* o = out + (size_t)t * C + (size_t)h * hs;
        for (int i = 0; i < hs; i++) o[i] = elem_from_float<X>(acc[i]);
    }
}

// Backward of one (b, h): dq, dk, dv of head h in dqkv (overwritten). dq32, dk32, dv32 (T, hs) and
// s (T) are work buffers.
template <typename X>
inline void backward_head(X* dqkv, const X* dout, const X* qkv, const X* out, const float* stats, int T, int NH, int C,
                          int h, float* dq32, float* dk32, float* dv32, float* s) {
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float scale = 1.0f / sqrtf((float)hs);
    for (size_t i = 0; i < (size_t)T * hs; i++) dq32[i] = dk32[i] = dv32[i] = 0.0f;
    for (int t = 0; t < T; t++) {
        const X* q = qkv + (size_t)t * C3 + (size_t)h * hs;
        const X* go = dout + (size_t)t * C + (size_t)h * hs;
        const X* o = out + (size_t)t * C + (size_t)h * hs;
        float D = 0.0f; // sum_i dout_i * out_i = sum_j p_j (dout . v_j)
        for (int i = 0; i < hs; i++) D += elem_to_float(go[i]) * elem_to_float(o[i]);
        for (int j = 0; j <= t; j++) {
            const X* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            const X* v = qkv + (size_t)j * C3 + 2 * (size_t)C + (size_t)h * hs;
            float qk = 0.0f, dp = 0.0f;
            for (int i = 0; i < hs; i++) {
                qk += elem_to_float(q[i]) * elem_to_float(k[i]);
                dp += elem_to_float(go[i]) * elem_to_float(v[i]);
            }
            const float p = expf(qk * scale - stats[t]);
            float* dv = dv32 + (size_t)j * hs;
            for (int i = 0; i < hs; i++) dv[i] += p * elem_to_float(go[i]);
            s[j] = p * (dp - D) * scale; // d loss / d (q.k)
        }
        float* dq = dq32 + (size_t)t * hs;
        for (int j = 0; j <= t; j++) {
            const X* k = qkv + (size_t)j * C3 + C + (size_t)h * hs;
            float* dk = dk32 + (size_t)j * hs;
            for (int i = 0; i < hs; i++) {
                dq[i] += s[j] * elem_to_float(k[i]);
                dk[i] += s[j] * elem_to_float(q[i]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) {
            X* row = dqkv + (size_t)t * C3 + (size_t)h * hs + i;
            row[0] = elem_from_float<X>(dq32[(size_t)t * hs + i]);
            row[C] = elem_from_float<X>(dk32[(size_t)t * hs + i]);
            row[2 * (size_t)C] = elem_from_float<X>(dv32[(size_t)t * hs + i]);
        }
}

template <typename X>
inline void forward(X* out, float* stats, const X* qkv, int B, int T, int NH, int C, cudaStream_t stream) {
    graph_use(0, B, T, NH, C);
    stream_task(stream, "attention_forward_cudnn (CPU)", [=] {
        const size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                std::vector<float> s(T);
                forward_head(out + (size_t)b * T * C, stats + ((size_t)b * NH + h) * T, qkv + (size_t)b * T * C3, T, NH,
                             C, h, s.data());
            }
    });
}

template <typename X>
inline void backward(X* dqkv, const X* dout, const X* qkv, const X* out, const float* stats, int B, int T, int NH, int C,
                     int deterministic, cudaStream_t stream) {
    graph_use(deterministic ? 2 : 1, B, T, NH, C);
    stream_task(stream, "attention_backward_cudnn (CPU)", [=] {
        const size_t C3 = 3 * (size_t)C;
        const int hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                std::vector<float> work(3 * (size_t)T * hs + T);
                float* w = work.data();
                const size_t n = (size_t)T * hs;
                backward_head(dqkv + (size_t)b * T * C3, dout + (size_t)b * T * C, qkv + (size_t)b * T * C3,
                              out + (size_t)b * T * C, stats + ((size_t)b * NH + h) * T, T, NH, C, h, w, w + n,
                              w + 2 * n, w + 3 * n);
            }
    });
}

} // namespace cudnn
} // namespace ls_harness

// ----------------------------------------------------------------------------
// the entry points (the prototypes of llmc/kernels/cudnn_att.cuh, one set per element type)

#define LS_CUDNN_ENTRY_POINTS(X, suffix)                                                                             \
    inline void attention_forward_cudnn_##suffix(X* out, float* stats, const X* qkv, int B, int T, int NH, int C,          \
                                          void* scratch, size_t scratch_bytes, cudaStream_t stream) {               \
        (void)scratch, (void)scratch_bytes;                                                                          \
        ls_harness::cudnn::forward(out, stats, qkv, B, T, NH, C, stream);                                            \
    }                                                                                                                \
    inline void attention_backward_cudnn_##suffix(X* dqkv, const X* dout, const X* qkv, const X* out, const float* stats, \
                                           int B, int T, int NH, int C, int deterministic, void* scratch,           \
                                           size_t scratch_bytes, cudaStream_t stream) {                             \
        (void)scratch, (void)scratch_bytes; /* always deterministic here */                                          \
        ls_harness::cudnn::backward(dqkv, dout, qkv, out, stats, B, T, NH, C, deterministic, stream);                \
    }
extern "C" {
LS_CUDNN_ENTRY_POINTS(__nv_bfloat16, bf16)
LS_CUDNN_ENTRY_POINTS(__half, fp16)
LS_CUDNN_ENTRY_POINTS(float, fp32)
inline void attention_cudnn_free_gpu(void) { // the graph cache emptied (the count stays)
    ls_harness::cudnn::Graphs& g = ls_harness::cudnn::graphs();
    std::lock_guard<std::mutex> lk(g.mu);
    g.keys.clear();
}
inline int attention_cudnn_graphs_gpu(void) {
    ls_harness::cudnn::Graphs& g = ls_harness::cudnn::graphs();
    std::lock_guard<std::mutex> lk(g.mu);
    return g.built;
}
}
#undef LS_CUDNN_ENTRY_POINTS

#endif // LLMC_CUDA_HARNESS_CUDNN_H
