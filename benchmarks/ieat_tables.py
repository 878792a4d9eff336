"""Benchmark: wall time of the whole iEAT table set.

1. Through Snakemake, as a user runs it: ``snakemake --forceall`` on every iEAT table and the
   specificity check (fetching the published embeddings from the mirror, one job per
   model × test, tables), with --cores N.
2. The statistics alone in one process: every (test, model) of the configured tables on the
   stores that run built, to separate the engine's share from the orchestration's.

    python benchmarks/ieat_tables.py [--cores 2]
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

from vlbias.associate import run_test
from vlbias.io.stimuli import load_stimulus

REPO = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", default="2")
    args = ap.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    ieat = config["ieat"]
    targets = [f"results/ieat/{t}.csv" for t in ieat["tables"]] + ["results/ieat/specificity.csv"]

    snakemake = str(Path(sys.executable).with_name("snakemake"))
    t = time.perf_counter()
    subprocess.run([snakemake, *targets, "--cores", args.cores, "--forceall", "--quiet"],
                   cwd=REPO, check=True)
    wall = time.perf_counter() - t

    jobs = [(test, model) for tab in ieat["tables"].values() for test in tab["tests"] for model in tab["models"]]
    t = time.perf_counter()
    for test, model in jobs:
        run_test(load_stimulus(REPO / ieat["stimuli"] / f"{test}.yaml"),
                 REPO / f"results/embeddings/ieat/{model}.h5", model, **{k: config["stats"][k] for k in ("n_samples", "seed", "exact")})
    stats = time.perf_counter() - t

    print(f"iEAT table set via snakemake --cores {args.cores} --forceall: {wall:.1f} s "
          f"({len(ieat['tables'])} tables, {len(jobs)} tests x models, specificity)")
    print(f"statistics alone, one process ({config['stats']['n_samples']:,} samples): {stats:.1f} s")


if __name__ == "__main__":
    main()
