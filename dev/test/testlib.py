"""testlib.py: what the end-to-end tests in dev/test share: a failure list with check(), the
writer of llm.c token shards for small synthetic data sets, and the parser of the trainers' step
lines."""
import re
import struct

failures = []


def check(cond, what):
    """Records (and prints) a failed check; the test exits 1 when any failed."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<256i", *([20240520, 1, len(tokens)] + [0] * 253)))
        fh.write(struct.pack("<%dH" % len(tokens), *tokens))


def step_losses(out):
    """The losses of the step lines a trainer printed."""
    return [float(x) for x in re.findall(r"^step\s+\d+/\d+ \| loss ([\d.]+)", out, re.M)]
