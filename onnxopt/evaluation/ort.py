"""Running a model (or a piece cut out of one) in ONNX Runtime, quietly.

Mask probes, kernel timing, the safeguard's load check and verification all hand
ONNX Runtime models it may refuse or fail on — a probe at a size the model does not
accept is an answer, not an error. ORT logs such failures itself at error level,
which would reach the user's terminal; sessions and runs made here log only fatal
errors, and callers report what matters in onnxopt's own words. Models that use
onnxopt's own kernels (``ai.onnxopt.*`` domains, in any subgraph) get them registered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import onnx

from onnxopt.exporter.serialize import model_bytes
from onnxopt.importer.load import has_external_data
from onnxopt.runtime import session as bridge_session
from onnxopt.runtime.ort_module import ort

QUIET = 4  # ORT's "fatal only" severity


def all_node_protos(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of a graph and of its subgraphs (If/Loop/Scan bodies), depth first."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.HasField("g"):
                yield from all_node_protos(a.g)
            for g in a.graphs:
                yield from all_node_protos(g)


def native_path(path: str) -> bool:
    """Whether ONNX Runtime's and the ONNX checker's C++ can open ``path``: they take UTF-8,
    and a name in other bytes (which Python keeps as surrogates) cannot be handed to them."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def uses_onnxopt_kernels(proto: onnx.ModelProto) -> bool:
    """Whether a node is in one of onnxopt's domains. ``proto`` may be an input read with its
    text as it is (``read_model_proto(fix_text=False)``), where protobuf hands out a domain
    that is not UTF-8 as ``bytes``: no domain of onnxopt's."""
    return any(isinstance(n.domain, str) and n.domain.startswith("ai.onnxopt")
               for n in all_node_protos(proto.graph))


def session(model: str | os.PathLike | bytes | onnx.ModelProto,
            providers: list[str] | None = None, *, threads: int | None = None,
            optimize: bool = True, config: dict[str, str] | None = None,
            parsed: onnx.ModelProto | None = None, kernels: bool | None = None,
            **options: Any):
    """A quiet InferenceSession (``threads``: intra-op threads; ``optimize=False`` turns ORT's
    graph optimizations off; ``config``: session config entries; ``parsed``: the proto of a
    model given as bytes, where the caller holds it, so it is not parsed again; ``kernels``:
    whether the model uses onnxopt's own kernels, where the caller knows it, so the model is
    not parsed to find out; other keywords set SessionOptions attributes)."""

    opts = ort.SessionOptions()
    opts.log_severity_level = QUIET
    if threads is not None:
        opts.intra_op_num_threads = threads
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for key, value in options.items():
        setattr(opts, key, value)
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    providers = providers or ["CPUExecutionProvider"]
    is_path = isinstance(model, (str, os.PathLike))
    odd_path = is_path and not native_path(os.fspath(model))
    proto = model if isinstance(model, onnx.ModelProto) else parsed
    if proto is None and (kernels is None or odd_path or (kernels and not is_path)):
        proto = (onnx.load(os.fspath(model), load_external_data=False) if is_path
                 else onnx.load_from_string(bytes(model)))
    if odd_path and not has_external_data(proto.graph):
        with open(model, "rb") as f:  # ORT takes the same model from its bytes
            model = f.read()
    if uses_onnxopt_kernels(proto) if kernels is None else kernels:

        source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else proto
        return bridge_session(source, providers=providers, sess_options=opts)
    source = (os.fspath(model) if isinstance(model, (str, os.PathLike))
              else bytes(model) if isinstance(model, (bytes, bytearray))
              else model_bytes(proto))
    return ort.InferenceSession(source, opts, providers=providers)


def run(sess, feeds: dict, outputs: list[str] | None = None) -> list:
    """``sess.run`` with ORT's own logging of a failure silenced (the exception remains)."""

    quiet = ort.RunOptions()
    quiet.log_severity_level = QUIET
    return sess.run(outputs, feeds, quiet)


def first_line(e: BaseException) -> str:
    """ORT's message of a failure, on one line, without its C++ source location noise."""
    text = " ".join(str(e).split())
    text = text.split("Status Message: ", 1)[-1]
    return text[:240] if text else type(e).__name__
