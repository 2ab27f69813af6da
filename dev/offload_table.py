#!/usr/bin/env python3
"""offload_table.py: `make offload-table`, which GPT-2 sizes fit which GPU with which --offload mode,
and the predicted cost of --offload cpu. For GPT-2 124M (d12), 350M (d24), 774M (d36) and 1.5B (d48)
at B = 4, T = 1024 in the bf16 build, it asks the GPU trainer's memory model (--memory-report 1:
nothing is allocated, no GPU is needed) for the device memory of each mode (the optimizer state on
the device, streamed from the host, updated by the host) at -r 1 and -r 2, and prints per GPU size
the first mode that fits with its -r (off before stream before cpu, -r 1 before -r 2), leaving
1 GiB of the GPU for the CUDA context. Then the --offload cpu prediction the same report prints
(llmc's offload_predict): the forward and backward time at an achieved GPU rate, the gradients
down and the parameters up at a PCIe rate, and the host update, measured on this machine on a
one-layer slice and scaled to --host-threads, never faster than the bytes it moves at --host-gbs;
undelayed it all adds to the step, with --offload-delay 1 only what the GPU step does not hide.
Two batches: one micro-batch (4,096 tokens) and GPT-2's 0.5M tokens (-d 524288, 128 micro-steps).

  offload_table.py --bin build/train_gpt2cu_emu_bf16 [--gpu-tflops 400] [--pcie-gbs 25]
                   [--host-threads 16] [--host-gbs 100]
"""
import argparse
import re
import subprocess
import sys

MODELS = [("d12", "124M"), ("d24", "350M"), ("d36", "774M"), ("d48", "1.5B")]
GPUS = [24, 40, 80]  # GiB
MODES = ["off", "stream", "cpu"]


def report(binary, flags):
    r = subprocess.run([binary, "--memory-report", "1"] + flags, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("offload_table.py: %s failed: %s" % (" ".join(flags), r.stderr.strip()[-300:]))
    return r.stdout


def grab(pattern, text, cast=float):
    m = re.search(pattern, text, re.M)
    if m is None:
        sys.exit("offload_table.py: no match for %r in:\n%s" % (pattern, text[-1500:]))
    return [cast(x) for x in m.groups()] if len(m.groups()) > 1 else cast(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the GPU trainer, bf16 (the harness build will do: nothing runs on a GPU)")
    ap.add_argument("--gpu-tflops", default="400", help="achieved TFLOP/s of the forward and backward passes")
    ap.add_argument("--pcie-gbs", default="25", help="host<->device GB/s each way")
    ap.add_argument("--host-threads", default="16", help="the host update's threads")
    ap.add_argument("--host-gbs", default="100", help="the host's memory GB/s (0: measured here)")
    a = ap.parse_args()
    base = ["-b", "4", "-t", "1024", "--predict-gpu-tflops", a.gpu_tflops, "--predict-pcie-gbs", a.pcie_gbs,
            "--predict-host-threads", a.host_threads, "--predict-host-gbs", a.host_gbs]
    print("GPU memory at B = 4, T = 1024, bf16 (MiB, the memory model; cpu: host, the host memory), and the first "
          "mode that fits each GPU (1 GiB left for the CUDA context):\n")
    print("| GPT-2 | off, -r 1 | stream, -r 2 | cpu, -r 2 | cpu: host | 24 GB | 40 GB | 80 GB |")
    print("|---|---|---|---|---|---|---|---|")
    predictions = []
    for desc, name in MODELS:
        total = {}
        host = 0.0
        for mode in MODES:
            for r in (1, 2):
                out = report(a.bin, ["-e", desc, "-r", str(r), "--offload", mode] + base)
                total[(mode, r)] = grab(r"^\| total\s*\|\s*([\d.]+)", out)
                if mode == "cpu" and r == 2:
                    host = grab(r"offloaded to pinned host memory: ([\d.]+) MiB", out)
                    params = grab(r"^parameters: (\d+);", out, int)
        fits = []
        for gib in GPUS:
            pick = next(("%s, -r %d" % (m, r) for m in MODES for r in (1, 2) if total[(m, r)] <= (gib - 1) * 1024.0), "none")
            fits.append(pick)
        print("| %s (%s) | %.0f | %.0f | %.0f | %.0f | %s |" % (name, desc, total[("off", 1)], total[("stream", 2)],
              total[("cpu", 2)], host, " | ".join(fits)))
        for tokens, extra in ((4096, []), (524288, ["-d", "524288"])):
            out = report(a.bin, ["-e", desc, "-r", "2", "--offload", "cpu"] + base + extra)
            gpu = grab(r"forward and backward ([\d.]+) ms", out)
            down, upd, up = grab(r"gradients down ([\d.]+) ms, host update ([\d.]+) ms, parameters up ([\d.]+) ms", out)
            und = grab(r"undelayed: step [\d.]+ ms, [\d.]+ ms exposed \(\+(\d+)%\)", out, int)
            dly = grab(r"--offload-delay 1: step [\d.]+ ms, [\d.]+ ms hidden under the GPU step, [\d.]+ ms exposed \(\+(\d+)%\)",
                       out, int)
            measured = grab(r"measured here at ([\d.]+) ns/param with (\d+) thread", out)
            predictions.append((name, desc, tokens, gpu, down, upd, up, und, dly, measured))
    print("\n--offload cpu, -r 2, predicted (GPU %s TFLOP/s achieved, PCIe %s GB/s each way, host update on %s threads "
          "at most %s GB/s; measured here: see the last column):\n" % (a.gpu_tflops, a.pcie_gbs, a.host_threads, a.host_gbs))
    print("| GPT-2 | tokens | GPU ms | down + up ms | host ms | undelayed | delayed | measured here |")
    print("|---|---|---|---|---|---|---|---|")
    for name, desc, tokens, gpu, down, upd, up, und, dly, (ns, thr) in predictions:
        print("| %s | %d | %.0f | %.0f | %.0f | +%d%% | +%d%% | %.2f ns/param, %d thr. |" % (
            name, tokens, gpu, down + up, upd, und, dly, ns, int(thr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
