"""One installed package, ``memoryd``: the wheel's top level, and no capture by a stray
``services/`` or ``shared/`` package in the directory a user runs ``memoryd`` from."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import foreign_packages_dir

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_the_wheel_holds_only_memoryd_at_its_top_level(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("memoryd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"memoryd"}
    assert "memoryd/services/cli/__main__.py" in names
    assert "memoryd/services/pipeline/indexer.py" in names
    assert "memoryd/shared/data/minilm-tokenizer.json" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "memoryd = memoryd.services.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    return foreign_packages_dir(tmp_path / "project")


@pytest.mark.parametrize("argv", [[str(BIN / "memoryd"), "--help"],
                                  [sys.executable, "-m", "memoryd.services.cli", "--help"],
                                  [str(BIN / "memoryd"), "doctor", "--json"]])
def test_the_cli_runs_from_a_folder_with_its_own_services_and_shared(hostile_dir: Path, argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(argv, cwd=hostile_dir, env=env, capture_output=True, text=True, timeout=120)
    assert "the user's own" not in out.stderr and "wrong cli" not in out.stderr, out.stderr
    assert out.stdout.strip(), out.stderr
    if argv[-1] == "--help":
        assert out.returncode == 0, out.stderr
        assert "memoryd" in out.stdout


def test_memoryd_version_is_the_package_version_and_changes_describes_it() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version == "0.2.0"
    out = subprocess.run([str(BIN / "memoryd"), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"memoryd {version}"
    assert f"\n## {version}" in (ROOT / "CHANGES.md").read_text()
