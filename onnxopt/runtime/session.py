"""`session()`: an onnxruntime.InferenceSession with onnxopt's kernels registered.

Only the domains the model actually uses are registered, and a CUDA kernel only
when the session will run on CUDA, so a model bound entirely to ORT-native ops
gets a plain session, and a model needing a CUDA-only op on a machine without
CUDA fails before ORT does, with a sentence saying which op and why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import onnx

from . import cuda_available, domains
from .errors import RuntimeUnavailable
from .ort_module import ort
from .registry import CPU, CUDA, REGISTRY, KernelRegistry, KernelSpec

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


def kernels_for(
    model: onnx.ModelProto, on_cuda: bool, registry: KernelRegistry = REGISTRY
) -> list[KernelSpec]:
    """The kernels to register for `model`; raises RuntimeUnavailable for an op none can run."""
    served = registry.domains()
    used = {(d, o) for d, o in used_ops(model) if d in served}
    for domain, op_type in sorted(used):
        providers = registry.providers_of(domain, op_type)
        if not providers:
            raise RuntimeUnavailable(
                f"the model uses {domain}::{op_type}, but no kernel is declared for it"
            )
        if providers == {CUDA} and not on_cuda:
            reason = (
                cuda_available.unavailable_reason()
                or "CUDAExecutionProvider is not among the session's providers"
            )
            raise RuntimeUnavailable(f"{domain}::{op_type} has only a CUDA kernel, and {reason}")
    used_domains = {d for d, _ in used}
    allowed = {CPU, CUDA} if on_cuda else {CPU}
    return [k for d in sorted(used_domains) for k in registry.kernels(d) if k.provider in allowed]


def session(
    model: ModelSource,
    providers: Sequence[Provider] | None = None,
    *,
    sess_options: ort.SessionOptions | None = None,
    registry: KernelRegistry | None = None,
    **kwargs: Any,
) -> ort.InferenceSession:
    """An InferenceSession for `model` (path, bytes or ModelProto) with its custom ops registered.

    `providers` defaults to CUDA then CPU where CUDA kernels can run, else CPU.
    `sess_options` is used as given (the kernels are registered on it, so pass a
    fresh one per call); other keyword arguments go to InferenceSession.
    """
    proto, source = _load(model)
    if providers is None:
        providers = [CUDA, CPU] if cuda_available.available() else [CPU]
    on_cuda = CUDA in _provider_names(providers) and cuda_available.available()
    kernels = kernels_for(proto, on_cuda, registry or REGISTRY)
    options = sess_options if sess_options is not None else ort.SessionOptions()
    domains.register(options, kernels)
    return ort.InferenceSession(source, sess_options=options, providers=list(providers), **kwargs)
