"""Each model run on every input set in turn, one model at a time, its results kept in files.

Both sessions alive at once need the memory of both models: a LLaMA-7B-shaped float16 model
(13.5 GB of weights) was killed for memory (23.5 GB across verify's children). So the
original runs first, alone, on every input set (finding the sizes it accepts); each set's
inputs and outputs go to a work folder, and its session is freed (where verify forks, its
process ends) before the optimized model's is made, which runs on those same inputs and
writes its outputs beside them. The comparison reads one run's files at a time.

The files are also what is known when a process dies: markers say whether each model loaded,
and every finished run left its files, so the report can say what was compared before a kill.
They are pickles (outputs may be sequences or maps) of the work folder's own making, read
back only by these functions.
"""

from __future__ import annotations

import gc
import os
import pickle
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto

from onnxopt import evaluation
from onnxopt.errors import ModelError, UnverifiedError, UsageError
from onnxopt.importer.load import map_model_file
from onnxopt.verification.decode_run import (
    DECODE_BATCH,
    DECODE_PAST,
    DecodeStep,
    decode_sizes,
)
from onnxopt.verification.dims import BATCH, OTHER, SPATIAL, dim_roles
from onnxopt.verification.inputs import (
    LARGER_SIDES,
    LONGER_SIZES,
    length_symbols,
    make_inputs,
    size_sets,
)
from onnxopt.verification.random_ops import Key, seeded

EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class OriginalJob:
    """What the original's run is asked: ``given`` input sets already in the folder (0: make
    ``runs`` size sets, then one at ``long_sequence`` where that is not None, then one decode
    step where ``decode`` is not None), the sizes ``--shape`` fixed, the image sides to try,
    and the seeds of its random nodes."""

    runs: int = 2
    seed: int = 0
    given: int = 0
    long_sequence: int | None = None
    pinned: dict[str, tuple[int, ...]] = field(default_factory=dict)
    overrides: dict[str, int] = field(default_factory=dict)
    sides: tuple[int, ...] = (32, 64)
    seeds: dict[Key, int] = field(default_factory=dict)
    decode: DecodeStep | None = None


@dataclass
class OriginalRuns:
    """What the original's run found: its outputs and their ORT types, the shapes fed in each
    run, and why the long-sequence and decode-step runs did not happen (None: they did, or
    were not asked for)."""

    outputs: list[str]
    types: list[str]
    shapes: list[dict[str, tuple[int, ...]]]
    long_run_skipped: str | None = None
    decode_run_skipped: str | None = None
    decode_run: int | None = None  # which run is the decode step


class WorkFolder:
    """The files of one verification: ``run{k}.given`` (the user's set, with its label),
    ``.feeds``, ``.expected`` (the original's
    outputs), ``.actual`` (the optimized model's) or ``.failed`` (its error), and the
    ``*.loaded`` markers."""

    def __init__(self, path: str) -> None:
        self.path = path

    def file(self, k: int, what: str) -> str:
        return os.path.join(self.path, f"run{k}.{what}")

    def write(self, path: str, value) -> None:
        tmp = path + ".part"
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # a run killed while writing leaves no half file

    def read(self, path: str):
        with open(path, "rb") as f:
            return pickle.load(f)

    def has(self, path: str) -> bool:
        return os.path.exists(path)

    def mark(self, name: str) -> None:
        with open(os.path.join(self.path, name), "w"):
            pass

    def marked(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.path, name))


def open_session(model: str | ModelProto, providers: list[str] | None,
                 seeds: dict[Key, int]):
    """A quiet one-thread session (repeatable runs) of ``model``; where ``seeds`` name random
    nodes, of a copy in which they carry those seeds (its external data still read from the
    model's folder)."""
    config = None
    if seeds:
        if isinstance(model, ModelProto):
            copy = ModelProto()
            copy.CopyFrom(model)
        else:
            copy = onnx.load(model, load_external_data=False)
            config = {EXTERNAL_FOLDER: os.path.dirname(os.path.abspath(model))}
        label = model if isinstance(model, str) else "<model>"
        model = seeded(copy, seeds).SerializeToString()
        del copy  # the bytes alone go on to ORT
    else:
        label = model if isinstance(model, str) else "<model>"
    try:
        return evaluation.session(model, providers, threads=1, config=config)
    except Exception as e:
        raise ModelError(f"{label}: ONNX Runtime cannot load it: {evaluation.first_line(e)}"
                         ) from e


def run_original(model: str | ModelProto, providers: list[str] | None, folder_path: str,
                 job: OriginalJob) -> OriginalRuns:
    """Run the original on every input set (``job``), writing each set's feeds and outputs;
    raise :class:`UnverifiedError` where it runs on no input onnxopt can make."""
    folder = WorkFolder(folder_path)
    proto = model if isinstance(model, ModelProto) else map_model_file(model).proto
    sess = open_session(model, providers, job.seeds)
    folder.mark("original.loaded")
    try:
        outputs = [o.name for o in sess.get_outputs()]
        types = [_ort_dtype(o.type) for o in sess.get_outputs()]
        found = OriginalRuns(outputs, types, [])
        if job.given:
            names = sorted(i.name for i in sess.get_inputs())
            for k in range(job.given):
                label, feeds = folder.read(folder.file(k, "given"))
                _record(folder, k, found, feeds, _run_given(sess, feeds, label, names))
            return found
        failed = _generated(sess, proto, job, folder, found)
        if failed and job.seeds:
            # A failed attempt may have drawn from a random node's generator: the outputs
            # kept must come from a session that ran exactly the kept sets, in order, as the
            # optimized model's will.
            sess = None
            gc.collect()
            sess = open_session(model, providers, job.seeds)
            for k in range(len(found.shapes)):
                feeds = folder.read(folder.file(k, "feeds"))
                folder.write(folder.file(k, "expected"), evaluation.run(sess, feeds))
        return found
    finally:
        sess = None  # freed here, whoever holds this frame (a traceback) afterwards


def _generated(sess, proto: ModelProto, job: OriginalJob, folder: WorkFolder,
               found: OriginalRuns) -> int:
    """The size sets, then the long run: each set the original accepts, recorded; the number
    of attempts it refused."""
    failed = 0
    for k, sizes in enumerate(size_sets(job.runs, job.sides)):
        feeds, out, refused = _runnable(sess, proto, sizes, job.seed + k, job.pinned,
                                        job.overrides, flag=k % 2 == 0, sides=job.sides)
        failed += refused
        if out is None:
            raise UnverifiedError(
                f"could not verify: the original model does not run on any input onnxopt "
                f"generated ({feeds}); give inputs with --inputs FILE.npz or sizes with "
                "--shape NAME=DIMS")
        _record(folder, k, found, feeds, out)
    if job.long_sequence:
        sizes = {**size_sets(1, job.sides)[0], "batch": 2, "other": job.long_sequence}
        feeds, out, refused = _runnable(sess, proto, sizes, job.seed + job.runs, job.pinned,
                                        job.overrides, longer=False)
        failed += refused
        if out is None:
            found.long_run_skipped = (f"the original does not run at sequence "
                                      f"{job.long_sequence}: {feeds}")
        else:
            _record(folder, len(found.shapes), found, feeds, out)
    if job.decode:
        failed += _decode_run(sess, proto, job, folder, found)
    return failed


def _decode_run(sess, proto: ModelProto, job: OriginalJob, folder: WorkFolder,
                found: OriginalRuns) -> int:
    """One decode step (:mod:`.decode_run`): the first sizes that make the query length 1
    that the original runs on, recorded; the number of attempts it refused."""
    assignments, why = decode_sizes(job.decode, length_symbols(proto), job.overrides)
    sizes = {**size_sets(1, job.sides)[0], BATCH: DECODE_BATCH, OTHER: DECODE_PAST}
    refused, first_error = 0, None
    for lengths in assignments:
        # flag True: a merged decoder's switch takes its cache branch.
        feeds = make_inputs(proto, sizes, seed=job.seed + job.runs + 1,
                            overrides={**job.overrides, **lengths}, pinned=job.pinned,
                            flag=True)
        try:
            out = evaluation.run(sess, feeds)
        except Exception as e:  # noqa: BLE001 - inconsistent sizes: try the next assignment
            refused += 1
            first_error = first_error or evaluation.first_line(e)
            continue
        found.decode_run = len(found.shapes)
        _record(folder, found.decode_run, found, feeds, out)
        return refused
    found.decode_run_skipped = why or (f"the original runs on none of the sizes tried for a "
                                       f"one-query step: {first_error}")
    return refused


def _record(folder: WorkFolder, k: int, found: OriginalRuns, feeds: dict, out: list) -> None:
    folder.write(folder.file(k, "feeds"), feeds)
    folder.write(folder.file(k, "expected"), out)
    found.shapes.append({n: tuple(np.shape(a)) for n, a in feeds.items()})


def run_optimized(model: str | ModelProto, providers: list[str] | None, folder_path: str,
                  count: int, seeds: dict[Key, int]) -> None:
    """Run the optimized model on the ``count`` input sets the original ran on, writing its
    outputs, or its error where it fails on a set, beside them."""
    folder = WorkFolder(folder_path)
    sess = open_session(model, providers, seeds)
    folder.mark("optimized.loaded")
    try:
        for k in range(count):
            feeds = folder.read(folder.file(k, "feeds"))
            try:
                out = evaluation.run(sess, feeds)
            except Exception as e:  # noqa: BLE001 - the optimized model's failure is the finding
                folder.write(folder.file(k, "failed"), evaluation.first_line(e))
                continue
            folder.write(folder.file(k, "actual"), out)
    finally:
        sess = None  # freed here, whoever holds this frame afterwards


def _run_given(sess, feeds: dict[str, np.ndarray], label: str, names: list[str]) -> list:
    """The original's outputs on the user's inputs; a one-line error naming what is wrong."""
    missing = sorted(set(names) - set(feeds))
    extra = sorted(set(feeds) - set(names))
    if missing or extra:
        what = "; ".join(p for p in (f"missing {', '.join(missing)}" if missing else "",
                                     f"not inputs of the model: {', '.join(extra)}" if extra
                                     else "") if p)
        raise UsageError(f"{label}: {what}")
    try:
        return evaluation.run(sess, feeds)
    except Exception as e:
        raise UsageError(f"{label}: the original model does not run on these inputs: "
                         f"{evaluation.first_line(e)}") from e


def _runnable(sess, proto: ModelProto, sizes: dict, seed: int, pinned: dict, overrides: dict,
              flag: bool | None = None, longer: bool = True, sides: tuple[int, ...] = ()):
    """(inputs, outputs, attempts refused) of the first size assignment the original runs on
    — one size for every length first, then consistent mixes (a cache's ``past + seq``), then
    the same at longer lengths, then other image sides — or (ORT's words on the first
    failure, None, attempts refused)."""
    symbols = length_symbols(proto)
    side = sizes.get("spatial")
    tries = [(length, side) for length in
             (sizes["other"], *(LONGER_SIZES if longer and symbols else ()))]
    if longer and _has_spatial(proto):
        tries += [(sizes["other"], other) for other in dict.fromkeys((*sides, *LARGER_SIDES))
                  if other != side]
    first_error, refused = None, 0
    for length, side in tries:
        at = {**sizes, "other": length, "spatial": side}

        def attempt(more, at=at):
            nonlocal refused
            feeds = make_inputs(proto, at, seed=seed, overrides={**more, **overrides},
                                pinned=pinned, flag=flag)
            try:
                return feeds, evaluation.run(sess, feeds)
            except Exception:
                refused += 1
                raise

        result, error = evaluation.first_consistent(symbols, length, attempt)
        if result is not None:
            return (*result, refused)
        first_error = first_error or error
    lines = str(first_error).strip().splitlines() or [type(first_error).__name__]
    return lines[-1].split("Status Message: ", 1)[-1][:200], None, refused


def _has_spatial(proto: ModelProto) -> bool:
    return SPATIAL in dim_roles(proto).values()


def _ort_dtype(t: str) -> str:
    return {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
            "tensor(bfloat16)": "bfloat16"}.get(t, t.removeprefix("tensor(").rstrip(")"))
