/*
 fuzz_state_file.c: libFuzzer target for the run state-file readers (state_file_read_header and
 state_file_read in llmc/io/checkpoint.h, with the crc32 check), versions 2 (one optimizer state
 block and an optimizer tag) and 1 (AdamW m then v, or one block when header[5] = 2).
 The input is the file. The caller's side of the contract (StateExpect: the block's word count,
 the optimizer tag, the master weight count, whether the run takes version-1 AdamW moments) is
 taken from the header, so that accepted files are reachable; bit 0 of the last three header bytes
 (reserved, header[255]) flips whether the run takes the master weights (a buffer, or NULL to skip
 them), whether it takes version-1 moments (buffers, or NULL: refused) and the tag's lowest bit (a
 run with another optimizer: refused). Accepted files must give back their header fields and their
 block (or m and v) and master bytes unchanged.
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/io/checkpoint.h"
#include "llmc/optim/engine.h"

static float *block, *v1_m, *v1_v, *master;

FUZZ_INITIALIZE_DEFAULT

static void buffers_free(void) {
    free(block);
    free(v1_m);
    free(v1_v);
    free(master);
    block = v1_m = v1_v = master = NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input("state.bin", data, size);
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    memcpy(header, data, size < sizeof(header) ? size : sizeof(header));
    const int flip_master = size >= 1024 && (data[1023] & 1);
    const int flip_moments = size >= 1024 && (data[1022] & 1);
    const int flip_tag = size >= 1024 && (data[1021] & 1);
    const int v1_moments = header[1] == STATE_VERSION_1 && header[5] != 2;  // AdamW m and v
    uint64_t n_hdr;
    memcpy(&n_hdr, &header[6], 8);
    size_t n = n_hdr <= size / 4 ? (size_t)n_hdr : (size > 1024 ? (size - 1024) / (v1_moments ? 8 : 4) : 0);
    uint64_t nm_hdr;  // the run's master count: the file's when plausible (0 there: n)
    memcpy(&nm_hdr, &header[17], 8);
    size_t nm = nm_hdr == 0 ? n : nm_hdr <= size / 4 ? (size_t)nm_hdr : n;
    const int want_master = (header[14] != 0) ^ flip_master;
    const int want_moments = v1_moments ^ flip_moments;  // the run is fp32 AdamW: it takes v1 m and v
    StateExpect want;
    memset(&want, 0, sizeof(want));
    want.words = n;
    want.tag = (uint32_t)header[19] ^ (uint32_t)flip_tag;
    want.describe_tag = optim_engine_tag_describe;
    want.num_master = nm;
    want.v1_n = n;
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        block = (float*)mallocCheck(n * sizeof(float));
        v1_m = want_moments ? (float*)mallocCheck(n * sizeof(float)) : NULL;
        v1_v = want_moments ? (float*)mallocCheck(n * sizeof(float)) : NULL;
        master = want_master ? (float*)mallocCheck(nm * sizeof(float)) : NULL;
        want.v1_m = v1_m;
        want.v1_v = v1_v;
        RunState h, s;
        memset(&h, 0, sizeof(h));  // the padding too: compared below
        memset(&s, 0, sizeof(s));
        state_file_read_header(path, &h);  // what resuming reads first
        int had = state_file_read(path, &want, &s, block, master);  // master NULL: the file's are skipped
        fuzz_check(memcmp(&h, &s, sizeof(h)) == 0, "header-only read agrees");
        fuzz_check(s.version == header[1] && (s.version == STATE_VERSION || s.version == STATE_VERSION_1),
                   "the version is one this build reads");
        fuzz_check(s.version == STATE_VERSION_1 ? s.optim_tag == 0 : s.optim_tag == want.tag && !flip_tag,
                   "a version-2 file is accepted only by the optimizer configuration it records");
        fuzz_check(!v1_moments || want_moments, "version-1 AdamW moments are accepted only into fp32 AdamW state");
        fuzz_check(had == (header[14] != 0) && (!had || s.num_master == nm), "master weights reported");
        size_t arrays = v1_moments ? 2 : 1;
        fuzz_check(size == 1024 + arrays * n * 4 + (had ? nm * 4 : 0), "accepted file size");
        fuzz_check(s.num_params == n && s.step == header[4] && s.has_m_v == header[5], "header fields");
        const uint8_t* p = data + 1024;
        if (v1_moments) {
            fuzz_check(memcmp(v1_m, p, n * 4) == 0, "version 1: m is the file's bytes");
            fuzz_check(memcmp(v1_v, p + n * 4, n * 4) == 0, "version 1: v is the file's bytes");
        } else {
            fuzz_check(memcmp(block, p, n * 4) == 0, "the state block is the file's bytes");
        }
        if (master && had) { fuzz_check(memcmp(master, p + arrays * n * 4, nm * 4) == 0, "master weights are the file's bytes"); }
        buffers_free();
        fuzz_end();
    } else {
        block = v1_m = v1_v = master = NULL;  // freed by fuzz_reject
        fuzz_reject();
    }
    return 0;
}
