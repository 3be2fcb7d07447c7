"""Build ``libonnxopt_ops``: generate its header from ``kernels/*.json``, then compile it.

The C library and the Python side read the kernels' one declaration: ``kernels/<family>.json``.
Python reads it at run time (``onnxopt.runtime.cuda.metadata``, ``launch_args``); the library
reads it *here*, at build time, as a generated header (``onnxopt_ops_gen.h``): the argument
structs in the kernels' parameter order with their packing into ``cuLaunchKernel``'s argument
array and back, the specialisations (entry points, tiles, vector widths, shared memory from the
JSON formula), the custom ops' ports and attributes, the images' targets and the sources'
digests. So the two sides cannot disagree: both are the JSON.

Only the standard library is used (``setup.py`` runs this in an isolated build environment);
``metadata.py`` and ``compiler.py`` are loaded by path for the formula evaluator, the digests
and the targets. ``python build.py OUT.so`` builds the library with the system C compiler.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("ops_main.c", "ops_plan.c", "ops_host.c", "ops_cuda.c")
HEADERS = ("ort_abi.h", "ops.h", "half.h")
HEADER_NAME = "onnxopt_ops_gen.h"
LIBRARY_STEM = "libonnxopt_ops"
CFLAGS = ("-std=c11", "-O3", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra",
          "-Wno-unused-parameter", "-Wno-format-truncation", "-D_GNU_SOURCE")
LIBS = ("-ldl", "-lpthread", "-lm")

_CTYPE = {"ptr": "uint64_t", "i32": "int32_t", "i64": "int64_t", "f32": "float"}
_DTYPE = {"float32": 1, "float16": 10, "bfloat16": 16}  # ONNXTensorElementDataType
_ATTR = {"float": "ONNXOPT_ATTR_FLOAT", "int": "ONNXOPT_ATTR_INT", "str": "ONNXOPT_ATTR_STRING"}


def library_filename() -> str:
    """``libonnxopt_ops.so`` (``.dylib`` on macOS): the name users register, no Python tag."""
    return LIBRARY_STEM + (".dylib" if sys.platform == "darwin" else ".so")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


def _cuda_module(name: str):
    return _load(f"_onnxopt_build_{name}", HERE.parent / "cuda" / f"{name}.py")


def default_kernels_dir() -> Path:
    """The repository's kernels/ (or the copy an sdist/wheel build carries beside onnxopt/)."""
    for candidate in (HERE.parents[2] / "kernels", HERE.parents[1] / "kernels"):
        if (candidate / "flash_attention.json").is_file():
            return candidate
    raise FileNotFoundError("kernels/*.json not found beside the onnxopt package")


def _families(kernels: Path) -> list[dict]:
    metadata = _cuda_module("metadata")
    return [json.loads((kernels / f"{family}.json").read_text()) for family in metadata.FAMILIES]


def source_hash(kernels: Path | None = None) -> str:
    """What a build from the files here reports (``onnxopt_ops_source_hash``): the C sources,
    this generator, the kernels' declarations and sources. A library built from anything else
    is stale."""
    kernels = kernels or default_kernels_dir()
    h = hashlib.sha256()
    for name in (*SOURCES, *HEADERS, "build.py"):
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    for path in sorted([*kernels.glob("*.json"), *kernels.glob("*.cu"), *kernels.glob("*.cuh")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in ("metadata.py", "compiler.py", "devices.py"):
        h.update((HERE.parent / "cuda" / name).read_bytes())
    return h.hexdigest()[:16]


# --- the header ------------------------------------------------------------------------------


def _signatures(meta: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(signature name, params) of a family: one, or one per kernel op (activations)."""
    params = meta["params"]
    if isinstance(params, dict):
        return [(f"{meta['family']}_{op}", [tuple(p) for p in ps]) for op, ps in params.items()]
    return [(meta["family"], [tuple(p) for p in params])]


def _signature_code(sig: str, params: list[tuple[str, str]]) -> list[str]:
    upper = sig.upper()
    lines = [f"/* {sig}: the kernel's parameter list, in order. */",
             f"struct onnxopt_{sig}_args {{"]
    lines += [f"    {_CTYPE[kind]} {name};" for name, kind in params]
    lines += ["};", f"#define ONNXOPT_{upper}_NARGS {len(params)}",
              f'#define ONNXOPT_{upper}_LAYOUT "' +
              ",".join(f"{n}:{k}" for n, k in params) + '"',
              f"static inline void onnxopt_{sig}_pack(struct onnxopt_{sig}_args *a, void **out) {{"]
    lines += [f"    out[{i}] = &a->{name};" for i, (name, _) in enumerate(params)]
    lines += ["}", (f"static inline void onnxopt_{sig}_unpack(void *const *in, "
                    f"struct onnxopt_{sig}_args *a) {{")]
    lines += [f"    memcpy(&a->{name}, in[{i}], sizeof a->{name});"
              for i, (name, _) in enumerate(params)]
    lines += ["}", ""]
    return lines


def _variant_rows(meta: dict, family_index: int, sig_index: dict[str, int]) -> list[str]:
    metadata = _cuda_module("metadata")
    rows = []
    for v in meta["variants"]:
        formula = (meta["kinds"][v["kind"]]["smem_bytes"] if "kind" in v else meta["smem_bytes"])
        names = {k: val for k, val in v.items() if isinstance(val, int)}
        names["ELEM_BYTES"] = metadata.ELEM_BYTES[v["dtype"]]
        smem = int(metadata.evaluate(formula, names))
        cc = (meta["kinds"][v["kind"]]["min_compute_capability"] if "kind" in v
              else meta["min_compute_capability"])
        sig = f"{meta['family']}_{v['op']}" if "op" in v else meta["family"]
        kind = {"tc": 1, "simt": 2}.get(v.get("kind", ""), 0)
        rows.append(
            f'    {{"{v["entry"]}", {family_index}, {sig_index[sig]}, {_DTYPE[v["dtype"]]}, '
            f'{kind}, {v.get("DMAX", 0)}, {v.get("BM", 0)}, {v.get("BN", 0)}, '
            f'{v.get("WARPS", 0)}, {v.get("VEC", 1)}, {v.get("MAXIT", 0)}, {smem}, '
            f'{cc[0] * 10 + cc[1]}}},')
    return rows


def _port(spec: str) -> str:
    name, _, kind = (s.strip() for s in spec.partition(":"))
    optional = name.endswith("?")
    typed = "0" if kind == "T" else str({"int32": 6}[kind])
    return f'{{"{name.rstrip("?")}", {int(optional)}, {typed}}}'


def _op_rows(meta: dict, family_index: int) -> list[str]:
    rows = []
    for op, spec in meta["ops"].items():
        defaults = spec.get("defaults", {})
        attrs = []
        for name, kind in spec["attrs"].items():
            value = defaults.get(name)
            if value is None:
                number, text, required = "0", '""', 1
            else:
                number = repr(float(value)) if kind != "str" else "0"
                text, required = (json.dumps(value) if kind == "str" else '""'), 0
            attrs.append(f'{{"{name}", {_ATTR[kind]}, {required}, {number}, {text}}}')
        inputs = ", ".join(_port(p) for p in spec["inputs"])
        outputs = ", ".join(_port(p) for p in spec["outputs"])
        rows.append(
            f'    {{"{op}", {family_index}, {len(spec["inputs"])}, {{{inputs}}}, '
            f'{len(spec["outputs"])}, {{{outputs}}}, {len(attrs)}, {{{", ".join(attrs) or "{0}"}}}}},')
    return rows


def header_text(kernels: Path | None = None) -> str:
    """The generated header, as text (deterministic: a test regenerates and compares)."""
    kernels = kernels or default_kernels_dir()
    compiler, devices = _cuda_module("compiler"), _cuda_module("devices")
    metas = _families(kernels)
    sigs = [s for meta in metas for s in _signatures(meta)]
    sig_index = {name: i for i, (name, _) in enumerate(sigs)}
    lines = ["/* Generated by onnxopt/runtime/_native/build.py from kernels/<family>.json: do not edit. */",
             "#pragma once", "#include <stdint.h>", "#include <string.h>", ""]
    for i, meta in enumerate(metas):
        lines.append(f"#define ONNXOPT_FAMILY_{meta['family'].upper()} {i}")
    lines.append(f"#define ONNXOPT_NFAMILIES {len(metas)}")
    lines.append("static const char *const onnxopt_family_names[] = {" +
                 ", ".join(f'"{m["family"]}"' for m in metas) + "};")
    digests = [compiler.source_digest(kernels / m["source"]) for m in metas]
    lines.append("static const char *const onnxopt_family_digests[] = {" +
                 ", ".join(f'"{d}"' for d in digests) + "};")
    lines.append("")
    for i, (name, _) in enumerate(sigs):
        lines.append(f"#define ONNXOPT_SIG_{name.upper()} {i}")
    lines.append(f"#define ONNXOPT_NSIGS {len(sigs)}")
    lines.append("")
    for name, params in sigs:
        lines += _signature_code(name, params)
    lines.append("static const char *const onnxopt_sig_layouts[] = {" +
                 ", ".join(f"ONNXOPT_{n.upper()}_LAYOUT" for n, _ in sigs) + "};")
    lines.append("static const char *const onnxopt_sig_names[] = {" +
                 ", ".join(f'"{n}"' for n, _ in sigs) + "};")
    lines.append("")
    fa = next(m for m in metas if m["family"] == "flash_attention")
    gn = next(m for m in metas if m["family"] == "group_norm")
    act = next(m for m in metas if m["family"] == "activations")
    lines += [f"#define ONNXOPT_FA_MAX_HEAD {fa['max_head_size']}",
              f"#define ONNXOPT_FA_HEAD_MULTIPLE {fa['head_size_multiple']}",
              f"#define ONNXOPT_GN_MAX_GROUP {gn['max_group']}LL",
              f"#define ONNXOPT_GN_MAX_BLOCKS {gn['max_blocks']}LL",
              f"#define ONNXOPT_GN_SILU {gn['activations']['silu']}",
              f"#define ONNXOPT_GELU_NONE {act['approximate']['none']}",
              f"#define ONNXOPT_GELU_TANH {act['approximate']['tanh']}",
              "/* The host provider runs the launch geometry of the smallest GPU the kernels run",
              "   on (per-block shared memory every compute capability >= 8.0 allows). */",
              f"#define ONNXOPT_HOST_SMEM_OPTIN {devices.portable_smem_limit((8, 0))}",
              f"#define ONNXOPT_DEFAULT_SMEM_LIMIT {devices.DEFAULT_SMEM_LIMIT}", ""]
    lines.append("static const struct onnxopt_variant onnxopt_variants[] = {")
    for i, meta in enumerate(metas):
        lines += _variant_rows(meta, i, sig_index)
    lines += ["};", ("#define ONNXOPT_NVARIANTS "
                     "((int)(sizeof onnxopt_variants / sizeof onnxopt_variants[0]))"), ""]
    lines.append("static const struct onnxopt_op_spec onnxopt_op_specs[] = {")
    for i, meta in enumerate(metas):
        lines += _op_rows(meta, i)
    lines += ["};", ("#define ONNXOPT_NOPS "
                     "((int)(sizeof onnxopt_op_specs / sizeof onnxopt_op_specs[0]))"), ""]
    lines.append("/* Image targets, as compiler.TARGETS builds them; file names as image_name(). */")
    lines.append("static const char *const onnxopt_targets[] = {" +
                 ", ".join(f'"{t}"' for t in compiler.TARGETS) + "};")
    lines.append(f"#define ONNXOPT_NTARGETS {len(compiler.TARGETS)}")
    lines.append(f'#define ONNXOPT_MANIFEST "{compiler.MANIFEST}"')
    return "\n".join(lines) + "\n"


def write_header(folder: Path, kernels: Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / HEADER_NAME
    text = header_text(kernels)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


# --- compiling -------------------------------------------------------------------------------


def find_cc() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def compile_command(cc: str, out: Path, generated: Path, digest: str) -> list[str]:
    return [cc, *CFLAGS, "-shared", f"-I{generated}", f"-I{HERE}",
            f'-DONNXOPT_OPS_SOURCE_HASH="{digest}"', *(str(HERE / s) for s in SOURCES),
            "-o", str(out), *LIBS]


def build(out: Path, *, kernels: Path | None = None, cc: str | None = None) -> Path:
    """Compile the library to ``out`` (atomically: a concurrent process never loads half a
    file). Raises RuntimeError with the compiler's output when it fails."""
    cc = cc or find_cc()
    if cc is None:
        raise RuntimeError("no C compiler (cc) was found to build libonnxopt_ops")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        generated = Path(tmp)
        write_header(generated, kernels)
        tmp_out = generated / out.name
        cmd = compile_command(cc, tmp_out, generated, source_hash(kernels))
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building libonnxopt_ops failed: {' '.join(cmd)}\n"
                               f"{result.stderr}")
        os.replace(tmp_out, out)
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / library_filename()
    print(build(target))
