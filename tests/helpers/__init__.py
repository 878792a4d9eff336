"""What several test modules share that is no fixture: tiny models and their inputs (``helpers.tiny``),
the tiny generated projects the real Snakefile runs on (``helpers.project``, ``helpers.grounded``),
simulations (``helpers.stats``). Test modules import from here, never from each other or from a
conftest.py; fixtures live in the conftest.py of the folder whose tests use them."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def plain_module(name, path):
    """``path`` imported as module ``name`` as it is (valid Python 3; a reference implementation's file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
