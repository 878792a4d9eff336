"""Weights of a transformers model from a config entry: random, a checkpoint, a directory or the hub.

Config entry keys (every adapter built on a transformers model class reads them):
    weights: random   random initialisation from the family's real config class, with ``seed``
                      (default 0) and ``config`` (a dict of overrides, e.g. hidden_size 32)
    checkpoint        a state_dict file: .safetensors, or a torch file read with weights_only=True;
                      loaded strictly into the model built from ``config``
    path              a local model directory (config.json + model.safetensors or pytorch_model.bin)
    model_id          a Hugging Face id (default: the family's published model) at ``revision``

Every load is of all of a model or nothing: a checkpoint, a directory or a hub snapshot whose
parameters are not exactly the model's (missing, left over, another shape) is refused, listing
them, except the checkpoint entries the family's schema declares unused (``family: weights:
unused:``, vlbias.weights.declarations), which are dropped and listed in ``info["unused_parameters"]``.
Nothing runs from a model folder (vlbias.io.checkpoints.refuse_custom_code; transformers is always
told ``trust_remote_code=False``).

Remote weights (a hub id, a checkpoint URL) reach an adapter only fetched and verified by
vlbias.weights (the registry refuses them otherwise): ``model_id`` then names the hub snapshot
folder and ``checkpoint`` the cached file.
"""

import contextlib
import fnmatch
import json
import re
from collections.abc import Mapping
from pathlib import Path

import torch
import transformers

from vlbias.errors import InputError
from vlbias.io.checkpoints import (
    read_state_dict,
    refuse_custom_code,
    refuse_unusable_values,
    safetensors_dtypes,
    some,
)
from vlbias.io.fetch import sha256_file
from vlbias.registry import weights_label
from vlbias.weights import as_written, fetched, package_dir, unused


# Config keys a random model of a config class (its model_type) is built with unless the entry overrides
# them: transformers' BlipVisionConfig initialises at std 1e-10 (trained weights replace it), with
# which a random BLIP would not see the image; 0.02 as its text config
RANDOM_BASE = {"blip": {"vision_config": {"initializer_range": 0.02}}}


def build_config(config_class, base, overrides):
    """``config_class`` with the family's ``base`` keys and the entry's ``overrides`` (unknown keys refused);
    a sub-config (e.g. ``vision_config``) in both is merged, the entry's keys over the base's."""
    if not isinstance(overrides, Mapping):
        raise InputError("config", f"expected a mapping of {config_class.__name__} keys")
    unknown = sorted(set(overrides) - set(config_class().to_dict()))
    if unknown:
        raise InputError("config", f"not {config_class.__name__} keys: {', '.join(unknown)}")
    return config_class(**_merged(base, overrides))


def _merged(base, overrides):
    return {**base, **{k: {**base[k], **v} if isinstance(base.get(k), Mapping) and isinstance(v, Mapping) else v
                       for k, v in overrides.items()}}


def random_model(spec, model_class, config_class, base_config):
    """``model_class`` of ``config_class`` (the family's ``base_config``, the entry's ``config`` over it),
    initialised as transformers initialises it from the entry's ``seed``."""
    base = _merged(RANDOM_BASE.get(getattr(config_class, "model_type", None), {}), base_config)
    config = build_config(config_class, base, spec.get("config") or {})
    # a private RNG stream: the weights depend on the seed alone, and the caller's RNG is untouched
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(spec["seed"]))
        return model_class(config)


def load_model(spec, family, model_class, config_class, base_config, map_state=None):
    """(model, provenance for .info, model directory or None) from the entry's weights keys.

    ``family``: the adapter, whose schema declares the checkpoint entries its model never reads (the
    model directory is returned to read the files besides the weights, e.g. an image processor's).
    ``map_state(state, model, path)``: a checkpoint's state_dict with the model's names (for a family
    whose original code named its parameters otherwise).
    """
    source = {"model_id": spec.get("model_id"), "weights_file": None, "weights_sha256": None,
              "revision": spec.get("revision"), "commit": None, "seed": None}
    if spec.get("weights") == "random":
        model = random_model(spec, model_class, config_class, base_config)
        return model, {**source, "model_id": source["model_id"] or f"random {family}",
                       "weights": weights_label(spec), "seed": int(spec["seed"])}, None
    if spec.get("weights") is not None:
        raise InputError(f"weights '{spec['weights']}'", "the only value is `random`")
    if spec.get("checkpoint"):
        path, digest = checkpoint_file(spec)
        state = read_state_dict(path)  # before building the model: a refused file fails fast
        model = model_class(build_config(config_class, base_config, spec.get("config") or {}))
        if map_state is not None:
            state = map_state(state, model, path)
        state, dropped = without_unused(state, family)
        # tied weights (the LM decoder is the word embedding matrix) are stored once, under either
        # name: safetensors refuses shared tensors
        for tied, to in (model._tied_weights_keys or {}).items():
            if (tied in state) != (to in state):
                state[tied] = state[to] = state.get(tied, state.get(to))
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as e:  # torch reports shape mismatches even when not strict
            shapes = re.search(r"size mismatch for .*", str(e))
            raise InputError(path, f"does not fit the configured model: {shapes.group(0) if shapes else e}") from e
        if missing or unexpected:
            raise InputError(path, f"does not fit the configured model: missing {some(missing)}, "
                                   f"unexpected {some(unexpected)}")
        refuse_unusable_values(path, {k: v.is_floating_point() for k, v in state.items()}, model.state_dict())
        return model, {**source, "model_id": source["model_id"] or path.name, "weights": weights_label(spec),
                       "checkpoint": str(as_written(spec, "checkpoint")), "weights_file": str(path),
                       "weights_sha256": digest, **_unused_info(dropped)}, None
    if spec.get("config"):
        raise InputError("config", "overrides apply to `weights: random` or a `checkpoint` only; a model "
                                   "directory or Hugging Face id brings its own config.json")
    if spec.get("path"):
        model_dir, model_id, commit = Path(spec["path"]), source["model_id"] or spec["path"], None
        if not model_dir.is_dir():
            raise InputError(model_dir, "no such model directory")
    elif got := fetched(spec, "model_id"):  # fetched ahead into the snapshot directory it names now
        model_dir, model_id, commit = Path(spec["model_id"]), got["request"], got["commit"]
    else:
        raise InputError(f"{family} entry", "a Hugging Face model loads only fetched and verified: build the spec "
                                            "that vlbias.weights.prepare returns")
    model, weights, dropped = from_folder(model_class, model_dir, family)
    return model, {**source, "model_id": model_id, "weights": weights_label(spec), "weights_file": str(weights),
                   "weights_sha256": sha256_file(weights), "commit": commit, **_unused_info(dropped)}, model_dir


def from_folder(model_class, folder, family, kind="models"):
    """(model, weights file, the checkpoint entries dropped) of the save_pretrained directory ``folder``:
    all of ``model_class`` from its files or an InputError listing what is missing, left over or of
    another shape (naming the class expected and what the folder's config.json declares), but for
    the entries ``family``'s schema declares unused. ``model_class`` AutoModel: the class of the
    folder's config. No code from the folder runs; a pickle is read weights-only, by vlbias."""
    folder = Path(folder)
    refuse_custom_code(folder)
    weights = weights_file(folder)
    declares = _declared_class(folder)
    auto = model_class is transformers.AutoModel
    model_type = _model_type(folder)
    expected = None if auto else getattr(model_class.config_class, "model_type", None)
    if expected and model_type not in (None, expected):  # another family's config
        raise InputError(folder, f"does not hold a {model_class.__name__} (its config.json declares {declares}, "
                                 f"model_type {model_type}, not {expected})")
    try:
        config = (transformers.AutoConfig if auto else model_class.config_class).from_pretrained(
            folder, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as e:  # no config.json, or one transformers cannot read
        raise InputError(folder / "config.json", f"transformers cannot read it ({_first_line(e)})") from None
    if auto:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING

        if type(config) not in MODEL_MAPPING:
            raise InputError(folder / "config.json", f"declares {declares}, which transformers has no model for")
        model_class = MODEL_MAPPING[type(config)]
    common = dict(config=config, dtype=torch.float32, trust_remote_code=False, output_loading_info=True,
                  ignore_mismatched_sizes=True)  # mismatches reported, then refused below
    if weights.suffix == ".safetensors":  # its header read first: a truncated file is an error of one line
        floating = {k: t.startswith(("F", "BF")) for k, t in safetensors_dtypes(weights).items()}
        with _quiet_transformers():
            model, report = model_class.from_pretrained(folder, local_files_only=True, use_safetensors=True, **common)
    else:  # a pickle: read by vlbias's weights-only reader (its errors are one line)
        state = read_state_dict(weights)
        floating = {k: v.is_floating_point() for k, v in state.items()}
        with _quiet_transformers():
            model, report = model_class.from_pretrained(None, state_dict=state, **common)
    patterns = unused(family, kind)
    dropped = sorted(k for k in report["unexpected_keys"] if _matches(k, patterns))
    unexpected = sorted(k for k in report["unexpected_keys"] if not _matches(k, patterns))
    missing = sorted(report["missing_keys"])
    shapes = sorted(f"{k} {tuple(a)} vs {tuple(b)}" for k, a, b in report["mismatched_keys"])
    if missing or unexpected or shapes:
        raise InputError(folder, f"does not hold a {model_class.__name__} (its config.json declares {declares}): "
                                 f"missing {some(missing)}; unexpected {some(unexpected)}; of another shape "
                                 f"{some(shapes)}")
    # the file's names with or without the base model's prefix, as transformers loads them
    refuse_unusable_values(weights, floating, model.state_dict(), f"{model.base_model_prefix}.")
    return model, weights, dropped


def _declared_class(folder):
    """What the folder's config.json says it holds: its architectures, else its model_type."""
    try:
        doc = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "nothing readable"
    if not isinstance(doc, dict):
        return "nothing readable"
    return ", ".join(map(str, doc.get("architectures") or [])) or f"model_type {doc.get('model_type')}"


def _model_type(folder):
    try:
        doc = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # unreadable: transformers' reading of it says why
    return doc.get("model_type") if isinstance(doc, dict) else None


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _matches(name, patterns):
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def without_unused(state, family):
    """(``state`` without the entries ``family``'s schema declares unused, their sorted names)."""
    patterns = unused(family)
    dropped = sorted(k for k in state if _matches(k, patterns))
    return {k: v for k, v in state.items() if k not in dropped}, dropped


def _unused_info(dropped):
    return {"unused_parameters": dropped} if dropped else {}


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' load report is ours to give (an error listing the parameters, or nothing)."""
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)


def local_folder(value, revision=None):
    """(directory, "<dist>==<version>" or None) of a local model or tokenizer ``value``: ``package:<name>``
    (a model shipped in an installed package; ``revision``, when given, must be the installed
    distribution) or a directory. A Hugging Face id reaches here fetched by vlbias.weights: as the
    directory of its snapshot."""
    if value.startswith("package:"):
        model_dir, installed = package_dir(value)
        if revision and revision != installed:
            raise InputError(value, f"revision '{revision}' requested but {installed} is installed")
        return model_dir, installed
    if Path(value).is_dir():
        return Path(value), None
    raise InputError(value, "no such model directory (a Hugging Face id loads only fetched and verified: build the "
                            "spec that vlbias.weights.prepare returns)")


def checkpoint_file(spec):
    """(local file, its sha256) of the entry's ``checkpoint`` (a URL reaches here fetched: the cached
    file), checked against ``sha256`` when the entry pins one."""
    path = Path(spec["checkpoint"])
    if not path.is_file():
        raise InputError(path, "checkpoint file not found")
    digest = sha256_file(path)
    if spec.get("sha256") and digest != spec["sha256"]:
        raise InputError(path, f"its sha256 is {digest}, not the pinned {spec['sha256']}")
    return path, digest


def weights_file(model_dir):
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise InputError(model_dir, "has neither model.safetensors nor pytorch_model.bin")
