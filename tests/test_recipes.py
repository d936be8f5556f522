"""The recipe format: parameter spaces, constraints, loading, versions, failure containment."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
import warnings

import numpy as np
import pytest

import feinsum
from feinsum.errors import InvalidConfigurationError, RecipeError, RecipeFailure
from feinsum.recipes import (
    Boolean,
    Choice,
    Constraint,
    IntRange,
    ParameterSpace,
    PowersOfTwo,
    Recipe,
    RecipeWarning,
    TupleOf,
    at_most,
    canonical_json,
    get_recipe,
    load_recipes,
    parameter_from_json,
    recipes,
)

# {{{ parameter types

PARAMS = [
    IntRange(1, 7),
    IntRange(0, 12, 4),
    PowersOfTwo(2, 64),
    Choice(["a", "b", 3, None, True]),
    Boolean(),
    TupleOf(PowersOfTwo(1, 4), Choice(["x", "y"])),
    TupleOf.repeat(IntRange(1, 2), 3),
]


@pytest.mark.parametrize("p", PARAMS, ids=repr)
def test_parameter_roundtrip(p):  # type: ignore[no-untyped-def]
    vals = list(p.enumerate())
    assert len(vals) == len(p) == len(set(map(lambda v: json.dumps(v), vals)))
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert p.contains(p.sample(rng))
    for v in vals:
        assert p.contains(v)
        # JSON round trip of values (tuples become lists and come back as tuples)
        assert p.normalize(json.loads(json.dumps(v))) == v
        for w in p.neighbors(v):
            assert p.contains(w) and w != v
    assert parameter_from_json(json.loads(json.dumps(p.to_json()))) == p


def test_parameter_values() -> None:
    assert IntRange(0, 12, 4).values() == (0, 4, 8, 12)
    assert PowersOfTwo(2, 16).values() == (2, 4, 8, 16)
    assert not PowersOfTwo(2, 16).contains(6)
    assert not IntRange(1, 7).contains(True)  # booleans are not integers
    assert not IntRange(1, 7).contains(2.0)
    assert Choice([1, True]).normalize(True) is True
    assert not Choice([1]).contains(True)
    assert not Boolean().contains(1)
    assert TupleOf(IntRange(1, 3), Boolean()).normalize([2, False]) == (2, False)
    assert IntRange(1, 5).neighbors(1) == [2]
    with pytest.raises(ValueError):
        PowersOfTwo(3, 8)
    with pytest.raises(ValueError):
        IntRange(5, 1)
    with pytest.raises(ValueError):
        Choice([[1, 2]])


# }}}


# {{{ spaces and constraints


def _space(max_wg: int = 128) -> ParameterSpace:
    return ParameterSpace(
        {"lx": PowersOfTwo(1, 64), "ly": IntRange(1, 5), "vec": Boolean(),
         "tile": TupleOf.repeat(Choice(["a", "b"]), 2)},
        [at_most("work_group_size", lambda p: p["lx"] * p["ly"], max_wg,
                 "lx*ly <= the device's max_work_group_size"),
         Constraint("vec_needs_wide", lambda p: not p["vec"] or p["lx"] >= 4,
                    "vectorising needs lx >= 4")],
    )


def test_space_validate_and_messages() -> None:
    sp = _space()
    ok = {"lx": 8, "ly": 2, "vec": True, "tile": ["a", "b"]}
    assert sp.validate(ok) == {"lx": 8, "ly": 2, "vec": True, "tile": ("a", "b")}
    assert sp.canonical(ok) == '{"lx":8,"ly":2,"tile":["a","b"],"vec":true}'
    assert ok in sp

    with pytest.raises(InvalidConfigurationError, match=r"work_group_size.*320 > 128"):
        sp.validate({**ok, "lx": 64, "ly": 5})
    with pytest.raises(InvalidConfigurationError, match="vec_needs_wide"):
        sp.validate({**ok, "lx": 2})
    with pytest.raises(InvalidConfigurationError, match="unknown parameter 'zz'"):
        sp.validate({**ok, "zz": 1})
    with pytest.raises(InvalidConfigurationError, match="missing parameter 'ly'"):
        sp.validate({k: v for k, v in ok.items() if k != "ly"})
    with pytest.raises(InvalidConfigurationError, match=r"'lx': 3 is not in powers of two"):
        sp.validate({**ok, "lx": 3})
    with pytest.raises(InvalidConfigurationError, match="not a JSON object"):
        sp.validate([1, 2])  # type: ignore[arg-type]


def test_space_enumerate_sample_neighbors() -> None:
    sp = _space()
    valid = list(sp.enumerate())
    assert valid and all(sp.is_valid(c) for c in valid)
    assert len(valid) < sp.size
    keys = {canonical_json(c) for c in valid}
    assert len(keys) == len(valid)
    picks = sp.sample(0, n=25)
    assert len({canonical_json(c) for c in picks}) == 25
    assert all(sp.is_valid(c) for c in picks)
    assert sp.sample(3) == sp.sample(3)  # seeded
    for c in picks[:5]:
        assert all(sp.is_valid(n) for n in sp.neighbors(c))
    big = ParameterSpace(a=IntRange(0, 10_000), b=IntRange(0, 10_000),
                         constraints=[Constraint("sum", lambda p: p["a"] + p["b"] < 15_000)])
    assert all(big.is_valid(c) for c in big.sample(1, n=10))


def test_space_json() -> None:
    sp = _space()
    d = json.loads(json.dumps(sp.to_json()))
    assert [c["name"] for c in d["constraints"]] == ["work_group_size", "vec_needs_wide"]
    back = ParameterSpace.from_json(d)
    assert back.params == sp.params


def test_constraint_that_raises_is_a_recipe_failure() -> None:
    sp = ParameterSpace(a=IntRange(0, 2), constraints=[Constraint("div", lambda p: 1 / p["a"] > 0)])
    assert sp.is_valid({"a": 1})
    with pytest.raises(RecipeFailure, match="'div' raised ZeroDivisionError") as info:
        sp.validate({"a": 0})
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# }}}


# {{{ recipes: loading, versions, containment

GOOD = '''
import loopy as lp
from feinsum.recipes import Recipe, ParameterSpace, PowersOfTwo, Boolean, at_most

def applies(e, device):
    return None if e.out_indices else "needs an output index"

def space(e, device):
    return ParameterSpace(
        {"wg": PowersOfTwo(1, 16), "fast_math": Boolean(), "denorms_are_zero": Boolean()},
        [at_most("work_group_size", lambda p: p["wg"], min(8, device.max_work_group_size),
                 "wg <= 8")])

def apply(t_unit, params, e, device):
    """Split the output loop over work-items."""
    if params["wg"] == 2:
        raise ZeroDivisionError("boom")
    if params["wg"] == 4:
        return "not a kernel"
    return lp.split_iname(t_unit, "i", params["wg"], inner_tag="l.0", outer_tag="g.0")

RECIPE = Recipe("NAME", applies=applies, space=space,
                default=lambda e, d: {"wg": 8, "fast_math": False, "denorms_are_zero": False},
                apply=apply)
'''


def _write(d, name, text):  # type: ignore[no-untyped-def]
    p = d / f"{name}.py"
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def recipe_dir(tmp_path):  # type: ignore[no-untyped-def]
    _write(tmp_path, "good", GOOD.replace("NAME", "good"))
    _write(tmp_path, "other", GOOD.replace("NAME", "a_other"))
    _write(tmp_path, "broken", "import feinsum_no_such_module\n")
    _write(tmp_path, "syntax", "def f(:\n")
    _write(tmp_path, "norecipe", "X = 1\n")
    _write(tmp_path, "_helper", "raise RuntimeError('never loaded')\n")
    return tmp_path


@pytest.fixture
def spec() -> feinsum.BatchedEinsum:
    return feinsum.einsum("ij,j->i", feinsum.array("A", (10, 4), np.float32),
                          feinsum.array("x", 4, np.float32))


@pytest.fixture
def kernel():  # type: ignore[no-untyped-def]
    import loopy as lp

    return lp.make_kernel("{[i]: 0<=i<10}", "out[i] = 2*i", name="einsum",
                          lang_version=(2018, 2))


def test_loading_reports_broken_files(recipe_dir) -> None:  # type: ignore[no-untyped-def]
    result = load_recipes(recipe_dir)
    assert {"good", "a_other"} <= set(result.recipes)
    msgs = [str(e) for e in result.errors]
    assert any("broken.py" in m and "feinsum_no_such_module" in m for m in msgs)
    assert any("syntax.py" in m and "SyntaxError" in m for m in msgs)
    assert any("norecipe.py" in m and "does not define RECIPE" in m for m in msgs)
    assert not any("_helper" in m for m in msgs)

    with pytest.warns(RecipeWarning) as caught:
        found = recipes(recipe_dir)
    assert sum("broken.py" in str(w.message) for w in caught) == 1
    names = [r.name for r in found]
    assert names == sorted(names) and {"good", "a_other"} <= set(names)
    with pytest.raises(RecipeError, match=r"broken\.py|syntax\.py|norecipe\.py"):
        recipes(recipe_dir, errors="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipes(recipe_dir, errors="ignore")

    r = get_recipe("good", recipe_dir)
    assert r.path == (recipe_dir / "good.py").resolve()
    assert r.description == "Split the output loop over work-items."
    with pytest.raises(RecipeError, match=r"(?s)no recipe named 'nope'.*failed to load"):
        get_recipe("nope", recipe_dir)


def test_recipe_path_env(recipe_dir, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FEINSUM_RECIPE_PATH", str(recipe_dir))
    assert get_recipe("good").name == "good"
    # feinsum.recipes is callable whether it is the function or the module
    import feinsum.recipes as mod

    assert "good" in [r.name for r in mod(errors="ignore")]
    assert "good" in [r.name for r in feinsum.recipes(errors="ignore")]


def test_first_directory_wins(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _write(a, "x", GOOD.replace("NAME", "dup"))
    _write(b, "y", GOOD.replace("NAME", "dup") + "\n# edited\n")
    result = load_recipes([a, b])
    assert result.recipes["dup"].path.parent == a.resolve()
    assert [p.parent for p, _ in result.shadowed] == [b]


def test_version_follows_source(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = _write(tmp_path, "v", GOOD.replace("NAME", "v"))
    v1 = get_recipe("v", tmp_path).version
    assert v1 == get_recipe("v", tmp_path).version and len(v1) == 16
    p.write_text(p.read_text() + "\n# a comment changes the version\n")
    assert get_recipe("v", tmp_path).version != v1


def test_apply_validates_and_contains_failures(recipe_dir, spec, kernel, cl_device) -> None:  # type: ignore[no-untyped-def]
    r = get_recipe("good", recipe_dir)
    dev = feinsum.device_info(cl_device)
    assert r.applies(spec, dev) is None
    assert r.default(spec, dev) == {"wg": 8, "fast_math": False, "denorms_are_zero": False}

    with pytest.raises(InvalidConfigurationError, match=r"recipe 'good'.*work_group_size.*16 > 8"):
        r.apply(kernel, {"wg": 16, "fast_math": False, "denorms_are_zero": False}, spec, dev)
    with pytest.raises(RecipeFailure, match=r"recipe 'good'.*apply\(\).*\"wg\":2.*boom") as info:
        r.apply(kernel, {"wg": 2, "fast_math": False, "denorms_are_zero": False}, spec, dev)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(RecipeFailure, match=r"not a loopy.TranslationUnit"):
        r.apply(kernel, {"wg": 4, "fast_math": False, "denorms_are_zero": False}, spec, dev)

    params = {"wg": 8, "fast_math": True, "denorms_are_zero": True}
    out = r.apply(kernel, params, spec, dev)
    assert r.build_options(params) == ("-cl-denorms-are-zero", "-cl-fast-relaxed-math")
    assert set(out.default_entrypoint.options.build_options) == set(r.build_options(params))


def test_contained_failures_in_other_hooks(spec, cl_device) -> None:  # type: ignore[no-untyped-def]
    def bad(*args):  # type: ignore[no-untyped-def]
        raise KeyError("oops")

    r = Recipe("bad", applies=bad, space=bad, default=bad, apply=bad)
    for call in (lambda: r.applies(spec, cl_device), lambda: r.space(spec, cl_device),
                 lambda: r.default(spec, cl_device)):
        with pytest.raises(RecipeFailure, match=r"recipe 'bad'.*KeyError"):
            call()
    r2 = Recipe("bad_default", applies=lambda e, d: None,
                space=lambda e, d: ParameterSpace(a=IntRange(1, 2)),
                default=lambda e, d: {"a": 3}, apply=bad)
    with pytest.raises(RecipeFailure, match="default is invalid"):
        r2.default(spec, cl_device)
    assert len(r2.version) == 16  # defined here, versioned by this file
    with pytest.raises(RecipeError, match="identifier"):
        Recipe("not a name", applies=bad, space=bad, default=bad, apply=bad)


def test_recipes_for(recipe_dir, spec, cl_device) -> None:  # type: ignore[no-untyped-def]
    out = feinsum.recipes_for(spec, cl_device, recipe_dir, errors="ignore")
    by = {a.recipe.name: a for a in out}
    assert by["good"].applies and by["good"].reason is None
    scalar = feinsum.einsum("j,j->", feinsum.array("x", 4), feinsum.array("y", 4))
    by = {a.recipe.name: a for a in feinsum.recipes_for(scalar, cl_device, recipe_dir,
                                                         errors="ignore")}
    assert by["good"].reason == "needs an output index"


# }}}

# vim: foldmethod=marker


def test_version_covers_the_modules_a_recipe_generates_code_with() -> None:
    from pathlib import Path

    from feinsum.recipes.recipe import code_dependencies

    root = Path(__file__).resolve().parent.parent / "transforms"
    deps = code_dependencies(root / "tiled_1d.py")
    assert "feinsum.reductions.templates" in deps  # imported by the recipe
    assert "feinsum.lowering.kernel" in deps  # imported by the kernel templates
    assert "feinsum.toolbox.core" in deps
    assert not any(n.startswith(("feinsum.database", "feinsum.recipes")) for n in deps)
    assert "feinsum.toolbox.dense" in code_dependencies(root / "dg_operator.py")
    assert {"feinsum.toolbox.transposed", "feinsum.toolbox.dense"} <= set(
        code_dependencies(root / "dg_transposed.py"))


def test_what_a_file_imports_is_kept_across_processes(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A new process reads what each file imports from the cache directory instead of
    parsing it again (the same versions); an edited file is parsed again."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "pkg").mkdir()
    shutil.copy(root / "transforms" / "tiled_1d.py", tmp_path / "pkg" / "tiled_1d.py")
    script = (
        "import ast, sys\n"
        "from feinsum.recipes import get_recipe\n"
        "parse = ast.parse\n"
        "n = []\n"
        "ast.parse = lambda *a, **k: n.append(1) or parse(*a, **k)\n"
        f"print(get_recipe('tiled_1d', {str(tmp_path / 'pkg')!r}).version, len(n))\n")

    def run() -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONPATH": str(root / "src")})
        version, parsed = out.stdout.split()
        return version, int(parsed)

    first, second = run(), run()
    assert first[1] > 0 and second == (first[0], 0)
    assert (tmp_path / "cache" / "recipe-imports-v1.json").is_file()
    path = tmp_path / "pkg" / "tiled_1d.py"
    path.write_text(path.read_text() + "\n# edited\n")
    third = run()
    assert third[1] == 1 and third[0] != first[0]


def test_apply_and_default_refuse_an_einsum_the_recipe_does_not_claim() -> None:
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.spec.canonical import canonicalize

    e = canonicalize(feinsum.einsum("ij,ij->ij", feinsum.array("A", (8, 8)),
                                    feinsum.array("B", (8, 8))))
    recipe = feinsum.get_recipe("contraction")
    reason = recipe.applies(e)
    assert reason
    with pytest.raises(RecipeError, match=r"'contraction' does not apply.*recipes_for") as info:
        recipe.apply(generate_loopy(e), {}, e)
    assert reason in str(info.value)
    assert not isinstance(info.value, RecipeFailure)
    with pytest.raises(RecipeError, match="does not apply"):
        recipe.default(e)


def test_a_default_that_takes_three_arguments_reads_the_lengths(cl_device) -> None:  # type: ignore[no-untyped-def]
    from feinsum.spec.canonical import canonicalize

    e = canonicalize(feinsum.einsum("ij,j->i", feinsum.array("A", ("N", 8)),
                                    feinsum.array("x", 8)))
    space = ParameterSpace(big=Boolean())
    seen: list[dict[str, int]] = []

    def by_length(e, device, lengths):  # type: ignore[no-untyped-def]
        seen.append(dict(lengths))
        return {"big": lengths.get("n0", 0) > 1000}

    r = Recipe("by_length", applies=lambda e, d: None, space=lambda e, d: space,
               default=by_length, apply=lambda t, p, e, d: t)
    assert r.default(e, cl_device, {"n0": 5000}) == {"big": True}
    assert r.default(e, cl_device) == {"big": False}  # lengths unknown: an empty mapping
    assert seen == [{"n0": 5000}, {}]
    # a default of two arguments is called as before, lengths or not
    r2 = Recipe("two_args", applies=lambda e, d: None, space=lambda e, d: space,
                default=lambda e, d: {"big": True}, apply=lambda t, p, e, d: t)
    assert r2.default(e, cl_device, {"n0": 5}) == {"big": True}
