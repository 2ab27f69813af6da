/*
 shard.h: the on-disk token shard format (llm.c's): constants, writer, header check.

 A shard is a header of SHARD_HEADER_INTS int32 values followed by the tokens as uint16:
   header[0] = SHARD_MAGIC, header[1] = SHARD_VERSION, header[2] = number of tokens,
   the rest of the header is zero.
 shard_write goes through utils.h's AtomicFile (temp name, fsync, rename), so a reader never sees
 a half-written shard: a killed `make data` leaves the old file or none, never a truncated one.

 To add a format version: bump SHARD_VERSION, write the new layout in shard_write, and teach
 shard_header_problem() which versions a reader accepts.
 Compiles as C11 and as C++17 (nvcc, g++).
*/
#ifndef LLMC_SHARD_H
#define LLMC_SHARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

// ----------------------------------------------------------------------------
// shards

// toks (n,) -> path, atomically. Every token must fit uint16 (vocab <= 65536), which the caller
// guarantees by construction; n must fit the int32 header field.
static inline void shard_write(const char* path, const uint16_t* toks, size_t n) {
    if (n > (size_t)INT32_MAX) {
        ls_fatal("%s: %zu tokens do not fit one shard (at most %d)", path, n, INT32_MAX);
    }
    int32_t header[SHARD_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(header, sizeof(int32_t), SHARD_HEADER_INTS, af.fp, af.tmp_path);
    fwriteCheck(toks, sizeof(uint16_t), n, af.fp, af.tmp_path);
    atomic_file_commit(&af);
}

// Checks a shard header against the file's size. Returns NULL when it is sound, else a short
// description of what is wrong, for the caller's message:
//   if ((why = shard_header_problem(h, size))) ls_fatal("%s: %s", path, why);
static inline const char* shard_header_problem(const int32_t* header, long long file_bytes) {
    long long header_bytes = (long long)SHARD_HEADER_INTS * (long long)sizeof(int32_t);
    if (file_bytes < header_bytes) { return "truncated header (expected 1024 bytes); recreate it with `make data`"; }
    if (header[0] != SHARD_MAGIC) { return "bad magic (expected 20240520: not a token shard); recreate it with `make data`"; }
    if (header[1] != SHARD_VERSION) { return "unsupported shard version (expected 1)"; }
    if (header[2] <= 0) { return "header says the shard holds no tokens"; }
    if (file_bytes != header_bytes + (long long)header[2] * (long long)sizeof(uint16_t)) {
        return "file size does not match the token count in its header (truncated?); recreate it with `make data`";
    }
    return NULL;
}

#endif // LLMC_SHARD_H
