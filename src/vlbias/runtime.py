"""Where and how an adapter runs: the torch device, the batch size and torch's threads of an entry.

Models and detectors both read it (below both in the package's layers: docs/architecture.md).
"""

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vlbias.errors import InputError
from vlbias.logs import FILE_ONLY

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def runtime(spec: Mapping[str, Any]) -> "tuple[torch.device, int]":
    """(torch.device, batch_size) from the entry's ``device``, ``batch_size`` and ``threads`` keys.

    ``device`` and ``batch_size`` are read as the registry's build filled them in (their defaults:
    the adapter's schema, vlbias/schemas/_runtime.yaml). ``threads`` sets torch's intra-op threads
    for the whole process; the workflow passes its config's ``threads`` (which the job also asks the
    scheduler for), never the job's own thread count: torch splits its sums by thread, so the vectors
    differed by 2e-7 between a 1-thread local job and a 4-thread SLURM job (issue 18 row 10). An
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
    return device, batch_size
