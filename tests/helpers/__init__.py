"""What several test modules share that is no fixture: tiny models and their inputs (``helpers.tiny``),
what the tests of the region-reading VL encoders share (``helpers.vl``), the tiny generated projects
the real Snakefile runs on (``helpers.project``, ``helpers.grounded``),
simulations (``helpers.stats``), the reference implementations the differential tests compare with
(``checkout``, ``plain_module``; bottom-up-attention's pieces in ``helpers.bottom_up``). Test modules
import from here, never from each other or from a conftest.py; fixtures live in the conftest.py of the
folder whose tests use them."""

import ast
import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def plain_module(name, path):
    """``path`` imported as module ``name`` as it is (valid Python 3; a reference implementation's file)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def functions_of(path, names, imports, **names_in_scope):
    """The top-level functions ``names`` of the Python file ``path``, run with ``imports`` (source lines) and
    ``names_in_scope`` only: a reference's functions whose module imports what is not at hand (its datasets,
    its model fork). {name: function}."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    module = ast.Module(body=ast.parse(imports).body + body, type_ignores=[])
    space = dict(names_in_scope)
    exec(compile(module, str(path), "exec"), space)
    return {name: space[name] for name in names}


def checkout(variable, what, *needs):
    """The reference checkout named by the environment variable ``variable``, or a skip saying why: it is
    unset (set it to ``what``: the repository and commit to check out), or lacks one of ``needs`` (paths
    inside it; one ending in "/" a folder)."""
    __tracebackhide__ = True  # a skip is reported at the caller's line, not here
    where = os.environ.get(variable)
    if not where:
        pytest.skip(f"set {variable} to {what}")
    where = Path(where)
    missing = [n for n in needs if not ((where / n).is_dir() if n.endswith("/") else (where / n).is_file())]
    if missing:
        pytest.skip(f"{variable}={where} lacks {', '.join(missing)}: set it to {what}")
    return where
