/*
 prepare_corpus.c: any text corpus -> llm.c token shards with GPT-2's tokenizer, on all cores.

 Inputs (in the order given; a directory is walked recursively, its files in byte order of name):
   *.txt            one document per file
   *.jsonl, *.ndjson, *.json
                    one document per line, its text in field "text" (--field NAME for another);
                    blank lines are skipped
   any of these with .gz: gzip-compressed (zlib). In a directory, other files are skipped (counted;
   --all-files reads them as .txt), and so are dangling links and files or directories that cannot
   be opened (counted); a file named on the command line that is neither is read as .txt.
 Output, in OUT_DIR (default data/corpus), named NAME (default: OUT_DIR's last component):
   NAME_val_000000.bin, NAME_train_000001.bin, NAME_train_000002.bin, ...
 llm.c token shards (llmc/io/shard.h). Every document is its end-of-text token (50256) followed
 by encode_ordinary(text) (tiktoken's, id for id); documents are concatenated in input order and
 cut into shards of --shard-tokens tokens (default 100M, as llm.c's FineWeb shards; the last one
 shorter). By default the first shard is val and the rest train (llm.c's FineWeb layout); a corpus
 that does not fill two shards would leave train empty or shorter than val, so it is split by
 documents instead: k = max(1, round(n / 10)) of its n documents, evenly spaced (document i is val
 when floor((i+1)k/n) > floor(ik/n): the last one always), go to val, the rest to train; a corpus
 of one document gives val its last tenth of tokens. Until two shards are full the tokens wait in
 memory (the two shard buffers), so nothing is written that the split would change. With
 --val-fraction F, F of the documents (evenly spaced: document i is val when floor((i+1)F) >
 floor(iF)) go to val shards and the rest to train shards, each cut in the same way. The shard
 number counts all shards in the order they are completed. The trainers read them with
   -i 'OUT_DIR/NAME_train_*.bin' -j 'OUT_DIR/NAME_val_*.bin'
 Text is not changed (no newline translation); documents must be valid UTF-8.

 Threads: the main thread reads a batch of documents (64 MB or 16,384 of them); the workers
 (OpenMP, --threads, default all cores; waiting passively) parse, check and encode them, one
 Tokenizer each; the main thread then writes the tokens in document order. The output does not
 depend on the thread count. A .txt file is one document, encoded by one thread.
 A JSON line with an escaped NUL (\u0000) is bad input too: cJSON's strings end at a NUL.
 Bad input: a malformed JSONL line, a line without the text field, or a document that is not
 valid UTF-8 stops the run with one line naming the file and line (exit 1); with --skip-bad the
 document is skipped and counted instead.
 Rerun: OUT_DIR/NAME.done records the inputs (path, size, mtime), the options, this program and
 the shards written. A rerun with the same record does nothing; otherwise every shard is made
 again and a shard whose bytes are already on disk is left as it is (not rewritten). Shards of
 this NAME that a new run did not make (an older, longer run) are removed at the end.
 Writes are atomic (temp file, fsync, rename); on any error, and on SIGINT/SIGTERM/SIGHUP, the
 temp file is removed.

 usage: prepare_corpus [options] INPUT...   (prepare_corpus -h lists the options)
*/
#include <dirent.h>
#include <signal.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "llmc/utils.h"
#include "llmc/io/shard.h"
#include "llmc/io/tokenizer.h"
#include "llmc/run/openmp_env.h"
#include "llmc/run/progress.h"

#define DEFAULT_SHARD_TOKENS 100000000L
#define BATCH_BYTES (64u << 20)   // a batch is read until its text reaches this size
#define BATCH_DOCS 16384          // or it holds this many documents (each keeps a token list)
#define KEEP_TOKENS (1u << 20)    // a document's token list larger than this is freed after its batch
#define READ_CHUNK (1u << 20)

typedef struct {
    const char* out_dir;
    const char* name;
    const char* field;
    const char* encoder;
    const char* vocab;
    long shard_tokens;
    double val_fraction;  // 0: the first shard is val
    int threads;
    int skip_bad;
    int force;
    int all_files;  // --all-files: files of other names in directories are read as .txt
} Options;

// ----------------------------------------------------------------------------
// the input files

enum { FMT_TXT, FMT_JSONL };

typedef struct {
    char* path;
    int format;
    long long size;   // bytes on disk (compressed for .gz)
    long long mtime_ns;
} InputFile;

typedef struct {
    InputFile* files;
    int n, cap;
    int n_other;       // files in directories that are not corpus files
    int n_dangling;    // links in directories whose target is not there
    int n_unreadable;  // files and directories in directories that cannot be opened
    int all_files;     // --all-files
} InputList;

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// FMT_TXT / FMT_JSONL by the name (a .gz suffix is looked through), -1 if neither
static int format_of(const char* path) {
    size_t n = strlen(path);
    char base[4096];
    if (n >= sizeof(base)) { ls_fatal("%s: path too long", path); }
    memcpy(base, path, n + 1);
    if (ends_with(base, ".gz")) { base[n - 3] = '\0'; }
    if (ends_with(base, ".txt")) { return FMT_TXT; }
    if (ends_with(base, ".jsonl") || ends_with(base, ".ndjson") || ends_with(base, ".json")) { return FMT_JSONL; }
    return -1;
}

static void inputs_add_file(InputList* l, const char* path, int format, const struct stat* st) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->files = (InputFile*)tokenizer_realloc(l->files, (size_t)l->cap * sizeof(InputFile));
    }
    InputFile* f = &l->files[l->n++];
    f->path = strdup(path);
    if (f->path == NULL) { ls_fatal("out of host memory"); }
    f->format = format;
    f->size = (long long)st->st_size;
    f->mtime_ns = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static int compare_names(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static void inputs_add(InputList* l, const char* path, int top) {  // NOLINT(misc-no-recursion): one level per directory
    struct stat st;
    if (stat(path, &st) != 0) {
        if (top) { ls_fatal("input %s: %s", path, strerror(errno)); }
        struct stat lst;  // inside a directory: a dangling link (or one in a loop) is skipped
        if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) { l->n_dangling++; } else { l->n_unreadable++; }
        return;
    }
    if (S_ISREG(st.st_mode)) {
        int fmt = format_of(path);
        if (fmt < 0 && !top && !l->all_files) { l->n_other++; return; }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            if (top) { ls_fatal("input %s: cannot open: %s", path, strerror(errno)); }
            l->n_unreadable++;
            return;
        }
        close(fd);
        inputs_add_file(l, path, fmt < 0 ? FMT_TXT : fmt, &st);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (top) { ls_fatal("input %s: not a file or directory", path); }
        l->n_other++;
        return;
    }
    DIR* d = opendir(path);
    if (d == NULL) {
        if (top) { ls_fatal("input %s: cannot open directory: %s", path, strerror(errno)); }
        l->n_unreadable++;
        return;
    }
    char** names = NULL;
    size_t n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') { continue; }  // ., .. and hidden files
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = (char**)tokenizer_realloc(names, cap * sizeof(char*));
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = (char*)mallocCheck(len);
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 0) { qsort(names, n, sizeof(char*), compare_names); }
    for (size_t i = 0; i < n; i++) {
        inputs_add(l, names[i], 0);
        free(names[i]);
    }
    free(names);
}

// ----------------------------------------------------------------------------
// a batch of documents: their raw bytes (a .txt file, or a JSONL line) in one arena

typedef struct {
    size_t off, len;    // raw bytes in the arena (NUL-terminated there)
    int file;           // index into the InputList
    long long line;     // JSONL: the line number; txt: 1
    int error;          // set by the workers: DOC_OK, ...
    long long err_at;   // byte offset of the bad byte (invalid UTF-8)
    TokenList toks;     // EOT + encode_ordinary(text)
} Doc;

enum { DOC_OK, DOC_BAD_JSON, DOC_NO_FIELD, DOC_BAD_UTF8, DOC_NUL };

typedef struct {
    char* arena;
    size_t len, cap;
    Doc* docs;
    int n, cap_docs;
} Batch;

static void arena_append(Batch* b, const void* p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : (1u << 20);
        while (cap < b->len + n + 1) { cap *= 2; }
        b->arena = (char*)tokenizer_realloc(b->arena, cap);
        b->cap = cap;
    }
    memcpy(b->arena + b->len, p, n);
    b->len += n;
}

static Doc* batch_new_doc(Batch* b, int file, long long line) {
    if (b->n == b->cap_docs) {
        int cap = b->cap_docs ? 2 * b->cap_docs : 1024;
        b->docs = (Doc*)tokenizer_realloc(b->docs, (size_t)cap * sizeof(Doc));
        memset(b->docs + b->cap_docs, 0, (size_t)(cap - b->cap_docs) * sizeof(Doc));  // empty TokenLists
        b->cap_docs = cap;
    }
    Doc* d = &b->docs[b->n++];
    d->off = b->len;
    d->len = 0;
    d->file = file;
    d->line = line;
    d->error = DOC_OK;
    d->err_at = 0;
    d->toks.len = 0;
    return d;
}

static void batch_end_doc(Batch* b, Doc* d) {
    d->len = b->len - d->off;
    arena_append(b, "", 1);  // the NUL
}

// ----------------------------------------------------------------------------
// reading: one file open at a time (zlib reads plain and gzip files alike)

typedef struct {
    gzFile gz;
    int file;
    long long line;
    unsigned char* buf;  // (READ_CHUNK,)
    size_t pos, end;
    int eof;
    long long done_bytes;  // input bytes (on disk) of the files finished before this one
} Reader;

static void reader_fill(Reader* r, const InputList* in) {
    int n = gzread(r->gz, r->buf, READ_CHUNK);
    if (n < 0) {
        int err;
        const char* msg = gzerror(r->gz, &err);
        ls_fatal("%s: read error: %s", in->files[r->file].path, err == Z_ERRNO ? strerror(errno) : msg);
    }
    r->pos = 0;
    r->end = (size_t)n;
    if (n == 0) { r->eof = 1; }
}

// Appends the next JSONL line (without its '\n') to the batch as a document. 0 at end of file.
static int reader_line(Reader* r, const InputList* in, Batch* b) {
    Doc* d = NULL;
    for (;;) {
        if (r->pos == r->end) {
            if (!r->eof) { reader_fill(r, in); }
            if (r->eof) { break; }
        }
        if (d == NULL) { d = batch_new_doc(b, r->file, ++r->line); }
        const unsigned char* p = r->buf + r->pos;
        const unsigned char* nl = (const unsigned char*)memchr(p, '\n', r->end - r->pos);
        size_t take = nl ? (size_t)(nl - p) : r->end - r->pos;
        arena_append(b, p, take);
        r->pos += take + (nl ? 1 : 0);
        if (nl) { break; }
    }
    if (d == NULL) { return 0; }
    batch_end_doc(b, d);
    return 1;
}

static void reader_whole_file(Reader* r, const InputList* in, Batch* b) {
    Doc* d = batch_new_doc(b, r->file, 1);
    for (;;) {
        if (r->pos < r->end) { arena_append(b, r->buf + r->pos, r->end - r->pos); }
        r->pos = r->end;
        reader_fill(r, in);
        if (r->eof) { break; }
    }
    batch_end_doc(b, d);
}

static void reader_open(Reader* r, const InputList* in, int file) {
    r->file = file;
    r->gz = gzopen(in->files[file].path, "rb");
    if (r->gz == NULL) { ls_fatal("%s: cannot open: %s", in->files[file].path, strerror(errno)); }
    gzbuffer(r->gz, 1u << 18);
    r->line = 0;
    r->pos = r->end = 0;
    r->eof = 0;
}

static void reader_close(Reader* r, const InputList* in) {
    r->done_bytes += in->files[r->file].size;
    gzclose(r->gz);
    r->gz = NULL;
}

// Reads the next batch into b. Returns 0 when all files are read and b is empty.
static int read_batch(Reader* r, const InputList* in, Batch* b) {
    b->len = 0;
    b->n = 0;
    while (b->len < BATCH_BYTES && b->n < BATCH_DOCS) {
        if (r->gz == NULL) {
            if (r->file + 1 >= in->n) { break; }
            reader_open(r, in, r->file + 1);
        }
        if (in->files[r->file].format == FMT_TXT) {
            reader_whole_file(r, in, b);
            reader_close(r, in);
        } else if (!reader_line(r, in, b)) {
            reader_close(r, in);
        }
    }
    return b->n > 0;
}

// ----------------------------------------------------------------------------
// the workers: JSON, UTF-8, encoding

// Offset of the first byte that is not part of well-formed UTF-8 (Unicode Table 3-7: no overlong
// forms, no surrogates, nothing above U+10FFFF), or -1 if s is valid.
static long long utf8_invalid_at(const unsigned char* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) { need = 1; }
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) { need = 2; }
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) { need = 3; }
        else { return (long long)i; }
        if (i + (size_t)need >= n) { return (long long)i; }  // truncated at the end
        for (int k = 1; k <= need; k++) {
            unsigned char x = s[i + k];
            if (x < lo || x > hi) { return (long long)i; }
            lo = 0x80;
            hi = 0xBF;
        }
        i += (size_t)need + 1;
    }
    return -1;
}

// Does the JSON text hold the escape \u0000 (a backslash-u preceded by an even number of backslashes)?
static int json_has_nul_escape(const char* s, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\' || s[i + 1] != 'u' || memcmp(s + i + 2, "0000", 4) != 0) { continue; }
        size_t k = 0;  // backslashes before this one
        while (k < i && s[i - 1 - k] == '\\') { k++; }
        if (k % 2 == 0) { return 1; }
    }
    return 0;
}

static void encode_doc(Tokenizer* tok, const char* raw, Doc* d, int format, const char* field) {
    d->toks.len = 0;
    const char* text = raw;
    size_t len = d->len;
    cJSON* root = NULL;
    if (format == FMT_JSONL) {
        const char* end = NULL;
        root = cJSON_ParseWithOpts(raw, &end, 1);
        if (root == NULL || end != raw + d->len) {
            cJSON_Delete(root);
            // a line of only whitespace is no document
            size_t k = 0;
            while (k < d->len && (raw[k] == ' ' || raw[k] == '\t' || raw[k] == '\r')) { k++; }
            d->error = k == d->len ? DOC_OK : DOC_BAD_JSON;
            d->len = 0;
            return;
        }
        const cJSON* v = cJSON_GetObjectItemCaseSensitive(root, field);
        if (!cJSON_IsString(v) || v->valuestring == NULL) {
            cJSON_Delete(root);
            d->error = DOC_NO_FIELD;
            return;
        }
        text = v->valuestring;
        len = strlen(text);
        if (json_has_nul_escape(raw, d->len)) {
            cJSON_Delete(root);
            d->error = DOC_NUL;
            return;
        }
    }
    long long bad = utf8_invalid_at((const unsigned char*)text, len);
    if (bad >= 0) {
        d->error = DOC_BAD_UTF8;
        d->err_at = bad;
    } else {
        tokenlist_push(&d->toks, (int)tok->eot_token);
        tokenizer_encode_ordinary(tok, text, len, &d->toks);
    }
    cJSON_Delete(root);
}

// ----------------------------------------------------------------------------
// shards

typedef struct {
    const char* split;  // "val" / "train"
    uint16_t* toks;     // (shard_tokens,)
    size_t n;
    long n_shards;
} Stream;

typedef struct {
    const Options* o;
    Stream val, train;
    long next_index;      // the next shard's number
    char** written;       // names of the shards made, for the record
    long n_written, n_unchanged;
    size_t total_tokens;
    size_t smallest;      // tokens of the smallest shard written
    uint16_t* block;      // (2 * shard_tokens,): val's buffer, then train's
    int waiting;          // default split: the corpus has not filled two shards yet
    size_t pending;       // while waiting: its tokens so far, at the start of block
} Writer;

// Does path already hold exactly this shard?
static int shard_on_disk(const char* path, const uint16_t* toks, size_t n) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return 0; }
    int32_t header[SHARD_HEADER_INTS];
    int same = fread(header, sizeof(int32_t), SHARD_HEADER_INTS, fp) == SHARD_HEADER_INTS &&
               shard_header_problem(header, file_size_of(fp)) == NULL && (size_t)header[2] == n;
    static uint16_t buf[1 << 16];
    for (size_t at = 0; same && at < n;) {
        size_t k = n - at < (1 << 16) ? n - at : (1 << 16);
        same = fread(buf, sizeof(uint16_t), k, fp) == k && memcmp(buf, toks + at, k * sizeof(uint16_t)) == 0;
        at += k;
    }
    fclose(fp);
    return same;
}

static void writer_flush(Writer* w, Stream* s) {
    if (s->n == 0) { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s_%s_%06ld.bin", w->o->out_dir, w->o->name, s->split, w->next_index);
    if (shard_on_disk(path, s->toks, s->n)) { w->n_unchanged++; }
    else { shard_write(path, s->toks, s->n); }
    w->written = (char**)tokenizer_realloc(w->written, (size_t)(w->n_written + 1) * sizeof(char*));
    w->written[w->n_written] = strdup(path);
    if (w->written[w->n_written] == NULL) { ls_fatal("out of host memory"); }
    w->n_written++;
    w->next_index++;
    if (w->n_written == 1 || s->n < w->smallest) { w->smallest = s->n; }
    s->n_shards++;
    s->n = 0;
}

static void writer_add(Writer* w, Stream* s, const int* toks, size_t n) {
    size_t cap = (size_t)w->o->shard_tokens;
    while (n > 0) {
        size_t k = cap - s->n < n ? cap - s->n : n;
        for (size_t i = 0; i < k; i++) { s->toks[s->n + i] = (uint16_t)toks[i]; }  // ids < 50257 by construction
        s->n += k;
        toks += k;
        n -= k;
        if (s->n == cap) { writer_flush(w, s); }
    }
}

// Writes toks[0..n) as shards of s's split, cut at shard_tokens (s's own buffer is not used).
static void writer_put(Writer* w, Stream* s, uint16_t* toks, size_t n) {
    uint16_t* own = s->toks;
    for (size_t at = 0; at < n; at += (size_t)w->o->shard_tokens) {
        s->toks = toks + at;
        s->n = n - at < (size_t)w->o->shard_tokens ? n - at : (size_t)w->o->shard_tokens;
        writer_flush(w, s);
    }
    s->toks = own;
}

// Default split: a document's tokens while the corpus has not filled two shards (they wait in
// block); once it does, llm.c's layout from the start: the first shard_tokens tokens are val, the
// rest train, and from then on the streams take every document as it comes.
static void writer_add_default(Writer* w, const int* toks, size_t n) {
    const size_t cap = (size_t)w->o->shard_tokens;
    if (w->waiting && w->pending + n <= 2 * cap) {
        for (size_t i = 0; i < n; i++) { w->block[w->pending + i] = (uint16_t)toks[i]; }  // ids < 50257
        w->pending += n;
        return;
    }
    if (w->waiting) {  // two shards full: the waiting tokens are val's buffer, then train's
        w->waiting = 0;
        w->val.n = w->pending < cap ? w->pending : cap;
        if (w->val.n == cap) { writer_flush(w, &w->val); }
        if (w->pending > cap) { w->train.n = w->pending - cap; }
    }
    if (w->val.n_shards == 0) {  // the document that fills val continues in train
        size_t room = cap - w->val.n, k = n < room ? n : room;
        writer_add(w, &w->val, toks, k);
        toks += k;
        n -= k;
    }
    writer_add(w, &w->train, toks, n);
}

// A corpus that ended before filling two shards, split by documents (each begins with the
// end-of-text token, which encode_ordinary never produces): k = max(1, round(n / 10)) of its n
// documents go to val, evenly spaced, the last one always; one document: val is its last tenth.
static void writer_split_small(Writer* w, uint32_t eot) {
    uint16_t* t = w->block;
    const size_t p = w->pending;
    size_t n_docs = 0;
    for (size_t i = 0; i < p; i++) { n_docs += t[i] == eot; }
    size_t n_val = 0, n_train = 0, k = 0;
    uint16_t* val = NULL;
    if (n_docs >= 2) {
        k = (n_docs + 5) / 10 > 0 ? (n_docs + 5) / 10 : 1;
        for (int pass = 0; pass < 2; pass++) {  // 0: count val's tokens; 1: val's documents out, train's to the front
            size_t doc = 0, nv = 0, nt = 0;
            for (size_t start = 0; start < p; doc++) {
                size_t end = start + 1;
                while (end < p && t[end] != eot) { end++; }
                int is_val = (doc + 1) * k / n_docs > doc * k / n_docs;
                if (pass == 1 && is_val) { memcpy(val + nv, t + start, (end - start) * sizeof(uint16_t)); }
                if (pass == 1 && !is_val) { memmove(t + nt, t + start, (end - start) * sizeof(uint16_t)); }
                *(is_val ? &nv : &nt) += end - start;
                start = end;
            }
            n_val = nv;
            n_train = nt;
            if (pass == 0) { val = (uint16_t*)mallocCheck((n_val > 0 ? n_val : 1) * sizeof(uint16_t)); }
        }
        printf("prepare_corpus: %zu tokens do not fill two shards (--shard-tokens %ld): split by documents, %zu of %zu "
               "to val (%zu tokens), the rest to train (%zu tokens)\n", p, w->o->shard_tokens, k, n_docs, n_val, n_train);
        writer_put(w, &w->val, val, n_val);
        writer_put(w, &w->train, t, n_train);
        free(val);
        return;
    }
    n_val = p / 10 > 0 ? p / 10 : 1;
    n_train = p - n_val;
    printf("prepare_corpus: %zu tokens do not fill two shards (--shard-tokens %ld), in one document: its last %zu tokens "
           "to val, the first %zu to train\n", p, w->o->shard_tokens, n_val, n_train);
    writer_put(w, &w->val, t + n_train, n_val);
    writer_put(w, &w->train, t, n_train);
}

// ----------------------------------------------------------------------------
// the record of a finished run (OUT_DIR/NAME.done): first the inputs and options, then the shards

static char* record_inputs(const Options* o, const InputList* in) {
    size_t cap = 4096, len = 0;
    char* s = (char*)mallocCheck(cap);
    struct stat st;
    long long exe_mtime = stat("/proc/self/exe", &st) == 0 ? (long long)st.st_mtim.tv_sec : 0;
    char exe[4096];
    ssize_t n_exe = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n_exe > 0 ? n_exe : 0] = '\0';
    for (int i = -1; i < in->n; i++) {
        char line[8400];
        int n = i < 0 ? snprintf(line, sizeof(line), "prepare_corpus 1 %s %lld\nfield %s\nshard_tokens %ld\n"
                                 "val_fraction %.17g\nskip_bad %d\nencoder %s\nvocab %s\n", exe, exe_mtime, o->field,
                                 o->shard_tokens, o->val_fraction, o->skip_bad, o->encoder, o->vocab)
                      : snprintf(line, sizeof(line), "input %s %lld %lld\n", in->files[i].path, in->files[i].size,
                                 in->files[i].mtime_ns);
        if (n < 0 || (size_t)n >= sizeof(line)) { ls_fatal("path too long in the inputs"); }
        while (len + (size_t)n + 1 > cap) { cap *= 2; s = (char*)tokenizer_realloc(s, cap); }
        memcpy(s + len, line, (size_t)n + 1);
        len += (size_t)n;
    }
    return s;
}

// A previous run with these inputs finished, and its shards are all still there with their sizes?
static int record_up_to_date(const char* record_path, const char* inputs) {
    FILE* fp = fopen(record_path, "rb");
    if (fp == NULL) { return 0; }
    long long size = file_size_of(fp);
    char* text = (char*)mallocCheck((size_t)(size > 0 ? size : 0) + 1);
    size_t got = fread(text, 1, (size_t)(size > 0 ? size : 0), fp);
    fclose(fp);
    text[got] = '\0';
    size_t n_in = strlen(inputs);
    int ok = got >= n_in && memcmp(text, inputs, n_in) == 0 && strstr(text + n_in, "end\n") != NULL;
    for (char* line = text + n_in; ok && strncmp(line, "shard ", 6) == 0;) {
        char* nl = strchr(line, '\n');
        if (nl == NULL) { ok = 0; break; }
        *nl = '\0';
        char* sp = strrchr(line + 6, ' ');
        if (sp == NULL) { ok = 0; break; }
        *sp = '\0';
        struct stat st;
        ok = stat(line + 6, &st) == 0 && (long long)st.st_size == strtoll(sp + 1, NULL, 10);
        line = nl + 1;
    }
    free(text);
    return ok;
}

static void record_write(const char* record_path, const char* inputs, const Writer* w) {
    AtomicFile af;
    atomic_file_open(&af, record_path);
    fwriteCheck(inputs, 1, strlen(inputs), af.fp, af.tmp_path);
    for (long i = 0; i < w->n_written; i++) {
        struct stat st;
        if (stat(w->written[i], &st) != 0) { ls_fatal("%s: %s", w->written[i], strerror(errno)); }
        fprintf(af.fp, "shard %s %lld\n", w->written[i], (long long)st.st_size);
    }
    fprintf(af.fp, "end\n");
    atomic_file_commit(&af);
}

// Removes NAME_{val,train}_NNNNNN.bin shards in OUT_DIR that this run did not write.
static long remove_stale_shards(const Options* o, const Writer* w) {
    DIR* d = opendir(o->out_dir);
    if (d == NULL) { return 0; }
    long removed = 0;
    size_t nl = strlen(o->name);
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        const char* s = e->d_name;
        if (strncmp(s, o->name, nl) != 0 || s[nl] != '_') { continue; }
        const char* rest = s + nl + 1;
        const char* num = strncmp(rest, "val_", 4) == 0 ? rest + 4 : strncmp(rest, "train_", 6) == 0 ? rest + 6 : NULL;
        if (num == NULL || strlen(num) != 10 || strcmp(num + 6, ".bin") != 0) { continue; }
        int digits = 1;
        for (int k = 0; k < 6; k++) { digits &= num[k] >= '0' && num[k] <= '9'; }
        if (!digits) { continue; }
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, s);
        int ours = 0;
        for (long i = 0; i < w->n_written && !ours; i++) { ours = strcmp(w->written[i], path) == 0; }
        if (!ours && unlink(path) == 0) { removed++; }
    }
    closedir(d);
    return removed;
}

// ----------------------------------------------------------------------------
// progress on stderr: documents, tokens, MB/s, ETA (from the input bytes read)

typedef struct {
    double t0, t_last;
    int tty, shown;
} Meter;

static void meter_show(Meter* m, long long docs, size_t tokens, double mb, double done_frac, int last) {
    double now = progress_now(), el = now - m->t0;
    if (!last && (el < 1.0 || now - m->t_last < (m->tty ? 0.25 : 10.0))) { return; }
    if (last && (!m->shown || !m->tty)) { return; }  // a log has its lines; a terminal gets its last one kept
    m->t_last = now;
    m->shown = 1;
    double eta = done_frac > 0 ? el * (1.0 - done_frac) / done_frac : 0.0;
    fprintf(stderr, "%sprepare_corpus: %lld docs, %.1fM tokens, %.1f MB/s, %.0f%%, eta %.0f s%s",
            m->tty ? "\r" : "", docs, (double)tokens / 1e6, el > 0 ? mb / el : 0.0, 100.0 * done_frac, eta,
            m->tty ? "   " : "\n");
    if (last && m->tty) { fprintf(stderr, "\n"); }
    fflush(stderr);
}

// ----------------------------------------------------------------------------

// SIGINT/SIGTERM/SIGHUP: remove the temp file of a shard being written (unlink is
// async-signal-safe), then die of the signal as usual.
static void on_signal(int sig) {
    ls_remove_pending_tmp();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void usage(const char* argv0, int status) {
    fprintf(status == 0 ? stdout : stderr,
            "usage: %s [options] INPUT...\n"
            "  INPUT: .txt files (one document each), .jsonl/.ndjson/.json files (one document per line),\n"
            "         either optionally .gz, or directories of them (walked recursively, in name order)\n"
            "  -o DIR              output directory (default data/corpus)\n"
            "  -n NAME             shard names NAME_val_000000.bin, NAME_train_000001.bin, ... (default: DIR's name)\n"
            "  --field NAME        JSONL field holding the text (default text)\n"
            "  --shard-tokens N    tokens per shard (default 100000000)\n"
            "  --val-fraction F    this fraction of the documents to val shards (default 0: the first shard is val)\n"
            "  --threads N         encoding threads (default: all cores / OMP_NUM_THREADS)\n"
            "  --skip-bad          skip and count malformed JSONL lines and invalid UTF-8 documents (default: stop)\n"
            "  --all-files         in directories, read files of any other name as .txt (default: skip them)\n"
            "  --encoder FILE      GPT-2's encoder.json (default data/gpt2/encoder.json, from `make data`)\n"
            "  --vocab FILE        GPT-2's vocab.bpe (default data/gpt2/vocab.bpe)\n"
            "  -f                  make the shards even if OUT_DIR/NAME.done says they are up to date\n",
            argv0);
    exit(status);
}

// A command line it cannot run: one line, exit 2 (as the trainers' flags).
static void usage_error(const char* fmt, const char* arg) {
    fprintf(stderr, "leanstep: error: prepare_corpus: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    exit(2);
}

static long parse_long(const char* flag, const char* v, long lo, long hi) {
    char* end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
        ls_fatal("flag %s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
    }
    return x;
}

int main(int argc, char** argv) {
    openmp_prefer_passive_wait(argv);  // workers wait passively while the main thread reads and writes
    Options o = {"data/corpus", NULL, "text", "data/gpt2/encoder.json", "data/gpt2/vocab.bpe",
                 DEFAULT_SHARD_TOKENS, 0.0, 0, 0, 0, 0};
    InputList in;
    memset(&in, 0, sizeof(in));
    const char** paths = (const char**)mallocCheck((size_t)argc * sizeof(char*));
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(argv[0], 0); }
        else if (strcmp(a, "-f") == 0) { o.force = 1; }
        else if (strcmp(a, "--skip-bad") == 0) { o.skip_bad = 1; }
        else if (strcmp(a, "--all-files") == 0) { o.all_files = 1; }
        else if (a[0] == '-' && a[1] != '\0' && !has_value) { usage_error("flag %s needs a value", a); }
        else if (strcmp(a, "-o") == 0) { o.out_dir = argv[++i]; }
        else if (strcmp(a, "-n") == 0) { o.name = argv[++i]; }
        else if (strcmp(a, "--field") == 0) { o.field = argv[++i]; }
        else if (strcmp(a, "--encoder") == 0) { o.encoder = argv[++i]; }
        else if (strcmp(a, "--vocab") == 0) { o.vocab = argv[++i]; }
        else if (strcmp(a, "--shard-tokens") == 0) { o.shard_tokens = parse_long(a, argv[++i], 1, INT32_MAX); }
        else if (strcmp(a, "--threads") == 0) { o.threads = (int)parse_long(a, argv[++i], 1, 4096); }
        else if (strcmp(a, "--val-fraction") == 0) {
            char* end;
            o.val_fraction = strtod(argv[++i], &end);
            if (end == argv[i] || *end != '\0' || !(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
                ls_fatal("flag --val-fraction: '%s' is not a number in [0, 1)", argv[i]);
            }
        }
        else if (a[0] == '-' && a[1] != '\0') { usage_error("unknown flag %s", a); }
        else { paths[n_paths++] = a; }
    }
    if (n_paths == 0) { usage_error("no INPUT given (files or directories)%s", ""); }
    in.all_files = o.all_files;
    if (strlen(o.out_dir) > 3000) { ls_fatal("-o %s: path too long", o.out_dir); }
    if (o.name == NULL) {
        const char* slash = strrchr(o.out_dir, '/');
        o.name = slash && slash[1] ? slash + 1 : o.out_dir;
    }
    if (o.name[0] == '\0' || strchr(o.name, '/') != NULL || strlen(o.name) > 200) {
        ls_fatal("-n '%s': expected a plain file name prefix", o.name);
    }
    for (int i = 0; i < n_paths; i++) { inputs_add(&in, paths[i], 1); }
    free(paths);
    if (in.n == 0) {
        ls_fatal("no .txt/.jsonl(.gz) files in the inputs (%d other files skipped: --all-files reads them as text; "
                 "%d dangling links, %d unreadable)", in.n_other, in.n_dangling, in.n_unreadable);
    }
    int threads = o.threads > 0 ? o.threads : omp_get_max_threads();

    // the output directory (mkdir -p), and the up-to-date check
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/", o.out_dir);
    for (char* p = dir + 1; *p; p++) {
        if (*p != '/') { continue; }
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) { ls_fatal("-o %s: cannot create directory %s: %s", o.out_dir, dir, strerror(errno)); }
        *p = '/';
    }
    if (access(o.out_dir, W_OK) != 0) { ls_fatal("-o %s: output directory not writable: %s", o.out_dir, strerror(errno)); }
    char record_path[4096];
    snprintf(record_path, sizeof(record_path), "%s/%s.done", o.out_dir, o.name);
    char* inputs = record_inputs(&o, &in);
    if (!o.force && record_up_to_date(record_path, inputs)) {
        printf("prepare_corpus: %s/%s_*.bin are up to date (%s; -f to make them again)\n", o.out_dir, o.name, record_path);
        for (int i = 0; i < in.n; i++) { free(in.files[i].path); }
        free(in.files);
        free(inputs);
        return 0;
    }
    unlink(record_path);  // from here on the shards may change
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    Tokenizer tok0;
    tokenizer_init_from_bpe(&tok0, o.encoder, o.vocab);
    if (tok0.vocab_size > 65536) { ls_fatal("%s: vocab of %u does not fit uint16 shards", o.encoder, tok0.vocab_size); }
    Tokenizer* toks = (Tokenizer*)mallocCheck((size_t)threads * sizeof(Tokenizer));
    toks[0] = tok0;
    for (int t = 1; t < threads; t++) { tokenizer_init_copy(&toks[t], &tok0); }
    long long total_in = 0;
    for (int i = 0; i < in.n; i++) { total_in += in.files[i].size; }
    printf("prepare_corpus: %d files (%.1f MB), %d threads -> %s/%s_{val,train}_*.bin, %ld tokens per shard\n",
           in.n, (double)total_in / 1e6, threads, o.out_dir, o.name, o.shard_tokens);
    if (in.n_other + in.n_dangling + in.n_unreadable > 0) {
        printf("prepare_corpus: skipped %d files that are not .txt/.jsonl(.gz)%s, %d dangling links, %d that cannot be "
               "opened\n", in.n_other, in.n_other > 0 ? " (--all-files reads them as text)" : "", in.n_dangling,
               in.n_unreadable);
    }
    fflush(stdout);

    Writer w;
    memset(&w, 0, sizeof(w));
    w.o = &o;
    w.val.split = "val";
    w.train.split = "train";
    w.block = (uint16_t*)mallocCheck(2 * (size_t)o.shard_tokens * sizeof(uint16_t));
    w.val.toks = w.block;
    w.train.toks = w.block + o.shard_tokens;
    w.waiting = o.val_fraction == 0.0;
    Reader r;
    memset(&r, 0, sizeof(r));
    r.file = -1;
    r.buf = (unsigned char*)mallocCheck(READ_CHUNK);
    Batch b;
    memset(&b, 0, sizeof(b));
    Meter m = {progress_now(), 0.0, isatty(fileno(stderr)), 0};
    long long n_docs = 0, n_skipped = 0, doc_index = 0;
    double bytes_in = 0.0;  // uncompressed
    int first_bad_shown = 0;
    while (read_batch(&r, &in, &b)) {
        #pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int i = 0; i < b.n; i++) {
            Doc* d = &b.docs[i];
            encode_doc(&toks[omp_get_thread_num()], b.arena + d->off, d, in.files[d->file].format, o.field);
        }
        bytes_in += (double)b.len;
        for (int i = 0; i < b.n; i++) {
            Doc* d = &b.docs[i];
            const InputFile* f = &in.files[d->file];
            if (d->error == DOC_OK && d->toks.len == 0) { continue; }  // a blank JSONL line
            if (d->error != DOC_OK) {
                char what[256];
                if (d->error == DOC_BAD_JSON) { snprintf(what, sizeof(what), "malformed JSON"); }
                else if (d->error == DOC_NUL) { snprintf(what, sizeof(what), "\\u0000 in a JSON string (a NUL character is not supported)"); }
                else if (d->error == DOC_NO_FIELD) { snprintf(what, sizeof(what), "no string field \"%.100s\"", o.field); }
                else if (f->format == FMT_JSONL) { snprintf(what, sizeof(what), "invalid UTF-8 in field \"%.100s\" at byte %lld of its text", o.field, d->err_at); }
                else {
                    long long line = 1;
                    for (long long k = 0; k < d->err_at; k++) { line += b.arena[d->off + (size_t)k] == '\n'; }
                    d->line = line;
                    snprintf(what, sizeof(what), "invalid UTF-8 (byte 0x%02x at offset %lld)",
                             (unsigned char)b.arena[d->off + (size_t)d->err_at], d->err_at);
                }
                if (!o.skip_bad) {
                    ls_fatal("%s:%lld: %s (--skip-bad skips such documents)", f->path, d->line, what);
                }
                if (!first_bad_shown) {
                    fprintf(stderr, "prepare_corpus: skipping %s:%lld: %s (and any more such documents)\n", f->path, d->line, what);
                    first_bad_shown = 1;
                }
                n_skipped++;
                continue;
            }
            double f_val = o.val_fraction;
            if (f_val > 0.0) {
                int to_val = (long long)((double)(doc_index + 1) * f_val) > (long long)((double)doc_index * f_val);
                writer_add(&w, to_val ? &w.val : &w.train, d->toks.data, d->toks.len);
            } else {
                writer_add_default(&w, d->toks.data, d->toks.len);
            }
            doc_index++;
            w.total_tokens += d->toks.len;
            n_docs++;
            if (d->toks.cap > KEEP_TOKENS) { tokenlist_free(&d->toks); }  // a very long document's
        }
        double done = total_in > 0 ? (double)(r.done_bytes + (r.gz ? gzoffset(r.gz) : 0)) / (double)total_in : 1.0;
        meter_show(&m, n_docs, w.total_tokens, bytes_in / 1e6, done > 1.0 ? 1.0 : done, 0);
    }
    meter_show(&m, n_docs, w.total_tokens, bytes_in / 1e6, 1.0, 1);
    if (w.waiting) {
        writer_split_small(&w, toks[0].eot_token);
    } else {
        writer_flush(&w, &w.val);
        writer_flush(&w, &w.train);
    }
    if (w.n_written == 0) { ls_fatal("no documents in the inputs: nothing to write"); }
    long removed = remove_stale_shards(&o, &w);
    record_write(record_path, inputs, &w);
    double el = progress_now() - m.t0;
    printf("prepare_corpus: %lld documents, %zu tokens, %ld val + %ld train shards (%ld already on disk), "
           "%lld skipped, %.1f MB in %.2f s (%.1f MB/s)\n", n_docs, w.total_tokens, w.val.n_shards, w.train.n_shards,
           w.n_unchanged, n_skipped, bytes_in / 1e6, el, el > 0 ? bytes_in / 1e6 / el : 0.0);
    if (removed > 0) { printf("prepare_corpus: removed %ld shards of an earlier run\n", removed); }
    // the command that trains on them: the CPU trainer's B = 4, T = 64 need 257 tokens in every shard
    char bt[64] = "";
    if (w.smallest < 4 * 64 + 1) { snprintf(bt, sizeof(bt), " -b 1 -t %zu", w.smallest - 1 < 64 ? w.smallest - 1 : 64); }
    if (w.train.n_shards == 0) {
        printf("prepare_corpus: warning: no train shard (all %zu tokens are val): use a larger --val-fraction\n", w.total_tokens);
    } else if (w.val.n_shards == 0) {
        printf("prepare_corpus: warning: no val shard (--val-fraction too small)\n");
    } else if (w.smallest < 2) {
        printf("prepare_corpus: warning: a shard of %zu token: too short to train on (a smaller --shard-tokens leaves "
               "a short last shard: delete it, or change --shard-tokens)\n", w.smallest);
    } else {
        printf("prepare_corpus: train with ./train_gpt2 -i '%s/%s_train_*.bin' -j '%s/%s_val_*.bin'%s\n", o.out_dir, o.name,
               o.out_dir, o.name, bt);
    }
    for (int t = 0; t < threads; t++) { tokenizer_free(&toks[t]); }
    for (int i = 0; i < b.cap_docs; i++) { tokenlist_free(&b.docs[i].toks); }
    for (long i = 0; i < w.n_written; i++) { free(w.written[i]); }
    for (int i = 0; i < in.n; i++) { free(in.files[i].path); }
    free(w.written); free(w.block); free(r.buf); free(b.arena); free(b.docs);
    free(toks); free(in.files); free(inputs);
    return 0;
}
