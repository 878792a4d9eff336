"""Recovery from a hard-killed run (vlbias.workdir.claim): stale locks and abandoned .part files go;
a live run's locks, and every .part file a live writer holds (of this run, of `vlbias run`, of a
second checkout sharing the cache), stay."""

import subprocess
import sys

import h5py

HOLD = """
import sys, time
from pathlib import Path
from vlbias.io.atomic import atomic_path
from vlbias.workdir import claim
claim(sys.argv[1])
with atomic_path(Path(sys.argv[1], "results/sub/y.csv")) as tmp:
    tmp.write_text("half")
    print("holding", flush=True)
    time.sleep(60)
"""

# a writer outside any Snakemake run (`vlbias run`, a job of another checkout sharing the cache):
# it prints its temporary files, and finishes them when told (a line on stdin)
WRITER = """
import sys
from pathlib import Path
import numpy as np
from vlbias.io.atomic import atomic_path
from vlbias.io.hdf5 import atomic_hdf5
with atomic_path(sys.argv[1]) as tmp, atomic_hdf5(sys.argv[2]) as f:
    tmp.write_text("half")
    f.create_dataset("x", data=np.arange(3))
    print(tmp, f.filename, flush=True)
    sys.stdin.readline()
    with open(tmp, "a") as out:
        out.write(" and the rest")
    f.create_dataset("y", data=np.arange(4))
print("finished", flush=True)
"""


def leftovers(root):
    (root / ".snakemake/locks").mkdir(parents=True, exist_ok=True)
    (root / ".snakemake/locks/0.output.lock").write_text("results/x.csv\n")
    (root / "results/sub").mkdir(parents=True, exist_ok=True)
    part = root / "results/sub/.x.csv.abc_1234.part"  # atomic_path's name, no writer holds it
    part.write_text("half")
    keep = root / "results/sub/x.csv"
    keep.write_text("done")
    return part, keep


def test_with_no_run_alive_what_a_killed_run_left_is_removed(tmp_path):
    part, keep = leftovers(tmp_path)
    foreign = [tmp_path / "results/sub" / name for name in (".foo.part", ".x.csv.ABC12345.part", ".x.csv.abc1234.part")]
    for p in foreign:  # not of our naming pattern (".<name>.<8 of mkstemp's characters>.part")
        p.write_text("someone else's")
    out = claim_in_a_new_process(tmp_path)  # claim() keeps its lock for the life of the process
    assert ".x.csv.abc_1234.part" in out and "0.output.lock" in out
    assert not part.exists() and keep.exists() and not list((tmp_path / ".snakemake/locks").iterdir())
    assert all(p.exists() for p in foreign)


def claim_in_a_new_process(root, folders=("results",)):
    return subprocess.run([sys.executable, "-c", "from vlbias.workdir import claim; "
                           f"print(claim({str(root)!r}, {list(folders)!r}))"],
                          capture_output=True, text=True, check=True).stdout


def test_a_live_runs_locks_and_temporary_files_are_kept(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        part, _ = leftovers(tmp_path)  # the live run's lock, and an abandoned .part: removed all the same
        [held] = (tmp_path / "results/sub").glob(".y.csv.*.part")
        assert claim_in_a_new_process(tmp_path).strip() == f"[PosixPath({str(part)!r})]"
        assert held.exists() and list((tmp_path / ".snakemake/locks").iterdir())
    finally:
        holder.kill()
        holder.wait()
    out = claim_in_a_new_process(tmp_path)
    assert ".y.csv." in out and not held.exists()  # its holder died (killed): now they are stale


def test_a_writer_outside_this_run_keeps_its_temporary_files(tmp_path):
    """`snakemake -n` while `vlbias run`, or another checkout sharing the cache,
    was writing deleted the writer's .part files, and the writer crashed."""
    results, cache = tmp_path / "results", tmp_path / "shared-cache"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(results / "t.csv"), str(cache / "shard.h5")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        parts = writer.stdout.readline().split()
        abandoned = cache / ".old.h5.k1llz9_x.part"
        abandoned.write_text("left by a killed job")
        out = claim_in_a_new_process(tmp_path, ["results", "shared-cache"])
        assert out.strip() == f"[PosixPath({str(abandoned)!r})]" and not abandoned.exists()
        assert all((tmp_path / p).exists() for p in parts)
        writer.stdin.write("go on\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "finished"
        writer.wait(30)
    finally:
        if writer.returncode is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0 and (results / "t.csv").read_text() == "half and the rest"
    with h5py.File(cache / "shard.h5", "r") as f:  # readable by others: no lock of the writer is left
        assert list(f["y"][()]) == [0, 1, 2, 3]
    assert not list(results.glob(".*.part")) + list(cache.glob(".*.part"))
