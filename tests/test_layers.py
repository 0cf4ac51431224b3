"""The layout is the architecture: layers import one way, and stages never import each other.

- ``shared/`` imports nothing from ``services/``, and names no service by string either;
- inside ``shared/`` the subpackages are layered (:data:`SHARED_LAYERS`): a module imports the
  root contracts, its own package and the packages below it, never one above;
- no memoryd module imports itself back through others (no cycles), counting imports made
  inside functions, which hide a cycle from the interpreter but not from a reader;
- importing the query engine loads none of the rebuild machinery (an ``asOf`` search loads it);
- each pipeline stage (``services/pipeline/<stage>.py``) imports only ``shared/``;
- the query and session services import only ``shared/`` and their own package;
- only the CLI (the edge) may import every service;
- nothing imports the bare top-level names ``services`` or ``shared`` (the installed
  package is ``memoryd``), and only ``shared/config/environment.py`` reads the environment.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "services"
SHARED = ROOT / "shared"
#: The one module that reads os.environ (the settings loader and the CLI's fast path both ask it).
ENVIRONMENT_READERS = {SHARED / "config" / "environment.py"}
#: shared/'s subpackages, lowest first; the root modules (events, exceptions, defaults, ...) sit below them all.
SHARED_LAYERS = ["config", "embed", "index", "log", "runtime", "rebuild"]


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, as absolute dotted names (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}: relative import; write memoryd.… in full")
            base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def test_shared_imports_nothing_from_services() -> None:
    bad = {str(p.relative_to(ROOT)): sorted(i for i in imports(p) if i.startswith("memoryd.services"))
           for p in modules(SHARED)}
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.parametrize("stage", sorted(p.stem for p in (SERVICES / "pipeline").glob("*.py") if p.stem != "__init__"))
def test_a_pipeline_stage_imports_no_other_stage(stage: str) -> None:
    path = SERVICES / "pipeline" / f"{stage}.py"
    assert sorted(i for i in imports(path) if i.startswith("memoryd.services")) == []


@pytest.mark.parametrize("service", ["query", "session"])
def test_a_service_imports_only_shared_and_itself(service: str) -> None:
    own = f"memoryd.services.{service}"
    bad = {str(p.relative_to(ROOT)): sorted(i for i in imports(p)
                                            if i.startswith("memoryd.services") and not i.startswith(own))
           for p in modules(SERVICES / service)}
    assert {k: v for k, v in bad.items() if v} == {}


def test_nothing_imports_the_bare_top_level_names() -> None:
    roots = [SERVICES, SHARED, ROOT / "tests", ROOT / "bench"]
    bad = {str(p.relative_to(ROOT)): sorted(i for i in imports(p) if i.split(".")[0] in ("services", "shared"))
           for root in roots for p in modules(root)}
    assert {k: v for k, v in bad.items() if v} == {}


def test_only_configuration_loading_reads_the_environment() -> None:
    readers = set()
    for path in modules(SERVICES) + modules(SHARED):
        text = path.read_text(encoding="utf-8")
        if "os.environ" in text or "os.getenv" in text or "getenv(" in text:
            readers.add(path)
    assert readers <= ENVIRONMENT_READERS, sorted(str(p.relative_to(ROOT)) for p in readers - ENVIRONMENT_READERS)


def test_the_layer_check_sees_a_violation(tmp_path: Path) -> None:
    """The walker is not blind: a stage importing another stage is found."""
    bad = tmp_path / "chunker.py"
    bad.write_text("from memoryd.services.pipeline import embedder\nimport memoryd.services.query.engine\n")
    assert {"memoryd.services.pipeline.embedder", "memoryd.services.query.engine"} <= imports(bad)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["memoryd", *parts])


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module → the memoryd modules it imports (``from a import b`` counts as ``a.b`` when that is a module)."""
    names = {module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for target in imports(path):
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def product_modules() -> list[Path]:
    return modules(SERVICES) + modules(SHARED)


def test_no_module_imports_itself_back() -> None:
    assert cycles(import_graph(product_modules())) == []


def test_the_cycle_check_sees_a_cycle_closed_inside_a_function(tmp_path: Path) -> None:
    graph = {"memoryd.shared.a": {"memoryd.shared.b"}, "memoryd.shared.b": {"memoryd.shared.c"},
             "memoryd.shared.c": {"memoryd.shared.a"}, "memoryd.shared.d": {"memoryd.shared.a"}}
    assert cycles(graph) == [["memoryd.shared.a", "memoryd.shared.b", "memoryd.shared.c"]]
    (tmp_path / "shared").mkdir()
    lazy = tmp_path / "shared" / "a.py"
    lazy.write_text("def f():\n    from memoryd.shared.b import g\n")
    assert "memoryd.shared.b.g" in imports(lazy)


def layer_of(module: str) -> int:
    """-1 for the root contracts of shared/, else the rank of its subpackage in SHARED_LAYERS."""
    parts = module.split(".")
    return SHARED_LAYERS.index(parts[2]) if len(parts) > 3 and parts[2] in SHARED_LAYERS else -1


def test_shared_packages_import_only_their_own_and_lower_layers() -> None:
    graph = import_graph(modules(SHARED))
    upward = {m: sorted(t for t in targets if t.startswith("memoryd.shared.") and layer_of(t) > layer_of(m))
              for m, targets in graph.items()}
    assert {m: t for m, t in upward.items() if t} == {}


def test_the_root_contracts_import_nothing_of_memoryd() -> None:
    roots = [p for p in SHARED.glob("*.py") if p.stem != "__init__"]
    assert {p.stem for p in roots} == {"defaults", "events", "exceptions", "redact", "secrets"}
    bad = {p.stem: sorted(i for i in imports(p) if i.startswith("memoryd")) for p in roots}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_layer_check_sees_an_upward_import() -> None:
    assert layer_of("memoryd.shared.index.store") < layer_of("memoryd.shared.rebuild.replay")
    assert layer_of("memoryd.shared.events") == -1


def code_strings(path: Path) -> list[str]:
    """The string constants of ``path`` that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_shared_names_no_service_by_string() -> None:
    """Services register their jobs with the bus; shared/ never names one (an upward import no check sees)."""
    named = {str(p.relative_to(ROOT)): [s for s in code_strings(p) if "memoryd.services" in s] for p in modules(SHARED)}
    assert {k: v for k, v in named.items() if v} == {}


def test_importing_the_query_engine_loads_no_rebuild_machinery() -> None:
    out = subprocess.run([sys.executable, "-c", "import sys, memoryd.services.query.engine; "
                          "print('\\n'.join(m for m in sys.modules if m.startswith('memoryd')))"],
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert [m for m in out if m.startswith("memoryd.shared.rebuild.")] == []
