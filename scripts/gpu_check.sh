#!/usr/bin/env bash
# The CUDA paths on a GPU machine that has torch but no package registry: installs the wheels carried
# in .whl/ (scripts/gpu_check.sh's header lists them), then runs tests/test_cuda.py and the stage tests
# (which pick CUDA with --device auto), logs under ${OUT:-gpu_check}/.
#   wheels: pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl \
#     faiss-cpu transformers tokenizers bm25s PyStemmer ijson pydantic pydantic-core annotated-types typing-inspection
set -uo pipefail
out=${OUT:-gpu_check}; mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD${EXTRA_SITE:+:$EXTRA_SITE}
fi
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"; } 2>&1 | tee "$out/env.txt"
python3 -m pytest -p no:cacheprovider -q -s -rA tests/test_cuda.py 2>&1 | tee "$out/cuda.log" | grep -E "moved|cosine|passed|failed|FAILED|PASSED|Error" | head -40
stage_tests="tests/test_ar2_resume.py tests/test_ar2_stages.py tests/test_encode.py tests/test_index_search.py
  tests/test_ranker.py tests/test_sieve.py tests/test_train_dense.py tests/test_train_resume.py tests/test_frozen_layers.py
  tests/test_filters.py tests/test_divergence.py tests/test_checkpoint_safety.py tests/test_precision.py
  tests/test_ar2_losses.py tests/test_losses.py tests/test_ddp.py tests/test_st_folders.py tests/test_learning_curve.py"
python3 -m pytest -p no:cacheprovider -q -n 8 $stage_tests 2>&1 | tee "$out/stages.log" | tail -25
