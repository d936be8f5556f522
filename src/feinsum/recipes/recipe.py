"""The :class:`Recipe` object a recipe file defines as ``RECIPE``.

The callables a recipe author passes are wrapped here so that callers get the
contract's guarantees: configurations are validated before any code generation
(:class:`~feinsum.InvalidConfigurationError` naming the constraint), and anything
a recipe raises is reported as :class:`~feinsum.RecipeFailure` naming the recipe
and the configuration, with the original error chained.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from feinsum.errors import InvalidConfigurationError, RecipeError, RecipeFailure
from feinsum.toolbox.parameters import Config, ParameterSpace, canonical_json

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.devices.opencl import DeviceInfo
    from feinsum.spec.model import BatchedEinsum

#: Boolean parameters with these names become OpenCL build options by default.
BUILD_OPTION_FLAGS: dict[str, str] = {
    "denorms_are_zero": "-cl-denorms-are-zero",
    "fast_math": "-cl-fast-relaxed-math",
    "mad_enable": "-cl-mad-enable",
    "no_signed_zeros": "-cl-no-signed-zeros",
    "finite_math_only": "-cl-finite-math-only",
    "unsafe_math": "-cl-unsafe-math-optimizations",
}


def standard_build_options(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The OpenCL build options of the true :data:`BUILD_OPTION_FLAGS` parameters."""
    return tuple(flag for name, flag in BUILD_OPTION_FLAGS.items() if params.get(name) is True)


def as_device_info(device: Any) -> DeviceInfo:
    """A :class:`~feinsum.devices.info.DeviceInfo` from a ``DeviceInfo``, a ``pyopencl.Device``,
    a device string or ``None`` (the default device)."""
    from feinsum.devices.opencl import DeviceInfo, device_info, get_device

    if isinstance(device, DeviceInfo):
        return device
    return device_info(get_device(device))


def _source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def toolbox_source_hash() -> str:
    """sha256 of ``feinsum/toolbox/core.py``: part of every recipe's version."""
    import feinsum.toolbox.core

    return _source_hash(Path(feinsum.toolbox.core.__file__))


#: feinsum modules that cannot change the code a recipe generates: not part of its version.
_NOT_CODEGEN = ("feinsum.recipes", "feinsum.errors", "feinsum.database", "feinsum.cli",
                "feinsum.devices", "feinsum.hook", "feinsum.tuning")


def _feinsum_imports(path: Path) -> set[str]:
    """feinsum modules a Python file imports anywhere (read with ast, never executed;
    remembered per file, size and time: every recipe imports the same toolbox)."""
    try:
        st = path.stat()
    except OSError:
        return set()
    return set(_imports_of(path, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=1024)
def _imports_of(path: Path, size: int, mtime_ns: int) -> frozenset[str]:
    from feinsum.recipes import import_scan

    names = import_scan.known(path, size, mtime_ns)
    if names is None:
        names = _parse_imports(path)
        if names is not None:
            import_scan.remember(path, size, mtime_ns, names)
    return frozenset(n for n in names or () if not n.startswith(_NOT_CODEGEN))


def _parse_imports(path: Path) -> list[str] | None:
    """The feinsum modules *path* imports (None: it cannot be read or parsed)."""
    import ast

    names: set[str] = set()
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("feinsum."))
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and (node.module == "feinsum" or node.module.startswith("feinsum."))):
            # from feinsum.toolbox import dense as td: the submodule (where it is one)
            names.update(f"{node.module}.{a.name}" for a in node.names)
            if node.module != "feinsum":
                names.add(node.module)
    return sorted(names)


def code_dependencies(path: Path) -> dict[str, Path]:
    """The feinsum modules whose source can change what the recipe in *path* generates:
    those it imports, transitively (the toolboxes, kernel templates, the reference
    lowering), without the database, CLI, device and recipe-format modules. What each
    file imports is read once per version of the file (:mod:`.import_scan`)."""
    import importlib.util

    from feinsum.recipes import import_scan

    found: dict[str, Path] = {}
    seen: set[str] = set()  # names looked up, modules or not (`from m import function`)
    todo = sorted(_feinsum_imports(path) | {"feinsum.toolbox.core"})
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue  # `from feinsum import array` names a function, not a module
        found[name] = Path(spec.origin)
        todo.extend(sorted(_feinsum_imports(found[name]) - seen))
    import_scan.flush()
    return dict(sorted(found.items()))


def _takes_third_argument(fn: Callable[..., Any]) -> bool:
    """Whether *fn* can be called with three positional arguments (a recipe's default that
    reads the lengths) rather than only two."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind(None, None, None)
    except TypeError:
        return False
    return True


def _fmt(params: Mapping[str, Any]) -> str:
    try:
        return canonical_json(params)
    except (TypeError, ValueError):
        return repr(dict(params))


class Recipe:
    """A parameterised loopy transformation for a family of batched einsums.

    :arg name: unique name (the database keys timings by name and :attr:`version`).
    :arg applies: ``applies(e, device) -> str | None``: ``None`` if the recipe applies to
        the canonical spec *e* on *device* (a :class:`~feinsum.devices.info.DeviceInfo`), else the
        reason it does not.
    :arg space: ``space(e, device) -> ParameterSpace`` with the constraints.
    :arg default: ``default(e, device) -> dict``: a heuristic configuration (must be valid);
        a default that takes a third argument, ``default(e, device, lengths)``, also gets
        the values of *e*'s length symbols where the caller knows them (``{"n0": 1024}``;
        a mapping without some or all of them otherwise).
    :arg apply: ``apply(t_unit, params, e, device) -> loopy.TranslationUnit``; *t_unit* is
        ``generate_loopy(e)``, *params* a validated configuration.
    :arg build_options: ``build_options(params) -> tuple[str, ...]`` OpenCL build options;
        default: :func:`standard_build_options` (Boolean parameters such as
        ``denorms_are_zero`` and ``fast_math``).
    :arg prepare: optional ``prepare(e, arrays, params) -> dict`` of extra kernel arguments
        computed on the host (launch tables of block-sparse recipes); *arrays* maps the
        spec's array names to the user's arrays.
    :arg description: one paragraph for ``feinsum recipes``.
    :arg upgrade: optional ``upgrade(params) -> dict``: a configuration of an earlier
        version of the recipe (recorded before a parameter was added) in today's
        parameters, applied before every check; written so that the upgraded
        configuration generates the code the old one did, which keeps the records of
        older versions through revalidation.
    """

    def __init__(
        self,
        name: str,
        *,
        applies: Callable[[BatchedEinsum, DeviceInfo], str | None],
        space: Callable[[BatchedEinsum, DeviceInfo], ParameterSpace],
        default: Callable[..., Config],
        apply: Callable[[lp.TranslationUnit, Config, BatchedEinsum, DeviceInfo],
                        lp.TranslationUnit],
        build_options: Callable[[Config], tuple[str, ...]] | None = None,
        prepare: Callable[[BatchedEinsum, Mapping[str, Any], Config], dict[str, Any]]
        | None = None,
        description: str = "",
        upgrade: Callable[[Config], Config] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise RecipeError(f"a recipe name must be an identifier, got {name!r}")
        for what, fn in (("applies", applies), ("space", space), ("default", default),
                         ("apply", apply)):
            if not callable(fn):
                raise RecipeError(f"recipe {name!r}: {what} must be callable, got {fn!r}")
        self.name = name
        self.description = description or (inspect.getdoc(apply) or "").split("\n\n")[0]
        self._applies = applies
        self._space = space
        self._default = default
        self._default_takes_lengths = _takes_third_argument(default)
        self._apply = apply
        self._build_options = build_options or standard_build_options
        self._prepare = prepare
        self._upgrade = upgrade
        #: the file the recipe was loaded from (set by the loader)
        self.path: Path | None = None
        self._version: str | None = None

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return f"<Recipe {self.name} {self.version}{where}>"

    # {{{ identity

    @property
    def source_path(self) -> Path | None:
        """The recipe's source file: where it was loaded from, else where *apply* is defined."""
        if self.path is not None:
            return self.path
        try:
            src = inspect.getsourcefile(self._apply)
        except TypeError:
            return None
        return Path(src) if src else None

    @property
    def version(self) -> str:
        """sha256 (16 hex digits) of the recipe file's source and of every feinsum module it
        uses to generate code (:func:`code_dependencies`): an edited recipe, toolbox or
        kernel template never reuses old timings."""
        if self._version is None:
            h = hashlib.sha256()
            src = self.source_path
            if src is not None and src.is_file():
                h.update(src.read_bytes())
                for dep in code_dependencies(src).values():
                    h.update(dep.read_bytes())
            else:  # defined interactively: the bytecode is all there is
                for fn in (self._applies, self._space, self._default, self._apply):
                    code = getattr(fn, "__code__", None)
                    h.update(code.co_code if code is not None else repr(fn).encode())
                h.update(toolbox_source_hash().encode())
            self._version = h.hexdigest()[:16]
        return self._version

    # }}}

    # {{{ the contract's entry points (validated, failures contained)

    def _fail(self, what: str, exc: BaseException, params: Mapping[str, Any] | None = None
              ) -> RecipeFailure:
        cfg = f" with {_fmt(params)}" if params is not None else ""
        where = f" ({self.path})" if self.path else ""
        return RecipeFailure(
            f"recipe {self.name!r}{where} raised in {what}{cfg}: {type(exc).__name__}: {exc}"
        )

    def applies(self, e: BatchedEinsum, device: Any = None) -> str | None:
        """``None`` if the recipe applies to canonical *e* on *device*, else the reason."""
        dev = as_device_info(device)
        if not dev.has_fp64 and any(a.dtype.name in ("float64", "complex128") for a in e.arrays):
            return "the device has no double precision (cl_khr_fp64)"
        try:
            reason = self._applies(e, dev)
        except Exception as exc:
            raise self._fail("applies()", exc) from exc
        if reason is not None and not isinstance(reason, str):
            raise RecipeFailure(
                f"recipe {self.name!r}: applies() must return None or a reason string, "
                f"got {reason!r}"
            )
        return reason

    def space(self, e: BatchedEinsum, device: Any = None) -> ParameterSpace:
        """The parameter space (with constraints) for canonical *e* on *device*."""
        dev = as_device_info(device)
        try:
            sp = self._space(e, dev)
        except Exception as exc:
            raise self._fail("space()", exc) from exc
        if not isinstance(sp, ParameterSpace):
            raise RecipeFailure(f"recipe {self.name!r}: space() returned {sp!r}, "
                                "not a ParameterSpace")
        return sp

    def _require_applies(self, e: BatchedEinsum, device: Any) -> None:
        reason = self.applies(e, device)
        if reason is not None:
            raise RecipeError(
                f"recipe {self.name!r} does not apply to this einsum: {reason}; "
                "feinsum.recipes_for(einsum, device) lists the recipes that do")

    def check(self, params: Mapping[str, Any], e: BatchedEinsum, device: Any = None) -> Config:
        """The validated configuration, or :class:`InvalidConfigurationError` naming the
        violated constraint / unknown, missing or out-of-range parameter. A configuration
        of an earlier version is upgraded first (the recipe's ``upgrade``)."""
        if self._upgrade is not None:
            try:
                params = self._upgrade(dict(params))
            except Exception as exc:
                raise self._fail("upgrade()", exc, params) from exc
        return self.space(e, device).validate(params, f"recipe {self.name!r}: configuration")

    def default(self, e: BatchedEinsum, device: Any = None,
                lengths: Mapping[str, int] | None = None) -> Config:
        """The heuristic default configuration (validated). *lengths*: values of *e*'s
        length symbols where known (the lengths the configuration will run at), for the
        recipes whose default reads them."""
        dev = as_device_info(device)
        self._require_applies(e, dev)
        try:
            params = (self._default(e, dev, dict(lengths or {}))
                      if self._default_takes_lengths else self._default(e, dev))
        except Exception as exc:
            raise self._fail("default()", exc) from exc
        try:
            return self.check(params, e, dev)
        except InvalidConfigurationError as exc:
            raise RecipeFailure(f"recipe {self.name!r}: its default is invalid: {exc}") from exc

    def apply(self, t_unit: lp.TranslationUnit, params: Mapping[str, Any], e: BatchedEinsum,
              device: Any = None) -> lp.TranslationUnit:
        """Validate *params*, transform *t_unit* (``generate_loopy(e)``) and set the build
        options. Raises :class:`RecipeError` if the recipe does not apply to *e*,
        :class:`InvalidConfigurationError` before any code generation, and
        :class:`RecipeFailure` if the recipe raises."""
        import loopy as lp

        dev = as_device_info(device)
        self._require_applies(e, dev)
        config = self.check(params, e, dev)
        try:
            result = self._apply(t_unit, dict(config), e, dev)
            if not isinstance(result, lp.TranslationUnit):
                raise TypeError(f"apply() returned {type(result).__name__}, "
                                "not a loopy.TranslationUnit")
            opts = self.build_options(config)
            if opts:
                from feinsum.toolbox.core import add_build_options

                result = add_build_options(result, opts)
        except RecipeFailure:
            raise
        except Exception as exc:
            raise self._fail("apply()", exc, config) from exc
        return result

    def build_options(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """The OpenCL build options *params* ask for."""
        try:
            return tuple(self._build_options(dict(params)))
        except Exception as exc:
            raise self._fail("build_options()", exc, params) from exc

    @property
    def has_prepare(self) -> bool:
        return self._prepare is not None

    def prepare(self, e: BatchedEinsum, arrays: Mapping[str, Any], params: Mapping[str, Any]
                ) -> dict[str, Any]:
        """Extra kernel arguments computed on the host (empty for most recipes)."""
        if self._prepare is None:
            return {}
        try:
            return dict(self._prepare(e, arrays, dict(params)))
        except Exception as exc:
            raise self._fail("prepare()", exc, params) from exc

    # }}}


# vim: foldmethod=marker
