"""Pieces of a bottom-up-attention checkout (peteanderson80/bottom-up-attention or jiasenlu's fork, in
VLBIAS_BOTTOM_UP_REFERENCE) loaded for the differential tests of vlbias.regions.bua and modeling_bua:
its Python 2 files run under Python 3 with their print statements made calls (the only Python 2
syntax in the files the tests read), its config module with a stand-in for easydict."""

import re
import sys
import types
from pathlib import Path

from helpers import checkout as reference_checkout
from helpers import plain_module


def checkout(*files):
    """The checkout named by VLBIAS_BOTTOM_UP_REFERENCE, or a skip saying why (unset, or lacking ``files``)."""
    __tracebackhide__ = True
    return reference_checkout("VLBIAS_BOTTOM_UP_REFERENCE",
                              "a checkout of jiasenlu/bottom-up-attention (the fork Ross et al. ran; 45321a04) or "
                              f"peteanderson80/bottom-up-attention (514e561b), with {', '.join(files)}", *files)


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
