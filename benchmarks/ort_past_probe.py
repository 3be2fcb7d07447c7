"""What ONNX Runtime's CPU attention kernels compute on a decode step with a key/value cache.

Probes ``com.microsoft.MultiHeadAttention`` with ``past_key``/``past_value`` (BNSH) and
``present_key``/``present_value`` outputs, with an exact additive ``attention_bias``, with a 2-D
``key_padding_mask`` and with ``unidirectional``, and ``com.microsoft.GroupQueryAttention`` with
``seqlens_k``/``total_sequence_length``, each against the float64 reference
(``onnxopt.reference.attention``) on random inputs with left and right padding, one and several
query rows, several past lengths and batch > 1. Prints one line per fact (max abs error, whether
present is byte-equal to ``Concat(past, new)``). The facts are recorded in benchmarks/RESULTS.md.

    python benchmarks/ort_past_probe.py
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxopt import reference as ref

H, D = 4, 8
MS = "com.microsoft"


def _session(node, inputs, outputs):
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [value(n, t, None) for n, t in inputs],
                              [value(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _bsh(x):  # [B, N, S, D] -> [B, S, N*D]
    b, n, s, d = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(b, s, n * d))


def _keep(b, total, side, rng):
    """int32 [b, total]: row 0 keeps every key (so batch 1 has no padding), row r > 0 pads
    some, at the end (right) or the start (left)."""
    keep = np.ones((b, total), np.int32)
    for r in range(1, b):
        pad = min(total - 1, 1 + r * total // (b + 1))
        if side == "right":
            keep[r, total - pad:] = 0
        elif side == "left":
            keep[r, :pad] = 0
    return keep


def _inputs(b, past, s, rng, heads=H, kv_heads=H):
    q = rng.standard_normal((b, heads, s, D)).astype(np.float32)
    pk, pv = (rng.standard_normal((b, kv_heads, past, D)).astype(np.float32) for _ in range(2))
    nk, nv = (rng.standard_normal((b, kv_heads, s, D)).astype(np.float32) for _ in range(2))
    return q, pk, pv, nk, nv


def _want(q, k, v, keep, causal, scale):
    """Model semantics: additive mask 0 / finfo.min (what Hugging Face exports), causal
    bottom-right, key padding from ``keep``."""
    b, _, s, _ = q.shape
    total = k.shape[2]
    visible = np.broadcast_to(keep[:, None, None, :] != 0, (b, 1, s, total)).copy()
    if causal:
        visible &= ref.attention_mask(s, total, causal=True)[None, None]
    bias = np.where(visible, 0.0, np.finfo(np.float32).min).astype(np.float32)
    return ref.attention(q, k, v, bias=bias, scale=scale, nan_to_zero=False, bias_floor=None), bias


def mha(mode, *, b=2, past=7, s=1, side="right", unidirectional=0, seed=0,
        filter_value=None):
    """``mode``: "bias" (exact mask as attention_bias) or "padding" (key_padding_mask)."""
    rng = np.random.default_rng(seed)
    q, pk, pv, nk, nv = _inputs(b, past, s, rng)
    total = past + s
    keep = _keep(b, total, side, rng)
    scale = 1 / np.sqrt(D)
    k, v = np.concatenate([pk, nk], 2), np.concatenate([pv, nv], 2)
    want, bias = _want(q, k, v, keep, True, scale)
    extra = {"mask_filter_value": filter_value} if filter_value is not None else {}
    names = ["q", "k", "v", "", "kpm" if mode == "padding" else "",
             "bias" if mode == "bias" else "", "past_k", "past_v"]
    node = helper.make_node("MultiHeadAttention", names, ["o", "present_k", "present_v"],
                            domain=MS, num_heads=H, scale=float(scale),
                            unidirectional=unidirectional, **extra)
    feeds = {"q": _bsh(q), "k": _bsh(nk), "v": _bsh(nv), "past_k": pk, "past_v": pv}
    types = [("q", 1), ("k", 1), ("v", 1), ("past_k", 1), ("past_v", 1)]
    if mode == "bias":
        feeds["bias"] = bias
        types.append(("bias", 1))
    else:
        feeds["kpm"] = keep
        types.append(("kpm", TensorProto.INT32))
    o, prk, prv = _session(node, types, ["o", "present_k", "present_v"]).run(None, feeds)
    got = o.reshape(b, s, H, D).transpose(0, 2, 1, 3)
    err = float(np.nanmax(np.abs(got - want))) if np.isfinite(want).all() else float("nan")
    present_equal = np.array_equal(prk, k) and np.array_equal(prv, v)
    return err, present_equal, got, want


def gqa(*, b=2, past=7, s=1, side="none", seed=0):
    """GroupQueryAttention with a separate past buffer (no shared buffer): seqlens_k[b] is the
    row's valid keys - 1, total_sequence_length the longest row's keys."""
    rng = np.random.default_rng(seed)
    hkv = 2
    q, pk, pv, nk, nv = _inputs(b, past, s, rng, kv_heads=hkv)
    total = past + s
    keep = _keep(b, total, side, rng)
    seqlens = (keep.sum(1) - 1).astype(np.int32)
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "past_k", "past_v",
                                                    "seqlens_k", "total"],
                            ["o", "present_k", "present_v"], domain=MS, num_heads=H,
                            kv_num_heads=hkv, scale=float(1 / np.sqrt(D)))
    sess = _session(node, [("q", 1), ("k", 1), ("v", 1), ("past_k", 1), ("past_v", 1),
                           ("seqlens_k", TensorProto.INT32), ("total", TensorProto.INT32)],
                    ["o", "present_k", "present_v"])
    o, prk, _prv = sess.run(None, {"q": _bsh(q), "k": _bsh(nk), "v": _bsh(nv), "past_k": pk,
                                  "past_v": pv, "seqlens_k": seqlens,
                                  "total": np.array(total, np.int32)})
    k, v = np.concatenate([pk, nk], 2), np.concatenate([pv, nv], 2)
    want, _ = _want(q, k, v, keep, True, 1 / np.sqrt(D))
    got = o.reshape(b, s, H, D).transpose(0, 2, 1, 3)
    return (float(np.abs(got - want).max()), prk.shape, np.array_equal(prk, k))


def mha_padding_edges() -> list[str]:
    """key_padding_mask where it differs from the model's mask: a decode row whose every key is
    padded (the model's float-minimum mask averages V), and a padded key scoring 2e4 above the
    visible ones (-10,000 does not hide it)."""
    lines = []
    rng = np.random.default_rng(5)
    b, past, total = 2, 6, 7
    q, pk, pv, nk, nv = _inputs(b, past, 1, rng)
    keep = np.ones((b, total), np.int32)
    keep[1] = 0  # row 1: every key padded
    k, v = np.concatenate([pk, nk], 2), np.concatenate([pv, nv], 2)
    big_k = k.copy()
    big_k[0, :, 2] = q[0, :, 0] * (2e4 * np.sqrt(D) / (q[0, :, 0] ** 2).sum(-1, keepdims=True))
    keep[0, 2] = 0  # row 0: key 2 padded, its score 2e4 above 0
    for label, kk in (("every key padded (row 1) / padded key scoring 2e4 (row 0)", big_k),):
        pk2 = np.ascontiguousarray(kk[:, :, :past])
        nk2 = np.ascontiguousarray(kk[:, :, past:])
        want, _ = _want(q, kk, v, keep, False, 1 / np.sqrt(D))
        for fv in (None, float(np.finfo(np.float32).min)):
            extra = {"mask_filter_value": fv} if fv is not None else {}
            node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "kpm", "",
                                                           "past_k", "past_v"],
                                    ["o", "present_k", "present_v"], domain=MS, num_heads=H,
                                    scale=float(1 / np.sqrt(D)), **extra)
            sess = _session(node, [("q", 1), ("k", 1), ("v", 1), ("past_k", 1), ("past_v", 1),
                                   ("kpm", TensorProto.INT32)], ["o", "present_k", "present_v"])
            o = sess.run(None, {"q": _bsh(q), "k": _bsh(nk2), "v": _bsh(nv), "past_k": pk2,
                                "past_v": pv, "kpm": keep})[0]
            got = o.reshape(b, 1, H, D).transpose(0, 2, 1, 3)
            errs = [float(np.abs(got[r] - want[r]).max()) for r in range(b)]
            lines.append(f"MHA key_padding_mask decode, {label}, mask_filter_value={fv}: "
                         f"max|err| row 0 {errs[0]:.2e}, row 1 {errs[1]:.2e}")
    return lines


def main() -> None:
    print(f"onnxruntime {ort.__version__}")
    for mode in ("bias", "padding"):
        for uni in (0, 1):
            for side in ("none", "right", "left"):
                for b, past, s in ((1, 7, 1), (3, 9, 1), (2, 16, 1), (3, 5, 3), (2, 0, 4)):
                    try:
                        err, same, got, _ = mha(mode, b=b, past=past, s=s, side=side,
                                                   unidirectional=uni)
                        nan = bool(np.isnan(got).any())
                        print(f"MHA {mode:7s} unidirectional={uni} pad={side:5s} b={b} past={past}"
                              f" s={s}: max|err| {err:.2e} present==concat {same} nan {nan}")
                    except Exception as e:  # noqa: BLE001
                        print(f"MHA {mode} unidirectional={uni} pad={side} b={b} past={past} s={s}:"
                              f" ERROR {str(e).splitlines()[0][:150]}")
    for line in mha_padding_edges():
        print(line)
    for side in ("none", "right", "left"):
        for b, past, s in ((1, 7, 1), (3, 9, 1), (3, 5, 3)):
            try:
                err, shape, same = gqa(b=b, past=past, s=s, side=side)
                print(f"GQA pad={side:5s} b={b} past={past} s={s}: max|err| {err:.2e} present "
                      f"{shape} ==concat {same}")
            except Exception as e:  # noqa: BLE001
                print(f"GQA pad={side} b={b} past={past} s={s}: ERROR "
                      f"{str(e).splitlines()[0][:150]}")


if __name__ == "__main__":
    main()
