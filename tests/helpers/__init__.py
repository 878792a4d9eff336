"""What several test modules share that is no fixture: tiny models and their inputs (``helpers.tiny``),
the tiny generated projects the real Snakefile runs on (``helpers.project``, ``helpers.grounded``),
simulations (``helpers.stats``). Test modules import from here, never from each other or from a
conftest.py; fixtures live in the conftest.py of the folder whose tests use them."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
