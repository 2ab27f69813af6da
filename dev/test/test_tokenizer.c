/*
 test_tokenizer.c: unit tests of llmc/io/tokenizer.h, and the small CLI modes that
 dev/test/tokenizer_check.py (id-for-id comparison with tiktoken) and the bad-file tests use.

 usage:
   test_tokenizer [DATA_DIR]                  unit tests; DATA_DIR (default data) is what `make data`
                                              fills: gpt2/{encoder.json,vocab.bpe}, tinyshakespeare/input.txt
   test_tokenizer encode FILE [DATA_DIR]      FILE's token ids (encode_ordinary), one per line
   test_tokenizer encode-bin TOKENIZER FILE   the same with the tokenizer read from a decoder file
   test_tokenizer load-bpe ENCODER VOCAB      load encoder.json + vocab.bpe, exit 0 (error paths)
   test_tokenizer load-bin TOKENIZER          load a decoder file, exit 0 (error paths)
 Exits non-zero when a check fails. To add a test: write a test_* function that uses CHECK and
 call it from main.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/wait.h>
#include "llmc/utils.h"
#include "llmc/io/tokenizer.h"

static int g_checks = 0, g_failures = 0;
#define CHECK(cond, ...)                                            \
    do {                                                            \
        g_checks++;                                                 \
        if (!(cond)) {                                              \
            g_failures++;                                           \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);             \
            printf(__VA_ARGS__);                                    \
            printf("\n");                                           \
        }                                                           \
    } while (0)

static char g_encoder[512], g_vocab[512], g_shakespeare[512];
static char g_tmpdir[64];

// A path in the test's temp directory, remembered so that remove_tmpdir() can delete it.
static char g_tmp_paths[64][128];
static int g_n_tmp = 0;
static const char* tmp_path(const char* name) {
    if (g_n_tmp == 64) { ls_fatal("test_tokenizer: more than 64 temp files; raise the limit"); }
    char* p = g_tmp_paths[g_n_tmp++];
    snprintf(p, 128, "%s/%s", g_tmpdir, name);
    return p;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;  // fixed seed: the tests are reproducible
static uint32_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static void write_bytes(const char* path, const void* p, size_t n) {
    FILE* fp = fopenCheck(path, "wb");
    fwriteCheck(p, 1, n, fp, path);
    fcloseCheck(fp);
}

// bytes of the tokens (n,) concatenated, raw (no printable fix-ups); caller frees
static char* concat_tokens(const Tokenizer* t, const int* toks, size_t n, size_t* len_out) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        if (tokenizer_decode(t, (uint32_t)toks[i], &len) == NULL) { ls_fatal("token %d out of range", toks[i]); }
        total += len;
    }
    char* out = (char*)mallocCheck(total + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char* p = tokenizer_decode(t, (uint32_t)toks[i], &len);
        memcpy(out + at, p, len);
        at += len;
    }
    out[at] = '\0';
    *len_out = at;
    return out;
}

// ----------------------------------------------------------------------------
// tests

static void expect_ids(Tokenizer* t, const char* text, int allow_special, const int* want, size_t n_want) {
    TokenList got = {NULL, 0, 0};
    tokenizer_encode(t, text, strlen(text), allow_special, &got);
    int same = got.len == n_want && (n_want == 0 || memcmp(got.data, want, n_want * sizeof(int)) == 0);
    CHECK(same, "encode(\"%s\", special=%d): got %zu tokens (first %d), want %zu", text, allow_special, got.len,
          got.len ? got.data[0] : -1, n_want);
    tokenlist_free(&got);
}

static void test_known_ids(Tokenizer* t) {
    const int hello[] = {15496, 995};
    const int hello2[] = {15496, 11, 995, 0};
    const int the[] = {262};
    const int newline[] = {198};
    const int eot_text[] = {27, 91, 437, 1659, 5239, 91, 29};
    const int eot_special[] = {64, 50256, 65};
    const int two_eot[] = {50256, 50256};
    expect_ids(t, "Hello world", 0, hello, 2);
    expect_ids(t, "Hello, world!", 0, hello2, 4);
    expect_ids(t, " the", 0, the, 1);
    expect_ids(t, "\n", 0, newline, 1);
    expect_ids(t, "", 0, NULL, 0);
    expect_ids(t, "<|endoftext|>", 0, eot_text, 7);
    expect_ids(t, "a<|endoftext|>b", 1, eot_special, 3);
    expect_ids(t, "<|endoftext|><|endoftext|>", 1, two_eot, 2);
    CHECK(t->vocab_size == 50257 && t->eot_token == 50256, "vocab %u eot %u", t->vocab_size, t->eot_token);
}

static void check_round_trip(Tokenizer* t, const char* what, const char* text, size_t len) {
    TokenList toks = {NULL, 0, 0};
    tokenizer_encode_ordinary(t, text, len, &toks);
    size_t n;
    char* back = concat_tokens(t, toks.data, toks.len, &n);
    CHECK(n == len && memcmp(back, text, len) == 0, "round trip of %s (%zu bytes -> %zu tokens -> %zu bytes)",
          what, len, toks.len, n);
    free(back);
    tokenlist_free(&toks);
}

static void test_round_trip(Tokenizer* t) {
    // BYTES(s): a literal and its length, NULs included
#define BYTES(s) s, sizeof(s) - 1
    static const struct { const char* what; const char* s; size_t n; } cases[] = {
        {"ascii", BYTES("The quick brown fox jumps over the lazy dog. 1234567890")},
        {"contractions", BYTES("I'm you're we've they'll he'd it's don't DON'T I'M")},
        {"spaces and tabs", BYTES("  a\t\tb   \n\n  \r\n\t \x0b\x0c end  ")},
        {"utf-8", BYTES("na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 "
                        "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7")},
        {"invalid bytes", BYTES("\xff\xfe abc\x80" "def \xc0\xaf \xed\xa0\x80 \xf5\x80")},
        {"truncated utf-8 at end", BYTES("abc \xe6\x97")},
        {"embedded NUL", BYTES("a\0b\0\0 c")},
        {"only invalid", BYTES("\x80\x81\x82")},
    };
#undef BYTES
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_round_trip(t, cases[i].what, cases[i].s, cases[i].n);
    }
    // long pieces exercise the heap BPE: a 100k-letter word, 50k spaces, 20k digits
    size_t n = 100000;
    char* buf = (char*)mallocCheck(n);
    memset(buf, 'a', n);
    check_round_trip(t, "100k x 'a'", buf, n);
    memset(buf, ' ', 50000);
    check_round_trip(t, "50k spaces", buf, 50000);
    for (size_t i = 0; i < 20000; i++) { buf[i] = (char)('0' + rng_next() % 10); }
    check_round_trip(t, "20k digits", buf, 20000);
    for (size_t i = 0; i < n; i++) { buf[i] = (char)(rng_next() & 0xFF); }
    check_round_trip(t, "100k random bytes", buf, n);
    free(buf);
}

static void expect_printable(Tokenizer* t, const char* text, size_t len, const char* want, size_t buf_size) {
    TokenList toks = {NULL, 0, 0};
    tokenizer_encode_ordinary(t, text, len, &toks);
    char* buf = (char*)mallocCheck(buf_size);
    size_t n = tokenizer_decode_to_buf(t, toks.data, toks.len, buf, buf_size);
    CHECK(n == strlen(want) && strcmp(buf, want) == 0, "decode_to_buf(\"%s\", %zu) = \"%s\", want \"%s\"", text,
          buf_size, buf, want);
    free(buf);
    tokenlist_free(&toks);
}

static void test_decode_to_buf(Tokenizer* t) {
    // multi-byte characters that byte-level BPE splits across tokens must come out whole
    const char* mixed = "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 "
                        "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7\ttab\n";
    TokenList toks = {NULL, 0, 0};
    tokenizer_encode_ordinary(t, mixed, strlen(mixed), &toks);
    int split = 0;  // is some token an incomplete UTF-8 sequence on its own?
    for (size_t i = 0; i < toks.len; i++) {
        size_t len;
        const char* p = tokenizer_decode(t, (uint32_t)toks.data[i], &len);
        if (len > 0 && ((unsigned char)p[0] & 0xC0) == 0x80) { split = 1; }  // starts mid-character
    }
    CHECK(split, "test text should contain a character split across tokens");
    tokenlist_free(&toks);
    expect_printable(t, mixed, strlen(mixed), mixed, 256);
    // streaming, one token at a time, gives the same text (a character split across tokens is
    // held back until complete), and a dangling partial character is flushed at the end
    const char* streamed = "h\xc3\xa9llo \xf0\x9f\x99\x82 \xf0\x9f";  // ends mid-character
    const char* want = "h\xc3\xa9llo \xf0\x9f\x99\x82 \xef\xbf\xbd";
    tokenizer_encode_ordinary(t, streamed, strlen(streamed), &toks);
    TokenizerUtf8State state;
    memset(&state, 0, sizeof(state));
    char out[256] = "", piece[TOKENIZER_STREAM_BUF];
    int held_back = 0;
    for (size_t i = 0; i <= toks.len; i++) {
        size_t n = tokenizer_decode_stream(t, &state, i < toks.len ? toks.data[i] : TOKENIZER_STREAM_END,
                                           piece, sizeof(piece));
        if (n == 0) { held_back = 1; }
        strcat(out, piece);
    }
    CHECK(held_back && strcmp(out, want) == 0, "decode_stream gave \"%s\", want \"%s\"", out, want);
    tokenlist_free(&toks);
    expect_printable(t, "a\xff" "b", 3, "a\xef\xbf\xbd" "b", 64);               // invalid byte
    expect_printable(t, "x \xe6\x97", 4, "x \xef\xbf\xbd", 64);                 // cut character
    expect_printable(t, "\x1b[31mred\r\n", 10, "\xef\xbf\xbd[31mred\xef\xbf\xbd\n", 64);  // controls
    expect_printable(t, "\xe6\x97\xa5\xe6\x9c\xac", 6, "\xe6\x97\xa5", 5);       // truncation at a boundary
    expect_printable(t, "abc", 3, "", 1);
    const int bad[] = {64, 60000, -1, 65};
    char buf[32];
    size_t n = tokenizer_decode_to_buf(t, bad, 4, buf, sizeof(buf));
    CHECK(n == 8 && strcmp(buf, "a\xef\xbf\xbd\xef\xbf\xbd" "b") == 0, "out-of-range ids should print U+FFFD");
    CHECK(tokenizer_decode(t, 50257, NULL) == NULL, "decode(50257) should be NULL");
    size_t len;
    CHECK(strcmp(tokenizer_decode(t, 50256, &len), "<|endoftext|>") == 0 && len == 13, "decode(eot)");
}

static void test_decoder_file(Tokenizer* t, const char* text, size_t text_len) {
    const char* path = tmp_path("tok.bin");
    tokenizer_write_file(t, path);
    Tokenizer f;
    tokenizer_init_from_file(&f, path);
    CHECK(f.vocab_size == t->vocab_size && f.eot_token == t->eot_token, "decoder file header");
    int same = f.vocab_size == t->vocab_size;
    for (uint32_t i = 0; same && i < t->vocab_size; i++) {
        size_t la, lb;
        const char* a = tokenizer_decode(t, i, &la);
        const char* b = tokenizer_decode(&f, i, &lb);
        same = la == lb && memcmp(a, b, la) == 0;
    }
    CHECK(same, "decoder file round trip: token bytes differ");
    // the file alone is enough to encode, identically
    TokenList a = {NULL, 0, 0}, b = {NULL, 0, 0};
    tokenizer_encode_ordinary(t, text, text_len, &a);
    tokenizer_encode_ordinary(&f, text, text_len, &b);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len * sizeof(int)) == 0,
          "encode from the decoder file differs from encode from encoder.json/vocab.bpe");
    tokenlist_free(&a);
    tokenlist_free(&b);
    tokenizer_free(&f);
}

// A tokenizer whose word cache was emptied many times must still encode like a fresh one.
static void test_cache_reset(const char* text, size_t text_len) {
    size_t n_words = 300000, cap = n_words * 12;
    char* words = (char*)mallocCheck(cap);
    size_t at = 0;
    for (size_t i = 0; i < n_words; i++) {
        words[at++] = ' ';
        size_t len = 3 + rng_next() % 8;
        for (size_t k = 0; k < len; k++) { words[at++] = (char)('a' + rng_next() % 26); }
    }
    Tokenizer used, fresh;
    tokenizer_init_from_bpe(&used, g_encoder, g_vocab);
    tokenizer_init_from_bpe(&fresh, g_encoder, g_vocab);
    TokenList a = {NULL, 0, 0}, b = {NULL, 0, 0};
    tokenizer_encode_ordinary(&used, words, at, &a);
    a.len = 0;
    tokenizer_encode_ordinary(&used, text, text_len, &a);
    tokenizer_encode_ordinary(&fresh, text, text_len, &b);
    CHECK(a.len == b.len && memcmp(a.data, b.data, a.len * sizeof(int)) == 0, "encode differs after cache resets");
    tokenlist_free(&a);
    tokenlist_free(&b);
    tokenizer_free(&used);
    tokenizer_free(&fresh);
    free(words);
}

static void test_speed(const char* text, size_t len) {
    double t0 = now_seconds();
    Tokenizer t;
    tokenizer_init_from_bpe(&t, g_encoder, g_vocab);
    double t1 = now_seconds();
    TokenList toks = {NULL, 0, 0};
    tokenizer_encode_ordinary(&t, text, len, &toks);
    double t2 = now_seconds();
    printf("test_tokenizer: load %.3f s; encode %s: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n",
           t1 - t0, g_shakespeare, len, toks.len, t2 - t1, (double)len / 1e6 / (t2 - t1));
#if !defined(__SANITIZE_ADDRESS__)
    CHECK(t2 - t1 < 2.0, "encoding TinyShakespeare took %.2f s (budget 2 s)", t2 - t1);
#endif
    tokenlist_free(&toks);
    tokenizer_free(&t);
}

// ----------------------------------------------------------------------------
// bad files: each must end the program with status 1 and one line on stderr naming the file

static int run_self(const char* mode, const char* a, const char* b, char* err, size_t err_cap) {
    int fds[2];
    if (pipe(fds) != 0) { ls_fatal("pipe: %s", strerror(errno)); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { ls_fatal("fork: %s", strerror(errno)); }
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) { dup2(devnull, 1); }
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);  // a fatal exit frees nothing on purpose
        execl("/proc/self/exe", "test_tokenizer", mode, a, b, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while ((got = read(fds[0], err + n, err_cap - 1 - n)) > 0) { n += (size_t)got; }
    err[n] = '\0';
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_error(const char* what, const char* mode, const char* a, const char* b, const char* must_name) {
    char err[4096];
    int rc = run_self(mode, a, b, err, sizeof(err));
    const char* nl = strchr(err, '\n');
    int one_line = nl != NULL && nl[1] == '\0' && strncmp(err, "leanstep: error: ", 17) == 0;
    CHECK(rc == 1 && one_line && strstr(err, must_name) != NULL,
          "%s: want exit 1 and one error line naming %s, got exit %d: %s", what, must_name, rc, err);
}

static void test_bad_decoder_files(Tokenizer* t) {
    const char* good = tmp_path("good.bin");
    tokenizer_write_file(t, good);
    size_t size;
    char* bytes = tokenizer_read_all(good, &size);
    uint32_t* header = (uint32_t*)bytes;
    const char* p;

    expect_error("missing decoder file", "load-bin", p = tmp_path("missing.bin"), NULL, "make data");
    header[0] = 12345;
    write_bytes(p = tmp_path("magic.bin"), bytes, size);
    expect_error("wrong magic", "load-bin", p, NULL, p);
    header[0] = TOKENIZER_MAGIC;
    header[1] = 7;
    write_bytes(p = tmp_path("version.bin"), bytes, size);
    expect_error("wrong version", "load-bin", p, NULL, p);
    header[1] = TOKENIZER_VERSION;
    header[3] = header[2];
    write_bytes(p = tmp_path("eot.bin"), bytes, size);
    expect_error("eot out of range", "load-bin", p, NULL, p);
    header[3] = t->eot_token;
    write_bytes(p = tmp_path("short_header.bin"), bytes, 100);
    expect_error("truncated header", "load-bin", p, NULL, p);
    write_bytes(p = tmp_path("truncated.bin"), bytes, size - 10);
    expect_error("truncated tokens", "load-bin", p, NULL, p);
    bytes[1024] = 0;  // first token's length
    write_bytes(p = tmp_path("zero_len.bin"), bytes, size);
    expect_error("zero-length token", "load-bin", p, NULL, p);
    bytes[1024] = 1;
    write_bytes(p = tmp_path("empty.bin"), bytes, 0);
    expect_error("empty file", "load-bin", p, NULL, p);
    FILE* fp = fopenCheck(p = tmp_path("trailing.bin"), "wb");
    fwriteCheck(bytes, 1, size, fp, p);
    fwriteCheck("junk", 1, 4, fp, p);
    fcloseCheck(fp);
    expect_error("trailing bytes", "load-bin", p, NULL, p);
    free(bytes);
}

static void test_bad_bpe_files(void) {
    const char* p;
    expect_error("missing encoder.json", "load-bpe", p = tmp_path("missing.json"), g_vocab, "make data");
    expect_error("missing vocab.bpe", "load-bpe", g_encoder, p = tmp_path("missing.bpe"), "make data");
    write_bytes(p = tmp_path("notjson.json"), "this is not JSON", 16);
    expect_error("encoder.json not JSON", "load-bpe", p, g_vocab, p);
    write_bytes(p = tmp_path("array.json"), "[1, 2, 3]", 9);
    expect_error("encoder.json not an object", "load-bpe", p, g_vocab, p);
    // edit the real encoder.json through cJSON
    size_t size;
    char* text = tokenizer_read_all(g_encoder, &size);
    cJSON* root = cJSON_ParseWithLength(text, size);
    free(text);
    cJSON* the = cJSON_DetachItemFromObject(root, "\xc4\xa0the");  // "Ġthe" = " the"
    char* edited = cJSON_PrintUnformatted(root);
    write_bytes(p = tmp_path("missing_entry.json"), edited, strlen(edited));
    free(edited);
    expect_error("encoder.json missing an entry", "load-bpe", p, g_vocab, p);
    cJSON_AddItemToObject(root, "\xc4\xa0thx", the);  // same count, but merge "Ġt he" forms nothing
    edited = cJSON_PrintUnformatted(root);
    write_bytes(p = tmp_path("renamed_entry.json"), edited, strlen(edited));
    free(edited);
    expect_error("encoder.json and vocab.bpe disagree", "load-bpe", p, g_vocab, g_vocab);
    cJSON_ReplaceItemInObject(root, "!", cJSON_CreateNumber(99999999));
    edited = cJSON_PrintUnformatted(root);
    write_bytes(p = tmp_path("bad_id.json"), edited, strlen(edited));
    free(edited);
    expect_error("encoder.json id out of range", "load-bpe", p, g_vocab, p);
    cJSON_Delete(root);
    // vocab.bpe: truncated, a broken line, empty
    text = tokenizer_read_all(g_vocab, &size);
    write_bytes(p = tmp_path("short.bpe"), text, size / 2);
    expect_error("vocab.bpe truncated", "load-bpe", g_encoder, p, p);
    char* line = strchr(text, '\n') + 1;  // first merge "Ġ t": drop its space
    char* space = strchr(line, ' ');
    memmove(space, space + 1, size - (size_t)(space + 1 - text));
    write_bytes(p = tmp_path("broken_line.bpe"), text, size - 1);
    expect_error("vocab.bpe broken line", "load-bpe", g_encoder, p, p);
    write_bytes(p = tmp_path("empty.bpe"), text, 0);
    expect_error("vocab.bpe empty", "load-bpe", g_encoder, p, p);
    free(text);
}

// ----------------------------------------------------------------------------

static void set_data_paths(const char* dir) {
    snprintf(g_encoder, sizeof(g_encoder), "%s/gpt2/encoder.json", dir);
    snprintf(g_vocab, sizeof(g_vocab), "%s/gpt2/vocab.bpe", dir);
    snprintf(g_shakespeare, sizeof(g_shakespeare), "%s/tinyshakespeare/input.txt", dir);
}

static void print_ids(Tokenizer* t, const char* path) {
    size_t len;
    char* text = tokenizer_read_all(path, &len);
    TokenList toks = {NULL, 0, 0};
    tokenizer_encode_ordinary(t, text, len, &toks);
    for (size_t i = 0; i < toks.len; i++) { printf("%d\n", toks.data[i]); }
    tokenlist_free(&toks);
    free(text);
}

static void remove_tmpdir(void) {
    for (int i = 0; i < g_n_tmp; i++) { unlink(g_tmp_paths[i]); }  // missing ones were never made
    if (rmdir(g_tmpdir) != 0) { printf("test_tokenizer: could not remove %s: %s\n", g_tmpdir, strerror(errno)); }
}

int main(int argc, char** argv) {
    Tokenizer t;
    if (argc >= 3 && strcmp(argv[1], "encode") == 0) {
        set_data_paths(argc >= 4 ? argv[3] : "data");
        tokenizer_init_from_bpe(&t, g_encoder, g_vocab);
        print_ids(&t, argv[2]);
        tokenizer_free(&t);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "encode-bin") == 0) {
        tokenizer_init_from_file(&t, argv[2]);
        print_ids(&t, argv[3]);
        tokenizer_free(&t);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "load-bpe") == 0) {
        tokenizer_init_from_bpe(&t, argv[2], argv[3]);
        tokenizer_free(&t);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "load-bin") == 0) {
        tokenizer_init_from_file(&t, argv[2]);
        tokenizer_free(&t);
        return 0;
    }
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: %s [DATA_DIR] | encode FILE [DATA_DIR] | encode-bin TOKENIZER FILE |"
                        " load-bpe ENCODER VOCAB | load-bin TOKENIZER\n", argv[0]);
        return 2;
    }

    set_data_paths(argc == 2 ? argv[1] : "data");
    if (!file_exists(g_encoder) || !file_exists(g_vocab) || !file_exists(g_shakespeare)) {
        ls_fatal("test_tokenizer: %s, %s or %s missing; run `make data` first", g_encoder, g_vocab, g_shakespeare);
    }
    snprintf(g_tmpdir, sizeof(g_tmpdir), "/tmp/leanstep_tokenizer_XXXXXX");
    if (mkdtemp(g_tmpdir) == NULL) { ls_fatal("mkdtemp: %s", strerror(errno)); }

    size_t text_len;
    char* text = tokenizer_read_all(g_shakespeare, &text_len);
    tokenizer_init_from_bpe(&t, g_encoder, g_vocab);
    test_known_ids(&t);
    test_round_trip(&t);
    test_decode_to_buf(&t);
    test_decoder_file(&t, text, text_len);
    test_cache_reset(text, text_len);
    test_speed(text, text_len);
    test_bad_decoder_files(&t);
    test_bad_bpe_files();
    tokenizer_free(&t);
    free(text);
    remove_tmpdir();

    printf("test_tokenizer: %s (%d checks, %d failed)\n", g_failures ? "FAIL" : "PASS", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
