/*
 fuzz_shard.c: libFuzzer target for the token-shard reader: dataloader_init (glob, validation of
 every shard) and a few batches, including a seek (llmc/io/dataloader.h, llmc/io/shard.h).

 Input: 8 bytes of loader settings, then the shard file(s):
   [0] B-1 (mod 8)   [1] T-1 (mod 64)   [2] bits 0-1 processes-1, 2-3 rank (mod processes),
   bit 4 shuffle, bit 5 two shards   [3..4] vocab size - 1 (uint16 LE)   [5..6] with two shards,
   where the first ends (LE, mod the rest's length)   [7] batches to draw - 1 (mod 16)
 Every batch must hold tokens below the vocab size, with targets the inputs shifted by one.
*/
#include "dev/fuzz/fuzz_common.h"
#include "llmc/io/dataloader.h"

static DataLoader dl;

FUZZ_INITIALIZE_DEFAULT

static void check_batch(const DataLoader* d) {
    size_t BT = (size_t)d->B * (size_t)d->T;
    for (size_t i = 0; i < BT; i++) {
        fuzz_check(d->inputs[i] >= 0 && d->inputs[i] < d->vocab_size, "input token in range");
        fuzz_check(d->targets[i] >= 0 && d->targets[i] < d->vocab_size, "target token in range");
        if (i + 1 < BT) { fuzz_check(d->targets[i] == d->inputs[i + 1], "targets are inputs shifted by one"); }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 8) { return 0; }
    int B = data[0] % 8 + 1, T = data[1] % 64 + 1;
    int nproc = (data[2] & 3) + 1, rank = ((data[2] >> 2) & 3) % nproc, shuffle = (data[2] >> 4) & 1;
    int two = (data[2] >> 5) & 1;
    int vocab = (data[3] | data[4] << 8) + 1;
    size_t rest = size - 8, split = rest;
    if (two && rest > 0) { split = (size_t)(data[5] | data[6] << 8) % rest; }
    int batches = data[7] % 16 + 1;
    fuzz_write_file(0, "shard_0.bin", data + 8, split);
    if (two) {
        fuzz_write_file(1, "shard_1.bin", data + 8 + split, rest - split);
    } else {
        const char* p1 = fuzz_write_file(1, "shard_1.bin", NULL, 0);
        unlink(p1);
    }
    char pattern[160];
    snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", fuzz_dir);
    fuzz_begin();
    if (setjmp(fuzz_env) == 0) {
        dataloader_init(&dl, pattern, B, T, rank, nproc, shuffle, data[5], vocab);
        fuzz_check(dl.num_shards == 1 + two, "every shard found");
        fuzz_check(dataloader_steps_per_epoch(&dl) >= 1, "at least one step per epoch");
        for (int k = 0; k < batches; k++) {
            dataloader_next_batch(&dl);
            check_batch(&dl);
        }
        dataloader_seek(&dl, data[6], (size_t)data[7] * 7);
        dataloader_next_batch(&dl);
        check_batch(&dl);
        dataloader_free(&dl);
        fuzz_end();
    } else {
        memset(&dl, 0, sizeof(dl));  // half-built: fuzz_reject frees its blocks and closes its file
        fuzz_reject();
    }
    return 0;
}
