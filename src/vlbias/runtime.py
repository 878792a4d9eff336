"""Where and how an adapter runs: the torch device, the batch size, torch's threads and the
arithmetic precision of an entry.

Models and detectors both read it (below both in the package's layers: docs/architecture.md).

Precision (docs/precision-gpu.md): ``fp32`` (every default, and the paper-table targets) computes in
IEEE float32 on every device: TF32, which CUDA would otherwise use for cuDNN convolutions (and which
``torch.set_float32_matmul_precision("high")`` would allow for matmuls), is switched off where the
runtime picks the device, so a GPU run gives the CPU's vectors to float32 rounding. ``bf16`` (opt-in,
model stages only) runs the forward passes under ``torch.autocast(<device type>, torch.bfloat16)``:
matmuls and convolutions in bfloat16, reductions (softmax, layer norm) in float32; vectors come back
float32. Each adapter records its precision in ``.info``, so the embedding cache never serves a bf16
vector to an fp32 entry, and the stores' provenance says which it was.
"""

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from vlbias.errors import InputError
from vlbias.logs import FILE_ONLY

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16")  # the schema's enum (vlbias/schemas/_runtime.yaml), in this order


def runtime(spec: Mapping[str, Any], precisions: tuple[str, ...] = PRECISIONS) -> "tuple[torch.device, int]":
    """(torch.device, batch_size) from the entry's ``device``, ``batch_size`` and ``threads`` keys, its
    ``precision`` checked against ``precisions`` (a detector's: fp32 only); float32 made IEEE (``ieee_float32``).

    ``device`` and ``batch_size`` are read as the registry's build filled them in (their defaults:
    the adapter's schema, vlbias/schemas/_runtime.yaml). ``threads`` sets torch's intra-op threads
    for the whole process; the workflow passes its config's ``threads`` (which the job also asks the
    scheduler for), never the job's own thread count: torch splits its sums by thread, so the vectors
    differed by 2e-7 between a 1-thread local job and a 4-thread SLURM job. An
    entry without it leaves torch's setting as it is.
    """
    import torch

    batch_size = spec["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError("batch_size", f"must be a positive integer, got {batch_size!r}")
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
        log.info("torch: %d intra-op thread(s)", torch.get_num_threads(), extra=FILE_ONLY)
    name = spec["device"]
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise InputError(f"device '{name}'", f"not a torch device ({e})") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device '{name}'", "CUDA is not available on this machine (use device: auto or cpu)")
    precision(spec, precisions)  # checked before a model loads
    ieee_float32()
    return device, batch_size


def ieee_float32() -> None:
    """IEEE float32 for every float32 matmul and convolution of the process, TF32 off: cuDNN's
    convolutions default to TF32 on Ampere and later, and a setting of ``high`` or ``medium`` for
    matmuls (by a library, a notebook) would let CUDA (TF32) and oneDNN (bfloat16) round float32
    inputs; either moves vectors by 1e-3, beyond what a GPU check of fp32 tolerates. bf16 entries
    lower precision per forward pass instead (``autocast``): the float32 work left there stays IEEE."""
    import torch

    # the legacy switches: torch's newer fp32_precision API refuses to read them once mixed with it
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def precision(spec: Mapping[str, Any], precisions: tuple[str, ...] = PRECISIONS) -> str:
    """The entry's ``precision`` (``fp32`` or ``bf16``), checked against ``precisions``; its default is
    the schema's (fp32)."""
    value = spec["precision"]
    if value not in precisions:
        raise InputError(f"precision '{value}'", f"must be {' or '.join(precisions)} here")
    return value


def autocast(device: "torch.device", value: str) -> contextlib.AbstractContextManager[Any]:
    """The context a forward pass runs in at precision ``value``: ``torch.autocast`` to bfloat16 on
    ``device``'s type for bf16, nothing for fp32."""
    import torch

    if value == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


@contextlib.contextmanager
def hidden_layer(owner: Any, name: str, layer: str) -> Iterator[None]:
    """The context a tower runs in to give its ``layer``'s states: ``last``, as it is; ``penultimate``,
    ``owner.<name>`` (the ModuleList of blocks it runs in turn) without its last block, so that the tower
    reads the states before it where it read the last block's (through the same final norm, pooling and
    projection: a text tower's penultimate layer, a specification curve's layer axis)."""
    if layer == "last":
        yield
        return
    blocks = getattr(owner, name)
    setattr(owner, name, blocks[:-1])
    try:
        yield
    finally:
        setattr(owner, name, blocks)
