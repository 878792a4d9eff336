"""The downloads of weights (nowhere else in vlbias does a model's file come from the network), with
one size cap for every file."""

import fnmatch
import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.fetch import DownloadError, cached_download
from vlbias.io.paths import StrPath

MAX_BYTES = 2**35  # 32 GiB: the largest weights file accepted (the published ones are below 6 GB)


def url_download(url: str, folder: StrPath, sha256: str | None, hint: str) -> Path:
    """The file of http(s) ``url`` in ``folder`` (vlbias.io.fetch.cached_download: downloaded once,
    named by ``sha256`` when pinned, else by the URL, and checked against ``sha256``)."""
    try:
        return cached_download(url, folder, max_bytes=MAX_BYTES, sha256=sha256, timeout=60)
    except DownloadError as e:
        raise InputError(url, f"{e.reason}; {hint}") from None


def _endpoint() -> str:
    from huggingface_hub import constants

    # read now, not at huggingface_hub's import: a test (or a caller) may point it elsewhere
    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def hub_snapshot(cache_dir: StrPath, repo: str, commit: str) -> Path:
    """The folder of ``repo``'s files at ``commit`` in the huggingface_hub cache ``cache_dir``."""
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_dir) / repo_folder_name(repo_id=repo, repo_type="model") / "snapshots" / commit


def hub_download(repo: str, revision: str | None, patterns: Iterable[str], *, cache_dir: str | Path,
                 pin: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Path]]:
    """(commit, {file: path}) of the files ``patterns`` name (``choose``) in hub repository ``repo`` at
    ``revision`` (default main), through huggingface_hub into ``cache_dir``; with ``pin`` (a lock
    entry's source: ``commit``, ``files``) those files at that commit, which a cache that has them
    serves without the network. The paths lie in ``hub_snapshot(cache_dir, repo, commit)``."""
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    revision = revision or "main"
    endpoint = _endpoint()
    try:
        if pin:
            commit, files = pin["commit"], list(pin["files"])
        elif constants.is_offline_mode():  # the cache alone: the snapshot its ref `revision` names
            folder = Path(snapshot_download(repo, revision=revision, cache_dir=cache_dir))
            present = [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()]
            commit, files = folder.name, choose(patterns, present, repo, revision)
        else:
            info = HfApi(endpoint=endpoint).model_info(repo, revision=revision)
            commit, files = info.sha, choose(patterns, [s.rfilename for s in info.siblings or []], repo, revision)
        for f in files:
            hf_hub_download(repo, f, revision=commit, cache_dir=cache_dir, endpoint=endpoint)
    except InputError:
        raise
    except Exception as e:  # hub, HTTP and cache errors alike: the files are not to be had
        raise InputError(f"'{repo}'", f"could not be downloaded from the Hugging Face hub at revision '{revision}' "
                                      f"({e}); run with network access, or give a local copy: a model folder under "
                                      "`path:` or a weights file under `checkpoint:`, as the adapter takes") from e
    # as given (huggingface_hub makes paths absolute): a cluster's nodes may mount the working
    # directory elsewhere
    snapshot = hub_snapshot(cache_dir, repo, commit)
    ref = snapshot.parent.parent / "refs" / revision
    if revision != commit and not pin and not (ref.is_file() and ref.read_text() == commit):
        # what the revision resolved to, as huggingface_hub's cache keeps it (downloads were by commit):
        # an offline run naming the revision finds the snapshot
        with atomic_path(ref) as tmp:
            Path(tmp).write_text(commit)
    return commit, {f: snapshot / f for f in files}


def choose(patterns: Iterable[str], present: Collection[str], repo: str, revision: str) -> list[str]:
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
