"""A model: the main graph plus what the ONNX file says around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxopt.ir.exactness import ExactnessPolicy
from onnxopt.ir.graph import Graph


@dataclass
class Model:
    """The IR of one ONNX model.

    ``opset_imports`` maps domain → version (``""`` is the ONNX domain).
    ``functions`` and ``extras`` keep what onnxopt does not interpret
    (model-local functions, training info) so the exporter writes it back
    unchanged. ``base_dir`` is where external data was found.
    """

    graph: Graph
    opset_imports: dict[str, int]
    ir_version: int
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    metadata_props: dict[str, str] = field(default_factory=dict)
    functions: list[Any] = field(default_factory=list)
    base_dir: str | None = None
    had_external_data: bool = False
    # Intermediate values whose type the input file declared in value_info. Only these (and
    # values onnxopt creates) get value_info on export: adding inferred shapes is not neutral,
    # it unlocks different ONNX Runtime graph fusions and so changes numerics and speed.
    declared_value_info: set[str] = field(default_factory=set)
    # The main graph's outputs as the input file declared them (name -> shape): the exported
    # interface keeps those dims, whatever names inference gives them ("(past+seq)" for an
    # exporter's "Concatpresent_key_0_dim_2").
    declared_outputs: dict[str, Any] = field(default_factory=dict)
    # Bytes of the input file's tensors (initializers, tensor attributes, external data): the
    # result must not weigh more (onnxopt.verification.loadable).
    source_tensor_bytes: int = 0
    # How many dims inference has named so far (symdim.is_fresh): each name is used once.
    fresh_dims: int = 0
    # Which non-exact rewrites this run may make (onnxopt.ir.exactness; the driver sets it).
    exactness: ExactnessPolicy = field(default_factory=ExactnessPolicy)

    def fresh_dim(self) -> str:
        """A new symbol for a dim no rule can name, unique in the model (``?1``, ``?2``, …)."""
        self.fresh_dims += 1
        return f"?{self.fresh_dims}"

    @property
    def opset(self) -> int:
        return self.opset_imports.get("", self.opset_imports.get("ai.onnx", 0))

    def require_opset(self, domain: str, version: int) -> None:
        """Record that the graph now uses ``domain`` at ``version`` or later."""
        if self.opset_imports.get(domain, 0) < version:
            self.opset_imports[domain] = version
