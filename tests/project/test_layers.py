"""The layering contract (docs/architecture.md, pyproject.toml [tool.importlinter]): checked
by import-linter, and again by a graph of our own over **every** import statement (at
module level, inside functions, under TYPE_CHECKING), in which ``from pkg import name``
also imports ``pkg/__init__.py``. Plus the size limits of modules and functions."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from repo import ROOT

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



_C_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def c_function_lengths(source: str) -> dict[str, int]:
    """The lines of each function body at file level in C `source` (comments, strings and
    characters blanked first, newlines kept): a top-level brace block after a ``)``."""
    lines = _C_NOISE.sub(lambda m: "\n" * m.group().count("\n"), source).splitlines()
    out, depth, start, name = {}, 0, 0, None
    for lineno, line in enumerate(lines, 1):
        for i, ch in enumerate(line):
            if ch == "{":
                if depth == 0:  # the declaration since the last statement or directive
                    head = " ".join(x for x in lines[max(0, lineno - 12):lineno - 1]
                                    if not x.lstrip().startswith("#")) + " " + line[:i]
                    head = re.split(r"[;}]", head)[-1]
                    found = re.search(r"(\w+)\s*\(", head)
                    name = found.group(1) if found and head.rstrip().endswith(")") else None
                    start = lineno
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and name:
                    out[name] = lineno - start + 1
    return out


def test_the_c_check_measures_a_function():
    src = "static int f(int x)\n{\n    /* { */\n    return x ? '}' : 1;\n}\nstruct s { int a; };\n"
    assert c_function_lengths(src) == {"f": 4}


def test_no_shim_source_over_500_lines_and_no_function_over_80():
    big, long = [], []
    for p in sorted((PKG / "coop" / "shim").glob("*.[ch]")):
        text = p.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            big.append(f"{p.name}: {len(text.splitlines())} lines")
        long += [f"{p.name}:{f}: {n} lines" for f, n in c_function_lengths(text).items()
                 if n > MAX_FUNCTION_LINES]
    assert big == [] and long == []

# --- capabilities are asked, not tested (core/capabilities.py) ---------------------------

# Where an entry's kinds and scheduler names may be compared: the registry itself.
KIND_OWNERS = {"hybridsched.core.registry", "hybridsched.core.capabilities"}
_FIELDS = {"family", "backend", "topology", "forker"}
_FIELD_NAMES = _FIELDS | {"fam"}
_KINDS = {"Family", "Backend", "Topology", "Forker"}
_PREFIX_CALLS = {"startswith", "endswith", "partition", "removeprefix", "split"}


def _is_field(node: ast.AST) -> bool:
    """An entry's (or a stored run's) family, backend, topology or forker."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str"
            and len(node.args) == 1):
        return _is_field(node.args[0])
    if isinstance(node, ast.Attribute):
        return node.attr in _FIELDS
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value in _FIELDS
    return isinstance(node, ast.Name) and node.id in _FIELD_NAMES


def _is_scheduler(node: ast.AST) -> bool:
    """A scheduler's name: a ``scheduler`` attribute or column, or a variable so named."""
    if isinstance(node, ast.Attribute):
        return node.attr == "scheduler"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "scheduler"
    return isinstance(node, ast.Name) and node.id == "scheduler"


def _is_literal(node: ast.AST) -> bool:
    """Text, a collection of texts, or a member of one of the kinds' enums."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_literal(e) for e in node.elts)
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in _KINDS)


def capability_tests(source: str, names: set[str]) -> list[int]:
    """Lines that decide a capability by testing a kind or a scheduler name: a comparison
    of family/backend/topology/forker with a literal, of anything with a scheduler's name,
    or a prefix test of a text with a scheduler name's beginning (``pipe-``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            ops = [node.left, *node.comparators]
            if (any(_is_field(o) for o in ops) and any(_is_literal(o) for o in ops)) or (
                    any(_is_scheduler(o) for o in ops)
                    and any(isinstance(o, ast.Constant) and o.value in names for o in ops)):
                out.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _PREFIX_CALLS and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.startswith("pipe-")):
            out.append(node.lineno)
    return out


def _scheduler_names() -> set[str]:
    sys.path.insert(0, str(PKG.parent))
    try:
        from hybridsched.core import registry
    finally:
        sys.path.pop(0)
    return set(registry.ALL_NAMES)


def test_capabilities_are_asked_of_the_registry_not_tested_by_name():
    names = _scheduler_names()
    found = [f"{name}:{line}" for name, p in sorted(modules().items()) if name not in KIND_OWNERS
             for line in capability_tests(p.read_text(), names)]
    assert found == [], "ask core.capabilities (SchedulerInfo's properties, decide) instead"


@pytest.mark.parametrize("line", [
    'if info.backend == "threads": pass',
    'x = info.topology != Topology.FEEDBACK',
    'x = r["family"] in ("process", "pipe")',
    'x = str(r["family"]) in ("process", "pipe")',
    'x = fam == "thread"',
    'x = name.startswith("pipe-MtoM")',
    'x = cfg.scheduler == "guided"',
])
def test_the_capability_check_sees_a_test_by_name(line):
    assert capability_tests(line, {"guided", "pipe-MtoM"}) == [1]
    assert capability_tests("x = [r for r in rows if r.family == f]", {"guided"}) == []
    assert capability_tests('x = split == "guided"', {"guided"}) == []
