"""The skew stage (section ``skew``, workflow/rules/skew.smk) as the workflow and the config check see it
(vlbias.suites.stage): zero-shot retrieval skew of joint-space models over labelled image sets.

Not a suite of association tests, and out of the default target: its models need their weights and its
labelled sets are the user's (FairFace, UTKFace, one's own), so it is built by name, `snakemake skew`.
Its weights entries (``skew/<model>``) are fetched by the weights stage like any other.
"""

from vlbias.models.families import embeds
from vlbias.suites.stage import Stage
from vlbias.validation import suggest


def check(config, root):
    """Each model embeds images and texts; each link of the bridge names a prompt set of ``queries`` and an
    attribute some set declares; a queries entry's upstream source is configured; a CSV set has labels."""
    skew, problems = config["skew"], []
    for name, spec in skew["models"].items():
        if not {"images", "texts"} <= set(embeds(spec["adapter"])):
            problems.append(f"key 'skew/models/{name}/adapter': adapter '{spec['adapter']}' is no joint image-text "
                            "space (open_clip, hf_dual)")
    for name, spec in skew["queries"].items():
        if "source" in spec and spec["source"] not in config["sources"]:
            problems.append(f"key 'skew/queries/{name}/source': '{spec['source']}' is not an entry of 'sources'")
    for name, spec in skew["datasets"].items():
        if spec["format"] == "csv" and not spec.get("labels"):
            problems.append(f"key 'skew/datasets/{name}': format csv needs `labels` (the labels CSV)")
        if spec["format"] == "csv" and not isinstance(spec["attributes"], dict):
            problems.append(f"key 'skew/datasets/{name}/attributes': format csv names each attribute's values "
                            "({attribute: [values]})")
        elif spec["format"] != "csv" and not isinstance(spec["attributes"], list):
            problems.append(f"key 'skew/datasets/{name}/attributes': a list of its attributes (gender, race, age)")
    attributes = {a for spec in skew["datasets"].values() for a in spec["attributes"]}
    for i, link in enumerate(skew["propagation"]["map"]):
        for key, known, what in (("attribute", attributes, "an attribute of a set under 'skew/datasets'"),
                                 ("queries", skew["queries"], "an entry of 'skew/queries'")):
            if link[key] not in known:
                problems.append(f"key 'skew/propagation/map/{i}/{key}': '{link[key]}' is not {what}"
                                f"{suggest(link[key], known)}")
    k = skew["propagation"]["k"]
    if k is not None and k not in skew["k"]:
        problems.append(f"key 'skew/propagation/k': {k} is not one of skew/k "
                        f"({', '.join(map(str, skew['k']))})")
    return problems


STAGE = Stage(
    name="skew", rules=("skew.smk",), adapters={"models": "models"}, check=check,
    weights=lambda config: [],  # out of the default target: `snakemake skew` fetches what it needs
)
