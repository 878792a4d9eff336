"""Planning shared by the suites' workflows (vlbias.suites.<suite>.plan): config lookups every rule
file makes. Each takes the checked config (vlbias.config.check_config: defaults filled in)."""

import re
from pathlib import Path
from urllib.parse import urlsplit

from vlbias import CONFIG
from vlbias.io.fetch import Source, unreachable


def alternatives(names):
    """Regex matching exactly one of ``names`` (and nothing when the list is empty): a wildcard constraint."""
    return "|".join(map(re.escape, names)) if names else "(?!)"


def stimulus_ids(directory):
    return sorted(p.stem for p in Path(directory).glob("*.yaml"))


def source(config, name):
    return Source(**config["sources"][name])


# Where `mirror: auto` looks, relative to the working directory: the data mirror beside the project
# (../shared/data), as CI and the developers have it.
DEFAULT_MIRROR = "../shared/data"


def mirror(config):
    """The local mirror the upstream files are read from (an absolute path), or None: they are
    downloaded from the pinned commits. ``mirror: auto`` is DEFAULT_MIRROR where that folder exists,
    else None; a path is taken as given (a missing one is an error where a file is read from it)."""
    setting = config["mirror"]
    if setting == "auto":
        setting = DEFAULT_MIRROR if Path(DEFAULT_MIRROR).is_dir() else None
    return setting and str(Path(setting).resolve())


def offline(config, datasets=(), probe_urls=None):
    """What of the upstream a run reads does not answer now, {("sources", name) or ("images", dataset):
    why}; {} with a mirror. A `sources` entry (GitHub) is offline when its host does not answer; a
    grounded image dataset of ``datasets`` when none of the hosts of ``probe_urls(dataset)`` (a few of
    its URLs: vlbias.suites.grounded.plan.GroundedImagesPlan.probe_urls) answers and no `sources` host does
    either: dead sites alone are no missing network, their images are failures to record."""
    if mirror(config):
        return {}
    down = {("sources", name): unreachable(source(config, name).url("")) for name in config["sources"]}
    down = {key: why for key, why in down.items() if why}
    if len(down) == len(config["sources"]):
        down |= {("images", dataset): unreachable(probe_urls(dataset)) for dataset in datasets}
    return {key: why for key, why in down.items() if why}


def offline_line(config, down, left_out):
    """The one line a run without a mirror or a network ends with: what it tried to reach (``down``, as
    ``offline`` gives it, and the first reason), what of the default target it left out (``left_out``)
    and what to do."""
    hosts = {}
    for kind, name in down:
        if kind == "sources":
            src = source(config, name)
            hosts.setdefault(urlsplit(src.url("")).netloc, []).append(src.repo)
    tried = [f"{host} ({', '.join(repos)} at the pinned commits)" for host, repos in hosts.items()]
    datasets = [name for kind, name in down if kind == "images"]
    if datasets:
        tried.append(f"the image hosts of the grounded {' and '.join(datasets)} dataset{'s' * (len(datasets) > 1)}")
    where = (f"there is no data mirror at {DEFAULT_MIRROR}" if config["mirror"] == "auto" else
             f"{CONFIG} says `mirror: null`")
    folders = ", ".join(dict.fromkeys(str(Path(*Path(t).parts[:3 if t.startswith("results/images/") else 2])) + "/"
                                      for t in left_out))
    return (f"offline: no answer from {' nor '.join(tried)} ({next(iter(down.values()))}), and {where}: left out "
            f"the {len(left_out)} target(s) that need them ({folders}) and built the rest. Put the mirror at "
            f"{DEFAULT_MIRROR}, set `mirror:` in {CONFIG} to its path, or run with a network.")


def stats_params(config):
    stats = config["stats"]
    return {"n_samples": stats["n_samples"], "seed": stats["seed"], "exact": stats["exact"]}


def mleat_params(config):
    """The ML-EAT's own settings (stats/mleat: alpha, level2_null, saturation) as vlbias.stats.mleat.mleat
    takes them; the permutations are stats_params'."""
    mleat = config["stats"]["mleat"]
    return {"alpha": mleat["alpha"], "null": mleat["level2_null"], "saturation": mleat["saturation"]}


def mleat_on(config):
    """Whether the default target has each table's ML-EAT files (stats/mleat/build)."""
    return config["stats"]["mleat"]["build"]


MLEAT_KINDS = ("csv", "html", "png", "maps")  # a table's ML-EAT files (mleat_path)


def mleat_path(suite, table, kind="csv"):
    """An ML-EAT file of a table: results/<suite>/mleat/<table>.<csv|html|png>, or its folder of EAT-Maps
    (``kind`` "maps": results/<suite>/mleat/<table>/)."""
    return f"results/{suite}/mleat/{table}" + ("" if kind == "maps" else f".{kind}")


def embedding_path(suite, model):
    """The embedding store of ``model`` in ``suite`` (ieat, seat): every stimulus's vector."""
    return f"results/embeddings/{suite}/{model}.h5"


def provenance(spec):
    """What a store records about its model from the config entry."""
    return {k: spec[k] for k in ("model_id", "revision") if spec.get(k)}


def vector_files(spec):
    """The files of a ``source: vectors`` entry (its vectors, and the ids of an .npy array)."""
    return [spec["vectors"]] + ([spec["ids"]] if spec.get("ids") else [])
