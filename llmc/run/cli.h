/*
 cli.h: a table-driven command-line parser. One table of flags drives parsing, range checks
 and --help, so the help text cannot drift from what is parsed.

 Flags take llm.c's form `-x value` (short names may have two letters, like -nk), or the long
 form `--name value` / `--name=value`; a 0|1 flag alone (`--dry-run`, `-y`, no value after it)
 means 1. Every value is checked: integers and floats must parse completely and lie in [min, max];
 a choice must be one of its listed words. A bad flag prints one line "leanstep: error: ..."
 naming the flag and what was expected (an unknown one: the nearest known name), and the program
 exits with status 2.
 To add a flag: add a field to the options struct and a row to the table (train_options.h).
*/
#ifndef LLMC_CLI_H
#define LLMC_CLI_H

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { CLI_INT = 0, CLI_FLOAT, CLI_STRING, CLI_CHOICE, CLI_SWITCH } CliType;

// Which trainers take a flag: a trainer parses and lists only its own flags, and names the
// other trainer when given one of its flags.
enum { CLI_CPU = 1, CLI_GPU = 2, CLI_BOTH = 3 };

typedef struct {
    const char* short_name;  // without '-', e.g. "b", "nk"; NULL if only long
    const char* long_name;   // without "--", e.g. "batch-size"
    CliType type;
    size_t offset;           // offsetof(Options, field): int, float, const char*, or int (choice index)
    double min, max;         // range for CLI_INT / CLI_FLOAT
    const char* const* choices;  // CLI_CHOICE: NULL-terminated words; the field gets the index
    unsigned trainers;       // CLI_CPU | CLI_GPU
    const char* help;
} CliFlag;

// "leanstep: error: <message> (see --help)" on one line, exit status 2: a command line the
// program cannot run (the prefix is llmc/utils.h's ls_fatal's, which exits 1 on bad files).
static void cli_error(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void cli_error(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "leanstep: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see --help)\n");
    va_end(ap);
    exit(2);
}

static inline void cli_print_value(const CliFlag* f, const void* opts, char* buf, size_t len) {
    const void* base = (const char*)opts + f->offset;
    switch (f->type) {
        case CLI_INT: case CLI_SWITCH: snprintf(buf, len, "%d", *(const int*)base); break;
        case CLI_FLOAT: snprintf(buf, len, "%g", (double)*(const float*)base); break;
        case CLI_STRING: snprintf(buf, len, "%s", *(const char* const*)base ? *(const char* const*)base : "(none)"); break;
        case CLI_CHOICE: snprintf(buf, len, "%s", f->choices[*(const int*)base]); break;
    }
}

// Prints the help text, with the current values of opts as defaults.
static inline void cli_print_help(FILE* out, const char* prog, const char* summary, const CliFlag* flags, int n,
                                  unsigned trainer, const void* opts) {
    fprintf(out, "usage: %s [flags]\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < n; i++) {
        const CliFlag* f = &flags[i];
        if (!(f->trainers & trainer)) { continue; }
        char names[64], def[256], range[160] = "";
        if (f->short_name) {
            snprintf(names, sizeof(names), "-%s, --%s", f->short_name, f->long_name);
        } else {
            snprintf(names, sizeof(names), "    --%s", f->long_name);
        }
        cli_print_value(f, opts, def, sizeof(def));
        const char* kind = "";
        switch (f->type) {
            case CLI_INT: kind = "INT"; snprintf(range, sizeof(range), ", range [%.0f, %.0f]", f->min, f->max); break;
            case CLI_FLOAT: kind = "FLOAT"; snprintf(range, sizeof(range), ", range [%g, %g]", f->min, f->max); break;
            case CLI_STRING: kind = "STR"; break;
            case CLI_SWITCH: kind = "0|1"; break;
            case CLI_CHOICE: {
                kind = "WORD";
                size_t used = (size_t)snprintf(range, sizeof(range), ", one of");
                for (int k = 0; f->choices[k]; k++) {
                    used += (size_t)snprintf(range + used, sizeof(range) - used, " %s", f->choices[k]);
                }
                break;
            }
        }
        fprintf(out, "  %-26s %-5s %s (default %s%s)\n", names, kind, f->help, def, range);
    }
    fprintf(out, "  %-26s %-5s %s\n", "-h, --help", "", "print this help and exit");
}

static inline void cli_set(const CliFlag* f, const char* flagname, const char* value, void* opts) {
    void* base = (char*)opts + f->offset;
    char* end = NULL;
    switch (f->type) {
        case CLI_INT: case CLI_SWITCH: {
            errno = 0;
            long long v = strtoll(value, &end, 10);
            double lo = f->type == CLI_SWITCH ? 0 : f->min, hi = f->type == CLI_SWITCH ? 1 : f->max;
            if (end == value || *end != '\0' || errno != 0) { cli_error("flag %s expects an integer, got '%s'", flagname, value); }
            if ((double)v < lo || (double)v > hi) {
                char detail[200];
                snprintf(detail, sizeof(detail), "%lld is outside [%.0f, %.0f]", v, lo, hi);
                cli_error("flag %s: %s", flagname, detail);
            }
            *(int*)base = (int)v;
            break;
        }
        case CLI_FLOAT: {
            errno = 0;
            double v = strtod(value, &end);
            if (end == value || *end != '\0' || errno != 0 || !isfinite(v)) { cli_error("flag %s expects a number, got '%s'", flagname, value); }
            if (v < f->min || v > f->max) {
                char detail[200];
                snprintf(detail, sizeof(detail), "%g is outside [%g, %g]", v, f->min, f->max);
                cli_error("flag %s: %s", flagname, detail);
            }
            *(float*)base = (float)v;
            break;
        }
        case CLI_STRING:
            if (value[0] == '\0') { cli_error("flag %s expects a non-empty value", flagname); }
            *(const char**)base = value;
            break;
        case CLI_CHOICE: {
            for (int k = 0; f->choices[k]; k++) {
                if (strcmp(value, f->choices[k]) == 0) { *(int*)base = k; return; }
            }
            char detail[300];
            size_t used = (size_t)snprintf(detail, sizeof(detail), "'%s' is not one of", value);
            // snprintf returns the length it wanted: stop once the buffer is full (a long value)
            for (int k = 0; f->choices[k] && used < sizeof(detail); k++) { used += (size_t)snprintf(detail + used, sizeof(detail) - used, " %s", f->choices[k]); }
            cli_error("flag %s: %s", flagname, detail);
        }
    }
}

// Edit distance between a and b (insertions, deletions, substitutions; names are short).
static inline int cli_distance(const char* a, const char* b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 40 || lb > 40) { return 99; }
    int row[41];
    for (int j = 0; j <= lb; j++) { row[j] = j; }
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) { best = up + 1; }
            if (row[j - 1] + 1 < best) { best = row[j - 1] + 1; }
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

// The trainer's flag nearest to the unknown `arg` (its dashes and any "=value" left out): the
// same name with the other number of dashes, a long name it begins or that begins it, or one or
// two edits away (one for names of up to 3 letters); NULL if none is that near. Ties: the fewer
// edits, the first letter equal, then the table's order.
static inline const CliFlag* cli_nearest(const char* arg, const CliFlag* flags, int n, unsigned trainer) {
    char name[64];
    const char* a = arg;
    while (*a == '-') { a++; }
    size_t len = strcspn(a, "=");
    if (len == 0 || len >= sizeof(name)) { return NULL; }
    memcpy(name, a, len);
    name[len] = '\0';
    const CliFlag* best = NULL;
    int best_score = 1 << 30;
    for (int k = 0; k < n; k++) {
        const CliFlag* f = &flags[k];
        if (!(f->trainers & trainer)) { continue; }
        int raw = cli_distance(name, f->long_name);
        if (f->short_name) {
            int ds = cli_distance(name, f->short_name);
            if (ds < raw) { raw = ds; }
        }
        int d = raw;
        size_t lf = strlen(f->long_name);
        if (len >= 3 && strncmp(f->long_name, name, len) == 0) { d = 0; }  // a long name's beginning
        if (lf >= 3 && len > lf && strncmp(f->long_name, name, lf) == 0 && d > 1) { d = 1; }  // or the name with more
        if (d > (len <= 3 ? 1 : 2)) { continue; }
        int other_letter = name[0] != f->long_name[0] && (!f->short_name || name[0] != f->short_name[0]);
        int score = 64 * d + 2 * (raw < 31 ? raw : 31) + other_letter;
        if (score < best_score) { best = f; best_score = score; }
    }
    return best;
}

// Parses argv into opts (which holds the defaults) for `trainer` (CLI_CPU or CLI_GPU). Returns 1
// if --help was asked for.
static inline int cli_parse(int argc, char** argv, const CliFlag* flags, int n, unsigned trainer, void* opts) {
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) { return 1; }
        const CliFlag* f = NULL;
        const char* value = NULL;
        if (arg[0] == '-' && arg[1] == '-') {
            const char* name = arg + 2;
            const char* eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (int k = 0; k < n; k++) {
                if (strlen(flags[k].long_name) == len && strncmp(flags[k].long_name, name, len) == 0) { f = &flags[k]; }
            }
            if (eq) { value = eq + 1; }
        } else if (arg[0] == '-' && arg[1] != '\0') {
            for (int k = 0; k < n; k++) {
                if (flags[k].short_name && strcmp(flags[k].short_name, arg + 1) == 0) { f = &flags[k]; }
            }
        }
        if (f == NULL) {
            const CliFlag* near = arg[0] == '-' ? cli_nearest(arg, flags, n, trainer) : NULL;
            if (near == NULL) { cli_error("unknown flag '%s'", arg); }
            if (near->short_name) { cli_error("unknown flag '%s' (did you mean -%s, --%s?)", arg, near->short_name, near->long_name); }
            cli_error("unknown flag '%s' (did you mean --%s?)", arg, near->long_name);
        }
        if (!(f->trainers & trainer)) {
            cli_error("flag %s %s", arg, trainer == CLI_CPU ? "applies to the GPU trainer (train_gpt2cu) only"
                                                        : "applies to the CPU trainer (train_gpt2) only");
        }
        if (value == NULL && f->type == CLI_SWITCH && (i + 1 >= argc || argv[i + 1][0] == '-')) {
            value = "1";  // a 0|1 flag alone: on
        }
        if (value == NULL) {
            if (i + 1 >= argc) { cli_error("flag %s needs a value", arg); }
            value = argv[++i];
        }
        cli_set(f, arg, value, opts);
    }
    return 0;
}

#endif // LLMC_CLI_H
