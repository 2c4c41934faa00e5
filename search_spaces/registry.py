"""Find kernel specs by name: built-ins, the ``tunefleet.kernels`` entry points, a captured
kernel's ``captured:<name>@<hash>`` (:mod:`search_spaces.capture_refs`), or ``module:attribute``.

Loading a spec imports only its spec module; its kernels (torch, triton) load when a trial runs.
A captured reference imports no module named by it: it is resolved from the files of a capture
this machine indexed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
from collections.abc import Collection
from types import ModuleType

from search_spaces import plugins
from search_spaces.capture_refs import is_captured_ref, parse_ref
from search_spaces.errors import RegistryError
from search_spaces.spec import KernelSpec

ENTRY_POINT_GROUP = "tunefleet.kernels"

#: What resolves a ``captured:`` reference (tunefleet's own module, never one a reference names).
CAPTURED_RESOLVER = "workers.capture_spec"

BUILTINS: dict[str, str] = {
    "matmul": "search_spaces.kernels.matmul:SPEC",
    "rmsnorm": "search_spaces.kernels.rmsnorm:SPEC",
    "flash_attention": "search_spaces.kernels.flash_attention:SPEC",
    "paged_attention": "search_spaces.kernels.paged_attention:SPEC",
    "fused_moe": "search_spaces.kernels.fused_moe:SPEC",
    "fp8_matmul": "search_spaces.kernels.fp8_matmul:SPEC",
}


def _entry_points() -> dict[str, str]:
    return {name: ep.value for name, ep in plugins.group(ENTRY_POINT_GROUP).items()}


def _import_quietly(module_name: str, ref: str) -> ModuleType:
    """Import a spec module; RegistryError if it fails, exits, or writes to stdout (which would
    corrupt ``--json`` output: a spec module must only define its spec)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            module = importlib.import_module(module_name)
    except SystemExit as exc:
        raise RegistryError(
            f"module {module_name!r} for {ref!r} called sys.exit({exc.code!r}) on import; "
            "a spec module must only define its spec"
        ) from None
    except Exception as exc:  # any import failure of user code is the user's to fix
        raise RegistryError(f"cannot import {module_name!r} for {ref!r}: {exc}") from None
    printed = captured.getvalue().strip()
    if printed:
        sys.modules.pop(module_name, None)
        first = printed.splitlines()[0][:60]
        raise RegistryError(
            f"module {module_name!r} for {ref!r} printed on import ({first!r}); "
            "a spec module must only define its spec (move the printing under "
            "if __name__ == '__main__')"
        )
    return module


def _load_ref(ref: str) -> KernelSpec:
    """Import ``module:attribute`` from the installed packages or, after them, the current folder."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise RegistryError(f"{ref!r} is not MODULE:ATTRIBUTE")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module = _import_quietly(module_name, ref)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise RegistryError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, KernelSpec):
        obj = obj()
    if not isinstance(obj, KernelSpec):
        raise RegistryError(
            f"{ref!r} is a {type(obj).__name__}, not a tunefleet KernelSpec (subclass or instance)"
        )
    return obj


def available() -> dict[str, str]:
    """Kernel name -> ``module:attribute`` for built-ins and installed entry points."""
    return {**BUILTINS, **_entry_points()}


def get_spec(name: str) -> KernelSpec:
    """The spec for a kernel name, a captured reference or a ``module:attribute`` reference;
    raises RegistryError (CaptureError for a captured reference)."""
    if is_captured_ref(name):
        parse_ref(name)  # refused before anything is imported
        spec: KernelSpec = importlib.import_module(CAPTURED_RESOLVER).captured_spec(name)
        return spec
    if ":" in name:
        return _load_ref(name)
    refs = available()
    if name not in refs:
        raise RegistryError(
            f"unknown kernel {name!r}; known: {', '.join(sorted(refs))} "
            "(or give MODULE:ATTRIBUTE for your own spec)"
        )
    return _load_ref(refs[name])


def spec_from_storage(name: str, allowed: Collection[str] = ()) -> KernelSpec:
    """The spec for a kernel name read from storage (a job row, a request): registered names
    (built-ins, entry points) load as :func:`get_spec` does; a ``module:attribute`` is imported
    only if it, or its module, is in ``allowed`` (given again by the user, or allow-listed by an
    operator), since importing it runs that module's code; so is a ``captured:`` reference (its
    trials run the captured app's code), if it or ``captured`` is allowed. Raises RegistryError
    otherwise."""
    if ":" in name:
        module = name.partition(":")[0]
        if name not in allowed and module not in allowed:
            runs = (
                "tuning it would run the captured app's code"
                if is_captured_ref(name)
                else f"importing it would run module {module!r}"
            )
            raise RegistryError(
                f"kernel {name!r} is not registered, and {runs}; if you trust it, give it "
                f"again: --kernel-module {name}"
            )
    return get_spec(name)


def all_specs() -> list[KernelSpec]:
    return [get_spec(name) for name in sorted(available())]
