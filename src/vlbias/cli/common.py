"""What the commands share: the config (checked as the workflow checks it), the workflow's schema and
the defaults it declares, the configured models (every suite's), writing a result."""

import sys
from functools import cache
from pathlib import Path

import yaml

from vlbias import CONFIG, SCHEMA
from vlbias.errors import InputError


class UsageError(Exception):
    """A command given what it cannot use; the message says what to do instead."""


def config_option(p):
    p.add_argument("--config", default=CONFIG, help=f"the workflow config (default {CONFIG})")


def load_config(path):
    """The config at ``path``, checked as the workflow checks it (defaults filled in)."""
    from vlbias.config import check_config

    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config (run in the repository, or give --config)") from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {e}") from None
    return check_config(config, schema_path())


def schema_path():
    """The workflow's schema: in the working directory's workflow/, else the repository's beside src/."""
    schemas = [Path(SCHEMA), Path(__file__).resolve().parents[3] / SCHEMA]
    schema = next((s for s in schemas if s.is_file()), None)
    if schema is None:
        raise UsageError(f"no {SCHEMA} here or beside the vlbias package: run in the repository")
    return schema


@cache
def schema_default(*keys):
    """The default the workflow's schema declares for the config key ``keys`` (for a help text; None
    where no schema is found)."""
    try:
        node = yaml.safe_load(schema_path().read_text(encoding="utf-8"))
    except UsageError:
        return None
    for key in keys:
        node = node["properties"][key]
    return node.get("default")


def models(config):
    """[(suite, name, entry)] of every configured model, suite by suite."""
    from vlbias.suites.registry import suites

    return [(suite.name, name, spec) for suite in suites(config) for name, spec in suite.model_entries(config).items()]


def write(text, output):
    """``text`` to the standard output, or (whole or not at all) to the file ``output``."""
    if output is None:
        sys.stdout.write(text)
        return
    from vlbias.io.atomic import atomic_path

    with atomic_path(output) as tmp:
        tmp.write_text(text, encoding="utf-8")
