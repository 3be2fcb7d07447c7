"""Cases the long fuzz runs found, replayed from their recipes.

Why: each was a real failure of onnxopt (a valid model refused, an output ORT could
not run, a changed result, an internal warning); the fix is in the code, and the
recipe rebuilds the exact model, so a regression on any of them fails here with the
same verdict the long run gave. Recipes are from runs 11 to 62
(``benchmarks/fuzz_results.md``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz.pool import Pool


def _mutant(case_id: str, seed_model: str, case_seed: int, steps: list, external: bool) -> dict:
    return {"kind": "mutant", "case_id": case_id, "seed_model": seed_model,
            "case_seed": case_seed, "steps": steps, "external": external}


FOUND = {
    "intermediate_output_of_an_extra_input": _mutant(
        "m11-3304", "mistral.ts", 26164387,
        [["extra_input", 448862460], ["intermediate_output", 3261516358]], True),
    "rotary_on_a_corrupt_shape": _mutant(
        "m11-4120", "llama.dynamo", 32626291,
        [["attr_ints", 58789898], ["value_info_corrupt", 3071468290],
         ["init_typed_data", 2274903592]], True),
    "declared_value_info_of_a_wrong_rank": _mutant(
        "m11-9707", "t5enc.dynamo", 76869744, [["input_shape", 838839397]], False),
    "external_initializer_given_twice": _mutant(
        "m11-17043", "cnn", 134963528, [["init_duplicate", 1165333469]], True),
    "constant_node_named_like_an_input": _mutant(
        "m11-2399", "gemma.ts", 18997692,
        [["init_to_constant", 1997842245], ["init_as_input", 2616841233],
         ["input_change", 1433275979]], True),
    "graph_input_listed_twice": _mutant(
        "m11-8421", "t5enc.ts", 66685910,
        [["duplicate_node_name", 1693082687], ["input_change", 1454929614]], False),
    "duplicate_node_over_typed_data": _mutant(
        "m11-15267", "distilbert.ts", 120899384,
        [["init_typed_data", 1352072822], ["attr_int", 3502940383],
         ["duplicate_node", 919386154], ["byte_set", 2080542078]], False),
    "scale_of_an_unknown_dtype": _mutant(
        "m11-18464", "distilbert.dynamo", 146216427,
        [["value_info_corrupt", 3840478524], ["input_shape", 3516919106],
         ["empty_input", 3277437444]], False),
    "norm_with_trailing_empty_outputs": _mutant(
        "m11-19850", "vit.ts", 157192161,
        [["init_corrupt", 3197145409], ["trailing_empty_outputs", 2944033263],
         ["rename_value", 1285397401]], False),
    "norm_with_trailing_empty_outputs_and_corrupt_types": _mutant(
        "m11-12064", "bloom.dynamo", 95534827,
        [["trailing_empty_outputs", 401643559], ["value_info_corrupt", 3503095355]], False),
    "sparse_initializer_named_like_an_input": _mutant(
        "m11-4330", "control_flow", 34289281,
        [["init_as_input", 358240692], ["rename_value", 2548061064],
         ["init_sparse", 2311894640]], False),
    "external_tensor_without_a_length": _mutant(
        "m12-3298", "gpt2.ts", 26116874,
        [["init_external", 2769578693], ["empty_input", 1453738059],
         ["intermediate_output", 2196041110]], False),
    "external_tensor_without_a_length_flipped": _mutant(
        "m12-8498", "t5enc.dynamo", 67295674,
        [["init_external", 1456026198], ["byte_flip", 2866742127]], False),
    "shape_arithmetic_past_int64": _mutant(
        "m12-3144", "gpt_neox.ts", 24897348, [["attr_tensor", 2445195032]], False),
    "padding_candidate_of_another_batch": _mutant(
        "m12-4164", "opt.ts", 32974728,
        [["input_shape", 2638406468], ["insert_identity", 536956541]], False),
    "reduction_axes_that_are_not_integers": _mutant(
        "m14-3049", "rms_swiglu", 24145045,
        [["insert_identity", 173189451], ["init_corrupt", 3751095156]], False),
    "default_domain_imported_twice": _mutant(
        "m14-5569", "rms_swiglu", 44100925,
        [["opset_extra", 2057752978], ["extra_input", 2728072880],
         ["init_duplicate", 382612025]], False),
    "large_typed_tensor_with_a_segment_field": _mutant(
        "m15-8421", "gemma2.dynamo", 66685914,
        [["init_typed_data", 4223338833], ["segment_field", 3450998756]], True),
    "dim_named_like_a_number": _mutant(
        "m16-4441", "bloom.dynamo", 35168295,
        [["init_corrupt", 2373567178], ["input_shape", 560024673]], False),
    "constant_with_an_attribute_of_another_name": _mutant(
        "m16-937", "roberta.ts", 7420119,
        [["attr_add", 858768155], ["trailing_empty_inputs", 117121896]], False),
    "group_norm_of_two_billion_channels": _mutant(
        "m17-3494", "diffusion.ts", 27669003,
        [["init_huge_dims", 3845225900], ["init_raw_length", 2024911880]], False),
    "attention_on_an_empty_batch": _mutant(
        "m19-2827", "bert.dynamo", 22387032,
        [["opset_change", 233748122], ["input_shape", 1391269324]], False),
    "constant_value_of_another_attribute_type": _mutant(
        "m19-3561", "t5enc.ts", 28199578,
        [["attr_type", 4206549486], ["local_function", 603217093], ["attr_int", 3144762765]],
        False),
    "conv_over_a_negative_declared_width": _mutant(
        "m24-370", "diffusion.ts", 2930054,
        [["init_duplicate", 2378843137], ["input_shape", 4004676482]], False),
    "unsqueeze_over_axes_of_a_varying_length": _mutant(
        "m43-200", "gpt2.dynamo", 1583843,
        [["insert_identity", 2438473663], ["swap_inputs", 3061195103],
         ["value_info_corrupt", 3826346641]], False),
    "declared_shapes_only_unoptimized_ort_takes": _mutant(
        "m54-119", "mistral.ts", 942415,
        [["attr_ints", 1242041138], ["infer_value_info", 53061609],
         ["swap_inputs", 2071599647]], False),
    "mask_failing_at_every_length_of_a_merged_decoder": _mutant(
        "m61-596", "other/merged_decoder_gpt2", 4719785,
        [["node_domain", 517810944], ["bypass_node", 692434210]], False),
    "domain_that_is_not_utf8_in_the_input": _mutant(
        "m61-1445", "ml_only", 11443016,
        [["attr_floats", 1776218471], ["attr_type", 1015442206],
         ["corrupt_string", 3060340104]], False),
    "doc_string_that_is_not_utf8_in_a_stand_in_copy": _mutant(
        "m62-235", "other/int8_weight_only", 1861027,
        [["rounding_tail", 637878811], ["input_shape", 360363818],
         ["input_change", 4173161093], ["byte_flip", 1414653288]], False),
}


@pytest.fixture(scope="module")
def outcomes() -> dict:
    with Pool(2) as pool:
        return {o.case_id: o for o in pool.run(list(FOUND.values()))}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_case_now_passes(outcomes: dict, name: str) -> None:
    o = outcomes[FOUND[name]["case_id"]]
    assert o.verdict == "ok", f"{o.verdict}: {o.signature}\n{o.message}\n{o.detail[-500:]}"
