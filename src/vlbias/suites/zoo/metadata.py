"""What the zoo knows of each model besides its vectors: its architecture's size (built on the meta
device: no weights, no download), its pretraining dataset (one documented table,
resources/zoo/datasets.tsv), the samples it saw (from its tag) and its downstream accuracy (open_clip's
docs/openclip_results.csv at a pinned commit).

    architecture("ViT-B-32")                 # {"params": ..., "image_params": ..., "text_params": ..., ...}
    hf_dual_architecture({"adapter": "hf_dual", "architecture": "clip", "weights": "random", "config": {...}})
    dataset_of(read_datasets(path), "laion2b_s34b_b79k", "ViT-B-32")   # the table's row
    samples_seen("laion2b_s34b_b79k", 2.32e9)   # 34e9
    accuracy(read_accuracy(path), "ViT-B-32", "openai")   # {"imagenet": ..., "average38": ...} or {}
"""

import fnmatch
import logging
import re
from functools import cache
from importlib.metadata import version
from pathlib import Path

from vlbias.errors import InputError
from vlbias.io.fetch import read_manifest

log = logging.getLogger(__name__)

# the metadata columns of every zoo row, in order (vlbias.suites.zoo.eats adds them beside the result row)
COLUMNS = ["arch", "tag", "dataset", "curation", "pairs", "samples_seen", "params", "image_params", "text_params",
           "embed_dim", "image_size", "imagenet", "average38"]
CURATION = ("web-scraped", "CLIP-filtered", "model-filtered", "metadata-curated", "proprietary")
# the columns of openclip_results.csv the zoo reads
ACCURACY = {"imagenet": "ImageNet 1k", "average38": "Average perf. on 38 datasets"}


def read_datasets(path):
    """The dataset table's rows; each curation one of CURATION, each size an integer or empty."""
    rows = read_manifest(path, required=("tag", "arch", "dataset", "pairs", "curation", "source"))
    for i, row in enumerate(rows):
        if row["curation"] not in CURATION:
            raise InputError(path, f"row {i + 1} (tag {row['tag']}): curation '{row['curation']}' is not one of "
                                   f"{', '.join(CURATION)}")
        if row["pairs"] and not row["pairs"].isdigit():
            raise InputError(path, f"row {i + 1} (tag {row['tag']}): pairs '{row['pairs']}' is not a whole number")
        if not row["source"].strip():
            raise InputError(path, f"row {i + 1} (tag {row['tag']}): no source for its facts")
    return rows


def dataset_of(datasets, tag, arch):
    """The first row of the dataset table whose tag and arch patterns match, or None."""
    return next((row for row in datasets if fnmatch.fnmatchcase(tag or "", row["tag"])
                 and fnmatch.fnmatchcase(arch or "", row["arch"])), None)


def samples_seen(tag, pairs):
    """Samples seen in training as the tag says: "_s34b_" 34e9, "_s128m_" 128e6; "_e32" 32 epochs of the
    dataset's ``pairs``; None where it says neither (open_clip's tags name no other count)."""
    if m := re.search(r"(?:^|_)s(\d+)([mb])(?:_|$)", tag or ""):
        return int(m[1]) * (10**6 if m[2] == "m" else 10**9)
    if (m := re.search(r"(?:^|_)e(\d+)$", tag or "")) and pairs:
        return int(m[1]) * int(pairs)
    return None


def read_accuracy(path):
    """{(arch, tag): {"imagenet": ..., "average38": ...}} of a table laid out as open_clip's
    docs/openclip_results.csv (columns name, pretrained and ACCURACY's); a cell that is no number is
    an error naming it."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise InputError(path, f"cannot read the accuracy table ({e})") from None
    missing = [c for c in ("name", "pretrained", *ACCURACY.values()) if c not in df.columns]
    if missing:
        raise InputError(path, f"the accuracy table lacks column(s) {', '.join(missing)}")
    found = {}
    for i, row in df.iterrows():
        values = {}
        for key, column in ACCURACY.items():
            try:
                values[key] = float(row[column]) if row[column] != "" else None
            except ValueError:
                raise InputError(path, f"line {i + 2}, column '{column}': '{row[column]}' is not a number") from None
        found[(row["name"], row["pretrained"])] = values
    return found


def accuracy(table, arch, tag):
    """The accuracy row of (arch, tag), or {} where the table has none (empty cells, never a guess)."""
    return table.get((arch, tag), {})


# --- the architecture's size: open_clip builds it on the meta device ------------------------------------


SIZES = ["params", "image_params", "text_params", "embed_dim", "image_size"]
# the installed open_clip's version, read without importing it (torch): the counted table is valid for it alone
OPEN_CLIP_VERSION = version("open_clip_torch")


def architecture(arch, model_cfg=None, counted=None):
    """{params, image_params, text_params, embed_dim, image_size} of an open_clip architecture (with the
    entry's ``model_cfg`` over it, or defined by it), counted on a model built on the meta device; an
    architecture of ``counted`` (read_architectures) as counted there."""
    import json

    if not model_cfg and counted and arch in counted:
        return dict(counted[arch])
    return dict(_architecture(arch, json.dumps(model_cfg or {}, sort_keys=True)))


@cache
def _architecture(arch, model_cfg_json):
    import json

    import open_clip
    import torch

    from vlbias.models.open_clip_config import model_config

    base, model_kwargs = model_config(arch, json.loads(model_cfg_json))
    config = {**base, **model_kwargs}
    try:
        with torch.device("meta"):  # the parameters' shapes, no memory: even a 5B-parameter model builds at once
            model = open_clip.create_model(arch, device="meta", **model_kwargs)
    except Exception as e:  # noqa: BLE001  (an HF text tower asks the hub for its config: offline, it cannot)
        raise InputError(f"arch '{arch}'", f"cannot be built on the meta device ({type(e).__name__}: "
                                           f"{str(e).splitlines()[0]})") from None
    count = lambda module: sum(p.numel() for p in module.parameters()) if module is not None else 0
    total, image = count(model), count(model.visual)
    # a CoCa's multimodal text decoder counts in the total, not in the text tower (as open_clip's model_profile)
    text = total - image - count(getattr(model, "text_decoder", None))
    size = config.get("vision_cfg", {}).get("image_size", 224)
    return tuple({"params": total, "image_params": image, "text_params": text,
                  "embed_dim": int(config["embed_dim"]),
                  "image_size": size if isinstance(size, int) else max(size)}.items())


# the parameters of a transformers dual encoder (vlbias.models.hf_dual) by module name: its image tower (with
# its projection), and what is neither tower (FLAVA's multimodal encoder, BLIP's ITM head and the
# cross-attention of its text encoder, which ITC does not read): in the total only, as a CoCa's decoder;
# the rest is the text tower (the logit scale with it, as open_clip's count has it)
HF_IMAGE = re.compile(r"(vision_model|visual_projection|vision_proj|image_model|image_projection)\.")
HF_NEITHER = re.compile(r"(multimodal_model|image_to_mm_projection|text_to_mm_projection|itm_head)\.|.*\.crossattention\.")


def hf_dual_architecture(entry):
    """The sizes (SIZES) of an hf_dual entry, counted on its model built on the meta device from its config:
    the config class of its ``architecture`` with the entry's ``config`` (``weights: random``, a
    ``checkpoint``), or the config.json of its ``path``; {} for a hub ``model_id``, whose config is not
    to be had offline (empty cells)."""
    import json

    if not (entry.get("weights") == "random" or entry.get("checkpoint") or entry.get("path")):
        return {}
    keys = ("architecture", "config", "path", "checkpoint", "weights")
    return dict(_hf_dual_architecture(json.dumps({k: entry.get(k) for k in keys}, sort_keys=True, default=str)))


@cache
def _hf_dual_architecture(entry_json):
    import json

    import torch
    from transformers import AutoConfig, AutoModel

    from vlbias.models.hf import build_config
    from vlbias.models.dual import ARCHITECTURES, joint_width

    entry = json.loads(entry_json)
    model_class, config_class = ARCHITECTURES.get(entry["architecture"], (None, None))
    if entry["architecture"] is not None and model_class is None:
        raise InputError(f"architecture '{entry['architecture']}'", f"must be one of {', '.join(ARCHITECTURES)}")
    try:
        if entry["path"] and not (entry["weights"] == "random" or entry["checkpoint"]):
            config = AutoConfig.from_pretrained(entry["path"], local_files_only=True)
        elif config_class is None:
            raise InputError("hf_dual entry", "`weights: random` and `checkpoint` need `architecture`")
        else:
            config = build_config(config_class, {}, entry["config"] or {})
        with torch.device("meta"):  # shapes alone: no memory, no weights
            model = model_class(config) if model_class else AutoModel.from_config(config)
    except (OSError, ValueError) as e:
        raise InputError(entry["path"] or f"hf_dual architecture '{entry['architecture']}'",
                         f"cannot be built on the meta device ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    total = image = neither = 0
    for name, p in model.named_parameters():
        total += p.numel()
        image += p.numel() if HF_IMAGE.match(name) else 0
        neither += p.numel() if HF_NEITHER.match(name) else 0
    vision = getattr(config, "vision_config", None) or getattr(config, "image_config", None)
    size = getattr(vision, "image_size", None)  # SigLIP 2's NaFlex has none: it patchifies any size
    return tuple({"params": total, "image_params": image, "text_params": total - image - neither,
                  "embed_dim": joint_width(model),
                  "image_size": size if isinstance(size, int) or size is None else max(size)}.items())


def read_architectures(path):
    """{arch: sizes} of a table write_architectures wrote, where it was counted with the installed
    open_clip (built anew otherwise: another version may size an architecture otherwise); {} without one."""
    if not Path(path).is_file():
        return {}
    return {row["arch"]: {k: int(row[k]) for k in SIZES} for row in read_manifest(path, required=("arch", "open_clip", *SIZES))
            if row["open_clip"] == OPEN_CLIP_VERSION}


def write_architectures(path, archs):
    """Count ``archs`` on the meta device (a minute or more for open_clip's whole registry) into the table
    read_architectures reads: what `vlbias list zoo` and the zoo's planning read instead of building
    every architecture again. Those that cannot be built offline are left out, logged."""
    from vlbias.io.fetch import write_manifest

    rows = []
    for arch in sorted(archs):
        try:
            rows.append({"arch": arch, "open_clip": OPEN_CLIP_VERSION, **architecture(arch)})
        except InputError as e:
            log.warning("%s", e)
    write_manifest(path, rows, ["arch", "open_clip", *SIZES], comments=[
        "open_clip's architectures counted on the meta device (vlbias.suites.zoo.metadata.write_architectures); "
        "rewrite it after upgrading open_clip"])
