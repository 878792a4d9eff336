"""What the workflow builds from one section of the config, declared once (in the spirit of WEFE's
``BaseMetric``): a ``Stage``, and a ``Suite``, a stage of association tests a user lists and reads.
The config check (vlbias.config), the weights stage (its entries and the records the targets need),
the command line (``vlbias list``/``show``/``run``/``weights``) and the workflow (its rule files, the
default target) read every stage through its descriptor, from the one list in
vlbias.suites.registry; none of them names a suite.

    Stage(name="regions", rules=("regions.smk",), adapters={"detectors": "detectors"},
          check=..., targets=..., weights=...)                      # vlbias.suites.regions
    Suite(name="seat", rules=("seat.smk",), ..., tests=..., tables=...)   # vlbias.suites.<name>.suite

Each function takes the config as vlbias.config.check_config leaves it (schema defaults filled in),
and is called only while the stage's section is in it: a stage whose section is absent builds,
checks and lists nothing.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from vlbias.validation import key_path, suggest


class Table(NamedTuple):
    """A results table a suite builds: its CSV (the Markdown and HTML lie beside it) and its caption."""

    path: str
    caption: str


def mleat_tables(suite, tables):
    """{"mleat/<name>": Table} of the ML-EAT of each of ``tables`` ({name: Table} of ``suite``), which the
    workflow builds beside each (by name, or in the default target with stats/mleat/build)."""
    from vlbias.suites.plan import mleat_path

    return {f"mleat/{name}": Table(mleat_path(suite, name), f"ML-EAT: {table.caption}") for name, table in tables.items()}


def _nothing(*_):
    return []


def _none_by_name(_config):
    return {}


@dataclass(frozen=True)
class Stage:
    """A part of the workflow built from the config section ``name``.

    name      the config section; the prefix of its weights entries ("regions/bua-36")
    rules     its rule files under workflow/rules/ (the Snakefile includes them, in the registry's order)
    adapters  {path below the section: adapter kind} of the mappings (or lists) whose entries an adapter
              registry builds, checked against their adapter's schema: {"models": "models"}
    check     (config, root) -> problems: the references between keys (pass 3 of the config check);
              ``root`` is the project's directory (stimulus folders are relative to it)
    targets   (config, down) -> the files of the default target; ``down``: what of the upstream does
              not answer now (vlbias.suites.plan.offline: {("sources", name) or ("images", dataset): why})
    weights   config -> the weights records (vlbias.weights.record_path) its default targets need
    entries   config -> {name: entry} of its entries that load weights, or None: every entry of its
              ``adapters`` sections that names an adapter
    probes    config -> {dataset: () -> a few URLs}: the image hosts a run without a mirror asks
              before it plans their downloads
    """

    name: str
    rules: tuple[str, ...]
    adapters: Mapping[str, str] = field(default_factory=dict)
    check: Callable[[dict, Path], list] = _nothing
    targets: Callable[[dict, Mapping], list] = _nothing
    weights: Callable[[dict], list] = _nothing
    entries: Callable[[dict], dict] | None = None
    probes: Callable[[dict], dict] = _none_by_name

    @property
    def kind(self):
        """The adapter kind of its weights entries (models or detectors): that of its adapter sections."""
        kinds = set(self.adapters.values())
        if len(kinds) > 1:
            raise ValueError(f"stage '{self.name}': adapter sections of several kinds {sorted(kinds)}")
        return next(iter(kinds), None)

    def section(self, config):
        """Its section of ``config``, {} where absent."""
        return config.get(self.name) or {}

    def weights_entries(self, config):
        """{"<stage>/<name>": entry} of the entries that load weights (read from the config alone)."""
        if self.entries is not None:
            found = self.entries(config)
        else:
            found = {}
            for path in self.adapters:
                part = self.section(config)
                for key in path.split("/"):
                    part = (part or {}).get(key) or {}
                found |= part if isinstance(part, dict) else {}
        return {f"{self.name}/{name}": spec for name, spec in found.items()
                if isinstance(spec, dict) and spec.get("adapter")}


@dataclass(frozen=True)
class Suite(Stage):
    """A stage of association tests: what ``vlbias list``, ``show`` and ``run`` read of it besides its
    models (the section's ``models``).

    tests   config -> [(suite label, test id, stimulus file)] of its tests
    tables  config -> {name: Table} of the tables it builds, by the name ``vlbias show`` takes
    models  config -> {name: entry} of its models, or None: its section's ``models`` mapping
    """

    tests: Callable[[dict], list] = _nothing
    tables: Callable[[dict], dict] = _none_by_name
    models: Callable[[dict], dict] | None = None

    def model_entries(self, config):
        """{name: entry} of its models."""
        if self.models is not None:
            return self.models(config)
        return dict(self.section(config).get("models") or {})


# --- what the stages' reference checks share --------------------------------------------------------------


def unknown_names(problems, where, names, known, what):
    """Add a problem for each of ``names`` (a list at key ``where``) that is not one of ``known``."""
    for i, name in enumerate(names or []):
        if name not in known:
            problems.append(f"key '{key_path((*where, i))}': '{name}' is not {what}{suggest(name, known)}")
