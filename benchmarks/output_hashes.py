"""SHA-256 of every optimized `models/`, `models/with_past/`, `models/other/` (and `merged/`) file, against
another checkout.

    python benchmarks/output_hashes.py [--baseline /path/to/older/checkout] [--save F]

A change meant to leave what the optimizer writes as it was (a new driver, a pass written
another way) is checked here byte for byte: every model is optimized under several settings
(both targets, ``--determinism strict``, ``--no-fuse``) and the bytes of the exported model
(``run_pipeline``'s proto, serialized deterministically) are hashed. The baseline runs in its
own process (``PYTHONPATH`` set to that checkout). Every file whose hash differs is listed;
a difference is a change in output, to be explained or fixed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Settings each model is optimized under: the two targets, and the two settings that
# change which rewrites normalization may make (strict determinism, no rules at all).
SETTINGS = {
    "cpu": {"target": "cpu"},
    "cuda": {"target": "cuda"},
    "cpu-strict": {"target": "cpu", "determinism": "strict"},
    "cpu-norules": {"target": "cpu", "rules": False},
}


def models() -> list[Path]:
    return [p for folder in ("", "with_past", "other", "other/merged")
            for p in sorted((ROOT / "models" / folder).glob("*.onnx"))]


def hashes(settings: list[str]) -> dict[str, str]:
    from onnxopt.options import OptimizeOptions
    from onnxopt.pipeline import run_pipeline

    out = {}
    for path in models():
        for name in settings:
            result = run_pipeline(str(path), OptimizeOptions(**SETTINGS[name]))
            data = result.whole_proto().SerializeToString(deterministic=True)
            key = f"{name}:{path.relative_to(ROOT / 'models')}"
            out[key] = hashlib.sha256(data).hexdigest()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="an older checkout to compare with")
    ap.add_argument("--against", type=Path, help="a JSON file of hashes saved before")
    ap.add_argument("--save", type=Path, help="write this checkout's hashes here")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--print-json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    settings = args.settings.split(",")
    if args.print_json:
        print(json.dumps(hashes(settings)))
        return 0
    mine = hashes(settings)
    if args.save:
        args.save.write_text(json.dumps(mine, indent=1, sort_keys=True))
    base = None
    if args.baseline:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--print-json",
                               "--settings", args.settings], capture_output=True, text=True,
                              check=True, cwd=args.baseline,
                              env={**os.environ, "PYTHONPATH": str(args.baseline)})
        base = json.loads(done.stdout.strip().splitlines()[-1])
    elif args.against:
        base = json.loads(args.against.read_text())
    if base is None:
        print(f"{len(mine)} outputs hashed")
        return 0
    shared = [k for k in mine if k in base]
    differ = [k for k in shared if mine[k] != base[k]]
    print(f"{len(shared) - len(differ)} of {len(shared)} outputs identical")
    for k in differ:
        print(f"  differs: {k}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
