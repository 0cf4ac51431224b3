"""Every default in one place: each settings field takes its default from ``memoryd.shared.defaults``,
and each constant there says why it has its value."""

from __future__ import annotations

import ast
from pathlib import Path

from memoryd.shared import defaults as d

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ROOT / "shared" / "config" / "settings.py"
DEFAULTS = ROOT / "shared" / "defaults.py"


def _is_constant(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "d"


def _settings_classes(tree: ast.Module) -> set[str]:
    return {c.name for c in tree.body if isinstance(c, ast.ClassDef)}


def field_default_problems(source: str) -> list[str]:
    """The settings fields whose default is a literal written in the model rather than a name from defaults.

    Allowed: ``d.NAME``, ``Field(d.NAME, ...)``, no default, ``None`` (unset), ``[]`` (no items), another
    settings model (whose own fields are checked), ``default_factory`` building from ``d.NAME``.
    """
    tree = ast.parse(source)
    models = _settings_classes(tree)
    problems = []
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        for stmt in cls.body:
            if not isinstance(stmt, ast.AnnAssign) or stmt.value is None or not isinstance(stmt.target, ast.Name):
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Field":
                factory = next((k.value for k in value.keywords if k.arg == "default_factory"), None)
                if factory is not None:
                    ok = any(_is_constant(n) for n in ast.walk(factory)) or isinstance(factory, ast.Name)
                elif value.args:
                    first = value.args[0]
                    ok = _is_constant(first) or (isinstance(first, ast.Constant) and first.value in (None, ...))
                else:
                    ok = True  # required: no default
            else:
                ok = (_is_constant(value) or (isinstance(value, ast.Constant) and value.value is None)
                      or (isinstance(value, ast.List) and not value.elts)
                      or (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in models
                          and not value.args and not value.keywords))
            if not ok:
                problems.append(f"{cls.name}.{stmt.target.id}: {ast.unparse(value)}")
    return problems


def test_every_settings_field_takes_its_default_from_defaults() -> None:
    assert field_default_problems(SETTINGS.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_literal_default() -> None:
    source = ("class B(_Model):\n    v: int = d.V\n"
              "class A(_Model):\n    x: int = 4\n    y: int = Field(5, ge=0)\n"
              "    z: int = Field(d.Z)\n    w: B = B()\n")
    assert field_default_problems(source) == ["A.x: 4", "A.y: Field(5, ge=0)"]


def test_every_name_the_settings_use_exists_in_defaults() -> None:
    used = {n.attr for n in ast.walk(ast.parse(SETTINGS.read_text(encoding="utf-8"))) if _is_constant(n)}
    assert sorted(name for name in used if not hasattr(d, name)) == []


def test_every_default_says_why() -> None:
    """Each constant is under a ``#:`` comment (one comment may cover a group written together)."""
    lines = DEFAULTS.read_text(encoding="utf-8").splitlines()
    unexplained = []
    for number, line in enumerate(lines):
        if not line or line[0] in " #" or "=" not in line or line.startswith(("from ", "import ")):
            continue
        above = number - 1
        while above >= 0 and lines[above] and (lines[above][0].isupper() or lines[above].startswith((" ", "]", "}"))):
            above -= 1  # the rest of a group, or a value written over several lines
        if above < 0 or not lines[above].startswith("#:"):
            unexplained.append(line.split("=")[0].strip())
    assert unexplained == []
