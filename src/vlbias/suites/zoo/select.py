"""A zoo selection (config ``zoo/select`` and ``zoo/models``) expanded to model entries, each with its
metadata (vlbias.suites.zoo.metadata): what `vlbias list zoo` prints and the workflow runs.

    pairs = registry_pairs()                  # open_clip.list_pretrained(), less EXCLUDED
    models = zoo_models(config["zoo"])        # {name: entry}: the selected pairs, then zoo/models
    rows = model_rows(models, config["zoo"])  # one row of metadata per model (list zoo, results/zoo/models.csv)

The selection's filters hold for every model, the listed entries too: an architecture pattern, a
pretraining dataset, a parameter range (millions), then a cap on the count (the first ``limit`` in
the order listed). A name that selects nothing (an unknown architecture, tag or dataset) is an
error with the closest known name.
"""

import fnmatch

from vlbias.errors import InputError
from vlbias.suites.ieat.plan import sweep_name
from vlbias.suites.zoo.metadata import (COLUMNS, accuracy, architecture, dataset_of, hf_dual_architecture,
                                        read_architectures, read_datasets, samples_seen)
from vlbias.validation import suggest

# architectures open_clip lists but cannot build offline: their text tower's config comes from the
# Hugging Face hub (text_cfg.hf_model_name), so neither their size nor their vectors are to be had
# without it (nllb-clip-*, roberta-ViT-B-32, xlm-roberta-*); docs/zoo.md names them
EXCLUDED = "its text tower is a Hugging Face model (text_cfg.hf_model_name): built only with the hub at hand"


def excluded(arch):
    """Why open_clip's ``arch`` is left out of the zoo, or None."""
    import open_clip

    return EXCLUDED if open_clip.get_model_config(arch).get("text_cfg", {}).get("hf_model_name") else None


def registry_pairs():
    """[(arch, tag)] of open_clip's pretrained registry in its order, less the EXCLUDED architectures."""
    import open_clip

    return [(arch, tag) for arch, tag in open_clip.list_pretrained() if not excluded(arch)]


ROW_COLUMNS = ["model", "adapter", *COLUMNS]  # a row of model_rows (results/zoo/models.csv, `vlbias list zoo`)


def pair_name(pair):
    return f"{pair[0]}:{pair[1]}"


def zoo_models(zoo):
    """{name: entry} of a zoo selection: the registry's pairs ``select/pairs`` names (all, or a list of
    "arch:tag"), then the entries of ``zoo/models``, filtered (``select``); each entry with its ``tag``
    (the pretrained tag its metadata is read under: ``pretrained`` unless given)."""
    select = zoo["select"]
    models = {}
    if select["pairs"]:
        known = registry_pairs()
        if select["pairs"] == "all":
            chosen = known
        else:
            names = {pair_name(p): p for p in known}
            for i, name in enumerate(select["pairs"]):
                if name not in names:
                    raise InputError(f"key 'zoo/select/pairs/{i}'", f"'{name}' is not an open_clip pretrained "
                                                                    f"pair (arch:tag){suggest(name, names)}")
            chosen = [names[n] for n in select["pairs"]]
        for arch, tag in chosen:
            entry = {"adapter": "open_clip", "arch": arch, "pretrained": tag, "tag": tag}
            models[sweep_name(entry)] = entry
    for entry in zoo["models"]:
        entry = {**entry, "tag": entry.get("tag") or entry.get("pretrained") or ""}
        models.setdefault(sweep_name(entry), entry)
    return _filtered(models, zoo)


def _filtered(models, zoo):
    select = zoo["select"]
    for i, pattern in enumerate(select["archs"]):
        if not any(fnmatch.fnmatchcase(e.get("arch", ""), pattern) for e in models.values()):
            raise InputError(f"key 'zoo/select/archs/{i}'", f"'{pattern}' matches no selected architecture"
                                                            f"{suggest(pattern, {e.get('arch') for e in models.values()})}")
    models = {n: e for n, e in models.items() if any(fnmatch.fnmatchcase(e.get("arch", ""), p) for p in select["archs"])}
    if select["datasets"]:
        datasets = read_datasets(zoo["datasets"])
        names = {row["dataset"] for row in datasets}
        for i, name in enumerate(select["datasets"]):
            if name not in names:
                raise InputError(f"key 'zoo/select/datasets/{i}'", f"'{name}' is not a dataset of {zoo['datasets']}"
                                                                   f"{suggest(name, names)}")
        models = {n: e for n, e in models.items()
                  if (dataset_of(datasets, e["tag"], e.get("arch")) or {}).get("dataset") in select["datasets"]}
    if select["params"]:
        counted = read_architectures(zoo["architectures"])
        low, high = select["params"].get("min", 0), select["params"].get("max", float("inf"))
        sizes = {n: _sizes(e, counted).get("params") for n, e in models.items()}
        unknown = [n for n, size in sizes.items() if size is None]
        if unknown:
            raise InputError("key 'zoo/select/params'", f"the size of {', '.join(unknown)} is not known offline (an "
                                                        "hf_dual model_id, another adapter): drop the filter or them")
        models = {n: e for n, e in models.items() if low <= sizes[n] / 1e6 <= high}
    return dict(list(models.items())[:select["limit"]]) if select["limit"] is not None else models


def _sizes(entry, counted):
    """The entry's architecture sizes, from its meta build: an open_clip entry's or an hf_dual entry's; none
    for other adapters."""
    adapter = entry.get("adapter", "open_clip")
    if adapter == "hf_dual":
        return hf_dual_architecture(entry)
    return architecture(entry["arch"], entry.get("model_cfg"), counted) if adapter == "open_clip" else {}


def model_rows(models, zoo, accuracy_table=None):
    """One row per model of ``models`` ({name: entry}): its name, adapter and the metadata COLUMNS.
    A tag the dataset table does not know is an error naming it; a model the accuracy table
    (read_accuracy's) lacks has its accuracy cells empty."""
    datasets = read_datasets(zoo["datasets"])
    counted = read_architectures(zoo["architectures"])
    rows = []
    for name, entry in models.items():
        found = dataset_of(datasets, entry["tag"], entry.get("arch"))
        if found is None:
            raise InputError(zoo["datasets"], f"no row names the dataset of tag '{entry['tag']}' (model {name}, arch "
                                              f"{entry.get('arch')}){suggest(entry['tag'], {r['tag'] for r in datasets})}")
        sizes = _sizes(entry, counted)
        scores = accuracy(accuracy_table or {}, entry.get("arch"), entry["tag"])
        row = {"arch": entry.get("arch", ""), "tag": entry["tag"], "dataset": found["dataset"],
               "curation": found["curation"], "pairs": found["pairs"],
               "samples_seen": samples_seen(entry["tag"], found["pairs"]), **sizes, **scores}
        rows.append({"model": name, "adapter": entry.get("adapter", "open_clip"), **{c: row.get(c) for c in COLUMNS}})
    return rows


def write_model_rows(path, models, zoo, accuracy_table):
    """results/zoo/models.csv: model_rows' rows."""
    from vlbias.io.atomic import atomic_path

    import pandas as pd

    with atomic_path(path) as tmp:
        pd.DataFrame(model_rows(models, zoo, accuracy_table)).reindex(columns=ROW_COLUMNS).to_csv(tmp, index=False)
