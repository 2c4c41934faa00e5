"""``tunefleet capture``: run an app with its @triton.autotune kernels recorded (no code change)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.errors import OrchestratorError


def _package_root() -> Path:
    import search_spaces

    return Path(search_spaces.__file__).resolve().parent.parent


def capture_environment(out: Path, environ: dict[str, str]) -> dict[str, str]:
    """``environ`` plus TUNEFLEET_CAPTURE and a PYTHONPATH that starts with the bootstrap folder
    (whose ``sitecustomize`` installs the hook) and tunefleet's own packages."""
    from search_spaces.triton_capture import ENV_VAR, bootstrap_dir

    paths = [str(bootstrap_dir()), str(_package_root())]
    if environ.get("PYTHONPATH"):
        paths.append(environ["PYTHONPATH"])
    return {**environ, ENV_VAR: str(out.resolve()), "PYTHONPATH": os.pathsep.join(paths)}


def capture(
    command: Annotated[
        list[str] | None,
        typer.Argument(help="The app to run, after `--`: e.g. -- python app.py --flag."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Capture directory (created; keys are added).")
    ] = None,
    bootstrap: Annotated[
        bool,
        typer.Option(
            "--bootstrap",
            help="Print the PYTHONPATH entries that make TUNEFLEET_CAPTURE=DIR work for any "
            "Python process, and exit.",
        ),
    ] = False,
    refs: Annotated[
        Path | None,
        typer.Option(
            "--refs",
            help="Print each kernel of capture DIR with the reference `pull`, `best` and "
            "`revalidate` take (with --widen: of the widened space), index DIR so that the "
            "references resolve here, and exit.",
        ),
    ] = None,
    widen: Annotated[
        bool, typer.Option(help="With --refs: the widened space's references.")
    ] = False,
) -> int:
    """Run COMMAND recording every @triton.autotune kernel it launches: per kernel its configs
    and key, per distinct key the arguments' shapes, dtypes, strides and scalars (no tensor
    data); index DIR so that the kernels' references (`--refs`) resolve on this machine. Then
    `tunefleet tune --from-capture DIR`. Exits with the app's exit code."""
    from search_spaces.capture_file import CAPTURE_GLOB
    from search_spaces.capture_refs import ref_of, register_capture

    if refs is not None:
        for kernel in register_capture(refs):
            print(f"{kernel.name}\t{ref_of(kernel, widen)}")
        return 0
    env = capture_environment(out or Path("."), dict(os.environ))
    if bootstrap:
        print(env["PYTHONPATH"])
        return 0
    if out is None or not command:
        raise OrchestratorError(
            "give --out DIR and the app after `--`, e.g. "
            "tunefleet capture --out captures -- python app.py"
        )
    if out.exists() and not out.is_dir():
        raise OrchestratorError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    try:
        code = subprocess.call(command, env=env)
    except FileNotFoundError:
        raise OrchestratorError(f"cannot run {command[0]!r}: not found") from None
    if any(out.glob(CAPTURE_GLOB)):
        register_capture(out)
    return code


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_interspersed_args": False})(capture)
