"""Weights of a transformers model from a config entry: random, a checkpoint, a directory or the hub.

Config entry keys (every adapter built on a transformers model class reads them):
    weights: random   random initialisation from the family's real config class, with ``seed``
                      (default 0) and ``config`` (a dict of overrides, e.g. hidden_size 32)
    checkpoint        a local state_dict file: .safetensors, or a torch file read with
                      weights_only=True; loaded strictly into the model built from ``config``
    path              a local model directory (config.json + model.safetensors or pytorch_model.bin)
    model_id          a Hugging Face id (default: the family's published model), downloaded at
                      ``revision`` (required: a commit hash pins the weights)

The hub files a family loads, and its default model, are its schema's ``family: weights:`` (read by
vlbias.models.plan.weights; vlbias.weights fetches them ahead of the job and localizes the entry).
"""

import re
from collections.abc import Mapping
from pathlib import Path

import torch

from vlbias.errors import InputError
from vlbias.io.fetch import DownloadError, cached_download, sha256_file
from vlbias.io.weights import read_state_dict, some
from vlbias.models.plan import weights as declared_weights
from vlbias.weights import as_written, fetched, hub_download


def build_config(config_class, base, overrides):
    """``config_class`` with the family's ``base`` keys and the entry's ``overrides`` (unknown keys refused)."""
    if not isinstance(overrides, Mapping):
        raise InputError("config", f"expected a mapping of {config_class.__name__} keys")
    unknown = sorted(set(overrides) - set(config_class().to_dict()))
    if unknown:
        raise InputError("config", f"not {config_class.__name__} keys: {', '.join(unknown)}")
    return config_class(**{**base, **overrides})


def load_model(spec, family, model_class, config_class, base_config, map_state=None):
    """(model, provenance for .info, model directory or None) from the entry's weights keys.

    ``family``: the adapter, whose declaration names the hub files and the default model (the model
    directory is returned to read the files besides the weights, e.g. an image processor's).
    ``map_state(state, model, path)``: a checkpoint's state_dict with the model's names (for a family
    whose original code named its parameters otherwise).
    """
    source = {"model_id": spec.get("model_id"), "weights_file": None, "weights_sha256": None,
              "revision": spec.get("revision"), "commit": None, "seed": None}
    if spec.get("weights") == "random":
        config = build_config(config_class, base_config, spec.get("config") or {})
        seed = int(spec.get("seed", 0))
        # a private RNG stream: the weights depend on the seed alone, and the caller's RNG is untouched
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = model_class(config)
        return model, {**source, "model_id": source["model_id"] or f"random {family}",
                       "weights": "random-init", "seed": seed}, None
    if spec.get("weights") is not None:
        raise InputError(f"weights '{spec['weights']}'", "the only value is `random`")
    if spec.get("checkpoint"):
        path, digest = checkpoint_file(spec)
        state = read_state_dict(path)  # before building the model: a refused file fails fast
        model = model_class(build_config(config_class, base_config, spec.get("config") or {}))
        if map_state is not None:
            state = map_state(state, model, path)
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
        return model, {**source, "model_id": source["model_id"] or path.name, "weights": "checkpoint",
                       "checkpoint": str(as_written(spec, "checkpoint")), "weights_file": str(path), "weights_sha256": digest}, None
    if spec.get("config"):
        raise InputError("config", "overrides apply to `weights: random` or a `checkpoint` only; a model "
                                   "directory or Hugging Face id brings its own config.json")
    hub = declared_weights(family)["model_id"]
    if spec.get("path"):
        model_dir, model_id, commit = Path(spec["path"]), source["model_id"] or spec["path"], None
        if not model_dir.is_dir():
            raise InputError(model_dir, "no such model directory")
    elif got := fetched(spec, "model_id"):  # fetched ahead into the snapshot directory it names now
        model_dir, model_id, commit = Path(spec["model_id"]), got["request"], got["commit"]
    else:
        model_id = source["model_id"] or hub.get("default")
        model_dir, commit = download(model_id, spec.get("revision"), hub["hub"])
    weights = weights_file(model_dir)
    model = model_class.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32,
                                        use_safetensors=weights.suffix == ".safetensors", weights_only=True)
    return model, {**source, "model_id": model_id, "weights": "pretrained", "weights_file": str(weights),
                   "weights_sha256": sha256_file(weights), "commit": commit}, model_dir


def checkpoint_file(spec):
    """(local file, its sha256) of the entry's ``checkpoint``: a path, or an http(s) URL downloaded
    once into ``<cache>/models``; checked against ``sha256`` when the entry pins one."""
    value = str(spec["checkpoint"])
    if re.match(r"https?://", value):
        try:
            path = cached_download(value, Path(spec.get("cache") or "results/cache") / "models", max_bytes=2**33,
                                   sha256=spec.get("sha256"), timeout=60)
        except DownloadError as e:
            raise InputError(value, f"{e.reason}; set `checkpoint:` to a local copy") from None
    else:
        path = Path(value)
        if not path.is_file():
            raise InputError(path, "checkpoint file not found")
    digest = sha256_file(path)
    if spec.get("sha256") and digest != spec["sha256"]:
        raise InputError(path, f"its sha256 is {digest}, not the pinned {spec['sha256']}")
    return path, digest


def download(repo_id, revision, patterns):
    """(snapshot directory, commit) of a Hugging Face repository at ``revision``, with the files
    ``patterns`` name (vlbias.weights.hub_download: ``a|b`` the first present, globs)."""
    if not revision:
        raise InputError(f"'{repo_id}'", "a Hugging Face id needs a revision: the commit hash that pins it")
    model_dir, commit, _ = hub_download(repo_id, revision, patterns)
    return model_dir, commit


def weights_file(model_dir):
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise InputError(model_dir, "has neither model.safetensors nor pytorch_model.bin")
