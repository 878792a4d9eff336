"""Recovery from a hard-killed run (vlbias.workdir.claim): stale locks and .part files go, a live
run's stay."""

import subprocess
import sys

HOLD = """
import sys, time
from vlbias.workdir import claim
claim(sys.argv[1])
print("holding", flush=True)
time.sleep(60)
"""


def leftovers(root):
    (root / ".snakemake/locks").mkdir(parents=True)
    (root / ".snakemake/locks/0.output.lock").write_text("results/x.csv\n")
    (root / "results/sub").mkdir(parents=True)
    part = root / "results/sub/.x.csv.abc123.part"
    part.write_text("half")
    keep = root / "results/sub/x.csv"
    keep.write_text("done")
    return part, keep


def test_with_no_run_alive_what_a_killed_run_left_is_removed(tmp_path):
    part, keep = leftovers(tmp_path)
    out = claim_in_a_new_process(tmp_path)  # claim() keeps its lock for the life of the process
    assert ".x.csv.abc123.part" in out and "0.output.lock" in out
    assert not part.exists() and keep.exists() and not list((tmp_path / ".snakemake/locks").iterdir())


def claim_in_a_new_process(root):
    return subprocess.run([sys.executable, "-c", f"from vlbias.workdir import claim; print(claim({str(root)!r}))"],
                          capture_output=True, text=True, check=True).stdout


def test_a_live_runs_locks_and_temporary_files_are_kept(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        part, _ = leftovers(tmp_path)  # the live run's lock and temporary file
        assert claim_in_a_new_process(tmp_path).strip() == "[]"
        assert part.exists() and list((tmp_path / ".snakemake/locks").iterdir())
    finally:
        holder.kill()
        holder.wait()
    out = claim_in_a_new_process(tmp_path)
    assert "part" in out and not part.exists()  # its holder died (killed): now they are stale
