"""Adapters by name, built from workflow config entries (models, detectors).

An adapter module imports torch and its model library (seconds), so it is imported only when an
entry names it: importing a registry (e.g. while Snakemake parses the workflow) stays cheap.
"""

import importlib

from vlbias.errors import InputError


class Registry:
    def __init__(self, kind, modules):
        self.kind = kind
        self.modules = modules  # adapter name -> module whose import registers it
        self.classes = {}

    def register(self, name):
        """Class decorator: make ``build({"adapter": name, ...})`` construct ``cls(spec)``."""

        def add(cls):
            self.classes[name] = cls
            return cls

        return add

    def build(self, spec):
        """The adapter object described by ``spec``; other keys of the entry are the adapter's to read."""
        name = spec.get("adapter")
        if name not in self.classes and name in self.modules:
            importlib.import_module(self.modules[name])
        if name not in self.classes:
            known = ", ".join(sorted(set(self.modules) | set(self.classes)))
            raise InputError(f"adapter '{name}'", f"unknown {self.kind} adapter (known adapters: {known})")
        return self.classes[name](spec)
