"""Sites of non-exact rewrites: recorded, carried through later edits, confined by fusion."""

from __future__ import annotations

import numpy as np
import pytest

from onnxopt.importer import import_model
from onnxopt.ir.builder import FUSED_DOMAIN
from onnxopt.ir.edit import replace_value
from onnxopt.ir.exactness import (
    ExactnessPolicy,
    dying_sites,
    record,
    rewrite_of,
    site,
    unconfined_sites,
)
from onnxopt.ir.graph import Graph
from onnxopt.ir.tensor import LazyTensor
from onnxopt.normalize.driver import NOT_EXACT, PASSES, run_passes


def _chain() -> tuple[Graph, list]:
    """x → A → B → C → out, each a Relu (A's output recorded as a site)."""
    g = Graph()
    x = g.add_input("x", "float32", (4,))
    a = g.make_node("Relu", [x], name="A")
    b = g.make_node("Relu", [a.output], name="B")
    c = g.make_node("Relu", [b.output], name="C")
    g.set_outputs([c.output])
    return g, [a, b, c]


def test_a_site_names_the_rewrite_and_its_node():
    _g, (a, _, _) = _chain()
    assert site("canonical_scale", a) == "canonical_scale@A"
    assert rewrite_of("canonical_scale@A") == "canonical_scale"


def test_policy_permits_what_it_was_not_told_to_refuse():
    _g, (a, b, _) = _chain()
    policy = ExactnessPolicy().refusing({"p@A"})
    assert not policy.permits("p", a)
    assert policy.permits("p", b)
    assert not ExactnessPolicy(inexact=False).permits("p", b)


def test_a_recorded_site_reaches_the_output():
    g, (a, _, _) = _chain()
    record(a.output, {"p@A"})
    assert unconfined_sites(g, FUSED_DOMAIN) == {"p@A"}


def test_a_fused_node_confines_what_it_reads():
    g, (a, b, _) = _chain()
    record(a.output, {"p@A"})
    b.domain = FUSED_DOMAIN
    assert unconfined_sites(g, FUSED_DOMAIN) == frozenset()


def test_a_second_reader_outside_fusion_is_not_confined():
    g, (a, b, c) = _chain()
    record(a.output, {"p@A"})
    b.domain = FUSED_DOMAIN
    side = g.make_node("Floor", [a.output], name="side")
    g.set_outputs([c.output, side.output])
    assert unconfined_sites(g, FUSED_DOMAIN) == {"p@A"}


def test_replacing_a_value_carries_what_dies_with_it():
    """An exact pass rebuilds B's result from x (a scale moved upstream, say): A and B die,
    and A's site now lives in the replacement."""
    g, (a, b, c) = _chain()
    record(a.output, {"p@A"})
    rebuilt = g.make_node("Relu", [g.inputs[0]], name="rebuilt", before=c)
    g.replace_all_uses(b.output, rebuilt.output)
    assert rebuilt.output.inexact == {"p@A"}
    g.remove([b, a])
    assert unconfined_sites(g, FUSED_DOMAIN) == {"p@A"}


def test_bypassing_an_input_carries_its_sites_to_the_reader():
    g, (a, b, c) = _chain()
    record(b.output, {"p@B"})
    g.set_input(c, 0, a.output)  # C now reads past B (B computed nothing new, say)
    assert c.output.inexact == {"p@B"}


def test_a_value_still_read_elsewhere_keeps_its_sites_where_they_are():
    """A stays (another reader); B dies: what B read of A's site goes to B's replacement."""
    g, (a, b, c) = _chain()
    record(a.output, {"p@A"})
    g.make_node("Relu", [a.output], name="other")
    assert dying_sites(b.output) == frozenset()  # B is still read: nothing dies yet
    replacement = g.make_node("Relu", [g.inputs[0]], name="r", before=c)
    g.replace_all_uses(b.output, replacement.output)
    assert a.output.inexact == {"p@A"}
    assert replacement.output.inexact == {"p@A"}


def test_replace_value_records_the_rewrite():
    g, (a, b, c) = _chain()
    new = g.make_node("Abs", [a.output], name="abs", before=c)
    assert replace_value(g, b.output, new.output, inexact="p@B")
    assert "p@B" in new.output.inexact


def test_a_site_in_a_subgraph_reaches_its_owners_outputs(make_model):
    model = import_model(make_model("""
        agraph (float[4] x, bool c) => (float[4] y) {
            y = If (c) <
                then_branch = g1 () => (float[4] t) { t = Neg (x) },
                else_branch = g2 () => (float[4] e) { e = Abs (x) }
            >
        }"""))
    body = next(iter(model.graph)).subgraphs()[0]
    record(next(iter(body)).output, {"p@t"})
    assert unconfined_sites(model.graph, FUSED_DOMAIN) == {"p@t"}


def test_constants_carry_sites_too():
    g = Graph()
    x = g.add_input("x", "float32", (4,))
    c = g.add_constant(LazyTensor.from_array(np.ones(4, np.float32)), "c")
    record(c, {"fold_constants@exp"})
    g.set_outputs([g.make_node("Add", [x, c], name="add").output])
    assert unconfined_sites(g, FUSED_DOMAIN) == {"fold_constants@exp"}


@pytest.fixture(scope="module")
def normalized_models(model_paths):
    out = []
    for path in model_paths:
        model = import_model(str(path))
        run_passes(model)
        out.append(model)
    return out


def test_only_passes_declared_not_exact_record_sites(normalized_models):
    names = {name for name, _ in PASSES}
    assert NOT_EXACT <= names
    recorded = set()
    for model in normalized_models:
        for node in model.graph.all_nodes():
            for v in (*node.inputs, *node.outputs):
                if v is not None:
                    recorded.update(rewrite_of(s) for s in v.inexact)
    assert recorded, "the models make non-exact rewrites"
    assert recorded <= NOT_EXACT
