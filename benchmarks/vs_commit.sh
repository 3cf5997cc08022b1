#!/bin/bash
# One code change, side by side: benchmarks/vs_onnxruntime.py run from a worktree of OLD and from this checkout,
# model by model, alternating which goes first, each row timed against ONNX Runtime in its own process.
#
#   benchmarks/vs_commit.sh OLD OUTDIR MODEL... -- [vs_onnxruntime.py options]
#   benchmarks/vs_commit.sh 4b684e8 /tmp/filter mobilenetv1@160 squeezenet@160 -- --per-task 2 8 --seeds 0 --schedules auto
#
# Writes OUTDIR/{old,new}-MODEL.json (rows, --raw) and .log, and prints the load average around each run. Time it
# on a quiet machine only. The old tree gets this checkout's benchmarks/ and edgetune/board/baseline.py (how
# models are timed), so that only the change under test differs.
set -u
old=$1 out=$2; shift 2
models=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ $# -gt 0 ] && shift
opts=("$@")
root=$(git rev-parse --show-toplevel)
tree=$out/tree-$old
mkdir -p "$out"
[ -d "$tree" ] || git -C "$root" worktree add -f --detach "$tree" "$old" -q
cp "$root/edgetune/board/baseline.py" "$tree/edgetune/board/baseline.py"
run() { # variant model
  # each variant imports its own tree's edgetune (new: the checkout this script runs from, not the installed one)
  local pythonpath=$root; [ "$1" = old ] && pythonpath=$tree
  echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $1 $2"
  (cd "$root" && PYTHONPATH=$pythonpath python benchmarks/vs_onnxruntime.py --models "$2" "${opts[@]}" \
     --out "$out/runs-$1-$2" --raw "$out/$1-$2.json") > "$out/$1-$2.log" 2>&1
  echo "=== rc=$? $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
}
first=old second=new
for model in "${models[@]}"; do
  run $first "$model"; run $second "$model"
  tmp=$first first=$second second=$tmp
done
