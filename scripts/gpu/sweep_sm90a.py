#!/usr/bin/env python3
"""Build a spec's sm90a variants and run one check script on each: a tuning sweep.

Usage: sweep_sm90a.py SPEC CHECK_SCRIPT OUT VARIANT... [--jobs N] [--tilegen PATH]

SPEC's `targets:` must hold a one-line sm90a entry (`  sm90a: {...}`). Each VARIANT is the
flow mapping that replaces it, e.g.
  '{constants: {block_M: 64, stages: 8}, schedule: pingpong, cluster: [1, 2], swizzle: 4}'
(any of constants, threads, cluster, schedule, swizzle). Variant i is written to OUT/v<i>/,
checked by `tilegen check` (a variant tilegen refuses is reported with its errors and
skipped), built with `tilegen build --target sm90a` (N at a time; nvcc takes about a minute
each), then CHECK_SCRIPT runs with OUT/v<i>/sm90a as its one argument and the same
environment (MODE=--check-only and the like pass through), one variant after another so that
timings do not overlap. Its output is printed under the variant; the script exits 1 if any
build or check failed. Needs an NVIDIA GPU for the checks (the builds do not).

Example (the FP8 GEMM's schedule sweep):
  scripts/gpu/sweep_sm90a.py tests/golden/specs/gemm_fp8_bf16.yaml \\
      scripts/gpu/check_gemm_fp8.py /tmp/sweep \\
      '{cluster: [2, 1]}' '{cluster: [2, 1], swizzle: 4}' \\
      '{constants: {block_M: 64, stages: 8}, schedule: pingpong, cluster: [1, 2]}'
"""
import argparse, concurrent.futures, os, re, subprocess, sys

ENTRY = re.compile(r"^(\s+)sm90a:\s*\{.*\}\s*$", re.MULTILINE)


def variant_text(spec_text, mapping):
    """The spec with its one-line sm90a entry replaced by `mapping`."""
    found = ENTRY.search(spec_text)
    if not found:
        sys.exit("the spec has no one-line `sm90a: {...}` entry under `targets:` to replace")
    return spec_text[:found.start()] + f"{found.group(1)}sm90a: {mapping}" + spec_text[found.end():]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("check_script")
    ap.add_argument("out")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--tilegen", default=os.environ.get("TILEGEN", "target/release/tilegen"))
    args = ap.parse_args()
    text = open(args.spec).read()
    name = os.path.basename(args.spec)
    dirs = []
    for i, mapping in enumerate(args.variants):
        d = os.path.join(args.out, f"v{i}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            f.write(variant_text(text, mapping))
        dirs.append(d)

    def build(d):
        spec = os.path.join(d, name)
        checked = run([args.tilegen, "check", spec, "--target", "sm90a"])
        if checked.returncode != 0:
            errors = [l.split("error: ", 1)[1] for l in checked.stderr.splitlines() if "error: " in l]
            return "refused: " + (" / ".join(errors) or checked.stderr.strip()[:200])
        built = run([args.tilegen, "build", spec, "-o", d, "--target", "sm90a"])
        return None if built.returncode == 0 else f"build failed:\n{built.stderr[-2000:]}"

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(build, dirs))
    failed = 0
    for i, (mapping, d, why) in enumerate(zip(args.variants, dirs, outcomes)):
        print(f"== v{i}: sm90a: {mapping}", flush=True)
        if why is not None:
            print(f"  {why}")
            failed += why.startswith("build failed")
            continue
        checked = run([sys.executable, args.check_script, os.path.join(d, "sm90a")])
        print(checked.stdout.rstrip())
        if checked.returncode != 0:
            print(checked.stderr[-2000:].rstrip())
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
