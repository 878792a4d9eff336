"""Web images of a dataset listed by URL: the URL lists, their download, and the dataset statistics.

The grounded WEAT/SEAT dataset of Ross et al. (2021) publishes its Google Images as shell scripts,
``data/google-images/<test>/<role>/get.sh``, one ``wget -O <file> <URL>`` per image. They are
parsed here as text, never executed, into a manifest (TSV: test, role, file, url, sha256). A
line that names a file but no URL stays in the manifest with an empty url (it counts as a failed
image, "no URL in the manifest", so the listed totals match upstream); any other line that is not a
``wget``, ``sleep``, comment or blank line is an error naming ``get.sh:line``.

URLs are taken as written. (A shell would have cut an unquoted URL at its first ``&`` and run the
rest as another command; the authors' lists mean the whole URL.)

:func:`acquire` obtains the images of manifest rows into ``<cache>/<test>/<role>/<file>``, from
the network or only from a local mirror, and returns one status row per image: ``ok`` with its
sha256, size in bytes and decoded width and height, or ``failed`` with the reason. Failed images
never stop the others. An image that decodes in the cache already (and matches the pinned sha256,
if the manifest has one) is reused without a request.

Maintainer commands::

    python -m vlbias.images.acquire manifest <dir with <test>/<role>/get.sh> --upstream REPO@COMMIT:PATH -o manifest.tsv
    python -m vlbias.images.acquire pin manifest.tsv results/images/grounded/<dataset>/manifest.tsv
"""

import argparse
import hashlib
import logging
import os
import re
import shlex
import shutil
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vlbias.errors import InputError
from vlbias.images.decode import ImageDecodeError, load_rgb
from vlbias.io.atomic import atomic_path
from vlbias.io.fetch import DownloadError, FetchError, download, read_manifest, sha256_file, write_manifest
from vlbias.io.paths import confined, relative_path
from vlbias.logs import FILE_ONLY, Progress

log = logging.getLogger(__name__)

MANIFEST_COLUMNS = ["test", "role", "file", "url", "sha256"]
STATUS_COLUMNS = ["test", "role", "file", "url", "status", "reason", "sha256", "bytes", "width", "height", "path"]
FAILURE_COLUMNS = ["test", "role", "file", "url", "reason"]
SUMMARY_COLUMNS = ["test", "listed", "obtained", "failed", "duplicates"]
TABLE1_COLUMNS = ["dataset", "paper_test", "test", "listed", "obtained", "duplicates", "paper", "note"]
DIGEST_PREFIX = "get.sh sha256 "

# wget options whose value is the next word (so that word is not taken for the URL)
_WGET_VALUE_OPTIONS = {"-t", "--tries", "-T", "--timeout", "-U", "--user-agent", "-e", "--execute",
                       "-o", "--output-file", "-a", "--append-output", "--header", "-w", "--wait"}


# -- get.sh ---------------------------------------------------------------------------------------


def _parse_line(line):
    """(file, url) of a ``wget`` line, url "" when it has none; None for lines without a download.

    Raises ValueError saying why a line is not understood.
    """
    tokens = shlex.split(line)  # ValueError on unbalanced quotes
    for i, token in enumerate(tokens):  # a word starting with '#' starts a comment, as in the shell
        if token.startswith("#"):
            tokens = tokens[:i]
            break
    if not tokens or tokens[0] == "sleep":
        return None
    if tokens[0] != "wget":
        raise ValueError(f"not a wget or sleep command: {tokens[0]!r}")
    file, urls, words = None, [], iter(tokens[1:])
    for word in words:
        if word in ("-O", "--output-document"):
            file = next(words, None)
            if file is None:
                raise ValueError(f"{word} without a file name")
        elif word.startswith("--output-document="):
            file = word.split("=", 1)[1]
        elif word.startswith("-O"):  # wget -Ofile
            file = word[2:]
        elif word in _WGET_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            urls.append(word)
    if not file:
        raise ValueError("wget without -O <file>")
    if len(urls) > 1:
        raise ValueError(f"{len(urls)} URLs in one wget command")
    return file, urls[0] if urls else ""


def parse_get_sh(text, name="get.sh"):
    """Downloads listed by a get.sh script, without running it.

    Returns (entries, problems): entries are dicts with ``file``, ``url`` ("" when the line has
    none) and ``line`` (1-based), in script order; problems are "<name>:<line>: <why>" for each
    line that is not understood or names a file again.
    """
    entries, problems, seen = [], [], {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parsed = _parse_line(line)
        except ValueError as e:
            problems.append(f"{name}:{number}: {e}: {line.strip()}")
            continue
        if parsed is None:
            continue
        file, url = parsed
        if file in seen:
            problems.append(f"{name}:{number}: file {file} is listed again (first at line {seen[file]})")
            continue
        seen[file] = number
        entries.append({"file": file, "url": url, "line": number})
    return entries, problems


def parse_get_sh_tree(root):
    """Manifest rows (test, role, file, url, sha256 empty) of every ``<root>/<test>/<role>/get.sh``.

    Returns (rows, digests, problems, warnings): digests are "<test>/<role> <sha256 of get.sh>"
    lines, warnings name the lines that list a file without a URL.
    """
    rows, digests, problems, warnings = [], [], [], []
    scripts = sorted(Path(root).glob("*/*/get.sh"))
    if not scripts:
        raise InputError(root, "no <test>/<role>/get.sh files here")
    for script in scripts:
        test, role = script.parent.parent.name, script.parent.name
        data = script.read_bytes()
        digests.append(f"{test}/{role} {hashlib.sha256(data).hexdigest()}")
        entries, bad = parse_get_sh(data.decode("utf-8"), name=script)
        problems += bad
        for e in entries:
            if not e["url"]:
                warnings.append(f"{script}:{e['line']}: {e['file']} has no URL; kept with an empty url")
            rows.append({"test": test, "role": role, "file": e["file"], "url": e["url"], "sha256": ""})
    return rows, digests, problems, warnings


def manifest_comments(path):
    """The leading '#' lines of a manifest, without the '# '."""
    comments = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            comments.append(line[1:].strip())
    return comments


def pin_sha256(manifest, status_rows):
    """Fill the empty sha256 cells of ``manifest`` from images obtained (status "ok") at the same
    URL; the file is rewritten in place with its header comments. Returns how many were filled.

    Later runs then refuse different content at that URL ("content changed upstream").
    """
    got = {(r["test"], r["role"], r["file"], r["url"]): r["sha256"] for r in status_rows if r["status"] == "ok"}
    rows, filled = read_manifest(manifest), 0
    for r in rows:
        sha = got.get((r["test"], r["role"], r["file"], r["url"]))
        if sha and not r["sha256"]:
            r["sha256"], filled = sha, filled + 1
    write_manifest(manifest, rows, MANIFEST_COLUMNS, manifest_comments(manifest))
    return filled


# -- acquisition ----------------------------------------------------------------------------------


def _unsafe(name):
    """Why ``name`` may not be used as one component of a local path (None if it may): the rule of
    vlbias.io.paths for one folder level (test, role and file are one each)."""
    try:
        if "/" not in name and relative_path(name, "file name"):
            return None
    except InputError:
        pass
    return f"unsafe file name {name!r} (must be a plain file name)"


class _Rejected(Exception):
    def __init__(self, reason):
        self.reason = reason
        super().__init__(reason)


def _status(row, status, reason="", **fields):
    return {**{c: "" for c in STATUS_COLUMNS}, **{k: row[k] for k in ("test", "role", "file", "url")},
            "status": status, "reason": reason, **fields}


def _ok(row, path, image):
    return _status(row, "ok", sha256=sha256_file(path), bytes=path.stat().st_size, width=image.width,
                   height=image.height, path=os.path.relpath(path))


def _plan(row, cache, mirror, flat):
    """(status row, None) of one manifest row that needs no work (an unsafe name, not in the mirror, no
    URL), else (None, (dest, pinned sha256, origin in the mirror or None)): what :func:`_obtain` does."""
    why = next(filter(None, (_unsafe(row[k]) for k in ("test", "role", "file"))), None)
    if why:
        return _status(row, "failed", why), None
    rel = Path(row["test"], row["role"], row["file"])
    try:
        dest, pinned = confined(cache, rel, "image"), row.get("sha256", "").lower()
    except InputError as e:  # a symbolic link in the cache leading elsewhere
        return _status(row, "failed", str(e)), None
    origin = Path(mirror) / (row["file"] if flat else rel) if mirror else None
    if not dest.is_file() and (why := _unavailable(row, origin)):
        return _status(row, "failed", why), None
    return None, (dest, pinned, origin)


def _unavailable(row, origin):
    """Why ``row`` cannot be had from its source (``origin`` in the mirror, else its URL); None if it can."""
    if origin is not None:
        return None if origin.is_file() else f"not in mirror {origin}"
    return None if row["url"] else "no URL in the manifest"


def _obtain(row, dest, pinned, origin, net):
    """Status row of one manifest row that :func:`_plan` left to do; see :func:`acquire`."""
    if dest.is_file():
        try:
            image = load_rgb(dest)
            if not pinned or sha256_file(dest) == pinned:
                return _ok(row, dest, image)
        except ImageDecodeError:
            pass  # not written by us (we only keep what decodes): obtain it again
    if why := _unavailable(row, origin):
        return _status(row, "failed", why)
    try:
        with atomic_path(dest) as tmp:
            if origin:
                try:
                    shutil.copyfile(origin, tmp)
                except OSError as e:
                    raise _Rejected(f"cannot read {origin} ({e.strerror})") from None
            else:
                with open(tmp, "wb") as out:
                    download(row["url"], out, **net)
            image = load_rgb(tmp)
            sha = sha256_file(tmp)
            if pinned and sha != pinned:
                raise _Rejected(f"content changed upstream (sha256 {sha}, pinned {pinned})")
    except (DownloadError, ImageDecodeError, _Rejected) as e:
        return _status(row, "failed", e.reason)
    return _ok(row, dest, image)


def acquire(rows, cache, *, mirror=None, mirror_layout="tests", workers=8, timeout=10, retries=1, backoff=1.0,
            max_bytes=20 * 2**20):
    """Obtain the images of manifest ``rows`` (test, role, file, url, sha256) into
    ``<cache>/<test>/<role>/<file>``; one status row (:data:`STATUS_COLUMNS`) per row, in order.

    From the network: at most ``workers`` downloads at a time, http(s) only (redirects too), each
    wait for data bounded by ``timeout`` seconds, ``retries`` further tries after transient
    failures with exponential ``backoff``, at most ``max_bytes`` per image. With ``mirror`` the
    images are copied from ``<mirror>/<test>/<role>/<file>`` instead and never downloaded
    (``mirror_layout="flat"``: from ``<mirror>/<file>``, a dataset's own folder such as COCO's val2014;
    a mirror without that folder lacks the dataset, so each image fails "not in mirror").
    Content must decode as an image (and match a pinned sha256); what does not is not kept.
    Unsafe file names and files listed twice are refused. Images whose content repeats an
    earlier row's keep status "ok" with the reason "duplicate of <test>/<role>/<file>".
    ``path`` is relative to the working directory.
    """
    if mirror_layout not in ("tests", "flat"):
        raise InputError(f"mirror_layout '{mirror_layout}'", "must be 'tests' or 'flat'")
    if mirror and mirror_layout == "tests" and not Path(mirror).is_dir():
        raise FetchError(mirror, "the mirror has no such folder; set `mirror:` in config/config.yaml to a "
                                 "directory laid out like the upstream repositories, or null to download")
    rows = list(rows)
    net = {"timeout": timeout, "retries": retries, "backoff": backoff, "max_bytes": max_bytes}
    first = {}
    for i, row in enumerate(rows):
        first.setdefault(image_id(row), i)
    todo = sorted(first.values())  # two workers must never write one file
    status = [None] * len(rows)
    progress = Progress(len(todo), "images", log)
    # what needs no reading is settled here: a pool's hand-offs would cost more than the checks
    work = {}
    for i in todo:
        status[i], work[i] = _plan(rows[i], cache, mirror, mirror_layout == "flat")
    progress.advance(sum(s is not None for s in status))
    work = {i: w for i, w in work.items() if w is not None}
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for i, s in zip(work, pool.map(lambda i: _obtain(rows[i], *work[i], net), work)):
            status[i] = s
            progress.advance()
    progress.done(f"{sum(s['status'] == 'ok' for s in status if s)} obtained", terminal=False)  # arrived() sums up
    for i, row in enumerate(rows):
        if status[i] is None:
            status[i] = _status(row, "failed", f"listed twice (also row {first[image_id(row)] + 1})")
        if status[i]["status"] != "ok":
            log.warning("%s/%s/%s: %s", row["test"], row["role"], row["file"], status[i]["reason"], extra=FILE_ONLY)
    return mark_duplicates(status)


def image_id(row):
    return f"{row['test']}/{row['role']}/{row['file']}"


def mark_duplicates(status):
    """Set the reason of each "ok" row whose sha256 an earlier "ok" row has to "duplicate of <id>"
    (and clear it on the others); returns ``status``."""
    first = {}
    for r in status:
        if r["status"] == "ok":
            r["reason"] = f"duplicate of {first[r['sha256']]}" if r["sha256"] in first else ""
            first.setdefault(r["sha256"], image_id(r))
    return status


def failures(status):
    return [{c: r[c] for c in FAILURE_COLUMNS} for r in status if r["status"] != "ok"]


def summarize(status):
    """Per test, in order of first appearance: images listed, obtained, failed, and duplicates
    (obtained images whose content an earlier image of the same test has)."""
    out, seen = {}, {}
    for r in status:
        s = out.setdefault(r["test"], {"test": r["test"], "listed": 0, "obtained": 0, "failed": 0, "duplicates": 0})
        s["listed"] += 1
        if r["status"] == "ok":
            s["obtained"] += 1
            shas = seen.setdefault(r["test"], set())
            s["duplicates"] += r["sha256"] in shas
            shas.add(r["sha256"])
        else:
            s["failed"] += 1
    return list(out.values())


def reason_kind(reason):
    """A failure's reason without what is particular to the image (its path, URL, the attempts): what
    the summary line counts images by ("not in the mirror", "HTTP 404 Not Found", ...)."""
    reason = re.sub(r"^could not download( after \d+ attempts)?: ", "", reason)
    if reason.startswith("not in mirror"):
        return "not in the mirror"
    return re.split(r" \(|: ", reason, maxsplit=1)[0]


def failure_kinds(failed, top=3):
    """The failed rows (with a ``reason``) counted by ``reason_kind``, the ``top`` most frequent named:
    "3 not in the mirror, 2 HTTP 404 Not Found, 2 failed otherwise"."""
    kinds = Counter(reason_kind(r["reason"]) for r in failed).most_common()
    named = [f"{n} {kind}" for kind, n in kinds[:top]]
    if len(kinds) > top:
        named.append(f"{sum(n for _, n in kinds[top:])} failed otherwise")
    return ", ".join(named)


def arrived(status, failures=None, top=3):
    """The summary line a rule's log ends with (and the terminal shows): "4 of 7 images arrived", then
    the failures by kind (``failure_kinds``) and where every failure is listed:
    "; 2 HTTP 404 Not Found, 1 no URL in the manifest — see failures.tsv"."""
    line = f"{sum(r['status'] == 'ok' for r in status)} of {len(status)} images arrived"
    failed = [r for r in status if r["status"] != "ok"]
    if not failed:
        return line
    return f"{line}; {failure_kinds(failed, top)}" + (f" — see {failures}" if failures else "")


# -- the dataset table (Ross et al. 2021, Table 1) -----------------------------------------------


def table1_rows(published, summaries, failures=None):
    """Table 1: per dataset and paper test, the images listed, obtained and duplicated here beside
    the paper's number.

    ``published``: rows with dataset, paper_test, tests (the upstream test folders that make the
    paper's test, separated by spaces) and n_images. ``summaries``: {dataset: rows of
    :func:`summarize`} for the datasets configured here; others show the paper's number only.
    ``failures``: {dataset: (its failures rows, the file they are in)}: a test of which no image was
    obtained says why in ``note`` ("none obtained: 145 not in the mirror — see <file>"), so a zero
    is never left unexplained. A paper test made of several folders (word- and sentence-level
    variants) has one row each, all beside the paper's single number. Tests of configured datasets
    that the paper does not name follow, without a paper number.
    """
    by_test = {d: {s["test"]: s for s in rows} for d, rows in summaries.items()}
    failed = {d: ({}, path) for d, (_, path) in (failures or {}).items()}
    for dataset, (rows, _) in (failures or {}).items():
        for r in rows:
            failed[dataset][0].setdefault(r["test"], []).append(r)

    def row(dataset, paper_test, test, s, paper):
        out = {"dataset": dataset, "paper_test": paper_test, "test": test,
               **{k: s.get(k, "") for k in ("listed", "obtained", "duplicates")}, "paper": paper, "note": ""}
        if str(s.get("obtained")) == "0" and str(s.get("listed")) not in ("", "0") and dataset in failed:
            rows, path = failed[dataset][0].get(test, []), failed[dataset][1]
            out["note"] = f"none obtained: {failure_kinds(rows)} — see {path}"
        return out

    out, shown = [], set()
    for p in published:
        for test in p["tests"].split():
            shown.add((p["dataset"], test))
            out.append(row(p["dataset"], p["paper_test"], test, by_test.get(p["dataset"], {}).get(test, {}),
                           p["n_images"]))
    for dataset, rows in summaries.items():
        for s in rows:
            if (dataset, s["test"]) not in shown:
                out.append(row(dataset, "", s["test"], s, ""))
    return out


# -- maintainer commands -------------------------------------------------------------------------


def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m vlbias.images.acquire", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("manifest", help="parse <dir>/<test>/<role>/get.sh into the manifest <output>")
    m.add_argument("dir")
    m.add_argument("--upstream", required=True, help="what <dir> is, e.g. owner/repo@commit:data/google-images")
    m.add_argument("-o", "--output", required=True, help="the manifest to write (atomically)")
    p = commands.add_parser("pin", help="fill the empty sha256 cells of a manifest from status tables")
    p.add_argument("manifest")
    p.add_argument("status", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "manifest":
        rows, digests, problems, warnings = parse_get_sh_tree(args.dir)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        comments = [f"Image URLs parsed from {args.upstream}/<test>/<role>/get.sh by "
                    "`python -m vlbias.images.acquire manifest`; sha256 filled by `... pin` once fetched",
                    *(DIGEST_PREFIX + d for d in digests)]
        write_manifest(args.output, rows, MANIFEST_COLUMNS, comments)
        print(f"{args.output}: {len(rows)} images from {len(digests)} get.sh files", file=sys.stderr)
    else:
        status = [r for path in args.status for r in read_manifest(path)]
        n = pin_sha256(args.manifest, status)
        print(f"{args.manifest}: pinned the sha256 of {n} images", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
