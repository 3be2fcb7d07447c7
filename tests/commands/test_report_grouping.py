"""The printed report groups refusals by code: a sentence names the value or node at fault,
so the same refusal at two places is two sentences, and grouping by sentence groups nothing."""

from __future__ import annotations

from types import SimpleNamespace

from onnxopt.commands.plain import PlainConsole
from onnxopt.commands.report import print_fusion, print_selection
from onnxopt.fuse import FusionReport, MatchStatus, Region
from onnxopt.refusal import Refusal


def _kernel(name: str):
    return SimpleNamespace(name=name)


def _selection(node: str, why):
    return SimpleNamespace(node=node, op="AttentionFused", chosen=_kernel("ort.Attention"),
                           basis="cost model", rejected=[(_kernel("cuda.flash"), why)])


def test_kernel_rejections_group_by_code(capsys):
    """Two nodes rejected for one reason, said of each node: one group, its first sentence."""
    report = SimpleNamespace(selections=[
        _selection("a1", Refusal("needs_cuda", "a1: needs a CUDA device")),
        _selection("a2", Refusal("needs_cuda", "a2: needs a CUDA device")),
        _selection("a3", Refusal("head_dim", "a3: head size 80"))])
    print_selection(PlainConsole(), report)
    out = capsys.readouterr().out
    assert "cuda.flash: a1: needs a CUDA device" in out
    assert "a2:" not in out and "a3:" not in out


def test_kernel_rejections_that_are_sentences_group_by_sentence(capsys):
    report = SimpleNamespace(selections=[_selection("a1", "needs CUDA"),
                                         _selection("a2", "needs CUDA")])
    print_selection(PlainConsole(), report)
    assert "cuda.flash: needs CUDA" in capsys.readouterr().out


def _refused(root: str, code: str, text: str) -> Region:
    return Region.not_fused("silu", "silu", root, MatchStatus.REFUSED, Refusal(code, text), 2)


def test_fusion_refusals_print_one_line_per_rule_and_code(capsys):
    report = FusionReport([_refused("m1", "used_outside_match", "%s1 is read outside"),
                           _refused("m2", "used_outside_match", "%s2 is read outside"),
                           _refused("m3", "not_a_constant", "%a: computed"),
                           _refused("m4", "not_a_constant", "%a: computed")])
    print_fusion(PlainConsole(), report)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  silu")]
    assert lines == ["  silu: %s1 is read outside  (and 1 more used_outside_match)",
                     "  silu: %a: computed  (x2)"]
