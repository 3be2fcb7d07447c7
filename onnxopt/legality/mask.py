"""What an attention mask is, proved by evaluating it.

Exporters build the same causal-plus-padding mask in a dozen spellings (Trilu,
triangular constants, ``arange`` comparisons, ``attention_mask`` reshaped and
inverted, ``Where`` with the float minimum). Instead of one pattern per
spelling, the mask's subgraph is cut out and run in ONNX Runtime on probe
inputs: several sizes, the 2-D padding input all ones and then with padding.
A mask is *causal* when, with no padding, exactly the positions above the
(bottom-right aligned) diagonal are masked at every size; it carries *key
padding* from an input when masking follows that input's zeros. A mask whose
construction looks triangular but fails the probe is reported as such, and
attention over it is not fused.

A *band* (sliding-window or local attention) is proved the same way: with the
query's position ``p = i + Skv − Sq``, every row sees exactly the keys
``p − w ≤ j ≤ p`` (causal band, Mistral's ``sliding_window = w + 1``) or
``|p − j| ≤ w`` (symmetric band, ModernBERT's local layers), one ``w`` at every
row and every size. A probe shorter than the window sees a plain triangle (or
nothing masked), which only says ``w`` is at least that long, so where the
mask's construction holds an integer constant longer than the probes (the
window, as exporters write it) one more probe runs just past it
(:func:`reach_probe_size`); a constant past :data:`REACH_CAP` cannot be probed,
and then the mask's structure is not claimed (it stays an exact additive mask).
A band of one width on one side and another on the other is refused
(``mask_band_not_carried``); rows of different widths, or a triangle on the wrong side,
are not a band (``mask_not_causal``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from onnxopt import evaluation, ort_helper
from onnxopt.ir.dtypes import numpy_dtype
from onnxopt.ir.model import Model
from onnxopt.ir.node import OPAQUE_OP
from onnxopt.ir.symdim import evaluate, is_floor_symbol
from onnxopt.ir.value import Value
from onnxopt.isolation import NativeCrash
from onnxopt.legality.probe_lengths import first_evaluable
from onnxopt.ops.mask_kind import MaskKind
from onnxopt.refusal import Refusal

MASKED = -1e4  # an additive value at or below this masks a key (exp underflows to 0)
HOLDS_BIAS = "the mask holds values between 0 and the masking range"
PROBE_SIZES = ((2, 5), (1, 9), (3, 4))
TRIANGULAR_OPS = frozenset({"Trilu", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Range"})
NOT_CAUSAL = Refusal("mask_not_causal", "the mask is built like a causal mask but is not causal")
BAND_NOT_CARRIED = Refusal("mask_band_not_carried", "the mask is a band with different widths "
                           "before and after the query (neither causal nor symmetric)")
# Integer constants of the mask's construction up to this are probed just past (a window of
# w keys needs a sequence of w + 2): a [1, 1, S, S] probe of 4,098² is some 17 M elements.
REACH_CAP = 4096
REACH_ELEMENTS = 1 << 26  # nor a probe whose mask (per-head planes included) is larger
REACH_OPS = frozenset({"Add", "Sub", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Min",
                       "Max", "Clip", "Trilu"})


@dataclass(frozen=True)
class MaskInfo:
    causal: bool = False
    padding_input: Value | None = None
    looks_causal: bool = False
    reason: Refusal | None = None  # why the probe could not classify it
    bias: bool = False  # it holds values between 0 and the masking range
    window: int = 0  # a band: keys at most this far from the query's position (0: none)
    # The one value the mask holds wherever it masks, padding and all (None: several, or not
    # probed): what a query that sees no key computes depends on it (see
    # onnxopt.ops.attention's ``mask_fill``).
    fill: float | None = None

    @property
    def kind(self) -> MaskKind:
        """What the probes proved, as the fused op states it (``ADDITIVE``: nothing)."""
        kind = (MaskKind.CAUSAL if self.causal else MaskKind.NONE) | (
            MaskKind.WINDOW if self.window else MaskKind.NONE) | (
            MaskKind.KEY_PADDING if self.padding_input is not None else MaskKind.NONE)
        return kind or MaskKind.ADDITIVE


def classify_mask(model: Model, mask: Value, batch_dim, key_dim, query_dim) -> MaskInfo:
    """Probe ``mask`` (broadcastable to [B, H, Sq, Skv]) for causal and key-padding structure."""
    if mask.const is not None:
        return _classify_constant(mask)
    nodes, inputs, _ = evaluation.cone([mask], shape_leaves=True)
    looks_causal = any(n.op_type in TRIANGULAR_OPS for n in nodes) or _triangular_constant(mask,
                                                                                          nodes)
    if mask.producer is None or not nodes:
        return MaskInfo(looks_causal=looks_causal, reason=Refusal(
            "mask_is_input", "the mask is a model input or constant"))
    if any(v.dtype not in ("int64", "int32", "bool", "float32", "float16") for v in inputs):
        return MaskInfo(looks_causal=looks_causal, reason=Refusal(
            "mask_reads_other_inputs", "the mask depends on non-mask inputs"))
    shape_leaves = [v for v in inputs if v.producer is not None]
    inputs = [v for v in inputs if v.producer is None]
    # A [batch, keys] input: keys by name, or (a key/value cache: the mask covers a ``total``
    # the keys' ``past + seq`` equals only at run time) checked against the mask's key axis
    # at every probe below.
    candidates = [v for v in inputs if v.shape is not None and len(v.shape) == 2
                  and v.shape[0] == batch_dim]
    if len(inputs) > 3 or any(v.shape is None or len(v.shape) > 2 for v in inputs):
        return MaskInfo(looks_causal=looks_causal, reason=Refusal(
            "mask_reads_activations", "the mask depends on activations"))
    if any(not _shape_known(v) for v in shape_leaves):
        return MaskInfo(looks_causal=looks_causal, reason=Refusal(
            "mask_shapes_unknown", "the mask depends on unknown shapes"))
    if any(n.op_type == OPAQUE_OP for n in nodes):
        return MaskInfo(looks_causal=looks_causal,
                        reason=Refusal("mask_reads_opaque_node",
                                       "the mask depends on a node onnxopt does not model"))
    proto = evaluation.subgraph_model(model, [mask], shape_leaves=True)
    if proto is None:
        return MaskInfo(looks_causal=looks_causal, reason=Refusal(
            "mask_not_cut_out", "the mask's subgraph cannot be cut out"))
    if mask.dtype == "bfloat16":
        _widen_output(proto)
    reach = reach_probe_size(nodes)
    planes = int(np.prod([d for d in (mask.shape or ())[1:-2] if isinstance(d, int)]))
    if reach is not None and (reach > REACH_CAP + 2 or planes * reach * reach > REACH_ELEMENTS):
        return MaskInfo(looks_causal=looks_causal)  # a window too long to probe: no claim
    sizes = PROBE_SIZES + (((1, reach),) if reach else ())
    try:
        verdict = ort_helper.ask(_probe, proto, [_Fed.of(v) for v in inputs],
                                 [_ShapeFed.of_leaf(v) for v in shape_leaves],
                                 [_Fed.of(v) for v in candidates], sizes,
                                 None if mask.shape is None else tuple(mask.shape))
    except NativeCrash as e:
        verdict = Refusal("mask_probe_crashed", f"ONNX Runtime {e}")
    except MemoryError:  # a window's probe is some 17 M elements: more than a process may have
        verdict = Refusal("mask_probe_out_of_memory",
                          "the mask's probe ran out of memory (its structure is not claimed)")
    if verdict == HOLDS_BIAS:
        return MaskInfo(looks_causal=looks_causal, bias=True)
    if isinstance(verdict, str):  # the probe's own word (it runs in the ORT helper)
        verdict = Refusal("mask_not_evaluable", verdict)
    if isinstance(verdict, Refusal):
        return MaskInfo(looks_causal=looks_causal, reason=verdict)
    band_votes, pad_votes, fills = verdict
    padding = next((c for c in candidates if all(pad_votes[c.name])), None)
    band = _band_of_votes(band_votes)
    if isinstance(band, Refusal):
        return MaskInfo(looks_causal=looks_causal, reason=band if looks_causal else None)
    causal, window = band
    fill = None
    if padding is not None and len(fills[padding.name]) == 1:
        (fill,) = fills[padding.name]
    return MaskInfo(causal=causal, window=window, padding_input=padding,
                    looks_causal=looks_causal, fill=fill)


def reach_probe_size(nodes) -> int | None:
    """The sequence length past every integer constant the mask's arithmetic and comparisons
    read that the fixed probes do not reach (a sliding window is such a constant), or None.
    Integral float constants count too (positions compared as floats), up to
    :data:`REACH_CAP`: larger ones are masking values (-1e4, the float minimum), not windows."""
    longest = max(PROBE_SIZES, key=lambda size: size[1])[1]
    reach = None
    for n in nodes:
        if n.op_type not in REACH_OPS:
            continue
        for v in n.inputs:
            if v is None or v.const is None or v.const.size != 1:
                continue
            number = float(np.asarray(v.const.numpy(), np.float64).reshape(-1)[0])
            if v.dtype not in ("int64", "int32") and not (
                    v.dtype in ("float32", "float16", "float64") and number.is_integer()
                    and abs(number) <= REACH_CAP):
                continue
            value = int(abs(number)) if np.isfinite(number) else 0
            if value + 2 > longest:
                reach = max(reach or 0, value + 2)
    return reach


@dataclass(frozen=True)
class _Fed:
    """A model input the probe feeds, as plain data: the probe runs in the ORT helper
    (:mod:`onnxopt.ort_helper`), forked before the model was read, which has none of the IR."""

    name: str
    dtype: str | None
    shape: tuple | None

    @classmethod
    def of(cls, v: Value) -> _Fed:
        return cls(v.name, v.dtype, None if v.shape is None else tuple(v.shape))


@dataclass(frozen=True)
class _ShapeFed:
    """A ``Shape(of)[start:end]`` the probe feeds: ``of``'s dims at the probe sizes."""

    name: str
    of: _Fed
    start: int
    end: int | None

    @classmethod
    def of_leaf(cls, v: Value) -> _ShapeFed:
        node = v.producer
        return cls(v.name, _Fed.of(node.inputs[0]), node.attr("start", 0), node.attr("end"))


def _widen_output(proto) -> None:
    """The probe reads a bfloat16 mask as float32 (exactly: every bfloat16 is a float32), since
    ONNX Runtime's Python binding hands no bfloat16 array back."""
    out = proto.graph.output[0]
    wide = f"{out.name}.float32"
    proto.graph.node.append(onnx.helper.make_node("Cast", [out.name], [wide],
                                                  to=onnx.TensorProto.FLOAT))
    out.name = wide
    out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT


def _probe(proto, inputs: list[_Fed], shape_leaves: list[_ShapeFed], candidates: list[_Fed],
           sizes=PROBE_SIZES, mask_shape: tuple | None = None):
    """The mask's votes at every probe size: (band votes, padding votes by candidate name),
    or why it could not be evaluated. Runs ONNX Runtime on a piece of the user's model, so it
    runs out of onnxopt's process, in the ORT helper (:func:`onnxopt.ort_helper.ask`): a
    malformed piece may crash ORT's native code, and that must not take onnxopt with it. One
    thread: the piece is a few nodes on tensors of a few dozen elements."""
    try:
        sess = evaluation.session(proto, threads=1)
    except Exception as e:  # noqa: BLE001
        return f"the mask cannot be evaluated ({evaluation.first_line(e)})"
    band_votes: list = []
    pad_votes: dict[str, list[bool]] = {c.name: [] for c in candidates}
    fills: dict[str, set[float]] = {c.name: set() for c in candidates}
    for batch, seq in sizes:
        evaluated = first_evaluable(
            lambda length, batch=batch: _evaluate(sess, inputs, shape_leaves, batch, length), seq,
            lambda length, batch=batch: _mask_elements(mask_shape, inputs, shape_leaves, batch,
                                                       length))
        if isinstance(evaluated, str):
            return f"the mask cannot be evaluated ({evaluated})"
        symbols, feeds_full, values = evaluated
        full = _masked(values)
        if full is None:
            return HOLDS_BIAS
        band_votes.append(_band(full))
        for cand in candidates:
            feeds = dict(feeds_full)
            feeds[cand.name] = _feed(cand, symbols, pad=True)
            keep = np.asarray(feeds[cand.name]) != 0
            pad_votes[cand.name].append(keep.shape[-1] == full.shape[-1]
                                        and _follows_padding(sess, feeds, full, keep,
                                                             fills[cand.name]))
    return band_votes, pad_votes, fills


def _classify_constant(mask: Value) -> MaskInfo:
    if mask.const.size > 1 << 22:
        return MaskInfo(reason=Refusal("mask_too_large",
                                       "the mask constant is too large to inspect"))
    full = _masked(mask.const.numpy())
    if full is None:
        return MaskInfo(bias=True)
    band = _band_of_votes([_band(full)])
    plane = full.reshape(-1, *full.shape[-2:])[0]
    tri = np.triu(np.ones(plane.shape, dtype=bool), 1)
    looks = plane.shape[0] > 1 and any(np.array_equal(plane, t) for t in (
        tri, tri.T, np.tril(np.ones(plane.shape, dtype=bool), -1), ~tri))
    if isinstance(band, tuple) and any(band):  # a constant holds one size: what it is, it is
        return MaskInfo(causal=band[0], window=band[1], looks_causal=True)
    reason = NOT_CAUSAL if looks else None
    return MaskInfo(looks_causal=looks, reason=reason)


# More distinct masked values than this: not one fill (and not worth carrying back).
MAX_FILLS = 4


def _follows_padding(sess, feeds, full: np.ndarray, keep: np.ndarray, fills: set) -> bool:
    """With ``keep`` zeros in the padding input, exactly those keys become masked too. Adds the
    values the padded mask holds where it masks to ``fills`` (up to MAX_FILLS + 1 of them)."""
    try:
        values = np.asarray(evaluation.run(sess, feeds)[0])
        padded = _masked(values)
    except Exception:  # noqa: BLE001
        return False
    if padded is not None and len(fills) <= MAX_FILLS:  # (padded: values with leading 1s)
        fills.update(float(x) for x in np.unique(values.reshape(padded.shape)[padded])
                     [:MAX_FILLS + 1])
    if padded is None or padded.ndim != 4 or keep.ndim != 2:
        return False
    try:  # a candidate whose batch is not the mask's (a malformed model) does not follow it
        expect = full | ~keep[:, None, None, :]
        shape = np.broadcast_shapes(padded.shape, expect.shape)
    except ValueError:
        return False
    return padded.shape == shape and np.array_equal(padded, np.broadcast_to(expect, shape))


def _masked(values: np.ndarray) -> np.ndarray | None:
    """Boolean 'masked' view of an additive mask; None if it holds in-between values. Compared
    in the mask's own float type (a float64 copy of a window's probe would be 128 MB more)."""
    values = np.asarray(values)
    if values.dtype.kind not in "f":
        values = values.astype(np.float64)
    masked = values <= MASKED
    if not np.all(masked | (values == 0)):
        return None
    while masked.ndim < 4:
        masked = masked[None]
    return masked


@dataclass(frozen=True)
class _Side:
    """One side of a band as one probe saw it: ``exact`` its width where a row's visible keys
    stop short of the sequence's end on that side (None where none does), ``at_least`` the
    width every row reached the end with (the band is at least that wide)."""

    exact: int | None
    at_least: int


def _band(masked: np.ndarray):
    """What one probe's masked positions are: "none" (nothing masked, more queries than keys),
    the band's two sides
    ``(before, after)`` (:class:`_Side`; a causal mask is a band with ``after`` exactly 0 and
    ``before`` unbounded), or False (not a band: a row that does not see its own position or
    one contiguous run of keys, rows of different widths, planes that differ)."""
    sq, skv = masked.shape[-2:]
    if not masked.any():  # every key visible: both sides at least as wide as the keys
        return (_Side(None, skv - 1), _Side(None, sq - 1)) if skv >= sq else "none"
    planes = masked.reshape(-1, *masked.shape[-2:])
    if not (planes == planes[:1]).all():
        return False
    visible = ~planes[0]
    before: set[int] = set()
    after: set[int] = set()
    reached_before = reached_after = 0
    for i in range(sq):
        keys = np.flatnonzero(visible[i])
        p = i + skv - sq
        if keys.size == 0 or keys[-1] - keys[0] + 1 != keys.size or not keys[0] <= p <= keys[-1]:
            return False
        if keys[0] > 0:
            before.add(int(p - keys[0]))
        else:
            reached_before = max(reached_before, p)
        if keys[-1] < skv - 1:
            after.add(int(keys[-1] - p))
        else:
            reached_after = max(reached_after, skv - 1 - p)
    if len(before) > 1 or len(after) > 1:
        return False
    sides = []
    for exact, reached in ((before, reached_before), (after, reached_after)):
        width = next(iter(exact), None)
        if width is not None and width < reached:  # a row reached further than the band
            return False
        sides.append(_Side(width, reached))
    return tuple(sides)


def _band_of_votes(votes) -> Refusal | tuple[bool, int]:
    """(causal, window) that every probe agrees with, or why there is none. A side no probe saw
    the end of is unbounded; a window is a band whose two sides the fused op can carry: after
    the query nothing (causal) or as many keys as before it (symmetric)."""
    if any(v is False for v in votes):
        return NOT_CAUSAL
    seen = [v for v in votes if v != "none"]
    if not seen:
        return False, 0
    widths = []
    for side in (0, 1):
        exact = {v[side].exact for v in seen if v[side].exact is not None}
        if len(exact) > 1:
            return NOT_CAUSAL
        width = next(iter(exact), None)
        at_least = max(v[side].at_least for v in seen)
        if width is not None and width < at_least:
            return NOT_CAUSAL
        widths.append(width)
    before, after = widths
    if before is None and after is None:
        return False, 0  # nothing masked at any size
    if after == 0:
        return True, before or 0  # causal: a window, or the whole triangle
    if before is not None and before == after and before > 0:
        return False, before
    if before is None or after is None:  # one side open, the other not the query: a triangle
        return NOT_CAUSAL                # on the wrong side, or no triangle at all
    return BAND_NOT_CARRIED


def _evaluate(sess, inputs: list[_Fed], shape_leaves: list[_ShapeFed], batch: int, seq: int):
    """(symbol sizes, feeds, mask) at the first consistent size assignment, or ORT's error.

    One size for every length first; a mask over a key/value cache covers ``past + seq``
    keys and evaluates only when the sizes agree, so mixes are tried next
    (:func:`onnxopt.evaluation.first_consistent`)."""
    base = _symbols(inputs + [v.of for v in shape_leaves], batch, seq)
    lengths = sorted(k for k, size in base.items() if size == seq and "(" not in k)

    def attempt(overrides):
        symbols = {**base, **overrides}
        feeds = {v.name: _feed(v, symbols, pad=False) for v in inputs}
        feeds.update({v.name: _shape_feed(v, symbols) for v in shape_leaves})
        return symbols, feeds, evaluation.run(sess, feeds)[0]

    result, error = evaluation.first_consistent(lengths, seq, attempt)
    return result if result is not None else evaluation.first_line(error)


def _mask_elements(mask_shape: tuple | None, inputs: list[_Fed], shape_leaves: list[_ShapeFed],
                   batch: int, length: int) -> int:
    """The mask's elements at a probe length, estimated before it runs (the longer probes'
    bound, :mod:`onnxopt.legality.probe_lengths`): a dim that does not evaluate at the probe's
    sizes (unknown, or a symbol the probe does not size) counts as ``length``; a mask of
    unknown rank as ``[batch, length, length]``."""
    symbols = _symbols(inputs + [v.of for v in shape_leaves], batch, length)
    total = 1
    for d in (batch, length, length) if mask_shape is None else mask_shape:
        try:
            n = length if d is None else evaluate(d, symbols, default=length)
        except (ValueError, ZeroDivisionError):  # a symbol of the file's own spelling
            n = length
        total *= max(int(n), 1)
    return total


def _symbols(inputs: list[_Fed], batch: int, seq: int) -> dict:
    """Probe sizes per symbol: the leading axis of a tensor of rank 2 or more is the batch, any
    other symbol the sequence. A 1-D tensor's one axis is a length (``arange(seq)``, read for
    its shape once shared values let the mask read it), and such tensors come last, so that
    a tensor with a batch axis names the batch first."""
    sizes: dict = {}
    for v in sorted(inputs, key=lambda v: len(v.shape or ()) < 2):
        for k, d in enumerate(v.shape or ()):
            if isinstance(d, str) and "*" not in d and not is_floor_symbol(d) and d not in sizes:
                sizes[d] = batch if k == 0 and len(v.shape) >= 2 else seq
    return sizes


def _shape_known(v: Value) -> bool:
    src = v.producer.input(0)
    return src is not None and src.shape is not None and all(d is not None for d in src.shape)


def _shape_feed(v: _ShapeFed, symbols: dict) -> np.ndarray:
    """The value ``Shape(x)`` takes at the probe sizes, from ``x``'s symbolic shape."""
    dims = [evaluate(d, symbols, default=3) for d in v.of.shape]
    return np.array(dims[slice(v.start, v.end)], dtype=np.int64)


def _feed(v: _Fed, symbols: dict, pad: bool) -> np.ndarray:
    shape = tuple(evaluate(d, symbols) for d in v.shape)
    if pad:
        return evaluation.padding_mask(shape).astype(numpy_dtype(v.dtype))
    return np.ones(shape, dtype=numpy_dtype(v.dtype))


def _triangular_constant(mask: Value, nodes) -> bool:
    for n in nodes:
        for v in n.inputs:
            if v is not None and v.const is not None and len(v.const.shape) >= 2 \
                    and v.const.shape[-1] == v.const.shape[-2] and v.const.shape[-1] > 1 \
                    and v.const.size <= 1 << 22:
                a = v.const.numpy()
                tri = np.triu(np.ones(a.shape[-2:], dtype=bool), 1)
                flat = a.reshape(-1, *a.shape[-2:])[0] != 0
                if np.array_equal(flat, tri) or np.array_equal(flat, ~tri):
                    return True
    return False
