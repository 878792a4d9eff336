"""Adapters by name, built from workflow config entries (models, detectors).

An adapter module imports torch and its model library (seconds), so it is imported only when an
entry names it: importing a registry (e.g. while Snakemake parses the workflow) stays cheap. The
module of adapter ``<name>`` is ``<package>.<name>`` by convention, and every adapter has a schema,
``vlbias/schemas/<kind>s/<name>.yaml`` (vlbias.schemas): adding one means its module, its schema and
a config entry. The schema's defaults are filled in before the adapter sees the entry, whoever
builds it (the workflow, the command line, a test, a benchmark; through ``build`` or the registered
class itself): an adapter reads ``spec[key]`` for every key its schema gives a default.
"""

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from vlbias.errors import InputError
from vlbias.io.paths import StrPath
from vlbias.schemas import adapters, with_defaults

T = TypeVar("T")


class Registry:
    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package  # adapter <name>: the import of module <package>.<name> registers it
        self.classes: dict[str, type] = {}  # adapter name -> its class, called with the entry

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: make ``build({"adapter": name, ...})`` construct ``cls(spec)``. The class
        itself fills in its schema's defaults too: an adapter constructed directly (``BottomUpAttention
        ({...})``, not through ``build``) reads them as ``build`` gives them, not a KeyError."""

        def add(cls: type[T]) -> type[T]:
            if isinstance(cls, type):  # (a test may register a plain function: build fills its defaults)
                init: Callable[..., None] = cls.__init__
                kind = f"{self.kind}s"

                @functools.wraps(init)
                def with_schema_defaults(obj: Any, spec: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
                    init(obj, with_defaults({"adapter": name, **spec}, kind), *args, **kwargs)

                setattr(cls, "__init__", with_schema_defaults)  # noqa: B010 (mypy refuses assigning a method)
            self.classes[name] = cls
            return cls

        return add

    def build(self, spec: Mapping[str, Any]) -> Any:
        """The adapter object described by ``spec``, its schema's defaults filled in; other keys of the
        entry are the adapter's to read. (What a model adapter offers, by the roles its family declares:
        vlbias.models.protocols.)

        An entry naming remote weights (a hub id, a URL, an open_clip tag, torchvision weights) is
        refused unless it came through vlbias.weights (``prepare``, or the workflow's ``localize``):
        adapters load verified local files only, they never download."""
        from vlbias.weights import unfetched

        name = spec.get("adapter")
        known = adapters(f"{self.kind}s")
        if name not in self.classes and name in known:
            importlib.import_module(f"{self.package}.{name}")
        if name not in self.classes:
            names = ", ".join(sorted(set(known) | set(self.classes)))
            raise InputError(f"adapter '{name}'", f"unknown {self.kind} adapter (known adapters: {names})")
        if name in known and (key := unfetched(spec, f"{self.kind}s")):
            raise InputError(f"{name} entry", f"`{key}: {spec.get(key, '(its default)')}` names remote weights, which "
                                              "load only fetched and verified: build the spec that vlbias.weights."
                                              "prepare(name, spec, cache=..., lock_path=...) returns")
        return self.classes[name](with_defaults(spec, f"{self.kind}s"))

    def build_recorded(self, name: str, spec: Mapping[str, Any], record_path: StrPath, *, cache: StrPath,
                       lock_path: StrPath | None, threads: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """Entry ``name``'s adapter as a workflow job builds it: from the files the weights record at
        ``record_path`` verifies, offline (a compute node needs no network; vlbias.weights.localize),
        on ``threads`` threads. Returns (the adapter, the localized spec, the record)."""
        from vlbias.weights import localize, read_record

        record = read_record(record_path)
        local = localize(name, spec, record, cache=cache, lock_path=lock_path)
        return self.build({**local, "threads": threads}), local, record


def one_weights_source(spec: Mapping[str, Any], where: str, remote: str | None = None, hint: str = "") -> None:
    """Check that an entry (a model or a detector) names exactly one weights source: ``remote`` (the
    key of its download, e.g. `pretrained`, `url`, `model_id`; ``hint`` says what goes with it),
    `checkpoint` or `weights: random`. The same vocabulary for every family."""
    keys = ([f"`{remote}`" + (f" ({hint})" if hint else "")] if remote else []) + ["`checkpoint: <file>`",
                                                                                  "`weights: random`"]
    given = [spec.get(remote) if remote else None, spec.get("checkpoint"), spec.get("weights")]
    if sum(x is not None for x in given) != 1:
        raise InputError(where, f"set exactly one of {', '.join(keys[:-1])} or {keys[-1]}")
    if given[2] is not None and given[2] != "random":
        raise InputError(f"weights '{given[2]}'", "the only value is `random`"
                                                  + (f"; use {remote} or checkpoint" if remote else ""))


def weights_label(spec: Mapping[str, Any]) -> str:
    """What a model's provenance says of its weights (``info["weights"]``), one vocabulary for every family:
    ``random-init`` (``weights: random``), ``checkpoint`` (a state_dict file: ``checkpoint``, a local
    file or a fetched URL) or ``pretrained`` (a published model: a hub id, an open_clip tag, a model
    folder)."""
    if spec.get("weights") == "random":
        return "random-init"
    return "checkpoint" if spec.get("checkpoint") else "pretrained"
