/*
 hf_convert: llm.c model files <-> Hugging Face GPT-2 checkpoints (model.safetensors + config.json).

   build/hf_convert export MODEL.bin OUT_DIR    writes OUT_DIR/model.safetensors + config.json
   build/hf_convert import SRC OUT.bin          SRC: a directory with model.safetensors and
                                                config.json, or the .safetensors file itself
                                                (config.json beside it)

 Export writes what transformers' GPT2LMHeadModel.from_pretrained loads: tensors named
 transformer.wte.weight (V, C) (the padded vocabulary rows dropped), transformer.wpe.weight,
 transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
 transformer.ln_f.{weight, bias}. GPT-2 uses Conv1D layers, whose weight is (in, out): the
 transpose of llm.c's (out, in), so every matrix is transposed. lm_head.weight is not written:
 it is tied to wte (config tie_word_embeddings), as transformers itself saves it. The dtype is the
 model file's: F32 for version 3, BF16 for version 5; elements are copied bit for bit.

 Import reads such a checkpoint, with or without the "transformer." prefix (the hub's gpt2 files
 have none), skips the attention-mask buffers (h.<i>.attn.bias / masked_bias), accepts an
 lm_head.weight only if it equals wte, and writes a version 5 (bf16) model file when every
 tensor is BF16, else version 3 (fp32; F16 and BF16 widen exactly). The vocabulary is padded to
 a multiple of 128 with zero rows. config.json gives the shapes and must describe GPT-2's
 architecture (gelu_new, layernorm eps 1e-5, n_inner 4C); every tensor's shape is checked.
 Export verifies the model file's crc32 when its header carries one (llmc/io/checkpoint.h); import
 writes one. Export followed by import gives back a model file the trainers wrote byte for byte
 (bf16 values pass through fp32 exactly; padded rows are zero in every model the trainers write,
 and export warns when they are not, as they are dropped); an llm.c file without a checksum comes
 back with one, and otherwise identical.

 Errors are one line naming the file; exit status 1.
*/
#include <math.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "llmc/io/checkpoint.h"
#include "llmc/config.h"
#include "llmc/params.h"
#include "llmc/io/safetensors.h"
#include "llmc/utils.h"

// The llm.c tensors of one transformer block and their Hugging Face names; matrices transpose.
static const struct { const char* hf; const char* llmc; int transpose; } layer_map[] = {
    {"ln_1.weight", "ln1w", 0},        {"ln_1.bias", "ln1b", 0},
    {"attn.c_attn.weight", "qkvw", 1}, {"attn.c_attn.bias", "qkvb", 0},
    {"attn.c_proj.weight", "attprojw", 1}, {"attn.c_proj.bias", "attprojb", 0},
    {"ln_2.weight", "ln2w", 0},        {"ln_2.bias", "ln2b", 0},
    {"mlp.c_fc.weight", "fcw", 1},     {"mlp.c_fc.bias", "fcb", 0},
    {"mlp.c_proj.weight", "fcprojw", 1}, {"mlp.c_proj.bias", "fcprojb", 0},
};
#define LAYER_MAP_N ((int)(sizeof(layer_map) / sizeof(layer_map[0])))

static const ParamTensor* param_by_name(const ParamTable* pt, const char* name) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (strcmp(pt->t[i].name, name) == 0) { return &pt->t[i]; }
    }
    ls_fatal("hf_convert: no parameter tensor '%s' in params.h", name);
}

// src (rows, cols) -> dst (cols, rows), elements of elem bytes
static void transpose_bytes(unsigned char* dst, const unsigned char* src, size_t rows, size_t cols, size_t elem) {
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) { memcpy(dst + (c * rows + r) * elem, src + (r * cols + c) * elem, elem); }
    }
}

// One tensor crossing formats: its llm.c slice (offset in elements, rows x cols) and its HF name,
// shape and transposition. Export walks this list one way, import the other.
typedef struct {
    char name[96];
    size_t offset;      // elements into the llm.c flat buffer
    size_t rows, cols;  // the llm.c slice (cols == 1: a vector)
    int transpose;
} TensorMap;

// The HF tensors of config c in file order; returns how many (at most 4 + 12 L).
static int tensor_maps(const GPT2Config* c, const ParamTable* pt, const char* prefix, TensorMap* out) {
    int n = 0;
    const ParamTensor* wte = param_by_name(pt, "wte");
    const ParamTensor* wpe = param_by_name(pt, "wpe");
    out[n] = (TensorMap){"", wte->offset, (size_t)c->vocab_size, wte->cols, 0};  // the real vocab rows
    snprintf(out[n++].name, sizeof(out[0].name), "%swte.weight", prefix);
    out[n] = (TensorMap){"", wpe->offset, wpe->rows, wpe->cols, 0};
    snprintf(out[n++].name, sizeof(out[0].name), "%swpe.weight", prefix);
    for (int l = 0; l < c->num_layers; l++) {
        for (int k = 0; k < LAYER_MAP_N; k++) {
            const ParamTensor* t = param_by_name(pt, layer_map[k].llmc);
            size_t slice = param_slice_count(t);
            out[n] = (TensorMap){"", t->offset + (size_t)l * slice, t->rows, t->cols, layer_map[k].transpose};
            snprintf(out[n++].name, sizeof(out[0].name), "%sh.%d.%s", prefix, l, layer_map[k].hf);
        }
    }
    const ParamTensor* lnfw = param_by_name(pt, "lnfw");
    const ParamTensor* lnfb = param_by_name(pt, "lnfb");
    out[n] = (TensorMap){"", lnfw->offset, lnfw->rows, 1, 0};
    snprintf(out[n++].name, sizeof(out[0].name), "%sln_f.weight", prefix);
    out[n] = (TensorMap){"", lnfb->offset, lnfb->rows, 1, 0};
    snprintf(out[n++].name, sizeof(out[0].name), "%sln_f.bias", prefix);
    return n;
}

// HF shape of a map: vectors (rows,), matrices (rows, cols) or transposed (cols, rows)
static int hf_shape(const TensorMap* m, uint64_t* shape) {
    if (m->cols == 1) { shape[0] = m->rows; return 1; }
    shape[0] = m->transpose ? m->cols : m->rows;
    shape[1] = m->transpose ? m->rows : m->cols;
    return 2;
}

// "[a, b]" into buf
static const char* shape_str(const uint64_t* shape, int ndim, char* buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && used < len; d++) {
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, d ? ", " : "", shape[d]);
    }
    if (used < len) { snprintf(buf + used, len - used, "]"); }
    return buf;
}

static char* path_join(const char* dir, const char* name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char* p = (char*)mallocCheck(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

// ----------------------------------------------------------------------------
// export

static void write_config_json(const char* path, const GPT2Config* c, int bf16) {
    cJSON* j = cJSON_CreateObject();
    cJSON* arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_ctx", c->max_seq_len);
    cJSON_AddNumberToObject(j, "n_embd", c->channels);
    cJSON_AddNumberToObject(j, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(j, "n_head", c->num_heads);
    cJSON_AddNullToObject(j, "n_inner");  // 4 * n_embd
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");  // GELU, tanh approximation
    cJSON_AddRawToObject(j, "layer_norm_epsilon", "1e-05");
    cJSON_AddRawToObject(j, "initializer_range", "0.02");
    // the trainers use no dropout
    cJSON_AddRawToObject(j, "resid_pdrop", "0.0");
    cJSON_AddRawToObject(j, "embd_pdrop", "0.0");
    cJSON_AddRawToObject(j, "attn_pdrop", "0.0");
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    if (c->vocab_size > GPT2_EOT) {  // GPT-2's <|endoftext|>
        cJSON_AddNumberToObject(j, "bos_token_id", GPT2_EOT);
        cJSON_AddNumberToObject(j, "eos_token_id", GPT2_EOT);
    }
    cJSON_AddStringToObject(j, "torch_dtype", bf16 ? "bfloat16" : "float32");
    char* text = cJSON_Print(j);
    AtomicFile af;
    atomic_file_open(&af, path);
    fwriteCheck(text, 1, strlen(text), af.fp, af.tmp_path);
    fwriteCheck("\n", 1, 1, af.fp, af.tmp_path);
    atomic_file_commit(&af);
    free(text);
    cJSON_Delete(j);
}

static void cmd_export(const char* model_path, const char* out_dir) {
    GPT2Config c;
    int version = model_file_read_header(model_path, &c);
    size_t elem = version == MODEL_VERSION_FP32 ? 4 : 2;
    size_t n = gpt2_num_parameters(&c);
    unsigned char* raw = (unsigned char*)mallocCheck(n * elem);  // the file's elements, as stored
    int header[HEADER_INTS];
    FILE* fp = fopenCheck(model_path, "rb");
    freadCheck(header, sizeof(int), HEADER_INTS, fp, model_path);
    freadCheck(raw, elem, n, fp, model_path);
    fclose(fp);
    checksum_verify(model_path, header, 8, 9, crc32_update(crc32_update(0, NULL, 0), raw, n * elem));
    ParamTable pt;
    param_table_build(&pt, &c);
    const ParamTensor* wte = param_by_name(&pt, "wte");
    size_t C = (size_t)c.channels;
    for (size_t i = (size_t)c.vocab_size * C * elem; i < (size_t)c.padded_vocab_size * C * elem; i++) {
        if (raw[wte->offset * elem + i] != 0) {
            fprintf(stderr, "hf_convert: warning: %s: padded vocabulary rows %d..%d of wte are not zero; they are not exported\n",
                    model_path, c.vocab_size, c.padded_vocab_size - 1);
            break;
        }
    }
    TensorMap* maps = (TensorMap*)mallocCheck((4 + 12 * (size_t)c.num_layers) * sizeof(TensorMap));
    int nt = tensor_maps(&c, &pt, "transformer.", maps);
    SafetensorsEntry* entries = (SafetensorsEntry*)callocCheck((size_t)nt, sizeof(SafetensorsEntry));
    unsigned char* out = (unsigned char*)mallocCheck(n * elem);  // HF layout (fewer elements: no padding)
    size_t at = 0;
    for (int k = 0; k < nt; k++) {
        const TensorMap* m = &maps[k];
        const unsigned char* src = raw + m->offset * elem;
        size_t bytes = m->rows * m->cols * elem;
        if (m->transpose) { transpose_bytes(out + at, src, m->rows, m->cols, elem); }
        else { memcpy(out + at, src, bytes); }
        SafetensorsEntry* e = &entries[k];
        e->name = m->name;
        e->dtype = version == MODEL_VERSION_FP32 ? ST_F32 : ST_BF16;
        e->ndim = hf_shape(m, e->shape);
        e->data = out + at;
        at += bytes;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) { ls_fatal("cannot create directory '%s': %s", out_dir, strerror(errno)); }
    char* st_path = path_join(out_dir, "model.safetensors");
    char* cfg_path = path_join(out_dir, "config.json");
    static const char* const meta[] = {"format", "pt"};  // transformers refuses files without it
    safetensors_write(st_path, entries, nt, meta, 1);
    write_config_json(cfg_path, &c, version == MODEL_VERSION_BF16);
    printf("hf_convert: %s (L=%d C=%d H=%d V=%d maxT=%d, %s) -> %s, %s: %d tensors, %zu parameters\n", model_path,
           c.num_layers, c.channels, c.num_heads, c.vocab_size, c.max_seq_len, elem == 4 ? "fp32" : "bf16", st_path,
           cfg_path, nt, at / elem);
    free(st_path);
    free(cfg_path);
    free(out);
    free(entries);
    free(maps);
    free(raw);
}

// ----------------------------------------------------------------------------
// import

// An integer field of config.json in [lo, hi].
static int config_int(const cJSON* j, const char* key, const char* path, int lo, int hi) {
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
        ls_fatal("config '%s': \"%s\" must be an integer in [%d, %d]", path, key, lo, hi);
    }
    return (int)v->valuedouble;
}

// config.json -> c, checking that it describes the architecture the trainers implement.
static void read_config_json(const char* path, GPT2Config* c) {
    size_t size;
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) {
        ls_fatal("config '%s': cannot open: %s (import needs the checkpoint's config.json beside it)", path, strerror(errno));
    }
    long long fsize = file_size_of(fp);
    if (fsize < 0 || fsize > (1 << 20)) { ls_fatal("config '%s': not a config.json (%lld bytes)", path, fsize); }
    size = (size_t)fsize;
    char* text = (char*)mallocCheck(size + 1);
    freadCheck(text, 1, size, fp, path);
    text[size] = '\0';
    fclose(fp);
    cJSON* j = cJSON_ParseWithLength(text, size);
    if (!cJSON_IsObject(j)) { ls_fatal("config '%s': not a JSON object", path); }
    const cJSON* type = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (type != NULL && (!cJSON_IsString(type) || strcmp(type->valuestring, "gpt2") != 0)) {
        ls_fatal("config '%s': model_type is not \"gpt2\"", path);
    }
    memset(c, 0, sizeof(*c));
    c->num_layers = config_int(j, "n_layer", path, 1, 256);
    c->num_heads = config_int(j, "n_head", path, 1, 65536);
    c->channels = config_int(j, "n_embd", path, 16, 65536);
    c->max_seq_len = config_int(j, "n_positions", path, 1, 1048576);
    c->vocab_size = config_int(j, "vocab_size", path, 2, 65536);
    c->padded_vocab_size = padded_vocab_of(c->vocab_size);
    char err[200];
    if (!gpt2_config_valid(c, err, sizeof(err))) { ls_fatal("config '%s': %s", path, err); }
    const cJSON* inner = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    if (inner != NULL && !cJSON_IsNull(inner) && !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * c->channels)) {
        ls_fatal("config '%s': n_inner must be null or 4 * n_embd = %d", path, 4 * c->channels);
    }
    const cJSON* act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (act != NULL && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_new") != 0 &&
                                                 strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))) {
        ls_fatal("config '%s': activation_function must be gelu_new (GELU, tanh approximation)", path);
    }
    const cJSON* eps = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (eps != NULL && !(cJSON_IsNumber(eps) && fabs(eps->valuedouble - 1e-5) <= 1e-12)) {
        ls_fatal("config '%s': layer_norm_epsilon must be 1e-5", path);
    }
    static const char* const unsupported_true[] = {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                                                    "add_cross_attention", NULL};
    for (int k = 0; unsupported_true[k]; k++) {
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, unsupported_true[k]))) {
            ls_fatal("config '%s': %s = true is not GPT-2 as the trainers implement it", path, unsupported_true[k]);
        }
    }
    const cJSON* scale = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_weights");
    if (cJSON_IsFalse(scale)) { ls_fatal("config '%s': scale_attn_weights = false is not supported", path); }
    const cJSON* tie = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    if (cJSON_IsFalse(tie)) { ls_fatal("config '%s': tie_word_embeddings = false (the llm.c format ties lm_head to wte)", path); }
    cJSON_Delete(j);
    free(text);
}

// bits of one element -> fp32 bits (exact widening)
static uint32_t widen_to_f32_bits(const unsigned char* p, SafetensorsDtype d) {
    if (d == ST_F32) {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    if (d == ST_BF16) { return (uint32_t)h << 16; }
    // F16: sign, 5-bit exponent (bias 15), 10-bit mantissa
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) { return sign | 0x7F800000u | (m << 13); }  // inf, NaN (payload kept)
    if (e == 0) {
        if (m == 0) { return sign; }
        int shift = 0;  // subnormal: normalise
        while (!(m & 0x400)) { m <<= 1; shift++; }
        m &= 0x3FF;
        return sign | (uint32_t)(127 - 15 + 1 - shift) << 23 | m << 13;
    }
    return sign | (e + 127 - 15) << 23 | m << 13;
}

static int ends_with(const char* s, const char* suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void cmd_import(const char* src, const char* out_path) {
    // the checkpoint and its config.json
    struct stat st;
    char *st_path, *cfg_path;
    if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
        st_path = path_join(src, "model.safetensors");
        cfg_path = path_join(src, "config.json");
    } else {
        size_t n = strlen(src);
        st_path = (char*)mallocCheck(n + 1);
        memcpy(st_path, src, n + 1);
        const char* slash = strrchr(src, '/');
        if (slash) {
            char* dir = (char*)mallocCheck(n + 1);
            memcpy(dir, src, (size_t)(slash - src));
            dir[slash - src] = '\0';
            cfg_path = path_join(dir, "config.json");
            free(dir);
        } else {
            cfg_path = path_join(".", "config.json");
        }
    }
    GPT2Config c;
    read_config_json(cfg_path, &c);
    SafetensorsFile sf;
    safetensors_open(&sf, st_path);
    const char* prefix = safetensors_find(&sf, "transformer.wte.weight") ? "transformer." : "";
    ParamTable pt;
    param_table_build(&pt, &c);
    TensorMap* maps = (TensorMap*)mallocCheck((4 + 12 * (size_t)c.num_layers) * sizeof(TensorMap));
    int nt = tensor_maps(&c, &pt, prefix, maps);
    // every tensor of the file is one we expect, a mask buffer, or a tied lm_head
    int all_bf16 = 1;
    const SafetensorsTensor* lm_head = NULL;
    for (int k = 0; k < sf.num_tensors; k++) {
        const SafetensorsTensor* t = &sf.tensors[k];
        int known = 0;
        for (int i = 0; i < nt && !known; i++) { known = strcmp(maps[i].name, t->name) == 0; }
        if (known) {
            if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
                ls_fatal("safetensors file '%s': tensor '%s' is %s (expected F32, BF16 or F16)", st_path, t->name,
                         st_dtype_name(t->dtype));
            }
            all_bf16 &= t->dtype == ST_BF16;
            continue;
        }
        if (ends_with(t->name, ".attn.bias") || ends_with(t->name, ".attn.masked_bias")) { continue; }  // masks
        if (strcmp(t->name, "lm_head.weight") == 0) { lm_head = t; continue; }
        ls_fatal("safetensors file '%s': unexpected tensor '%s' for GPT-2 with %d layers (config '%s')", st_path, t->name,
                 c.num_layers, cfg_path);
    }
    // the parameters, in llm.c's layout, as fp32 (padded vocabulary rows stay zero)
    size_t n = gpt2_num_parameters(&c);
    float* params = (float*)callocCheck(n, sizeof(float));
    unsigned char* buf = NULL;
    size_t buf_cap = 0;
    for (int i = 0; i < nt; i++) {
        const TensorMap* m = &maps[i];
        const SafetensorsTensor* t = safetensors_find(&sf, m->name);
        if (t == NULL) { ls_fatal("safetensors file '%s': missing tensor '%s'", st_path, m->name); }
        uint64_t want[2];
        int nd = hf_shape(m, want);
        if (t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1])) {
            char got_s[96], want_s[96];
            ls_fatal("safetensors file '%s': tensor '%s' has shape %s, config '%s' implies %s", st_path, m->name,
                     shape_str(t->shape, t->ndim, got_s, sizeof(got_s)), cfg_path, shape_str(want, nd, want_s, sizeof(want_s)));
        }
        size_t count = m->rows * m->cols;
        size_t bytes = (size_t)(t->end - t->begin);
        if (bytes + count * 4 > buf_cap) {
            free(buf);
            buf_cap = bytes + count * 4;
            buf = (unsigned char*)mallocCheck(buf_cap);
        }
        safetensors_read(&sf, t, buf);
        unsigned char* f32 = buf + bytes;  // the tensor widened to fp32 (exact), HF layout
        size_t in_elem = st_dtype_size(t->dtype);
        for (size_t k = 0; k < count; k++) {
            uint32_t u = widen_to_f32_bits(buf + k * in_elem, t->dtype);
            memcpy(f32 + k * 4, &u, 4);
        }
        unsigned char* dst = (unsigned char*)(params + m->offset);
        if (m->transpose) { transpose_bytes(dst, f32, m->cols, m->rows, 4); }  // HF (cols, rows) -> (rows, cols)
        else { memcpy(dst, f32, count * 4); }
    }
    if (lm_head != NULL) {  // must be wte itself: the llm.c format has no separate classifier
        const TensorMap* wte = &maps[0];
        const SafetensorsTensor* w = safetensors_find(&sf, wte->name);
        int same = lm_head->dtype == w->dtype && lm_head->ndim == w->ndim && lm_head->end - lm_head->begin == w->end - w->begin &&
                   memcmp(lm_head->shape, w->shape, sizeof(w->shape[0]) * (size_t)w->ndim) == 0;
        if (same) {
            size_t bytes = (size_t)(w->end - w->begin);
            unsigned char* a = (unsigned char*)mallocCheck(bytes);
            unsigned char* b = (unsigned char*)mallocCheck(bytes);
            safetensors_read(&sf, w, a);
            safetensors_read(&sf, lm_head, b);
            same = memcmp(a, b, bytes) == 0;
            free(a);
            free(b);
        }
        if (!same) {
            ls_fatal("safetensors file '%s': lm_head.weight differs from %s (untied); the llm.c format ties them", st_path,
                     wte->name);
        }
    }
    // bf16 values round-trip exactly through fp32, so a BF16 checkpoint gives back its bits
    int version = all_bf16 ? MODEL_VERSION_BF16 : MODEL_VERSION_FP32;
    model_file_write(out_path, &c, params, version);
    printf("hf_convert: %s -> %s (version %d, %s): L=%d C=%d H=%d V=%d (padded %d) maxT=%d, %zu parameters\n", st_path,
           out_path, version, all_bf16 ? "bf16" : "fp32", c.num_layers, c.channels, c.num_heads, c.vocab_size,
           c.padded_vocab_size, c.max_seq_len, n);
    free(buf);
    free(params);
    free(maps);
    safetensors_close(&sf);
    free(st_path);
    free(cfg_path);
}

int main(int argc, char** argv) {
    if (argc == 4 && strcmp(argv[1], "export") == 0) {
        cmd_export(argv[2], argv[3]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "import") == 0) {
        cmd_import(argv[2], argv[3]);
        return 0;
    }
    fprintf(stderr,
            "usage: %s export MODEL.bin OUT_DIR     llm.c model file -> OUT_DIR/model.safetensors + config.json\n"
            "       %s import SRC OUT.bin           Hugging Face GPT-2 checkpoint (a directory, or its\n"
            "                                       model.safetensors with config.json beside it) -> llm.c model file\n",
            argv[0], argv[0]);
    return 2;
}
