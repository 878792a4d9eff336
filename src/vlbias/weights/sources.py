"""What an entry loads (its sources, from its adapter's declaration), and one resolver per kind of
source: where its files come from (the only downloads of vlbias's weights) and where they lie in the
cache afterwards (``locate``: what a job loads is derived from there, never from a path a record says).

A source is a dict with ``kind`` one of:

- ``hub``: ``repo``, ``revision`` (requested), ``files`` (names, ``a|b`` alternatives, globs);
- ``url``: ``url``, ``sha256`` (pinned or None), ``folder`` (its folder under the cache);
- ``open_clip``: ``arch``, ``tag``, ``config`` (the tag's quick_gelu and preprocessing), ``origin``
  and its file, as a ``hub`` source's keys (hf-hub tags) or ``url`` (with the sha256 the URL names);
- ``torchvision``: ``arch``, ``enum``, ``url``, ``sha256_prefix`` (torchvision's file names carry the
  first digits of their sha256);
- ``local``: ``path`` (a file or a directory), ``request`` (the value as written);
- ``random``: ``seed``, ``config``.

Resolved (``resolve``), a source also has ``files`` ({name: size, sha256, path}), and ``commit``
(hub) or ``pinned`` (url, torchvision: whether the config or the URL pins its digest).
"""

import functools
import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from vlbias.errors import InputError
from vlbias.io.fetch import cached_path, sha256_file
from vlbias.io.paths import StrPath
from vlbias.schemas import with_defaults
from vlbias.weights.declarations import declared
from vlbias.weights.download import hub_download, hub_snapshot, url_download

REMOTE = ("hub", "url", "open_clip", "torchvision")  # the kinds a lock pins
Source: TypeAlias = dict[str, Any]  # a source (module docstring): JSON-able, as records keep it
Spec: TypeAlias = Mapping[str, Any]  # a config entry (a model or a detector)
_URL = re.compile(r"https?://")
_SHA256 = re.compile(r"[0-9a-f]{64}")

# torchvision's Faster R-CNNs (vlbias.regions.torchvision): arch -> (factory, weights enum) names in
# torchvision.models.detection, imported when an entry names one (the default arch: its schema's)
TORCHVISION_ARCHS = {
    "fasterrcnn_resnet50_fpn": ("fasterrcnn_resnet50_fpn", "FasterRCNN_ResNet50_FPN_Weights"),
    "fasterrcnn_resnet50_fpn_v2": ("fasterrcnn_resnet50_fpn_v2", "FasterRCNN_ResNet50_FPN_V2_Weights"),
}


def torchvision_arch(arch: str) -> tuple[Callable[..., Any], Any]:
    """(model factory, weights enum) of torchvision detection model ``arch`` (InputError for another)."""
    if arch not in TORCHVISION_ARCHS:
        raise InputError(f"arch '{arch}'", f"not a torchvision Faster R-CNN (known: {', '.join(TORCHVISION_ARCHS)})")
    from torchvision.models import detection

    factory, enum = TORCHVISION_ARCHS[arch]
    return getattr(detection, factory), getattr(detection, enum)


# --- what an entry loads ------------------------------------------------------------------------------


def remote_sources(spec: Spec, kind: str = "models") -> dict[str, Source]:
    """{key: source} of what the entry loads, from its adapter's declaration (``kind``: models or
    detectors; open_clip tags and torchvision enums are resolved through those libraries' tables); the
    keys its schema gives a default and the entry leaves unset are read with that default."""
    spec, sources = with_defaults(spec, kind), {}
    if spec.get("weights") == "random":
        sources["weights"] = {"kind": "random", "seed": int(spec["seed"]),
                              "config": {k: spec[k] for k in ("arch", "config", "model_cfg") if k in spec}}
    for key, decl in declared(spec.get("adapter"), kind).items():
        value = spec.get(key, decl.get("default"))
        if value is None or value == "random" or any(spec.get(k) is not None for k in decl.get("unless", ())):
            continue
        value = str(value)
        if "hub" in decl:
            local = _local_dir(value) if decl.get("or_local") else None
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
            sources[key] = _torchvision_source(spec[decl["torchvision"]], value)  # the arch: a schema default
    return sources


def request(spec: Spec, sources: Mapping[str, Source]) -> dict[str, Any] | None:
    """What an entry asks for, as the lock keeps it: its adapter and each remote source's request
    (not what it resolved to). None when it loads nothing remote."""
    keep = {"hub": ("repo", "revision", "files"), "url": ("url", "sha256"), "open_clip": ("arch", "tag"),
            "torchvision": ("arch", "enum", "url")}
    remote = {key: {k: s.get(k) for k in keep[s["kind"]]} for key, s in sources.items() if s["kind"] in REMOTE}
    return {"adapter": spec.get("adapter"), **remote} if remote else None


def package_dir(value: str) -> tuple[Path, str]:
    """(model directory, "<dist>==<version>") of ``package:<name>``: the package's ``get_model_path()``
    or its ``model/`` folder."""
    package = value.removeprefix("package:")
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as e:
        raise InputError(value, f"python package '{package}' is not installed") from e
    model_dir = Path(module.get_model_path() if hasattr(module, "get_model_path")
                     else Path(str(module.__file__)).parent / "model")  # (__file__ None: a namespace package)
    if not model_dir.is_dir():
        raise InputError(value, f"the package has no model directory ({model_dir})")
    dist = distribution_of(package)
    return model_dir, f"{dist}=={importlib.metadata.version(dist)}"


@functools.cache
def distribution_of(package: str) -> str:
    """The name of the installed distribution that holds the top-level ``package``: the distribution of
    the package's own name (normalised, as pip installs a model package) when its files hold the package,
    else importlib.metadata's package map, which reads every installed distribution's file list (half a
    CPU-second, paid by every model job before this lookup)."""
    try:
        dist = importlib.metadata.distribution(package)
        if any(f.parts[0] in (package, f"{package}.py") for f in dist.files or ()):
            return dist.metadata["Name"]
    except importlib.metadata.PackageNotFoundError:
        pass
    return importlib.metadata.packages_distributions().get(package, [package])[0]


def _local_dir(value: str) -> Path | None:
    """The local directory a hub-or-local value names (a directory, ``package:<name>``, a path that is
    no hub id), or None for a hub id."""
    if value.startswith("package:"):
        return package_dir(value)[0]
    return None if re.fullmatch(r"[\w.-]+(/[\w.-]+)?", value) and not Path(value).is_dir() else Path(value)


def _open_clip_source(arch: str | None, tag: str) -> Source:
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
    # open_clip's URL convention: OpenAI's files sit in a folder named by their sha256
    folder = cfg["url"].split("/")[-2]
    return {**source, "url": cfg["url"], "sha256": folder if _SHA256.fullmatch(folder) else None}


def _torchvision_source(arch: str, name: str) -> Source:
    enum = torchvision_arch(arch)[1] if arch in TORCHVISION_ARCHS else None
    if enum is None or name not in enum.__members__:
        known = ", ".join(enum.__members__) if enum else "none"
        raise InputError(f"weights '{name}'", f"not a weight set of {arch} (known: {known}, or random)")
    url = enum[name].url
    prefix = re.search(r"-([a-f0-9]+)\.[^/]+$", url)
    return {"kind": "torchvision", "arch": arch, "enum": name, "url": url,
            "sha256_prefix": prefix.group(1) if prefix else None}


# --- resolvers: where the files come from, where they lie -----------------------------------------------


def resolve(source: Source, cache: StrPath, pin: Mapping[str, Any] | None) -> Source:
    """The source with what it resolved to (``files``, and ``commit`` or ``pinned``), its files
    downloaded into ``cache`` where they are remote: hub files through huggingface_hub into
    ``<cache>/hub`` (at the commit of ``pin``, a lock entry's source, when given), URLs into
    ``<cache>/<folder>``, open_clip URL tags into ``<cache>/open_clip``, torchvision's into
    ``<cache>/torchvision``."""
    kind, cache = source["kind"], Path(cache)
    if kind == "random":
        return {**source, "files": {}}
    if kind == "local":
        return {**source, "files": {name: described(path) for name, path in _local_files(source).items()}}
    if kind == "hub" or (kind == "open_clip" and "repo" in source):
        commit, paths = hub_download(source["repo"], source.get("revision"), source["files"],
                                     cache_dir=cache / "hub", pin=pin)
        return {**source, "commit": commit, "files": {f: described(p) for f, p in paths.items()}}
    if kind == "torchvision":  # its file name carries the first digits of its sha256: checked
        path = url_download(source["url"], cache / "torchvision", None, hint="set `checkpoint:` to a local copy")
        digest = sha256_file(path)
        if source["sha256_prefix"] and not digest.startswith(source["sha256_prefix"]):
            raise InputError(source["url"], f"its sha256 is {digest}, the file name says {source['sha256_prefix']}...")
        return {**source, "pinned": bool(source["sha256_prefix"]), "files": {Path(source["url"]).name: described(path)}}
    folder = "open_clip" if kind == "open_clip" else source["folder"]
    path = url_download(source["url"], cache / folder, source.get("sha256"), hint="give a local copy instead")
    return {**source, "pinned": bool(source.get("sha256")), "files": {Path(source["url"]).name: described(path)}}


def locate(source: Source, cache: StrPath, names: Sequence[str]) -> dict[str, Path]:
    """{file name: path} where the resolved ``source``'s files ``names`` lie: in the cache where
    ``resolve`` put them (``cache``: the same folder), the local file or folder itself."""
    kind, cache = source["kind"], Path(cache)
    if kind == "random":
        return {}
    if kind == "local":
        return _local_files(source)
    if kind == "hub" or (kind == "open_clip" and "repo" in source):
        folder = hub_snapshot(cache / "hub", source["repo"], source["commit"])
        return {name: folder / name for name in names}
    subfolder = {"torchvision": "torchvision", "open_clip": "open_clip"}.get(kind) or source["folder"]
    return {Path(source["url"]).name: cached_path(source["url"], cache / subfolder, source.get("sha256"))}


def _local_files(source: Source) -> dict[str, Path]:
    """{name: path} of a local source: the file, or every file in the folder (not hidden files or
    folders, e.g. a .cache/ that huggingface_hub leaves in a local download)."""
    path = Path(source["path"])
    if path.is_file():
        return {path.name: path}
    if not path.is_dir():
        raise InputError(path, "no such file or directory")
    files = sorted(p for p in path.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return {str(p.relative_to(path)): p for p in files}


def described(path: StrPath) -> dict[str, Any]:
    path = Path(path)
    return {"size": path.stat().st_size, "sha256": sha256_file(path), "path": str(path)}
