"""Embedding stores two suites and the command line share: text stimuli encoded by a model (the SEAT
suite's store of each model, `vlbias run --model` on a text test), and the image files of a manifest
by category, which one's own vectors of an image test are keyed by (the iEAT and SEAT rules of
`source: vectors`, `vlbias run --vectors`)."""

import logging

from vlbias.io.cache import cached_vectors, digest
from vlbias.io.fetch import read_manifest
from vlbias.io.store import write_embeddings
from vlbias.logs import Progress

log = logging.getLogger(__name__)


def embed_stimuli(stimuli, encoder, out, provenance, cache=None):
    """Encode every set's items (words or sentences) of ``stimuli`` into one store, a group per set
    ("<test>/<X|Y|A|B>"). Each distinct text is encoded once; with ``cache`` (a RecordCache of this
    encoder) only texts it has not seen are, so editing one test re-encodes that test's new texts."""
    # shortest first: the encoder sorts by length only within a chunk of the cache's, so chunks of texts of
    # like length pad less (the SEAT store's texts: 7% fewer tokens run)
    texts = sorted(dict.fromkeys(item for s in stimuli for st in s.sets.values() for item in st.items), key=len)
    progress = Progress(len(texts), "texts", log)
    vectors = cached_vectors(cache, [digest(t) for t in texts],
                             lambda todo: encoder.encode_texts([texts[i] for i in todo]), progress)
    row = {t: i for i, t in enumerate(texts)}
    sets = {st.key: (vectors[[row[i] for i in st.items]], list(st.items)) for s in stimuli for st in s.sets.values()}
    write_embeddings(out, sets, {**encoder.info, **provenance, "stimuli": {s.id: s.path for s in stimuli},
                                 "levels": {s.id: s.level for s in stimuli}})


def image_files(manifest):
    """{category: [file, ...]} of an image manifest, files sorted (the image store's order)."""
    files = {}
    for r in read_manifest(manifest, required=("category", "file")):
        files.setdefault(r["category"], []).append(r["file"])
    return {category: sorted(names) for category, names in files.items()}
