#!/usr/bin/env python3
"""Regenerate the small exported ONNX test models in this folder.

Every model is built from a tiny Hugging Face config with random weights
(``torch.manual_seed`` per model, see ``seed_for``; nothing is downloaded),
wrapped so that the graph has exactly one output, and exported twice:

* ``NAME.ts.onnx``     -- TorchScript exporter, ``torch.onnx.export(..., dynamo=False)``, opset 17
* ``NAME.dynamo.onnx`` -- dynamo exporter, ``torch.onnx.export(..., dynamo=True)``, opset 18

Text models take ``input_ids`` and ``attention_mask`` (int64, dims ``batch`` x
``seq``); vision takes ``pixel_values`` (``batch`` x 3 x 32 x 32). Every saved
file has ``ir_version`` 10, its weights embedded, and is checked with
``onnx.checker.check_model(full_check=True)`` and against PyTorch in ONNX Runtime
(batch 1 and 2, seq 8 and 16, right padding in the attention mask).
Regenerating on any machine with the same package versions gives byte-identical
files (the dynamo exporter's per-node stack traces, which hold absolute paths,
are dropped).

Usage::

    pip install torch==2.13.0 transformers==5.24.0 onnxscript==0.7.2 onnx==1.23.2 onnxruntime==1.32.0
    python models/export.py [--only NAME[,NAME...]] [--out models/] [--no-verify]
    python models/export.py with-past [--only gpt2,llama,...] [--exporter ts|dynamo|both] [--out DIR]
    python models/export.py vits [--exporter ts|dynamo|both] [--out DIR]   (to models/)
    python models/export.py merged [--only gpt2,llama] [--exporter ts|dynamo|both] [--out DIR]
        (to models/other/merged/: Optimum-style merged decoders, see ``merge_decoders.py``)

``with-past`` exports Optimum-style ``decoder_with_past`` steps (key/value cache in and out,
see ``DecoderWithPastWrapper``) of the decoder-only families in ``WITH_PAST``.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import torch
from torch import nn

IR_VERSION = 10  # onnxruntime accepts <= 13; onnx >= 1.23 writes 14 by default
TS_OPSET = 17
DYNAMO_OPSET = 18
SEED = 0

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
VOCAB = 1000
MAX_POS = 128


# --------------------------------------------------------------------------- wrappers


class TextWrapper(nn.Module):
    """Calls a HF text model with (input_ids, attention_mask) and returns output[0]."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return out[0]


class Seq2SeqWrapper(nn.Module):
    """An encoder-decoder called with (input_ids, attention_mask); the decoder reads the same
    ids (teacher forcing), so the graph has the text models' two inputs and holds encoder
    self-attention, decoder causal self-attention and cross-attention."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         decoder_input_ids=input_ids, return_dict=False)
        return out[0]


class VisionWrapper(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values, return_dict=False)[0]


# --------------------------------------------------------------------------- builders


def _gpt2(attn: str) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=MAX_POS,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=INTERMEDIATE,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    cfg._attn_implementation = attn
    return GPT2LMHeadModel(cfg)


def _bert(attn: str) -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return BertModel(cfg, add_pooling_layer=False)


def _roberta(attn: str) -> nn.Module:
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS + 2,
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return RobertaModel(cfg, add_pooling_layer=False)


def _llama(attn: str) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        hidden_act="silu",
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return LlamaForCausalLM(cfg)


def _mistral(attn: str, sliding_window: int | None = None) -> nn.Module:
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        sliding_window=sliding_window,
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return MistralForCausalLM(cfg)


def _qwen2(attn: str) -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        hidden_act="silu",
        use_sliding_window=False,
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return Qwen2ForCausalLM(cfg)


def _gpt_neox(attn: str) -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        hidden_act="gelu",
        rotary_pct=0.25,  # rotary on 4 of the 16 head dims
        use_parallel_residual=True,
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return GPTNeoXForCausalLM(cfg)


def _opt(attn: str) -> nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        ffn_dim=INTERMEDIATE,
        max_position_embeddings=MAX_POS,  # learned, offset 2 (table of MAX_POS + 2 rows)
        word_embed_proj_dim=HIDDEN,
        do_layer_norm_before=True,
        activation_function="relu",
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return OPTForCausalLM(cfg)


def _distilbert(attn: str) -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        activation="gelu",
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return DistilBertModel(cfg)


def _clip_text(attn: str) -> nn.Module:
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        hidden_act="quick_gelu",
        bos_token_id=0,
        eos_token_id=2,  # the default 49407 is outside the tiny vocab
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return CLIPTextModel(cfg)


def _t5enc(attn: str) -> nn.Module:
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=HIDDEN // HEADS,
        d_ff=INTERMEDIATE,
        num_layers=LAYERS,
        num_heads=HEADS,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=MAX_POS,
        feed_forward_proj="relu",
        use_cache=False,
        is_encoder_decoder=False,
    )
    cfg._attn_implementation = attn
    return T5EncoderModel(cfg)


def _bloom(attn: str) -> nn.Module:
    from transformers import BloomConfig, BloomForCausalLM

    cfg = BloomConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        use_cache=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn
    return BloomForCausalLM(cfg)


def _gemma(attn: str) -> nn.Module:
    from transformers import GemmaConfig, GemmaForCausalLM

    cfg = GemmaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        head_dim=HIDDEN // HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return GemmaForCausalLM(cfg)


def _gemma2(attn: str) -> nn.Module:
    """Gemma 2: attention logits soft-capped (``tanh(scores / cap) · cap`` before the mask),
    final logits too; the sliding window (4096) is wider than every position here, so the
    sliding layers' masks are causal at every length the model takes."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
        head_dim=HIDDEN // HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        use_cache=False,
    )
    cfg._attn_implementation = attn
    return Gemma2ForCausalLM(cfg)


def _swin(attn: str) -> nn.Module:
    """Swin: window attention (4×4 windows, a relative-position bias per head), every second
    block on shifted windows whose per-window mask is added on a 5-D view of the scores."""
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(
        image_size=32,
        patch_size=2,
        num_channels=3,
        embed_dim=HIDDEN // 4,
        depths=[LAYERS],
        num_heads=[HEADS // 2],
        window_size=4,
        mlp_ratio=2.0,
    )
    cfg._attn_implementation = attn
    return SwinModel(cfg, add_pooling_layer=False)


def _vit(attn: str) -> nn.Module:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        image_size=32,
        patch_size=8,
        num_channels=3,
    )
    cfg._attn_implementation = attn
    return ViTModel(cfg, add_pooling_layer=False)


class _ResnetBlock(nn.Module):
    """A diffusion UNet/VAE resnet block: ``x + conv(silu(gn(conv(silu(gn(x))))))``."""

    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels, eps=1e-6)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels, eps=1e-6)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        return x + self.conv2(nn.functional.silu(self.norm2(h)))


class _SpatialAttention(nn.Module):
    """A VAE/UNet mid-block attention: GroupNorm, then heads over the h·w positions."""

    def __init__(self, channels: int, groups: int, heads: int, attn: str):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)
        self.to_q, self.to_k, self.to_v, self.to_out = (nn.Linear(channels, channels)
                                                        for _ in range(4))
        self.heads, self.attn = heads, attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)

        def split(v):
            return v.view(b, -1, self.heads, c // self.heads).transpose(1, 2)

        q, k, v = split(self.to_q(t)), split(self.to_k(t)), split(self.to_v(t))
        if self.attn == "sdpa":
            o = nn.functional.scaled_dot_product_attention(q, k, v)
        else:
            scores = q @ k.transpose(-1, -2) / float(c // self.heads) ** 0.5
            o = scores.softmax(dim=-1) @ v
        o = self.to_out(o.transpose(1, 2).reshape(b, h * w, c))
        return x + o.transpose(1, 2).reshape(b, c, h, w)


class _TinyDiffusion(nn.Module):
    """A diffusion VAE decoder's shape in miniature: resnet, mid attention, resnet, norm out."""

    def __init__(self, attn: str, channels: int = 32, groups: int = 8):
        super().__init__()
        self.config = type("Config", (), {})()
        self.conv_in = nn.Conv2d(3, channels, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(_ResnetBlock(channels, groups),
                                    _SpatialAttention(channels, groups, 2, attn),
                                    _ResnetBlock(channels, groups))
        self.norm_out = nn.GroupNorm(groups, channels, eps=1e-6)
        self.conv_out = nn.Conv2d(channels, 3, 3, padding=1)
        for m in self.modules():  # random affine weights, as a trained model has
            if isinstance(m, nn.GroupNorm):
                nn.init.normal_(m.weight, 1.0, 0.2)
                nn.init.normal_(m.bias, 0.0, 0.2)

    def forward(self, pixel_values: torch.Tensor, return_dict: bool = False):
        h = self.blocks(self.conv_in(pixel_values))
        return (self.conv_out(nn.functional.silu(self.norm_out(h))),)


def _diffusion(attn: str) -> nn.Module:
    # 32 channels in 8 groups at the test size; larger configs (benchmarks) take SD's 32 groups
    channels = HIDDEN // 2
    return _TinyDiffusion(attn, channels, groups=8 if channels <= 32 else 32)


@dataclass(frozen=True)
class Spec:
    name: str
    build: Callable[[str], nn.Module]
    hf_class: str
    attn: str  # "eager" | "sdpa"
    kind: str  # "text" | "vision"
    output: str  # "logits" | "last_hidden_state" | "sample"
    unseen: bool = False  # no fusion rule is written against it
    seq2seq: bool = False  # text: an encoder-decoder (Seq2SeqWrapper)


SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec("gpt2", _gpt2, "GPT2LMHeadModel", "eager", "text", "logits"),
        Spec("bert", _bert, "BertModel", "eager", "text", "last_hidden_state"),
        Spec("llama", _llama, "LlamaForCausalLM", "sdpa", "text", "logits"),
        Spec("vit", _vit, "ViTModel", "eager", "vision", "last_hidden_state"),
        Spec("t5enc", _t5enc, "T5EncoderModel", "eager", "text", "last_hidden_state"),
        Spec("mistral", _mistral, "MistralForCausalLM", "eager", "text", "logits", True),
        Spec("roberta", _roberta, "RobertaModel", "sdpa", "text", "last_hidden_state", True),
        Spec("qwen2", _qwen2, "Qwen2ForCausalLM", "sdpa", "text", "logits", True),
        Spec("gpt_neox", _gpt_neox, "GPTNeoXForCausalLM", "eager", "text", "logits", True),
        Spec("opt", _opt, "OPTForCausalLM", "eager", "text", "logits", True),
        Spec("distilbert", _distilbert, "DistilBertModel", "sdpa", "text", "last_hidden_state", True),
        Spec("clip_text", _clip_text, "CLIPTextModel", "eager", "text", "last_hidden_state", True),
        Spec("bloom", _bloom, "BloomForCausalLM", "eager", "text", "logits", True),
        Spec("gemma", _gemma, "GemmaForCausalLM", "sdpa", "text", "logits", True),
        Spec("gemma2", _gemma2, "Gemma2ForCausalLM", "eager", "text", "logits", True),
        Spec("swin", _swin, "SwinModel", "eager", "vision", "last_hidden_state", True),
        Spec("diffusion", _diffusion, "(GroupNorm resnet + attention)", "sdpa", "vision",
             "sample", True),
    ]
}


# --------------------------------------------------------------------------- sliding window
# (issue 33) A Mistral whose sliding window (6 keys: the query and the 5 before it) is
# shorter than the sequences the tests run (8 and 16) and longer than some (4): its masks
# are a causal band, ``i - 6 < j <= i``, not a causal triangle.

SLIDING_WINDOW = 6


def _mistral_sliding(attn: str) -> nn.Module:
    return _mistral(attn, SLIDING_WINDOW)


SPECS["mistral_sw"] = Spec("mistral_sw", _mistral_sliding, "MistralForCausalLM", "sdpa", "text",
                           "logits", True)


# --------------------------------------------------------------------------- VITS text encoder
# (issue 33) VITS's text encoder attends with relative positions: learned key and value
# embeddings for offsets within ``window_size``, brought to absolute positions by pad-and-reshape
# tricks on ``[B·H, S, ·]`` views. The scores get a relative-key term computed from Q; the output
# gets a relative-value term computed from the probabilities. The whole ``VitsModel`` (duration
# predictor, flows, vocoder) is not the point: its text encoder alone is exported. Small (one
# layer, hidden 8 in two heads of 4) so that both files stay under 200 KB.

VITS_WINDOW = 4  # VITS's own: offsets -4..4, shorter than the sequences the tests run


VITS_KWARGS = {"vocab_size": VOCAB, "hidden_size": 8, "num_hidden_layers": 1,
               "num_attention_heads": 2, "ffn_dim": 16, "window_size": VITS_WINDOW,
               "flow_size": 8}


def _vits(attn: str, **overrides) -> nn.Module:
    """VITS's text encoder at :data:`VITS_KWARGS` (``overrides`` change the config: the
    generality sweep builds a larger one). Named so for good: the dynamo export records the
    wrapper class's qualified name in every node's metadata, so a new name changes the
    committed file's bytes."""
    from transformers import VitsConfig
    from transformers.models.vits.modeling_vits import VitsTextEncoder

    class VitsTextEncoderModel(VitsTextEncoder):
        """``VitsTextEncoder`` called as ``VitsModel`` calls it: the padding mask is the
        attention mask as a ``[batch, seq, 1]`` float (``TextWrapper`` passes the two)."""

        def forward(self, input_ids, attention_mask, return_dict: bool = False):
            padding = attention_mask.unsqueeze(-1).to(torch.float32)
            return super().forward(input_ids=input_ids, padding_mask=padding,
                                   attention_mask=attention_mask, return_dict=False)

    cfg = VitsConfig(**{**VITS_KWARGS, **overrides})
    # (without an implementation set, the encoder's mask builder returns None: no padding mask)
    cfg._attn_implementation = attn
    return VitsTextEncoderModel(cfg)


# Not in SPECS (its own config and inputs, one layer so the files stay small): written to
# models/ by ``python models/export.py vits``. Its attention fuses with the probabilities as
# AttentionFused's second output, which the relative-value term reads (issue 33).
VITS_SPEC = Spec("vits", _vits, "VitsTextEncoder", "eager", "text", "last_hidden_state", True)


def main_vits(argv: list[str] | None = None) -> int:
    """``export.py vits [--out DIR] [--exporter ts|dynamo|both]``: the VITS text encoder."""
    ap = argparse.ArgumentParser(prog="export.py vits")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--exporter", choices=["ts", "dynamo", "both"], default="both")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    tags = ["ts", "dynamo"] if args.exporter == "both" else [args.exporter]
    bad = 0
    for tag in tags:
        model = build(VITS_SPEC)
        proto = (export_ts if tag == "ts" else export_dynamo)(VITS_SPEC, model)
        path = os.path.join(args.out, f"vits.{tag}.onnx")
        onnx.save_model(proto, path, save_as_external_data=False)
        print(f"{path}: {os.path.getsize(path) / 1024:.0f} KB, {len(proto.graph.node)} nodes",
              flush=True)
        bad += bool(verify(VITS_SPEC, model, path))
    return 1 if bad else 0


def seed_for(spec: Spec) -> int:
    """Per-model seed, so that e.g. llama and mistral do not share weights."""
    return SEED + zlib.crc32(spec.name.encode()) % 10_000


def build(spec: Spec) -> nn.Module:
    torch.manual_seed(seed_for(spec))
    model = spec.build(spec.attn)
    model.config.use_cache = False
    model.eval()
    text = Seq2SeqWrapper if spec.seq2seq else TextWrapper
    wrapper = text(model) if spec.kind == "text" else VisionWrapper(model)
    return wrapper.eval()


# --------------------------------------------------------------------------- inputs


def make_inputs(spec: Spec, batch: int, seq: int, pad: bool, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed + 100 * batch + seq)
    if spec.kind == "vision":
        return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
    # avoid id 1 (roberta padding_idx) so position ids are ordinary
    ids = torch.randint(2, VOCAB, (batch, seq), generator=g, dtype=torch.int64)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if pad:
        # right padding: row 0 full, row r has r*seq//4 trailing zeros (batch 1: 3 zeros)
        for r in range(batch):
            n = 3 if batch == 1 else (r * seq) // 4
            if n:
                mask[r, seq - n :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def input_names(spec: Spec) -> list[str]:
    return ["pixel_values"] if spec.kind == "vision" else ["input_ids", "attention_mask"]


# --------------------------------------------------------------------------- export


def _finish(proto: onnx.ModelProto, spec: Spec, producer_note: str) -> onnx.ModelProto:
    proto.ir_version = IR_VERSION
    proto.doc_string = (
        f"onnxopt test model: {spec.hf_class} tiny random (seed {seed_for(spec)}), "
        f"attn_implementation={spec.attn}, {producer_note}"
    )
    rename_dims(proto, spec)
    return proto


def rename_dims(proto: onnx.ModelProto, spec: Spec) -> None:
    """Make symbolic dims of graph inputs read 'batch'/'seq', everywhere they appear."""
    mapping: dict[str, str] = {}
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        wanted = ["batch", "seq"] if spec.kind == "text" else ["batch"]
        for d, w in zip(dims, wanted):
            if d.HasField("dim_param") and d.dim_param != w:
                mapping[d.dim_param] = w
    if not mapping:
        return

    def fix(vis):
        for vi in vis:
            if not vi.type.HasField("tensor_type"):
                continue
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in mapping:
                    d.dim_param = mapping[d.dim_param]

    fix(proto.graph.input)
    fix(proto.graph.output)
    fix(proto.graph.value_info)


def fix_output_dims(proto: onnx.ModelProto, spec: Spec, model: nn.Module) -> None:
    """Graph output: dim 0 'batch', dim 1 'seq' (text), every other dim static.

    The TorchScript exporter names dims it could not infer after the producing
    node (e.g. 'LayerNormalizationlast_hidden_state_dim_1'); those are static
    here, so take them from a reference run.
    """
    ex = make_inputs(spec, 2, 8, pad=False)
    with torch.no_grad():
        ref = tuple(model(*[ex[n] for n in input_names(spec)]).shape)
    symbolic = {0: "batch", 1: "seq"} if spec.kind == "text" else {0: "batch"}
    for out in proto.graph.output:
        for i, d in enumerate(out.type.tensor_type.shape.dim):
            if i in symbolic:
                d.dim_param = symbolic[i]
            elif d.HasField("dim_param"):
                d.dim_value = ref[i]


def export_ts(spec: Spec, model: nn.Module) -> onnx.ModelProto:
    names = input_names(spec)
    ex = make_inputs(spec, 2, 8, pad=True)
    args = tuple(ex[n] for n in names)
    dyn = {n: ({0: "batch", 1: "seq"} if spec.kind == "text" else {0: "batch"}) for n in names}
    dyn[spec.output] = {0: "batch", 1: "seq"} if spec.kind == "text" else {0: "batch"}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            args,
            buf,
            dynamo=False,
            opset_version=TS_OPSET,
            input_names=names,
            output_names=[spec.output],
            dynamic_axes=dyn,
            do_constant_folding=True,
        )
    proto = onnx.load_from_string(buf.getvalue())
    fix_output_dims(proto, spec, model)
    return _finish(proto, spec, f"torch.onnx.export(dynamo=False, opset_version={TS_OPSET})")


def export_dynamo(spec: Spec, model: nn.Module) -> onnx.ModelProto:
    from torch.export import Dim

    names = input_names(spec)
    ex = make_inputs(spec, 2, 8, pad=True)
    args = tuple(ex[n] for n in names)
    batch = Dim("batch", min=1, max=64)
    if spec.kind == "text":
        seq = Dim("seq", min=2, max=MAX_POS)
        shapes = {n: {0: batch, 1: seq} for n in names}
    else:
        shapes = {n: {0: batch} for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(
            model,
            args,
            dynamo=True,
            opset_version=DYNAMO_OPSET,
            input_names=names,
            output_names=[spec.output],
            dynamic_shapes=shapes,
            external_data=False,
            optimize=True,
            report=False,
            verify=False,
        )
    proto = prog.model_proto
    # Stack traces hold absolute paths of this machine's venv; drop them so the
    # files are byte-identical wherever they are regenerated. The other
    # pkg.torch.onnx.* / namespace metadata (module scopes, fx node) is kept.
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
        for p in node.metadata_props:  # a function's repr holds its address (VITS's sym_max)
            p.value = re.sub(r" at 0x[0-9a-f]+>", ">", p.value)
    opset = {o.domain: o.version for o in proto.opset_import}
    if opset.get("", 0) != DYNAMO_OPSET:
        raise RuntimeError(f"{spec.name}: dynamo export produced opset {opset}")
    return _finish(proto, spec, f"torch.onnx.export(dynamo=True, opset_version={DYNAMO_OPSET})")


# --------------------------------------------------------------------------- verify


def verify(spec: Spec, model: nn.Module, path: str) -> list[str]:
    import onnxruntime as ort

    problems: list[str] = []
    proto = onnx.load(path)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as e:  # noqa: BLE001
        problems.append(f"check_model: {e}")
    if proto.ir_version > IR_VERSION:
        problems.append(f"ir_version {proto.ir_version}")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        problems.append("external data")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    if [o.name for o in sess.get_outputs()] != [spec.output]:
        problems.append(f"outputs {[o.name for o in sess.get_outputs()]}")
    worst = 0.0
    for batch in (1, 2):
        for seq in (8, 16) if spec.kind == "text" else (0,):
            for pad in (False, True) if spec.kind == "text" else (False,):
                inp = make_inputs(spec, batch, seq, pad)
                names = input_names(spec)
                with torch.no_grad():
                    ref = model(*[inp[n] for n in names]).numpy()
                got = sess.run(None, {n: inp[n].numpy() for n in names})[0]
                if got.shape != ref.shape:
                    problems.append(f"shape {got.shape} != {ref.shape} (b={batch}, s={seq})")
                    continue
                # every position is compared, padded ones included
                scale = max(1.0, float(np.abs(ref).max()))
                err = float(np.abs(got - ref).max()) / scale
                worst = max(worst, err)
                if not err < 1e-4:
                    problems.append(f"max rel err {err:.2e} (b={batch}, s={seq}, pad={pad})")
    print(f"    verify: worst rel err {worst:.2e}, {len(problems)} problem(s)")
    return problems


# --------------------------------------------------------------------------- summary


def summarize(out_dir: str, names: list[str]) -> None:
    """Print the README table and per-file op histograms (markdown)."""
    import collections

    rows, hists = [], []
    for name in names:
        spec = SPECS[name]
        for tag in ("ts", "dynamo"):
            path = os.path.join(out_dir, f"{name}.{tag}.onnx")
            if not os.path.exists(path):
                continue
            m = onnx.load(path)
            cfg = build(spec).model.config
            hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "d_model", None)
            layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "num_layers", None)
            heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "num_heads", None)
            kv = getattr(cfg, "num_key_value_heads", None) or heads
            ins = ", ".join(
                f"`{v.name}[{','.join(str(d.dim_param or d.dim_value) for d in v.type.tensor_type.shape.dim)}]`"
                for v in m.graph.input
            )
            out = m.graph.output[0]
            outs = f"`{out.name}[{','.join(str(d.dim_param or d.dim_value) for d in out.type.tensor_type.shape.dim)}]`"
            exporter = (
                f"TorchScript `dynamo=False` opset {TS_OPSET}"
                if tag == "ts"
                else f"dynamo `dynamo=True` opset {DYNAMO_OPSET}"
            )
            arch = spec.hf_class + (" (unseen)" if spec.unseen else "")
            rows.append(
                f"| `{name}.{tag}.onnx` | {arch} | {exporter} | {spec.attn} "
                f"| {hidden}/{layers}/{heads}/{kv} | {ins} | {outs} "
                f"| {os.path.getsize(path) / 1024:.0f} | {len(m.graph.node)} |"
            )
            c = collections.Counter(n.op_type for n in m.graph.node)
            hists.append(f"- `{name}.{tag}`: " + ", ".join(f"{k} {v}" for k, v in c.most_common()))
    print(
        "| file | architecture | exporter | attention | hidden/layers/heads/kv heads "
        "| inputs | output | KB | nodes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(hists))


# --------------------------------------------------------------------------- main


# --------------------------------------------------------------------------- decoder with past


class DecoderWithPastWrapper(nn.Module):
    """An Optimum-style ``decoder_with_past`` step: ``(input_ids [batch, seq], attention_mask
    [batch, past + seq], past key and value per layer [batch, kv_heads, past, head_dim])`` ->
    ``(logits, present key and value per layer [batch, kv_heads, past + seq, head_dim])``.

    The cache is rebuilt from the flat tensors on every call (a ``DynamicCache``), so the
    exported graph holds the Concat of the past and the new keys that a generation loop
    runs at every step, and the attention over ``past + seq`` keys with the mask given.
    """

    def __init__(self, model: nn.Module, layers: int):
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor):
        from transformers.cache_utils import DynamicCache

        pairs = [(past[2 * i], past[2 * i + 1]) for i in range(self.layers)]
        cache = DynamicCache(pairs, config=self.model.config)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         past_key_values=cache, use_cache=True, return_dict=True)
        present = []
        for layer in out.past_key_values.layers[: self.layers]:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


# name -> (builder, attention implementation): the decoder-only families exported with a cache.
WITH_PAST = {"gpt2": (_gpt2, "eager"), "llama": (_llama, "sdpa"), "qwen2": (_qwen2, "sdpa"),
             "gpt_neox": (_gpt_neox, "eager")}


def build_with_past(name: str, attn: str | None = None) -> DecoderWithPastWrapper:
    """The ``decoder_with_past`` wrapper of a ``WITH_PAST`` family (at this module's sizes)."""
    builder, default = WITH_PAST[name]
    torch.manual_seed(SEED + zlib.crc32(f"{name}.with_past".encode()) % 10_000)
    model = builder(attn or default)
    model.config.use_cache = True
    model.eval()
    return DecoderWithPastWrapper(model, model.config.num_hidden_layers).eval()


def cache_geometry(wrapper: DecoderWithPastWrapper) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of the wrapped model's cache."""
    cfg = wrapper.model.config
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    return cfg.num_hidden_layers, kv, cfg.hidden_size // heads


def with_past_names(layers: int) -> tuple[list[str], list[str]]:
    """Optimum's input and output names."""
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return ["input_ids", "attention_mask", *past], ["logits", *present]


def with_past_inputs(wrapper: DecoderWithPastWrapper, batch: int, seq: int, past: int,
                     left_pad: int = 0, right_pad: int = 0, seed: int = 1) -> dict:
    """Random inputs of one step; ``left_pad`` leading / ``right_pad`` trailing masked
    positions in every row but the first (the mask spans past + seq)."""
    layers, kv, dim = cache_geometry(wrapper)
    g = torch.Generator().manual_seed(seed + 1000 * batch + 10 * seq + past)
    vocab = wrapper.model.config.vocab_size
    out = {"input_ids": torch.randint(2, vocab, (batch, seq), generator=g, dtype=torch.int64)}
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    for r in range(1, batch):
        if left_pad:
            mask[r, :left_pad] = 0
        if right_pad:
            mask[r, past + seq - right_pad:] = 0
    out["attention_mask"] = mask
    for name in with_past_names(layers)[0][2:]:
        out[name] = torch.randn(batch, kv, past, dim, generator=g)
    return out


class DecoderNoPastWrapper(DecoderWithPastWrapper):
    """An Optimum-style ``decoder_model`` (the prompt step): ``(input_ids [batch, seq],
    attention_mask [batch, seq])`` -> ``(logits, present key and value per layer [batch,
    kv_heads, seq, head_dim])``, no cache in: the same model as the with-past step."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                         return_dict=True)
        present = []
        for layer in out.past_key_values.layers[: self.layers]:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def export_with_past(wrapper: DecoderWithPastWrapper, exporter: str) -> onnx.ModelProto:
    """Export one ``decoder_with_past`` model: ``exporter`` "ts" (TorchScript, opset 17) or
    "dynamo" (opset 18); dims named batch, seq, past_seq and total_seq (= past + seq).
    A :class:`DecoderNoPastWrapper` exports the no-past step (no past inputs; the mask and
    the presents are ``seq`` long)."""
    layers = cache_geometry(wrapper)[0]
    inputs, outputs = with_past_names(layers)
    no_past = isinstance(wrapper, DecoderNoPastWrapper)
    ex = with_past_inputs(wrapper, 2, 3, 0 if no_past else 5)
    if no_past:
        inputs = inputs[:2]
    args = tuple(ex[n] for n in inputs)
    total = "seq" if no_past else "total_seq"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "ts":
            dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: total},
                   "logits": {0: "batch", 1: "seq"}}
            dyn.update({n: {0: "batch", 2: "past_seq"} for n in inputs[2:]})
            dyn.update({n: {0: "batch", 2: total} for n in outputs[1:]})
            buf = io.BytesIO()
            torch.onnx.export(wrapper, args, buf, dynamo=False, opset_version=TS_OPSET,
                              input_names=inputs, output_names=outputs, dynamic_axes=dyn,
                              do_constant_folding=True)
            proto = onnx.load_from_string(buf.getvalue())
            note = f"torch.onnx.export(dynamo=False, opset_version={TS_OPSET})"
        else:
            from torch.export import Dim

            auto = Dim.DYNAMIC
            shapes = ({0: auto, 1: auto}, {0: auto, 1: auto})
            if not no_past:  # *past: one tuple
                shapes += (tuple({0: auto, 2: auto} for _ in inputs[2:]),)
            prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=DYNAMO_OPSET,
                                     input_names=inputs, output_names=outputs,
                                     dynamic_shapes=shapes, external_data=False, optimize=True,
                                     report=False, verify=False)
            proto = prog.model_proto
            for node in proto.graph.node:
                keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
                del node.metadata_props[:]
                node.metadata_props.extend(keep)
            note = f"torch.onnx.export(dynamo=True, opset_version={DYNAMO_OPSET})"
    proto.ir_version = IR_VERSION
    proto.doc_string = (f"onnxopt decoder_with_past model: {type(wrapper.model).__name__} random, "
                        f"attn_implementation={wrapper.model.config._attn_implementation}, {note}")
    _name_with_past_dims(proto, total)
    return proto


def _name_with_past_dims(proto: onnx.ModelProto, total: str = "total_seq") -> None:
    """Input and output dims read batch / seq / past_seq / total_seq, whatever the exporter
    called them (``total``: the mask's and the presents' length)."""
    wanted: dict[str, str] = {}
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        names = {"input_ids": ("batch", "seq"), "attention_mask": ("batch", total)}.get(
            vi.name, ("batch", None, "past_seq"))
        for d, w in zip(dims, names):
            if w and d.HasField("dim_param"):
                wanted.setdefault(d.dim_param, w)
    for vis in (proto.graph.input, proto.graph.output, proto.graph.value_info):
        for vi in vis:
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in wanted:
                    d.dim_param = wanted[d.dim_param]
    for vi in proto.graph.output:
        dims = vi.type.tensor_type.shape.dim
        if vi.name.startswith("present.") and len(dims) == 4 and not dims[2].HasField("dim_value"):
            dims[2].dim_param = total


def verify_with_past(wrapper: DecoderWithPastWrapper, path: str) -> float:
    """Worst relative error of every output against PyTorch in ONNX Runtime, over right and
    left padding, batch 1 and 2, one and several new tokens, short and longer caches."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in sess.get_inputs()]
    worst = 0.0
    for batch, seq, past, left, right in ((1, 1, 7, 0, 0), (2, 1, 12, 3, 0), (2, 4, 9, 0, 2),
                                          (3, 6, 4, 2, 0)):
        inp = with_past_inputs(wrapper, batch, seq, past, left, right)
        with torch.no_grad():
            ref = wrapper(*[inp[n] for n in inputs])
        got = sess.run(None, {n: inp[n].numpy() for n in inputs})
        worst = _worst_error(path, ref, got, worst)
    return worst


def _worst_error(path, refs, gots, worst: float) -> float:
    """The largest relative error so far, with one case's outputs (PyTorch's, ONNX Runtime's)
    taken in; an output of another shape is an error."""
    for r, g in zip(refs, gots):
        r = r.numpy()
        if r.shape != g.shape:
            raise AssertionError(f"{path}: shape {g.shape} != {r.shape}")
        worst = max(worst, float(np.abs(g - r).max()) / max(1.0, float(np.abs(r).max())))
    return worst


def _decoder_arguments(prog: str, families, out: str, argv: list[str] | None):
    """The decoder exports' options (``--only``, ``--out``, ``--exporter``, ``--attn``), parsed;
    the output folder made."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--only", default=",".join(families))
    ap.add_argument("--out", default=out)
    ap.add_argument("--exporter", choices=["ts", "dynamo", "both"], default="both")
    ap.add_argument("--attn", choices=["eager", "sdpa"], help="default: the family's own")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    return args


def main_with_past(argv: list[str] | None = None) -> int:
    """``python models/export.py with-past --only gpt2 --out DIR``: decoder_with_past exports."""
    args = _decoder_arguments("export.py with-past", WITH_PAST,
                              os.path.dirname(os.path.abspath(__file__)), argv)
    bad = 0
    for name in args.only.split(","):
        for tag in ("ts", "dynamo") if args.exporter == "both" else (args.exporter,):
            wrapper = build_with_past(name, args.attn)
            path = os.path.join(args.out, f"{name}_with_past.{tag}.onnx")
            proto = export_with_past(wrapper, tag)
            onnx.save_model(proto, path, save_as_external_data=False)
            err = verify_with_past(wrapper, path)
            print(f"{path}: {len(proto.graph.node)} nodes, worst rel err {err:.2e}", flush=True)
            bad += not err < 1e-4
    return 1 if bad else 0



# --------------------------------------------------------------------------- merged decoders

MERGED = ("gpt2", "llama")  # shipped; any WITH_PAST family exports
MERGED_VOCAB = 256  # the embedding (and llama's own head) are most of the file: kept small


def build_merged(name: str, attn: str | None = None
                 ) -> tuple[DecoderWithPastWrapper, DecoderNoPastWrapper]:
    """The with-past and the no-past step of one model (the same weights), vocab
    ``MERGED_VOCAB``; ``attn``: the attention implementation (default: the family's own)."""
    wrapper = build_with_past(name, attn)
    wrapper.model.resize_token_embeddings(MERGED_VOCAB)
    wrapper.model.config.vocab_size = MERGED_VOCAB
    wrapper.eval()
    return wrapper, DecoderNoPastWrapper(wrapper.model, wrapper.layers).eval()


def export_merged(name: str, exporter: str, attn: str | None = None) -> onnx.ModelProto:
    """Optimum's ``decoder_model_merged``: the no-past and the with-past export of one model
    joined by ``merge_decoders`` under an ``If(use_cache_branch)``."""
    from merge_decoders import merge_decoders

    with_past, no_past = build_merged(name, attn)
    return merge_decoders(export_with_past(with_past, exporter),
                          export_with_past(no_past, exporter))


def verify_merged(name: str, path: str, attn: str | None = None) -> float:
    """Worst relative error of every output against PyTorch in ONNX Runtime: the cache
    branch as :func:`verify_with_past` checks it, and the no-cache branch (past inputs of
    length 0) at three lengths, with right padding."""
    import onnxruntime as ort

    with_past, no_past = build_merged(name, attn)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = with_past_names(with_past.layers)[0]
    worst = 0.0
    cases = [(True, b, s, p, lp, rp) for b, s, p, lp, rp in
             ((1, 1, 7, 0, 0), (2, 1, 12, 3, 0), (2, 4, 9, 0, 2))]
    # (no left padding without a cache: its fully masked query rows are garbage that the
    # dynamo export of sdpa and PyTorch make differently; the rows that are read agree)
    cases += [(False, b, s, 0, 0, rp) for b, s, rp in ((1, 5, 0), (2, 7, 3), (3, 11, 4))]
    for flag, batch, seq, past, left, right in cases:
        inp = with_past_inputs(with_past, batch, seq, past, left, right)
        with torch.no_grad():
            ref = with_past(*[inp[n] for n in names]) if flag else no_past(*[inp[n] for n in
                                                                             names[:2]])
        feeds = {n: inp[n].numpy() for n in names}
        feeds["use_cache_branch"] = np.array([flag])
        worst = _worst_error(path, ref, sess.run(None, feeds), worst)
    return worst


def main_merged(argv: list[str] | None = None) -> int:
    """``python models/export.py merged [--only gpt2,llama] [--exporter ts|dynamo|both]``:
    merged decoders (``merged_NAME.TAG.onnx``, to ``models/other/merged/`` by default)."""
    args = _decoder_arguments("export.py merged", MERGED, os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "other", "merged"), argv)
    bad = 0
    for name in args.only.split(","):
        for tag in ("ts", "dynamo") if args.exporter == "both" else (args.exporter,):
            path = os.path.join(args.out, f"merged_{name}.{tag}.onnx")
            proto = export_merged(name, tag, args.attn)
            onnx.checker.check_model(proto, full_check=True)
            onnx.save_model(proto, path, save_as_external_data=False)
            err = verify_merged(name, path, args.attn)
            kb = os.path.getsize(path) // 1024
            print(f"{path}: {kb} KB, worst rel err {err:.2e}", flush=True)
            bad += not err < 1e-4
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated model names: " + ",".join(SPECS))
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--exporter", choices=["ts", "dynamo", "both"], default="both")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument(
        "--summary",
        action="store_true",
        help="only print the README table and op histograms of existing files",
    )
    args = ap.parse_args(argv)

    names = [n for n in args.only.split(",") if n] or list(SPECS) + list(AUDIO_SPECS)
    audio = [n for n in names if n in AUDIO_SPECS]
    names = [n for n in names if n not in AUDIO_SPECS]
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(SPECS)}")
    if args.summary:
        summarize(args.out, names)
        return 0
    os.makedirs(args.out, exist_ok=True)
    exporters = {"ts": export_ts, "dynamo": export_dynamo}
    if args.exporter != "both":
        exporters = {args.exporter: exporters[args.exporter]}

    failures = export_audio_family(audio, args.out, list(exporters), not args.no_verify)
    for name in names:
        spec = SPECS[name]
        for tag, fn in exporters.items():
            model = build(spec)  # fresh, seeded build for every file
            path = os.path.join(args.out, f"{name}.{tag}.onnx")
            print(f"[{name}.{tag}] exporting ...", flush=True)
            try:
                proto = fn(spec, model)
            except Exception as e:  # noqa: BLE001
                failures[f"{name}.{tag}"] = [f"export failed: {type(e).__name__}: {e}"]
                print(f"    FAILED: {e}", flush=True)
                continue
            onnx.save_model(proto, path, save_as_external_data=False)
            print(
                f"    {path}: {os.path.getsize(path) / 1024:.0f} KB, {len(proto.graph.node)} nodes",
                flush=True,
            )
            if not args.no_verify:
                probs = verify(spec, model, path)
                if probs:
                    failures[f"{name}.{tag}"] = probs
    for k, v in failures.items():
        print(f"PROBLEM {k}: " + "; ".join(v[:5]), file=sys.stderr)
    return 1 if failures else 0


# --------------------------------------------------------------------------- more families
# Disentangled attention (DeBERTa-v2) and speech encoders (wav2vec2, HuBERT), issue 33.


def _deberta_v2(attn: str) -> nn.Module:
    """DeBERTa-v2: disentangled attention, scores Q·Kᵀ + c2p + p2c, each gathered from
    relative-position projections and all scaled by 1/sqrt(3·d); heads merged into the batch."""
    from transformers import DebertaV2Config, DebertaV2Model

    cfg = DebertaV2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POS,
        **DEBERTA_KWARGS,
    )
    cfg._attn_implementation = attn
    return DebertaV2Model(cfg)


SPECS["deberta_v2"] = Spec("deberta_v2", _deberta_v2, "DebertaV2Model", "eager", "text",
                           "last_hidden_state", True)


class AudioWrapper(nn.Module):
    """Calls a HF speech encoder with (input_values, attention_mask) and returns output[0]."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_values=input_values, attention_mask=attention_mask,
                          return_dict=False)[0]


# conv front end 10/5 then 3/2 (1 frame per 10 samples), GroupNorm with one group per
# channel after the first conv (feat_extract_norm="group"), post-norm encoder
SPEECH_KWARGS = {
    "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "intermediate_size": INTERMEDIATE, "conv_dim": (32, 32), "conv_stride": (5, 2),
    "conv_kernel": (10, 3), "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4,
    "feat_extract_norm": "group", "do_stable_layer_norm": False, "mask_time_prob": 0.0,
    "vocab_size": 32}
DEBERTA_KWARGS = {
    "relative_attention": True, "position_buckets": 32, "max_relative_positions": -1,
    "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm", "share_att_key": True,
    "type_vocab_size": 0}


def _speech_config(cls):
    return cls(**SPEECH_KWARGS)


def _wav2vec2(attn: str) -> nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = _speech_config(Wav2Vec2Config)
    cfg._attn_implementation = attn
    return Wav2Vec2Model(cfg)


def _hubert(attn: str) -> nn.Module:
    from transformers import HubertConfig, HubertModel

    cfg = _speech_config(HubertConfig)
    cfg._attn_implementation = attn
    return HubertModel(cfg)


AUDIO_SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec("wav2vec2", _wav2vec2, "Wav2Vec2Model", "eager", "audio", "last_hidden_state", True),
        Spec("hubert", _hubert, "HubertModel", "sdpa", "audio", "last_hidden_state", True),
    ]
}
AUDIO_SAMPLES = (400, 640)  # 39 and 63 frames


def audio_inputs(batch: int, samples: int, pad: bool, seed: int = 1) -> dict:
    """Random audio with right padding in the mask (row r loses r·samples/4 samples)."""
    g = torch.Generator().manual_seed(seed + 100 * batch + samples)
    values = torch.randn(batch, samples, generator=g)
    mask = torch.ones(batch, samples, dtype=torch.int64)
    if pad:
        for r in range(batch):
            n = samples // 8 if batch == 1 else (r * samples) // 4
            if n:
                mask[r, samples - n:] = 0
    return {"input_values": values, "attention_mask": mask}


def build_audio(spec: Spec) -> nn.Module:
    torch.manual_seed(seed_for(spec))
    return AudioWrapper(spec.build(spec.attn).eval()).eval()


def _name_audio_dims(proto: onnx.ModelProto, spec: Spec, tag: str) -> onnx.ModelProto:
    """Inputs read [batch, samples]; the output's frame dim keeps a name of its own."""
    for vi in proto.graph.input:
        for d, w in zip(vi.type.tensor_type.shape.dim, ("batch", "samples")):
            d.dim_param = w
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param, dims[2].dim_value = "batch", "frames", HIDDEN
    proto.ir_version = IR_VERSION
    proto.doc_string = (f"onnxopt test model: {spec.hf_class} tiny random (seed "
                        f"{seed_for(spec)}), attn_implementation={spec.attn}, {tag}")
    return proto


def export_audio(spec: Spec, model: nn.Module, tag: str) -> onnx.ModelProto:
    names = ["input_values", "attention_mask"]
    ex = audio_inputs(2, AUDIO_SAMPLES[0], pad=True)
    args = tuple(ex[n] for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if tag == "ts":
            buf = io.BytesIO()
            dyn = {n: {0: "batch", 1: "samples"} for n in names}
            dyn[spec.output] = {0: "batch", 1: "frames"}
            torch.onnx.export(model, args, buf, dynamo=False, opset_version=TS_OPSET,
                              input_names=names, output_names=[spec.output],
                              dynamic_axes=dyn, do_constant_folding=True)
            proto = onnx.load_from_string(buf.getvalue())
            note = f"torch.onnx.export(dynamo=False, opset_version={TS_OPSET})"
        else:
            from torch.export import Dim

            batch, samples = Dim("batch", min=1, max=64), Dim("samples", min=400, max=16000)
            prog = torch.onnx.export(
                model, args, dynamo=True, opset_version=DYNAMO_OPSET, input_names=names,
                output_names=[spec.output],
                dynamic_shapes={n: {0: batch, 1: samples} for n in names},
                external_data=False, optimize=True, report=False, verify=False)
            proto = prog.model_proto
            for node in proto.graph.node:
                keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
                del node.metadata_props[:]
                node.metadata_props.extend(keep)
            note = f"torch.onnx.export(dynamo=True, opset_version={DYNAMO_OPSET})"
    return _name_audio_dims(proto, spec, note)


def verify_audio(model: nn.Module, path: str) -> list[str]:
    import onnxruntime as ort

    problems: list[str] = []
    onnx.checker.check_model(onnx.load(path), full_check=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch in (1, 2):
        for samples in AUDIO_SAMPLES:
            for pad in (False, True):
                inp = audio_inputs(batch, samples, pad)
                with torch.no_grad():
                    ref = model(**inp).numpy()
                got = sess.run(None, {k: v.numpy() for k, v in inp.items()})[0]
                err = float(np.abs(got - ref).max()) / max(1.0, float(np.abs(ref).max()))
                worst = max(worst, err)
                if got.shape != ref.shape or not err < 1e-4:
                    problems.append(f"b={batch} n={samples} pad={pad}: {got.shape} err {err:.1e}")
    print(f"    verify: worst rel err {worst:.2e}, {len(problems)} problem(s)")
    return problems


def export_audio_family(names: list[str], out: str, exporters: list[str], check: bool) -> dict:
    """Export the speech encoders named in ``names``; returns {file: problems}."""
    failures: dict[str, list[str]] = {}
    for name in names:
        spec = AUDIO_SPECS[name]
        for tag in exporters:
            model = build_audio(spec)
            path = os.path.join(out, f"{name}.{tag}.onnx")
            print(f"[{name}.{tag}] exporting ...", flush=True)
            try:
                proto = export_audio(spec, model, tag)
            except Exception as e:  # noqa: BLE001
                failures[f"{name}.{tag}"] = [f"export failed: {type(e).__name__}: {e}"]
                continue
            onnx.save_model(proto, path, save_as_external_data=False)
            print(f"    {path}: {os.path.getsize(path) / 1024:.0f} KB", flush=True)
            if check and (probs := verify_audio(model, path)):
                failures[f"{name}.{tag}"] = probs
    return failures


if __name__ == "__main__":
    if sys.argv[1:2] == ["with-past"]:
        sys.exit(main_with_past(sys.argv[2:]))
    if sys.argv[1:2] == ["merged"]:
        sys.exit(main_merged(sys.argv[2:]))
    if sys.argv[1:2] == ["vits"]:
        sys.exit(main_vits(sys.argv[2:]))
    sys.exit(main())
