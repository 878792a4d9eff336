"""A job's terminal: summary lines; per-item detail (extra=FILE_ONLY) in its log file only."""

import subprocess
import sys

JOB = """
import logging, sys
from vlbias.logs import FILE_ONLY, Progress, setup_logging
setup_logging(sys.argv[1])
log = logging.getLogger("job")
progress = Progress(3, "images", log)
for i in range(3):
    log.warning("image %d: not in mirror", i, extra=FILE_ONLY)
    progress.advance()
progress.done("0 obtained", terminal=False)  # the summary line below says it
log.info("0 of 3 images arrived; 3 not in the mirror")
raise SystemExit(0)
"""


def test_per_item_detail_goes_to_the_log_file_only(tmp_path):
    log = tmp_path / "job.log"
    proc = subprocess.run([sys.executable, "-c", JOB, str(log)], capture_output=True, text=True, check=True)
    assert [line.split(" job ")[1] for line in proc.stderr.splitlines()] == [
        "INFO 0 of 3 images arrived; 3 not in the mirror"]
    assert [line.split(" job ")[1] for line in log.read_text().splitlines()] == [
        "WARNING image 0: not in mirror", "WARNING image 1: not in mirror", "WARNING image 2: not in mirror",
        "INFO images: 3/3 done in 0s; 0 obtained", "INFO 0 of 3 images arrived; 3 not in the mirror"]
