#!/usr/bin/env python3
"""Where ptxas put the WGMMA waits of one kernel instantiation, read from its SASS on a machine
without a GPU.

    python3 scripts/sass_waits.py build/release tile_union_prefill_bf16_d128 [--cuobjdump PATH] [-D MACRO]

Compiles generated/cuda/instantiations/<name>.cu of the build directory to a cubin with the
build's own nvcc command (compile_commands.json), disassembles it with cuobjdump (from PATH, or
--cuobjdump; the CUDA toolkit's, or the one in the `nvidia-cuda-cuobjdump` wheel) and prints,
for each stretch of code that ends at a `WARPGROUP.DEPBAR` (wgmma.wait_group), how many WGMMAs,
R2UR moves, exponentials (MUFU.EX2) and FMNMX it holds. The source of a consumer phase says
where each wait should be; this shows where ptxas left it: docs/performance.md step 59 found the
whole softmax fold of the tile-union consumers after the wait for P V that the source puts after
it, and 50 R2UR a block step ahead of the WGMMAs.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile


def compile_cubin(build, name, cubin, defines=()):
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    suffix = f"/instantiations/{name}.cu"
    entry = next((e for e in entries if e["file"].endswith(suffix)), None)
    if entry is None:
        sys.exit(f"sass_waits: no {name}.cu in {build}/compile_commands.json")
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = []
    skip = False
    for a in args:  # drop "-c" and "-o <object>"; compile to a cubin instead
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    out += [f"-D{d}" for d in defines] + ["-cubin", "-o", cubin]
    subprocess.run(out, cwd=entry.get("directory", build), check=True)


def instructions(sass_text):
    code = []
    for line in sass_text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;", line)
        if m:
            code.append(m.group(1))
    return code


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build", help="a configured build directory (compile_commands.json)")
    parser.add_argument("name", help="an instantiation, e.g. tile_union_prefill_bf16_d128")
    parser.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    parser.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                        help="a macro for this compile only (a probe's switch), repeatable")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, args.name + ".cubin")
        compile_cubin(os.path.abspath(args.build), args.name, cubin, args.defines)
        sass = subprocess.run([args.cuobjdump, "-sass", cubin], check=True, capture_output=True, text=True).stdout
    kernels = re.split(r"\n\s*Function : ", sass)
    for text in kernels[1:]:
        kernel = text.split("\n", 1)[0].strip()
        code = instructions(text)
        waits = [i for i, op in enumerate(code) if "WARPGROUP.DEPBAR" in op]
        if not waits:
            continue
        print(f"{kernel[:110]}: {len(code)} instructions")
        print("  at     wait                          since the previous wait: HGMMA  R2UR  MUFU.EX2  FMNMX")
        start = 0
        for w in waits:
            seg = code[start:w]
            count = lambda key: sum(key in op for op in seg)
            print(f"  {w:<6} {code[w]:<30} {count('HGMMA'):>37} {count('R2UR'):>5} {count('MUFU.EX2'):>9} "
                  f"{count('FMNMX'):>6}")
            start = w + 1


if __name__ == "__main__":
    main()
