/*
 test_gpt2.cu: checks train_gpt2.cu against the PyTorch reference (dev/reference/gpt2_ref.py),
 like test_gpt2.c, plus a determinism and resume check. Runs on a GPU, and in CI under the CPU
 execution harness (make test_gpt2cu_emu PRECISION=FP32|BF16).

   test_gpt2cu --model M.bin --state S.bin [--resume-check 1]

 Tolerances (measured values in the README):
   fp32 build: as test_gpt2.c (same arithmetic in fp32; only the summation order differs):
     logits max|diff| <= 1e-4 max|ref|, loss 1e-5 relative, each gradient tensor max|diff| <=
     1e-3 max|ref|, 10 losses 1e-4 relative.
   bf16 build: parameters, activations and gradients are rounded to bf16 (8 significant bits,
     relative step 2^-8 = 3.9e-3) at every op, so errors of a few bf16 steps are expected:
     logits max|diff| <= 2e-2 max|ref| (measured 5.0e-3 on the CI config), loss 1e-3 relative
     (measured 8e-6: the mean over B*T rows averages the rounding out), each gradient tensor
     max|diff| <= 5e-2 max|ref| (measured at most 9.3e-3, ~2.4 bf16 steps), the 10 losses 1e-3
     relative (measured 1.8e-5; stochastic rounding keeps the update unbiased).
 Determinism: the same steps from the same checkpoint give bit-identical losses and parameters.
*/
#define TESTING
#include "train_gpt2.cu"
#include "dev/test/test_common.h"

#if FLOATX_IS_BF16
static const double TOL_LOGITS = 2e-2, TOL_LOSS = 1e-3, TOL_GRAD = 5e-2, TOL_STEPS = 1e-3;
#else
static const double TOL_LOGITS = 1e-4, TOL_LOSS = 1e-5, TOL_GRAD = 1e-3, TOL_STEPS = 1e-4;
#endif

static void check_model(const char* model_path, const char* state_path) {
    GPT2Config c;
    model_file_read_header(model_path, &c);
    ParamTable pt;
    param_table_build(&pt, &c);
    RefState s;
    ref_state_read(state_path, &c, pt.total, &s);
    GPT2 model;
    gpt2_build(&model, model_path, 0, s.B, s.T, NULL);
    int B = s.B, T = s.T, V = c.vocab_size, Vp = c.padded_vocab_size;

    // the memory table equals what was allocated
    GpuMemoryOptions mo = gpu_memory_options(&c, B, T, model.recompute, model.use_master, model.chunk);
    MemoryReport predicted = memory_model_gpu(&c, B, T, &mo);
    for (int i = 0; i < MEM_COUNT; i++) {
        CHECK(predicted.bytes[i] == model.mem.bytes[i], "memory %s: predicted %zu bytes, allocated %zu",
              mem_category_names[i], predicted.bytes[i], model.mem.bytes[i]);
    }
    CHECK(predicted.host_pinned == model.mem.host_pinned, "memory: host pinned predicted %zu, allocated %zu",
          predicted.host_pinned, model.mem.host_pinned);
    printf("memory: predicted = allocated in all %d categories (%.1f MiB)\n", MEM_COUNT, mib(memory_report_total(&predicted)));
    size_t BT = (size_t)B * T;

    // forward: logits and loss
    float loss = gpt2_forward(&model, s.inputs, s.targets, B, T);
    float* logits = (float*)mallocCheck(BT * Vp * sizeof(float));
    download_floatx(logits, model.acts.output, BT * Vp);
    double md = 0.0, mr = 0.0;
    for (size_t bt = 0; bt < BT; bt++) {
        double d, r;
        max_diff(logits + bt * Vp, s.logits + bt * V, (size_t)V, &d, &r);
        if (d > md) { md = d; }
        if (r > mr) { mr = r; }
    }
    free(logits);
    CHECK(md <= TOL_LOGITS * mr, "logits: max diff %.3g > %.0e * max|ref| = %.3g", md, TOL_LOGITS, TOL_LOGITS * mr);
    printf("logits: max diff %.3g (max |ref| %.3g)\n", md, mr);
    CHECK(fabs(loss - s.loss) <= TOL_LOSS * fabs(s.loss), "loss: ours %.7f ref %.7f", loss, s.loss);
    printf("loss: ours %.7f ref %.7f\n", loss, s.loss);

    // backward: every parameter gradient
    gpt2_zero_grad(&model);
    gpt2_backward(&model, s.inputs, s.targets, B, T, 1.0f);
    float* grads = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(grads, model.grads_memory, pt.total);
    double worst = 0.0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt.t[i];
        max_diff(grads + t->offset, s.grads + t->offset, t->count, &md, &mr);
        double rel = md / (mr + 1e-30);
        if (rel > worst) { worst = rel; }
        printf("  grad %-9s max diff / max|ref| = %.3g\n", t->name, rel);
        CHECK(md <= TOL_GRAD * mr, "grad %s: max diff %.3g > %.0e * max|ref| = %.3g", t->name, md, TOL_GRAD, TOL_GRAD * mr);
    }
    free(grads);
    printf("gradients: 16 tensors, worst max diff / max|ref| = %.3g\n", worst);

    // training: the losses of n AdamW steps on the same batch
    AdamWHyper h = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    gpt2_free(&model);
    gpt2_build(&model, model_path, 0, B, T, NULL);
    for (int step = 0; step < s.n_steps; step++) {
        float l = gpt2_forward(&model, s.inputs, s.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model, s.inputs, s.targets, B, T, 1.0f);
        gpt2_update(&model, &h, step + 1);
        CHECK(fabs(l - s.losses[step]) <= TOL_STEPS * fabs(s.losses[step]), "step %d: loss %.6f ref %.6f", step, l, s.losses[step]);
        printf("step %d: loss %.6f ref %.6f\n", step, l, s.losses[step]);
    }
    gpt2_free(&model);
    ref_state_free(&s);
}

// Runs `steps` steps from `first_step` on the reference batch; losses into out.
static void run_steps(GPT2* model, const RefState* s, int first_step, int steps, float* out) {
    AdamWHyper h = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    for (int i = 0; i < steps; i++) {
        gpt2_begin_step(model, first_step + i);
        out[i] = gpt2_forward(model, s->inputs, s->targets, s->B, s->T);
        gpt2_backward(model, s->inputs, s->targets, s->B, s->T, 1.0f);
        gpt2_update(model, &h, first_step + i + 1);
    }
}

// Save after 3 steps, run 5 more; reload the checkpoint and rerun the 5: bit-identical.
static void check_resume(const char* model_path, const char* state_path) {
    GPT2Config c;
    model_file_read_header(model_path, &c);
    ParamTable pt;
    param_table_build(&pt, &c);
    RefState s;
    ref_state_read(state_path, &c, pt.total, &s);
    char dir[] = "/tmp/leanstep_cu_XXXXXX";
    if (mkdtemp(dir) == NULL) { ls_fatal("mkdtemp failed"); }
    char ckpt_model[256], ckpt_state[256];
    snprintf(ckpt_model, sizeof(ckpt_model), "%s/model.bin", dir);
    snprintf(ckpt_state, sizeof(ckpt_state), "%s/state.bin", dir);
    float first[3], a[5], b[5];
    GPT2 model;
    gpt2_build(&model, model_path, 7, s.B, s.T, NULL);
    run_steps(&model, &s, 0, 3, first);
    RunState rs = {1, 0, 3, 1, model.num_parameters, 0, 0, 0};
    gpt2_checkpoint_write(&model, ckpt_model, ckpt_state, &rs);
    run_steps(&model, &s, 3, 5, a);
    float* pa = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(pa, model.params_memory, pt.total);
    gpt2_free(&model);

    gpt2_build(&model, ckpt_model, 7, s.B, s.T, NULL);
    RunState rs2;
    gpt2_state_read(&model, ckpt_state, &rs2);
    run_steps(&model, &s, 3, 5, b);
    float* pb = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(pb, model.params_memory, pt.total);
    gpt2_free(&model);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "resume: losses differ after reloading the checkpoint (%.7f vs %.7f ...)", a[0], b[0]);
    CHECK(memcmp(pa, pb, pt.total * sizeof(float)) == 0, "resume: parameters differ after reloading the checkpoint");
    CHECK(a[4] < first[0], "resume: the loss went down over 8 steps (%.4f -> %.4f)", first[0], a[4]);
    if (memcmp(a, b, sizeof(a)) == 0 && memcmp(pa, pb, pt.total * sizeof(float)) == 0) {
        printf("resume: 5 steps after reloading the step-3 checkpoint: bit-identical losses and parameters\n");
    }
    free(pa); free(pb);
    ref_state_free(&s);
    remove(ckpt_model);
    remove(ckpt_state);
    rmdir(dir);
}

// --offload: the same steps as the on-device update, bit for bit, with the state on the host and
// only two chunks of staging on the device (chunks that do not divide the parameter count).
static void check_offload(const char* model_path, const char* state_path) {
    GPT2Config c;
    model_file_read_header(model_path, &c);
    ParamTable pt;
    param_table_build(&pt, &c);
    RefState s;
    ref_state_read(state_path, &c, pt.total, &s);
    TrainOptions o;
    train_options_defaults(&o);
    o.offload = 1;
    o.offload_chunk = (int)(pt.total / 3 + 1000);  // 3 full chunks and a short one
    GPT2 on, off;
    gpt2_build(&on, model_path, 5, s.B, s.T, NULL);
    gpt2_build(&off, model_path, 5, s.B, s.T, &o);
    GpuMemoryOptions mo = gpu_memory_options(&c, s.B, s.T, off.recompute, off.use_master, off.chunk);
    MemoryReport predicted = memory_model_gpu(&c, s.B, s.T, &mo);
    for (int i = 0; i < MEM_COUNT; i++) {
        CHECK(predicted.bytes[i] == off.mem.bytes[i], "offload memory %s: predicted %zu, allocated %zu", mem_category_names[i],
              predicted.bytes[i], off.mem.bytes[i]);
    }
    CHECK(predicted.host_pinned == off.mem.host_pinned && off.mem.host_pinned > 0, "offload: host pinned memory");
    CHECK(off.mem.bytes[MEM_ADAM_M] < on.mem.bytes[MEM_ADAM_M], "offload: device m is the staging only (%zu vs %zu)",
          off.mem.bytes[MEM_ADAM_M], on.mem.bytes[MEM_ADAM_M]);
    float la[4], lb[4];
    run_steps(&on, &s, 0, 4, la);
    run_steps(&off, &s, 0, 4, lb);
    float* pa = (float*)mallocCheck(pt.total * sizeof(float));
    float* pb = (float*)mallocCheck(pt.total * sizeof(float));
    download_floatx(pa, on.params_memory, pt.total);
    download_floatx(pb, off.params_memory, pt.total);
    CHECK(memcmp(la, lb, sizeof(la)) == 0, "offload: losses differ from the on-device update (%.7f vs %.7f)", la[3], lb[3]);
    CHECK(memcmp(pa, pb, pt.total * sizeof(float)) == 0, "offload: parameters differ from the on-device update");
    float* m_dev = (float*)mallocCheck(pt.total * sizeof(float));
    cudaCheck(cudaMemcpy(m_dev, on.m_memory, pt.total * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(m_dev, off.m_host, pt.total * sizeof(float)) == 0, "offload: m differs from the on-device update");
    printf("offload: %d chunks, 4 steps bit-identical to the on-device update; device state %.2f MiB instead of %.2f MiB\n",
           off.num_chunks, mib(off.mem.bytes[MEM_ADAM_M] + off.mem.bytes[MEM_ADAM_V] + off.mem.bytes[MEM_MASTER]),
           mib(on.mem.bytes[MEM_ADAM_M] + on.mem.bytes[MEM_ADAM_V] + on.mem.bytes[MEM_MASTER]));
    free(pa); free(pb); free(m_dev);
    gpt2_free(&on);
    gpt2_free(&off);
    ref_state_free(&s);
}

int main(int argc, char** argv) {
    const char *model_path = NULL, *state_path = NULL;
    int resume_check = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--model") == 0) { model_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--state") == 0) { state_path = argv[i + 1]; }
        else if (strcmp(argv[i], "--resume-check") == 0) { resume_check = atoi(argv[i + 1]); }
        else { fprintf(stderr, "test_gpt2cu: unknown flag %s\n", argv[i]); return 2; }
    }
    if (model_path == NULL || state_path == NULL || argc % 2 == 0) {
        fprintf(stderr, "usage: test_gpt2cu --model M.bin --state S.bin [--resume-check 0|1]\n");
        return 2;
    }
    cudaCheck(cudaSetDevice(0));
    printf("test_gpt2cu (%s%s)\n", PRECISION_NAME, LS_HARNESS ? ", CPU harness" : "");
    check_model(model_path, state_path);
    if (resume_check) { check_resume(model_path, state_path); }
    if (resume_check) { check_offload(model_path, state_path); }
    printf("%s: %d failed check(s)\n", failures ? "FAILED" : "OK", failures);
    return failures ? 1 : 0;
}
