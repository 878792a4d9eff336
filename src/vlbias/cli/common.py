"""What the commands share: the config and the workflow's schema (read by vlbias.config), the defaults
the schema declares (for help texts), writing a result."""

import sys
from functools import cache

from vlbias import CONFIG
from vlbias.errors import UsageError
from vlbias.safeyaml import load_yaml
from vlbias.schemas import schema_path

__all__ = ["UsageError", "config_option", "load_config", "schema_default", "schema_path", "write"]


# vlbias.config (jsonschema, numpy, every suite's planning) is imported by the commands that read a
# config, not by the parser every command builds (`vlbias --version` answers without it)
def load_config(path):
    from vlbias.config import load_config as load

    return load(path)


@cache
def _schema():
    """The workflow's schema, read once (vlbias.safeyaml: libyaml's loader where present), or None where none
    is found."""
    try:
        text = schema_path().read_text(encoding="utf-8")
    except UsageError:
        return None
    return load_yaml(text)


def config_option(p):
    p.add_argument("--config", default=CONFIG, help=f"the workflow config (default {CONFIG})")


def schema_default(*keys):
    """The default the workflow's schema declares for the config key ``keys`` (for a help text; None
    where no schema is found)."""
    node = _schema()
    if node is None:
        return None
    for key in keys:
        node = node["properties"][key]
    return node.get("default")


def write(text, output):
    """``text`` to the standard output, or (whole or not at all) to the file ``output``."""
    if output is None:
        sys.stdout.write(text)
        return
    from vlbias.io.atomic import atomic_path

    with atomic_path(output) as tmp:
        tmp.write_text(text, encoding="utf-8")
