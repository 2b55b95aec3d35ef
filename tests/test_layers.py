"""The layering contract (docs/architecture.md, pyproject.toml [tool.importlinter]): checked
by import-linter, and again by a graph of our own over **every** import statement (at
module level, inside functions, under TYPE_CHECKING), in which ``from pkg import name``
also imports ``pkg/__init__.py``. Plus the size limits of modules and functions."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "hybridsched"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def modules(root: Path = PKG) -> dict[str, Path]:
    base = root.parent
    out = {}
    for p in root.rglob("*.py"):
        name = ".".join(p.relative_to(base).with_suffix("").parts)
        out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _resolve(cur: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = cur.split(".") if is_pkg else cur.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package modules it imports, over every import statement."""
    top = next(iter(mods)).split(".")[0]
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        is_pkg = p.name == "__init__.py"
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(m, is_pkg, node.level, node.module)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != m and t.split(".")[0] == top:
                    edges[m].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layers(pyproject: Path = ROOT / "pyproject.toml") -> list[list[str]]:
    contract = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"][0]
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def violations(edges: dict[str, set[str]], order: list[list[str]]) -> list[str]:
    """Imports of a higher layer, or of an independent sibling of the same layer."""
    def where(m: str) -> tuple[int, str] | None:
        for i, group in enumerate(order):
            for pkg in group:
                if m == pkg or m.startswith(pkg + "."):
                    return i, pkg
        return None

    bad = []
    for m, targets in edges.items():
        a = where(m)
        for t in targets:
            b = where(t)
            if a is None or b is None or a[1] == b[1]:
                continue
            if b[0] <= a[0]:
                bad.append(f"{m} imports {t}")
    return sorted(bad)


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph(modules())) == []


def test_no_module_imports_a_layer_above_its_own():
    mods = modules()
    order = layers()
    placed = {m for m in mods if any(m == p or m.startswith(p + ".") for g in order for p in g)}
    assert placed == set(mods) - {"hybridsched"}  # every module has a layer
    edges = import_graph(mods)
    assert violations(edges, order) == []
    # the package's own __init__ is the public face (lazy API): nothing inside imports it
    assert sorted(m for m, targets in edges.items() if "hybridsched" in targets) == []


def test_the_checks_see_an_import_inside_a_function_and_a_package_init(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("from .leaf import x\n")  # re-exports its leaf
    (pkg / "low" / "leaf.py").write_text("def f():\n    from . import other\nx = 1\n")
    (pkg / "low" / "other.py").write_text("")
    (pkg / "high.py").write_text("def g():\n    from .low import leaf\n")
    edges = import_graph(modules(pkg))
    assert cycles(edges) == [["toy.low", "toy.low.leaf"]]  # leaf -> low/__init__ -> leaf
    assert violations(edges, [["toy.high"], ["toy.low"]]) == []
    assert violations(edges, [["toy.low"], ["toy.high"]]) == ["toy.high imports toy.low",
                                                              "toy.high imports toy.low.leaf"]


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(cwd / "src"), str(cwd), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(cmd + ["--config", str(cwd / "pyproject.toml"), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_import_linter_keeps_the_contract():
    pytest.importorskip("importlinter")
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_import_linter_breaks_on_an_upward_import(tmp_path):
    pytest.importorskip("importlinter")
    pkg = tmp_path / "src" / "layered"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("")
    (pkg / "bottom.py").write_text("def f():\n    from . import top\n")
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.importlinter]
        root_package = "layered"
        [[tool.importlinter.contracts]]
        name = "toy"
        type = "layers"
        layers = ["layered.top", "layered.bottom"]
    """))
    proc = _lint(tmp_path)
    assert proc.returncode != 0 and "1 broken" in proc.stdout


def test_no_module_over_500_lines_and_no_function_over_80():
    big, long = [], []
    for name, p in modules().items():
        text = p.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert big == [] and long == []
