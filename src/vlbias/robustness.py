"""How robust is each d: the test re-run along named extraction choices (a specification curve,
Simonsohn, Simmons & Nelson, *Specification curve analysis*, Nature Human Behaviour 2020), and the
model's architecture with random weights as the null of d (random-init twins). docs/robustness.md.

    specs = specifications(settings, entry)       # every combination of the axes; the default first
    with Embedder(build, cache) as embedder:      # vectors through the content-keyed embedding cache
        curve, twins = run(stimuli, "minilm", entry, settings, stats, embedder)
    table = summary(curve, twins, settings)       # a row per test × model: d, its range, sign share, twins

The axes (``settings``: the config schema's ``$defs/robustness``, defaults filled in), each a switch
of the text, the adapter, the image store or the test:

- ``template``: each text stimulus put into a template (``bare``: as given, the default; ``photo``: "a
  photo of {}."; ``imagenet``: CLIP's 80 ImageNet prompts, their unit vectors averaged, as CLIP's
  zero-shot classifier; a string with ``{}``; a list of them, averaged as ``imagenet``);
- ``casing``: ``given`` (the default) or ``lower``;
- ``pooling``, ``layer``: the adapter key its family declares for the axis (``family: axes:`` in its
  schema: sentence's ``pooling``, iGPT's ``layer``, a text tower's ``layer``, last or penultimate:
  sentence, open_clip, hf_dual); the entry's own value is the default; an axis of a joint space's
  text tower alone (``family: text_axes:``) leaves its images to the default's encoder;
- ``crop``, ``resample``, ``decoder``: the image store's switches (vlbias.images.store; crop ``none``:
  resize only);
- ``subsample``: B draws, each leaving ``leave_out`` of every set out (at least two targets and one
  attribute kept per set); all stimuli is the default;
- ``seeds``: the permutation test's seed; the test's own is the default.

A family that cannot vary an axis refuses it in one line naming the family and the axis. Texts and
images are keyed in the cache by their content and the encoder's fingerprint (vlbias.io.cache), so
a vector that a variant does not change is computed once: ``Embedder.computed`` counts each.
"""

import itertools
import logging
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd

from vlbias.associate import score
from vlbias.errors import UsageError
from vlbias.io.cache import RecordCache, cached_vectors, digest, fingerprint
from vlbias.io.stimuli import SETS
from vlbias.logs import Progress
from vlbias.models import families
from vlbias.schemas import adapter_schema
from vlbias.stats.adjust import add_adjusted
from vlbias.stats.row import ASSOCIATION, IDENTITY, PROVENANCE, SIZES, Row
from vlbias.weights.declarations import declared

log = logging.getLogger(__name__)

TEMPLATES = {"bare": ("{}",), "photo": ("a photo of {}.",)}  # and "imagenet": open_clip's copy of CLIP's
IMAGE_AXES = ("crop", "resample", "decoder")
ADAPTER_AXES = ("pooling", "layer")
# the columns of a specification's row beside the test's (vlbias.associate.score): one place, so that a
# result row declared elsewhere takes them up as they are
SPEC_COLUMNS = ["specification", "template", "casing", *ADAPTER_AXES, *IMAGE_AXES, "draw", "perm_seed", "default"]
# a specification's row: the association row, the twin's seed and the specification after its provenance
SPECIFICATION = Row(IDENTITY, SIZES, ASSOCIATION.statistics, (*PROVENANCE, "weights_seed", *SPEC_COLUMNS))
SUMMARY_COLUMNS = ["test", "name", "family", "model", "d", "p_holm", "n_specs", "d_min", "d_max", "sign_share",
                   "holm_share", "twins", "twin_seeds", "twins_mean", "twins_sd", "twins_share", "twins_p", "robust",
                   "status", "model_id", "revision", "weights"]


@dataclass(frozen=True)
class Specification:
    """One combination of the axes' values (None: the default's, as configured)."""

    template: str | tuple[str, ...] = "bare"
    casing: str = "given"
    adapter: tuple[tuple[str, object], ...] = ()   # (axis, value) of the adapter axes varied
    images: tuple[tuple[str, str], ...] = ()        # (axis, value) of the image axes varied
    draw: int | None = None
    seed: int | None = None

    def axes(self):
        """{axis: value as the tables write it} ("" for the default's)."""
        template = self.template if isinstance(self.template, str) else " | ".join(self.template)
        return {"template": template, "casing": self.casing, **{a: "" for a in (*ADAPTER_AXES, *IMAGE_AXES)},
                **{a: str(v) for a, v in (*self.adapter, *self.images)},
                "draw": "" if self.draw is None else self.draw, "perm_seed": "" if self.seed is None else self.seed}

    @property
    def label(self):
        """The axes varied from the default, "a=v, ..." ("default" for none)."""
        return ", ".join(f"{a}={v}" for a, v in self.axes().items() if v not in ("", "bare", "given")) or "default"


def refuse(adapter, axis, why):
    return UsageError(f"robustness: family '{adapter}' cannot vary axis '{axis}' ({why})")


def templates(value, adapter="?"):
    """The templates of one ``template`` axis value: a name, a string with ``{}``, or a list of them."""
    if value == "imagenet":
        from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

        return tuple(t("{}") for t in OPENAI_IMAGENET_TEMPLATES)
    if isinstance(value, str) and value in TEMPLATES:
        return TEMPLATES[value]
    listed = (value,) if isinstance(value, str) else tuple(value)
    if not listed or any(not isinstance(t, str) or "{}" not in t for t in listed):
        bad = next((t for t in listed if not isinstance(t, str) or "{}" not in t), value)
        raise UsageError(f"robustness: family '{adapter}', axis 'template': {bad!r} has no '{{}}' for the stimulus "
                         f"(or name one of {', '.join([*TEMPLATES, 'imagenet'])})")
    return listed


def twin_entries(entry, settings):
    """The model's architecture with seeded random weights: R entries ``settings["twins"]`` (None: none),
    seeds ``twin_seed``, ``twin_seed`` + 1, ... Its weights sources are dropped (and what localize
    recorded of them), but for those a random entry leaves inactive (a transformers family's
    ``model_id``: ``unless: [weights]``) or reads all the same (sentence's ``path``, its config and
    tokenizer: ``random_reads``)."""
    adapter, r = entry.get("adapter"), settings.get("twins")
    if r is None:
        return []
    if r < 1:
        raise refuse(adapter, "twins", f"{r} twins: give at least 1, or leave `twins` out for none")
    sources = [k for k, d in declared(adapter).items()
               if "weights" not in d.get("unless", ()) and not d.get("random_reads")]
    base = {k: v for k, v in entry.items() if k not in sources and k not in ("revision", "sha256")}
    if "fetched" in entry:
        base["fetched"] = {k: v for k, v in entry["fetched"].items() if k not in sources}
    return [{**base, "weights": "random", "seed": settings["twin_seed"] + i} for i in range(r)]


def specifications(settings, entry):
    """Every combination of the axes' values, the default first; refuses an axis the family cannot vary."""
    adapter = entry.get("adapter")
    if adapter is None:
        raise UsageError("robustness: one's own vectors cannot be re-extracted along any axis: give a model entry")
    embeds = set(families.embeds(adapter))
    for axis, needs in (("template", "texts"), ("casing", "texts"), *((a, "images") for a in IMAGE_AXES)):
        if settings[axis] and needs not in embeds:
            raise refuse(adapter, axis, f"it embeds no {needs}")
    for axis in ADAPTER_AXES:
        if settings[axis] and axis not in families.axes(adapter):
            raise refuse(adapter, axis, "its schema declares no such switch (`family: axes:`)")
        for value in settings[axis]:
            # a value the family's key does not take (iGPT's layer is a number, sentence's last or penultimate)
            key = families.axes(adapter)[axis]
            if not jsonschema.Draft202012Validator(adapter_schema("models", adapter)["properties"][key]).is_valid(value):
                raise refuse(adapter, axis, f"its `{key}` takes no {value!r}")
    for value in settings["template"]:
        templates(value, adapter)
    choices = {
        "template": _with_default("bare", settings["template"]),
        "casing": _with_default("given", settings["casing"]),
        **{a: _with_default(None, settings[a]) for a in (*ADAPTER_AXES, *IMAGE_AXES)},
        "draw": [None, *range(settings["subsample"]["draws"])],
        "seed": _with_default(None, settings["seeds"]),
    }
    specs = []
    for combo in itertools.product(*choices.values()):
        c = dict(zip(choices, combo, strict=True))
        specs.append(Specification(
            template=c["template"] if isinstance(c["template"], str) else tuple(c["template"]), casing=c["casing"],
            adapter=tuple((a, c[a]) for a in ADAPTER_AXES if c[a] is not None),
            images=tuple((a, c[a]) for a in IMAGE_AXES if c[a] is not None), draw=c["draw"], seed=c["seed"]))
    return specs


def _with_default(default, values):
    return [default, *(v for v in values if v != default)]


class Embedder:
    """Vectors of a specification's sets: each encoder (one per adapter variant) built once by
    ``build(entry)``, each vector through the content-keyed cache ``<cache>/embeddings/<fingerprint>``.
    ``computed`` counts the vectors computed, by (fingerprint, cache key): none twice.

    ``images``: {test id: {X|Y|A|B: [files]}} for image sets; ``image_settings``: the image store's
    {size, crop, resample, decoder}, which the image axes vary; ``workdir``: where image stores go."""

    def __init__(self, build, cache, images=None, image_settings=None, workdir=None):
        self.build, self.cache = build, Path(cache)
        self.images, self.image_settings, self.workdir = images or {}, image_settings, workdir
        self.encoders = {}  # entry variant -> (encoder, its RecordCache)
        self.pixels = {}    # image settings -> {file: pixels}
        self.read = {}      # (test, entry, the specification's vector axes) -> its sets and the encoder's info
        self.computed = Counter()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        for _, records in self.encoders.values():
            records.close()
        self.encoders = {}

    def encoder(self, entry):
        key = digest(entry)
        if key not in self.encoders:
            encoder = self.build(entry)
            self.encoders[key] = (encoder, RecordCache(self.cache / "embeddings" / fingerprint(encoder.info)))
        return self.encoders[key]

    def drop(self, entry):
        """Close and forget ``entry``'s encoder (a twin's: R base-size models would not fit at once)."""
        encoder = self.encoders.pop(digest(entry), None)
        if encoder:
            encoder[1].close()
        self.read = {}

    def sets(self, stimulus, spec, entry):
        """({X|Y|A|B: float64 (n, dim)}, the encoder's info) of ``stimulus`` under ``spec``; the
        specifications that differ in their draw or seed alone share one reading of the cache."""
        key = digest(stimulus.id, entry, repr((spec.template, spec.casing, spec.adapter, spec.images)))
        if key not in self.read:
            self.read[key] = self._sets(stimulus, spec, entry)
        return self.read[key]

    def _sets(self, stimulus, spec, entry):
        adapter = entry.get("adapter")
        keys, text_axes = families.axes(adapter), families.text_axes(adapter)
        variant = {"texts": {**entry, **{keys[axis]: value for axis, value in spec.adapter}},
                   # an axis of the text tower alone leaves the images to the default's encoder and its cache
                   "images": {**entry, **{keys[axis]: value for axis, value in spec.adapter if axis not in text_axes}}}
        out, info = {}, None
        for s in SETS:
            st = getattr(stimulus, s)
            kind = "images" if st.items is None else "texts"
            encoder, records = self.encoder(variant[kind])
            where = fingerprint(encoder.info)
            if kind == "texts":
                out[s] = self._texts(encoder, records, where, st.items, spec, adapter)
                info = encoder.info  # the row's provenance: the encoder the variant changed
            else:
                out[s] = self._images(encoder, records, where, self.images[stimulus.id][s], spec)
                info = info or encoder.info
        return out, info

    def _vectors(self, records, where, keys, compute):
        unique = list(dict.fromkeys(keys))

        def counted(todo):
            self.computed.update((where, unique[i]) for i in todo)
            return compute([unique[i] for i in todo])

        vectors = cached_vectors(records, unique, counted)
        row = {k: i for i, k in enumerate(unique)}
        return vectors[[row[k] for k in keys]]

    def _texts(self, encoder, records, where, items, spec, adapter):
        chosen = templates(spec.template, adapter)
        items = [t.lower() for t in items] if spec.casing == "lower" else list(items)
        texts = [t.replace("{}", item) for item in items for t in chosen]
        by_digest = {digest(t): t for t in texts}
        vectors = self._vectors(records, where, list(by_digest),
                                lambda keys: encoder.encode_texts([by_digest[k] for k in keys]))
        vectors = vectors.astype(np.float64).reshape(len(items), len(chosen), -1)
        if len(chosen) == 1:  # the vector as the tables read it
            return vectors[:, 0]
        # CLIP's prompt ensemble: the mean of the unit vectors (the tests' cosines ignore its length)
        return (vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)).mean(axis=1)

    def _images(self, encoder, records, where, files, spec):
        if not hasattr(encoder, "encode_images"):
            raise refuse(encoder.info.get("adapter"), "images", "it embeds no images")
        settings = {**self.image_settings, **dict(spec.images)}
        pixels = self._pixels(settings, files)
        keys = [digest(p) for p in pixels]
        by_digest = dict(zip(keys, pixels, strict=True))
        return self._vectors(records, where, keys,
                             lambda todo: encoder.encode_images(np.stack([by_digest[k] for k in todo])))\
            .astype(np.float64)

    def _pixels(self, settings, files):
        """The pixels of ``files`` in the image store of ``settings``, each store built once."""
        from vlbias.images.store import build_image_store
        from vlbias.io.hdf5 import open_hdf5

        key = digest(settings)
        if key not in self.pixels:
            every = sorted({f for sets in self.images.values() for fs in sets.values() for f in fs})
            path = Path(self.workdir, f"images-{key[:12]}.h5")
            status = build_image_store([{"category": "all", "file": f, "path": f} for f in every], path, **settings)
            if failed := [r for r in status if r["status"] != "ok"]:
                raise UsageError(f"robustness: image {failed[0]['file']}: {failed[0]['status']}")
            with open_hdf5(path) as f:
                ids = [i.decode() if isinstance(i, bytes) else i for i in f["all"]["ids"][()]]
                self.pixels[key] = dict(zip(ids, f["all"]["pixels"][()], strict=True))
        return np.stack([self.pixels[key][f] for f in files])


def draw(vectors, b, settings):
    """Draw ``b`` of the subsample axis: each set without ``leave_out`` of its stimuli (at least two
    targets and one attribute left), the same rows for every specification of the draw."""
    sub = settings["subsample"]
    rng = np.random.default_rng([sub["seed"], b])
    out = {}
    for s in SETS:
        n = len(vectors[s])
        keep = max(n - round(sub["leave_out"] * n), min(n, 2 if s in ("X", "Y") else 1))
        out[s] = vectors[s][np.sort(rng.choice(n, keep, replace=False))]
    return out


def run(stimuli, model, entry, settings, stats, embedder, *, threads=None):
    """(curve, twins): DataFrames of every test of ``stimuli`` on model ``model`` (its ``entry``) under
    every specification (a row each: the test's row of vlbias.associate.score, SPEC_COLUMNS, p_holm
    within the specification's tests), and at the default under each random-init twin."""
    specs = specifications(settings, entry)
    twins = twin_entries(entry, settings)
    progress = Progress((len(specs) + len(twins)) * len(stimuli), f"specifications and twins of {model}", log)
    rows, twin_rows = [], []
    for i, spec in enumerate(specs):
        for stimulus in stimuli:
            rows.append(_row(stimulus, model, spec, entry, settings, stats, embedder, threads, default=i == 0))
            progress.advance()
    for twin in twins:
        for stimulus in stimuli:
            twin_rows.append(_row(stimulus, model, specs[0], twin, settings, stats, embedder, threads, default=True))
            progress.advance()
        embedder.drop(twin)
    progress.done()
    curve = add_adjusted(pd.DataFrame(rows), family=("specification", "model", "family"))
    return curve, pd.DataFrame(twin_rows)


def run_models(stimuli, entries, settings, stats, open_encoder, cache, *, threads=None, images=None, workdir=None):
    """(curve, twins) of ``run`` for each model of ``entries`` ({name: entry}) in turn, concatenated:
    ``open_encoder(name, entry)`` builds one of a model's variants or twins, each through the cache
    under ``cache``. ``images``: {name: (the Embedder's ``images``, its ``image_settings``)} of the
    models that read image sets (each its own: the images its store decoded, at its settings), their
    image stores in ``workdir``."""
    curves, twins = [], []
    for name, entry in entries.items():
        sets, store = (images or {}).get(name, (None, None))
        with Embedder(lambda variant, name=name: open_encoder(name, variant), cache, sets, store,
                      workdir) as embedder:
            curve, theirs = run(stimuli, name, entry, settings, stats, embedder, threads=threads)
        log.info("%s: %d specifications, %d twins; %d vectors computed", name, len(curve), len(theirs),
                 sum(embedder.computed.values()))
        curves.append(curve)
        twins.append(theirs)
    return pd.concat(curves, ignore_index=True), pd.concat(twins, ignore_index=True)


def _row(stimulus, model, spec, entry, settings, stats, embedder, threads, default):
    vectors, info = embedder.sets(stimulus, spec, entry)
    if spec.draw is not None:
        vectors = draw(vectors, spec.draw, settings)
    row = {"test": stimulus.id, "name": stimulus.name, "family": stimulus.family, "model": model,
           **{s: getattr(stimulus, s).label for s in SETS},
           **{n: len(vectors[s]) for n, s in zip(SIZES, SETS, strict=True)},
           "model_id": info.get("model_id", ""), "revision": info.get("revision", ""),
           "weights": info.get("weights", ""), "weights_seed": info.get("seed", ""),
           "specification": spec.label, **spec.axes(), "default": default}
    if empty := [s for s in SETS if len(vectors[s]) == 0]:
        return SPECIFICATION.build(row, status=f"skipped: no stimuli left in {', '.join(empty)}")
    seed = stats["seed"] if spec.seed is None else spec.seed
    return score(row, vectors, f"{stimulus.path} on {model} ({spec.label})", n_samples=settings["n_samples"],
                 seed=seed, exact=stats["exact"], threads=threads, ci=settings["ci"], declared=SPECIFICATION)


def summary(curve, twins, settings):
    """A row per test × model (SUMMARY_COLUMNS): d at the default and its Holm p; the range of d over
    the specifications; the share of them with the default's sign (``sign_share``) and with its Holm
    verdict at ``alpha`` (``holm_share``); the twins' mean and standard deviation of d, the share of
    twins with |d| at least the model's (``twins_share``) and its empirical p, (1 + that count) / (1 + R)
    (``twins_p``); ``robust``: sign_share at least ``settings["sign_share"]`` and twins_p below
    ``alpha`` (empty without twins: the curve alone does not say whether an untrained network gives
    the same d)."""
    alpha, rows = settings["alpha"], []
    for (test, model), group in curve.groupby(["test", "model"], sort=False):
        default = group[group["default"]].iloc[0]
        row = {c: default.get(c, "") for c in SUMMARY_COLUMNS}
        ok = group[group["status"] == "ok"]
        if default["status"] != "ok":
            rows.append(row)
            continue
        d = ok["d"].astype(float)
        significant = ok["p_holm"].astype(float) < alpha
        row |= {"n_specs": len(ok), "d_min": d.min(), "d_max": d.max(),
                "sign_share": float((np.sign(d) == np.sign(default["d"])).mean()),
                "holm_share": float((significant == (default["p_holm"] < alpha)).mean())}
        theirs = twins[(twins["test"] == test) & (twins["model"] == model) & (twins["status"] == "ok")] \
            if len(twins) else twins
        if len(theirs):
            td = theirs["d"].astype(float)
            beyond = int((td.abs() >= abs(default["d"])).sum())
            row |= {"twins": len(td), "twin_seeds": " ".join(str(s) for s in theirs["weights_seed"]),
                    "twins_mean": td.mean(), "twins_sd": td.std(ddof=1) if len(td) > 1 else math.nan,
                    "twins_share": beyond / len(td), "twins_p": (1 + beyond) / (1 + len(td))}
            row["robust"] = bool(row["sign_share"] >= settings["sign_share"] and row["twins_p"] < alpha)
        else:
            row |= {"twins": 0, "twin_seeds": "", "robust": ""}
        rows.append(row)
    # True, False or "" (undecided) in every table alike, not a column of numpy bools where all are decided
    return pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS).astype({"robust": object})
