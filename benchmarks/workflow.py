"""Benchmark: the workflow itself, as a user runs it on the shipped config.

In a fresh working directory (a copy of config/ and resources/, the repository's Snakefile, the data
mirror of config/config.yaml), with the virtual environment present:

1. clean build of the default target (`snakemake --cores N`): every table under results/;
2. no-op rerun (nothing to do);
3. one iEAT stimulus file edited, its table rebuilt;
4. one SEAT stimulus file edited (a word added), its table rebuilt (the text encoder's job reruns,
   reading every unchanged text from its cache).

For each: wall seconds, CPU seconds (user + sys of snakemake and every job process it started)
and the jobs run (each job but `all` is one Python process). Snakemake runs as `make run` runs it:
without PYTHONDONTWRITEBYTECODE (the Makefile unexports it), so the first job to import a module
writes its bytecode (vlbias's, and that of the packages pip installed without it) and the later
jobs read it; with it set, as on this project's CI machine, each job would compile again what it
imports.

    python benchmarks/workflow.py [--cores 2] [--keep DIR]
"""

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from vlbias.suites.plan import DEFAULT_MIRROR

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def run(workdir, cores, *args):
    """(wall s, cpu s, {rule: jobs run}) of one snakemake invocation in ``workdir``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", cores,
                           *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"snakemake failed:\n{proc.stderr[-5000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    jobs = {}
    for rule in re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", proc.stderr, re.M):
        jobs[rule] = jobs.get(rule, 0) + 1
    return wall, cpu, jobs


def edit(path, old, new):
    text = path.read_text()
    if old not in text:
        sys.exit(f"{path}: '{old}' not found")
    path.write_text(text.replace(old, new, 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", default="2")
    ap.add_argument("--keep", help="work in this (new) directory and keep it, instead of a temporary one")
    args = ap.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="vlbias-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for folder in ("config", "resources"):
        shutil.copytree(REPO / folder, workdir / folder)
    config = yaml.safe_load((workdir / "config/config.yaml").read_text())
    if config["mirror"]:  # `auto` looks beside the working directory: here, beside the repository
        where = DEFAULT_MIRROR if config["mirror"] == "auto" else config["mirror"]
        config["mirror"] = str((REPO / where).resolve())
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    steps = [("clean build of the default target", None)]
    steps.append(("no-op rerun", None))
    steps.append(("one iEAT stimulus edited (gender-science), table rebuilt",
                  lambda: edit(workdir / "resources/stimuli/ieat/gender-science.yaml", "label: ", "label: The ")))
    steps.append(("one SEAT stimulus edited (weat1: a flower added), table rebuilt",
                  lambda: edit(workdir / "resources/stimuli/seat/weat1.yaml", "items:\n", "items:\n  - edelweiss\n")))
    print(f"workdir {workdir}, --cores {args.cores}")
    print(f"{'step':62s} {'wall s':>7s} {'CPU s':>7s}  jobs")
    try:
        for name, change in steps:
            if change:
                change()
            wall, cpu, jobs = run(workdir, args.cores)
            print(f"{name:62s} {wall:7.1f} {cpu:7.1f}  {sum(n for r, n in jobs.items() if r != 'all')} "
                  f"{dict(sorted(jobs.items())) or ''}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
