"""vlbias's layers point down only (docs/architecture.md): every import of a module of the package, at
module level or inside a function, names a module of its own folder or of a lower layer, never one
above or beside it; no module imports an adapter module (the registry imports it by name); and the
package imports without a cycle. The import graph is read from the source with ast."""

import ast
from pathlib import Path

import vlbias
from vlbias.schemas import adapters

SRC = Path(vlbias.__file__).parent

# Bottom to top, each layer's folders and modules (vlbias.<name>; __init__ is vlbias itself, its
# version). A module imports from its own folder and from the layers below its own, nothing else.
LAYERS = (
    ("__init__", "errors", "safeyaml"),
    ("logs", "schemas", "validation"),
    ("io", "stats"),
    ("images", "runtime"),
    ("weights",),
    ("registry",),
    ("visual",),
    ("models", "regions"),
    ("associate", "suites"),
    ("robustness",),
    ("report",),
    ("config",),
    ("api",),
    ("cli", "workdir"),
    ("__main__",),
)
# The adapter modules: reached by name through vlbias.registry, imported by no other module.
ADAPTERS = {f"vlbias.models.{a}" for a in adapters("models")} | {f"vlbias.regions.{a}" for a in adapters("detectors")}
# Imports allowed against the order, each with its reason (none today; a test fails on one left over).
EXCEPTIONS: set = set()


def modules(root=SRC, package="vlbias"):
    """{module name: its file} of every module below ``root``, the folder of ``package``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return out


def imports(root=SRC, package="vlbias"):
    """[(module, line, module it imports)]: every import of one of the package's modules, by any
    module of it, at any depth (a function's too)."""
    known, found = modules(root, package), []
    for name, path in known.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, or one above
                    base = ".".join([*here[:len(here) - node.level + 1], *([base] if base else [])])
                # from a.b import c: the module a.b.c where c is one, else a name of a.b
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            found += [(name, node.lineno, t) for t in dict.fromkeys(targets)
                      if t == package or t.startswith(package + ".")]
    return found


def where(module, line, root=SRC, package="vlbias"):
    path = modules(root, package)[module]
    return f"{path.relative_to(root.parent)}:{line}"


def layer_problems(root=SRC, package="vlbias", layers=LAYERS, adapter_modules=ADAPTERS, exceptions=EXCEPTIONS):
    """One line per import that breaks the layering (naming its file:line), per module of no layer,
    and per exception that names no import (left over)."""
    rank = {folder: i for i, names in enumerate(layers) for folder in names}

    def folder(module):
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    problems = [f"{where(m, 1, root, package)}: {m} is in no layer (add its folder to LAYERS and docs/architecture.md)"
                for m in modules(root, package) if folder(m) not in rank]
    edges = imports(root, package)
    for source, line, target in edges:
        if (source, target) in exceptions or folder(source) not in rank or folder(target) not in rank:
            continue
        at = where(source, line, root, package)
        if target in adapter_modules and target != source:
            problems.append(f"{at}: {source} imports the adapter module {target} (an adapter is reached by its "
                            "registry; what others share lives in a module that is no adapter)")
        elif folder(source) != folder(target) and rank[folder(target)] >= rank[folder(source)]:
            how = "up" if rank[folder(target)] > rank[folder(source)] else "sideways"
            problems.append(f"{at}: {source} imports {target} ({how}: layer "
                            f"{', '.join(layers[rank[folder(source)]])} imports only from the layers below it)")
    present = {(s, t) for s, _, t in edges}
    problems += [f"exception {s} -> {t}: no such import any more; remove it from EXCEPTIONS"
                 for s, t in sorted(exceptions - present)]
    return problems


def cycle(root=SRC, package="vlbias"):
    """A cycle of imports as [file:line of each import along it], or None (depth-first search)."""
    graph = {}
    for source, line, target in imports(root, package):
        graph.setdefault(source, {}).setdefault(target, line)
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(graph.get(m, {})):
            if state.get(n) == "open":
                loop = path[path.index(n):] + [n]
                return [where(a, graph[a][b], root, package) + f" ({a} -> {b})" for a, b in zip(loop, loop[1:])]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_layers_point_down_only():
    problems = layer_problems()
    assert not problems, "\n".join(problems)


def test_the_package_imports_without_a_cycle():
    found = cycle()
    assert found is None, " -> ".join(found)


def test_report_formats_is_the_leaf_its_writers_share():
    """report.formats is the leaf every table writer and the HTML renderer share: it imports no
    other module of the report."""
    edges = {(s, t) for s, _, t in imports()}
    assert not any(s == "vlbias.report.formats" and t.startswith("vlbias.report") for s, t in edges)
    assert all((f"vlbias.report.{m}", "vlbias.report.formats") in edges for m in ("tables", "grounded", "html", "mlm"))


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_names_every_import_that_points_up_or_sideways(tmp_path):
    root = tmp_path / "pkg"
    write(root, {
        "__init__.py": "",
        "errors.py": "",
        "low.py": "import pkg.errors\n",
        "models/__init__.py": "from pkg.errors import InputError\n",
        "models/vl.py": "from pkg import low\n\n\ndef f():\n    from pkg.regions import store\n",   # sideways, in a function
        "models/lxmert.py": "from pkg.models.vl import f\n",
        "models/blip.py": "from . import lxmert\n",                                       # an adapter, relatively
        "regions/__init__.py": "",
        "regions/store.py": "from pkg.models import vl\n",                               # sideways
        "suites/plan.py": "from pkg.models.vl import f\nfrom pkg.top import x\n",         # down; up
        "top.py": "from pkg.suites import plan\n",
        "stray.py": "",                                                                   # in no layer
    })
    layers = (("__init__", "errors"), ("low",), ("models", "regions"), ("suites",), ("top",))
    adapters = {"pkg.models.lxmert", "pkg.models.blip"}
    problems = layer_problems(root, "pkg", layers, adapters, exceptions={("pkg.top", "pkg.low")})
    assert problems == [
        "pkg/stray.py:1: pkg.stray is in no layer (add its folder to LAYERS and docs/architecture.md)",
        "pkg/models/blip.py:1: pkg.models.blip imports the adapter module pkg.models.lxmert (an adapter is reached "
        "by its registry; what others share lives in a module that is no adapter)",
        "pkg/models/vl.py:5: pkg.models.vl imports pkg.regions.store (sideways: layer models, regions imports only "
        "from the layers below it)",
        "pkg/regions/store.py:1: pkg.regions.store imports pkg.models.vl (sideways: layer models, regions imports "
        "only from the layers below it)",
        "pkg/suites/plan.py:2: pkg.suites.plan imports pkg.top (up: layer suites imports only from the layers "
        "below it)",
        "exception pkg.top -> pkg.low: no such import any more; remove it from EXCEPTIONS",
    ]
    # the same tree's first cycle: models.vl -> regions.store -> models.vl, both imports named
    assert cycle(root, "pkg") == ["pkg/models/vl.py:5 (pkg.models.vl -> pkg.regions.store)",
                                  "pkg/regions/store.py:1 (pkg.regions.store -> pkg.models.vl)"]


def test_the_cycle_finder_follows_imports_inside_functions(tmp_path):
    root = tmp_path / "pkg"
    write(root, {"__init__.py": "", "a.py": "from pkg.b import x\n", "b.py": "def f():\n    from pkg import c\n",
                 "c.py": "import pkg.a\n", "d.py": "from pkg.c import y\nimport numpy\n"})
    assert cycle(root, "pkg") == ["pkg/a.py:1 (pkg.a -> pkg.b)", "pkg/b.py:2 (pkg.b -> pkg.c)",
                                  "pkg/c.py:1 (pkg.c -> pkg.a)"]
    write(root, {"c.py": "import numpy\n"})
    assert cycle(root, "pkg") is None
