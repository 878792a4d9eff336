"""Planning shared by the suites' workflows (vlbias.suites.<suite>.plan): config lookups every rule
file makes. Each takes the checked config (vlbias.config.check_config: defaults filled in)."""

import re
from pathlib import Path

from vlbias.io.fetch import Source


def alternatives(names):
    """Regex matching exactly one of ``names`` (and nothing when the list is empty): a wildcard constraint."""
    return "|".join(map(re.escape, names)) if names else "(?!)"


def stimulus_ids(directory):
    return sorted(p.stem for p in Path(directory).glob("*.yaml"))


def source(config, name):
    return Source(**config["sources"][name])


def mirror(config):
    return config["mirror"] and str(Path(config["mirror"]).resolve())


def stats_params(config):
    stats = config["stats"]
    return {"n_samples": stats["n_samples"], "seed": stats["seed"], "exact": stats["exact"]}


def embedding_path(suite, model):
    """The embedding store of ``model`` in ``suite`` (ieat, seat): every stimulus's vector."""
    return f"results/embeddings/{suite}/{model}.h5"


def provenance(spec):
    """What a store records about its model from the config entry."""
    return {k: spec[k] for k in ("model_id", "revision") if spec.get(k)}


def vector_files(spec):
    """The files of a ``source: vectors`` entry (its vectors, and the ids of an .npy array)."""
    return [spec["vectors"]] + ([spec["ids"]] if spec.get("ids") else [])
