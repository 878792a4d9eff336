"""Upstream files from a local mirror or the network, checked by sha256, written atomically.

Also the TSV manifests that list those files (and the status tables the pipeline writes).
"""

import hashlib
import http.client
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, urlsplit

from vlbias.errors import FetchError, InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.paths import StrPath, confined, relative_path
from vlbias.logs import FILE_ONLY

log = logging.getLogger(__name__)

MIRROR_HINT = ("To use local files instead, set `mirror:` in config/config.yaml to a local directory "
               "laid out like the upstream repositories (e.g. ../shared/data)")
_CHUNK = 1 << 20
_SCHEMES = ("http", "https")


def sha256_file(path: StrPath) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Source:
    """An upstream repository pinned to a commit; mirrored under ``<mirror>/<mirror_name>/``."""

    repo: str
    commit: str
    mirror_name: str
    url_template: str = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"

    def url(self, path: str) -> str:
        return self.url_template.format(repo=self.repo, commit=self.commit, path=quote(path, safe="/"))


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    # urllib's own handler still follows redirects to ftp://; allow only http(s)
    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: http.client.HTTPMessage, newurl: str) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme not in _SCHEMES:
            raise urllib.error.HTTPError(newurl, code, f"refused redirect to {newurl}", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _TooLarge(Exception):
    pass


def _copy(src: IO[bytes], dst: IO[bytes], max_bytes: int | None = None) -> str:
    """Copy file object ``src`` to ``dst`` in chunks; hex sha256 of what was copied."""
    h, n = hashlib.sha256(), 0
    for block in iter(lambda: src.read(_CHUNK), b""):
        n += len(block)
        if max_bytes is not None and n > max_bytes:
            raise _TooLarge
        h.update(block)
        dst.write(block)
    return h.hexdigest()


def _why(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """A short reason for a failed request, and whether trying again may help."""
    if isinstance(exc, urllib.error.HTTPError):
        transient = exc.code >= 500 or exc.code in (408, 429)
        return f"HTTP {exc.code} {exc.reason}", transient
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, str):  # urllib's complaint about the URL itself, e.g. "no host given"
        return reason, False
    if isinstance(reason, TimeoutError):
        return f"no response within {timeout} s", True
    if isinstance(reason, socket.gaierror):
        return f"host name not resolved, network unreachable? ({reason.strerror})", True
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower(), True
    return f"{type(reason).__name__}: {reason}", True


def unreachable(urls: str | Iterable[str], timeout: float = 5.0) -> str | None:
    """Why none of the servers of the http(s) ``urls`` can be reached (the first URL's reason), or None
    when one answers (any HTTP status, a 404 too): HEAD requests at once, through the environment's
    proxies, each bounded by ``timeout`` seconds also where the host name lookup hangs."""
    urls = [urls] if isinstance(urls, str) else list(urls)
    outcome: dict[str, str | None] = {}

    def probe(url: str) -> None:
        try:
            urllib.request.build_opener(_HttpOnlyRedirects()).open(
                urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            outcome[url] = None
        except urllib.error.HTTPError:
            outcome[url] = None  # the server answered
        except (OSError, http.client.HTTPException) as e:
            outcome[url] = _why(e, timeout)[0]

    # daemon threads: a lookup that never returns does not hold up the exit
    threads = [threading.Thread(target=probe, args=(url,), daemon=True) for url in urls]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout + 1
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    reasons = [outcome.get(url, f"no response within {timeout:g} s") for url in urls]
    return None if not urls or any(r is None for r in reasons) else reasons[0]


class DownloadError(FetchError):
    """A download failed; ``reason`` says why without naming the URL (it is ``source``)."""

    def __init__(self, url: str, reason: str) -> None:
        self.reason = reason
        super().__init__(url, reason)


def download(url: str, out: IO[bytes], *, timeout: float, retries: int, max_bytes: int, backoff: float) -> str:
    """Stream the http(s) ``url`` into the open binary file ``out``; hex sha256 of the content.

    ``timeout`` bounds each wait for data, ``retries`` further tries follow transient failures
    (5xx, 408, 429, timeouts, connection errors; waiting ``backoff``, 2x``backoff``, ... seconds),
    at most ``max_bytes`` are accepted, and redirects are followed to http(s) URLs only.
    Raises :class:`DownloadError`.
    """
    if urlsplit(url).scheme not in _SCHEMES:
        raise DownloadError(url, "refusing to download: only http(s) URLs are fetched")
    opener = urllib.request.build_opener(_HttpOnlyRedirects())
    for attempt in range(retries + 1):
        out.seek(0)
        out.truncate()
        try:
            with opener.open(url, timeout=timeout) as response:
                declared = response.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > max_bytes:
                    raise _TooLarge
                return _copy(response, out, max_bytes)
        except _TooLarge:
            raise DownloadError(url, f"could not download: response larger than the limit of {max_bytes} "
                                     "bytes") from None
        except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
            why, transient = _why(e, timeout)
        if not transient or attempt == retries:
            tries = f" after {attempt + 1} attempts" if attempt else ""
            raise DownloadError(url, f"could not download{tries}: {why}")
        delay = backoff * 2**attempt
        log.warning("%s: %s; trying again in %.1f s", url, why, delay, extra=FILE_ONLY)
        time.sleep(delay)
    raise DownloadError(url, f"no attempt made: retries must be at least 0, got {retries}")


def cached_path(url: str, cache: StrPath, sha256: str | None = None) -> Path:
    """Where ``cached_download`` keeps ``url`` in the folder ``cache`` (see there)."""
    key = sha256.lower() if sha256 else hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(cache) / f"{key}-{Path(urlsplit(url).path).name or 'download'}"


def cached_download(url: str, cache: StrPath, *, max_bytes: int, sha256: str | None = None, timeout: float = 30,
                    retries: int = 3, backoff: float = 0.5) -> Path:
    """The path of ``url`` downloaded once into the folder ``cache``, named after what it is: the
    pinned ``sha256`` when given, else a digest of the whole URL (never the file name alone, which
    another URL may share), followed by the URL's file name for the reader.

    For URLs that pin their content (a commit, a release file): a later call returns the cached
    copy without asking the network. ``sha256``, when given, must be the content's (else
    :class:`DownloadError`, and nothing is kept); a cached copy that no longer matches it is
    downloaded again. Raises :class:`DownloadError`.
    """
    sha256 = sha256.lower() if sha256 else None
    dest = cached_path(url, cache, sha256)
    if dest.is_file() and sha256 and sha256_file(dest) != sha256:
        log.warning("%s: cached copy of %s differs from its pinned sha256; downloading it again", dest, url)
        dest.unlink(missing_ok=True)
    if not dest.is_file():
        with atomic_path(dest) as tmp, open(tmp, "wb") as out:
            got = download(url, out, timeout=timeout, retries=retries, max_bytes=max_bytes, backoff=backoff)
            if sha256 and got != sha256:
                raise DownloadError(url, f"the content's sha256 is {got}, not the pinned {sha256}")
    return dest


def fetch(source: Source, path: str, dest: StrPath, *, sha256: str | None, mirror: StrPath | None, timeout: float = 30,
          retries: int = 3, max_bytes: int = 200 * 2**20, backoff: float = 0.5) -> Path:
    """Put upstream ``path`` of ``source`` at ``dest`` and return ``dest``.

    With ``mirror`` the file is read from ``<mirror>/<source.mirror_name>/<path>`` only (never the
    network); without it it is downloaded from ``source.url(path)``, with ``retries`` further tries
    after transient failures (waiting ``backoff``, 2x``backoff``, ... seconds) and at most
    ``max_bytes`` accepted. With ``sha256`` the content must match it. ``dest`` appears only
    complete and verified; any failure leaves no ``dest`` (an earlier one is left untouched).
    """
    dest = Path(dest)
    where = f"upstream {source.repo}@{source.commit}"
    relative_path(path, where)  # neither the mirror nor the URL may lead elsewhere
    origin: Path | str  # the mirror's file, or the URL
    with atomic_path(dest) as tmp, open(tmp, "wb") as out:
        if mirror:
            origin = confined(Path(mirror) / source.mirror_name, path, where)
            if not origin.is_file():
                raise FetchError(origin, f"file is missing from the mirror {mirror} (expected upstream "
                                         f"{source.repo}@{source.commit}: {path}); fix `mirror:` in "
                                         "config/config.yaml or set it to null to download")
            with open(origin, "rb") as src:
                actual = _copy(src, out)
        else:
            origin = source.url(path)
            try:
                actual = download(origin, out, timeout=timeout, retries=retries, max_bytes=max_bytes,
                                  backoff=backoff)
            except DownloadError as e:
                raise FetchError(origin, f"{e.reason}. {MIRROR_HINT}") from None
        if sha256 and actual != sha256.lower():
            raise FetchError(origin, f"sha256 mismatch: expected {sha256}, got {actual}")
    return dest


def read_manifest(path: StrPath, paths: Sequence[str] = (), required: Sequence[str] = ()) -> list[dict[str, str]]:
    """Rows of a TSV manifest as dicts of strings keyed by its header.

    Lines starting with '#' before the header are comments; blank lines are ignored. The header must
    have the columns ``required`` and ``paths``; the columns ``paths`` are parts of file paths: each
    must obey vlbias.io.paths' rule (the error names the line).
    """
    try:
        # lines end at "\n" only (str.splitlines() also at \x0c, \x85, \u2028, ...: other line numbers)
        lines = [line.removesuffix("\r") for line in Path(path).read_text(encoding="utf-8").split("\n")]
    except OSError as e:
        raise InputError(path, f"cannot read manifest ({e.strerror})") from None
    except UnicodeDecodeError as e:
        at = e.object[:e.start].count(b"\n") + 1
        raise InputError(path, f"line {at}: not UTF-8 text (byte 0x{e.object[e.start]:02x}); save the file as "
                               "UTF-8") from None
    number, header = 0, None
    for number, line in enumerate(lines, 1):  # noqa: B007  (the header's line number, used below)
        if not line.startswith("#"):
            header = line.split("\t")
            break
    if not header or header == [""]:
        raise InputError(path, "manifest has no header line")
    missing = [c for c in dict.fromkeys([*required, *paths]) if c not in header]
    if missing:
        raise InputError(path, f"line {number}: the header lacks column(s) {', '.join(missing)} (it has: "
                               f"{', '.join(header)})")
    rows = []
    for number, line in enumerate(lines[number:], number + 1):  # noqa: B020  (numbering goes on)
        if not line.strip():
            continue
        values = line.split("\t")
        if len(values) != len(header):
            raise InputError(path, f"line {number}: {len(values)} tab-separated fields, expected "
                                   f"{len(header)} ({', '.join(header)})")
        row = dict(zip(header, values))
        for column in paths:
            relative_path(row[column], f"{path}: line {number}, column {column}")
        rows.append(row)
    return rows


def _cell(value: object) -> str:
    # free text (error messages) is flattened so that every row stays on one line
    return "" if value is None else " ".join(str(value).replace("\t", " ").splitlines())


def write_manifest(path: StrPath, rows: Iterable[Mapping[str, Any]], columns: Sequence[str],
                   comments: Iterable[object] = ()) -> None:
    """Write ``rows`` (dicts) as a TSV with header ``columns``, atomically. None is written empty.

    ``comments`` are written first, each on a line starting with '# '.
    """
    lines = [f"# {_cell(c)}" for c in comments] + ["\t".join(columns)]
    for i, row in enumerate(rows):
        missing = [c for c in columns if c not in row]
        if missing:
            raise ValueError(f"{path}: row {i} lacks column(s) {missing}: {row}")
        lines.append("\t".join(_cell(row[c]) for c in columns))
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
