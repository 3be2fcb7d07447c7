"""The long fuzz run: mutants of every seed model plus generated graphs, counted and triaged.

    python benchmarks/fuzz.py --cases 20000 --generated 5000 --seed 1 --jobs 2 --out /tmp/fuzz
    python benchmarks/fuzz.py --cases 300 --generated 100 --seed 7 --out /tmp/f --repro-dir /tmp/r
    python benchmarks/fuzz.py --replay '{"kind": "mutant", ...}' --save /tmp/case.onnx
    python benchmarks/fuzz.py --check /tmp/fuzz_repro/03_wrong_result_....onnx

Why: the CI slice (``tests/fuzz``) is small by necessity; this runs the same cases
at scale. ``--cases`` mutants are spread round-robin over the seeds (the models in
``models/`` and the synthesized ones in ``tests/fuzz/seeds.py``), ``--generated``
graphs come from ``tests/fuzz/generate.py``; each is run through ``onnxopt
optimize IN -o OUT --target cpu -q`` and classified by ``tests/fuzz/harness.py``
(10 s per case; a hang is a timeout).

It prints, and writes to ``DIR/results.json``: cases tried, clean errors (exit
1/2), internal errors (exit 3; or worked around by onnxopt's safeguard and said in a
warning: "internal_warning"), hangs, crashes, tracebacks, wrong results, broken
outputs, refused-valid, inputs modified, stray files, skipped; timing per case; and
every distinct failure signature. Up to ``--keep`` failing cases per signature are saved
under ``DIR/failures/``; one reproducer per signature is reduced (greedily, see
``tests/fuzz/reduce.py``), confirmed with the real command line in a fresh
process, and saved under ``--repro-dir`` (default ``DIR/repro``) with a ``.txt``
that says what it shows and the command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fuzz import cases, harness, reduce, seeds
from fuzz.harness import Outcome
from fuzz.pool import Pool, build_case

COUNTED = ("ok", "clean_error", *harness.BUG_VERDICTS, "skipped")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000, help="mutated cases (default 1000)")
    p.add_argument("--generated", type=int, default=None,
                   help="generated cases (default: a quarter of --cases)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "_work" / "fuzz")
    p.add_argument("--repro-dir", type=Path, default=None)
    p.add_argument("--mode", choices=["inprocess", "subprocess"], default="inprocess",
                   help="run onnxopt in the worker (fast) or as a child process per case")
    p.add_argument("--seeds", nargs="*", default=None,
                   help="only these seed models (names as in --list-seeds)")
    p.add_argument("--list-seeds", action="store_true")
    p.add_argument("--keep", type=int, default=5, help="failing cases saved per signature")
    p.add_argument("--reduce-budget", type=float, default=30.0,
                   help="seconds spent shrinking each signature's reproducer (0: none)")
    p.add_argument("--reduce-max", type=int, default=40,
                   help="reduce only the N most frequent signatures (the rest saved as found)")
    p.add_argument("--triage-from", type=Path, default=None,
                   help="skip the run: triage the failures recorded in an outcomes.jsonl")
    p.add_argument("--replay", default=None, help="a recipe (JSON) to rebuild and save")
    p.add_argument("--check", type=Path, default=None,
                   help="run the whole oracle on one model file (the real command line in a "
                        "child process, then ONNX Runtime) and print the verdict")
    p.add_argument("--save", type=Path, default=None, help="where --replay writes the model")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- running


def run_all(args: argparse.Namespace, recipes: list[dict[str, Any]]) -> list[Outcome]:
    """Every case through the pool; each outcome also appended to DIR/outcomes.jsonl."""
    outcomes: list[Outcome] = []
    seen: Counter[str] = Counter()
    start, last = time.monotonic(), time.monotonic()
    with Pool(args.jobs, args.mode) as pool, open(args.out / "outcomes.jsonl", "w") as log:
        for outcome in pool.run(recipes):
            outcomes.append(outcome)
            log.write(json.dumps(outcome_json(outcome, brief=not outcome.is_bug)) + "\n")
            seen[outcome.signature] += outcome.is_bug
            if seen[outcome.signature] > args.keep:
                outcome.data, outcome.extra_files = None, {}  # bounded memory
            if outcome.is_bug:
                print(f"  [{outcome.verdict}] {outcome.case_id}: {outcome.signature}",
                      flush=True)
            if time.monotonic() - last > 30:
                last = time.monotonic()
                print(f"  {len(outcomes)}/{len(recipes)} cases, "
                      f"{len(outcomes) / (last - start):.1f}/s, "
                      f"{sum(o.is_bug for o in outcomes)} failures", flush=True)
    return outcomes


def load_outcomes(path: Path) -> list[Outcome]:
    """Outcomes back from an outcomes.jsonl (without bytes: triage rebuilds them)."""
    outcomes = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        outcomes.append(Outcome(row["case_id"], row["verdict"], row.get("problems", []),
                                exit_code=row.get("exit_code"), message=row.get("message", ""),
                                detail=row.get("detail", ""), signature=row.get("signature", ""),
                                seconds=row.get("seconds", 0.0), origin=row.get("origin", ""),
                                total_seconds=row.get("total_seconds", 0.0),
                                ort_ran=row.get("ort_ran"), recipe=row.get("recipe", {}),
                                size=row.get("size", 0)))
    return outcomes


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    c = Counter(o.verdict for o in outcomes)
    out = {"cases": len(outcomes)}
    out.update({v: c.get(v, 0) for v in COUNTED})
    out["failures"] = sum(o.is_bug for o in outcomes)
    out["original_ran_in_ort"] = sum(bool(o.ort_ran) for o in outcomes)
    out["exit_codes"] = dict(Counter(str(o.exit_code) for o in outcomes))
    return out


def timing(outcomes: list[Outcome]) -> dict[str, float]:
    opt = sorted(o.seconds for o in outcomes if o.seconds)
    total = sorted(o.total_seconds for o in outcomes if o.total_seconds)
    if not opt:
        return {}

    def pct(xs: list[float], q: float) -> float:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)

    return {"onnxopt_mean_s": round(statistics.mean(opt), 3), "onnxopt_median_s": pct(opt, .5),
            "onnxopt_p95_s": pct(opt, .95), "onnxopt_max_s": round(opt[-1], 3),
            "case_mean_s": round(statistics.mean(total), 3), "case_p95_s": pct(total, .95),
            "case_max_s": round(total[-1], 3)}


def kind_of(outcome: Outcome) -> str:
    return outcome.recipe.get("kind", "?")


# ----------------------------------------------------------------------------- triage


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:80]


def group(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.is_bug:
            groups[o.signature or o.verdict].append(o)
    return dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def save_model(folder: Path, name: str, data: bytes, extra: dict[str, bytes]) -> Path:
    """``folder/name.onnx``, or ``folder/name/model.onnx`` beside its external data."""
    if extra:
        folder = folder / name
        folder.mkdir(parents=True, exist_ok=True)
        for fname, blob in extra.items():
            (folder / fname).write_bytes(blob)
        path = folder / harness.INPUT_NAME
    else:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.onnx"
    path.write_bytes(data)
    return path


def built(pool: Pool, outcomes: list[Outcome]) -> dict[str, Outcome]:
    """The cases' bytes, built by a worker from their recipes (never here: building a
    mutant runs onnx's C++ shape inference, which can abort the process on a broken model)."""
    want = [dict(o.recipe, case_id=o.case_id, build_only=True) for o in outcomes
            if o.data is None and o.recipe.get("kind") in ("mutant", "generated")]
    got = {o.case_id: o for o in outcomes if o.data is not None}
    got.update({b.case_id: b for b in pool.run(want) if b.data is not None})
    return got


def save_failures(out: Path, groups: dict[str, list[Outcome]], keep: int, pool: Pool) -> None:
    for sig, items in groups.items():
        cases_built = built(pool, items[:keep])
        for o in items[:keep]:
            case = cases_built.get(o.case_id)
            if case is None or case.data is None:
                print(f"  cannot rebuild {o.case_id}")
                continue
            folder = out / "failures" / slug(sig)
            save_model(folder, o.case_id, case.data, case.extra_files)
            (folder / f"{o.case_id}.json").write_text(json.dumps(outcome_json(o), indent=1))


def outcome_json(o: Outcome, brief: bool = False) -> dict[str, Any]:
    if brief:
        return {"case_id": o.case_id, "verdict": o.verdict, "exit_code": o.exit_code,
                "seconds": round(o.seconds, 3), "total_seconds": round(o.total_seconds, 3),
                "ort_ran": o.ort_ran, "message": o.message[:200], "recipe": o.recipe}
    return {"case_id": o.case_id, "verdict": o.verdict, "signature": o.signature,
            "problems": o.problems, "exit_code": o.exit_code, "message": o.message,
            "detail": o.detail[-4000:], "origin": o.origin, "recipe": o.recipe,
            "seconds": round(o.seconds, 3), "total_seconds": round(o.total_seconds, 3),
            "ort_ran": o.ort_ran, "size": o.size}


def triage(args: argparse.Namespace, groups: dict[str, list[Outcome]], repro: Path
           ) -> list[dict[str, Any]]:
    """Save failing cases; reduce, save and confirm one reproducer per signature."""
    rows = []
    with Pool(args.jobs, args.mode) as pool, Pool(1, "subprocess") as fresh:
        def run(batch: list[dict[str, Any]]) -> list[Outcome]:
            return list(pool.run(batch))

        save_failures(args.out, groups, args.keep, pool)
        for rank, (sig, items) in enumerate(groups.items()):
            example = min(items, key=lambda o: o.size or 1 << 60)
            budget = args.reduce_budget if rank < args.reduce_max else 0.0
            case = built(pool, [example]).get(example.case_id)
            if case is not None and not example.origin:  # a hang or crash: the worker died
                example.origin, example.recipe = case.origin, case.recipe
            name = f"{rank + 1:02d}_{slug(sig)[:60]}"
            rows.append(triage_one(sig, items, example, case, repro / name, run, fresh,
                                   budget))
            print(f"  triaged {rank + 1}/{len(groups)}: {sig[:90]}", flush=True)
    return rows


def triage_one(sig: str, items: list[Outcome], example: Outcome, case: Outcome | None,
               target: Path, run: Any, fresh: Pool, budget: float) -> dict[str, Any]:
    """Reduce the example, save it as ``target``.onnx (+ .txt), confirm it in a fresh
    process with the real command line."""
    row: dict[str, Any] = {"signature": sig, "verdict": example.verdict, "count": len(items),
                           "example": outcome_json(example)}
    if case is None or case.data is None:
        row["error"] = "cannot rebuild the case"
        return row
    data, extra, how = case.data, case.extra_files, "unreduced"
    if budget > 0 and example.verdict != "hang":
        data, extra, how = reduce.reduce(example, data, extra, run, budget)
    path = save_model(target.parent, target.name, data, extra)
    check = next(iter(fresh.run([cases.bytes_recipe(f"confirm-{target.name}", data,
                                                    "confirm", extra)])))
    row.update(reproducer=str(path), reduced=how, size=len(data), original_size=len(case.data),
               command=harness.reproducer_command(str(path)),
               confirmed_fresh_process=reduce.same_failure(example, check),
               fresh_verdict=check.verdict, fresh_signature=check.signature,
               fresh_message=check.message)
    write_note(target.parent / f"{target.name}.txt", row, example)
    return row


def write_note(note: Path, row: dict[str, Any], example: Outcome) -> None:
    lines = [f"signature: {row['signature']}", f"verdict: {row['verdict']}",
             f"seen: {row['count']} cases", f"origin: {example.origin}",
             f"recipe: {json.dumps(example.recipe)}",
             f"reduced: {row['reduced']} ({row['original_size']} -> {row['size']} bytes)",
             f"reproduce: {row['command']}",
             (f"full oracle (ORT comparison too): python benchmarks/fuzz.py --check "
              f"{row['reproducer']}"),
             (f"confirmed in a fresh process: {row['confirmed_fresh_process']} "
              f"({row['fresh_verdict']}: {row['fresh_message']})"),
             f"message: {example.message}", "", "detail:", example.detail[-4000:]]
    note.write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- reporting


def environment() -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True,
                                  timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    import onnx
    import onnxruntime

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": platform.node(),
            "cpus": __import__("os").cpu_count(), "python": platform.python_version(),
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty_files": len(git("status", "--porcelain").splitlines())}


def print_summary(result: dict[str, Any]) -> None:
    c = result["counts"]
    print(f"\ncases tried {c['cases']} (mutated {result['by_kind'].get('mutant', {}).get('cases', 0)}"
          f", generated {result['by_kind'].get('generated', {}).get('cases', 0)}) "
          f"in {result['wall_s']:.0f} s with {result['args']['jobs']} jobs")
    names = ("ok", "clean_error", "internal_error", "internal_warning", "hang", "crash",
             "traceback",
             "wrong_result", "broken_output", "refused_valid", "input_modified", "stray_files",
             "skipped")
    print("  " + ", ".join(f"{n} {c[n]}" for n in names))
    print(f"  original ran in ORT: {c['original_ran_in_ort']}; exit codes: {c['exit_codes']}")
    print(f"  timing: {result['timing']}")
    for row in result["signatures"]:
        print(f"- [{row['count']}x] {row['signature']}")
        if "reproducer" in row:
            print(f"    {row['command']}   (confirmed: {row['confirmed_fresh_process']}, "
                  f"{row['reduced']})")


def replay(args: argparse.Namespace) -> int:
    recipe = json.loads(args.replay)
    case = build_case(recipe)
    target = args.save or Path("/tmp/fuzz_case.onnx")
    path = save_model(target.parent, target.stem, case.data, case.extra_files)
    print(f"{case.origin}\nwrote {path}\n{harness.reproducer_command(str(path))}")
    return 0


def check(path: Path) -> int:
    """Classify one saved model exactly as the fuzzer does (files beside it travel along)."""
    extra = {p.name: p.read_bytes() for p in path.parent.iterdir()
             if p.is_file() and p != path and p.name == cases.EXTERNAL_NAME}
    with Pool(1, "subprocess") as pool:
        outcome = next(iter(pool.run([cases.bytes_recipe("check", path.read_bytes(), str(path),
                                                         extra)])))
    print(f"{outcome.verdict}: {outcome.signature or outcome.message}")
    if outcome.detail:
        print(outcome.detail.strip()[-2000:])
    return 1 if outcome.is_bug else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        return check(args.check)
    if args.list_seeds:
        print("\n".join(seeds.seed_names()))
        return 0
    if args.replay:
        return replay(args)
    generated = args.generated if args.generated is not None else args.cases // 4
    names = args.seeds or seeds.seed_names()
    recipes = cases.mix(args.cases, generated, args.seed, names)
    args.out.mkdir(parents=True, exist_ok=True)
    repro = args.repro_dir or args.out / "repro"
    start = time.monotonic()
    outcomes = load_outcomes(args.triage_from) if args.triage_from else run_all(args, recipes)
    wall = time.monotonic() - start
    groups = group(outcomes)
    rows = triage(args, groups, repro) if groups else []
    by_kind = {k: counts([o for o in outcomes if kind_of(o) == k]) for k in
               ("mutant", "generated")}
    result = {"command": " ".join([sys.executable, *sys.argv]), "args": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": environment(), "wall_s": round(wall, 1),
        "cases_per_s": round(len(outcomes) / max(wall, 1e-9), 2), "counts": counts(outcomes),
        "by_kind": by_kind, "timing": timing(outcomes), "signatures": rows}
    (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print_summary(result)
    print(f"\nwrote {args.out / 'results.json'}; reproducers in {repro}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
