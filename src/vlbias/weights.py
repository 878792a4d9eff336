"""Weights as workflow inputs: fetched once (where the network is), locked to what was resolved,
verified before use (where there may be no network).

What an entry loads is declared once, in its adapter schema's ``family: weights:`` block
(vlbias.models.plan.weights): which keys name weights and what they are::

    model_id:   {hub: [config.json, "model.safetensors|pytorch_model.bin"], revision: revision}
    checkpoint: {file: true, sha256: sha256}    # a local file or an http(s) URL (pinned by key sha256)
    path:       directory                      # a local directory
    pretrained: {open_clip: arch}              # an open_clip pretrained tag of the entry's arch
    weights:    {torchvision: arch}            # a torchvision weights enum name (``random``: none)

A hub file list item ``a|b`` is the first of those the repository has; a hub value that is a local
directory or ``package:<name>`` is local. ``weights: random`` is a source too (seed and config).

    sources = remote_sources(spec)                 # planning: what an entry loads (no download)
    record = fetch(name, spec, cache=..., lock_path=...)   # downloads, checked against the lock
    write_record(path, record); record = read_record(path)
    spec = localize(spec, record)                  # job side: verified local files, offline mode

The lock (``config/weights.lock.yaml`` by default) holds per entry the request (adapter and source
keys), each remote source's resolved commit and every file's size and sha256. The first fetch of an
entry writes its entry; later fetches download at the locked commit and refuse other content; only
``update=True`` (``vlbias weights --update NAME``) resolves anew. Local files and random weights get
records (sha256 of the local files, seed and config) but no lock entry: they are the user's own.
"""

LOCK_NAME = "weights.lock.yaml"


def entries(config):
    """{entry name: spec} of every configured entry that loads weights: ``ieat/<name>`` (models with
    ``source: images`` and the sweep's open_clip entries), ``seat/<name>``, ``grounded/<name>``,
    ``mlm/<name>``, ``regions/<name>`` (detectors). Read from the config alone (no adapter import)."""
    raise NotImplementedError


def remote_sources(spec):
    """{key: source} of what the entry loads, from its adapter's declaration (no adapter import;
    open_clip tags and torchvision enums are resolved through those libraries). A source is a dict
    with ``kind`` one of:

    - ``hub``: ``repo``, ``revision`` (requested), ``files`` (names or ``a|b`` alternatives, globs);
    - ``url``: ``url``, ``sha256`` (pinned or None), ``cache`` (the folder under the cache);
    - ``open_clip``: ``arch``, ``tag``, and its file as ``repo``/``revision``/``files`` (hf-hub
      tags) or ``url``, plus ``config`` (quick_gelu, preprocess) the tag brings;
    - ``local``: ``path`` (a file or a directory);
    - ``random``: ``seed``, ``config``.
    """
    raise NotImplementedError


def fetch(name, spec, *, cache, lock_path, update=False):
    """The record of entry ``name``: every source downloaded (hub files through huggingface_hub into
    ``<cache>/hub``, URLs through vlbias.io.fetch.cached_download into ``<cache>/models``, open_clip
    tags through open_clip's own download) and hashed; at the locked commit and checked against the
    locked digests when ``lock_path`` has the entry (unless ``update``), else resolved and locked.

    The record (JSON-able)::

        {"entry": "seat/minilm", "adapter": "sentence",
         "sources": {"path": {"kind": "hub", "repo": ..., "revision": "main", "commit": "<sha>",
                              "local": "<snapshot dir>",
                              "files": {"config.json": {"size": 612, "sha256": ...}, ...}}}}

    Raises InputError for a request that differs from the locked one and for content that differs
    from the locked digests (naming the lock, the entry, the file, both digests and the command)."""
    raise NotImplementedError


def write_record(path, record):
    """Write ``record`` as JSON at ``path``, atomically."""
    raise NotImplementedError


def read_record(path):
    """The record written by :func:`write_record`."""
    raise NotImplementedError


def localize(spec, record):
    """``spec`` made to load from the recorded local files, with no network at all.

    Checks every recorded file still has its size and sha256 (InputError naming the entry, the file
    and both digests), turns huggingface_hub and transformers offline, and returns a copy of
    ``spec`` whose weights keys name local files or snapshot directories, with ``fetched``:
    ``{key: {"request": original value, "revision": ..., "commit": ..., "files": {name: sha256}}}``
    for the adapters' provenance (read with :func:`fetched`)."""
    raise NotImplementedError


def fetched(spec, key):
    """What localize recorded for ``key`` of a localized spec (``request``, ``revision``, ``commit``,
    ``files``), or None for a spec (or key) not localized."""
    return (spec.get("fetched") or {}).get(key)


def go_offline():
    """Turn huggingface_hub and transformers offline, in this process and its children, whether or not
    they are already imported (their constants are read at import)."""
    raise NotImplementedError


class Lock:
    """The weights lock file: ``Lock(path)``; ``with lock.locked():`` holds an exclusive flock on
    ``<path>.flock`` so that concurrent fetches never lose each other's entries.

    - ``entry(name)``: the locked entry or None;
    - ``put(name, entry)``: rewrite the file (atomically) with ``name`` set, inside ``locked()``.
    """
