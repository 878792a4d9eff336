"""Read a user's weights file without ever unpickling arbitrary objects."""

import re

import safetensors.torch
import torch

from vlbias.errors import InputError


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


def some(names):
    """A short list of parameter names for an error message."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"
