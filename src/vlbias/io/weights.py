"""Read a user's weights file without ever unpickling arbitrary objects."""

import codecs
import pickle
import re

import numpy as np
import safetensors.torch
import torch

from vlbias.errors import InputError

_MULTIARRAY = (getattr(np, "_core", None) or np.core).multiarray
# What a pickle of numpy arrays in plain containers needs, under numpy 1 and 2 module names
_NUMPY_GLOBALS = {
    **{(m, "_reconstruct"): _MULTIARRAY._reconstruct for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): _MULTIARRAY.scalar for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


def _latin1_bytes(text, encoding="latin1"):
    # a Python 3 protocol-2 pickle writes bytes as _codecs.encode(text, "latin1"); nothing else is allowed
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


def read_state_dict(path, wrappers=("state_dict",)):
    """The state_dict in ``path``: .safetensors, or a torch file read with ``weights_only=True``.

    A torch file holding a dict may wrap the weights under the first of ``wrappers`` it has
    (training checkpoints put them beside optimizer state etc.).

    (Model libraries' own loaders, e.g. open_clip's, fall back to a full, unsafe torch.load on some errors.)
    """
    if path.suffix == ".safetensors":
        try:
            state = safetensors.torch.load_file(path)
        except Exception as e:  # safetensors raises its own SafetensorError or OSError
            raise InputError(path, f"not a readable safetensors file ({e})") from e
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # UnpicklingError for refused objects, RuntimeError for non-torch files
            reason = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\. |\n|$)", str(e))
            raise InputError(path, "refused: not a weights-only torch checkpoint "
                                   f"({reason.group(1) if reason else e}); only tensors are loaded from "
                                   "pickle files, convert it to .safetensors") from e
    wrapper = next((k for k in wrappers if isinstance(state, dict) and isinstance(state.get(k), dict)), None)
    if wrapper:
        state = state[wrapper]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(path, "expected a state_dict (a mapping of names to tensors)")
    # DistributedDataParallel prefixes every name with "module."
    return {k.removeprefix("module."): v for k, v in state.items()}


class _NumpyOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _NUMPY_GLOBALS:
            return _NUMPY_GLOBALS[(module, name)]
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array part")


def read_numpy_pickle(path):
    """The object in a pickle of numpy arrays in dicts, lists and strings (e.g. Detectron's Caffe2
    weights, written by Python 2), unpickled so that nothing but arrays can be built: any other
    global (a function, a class) is refused. Python 2 strings are read as latin-1, numpy's
    convention for its arrays' raw bytes."""
    try:
        with open(path, "rb") as f:
            return _NumpyOnly(f, encoding="latin1").load()
    except FileNotFoundError:
        raise InputError(path, "weights file not found") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise InputError(path, f"refused: not a pickle of numpy arrays only ({e})") from e


def some(names):
    """A short list of parameter names for an error message."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"
