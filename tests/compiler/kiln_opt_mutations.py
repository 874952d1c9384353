#!/usr/bin/env python3
"""Malformed IR must get a diagnostic, never a crash.

Takes valid kiln IR (the lit inputs and the IR kiln compile dumps), applies
deterministic mutations (drop, duplicate or truncate lines, change numbers,
swap types and op names), and runs kiln-opt on each mutant, parsing alone
and through the whole pass pipeline. Every run must end with exit code 0
(the mutant happened to be valid) or 1 (a diagnostic); a signal, an abort or
a hang is a failure, and the mutant is saved for reproduction.
"""
import argparse
import os
import random
import re
import subprocess
import sys

PIPELINE = ("--pass-pipeline=builtin.module(kiln-fuse,kiln-quantize{quant=q8_0},"
            "kiln-paged-attention,kiln-plan-memory{buckets=1,4},kiln-emit-plan)")
OPS = ["kiln.matmul", "kiln.rms_norm", "kiln.attention", "kiln.paged_attention", "kiln.fused_matmul",
       "kiln.rope", "kiln.add", "kiln.silu", "kiln.weight", "kiln.embedding", "kiln.gather_rows",
       "kiln.argmax", "kiln.bias_add", "kiln.launch", "kiln.plan"]
TYPES = ["tensor<?x64xf32>", "tensor<?xi32>", "tensor<?x?xi32>", "!kiln.weight<[64, 64], #kiln.storage<f32>>",
         "!kiln.weight<[64], #kiln.storage<f32>>", "!kiln.kv_cache<1 x 4 x 8 x 64, f32>",
         "!kiln.page_pool<1 x 4 x 8, page 16, f32>", "f32", "i64", "tensor<4x64xf32>"]


def mutate(text, rng):
    lines = text.split("\n")
    kind = rng.randrange(7)
    if kind == 0 and len(lines) > 2:  # drop a line
        del lines[rng.randrange(len(lines))]
    elif kind == 1:  # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == 2:  # truncate
        return text[:rng.randrange(max(1, len(text)))]
    elif kind == 3:  # change a number
        nums = list(re.finditer(r"\b\d+\b", text))
        if nums:
            m = rng.choice(nums)
            return text[:m.start()] + str(rng.choice([0, 1, 3, 7, 16, 63, 257, 2**31, 2**63])) + text[m.end():]
    elif kind == 4:  # swap a type
        spots = [m for t in TYPES for m in re.finditer(re.escape(t), text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(TYPES) + text[m.end():]
    elif kind == 5:  # swap an op name
        spots = [m for o in OPS for m in re.finditer(re.escape(o) + r"\b", text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(OPS) + text[m.end():]
    else:  # swap two operands (SSA names) within a line
        i = rng.randrange(len(lines))
        names = re.findall(r"%[\w#]+", lines[i])
        if len(names) >= 2:
            a, b = rng.sample(names, 2)
            lines[i] = lines[i].replace(a, "\0").replace(b, a).replace("\0", b)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-opt", required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="mutants")
    ap.add_argument("inputs", nargs="+")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sources = []
    paths = []
    for p in args.inputs:
        paths += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".mlir")) if os.path.isdir(p) else [p]
    for path in paths:
        with open(path) as f:
            # lit files hold several cases; mutate each alone.
            sources += [s for s in f.read().split("// -----") if "kiln." in s]
    os.makedirs(args.out, exist_ok=True)
    counts = {0: 0, 1: 0}
    failures = 0
    for n in range(args.count):
        mutant = mutate(rng.choice(sources), rng)
        for extra in ([], [PIPELINE]):
            try:
                r = subprocess.run([args.kiln_opt, "-", *extra], input=mutant.encode(), capture_output=True,
                                   timeout=30)
                code = r.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            if code in (0, 1):
                counts[code] += 1
                continue
            failures += 1
            path = os.path.join(args.out, f"mutant-{n}.mlir")
            with open(path, "w") as f:
                f.write(mutant)
            print(f"FAIL: kiln-opt {' '.join(extra)} exited with {code} on {path}")
            if isinstance(code, int):
                print(r.stderr.decode(errors="replace")[-2000:])
    runs = 2 * args.count
    print(f"{runs} kiln-opt runs on {args.count} mutants: {counts[0]} valid, {counts[1]} diagnosed, "
          f"{failures} crashed or hung")
    print(f"{runs - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
