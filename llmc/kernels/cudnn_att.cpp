/*
 cudnn_att.cpp: the GPU implementation of llmc/kernels/cudnn_att.cuh: causal bf16 attention through
 cuDNN's fused scaled-dot-product attention (the cuDNN frontend graph API, header-only C++).

 Its own translation unit, compiled once with the host compiler against the CUDA and cuDNN
 headers (no device code here), so that the frontend's heavy headers do not slow down every
 build of the trainer; built as a shared library linked with cuDNN (build/libleanstep_cudnn.so,
 only the four extern "C" entry points exported) that the BF16 nvcc builds open at run time on
 the first cudnn call (llmc/kernels/cudnn_load.h), so that they do not need libcudnn to start. The frontend's headers come
 from PyPI's nvidia-cudnn-frontend: `make cudnn-frontend` puts them in
 build/deps/cudnn_frontend/include.

 Graphs: one per (direction, B, T, NH, C), built on first use (validate, heuristics, plan: hundreds
 of ms) and kept until attention_cudnn_free_gpu; attention_cudnn_graphs_gpu counts the builds. The
 trainer keeps the shapes few: training's, and a small set for sampling and HellaSwag
 (gpt2_eval_shape in train_gpt2.cu). Tensors are described with the strides of the trainer's
 layouts, so nothing is permuted:
   Q, K, V  (B,NH,T,hs) views of qkv (B,T,3,NH,hs): strides (3C*T, hs, 3C, 1), offsets 0, C, 2C
   O, dO    (B,NH,T,hs) views of (B,T,NH,hs): strides (C*T, hs, C, 1)
   Stats    (B,NH,T,1) fp32, contiguous: the natural-log LSE of each row of scaled scores
 Failures (no cuDNN handle, a graph cuDNN does not support, a workspace larger than the caller's
 scratch) are one line naming the shape and `--attention matmul`, and exit non-zero.
*/
#define LS_CUDNN_ATT_IMPL
#include "llmc/kernels/cudnn_att.cuh"

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include "llmc/utils.h"

namespace fe = cudnn_frontend;

namespace {

// tensor uids of the graphs (the variant packs map them to pointers)
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct AttGraph {
    std::shared_ptr<fe::graph::Graph> graph;
    int64_t workspace = 0;
};

// (0 forward, 1 backward, 2 deterministic backward), B, T, NH, C
using AttKey = std::tuple<int, int, int, int, int>;

struct CudnnAttState {
    cudnnHandle_t handle = nullptr;
    std::map<AttKey, AttGraph> graphs;
    int built = 0; // graphs built since the process started
};

// Never destroyed at exit (plans must go before the CUDA context does): attention_cudnn_free().
CudnnAttState& cudnn_att_state() {
    static CudnnAttState* s = new CudnnAttState;
    return *s;
}

[[noreturn]] void cudnn_att_fail(const char* fn, int B, int T, int NH, int C, const std::string& why) {
    ls_fatal("%s: cuDNN attention cannot run B=%d T=%d NH=%d hs=%d (causal, bf16): %s; use --attention matmul", fn, B,
             T, NH, C / NH, why.c_str());
}

cudnnHandle_t cudnn_att_handle(const char* fn, int B, int T, int NH, int C) {
    CudnnAttState& st = cudnn_att_state();
    if (st.handle == nullptr) {
        cudnnStatus_t s = cudnnCreate(&st.handle);
        if (s != CUDNN_STATUS_SUCCESS) {
            st.handle = nullptr;
            cudnn_att_fail(fn, B, T, NH, C, std::string("cudnnCreate failed: ") + cudnnGetErrorString(s));
        }
    }
    return st.handle;
}

std::shared_ptr<fe::graph::Tensor_attributes> att_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                         std::vector<int64_t> dim, std::vector<int64_t> stride) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

// The graph of one direction and shape, built on first use.
const AttGraph& cudnn_att_graph(bool backward, bool deterministic, int B, int T, int NH, int C, size_t scratch_bytes) {
    const char* fn = backward ? "attention_backward_cudnn" : "attention_forward_cudnn";
    CudnnAttState& st = cudnn_att_state();
    const AttKey key{backward ? (deterministic ? 2 : 1) : 0, B, T, NH, C};
    auto it = st.graphs.find(key);
    if (it != st.graphs.end()) {
        if ((size_t)it->second.workspace > scratch_bytes) {
            cudnn_att_fail(fn, B, T, NH, C, "cuDNN needs " + std::to_string(it->second.workspace) +
                                                " bytes of workspace, the caller passed " +
                                                std::to_string(scratch_bytes));
        }
        return it->second;
    }
    cudnnHandle_t handle = cudnn_att_handle(fn, B, T, NH, C);
    const int64_t b = B, t = T, nh = NH, hs = C / NH, c3 = 3 * (int64_t)C;
    const std::vector<int64_t> dim = {b, nh, t, hs};
    const std::vector<int64_t> qkv_stride = {c3 * t, hs, c3, 1}; // (B,T,3,NH,hs)
    const std::vector<int64_t> o_stride = {nh * hs * t, hs, nh * hs, 1}; // (B,T,NH,hs)
    const std::vector<int64_t> stats_dim = {b, nh, t, 1}, stats_stride = {nh * t, t, 1, 1};
    const float scale = 1.0f / sqrtf((float)hs);

    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = att_tensor(*g, "Q", UID_Q, dim, qkv_stride);
    auto K = att_tensor(*g, "K", UID_K, dim, qkv_stride);
    auto V = att_tensor(*g, "V", UID_V, dim, qkv_stride);
    if (!backward) {
        // causal: query i sees keys j <= i (the band's right bound 0 from the top-left diagonal; Q and K
        // have the same length)
        auto attrs = fe::graph::SDPA_attributes()
                         .set_name("attention_forward")
                         .set_generate_stats(true)
                         .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                         .set_diagonal_band_right_bound(0)
                         .set_attn_scale(scale);
        auto [O, stats] = g->sdpa(Q, K, V, attrs);
        O->set_output(true).set_dim(dim).set_stride(o_stride).set_uid(UID_O);
        stats->set_output(true).set_dim(stats_dim).set_stride(stats_stride).set_uid(UID_STATS)
            .set_data_type(fe::DataType_t::FLOAT);
    } else {
        auto O = att_tensor(*g, "O", UID_O, dim, o_stride);
        auto dO = att_tensor(*g, "dO", UID_DO, dim, o_stride);
        auto stats = att_tensor(*g, "stats", UID_STATS, stats_dim, stats_stride);
        stats->set_data_type(fe::DataType_t::FLOAT);
        auto attrs = fe::graph::SDPA_backward_attributes()
                         .set_name("attention_backward")
                         .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                         .set_diagonal_band_right_bound(0)
                         .set_deterministic_algorithm(deterministic)
                         .set_attn_scale(scale);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, attrs);
        dQ->set_output(true).set_dim(dim).set_stride(qkv_stride).set_uid(UID_DQ);
        dK->set_output(true).set_dim(dim).set_stride(qkv_stride).set_uid(UID_DK);
        dV->set_output(true).set_dim(dim).set_stride(qkv_stride).set_uid(UID_DV);
    }
    AttGraph entry;
    entry.graph = g;
    try {
        auto step = [&](fe::error_t e, const char* what) {
            if (e.is_bad()) cudnn_att_fail(fn, B, T, NH, C, std::string(what) + ": " + e.get_message());
        };
        step(g->validate(), "validate");
        step(g->build_operation_graph(handle), "build_operation_graph");
        step(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
        step(g->check_support(handle), "check_support");
        step(g->build_plans(handle), "build_plans");
        step(g->get_workspace_size(entry.workspace), "get_workspace_size");
    } catch (const std::exception& e) {
        cudnn_att_fail(fn, B, T, NH, C, std::string("exception: ") + e.what());
    }
    if (entry.workspace < 0 || (size_t)entry.workspace > scratch_bytes) {
        cudnn_att_fail(fn, B, T, NH, C, "cuDNN needs " + std::to_string(entry.workspace) +
                                            " bytes of workspace, the caller passed " + std::to_string(scratch_bytes));
    }
    st.built++;
    return st.graphs.emplace(key, entry).first->second;
}

void cudnn_att_execute(const char* fn, const AttGraph& ag, std::unordered_map<int64_t, void*>& pack, void* scratch,
                       cudaStream_t stream, int B, int T, int NH, int C) {
    cudnnHandle_t handle = cudnn_att_handle(fn, B, T, NH, C);
    cudnnStatus_t s = cudnnSetStream(handle, stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        cudnn_att_fail(fn, B, T, NH, C, std::string("cudnnSetStream: ") + cudnnGetErrorString(s));
    }
    fe::error_t e;
    try {
        e = ag.graph->execute(handle, pack, scratch);
    } catch (const std::exception& ex) {
        cudnn_att_fail(fn, B, T, NH, C, std::string("execute: exception: ") + ex.what());
    }
    if (e.is_bad()) cudnn_att_fail(fn, B, T, NH, C, "execute: " + e.get_message());
}

} // namespace

void attention_forward_cudnn_bf16(__nv_bfloat16* out, float* stats, const __nv_bfloat16* qkv, int B, int T, int NH,
                                  int C, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const AttGraph& ag = cudnn_att_graph(false, false, B, T, NH, C, scratch_bytes);
    __nv_bfloat16* base = const_cast<__nv_bfloat16*>(qkv); // the variant pack takes void*; cuDNN only reads Q, K, V
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, base}, {UID_K, base + C}, {UID_V, base + 2 * (size_t)C}, {UID_O, out}, {UID_STATS, stats}};
    cudnn_att_execute("attention_forward_cudnn", ag, pack, scratch, stream, B, T, NH, C);
}

void attention_backward_cudnn_bf16(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                   const __nv_bfloat16* out, const float* stats, int B, int T, int NH, int C,
                                   int deterministic, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
    const AttGraph& ag = cudnn_att_graph(true, deterministic != 0, B, T, NH, C, scratch_bytes);
    __nv_bfloat16* base = const_cast<__nv_bfloat16*>(qkv); // inputs: read only
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, base},
        {UID_K, base + C},
        {UID_V, base + 2 * (size_t)C},
        {UID_O, const_cast<__nv_bfloat16*>(out)},
        {UID_DO, const_cast<__nv_bfloat16*>(dout)},
        {UID_STATS, const_cast<float*>(stats)},
        {UID_DQ, dqkv},
        {UID_DK, dqkv + C},
        {UID_DV, dqkv + 2 * (size_t)C},
    };
    cudnn_att_execute("attention_backward_cudnn", ag, pack, scratch, stream, B, T, NH, C);
}

int attention_cudnn_graphs_gpu(void) { return cudnn_att_state().built; }

void attention_cudnn_free_gpu(void) {
    CudnnAttState& st = cudnn_att_state();
    st.graphs.clear();
    if (st.handle != nullptr) {
        cudnnStatus_t s = cudnnDestroy(st.handle);
        if (s != CUDNN_STATUS_SUCCESS) ls_fatal("attention_cudnn_free: cudnnDestroy: %s", cudnnGetErrorString(s));
        st.handle = nullptr;
    }
}
