/*
 fuzz_common.h: what every leanstep fuzz target shares (dev/fuzz/fuzz_*.c, built by rules.mk
 with clang -fsanitize=fuzzer,address,undefined -Dexit=fuzz_exit).

 The readers report bad input through ls_fatal() and the checked libc calls of llmc/utils.h, and
 the flag parser (llmc/run/cli.h) with exit(2): all of them exit. The fuzz build renames every
 exit() of its translation unit, <stdlib.h>'s declaration included, to fuzz_exit() (defined
 here), which jumps back into the target: a clean rejection is a normal outcome, not a crash. The
 product code does not know (libFuzzer's own exit, in its library, is untouched). Whatever the reader held
 at that moment would leak, so while a guarded call runs this file records
   - every heap block allocated and not yet freed (the sanitizer's malloc/free hooks), and
   - every FILE opened by the headers (fopen/fclose are routed here by the macros below),
 and after a rejection it closes those files and frees those blocks. Leaks of accepted inputs
 are still reported by LeakSanitizer, and file descriptors never run out. An exit outside a
 guarded call (e.g. in the BPE encoder, which must accept any bytes) aborts: a crash.

 Include this file before any llmc header. The shape of a target:
     static Tokenizer tok;                  // anything used after the jump: static storage
     FUZZ_INITIALIZE_DEFAULT              // LLVMFuzzerInitialize: fuzz_setup() only
     int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
         const char* path = fuzz_write_input("tok.bin", data, size);
         fuzz_begin();
         if (setjmp(fuzz_env) == 0) {       // the reader, and checks of what it returned
             tokenizer_init_from_file(&tok, path);
             ...
             tokenizer_free(&tok);
             fuzz_end();
         } else {                           // rejected: free what the target can see, then
             tokenizer_free(&tok);          // fuzz_reject() closes files and frees orphans
             fuzz_reject();
         }
         return 0;
     }
 A property that does not hold is reported with fuzz_check(cond, "what"), which aborts.
*/
#ifndef DEV_FUZZ_FUZZ_COMMON_H
#define DEV_FUZZ_FUZZ_COMMON_H

#ifndef exit
#error "fuzz targets are built with -Dexit=fuzz_exit (see dev/fuzz/rules.mk)"
#endif

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sanitizer/allocator_interface.h>

#define FUZZ_UNUSED __attribute__((unused))

// ----------------------------------------------------------------------------
// the jump back from exit() (fuzz_exit, by the build's -Dexit=fuzz_exit)

static jmp_buf fuzz_env;
static int fuzz_armed;      // 1 inside a guarded call

__attribute__((noreturn)) void fuzz_exit(int status) {
    if (!fuzz_armed) {
        fprintf(stderr, "fuzz: exit(%d) outside a guarded call: a crash\n", status);
        abort();
    }
    fuzz_armed = 0;
    longjmp(fuzz_env, 1);
}

#define fuzz_check(cond, what)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz: property failed at %s:%d: %s\n", __FILE__, __LINE__, what); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

// ----------------------------------------------------------------------------
// live heap blocks of the guarded call: a dense list of the pointers, and an open-addressing
// index (pointer -> position in the list; linear probing, deletion by backward shift), so that
// both hooks and the clean-up cost O(1) per block. The hooks run inside malloc/free: they
// allocate nothing.

#define FUZZ_LIVE_MAX (1u << 18)        // live blocks one input may hold
#define FUZZ_LIVE_SLOTS (2 * FUZZ_LIVE_MAX)
static uintptr_t fuzz_live[FUZZ_LIVE_MAX];     // (fuzz_live_n,) the live blocks
static uintptr_t fuzz_slot_ptr[FUZZ_LIVE_SLOTS];  // 0 = empty
static uint32_t fuzz_slot_pos[FUZZ_LIVE_SLOTS];   // index into fuzz_live
static size_t fuzz_live_n;
// read by the hooks, which the compiler does not see being called; per thread, so that an
// allocation by another thread of the process (libFuzzer's, the sanitizers') is never recorded
// (the hooks' tables are not thread-safe: a CI run once found the list empty under a live index entry)
static _Thread_local volatile int fuzz_tracking;

static inline size_t fuzz_slot_of(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (FUZZ_LIVE_SLOTS - 1); }

static inline size_t fuzz_slot_find(uintptr_t p) {  // its slot, or FUZZ_LIVE_SLOTS if absent
    for (size_t i = fuzz_slot_of(p);; i = (i + 1) & (FUZZ_LIVE_SLOTS - 1)) {
        if (fuzz_slot_ptr[i] == p) { return i; }
        if (fuzz_slot_ptr[i] == 0) { return FUZZ_LIVE_SLOTS; }
    }
}

static inline void fuzz_slot_delete(size_t i) {
    fuzz_slot_ptr[i] = 0;
    for (size_t j = (i + 1) & (FUZZ_LIVE_SLOTS - 1); fuzz_slot_ptr[j] != 0; j = (j + 1) & (FUZZ_LIVE_SLOTS - 1)) {
        size_t home = fuzz_slot_of(fuzz_slot_ptr[j]);
        // move j into the hole i unless its home lies cyclically in (i, j]
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            fuzz_slot_ptr[i] = fuzz_slot_ptr[j];
            fuzz_slot_pos[i] = fuzz_slot_pos[j];
            fuzz_slot_ptr[j] = 0;
            i = j;
        }
    }
}

static FUZZ_UNUSED void fuzz_malloc_hook(const volatile void* ptr, size_t size) {
    (void)size;
    if (!fuzz_tracking || ptr == NULL) { return; }
    if (fuzz_live_n >= FUZZ_LIVE_MAX) {
        fprintf(stderr, "fuzz: more than %u live heap blocks in one input\n", FUZZ_LIVE_MAX);
        abort();
    }
    uintptr_t p = (uintptr_t)ptr;
    if (fuzz_slot_find(p) != FUZZ_LIVE_SLOTS) { return; }  // already recorded: never list a block twice
    size_t i = fuzz_slot_of(p);
    while (fuzz_slot_ptr[i] != 0) { i = (i + 1) & (FUZZ_LIVE_SLOTS - 1); }
    fuzz_slot_ptr[i] = p;
    fuzz_slot_pos[i] = (uint32_t)fuzz_live_n;
    fuzz_live[fuzz_live_n++] = p;
}

static FUZZ_UNUSED void fuzz_free_hook(const volatile void* ptr) {
    if (!fuzz_tracking || ptr == NULL) { return; }
    size_t i = fuzz_slot_find((uintptr_t)ptr);
    if (i == FUZZ_LIVE_SLOTS) { return; }  // allocated before the guarded call
    uint32_t pos = fuzz_slot_pos[i];
    fuzz_slot_delete(i);
    if (pos >= fuzz_live_n || fuzz_live[pos] != (uintptr_t)ptr) { return; }  // (the index and the list disagree: forget it)
    uintptr_t last = fuzz_live[--fuzz_live_n];  // the last block takes the freed position
    fuzz_live[fuzz_live_n] = 0;
    if (pos != fuzz_live_n) {
        fuzz_live[pos] = last;
        size_t j = fuzz_slot_find(last);
        if (j != FUZZ_LIVE_SLOTS) { fuzz_slot_pos[j] = pos; }
    }
}

// Forgets every recorded block (the index empties in O(live blocks)). No copy of a pointer may
// stay behind in these arrays: LeakSanitizer would take it for a reference and miss a leak.
static inline void fuzz_live_clear(void) {
    for (size_t k = 0; k < fuzz_live_n; k++) {
        size_t i = fuzz_slot_find(fuzz_live[k]);
        if (i != FUZZ_LIVE_SLOTS) { fuzz_slot_delete(i); }
        fuzz_live[k] = 0;
    }
    fuzz_live_n = 0;
}

// ----------------------------------------------------------------------------
// files opened by the headers during the guarded call

#define FUZZ_MAX_FILES 64
static FILE* fuzz_files[FUZZ_MAX_FILES];

static FUZZ_UNUSED FILE* fuzz_fopen(const char* path, const char* mode) {
    FILE* fp = fopen(path, mode);
    if (fp != NULL && fuzz_armed) {
        int k = 0;
        while (k < FUZZ_MAX_FILES && fuzz_files[k] != NULL) { k++; }
        if (k == FUZZ_MAX_FILES) {
            fprintf(stderr, "fuzz: more than %d files open in one input\n", FUZZ_MAX_FILES);
            abort();
        }
        fuzz_files[k] = fp;
    }
    return fp;
}

static FUZZ_UNUSED int fuzz_fclose(FILE* fp) {
    for (int k = 0; k < FUZZ_MAX_FILES; k++) {
        if (fuzz_files[k] == fp) { fuzz_files[k] = NULL; }
    }
    return fclose(fp);
}

// from here on, the headers' fopen/fclose are the recording versions
#define fopen(path, mode) fuzz_fopen(path, mode)
#define fclose(fp) fuzz_fclose(fp)

// ----------------------------------------------------------------------------
// guarded calls

// The compiler takes malloc and free for calls that touch no global of ours, but the hooks do:
// these fences keep the bookkeeping below in program order with the reader's allocations.
#define FUZZ_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

static FUZZ_UNUSED void fuzz_begin(void) {
    FUZZ_FENCE();
    memset(fuzz_files, 0, sizeof(fuzz_files));
    fuzz_tracking = 1;
    fuzz_armed = 1;
    FUZZ_FENCE();
}

// The guarded call returned normally: the target has closed its files and freed its blocks
// (LeakSanitizer checks the blocks after the call; an open file is a descriptor leak).
static FUZZ_UNUSED void fuzz_end(void) {
    FUZZ_FENCE();
    fuzz_armed = 0;
    fuzz_tracking = 0;
    for (int k = 0; k < FUZZ_MAX_FILES; k++) { fuzz_check(fuzz_files[k] == NULL, "a file left open on success"); }
    fuzz_live_clear();
    FUZZ_FENCE();
}

// The guarded call jumped out: close its files, then free the blocks nobody will free.
static FUZZ_UNUSED void fuzz_reject(void) {
    FUZZ_FENCE();
    fuzz_armed = 0;
    for (int k = 0; k < FUZZ_MAX_FILES; k++) {
        if (fuzz_files[k] != NULL) { fuzz_fclose(fuzz_files[k]); }
    }
    FUZZ_FENCE();
    fuzz_tracking = 0;
    FUZZ_FENCE();
    for (size_t k = 0; k < fuzz_live_n; k++) {
        // only a block the allocator still owns (belt and braces: never a double free)
        if (__sanitizer_get_ownership((const void*)fuzz_live[k])) { free((void*)fuzz_live[k]); }
    }
    fuzz_live_clear();
    FUZZ_FENCE();
}

// ----------------------------------------------------------------------------
// set-up, and the input as a file: the readers take paths. One private directory per process,
// in /dev/shm when there is one (memory, not disk), removed at exit.

static char fuzz_dir[64];
static char fuzz_paths[4][128];

static FUZZ_UNUSED void fuzz_remove_dir(void) {
    for (int k = 0; k < 4; k++) {
        if (fuzz_paths[k][0]) { unlink(fuzz_paths[k]); }
    }
    if (fuzz_dir[0]) { rmdir(fuzz_dir); }
}

// Call from LLVMFuzzerInitialize.
static FUZZ_UNUSED void fuzz_setup(void) {
    const char* tmp = getenv("TMPDIR");
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp ? tmp : "/tmp");
    snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/leanstep_fuzz.XXXXXX", base);
    if (mkdtemp(fuzz_dir) == NULL) { perror("fuzz: mkdtemp"); abort(); }
    atexit(fuzz_remove_dir);
    // ours beside libFuzzer's own: the sanitizer runtime keeps several pairs
    if (!__sanitizer_install_malloc_and_free_hooks(fuzz_malloc_hook, fuzz_free_hook)) {
        fprintf(stderr, "fuzz: cannot install the malloc/free hooks\n");
        abort();
    }
    // stdout gets a static buffer: a buffer malloc'd by the first printf inside a guarded call
    // would be freed by fuzz_reject() under stdio's feet
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
}

// The LLVMFuzzerInitialize of a target that needs nothing but fuzz_setup().
#define FUZZ_INITIALIZE_DEFAULT                              \
    int LLVMFuzzerInitialize(int* argc, char*** argv) {      \
        (void)argc;                                          \
        (void)argv;                                          \
        fuzz_setup();                                        \
        return 0;                                            \
    }

// Writes bytes to <private dir>/<name> and returns the path (slot k: up to 4 files at once).
static FUZZ_UNUSED const char* fuzz_write_file(int k, const char* name, const uint8_t* data, size_t size) {
    snprintf(fuzz_paths[k], sizeof(fuzz_paths[k]), "%s/%s", fuzz_dir, name);
    FILE* fp = fopen(fuzz_paths[k], "wb");  // (the recording fopen, not armed here)
    if (fp == NULL) { perror("fuzz: cannot write the input file"); abort(); }
    if (size > 0 && fwrite(data, 1, size, fp) != size) { perror("fuzz: write"); abort(); }
    fclose(fp);
    return fuzz_paths[k];
}

static FUZZ_UNUSED const char* fuzz_write_input(const char* name, const uint8_t* data, size_t size) {
    return fuzz_write_file(0, name, data, size);
}

#endif // DEV_FUZZ_FUZZ_COMMON_H
