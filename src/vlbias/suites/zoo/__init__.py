"""The encoder zoo (Ghate et al., NAACL 2025): the battery (the iEAT tests; Ghate et al.'s text tests,
vlbias.suites.zoo.text, and cross-modal tests, vlbias.suites.zoo.cross_modal) over many open_clip encoders, each result
row beside the model's pretraining dataset, size and downstream accuracy, and the model-level analyses
(which upstream choices predict d; how d goes with accuracy).

A model is a unit that may fail alone: its weights that cannot be fetched, or a model that cannot be
built, give a failure record and a failure store (``failed``: the reason), which the tables show as
a row per test with that status; the other models are built.

    record = fetch_or_failure("zoo/vit-b-32-openai", entry, cache=..., lock_path=...)
    embed_or_failure(record, "zoo/vit-b-32-openai", entry, images_h5, out, ...)
    failure(store)      # the reason a store holds no vectors, or None
"""

import json
import logging
from pathlib import Path

from vlbias.errors import FetchError, InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.store import read_provenance, write_embeddings

log = logging.getLogger(__name__)

# what a zoo entry carries for the zoo alone (its metadata's tag), not for its adapter
ZOO_KEYS = ("tag",)


def adapter_entry(entry):
    """The entry as its adapter builds it."""
    return {k: v for k, v in entry.items() if k not in ZOO_KEYS}


def fetch_or_failure(name, entry, *, cache, lock_path):
    """The weights record of a zoo model, or {"failed": why} where its weights cannot be had (the rest of
    the zoo is built)."""
    from vlbias.weights import fetch

    try:
        return fetch(name, adapter_entry(entry), cache=cache, lock_path=lock_path)
    except (FetchError, InputError, OSError) as e:
        log.error("%s: its weights could not be fetched: %s", name, e)
        return {"failed": f"weights not fetched: {e}"}


def fetch_all(models, records, *, cache, lock_path):
    """Each model's record (fetch_or_failure) at its path of ``records``, one model after another: one job on
    the submitting node, where the network is, each file fetched once into the shared cache."""
    for (name, entry), path in zip(models.items(), records):
        write_json(path, fetch_or_failure(f"zoo/{name}", entry, cache=cache, lock_path=lock_path))


def write_json(path, doc):
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(path, f"cannot read the zoo's weights record ({e}); run rule zoo_weights again") from None


def embed_or_failure(record, name, entry, images_h5, out, *, threads, cache, lock_path, stimuli, provenance):
    """Embed the image stores (``images_h5``: the iEAT store, and the OASIS store where configured) and the
    text sets of ``stimuli`` with the zoo model (vlbias.suites.ieat's embed_image_store, through the
    content-keyed cache), or write a store holding only its failure:
    a failed fetch's, or that of a model that does not build or embed."""
    if "failed" in record:
        write_embeddings(out, {}, {**provenance, "failed": record["failed"]})
        return
    from vlbias.io.cache import RecordCache, fingerprint
    from vlbias.models import build
    from vlbias.suites.ieat import embed_image_store
    from vlbias.weights import localize
    from vlbias.weights import provenance as record_provenance
    from vlbias.weights.record import check_record

    check_record(record, name)
    try:
        spec = localize(name, adapter_entry(entry), record, cache=cache, lock_path=lock_path)
        encoder = build({**spec, "threads": threads})
    except (InputError, OSError, RuntimeError) as e:
        log.error("%s: the model could not be loaded: %s", name, e)
        write_embeddings(out, {}, {**provenance, "failed": f"not loaded: {e}"})
        return
    with RecordCache(Path(cache, "embeddings", fingerprint(encoder.info))) as found:
        embed_image_store(images_h5, encoder, out, {**provenance, "weights_record": record_provenance(record)},
                          found, stimuli)


def failure(store):
    """Why a zoo store holds no vectors (its model's fetch or load failed), or None."""
    return read_provenance(store).get("failed")


def upstream_file(manifest, file, source, mirror, cache, out):
    """Copy open_clip's ``file`` (a file name the manifest lists, e.g. openclip_results.csv), read from the
    mirror or downloaded at the pinned commit and checked against the manifest's sha256, to ``out``."""
    import shutil

    from vlbias.io.fetch import read_manifest
    from vlbias.suites.ieat import obtain

    rows = [r for r in read_manifest(manifest, paths=("path",), required=("sha256",)) if Path(r["path"]).name == file]
    if not rows:
        raise InputError(manifest, f"lists no file '{file}'")
    local = obtain(source, rows[0]["path"], rows[0]["sha256"], mirror, cache)
    with atomic_path(out) as tmp:
        shutil.copyfile(local, tmp)



def accuracy_path(config):
    """The local file of the zoo's accuracy table: ``zoo/accuracy``, or open_clip's fetched into the cache
    (from the mirror, or the pinned commit) where it is ``upstream``."""
    from vlbias.suites.plan import mirror, source
    from vlbias.suites.zoo.plan import ZooPlan

    path = Path(ZooPlan(config).accuracy())
    if config["zoo"]["accuracy"] != "upstream":
        return path
    cached = Path(config["cache"], "zoo", path.name)
    if not cached.is_file():
        upstream_file(config["zoo"]["manifest"], path.name, source(config, "open_clip"), mirror(config),
                      config["cache"], cached)
    return cached
