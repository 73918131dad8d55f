"""tests/cli/plot_png.py: what a rendered loss-curve PNG shows.

  plot_png.py PNG RUNS [--expect-blank]

Checks, on the pixels Chromium drew: the picture is not blank; the axes
frame is there (dark rows and columns spanning most of the plot area); a
title and tick labels are drawn (dark pixels above the frame and left of
it); each of the first RUNS run colours (rt_plot.c's palette) covers a
curve's worth of pixels inside the frame. With --expect-blank the same
checks must FAIL (the control: a plot with no data draws no curve).
"""
import sys

from PIL import Image

COLOURS = [(0x1f, 0x77, 0xb4), (0xd6, 0x27, 0x28), (0x2c, 0xa0, 0x2c)]


def near(p, c, tol=40):
    return all(abs(p[i] - c[i]) <= tol for i in range(3))


def main():
    path, runs = sys.argv[1], int(sys.argv[2])
    expect_blank = "--expect-blank" in sys.argv
    im = Image.open(path).convert("RGB")
    w, h = im.size
    px = im.load()
    dark = lambda p: sum(p) < 400
    problems = []
    nonwhite = sum(1 for y in range(h) for x in range(w) if sum(px[x, y]) < 720)
    if nonwhite < 0.01 * w * h:
        problems.append("blank: %d non-white pixels" % nonwhite)
    # the frame: rt_plot.c draws it at x 90..860, y 70..460 (of 960x540)
    rows = [y for y in range(h) if sum(1 for x in range(w) if dark(px[x, y])) > 0.6 * w]
    cols = [x for x in range(w) if sum(1 for y in range(h) if dark(px[x, y])) > 0.55 * h]
    if len(rows) < 2 or len(cols) < 2:
        problems.append("no axes frame (%d long dark rows, %d long dark columns)" % (len(rows), len(cols)))
    else:
        top, bottom, left, right = min(rows), max(rows), min(cols), max(cols)
        title = sum(1 for y in range(0, top) for x in range(w) if dark(px[x, y]))
        ticks = sum(1 for y in range(top, bottom) for x in range(0, left) if dark(px[x, y]))
        if title < 50:
            problems.append("no title above the frame (%d dark pixels)" % title)
        if ticks < 50:
            problems.append("no tick labels left of the frame (%d dark pixels)" % ticks)
        for r in range(runs):
            n = sum(1 for y in range(top + 2, bottom - 1) for x in range(left + 2, right - 1)
                    if near(px[x, y], COLOURS[r]))
            if n < 300:
                problems.append("run %d: %d pixels of its colour inside the frame (want >= 300)" % (r, n))
            else:
                print("run %d: %d pixels of its colour inside the frame" % (r, n))
    if expect_blank:
        if problems:
            print("control: the checks fail on a plot without data: " + "; ".join(problems))
            return 0
        print("FAIL: the checks passed on a plot without data: they cannot tell")
        return 1
    if problems:
        print("FAIL: " + "; ".join(problems))
        return 1
    print("PASS %s: %dx%d, frame, title, ticks and %d run(s) drawn" % (path, w, h, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
