#!/usr/bin/env python3
"""tests/runtime/profile.py CDDPC DATA: the program's --profile table.

Compiles SimpleNet, trains 13 steps with --profile and given peaks, and
checks the train plan's table against `cddpc --report` (the compiler's
cost model, printed by the compiler, not the program): the same kernels in
the same order; 10 timed calls each (3 warm-up calls left out); min <=
median <= max; the FLOPs and bytes implied by GFLOP/s and GB/s at the
median equal --report's MFLOP and KiB at the batch; the roofline fraction
is max(FLOPs / peak, bytes / bandwidth) over the median. A bad peak value
is refused with exit status 2."""
import os, re, subprocess, sys, tempfile

cddpc, data = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp()
prog = os.path.join(tmp, "simplenet")
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


subprocess.run([cddpc, "models/mnist.net", "-o", prog], check=True)
rep = subprocess.run([cddpc, "models/mnist.net", "--report"], check=True, capture_output=True, text=True).stdout
report = []
for line in rep.split("plan eval")[0].splitlines():
    m = re.match(r"\s+(t\d+_\S+)\s+\d+\s+([\d.]+)\s+([\d.]+)\s", line)
    if m:
        report.append((m.group(1), float(m.group(2)) * 1e6, float(m.group(3)) * 1024))
check(len(report) >= 5, "--report lists the train kernels")

GF, GB = 50.0, 4.0
r = subprocess.run([prog, "--data", data, "--epochs", "1", "--max-steps", "13", "--threads", "1", "--profile",
                    "--peak-gflops", str(GF), "--peak-gbs", str(GB)], capture_output=True, text=True)
check(r.returncode == 0, f"the run succeeds ({r.returncode}: {r.stderr})")
out = r.stdout
head = re.search(r"profile: train plan, (\d+) kernels, (\d+) calls .*batch (\d+); peaks ([\d.]+) GFLOP/s, ([\d.]+) GB/s",
                 out)
check(head is not None, "the train table's heading")
if head:
    check(int(head.group(2)) == 13, f"13 plan calls, got {head.group(2)}")
    check(float(head.group(4)) == GF and float(head.group(5)) == GB, "the given peaks are the table's")
table = out.split("profile: train plan")[1].split("profile: eval plan")[0] if "profile: eval plan" in out else ""
rows = re.findall(r"^\s+(t\d+_\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+%\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%$",
                  table, re.M)
check([x[0] for x in rows] == [x[0] for x in report], f"the kernels of --report in its order: {[x[0] for x in rows]}")
for (name, calls, med, lo, hi, gfs, gbs, roof), (_, flops, nbytes) in zip(rows, report):
    calls, med, lo, hi, gfs, gbs, roof = int(calls), float(med), float(lo), float(hi), float(gfs), float(gbs), float(roof)
    check(calls == 10, f"{name}: 10 timed calls, got {calls}")
    check(lo <= med <= hi, f"{name}: min {lo} <= median {med} <= max {hi}")
    secs = med * 1e-6
    # printed with 2 decimals: compare within the rounding of each number
    def near(got, want, rnd):
        return abs(got - want) <= rnd + 0.01 * abs(want)
    # and --report's MFLOP and KiB with 3 decimals
    check(near(gfs * 1e9 * secs, flops, 0.005e9 * secs + 500), f"{name}: {gfs} GFLOP/s x {med} us is {flops:.0f} FLOPs")
    check(near(gbs * 1e9 * secs, nbytes, 0.005e9 * secs + 0.5), f"{name}: {gbs} GB/s x {med} us is {nbytes:.0f} bytes")
    bound = max(flops / (GF * 1e9), nbytes / (GB * 1e9))
    check(abs(roof - 100 * bound / secs) <= 0.05 + 0.01 * roof, f"{name}: roofline {roof}% of {100 * bound / secs:.2f}%")
r = subprocess.run([prog, "--data", data, "--profile", "--peak-gbs", "-3"], capture_output=True, text=True)
check(r.returncode == 2 and "--peak-gbs" in r.stderr, f"a bad peak is refused with 2: {r.returncode} {r.stderr}")
if fails:
    print("FAIL profile:\n  " + "\n  ".join(fails))
    print(out)
    sys.exit(1)
print(f"PASS profile: {len(rows)} train kernels, 10 timed calls each, rates and roofline match --report's costs")
