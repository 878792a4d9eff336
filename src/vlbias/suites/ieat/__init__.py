"""The iEAT suite (Steed & Caliskan 2021): image stimuli → embedding stores.

Three ways to a store ``results/embeddings/ieat/<model>.h5``, one group per image category:
- the authors' published embeddings (CSV per category and model), fetched and checked;
- embeddings computed here from the stimulus images with a registered image encoder; the text sets
  of cross-modal tests (image targets with text attributes, or the reverse) with its text tower,
  one group per set ("<test>/<X|Y|A|B>"), in the same joint space;
- a user's own vectors (vlbias.io.vectors), keyed by "<category>/<file>" and by text.
"""

import logging
from contextlib import ExitStack
from pathlib import Path

import h5py
import numpy as np

from vlbias import CONFIG
from vlbias.errors import FetchError, InputError
from vlbias.io.cache import cached_outputs, cached_vectors, digest
from vlbias.io.fetch import fetch, read_manifest, sha256_file
from vlbias.io.hdf5 import open_hdf5
from vlbias.io.paths import confined
from vlbias.io.published import read_ieat_csv
from vlbias.io.store import read_provenance, write_embeddings
from vlbias.logs import FILE_ONLY, Progress

log = logging.getLogger(__name__)


def obtain(source, path, sha256, mirror, cache):
    """Local copy of upstream ``path`` under ``cache``; reuses a cached copy whose checksum matches.
    ``path`` comes from data (a manifest): confined to the cache (vlbias.io.paths)."""
    dest = confined(Path(cache) / source.mirror_name, path, f"upstream {source.repo}@{source.commit}")
    if dest.exists() and (not sha256 or sha256_file(dest) == sha256):
        return dest
    return fetch(source, path, dest, sha256=sha256 or None, mirror=mirror)


def published_store(manifest, model_file, source, mirror, cache, out, provenance):
    """Store of the authors' embeddings for ``model_file`` (e.g. "igpt_l_32")."""
    rows = [r for r in read_manifest(manifest, paths=("path",), required=("model_file", "category", "sha256"))
            if r["model_file"] == model_file]
    if not rows:
        raise FetchError(manifest, f"no embeddings listed for model file '{model_file}'")
    sets = {}
    for r in rows:
        path = obtain(source, r["path"], r["sha256"], mirror, cache)
        vectors, ids = read_ieat_csv(path)
        sets[r["category"]] = (vectors, ids)
        log.info("%s: %d x %d", r["category"], *vectors.shape, extra=FILE_ONLY)
    write_embeddings(out, sets, {**provenance, "source": f"{source.repo}@{source.commit}",
                                 "n": {k: len(v[1]) for k, v in sets.items()}})
    dims = sorted({v[0].shape[1] for v in sets.values()})
    log.info("published embeddings %s: %d categories, %d vectors of dimension %s (%s@%s)", model_file, len(sets),
             sum(len(v[1]) for v in sets.values()), "/".join(map(str, dims)), source.repo, source.commit[:7])


def image_entries(manifest, source, mirror, cache):
    """One entry per listed image: a local path, or None with the reason it could not be had.

    A missing image is recorded, not fatal (the table shows the n actually used). But an
    unreachable source fails at once with an error that names it and says how to set
    ``mirror``: a mirror folder that does not exist, or a download failing before any
    image has arrived.
    """
    if mirror and not (Path(mirror) / source.mirror_name).is_dir():
        raise FetchError(Path(mirror) / source.mirror_name,
                         f"the mirror has no such folder; set `mirror:` in {CONFIG} to a "
                         "directory laid out like the upstream repositories, or null to download")
    entries = []
    for r in read_manifest(manifest, paths=("category", "file"), required=("sha256",)):
        path = f"data/experiments/{r['category']}/{r['file']}"
        try:
            local, reason = obtain(source, path, r["sha256"], mirror, cache), ""
        except FetchError as e:
            if not mirror and not any(x["path"] for x in entries):
                raise
            local, reason = None, str(e)
        entries.append({"category": r["category"], "file": r["file"], "path": local, "reason": reason})
    return entries


def text_sets(stimuli):
    """{store key: [texts]}: the text sets of ``stimuli`` (the words or sentences of cross-modal tests)."""
    return {st.key: list(st.items) for s in stimuli for st in s.sets.values() if st.items is not None}


def store_categories(f):
    """The categories (groups holding pixels) of an open image store."""
    keys = []
    f.visititems(lambda name, obj: keys.append(name) if isinstance(obj, h5py.Group) and "pixels" in obj else None)
    return keys


def embed_image_store(images_h5, encoder, out, provenance, cache=None, stimuli=(), texts=None):
    """Embed every category of an image store (see vlbias.images.store), or of a list of stores whose
    categories differ (the zoo's iEAT and OASIS images), with ``encoder``, and the text sets of ``stimuli``
    (cross-modal tests) and ``texts`` ({store key: [texts]}: the skew stage's queries) with its text tower
    (``encode_texts``), into one store.

    A category left without images keeps an empty (0, dim) set, so the test that uses it is
    recorded as skipped with the category's name rather than failing somewhere else. With
    ``cache`` (a vlbias.io.cache.RecordCache of this encoder) an image whose pixels, or a text, it
    has seen is not embedded again. An encoder with several outputs (``encoder.outputs``: iGPT's
    layers and logits from one pass) gives a group per output and category, "<output>/<category>"
    (``output_store`` makes each output a store of its own).
    """
    several = list(getattr(encoder, "outputs", []))
    several = several if len(several) > 1 else []
    texts = text_sets(stimuli) | (texts or {})
    if texts and (several or not hasattr(encoder, "encode_texts")):
        raise InputError(f"adapter {encoder.info['adapter']}", f"has no text tower for the text sets {', '.join(texts)}")
    sets = {}
    with ExitStack() as stack:
        files = {}  # {category: the open store holding it}
        for path in [images_h5] if isinstance(images_h5, (str, Path)) else images_h5:
            f = stack.enter_context(open_hdf5(path))
            keys = store_categories(f)
            twice = sorted(set(keys) & set(files))
            if twice:
                raise InputError(path, f"holds the categories {', '.join(twice)} of another image store too")
            files |= dict.fromkeys(keys, f)
        progress = Progress(sum(len(f[k]["ids"]) for k, f in files.items()), "images", log)
        for key, f in sorted(files.items()):
            ids = [i.decode() if isinstance(i, bytes) else i for i in f[key]["ids"][()]]
            pixels = f[key]["pixels"][()]
            digests = [digest(p) for p in pixels]
            if several:
                vectors = cached_outputs(cache, digests, lambda todo: encoder.encode_outputs(pixels[todo])) or {
                    name: np.zeros((0, encoder.dims[name]), dtype=np.float32) for name in several}
                sets |= {f"{name}/{key}": (vectors[name], ids) for name in several}
            else:
                vectors = cached_vectors(cache, digests, lambda todo: encoder.encode_images(pixels[todo])) if ids \
                    else np.zeros((0, encoder.dim), dtype=np.float32)
                sets[key] = (vectors, ids)
            progress.advance(len(ids))
        progress.done(f"{cache.hits} from the cache" if cache is not None else "")
    if texts:
        items = list(dict.fromkeys(t for set_texts in texts.values() for t in set_texts))
        vectors = cached_vectors(cache, [digest(t) for t in items], lambda todo: encoder.encode_texts(
            [items[i] for i in todo]), Progress(len(items), "texts", log))
        row = {t: i for i, t in enumerate(items)}
        sets |= {key: (vectors[[row[t] for t in set_texts]], set_texts) for key, set_texts in texts.items()}
    write_embeddings(out, sets, {**encoder.info, **provenance, "n": {k: len(v[1]) for k, v in sets.items()}})


def output_store(store, output, out):
    """Write output ``output``'s groups ("<output>/<key>") of a several-output store as the store ``out``."""
    with open_hdf5(store) as f:
        if output not in f:
            raise InputError(store, f"no output '{output}' (it holds: {', '.join(sorted(f))})")
        keys = []
        f[output].visititems(lambda name, obj: keys.append(name) if isinstance(obj, h5py.Group)
                             and "vectors" in obj else None)
        sets = {key: (f[output][key]["vectors"][()], [i.decode() if isinstance(i, bytes) else i
                                                      for i in f[output][key]["ids"][()]]) for key in keys}
    provenance = read_provenance(store)
    if isinstance(provenance.get("dim"), dict):  # the several outputs' dimensions
        provenance["dim"] = provenance["dim"].get(output)
    write_embeddings(out, sets, {**provenance, "output": output, "n": {k: len(v[1]) for k, v in sets.items()}})
