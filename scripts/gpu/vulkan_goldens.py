#!/usr/bin/env python3
"""Runs THERE (the GPU machine): llama.cpp's greedy goldens on kiln's Vulkan
backend. For every golden of the stories260K artifacts staged by
scripts/gpu/prepare.sh (compiled for cuda:sm_90 and vulkan), `kiln run
--backend vulkan --temp 0` with the golden's prompt and length; prints one
line per case (equal, or the first differing step and the golden's smallest
top-two margin) and exits 1 if any case differs other than at a near tie: the
golden's own smallest margin, under 0.05 (stories260K-q4_0-mix p04, 0.0068 at
step 45, where kiln's CPU backend also picks the runner-up). (tests/e2e/
vulkan_golden_check does the same in CI on lavapipe, but links the compiler,
which does not travel.)"""
import json
import os
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
stage = os.path.join(root, ".gpu")
kiln = os.path.join(stage, "bin", "kiln")
golden_root = os.path.join(stage, "testdata", "golden")
differ = 0
near_ties = 0
cases = 0
for tag in sorted(os.listdir(golden_root)):
    artifact = os.path.join(stage, "artifacts", tag + ".kiln")
    if not os.path.exists(artifact):
        continue
    folder = os.path.join(golden_root, tag)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name.endswith(".activations.json"):
            continue
        g = json.load(open(os.path.join(folder, name)))
        want = g["generated_token_ids"]
        cmd = [kiln, "run", artifact, "--backend", "vulkan", "--temp", "0", "-n", str(len(want)),
               "-p", g["prompt"], "--output-format", "json"]
        if not g.get("stopped_by_eog"):
            cmd.append("--ignore-eos")
        out = subprocess.run(cmd, capture_output=True, text=True)
        cases += 1
        if out.returncode != 0:
            differ += 1
            print(f"{tag}/{name}: kiln run failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        got = json.loads(out.stdout)["ids"]
        if got == want:
            print(f"{tag}/{name}: {len(want)} ids equal")
        else:
            step = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            near_tie = str(step) == str(g.get("min_margin_step")) and float(g.get("min_margin", 1)) < 0.05
            if near_tie:
                near_ties += 1
            else:
                differ += 1
            print(f"{tag}/{name}: differs from step {step} (golden's smallest margin {g.get('min_margin')} "
                  f"at step {g.get('min_margin_step')}{': a near tie' if near_tie else ''})")
print(f"vulkan goldens: {cases - differ - near_ties} of {cases} equal, {near_ties} differ at the golden's near tie")
sys.exit(1 if differ or cases == 0 else 0)
