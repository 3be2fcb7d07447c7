"""Read a node's attributes through the KernelInfo API, once per kernel instance.

ORT answers a missing attribute with an error status whose message says so
("No attribute with name..."); only then is the kernel's declared default used.
Any other error (an int where a float was declared) and a missing attribute
without a default fail session creation with the attribute's name.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .ortapi import OrtApi, OrtCallError
from .registry import Attribute, KernelSpec

_MISSING = "No attribute with name"


def _scalar(api: OrtApi, info: int, name: bytes, kind: Any) -> Any:
    if kind is float:
        out = ctypes.c_float()
        api.check(
            api.KernelInfoGetAttribute_float(info, name, ctypes.byref(out)), "float attribute"
        )
        return float(out.value)
    out = ctypes.c_int64()
    api.check(api.KernelInfoGetAttribute_int64(info, name, ctypes.byref(out)), "int attribute")
    return int(out.value)


def _string(api: OrtApi, info: int, name: bytes) -> str:
    size = ctypes.c_size_t(0)
    api.check(
        api.KernelInfoGetAttribute_string(info, name, None, ctypes.byref(size)), "string attribute"
    )
    buffer = ctypes.create_string_buffer(size.value)
    api.check(
        api.KernelInfoGetAttribute_string(info, name, buffer, ctypes.byref(size)),
        "string attribute",
    )
    return buffer.value.decode("utf-8")


def _array(api: OrtApi, info: int, name: bytes, kind: Any) -> list:
    if kind == list[float]:
        getter, element = api.KernelInfoGetAttributeArray_float, ctypes.c_float
    else:
        getter, element = api.KernelInfoGetAttributeArray_int64, ctypes.c_int64
    size = ctypes.c_size_t(0)
    api.check(getter(info, name, None, ctypes.byref(size)), "array attribute")
    values = (element * size.value)()
    api.check(getter(info, name, values, ctypes.byref(size)), "array attribute")
    return [float(v) for v in values] if element is ctypes.c_float else [int(v) for v in values]


def read_one(api: OrtApi, info: int, attribute: Attribute) -> Any:
    """The attribute's value; raises OrtCallError when the node does not have it."""
    name = attribute.name.encode("utf-8")
    if attribute.type is str:
        return _string(api, info, name)
    if attribute.type in (float, int):
        return _scalar(api, info, name, attribute.type)
    return _array(api, info, name, attribute.type)


def read_all(api: OrtApi, info: int, spec: KernelSpec) -> dict[str, Any]:
    """All declared attributes of one node, defaults filled in."""
    values: dict[str, Any] = {}
    for attribute in spec.attributes:
        try:
            values[attribute.name] = read_one(api, info, attribute)
        except OrtCallError as error:
            missing = _MISSING in str(error)
            if missing and not attribute.required:
                values[attribute.name] = attribute.default
                continue
            problem = "is required and the node does not set it" if missing else "cannot be read"
            kind = getattr(attribute.type, "__name__", str(attribute.type))
            raise ValueError(f"attribute {attribute.name!r} ({kind}) {problem}: {error}") from None
    return values
