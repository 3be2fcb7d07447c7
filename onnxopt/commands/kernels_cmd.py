"""``onnxopt kernels``: the kernel registry with each kernel's capabilities."""

from __future__ import annotations

import json

import click
from rich.table import Table

from onnxopt.commands.report import console
from onnxopt.errors import UsageError
from onnxopt.select.registry import default_registry


@click.command("kernels")
@click.option("--op", "ops", multiple=True, help="Only kernels of this fused op (repeatable).")
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default=None,
              help="Only kernels that can run on this target's execution provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
def kernels(ops: tuple[str, ...], target: str | None, as_json: bool) -> None:
    """List every kernel a fused op can be bound to: backend, execution providers, dtypes,
    what it needs (opset, ONNX Runtime version, other domains, compute capability) and what
    it is."""

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
        click.echo(json.dumps([k.to_json() for k in selected], indent=2))
        return


    table = Table(title=f"kernel registry ({len(selected)} kernels)", show_edge=False,
                  title_justify="left", show_lines=False)
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
    out = console()
    if not out.is_terminal:  # piped or captured: do not fold names at 80 columns
        out.width = max(out.width, 200)
    out.print(table)


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
