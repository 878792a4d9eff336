"""Pieces of a bottom-up-attention checkout (peteanderson80/bottom-up-attention or jiasenlu's fork, in
VLBIAS_BOTTOM_UP_REFERENCE) loaded for the differential tests of vlbias.regions.bua and modeling_bua:
its Python 2 files run under Python 3 with their print statements made calls (the only Python 2
syntax in the files the tests read), its config module with a stand-in for easydict."""

import os
import re
import sys
import types
from pathlib import Path

import pytest

from helpers import plain_module


def checkout(*files):
    """The checkout named by VLBIAS_BOTTOM_UP_REFERENCE, or a skip saying why (unset, or lacking ``files``)."""
    where = os.environ.get("VLBIAS_BOTTOM_UP_REFERENCE")
    if not where:
        pytest.skip("set VLBIAS_BOTTOM_UP_REFERENCE to a checkout of jiasenlu/bottom-up-attention (or "
                    f"peteanderson80's): {', '.join(files)}")
    where = Path(where)
    missing = [f for f in files if not (where / f).is_file()]
    if missing:
        pytest.skip(f"{where} lacks {', '.join(missing)}")
    return where


def module(name, path, **names):
    """``path`` run as a module named ``name`` (not registered in sys.modules), with ``names`` in its
    namespace first (e.g. Python 2's xrange) and its print statements made calls."""
    source = re.sub(r"^(\s*)print (?!\()(.*)$", r"\1print(\2)", Path(path).read_text(), flags=re.M)
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    mod.__dict__.update(names)
    exec(compile(source, str(path), "exec"), mod.__dict__)
    return mod


def config(where):
    """Their lib/fast_rcnn/config.py (``cfg``, the defaults), which imports easydict (a dict with
    attribute access) only."""
    easydict = types.ModuleType("easydict")
    easydict.EasyDict = type("EasyDict", (dict,), {"__getattr__": dict.__getitem__, "__setattr__": dict.__setitem__})
    saved = sys.modules.get("easydict")
    sys.modules["easydict"] = easydict
    try:
        return plain_module("bottom_up_config", where / "lib/fast_rcnn/config.py")
    finally:
        sys.modules.pop("easydict")
        if saved is not None:
            sys.modules["easydict"] = saved
