"""Benchmark: CPU seconds per EAT-Map (vlbias.report.mleat.draw_maps, one worker, this process).

The ML-EAT results are computed once on random embeddings of the shipped tests' sizes (|X|, |Y| 8 to 40,
|A|, |B| 8 to 25, a few with a pattern, one with near-identical vectors, so its cosines are uninformative),
titled and labelled like write_mleat's; then drawn to a temporary folder. The first map is timed apart (it
pays for the fonts and the figure's layout), the rest as CPU seconds per map.

    python benchmarks/eat_maps.py [--maps 40]
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from vlbias.report.mleat import draw_maps
from vlbias.stats.mleat import mleat


def results(n, seed=0):
    """``n`` ML-EAT results on random 64-d embeddings: every fourth with X near A and Y near B (a pattern),
    the last one all near one vector (cosine uninformative)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        nx, na = int(rng.integers(8, 41)), int(rng.integers(8, 26))
        base = rng.normal(size=(4, 64))
        if i == n - 1:
            base[:] = base[0]
        elif i % 4 == 0:
            base[2], base[3] = base[0], base[1]
        sets = [b + (0.05 if i == n - 1 else 1.0) * rng.normal(size=(k, 64)) for b, k in zip(base, (nx, nx, na, na))]
        out.append(mleat(*sets, n_samples=1000, seed=i))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--maps", type=int, default=40)
    args = ap.parse_args()
    labels = {"X": "Career words of the test", "Y": "Family", "A": "Male names (European American)",
              "B": "Female names (European American)"}
    found = results(args.maps)
    with tempfile.TemporaryDirectory() as tmp:
        maps = [(r, Path(tmp, f"{i}.png"), f"Test number {i} with a long name on some-model-ViT-B-32" if i % 2 else "",
                 labels) for i, r in enumerate(found)]
        t = time.process_time()
        draw_maps(maps[:1])
        first = time.process_time() - t
        t = time.process_time()
        draw_maps(maps[1:])
        rest = (time.process_time() - t) / (len(maps) - 1)
        size = np.mean([m[1].stat().st_size for m in maps]) / 1e3
    print(f"first map {first:.3f} CPU-s; then {rest:.3f} CPU-s per map over {len(maps) - 1}; mean PNG {size:.0f} kB")


if __name__ == "__main__":
    main()
