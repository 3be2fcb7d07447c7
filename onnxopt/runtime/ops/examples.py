"""Small attention graphs, spelled the way exporters write them, that stage 6 binds to
``ai.onnxopt.cuda::FlashAttention`` (the models in ``models/`` have head size 16, below what
the kernel takes). Used by the tests.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.parser
from onnx.helper import tensor_dtype_to_np_dtype

_CODE = {"float32": 1, "float16": 10, "bfloat16": 16}
_TEXT = {"float32": "float", "float16": "float16", "bfloat16": "bfloat16"}


def attention_model(*, heads: int = 8, kv_heads: int = 2, head_size: int = 64,
                    dtype: str = "float16", causal: bool = True, padding: bool = True,
                    opset: int = 18) -> onnx.ModelProto:
    """``softmax(Q·Kᵀ·scale + mask)·V`` over inputs q ``[batch, heads, seq, D]``, k/v
    ``[batch, kv_heads, seq, D]`` (repeated to ``heads`` by Unsqueeze/Expand/Reshape) and, with
    ``padding``, ``attention_mask`` int64 ``[batch, seq]`` turned into ``(1 - m) * -10000``;
    ``causal`` adds ``-10000`` above the diagonal from a Range comparison."""
    code, t = _CODE[dtype], _TEXT[dtype]
    rep = heads // kv_heads
    body = [f"scale = Cast<to={code}>(scale32)"]
    terms = []
    if padding:
        # The mask in float32, cast once: ONNX Runtime's CPU provider has no bfloat16 Sub,
        # Mul, Where or Add (1.30 and 1.31), and the mask probe and the tests run there.
        body += ["pm = Unsqueeze(attention_mask, axes12)", "pmf = Cast<to=1>(pm)",
                 "inv = Sub(one32, pmf)", "padadd = Mul(inv, neg32)"]
        terms.append("padadd")
    if causal:
        body += ["qs = Shape(q)", "sl = Gather<axis=0>(qs, two)", "r = Range(zero_i, sl, one_i)",
                 "ri = Unsqueeze(r, axes1)", "rj = Unsqueeze(r, axes0)",
                 "above = Greater(rj, ri)", "cadd = Where(above, neg32, zero32)"]
        terms.append("cadd")
    kv = []
    for name in ("k", "v"):
        if rep > 1:
            body += [f"{name}u = Unsqueeze({name}, axes2)", f"{name}e = Expand({name}u, expand)",
                     f"{name}r = Reshape({name}e, merged)"]
            kv.append(f"{name}r")
        else:
            kv.append(name)
    body += [f"kt = Transpose<perm=[0,1,3,2]>({kv[0]})", "s = MatMul(q, kt)",
             "scaled = Mul(s, scale)"]
    if len(terms) == 2:
        body += ["mask32 = Add(padadd, cadd)", f"mask = Cast<to={code}>(mask32)",
                 "biased = Add(scaled, mask)"]
    elif terms:
        body += [f"mask = Cast<to={code}>({terms[0]})", "biased = Add(scaled, mask)"]
    else:
        body += ["biased = Identity(scaled)"]
    body += ["p = Softmax<axis=-1>(biased)", f"o = MatMul(p, {kv[1]})"]
    inputs = [f"{t}[batch, {heads}, seq, {head_size}] q",
              f"{t}[batch, {kv_heads}, seq, {head_size}] k",
              f"{t}[batch, {kv_heads}, seq, {head_size}] v"]
    if padding:
        inputs.append("int64[batch, seq] attention_mask")
    consts = (f"int64[2] axes12 = {{1, 2}}, int64[1] axes2 = {{2}}, int64[1] axes1 = {{1}}, "
              f"int64[1] axes0 = {{0}}, int64 two = {{2}}, int64 zero_i = {{0}}, "
              f"int64 one_i = {{1}}, float one32 = {{1}}, float neg32 = {{-10000}}, "
              f"float zero32 = {{0}}, float scale32 = {{{1.0 / math.sqrt(head_size)!r}}}, "
              f"int64[5] expand = {{1, 1, {rep}, 1, 1}}, "
              f"int64[4] merged = {{0, {heads}, -1, {head_size}}}")
    text = (f'<ir_version: 10, opset_import: ["": {opset}]>\n'
            f"attention ({', '.join(inputs)}) => ({t}[batch, {heads}, seq, {head_size}] o)\n"
            f"<{consts}>\n{{\n" + "\n".join(f"  {line}" for line in body) + "\n}")
    model = onnx.parser.parse_model(text)
    model.ir_version = 10
    return model


def attention_feeds(model: onnx.ModelProto, batch: int, seq: int, *, seed: int = 0,
                    pad: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    """Random q, k, v for ``model`` and a right-padded ``attention_mask`` (row i loses its last
    ``pad[i]`` keys)."""

    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else {"batch": batch, "seq": seq}[
            d.dim_param] for d in vi.type.tensor_type.shape.dim]
        if vi.name == "attention_mask":
            mask = np.ones(dims, np.int64)
            for row, count in enumerate(pad):
                if count:
                    mask[row, seq - count:] = 0
            feeds[vi.name] = mask
        else:
            dtype = tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32).astype(dtype)
    return feeds


def with_float32_io(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every bfloat16 graph input and output cast from and to float32 at the
    boundary: ONNX Runtime's Python binding takes and returns no bfloat16 arrays (NumPy has no
    such type), so a bfloat16 model is run from Python through this wrapper."""
    bf16, f32 = onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    casts_in, casts_out = [], []
    for vi in graph.input:
        if vi.type.tensor_type.elem_type == bf16:
            inner = f"{vi.name}.bfloat16"
            for node in graph.node:
                node.input[:] = [inner if i == vi.name else i for i in node.input]
            casts_in.append(onnx.helper.make_node("Cast", [vi.name], [inner], to=bf16))
            vi.type.tensor_type.elem_type = f32
    for vi in graph.output:
        if vi.type.tensor_type.elem_type == bf16:
            inner = f"{vi.name}.bfloat16"
            for node in graph.node:
                node.output[:] = [inner if o == vi.name else o for o in node.output]
                node.input[:] = [inner if i == vi.name else i for i in node.input]
            casts_out.append(onnx.helper.make_node("Cast", [inner], [vi.name], to=f32))
            vi.type.tensor_type.elem_type = f32
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    return out
