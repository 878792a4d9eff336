"""Acquisition manifests for the grounded tests whose images come from public datasets, not URL lists.

Ross et al.'s COCO and Conceptual Captions tests (``resources/stimuli/grounded/{coco,concap}``)
name their images the way the authors' feature files did:

- COCO: the val2014 file name, ``COCO_val2014_000000410554.jpg``; the image is
  ``http://images.cocodataset.org/val2014/<file>`` (the ``coco_url`` of COCO's own annotations).
- Conceptual Captions: a number, ``2783726446``: ``zlib.crc32(url.encode("utf-8")) & 0xffffffff``
  of the image's URL in the validation split, ``GCC-1.1.0-Validation.tsv`` (caption<TAB>url per
  line, no header). That is how ViLBERT's bottom-up-attention feature extraction names the
  images ("validation/<crc32>"), in the authors' fork too (candacelax/bottom-up-attention,
  tools/generate_tsv.py, split ``conceptual_image_val``). The numbers are resolved to URLs by
  reading that file. Upstream's ``concap/weat8`` names COCO val2014 images, which resolve as COCO's.

A manifest (the columns of :data:`vlbias.images.acquire.MANIFEST_COLUMNS`) has one row per
(test, image set, file): ``test`` is the stimulus id, ``role`` the image set (X, Y, A_x, A_y,
B_x, B_y), so the acquisition id ``<test>/<role>/<file>`` is the id the stimulus loader gives the
image (:meth:`vlbias.suites.grounded.stimulus.GroundedStimulus.image_id`). An image in several sets or
tests is listed once for each (acquisition marks the copies "duplicate of ..."). An id that
resolves to no URL stays listed with an empty url and counts as a failed image. The header
records the sha256 of every stimulus file (and of the validation TSV) the manifest came from.

Maintainer commands (a network is needed for the validation TSV's URL)::

    python -m vlbias.suites.grounded.sources coco resources/stimuli/grounded/coco -o resources/manifests/grounded_coco_images.tsv
    python -m vlbias.suites.grounded.sources concap resources/stimuli/grounded/concap \\
        --validation https://storage.googleapis.com/gcc-data/Validation/GCC-1.1.0-Validation.tsv \\
        -o resources/manifests/grounded_concap_images.tsv
"""

import argparse
import re
import sys
import tempfile
import zlib
from pathlib import Path
from urllib.parse import urlsplit

from vlbias.errors import InputError
from vlbias.images.acquire import MANIFEST_COLUMNS
from vlbias.io.fetch import download, sha256_file, write_manifest
from vlbias.suites.grounded.stimulus import ROLES, load_grounded_stimulus

COCO_URL = "http://images.cocodataset.org/val2014/{file}"
CONCAP_VALIDATION_URL = "https://storage.googleapis.com/gcc-data/Validation/GCC-1.1.0-Validation.tsv"
STIMULUS_PREFIX = "stimulus sha256 "
_COCO_FILE = re.compile(r"COCO_val2014_\d{12}\.jpg")


def coco_url(file):
    """The public URL of a COCO val2014 file name, or None when ``file`` is not one."""
    return COCO_URL.format(file=file) if _COCO_FILE.fullmatch(file) else None


def concap_id(url):
    """The Conceptual Captions image id of ViLBERT's preprocessing: crc32 of the URL, unsigned."""
    return str(zlib.crc32(url.encode("utf-8")) & 0xFFFFFFFF)


def read_concap_validation(path):
    """{image id: URL} of a Conceptual Captions TSV (caption<TAB>url per line), and the ids that
    two different URLs share (crc32 collisions: which image the authors had is unknown).

    Lines repeating a URL (several captions of one image) give the same id once. A line
    without a tab, or whose URL is not http(s), is an error naming the line.
    """
    urls, ambiguous = {}, {}
    with open(path, encoding="utf-8", newline="") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) < 2 or urlsplit(fields[1]).scheme not in ("http", "https"):
                raise InputError(path, f"line {number}: expected caption<TAB>http(s) URL, got {line[:120]!r}")
            url = fields[1]
            key = concap_id(url)
            if urls.setdefault(key, url) != url:
                ambiguous.setdefault(key, {urls[key]}).add(url)
    return urls, {k: sorted(v) for k, v in ambiguous.items()}


def stimulus_images(stimulus):
    """(role, file) of every image a grounded stimulus uses, each once, in the order of its
    levels, image sets and files."""
    seen = {}
    for level in stimulus.levels.values():
        for role in ROLES:
            for file in level["images"][role]["pairs"]:
                seen.setdefault((role, file), None)
    return list(seen)


def build_manifest(stimulus_dir, resolve):
    """Manifest rows of every ``<stimulus_dir>/*.yaml``, sorted by test, each file's url
    ``resolve(file)`` ("" when None); also the header's stimulus digests and the unresolved rows.
    """
    paths = sorted(Path(stimulus_dir).glob("*.yaml"))
    if not paths:
        raise InputError(stimulus_dir, "no grounded stimulus files (*.yaml) here")
    rows, digests, unresolved = [], [], []
    for path in paths:
        stimulus = load_grounded_stimulus(path)
        digests.append(f"{stimulus.dataset}/{stimulus.id} {sha256_file(path)}")
        for role, file in stimulus_images(stimulus):
            row = {"test": stimulus.id, "role": role, "file": file, "url": resolve(file) or "", "sha256": ""}
            rows.append(row)
            if not row["url"]:
                unresolved.append(row)
    return rows, digests, unresolved


def coco_manifest(stimulus_dir):
    """(rows, digests, unresolved) of the COCO tests: file names not of COCO val2014 are unresolved."""
    return build_manifest(stimulus_dir, coco_url)


def concap_manifest(stimulus_dir, validation_tsv):
    """(rows, digests, unresolved, ambiguous) of the Conceptual Captions tests, the numeric ids
    resolved against ``validation_tsv`` (COCO file names as COCO's). Ids that two URLs share
    (``ambiguous``: {id: urls}) stay unresolved."""
    urls, ambiguous = read_concap_validation(validation_tsv)
    for key in ambiguous:
        del urls[key]
    rows, digests, unresolved = build_manifest(stimulus_dir, lambda f: coco_url(f) or urls.get(f))
    return rows, digests, unresolved, ambiguous


def _fetch_validation(source, workdir):
    """A local path of the validation TSV: ``source`` itself, or its http(s) URL downloaded."""
    if urlsplit(source).scheme not in ("http", "https"):
        if not Path(source).is_file():
            raise InputError(source, "no such file (give the validation TSV's path or URL)")
        return Path(source)
    dest = Path(workdir) / "validation.tsv"
    with open(dest, "wb") as out:  # DownloadError names the URL and why
        download(source, out, timeout=60, retries=3, max_bytes=64 * 2**20, backoff=2.0)
    return dest


def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m vlbias.suites.grounded.sources",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="dataset", required=True)
    for name, what in (("coco", "COCO val2014 file names"), ("concap", "Conceptual Captions validation ids")):
        c = commands.add_parser(name, help=f"the manifest of a folder of grounded stimuli naming {what}")
        c.add_argument("stimuli", help=f"e.g. resources/stimuli/grounded/{name}")
        c.add_argument("-o", "--output", required=True, help="the manifest to write (atomically)")
        if name == "concap":
            c.add_argument("--validation", default=CONCAP_VALIDATION_URL,
                           help="GCC-1.1.0-Validation.tsv: a local path or its URL (default: Google's)")
    args = parser.parse_args(argv)
    try:
        if args.dataset == "coco":
            rows, digests, unresolved = coco_manifest(args.stimuli)
            ambiguous, origin = {}, [f"COCO val2014 file names resolved to {COCO_URL}"]
        else:
            with tempfile.TemporaryDirectory() as work:
                tsv = _fetch_validation(args.validation, work)
                rows, digests, unresolved, ambiguous = concap_manifest(args.stimuli, tsv)
                origin = [f"Conceptual Captions ids (crc32 of the URL) resolved against {args.validation} "
                          f"(sha256 {sha256_file(tsv)}); COCO val2014 file names to {COCO_URL}"]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for key, urls in sorted(ambiguous.items()):
        print(f"warning: id {key} is the crc32 of {len(urls)} URLs: {' '.join(urls)}", file=sys.stderr)
    for r in unresolved:
        print(f"warning: {r['test']}/{r['role']}/{r['file']}: no URL found; kept with an empty url", file=sys.stderr)
    comments = [f"Image URLs of the grounded stimuli {args.stimuli}/*.yaml, by `python -m vlbias.suites.grounded.sources "
                f"{args.dataset}`; sha256 filled by `python -m vlbias.images.acquire pin` once fetched", *origin,
                *(STIMULUS_PREFIX + d for d in digests)]
    write_manifest(args.output, rows, MANIFEST_COLUMNS, comments)
    print(f"{args.output}: {len(rows)} images of {len(digests)} tests, {len(unresolved)} without a URL",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
