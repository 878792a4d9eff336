"""An open_clip architecture's config with a config entry's ``model_cfg`` (vlbias.models.open_clip builds
the model from it; the zoo counts its parameters on the meta device, vlbias.suites.zoo.metadata)."""

import json
import tempfile
from pathlib import Path

import open_clip

from vlbias.errors import InputError

# architectures defined by a config entry's model_cfg rather than shipped with open_clip
DEFINED = set()


def model_config(arch, model_cfg):
    """(the architecture's config, the keyword arguments open_clip.create_model takes with it) of ``arch``
    with an entry's ``model_cfg``: an open_clip architecture with ``model_cfg`` merged into it, or a new one
    that ``model_cfg`` defines (registered with open_clip under ``arch``)."""
    if not isinstance(arch, str) or not arch:
        raise InputError("arch", "an open_clip encoder needs `arch`, an architecture name")
    if arch in open_clip.list_models() and arch not in DEFINED:
        base = open_clip.get_model_config(arch)
        # create_model replaces top-level keys; merge sub-configs so a partial vision_cfg works
        return base, {k: {**base[k], **v} if isinstance(base.get(k), dict) else v for k, v in model_cfg.items()}
    if {"embed_dim", "vision_cfg", "text_cfg"} <= set(model_cfg):
        # open_clip builds models by name only, so a new architecture is registered under its name
        # (again on every build: two entries may define the same name differently)
        _add_model_config(arch, model_cfg)
        DEFINED.add(arch)
        return model_cfg, {}
    raise InputError(f"arch '{arch}'", "not an open_clip architecture (see open_clip.list_models()); to "
                                       "define one, give model_cfg with embed_dim, vision_cfg and text_cfg")


def _add_model_config(arch, model_cfg):
    """Register ``model_cfg`` as open_clip architecture ``arch`` through its public ``add_model_config``,
    which reads a <arch>.json file (kept in its registry after the file is gone)."""
    if "/" in arch or arch.startswith("."):
        raise InputError(f"arch '{arch}'", "a new architecture's name is a file name: no '/', no leading '.'")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, f"{arch}.json")
        path.write_text(json.dumps(model_cfg))
        open_clip.add_model_config(path)
    if arch not in open_clip.list_models():  # open_clip names it by the file's stem
        raise InputError(f"arch '{arch}'", "not a name open_clip registers an architecture under")
