"""Zero-shot retrieval skew beside the association tests (docs/skew.md): labelled image sets, text queries,
each joint-space model's ranking of the images per query, MaxSkew@k, MinSkew@k and NDKL@k
(vlbias.stats.skew), and the bridge from a model's intrinsic d to its skew.

    rows = labelled_rows(spec, folder)        # a labelled set: [{"file", "path", "sha256", <attribute>: value}]
    queries = read_queries(path, kind)        # {prompt set: [texts]}: Berg et al.'s CSV or a query file
    rows = skew_rows(store, labels, ...)      # a table's rows of one (model, labelled set)
    df = propagation_table(skew, eat, links, ...)  # d against skew across models, r with its interval

A labelled set is the user's (faces are never shipped): FairFace's validation split (its
``fairface_label_val.csv``: file, age, gender, race), UTKFace (labels in the file names:
``<age>_<gender>_<race>_<date>.jpg``) or one's own CSV (``path`` and a column per attribute).
"""

import csv
import logging
import math
import re
from pathlib import Path

import numpy as np

from vlbias.errors import InputError
from vlbias.io.fetch import read_manifest, sha256_file
from vlbias.io.paths import confined
from vlbias.io.stimuli import load_yaml

log = logging.getLogger(__name__)

FORMATS = ("fairface", "utkface", "csv")
AGE_GROUPS = ("0-2", "3-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "more than 70")  # FairFace's
# the values each format's attributes take (a CSV's are its entry's `attributes`)
VALUES = {
    "fairface": {"gender": ("Female", "Male"), "age": AGE_GROUPS,
                 "race": ("White", "Black", "Latino_Hispanic", "East Asian", "Southeast Asian", "Indian",
                          "Middle Eastern")},
    "utkface": {"gender": ("Male", "Female"), "age": AGE_GROUPS, "race": ("White", "Black", "Asian", "Indian", "Others")},
}
FAIRFACE_LABELS = "fairface_label_val.csv"  # FairFace's validation labels, beside its val/ folder
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
UTKFACE_NAME = re.compile(r"^(\d+)_([01])_([0-4])_\d+")
STORE_GROUP = "images"  # the one group of a labelled set's image store and embedding store
QUERY_GROUP = "queries/{}"  # a prompt set's texts in the embedding store
SUMMARY_COLUMNS = ("value", "low", "high", "null_mean", "null_bound", "p")


def attribute_values(spec):
    """{attribute: its values, in order} of a labelled set entry: a CSV's own ``attributes`` mapping, a known
    format's values of the attributes it lists."""
    if spec["format"] == "csv":
        return {a: tuple(v) for a, v in spec["attributes"].items()}
    return {a: VALUES[spec["format"]][a] for a in spec["attributes"]}


def utkface_age_group(age):
    """UTKFace's age in years as FairFace's groups (so the two sets share the attribute)."""
    bounds = (2, 9, 19, 29, 39, 49, 59, 69)
    return next((AGE_GROUPS[i] for i, b in enumerate(bounds) if age <= b), AGE_GROUPS[-1])


def labelled_rows(spec, folder):
    """[{"file", "path", <attribute>: value}] of a labelled set whose images lie in ``folder``: one per image,
    checked (an attribute value the set does not declare, a listed file that is absent: an InputError naming
    the labels file and its line). UTKFace names that carry no labels (a few upstream) are left out, logged."""
    folder = Path(folder)
    values = attribute_values(spec)
    if spec["format"] == "utkface":
        rows = []
        for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
            m = UTKFACE_NAME.match(path.name)
            if not m:
                log.warning("%s: no <age>_<gender>_<race>_ labels in the name: left out", path)
                continue
            found = {"age": utkface_age_group(int(m[1])), "gender": VALUES["utkface"]["gender"][int(m[2])],
                     "race": VALUES["utkface"]["race"][int(m[3])]}
            rows.append({"file": path.name, "path": path, **{a: found[a] for a in values}})
        return rows
    labels = Path(spec["labels"]) if spec["format"] == "csv" else folder / FAIRFACE_LABELS
    column = "path" if spec["format"] == "csv" else "file"
    try:
        with open(labels, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in (column, *values) if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(labels, f"no column {', '.join(missing)} (it has: {', '.join(reader.fieldnames or [])})")
            listed = list(enumerate(reader, 2))
    except OSError as e:
        raise InputError(labels, f"cannot read the labels ({e.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(labels, "not UTF-8 text") from None
    rows, seen = [], {}
    for line, row in listed:
        name = row[column] or ""
        if name in seen:
            raise InputError(labels, f"line {line}: '{name}' listed twice (first on line {seen[name]})")
        seen[name] = line
        path = confined(folder, name, f"{labels}: line {line}")
        if not path.is_file():
            raise InputError(labels, f"line {line}: '{name}' is no file in {folder}")
        for attribute, known in values.items():
            if row[attribute] not in known:
                raise InputError(labels, f"line {line}: {attribute} '{row[attribute]}' is none of its values "
                                         f"({', '.join(known)})")
        rows.append({"file": name, "path": path, **{a: row[a] for a in values}, "_gender": row.get("gender")})
    if spec["format"] == "fairface" and spec["equal_split"]:
        rows = equal_split(rows)
    return [{k: v for k, v in r.items() if k != "_gender"} for r in rows]


def equal_split(rows):
    """Berg et al.'s FairFace (their ``FairFace(equal_split=True)``, what their printed MaxSkew ran on): as many
    images of each gender as the rarer has, drawn by pandas' ``sample(n, random_state=1)`` from the labels sorted
    by file, the men's then the women's."""
    import pandas as pd

    table = pd.DataFrame(rows).sort_values("file")
    male, female = table[table["_gender"] == "Male"], table[table["_gender"] == "Female"]
    n = min(len(male), len(female))
    return pd.concat([male.sample(n=n, random_state=1), female.sample(n=n, random_state=1)]).to_dict("records")


def pinned(rows, manifest):
    """The status of each row against a manifest of sha256 (``file``, ``sha256``: the set as first seen):
    its entry for the image store ({category, file, path, reason}), None for a file whose content changed
    or that the manifest does not list (recorded, not embedded). No manifest: every file as it is."""
    pins = {r["file"]: r["sha256"] for r in read_manifest(manifest, required=("file", "sha256"))} if manifest else None
    entries = []
    for row in rows:
        entry = {"category": STORE_GROUP, "file": row["file"], "path": row["path"], "reason": ""}
        if pins is not None:
            if row["file"] not in pins:
                entry |= {"path": None, "reason": f"not in the manifest {manifest}"}
            elif sha256_file(row["path"]) != pins[row["file"]]:
                entry |= {"path": None, "reason": f"sha256 differs from the manifest {manifest}"}
        entries.append(entry)
    return entries


def read_queries(path, name):
    """{prompt set: [query texts]} of a queries entry ``name``. A .csv: Berg et al.'s prompt_templates.csv
    (columns template, concept), every template filled with every concept as their ``gen_prompts`` does,
    one set ``name``; else a query file in the stimulus-file style (YAML: ``id``, ``description``, and
    ``queries: [texts]`` or ``templates`` with ``concepts``, each template's "{}" filled with each concept)."""
    if Path(path).suffix.lower() == ".csv":
        try:
            with open(path, newline="", encoding="utf-8") as f:
                table = list(csv.DictReader(f))
        except OSError as e:
            raise InputError(path, f"cannot read the prompt templates ({e.strerror})") from None
        if not table or not {"template", "concept"} <= set(table[0]):
            raise InputError(path, "no rows with columns template, concept")
        templates = [r["template"].strip() for r in table if r["template"] and r["template"].strip()]
        concepts = [r["concept"] for r in table if r["concept"]]
        sets = {name: [t.format(c) for t in templates for c in concepts]}
    else:
        try:
            doc = load_yaml(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(path, f"cannot read the query file ({e.strerror})") from None
        if not isinstance(doc, dict):
            raise InputError(path, "a query file is a mapping: id, and queries or templates with concepts")
        if "templates" in doc:
            sets = {name: [str(t).replace("{}", str(c)) for t in doc["templates"] or [] for c in doc.get("concepts") or []]}
        else:
            sets = {name: [str(t) for t in doc.get("queries") or []]}
    sets = {name: texts for name, texts in sets.items() if texts}
    if not sets:
        raise InputError(path, "no queries (give `queries: [texts]`, or `templates` with `concepts`)")
    return sets


def build_labelled_store(spec, folder, store, status, settings, workers):
    """A labelled set's image store (vlbias.images.store: one group, ``STORE_GROUP``) and its status TSV (file,
    status, reason, sha256 and the attributes): an image missing, corrupt or unpinned is a row, not an error."""
    from vlbias.images.store import build_image_store
    from vlbias.io.fetch import write_manifest

    rows = labelled_rows(spec, folder)
    if not rows:
        raise InputError(folder, "no labelled images")
    found = build_image_store(pinned(rows, spec["manifest"]), store, workers=workers, **settings)
    attributes = list(attribute_values(spec))
    write_manifest(status, [f | {a: r[a] for a in attributes} for f, r in zip(found, rows)],
                   ["file", "status", "reason", "sha256", *attributes])


def query_texts(files, names):
    """{store group: [texts]} of the queries entries ``names`` read from ``files``."""
    return {QUERY_GROUP.format(set_name): texts for path, name in zip(files, names)
            for set_name, texts in read_queries(path, name).items()}


# --- the measures of one (model, labelled set) ---------------------------------------------------------------


def skew_rows(images, ids, texts, labels, values, ks, *, directions, desired, ties, temperature, n_permutations,
              n_bootstrap, level, seed):
    """A table's rows for one model: for each attribute, prompt set, direction and k, MaxSkew, MinSkew and NDKL
    (the mean over the set's queries) with their bootstrap interval, permutation null and p, and the mean
    Skew of each value. ``images`` (n, dim) with their ``ids``; ``texts`` {prompt set: (queries, dim)};
    ``labels`` {file: {attribute: value}}; ``values`` {attribute: its values}. An attribute with fewer than
    two values among the images, or a k above their number: an InputError naming it."""
    from vlbias.stats.skew import MEASURES, cosine_scores, image_to_text_scores, skew_summary

    n = len(ids)
    if any(k > n for k in ks):
        raise InputError("skew/k", f"k {max(ks)} is larger than the {n} images embedded")
    rows = []
    for attribute, known in values.items():
        present = [v for v in known if any(labels[i][attribute] == v for i in ids)]
        if len(present) < 2:
            raise InputError(f"attribute '{attribute}'", f"has a single value among the {n} images "
                                                         f"({', '.join(present) or 'none'}): no skew to measure")
        codes = np.array([present.index(labels[i][attribute]) for i in ids])
        for name, queries in texts.items():
            cosines = cosine_scores(queries, images)
            for direction in directions:
                scores = cosines if direction == "text_to_image" else image_to_text_scores(cosines, temperature)
                summary, per_value = skew_summary(scores, codes, len(present), list(ks), desired=desired, ties=ties,
                                                  n_permutations=n_permutations, n_bootstrap=n_bootstrap,
                                                  level=level, seed=seed)
                by = {(s.k, s.measure): s for s in summary}
                for i, k in enumerate(ks):
                    row = {"attribute": attribute, "queries": name, "direction": direction, "k": k, "n_images": n,
                           "n_queries": len(queries), "values": "; ".join(
                               f"{v}={int((codes == j).sum())}" for j, v in enumerate(present))}
                    for m in MEASURES:
                        s = by[(k, m)]
                        row |= {m if c == "value" else f"{m}_{c}": getattr(s, c) for c in SUMMARY_COLUMNS}
                    row["skew_by_value"] = "; ".join(f"{v}={per_value[i, j]:.4f}" for j, v in enumerate(present))
                    rows.append(row)
    return rows


COLUMNS = ("dataset", "model", "attribute", "queries", "direction", "k", "n_images", "n_queries", "values",
           *(m if c == "value" else f"{m}_{c}" for m in ("max_skew", "min_skew", "ndkl") for c in SUMMARY_COLUMNS),
           "skew_by_value", "max_skew_paper", "paper_source", "desired", "ties", "level", "n_permutations",
           "n_bootstrap", "seed", "model_id", "revision", "weights")  # a skew table's columns, in order


def skew_table(dataset, stores, status, values, settings, published, paper):
    """The rows of a labelled set's table: every model (``stores`` {model: embedding store}) over the images
    the status TSV marks ok, with the settings and provenance of each, and the published MaxSkew of a
    model's ``paper`` name where ``published`` prints one (same set, attribute, queries and k)."""
    import pandas as pd

    from vlbias.io.store import read_provenance, read_set

    labels = {r["file"]: r for r in read_manifest(status, required=("file", "status")) if r["status"] == "ok"}
    printed = {(r["paper_model"], r["dataset"], r["attribute"], r["queries"], int(r["k"])): r
               for r in read_manifest(published, required=("paper_model", "k", "value", "source"))
               if r["measure"] == "max_skew"}
    rows = []
    for model, store in stores.items():
        images, ids = read_set(store, STORE_GROUP)
        keep = [i for i, f in enumerate(ids) if f in labels]
        groups = [g for g in _groups(store) if g.startswith("queries/")]
        texts = {g.removeprefix("queries/"): read_set(store, g)[0] for g in groups}
        if not texts:  # a table of no rows would pass for one without skew
            raise InputError(store, "holds no query embeddings (queries/<prompt set>)")
        found = skew_rows(images[keep], [ids[i] for i in keep], texts, labels, values, settings["k"],
                          directions=settings["directions"], desired=settings["desired"], ties=settings["ties"],
                          temperature=settings["temperature"], n_permutations=settings["n_permutations"],
                          n_bootstrap=settings["n_bootstrap"], level=settings["level"], seed=settings["seed"])
        provenance = read_provenance(store)
        for row in found:
            paper_row = printed.get((paper[model], dataset, row["attribute"], row["queries"], row["k"]), {})
            rows.append({**row, "dataset": dataset, "model": model,
                         "max_skew_paper": float(paper_row["value"]) if paper_row else math.nan,
                         "paper_source": paper_row.get("source", ""),
                         **{k: settings[k] for k in ("desired", "ties", "level", "n_permutations", "n_bootstrap",
                                                     "seed")},
                         "model_id": provenance.get("model_id", ""), "revision": provenance.get("revision", ""),
                         "weights": provenance.get("weights", "")})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _groups(store):
    from vlbias.io.hdf5 import open_hdf5

    found = []
    with open_hdf5(store) as f:
        f.visit(lambda name: found.append(name[: -len("/vectors")]) if name.endswith("/vectors") else None)
    return sorted(found)


# --- the bridge: intrinsic d against skew ------------------------------------------------------------------


def pearson_interval(x, y, level):
    """(r, low, high) across models: Pearson's r, and its Fisher-z interval at ``level`` (NaN with three
    models or fewer: z's standard error 1/sqrt(n - 3) needs four)."""
    from statistics import NormalDist

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return math.nan, math.nan, math.nan
    r = float(np.corrcoef(x, y)[0, 1])
    if len(x) <= 3 or abs(r) == 1:
        return r, math.nan, math.nan
    half = NormalDist().inv_cdf(0.5 + level / 2) / math.sqrt(len(x) - 3)
    z = math.atanh(r)
    return r, math.tanh(z - half), math.tanh(z + half)


def propagation_table(skew, eat, links, *, measure, k, level):
    """For each link {attribute, queries, test} of the documented map (docs/skew.md) and labelled set, a row
    per model with both: its d on ``test`` (``eat``: rows with test, model, d) and its skew ``measure`` at
    ``k`` (``skew``: skew tables' rows, text→image), beside the correlation r across those models with its
    interval (columns r, r_low, r_high, n_models, the same on each of the link's rows; a link no model has
    gets one row without a model)."""
    import pandas as pd

    d = {(r["test"], r["model"]): float(r["d"]) for r in eat if r.get("d") not in (None, "") and r["d"] == r["d"]}
    rows = []
    for link in links:
        for dataset in sorted({r["dataset"] for r in skew}):
            mine = [{"model": r["model"], "d": d[(link["test"], r["model"])], "skew": float(r[measure])}
                    for r in skew if r["dataset"] == dataset and r["attribute"] == link["attribute"]
                    and r["queries"] == link["queries"] and int(r["k"]) == k and r["direction"] == "text_to_image"
                    and (link["test"], r["model"]) in d]
            r_, low, high = pearson_interval([m["d"] for m in mine], [m["skew"] for m in mine], level)
            head = {"dataset": dataset, **link, "measure": measure, "k": k}
            tail = {"n_models": len(mine), "r": r_, "r_low": low, "r_high": high, "level": level}
            rows += [head | m | tail for m in mine] or [head | {"model": "", "d": math.nan, "skew": math.nan} | tail]
    return pd.DataFrame(rows, columns=["dataset", "attribute", "queries", "test", "measure", "k", "model", "d", "skew",
                                       "n_models", "r", "r_low", "r_high", "level"])
