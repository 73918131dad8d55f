#!/usr/bin/python3
"""scripts/sklearn_data.py OUT_DIR: the real data sets scikit-learn ships as
files (Debian's python3-sklearn, no download), written in the formats the
train block's data sources read:

  digits.npz                 8x8 handwritten digits, 10 classes: x_train/x_test
                             float32 [N, 1, 8, 8] (pixel values 0..16), y int64;
                             train_test_split(test_size=0.25, stratify=y,
                             random_state=0): 1347 train, 450 test
  breast_cancer.csv          569 tumours, 30 features, target 'benign' (0/1, as
                             sklearn's target: 1 = benign)
  diabetes.csv               442 patients, 10 features (sklearn's scaled ones),
                             target 'progression' (disease progression after a year)
  digits_multilabel.csv      the 1797 digits' 64 pixels p0..p63 with three labels
                             of the digit at once: is_even, is_gt4 (> 4),
                             is_prime (2, 3, 5, 7)
  iris.csv                   150 flowers, 4 features, target 'species' as text
                             (setosa, versicolor, virginica)

The CSV files are written by Python's csv module, one header row.
"""
import csv
import os
import sys

import numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split


def write_csv(path, names, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        w.writerows(rows)
    os.replace(tmp, path)


def main(out):
    os.makedirs(out, exist_ok=True)
    d = datasets.load_digits()
    x = d.data.astype(np.float32).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    tmp = os.path.join(out, "digits.tmp.npz")
    np.savez_compressed(tmp, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    os.replace(tmp, os.path.join(out, "digits.npz"))

    b = datasets.load_breast_cancer()
    names = [n.replace(" ", "_") for n in b.feature_names] + ["benign"]
    write_csv(os.path.join(out, "breast_cancer.csv"), names,
              [[repr(float(v)) for v in r] + [int(t)] for r, t in zip(b.data, b.target)])

    g = datasets.load_diabetes()
    write_csv(os.path.join(out, "diabetes.csv"), list(g.feature_names) + ["progression"],
              [[repr(float(v)) for v in r] + [repr(float(t))] for r, t in zip(g.data, g.target)])

    px = ["p%d" % i for i in range(64)]
    rows = []
    for r, t in zip(d.data, d.target):
        rows.append([int(v) for v in r] + [int(t % 2 == 0), int(t > 4), int(t in (2, 3, 5, 7))])
    write_csv(os.path.join(out, "digits_multilabel.csv"), px + ["is_even", "is_gt4", "is_prime"], rows)

    i = datasets.load_iris()
    write_csv(os.path.join(out, "iris.csv"), ["sepal_length", "sepal_width", "petal_length", "petal_width",
                                              "species"],
              [[repr(float(v)) for v in r] + [i.target_names[t]] for r, t in zip(i.data, i.target)])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    main(sys.argv[1])
