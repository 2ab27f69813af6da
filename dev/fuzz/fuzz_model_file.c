/*
 fuzz_model_file.c: libFuzzer target for the llm.c model-file reader (llmc/io/checkpoint.h: header,
 size, parameters, and the crc32 when the header carries one).
 The input is the file. Accepted files must hold exactly the parameters their header implies,
 and the parameters read must be the file's bytes (fp32) or their exact widening (bf16).
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/io/checkpoint.h"
#include "llmc/params.h"

static float* params;  // (num_parameters,)

FUZZ_INITIALIZE_DEFAULT

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input("model.bin", data, size);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        GPT2Config c;
        int version = model_file_read_header(path, &c);
        fuzz_check(version == MODEL_VERSION_FP32 || version == MODEL_VERSION_BF16, "version");
        size_t n = gpt2_num_parameters(&c);
        size_t elem = version == MODEL_VERSION_FP32 ? 4 : 2;
        fuzz_check(size == HEADER_INTS * 4 + n * elem, "accepted file size matches the header");
        ParamTable pt;
        param_table_build(&pt, &c);
        fuzz_check(pt.total == n, "parameter table and count agree");
        params = (float*)mallocCheck(n * sizeof(float));
        model_file_read_params(path, &c, params);
        const uint8_t* payload = data + HEADER_INTS * 4;
        if (version == MODEL_VERSION_FP32) {
            fuzz_check(memcmp(params, payload, n * 4) == 0, "fp32 parameters are the file's bytes");
        } else {
            for (size_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, payload + 2 * i, 2);
                uint32_t u;
                memcpy(&u, &params[i], 4);
                fuzz_check(u == (uint32_t)h << 16, "bf16 widening is exact");
            }
        }
        free(params);
        params = NULL;
        fuzz_end();
    } else {
        params = NULL;  // freed by fuzz_reject
        fuzz_reject();
    }
    return 0;
}
