/*
 test_gpt2.cu: checks train_gpt2.cu against the PyTorch reference (dev/reference/gpt2_ref.py),
 like test_gpt2.c, plus a determinism and resume check. Runs on a GPU, and in CI under the CPU
 execution harness (make test_gpt2cu_emu PRECISION=FP32|BF16).

   test_gpt2cu --model M.bin --state S.bin [--resume-check 1]
   test_gpt2cu --sweep 1      every awkward (B, T, NH) against a float64 forward (dev/test/shape_sweep.h)

 Tolerances (the reference model has random biases and layernorm parameters; measured on the CI
 config, L2C64H4T64 B4 T32, under the harness; a planted reference bug fails each build, see
 dev/test/test_ref_mutants.py):
   fp32 build: same arithmetic as test_gpt2.c, only the summation order differs: logits
     max|diff| <= 1e-5 max|ref| (measured 3.7e-7), loss 1e-6 relative (1e-7), each gradient
     tensor max|diff| <= 5e-5 max|ref| (6.9e-6), 10 losses 2e-6 relative (1e-7).
   bf16 build: parameters, activations and gradients are rounded to bf16 (8 significant bits,
     relative step 2^-8 = 3.9e-3) at every op, so errors of a few bf16 steps are expected:
     logits max|diff| <= 2e-2 max|ref| (measured 6.1e-3), loss 1e-4 relative (4e-6: the mean over
     B*T rows averages the rounding out), each gradient tensor max|diff| <= 5e-2 max|ref| (1.3e-2,
     ~3 bf16 steps), the 10 losses 1e-4 relative (8e-6; stochastic rounding keeps the update
     unbiased). Ignoring the layernorm parameters moves the loss by 2.6e-4 relative.
 Every check runs with -r 1 (the default), -r 0 and -r 2 (recompute in the backward pass).
 Determinism: the same steps from the same checkpoint give bit-identical losses and parameters.
 --offload: bit-identical to the on-device update. --badam (check_badam, on a small random model
 in both precisions): compact gradients bit-identical to the full backward pass's, updates touch
 the active block only, memory predicted = allocated, mid-block resume bit-exact.
 Muon (--muon-state): 10 steps against gpt2_ref.py's float64 Muon with the same tolerances, each run
 orthogonalized in pieces of one matrix (MUON_PIECE_ELEMS here: the trainer's default takes these
 small runs whole, and the matrix test compares it with the CPU trainer), and a bit-exact resume.
 Adam-mini (--adam-mini-state): 10 steps against gpt2_ref.py's (block means in float64) at lr 5e-3
 with the same tolerances (bf16 build: the steps 1e-3, check_adam_mini).
*/
#define TESTING
#define MUON_PIECE_ELEMS ((size_t)1024)
#include "train_gpt2.cu"
static const TrainOptions* model_check_opts(void);
#define REF_BUILD_OPTS model_check_opts()  // the step losses on the --attention path too
// loss scaling of the reference checks: the FP16 build's gradients need it, (p - y) / BT underflows
// fp16 at scale 1 (1 elsewhere)
#define REF_LOSS_SCALE (FLOATX_IS_FP16 ? 1024.0f : 1.0f)
#include "dev/test/test_common.h"

// logits, loss, gradients, step losses (see test_common.h)
#if FLOATX_IS_BF16
static const RefTolerances TOL = {2e-2, 1e-4, 5e-2, 1e-4};
#elif FLOATX_IS_FP16
// fp16 rounds at 2^-11 (bf16 2^-8); measured at REF_LOSS_SCALE 1024: logits 7.5e-4, loss 5.3e-7,
// gradients 1.5e-3 (3.3e-2 at scale 1: underflow), steps 1.4e-6
static const RefTolerances TOL = {5e-3, 2e-5, 1e-2, 2e-5};
#else
static const RefTolerances TOL = {1e-5, 1e-6, 5e-5, 2e-6};
#endif

// The run state of a one-process checkpoint after `step` steps (the resume checks).
static RunState one_process_state(size_t num_params, int step) {
    RunState rs;
    memset(&rs, 0, sizeof rs);
    rs.num_processes = 1;
    rs.step = step;
    rs.has_m_v = 1;
    rs.num_params = num_params;
    return rs;
}

// The memory model for what `model` was built with equals what it allocated, category by
// category; returns the predicted total.
static size_t check_memory_model(const GPT2* model, int B, int T, size_t badam_block, const char* what) {
    (void)badam_block;  // the model's own options say it
    GpuMemoryOptions mo = gpt2_memory_options(model, B, T, 1);
    MemoryReport predicted = memory_model_gpu(&model->config, B, T, &mo);
    for (int i = 0; i < MEM_COUNT; i++) {
        CHECK(predicted.bytes[i] == model->mem.bytes[i], "%s memory %s: predicted %zu bytes, allocated %zu", what,
              mem_category_names[i], predicted.bytes[i], model->mem.bytes[i]);
    }
    for (int i = 0; i < MEM_COUNT; i++) {
        CHECK(predicted.host[i] == model->mem.host[i], "%s host memory %s: predicted %zu bytes, allocated %zu", what,
              mem_category_names[i], predicted.host[i], model->mem.host[i]);
    }
    CHECK(predicted.host_pinned == model->mem.host_pinned, "%s memory: host pinned predicted %zu, allocated %zu", what,
          predicted.host_pinned, model->mem.host_pinned);
    return memory_report_total(&predicted);
}

// The classifier once per training step: gpt2_forward_train's one pass writes the dlogits that the
// backward's classifier wrote after an evaluation forward, bit for bit, with a gradient-accumulation
// scale (1/3); the gradients are then bit-identical; the loss read at the end of the step is the
// evaluation loss (1e-6 relative: a tree sum instead of a sequential one), also over 2 micro-steps.
static void check_forward_train(GPT2* model, const RefState* s, size_t n_params) {
    int B = s->B, T = s->T, BT = B * T, V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    const float scale = 1.0f / 3.0f;
    size_t nl = (size_t)BT * Vp;
    floatX* da = (floatX*)mallocCheck(nl * sizeof(floatX));
    floatX* db = (floatX*)mallocCheck(nl * sizeof(floatX));
    float* ga = (float*)mallocCheck(n_params * sizeof(float));
    float* gb = (float*)mallocCheck(n_params * sizeof(float));
    ActivationTensors* a = &model->acts;
    float loss = gpt2_forward(model, s->inputs, s->targets, B, T);  // then the classifier as the backward ran it before
    fused_classifier(a->output, a->losses, scale / (float)BT, a->targets, BT, V, Vp, 1, model->stream);
    cudaCheck(cudaMemcpy(da, a->output, nl * sizeof(floatX), cudaMemcpyDeviceToHost));
    gpt2_begin_step(model, 0);
    gpt2_forward_train(model, s->inputs, s->targets, B, T, scale);
    cudaCheck(cudaMemcpy(db, a->output, nl * sizeof(floatX), cudaMemcpyDeviceToHost));
    int same = memcmp(da, db, nl * sizeof(floatX)) == 0;
    CHECK(same, "forward_train: dlogits differ from the backward classifier's");
    gpt2_backward(model, s->inputs, s->targets, B, T, scale);
    float lt = (float)gpt2_loss_sum(model);
    download_floatx(gb, model->grads_memory, n_params);
    gpt2_begin_step(model, 0);  // the same step: the same rounding seed in the encoder backward
    gpt2_forward(model, s->inputs, s->targets, B, T);
    gpt2_backward(model, s->inputs, s->targets, B, T, scale);
    download_floatx(ga, model->grads_memory, n_params);
    same = same && memcmp(ga, gb, n_params * sizeof(float)) == 0;
    CHECK(memcmp(ga, gb, n_params * sizeof(float)) == 0, "forward_train: gradients differ from forward + backward classifier");
    CHECK(fabsf(lt - loss) <= 1e-6f * fabsf(loss), "forward_train: loss %.9g, evaluation forward %.9g", lt, loss);
    gpt2_begin_step(model, 0);
    for (int micro = 0; micro < 2; micro++) {
        gpt2_forward_train(model, s->inputs, s->targets, B, T, 0.5f);
        gpt2_backward(model, s->inputs, s->targets, B, T, 0.5f);
    }
    double l2 = gpt2_loss_sum(model);
    CHECK(fabs(l2 - 2.0 * loss) <= 2e-6 * fabs(loss), "forward_train: 2 micro-steps sum to %.9g, expected %.9g", l2, 2.0 * loss);
    printf("forward_train: dlogits and gradients %s the backward classifier's (scale 1/3); loss %.7f, 2 micro-steps %.7f\n",
           same ? "bit-identical to" : "DIFFERENT from", lt, l2);
    free(da); free(db); free(ga); free(gb);
}

// --attention matmul|cudnn: the model check on that path (default: the build's, with NULL options);
// g_recompute: the model check with -r 0 or 2 (-1: the default, 1)
static int g_attention = -1;
static int g_recompute = -1;

// Under ASan+UBSan (make test-san, LS_SANITIZED) a step is ~6x slower (~7 s here): every run takes
// fewer steps there (a path's memory errors show in its first steps), the recompute variants skip
// the forward_train comparison (the same kernels as -r 1's, other activations), and the offload
// cases keep one per way of cutting chunks. Every path still runs under the sanitizers; the full
// step counts and every case run in the plain builds.
#ifndef LS_SANITIZED
#define LS_SANITIZED 0
#endif
static int san_steps(int steps, int sanitized) { return LS_SANITIZED ? sanitized : steps; }

static const TrainOptions* model_check_opts(void) {
    static TrainOptions o;
    if (g_attention < 0 && g_recompute < 0) { return NULL; }
    train_options_defaults(&o);
    trainer_defaults(&o);
    if (g_attention >= 0) { o.attention = g_attention; }
    o.recompute = g_recompute >= 0 ? g_recompute : 1;
    return &o;
}

static void check_model(const char* model_path, const char* state_path) {
    GPT2Config c;
    ParamTable pt;
    RefState s;
    ref_load(model_path, state_path, &c, &pt, &s);
    GPT2 model;
    gpt2_build(&model, model_path, 0, s.B, s.T, model_check_opts());
    printf("attention: %s, recompute -r %d\n", model.flash ? "cudnn (flash)" : "matmul", model.recompute);
    int B = s.B, T = s.T, V = c.vocab_size, Vp = c.padded_vocab_size;

    // the memory table equals what was allocated
    size_t total = check_memory_model(&model, B, T, 0, "model");
    printf("memory: predicted = allocated in all %d categories (%.1f MiB)\n", MEM_COUNT, mib(total));
    size_t BT = (size_t)B * T;

    // forward: logits and loss
    float loss = gpt2_forward(&model, s.inputs, s.targets, B, T);
    float* host = (float*)mallocCheck((BT * Vp > pt.total ? BT * Vp : pt.total) * sizeof(float));
    download_floatx(host, model.acts.output, BT * Vp);
    ref_check_forward(host, Vp, loss, &s, V, &TOL);

    // backward: every parameter gradient
    // (fp16: under loss scaling, as the trainer runs it: dlogits of (p - y) / BT underflow fp16 at 1)
    gpt2_zero_grad(&model);
    gpt2_backward(&model, s.inputs, s.targets, B, T, REF_LOSS_SCALE);
    download_floatx(host, model.grads_memory, pt.total);
    for (size_t i = 0; i < pt.total; i++) { host[i] /= REF_LOSS_SCALE; }  // (a power of two: exact)
    ref_check_grads(host, &pt, &s, &TOL, 1);
    free(host);
    if (!(LS_SANITIZED && g_recompute >= 0)) { check_forward_train(&model, &s, pt.total); }
    gpt2_free(&model);

    // training: the losses of n AdamW steps on the same batch (the recompute variants, and every
    // run sanitized: 3; recompute changes only the backward pass, which step 0 checked in full)
    s.n_steps = g_recompute >= 0 ? 3 : san_steps(s.n_steps, 3);
    ref_check_steps(model_path, &s, &TOL);
    ref_state_free(&s);
}

// Runs `steps` steps from `first_step` on the reference batch; losses into out.
static void run_steps(GPT2* model, const RefState* s, int first_step, int steps, float* out) {
    for (int i = 0; i < steps; i++) {
        gpt2_begin_step(model, first_step + i);
        gpt2_forward_train(model, s->inputs, s->targets, s->B, s->T, 1.0f);
        gpt2_backward(model, s->inputs, s->targets, s->B, s->T, 1.0f);
        gpt2_grad_norm(model, 1.0f, 1.0f);
        out[i] = (float)gpt2_loss_sum(model);
        gpt2_update(model, 3e-4f, first_step + i + 1);
    }
}

static void check_resume(const char* model_path, const char* state_path, const TrainOptions* opts, const char* what);

// Muon's 10 steps against gpt2_ref.py state --optimizer muon (the CPU test's check_muon): Newton-
// Schulz in floatX through the batched GEMM (bf16 build: bf16 with fp32 accumulation) against the
// reference's float64, with the build's step tolerance. Then a resume after 3 steps: bit-identical.
// Then the same with --offload cpu, where Newton-Schulz runs in fp32 on the host (OpenBLAS): not the
// device's bits, so against the float64 reference again, with the same tolerance (the host's
// products are no less exact than the device's), and its resume.
static void check_muon(const char* model_path, const char* state_path) {
    TrainOptions o;
    train_options_defaults(&o);
    trainer_defaults(&o);
    ref_check_muon(model_path, state_path, &TOL, &o);
    o.opt_state = OPT_STATE_BF16;  // (its stochastic rounding too)
    check_resume(model_path, state_path, &o, "muon, bf16 state,");
    TrainOptions oc;
    train_options_defaults(&oc);
    trainer_defaults(&oc);
    oc.offload = OFFLOAD_CPU;
    printf("--offload cpu: ");
    ref_check_muon(model_path, state_path, &TOL, &oc);
    oc.opt_state = OPT_STATE_INT8;
    check_resume(model_path, state_path, &oc, "muon, --offload cpu, int8 state,");
}

// Adam-mini's 10 steps against gpt2_ref.py state --optimizer adam-mini (the CPU test's
// check_adam_mini, its lr; its resumes: test_optim_matrix.py's cells).
// The bf16 build's losses: 1e-3 relative. At lr 5e-3 an update moves the layernorm weights (|w| ~ 1,
// bf16 step 2^-7) by under one bf16 step, so stochastic rounding's noise is the update's size and
// the losses drift from float64's by up to 4.3e-4 over the 10 steps (measured; AdamW's reference
// steps run at lr 1e-4).
// The fp32 build keeps 2e-6, where a partition off by one head fails.
static void check_adam_mini(const char* model_path, const char* state_path) {
    TrainOptions o;
    train_options_defaults(&o);
    trainer_defaults(&o);
    RefTolerances tol = TOL;
    if (FLOATX_IS_BF16) { tol.steps = 1e-3; }
    ref_check_optimizer(model_path, state_path, &tol, &o, OPT_ADAM_MINI, 5e-3f);
}

// Save after 3 steps, run 5 more; reload the checkpoint and rerun the 5: bit-identical.
static void check_resume(const char* model_path, const char* state_path, const TrainOptions* opts, const char* what) {
    GPT2Config c;
    ParamTable pt;
    RefState s;
    ref_load(model_path, state_path, &c, &pt, &s);
    char dir[] = "/tmp/leanstep_cu_XXXXXX";
    if (mkdtemp(dir) == NULL) { ls_fatal("mkdtemp failed"); }
    char ckpt_model[256], ckpt_state[256];
    snprintf(ckpt_model, sizeof(ckpt_model), "%s/model.bin", dir);
    snprintf(ckpt_state, sizeof(ckpt_state), "%s/state.bin", dir);
    // 3 steps, the checkpoint, 5 more (sanitized: 2 and 2)
    const int n1 = san_steps(3, 2), n2 = san_steps(5, 2);
    float first[3], a[5], b[5];
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    GPT2 model;
    gpt2_build(&model, model_path, 7, s.B, s.T, opts);
    run_steps(&model, &s, 0, n1, first);
    RunState rs = one_process_state(model.num_parameters, n1);
    gpt2_checkpoint_write(&model, ckpt_model, ckpt_state, &rs);
    run_steps(&model, &s, n1, n2, a);
    float* pa = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(pa, model.params_memory, pt.total);
    gpt2_free(&model);

    gpt2_build(&model, ckpt_model, 7, s.B, s.T, opts);
    RunState rs2;
    gpt2_state_read(&model, ckpt_state, &rs2);
    run_steps(&model, &s, n1, n2, b);
    float* pb = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(pb, model.params_memory, pt.total);
    gpt2_free(&model);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "%s resume: losses differ after reloading the checkpoint (%.7f vs %.7f ...)", what, a[0], b[0]);
    CHECK(memcmp(pa, pb, pt.total * sizeof(float)) == 0, "%s resume: parameters differ after reloading the checkpoint", what);
    CHECK(a[n2 - 1] < first[0], "%s resume: the loss went down over %d steps (%.4f -> %.4f)", what, n1 + n2, first[0], a[n2 - 1]);
    if (memcmp(a, b, sizeof(a)) == 0 && memcmp(pa, pb, pt.total * sizeof(float)) == 0) {
        printf("%s resume: %d steps after reloading the step-%d checkpoint: bit-identical losses and parameters\n", what, n2, n1);
    }
    free(pa); free(pb);
    ref_state_free(&s);
    remove(ckpt_model);
    remove(ckpt_state);
    rmdir(dir);
}

// --offload stream and cpu: the same steps as the on-device update, bit for bit (losses,
// parameters, the whole state block), with the state on the host. stream: only two chunks of
// staging on the device (chunks that do not divide the parameter count), for optimizers whose
// chunks cut differently: elements (AdamW, Lion), int8 absmax blocks, LAMB's and 4-bit tensors
// (Adam-mini's: the blocks' v too). cpu: the CPU's update of every rule but Muon (whose host
// Newton-Schulz is fp32: check_muon), no state or master weights on the device.
static void check_offload(const char* model_path, const char* state_path) {
    static const struct { OptimKind kind; OptimStatePrecision state; int sanitized, badam; } cases[] = {
        {OPT_ADAMW, OPT_STATE_FP32, 0, 0}, {OPT_ADAMW, OPT_STATE_INT8, 1, 0}, {OPT_LION, OPT_STATE_FP32, 0, 0},
        {OPT_LAMB, OPT_STATE_FP32, 1, 0},
        {OPT_MUON, OPT_STATE_INT8, 1, 0},  // (whole matrices per chunk; its AdamW tensors' v packed)
        {OPT_MUON, OPT_STATE_4BIT, 0, 0},  // (whole tensors per chunk; v's codes packed in whole blocks)
        {OPT_ADAM_MINI, OPT_STATE_4BIT, 0, 0},  // (whole tensors per chunk, the blocks' v copied)
        // a BAdam block per step: views whose parameters are not at their state's offsets (cpu: the
        // host's rounding keys the global index), in bf16 state (its rounding too)
        {OPT_ADAMW, OPT_STATE_BF16, 1, 1},
    };
    GPT2Config c;
    ParamTable pt;
    RefState s;
    ref_load(model_path, state_path, &c, &pt, &s);
    for (size_t i = 0; i < 2 * sizeof(cases) / sizeof(cases[0]); i++) {
        const int mode = i % 2 ? OFFLOAD_CPU : OFFLOAD_STREAM;
        const size_t ci = i / 2;
        if (LS_SANITIZED && !cases[ci].sanitized) { continue; }  // (elements: int8's cut covers them)
        if (mode == OFFLOAD_CPU && cases[ci].kind == OPT_MUON) { continue; }  // (other bits: check_muon)
        if (mode == OFFLOAD_STREAM && cases[ci].badam) { continue; }  // (the matrix's badam+offload cells)
        TrainOptions o;
        train_options_defaults(&o);
        trainer_defaults(&o);  // the build's attention
        o.optimizer = cases[ci].kind;
        o.opt_state = cases[ci].state;
        if (cases[ci].kind == OPT_LION) { o.beta2 = 0.99f; }
        if (cases[ci].badam) { o.badam = 1; o.badam_order = BADAM_DESCENDING; o.badam_embed = 1; }
        TrainOptions oo = o;
        oo.offload = mode;
        oo.offload_chunk = (int)(pt.total / 3 + 1000);  // 3 full chunks and a short one
        char what[64];
        snprintf(what, sizeof(what), "offload %s %s %s%s", offload_choices[mode], optim_kind_name(cases[ci].kind),
                 optim_precision_name(cases[ci].state), cases[ci].badam ? " --badam 1" : "");
        GPT2 on, off;
        gpt2_build(&on, model_path, 5, s.B, s.T, &o);
        gpt2_build(&off, model_path, 5, s.B, s.T, &oo);
        check_memory_model(&off, s.B, s.T, 0, what);
        CHECK(off.mem.host_pinned > 0, "%s: host pinned memory", what);
        // (LAMB's chunks hold whole tensors: here wte alone is over half the model, so two chunks of
        // staging are more than the on-device state)
        CHECK(off.mem.bytes[MEM_OPT_STATE] < on.mem.bytes[MEM_OPT_STATE] || 2 * off.stage_elems > pt.total,
              "%s: device state is the staging only (%zu vs %zu)", what, off.mem.bytes[MEM_OPT_STATE], on.mem.bytes[MEM_OPT_STATE]);
        CHECK(mode != OFFLOAD_CPU || (off.mem.bytes[MEM_OPT_STATE] == 0 && off.mem.bytes[MEM_MASTER] == 0 &&
                                      off.mem.host[MEM_MASTER] == off.opt.max_elems * sizeof(float)),
              "%s: no state or master weights on the device, fp32 master weights on the host", what);
        float la[4], lb[4];
        const int steps = san_steps(4, 2);
        memset(la, 0, sizeof(la));
        memset(lb, 0, sizeof(lb));
        run_steps(&on, &s, 0, steps, la);
        run_steps(&off, &s, 0, steps, lb);
        float* pa = (float*)mallocCheck(pt.total * sizeof(float));
        float* pb = (float*)mallocCheck(pt.total * sizeof(float));
        download_floatx(pa, on.params_memory, pt.total);
        download_floatx(pb, off.params_memory, pt.total);
        const int fails = failures;
        CHECK(memcmp(la, lb, sizeof(la)) == 0, "%s: losses differ from the on-device update (%.7f vs %.7f)", what, la[3], lb[3]);
        CHECK(memcmp(pa, pb, pt.total * sizeof(float)) == 0, "%s: parameters differ from the on-device update", what);
        const size_t bytes = on.opt.st.bytes;
        unsigned char* st_dev = (unsigned char*)mallocCheck(bytes);
        cudaCheck(cudaMemcpy(st_dev, on.opt.st.memory, bytes, cudaMemcpyDeviceToHost));
        CHECK(off.opt.st.bytes == bytes && memcmp(st_dev, off.opt.st.memory, bytes) == 0,
              "%s: the state block differs from the on-device update's", what);
        char how[32] = "the CPU's update";
        if (mode == OFFLOAD_STREAM) { snprintf(how, sizeof(how), "%d chunks", off.offl.num_chunks); }
        if (failures == fails) printf("%s: %s, %d steps bit-identical to the on-device update (state block too); device state %.2f MiB "
               "instead of %.2f MiB\n", what, how, steps,
               mib(off.mem.bytes[MEM_OPT_STATE] + off.mem.bytes[MEM_MASTER]), mib(on.mem.bytes[MEM_OPT_STATE] + on.mem.bytes[MEM_MASTER]));
        free(st_dev); free(pa); free(pb);
        gpt2_free(&on);
        gpt2_free(&off);
    }
    ref_state_free(&s);
}

// --offload cpu --offload-delay 1: against a reference that applies each update one step late on
// the device (its gradients and clip scale kept aside until the next step's backward pass is done),
// bit for bit, the first `warmup` steps undelayed; then a resume through a checkpoint (which
// applies the pending update first) is bit-identical.
static void check_offload_delay(const char* model_path, const char* state_path) {
    GPT2Config c;
    ParamTable pt;
    RefState s;
    ref_load(model_path, state_path, &c, &pt, &s);
    static const OptimStatePrecision states[] = {OPT_STATE_FP32, OPT_STATE_INT8};
    const int warmup = 2, steps = san_steps(6, 4);
    const float lr = 3e-4f;
    for (int k = 0; k < 2; k++) {
        if (LS_SANITIZED && k == 0) { continue; }
        TrainOptions o;
        train_options_defaults(&o);
        trainer_defaults(&o);
        o.opt_state = states[k];
        TrainOptions od = o;
        od.offload = OFFLOAD_CPU;
        od.offload_delay = 1;
        od.offload_delay_warmup = warmup;
        char what[64];
        snprintf(what, sizeof(what), "offload cpu, delay 1 (warm-up %d), %s state", warmup, optim_precision_name(states[k]));
        GPT2 ref, dpu;
        gpt2_build(&ref, model_path, 5, s.B, s.T, &o);
        gpt2_build(&dpu, model_path, 5, s.B, s.T, &od);
        const size_t n = pt.total;
        floatX *g_now, *g_late;
        float* scale_late;
        cudaCheck(cudaMalloc((void**)&g_now, n * sizeof(floatX)));
        cudaCheck(cudaMalloc((void**)&g_late, n * sizeof(floatX)));
        cudaCheck(cudaMalloc((void**)&scale_late, sizeof(float)));
        float* d_scale = ref.d_norm_scratch + GLOBAL_NORM_MAX_BLOCKS + 2;
        float la[8], lb[8];
        int pending = 0;
        for (int i = 0; i < steps; i++) {
            // the reference: the late update (step i - 1's gradients and scale) after step i's backward pass
            gpt2_begin_step(&ref, i);
            gpt2_forward_train(&ref, s.inputs, s.targets, s.B, s.T, 1.0f);
            gpt2_backward(&ref, s.inputs, s.targets, s.B, s.T, 1.0f);
            if (pending) {
                cudaCheck(cudaMemcpy(g_now, ref.grads_memory, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
                cudaCheck(cudaMemcpy(ref.grads_memory, g_late, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
                cudaCheck(cudaMemcpy(d_scale, scale_late, sizeof(float), cudaMemcpyDeviceToDevice));
                ref.opt_step = i;  // step i - 1's (no BAdam: the step + 1)
                gpt2_update(&ref, lr, i);
                ref.opt_step = i + 1;
                cudaCheck(cudaMemcpy(ref.grads_memory, g_now, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
                pending = 0;
            }
            gpt2_grad_norm(&ref, 1.0f, 1.0f);
            la[i] = (float)gpt2_loss_sum(&ref);
            if (i < warmup) {
                gpt2_update(&ref, lr, i + 1);
            } else {
                cudaCheck(cudaMemcpy(g_late, ref.grads_memory, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
                cudaCheck(cudaMemcpy(scale_late, d_scale, sizeof(float), cudaMemcpyDeviceToDevice));
                pending = 1;
            }
        }
        run_steps(&dpu, &s, 0, steps, lb);
        CHECK(dpu.host.pending, "%s: the last step's update is pending", what);
        float* pa = (float*)mallocCheck(n * sizeof(float));
        float* pb = (float*)mallocCheck(n * sizeof(float));
        download_floatx(pa, ref.params_memory, n);
        download_floatx(pb, dpu.params_memory, n);
        const int fails = failures;
        CHECK(memcmp(la, lb, (size_t)steps * sizeof(float)) == 0, "%s: losses differ from the late reference (%.7f vs %.7f)",
              what, la[steps - 1], lb[steps - 1]);
        CHECK(memcmp(pa, pb, n * sizeof(float)) == 0, "%s: parameters differ from the late reference", what);
        const size_t bytes = ref.opt.st.bytes;
        unsigned char* st_dev = (unsigned char*)mallocCheck(bytes);
        cudaCheck(cudaMemcpy(st_dev, ref.opt.st.memory, bytes, cudaMemcpyDeviceToHost));
        CHECK(dpu.opt.st.bytes == bytes && memcmp(st_dev, dpu.opt.st.memory, bytes) == 0,
              "%s: the state block differs from the late reference's", what);
        if (failures == fails) printf("%s: %d steps bit-identical to the on-device update applied one step late (state block too)\n", what, steps);
        free(st_dev); free(pa); free(pb);
        cudaCheck(cudaFree(g_now)); cudaCheck(cudaFree(g_late)); cudaCheck(cudaFree(scale_late));
        gpt2_free(&ref);
        gpt2_free(&dpu);
        od.offload_delay_warmup = 1;
        check_resume(model_path, state_path, &od, what);
    }
    ref_state_free(&s);
}

// BAdam's blocks on a small random model (no reference files needed).
#define BADAM_DESC "L3C32H2T16V300"
#define BADAM_B 2
#define BADAM_T 16

static void badam_tokens(int* inputs, int* targets) {
    for (int i = 0; i < BADAM_B * BADAM_T; i++) { inputs[i] = (i * 37 + 1) % 300; targets[i] = (i * 11 + 5) % 300; }
}

// Runs `steps` training steps from `first_step` on one batch; losses into out.
static void badam_run_steps(GPT2* model, const int* inputs, const int* targets, int first_step, int steps, float* out) {
    for (int i = 0; i < steps; i++) {
        gpt2_begin_step(model, first_step + i);
        gpt2_forward_train(model, inputs, targets, BADAM_B, BADAM_T, 1.0f);
        gpt2_backward(model, inputs, targets, BADAM_B, BADAM_T, 1.0f);
        gpt2_grad_norm(model, 1.0f, 1.0f);
        out[i] = (float)gpt2_loss_sum(model);
        gpt2_update(model, 1e-3f, first_step + i + 1);
    }
}

// --badam: (1) for every block (and -r 1, 2) the early-stopping backward pass gives the active
// block's compact gradients bit for bit the full backward pass's gradients of those slices;
// (2) an update changes the active block's parameters only, and at a switch the master weights
// are the exact widening of the block's parameters; (3) the memory table equals the allocation;
// (4) a checkpoint in the middle of a block phase resumes bit for bit.
static void check_badam(void) {
    int inputs[BADAM_B * BADAM_T], targets[BADAM_B * BADAM_T];
    badam_tokens(inputs, targets);
    GPT2Config c;
    gpt2_config_from_descriptor(BADAM_DESC, &c);
    TrainOptions o;
    train_options_defaults(&o);
    o.badam = 1;
    o.badam_order = BADAM_ASCENDING;
    o.badam_embed = 1;
    for (int r = 1; r <= 2; r++) {
        o.recompute = r;
        TrainOptions of = o;
        of.badam = 0;
        GPT2 full, bad;
        gpt2_build(&full, BADAM_DESC, 3, BADAM_B, BADAM_T, &of);
        gpt2_build(&bad, BADAM_DESC, 3, BADAM_B, BADAM_T, &o);
        size_t n = full.num_parameters, nb = bad.state_elems;
        CHECK(bad.use_badam && nb == bad.badam.max_block && nb < n / 2, "badam: state for the largest block (%zu of %zu)", nb, n);
        // (3) the memory table with BAdam equals what was allocated
        check_memory_model(&bad, BADAM_B, BADAM_T, nb, "badam");
        CHECK(bad.mem.bytes[MEM_GRADS] < full.mem.bytes[MEM_GRADS] / 2 && bad.mem.bytes[MEM_OPT_STATE] < full.mem.bytes[MEM_OPT_STATE] / 2,
              "badam: gradients and m are one block's");
        // (1) gradients, block by block (ascending, K = 1: step b trains block b)
        float* gf = (float*)mallocCheck(n * sizeof(float));
        float* gb = (float*)mallocCheck(nb * sizeof(float));
        for (int step = 0; step < bad.badam.num_blocks; step++) {
            gpt2_begin_step(&full, step);  // the same step: the same rounding seed in the encoder backward
            gpt2_forward(&full, inputs, targets, BADAM_B, BADAM_T);
            gpt2_backward(&full, inputs, targets, BADAM_B, BADAM_T, 1.0f);
            gpt2_begin_step(&bad, step);
            CHECK(bad.active_block == step, "badam: step %d trains block %d", step, bad.active_block);
            gpt2_forward(&bad, inputs, targets, BADAM_B, BADAM_T);
            gpt2_backward(&bad, inputs, targets, BADAM_B, BADAM_T, 1.0f);
            download_floatx(gf, full.grads_memory, n);
            download_floatx(gb, bad.grads_memory, nb);
            size_t differ = 0, nonzero = 0, count = 0;
            for (int k = 0; k < bad.num_slices; k++) {
                const BadamSlice* sl = &bad.slices[k];
                for (size_t j = 0; j < sl->count; j++) {
                    differ += memcmp(&gb[sl->compact + j], &gf[sl->offset + j], sizeof(float)) != 0;
                    nonzero += gb[sl->compact + j] != 0.0f;
                }
                count += sl->count;
            }
            CHECK(differ == 0 && nonzero > count / 2, "badam -r %d block %d: %zu of %zu gradients differ from the full backward pass "
                  "(%zu nonzero)", r, step, differ, count, nonzero);
        }
        free(gb);
        free(gf);
        if (r == 1) {
            // (2) an update of layer 1 (step 1) changes its parameters only
            size_t np = n;
            float* before = (float*)mallocCheck(np * sizeof(float));
            float* after = (float*)mallocCheck(np * sizeof(float));
            gpt2_begin_step(&bad, 1);
            if (bad.use_master) {  // at the switch: master = the block's parameters, exactly
                float* master = (float*)mallocCheck(nb * sizeof(float));
                download_floatx(before, bad.params_memory, np);
                cudaCheck(cudaMemcpy(master, bad.master_memory, nb * sizeof(float), cudaMemcpyDeviceToHost));
                size_t wrong = 0;
                for (int k = 0; k < bad.num_slices; k++) {
                    const BadamSlice* sl = &bad.slices[k];
                    wrong += memcmp(master + sl->compact, before + sl->offset, sl->count * sizeof(float)) != 0;
                }
                CHECK(wrong == 0, "badam: at a switch the master weights are the block's parameters (%zu slices differ)", wrong);
                free(master);
            }
            gpt2_forward(&bad, inputs, targets, BADAM_B, BADAM_T);
            gpt2_backward(&bad, inputs, targets, BADAM_B, BADAM_T, 1.0f);
            download_floatx(before, bad.params_memory, np);
            gpt2_grad_norm(&bad, 1.0f, 1.0f);
            gpt2_update(&bad, 1e-3f, 2);
            download_floatx(after, bad.params_memory, np);
            size_t changed_in = 0, changed_out = 0, in_block = 0;
            for (size_t i = 0; i < np; i++) {
                int in = 0;
                for (int k = 0; k < bad.num_slices; k++) { in |= i >= bad.slices[k].offset && i < bad.slices[k].offset + bad.slices[k].count; }
                in_block += (size_t)in;
                if (memcmp(&before[i], &after[i], sizeof(float)) != 0) { if (in) { changed_in++; } else { changed_out++; } }
            }
            CHECK(changed_out == 0 && changed_in > in_block / 2, "badam update: %zu changed outside the block, %zu of %zu inside",
                  changed_out, changed_in, in_block);
            printf("badam: update of block 1 changed %zu of its %zu parameters, none of the other %zu\n", changed_in, in_block,
                   np - in_block);
            free(after);
            free(before);
        }
        gpt2_free(&bad);
        gpt2_free(&full);
    }
    printf("badam: %d blocks, -r 1 and 2: compact gradients bit-identical to the full backward pass; memory predicted = allocated\n",
           c.num_layers + 1);

    // (4) resume in the middle of a block phase: K = 2, descending; save after step 3 (block_step 1)
    char dir[] = "/tmp/leanstep_badam_XXXXXX";
    if (mkdtemp(dir) == NULL) { ls_fatal("mkdtemp failed"); }
    char ckpt_model[256], ckpt_state[256];
    snprintf(ckpt_model, sizeof(ckpt_model), "%s/model.bin", dir);
    snprintf(ckpt_state, sizeof(ckpt_state), "%s/state.bin", dir);
    o.recompute = 1;
    o.badam = 2;
    o.badam_order = BADAM_DESCENDING;
    GPT2 model;
    float first[3], la[5], lb[5];
    gpt2_build(&model, BADAM_DESC, 7, BADAM_B, BADAM_T, &o);
    badam_run_steps(&model, inputs, targets, 0, 3, first);
    RunState rs = one_process_state(model.num_parameters, 3);
    gpt2_checkpoint_write(&model, ckpt_model, ckpt_state, &rs);
    badam_run_steps(&model, inputs, targets, 3, 5, la);  // steps 3..7: the switches at 4 and 6
    size_t n = model.num_parameters;
    float* pa = (float*)mallocCheck(n * sizeof(float));
    float* pb = (float*)mallocCheck(n * sizeof(float));
    download_floatx(pa, model.params_memory, n);
    gpt2_free(&model);
    gpt2_build(&model, ckpt_model, 7, BADAM_B, BADAM_T, &o);
    RunState rs2;
    gpt2_state_read(&model, ckpt_state, &rs2);
    CHECK(rs2.num_params == model.opt.st.bytes / 4 && model.opt.st.n < model.num_parameters / 2,
          "badam checkpoint: the state holds one block (%llu words)", (unsigned long long)rs2.num_params);
    badam_run_steps(&model, inputs, targets, 3, 5, lb);
    download_floatx(pb, model.params_memory, n);
    gpt2_free(&model);
    int same = memcmp(la, lb, sizeof(la)) == 0 && memcmp(pa, pb, n * sizeof(float)) == 0;
    CHECK(same, "badam resume: losses or parameters differ after reloading the checkpoint (%.7f vs %.7f)", la[4], lb[4]);
    CHECK(la[4] < first[0], "badam: the loss went down over 8 steps (%.4f -> %.4f)", first[0], la[4]);
    if (same) { printf("badam resume: 5 steps (2 switches) after a mid-block checkpoint: bit-identical losses and parameters\n"); }
    free(pa);
    free(pb);
    remove(ckpt_model);
    remove(ckpt_state);
    rmdir(dir);
}

#include "dev/test/shape_sweep.h"

int main(int argc, char** argv) {
    const char *model_path = NULL, *state_path = NULL, *muon_path = NULL, *mini_path = NULL;
    int resume_check = 1, sweep = 0, offload_only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) { model_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--state") == 0) { state_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--muon-state") == 0) { muon_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--adam-mini-state") == 0) { mini_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--resume-check") == 0) { resume_check = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "--sweep") == 0) { sweep = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "--offload-only") == 0) { offload_only = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "--attention") == 0) {
            for (int k = 0; attention_choices[k]; k++) {
                if (strcmp(argv[i + 1], attention_choices[k]) == 0) { g_attention = k; }
            }
            if (g_attention < 0) { fprintf(stderr, "test_gpt2cu: --attention %s: matmul or cudnn expected\n", argv[i + 1]); return 2; }
        }
        else { fprintf(stderr, "test_gpt2cu: unknown flag %s\n", argv[i]); return 2; }
    }
    if ((!sweep && (model_path == NULL || state_path == NULL)) || argc % 2 == 0) {
        fprintf(stderr, "usage: test_gpt2cu --model M.bin --state S.bin [--muon-state S2.bin] [--adam-mini-state S3.bin] "
                        "[--resume-check 0|1] [--attention matmul|cudnn] [--offload-only 0|1]\n"
                        "       test_gpt2cu --sweep 1   (every awkward shape against a float64 forward pass)\n");
        return 2;
    }
    cudaCheck(cudaSetDevice(0));
#if defined(LS_HARNESS)  // the CPU-harness build (dev/harness/cuda_harness.h)
    printf("test_gpt2cu (%s, CPU harness)\n", PRECISION_NAME);
#else
    printf("test_gpt2cu (%s)\n", PRECISION_NAME);
#endif
    if (sweep) {
        sweep_run();
        printf("%s: %d failed check(s)\n", failures ? "FAILED" : "OK", failures);
        return failures ? 1 : 0;
    }
    if (offload_only) {  // (developing the offload modes: their checks alone)
        check_offload(model_path, state_path);
        check_offload_delay(model_path, state_path);
        printf("%s: %d failed check(s)\n", failures ? "FAILED" : "OK", failures);
        return failures ? 1 : 0;
    }
    check_model(model_path, state_path);
    for (int r = 0; r <= 2; r += 2) {  // -r 0 and -r 2 against the reference too (default -r 1 above)
        g_recompute = r;
        check_model(model_path, state_path);
    }
    g_recompute = -1;
    if (muon_path != NULL) { check_muon(model_path, muon_path); }
    if (mini_path != NULL) { check_adam_mini(model_path, mini_path); }
    if (resume_check) { check_resume(model_path, state_path, NULL, "adamw"); }
    if (resume_check) { check_offload(model_path, state_path); check_offload_delay(model_path, state_path); }
    check_badam();
    printf("%s: %d failed check(s)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
