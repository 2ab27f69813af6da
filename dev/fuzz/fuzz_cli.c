/*
 fuzz_cli.c: libFuzzer target for the trainers' command-line parsing: cli_parse with the train
 flag table (llmc/run/cli.h, llmc/run/train_options.h), then what train_main does with the result before
 touching a file: --help, the --inject-nan list, the model descriptor, the batch checks and the
 banner.

 Input: byte 0 picks the trainer (bit 0: GPU flags, else CPU); the rest is split at NUL bytes
 into argv[1..] (at most 48 arguments).

 cli.h and train_options.h report usage errors with exit(2) directly (they do not include
 utils.h): the fuzz build's exit jumps back too (fuzz_common.h), so a rejected command line is a
 clean rejection.
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/params.h"
#include "llmc/run/train_options.h"
#include "llmc/run/step_guard.h"

#define MAX_ARGS 48

static char* arg_text;   // the input's copy, NUL-terminated pieces
static FILE* devnull;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc; (void)argv;
    fuzz_setup();
    devnull = fopen("/dev/null", "w");
    if (devnull == NULL) { abort(); }
    return 0;
}

// What train_main does after parsing, before it reads a file or allocates: the descriptor, its
// checks, the batch checks against it and the banner.
static void after_parse(const TrainOptions* o) {
    int steps[64], count = -1;
    if (step_list_parse(o->inject_nan, steps, 64, &count)) {  // --inject-nan, as train_main parses it
        fuzz_check(count >= 0 && count <= 64, "--inject-nan step count");
        for (int i = 0; i < count; i++) { fuzz_check(steps[i] >= 1, "--inject-nan steps are >= 1"); }
    }
    GPT2Config c;
    if (!gpt2_config_from_descriptor(o->model, &c)) { return; }  // a model file: not this target's
    char err[200];
    if (!gpt2_config_valid(&c, err, sizeof(err))) { ls_fatal("flag -e: '%s': %s", o->model, err); }
    int accum = train_options_accum_steps(o, &c, 1);
    fuzz_check(accum >= 1, "accumulation steps");
    gpt2_describe(&c, gpt2_num_parameters(&c), o, accum);
    ParamTable pt;
    param_table_build(&pt, &c);
    fuzz_check(pt.total == gpt2_num_parameters(&c), "parameter table and count agree");
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) { return 0; }
    unsigned trainer = (data[0] & 1) ? CLI_GPU : CLI_CPU;
    free(arg_text);
    arg_text = (char*)malloc(size);  // the bytes after data[0], plus a final NUL
    memcpy(arg_text, data + 1, size - 1);
    arg_text[size - 1] = '\0';
    char* argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char*)"train_gpt2";
    for (char* p = arg_text; p < arg_text + size - 1 && argc <= MAX_ARGS; p += strlen(p) + 1) { argv[argc++] = p; }
    argv[argc] = NULL;
    static TrainOptions o;
    train_options_defaults(&o);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        if (cli_parse(argc, argv, train_flags, TRAIN_FLAG_COUNT, trainer, &o)) {
            cli_print_help(devnull, argv[0], "fuzz", train_flags, TRAIN_FLAG_COUNT, trainer, &o);
        } else {
            after_parse(&o);
        }
        fuzz_end();
    } else {
        fuzz_reject();
    }
    return 0;
}
