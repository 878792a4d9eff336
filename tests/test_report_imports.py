"""vlbias.report's modules import each other without a cycle: formats is the leaf every table writer
and the HTML renderer share, so none imports one that imports it back (at any depth, imports inside
functions included)."""

import ast
from pathlib import Path

import vlbias.report

PACKAGE = "vlbias.report"


def import_graph(folder=Path(vlbias.report.__file__).parent):
    """{module: set of the package's modules it imports}, read from the source with ast."""
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    graph = {}
    for name in modules:
        targets = set()
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                # from vlbias.report import html: a module of the package by its name
                targets |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        graph[name] = {t.removeprefix(f"{PACKAGE}.") for t in targets if t.startswith(f"{PACKAGE}.")} & modules
    return graph


def cycle(graph):
    """A cycle [m0, m1, ..., m0] of the graph, or None (depth-first search)."""
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_report_package_imports_without_a_cycle():
    graph = import_graph()
    assert cycle(graph) is None, " → ".join(cycle(graph))
    assert graph["formats"] == set()  # the leaf
    assert all("formats" in graph[m] for m in ("tables", "grounded", "html", "mlm"))


def test_the_cycle_finder_finds_one_through_a_function_level_import(tmp_path):
    (tmp_path / "a.py").write_text("from vlbias.report.b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from vlbias.report import c\n")
    (tmp_path / "c.py").write_text("import vlbias.report.a\n")
    (tmp_path / "d.py").write_text("from vlbias.report.formats import text\nimport pandas\n")
    graph = import_graph(tmp_path)
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert cycle(graph) == ["a", "b", "c", "a"]
    assert cycle({**graph, "c": set()}) is None
