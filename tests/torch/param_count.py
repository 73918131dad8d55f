"""tests/torch/param_count.py MNIST_PROG CONVNET_PROG DATA

The start-up line's parameter count is PyTorch's
sum(p.numel() for p in model.parameters()) for the same model, and the
buffers it names apart are sum(b.numel() for b in model.buffers())
(running_mean, running_var, num_batches_tracked): SimpleNet (no buffers)
and the ConvNet (batch norm). The PyTorch models are the tests' references
(simplenet_ref.py, convnet_equiv.py), written independently of the
compiler. Control: the counts the runtime printed before (its parameter
slab, buffers and alignment padding included: 535824 and 29168, as pasted
in examples/*/README.md before this change) would fail the check."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simplenet_ref import SimpleNet  # noqa: E402
from convnet_equiv import ConvNet  # noqa: E402


def startup(prog, data):
    out = subprocess.run([prog, "--data", data, "--max-steps", "1", "--epochs", "1", "--threads", "1"],
                         capture_output=True, text=True, timeout=300)
    line = next((l for l in out.stdout.splitlines() if l.startswith("model ")), None)
    if out.returncode != 0 or line is None:
        sys.exit("%s failed (%d): %s" % (prog, out.returncode, out.stderr))
    m = re.match(r"model \S+: (\d+) parameters(?: \(\+ (\d+) buffer values\))?  train", line)
    if not m:
        sys.exit("no parameter count in %r" % line)
    return int(m.group(1)), int(m.group(2) or 0), line


def main():
    mnist, convnet, data = sys.argv[1:4]
    fails = 0
    with tempfile.TemporaryDirectory() as small:
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "..", "runtime", "small_idx.py"), data, small, "64", "16"],
                       check=True, stdout=subprocess.DEVNULL)
        for prog, model, old in ((mnist, SimpleNet(), 535824), (convnet, ConvNet(), 29168)):
            want_p = sum(p.numel() for p in model.parameters())
            want_b = sum(b.numel() for b in model.buffers())
            got_p, got_b, line = startup(prog, small)
            ok = (got_p, got_b) == (want_p, want_b)
            print("%s %s: %d parameters (+ %d buffer values); PyTorch: %d (+ %d)" % (
                "PASS" if ok else "FAIL", type(model).__name__, got_p, got_b, want_p, want_b))
            fails += not ok
            if (old, 0) == (want_p, want_b):
                print("FAIL control: the old count %d passes for %s" % (old, type(model).__name__))
                fails += 1
    print("param-count: %d failed" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
