#!/usr/bin/python3
"""Benchmark: training at precision fp32 against bf16, on 1 and 2 threads,
measured in the same run.

usage: precision.py FP32_PROGRAM BF16_PROGRAM [--data DIR] [--repeats R]
                    [--threads 1,2] [--max-steps N] [--csv FILE]

FP32_PROGRAM is a model compiled by cddpc (models/mnist.net,
models/mnist_convnet.net), BF16_PROGRAM the same model with `precision
bf16` (bench/mnist_bf16.net, bench/convnet_bf16.net). Each repeat runs, per
thread count, in turn: fp32; bf16 (GEMMs and convolutions on bf16 operands
through oneDNN where the CPU has AVX512-BF16: runtime/rt_dnnl_mm.c,
rt_dnnl.c); and bf16 with CDDP_DNNL=0, the fp32 emulation (rounded fp32
copies) that runs where the CPU lacks AVX512-BF16. Each is `PROGRAM
--epochs 1 --threads T` (and `--max-steps N` when given) with
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS = T; the time is the epoch's
`seconds` from --metrics (the training loop only). Prints the median of
each and its ratio to fp32, and the load average before and after: other
processes on the cores inflate the times.
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def epoch_s(program, data, threads, extra_env, max_steps):
    work = tempfile.mkdtemp(prefix="cddpc-bench-")
    try:
        metrics = os.path.join(work, "m.csv")
        cmd = [program, "--data", data, "--epochs", "1", "--threads", str(threads), "--metrics", metrics]
        if max_steps:
            cmd += ["--max-steps", str(max_steps)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), **extra_env)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        if r.returncode != 0:
            sys.stdout.write(r.stdout.decode("utf-8", "replace")[-4000:])
            raise RuntimeError("%s exited with %d" % (" ".join(cmd), r.returncode))
        with open(metrics, newline="") as f:
            rows = list(csv.DictReader(f))
        return float(rows[-1]["seconds"]), float(rows[-1]["test_acc"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="training: fp32 against bf16")
    ap.add_argument("fp32")
    ap.add_argument("bf16")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                                   "fashion-mnist"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--max-steps", type=int, default=0, help="train N steps, not the whole epoch")
    ap.add_argument("--csv", help="also write the table here")
    a = ap.parse_args()
    data = os.path.abspath(a.data)
    threads = [int(t) for t in a.threads.split(",")]
    runs = [("fp32", os.path.abspath(a.fp32), {}),
            ("bf16", os.path.abspath(a.bf16), {}),
            ("bf16 emulated", os.path.abspath(a.bf16), {"CDDP_DNNL": "0"})]
    for _, p, _ in runs:
        if not os.access(p, os.X_OK):
            sys.exit("precision.py: %s is not an executable" % p)
    print("bench-precision: %s against %s, %s, median of %d runs; load %s"
          % (os.path.basename(runs[0][1]), os.path.basename(runs[1][1]),
             "%d steps" % a.max_steps if a.max_steps else "one Fashion-MNIST epoch", a.repeats,
             " ".join("%.2f" % x for x in os.getloadavg())))
    sys.stdout.flush()
    times = {(name, t): [] for name, _, _ in runs for t in threads}
    acc = {}
    for r in range(a.repeats):
        for t in threads:
            line = []
            for name, prog, env in runs:
                s, acc[name] = epoch_s(prog, data, t, env, a.max_steps)
                times[(name, t)].append(s)
                line.append("%s %.3f s" % (name, s))
            print("  run %d, %d thread(s): %s" % (r + 1, t, ", ".join(line)))
            sys.stdout.flush()
    print("%-8s %-14s %9s %9s   %s" % ("threads", "precision", "train s", "/ fp32", "(runs, s)"))
    rows = []
    for t in threads:
        base = statistics.median(times[("fp32", t)])
        for name, _, _ in runs:
            m = statistics.median(times[(name, t)])
            rows.append((t, name, m, m / base))
            print("%-8d %-14s %9.3f %9.2f   (%s)" % (t, name, m, m / base,
                                                  " ".join("%.3f" % x for x in times[(name, t)])))
    print("test_acc of the last runs: %s" % ", ".join("%s %.4f" % (n, acc[n]) for n, _, _ in runs))
    print("load after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("threads,precision,train_s,ratio_to_fp32\n")
            for row in rows:
                f.write("%d,%s,%.4f,%.3f\n" % row)


if __name__ == "__main__":
    main()
