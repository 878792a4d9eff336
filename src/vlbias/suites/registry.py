"""The stages of the workflow, listed once: the suites of association tests and the region-features
stage they share (descriptors: vlbias.suites.stage). The config check, the weights stage, the
command line and the Snakefile (its rule files, ``rule all``) iterate over this list; adding a suite
is its package (with its ``suite.py``), its rule file, its config section (and schema) and its line
here.

    STAGES                           # in the order the Snakefile includes their rules
    suites(config)                   # the configured Suites: what a user lists (models, tests, tables)
    check_suite(stimulus)            # a stimulus file's suite is one of them
    adapter_sections()               # [((section, ...), kind)] of every entry an adapter builds
    weights_entries(config)          # {"<stage>/<name>": entry} of every entry that loads weights
    default_targets(config, down)    # `rule all`'s files
"""

from vlbias.errors import InputError
from vlbias.suites.grounded.suite import SUITE as GROUNDED
from vlbias.suites.ieat.suite import SUITE as IEAT
from vlbias.suites.mlm.suite import SUITE as MLM
from vlbias.suites.regions import STAGE as REGIONS
from vlbias.suites.robustness import STAGE as ROBUSTNESS
from vlbias.suites.seat.suite import SUITE as SEAT
from vlbias.suites.skew.suite import STAGE as SKEW
from vlbias.suites.stage import Suite
from vlbias.suites.zoo.suite import SUITE as ZOO
from vlbias.validation import suggest

STAGES = (IEAT, SEAT, GROUNDED, REGIONS, MLM, SKEW, ROBUSTNESS, ZOO)


def present(config):
    """The stages whose section ``config`` has: the others build, check and list nothing."""
    return [stage for stage in STAGES if config.get(stage.name)]


def suites(config):
    """The suites whose section ``config`` has."""
    return [stage for stage in present(config) if isinstance(stage, Suite)]


def check_suite(stimulus):
    """A stimulus file's ``suite`` must name a suite of the registry (the stimulus schema takes any
    name: a new suite on its format is the registry's line alone); InputError naming the file."""
    known = [stage.name for stage in STAGES if isinstance(stage, Suite)]
    if stimulus.suite not in known:
        raise InputError(stimulus.path, f"key 'suite': '{stimulus.suite}' is not a suite of the registry (known: "
                                        f"{', '.join(known)}){suggest(stimulus.suite, known)}")


def adapter_sections():
    """[(path of keys, adapter kind)] of every config mapping (or list) whose entries an adapter builds."""
    return [((stage.name, *path.split("/")), kind) for stage in STAGES for path, kind in stage.adapters.items()]


def rule_files():
    """The rule files of every stage (workflow/rules/<file>), in the order the Snakefile includes them."""
    return [rules for stage in STAGES for rules in stage.rules]


def reference_problems(config, root):
    """Pass 3 of the config check: each present stage's references between keys."""
    return [problem for stage in present(config) for problem in stage.check(config, root)]


def weights_entries(config):
    """{"<stage>/<name>": entry} of every configured entry that loads weights (vlbias.weights), stage
    by stage; read from the (checked) config alone, no adapter imported."""
    return {name: spec for stage in present(config) for name, spec in stage.weights_entries(config).items()}


def weights_records(config):
    """The weights records the default target needs (rule weights), sorted."""
    return sorted({record for stage in present(config) for record in stage.weights(config)})


def probes(config):
    """{dataset: () -> a few URLs} of every image dataset a run without a mirror asks before it plans."""
    return {dataset: urls for stage in present(config) for dataset, urls in stage.probes(config).items()}


def default_targets(config, down):
    """The files of the default target, stage by stage; ``down``: what of the upstream does not
    answer now (vlbias.suites.plan.offline), whose targets are left out."""
    return [target for stage in present(config) for target in stage.targets(config, down)]
