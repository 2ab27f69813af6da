/*
 test_cudnn_load.cpp: the run-time loader of cuDNN's flash attention (llmc/kernels/cudnn_load.h), without a
 GPU. `make test-cudnn-load` (part of `make gpu-compile-check PRECISION=BF16`):

   test_cudnn_load --lib build/libleanstep_cudnn.so --needs-missing LIB --not-lib FILE
   test_cudnn_load --not-found     (a copy of it where no library is near: DIR/, DIR/build/, DIR/..)
   test_cudnn_load --expect-at LIB (a copy of it with the library, a link, in its build/ or ../)

 Each failing case runs in a child process (ls_fatal exits) and must exit 1 with exactly one line
 on stderr that names the call and shape, the fallback flag and why:
   a path that does not exist                    -> the path (found in dlerror's text)
   FILE, which is no shared library               -> FILE
   LIB, whose own dependency libls_gone.so is gone (as a cuDNN library without libcudnn.so.9)
                                                  -> libls_gone.so
   --not-found: no LEANSTEP_CUDNN_LIB and no library near the executable -> "not found in DIR/"
   --expect-at LIB: without LEANSTEP_CUDNN_LIB, the library opened is LIB (same directory, same name)
 Then, in this process: the built library found without LEANSTEP_CUDNN_LIB (it sits next to this
 executable, in build/), and with it, resolves every entry point; a second load returns the same
 addresses. Exits 1 on any failure.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/kernels/cudnn_load.h"

static int failures = 0;

static void check(bool ok, const char* what, const std::string& detail) {
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
    if (!ok) failures++;
}

// Runs cudnn_lib_load in a child with LEANSTEP_CUDNN_LIB=lib (unset when NULL); expects exit 1 and one line containing
// the shape, the fallback flag and want.
static void expect_fatal(const char* what, const char* lib, const char* want) {
    int fds[2];
    if (pipe(fds) != 0) ls_fatal("pipe failed");
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) ls_fatal("fork failed");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (lib != NULL) setenv("LEANSTEP_CUDNN_LIB", lib, 1);
        else unsetenv("LEANSTEP_CUDNN_LIB");
        void* syms[CUDNN_LIB_NSYMS];
        cudnn_lib_load("attention_forward_cudnn", 2, 3, 4, 64, syms);
        _exit(0); // must not get here
    }
    close(fds[1]);
    std::string err;
    char buf[512];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) err.append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const bool exit1 = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    const bool one_line = !err.empty() && err.find('\n') == err.size() - 1;
    const bool names = err.find("leanstep: error: attention_forward_cudnn (B=2 T=3 NH=4 C=64): cuDNN is not available (") == 0 &&
                       err.find("); use --attention matmul\n") != std::string::npos && err.find(want) != std::string::npos;
    check(exit1 && one_line && names, what, err.empty() ? std::string("(no message)") : err.substr(0, err.size() - 1));
}

// dir/name of path with dir made canonical (the name itself may be a link)
static std::string canonical_dir(const char* path) {
    std::string p(path);
    const size_t slash = p.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : p.substr(0, slash);
    char real[PATH_MAX];
    if (realpath(dir.c_str(), real) == NULL) return "(unresolvable " + p + ")";
    return std::string(real) + p.substr(slash == std::string::npos ? 0 : slash);
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "--expect-at") == 0) {
        unsetenv("LEANSTEP_CUDNN_LIB");
        void* syms[CUDNN_LIB_NSYMS];
        cudnn_lib_load("attention_forward_cudnn", 2, 3, 4, 64, syms);
        Dl_info info;
        const bool found = dladdr(syms[0], &info) != 0 && info.dli_fname != NULL;
        const std::string got = found ? canonical_dir(info.dli_fname) : std::string("dladdr failed");
        check(found && got == canonical_dir(argv[2]), "found from the executable's directory", got);
        return failures > 0 ? 1 : 0;
    }
    if (argc == 2 && strcmp(argv[1], "--not-found") == 0) {
        char exe[PATH_MAX];
        const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (len <= 0) ls_fatal("/proc/self/exe unreadable");
        exe[len] = '\0';
        *strrchr(exe, '/') = '\0';
        const std::string want = std::string(CUDNN_LIB_NAME " not found in ") + exe + "/, build/ or ../";
        expect_fatal("no library near the executable", NULL, want.c_str());
        return failures > 0 ? 1 : 0;
    }
    const char *lib = NULL, *needs_missing = NULL, *not_lib = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--lib") == 0) lib = argv[i + 1];
        else if (strcmp(argv[i], "--needs-missing") == 0) needs_missing = argv[i + 1];
        else if (strcmp(argv[i], "--not-lib") == 0) not_lib = argv[i + 1];
        else ls_fatal("unknown flag %s", argv[i]);
    }
    if (lib == NULL || needs_missing == NULL || not_lib == NULL || argc != 7) {
        ls_fatal("usage: %s --lib LIB --needs-missing LIB --not-lib FILE", argv[0]);
    }

    expect_fatal("missing library", "/nonexistent/libleanstep_cudnn.so", "/nonexistent/libleanstep_cudnn.so");
    expect_fatal("not a shared library", not_lib, not_lib);
    expect_fatal("library whose dependency is missing", needs_missing, "libls_gone.so");

    // the real library, found next to this executable (build/), then through the variable
    unsetenv("LEANSTEP_CUDNN_LIB");
    check(!cudnn_lib_loaded(), "nothing loaded before the first call", "");
    void* syms[CUDNN_LIB_NSYMS];
    cudnn_lib_load("attention_forward_cudnn", 2, 3, 4, 64, syms);
    bool all = true;
    for (int i = 0; i < CUDNN_LIB_NSYMS; i++) all = all && syms[i] != NULL;
    check(all && cudnn_lib_loaded(), "found next to the executable, every entry point resolved", "");
    Dl_info info;
    const bool where = dladdr(syms[0], &info) != 0 && info.dli_fname != NULL &&
                       strstr(info.dli_fname, CUDNN_LIB_NAME) != NULL;
    check(where, "the entry points are the library's", where ? info.dli_fname : "dladdr failed");

    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL); // the --lib path: the same loaded object
    check(h != NULL && h == *cudnn_lib_handle(), "--lib is the library found next to the executable", lib);
    if (h != NULL) dlclose(h);
    setenv("LEANSTEP_CUDNN_LIB", lib, 1);
    *cudnn_lib_handle() = NULL; // load again, through the variable
    void* again[CUDNN_LIB_NSYMS];
    cudnn_lib_load("attention_backward_cudnn", 2, 3, 4, 64, again);
    check(memcmp(syms, again, sizeof(syms)) == 0, "LEANSTEP_CUDNN_LIB resolves the same entry points", "");

    if (failures > 0) {
        fprintf(stderr, "test_cudnn_load: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_cudnn_load: all checks passed\n");
    return 0;
}
