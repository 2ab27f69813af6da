/*
 lab_optim.h: what the two optimizer labs (adamw.cu: the AdamW ladder; optimizers.cu: the family
 through optim_step_gpu) share on top of lab.h, so that each holds only its cases, its
 references and its checks. Host code, C++17; compiles under nvcc and under the CPU harness.

   problems      Problem (a flat parameter buffer cut into tensors: the optimizer's segment table),
                 add_seg; gpt2_problem (GPT-2's tensors in PyTorch's named_parameters order, weight
                 decay on the 2-D ones); random_problem (tensors of random sizes, 40% tiny: tensor
                 boundaries inside 128-bit words); optlab_problems (what the flags ask for: the
                 --check set of small problems with odd sizes and one of GPT-2's shapes whose
                 int8-sized tensors start on 16-byte boundaries, -n N, --gpt2, or the --bench default).
   data          unit (uniform in [0, 1) from (seed, i) only), normalish (unit variance, bounded),
                 ulp_bf16; RefState (the float64 reference's state, ref_state_init).
   references    written here from the definitions, not by calling the code under test: the
                 random bits of stochastic rounding (lab_sr_key, lab_sr_bits: llmc/optim/srng.h's
                 hash) and bf16 stochastic rounding (lab_sr_bf16); the 8-bit maps (lab_quant8_maps:
                 llmc/optim/quant8.h's dynamic tree code) and lab_maps_match (the device's maps
                 against them).
   views         ViewPart, view_build (the parts of a placement: ZeRO-1 shards, BAdam blocks,
                 offload chunks, pieces of tensors; offset rebased, param global), view_gather,
                 whole_segment.
   host threads  OMP_MIN, LabOmpLimit (one OpenMP thread on small problems: no team spinning next
                 to the CPU harness's workers).
   command line  optlab_main: the whole main() of an optimizer lab (optlab_usage: its help), [--check | --bench] [-v|-c CASE]
                 [-n N | --gpt2] [-s STEPS] [-r REPEATS] [-q] plus the lab's own flags; --check
                 runs every case on every problem (optlab_check: the first line, a line per
                 problem, the count, the last line).
   bench         optlab_bench_begin (the banner and the device-to-device copy bandwidth); the rows
                 end in lab.h's lab_gbs_columns.

 A lab's Case has `id` (what the select flag matches; rows may share one) and `name`; its main is
     return optlab_main(argc, argv, "adamw", usage, "-v", kCases, extra_flags, check_one, bench);
 with check_one(case, problem, steps) -> ok and bench(cases, problem, options) -> exit status.
*/
#ifndef DEV_CUDA_LAB_OPTIM_H
#define DEV_CUDA_LAB_OPTIM_H

#include "dev/cuda/lab.h"
#include "llmc/optim/optim.h"
#include "llmc/optim/srng.h"
#include "llmc/optim/views.h"

#ifdef _OPENMP
#include <omp.h>
#endif

// ----------------------------------------------------------------------------
// problems

struct Problem {
    std::string name;
    size_t n = 0;
    std::vector<OptimSegment> segs; // sorted, contiguous, covering [0, n)
};

static inline void add_seg(Problem& pb, size_t count, float wd, float lr_mult) {
    pb.segs.push_back(optim_segment(pb.n, count, wd, lr_mult, (int)pb.segs.size()));
    pb.n += count;
}

// Uniform in [0, 1), a function of (seed, i) only.
static inline double unit(uint64_t seed, uint64_t i) {
    return (double)(srng_mix64(seed * 0x9e3779b97f4a7c15ULL ^ (i + 1) * 0xd1b54a32d192ed03ULL) >> 11) * 0x1.0p-53;
}

// Mean 0, variance 1, within +-3.5: the sum of four uniforms, scaled.
static inline double normalish(uint64_t seed, uint64_t i) {
    return (unit(seed, 4 * i) + unit(seed, 4 * i + 1) + unit(seed, 4 * i + 2) + unit(seed, 4 * i + 3) - 2.0) * 1.732;
}

// The spacing of bf16 numbers at |x| (normal range).
static inline double ulp_bf16(double x) {
    int e;
    frexp(fabs(x) > 1e-38 ? x : 1e-38, &e);
    return ldexp(1.0, e - 8);
}

// GPT-2 (vocabulary V, channels C, layers L, context T), one segment per tensor in PyTorch's
// named_parameters order: wte, wpe, per layer ln_1.{weight,bias}, attn.c_attn.{weight,bias},
// attn.c_proj.{weight,bias}, ln_2.{weight,bias}, mlp.c_fc.{weight,bias}, mlp.c_proj.{weight,bias},
// then ln_f.{weight,bias}. Weight decay 0.1 on the 2-D tensors. Adam-mini's blocks as
// llmc/params.h cuts them (NH heads): a matrix's rows, c_attn's q and k rows per head, a vector whole.
static inline void gpt2_problem_matrix(Problem& pb, size_t cols, size_t lead_rows = 0, size_t lead_block_rows = 0) {
    OptimSegment& s = pb.segs.back();
    s.cols = cols;
    s.mini_block = cols;
    s.mini_lead = lead_rows * cols;
    s.mini_lead_block = lead_block_rows * cols;
}
static inline Problem gpt2_problem(const char* name, size_t V, size_t C, size_t NH, size_t L, size_t T) {
    Problem pb;
    pb.name = name;
    add_seg(pb, V * C, 0.1f, 1.0f);
    gpt2_problem_matrix(pb, C);
    add_seg(pb, T * C, 0.1f, 1.0f);
    gpt2_problem_matrix(pb, C);
    for (size_t l = 0; l < L; l++) {
        const size_t sizes[12] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
        const size_t cols[12] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};  // (the matrices' row lengths)
        const bool decay[12] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};
        for (int k = 0; k < 12; k++) {
            add_seg(pb, sizes[k], decay[k] ? 0.1f : 0.0f, 1.0f);
            if (cols[k] > 0) gpt2_problem_matrix(pb, cols[k], k == 2 ? 2 * C : 0, C / NH);
        }
    }
    add_seg(pb, C, 0.0f, 1.0f);
    add_seg(pb, C, 0.0f, 1.0f);
    return pb;
}

// n elements in tensors of random sizes (40% of 1..9 elements: boundaries inside 128-bit words;
// the others up to n/8, some over the int8 threshold and several quantization blocks long), with
// weight decay 0, 0.1 or 0.01 and lr multipliers 1, 0.5, 2.
static inline Problem random_problem(size_t n, uint64_t seed) {
    Problem pb;
    pb.name = "random tensors, n=" + std::to_string(n);
    const float wds[3] = {0.0f, 0.1f, 0.01f}, lrs[3] = {1.0f, 0.5f, 2.0f};
    for (uint64_t k = 0; pb.n < n; k++) {
        size_t c = unit(seed, 3 * k) < 0.4 ? 1 + (size_t)(unit(seed, 3 * k + 1) * 9)
                                           : 1 + (size_t)(unit(seed, 3 * k + 1) * (n / 8 + 1));
        c = std::min(c, n - pb.n);
        add_seg(pb, c, wds[(size_t)(unit(seed, 3 * k + 2) * 3)], lrs[k % 3]);
    }
    return pb;
}

// ----------------------------------------------------------------------------
// references written from the definitions (not llmc/optim/srng.h's or quant8.h's code)

// The key of optimizer step `step` (1, 2, ...) of a run seeded with `seed`, and the 32 random bits of
// element i (the parameter's global index) in stream salt (0 bf16 parameters, 1 m, 2 v, 3 vmax): a
// splitmix64 hash (lab.h's mix64) of the seed and the step, then of the key, the index and the salt.
static inline uint64_t lab_sr_key(uint64_t seed, int step) { return mix64(seed * 0x9e3779b97f4a7c15ULL + (uint64_t)step); }
static inline uint32_t lab_sr_bits(uint64_t key, size_t i, unsigned salt) {
    return (uint32_t)(mix64(key ^ ((uint64_t)i * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)salt << 58)) >> 32);
}

// x rounded stochastically to bf16 with `bits`: the low 16 random bits added below the 16 kept, then
// truncated (x rounds away from zero with probability equal to the discarded fraction); a finite x.
static inline float lab_sr_bf16(float x, uint32_t bits) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + (bits & 0xffffu)) & 0xffff0000u;
    float y;
    memcpy(&y, &u, 4);
    return y;
}

// The two 8-bit maps (signed then unsigned, 256 floats each, ascending): a code's bits are [sign]
// [E zeros] [1] [F fraction bits] with value +-10^-E (0.1 + 0.9 (f + 1) / 2^F), F = 6 - E signed
// (E = 0..6; -0 and +0 in the middle), F = 7 - E unsigned (E = 0..7, after the code of 0); each
// value computed in double and rounded once to float.
static inline std::vector<float> lab_quant8_maps() {
    std::vector<double> pos, upos;
    for (int e = 6; e >= 0; e--)
        for (int f = 0; f < (1 << (6 - e)); f++) pos.push_back(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << (6 - e))));
    for (int e = 7; e >= 0; e--)
        for (int f = 0; f < (1 << (7 - e)); f++) upos.push_back(pow(10.0, -e) * (0.1 + 0.9 * (f + 1) / (double)(1 << (7 - e))));
    std::sort(pos.begin(), pos.end());
    std::sort(upos.begin(), upos.end());
    std::vector<float> maps;
    for (size_t k = pos.size(); k-- > 0;) maps.push_back(-(float)pos[k]);
    maps.push_back(-0.0f);
    maps.push_back(0.0f);
    for (double x : pos) maps.push_back((float)x);
    maps.push_back(0.0f);
    for (double x : upos) maps.push_back((float)x);
    if (maps.size() != 512) ls_fatal("lab_quant8_maps: %zu values, 512 expected", maps.size());
    return maps;
}

// Whether the 512 map values the device's state holds are lab_quant8_maps', bit for bit (prints the
// first difference).
static inline bool lab_maps_match(const float* device_maps) {
    const std::vector<float> want = lab_quant8_maps();
    std::vector<float> got(512);
    cudaCheck(cudaMemcpy(got.data(), device_maps, 512 * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < 512; k++) {
        if (memcmp(&got[k], &want[k], 4) != 0) {
            printf("      8-bit map entry %zu: %.9g on the device, %.9g by definition\n", k, got[k], want[k]);
            return false;
        }
    }
    return true;
}

// The options of optlab_main.
struct OptLabArgs {
    bool bench = false; // --bench (else --check)
    bool gpt2 = false;  // --gpt2: the 148 tensors of GPT-2 124M
    long long n = 0;    // -n: random tensors of n elements in all (0: not given)
    long long steps = 5, repeats = 20;
};

// The problems the options ask for: --gpt2, -n N, the --bench default (n = 124,475,904 on a GPU,
// 100,000 under the CPU harness), or the --check set: one element, odd sizes, a mini GPT-2, and GPT-2's
// shapes at C = 32 (n = 17,376): wte, fcw and fcprojw of 4096 elements (QUANT8_MIN_ELEMS: int8 state)
// at offsets that are multiples of 8, the only problem where the int8 kernels' 128-bit branch runs, as
// it does for every large tensor in training (the random tensors start anywhere, the mini GPT-2's are
// under the threshold).
static inline std::vector<Problem> optlab_problems(const OptLabArgs& o) {
    std::vector<Problem> problems;
    if (o.gpt2) problems.push_back(gpt2_problem("GPT-2 124M", 50304, 768, 12, 12, 1024));
    else if (o.n > 0) problems.push_back(random_problem((size_t)o.n, 42));
    else if (o.bench) problems.push_back(random_problem(LS_HARNESS ? 100000 : 124475904, 42));
    else {
        Problem one;
        one.name = "one element";
        add_seg(one, 1, 0.1f, 1.0f);
        problems.push_back(one);
        problems.push_back(random_problem(7, 1));
        problems.push_back(random_problem(4099, 2));
        problems.push_back(gpt2_problem("mini GPT-2 (V=101 C=20 NH=4 L=2 T=16)", 101, 20, 4, 2, 16));
        problems.push_back(random_problem(50001, 3));
        problems.push_back(gpt2_problem("GPT-2 shapes (V=128 C=32 NH=4 L=1 T=16)", 128, 32, 4, 1, 16));
    }
    return problems;
}

// The float64 reference of an optimizer: parameters, moments, AMSGrad's max of v, and the largest
// magnitudes each element has had over the steps so far (*_hist: tolerances scale with them).
struct RefState {
    std::vector<double> p, m, v, vmax, p_hist, m_hist, v_hist;
};

// The reference at step 0: the parameters the device holds (p0), moments 0.
static inline void ref_state_init(RefState& r, const std::vector<float>& p0) {
    const size_t n = p0.size();
    r.p.assign(p0.begin(), p0.end());
    r.p_hist.resize(n);
    for (size_t i = 0; i < n; i++) r.p_hist[i] = fabs(r.p[i]);
    for (std::vector<double>* x : {&r.m, &r.v, &r.vmax, &r.m_hist, &r.v_hist}) x->assign(n, 0.0);
}

// ----------------------------------------------------------------------------
// views: the whole model's segment table cut into the parts of a placement

// A part of the model: segments with offset compact in the part (its gradients, state, master)
// and param the global index (the parameters).
struct ViewPart {
    std::vector<OptimSegment> segs;
    size_t n = 0;
};

// Appends a part made of segs (rebased to a compact offset from 0 in their order) unless empty.
static inline void view_add(std::vector<ViewPart>& parts, std::vector<OptimSegment> segs) {
    if (segs.empty()) return;
    ViewPart vp;
    for (OptimSegment& sg : segs) {
        sg.offset = vp.n;
        vp.n += sg.count;
    }
    vp.segs = segs;
    parts.push_back(vp);
}

// The whole model cut at `cuts` (ascending) into parts of their own.
static inline void view_cut(std::vector<ViewPart>& parts, const Problem& pb, std::vector<size_t> cuts) {
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(pb.n);
    for (size_t k = 0; k + 1 < cuts.size(); k++) {
        if (cuts[k + 1] <= cuts[k] || cuts[k] >= pb.n) continue;
        std::vector<OptimSegment> part(pb.segs.size());
        const int np = optim_segments_cut(pb.segs.data(), (int)pb.segs.size(), cuts[k], cuts[k + 1], part.data());
        part.resize((size_t)np);
        view_add(parts, part);
    }
}

// The parts of a placement, cut where the optimizer allows (`cut`: llmc/optim/views.h optim_cut_of):
//   zero    3 shards as ZeRO-1 cuts them (zero_shard_elems), snapped
//   badam   2 blocks, the even and the odd tensors, each compact (BAdam's slices)
//   chunks  4 parts cut at block boundaries (offload's chunks; LAMB: at tensors)
//   pieces  one part: the tensors in reverse order, each cut into OPT_BLOCK pieces (a tensor's
//           pieces adjacent: LAMB sums over them; parameters off the state's 128-bit grid), or
//           whole (whole_tensors: 4-bit state, whose v scales are a segment's)
static inline std::vector<ViewPart> view_build(const char* name, const Problem& pb, OptimCut cut, bool whole_tensors = false) {
    std::vector<ViewPart> parts;
    const int nseg = (int)pb.segs.size();
    // (offload's chunks: whole blocks, and whole tensors or Adam-mini blocks where the state asks)
    const OptimCut chunk = cut == OPTIM_CUT_TENSOR || cut == OPTIM_CUT_MINI || cut == OPTIM_CUT_MINI_BLOCK ? cut : OPTIM_CUT_BLOCK;
    if (strcmp(name, "zero") == 0) {
        const size_t shard = zero_shard_elems(pb.n, 3);
        view_cut(parts, pb, {optim_cut_snap(pb.segs.data(), nseg, shard, cut), optim_cut_snap(pb.segs.data(), nseg, 2 * shard, cut)});
    } else if (strcmp(name, "badam") == 0) {
        for (size_t parity = 0; parity < 2; parity++) {
            std::vector<OptimSegment> blk;
            for (size_t s = parity; s < pb.segs.size(); s += 2) blk.push_back(pb.segs[s]);
            view_add(parts, blk);
        }
    } else if (strcmp(name, "chunks") == 0) {
        view_cut(parts, pb, {optim_cut_snap(pb.segs.data(), nseg, pb.n / 4, chunk),
                             optim_cut_snap(pb.segs.data(), nseg, pb.n / 2, chunk),
                             optim_cut_snap(pb.segs.data(), nseg, 3 * pb.n / 4, chunk)});
    } else { // pieces
        std::vector<OptimSegment> all;
        for (size_t s = pb.segs.size(); s-- > 0;) {
            const OptimSegment& sg = pb.segs[s];
            const size_t step = whole_tensors ? sg.count : (size_t)OPT_BLOCK;
            for (size_t r = 0; r < sg.count; r += step) {
                OptimSegment piece = sg;
                piece.param = sg.param + r;
                piece.trel = sg.trel + r;
                piece.count = std::min<size_t>(step, sg.count - r);
                all.push_back(piece);
            }
        }
        view_add(parts, all);
    }
    return parts;
}

// A part's elements from the whole model's host buffer x, as the part's segments place them.
template <typename T>
static inline std::vector<T> view_gather(const ViewPart& vp, const std::vector<T>& x) {
    std::vector<T> out(vp.n);
    for (const OptimSegment& sg : vp.segs) {
        for (size_t k = 0; k < sg.count; k++) out[sg.offset + k] = x[sg.param + k];
    }
    return out;
}

// The segment of the whole model's table holding element i.
static inline size_t whole_segment(const Problem& pb, size_t i) {
    size_t lo = 0, hi = pb.segs.size() - 1;
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (pb.segs[mid].offset <= i) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// ----------------------------------------------------------------------------
// host threads

// Host loops use OpenMP threads only for large problems: on small ones the threads would spin
// while the CPU harness runs the kernels.
#define OMP_MIN (1LL << 20)

// While it lives: one OpenMP thread when the problem has fewer than OMP_MIN elements.
struct LabOmpLimit {
    int threads = 0;
    explicit LabOmpLimit(long long n) {
#ifdef _OPENMP
        threads = omp_get_max_threads();
        if (n < OMP_MIN) omp_set_num_threads(1);
#else
        (void)n;
#endif
    }
    ~LabOmpLimit() {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
    }
    LabOmpLimit(const LabOmpLimit&) = delete;
    LabOmpLimit& operator=(const LabOmpLimit&) = delete;
};

// ----------------------------------------------------------------------------
// --check and --bench

// The groups of 8 elements of a problem's int8-sized tensors (QUANT8_MIN_ELEMS) that the blockwise
// int8 kernels (llmc/optim/update.cuh) move with 128-bit loads: 8 whole elements of
// a block, starting on a multiple of 8 both in the step's buffers and in the parameters (blocks start
// at the tensor's first element, threads at multiples of 8 in the block).
static inline size_t optlab_vector_groups(const Problem& pb) {
    size_t groups = 0;
    for (const OptimSegment& sg : pb.segs) {
        if (sg.tensor_count < QUANT8_MIN_ELEMS || sg.offset % 8 != 0 || sg.param % 8 != 0) continue;
        for (size_t rel = 0; rel < sg.count; rel += OPT_BLOCK) groups += std::min<size_t>(OPT_BLOCK, sg.count - rel) / 8;
    }
    return groups;
}

// Every case on every problem, check_one(case, problem, steps) -> ok. Prints the first line
// ("adamw --check (CPU harness, order forward)"), a line per problem and the failures (with -q
// only the failures), and the last line; returns the exit status. The --check set (must_vectorize)
// must reach the int8 kernels' 128-bit branch (optlab_vector_groups), as every large tensor in
// training does: a set that only took the element-wise branch would leave the other untested.
template <typename Case, typename Check>
static inline int optlab_check(const char* lab, const std::vector<Problem>& problems,
                               const std::vector<const Case*>& cases, int steps, Check check_one, bool must_vectorize) {
    if (!g_quiet) printf("%s --check (%s)\n", lab, lab_where(true).c_str());
    int failed = 0, total = 0;
    size_t groups = 0;
    for (const Problem& pb : problems) groups += optlab_vector_groups(pb);
    if (must_vectorize) {
        total++;
        if (groups == 0) {
            failed++;
            printf("  FAILED: no problem has int8-sized tensors on 16-byte boundaries (the int8 kernels' 128-bit branch)\n");
        }
    }
    for (const Problem& pb : problems) {
        if (!g_quiet) {
            printf("  problem: %s (n = %zu, %zu tensors, %zu int8 128-bit groups), %d steps\n", pb.name.c_str(), pb.n,
                   pb.segs.size(), optlab_vector_groups(pb), steps);
        }
        for (const Case* c : cases) {
            total++;
            if (!check_one(*c, pb, steps)) {
                failed++;
                if (g_quiet) printf("  FAILED: %s on %s\n", c->name, pb.name.c_str());
            }
        }
    }
    printf("%s --check: %d of %d cases passed (%zu problems x %zu cases, %d steps), %s\n", lab, total - failed, total,
           problems.size(), cases.size(), steps, lab_worst_note().c_str());
    return failed ? 1 : 0;
}

// The start of an optimizer bench: the banner ("<title>: <problem> (n = ..., ... tensors), device
// ...") and the device-to-device copy bandwidth, which it returns, over as many bytes as one fp32
// AdamW step moves (28 bytes per parameter read and written), each run after an L2 flush.
static inline double optlab_bench_begin(const char* title, const Problem& pb, int repeats) {
    const size_t bytes = std::max<size_t>(pb.n * 14, 1 << 20);
    printf("%s: %s (n = %zu, %zu tensors), %s\n", title, pb.name.c_str(), pb.n, pb.segs.size(), lab_device().c_str());
    const double copy = copy_gbs(bytes, repeats);
    printf("  device-to-device copy: %.1f GB/s (%.1f MB copied, median of %d)\n", copy, bytes / 1e6, repeats);
    return copy;
}

// ----------------------------------------------------------------------------
// command line

// The help text of an optimizer lab (optlab_main's flags; exits with status 2): select_flag and
// select_help, the case flag ("-v VERSION", "1 2 3, or all (default)"); extra_flags and
// extra_help, the lab's own ("[--torch]" and its lines, or "").
[[noreturn]] static inline void optlab_usage(const char* prog, const char* select_flag, const char* select_help,
                                             const char* extra_flags, const char* extra_help) {
    fprintf(stderr,
            "usage: %s [--check | --bench] [%s] [-n N | --gpt2] [-s STEPS] [-r REPEATS]%s [-q]\n"
            "  %-10s  %s\n"
            "  -n N        number of parameters, 1..2^33, split into random tensors\n"
            "  --gpt2      the 148 tensors of GPT-2 124M (n = 124475904)\n"
            "  -s STEPS    optimizer steps of --check, 1..1000 (default 5)\n"
            "  -r REPEATS  timed repeats of --bench, 1..1000 (default 20)\n"
            "%s"
            "  -q          --check prints failures and the summary only\n",
            prog, select_flag, extra_flags, select_flag, select_help, extra_help);
    exit(2);
}

// The main() of an optimizer lab: the flags of OptLabArgs, `select` ("-v" or "-c") picking the
// cases whose id matches (or all), extra(args) -> whether it took the lab's own flag at hand;
// then --check (optlab_check with check_one) or bench(cases, problem, options).
template <typename Case, size_t N, typename Extra, typename Check, typename Bench>
static inline int optlab_main(int argc, char** argv, const char* lab, LabUsage usage, const char* select,
                              const Case (&all)[N], Extra extra, Check check_one, Bench bench) {
    OptLabArgs o;
    const char* which = "all";
    LabArgv args(argc, argv, usage);
    while (args.next()) {
        if (args.mode(&o.bench)) continue;
        if (args.is("--gpt2")) o.gpt2 = true;
        else if (args.is(select)) which = args.value();
        else if (args.is("-n")) o.n = args.integer(1, 1LL << 33);
        else if (args.is("-s")) o.steps = args.integer(1, 1000);
        else if (args.is("-r")) o.repeats = args.integer(1, 1000);
        else if (!extra(args)) args.reject();
    }
    if (o.gpt2 && o.n != 0) args.fail("-n and --gpt2 exclude each other");
    std::vector<const Case*> cases;
    std::string ids; // the distinct ids, for the error message
    for (const Case& c : all) {
        if (strcmp(which, "all") == 0 || strcmp(which, c.id) == 0) cases.push_back(&c);
        if ((" " + ids + " ").find(" " + std::string(c.id) + " ") == std::string::npos) ids += (ids.empty() ? "" : " ") + std::string(c.id);
    }
    if (cases.empty()) args.fail("%s '%s': expected one of %s, or all", select, which, ids.c_str());
    const std::vector<Problem> problems = optlab_problems(o);
    if (o.bench) return bench(cases, problems[0], o);
    return optlab_check(lab, problems, cases, (int)o.steps, check_one, !o.gpt2 && o.n == 0);
}

#endif // DEV_CUDA_LAB_OPTIM_H
