#!/usr/bin/env bash
# Where a decoded token's time goes, for converted models: best of 4 runs each of
#   no FFN      a copy of the library built with pi_ffn_sparse returning a zero delta
#   predictors  the sparse path with every threshold +1000 (predictors run, no neuron passes)
#   sparse      the sparse path as converted
#   dense       the dense FFN
# and the predictors' share of the sparse and dense FFN time derived from them.
#     bash bench/ffn_time.sh MODEL.powerinfer.gguf [...]      (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for variant in full noffn; do  # both built from the committed sources
    src="$work/$variant"
    mkdir -p "$src" && git archive HEAD | tar -x -C "$src"
    if [ "$variant" = noffn ]; then  # the FFN of every layer contributes nothing and costs nothing
        python3 - "$src/native/src/ffn_sparse.c" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
head = "int pi_ffn_sparse(pi_context *c, int layer, int t, pi_act x) {\n"
assert head in s
s = s.replace(head, head + "    memset(c->delta + (size_t)t * c->model->info.n_embd, 0, sizeof(float) * c->model->info.n_embd);\n"
              "    return 0;\n", 1)
open(p, "w").write(s)
PY
    fi
    cmake -S "$src" -B "$src/build" -G Ninja -DPI_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$src/build" >/dev/null 2>&1
    cc -O2 -I"$src/native/include" bench/decode_bench.c -o "$work/bench-$variant" -L"$src/build" -lpowerinfer \
        -Wl,-rpath,"$src/build" -lm
done
best() {  # best tok/s of 4 runs: binary, model, sparse, shift
    local b=0 v
    for _ in 1 2 3 4; do
        v=$("$1" "$2" "$threads" "$3" "$4" | awk '{print $3}')
        b=$(python3 -c "print(max($b, $v))")
    done
    echo "$b"
}
echo "| model | no FFN | predictors only | sparse | dense | sparse/dense | predictors / sparse FFN | / dense FFN |"
echo "|---|---|---|---|---|---|---|---|"
for model in "$@"; do
    a=$(best "$work/bench-noffn" "$model" 1 0)  # the sparse path is what the patch empties
    p=$(best "$work/bench-full" "$model" 1 1000)
    s=$(best "$work/bench-full" "$model" 1 0)
    d=$(best "$work/bench-full" "$model" 0 0)
    python3 -c "
a, p, s, d = $a, $p, $s, $d
ffn_s, ffn_d, pred = 1 / s - 1 / a, 1 / d - 1 / a, 1 / p - 1 / a
print(f'| $(basename "$model") | {a:.0f} | {p:.0f} | {s:.0f} | {d:.0f} | {s / d:.2f}x | {100 * pred / ffn_s:.0f}% | {100 * pred / ffn_d:.0f}% |')"
done
