"""Every usage mistake the CLI framework catches is one ``error:`` line naming the mistake and the
help to read, exit 2, no traceback; bare ``tunefleet`` and bare groups print help and exit 0.

The walk takes the commands from the Typer app itself, so a new command or option is covered
without editing this file. Every case fails while parsing, so no command body runs."""

from __future__ import annotations

import enum
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from orchestrator.commands.cli import build_app, main
from tests.gpu import has_gpu
from tests.orchestrator.conftest import H200


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(args)
    out, err = capsys.readouterr()
    code = done.value.code
    return (code if isinstance(code, int) else 0), out, err


def _leaves(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
        return
    for name, sub in subcommands.items():
        yield from _leaves(sub, [*path, name])


def _groups(command: Any, path: list[str]) -> Iterator[list[str]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        return
    yield path
    for name, sub in subcommands.items():
        yield from _groups(sub, [*path, name])


ROOT = typer.main.get_command(build_app())
LEAVES = list(_leaves(ROOT, []))
GROUPS = list(_groups(ROOT, []))
LEAVES_BY_PATH = {tuple(path): command for path, command in LEAVES}


def _base(annotation: Any) -> Any:
    return (
        getattr(annotation, "__args__", (annotation,))[0]
        if "list" in str(annotation)
        else annotation
    )


def _good(param: Any) -> str:
    base = _base(param.type_descriptor.annotation)
    if base is int or base is float:
        return str(max(param.min or 1, 1))
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return str(next(iter(base)).value)
    return "matmul" if param.param_type_name == "argument" else "x"


def _required_args(command: Any, skip: Any = None) -> list[str]:
    """Valid values for the command's required parameters (other than ``skip``)."""
    args: list[str] = []
    for param in command.params:
        if param is skip or not param.required:
            continue
        if param.param_type_name == "argument":
            args.append(_good(param))
        else:
            args += [param.opts[0], _good(param)]
    return args


def _bad_values(param: Any) -> Iterator[tuple[str, list[str]]]:
    """(label, argv tail) pairs that the framework must refuse for ``param``."""
    if param.param_type_name == "option" and getattr(param, "is_flag", False):
        return
    base = _base(param.type_descriptor.annotation)
    value: str | None = None
    if base is int:
        value = "abc"
    elif base is float:
        value = "fast"
    elif isinstance(base, type) and issubclass(base, enum.Enum):
        value = "bogus"
    if param.param_type_name == "argument":
        if value is not None:
            yield "bad-" + base.__name__, [value]
        return
    if value is not None:
        yield "bad-" + base.__name__, [param.opts[0], value]
    if base is int and param.min is not None:
        yield "below-min", [param.opts[0], str(param.min - 1)]
    if base is pathlib.Path or base is str or value is not None:
        yield "no-value", [param.opts[0]]


CASES = [
    pytest.param(path, tail, param, id=f"{' '.join(path)}:{param.name}:{label}")
    for path, command in LEAVES
    for param in command.params
    for label, tail in _bad_values(param)
]
MISSING = [
    pytest.param(path, id=" ".join(path))
    for path, command in LEAVES
    if any(p.required for p in command.params)
]


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err + out
    return err


@pytest.mark.parametrize(("path", "tail", "param"), CASES)
def test_bad_option_value_is_one_line(
    capsys: pytest.CaptureFixture[str], path: list[str], tail: list[str], param: Any
) -> None:
    command = LEAVES_BY_PATH[tuple(path)]
    if param.param_type_name == "argument":
        args = [*path, *tail, *_required_args(command, skip=param)]
    else:
        # The bad option last, so "requires an argument" cases really lack their value.
        args = [*path, *_required_args(command), *tail]
    err = _one_error_line(*run(capsys, args))
    named = param.opts[0] if param.param_type_name == "option" else param.name
    assert named in err, err
    assert f"see tunefleet {' '.join(path)} --help" in err, err


@pytest.mark.parametrize("path", MISSING)
def test_missing_required_is_one_line(capsys: pytest.CaptureFixture[str], path: list[str]) -> None:
    err = _one_error_line(*run(capsys, path))
    assert "missing" in err, err


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "tunefleet")
def test_bare_group_prints_help_exit_0(capsys: pytest.CaptureFixture[str], path: list[str]) -> None:
    code, out, err = run(capsys, path)
    assert code == 0 and err == "", err
    assert out.startswith(f"Usage: tunefleet {' '.join(path)}".rstrip() + " "), out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tuen"], "did you mean 'tune'"),
        (["--bogus"], "no such option: --bogus"),
        (["kernels", "--bogus"], "see tunefleet kernels --help"),
        (["job", "abc"], "'job'"),
    ],
)
def test_mistakes_name_what_to_do(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    err = _one_error_line(*run(capsys, args))
    assert says in err.lower(), err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    code, out, err = run(capsys, ["--version"])
    assert (code, err) == (0, "")
    assert out == f"tunefleet {version('tunefleet')}\n"


def test_walk_covers_every_option_kind() -> None:
    """The walk is not vacuous: it reaches int, float, enum, path options and required ones."""
    labels = {str(c.id).rsplit(":", 1)[1] for c in CASES}
    assert {"bad-int", "bad-float", "bad-Objective", "below-min", "no-value"} <= labels, labels
    assert len(MISSING) >= 5 and len(LEAVES) >= 15


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(
            ["trial", "matmul", "-p", "M=32,N=32,K=32,dtype=float16", "--device", "cuda"],
            "no cuda gpu is visible; use --device interpreter",
            marks=pytest.mark.skipif(has_gpu(), reason="needs a machine without a GPU"),
        ),
        (
            ["trial", "matmul", "-p", "M=32,N=32,K=32,dtype=float16", "--device", "replay:x"],
            "landscape file x does not exist",
        ),
        (
            ["trial", "matmul", "-p", "M=32,N=32,K=32,dtype=float16", "--device", "gpu"],
            "unknown device 'gpu'; use auto, cuda, rocm, interpreter or replay:file",
        ),
        (
            ["tune", "matmul", "-p", "M=32,N=32,K=32,dtype=float16", "--device", "gpu"],
            "unknown device 'gpu'; use auto, cuda, rocm, interpreter or replay:file",
        ),
        (
            ["trial", "matmul", "-p", "M=32,M=64,N=32,K=32,dtype=float16"],
            "problem names 'm' twice",
        ),
    ],
)
def test_device_and_problem_hints_name_real_options(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    err = _one_error_line(*run(capsys, args))
    assert says in err.lower(), err
    assert "--backend" not in err


def test_trial_and_tune_take_one_device_value_set(
    capsys: pytest.CaptureFixture[str], landscapes: dict[str, list[pathlib.Path]]
) -> None:
    """Both say the same in their help, both parse through the one DeviceSource; trial answers a
    replayed device from its landscape, record (it measures this machine) refuses one."""
    from orchestrator.commands._common import DEVICE_HELP
    from orchestrator.run.jobs import DeviceSource

    def device_help(command: str) -> str:
        (option,) = [p for p in LEAVES_BY_PATH[(command,)].params if p.name == "device"]
        return str(option.help)

    assert device_help("trial").startswith(DEVICE_HELP)
    assert device_help("tune").startswith(DEVICE_HELP)
    assert device_help("record").startswith(DEVICE_HELP)
    replay = f"replay:{landscapes[H200][0]}"
    for value in ("auto", "cuda", "rocm", "interpreter", replay):
        assert str(DeviceSource.parse(value)).startswith(value.split(":")[0])
    problem = "M=256,N=256,K=256,dtype=float16"
    code, out, err = run(capsys, ["trial", "matmul", "-p", problem, "--device", replay, "--json"])
    assert code == 0, err
    answered = json.loads(out)
    assert answered["backend"] == "replay" and answered["outcome"] == "ok"
    assert answered["device_class"] == f"replay:{H200}" and answered["median_ms"] > 0
    args = ["record", "matmul", "-p", problem, "--device", replay, "--out", "x.json"]
    err = _one_error_line(*run(capsys, args))
    assert "measures this machine's device" in err and "use auto, cuda, rocm or interpreter" in err


def test_every_option_a_message_names_is_an_option_of_the_cli() -> None:
    """Hints say what to do with real options: each ``--name`` written in the packages' source
    is an option of some command (or one of another program: ``ray start --head``)."""
    import re

    commands = [ROOT, *(command for _, command in LEAVES)]
    options = {"--help"} | {
        o
        for command in commands
        for p in command.params
        for o in (*p.opts, *p.secondary_opts)
        if o.startswith("--")
    }
    others = {"--head", "--flag"}  # `ray start --head`; capture's example of an app's own flag
    root = pathlib.Path(__file__).resolve().parents[3]
    named = {
        (m.group(1), str(path.relative_to(root)))
        for package in ("orchestrator", "workers", "search_spaces", "db")
        for path in (root / package).rglob("*.py")
        for m in re.finditer(r"(?<![\w-])(--[a-z][a-z-]+)", path.read_text())
    }
    unknown = sorted((o, where) for o, where in named if o not in options | others)
    assert not unknown, unknown
