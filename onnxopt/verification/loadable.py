"""Is a written model fit to hand to a user? The checks every result passes before it is saved.

Three questions, each answered only relative to the input (a check the original
itself fails says nothing about onnxopt): does the ONNX checker accept it, does
ONNX Runtime load it (with its default graph optimizations, as a user's session
does, and with onnxopt's own kernels registered where the model uses them), and
are its tensors no heavier than the input's. Each failure is one sentence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import onnx
from onnx import ModelProto

from onnxopt import evaluation, ort_helper
from onnxopt.exporter.save import inline_external
from onnxopt.exporter.serialize import model_parts
from onnxopt.importer.load import tensor_bytes
from onnxopt.ir.tensor import LazyTensor
from onnxopt.isolation import NativeCrash, started
from onnxopt.runtime.ort_module import ort
from onnxopt.verification.light_copy import LIGHT_SUFFIX, discard, write_light_copy
from onnxopt.verification.stand_in import FOLDER_PREFIX, STAND_IN_NAME, write_stand_in_copy

# Up to this many bytes of tensors, a result that no staged file holds is checked from its
# bytes (every value as it is, no files); above, through its stand-in copy
# (:mod:`onnxopt.verification.stand_in`), whose load costs the same at every size.
CHECKED_FROM_BYTES_MAX = 16 * 1024 * 1024
# Tensor bytes a result may add over the input's (scalars of a decomposition, small masks).
TENSOR_SLACK_BYTES = 4096
# The load check's session: ORT's defaults, less the prepacking of constant weights. That step
# comes after the graph is resolved and optimized, every kernel created and every initializer
# placed; it only copies weights into a kernel's faster layout (where a kernel cannot, it
# leaves them as they are), so it decides nothing about whether the file loads. On the 24-layer
# GPT-2 it was over a third of the load (0.27 -> 0.17 s, medians of 6, benchmarks/RESULTS.md).
#
# Nor does it convert float16 weights to float32 copies (FuseFp16InitializerToFp32Node
# Transformer, ORT_ENABLE_ALL). On CPU, where an op has no float16 kernel, ORT inserts Casts
# around it (InsertCastTransformer, which every session runs); this transformer then replaces
# each ``Cast(float16 initializer)`` by a float32 copy of the weight, after the graph was
# resolved and its kernels chosen: a faster layout of the same weight, as prepacking is. It
# read and copied every float16 weight, twice its bytes in fresh memory: 1 GB of float16
# MatMul weights took 2.2 GB and 5.4 s to load, and 53 MB and 0.01 s without it
# (benchmarks/RESULTS.md, 2026-12-04). An ORT without the setting does not read the entry.
LOAD_CHECK_CONFIG = {"session.disable_prepacking": "1",
                     "optimization.disable_specified_optimizers":
                         "FuseFp16InitializerToFp32NodeTransformer"}
# Nor does it plan which intermediate buffers share memory (``enable_mem_reuse``). A buffer
# must take another's where the kernel says its output aliases an input (Reshape), and that
# is planned either way; the search for a freed buffer of the same size to take over only
# saves memory at run time, and it walks every freed buffer whose size it cannot match, for
# each output: on the 24-layer GPT-2's result it took 85 of the load's 135 ms, on the
# 96-layer one 2.5 of 2.7 s (benchmarks/RESULTS.md). A wrong size it would share is said at
# run time, not at load ("Shape mismatch attempting to re-use buffer"), so this load could
# never see it. Its kernels are made on one thread: a pool's worker spins, waiting for work
# that making a session never gives it, on the core the command and the checker's child share
# (the command took 0.92 of the time with it, paired, on the 24-layer GPT-2).
LOAD_CHECK_OPTIONS = {"enable_mem_reuse": False, "intra_op_num_threads": 1}


@dataclass(frozen=True)
class Fitness:
    """What the checks said: ``None`` for a check that passed (or was not run), else why not."""

    checker: str | None = None
    loads: str | None = None
    weight: str | None = None
    unchecked: str | None = None  # why the checker and the load were not run
    # Where ``loads`` failed: the load again with ORT's graph optimizations off (``None``: it
    # loads so). A model whose own optimizations break it still runs in a session that turns
    # them off; its result must run there too.
    loads_unoptimized: str | None = None

    def problems(self, baseline: Fitness | None = None) -> list[str]:
        """The failures that ``baseline`` (the original's fitness) does not share. A result
        that does not load where the original does not either must still load with graph
        optimizations off where the original does."""
        out = []
        for name in ("checker", "loads", "weight"):
            mine = getattr(self, name)
            if mine and (baseline is None or getattr(baseline, name) is None):
                out.append(mine)
            elif (name == "loads" and mine and self.loads_unoptimized
                  and baseline.loads_unoptimized is None):
                out.append(self.loads_unoptimized)
        return out


def fitness(proto: ModelProto, external: dict[str, LazyTensor] | None = None, *,
            tensor_budget: int | None = None, serialized: bytes | None = None,
            size: int | None = None, staged: str | None = None,
            layout: dict[int, tuple[int, bytes | memoryview]] | None = None,
            left_out: dict[int, memoryview] | None = None) -> Fitness:
    """Run the checks on a model, of any size (``external``: its placeholder tensors;
    ``serialized``: ``proto``'s bytes where the caller has them, for a small model, see
    :data:`CHECKED_FROM_BYTES_MAX`; ``size``: its ``tensor_bytes`` where the caller has them
    (counting reads every raw tensor out of the message); ``staged``: the path of a file
    holding exactly ``proto``'s bytes, the output written beside its destination, which the
    checks then load: through its light copy where ``layout`` says where its initializers lie
    in it, :mod:`onnxopt.verification.light_copy`; ``left_out``: raw data ``proto``'s
    main-graph initializers lack, by position, as the pipeline's results have it).

    A model no staged file holds is checked from its bytes where it is small, else through
    its stand-in copy (:mod:`onnxopt.verification.stand_in`): the same graph, types and
    shapes, its float weights in a sparse file of zeros, in memory that does not grow with
    them. ``unchecked`` says why the checks did not run, where that copy could not be
    written."""
    weight = None
    size = tensor_bytes(proto, external, left_out=left_out) if size is None else size
    if tensor_budget is not None and size > tensor_budget + TENSOR_SLACK_BYTES:
        weight = f"its tensors weigh {size:,} bytes, more than the input's {tensor_budget:,}"
    if staged is not None and not external:
        light = write_light_copy(staged, proto, layout) if layout else None
        try:
            # Without a light copy, the staged file itself is loaded where it is small (where
            # it is not, reading it whole would cost its size: the stand-in copy instead).
            if light is not None or _small_file(staged):
                return Fitness(weight=weight, **native_checks(proto, light or staged))
        finally:
            discard(light)
    if serialized is None and size <= CHECKED_FROM_BYTES_MAX and not left_out:
        if external:
            whole = ModelProto()
            whole.CopyFrom(proto)
            inline_external(whole, external)
            proto = whole
        serialized = serialize(proto)
    if serialized is not None:
        return Fitness(weight=weight, **native_checks(proto, serialized))
    try:
        copy = write_stand_in_copy(proto, external, left_out)
    except OSError as e:
        return Fitness(weight=weight, unchecked=("its copy for the checks could not be written "
                                                 f"({e.strerror or e})"))
    try:
        return Fitness(weight=weight, **native_checks(proto, copy.path))
    finally:
        copy.discard()


def _small_file(path: str) -> bool:
    try:
        return os.path.getsize(path) <= CHECKED_FROM_BYTES_MAX
    except OSError:
        return True  # the file is gone: the checks say so, and nothing is kept


def serialize(proto: ModelProto, external: dict[str, LazyTensor] | None = None) -> bytes | None:
    """``proto``'s bytes where the checks load them as they are: ``None`` where it has external
    tensors (a copy with them inline is checked) or is more than protobuf can write (2 GB)."""
    parts = serialized_parts(proto, external)
    return None if parts is None else b"".join(parts)


def serialized_parts(proto: ModelProto, external: dict[str, LazyTensor] | None = None, *,
                     encoded: dict[int, memoryview] | None = None,
                     layout: dict[int, tuple[int, bytes | memoryview]] | None = None
                     ) -> list[bytes | memoryview] | None:
    """:func:`serialize` in pieces (:func:`onnxopt.exporter.serialize.model_parts`, with
    ``encoded``, its initializers' bytes at hand, and ``layout`` to fill), for a caller that
    writes them to a file rather than joining them."""
    if external:
        return None
    try:
        return model_parts(proto, encoded, layout)
    except ValueError:
        return None


def native_checks(proto: ModelProto, source: bytes | str) -> dict[str, str | None]:
    """The ONNX checker and ONNX Runtime's load of ``source`` (``proto``'s bytes, or the path
    of a file holding them) — C++ that a malformed model can crash, so each runs in a forked
    child (:mod:`onnxopt.isolation`; the load's forked from the ORT helper), the two side by
    side (the shorter one's time hides under the other's). From a file, ORT
    copies the weights once less than from bytes: on the 24-layer GPT-2 and LLaMA the checks
    with the staged write before them took 0.45 and 0.43 s against 0.60 and 0.57 s for bytes
    with the write beside them (medians of 9 in one process, benchmarks/RESULTS.md)."""
    found = {}
    # The load is asked of the ORT helper first (where ORT is loaded already:
    # :mod:`onnxopt.ort_helper`); the checker's child is forked here meanwhile.
    loads = ort_helper.submit(_load_problem, source, evaluation.uses_onnxopt_kernels(proto))
    children = (("checker", started(_checker_problem, source), "the ONNX checker"),
                ("loads", loads, "ONNX Runtime"))
    for name, child, what in children:
        try:
            found[name] = child.result()
        except NativeCrash as e:  # it died on the model: a problem like any other
            found[name] = f"{what} crashes on it ({e})"
    # The load's child answers for the load with ORT's optimizations and without them; where
    # it crashed, nothing is known of the second, and the crash stands for both.
    loads = found["loads"]
    found["loads"], found["loads_unoptimized"] = (loads if isinstance(loads, tuple)
                                                  else (loads, loads))
    return found


def _checker_problem(source: bytes | str) -> str | None:
    try:
        onnx.checker.check_model(source)
    except Exception as e:  # noqa: BLE001 - any complaint of the checker is the answer
        return f"the ONNX checker refuses it: {_first_line(e, source)}"
    return None


def _load_problem(source: bytes | str, kernels: bool | None) -> tuple[str | None, str | None]:
    """ORT's refusal of ``source`` with its default graph optimizations, and, where it
    refuses, with them off (``Fitness.loads_unoptimized``); ``None`` where it loads.
    ``kernels``: whether it uses onnxopt's kernels (``None``: not known)."""
    try:
        # Default graph optimizations, as a user's session has: ORT's load-time fusions
        # are part of loading (prepacking and the search for buffers to share are not:
        # LOAD_CHECK_CONFIG, LOAD_CHECK_OPTIONS).
        evaluation.session(source, config=LOAD_CHECK_CONFIG, kernels=kernels,
                           **_load_check_options())
    except Exception as e:  # noqa: BLE001 - any refusal of ORT's is the answer
        problem = f"ONNX Runtime cannot load it: {_first_line(e, source)}"
    else:
        return None, None
    try:
        evaluation.session(source, optimize=False, config=LOAD_CHECK_CONFIG, kernels=kernels,
                           **_load_check_options())
    except Exception as e:  # noqa: BLE001 - the same
        return problem, ("ONNX Runtime cannot load it, even with its graph optimizations off, "
                         f"as it loads the input: {_first_line(e, source)}")
    return problem, None


def _load_check_options() -> dict[str, object]:
    """:data:`LOAD_CHECK_OPTIONS` that the installed ONNX Runtime has: where an older one
    lacks a setting, its load does what that setting's default does (setting it would raise,
    and every result would seem not to load)."""
    return {k: v for k, v in LOAD_CHECK_OPTIONS.items() if hasattr(ort.SessionOptions, k)}


def _first_line(e: Exception, source: bytes | str) -> str:
    """The error on one line; a staged file's temporary name (or its light copy's, or a stand-in
    copy's), which the user never sees, is said as "the result"."""
    text = " ".join(str(e).split())
    if isinstance(source, str):
        folder = os.path.dirname(source)
        if os.path.basename(folder).startswith(FOLDER_PREFIX):  # a stand-in copy's
            text = text.replace(os.path.join(folder, STAND_IN_NAME), "its stand-in weights")
            text = text.replace(folder + os.sep, "")
        for name in (source, source.removesuffix(LIGHT_SUFFIX)):
            text = text.replace(name, "the result")
    return text[:240] if text else type(e).__name__


def file_fitness(path: str) -> Fitness:
    """The checks on an input whose weights lie in external data (read by path), in a child
    forked from the ORT helper, as every run of native code on the user's model is."""
    try:
        checker, loads, loads_unoptimized = ort_helper.call(_file_checks, path)
    except NativeCrash as e:
        checker = None
        loads = loads_unoptimized = f"ONNX Runtime or the ONNX checker crashes on it ({e})"
    return Fitness(checker=checker, loads=loads, loads_unoptimized=loads_unoptimized)


def _file_checks(path: str) -> tuple[str | None, str | None, str | None]:
    checker = None
    try:
        onnx.checker.check_model(path)
    except Exception as e:  # noqa: BLE001 - the checker's complaint is the answer
        checker = str(e) or type(e).__name__
    return (checker, *_load_problem(path, None))
