"""Attention inside a ``Loop`` body: a scripted greedy decoder (TorchScript's Loop, one step per
source position) whose body holds self-attention over a Loop-carried key/value cache (grown by
``Concat`` each step) and cross-attention over encoder keys/values computed outside the loop
(outer-scope reads, key padding from the source mask). Both fuse; outputs equal the original.

The cache is what made such bodies partial: the body's carried input is declared
``[.., 'kc_dim_3']`` by the exporter, and Concat kept that symbol where the new keys prove the
head size (8), so K's head size "differed" from Q's."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxopt.importer import import_model
from onnxopt.normalize.shapes import infer_shapes
from onnxopt.options import OptimizeOptions
from onnxopt.pipeline import run_pipeline

torch = pytest.importorskip("torch")
nn = torch.nn

D, H, VOCAB = 32, 4, 20


class _Weights(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.sq, self.sk, self.sv = (nn.Linear(D, D) for _ in range(3))
        self.out = nn.Linear(D, VOCAB)


class GreedyDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = _Weights()

    def forward(self, memory: torch.Tensor, mem_mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = memory.shape
        h: int = 4
        d: int = 32
        k = self.w.k(memory).view(b, s, h, d // h).transpose(1, 2)
        v = self.w.v(memory).view(b, s, h, d // h).transpose(1, 2)
        bias = (1.0 - mem_mask.to(torch.float32))[:, None, None, :] * -10000.0
        tok = torch.zeros(b, dtype=torch.long)
        state = torch.zeros(b, d)
        kc = torch.zeros(b, h, 0, d // h)
        vc = torch.zeros(b, h, 0, d // h)
        outs = []
        for _ in range(s):
            x = self.w.emb(tok) + state
            sq = self.w.sq(x).view(b, 1, h, d // h).transpose(1, 2)
            kc = torch.cat([kc, self.w.sk(x).view(b, 1, h, d // h).transpose(1, 2)], 2)
            vc = torch.cat([vc, self.w.sv(x).view(b, 1, h, d // h).transpose(1, 2)], 2)
            sp = torch.softmax(torch.matmul(sq, kc.transpose(-1, -2)) * 0.35355339059327373, -1)
            x = x + torch.matmul(sp, vc).transpose(1, 2).reshape(b, d)
            q = self.w.q(x).view(b, 1, h, d // h).transpose(1, 2)
            p = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 2.8284271247461903 + bias, -1)
            state = self.w.o(torch.matmul(p, v).transpose(1, 2).reshape(b, d)) + x
            logits = self.w.out(state)
            tok = logits.argmax(-1)
            outs.append(logits)
        return torch.stack(outs, 1)


@pytest.fixture(scope="module")
def loop_decoder(tmp_path_factory) -> str:
    torch.manual_seed(33)
    scripted = torch.jit.script(GreedyDecoder().eval())
    memory = torch.randn(2, 7, D)
    mask = torch.ones(2, 7, dtype=torch.long)
    path = str(tmp_path_factory.mktemp("loop") / "greedy_decoder.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scripted, (memory, mask), path, dynamo=False, opset_version=17,
                          input_names=["memory", "mem_mask"], output_names=["logits"],
                          dynamic_axes={"memory": {0: "batch", 1: "src"},
                                        "mem_mask": {0: "batch", 1: "src"}})
    proto = onnx.load(path)
    proto.ir_version = 8
    onnx.save(proto, path)
    return path


def test_both_attention_blocks_in_the_loop_body_fuse_and_compute_the_same(loop_decoder):
    proto = onnx.load(loop_decoder)
    loop = next(n for n in proto.graph.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    assert sum(n.op_type == "Softmax" for n in body.node) == 2
    assert not any(n.op_type == "Softmax" for n in proto.graph.node)
    result = run_pipeline(loop_decoder, OptimizeOptions(target="cpu"))
    fusion = result.report.stages["fuse"]
    assert fusion.count("attention") == 2, fusion.summary().get("attention")
    assert fusion.count("attention", "refused") == 0
    assert fusion.count("attention", "partial") == 0
    original = ort.InferenceSession(loop_decoder, providers=["CPUExecutionProvider"])
    fused = ort.InferenceSession(result.proto.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, src in ((2, 7), (3, 12), (1, 4)):
        mask = np.ones((batch, src), np.int64)
        for row in range(1, batch):
            mask[row, src - row * src // 4:] = 0  # right padding, more on each row
        feeds = {"memory": rng.standard_normal((batch, src, D)).astype(np.float32),
                 "mem_mask": mask}
        want = original.run(None, feeds)[0]
        got = fused.run(None, feeds)[0]
        assert got.shape == want.shape == (batch, src, VOCAB)
        err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
        assert err < 1e-5, (batch, src, err)


CARRIED = """
g (float[b, 4, past, kdim] cache, float[b, 4, 1, 8] new) => (float[b, 4, ?, ?] y) {
    y = Concat <axis = 2> (cache, new)
}
"""


def test_concat_takes_the_dim_one_input_proves(make_model):
    model = import_model(make_model(CARRIED))
    infer_shapes(model)
    assert model.graph.outputs[0].shape == ("b", 4, "(past+1)", 8)


def test_the_debug_checks_see_the_loop_body_in_its_scope(loop_decoder):
    """Under ``debug`` the IR is checked after each fusion; a fusion in a Loop body reads the
    enclosing graph's values, which the check must see (it once said 'read before it is
    defined' there)."""
    result = run_pipeline(loop_decoder, OptimizeOptions(target="cpu", debug=True))
    assert result.report.stages["fuse"].count("attention") == 2
