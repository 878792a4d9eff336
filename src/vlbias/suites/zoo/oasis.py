"""The OASIS valence images of Ghate et al.'s cross-modal tests (Kurdi, Lozano & Banaji 2017): a licensed
set the user downloads (``zoo/oasis``: its folder, holding OASIS.csv and Images/, and a manifest of the
files' sha256). Ghate et al. (CLIP_bias references/OASIS/oasis.py) take the 25 images of highest mean
valence as pleasant and the 25 of lowest as unpleasant: the rows of OASIS.csv in file order, sorted by
Valence_mean descending (a stable sort: ties keep the file's order), the first 25 and the last 25, each image
Images/<Theme>.jpg. Those images go into an image store of their own (categories oasis/pleasant and
oasis/unpleasant), which every zoo model embeds beside the iEAT store.

OASIS publishes no digests, so none are pinned here: the manifest is the user's (a TSV with columns path,
relative to the folder, and sha256), and every file read is checked against it.

    select_valence("OASIS/OASIS.csv")     # {"oasis/pleasant": [theme, ...], "oasis/unpleasant": [...]}
    build_oasis_store("OASIS", "oasis.tsv", "images.h5", "status.tsv", {"size": 224, ...})
"""

import csv
from pathlib import Path

from vlbias.errors import InputError
from vlbias.io.paths import confined

CSV = "OASIS.csv"
IMAGES = "Images"
PER_SET = 25  # Ghate et al.'s top and bottom 25
CATEGORIES = ("oasis/pleasant", "oasis/unpleasant")
WHERE = "https://osf.io/6pnd7/"
# the reason an order with OASIS image attributes is not run without it (a row's status)
ABSENT = (f"OASIS valence images (licensed; Kurdi et al. 2017, {WHERE}) are not configured: set zoo/oasis to "
          "their folder and a sha256 manifest (docs/zoo.md) to run the order")


def select_valence(csv_path, per_set=PER_SET):
    """{category: [theme, ...]}: the ``per_set`` themes of highest Valence_mean (oasis/pleasant, highest first)
    and of lowest (oasis/unpleasant, in the same descending order), as Ghate et al. pick them."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(csv_path, f"cannot read the OASIS ratings ({e})") from None
    missing = [c for c in ("Theme", "Valence_mean") if rows and c not in rows[0]]
    if missing:
        raise InputError(csv_path, f"has no column {', '.join(missing)}: not OASIS's ratings table")
    if len(rows) < 2 * per_set:
        raise InputError(csv_path, f"{len(rows)} rows, fewer than the {2 * per_set} images selected")
    try:
        valence = [float(r["Valence_mean"]) for r in rows]
    except ValueError as e:
        raise InputError(csv_path, f"a Valence_mean that is not a number ({e})") from None
    # sorted(..., reverse=True) keeps ties in file order, as theirs does
    order = sorted(range(len(rows)), key=valence.__getitem__, reverse=True)
    return {CATEGORIES[0]: [rows[i]["Theme"] for i in order[:per_set]],
            CATEGORIES[1]: [rows[i]["Theme"] for i in order[-per_set:]]}


def checked(folder, digests, manifest, relative):
    """The file ``relative`` of the OASIS folder, after checking it against the manifest's sha256."""
    from vlbias.io.fetch import sha256_file

    path = confined(folder, relative, manifest)
    if relative not in digests:
        raise InputError(manifest, f"lists no '{relative}' (the OASIS file the zoo reads)")
    if not path.is_file():
        raise InputError(path, "missing from the OASIS folder (zoo/oasis/folder)")
    actual = sha256_file(path)
    if actual != digests[relative]:
        raise InputError(path, f"sha256 {actual} is not the one {manifest} lists ({digests[relative]})")
    return path


def oasis_entries(folder, manifest, per_set=PER_SET):
    """The image entries (vlbias.images.store) of the selected OASIS images, each checked."""
    from vlbias.io.fetch import read_manifest

    digests = {r["path"]: r["sha256"] for r in read_manifest(manifest, paths=("path",), required=("sha256",))}
    selected = select_valence(checked(folder, digests, manifest, CSV), per_set)
    return [{"category": category, "file": f"{theme}.jpg",
             "path": checked(folder, digests, manifest, f"{IMAGES}/{theme}.jpg")}
            for category, themes in selected.items() for theme in themes]


def build_oasis_store(folder, manifest, store, status, settings, workers=2, per_set=PER_SET):
    """The image store of the selected OASIS images (``settings``: the iEAT store's size, crop, resampling and
    decoder, so each model preprocesses them alike), and its status table."""
    from vlbias.images.store import build_image_store
    from vlbias.io.fetch import write_manifest

    rows = build_image_store(oasis_entries(Path(folder), manifest, per_set), store, workers=workers, **settings)
    bad = [f"{r['category']}/{r['file']}: {r['reason']}" for r in rows if r["status"] != "ok"]
    if bad:
        raise InputError(folder, f"OASIS images that do not decode: {'; '.join(bad)}")
    write_manifest(status, rows, ["category", "file", "status", "reason", "sha256", "decoder"])
