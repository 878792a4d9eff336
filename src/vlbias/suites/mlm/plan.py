"""What the masked-entity workflow (workflow/rules/mlm.smk) builds, planned from the checked config:
one log-probability job per model (its inputs per wildcard), one report job per vision-language model."""

from vlbias.io.fetch import read_manifest
from vlbias.regions.plan import RegionsPlan, store_path
from vlbias.weights import record_path

# each vision-language model's tables, and what each shows (the start of its caption: vlbias.report.mlm)
TABLES = {
    "scores": "Association scores S(E, g) of the case study",
    "bias": "Bias scores B(E) = S(E, female) - S(E, male) of the case study",
    "contradictions": "Images whose prediction contradicts the visual evidence (Table 3)",
    "entities": "Language bias B_L(E) of the entity list",
}
FIGURES = ["figure2", "figure3", "figure4", "figure5a", "figure5b"]


def logprobs_path(model, ext="tsv"):
    """A model's log-probabilities (tsv), or the images it read (images.tsv)."""
    return f"results/mlm/logprobs/{model}.{ext}"


def table_path(model, table, ext="csv"):
    """A table (or figure: ``ext`` png) of a vision-language model."""
    return f"results/mlm/{model}/{table}.{ext}"


class MlmPlan:
    def __init__(self, config):
        self.mlm = config.get("mlm") or {}
        self.models = self.mlm.get("models", {})
        self.reference = self.mlm.get("reference")
        self.vl = [m for m in self.models if m != self.reference]
        self.regions = RegionsPlan(config)

    def stimuli(self):
        return [self.mlm["case_study"], self.mlm["entities"]] if self.mlm else []

    def manifest(self):
        return self.regions.manifest(self.mlm["images"]) if self.mlm.get("images") else None

    def has_images(self):
        """Whether the case-study manifest lists any usable image: only then is a region store needed."""
        manifest = self.manifest()
        return manifest is not None and any(r["status"] == "ok" for r in read_manifest(manifest))

    def logprobs_inputs(self, model):
        """The log-probability job's inputs: the stimuli; for a vision-language model the images' manifest
        and, when it lists an image, the region store of the model's detector."""
        inputs = {"stimuli": self.stimuli()}
        if model != self.reference and self.manifest():
            inputs["manifest"] = self.manifest()
            if self.has_images():
                inputs["store"] = store_path(self.mlm["images"], self.models[model]["detector"])
        return inputs

    def outputs(self, model):
        return ([table_path(model, t, ext) for t in TABLES for ext in ("csv", "md", "tex", "html")]
                + [table_path(model, f, "png") for f in FIGURES] + [logprobs_path(model, "images.tsv")])

    def targets(self):
        return [t for model in self.mlm.get("build", []) for t in self.outputs(model)]

    def weights(self):
        """The weights records the targets need: each built model's and the reference's, and the
        detector of each built vision-language model when images are configured (read for their regions)."""
        built = self.mlm.get("build", [])
        models = set(built) | ({self.reference} if built else set())
        detectors = {self.models[m]["detector"] for m in built if m != self.reference and self.manifest()}
        return sorted([record_path(f"mlm/{m}") for m in models] + [record_path(f"regions/{d}") for d in detectors])
