/*
 utils.h: the one fatal-error path of leanstep, and checked wrappers of libc calls.

 Every wrapper forwards __FILE__ and __LINE__ to ls_fatal(), which prints one line
 "leanstep: error: <file>:<line>: <message>" and exits with status 1. Code that validates
 user input (files, flags) calls ls_fatal() directly with a message that names the file or
 flag and what was expected. Compiles as C11 and as C++17 (nvcc, g++).
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#if defined(__GNUC__)
#define LS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define LS_NORETURN __attribute__((noreturn))
#define LS_UNUSED __attribute__((unused))
#else
#define LS_PRINTF(a, b)
#define LS_NORETURN
#define LS_UNUSED
#endif

// Every exit of this file goes through ls_exit(status): exit().
#define ls_exit(status) exit(status)

// Temp files of the atomic writes in progress (AtomicFile below). ls_fatal removes them before
// exiting, so a failed write (full disk, unwritable directory) leaves no temp file behind.
#define LS_PENDING_TMP_MAX 4
// (volatile: a signal handler may read them, ls_remove_pending_tmp)
static char* volatile ls_pending_tmp[LS_PENDING_TMP_MAX];

static inline void ls_remove_pending_tmp(void) {
    for (int i = 0; i < LS_PENDING_TMP_MAX; i++) {
        if (ls_pending_tmp[i] != NULL) { unlink(ls_pending_tmp[i]); }
        ls_pending_tmp[i] = NULL;
    }
}

// Writes "leanstep: error: <where>msg" and its newline to stderr in one write: the line of one
// process of an MPI job is never cut by another's output or by mpirun's.
static LS_UNUSED void ls_error_va(const char* where, const char* fmt, va_list ap) {
    char line[4096];
    int k = snprintf(line, sizeof(line) - 1, "leanstep: error: %s", where);
    if (k < 0 || k >= (int)sizeof(line) - 1) { k = 0; }
    int m = vsnprintf(line + k, sizeof(line) - 1 - (size_t)k, fmt, ap);
    size_t n = m < 0 ? (size_t)k : (size_t)k + (size_t)m;
    if (n > sizeof(line) - 2) { n = sizeof(line) - 2; }  // (truncated)
    line[n] = '\n';
    line[n + 1] = '\0';
    fputs(line, stderr);
    fflush(stderr);
}

// Prints "leanstep: error: msg" (one line) to stderr.
static LS_PRINTF(1, 2) LS_UNUSED void ls_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ls_error_va("", fmt, ap);
    va_end(ap);
}

// Prints "leanstep: error: msg" (one line) to stderr and exits 1.
static LS_NORETURN LS_PRINTF(1, 2) LS_UNUSED void ls_fatal(const char* fmt, ...) {
    ls_remove_pending_tmp();
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    ls_error_va("", fmt, ap);
    va_end(ap);
    ls_exit(1);
}

// Like ls_fatal, with the source location first (for internal failures, not user errors).
static LS_NORETURN LS_PRINTF(3, 4) LS_UNUSED void ls_fatal_at(const char* file, int line, const char* fmt, ...) {
    ls_remove_pending_tmp();
    fflush(stdout);
    char where[512];
    snprintf(where, sizeof(where), "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    ls_error_va(where, fmt, ap);
    va_end(ap);
    ls_exit(1);
}

// ----------------------------------------------------------------------------
// checked libc calls

static inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* fp = fopen(path, mode);
    if (fp == NULL) {
        ls_remove_pending_tmp();
        fflush(stdout);
        fprintf(stderr, "leanstep: error: cannot open '%s' (mode %s): %s [%s:%d]\n",
                path, mode, strerror(errno), file, line);
        ls_exit(1);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

// Reads exactly nmemb items; a short read means a truncated file, reported with its name.
static inline void fread_check(void* ptr, size_t size, size_t nmemb, FILE* fp, const char* what,
                               const char* file, int line) {
    size_t got = fread(ptr, size, nmemb, fp);
    if (got != nmemb) {
        ls_remove_pending_tmp();
        fflush(stdout);
        fprintf(stderr, "leanstep: error: %s: truncated or unreadable (read %zu of %zu items of %zu bytes) [%s:%d]\n",
                what, got, nmemb, size, file, line);
        ls_exit(1);
    }
}
#define freadCheck(ptr, size, nmemb, fp, what) fread_check(ptr, size, nmemb, fp, what, __FILE__, __LINE__)

static inline void fwrite_check(const void* ptr, size_t size, size_t nmemb, FILE* fp, const char* what,
                                const char* file, int line) {
    size_t put = fwrite(ptr, size, nmemb, fp);
    if (put != nmemb) {
        ls_remove_pending_tmp();
        fflush(stdout);
        fprintf(stderr, "leanstep: error: %s: write failed (%zu of %zu items): %s [%s:%d]\n",
                what, put, nmemb, strerror(errno), file, line);
        ls_exit(1);
    }
}
#define fwriteCheck(ptr, size, nmemb, fp, what) fwrite_check(ptr, size, nmemb, fp, what, __FILE__, __LINE__)

static inline void fclose_check(FILE* fp, const char* file, int line) {
    if (fclose(fp) != 0) {
        ls_fatal_at(file, line, "fclose failed: %s", strerror(errno));
    }
}
#define fcloseCheck(fp) fclose_check(fp, __FILE__, __LINE__)

static inline void* malloc_check(size_t size, const char* file, int line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) {
        ls_fatal_at(file, line, "out of host memory allocating %zu bytes (%.1f MiB)", size,
                    (double)size / (1024.0 * 1024.0));
    }
    return p;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

static inline void* calloc_check(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) {
        ls_fatal_at(file, line, "out of host memory allocating %zu x %zu bytes", n, size);
    }
    return p;
}
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

// Size of an open file in bytes (position restored).
static inline long long file_size_of(FILE* fp) {
    long long here = ftell(fp);
    fseek(fp, 0, SEEK_END);
    long long size = ftell(fp);
    fseek(fp, here, SEEK_SET);
    return size;
}

static inline int file_exists(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (fp) { fclose(fp); return 1; }
    return 0;
}

// ----------------------------------------------------------------------------
// atomic file writes: write to "<path>.tmp.<pid>", fflush + fsync, rename over path, fsync the
// directory. A crash at any point leaves either the old file or the complete new one.

#include <fcntl.h>
#include <unistd.h>

typedef struct {
    FILE* fp;
    char* final_path;  // owned copies, freed by atomic_file_commit
    char* tmp_path;    // "<final_path>.tmp.<pid>"
} AtomicFile;

static inline void atomic_file_open(AtomicFile* af, const char* path) {
    size_t n = strlen(path);
    af->final_path = (char*)mallocCheck(n + 1);
    memcpy(af->final_path, path, n + 1);
    af->tmp_path = (char*)mallocCheck(n + 32);
    snprintf(af->tmp_path, n + 32, "%s.tmp.%d", path, (int)getpid());
    // registered before it exists, so that a signal arriving at any moment after the file is
    // created finds it (removed by ls_fatal, or a signal handler, if the write fails)
    for (int i = 0; i < LS_PENDING_TMP_MAX; i++) {
        if (ls_pending_tmp[i] == NULL) { ls_pending_tmp[i] = af->tmp_path; break; }
    }
    af->fp = fopen(af->tmp_path, "wb");
    if (af->fp == NULL) { ls_fatal("cannot create '%s': %s", af->tmp_path, strerror(errno)); }
}

static inline void atomic_file_commit(AtomicFile* af) {
    if (fflush(af->fp) != 0 || fsync(fileno(af->fp)) != 0) {
        ls_fatal("cannot flush '%s': %s", af->tmp_path, strerror(errno));
    }
    if (fclose(af->fp) != 0) { ls_fatal("cannot close '%s': %s", af->tmp_path, strerror(errno)); }
    af->fp = NULL;
    if (rename(af->tmp_path, af->final_path) != 0) {
        ls_fatal("cannot rename '%s' to '%s': %s", af->tmp_path, af->final_path, strerror(errno));
    }
    for (int i = 0; i < LS_PENDING_TMP_MAX; i++) {
        if (ls_pending_tmp[i] == af->tmp_path) { ls_pending_tmp[i] = NULL; }
    }
    // make the rename itself durable: fsync the directory
    char* dir = af->tmp_path;  // reuse the buffer
    strcpy(dir, af->final_path);
    char* slash = strrchr(dir, '/');
    if (slash == dir) { slash[1] = '\0'; } else if (slash) { *slash = '\0'; } else { strcpy(dir, "."); }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
    free(af->tmp_path);
    free(af->final_path);
    af->tmp_path = af->final_path = NULL;
}

#endif // LLMC_UTILS_H
