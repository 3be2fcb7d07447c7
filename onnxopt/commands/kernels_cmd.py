"""``onnxopt kernels``: the kernel registry with each kernel's capabilities."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from onnxopt.commands import json_report
from onnxopt.commands.progress import stage_progress
from onnxopt.commands.report import console, new_table
from onnxopt.errors import UsageError
from onnxopt.runtime import library
from onnxopt.runtime.cuda import compiler, images, metadata
from onnxopt.select.registry import default_registry


@click.command("kernels")
@click.option("--op", "ops", multiple=True, help="Only kernels of this fused op (repeatable).")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Only kernels that can run on this target's execution provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@click.option("--build", "build", is_flag=True,
              help="Build the CUDA kernel images (SASS for sm_80/86/89/90, PTX for newer GPUs) "
                   "with nvcc, so that no toolkit is needed where the model is served.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="With --build: where to write the images (default: beside the kernel "
                   "sources, where the loader looks).")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="With --build: nvcc processes at a time (default: the CPU count).")
@click.option("--library", "show_library", is_flag=True,
              help="Print the path of libonnxopt_ops, the native library a --target cuda model "
                   "needs (register it with ONNX Runtime's register_custom_ops_library).")
def kernels(ops: tuple[str, ...], target: str | None, as_json: bool, build: bool,
            out: str | None, jobs: int | None, show_library: bool) -> None:
    """List every kernel a fused op can be bound to: backend, execution providers, dtypes,
    what it needs (opset, ONNX Runtime version, other domains, compute capability) and what
    it is. With --build, build the CUDA kernels' shipped images instead; with --library, print
    the path of the native custom-op library."""
    if show_library:
        if build or ops or target or as_json:
            raise UsageError("--library takes no other option")
        try:
            click.echo(library.path())
        except library.LibraryUnavailable as error:
            raise UsageError(str(error).splitlines()[0]) from None
        return
    if build:
        _build(out, jobs)
        return

    registry = default_registry()
    known = sorted({k.implements for k in registry})
    for op in ops:
        if op not in known:
            raise UsageError(f"unknown fused op '{op}' (fused ops: {', '.join(known)})")
    provider = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}.get(target or "")
    selected = [k for k in registry if (not ops or k.implements in ops)
                and (provider is None or provider in k.providers)]
    selected.sort(key=lambda k: (k.implements, k.backend != "decompose", k.name))
    if as_json:
        data = json_report.document("kernels", {"kernels": [k.to_json() for k in selected]})
        click.echo(json.dumps(data, indent=2))
        return


    table = new_table(f"kernel registry ({len(selected)} kernels)")
    for col in ("fused op", "kernel", "backend", "providers"):
        table.add_column(col, no_wrap=True)
    for col in ("dtypes", "needs", "notes"):
        table.add_column(col, overflow="fold", ratio=1 if col != "notes" else 2)
    last = None
    for k in selected:
        table.add_row("" if k.implements == last else k.implements, k.name, k.backend,
                      ", ".join(sorted(p.removesuffix("ExecutionProvider") for p in k.providers)),
                      ", ".join(sorted(k.dtypes)), _needs(k), k.notes)
        last = k.implements
    console().print(table)  # plain lines where stdout is not a terminal: nothing folded


def _needs(k) -> str:
    parts = []
    if k.min_opset:
        parts.append(f"opset {k.min_opset}")
    parts += [f"{d} {v}" for d, v in sorted(k.opsets.items())]
    if k.min_ort > (0, 0):
        parts.append(f"ORT {k.min_ort[0]}.{k.min_ort[1]}")
    if k.min_compute_capability > (0, 0):
        parts.append(f"sm {k.min_compute_capability[0]}.{k.min_compute_capability[1]}")
    if k.head_dims:
        parts.append("head dims " + "/".join(map(str, sorted(k.head_dims))))
    if not k.deterministic:
        parts.append("relaxed determinism")
    return ", ".join(parts) or "-"


def _build(out: str | None, jobs: int | None) -> None:
    """Build every kernel image and print what ptxas reported (spills must be 0)."""
    if compiler.find_nvcc() is None:
        raise UsageError("--build needs nvcc: install the CUDA toolkit or set ONNXOPT_NVCC")
    folder = Path(out) if out else images.image_dir()
    start = time.perf_counter()
    try:
        with stage_progress() as progress:  # minutes of nvcc: say so while it runs
            progress("build")
            built = compiler.build_images(metadata.kernels_dir(), folder, jobs=jobs)
    except compiler.CompileError as error:
        raise UsageError(str(error).splitlines()[0]) from None
    images.clear_cache()
    spills = sum(r.spill_stores + r.spill_loads for i in built for r in i.resources.values())
    entries = sum(len(i.resources) for i in built)
    click.echo(f"built {len(built)} images ({', '.join(compiler.TARGETS)}) into {folder} in "
               f"{time.perf_counter() - start:.0f} s; {entries} entry points compiled to SASS, "
               f"{spills} bytes of register spills")
