"""What the commands share: the config and the workflow's schema (read by vlbias.config), the defaults
the schema declares (for help texts), writing a result."""

import sys
from functools import cache

from vlbias import CONFIG
from vlbias.config import load_config, schema_path
from vlbias.errors import UsageError
from vlbias.safeyaml import load_yaml

__all__ = ["UsageError", "config_option", "load_config", "schema_default", "schema_path", "write"]


def config_option(p):
    p.add_argument("--config", default=CONFIG, help=f"the workflow config (default {CONFIG})")


@cache
def schema_default(*keys):
    """The default the workflow's schema declares for the config key ``keys`` (for a help text; None
    where no schema is found)."""
    try:
        node = load_yaml(schema_path().read_text(encoding="utf-8"))
    except UsageError:
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
