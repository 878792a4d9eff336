"""Read a user's weights without ever running code: checkpoint files unpickled with weights only (or
numpy arrays only), model folders refused when they ask for code of their own."""

import codecs
import json
import pickle
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vlbias.errors import InputError
from vlbias.io.paths import StrPath

if TYPE_CHECKING:
    import torch

_MULTIARRAY = (getattr(np, "_core", None) or np.core).multiarray
# What a pickle of numpy arrays in plain containers needs, under numpy 1 and 2 module names
_NUMPY_GLOBALS = {
    **{(m, "_reconstruct"): _MULTIARRAY._reconstruct for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): _MULTIARRAY.scalar for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    # a Python 3 protocol-2 pickle writes bytes as _codecs.encode(text, "latin1"); nothing else is allowed
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


def read_state_dict(path: Path, wrappers: Iterable[str] = ("state_dict",)) -> dict[str, "torch.Tensor"]:
    """The state_dict in ``path``: .safetensors, or a torch file read with ``weights_only=True``.

    A torch file holding a dict may wrap the weights under the first of ``wrappers`` it has
    (training checkpoints put them beside optimizer state etc.).

    (Model libraries' own loaders, e.g. open_clip's, fall back to a full, unsafe torch.load on some errors.)
    """
    import safetensors.torch  # here: the folder check below needs neither (the workflow's planning imports it)
    import torch

    if path.suffix == ".safetensors":
        try:
            state = safetensors.torch.load_file(path)
        except Exception as e:  # safetensors raises its own SafetensorError or OSError
            raise InputError(path, f"not a readable safetensors file ({e})") from e
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # UnpicklingError for refused objects, RuntimeError for non-torch files
            raise InputError(path, f"refused: not a weights-only torch checkpoint ({_unpickling_reason(e)}); only "
                                   "tensors are loaded from pickle files, convert it to .safetensors") from None
    wrapper = next((k for k in wrappers if isinstance(state, dict) and isinstance(state.get(k), dict)), None)
    if wrapper:
        state = state[wrapper]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(path, "expected a state_dict (a mapping of names to tensors)")
    # DistributedDataParallel prefixes every name with "module."
    return {k.removeprefix("module."): v for k, v in state.items()}


# safetensors' own limit on a file's header (a JSON of names, dtypes, shapes and offsets)
MAX_SAFETENSORS_HEADER = 100_000_000


def safetensors_dtypes(path: Path) -> dict[str, str]:
    """{tensor name: its safetensors dtype ("F32", "BF16", "I64", ...)} from the header of the
    .safetensors file ``path``, without reading its tensors; InputError in one line, naming the file,
    for a file whose header or length is not a safetensors file's (a truncated file, a header length of
    2^40: safetensors' own reader raised its error as a traceback out of transformers)."""
    def bad(reason: str) -> InputError:
        return InputError(path, f"not a readable safetensors file ({reason})")

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little")
            fits = len(head) == 8 and n <= min(MAX_SAFETENSORS_HEADER, size - 8)
            header = json.loads(f.read(n)) if fits else None
    except (OSError, ValueError) as e:  # unreadable, or a header that is not JSON
        raise bad(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    if not fits:
        raise bad(f"a header of {n:,} bytes in a file of {size:,}" if len(head) == 8 else "no header")
    if not isinstance(header, dict):
        raise bad("its header is not a mapping of tensors")
    dtypes, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] and isinstance(info.get("dtype"), str)):
            raise bad(f"tensor '{name}': no dtype and data offsets")
        dtypes[name], end = info["dtype"], max(end, offsets[1])
    if 8 + n + end != size:
        raise bad(f"its tensors take {8 + n + end:,} bytes, the file has {size:,}: truncated or padded")
    return dtypes


def refuse_unusable_values(path: StrPath, floating: Mapping[str, bool], state: Mapping[str, "torch.Tensor"],
                           prefix: str = "") -> None:
    """InputError naming ``path`` and the tensors, after a model loaded the weights file ``path``: a
    tensor of the file (``floating``: {name: whether its dtype is a floating one}) that the model holds
    as floating (``state``: its state_dict; names compared without ``prefix``, a base model's) must be
    floating in the file (int64 weights of the right shapes loaded, cast) and finite in the model (a
    NaN loaded as any number). float16 and bfloat16 files load, cast as the model holds them."""
    ours = {k.removeprefix(prefix): v for k, v in state.items()}
    loaded = {k: ours[k.removeprefix(prefix)] for k in floating if ours.get(k.removeprefix(prefix)) is not None}
    loaded = {k: v for k, v in loaded.items() if v.is_floating_point()}
    wrong = sorted(k for k in loaded if not floating[k])
    if wrong:
        raise InputError(path, f"tensors not of a floating dtype where the model takes floats: {some(wrong)}")
    import torch

    infinite = sorted(k for k, v in loaded.items() if not bool(torch.isfinite(v).all()))
    if infinite:
        raise InputError(path, f"tensors with NaN or infinite values: {some(infinite)}")


def _unpickling_reason(error: BaseException) -> str:
    """What torch's weights-only unpickler refused, in one line, without its advice to load the file
    with weights_only=False (which would run whatever the pickle asks for)."""
    text = str(error)
    found = re.search(r"(?:WeightsUnpickler error:|Trying to load)\s*(.+?)(?:\. |\n|$)", text)
    if found:
        return found.group(1).strip().rstrip(".")
    line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return "not a torch file" if "weights_only" in line else line


class _NumpyOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS:
            return _NUMPY_GLOBALS[(module, name)]
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array part")


def read_numpy_pickle(path: StrPath) -> Any:
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


def some(names: Sequence[str]) -> str:
    """A short list of parameter names for an error message."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") if names else "none"


# the files of a model folder through which transformers would import and run the folder's own code
# (their ``auto_map``); a python file among a model's files is refused as well
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json")


def refuse_custom_code(folder: StrPath, files: Iterable[str] | None = None) -> None:
    """InputError naming the file when the model folder ``folder`` asks to run code of its own: a
    python file among its files (``files``: their names relative to it, default every file in it), or
    ``auto_map`` in one of CODE_CONFIGS. vlbias never runs code from a model folder, so transformers
    never asks whether to trust it."""
    folder = Path(folder)
    names = sorted(files) if files is not None else sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    code = next((n for n in names if n.endswith(".py")), None)
    if code:
        raise InputError(folder / code, "python code in a model folder: vlbias never runs code from a model; "
                                        "give a folder of weights and configuration files only")
    for name in CODE_CONFIGS:
        path = folder / name
        if name not in names or not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InputError(path, f"not a readable JSON file ({e})") from None
        if isinstance(doc, dict) and doc.get("auto_map"):
            raise InputError(path, "asks transformers to run the model's own code (auto_map): vlbias never runs "
                                   "code from a model; use a model of a transformers class")
