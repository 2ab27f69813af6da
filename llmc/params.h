/*
 params.h: the parameter table. All parameters live in one flat buffer; this table says, for
 each of GPT-2's 16 tensors (in llm.c's file order), its name, shape, offset, element count,
 whether it is stacked per layer, and its optimizer treatment (weight decay on 2-D weight
 matrices only, an lr multiplier). Init, checkpoint I/O, the optimizer segments and (later)
 BAdam blocks, ZeRO shards and export names all read this table: nothing picks constants by
 tensor index.
*/
#ifndef LLMC_PARAMS_H
#define LLMC_PARAMS_H

#include <math.h>
#include <stddef.h>
#include "llmc/config.h"
#include "llmc/rand.h"
#include "llmc/utils.h"

#define NUM_PARAMETER_TENSORS 16

// Positions in the table (llm.c's file order), for code that walks the model's structure.
enum {
    P_WTE = 0, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

typedef struct {
    const char* name;
    int ndim;          // 1 or 2 (per layer, when per_layer)
    size_t rows, cols; // shape of one layer's slice; cols == 1 for vectors
    int per_layer;     // 1: shape (L, rows, cols); 0: shape (rows, cols)
    size_t offset;     // element offset in the flat buffer
    size_t count;      // elements in total
    int decay;         // 1: decoupled weight decay applies (2-D weight matrices)
    float lr_mult;     // learning-rate multiplier (1 for GPT-2)
    float init_std;    // std of the normal init; 0 for constant init
    float init_const;  // value of the constant init (1 for layernorm weights, 0 for biases)
    size_t init_rows;  // rows of a slice that get random init (wte: the real vocabulary only)
    // Adam-mini's blocks of a slice (one second moment each, llmc/optim/rules.h): its first mini_lead
    // elements in blocks of mini_lead_block, the rest in blocks of mini_block
    size_t mini_lead, mini_lead_block, mini_block;
} ParamTensor;

typedef struct {
    ParamTensor t[NUM_PARAMETER_TENSORS];
    size_t total;      // elements in all tensors
    int num_layers;
} ParamTable;

// Pointers to the 16 tensors inside a flat fp32 buffer, by name or by table position.
typedef union {
    struct {
        float* wte;      // (Vp, C)
        float* wpe;      // (maxT, C)
        float* ln1w;     // (L, C)
        float* ln1b;     // (L, C)
        float* qkvw;     // (L, 3C, C)
        float* qkvb;     // (L, 3C)
        float* attprojw; // (L, C, C)
        float* attprojb; // (L, C)
        float* ln2w;     // (L, C)
        float* ln2b;     // (L, C)
        float* fcw;      // (L, 4C, C)
        float* fcb;      // (L, 4C)
        float* fcprojw;  // (L, C, 4C)
        float* fcprojb;  // (L, C)
        float* lnfw;     // (C)
        float* lnfb;     // (C)
    };
    float* t[NUM_PARAMETER_TENSORS];
} ParameterTensors;

static inline void param_table_build(ParamTable* pt, const GPT2Config* c) {
    size_t C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size, maxT = (size_t)c->max_seq_len;
    int L = c->num_layers;
    float std = 0.02f;
    // residual projections are scaled by 1/sqrt(2L) (GPT-2 paper), computed in double
    float std_resid = (float)(0.02 / sqrt(2.0 * (double)L));
    const size_t hs = c->num_heads > 0 ? C / (size_t)c->num_heads : C;  // (a config is checked before use)
    // name, ndim, rows, cols, per_layer, init std, init const, rows with random init (0 = all),
    // Adam-mini: leading rows in blocks of several rows (qkvw: q and k per head, hs rows each); every
    // other row of a matrix is a block (an output neuron; wte, wpe: a token's, a position's row), a
    // vector one block (Zhang et al. 2024, "Adam-mini: Use Fewer Learning Rates To Gain More")
    struct { const char* name; int ndim; size_t rows, cols; int per_layer; float std, cst; size_t init_rows, lead_rows, lead_block_rows; } spec[NUM_PARAMETER_TENSORS] = {
        {"wte",      2, Vp,    C,     0, std,       0.0f, (size_t)c->vocab_size, 0, 0},
        {"wpe",      2, maxT,  C,     0, std,       0.0f, 0, 0, 0},
        {"ln1w",     1, C,     1,     1, 0.0f,      1.0f, 0, 0, 0},
        {"ln1b",     1, C,     1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"qkvw",     2, 3 * C, C,     1, std,       0.0f, 0, 2 * C, hs},
        {"qkvb",     1, 3 * C, 1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"attprojw", 2, C,     C,     1, std_resid, 0.0f, 0, 0, 0},
        {"attprojb", 1, C,     1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"ln2w",     1, C,     1,     1, 0.0f,      1.0f, 0, 0, 0},
        {"ln2b",     1, C,     1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"fcw",      2, 4 * C, C,     1, std,       0.0f, 0, 0, 0},
        {"fcb",      1, 4 * C, 1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"fcprojw",  2, C,     4 * C, 1, std_resid, 0.0f, 0, 0, 0},
        {"fcprojb",  1, C,     1,     1, 0.0f,      0.0f, 0, 0, 0},
        {"lnfw",     1, C,     1,     0, 0.0f,      1.0f, 0, 0, 0},
        {"lnfb",     1, C,     1,     0, 0.0f,      0.0f, 0, 0, 0},
    };
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        ParamTensor* t = &pt->t[i];
        t->name = spec[i].name;
        t->ndim = spec[i].ndim;
        t->rows = spec[i].rows;
        t->cols = spec[i].cols;
        t->per_layer = spec[i].per_layer;
        t->offset = offset;
        t->count = (spec[i].per_layer ? (size_t)L : 1) * spec[i].rows * spec[i].cols;
        t->decay = spec[i].ndim == 2;  // weight decay on matrices only, never on biases or norms
        t->lr_mult = 1.0f;
        t->init_std = spec[i].std;
        t->init_const = spec[i].cst;
        t->init_rows = spec[i].init_rows ? spec[i].init_rows : spec[i].rows;  // wte: padded rows stay 0
        t->mini_lead = spec[i].lead_rows * spec[i].cols;
        t->mini_lead_block = spec[i].lead_block_rows * spec[i].cols;
        t->mini_block = spec[i].ndim == 2 ? spec[i].cols : spec[i].rows * spec[i].cols;
        offset += t->count;
    }
    pt->total = offset;
    pt->num_layers = L;
}

static inline void param_pointers(const ParamTable* pt, float* base, ParameterTensors* p) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { p->t[i] = base + pt->t[i].offset; }
}

// Elements of one layer's slice of a per-layer tensor (or of the whole tensor otherwise).
static inline size_t param_slice_count(const ParamTensor* t) { return t->rows * t->cols; }

// Element offset of layer l's slice of tensor i in the flat buffer.
static inline size_t param_slice_offset(const ParamTable* pt, int i, int l) {
    const ParamTensor* t = &pt->t[i];
    return t->offset + (t->per_layer ? (size_t)l * t->rows * t->cols : 0);
}

// Random init, identical to dev/reference/gpt2_ref.py init (torch.Generator().manual_seed(seed),
// normal_ per tensor in file order, per layer inside stacked tensors; wte only on its first
// vocab_size rows, the padded rows stay zero). Constant tensors draw no random numbers.
static inline void params_init_random(const ParamTable* pt, float* params, uint64_t seed) {
    Mt19937 rng;
    mt19937_seed(&rng, (uint32_t)seed);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const ParamTensor* t = &pt->t[i];
        float* p = params + t->offset;
        if (t->init_std == 0.0f) {
            for (size_t k = 0; k < t->count; k++) { p[k] = t->init_const; }
            continue;
        }
        size_t slices = t->per_layer ? (size_t)pt->num_layers : 1;
        size_t slice = param_slice_count(t);
        for (size_t l = 0; l < slices; l++) {
            size_t n = t->init_rows * t->cols;
            memset(p + l * slice + n, 0, (slice - n) * sizeof(float));
            if (n < 16) { ls_fatal("init: tensor %s slice of %zu elements is below 16", t->name, n); }
            normal_fill(p + l * slice, n, 0.0f, t->init_std, &rng);
        }
    }
}

#endif // LLMC_PARAMS_H
