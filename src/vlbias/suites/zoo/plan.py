"""What the zoo workflow builds (workflow/rules/zoo.smk), planned from the checked config alone: its
models (the selection expanded: vlbias.suites.zoo.select), each one's weights record and store, its
tests (the iEAT stimuli), its tables.

    plan = ZooPlan(config)
    plan.store("vit-b-32-openai")     # results/zoo/embeddings/vit-b-32-openai.h5
"""

from functools import cached_property

from vlbias.suites.ieat.plan import IeatPlan
from vlbias.suites.plan import stimulus_ids

# the zoo's tables and figure: results/zoo/<name>.<ext>
TABLES = {"models": ("csv",), "eats": ("csv", "md"), "predictors": ("csv", "md", "png"),
          "performance": ("csv", "md", "png")}
UPSTREAM = "results/zoo/upstream"  # open_clip's own tables, fetched (rule zoo_upstream)
OASIS = "results/zoo/oasis"  # the selected OASIS images' store and status (rule zoo_oasis)
# the Snakemake group of the embedding jobs: profiles/slurm's group-components bundles its jobs to a cluster job
EMBED_GROUP = "zoo-embed"


def table_path(table, ext="csv"):
    return f"results/zoo/{table}.{ext}"


class ZooPlan:
    def __init__(self, config):
        self.config = config
        self.zoo = config.get("zoo") or {}  # the rule file is read without a zoo section too: nothing planned

    @cached_property
    def models(self):
        """{name: entry} of the selection (vlbias.suites.zoo.select.zoo_models)."""
        from vlbias.suites.zoo.select import zoo_models

        return zoo_models(self.zoo) if self.zoo else {}

    def targets(self):
        return [table_path(t, ext) for t, exts in TABLES.items() for ext in exts]

    def tests(self):
        tests = self.zoo["tests"]
        return stimulus_ids(self.config["ieat"]["stimuli"]) if tests == "all" else list(tests)

    def stimuli(self):
        return [f"{self.config['ieat']['stimuli']}/{t}.yaml" for t in self.tests()]

    @cached_property
    def text_tests(self):
        """Ghate et al.'s text tests the battery runs (vlbias.suites.zoo.text), by name."""
        from vlbias.suites.zoo.text import text_tests

        return text_tests(self.zoo) if self.zoo else []

    def text_test_paths(self):
        """The text tests, staged (rule zoo_text_tests)."""
        from vlbias.suites.zoo.text import staged_path

        return [staged_path(t) for t in self.text_tests]

    def text_stimuli(self):
        """The stimulus files whose sets list texts (the cross-modal tests, the text tests): every model
        embeds them."""
        ieat = IeatPlan(self.config)
        return [path for test, path in zip(self.tests(), self.stimuli()) if ieat.text_set_names(test)] + \
            self.text_test_paths()

    def battery(self):
        """Every test's file, the iEAT stimuli's and the text tests'."""
        return self.stimuli() + self.text_test_paths()

    def image_stores(self):
        """The image stores every zoo model reads: ieat/images' (each model preprocesses to its size), and the
        OASIS images' where zoo/oasis is set."""
        return [f"results/images/ieat/{IeatPlan(self.config).default_store}/images.h5"] + \
            ([f"{OASIS}/images.h5"] if self.zoo["oasis"] else [])

    def image_settings(self):
        """The iEAT image store's size, crop, resampling and decoder (the OASIS store's too)."""
        ieat = IeatPlan(self.config)
        return ieat.image_stores_settings[ieat.default_store]

    @staticmethod
    def record(model):
        """A model's weights record, or the reason it could not be fetched (rule zoo_weights)."""
        return f"results/zoo/weights/{model}.json"

    @staticmethod
    def store(model):
        return f"results/zoo/embeddings/{model}.h5"

    def stores(self):
        return [self.store(m) for m in self.models]

    def accuracy(self):
        """The accuracy table: open_clip's, fetched at the pinned commit, or the file ``zoo/accuracy`` names."""
        return f"{UPSTREAM}/openclip_results.csv" if self.zoo["accuracy"] == "upstream" else self.zoo["accuracy"]
