"""`session()`: an onnxruntime.InferenceSession with onnxopt's native kernel library registered.

This is a convenience for Python callers; a model needs nothing of onnxopt at serving time but
``libonnxopt_ops`` (``onnxopt kernels --library`` prints its path), which any ONNX Runtime
binding registers with ``register_custom_ops_library``. Here the library is registered only
when the model uses its domain, and a session asked for CUDA where CUDA cannot run fails in
one line instead of ONNX Runtime quietly running on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import onnx

from . import cuda_available, library
from .cuda import DOMAIN
from .errors import RuntimeUnavailable
from .ort_module import ort

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

ModelSource = str | os.PathLike | bytes | onnx.ModelProto
Provider = str | tuple[str, dict[str, Any]]


def _load(model: ModelSource) -> tuple[onnx.ModelProto, str | bytes]:
    """The proto to inspect, and what to hand ORT (a path keeps external data resolvable)."""
    if isinstance(model, onnx.ModelProto):
        return model, model.SerializeToString()
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), bytes(model)
    path = os.fspath(model)
    return onnx.load(path, load_external_data=False), path


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)


def used_ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    """(domain, op type) of every node, in subgraphs and model-local functions too."""
    nodes = list(_nodes(model.graph))
    for function in model.functions:
        nodes.extend(function.node)
    local = {(f.domain, f.name) for f in model.functions}
    return {(n.domain, n.op_type) for n in nodes} - local


def _provider_names(providers: Sequence[Provider]) -> list[str]:
    return [p if isinstance(p, str) else p[0] for p in providers]


def session(
    model: ModelSource,
    providers: Sequence[Provider] | None = None,
    *,
    sess_options: ort.SessionOptions | None = None,
    staged: bool = False,
    **kwargs: Any,
) -> ort.InferenceSession:
    """An InferenceSession for `model` (path, bytes or ModelProto) with libonnxopt_ops
    registered where the model uses its ops.

    `providers` defaults to CUDA then CPU where onnxopt's CUDA kernels can run, else CPU; a
    CUDA provider asked for where CUDA cannot run raises RuntimeUnavailable with the reason.
    `staged`: the CPU provider's ops run the CUDA kernels through device memory (a GPU
    machine whose ONNX Runtime has no CUDA provider). `sess_options` is used as given (the
    library is registered on it, so pass a fresh one per call); other keyword arguments go to
    InferenceSession.
    """
    proto, source = _load(model)
    ours = sorted(op for domain, op in used_ops(proto) if domain == DOMAIN)
    if providers is None:
        providers = [CUDA, CPU] if not staged and cuda_available.available() else [CPU]
    names = _provider_names(providers)
    if CUDA in names and (reason := cuda_available.unavailable_reason(kernels=bool(ours))):
        raise RuntimeUnavailable(f"CUDAExecutionProvider was asked for, but {reason}")
    if staged and ours and (reason := cuda_available.device_unavailable_reason()):
        raise RuntimeUnavailable(f"the staged CPU kernels need a GPU, but {reason}")
    options = sess_options if sess_options is not None else ort.SessionOptions()
    if ours:
        if CUDA in names or staged:
            cuda_available.point_library_at_images()
        library.register(options, staged=staged)
    return ort.InferenceSession(source, sess_options=options, providers=list(providers), **kwargs)
