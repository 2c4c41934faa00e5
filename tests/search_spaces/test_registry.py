"""The registry resolves built-in names and MODULE:ATTRIBUTE refs; version hashes are stable."""

import pathlib
import re
import subprocess
import sys
from typing import ClassVar

import pytest

from search_spaces import RegistryError, SpecError, Vendor, available, get_spec
from search_spaces.accuracy import max_rel_error
from search_spaces.kernels.matmul import MatmulSpec
from search_spaces.kernels.rmsnorm import SPACE as RMSNORM_SPACE
from search_spaces.kernels.rmsnorm import RmsnormSpec
from search_spaces.space import DeviceLimits, Space


def test_builtins_resolve() -> None:
    assert {"matmul", "rmsnorm"} <= set(available())
    matmul, rmsnorm = get_spec("matmul"), get_spec("rmsnorm")
    assert isinstance(matmul, MatmulSpec) and matmul.name == "matmul"
    assert isinstance(rmsnorm, RmsnormSpec) and rmsnorm.name == "rmsnorm"
    assert get_spec("search_spaces.kernels.matmul:SPEC") is matmul
    assert isinstance(get_spec("search_spaces.kernels.matmul:MatmulSpec"), MatmulSpec)


def test_user_kernel_resolves_and_runs(cpu_limits: DeviceLimits) -> None:
    spec = get_spec("examples.user_kernel:SPEC")
    assert spec.name == "scale_add"
    problem = spec.validate_problem({"N": 300, "dtype": "float16"})
    config = spec.space.validate({"BLOCK_SIZE": 128, "num_warps": 1}, cpu_limits)
    inputs = spec.build_inputs(problem, "cpu")
    inputs["out"].fill_(float("nan"))
    spec.make_launcher(inputs, config)()
    assert max_rel_error(inputs["out"], spec.reference(inputs)) <= spec.tolerance(problem)
    assert spec.space.violation(spec.default_config(Vendor.NVIDIA), cpu_limits) is None


@pytest.mark.parametrize(
    ("ref", "words"),
    [
        ("nosuchmod:X", "cannot import 'nosuchmod'"),
        ("json:dumps", "is a function, not a tunefleet KernelSpec"),
        ("search_spaces.kernels.matmul:NOPE", "has no attribute 'NOPE'"),
        ("matmul-typo", "unknown kernel 'matmul-typo'; known: "),
        ("search_spaces.kernels.matmul:", "is not MODULE:ATTRIBUTE"),
    ],
)
def test_bad_refs(ref: str, words: str) -> None:
    with pytest.raises(RegistryError) as err:
        get_spec(ref)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_kernel_lists_known_names() -> None:
    with pytest.raises(RegistryError, match=r"matmul.*rmsnorm.*MODULE:ATTRIBUTE"):
        get_spec("matmul-typo")


@pytest.mark.parametrize("name", ["matmul", "rmsnorm", "examples.user_kernel:SPEC"])
def test_version_hash_stable(name: str) -> None:
    spec = get_spec(name)
    assert re.fullmatch(r"[0-9a-f]{16}", spec.version_hash())
    assert spec.version_hash() == get_spec(name).version_hash()
    assert "@triton.jit" in spec.source_text()


def test_version_hash_tracks_space_and_source() -> None:
    class OtherSpace(RmsnormSpec):
        space: ClassVar[Space] = Space(RMSNORM_SPACE.params[:-1], RMSNORM_SPACE.constraints)

    class OtherSource(RmsnormSpec):
        sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._matmul_kernels",)

    base = get_spec("rmsnorm").version_hash()
    assert OtherSpace().version_hash() != base
    assert OtherSource().version_hash() != base
    assert get_spec("matmul").version_hash() != base


def test_missing_source_module_is_a_spec_error() -> None:
    class Lost(RmsnormSpec):
        sources: ClassVar[tuple[str, ...]] = ("search_spaces.kernels._no_such_kernels",)

    with pytest.raises(SpecError, match="_no_such_kernels' not found"):
        Lost().version_hash()


def test_specs_work_without_gpu_libraries() -> None:
    code = (
        "import sys\n"
        "from search_spaces import get_spec\n"
        "from search_spaces.space import DeviceLimits, Vendor\n"
        "lim = DeviceLimits(Vendor.NVIDIA, 'x', 'sm_90', 232448, 65536, 32, 132)\n"
        "for name in ('matmul', 'rmsnorm', 'examples.user_kernel:SPEC'):\n"
        "    spec = get_spec(name)\n"
        "    spec.version_hash(); spec.space.count(lim); spec.default_for(lim)\n"
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0) on import"),
        ("raise SystemExit('bye')\n", "called sys.exit('bye') on import"),
        ("print('hello from my spec')\nSPEC = None\n", "printed on import ('hello from my spec')"),
    ],
)
def test_spec_module_that_exits_or_prints_on_import_is_an_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, body: str, words: str
) -> None:
    name = f"noisy_spec_{abs(hash(body))}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError) as err:
        get_spec(f"{name}:SPEC")
    assert words in str(err.value) and "\n" not in str(err.value), err.value
    assert "a spec module must only define its spec" in str(err.value)
