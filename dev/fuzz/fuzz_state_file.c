/*
 fuzz_state_file.c: libFuzzer target for the optimizer/run state-file readers (state_file_read_header
 and state_file_read in llmc/io/checkpoint.h, with the crc32 check).
 The input is the file. The caller's side of the contract (parameter count, whether the run keeps
 master weights, AdamW m and v or one optimizer state block) is taken from the header, so that
 accepted files are reachable; bit 0 of the last two header bytes (reserved) flips whether the run
 takes the master weights (a buffer, or NULL to skip them) and the m/v-or-block expectation. Accepted files must give back their
 header fields and their m, v (or block) and master bytes unchanged.
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/io/checkpoint.h"

static float *m, *v, *master;

FUZZ_INITIALIZE_DEFAULT

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input("state.bin", data, size);
    int header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    memcpy(header, data, size < sizeof(header) ? size : sizeof(header));
    uint64_t n_hdr;
    memcpy(&n_hdr, &header[6], 8);
    size_t n = n_hdr <= size / 4 ? (size_t)n_hdr : (size > 1024 ? (size - 1024) / 8 : 0);
    int want_master = (header[14] != 0) ^ (size >= 1024 && (data[1023] & 1));
    int want_block = (header[5] == 2) ^ (size >= 1024 && (data[1022] & 1));  // v == NULL
    uint64_t nm_hdr;  // the run's master count: the file's when plausible (0 there: n)
    memcpy(&nm_hdr, &header[17], 8);
    size_t nm = nm_hdr == 0 ? n : nm_hdr <= size / 4 ? (size_t)nm_hdr : n;
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        m = (float*)mallocCheck(n * sizeof(float));
        v = want_block ? NULL : (float*)mallocCheck(n * sizeof(float));
        master = want_master ? (float*)mallocCheck(nm * sizeof(float)) : NULL;
        RunState h, s;
        memset(&h, 0, sizeof(h));  // the padding too: compared below
        memset(&s, 0, sizeof(s));
        state_file_read_header(path, &h);  // what resuming reads first
        int had = state_file_read(path, n, nm, &s, m, v, master);  // master NULL: the file's are skipped
        fuzz_check(memcmp(&h, &s, sizeof(h)) == 0, "header-only read agrees");
        fuzz_check(had == (header[14] != 0) && (!had || s.num_master == nm), "master weights reported");
        size_t arrays = want_block ? 1 : 2;
        fuzz_check(size == 1024 + arrays * n * 4 + (had ? nm * 4 : 0), "accepted file size");
        fuzz_check(s.num_params == n && s.step == header[4] && s.has_m_v == header[5], "header fields");
        const uint8_t* p = data + 1024;
        fuzz_check(memcmp(m, p, n * 4) == 0, "m (or the state block) is the file's bytes");
        if (v) { fuzz_check(memcmp(v, p + n * 4, n * 4) == 0, "v is the file's bytes"); }
        if (master && had) { fuzz_check(memcmp(master, p + arrays * n * 4, nm * 4) == 0, "master weights are the file's bytes"); }
        free(m);
        free(v);
        free(master);
        m = v = master = NULL;
        fuzz_end();
    } else {
        m = v = master = NULL;  // freed by fuzz_reject
        fuzz_reject();
    }
    return 0;
}
