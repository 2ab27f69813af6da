/*
 cudnn_load.h: opens the cuDNN attention library (build/libleanstep_cudnn.so, llmc/kernels/cudnn_att.cpp)
 at run time, the first time the BF16 GPU trainer runs `--attention cudnn` or `cudnn-fast`. The
 nvcc builds do not link libcudnn: a machine without cuDNN still runs `--attention matmul`, and a
 cudnn run there stops with one line naming the shape and the fallback flag (never a silent
 switch to the matmul path).

   cudnn_lib_load(fn, B, T, NH, C, syms)
       opens the library once and fills syms[i] with the address of cudnn_lib_symbols[i]; any
       failure is ls_fatal: "fn (B=.. T=.. NH=.. C=..): cuDNN is not available (why); use
       --attention matmul", why being dlerror()'s text (library missing, libcudnn.so.9 missing, ...).
   cudnn_lib_loaded()
       1 once the library is open (attention_cudnn_free has nothing to release before).

 Where the library is looked for: $LEANSTEP_CUDNN_LIB when set (that file only); else, from the
 directory of the running executable (/proc/self/exe: the repository root for train_gpt2cu and
 test_gpt2cu, build/gpu/ and build/cuda-gpu/ for gpu-build's binaries), DIR/, DIR/build/ and DIR/../.
 Plain host C++ (no CUDA): dev/test/test_cudnn_load.cpp tests it with g++.
*/
#ifndef LLMC_CUDNN_LOAD_H
#define LLMC_CUDNN_LOAD_H

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmc/utils.h"

#define CUDNN_LIB_NAME "libleanstep_cudnn.so"
#define CUDNN_LIB_NSYMS 4
// the library's extern "C" entry points (llmc/kernels/cudnn_att.cuh declares them), in this order
static const char* const cudnn_lib_symbols[CUDNN_LIB_NSYMS] = {
    "attention_forward_cudnn_bf16", "attention_backward_cudnn_bf16", "attention_cudnn_free_gpu", "attention_cudnn_graphs_gpu"};

static inline void** cudnn_lib_handle(void) {
    static void* handle = NULL;
    return &handle;
}

static inline int cudnn_lib_loaded(void) { return *cudnn_lib_handle() != NULL; }

static inline LS_NORETURN void cudnn_lib_fail(const char* fn, int B, int T, int NH, int C, const char* why) {
    ls_fatal("%s (B=%d T=%d NH=%d C=%d): cuDNN is not available (%s); use --attention matmul", fn, B, T, NH, C, why);
}

// The library's path: $LEANSTEP_CUDNN_LIB, or the first candidate next to the executable that exists.
// 0 when there is none (path then lists where it looked).
static inline int cudnn_lib_find(char* path, size_t n) {
    const char* env = getenv("LEANSTEP_CUDNN_LIB");
    if (env != NULL && env[0] != '\0') {
        snprintf(path, n, "%s", env);
        return 1;
    }
    char exe[PATH_MAX];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        snprintf(path, n, "%s not found (/proc/self/exe unreadable; set LEANSTEP_CUDNN_LIB)", CUDNN_LIB_NAME);
        return 0;
    }
    exe[len] = '\0';
    char* slash = strrchr(exe, '/');
    if (slash != NULL) *slash = '\0';
    const char* subdirs[] = {"", "build/", "../"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, n, "%s/%s%s", exe, subdirs[i], CUDNN_LIB_NAME);
        if (access(path, F_OK) == 0) return 1;
    }
    snprintf(path, n, "%s not found in %s/, build/ or ../: make train_gpt2cu builds it, or set LEANSTEP_CUDNN_LIB",
             CUDNN_LIB_NAME, exe);
    return 0;
}

static inline void cudnn_lib_load(const char* fn, int B, int T, int NH, int C, void* syms[CUDNN_LIB_NSYMS]) {
    void** handle = cudnn_lib_handle();
    if (*handle == NULL) {
        char path[2 * PATH_MAX];
        if (!cudnn_lib_find(path, sizeof(path))) cudnn_lib_fail(fn, B, T, NH, C, path);
        // RTLD_NOW: a missing libcudnn.so.9 or symbol shows here, not at the first call
        void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            const char* err = dlerror();
            cudnn_lib_fail(fn, B, T, NH, C, err != NULL ? err : path);
        }
        *handle = h;
    }
    for (int i = 0; i < CUDNN_LIB_NSYMS; i++) {
        dlerror();
        syms[i] = dlsym(*handle, cudnn_lib_symbols[i]);
        if (syms[i] == NULL) {
            const char* err = dlerror();
            cudnn_lib_fail(fn, B, T, NH, C, err != NULL ? err : cudnn_lib_symbols[i]);
        }
    }
}

#endif // LLMC_CUDNN_LOAD_H
