/*
 prepare_data.c: the data step (`make data`), no Python needed.

 1. Gets TinyShakespeare's input.txt and GPT-2's encoder.json + vocab.bpe into DATA_DIR (default
    data/): from the mirror in $LEANSTEP_DATA_MIRROR when it is set (a directory, or a URL such as
    file:///path or https://host/path, laid out as tinyshakespeare/input.txt, gpt2/encoder.json,
    gpt2/vocab.bpe), else by downloading their canonical URLs with libcurl. Every file must match
    its pinned sha256; one already in place with the right sha256 is not fetched again. Writes
    are atomic.
 2. Tokenizes TinyShakespeare exactly like llm.c's dev/data/tinyshakespeare.py: the text is split
    on "\n\n" into sections; each section gets an EOT (50256) in front and is encoded with
    encode_ordinary after "\n\n" is put back on its end (all but the last section: llm.c keeps
    that quirk for backwards compatibility). The first 32,768 tokens are val, the rest train.
 3. Writes llm.c token shards and llm.c's decoder file:
      DATA_DIR/tinyshakespeare/tiny_shakespeare_val.bin    32,768 tokens
      DATA_DIR/tinyshakespeare/tiny_shakespeare_train.bin  305,260 tokens
      DATA_DIR/gpt2_tokenizer.bin                          50,257 tokens, for decoding samples
 Step 3 is skipped when the outputs are newer than the inputs and than this program.

 usage: prepare_data [-o DATA_DIR] [-f]   (-f: tokenize even if the outputs are up to date)
 To add a dataset: add its files to DATA_FILES with their sha256, and a tokenize_* function.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#include "llmc/utils.h"
#include "llmc/io/shard.h"
#include "llmc/io/tokenizer.h"
#include "llmc/run/progress.h"

typedef struct {
    const char* rel_path;  // under DATA_DIR and under the mirror
    const char* url;
    const char* sha256;
} DataFile;

// The sha256 values are /work/shared/data/SHA256SUMS; the two GPT-2 ones are also the values
// tiktoken pins for its "gpt2" encoding (tiktoken_ext/openai_public.py).
static const DataFile DATA_FILES[] = {
    {"tinyshakespeare/input.txt",
     "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
     "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"},
    {"gpt2/encoder.json",
     "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
     "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"},
    {"gpt2/vocab.bpe",
     "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
     "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"},
};
#define N_DATA_FILES 3
#define VAL_TOKENS 32768  // llm.c's tinyshakespeare.py: the first 32,768 tokens are val

#define MIRROR_LAYOUT "tinyshakespeare/input.txt, gpt2/encoder.json and gpt2/vocab.bpe"

// ----------------------------------------------------------------------------
// files: sha256, directories, copy, download

static void sha256_hex(EVP_MD_CTX* ctx, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32) { ls_fatal("OpenSSL: sha256 failed"); }
    for (unsigned int i = 0; i < md_len; i++) { snprintf(hex + 2 * i, 3, "%02x", md[i]); }
}

static EVP_MD_CTX* sha256_begin(void) {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) { ls_fatal("OpenSSL: cannot start sha256"); }
    return ctx;
}

// sha256 of a file as 64 hex digits; returns 0 (hex untouched) if the file cannot be read.
static int sha256_file(const char* path, char hex[65]) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { return 0; }
    EVP_MD_CTX* ctx = sha256_begin();
    static unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) { EVP_DigestUpdate(ctx, buf, n); }
    int ok = !ferror(fp);
    fclose(fp);
    if (ok) { sha256_hex(ctx, hex); }
    EVP_MD_CTX_free(ctx);
    return ok;
}

// mkdir -p of the directory part of path
static void make_parent_dirs(const char* path) {
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    for (char* p = dir + 1; *p; p++) {
        if (*p != '/') { continue; }
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) { ls_fatal("cannot create directory %s: %s", dir, strerror(errno)); }
        *p = '/';
    }
}

static void copy_file(const char* src, const char* dst) {
    FILE* in = fopenCheck(src, "rb");
    AtomicFile af;
    atomic_file_open(&af, dst);
    static unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0) { fwriteCheck(buf, 1, n, af.fp, af.tmp_path); }
    if (ferror(in)) { ls_fatal("%s: read error", src); }
    fclose(in);
    atomic_file_commit(&af);
}

typedef struct {
    FILE* fp;
    EVP_MD_CTX* sha;
    int write_failed;
} Download;

static size_t download_write(char* data, size_t size, size_t nmemb, void* user) {
    Download* d = (Download*)user;
    size_t n = size * nmemb;
    if (fwrite(data, 1, n, d->fp) != n) {
        d->write_failed = 1;
        return 0;  // makes curl abort the transfer
    }
    EVP_DigestUpdate(d->sha, data, n);
    return n;
}

static void fail_how_to_provide(const DataFile* f, const char* dst, const char* why) {
    ls_fatal("%s. To provide the files without network, set LEANSTEP_DATA_MIRROR to a directory holding " MIRROR_LAYOUT
             " (make data LEANSTEP_DATA_MIRROR=/path/to/mirror), or fetch %s into %s yourself",
             why, f->url, dst);
}

// libcurl's progress callback: bytes so far of the expected total (0 while unknown).
static int download_progress(void* p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)ultotal;
    (void)ulnow;
    Progress* progress = (Progress*)p;
    progress->total = (double)dltotal;
    progress_update(progress, (double)dlnow);
    return 0;
}

// Downloads url (f->url or a mirror's copy of f) into dst: the bytes go to a temp file and are
// renamed into place only when their sha256 is the pinned one.
static void download_file(const DataFile* f, const char* url, const char* dst) {
    printf("prepare_data: downloading %s\n", url);
    fflush(stdout);
    Download d = {NULL, sha256_begin(), 0};
    AtomicFile af;
    atomic_file_open(&af, dst);
    d.fp = af.fp;
    CURL* curl = curl_easy_init();
    if (curl == NULL) { ls_fatal("libcurl: curl_easy_init failed"); }
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);        // HTTP 404 etc. is an error
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);  // give up on a stalled transfer
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "leanstep-prepare-data");
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, download_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &d);
    Progress progress;
    progress_begin(&progress, "prepare_data: downloaded (bytes)", 0.0);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, download_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &progress);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(curl);
    progress_end(&progress);
    curl_easy_cleanup(curl);
    char why[CURL_ERROR_SIZE + 1200];
    if (rc != CURLE_OK || d.write_failed) {
        fclose(af.fp);
        unlink(af.tmp_path);
        if (d.write_failed) { ls_fatal("%s: write failed (%s); disk full?", af.tmp_path, strerror(errno)); }
        snprintf(why, sizeof(why), "cannot download %s (%s)", url, curl_err[0] ? curl_err : curl_easy_strerror(rc));
        fail_how_to_provide(f, dst, why);
    }
    char hex[65];
    sha256_hex(d.sha, hex);
    EVP_MD_CTX_free(d.sha);
    if (strcmp(hex, f->sha256) != 0) {
        fclose(af.fp);
        unlink(af.tmp_path);
        snprintf(why, sizeof(why), "%s downloaded with sha256 %s, expected %s", url, hex, f->sha256);
        fail_how_to_provide(f, dst, why);
    }
    atomic_file_commit(&af);
}

// Makes DATA_DIR/f->rel_path the pinned file, fetching it only if needed. Returns 1 if fetched.
static int ensure_file(const DataFile* f, const char* data_dir, const char* mirror) {
    char dst[1024], hex[65];
    snprintf(dst, sizeof(dst), "%s/%s", data_dir, f->rel_path);
    if (sha256_file(dst, hex)) {
        if (strcmp(hex, f->sha256) == 0) { return 0; }
        printf("prepare_data: %s has sha256 %.12s..., expected %.12s...; fetching it again\n", dst, hex, f->sha256);
    }
    make_parent_dirs(dst);
    char src[1024], why[2200];
    snprintf(src, sizeof(src), "%s/%s", mirror ? mirror : "", f->rel_path);
    if (mirror == NULL || strstr(mirror, "://") != NULL) {
        download_file(f, mirror ? src : f->url, dst);
        return 1;
    }
    if (!sha256_file(src, hex)) {
        snprintf(why, sizeof(why), "LEANSTEP_DATA_MIRROR=%s: cannot read %s (%s); the mirror must hold " MIRROR_LAYOUT,
                 mirror, src, strerror(errno));
        fail_how_to_provide(f, dst, why);
    }
    if (strcmp(hex, f->sha256) != 0) {
        snprintf(why, sizeof(why), "%s: sha256 %s, expected %s (corrupt or another version)", src, hex, f->sha256);
        fail_how_to_provide(f, dst, why);
    }
    printf("prepare_data: copying %s -> %s\n", src, dst);
    copy_file(src, dst);
    return 1;
}

// ----------------------------------------------------------------------------
// up-to-date check

static int mtime_of(const char* path, struct timespec* t) {
    struct stat st;
    if (stat(path, &st) != 0) { return 0; }
    *t = st.st_mtim;
    return 1;
}

static int time_before(struct timespec a, struct timespec b) {
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

// Outputs are up to date when each exists with a sound header and none is older than an input
// or than this program (a rebuilt tokenizer may tokenize differently).
static int outputs_up_to_date(const char* const* inputs, int n_in, const char* const* shards, int n_shards,
                              const char* decoder) {
    struct timespec newest = {0, 0}, t;
    for (int i = 0; i <= n_in; i++) {
        const char* p = i < n_in ? inputs[i] : "/proc/self/exe";
        if (mtime_of(p, &t) && time_before(newest, t)) { newest = t; }
    }
    for (int i = 0; i <= n_shards; i++) {
        const char* p = i < n_shards ? shards[i] : decoder;
        if (!mtime_of(p, &t) || time_before(t, newest)) { return 0; }
        FILE* fp = fopen(p, "rb");
        if (fp == NULL) { return 0; }
        int32_t header[SHARD_HEADER_INTS];
        int ok = fread(header, sizeof(int32_t), SHARD_HEADER_INTS, fp) == SHARD_HEADER_INTS;
        long long size = file_size_of(fp);
        fclose(fp);
        if (!ok) { return 0; }
        if (i < n_shards && shard_header_problem(header, size) != NULL) { return 0; }
        if (i == n_shards && (header[0] != TOKENIZER_MAGIC || header[1] != TOKENIZER_VERSION)) { return 0; }
    }
    return 1;
}

// ----------------------------------------------------------------------------
// tokenization

static const char* with_commas(size_t n, char buf[32]) {
    char digits[32];
    int nd = snprintf(digits, sizeof(digits), "%zu", n), at = 0;
    for (int i = 0; i < nd; i++) {
        if (i > 0 && (nd - i) % 3 == 0) { buf[at++] = ','; }
        buf[at++] = digits[i];
    }
    buf[at] = '\0';
    return buf;
}

// Python's text mode (llm.c opens the file with 'r') turns "\r\n" and "\r" into "\n". Returns the
// new length; TinyShakespeare has no "\r", but a re-saved copy might.
static size_t universal_newlines(char* s, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            s[out++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') { i++; }
        } else {
            s[out++] = s[i];
        }
    }
    return out;
}

static void write_shard(const char* path, const int* toks, size_t n) {
    uint16_t* t16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        if (toks[i] < 0 || toks[i] > UINT16_MAX) { ls_fatal("%s: token %d does not fit uint16", path, toks[i]); }
        t16[i] = (uint16_t)toks[i];
    }
    shard_write(path, t16, n);
    free(t16);
}

static void tokenize_tinyshakespeare(const char* input, const char* encoder,
                                     const char* vocab, const char* const* shards, const char* decoder) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Tokenizer tok;
    tokenizer_init_from_bpe(&tok, encoder, vocab);
    size_t len;
    char* text = tokenizer_read_all(input, &len);
    len = universal_newlines(text, len);
    // sections = text.split("\n\n"); tokens += [eot] + encode(section + "\n\n"), no "\n\n" on the
    // last: in the text each section is followed by its "\n\n", so encode the span that includes it
    TokenList toks = {NULL, 0, 0};
    size_t pos = 0, n_sections = 0;
    Progress progress;  // in bytes of the text
    progress_begin(&progress, "prepare_data: tokenizing (bytes)", (double)len);
    for (;;) {
        const char* sep = NULL;
        for (const char* c = text + pos; c < text + len; c++) {
            c = (const char*)memchr(c, '\n', (size_t)(text + len - c));
            if (c == NULL || c + 1 >= text + len) { break; }
            if (c[1] == '\n') { sep = c; break; }
        }
        tokenlist_push(&toks, (int)tok.eot_token);
        n_sections++;
        size_t end = sep ? (size_t)(sep - text) + 2 : len;
        tokenizer_encode_ordinary(&tok, text + pos, end - pos, &toks);
        progress_update(&progress, (double)end);
        if (sep == NULL) { break; }
        pos = end;
    }
    progress_end(&progress);
    if (toks.len <= VAL_TOKENS) {
        ls_fatal("%s: only %zu tokens, expected more than the %d val tokens", input, toks.len, VAL_TOKENS);
    }
    if (tok.vocab_size > 65536) { ls_fatal("%s: vocab of %u does not fit uint16 shards", encoder, tok.vocab_size); }
    make_parent_dirs(shards[0]);
    write_shard(shards[0], toks.data, VAL_TOKENS);
    write_shard(shards[1], toks.data + VAL_TOKENS, toks.len - VAL_TOKENS);
    make_parent_dirs(decoder);
    tokenizer_write_file(&tok, decoder);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char a[32], b[32], c[32], d[32], e[32];
    printf("prepare_data: %s: %s sections, %s tokens in %.2f s\n", input, with_commas(n_sections, a),
           with_commas(toks.len, b), (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    printf("prepare_data: wrote %s (%s tokens), %s (%s tokens), %s (vocab %s)\n", shards[0],
           with_commas(VAL_TOKENS, c), shards[1], with_commas(toks.len - VAL_TOKENS, d), decoder,
           with_commas(tok.vocab_size, e));
    tokenlist_free(&toks);
    free(text);
    tokenizer_free(&tok);
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    const char* data_dir = "data";
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) { data_dir = argv[++i]; }
        else if (strcmp(argv[i], "-f") == 0) { force = 1; }
        else {
            fprintf(stderr, "usage: %s [-o DATA_DIR] [-f]\n"
                            "  gets TinyShakespeare + GPT-2's tokenizer files into DATA_DIR (default data)\n"
                            "  from $LEANSTEP_DATA_MIRROR or the network, and tokenizes them\n", argv[0]);
            return strcmp(argv[i], "-h") == 0 ? 0 : 2;
        }
    }
    if (strlen(data_dir) > 900) { ls_fatal("-o %s: path too long", data_dir); }
    const char* mirror = getenv("LEANSTEP_DATA_MIRROR");
    if (mirror != NULL && mirror[0] == '\0') { mirror = NULL; }  // the Makefile passes it empty when unset
    if (mirror != NULL && strlen(mirror) > 900) { ls_fatal("LEANSTEP_DATA_MIRROR: path too long"); }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    int fetched = 0;
    for (int i = 0; i < N_DATA_FILES; i++) { fetched += ensure_file(&DATA_FILES[i], data_dir, mirror); }
    curl_global_cleanup();

    char input[1024], encoder[1024], vocab[1024], val[1024], train[1024], decoder[1024];
    snprintf(input, sizeof(input), "%s/%s", data_dir, DATA_FILES[0].rel_path);
    snprintf(encoder, sizeof(encoder), "%s/%s", data_dir, DATA_FILES[1].rel_path);
    snprintf(vocab, sizeof(vocab), "%s/%s", data_dir, DATA_FILES[2].rel_path);
    snprintf(val, sizeof(val), "%s/tinyshakespeare/tiny_shakespeare_val.bin", data_dir);
    snprintf(train, sizeof(train), "%s/tinyshakespeare/tiny_shakespeare_train.bin", data_dir);
    snprintf(decoder, sizeof(decoder), "%s/gpt2_tokenizer.bin", data_dir);
    const char* inputs[3] = {input, encoder, vocab};
    const char* shards[2] = {val, train};
    if (!force && !fetched && outputs_up_to_date(inputs, 3, shards, 2, decoder)) {
        printf("prepare_data: %s is up to date\n", data_dir);
        return 0;
    }
    tokenize_tinyshakespeare(input, encoder, vocab, shards, decoder);
    return 0;
}
