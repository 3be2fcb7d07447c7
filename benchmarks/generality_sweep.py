"""Generality sweep: architectures no rule was written for, both exporters, fused and verified.

    python benchmarks/generality_sweep.py                  # export (export venv) + optimize
    python benchmarks/generality_sweep.py --skip-export    # reuse benchmarks/_work/generality
    python benchmarks/generality_sweep.py --only phi,bloom

Builds twelve more Hugging Face architectures with ``models/export.py``'s machinery (tiny
configs, random seeded weights, the same wrappers and exporter settings; in the export
venv, which has torch), then runs ``onnxopt optimize --target cpu`` on each file and
verifies the result against the original in ONNX Runtime. The table gives, per file, the
Softmax count of the original, fused regions per rule as ``fused/refused/partial``, and
whether the output verifies.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "generality"
EXPORT_PYTHON = "/work/venv-export/bin/python"


def models_export():
    """``models/export.py`` as a module (its builders, wrappers and exporter settings)."""
    if str(ROOT / "models") not in sys.path:
        sys.path.insert(0, str(ROOT / "models"))
    import export

    return export


def specs():
    """(name, config class, model class, attention implementation, output, config kwargs[,
    kind]); kind is "text" (the default), "seq2seq" (an encoder-decoder reading the ids on
    both sides) or "vision" (pixel_values [batch, 3, 32, 32])."""
    e = models_export()
    HEADS, HIDDEN, INTERMEDIATE, LAYERS, MAX_POS, VOCAB = (
        e.HEADS, e.HIDDEN, e.INTERMEDIATE, e.LAYERS, e.MAX_POS, e.VOCAB)

    def decoder(**kw):
        base = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE,
                "max_position_embeddings": MAX_POS, "use_cache": False}
        return {**base, **kw}

    gpt = {"vocab_size": VOCAB, "n_embd": HIDDEN, "n_layer": LAYERS, "n_head": HEADS,
           "n_positions": MAX_POS, "use_cache": False}
    def seq2seq(**kw):
        return {"vocab_size": VOCAB, "encoder_layers": LAYERS, "decoder_layers": LAYERS,
                "max_position_embeddings": MAX_POS, "use_cache": False, **kw}

    def vision(**kw):
        return {"num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "image_size": 32,
                "num_channels": 3, **kw}

    encoder = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
               "num_attention_heads": HEADS, "intermediate_size": INTERMEDIATE,
               "max_position_embeddings": MAX_POS}
    return [
        ("phi", "PhiConfig", "PhiForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=HEADS, partial_rotary_factor=0.5)),
        ("gemma", "GemmaConfig", "GemmaForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=1, head_dim=HIDDEN // HEADS)),
        ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=2, head_dim=HIDDEN // HEADS)),
        ("falcon", "FalconConfig", "FalconForCausalLM", "sdpa", "logits",
         {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
          "num_attention_heads": HEADS, "use_cache": False, "new_decoder_architecture": False,
          "multi_query": True, "alibi": False}),
        ("bloom", "BloomConfig", "BloomForCausalLM", "eager", "logits",
         {"vocab_size": VOCAB, "hidden_size": HIDDEN, "n_layer": LAYERS, "n_head": HEADS,
          "use_cache": False}),
        ("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", "sdpa", "logits",
         {**gpt, "multi_query": True}),
        ("gptj", "GPTJConfig", "GPTJForCausalLM", "eager", "logits", {**gpt, "rotary_dim": 8}),
        ("stablelm", "StableLmConfig", "StableLmForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=HEADS)),
        ("electra", "ElectraConfig", "ElectraModel", "eager", "last_hidden_state",
         {**encoder, "embedding_size": HIDDEN}),
        ("albert", "AlbertConfig", "AlbertModel", "eager", "last_hidden_state",
         {**encoder, "embedding_size": 32}),
        ("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=2)),
        ("olmo", "OlmoConfig", "OlmoForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=HEADS)),
        # The model families of issue 11: mixtures of experts, encoder-decoders, vision.
        ("mixtral", "MixtralConfig", "MixtralForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
        ("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=INTERMEDIATE // 2,
                 shared_expert_intermediate_size=INTERMEDIATE // 2)),
        ("olmoe", "OlmoeConfig", "OlmoeForCausalLM", "sdpa", "logits",
         decoder(num_key_value_heads=HEADS, num_experts=4, num_experts_per_tok=2)),
        ("bart", "BartConfig", "BartModel", "eager", "last_hidden_state", seq2seq(
            d_model=HIDDEN, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
            encoder_ffn_dim=INTERMEDIATE, decoder_ffn_dim=INTERMEDIATE), "seq2seq"),
        ("marian", "MarianConfig", "MarianModel", "sdpa", "last_hidden_state", seq2seq(
            d_model=HIDDEN, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
            encoder_ffn_dim=INTERMEDIATE, decoder_ffn_dim=INTERMEDIATE,
            decoder_start_token_id=0, pad_token_id=1), "seq2seq"),
        ("t5", "T5Config", "T5Model", "eager", "last_hidden_state",
         {"vocab_size": VOCAB, "d_model": HIDDEN, "d_kv": HIDDEN // HEADS, "d_ff": INTERMEDIATE,
          "num_layers": LAYERS, "num_heads": HEADS, "use_cache": False}, "seq2seq"),
        ("clip_vision", "CLIPVisionConfig", "CLIPVisionModel", "sdpa", "last_hidden_state",
         vision(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, patch_size=8), "vision"),
        ("siglip_vision", "SiglipVisionConfig", "SiglipVisionModel", "sdpa",
         "last_hidden_state",
         vision(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, patch_size=8), "vision"),
        ("convnext", "ConvNextConfig", "ConvNextModel", "eager", "last_hidden_state",
         {"num_channels": 3, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2,
          "image_size": 32}, "vision"),
        ("mobilevit", "MobileViTConfig", "MobileViTModel", "eager", "last_hidden_state",
         {"num_channels": 3, "image_size": 32, "hidden_sizes": [32, 48, 64],
          "neck_hidden_sizes": [8, 16, 24, 32, 40, 48, 64], "num_attention_heads": 2,
          "patch_size": 2}, "vision"),
        # The families of issue 33: disentangled attention and speech encoders.
        ("deberta_v2", "DebertaV2Config", "DebertaV2Model", "eager", "last_hidden_state",
         {**encoder, **e.DEBERTA_KWARGS}),
        ("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", "eager", "last_hidden_state",
         e.SPEECH_KWARGS, "audio"),
        ("hubert", "HubertConfig", "HubertModel", "sdpa", "last_hidden_state",
         e.SPEECH_KWARGS, "audio"),
        # Relative-position attention (VITS's text encoder, issue 33) at the sizes above, not
        # models/vits.*'s one small layer: P read by the relative-value term.
        ("vits", "VitsConfig", "VitsTextEncoder", "eager", "last_hidden_state",
         {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
          "ffn_dim": INTERMEDIATE, "window_size": 4}, "vits"),
    ]


def stage_export(only: list[str] | None) -> None:
    """(export venv) Export every selected architecture with both exporters."""
    import warnings

    import onnx
    import transformers

    export = models_export()
    warnings.filterwarnings("ignore")
    WORK.mkdir(parents=True, exist_ok=True)
    for name, cfg_cls, model_cls, attn, output, kwargs, *kind in specs():
        if only and name not in only:
            continue
        kind = kind[0] if kind else "text"

        def build(attn, cfg_cls=cfg_cls, model_cls=model_cls, kwargs=kwargs):
            cfg = getattr(transformers, cfg_cls)(**kwargs)
            cfg._attn_implementation = attn
            return getattr(transformers, model_cls)(cfg)

        if kind == "vits":  # (input_ids, attention_mask) through models/export.py's wrapper
            def build(attn, kwargs=kwargs):
                return export._vits(attn, **kwargs)

        spec = export.Spec(name, build, model_cls, attn,
                           kind if kind in ("vision", "audio") else "text", output, True,
                           seq2seq=kind == "seq2seq")
        if kind == "audio":  # (input_values, attention_mask): models/export.py's speech path
            _export_audio(export, spec, name)
            continue
        try:
            model = export.build(spec)
        except Exception as e:  # noqa: BLE001 - a transformers release without this config
            print(f"build failed {name}: {str(e).splitlines()[0][:160]}", flush=True)
            continue
        for exporter, fn in (("ts", export.export_ts), ("dynamo", export.export_dynamo)):
            out = WORK / f"{name}.{exporter}.onnx"
            try:
                onnx.save(fn(spec, model), str(out))
                print(f"exported {out.name}", flush=True)
            except Exception as e:  # noqa: BLE001 - an exporter failure is reported, not fatal
                print(f"export failed {out.name}: {str(e).splitlines()[0][:160]}", flush=True)


def _export_audio(export, spec, name: str) -> None:
    import onnx

    for exporter in ("ts", "dynamo"):
        out = WORK / f"{name}.{exporter}.onnx"
        try:
            onnx.save(export.export_audio(spec, export.build_audio(spec), exporter), str(out))
            print(f"exported {out.name}", flush=True)
        except Exception as e:  # noqa: BLE001 - an exporter failure is reported, not fatal
            print(f"export failed {out.name}: {str(e).splitlines()[0][:160]}", flush=True)


def optimize_all(only: list[str] | None) -> None:
    from onnxopt.exporter import save_model
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline
    from onnxopt.verification import verify_models

    rules = ("attention", "layer_norm", "rms_norm", "group_norm", "gelu", "silu", "swiglu",
             "rotary")
    print("| file | Softmax | " + " | ".join(rules) + " | verify |")
    print("|---|---:|" + "---|" * len(rules) + "---|")
    for path in sorted(WORK.glob("*.onnx")):
        if path.name.endswith(".opt.onnx") or (only and path.name.split(".")[0] not in only):
            continue
        result = run_pipeline(str(path), OptimizeOptions(target="cpu"))
        out = path.with_suffix(".opt.onnx")
        save_model(result.proto, result.external, str(out))
        fusion = result.report.stages["fuse"]
        cells = [f"{fusion.count(r)}/{fusion.count(r, 'refused')}/{fusion.count(r, 'partial')}"
                 for r in rules]
        report = verify_models(str(path), str(out))
        worst = max(o.max_rel for o in report.outputs)
        print(f"| {path.name} | {result.report.nodes_before.get('Softmax', 0)} | "
              + " | ".join(cells) + f" | {'ok' if report.ok else 'FAILED'} ({worst:.1e}) |",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["export"], help=argparse.SUPPRESS)
    ap.add_argument("--only", default="")
    ap.add_argument("--skip-export", action="store_true")
    ap.add_argument("--export-python", default=EXPORT_PYTHON)
    args = ap.parse_args(argv)
    only = [n for n in args.only.split(",") if n] or None
    if args.stage == "export":
        stage_export(only)
        return 0
    start = time.time()
    if not args.skip_export:
        cmd = [args.export_python, __file__, "--stage", "export", "--only", args.only]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    optimize_all(only)
    print(f"\n{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}; "
          f"{time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
