"""Host cost of the deployment path: bare Triton launch, bundle lookup + launch, torch's own op.

Usage: python benchmarks/launch_overhead.py [--calls 2000] [--json]   (needs a CUDA GPU;
``--smoke`` checks every path once on the CPU through Triton's interpreter, timing nothing;
``--lookup-only`` times the lookups alone, no launch, on the CPU; ``--from FILE`` prints the
table of a recorded ``--json`` output)

Shapes: decode-sized ops, where launch cost matters: matmul M=1, N=K=2048 bf16 (the built-in
matmul kernel vs torch.matmul) and rmsnorm M=1, N=2048 bf16 (the built-in rmsnorm kernel vs
torch.nn.functional.rms_norm). Paths per shape:

* ``bare``: the Triton kernel called with arguments and config prepared once (``kernel[grid](...)``);
* ``lookup``: the bundle's table (``Bundle.table``, a bundle of 20 entries) indexed by the problem's
  values (the row count read from the input's shape per call; N, K and dtype fixed by the layer's
  weight), whose value is the config already turned into the launch's
  keyword arguments (once per config), then the same launch: what ``tunefleet profile
  --with-bundle`` does for linear layers and norms;
* ``spec``: ``Bundle.resolve(problem)`` with the problem dict built per call, then the spec's
  ``make_launcher`` and its launcher (argument preparation per call: the generic path);
* ``torch``: torch's op for the same shape.

Host microseconds per call: a loop of ``--calls`` calls timed with perf_counter (the GPU keeps up:
these kernels take a few microseconds), median of 5 loops, paths interleaved loop by loop. Inside a
CUDA graph: 100 calls captured once, replayed; host µs per call of ``graph.replay()`` and device µs
per call (events), median of 20 replays. The lookup target: ``lookup - bare`` <= 1 µs.

``--lookup-only``: per call, best of 5 ``timeit`` loops of 200000, of (1) ``resolve`` on a problem
dict built per call, (2) the table indexed from tensor shapes (the ``lookup`` path's lookup), (3)
the table indexed by a key built once (a pure dict hit).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

GRAPH_CALLS = 100


def host_us(fn: Callable[[], Any], calls: int) -> float:
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def graph_us(fn: Callable[[], Any]) -> tuple[float, float]:
    """(host µs, device µs) per call of ``fn`` replayed from a graph of GRAPH_CALLS calls."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    hosts, devices = [], []
    for _ in range(20):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        graph.replay()
        end.record()
        hosts.append((time.perf_counter() - t0) * 1e6 / GRAPH_CALLS)
        end.synchronize()
        devices.append(start.elapsed_time(end) * 1e3 / GRAPH_CALLS)
    return statistics.median(hosts), statistics.median(devices)


def bundle_for(kernel: str, problem: dict[str, Any], config: dict[str, Any]) -> Any:
    """A bundle of 20 entries (19 neighbours by M, the problem itself last)."""
    from search_spaces.bundle import bundle_from_dict

    entries = [
        {"problem": {**problem, "M": 2 ** (i + 1)}, "config": config, "time_ms": 0.01, "job": 1}
        for i in range(19)
    ] + [{"problem": problem, "config": config, "time_ms": 0.01, "job": 1}]
    return bundle_from_dict(
        {
            "format": "tunefleet-bundle/1",
            "kernel": kernel,
            "default": config,
            "entries": entries,
        }
    )


def paths(kernel: str, device: str = "cuda") -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    from search_spaces.kernels._common import pop_pdl
    from search_spaces.registry import get_spec
    from search_spaces.space import Vendor
    from search_spaces.spec import split_launch_options

    spec = get_spec(kernel)
    problem: dict[str, Any] = (
        {"M": 1, "N": 2048, "K": 2048, "dtype": "bfloat16"}
        if kernel == "matmul"
        else {"M": 1, "N": 2048, "dtype": "bfloat16"}
    )
    inputs = spec.build_inputs(problem, "cpu" if device == "lookup-only" else device)
    config = spec.default_config(Vendor.NVIDIA)
    bundle = bundle_for(kernel, problem, config)
    fields = tuple(problem)
    dtype_names = {torch.bfloat16: "bfloat16"}
    if kernel == "matmul":
        from search_spaces.kernels._matmul_kernels import matmul_kernel

        a, b, out = inputs["a"], inputs["b"], inputs["out"]
        grid = (1 * ((2048 + int(config["BLOCK_N"]) - 1) // int(config["BLOCK_N"])), 1)
        args = (a, b, out, out, out, 1, 2048, 2048, *a.stride(), *b.stride(), *out.stride(), 2048)

        def meta_of(cfg: dict[str, Any]) -> dict[str, Any]:
            m, o = split_launch_options(cfg)
            for name in ("TMA", "PERSISTENT", "STREAM_K"):
                m.pop(name)
            # DOT_IN_FP32: the interpreter's bf16 dot (triton #11584).
            return {**m, **o, "DOT_IN_FP32": device == "cpu"}

        def launch(kwargs: dict[str, Any]) -> None:
            matmul_kernel[grid](*args, **kwargs)

        k_dim, n_dim = b.shape  # a layer's weight: N, K and dtype fixed when it is set up
        dtype = dtype_names[b.dtype]

        def key() -> tuple[Any, ...]:
            return (a.shape[0], n_dim, k_dim, dtype)

        def torch_op() -> None:
            torch.matmul(a, b, out=out)

    else:
        from search_spaces.kernels._rmsnorm_kernels import rmsnorm_kernel
        from search_spaces.kernels.rmsnorm import CACHE_HINTS, EPS

        x, w, out = inputs["x"], inputs["weight"], inputs["out"]

        def meta_of(cfg: dict[str, Any]) -> dict[str, Any]:
            m, o = split_launch_options(cfg)
            streaming = bool(m.pop("STREAMING"))
            pdl = pop_pdl(m)
            return {**m, **o, **CACHE_HINTS[streaming], **pdl, "ONE_PASS": True}

        def launch(kwargs: dict[str, Any]) -> None:
            rmsnorm_kernel[(1,)](x, w, out, 1, 2048, 2048, 2048, EPS, **kwargs)

        dtype = dtype_names[w.dtype]

        def key() -> tuple[Any, ...]:
            return (x.shape[0], 2048, dtype)

        def torch_op() -> None:
            F.rms_norm(x, (2048,), w, EPS)

    kwargs = meta_of(config)
    table = bundle.table(fields, meta_of)

    def bare() -> None:
        launch(kwargs)

    def lookup() -> None:
        launch(table[key()])

    def via_spec() -> None:
        spec.make_launcher(inputs, bundle.resolve(dict(problem))[1])()

    if device == "lookup-only":
        built = key()
        return {
            "resolve": lambda: bundle.resolve(dict(problem)),
            "table": lambda: table[key()],
            "table_hit": lambda: table[built],
        }, problem

    out_ref = spec.reference(inputs)
    for fn in (bare, lookup, via_spec):
        inputs["out"].fill_(float("nan"))
        fn()
        err = float((inputs["out"].double() - out_ref.double()).abs().max() / out_ref.abs().max())
        if not err < spec.tolerance(problem):
            raise SystemExit(f"{kernel} {fn.__name__}: max rel error {err} (wrong result)")
    return {"bare": bare, "lookup": lookup, "spec": via_spec, "torch": torch_op}, problem


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--lookup-only", action="store_true")
    parser.add_argument("--from", dest="recorded", help="print the table of a --json output")
    args = parser.parse_args()
    if args.recorded:
        with open(args.recorded) as f:
            print_table(json.load(f))
        return
    if args.smoke:
        import os

        os.environ["TRITON_INTERPRET"] = "1"
        for kernel in ("matmul", "rmsnorm"):
            fns, _ = paths(kernel, "cpu")
            print(f"{kernel}: {', '.join(fns)} checked on the interpreter")
        return
    if args.lookup_only:
        lookup_only()
        return
    import torch
    import triton

    if not torch.cuda.is_available():
        print("launch_overhead.py needs a CUDA GPU", file=sys.stderr)
        sys.exit(2)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "calls": args.calls,
        "kernels": {},
    }
    for kernel in ("matmul", "rmsnorm"):
        fns, problem = paths(kernel)
        for fn in fns.values():
            host_us(fn, 200)
        loops: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(5):
            for name, fn in fns.items():
                loops[name].append(host_us(fn, args.calls))
        row: dict[str, Any] = {"problem": problem}
        for name, fn in fns.items():
            g_host, g_dev = graph_us(fn)
            row[name] = {
                "host_us": statistics.median(loops[name]),
                "graph_host_us": g_host,
                "graph_device_us": g_dev,
            }
        row["lookup_minus_bare_us"] = row["lookup"]["host_us"] - row["bare"]["host_us"]
        results["kernels"][kernel] = row
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print_table(results)


def lookup_only(number: int = 200_000) -> None:
    """Print ns per call of each lookup alone (see the module doc), on this machine's CPU."""
    import platform

    print(f"lookups alone on {platform.processor() or platform.machine()}, ns per call")
    for kernel in ("matmul", "rmsnorm"):
        fns, _ = paths(kernel, "lookup-only")
        for name, fn in fns.items():
            fn()
            best = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9
            print(f"{kernel:<8} {name:<10} {best:8.0f}")


def print_table(results: dict[str, Any]) -> None:
    print(
        f"{results['device']}  torch {results['torch']}  triton {results['triton']}  "
        f"({results['calls']} calls per loop)"
    )
    print(f"{'kernel':<8} {'path':<7} {'host us':>9} {'graph host us':>14} {'graph dev us':>13}")
    for kernel, row in results["kernels"].items():
        for name in ("bare", "lookup", "spec", "torch"):
            r = row[name]
            print(
                f"{kernel:<8} {name:<7} {r['host_us']:>9.2f} {r['graph_host_us']:>14.3f} "
                f"{r['graph_device_us']:>13.3f}"
            )
        print(f"{kernel:<8} lookup - bare = {row['lookup_minus_bare_us']:+.2f} us (target <= 1)")


if __name__ == "__main__":
    main()
