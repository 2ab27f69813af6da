/*
 fuzz_safetensors.c: libFuzzer target for the safetensors reader (llmc/io/safetensors.h), which
 hf_convert import uses on downloaded checkpoints. The input is the file. An accepted file must
 tile its data section exactly, every tensor must be found by name and read back as the
 file's bytes; the writer, given the tensors read, must produce a file the reader accepts with
 the same tensors.
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/io/safetensors.h"

static SafetensorsFile st, st2;
static unsigned char* bytes;
static SafetensorsEntry* entries;

FUZZ_INITIALIZE_DEFAULT

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input("model.safetensors", data, size);
    char path2[200];
    snprintf(path2, sizeof(path2), "%s/rewritten.safetensors", fuzz_dir);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        safetensors_open(&st, path);
        uint64_t data_size = size - st.data_start, at = 0;
        bytes = (unsigned char*)mallocCheck((size_t)data_size);
        entries = (SafetensorsEntry*)callocCheck((size_t)st.num_tensors, sizeof(SafetensorsEntry));
        for (int k = 0; k < st.num_tensors; k++) {
            const SafetensorsTensor* t = &st.tensors[k];
            fuzz_check(t->begin == at && t->end >= t->begin, "tensors tile the data section");
            fuzz_check(safetensors_find(&st, t->name) == t, "found by name");
            safetensors_read(&st, t, bytes + t->begin);
            fuzz_check(memcmp(bytes + t->begin, data + st.data_start + t->begin, t->end - t->begin) == 0,
                       "read gives the file's bytes");
            SafetensorsEntry* e = &entries[k];
            e->name = t->name;
            e->dtype = t->dtype;
            e->ndim = t->ndim;
            memcpy(e->shape, t->shape, sizeof(e->shape));
            e->data = bytes + t->begin;
            at = t->end;
        }
        fuzz_check(at == data_size, "tensors cover the data section");
        // write what was read, read it again: same tensors, same bytes
        safetensors_write(path2, entries, st.num_tensors, (const char* const*)st.metadata, st.num_metadata);
        safetensors_open(&st2, path2);
        fuzz_check(st2.num_tensors == st.num_tensors && st2.num_metadata == st.num_metadata, "rewrite: same counts");
        for (int k = 0; k < st.num_tensors; k++) {
            const SafetensorsTensor* t = safetensors_find(&st2, st.tensors[k].name);
            fuzz_check(t != NULL && t->dtype == st.tensors[k].dtype && t->ndim == st.tensors[k].ndim &&
                       memcmp(t->shape, st.tensors[k].shape, sizeof(t->shape[0]) * (size_t)t->ndim) == 0 &&
                       t->end - t->begin == st.tensors[k].end - st.tensors[k].begin, "rewrite: same tensor");
        }
        safetensors_close(&st2);
        unlink(path2);
        free(entries);
        free(bytes);
        entries = NULL;
        bytes = NULL;
        safetensors_close(&st);
        fuzz_end();
    } else {
        safetensors_close(&st);
        safetensors_close(&st2);
        entries = NULL;
        bytes = NULL;
        unlink(path2);
        fuzz_reject();
    }
    return 0;
}
