"""Fused operators: a typed contract (ports, attribute record), decomposition, NumPy reference.

Fused ops live in domain ``ai.onnxopt`` and are abstract: they say *what* is
computed (``AttentionFused``), never *how*. Each one is the contract that the rule
creating it, the legality checks, every kernel binding it, its decomposition and its
reference share:

- its ports (:class:`Port`: inputs and outputs, by name, optional or not) and its
  attribute record (a frozen :class:`FusedAttrs` subclass: one typed field per
  attribute, where the attribute's default lives). A node's attributes are read in
  one place, ``Record.of(node)``; a rule writes a record, and the builder checks it
  against the op (:class:`onnxopt.ir.builder.NodeBuilder` with ``schemas=FUSED_OPS``);
- ``decompose``: standard ONNX ops computing the same function, so a model is
  runnable when no faster kernel is legal;
- ``reference``: the op on NumPy arrays (inputs positionally, attributes as
  keywords read through the record), computed by the one float64 definition in
  :mod:`onnxopt.reference` and returned in X's dtype.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from onnxopt.ir.node import Node
from onnxopt.ir.value import Value


@dataclass(frozen=True)
class Port:
    """One input or output of a fused op: its name, and whether a node may leave it out."""

    name: str
    optional: bool = False


def optional(name: str) -> Port:
    return Port(name, optional=True)


@dataclass(frozen=True, kw_only=True)
class FusedAttrs:
    """The attributes of a fused op, typed: subclasses declare one field (with its default) per
    attribute, and nothing else reads a fused node's attributes.

    Field types are ``bool``, ``int``, ``float``, ``str`` or an enum stored on the node as its
    spelling (the enum's ``str`` writes it, its ``parse`` reads it back: ``MaskKind``).
    Construction checks every value against its field's type (an ``int`` where a ``float`` is
    declared is widened), so a record that exists is well typed; :meth:`of` reads a node,
    :meth:`as_attributes` is what the node stores.
    """

    def __post_init__(self) -> None:
        for name, kind in _field_types(type(self)).items():
            value = getattr(self, name)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
            elif kind is int and isinstance(value, bool):
                raise TypeError(f"{type(self).__name__}.{name} must be int, got {value!r}")
            elif not isinstance(value, kind):
                raise TypeError(f"{type(self).__name__}.{name} must be {kind.__name__}, "
                                f"got {value!r}")

    @classmethod
    def of(cls, node: Node) -> Self:
        """The record of ``node``'s attributes; an attribute the node does not state takes the
        field's default."""
        stated = {name: node.attr(name) for name in _field_types(cls)}
        return cls.from_attributes({k: v for k, v in stated.items() if v is not None})

    @classmethod
    def from_attributes(cls, values: Mapping[str, Any]) -> Self:
        """The record of attribute values as a node stores them (flags as ints, enums spelled);
        a name the record does not declare is a TypeError."""
        kinds = _field_types(cls)
        unknown = sorted(set(values) - set(kinds))
        if unknown:
            raise TypeError(f"{cls.__name__} has no attributes {unknown}")
        return cls(**{name: _read(kinds[name], value) for name, value in values.items()})

    @classmethod
    def names(cls) -> frozenset[str]:
        """The attribute names the record declares."""
        return frozenset(_field_types(cls))

    def as_attributes(self) -> dict[str, Any]:
        """Every field as a node attribute value (flags as ints, enums spelled): the node states
        its whole contract, defaults included."""
        out: dict[str, Any] = {}
        for name in _field_types(type(self)):
            value = getattr(self, name)
            if isinstance(value, enum.Enum):
                value = str(value)
            elif isinstance(value, bool):
                value = int(value)
            out[name] = value
        return out


@functools.cache
def _field_types(cls: type) -> dict[str, type]:
    """Field name → declared type, in declaration order (resolved once per record class)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _read(kind: type, value: Any) -> Any:
    if issubclass(kind, enum.Enum):
        return kind.parse(str(value))
    if kind is bool:
        return bool(value)
    if kind is str:
        return value.decode() if isinstance(value, bytes) else str(value)
    return kind(value)


@dataclass(frozen=True)
class FusedOp:
    """One fused op: name, ports, attribute record, decomposition and reference."""

    name: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    attrs: type[FusedAttrs]
    decompose: Callable[[Any, Node], list[Value]]
    reference: Callable[..., Any]
    doc: str = ""

    def index(self, port: str) -> int:
        """The position of input ``port``."""
        for k, p in enumerate(self.inputs):
            if p.name == port:
                return k
        raise KeyError(f"{self.name} has no input {port!r}")

    def input(self, node: Node, port: str) -> Value | None:
        """``node``'s value on input ``port`` (None where it leaves an optional one out)."""
        return node.input(self.index(port))

