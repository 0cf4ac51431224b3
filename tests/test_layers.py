"""The layout is the architecture: layers import one way, and stages never import each other.

- ``shared/`` imports nothing from ``services/``;
- each pipeline stage (``services/pipeline/<stage>.py``) imports only ``shared/``;
- the query and session services import only ``shared/`` and their own package;
- only the CLI (the edge) may import every service;
- nothing imports the bare top-level names ``services`` or ``shared`` (the installed
  package is ``memoryd``), and only configuration loading reads the environment.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "services"
SHARED = ROOT / "shared"
#: The only modules that may read os.environ: the settings loader, `up` handing it to children,
#: and locate (the state dir and config file found before settings load, for the CLI's fast path).
ENVIRONMENT_READERS = {SHARED / "config.py", SERVICES / "cli" / "up.py", SHARED / "locate.py"}


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
