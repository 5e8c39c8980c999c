"""A/B of pypowerinfer against another checkout of itself: decode and prefill speed, alternating.

    python bench/speed_ab.py OTHER_ROOT [MODEL] [--rounds 5] [-t 2]

OTHER_ROOT is a checkout with its library built at OTHER_ROOT/build/libpowerinfer.so (for a
commit: `git worktree add /tmp/base REV && cmake -S /tmp/base -B /tmp/base/build -DPI_CUDA=OFF &&
cmake --build /tmp/base/build`); this checkout's is ./build. Each round runs both, one after the
other, each in its own process with its own Python package and library, so a drift of the machine
falls on both alike. Per run: a 512-token prompt's prefill and 128 one-token steps after an
8-token prompt, best of 3, dense FFN (`sparse=False`). Prints each run and the mean per side.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

ONE_RUN = """
import sys, time
import numpy as np
from pypowerinfer import Llama, default_model_path
path, threads = sys.argv[1] or str(default_model_path()), int(sys.argv[2])
llm = Llama(path, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False, sparse=False)
prompt = [int(t) for t in np.random.default_rng(0).integers(100, min(10000, llm.n_vocab()), 520)]
dec, pre = [], []
for _ in range(3):
    llm.reset(); t = time.perf_counter(); llm.eval(prompt[:512]); pre.append(512 / (time.perf_counter() - t))
    llm.reset(); llm.eval(prompt[:8]); t = time.perf_counter()
    for tok in prompt[8:136]:
        llm.eval([tok])
    dec.append(128 / (time.perf_counter() - t))
print(max(dec), max(pre))
"""


def run(root: Path, model: str, threads: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "PI_LIBRARY": str(root / "build" / "libpowerinfer.so")}
    out = subprocess.run([sys.executable, "-c", ONE_RUN, model, str(threads)], env=env, cwd="/",
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("other", type=Path, help="the other checkout (its build/libpowerinfer.so built)")
    p.add_argument("model", nargs="?", default="", help="GGUF (default: the default model)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("-t", "--threads", type=int, default=2)
    args = p.parse_args(argv)
    args.model = str(Path(args.model).resolve()) if args.model else ""  # the runs start in /
    sides = {"other": args.other.resolve(), "this": HERE}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name, root in sides.items():
            decode, prefill = run(root, args.model, args.threads)
            results[name].append((decode, prefill))
            print(f"round {r + 1} {name:5s} decode {decode:7.1f} tok/s  prefill {prefill:7.1f} tok/s", flush=True)
    for name, rows in results.items():
        d = sum(x for x, _ in rows) / len(rows)
        f = sum(y for _, y in rows) / len(rows)
        print(f"mean {name:5s} decode {d:7.1f} tok/s  prefill {f:7.1f} tok/s  ({sides[name]})")
    (d0, f0), (d1, f1) = ([sum(v[i] for v in results[n]) / args.rounds for i in (0, 1)] for n in sides)
    print(f"this / other: decode {d1 / d0:.3f}x, prefill {f1 / f0:.3f}x ({args.threads} threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
