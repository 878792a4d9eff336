"""Weights as workflow inputs: fetched once (where the network is), locked to what was resolved,
verified before use (where there may be no network).

What an entry loads is declared once, in its adapter schema's ``family: weights:`` block
(vlbias.models.plan.weights): which keys name weights and what they are::

    model_id:   {hub: [config.json, "model.safetensors|pytorch_model.bin"], revision: revision,
                 default: <id when unset>, unless: [checkpoint, path]}   # no source while those are set
    checkpoint: {file: models, sha256: sha256}   # a local file or an http(s) URL into <cache>/models
    path:       directory                       # a local directory
    pretrained: {open_clip: arch}               # an open_clip pretrained tag of the entry's arch
    weights:    {torchvision: arch}             # a torchvision weights enum name (or random)

A hub file list item ``a|b`` is the first of those the repository has, ``*.json`` every match; a
hub value that is a local directory or ``package:<name>`` is local. ``weights: random`` is a source
too (seed and config).

    sources = remote_sources(spec)                          # what an entry loads (no download)
    record = fetch(name, spec, cache=..., lock_path=...)    # downloads, checked against the lock
    write_record(path, record); record = read_record(path)
    spec = localize(spec, record)                           # job side: verified files, offline

The lock (``config/weights.lock.yaml`` by default) holds per entry the request (adapter and remote
source keys), each remote source's resolved commit and every file's size and sha256. The first
fetch of an entry writes its entry; later fetches download at the locked commit and refuse other
content; only ``update=True`` (``vlbias weights --update NAME``) resolves anew. Local files and
random weights get records (sha256 of the local files, seed and config) but no lock entry: they are
the user's own.
"""

import fnmatch
import importlib
import importlib.metadata
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

import yaml

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.fetch import DownloadError, cached_download, sha256_file
from vlbias.models.plan import weights as declared_weights

try:
    import fcntl
except ImportError:  # not POSIX: concurrent writers of one lock are not supported
    fcntl = None

LOCK_NAME = "weights.lock.yaml"
SECTIONS = (("ieat", "models", "models"), ("seat", "models", "models"), ("grounded", "models", "models"),
            ("mlm", "models", "models"), ("regions", "detectors", "detectors"))
REMOTE = ("hub", "url", "open_clip", "torchvision")  # the kinds a lock pins
_URL = re.compile(r"https?://")
LOCK_HEADER = """\
# The weights lock of vlbias (written by `vlbias weights` and the workflow's weights stage).
# Per model or detector entry (<section>/<name>): the request (adapter and the keys naming remote
# weights), each remote source's resolved commit and every file's size and sha256. Later fetches
# download at these commits and refuse any other content. Part of a table's provenance: commit it.
# To resolve an entry anew (another revision, a file replaced on purpose):
#     vlbias weights --update <entry>
"""


# --- what an entry loads ------------------------------------------------------------------------------


def entries(config):
    """{entry name: spec} of every configured entry that loads weights: ``ieat/<name>`` (models with
    ``source: images`` and the sweep's open_clip entries), ``seat/<name>``, ``grounded/<name>``,
    ``mlm/<name>``, ``regions/<name>`` (detectors). Read from the config alone (no adapter import)."""
    from vlbias.config import ieat_models

    found = {}
    for section, key, _ in SECTIONS:
        part = config.get(section) or {}
        if section == "ieat":  # the sweep's entries are open_clip's (the schema's default, for an unchecked config)
            sweep = [{"adapter": "open_clip", **e} for e in (part.get("sweep") or {}).get("models", [])]
            specs = ieat_models({"models": part.get("models") or {}, "sweep": {"models": sweep}})
        else:
            specs = part.get(key) or {}
        found.update({f"{section}/{name}": spec for name, spec in specs.items()
                      if isinstance(spec, dict) and spec.get("adapter")})
    return found


def _kind_of(name):
    return "detectors" if name and name.startswith("regions/") else "models"


def remote_sources(spec, kind="models"):
    """{key: source} of what the entry loads, from its adapter's declaration (``kind``: models or
    detectors; open_clip tags and torchvision enums are resolved through those libraries). A source
    is a dict with ``kind`` one of:

    - ``hub``: ``repo``, ``revision`` (requested), ``files`` (names, ``a|b`` alternatives, globs);
    - ``url``: ``url``, ``sha256`` (pinned or None), ``folder`` (its folder under the cache);
    - ``open_clip``: ``arch``, ``tag``, ``config`` (the tag's quick_gelu and preprocessing) and its
      file, as a ``hub`` source's keys (hf-hub tags) or ``url``;
    - ``torchvision``: ``arch``, ``enum``, ``url``, ``sha256_prefix`` (torchvision's file names
      carry the first digits of their sha256);
    - ``local``: ``path`` (a file or a directory), ``request`` (the value as written);
    - ``random``: ``seed``, ``config``.
    """
    adapter = spec.get("adapter")
    sources = {}
    if spec.get("weights") == "random":
        sources["weights"] = {"kind": "random", "seed": int(spec.get("seed", 0)),
                              "config": {k: spec[k] for k in ("arch", "config", "model_cfg") if k in spec}}
    for key, decl in declared_weights(adapter, kind).items():
        value = spec.get(key, decl.get("default"))
        if value is None or value == "random" or any(spec.get(k) is not None for k in decl.get("unless", ())):
            continue
        value = str(value)
        if "hub" in decl:
            local = _local_dir(value)
            sources[key] = ({"kind": "local", "path": str(local), "request": value} if local else
                            {"kind": "hub", "repo": value, "revision": spec.get(decl.get("revision", "revision")),
                             "files": list(decl["hub"])})
        elif "file" in decl:
            sources[key] = ({"kind": "url", "url": value, "sha256": spec.get(decl["sha256"]) if "sha256" in decl
                             else None, "folder": decl["file"]} if _URL.match(value) else
                            {"kind": "local", "path": value, "request": value})
        elif "directory" in decl:
            sources[key] = {"kind": "local", "path": value, "request": value}
        elif "open_clip" in decl:
            sources[key] = _open_clip_source(spec.get(decl["open_clip"]), value)
        elif "torchvision" in decl:
            sources[key] = _torchvision_source(spec.get(decl["torchvision"]), value)
    return sources


def package_dir(value):
    """(model directory, "<dist>==<version>") of ``package:<name>``: the package's ``get_model_path()``
    or its ``model/`` folder."""
    package = value.removeprefix("package:")
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as e:
        raise InputError(value, f"python package '{package}' is not installed") from e
    model_dir = Path(module.get_model_path() if hasattr(module, "get_model_path")
                     else Path(module.__file__).parent / "model")
    if not model_dir.is_dir():
        raise InputError(value, f"the package has no model directory ({model_dir})")
    dist = importlib.metadata.packages_distributions().get(package, [package])[0]
    return model_dir, f"{dist}=={importlib.metadata.version(dist)}"


def _local_dir(value):
    """The local directory a hub-or-local value names, or None for a hub id."""
    if value.startswith("package:"):
        return package_dir(value)[0]
    return Path(value) if Path(value).is_dir() else None


def _open_clip_source(arch, tag):
    import open_clip
    from open_clip.transform import PreprocessCfg

    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        tags = ", ".join(open_clip.list_pretrained_tags_by_model(arch)) or "none"
        raise InputError(f"{arch} pretrained '{tag}'", f"open_clip has no such tag for this arch (it has: {tags})")
    # what the tag brings besides the file: the adapter builds the same model from the local file
    config = {k: cfg[k] for k in (*PreprocessCfg.__dataclass_fields__, "quick_gelu") if cfg.get(k) is not None}
    # origin: where open_clip says the tag's file is (what the adapter records as its revision)
    source = {"kind": "open_clip", "arch": arch, "tag": tag, "config": config, "origin": cfg.get("hf_hub") or cfg["url"]}
    if cfg.get("hf_hub"):  # open_clip prefers the hub: "<org>/<name>/[<file>]", safetensors first
        repo, filename = os.path.split(cfg["hf_hub"])
        filename = filename or "open_clip_pytorch_model.bin"
        safe = ("open_clip_model.safetensors" if filename == "open_clip_pytorch_model.bin"
                else re.sub(r"\.(bin|pth)$", ".safetensors", filename))
        return {**source, "repo": repo, "revision": None, "files": [f"{safe}|{filename}"]}
    return {**source, "url": cfg["url"]}


def _torchvision_source(arch, name):
    from vlbias.regions.torchvision import ARCHS, DEFAULT_ARCH

    arch = arch or DEFAULT_ARCH
    enum = ARCHS[arch][1] if arch in ARCHS else None
    if enum is None or name not in enum.__members__:
        known = ", ".join(enum.__members__) if enum else "none"
        raise InputError(f"weights '{name}'", f"not a weight set of {arch} (known: {known}, or random)")
    url = enum[name].url
    prefix = re.search(r"-([a-f0-9]+)\.[^/]+$", url)
    return {"kind": "torchvision", "arch": arch, "enum": name, "url": url,
            "sha256_prefix": prefix.group(1) if prefix else None}


def request(spec, sources):
    """What an entry asks for, as the lock keeps it: its adapter and each remote source's request
    (not what it resolved to). None when it loads nothing remote."""
    keep = {"hub": ("repo", "revision", "files"), "url": ("url", "sha256"), "open_clip": ("arch", "tag"),
            "torchvision": ("arch", "enum", "url")}
    remote = {key: {k: s.get(k) for k in keep[s["kind"]]} for key, s in sources.items() if s["kind"] in REMOTE}
    return {"adapter": spec.get("adapter"), **remote} if remote else None


# --- fetching -------------------------------------------------------------------------------------


def fetch(name, spec, *, cache, lock_path, update=False):
    """The record of entry ``name``: every source downloaded (hub files through huggingface_hub into
    ``<cache>/hub``, URLs through vlbias.io.fetch.cached_download into ``<cache>/<folder>``, open_clip
    URL tags through open_clip's own download) and hashed; at the locked commit and checked against
    the locked digests when the lock at ``lock_path`` (None: no lock) has the entry and not
    ``update``, else resolved and then locked.

    The record (JSON-able)::

        {"entry": "seat/minilm", "adapter": "sentence",
         "sources": {"path": {"kind": "hub", "repo": ..., "revision": "main", "commit": "<sha>",
                              "local": "<snapshot dir>",
                              "files": {"config.json": {"size": 612, "sha256": ..., "path": ...}}}}}

    Raises InputError for a request other than the locked one and for content other than the locked
    (naming the lock, the entry, the file, both digests and the update command)."""
    sources = remote_sources(spec, _kind_of(name))
    wanted = request(spec, sources)
    lock = Lock(lock_path) if lock_path and wanted else None
    locked = lock.entry(name) if lock and not update else None
    if locked and locked.get("request") != wanted:
        raise InputError(f"weights lock {lock.path}", f"entry '{name}' was locked for {_brief(locked.get('request'))}; "
                                                      f"the config now asks for {_brief(wanted)}; if intended, run "
                                                      f"`vlbias weights --update {name}`")
    pins = (locked or {}).get("sources") or {}
    out = {}
    for key, source in sources.items():
        out[key] = got = _fetch_source(source, Path(cache), pins.get(key))
        for file, pinned in ((pins.get(key) or {}).get("files") or {}).items():
            have = got["files"].get(file)
            if have is None or have["sha256"] != pinned["sha256"]:
                raise InputError(f"weights lock {lock.path}", f"entry '{name}', file '{file}': sha256 "
                                                              f"{have and have['sha256']}, locked {pinned['sha256']}; "
                                                              f"if intended, run `vlbias weights --update {name}`")
    record = {"entry": name, "adapter": spec.get("adapter"), "sources": out}
    if lock and (update or not locked):
        lock.put(name, {"request": wanted, "sources": {
            key: {**({"commit": s["commit"]} if s.get("commit") else {}),
                  "files": {f: {"size": v["size"], "sha256": v["sha256"]} for f, v in s["files"].items()}}
            for key, s in out.items() if s["kind"] in REMOTE}})
    return record


def _brief(req):
    return json.dumps(req, sort_keys=True) if req else "nothing remote"


def _described(path):
    path = Path(path)
    return {"size": path.stat().st_size, "sha256": sha256_file(path), "path": str(path)}


def _fetch_source(source, cache, pin):
    """The source with what it resolved to: ``local`` (the file or directory the adapter reads),
    ``files`` ({name: size, sha256, path}), ``commit`` (hub), ``pinned`` (url: a sha256 in the config)."""
    kind = source["kind"]
    if kind == "random":
        return {**source, "files": {}}
    if kind == "local":
        path = Path(source["path"])
        if path.is_file():
            return {**source, "local": str(path), "files": {path.name: _described(path)}}
        if not path.is_dir():
            raise InputError(path, "no such file or directory")
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        return {**source, "local": str(path), "files": {str(p.relative_to(path)): _described(p) for p in files}}
    if kind == "hub":
        return _fetch_hub(source, cache / "hub", pin)
    if kind == "open_clip" and "repo" in source:  # the adapter reads the one file, not the snapshot
        got = _fetch_hub(source, cache / "hub", pin)
        return {**got, "local": next(iter(got["files"].values()))["path"]}
    if kind == "open_clip":
        import open_clip

        try:
            path = Path(open_clip.download_pretrained_from_url(source["url"], cache_dir=str(cache / "open_clip")))
        except Exception as e:  # HTTP and checksum errors alike: the file is not to be had
            raise InputError(source["url"], f"could not download ({e})") from e
    elif kind == "torchvision":  # torch.hub's own download and layout: <hub dir>/checkpoints/<file>
        import torch.hub

        hub_dir = cache / "torchvision"
        path = hub_dir / "checkpoints" / Path(source["url"]).name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:  # checks the sha256 prefix the file name carries
                torch.hub.download_url_to_file(source["url"], str(path), hash_prefix=source["sha256_prefix"],
                                               progress=False)
            except Exception as e:  # HTTP and checksum errors alike: the file is not to be had
                raise InputError(source["url"], f"could not download ({e}); set `checkpoint:` to a local copy") from e
        return {**source, "pinned": bool(source["sha256_prefix"]), "local": str(hub_dir),
                "files": {path.name: _described(path)}}
    else:
        try:
            path = cached_download(source["url"], cache / source["folder"], max_bytes=2**35,
                                   sha256=source.get("sha256"), timeout=60)
        except DownloadError as e:
            raise InputError(source["url"], f"{e.reason}; give a local copy instead") from None
    return {**source, "pinned": bool(source.get("sha256")), "local": str(path),
            "files": {Path(source["url"]).name: _described(path)}}


def _endpoint():
    from huggingface_hub import constants

    # read now, not at huggingface_hub's import: a test (or a caller) may point it elsewhere
    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def _fetch_hub(source, cache, pin):
    """A hub source's files at its revision (or the pinned commit)."""
    local, commit, paths = hub_download(source["repo"], source.get("revision"), source["files"], cache_dir=cache,
                                        pin=pin)
    return {**source, "commit": commit, "local": str(local), "files": {f: _described(p) for f, p in paths.items()}}


def hub_download(repo, revision, patterns, *, cache_dir=None, pin=None):
    """(snapshot directory, commit, {file: path}) of the files ``patterns`` name in hub repository
    ``repo`` at ``revision`` (default main), through huggingface_hub into ``cache_dir`` (default its
    own cache); with ``pin`` (a lock entry's source: ``commit``, ``files``) those files at that commit,
    which a cache that has them serves without the network."""
    from huggingface_hub import HfApi, hf_hub_download

    revision = revision or "main"
    endpoint = _endpoint()
    try:
        if pin:
            commit, files = pin["commit"], list(pin["files"])
        else:
            info = HfApi(endpoint=endpoint).model_info(repo, revision=revision)
            commit, files = info.sha, _choose(patterns, [s.rfilename for s in info.siblings or []], repo, revision)
        paths = {f: Path(hf_hub_download(repo, f, revision=commit, cache_dir=cache_dir, endpoint=endpoint))
                 for f in files}
    except InputError:
        raise
    except Exception as e:  # hub, HTTP and cache errors alike: the files are not to be had
        raise InputError(f"'{repo}'", f"could not be downloaded from the Hugging Face hub at revision '{revision}' "
                                      f"({e}); give a local copy instead or run with network access") from e
    # the snapshot folder, named after the commit: the files' common root
    first = next(iter(paths))
    return paths[first].parents[len(Path(first).parts) - 1], commit, paths


def _choose(patterns, present, repo, revision):
    """The repository files ``patterns`` name: a name (required), ``a|b`` (the first present), a glob."""
    chosen = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            chosen += sorted(f for f in present if fnmatch.fnmatchcase(f, pattern))
            continue
        found = next((f for f in pattern.split("|") if f in present), None)
        if found is None:
            raise InputError(f"'{repo}'", f"has no {' or '.join(pattern.split('|'))} at revision '{revision}'")
        chosen.append(found)
    return list(dict.fromkeys(chosen))


# --- records --------------------------------------------------------------------------------------


def write_record(path, record):
    """Write ``record`` as JSON at ``path``, atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_record(path):
    """The record written by :func:`write_record`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(path, f"cannot read the weights record ({e}); run the weights stage again") from None


def record_path(name):
    """Where the workflow keeps entry ``name``'s record: ``results/weights/<section>/<name>.json``."""
    return Path("results", "weights", f"{name}.json")


def provenance(record):
    """``record`` without what is local to one machine (cache paths): the same weights give the same
    provenance anywhere (for the stores' attributes and the tables)."""
    return {**record, "sources": {
        key: {**{k: v for k, v in source.items() if k not in ("local", "path")},
              "files": {f: {"size": v["size"], "sha256": v["sha256"]} for f, v in source["files"].items()}}
        for key, source in record["sources"].items()}}


def verify(record):
    """Check every file of ``record`` still has its recorded size and sha256 (InputError naming the
    entry, the file and both digests)."""
    name = record["entry"]
    for source in record["sources"].values():
        for file, want in source.get("files", {}).items():
            path = Path(want["path"])
            if not path.is_file():
                raise InputError(path, f"weights entry '{name}', file '{file}': missing; run `vlbias weights {name}`")
            if (got := sha256_file(path)) != want["sha256"] or path.stat().st_size != want["size"]:
                raise InputError(path, f"weights entry '{name}', file '{file}': sha256 {got}, recorded "
                                       f"{want['sha256']}; the cached file changed: run `vlbias weights {name}`")


def localize(spec, record):
    """``spec`` made to load from the recorded local files, with no network at all.

    Checks every recorded file (:func:`verify`), turns huggingface_hub and transformers offline, and
    returns a copy of ``spec`` whose remote weights keys name the local files or snapshot directories
    (local ones are left as they are), with ``fetched``: ``{key: {"request": the value as written (or
    the declared default), "revision", "commit", "config", "files": {name: sha256}}}`` for the
    adapters' provenance (read with :func:`fetched`)."""
    verify(record)
    go_offline()
    out, got = dict(spec), {}
    for key, source in record["sources"].items():
        if source["kind"] not in REMOTE:
            continue
        out[key] = source["local"]
        got[key] = {"request": source.get("repo") if source["kind"] == "hub" else
                    source.get("tag") or source.get("enum") or source.get("url"),
                    "revision": source.get("revision"), "commit": source.get("commit"),
                    "config": source.get("config"), "origin": source.get("origin"),
                    "files": {f: v["sha256"] for f, v in source["files"].items()}}
    out["fetched"] = got
    return out


def fetched(spec, key):
    """What localize recorded for ``key`` of a localized spec (``request``, ``revision``, ``commit``,
    ``config``, ``files``), or None for a spec (or key) not localized."""
    return (spec.get("fetched") or {}).get(key)


def as_written(spec, key, default=None):
    """The entry's ``key`` as the config wrote it, for provenance: in a localized spec a fetched key
    names a local file or directory; its request is what was written (or the declared default)."""
    got = fetched(spec, key)
    return got["request"] if got else spec.get(key, default)


def go_offline():
    """Turn huggingface_hub and transformers offline, in this process and its children, whether or not
    they are already imported (huggingface_hub reads the variables once, at import)."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import sys

    if "huggingface_hub.constants" in sys.modules:
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True


# --- the lock -------------------------------------------------------------------------------------


class Lock:
    """The weights lock file at ``path`` (YAML: the header comment, then ``{entry: {request, sources}}``).

    ``entry(name)`` reads it; ``put(name, entry)`` re-reads and rewrites it (atomically) under an
    exclusive flock on its folder, so that concurrent fetches never lose each other's entries.
    """

    def __init__(self, path):
        self.path = Path(path)

    def entries(self):
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise InputError(self.path, f"not valid YAML: {e}") from None
        if not isinstance(doc, dict):
            raise InputError(self.path, "expected a mapping of weights entries")
        return doc

    def entry(self, name):
        return self.entries().get(name)

    @contextmanager
    def locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        fd = os.open(self.path.parent, os.O_RDONLY)  # the folder: the file itself is replaced on write
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def put(self, name, entry):
        with self.locked():
            doc = self.entries()
            doc[name] = entry
            with atomic_path(self.path) as tmp:
                Path(tmp).write_text(LOCK_HEADER + yaml.safe_dump(dict(sorted(doc.items())), sort_keys=False,
                                                                  width=110), encoding="utf-8")
