"""The distribution and the set-up: the sdist and the wheel carry transforms/ and db/ and the
``feinsum`` command; the metadata pins what must be pinned; the README's commands are what
CI runs; ``import feinsum`` stays light; the docs build without a warning."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("transforms", "db")  # repository directories that ship inside the wheel

pytestmark = pytest.mark.skipif(
    not (ROOT / "pyproject.toml").is_file(), reason="needs the source tree, not an installed copy"
)


def _run(*cmd: str | Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _shipped_files(directory: str) -> list[str]:
    """The files of a shipped directory that the wheel must hold: git's tracked and untracked,
    not ignored, files where this is a git checkout; else every file but bytecode."""
    base = ROOT / directory
    if (ROOT / ".git").exists() and shutil.which("git"):
        out = _run("git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard",
                   "--", directory).stdout
        files = [Path(line).relative_to(directory).as_posix() for line in out.splitlines()]
        return sorted(f for f in files if (base / f).is_file())
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the sdist, then the wheel from the sdist (as pip does from an index), without
    network access: the build backend comes from the test extra."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def _wheel_text(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name).decode()


# {{{ the wheel and the sdist


@pytest.mark.parametrize("directory", SHIPPED)
def test_wheel_ships_the_directory(dists: dict[str, Path], directory: str) -> None:
    files = _shipped_files(directory)
    assert "README.md" in files, f"{directory}/ must not be empty"
    with zipfile.ZipFile(dists["wheel"]) as zf:
        names = set(zf.namelist())
        for f in files:
            inside = f"feinsum/_shipped/{directory}/{f}"
            assert inside in names, f"{directory}/{f} is not in the wheel as {inside}"
            assert zf.read(inside) == (ROOT / directory / f).read_bytes(), f"{inside} differs"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_wheel_package_and_entry_point(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as zf:
        names = set(zf.namelist())
    for module in ("__init__.py", "spec/model.py", "errors.py", "devices/opencl.py",
                   "toolbox/parameters.py", "timing/single.py"):
        assert f"feinsum/{module}" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/"))]
    entry_points = configparser.ConfigParser()
    entry_points.read_string(_wheel_text(dists["wheel"], ".dist-info/entry_points.txt"))
    assert entry_points["console_scripts"]["feinsum"] == "feinsum.cli:main"


def _requirements(dists: dict[str, Path], extra: str | None) -> dict[str, Requirement]:
    """The wheel's requirements that ``pip install feinsum[extra]`` installs directly."""
    meta = Parser().parsestr(_wheel_text(dists["wheel"], ".dist-info/METADATA"))
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    env = {"extra": extra or ""}
    return {r.name.lower().replace("_", "-"): r for r in reqs
            if r.marker is None or r.marker.evaluate(env)}


def test_wheel_metadata_pins(dists: dict[str, Path]) -> None:
    meta = Parser().parsestr(_wheel_text(dists["wheel"], ".dist-info/METADATA"))
    assert meta["Requires-Python"] == ">=3.11"
    assert set(meta.get_all("Provides-Extra")) >= {"test", "bench", "postgres"}
    base = _requirements(dists, None)
    assert str(base["loopy"].specifier) == "==2025.2"
    assert str(base["islpy"].specifier) == "<2026"  # loopy 2025.2 breaks with islpy 2026
    assert "pocl" in base["pyopencl"].extras
    bench = _requirements(dists, "bench")
    assert str(bench["torch"].specifier) == "==2.13.0"
    assert {"opt-einsum", "pykeops"} <= set(bench)


def test_test_extra_never_pulls_torch(dists: dict[str, Path]) -> None:
    test = _requirements(dists, "test")
    assert {"pytest", "pytest-timeout", "pytest-xdist"} <= set(test)
    assert not set(test) & {"torch", "pykeops", "opt-einsum", "jax"}


def test_sdist_builds_a_working_checkout(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for f in ("pyproject.toml", "README.md", "tox.ini", "scripts/bootstrap", ".ci/run",
              "transforms/README.md", "db/README.md", "docs/conf.py", "docs/index.rst",
              "tests/test_packaging.py", "src/feinsum/__init__.py"):
        assert f in names, f"{f} is not in the sdist"
    assert not [n for n in names if n.startswith((".venv/", ".git/", "docs/_build/"))]


def test_shipped_directories_are_found_in_an_installed_wheel(
    dists: dict[str, Path], tmp_path: Path
) -> None:
    """Unpacked on its own (no checkout around it), the package finds its shipped files."""
    with zipfile.ZipFile(dists["wheel"]) as zf:
        zf.extractall(tmp_path)
    code = (
        "import pathlib, feinsum; pkg = pathlib.Path(feinsum.__file__).parent; "
        "print(pkg); print(sorted(p.name for p in (pkg / '_shipped').iterdir()))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = _run(sys.executable, "-c", code, env=env, cwd=tmp_path).stdout.splitlines()
    assert Path(out[0]) == tmp_path / "feinsum"
    assert out[1] == str(sorted(SHIPPED))


# }}}


# {{{ the project's promises about set-up


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    first_screen = readme.split("\n---", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", first_screen, re.S)]


def test_readme_gives_two_commands_and_ci_runs_the_second() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    main, tests = commands
    assert main.startswith("scripts/bootstrap && .venv/bin/feinsum tune ")
    assert tests.startswith("scripts/bootstrap test && ")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci, ".ci/run must run exactly the README's test command"


@pytest.mark.parametrize("script", ["scripts/bootstrap", ".ci/run"])
def test_scripts_are_executable_bash(script: str) -> None:
    path = ROOT / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    _run("bash", "-n", path)


def test_bootstrap_help_and_unknown_extra() -> None:
    assert "scripts/bootstrap test" in _run(ROOT / "scripts" / "bootstrap", "--help").stdout
    proc = subprocess.run([ROOT / "scripts" / "bootstrap", "nonsense"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert "unknown extra 'nonsense'" in proc.stderr
    assert "test" in proc.stderr and "bench" in proc.stderr


def test_tox_environments() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    envs = {e.strip() for e in tox["tox"]["env_list"].split(",")}
    assert envs == {"py311", "ruff", "mypy", "docs"}
    assert "-W" in tox["testenv:docs"]["commands"]


def test_import_feinsum_is_light() -> None:
    """``import feinsum`` (and so ``feinsum --help``) must not load the heavy machinery."""
    code = (
        "import sys, feinsum; "
        "print(' '.join(m for m in ('loopy', 'pyopencl', 'sqlalchemy', 'torch', 'matplotlib', "
        "'optuna', 'pynauty') if m in sys.modules))"
    )
    assert _run(sys.executable, "-c", code).stdout.strip() == ""


# }}}


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    """The Sphinx build of docs/ with warnings as errors (what ``tox -e docs`` runs)."""
    pytest.importorskip("sphinx")
    _run(sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", tmp_path / "doctrees", ROOT / "docs", tmp_path / "html", timeout=600)
    assert (tmp_path / "html" / "model.html").is_file()

# vim: foldmethod=marker
