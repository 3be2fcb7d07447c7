"""The declarations of the CUDA kernel families: ``kernels/<family>.json`` beside each ``.cu``.

The JSON is the one statement of a kernel family: its parameter list in order (the launch
packing is generated from it, ``launch_args``), the ORT custom ops it is exposed as (their
ports and attributes, ``onnxopt.runtime.ops``), the kernel records selection offers
(``onnxopt.select.pycuda_kernels``), and its specialisations (entry points, tiles, dtypes,
head-dim buckets, shared memory as a formula of the tile, minimum compute capability,
determinism). The tests check it against the ``.cu`` both ways.
"""

from __future__ import annotations

import ast
import functools
import json
import operator
import os
from pathlib import Path
from typing import Any

FAMILIES = ("flash_attention", "layer_norm", "activations", "group_norm")

ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def kernels_dir() -> Path:
    """The folder holding the ``.cu`` sources: $ONNXOPT_KERNELS_DIR, the copy an installed
    wheel carries (``onnxopt/kernels``, see setup.py), or the repository's kernels/."""
    env = os.environ.get("ONNXOPT_KERNELS_DIR")
    if env:
        return Path(env)
    packaged = Path(__file__).resolve().parents[2] / "kernels"
    if (packaged / "flash_attention.json").is_file():
        return packaged
    return Path(__file__).resolve().parents[3] / "kernels"


@functools.cache
def load(family: str) -> dict[str, Any]:
    """The parsed ``<family>.json`` (cached; treat as read-only)."""
    if family not in FAMILIES:
        raise KeyError(f"unknown kernel family {family!r}; known: {', '.join(FAMILIES)}")
    path = kernels_dir() / f"{family}.json"
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def variants(family: str) -> list[dict[str, Any]]:
    return load(family)["variants"]


def variant(family: str, entry: str) -> dict[str, Any]:
    for v in variants(family):
        if v["entry"] == entry:
            return v
    raise KeyError(f"{family}: no variant named {entry!r}")


def source_path(family: str) -> Path:
    return kernels_dir() / load(family)["source"]


def smem_bytes(family: str, v: dict[str, Any]) -> int:
    """Dynamic shared memory (bytes) one block of variant ``v`` needs, from the JSON formula."""
    meta = load(family)
    formula = meta["kinds"][v["kind"]]["smem_bytes"] if "kind" in v else meta["smem_bytes"]
    names = {k: val for k, val in v.items() if isinstance(val, int)}
    names["ELEM_BYTES"] = ELEM_BYTES[v["dtype"]]
    return int(evaluate(formula, names))


def params(family: str, op: str | None = None) -> list[tuple[str, str]]:
    """The entry points' parameter list, in order: (name, type) with type ptr/i32/i64/f32.
    Families with several kernel signatures (activations) key them by ``op``."""
    declared = load(family)["params"]
    if isinstance(declared, dict):
        if op is None:
            raise KeyError(f"{family} declares several signatures; name one of {sorted(declared)}")
        declared = declared[op]
    return [(str(name), str(kind)) for name, kind in declared]


def ops(family: str) -> dict[str, dict[str, Any]]:
    """The ORT custom ops the family is exposed as: op type -> inputs, outputs, attrs."""
    return load(family)["ops"]


def records(family: str) -> list[dict[str, Any]]:
    """The kernel records selection offers for the family (name, implements, op, cost...)."""
    return load(family)["records"]


def min_compute_capability(family: str, v: dict[str, Any]) -> tuple[int, int]:
    meta = load(family)
    cc = (
        meta["kinds"][v["kind"]]["min_compute_capability"]
        if "kind" in v
        else meta["min_compute_capability"]
    )
    return int(cc[0]), int(cc[1])


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
}


def evaluate(formula: str, names: dict[str, int]) -> int | float:
    """Evaluate an arithmetic formula over ``names`` (numbers, names, + - * / // %, parentheses)."""

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise KeyError(f"formula {formula!r} uses {node.id!r}, which the variant lacks")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"formula {formula!r}: unsupported syntax {ast.dump(node)}")

    return ev(ast.parse(formula, mode="eval"))
