#!/usr/bin/env python3
"""Regenerate the "other exporters" test models in this folder.

These are small models in the shapes that exporters other than the two PyTorch
exporters of ``models/export.py`` write (an old opset-11 TorchScript CNN,
tf2onnx, TorchScript control flow, weight-only int8, Hugging Face Optimum's
merged KV-cache decoders). Random weights, fixed seeds, nothing downloaded.
See README.md in this folder for what each file imitates.

Needs its own venv (torch must never be a dependency of onnxopt itself)::

    python3 -m venv /tmp/venv-other && . /tmp/venv-other/bin/activate
    pip install torch==2.13.0 transformers==4.53.3 optimum==1.27.0 onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6
    python models/other/build.py                      # all models, then check them
    python models/other/build.py --only cnn_opset11,int8_weight_only --out /tmp/o
    python models/other/build.py --summary            # print the README table

``transformers`` is pinned to 4.53.3 because Optimum 1.27 (the last release that
still writes ``decoder_model_merged.onnx``, with ``legacy=True``) requires
``transformers<4.54``; optimum 2.x / optimum-onnx 0.1 export one with-past
``model.onnx`` and never merge. Only the two merged decoders use transformers
and Optimum; the other models need torch (or only onnx) and build with any
transformers.

Every file gets an explicit ``ir_version`` (the one its imitated exporter
writes, never above 10: onnx 1.23 writes 14 by default and ONNX Runtime 1.31
accepts at most 13), is checked with ``onnx.checker.check_model(full_check=True)``
and is run in ONNX Runtime (CPU) against a reference (PyTorch, NumPy, or for
the merged decoders both PyTorch and the unmerged Optimum exports).
Regenerating with the versions above gives byte-identical files.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import io
import math
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is built locally; never reach a hub

HERE = os.path.dirname(os.path.abspath(__file__))

MODELS = [
    "cnn_opset11",
    "tf2onnx_style",
    "stft_reflect_if",
    "int8_weight_only",
    "merged_decoder_gpt2",
    "merged_decoder_llama",
]

PINNED = {"torch": "2.13.0", "transformers": "4.53.3", "optimum": "1.27.0", "onnx": "1.23.2",
          "onnxruntime": "1.31.1", "numpy": "2.4.6"}

SEEDS = {
    "cnn_opset11": 101,
    "tf2onnx_style": 102,
    "stft_reflect_if": 103,
    "int8_weight_only": 104,
    "merged_decoder_gpt2": 105,
    "merged_decoder_llama": 106,
}


def _doc(name: str, how: str) -> str:
    return f"onnxopt test model (models/other/{name}.onnx): random weights, seed {SEEDS[name]}; {how}"


def _ort_session(proto: onnx.ModelProto, exact: bool = False):
    """exact: only ORT's basic graph optimizations (no fusions into contrib ops)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if exact:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _close(name: str, what: str, got: np.ndarray, ref: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        raise RuntimeError(f"{name}: {what}: shape {got.shape} != {ref.shape}")
    if not np.allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True):
        err = np.nanmax(np.abs(got.astype(np.float64) - ref))
        raise RuntimeError(f"{name}: {what}: max abs error {err:g}")


# =========================================================================== 1. CNN, TorchScript opset 11


def build_cnn_opset11() -> tuple[onnx.ModelProto, list[str]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)  # folded into conv1 by the exporter
            self.conv2 = nn.Conv2d(16, 16, 3, padding=1, groups=16)  # depthwise
            self.bn2 = nn.BatchNorm2d(16)  # folded into conv2
            self.conv3 = nn.Conv2d(16, 32, 1)
            self.bn3 = nn.BatchNorm2d(32)  # after a Relu: stays BatchNormalization
            self.se1 = nn.Linear(32, 8)
            self.se2 = nn.Linear(8, 32)
            self.conv4 = nn.Conv2d(32, 16, 3, stride=2)
            self.fc = nn.Linear(16 * 3 * 3, 10)
            with torch.no_grad():
                for bn in (self.bn1, self.bn2, self.bn3):  # non-trivial statistics
                    bn.running_mean.uniform_(-0.5, 0.5)
                    bn.running_var.uniform_(0.5, 2.0)
                    bn.weight.uniform_(0.5, 1.5)
                    bn.bias.uniform_(-0.2, 0.2)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))  # Conv, Relu
            x = F.relu6(self.bn2(self.conv2(x)))  # Conv, Clip(0, 6)
            x = F.max_pool2d(x, 2)  # MaxPool 16x16
            x = self.bn3(F.relu(self.conv3(x)))  # Conv, Relu, BatchNormalization
            s = F.adaptive_avg_pool2d(x, 1).squeeze(-1).squeeze(-1)  # GlobalAveragePool, Squeeze{axes}
            s = torch.sigmoid(self.se2(F.relu(self.se1(s))))  # Gemm, Relu, Gemm, Sigmoid
            x = x * s.unsqueeze(-1).unsqueeze(-1)  # Unsqueeze{axes}, Mul
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")  # Resize 32x32
            x = x[:, :, 1:-1, 1:-1]  # Slice 30x30
            x = F.pad(x, (1, 1, 1, 1))  # Pad (constant) 32x32
            x = F.max_pool2d(F.relu(self.conv4(x)), 4)  # Conv s2 15x15, Relu, MaxPool 3x3
            return self.fc(torch.flatten(x, 1))  # Flatten, Gemm

    torch.manual_seed(SEEDS["cnn_opset11"])
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 32, 32)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), buf, dynamo=False, opset_version=11,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            do_constant_folding=True,
        )
    proto = onnx.load_from_string(buf.getvalue())
    proto.ir_version = 6  # what the TorchScript exporter writes for opset 11
    proto.doc_string = _doc("cnn_opset11", "torch.onnx.export(dynamo=False, opset_version=11), eval mode")

    problems = []
    sess = _ort_session(proto)
    for b in (1, 2, 3):
        xi = torch.randn(b, 3, 32, 32)
        with torch.no_grad():
            ref = model(xi).numpy()
        got = sess.run(None, {"input": xi.numpy()})[0]
        try:
            _close("cnn_opset11", f"batch {b}", got, ref)
        except RuntimeError as e:
            problems.append(str(e))
    return proto, problems


# =========================================================================== 2. tf2onnx style


def build_tf2onnx_style() -> tuple[onnx.ModelProto, list[str]]:
    """A Keras-like model as tf2onnx (opset 13) writes it, built with onnx.helper.

    input_1:0 [N,16,16,3] NHWC -> Conv2D(3->8, 3x3 SAME) + ReLU -> Conv2D(8->16, 3x3, stride 2,
    SAME = asymmetric pads [0,0,1,1]) + ReLU -> Dropout (Identity chain) -> Reshape [-1,64,16]
    -> Conv1D(16->16, k3 SAME) as expand_dims/Conv2D/squeeze + ReLU -> Dense(16->32) + ReLU
    -> LayerNormalization(eps 1e-3, decomposed) -> Dense(32->16) -> GlobalAveragePooling1D
    (ReduceMean keepdims 0) -> Dense(16->10) -> Softmax -> Identity:0
    """
    name = "tf2onnx_style"
    rng = np.random.default_rng(SEEDS[name])
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    ref_w: dict[str, np.ndarray] = {}

    def init(n: str, a: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(a, n))
        ref_w[n] = a
        return n

    def w(n: str, shape, scale=None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
        s = scale if scale is not None else 1.0 / math.sqrt(fan_in)
        return init(n, (rng.standard_normal(shape) * s).astype(np.float32))

    def node(op, ins, outs, nm, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=nm, **attrs))
        return outs[0]

    # Conv2D 3->8 3x3 SAME
    t = node("Transpose", ["input_1:0"], ["model/conv2d/BiasAdd__6:0"], "model/conv2d/BiasAdd__6", perm=[0, 3, 1, 2])
    t = node("Conv", [t, w("model/conv2d/Conv2D/ReadVariableOp:0", (8, 3, 3, 3)),
                      init("model/conv2d/BiasAdd/ReadVariableOp:0", (rng.standard_normal(8) * 0.1).astype(np.float32))],
             ["model/conv2d/BiasAdd__7:0"], "model/conv2d/BiasAdd", dilations=[1, 1], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1], strides=[1, 1], group=1)
    t = node("Transpose", [t], ["model/conv2d/BiasAdd:0"], "model/conv2d/BiasAdd__8", perm=[0, 2, 3, 1])
    t = node("Relu", [t], ["model/conv2d/Relu:0"], "model/conv2d/Relu")
    # Conv2D 8->16 3x3 stride 2 SAME (TF pads bottom/right only)
    t = node("Transpose", [t], ["model/conv2d_1/BiasAdd__10:0"], "model/conv2d_1/BiasAdd__10", perm=[0, 3, 1, 2])
    t = node("Conv", [t, w("model/conv2d_1/Conv2D/ReadVariableOp:0", (16, 8, 3, 3)),
                      init("model/conv2d_1/BiasAdd/ReadVariableOp:0", (rng.standard_normal(16) * 0.1).astype(np.float32))],
             ["model/conv2d_1/BiasAdd__11:0"], "model/conv2d_1/BiasAdd", dilations=[1, 1], kernel_shape=[3, 3],
             pads=[0, 0, 1, 1], strides=[2, 2], group=1)
    t = node("Transpose", [t], ["model/conv2d_1/BiasAdd:0"], "model/conv2d_1/BiasAdd__12", perm=[0, 2, 3, 1])
    t = node("Relu", [t], ["model/conv2d_1/Relu:0"], "model/conv2d_1/Relu")
    # Dropout at inference and a tf.identity: an Identity chain
    t = node("Identity", [t], ["model/dropout/Identity:0"], "model/dropout/Identity")
    t = node("Identity", [t], ["model/tf.identity/Identity:0"], "model/tf.identity/Identity")
    # Reshape to tokens [N, 64, 16]
    t = node("Reshape", [t, init("new_shape__31", np.array([-1, 64, 16], np.int64))],
             ["model/reshape/Reshape:0"], "model/reshape/Reshape")
    # Conv1D 16->16 k3 SAME: expand_dims -> Conv2D -> squeeze
    t = node("Unsqueeze", [t, init("const_axes__33", np.array([1], np.int64))],
             ["model/conv1d/Conv1D/ExpandDims:0"], "model/conv1d/Conv1D/ExpandDims")
    t = node("Transpose", [t], ["model/conv1d/Conv1D__35:0"], "model/conv1d/Conv1D__35", perm=[0, 3, 1, 2])
    t = node("Conv", [t, w("model/conv1d/Conv1D/ExpandDims_1:0", (16, 16, 1, 3))],
             ["model/conv1d/Conv1D__36:0"], "model/conv1d/Conv1D", dilations=[1, 1], kernel_shape=[1, 3],
             pads=[0, 1, 0, 1], strides=[1, 1], group=1)
    t = node("Transpose", [t], ["model/conv1d/Conv1D__37:0"], "model/conv1d/Conv1D__37", perm=[0, 2, 3, 1])
    t = node("Squeeze", [t, init("const_axes__38", np.array([1], np.int64))],
             ["model/conv1d/Conv1D/Squeeze:0"], "model/conv1d/Conv1D/Squeeze")
    t = node("Add", [t, init("model/conv1d/BiasAdd/ReadVariableOp:0", (rng.standard_normal(16) * 0.1).astype(np.float32))],
             ["model/conv1d/BiasAdd:0"], "model/conv1d/BiasAdd")
    t = node("Relu", [t], ["model/conv1d/Relu:0"], "model/conv1d/Relu")
    # Dense 16->32 + ReLU (Tensordot -> MatMul)
    t = node("MatMul", [t, w("model/dense/Tensordot/ReadVariableOp:0", (16, 32))],
             ["model/dense/Tensordot/MatMul:0"], "model/dense/Tensordot/MatMul")
    t = node("Add", [t, init("model/dense/BiasAdd/ReadVariableOp:0", (rng.standard_normal(32) * 0.1).astype(np.float32))],
             ["model/dense/BiasAdd:0"], "model/dense/BiasAdd")
    t = node("Relu", [t], ["model/dense/Relu:0"], "model/dense/Relu")
    # LayerNormalization (Keras, epsilon 1e-3), decomposed
    ln = "model/layer_normalization"
    mean = node("ReduceMean", [t], [f"{ln}/moments/mean:0"], f"{ln}/moments/mean", axes=[-1], keepdims=1)
    d = node("Sub", [t, mean], [f"{ln}/sub:0"], f"{ln}/sub")
    sq = node("Pow", [d, init(f"{ln}/pow/y:0", np.array(2.0, np.float32))], [f"{ln}/pow:0"], f"{ln}/pow")
    var = node("ReduceMean", [sq], [f"{ln}/moments/variance:0"], f"{ln}/moments/variance", axes=[-1], keepdims=1)
    ve = node("Add", [var, init(f"{ln}/add/y:0", np.array(1e-3, np.float32))], [f"{ln}/add:0"], f"{ln}/add")
    sd = node("Sqrt", [ve], [f"{ln}/Sqrt:0"], f"{ln}/Sqrt")
    t = node("Div", [d, sd], [f"{ln}/truediv:0"], f"{ln}/truediv")
    t = node("Mul", [t, init(f"{ln}/mul/ReadVariableOp:0", (1.0 + 0.1 * rng.standard_normal(32)).astype(np.float32))],
             [f"{ln}/mul:0"], f"{ln}/mul")
    t = node("Add", [t, init(f"{ln}/add_1/ReadVariableOp:0", (0.1 * rng.standard_normal(32)).astype(np.float32))],
             [f"{ln}/add_1:0"], f"{ln}/add_1")
    # Dense 32->16
    t = node("MatMul", [t, w("model/dense_1/Tensordot/ReadVariableOp:0", (32, 16))],
             ["model/dense_1/Tensordot/MatMul:0"], "model/dense_1/Tensordot/MatMul")
    t = node("Add", [t, init("model/dense_1/BiasAdd/ReadVariableOp:0", (rng.standard_normal(16) * 0.1).astype(np.float32))],
             ["model/dense_1/BiasAdd:0"], "model/dense_1/BiasAdd")
    # GlobalAveragePooling1D
    t = node("ReduceMean", [t], ["model/global_average_pooling1d/Mean:0"], "model/global_average_pooling1d/Mean",
             axes=[1], keepdims=0)
    # Dense 16->10 + softmax
    t = node("MatMul", [t, w("model/dense_2/MatMul/ReadVariableOp:0", (16, 10))],
             ["model/dense_2/MatMul:0"], "model/dense_2/MatMul")
    t = node("Add", [t, init("model/dense_2/BiasAdd/ReadVariableOp:0", (rng.standard_normal(10) * 0.1).astype(np.float32))],
             ["model/dense_2/BiasAdd:0"], "model/dense_2/BiasAdd")
    t = node("Softmax", [t], ["model/dense_2/Softmax:0"], "model/dense_2/Softmax", axis=-1)
    node("Identity", [t], ["Identity:0"], "Identity")

    graph = helper.make_graph(
        nodes, "tf2onnx",
        [helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, ["unk__57", 16, 16, 3])],
        [helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, ["unk__58", 10])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="tf2onnx", producer_version="1.16.1 15c810")
    proto.ir_version = 7  # what tf2onnx writes for opset 13
    proto.doc_string = _doc(name, "built with onnx.helper in tf2onnx's style (tf2onnx 1.16, opset 13)")

    # NumPy reference of the same computation, written the Keras way (NHWC)
    def ref(x: np.ndarray) -> np.ndarray:
        def conv_nhwc(x, wt, b, stride, pads):  # wt OIHW; pads [top, left, bottom, right]
            x = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
            o, _i, kh, kw = wt.shape
            n, h, ww, _ = x.shape
            oh, ow = (h - kh) // stride + 1, (ww - kw) // stride + 1
            out = np.zeros((n, oh, ow, o), np.float64)
            for a in range(kh):
                for c in range(kw):
                    patch = x[:, a:a + stride * oh:stride, c:c + stride * ow:stride, :]
                    out += patch @ wt[:, :, a, c].T
            return out + (b if b is not None else 0)

        r = ref_w
        h = np.maximum(conv_nhwc(x, r["model/conv2d/Conv2D/ReadVariableOp:0"], r["model/conv2d/BiasAdd/ReadVariableOp:0"], 1, [1, 1, 1, 1]), 0)
        h = np.maximum(conv_nhwc(h, r["model/conv2d_1/Conv2D/ReadVariableOp:0"], r["model/conv2d_1/BiasAdd/ReadVariableOp:0"], 2, [0, 0, 1, 1]), 0)
        h = h.reshape(-1, 64, 16)
        h = conv_nhwc(h[:, None], r["model/conv1d/Conv1D/ExpandDims_1:0"], r["model/conv1d/BiasAdd/ReadVariableOp:0"], 1, [0, 1, 0, 1])[:, 0]
        h = np.maximum(h, 0)
        h = np.maximum(h @ r["model/dense/Tensordot/ReadVariableOp:0"] + r["model/dense/BiasAdd/ReadVariableOp:0"], 0)
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        h = (h - mu) / np.sqrt(var + 1e-3) * r[f"{ln}/mul/ReadVariableOp:0"] + r[f"{ln}/add_1/ReadVariableOp:0"]
        h = h @ r["model/dense_1/Tensordot/ReadVariableOp:0"] + r["model/dense_1/BiasAdd/ReadVariableOp:0"]
        h = h.mean(1)
        h = h @ r["model/dense_2/MatMul/ReadVariableOp:0"] + r["model/dense_2/BiasAdd/ReadVariableOp:0"]
        e = np.exp(h - h.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    problems = []
    sess = _ort_session(proto)
    for b in (1, 2, 3):
        x = rng.standard_normal((b, 16, 16, 3)).astype(np.float32)
        try:
            _close(name, f"batch {b}", sess.run(None, {"input_1:0": x})[0], ref(x.astype(np.float64)))
        except RuntimeError as e:
            problems.append(str(e))
    return proto, problems


# =========================================================================== 3. STFT front-end, reflect pad in If


STFT_N_FFT = 64
STFT_HOP = 16
STFT_MELS = 16
STFT_MIN_LEN = 256  # shorter clips get an extra reflect pad, inside the If


def build_stft_reflect_if() -> tuple[onnx.ModelProto, list[str]]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class LogMelFrontEnd(nn.Module):
        """STFT (as a strided Conv1d with windowed DFT kernels) -> power -> mel -> log."""

        def __init__(self):
            super().__init__()
            n_fft = STFT_N_FFT
            self.n_fft = n_fft
            self.hop = STFT_HOP
            self.pad = n_fft // 2
            self.min_len = STFT_MIN_LEN
            self.n_bins = n_fft // 2 + 1
            win = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
            k = torch.arange(self.n_bins, dtype=torch.float64)[:, None]
            n = torch.arange(n_fft, dtype=torch.float64)[None, :]
            ang = 2.0 * math.pi * k * n / n_fft
            basis = torch.cat([torch.cos(ang), -torch.sin(ang)], 0) * win[None, :]
            self.register_buffer("dft_basis", basis.float()[:, None, :])  # [2*bins, 1, n_fft]
            self.register_buffer("mel_fb", torch.rand(self.n_bins, STFT_MELS) / self.n_bins)  # random "mel" matrix

        def forward(self, audio: torch.Tensor) -> torch.Tensor:
            x = audio.unsqueeze(1)  # [B, 1, T]
            if x.size(-1) < self.min_len:  # short clip: extend it by reflection first (ONNX If)
                x = F.pad(x, (self.pad, self.pad), mode="reflect")
            x = F.pad(x, (self.pad, self.pad), mode="reflect")  # center=True padding, as torch.stft does
            spec = F.conv1d(x, self.dft_basis, stride=self.hop)  # [B, 2*bins, frames]
            re = spec[:, : self.n_bins]
            im = spec[:, self.n_bins:]
            power = re * re + im * im
            mel = torch.matmul(power.transpose(1, 2), self.mel_fb)  # [B, frames, mels]
            return torch.log(torch.clamp(mel, min=1e-6)).transpose(1, 2)  # [B, mels, frames]

    torch.manual_seed(SEEDS["stft_reflect_if"])
    eager = LogMelFrontEnd().eval()
    model = torch.jit.script(eager)
    x = torch.randn(2, 200)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), buf, dynamo=False, opset_version=17,
            input_names=["audio"], output_names=["log_mel"],
            dynamic_axes={"audio": {0: "batch", 1: "samples"}, "log_mel": {0: "batch", 2: "frames"}},
            do_constant_folding=True,
        )
    proto = onnx.load_from_string(buf.getvalue())
    proto.ir_version = 8  # what the TorchScript exporter writes for opset 17
    proto.doc_string = _doc(
        "stft_reflect_if",
        "torch.jit.script module, torch.onnx.export(dynamo=False, opset_version=17); "
        f"runs only for samples > {STFT_N_FFT // 2} (reflect pad); samples < {STFT_MIN_LEN} take the If's then-branch",
    )

    problems = []
    ifs = [n for n in proto.graph.node if n.op_type == "If"]
    outer_pads = [n for n in proto.graph.node if n.op_type == "Pad"]
    inner_pads = [n for i in ifs for a in i.attribute for n in a.g.node if n.op_type == "Pad"]
    if len(ifs) != 1 or len(outer_pads) != 1 or len(inner_pads) != 1:
        problems.append(f"stft_reflect_if: expected 1 If, 1 outer Pad, 1 Pad in a branch; got {len(ifs)}/{len(outer_pads)}/{len(inner_pads)}")
    sess = _ort_session(proto)
    for b, t in ((1, 33), (2, 100), (1, 255), (2, 256), (3, 1000)):
        xi = torch.randn(b, t)
        with torch.no_grad():
            ref = eager(xi).numpy()
        try:
            _close("stft_reflect_if", f"batch {b} samples {t}", sess.run(None, {"audio": xi.numpy()})[0], ref,
                   rtol=1e-4, atol=1e-4)
        except RuntimeError as e:
            problems.append(str(e))
    return proto, problems


# =========================================================================== 4. weight-only int8


def build_int8_weight_only() -> tuple[onnx.ModelProto, list[str]]:
    """int8 weights -> DequantizeLinear(per-channel, axis=1) -> MatMul, float activations.

    hidden_states [batch, seq, 64]
      block 1: LayerNormalization -> fc1 (64->128) -> Gelu (exact) -> fc2 (128->64) -> + residual
      block 2: LayerNormalization -> fc3 (64->128) -> Gelu (tanh)  -> fc4 (128->64) -> + residual
      final LayerNormalization -> head (64->64, no bias) -> output
    fc1/fc3 have an explicit int8 zero point of 0 (ORT's symmetric QDQ writes one); fc2/fc4/head have none.
    """
    name = "int8_weight_only"
    rng = np.random.default_rng(SEEDS[name])
    inits, nodes = [], []
    ref_w: dict[str, np.ndarray] = {}

    def init(n, a):
        inits.append(numpy_helper.from_array(a, n))
        ref_w[n] = a
        return n

    def qlinear(x: str, prefix: str, k: int, n: int, zero_point: bool, bias: bool) -> str:
        wf = rng.standard_normal((k, n)) / math.sqrt(k)
        scale = (np.abs(wf).max(axis=0) / 127.0).astype(np.float32)  # per output channel
        q = np.clip(np.round(wf / scale), -127, 127).astype(np.int8)
        ins = [init(f"{prefix}.weight_quantized", q), init(f"{prefix}.weight_scale", scale)]
        if zero_point:
            ins.append(init(f"{prefix}.weight_zero_point", np.zeros(n, np.int8)))
        wdq = f"{prefix}.weight_dequantized"
        nodes.append(helper.make_node("DequantizeLinear", ins, [wdq], name=f"{prefix}.weight_DequantizeLinear", axis=1))
        y = f"/{prefix}/MatMul_output_0"
        nodes.append(helper.make_node("MatMul", [x, wdq], [y], name=f"/{prefix}/MatMul"))
        if bias:
            b = init(f"{prefix}.bias", (0.05 * rng.standard_normal(n)).astype(np.float32))
            y2 = f"/{prefix}/Add_output_0"
            nodes.append(helper.make_node("Add", [y, b], [y2], name=f"/{prefix}/Add"))
            y = y2
        return y

    def layernorm(x: str, prefix: str) -> str:
        g = init(f"{prefix}.weight", (1.0 + 0.1 * rng.standard_normal(64)).astype(np.float32))
        b = init(f"{prefix}.bias", (0.1 * rng.standard_normal(64)).astype(np.float32))
        y = f"/{prefix}/LayerNormalization_output_0"
        nodes.append(helper.make_node("LayerNormalization", [x, g, b], [y], name=f"/{prefix}/LayerNormalization",
                                      axis=-1, epsilon=1e-5))
        return y

    def gelu(x: str, prefix: str, approximate: str) -> str:
        y = f"/{prefix}/Gelu_output_0"
        nodes.append(helper.make_node("Gelu", [x], [y], name=f"/{prefix}/Gelu", approximate=approximate))
        return y

    h = "hidden_states"
    for i, approx, fc_a, fc_b in ((0, "none", "fc1", "fc2"), (1, "tanh", "fc3", "fc4")):
        t = layernorm(h, f"layers.{i}.ln")
        t = qlinear(t, f"layers.{i}.{fc_a}", 64, 128, zero_point=True, bias=True)
        t = gelu(t, f"layers.{i}.act", approx)
        t = qlinear(t, f"layers.{i}.{fc_b}", 128, 64, zero_point=False, bias=True)
        r = f"/layers.{i}/Add_output_0"
        nodes.append(helper.make_node("Add", [h, t], [r], name=f"/layers.{i}/Add"))
        h = r
    t = layernorm(h, "final_ln")
    t = qlinear(t, "head", 64, 64, zero_point=False, bias=False)
    nodes.append(helper.make_node("Identity", [t], ["output"], name="/Identity"))

    graph = helper.make_graph(
        nodes, "int8_weight_only",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", 64])],
        initializer=inits,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="onnx.helper")
    proto.ir_version = 10  # opset 21 needs IR 10
    proto.doc_string = _doc(name, "built with onnx.helper, opset 21: weight-only int8 (DequantizeLinear per channel -> MatMul)")

    from math import erf

    verf = np.vectorize(erf)

    def ref(x):
        def ln(x, p):
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + 1e-5) * ref_w[f"{p}.weight"] + ref_w[f"{p}.bias"]

        def lin(x, p, bias=True):
            wq = ref_w[f"{p}.weight_quantized"].astype(np.float64) * ref_w[f"{p}.weight_scale"]
            return x @ wq + (ref_w[f"{p}.bias"] if bias else 0)

        h = x
        for i, (a, b, approx) in enumerate((("fc1", "fc2", "none"), ("fc3", "fc4", "tanh"))):
            t = lin(ln(h, f"layers.{i}.ln"), f"layers.{i}.{a}")
            if approx == "none":
                t = 0.5 * t * (1 + verf(t / math.sqrt(2)))
            else:
                t = 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3)))
            h = h + lin(t, f"layers.{i}.{b}")
        return lin(ln(h, "final_ln"), "head", bias=False)

    # ONNX Runtime (1.31, default ORT_ENABLE_ALL) fuses DequantizeLinear(int8, per channel) -> MatMul
    # into com.microsoft MatMulNBits(bits=8, accuracy_level=4), which quantizes the activations to
    # int8 too: about 1% of the output range off the exact result. So check exactly with basic
    # optimizations only, and the default session within 2% of the output range.
    problems = []
    exact, default = _ort_session(proto, exact=True), _ort_session(proto)
    for b, s in ((1, 7), (2, 16)):
        x = rng.standard_normal((b, s, 64)).astype(np.float32)
        r = ref(x.astype(np.float64))
        try:
            _close(name, f"batch {b} seq {s}", exact.run(None, {"hidden_states": x})[0], r, rtol=1e-4, atol=1e-4)
            _close(name, f"batch {b} seq {s} (ORT default optimizations)", default.run(None, {"hidden_states": x})[0], r,
                   rtol=0, atol=0.02 * float(np.abs(r).max()))
        except RuntimeError as e:
            problems.append(str(e))
    return proto, problems


# =========================================================================== 5. Optimum merged decoders

DEC_HIDDEN, DEC_LAYERS, DEC_HEADS, DEC_VOCAB, DEC_POS, DEC_INTER = 64, 2, 4, 1000, 128, 128


def _patch_torch_for_optimum_127() -> None:
    """Let Optimum 1.27 (written for torch <= 2.8) run on torch 2.13.

    * torch 2.9+ moved the TorchScript symbolic helpers to
      torch.onnx._internal.torchscript_exporter; Optimum's model_patcher imports
      six names from torch.onnx.symbolic_opset14. Alias them there.
    * torch 2.9+ made dynamo=True the default of torch.onnx.export; Optimum 1.27
      does not pass ``dynamo``. Force the TorchScript exporter it was written for.
    """
    import torch
    import torch.onnx
    import torch.onnx.symbolic_opset14 as pub
    from torch.onnx._internal.torchscript_exporter import symbolic_opset14 as ts

    for n in ("_attention_scale", "_causal_attention_mask", "_onnx_symbolic", "_type_utils", "jit_utils", "symbolic_helper"):
        if not hasattr(pub, n):
            setattr(pub, n, getattr(ts, n))
    if getattr(torch.onnx.export, "_onnxopt_forced_ts", False):
        return
    orig = torch.onnx.export

    def export(*args, **kwargs):
        kwargs["dynamo"] = False
        return orig(*args, **kwargs)

    export._onnxopt_forced_ts = True
    torch.onnx.export = export


def _hf_decoder(kind: str):
    import torch
    import transformers

    torch.manual_seed(SEEDS[f"merged_decoder_{kind}"])
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_embd=DEC_HIDDEN, n_layer=DEC_LAYERS, n_head=DEC_HEADS, n_inner=DEC_INTER,
                                      vocab_size=DEC_VOCAB, n_positions=DEC_POS)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(hidden_size=DEC_HIDDEN, num_hidden_layers=DEC_LAYERS, num_attention_heads=DEC_HEADS,
                                       num_key_value_heads=2, intermediate_size=DEC_INTER, vocab_size=DEC_VOCAB,
                                       max_position_embeddings=DEC_POS)
        model = transformers.LlamaForCausalLM(cfg)
    return model.eval()


def _decoder_feeds(kind: str, proto: onnx.ModelProto, batch: int, seq: int, past: int, rng, with_flag: bool | None):
    kv = 4 if kind == "gpt2" else 2
    feeds = {"input_ids": rng.integers(0, DEC_VOCAB, (batch, seq), dtype=np.int64)}
    mask = np.ones((batch, past + seq), np.int64)
    if batch > 1:
        mask[1, : max(1, (past + seq) // 3)] = 0  # left padding in the second row
    feeds["attention_mask"] = mask
    names = [i.name for i in proto.graph.input]
    for n in names:
        if n.startswith("past_key_values."):
            feeds[n] = rng.standard_normal((batch, kv, past, DEC_HIDDEN // DEC_HEADS)).astype(np.float32)
    if with_flag is not None:
        feeds["use_cache_branch"] = np.array([with_flag])
    return {k: v for k, v in feeds.items() if k in names}


def _torch_decoder_ref(model, feeds: dict) -> list[np.ndarray]:
    import torch
    from transformers import DynamicCache

    past = None
    keys = sorted({int(k.split(".")[1]) for k in feeds if k.startswith("past_key_values.")})
    if keys and feeds[f"past_key_values.{keys[0]}.key"].shape[2] > 0:
        past = DynamicCache()
        for i in keys:
            past.update(torch.from_numpy(feeds[f"past_key_values.{i}.key"]),
                        torch.from_numpy(feeds[f"past_key_values.{i}.value"]), i)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(feeds["input_ids"]),
                    attention_mask=torch.from_numpy(feeds["attention_mask"]),
                    past_key_values=past, use_cache=True, return_dict=True)
    res = [out.logits.numpy()]
    pkv = out.past_key_values
    for i in range(DEC_LAYERS):
        if isinstance(pkv, (tuple, list)):  # legacy cache format
            k, v = pkv[i][0], pkv[i][1]
        elif hasattr(pkv, "layers"):
            k, v = pkv.layers[i].keys, pkv.layers[i].values
        else:
            k, v = pkv.key_cache[i], pkv.value_cache[i]
        res += [k.numpy(), v.numpy()]
    return res


def _build_merged(kind: str) -> tuple[onnx.ModelProto, list[str]]:
    _patch_torch_for_optimum_127()
    from optimum.exporters.onnx import main_export

    name = f"merged_decoder_{kind}"
    model = _hf_decoder(kind)
    tmp = tempfile.mkdtemp(prefix=f"onnxopt-{name}-")
    try:
        src, out = os.path.join(tmp, "hf"), os.path.join(tmp, "onnx")
        model.save_pretrained(src)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            main_export(src, output=out, task="text-generation-with-past", legacy=True, device="cpu",
                        do_validation=False)
        merged = onnx.load(os.path.join(out, "decoder_model_merged.onnx"))
        no_past = onnx.load(os.path.join(out, "decoder_model.onnx"))
        with_past = onnx.load(os.path.join(out, "decoder_with_past_model.onnx"))
        kept = {}
        if os.environ.get("ONNXOPT_KEEP_UNMERGED"):
            kept = {"decoder_model": no_past, "decoder_with_past_model": with_past}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    opset = {o.domain: o.version for o in merged.opset_import}[""]
    merged.ir_version = 9  # what torch 2.13's TorchScript exporter + Optimum write (opset 14)
    merged.doc_string = _doc(
        name,
        f"{type(model).__name__} hidden {DEC_HIDDEN}, {DEC_LAYERS} layers, {DEC_HEADS} heads"
        + (", 2 kv heads" if kind == "llama" else "")
        + f", vocab {DEC_VOCAB}; optimum {importlib.metadata.version('optimum')} "
        f"main_export(task='text-generation-with-past', legacy=True) -> decoder_model_merged.onnx (opset {opset}), "
        "TorchScript exporter",
    )

    problems = []
    if any(n.op_type in ("Attention", "MultiHeadAttention", "GroupQueryAttention") for g in _graphs(merged) for n in g.node):
        problems.append(f"{name}: fused attention op in the graph")
    rng = np.random.default_rng(SEEDS[name])
    sm, s0, s1 = _ort_session(merged), _ort_session(no_past), _ort_session(with_past)
    out_names = [o.name for o in merged.graph.output]
    cases = [(False, b, s, 0) for b in (1, 2) for s in (1, 5, 8)] + [(True, b, s, p) for b in (1, 2) for s, p in ((1, 7), (1, 16), (4, 6))]
    for flag, b, s, p in cases:
        feeds = _decoder_feeds(kind, merged, b, s, p, rng, flag)
        what = f"use_cache_branch={flag} batch {b} seq {s} past {p}"
        try:
            got = sm.run(out_names, feeds)
            unmerged = s1 if flag else s0
            ufeeds = {k: v for k, v in feeds.items() if k in {i.name for i in unmerged.get_inputs()}}
            uref = unmerged.run(out_names, ufeeds)
            for n, g, r in zip(out_names, got, uref):
                if not np.array_equal(g, r, equal_nan=True):
                    problems.append(f"{name}: {what}: {n} differs from the unmerged export "
                                    f"(max abs {np.nanmax(np.abs(g - r)):g})")
            tref = _torch_decoder_ref(model, feeds)
            for n, g, r in zip(out_names, got, tref):
                _close(name, f"{what}: {n} vs PyTorch", g, r, rtol=1e-4, atol=1e-5)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name}: {what}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    for k, p in kept.items():
        p.ir_version = 9
        onnx.save(p, os.path.join(os.environ["ONNXOPT_KEEP_UNMERGED"], f"{name}.{k}.onnx"))
    return merged, problems


def build_merged_decoder_gpt2():
    return _build_merged("gpt2")


def build_merged_decoder_llama():
    return _build_merged("llama")


# =========================================================================== driver


def _graphs(proto_or_graph):
    g = proto_or_graph.graph if isinstance(proto_or_graph, onnx.ModelProto) else proto_or_graph
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            for sg in a.graphs:
                yield from _graphs(sg)


def _dims(vi) -> str:
    ds = [d.dim_param if d.HasField("dim_param") else str(d.dim_value) for d in vi.type.tensor_type.shape.dim]
    return f"`{vi.name}[{','.join(ds)}]`"


def summarize(out_dir: str, names: list[str]) -> None:
    print("| file | opset | IR | KB | nodes (all graphs) | top-level nodes | inputs | outputs |")
    print("|---|---|---|---|---|---|---|---|")
    hist = {}
    for n in names:
        path = os.path.join(out_dir, f"{n}.onnx")
        p = onnx.load(path)
        allnodes = [x for g in _graphs(p) for x in g.node]
        opset = ",".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in p.opset_import)
        print(f"| `{n}.onnx` | {opset} | {p.ir_version} | {os.path.getsize(path) // 1024} | {len(allnodes)} | "
              f"{len(p.graph.node)} | {', '.join(_dims(i) for i in p.graph.input)} | "
              f"{', '.join(_dims(o) for o in p.graph.output)} |")
        hist[n] = collections.Counter(x.op_type for x in allnodes)
    print()
    for n, h in hist.items():
        print(f"- `{n}`: " + ", ".join(f"{k} {v}" for k, v in h.most_common()))


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0" and argv is None:
        # The TorchScript trace of the llama decoders names its initializers in
        # an order that follows set iteration (string hashing): without a fixed
        # hash seed merged_decoder_llama.onnx differs from run to run.
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ",".join(MODELS))
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--summary", action="store_true", help="print the README table of the files in --out and exit")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or MODELS
    bad = [n for n in names if n not in MODELS]
    if bad:
        ap.error(f"unknown model(s): {bad}")
    if args.summary:
        summarize(args.out, names)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for pkg, want in PINNED.items():
        try:
            have = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            have = "missing"
        if not have.startswith(want):
            print(f"warning: {pkg} {have}, the files were made with {want}; they may not come out byte-identical",
                  file=sys.stderr)
    failed = []
    for n in names:
        proto, problems = globals()[f"build_{n}"]()
        assert proto.ir_version <= 10, (n, proto.ir_version)
        try:
            onnx.checker.check_model(proto, full_check=True)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{n}: checker: {e}")
        path = os.path.join(args.out, f"{n}.onnx")
        tmp = path + ".tmp"
        onnx.save(proto, tmp)
        os.replace(tmp, path)
        nodes = sum(len(g.node) for g in _graphs(proto))
        status = "ok" if not problems else "PROBLEMS"
        print(f"{n}.onnx: {os.path.getsize(path) // 1024} KB, {nodes} nodes, "
              f"opset {next(o.version for o in proto.opset_import if o.domain == '')}, IR {proto.ir_version}: {status}")
        for p in problems:
            print("  " + p)
        if problems:
            failed.append(n)
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
