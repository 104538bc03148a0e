#!/usr/bin/env bash
# Rebuilds the noise sweep's tables and figures from the gathered files in this folder:
#   bash docs/data/noise_sweep/gather.sh        (from the repository root, with the project's venv)
# noise_<metric>.{json,md,png}: every level with dpr, dpr_ccr, dpr_sieve, dpr_oracle (baseline dpr);
# noise_<metric>_same_pool.{json,md,png}: the levels where dpr_none (the same-pool control) was trained.
set -euo pipefail
HERE=docs/data/noise_sweep
PY=${PYTHON:-.venv/bin/python}
LEVELS=(synthkb_fn02_p0 synthkb_fn15_p0 synthkb_fn30_p0 synthkb_fn50_p0
        synthkb_fn02_p50 synthkb_fn15_p50 synthkb_fn30_p50 synthkb_fn50_p50)
ALL=(); SIEVES=(); NONE=()
for d in "${LEVELS[@]}"; do
  [ -f $HERE/$d.metrics.json ] || continue
  ALL+=("$d=$HERE/$d.metrics.json:$HERE/$d.manifest.json")
  [ -f $HERE/$d.sieve_report.json ] && SIEVES+=("$d=$HERE/$d.sieve_report.json")
  grep -q '"dpr_none"' $HERE/$d.metrics.json && NONE+=("$d=$HERE/$d.metrics.json:$HERE/$d.manifest.json")
done
for metric in hit_all@1 hit_all@5 R@5; do
  tag=$(echo "$metric" | tr -d '@_' | tr 'A-Z' 'a-z')
  $PY -m pipeline.evaluation.sweep --dataset "${ALL[@]}" ${SIEVES:+--sieve "${SIEVES[@]}"} \
    --methods dpr dpr_ccr dpr_sieve dpr_oracle --metric "$metric" \
    --out-json $HERE/noise_$tag.json --out-md $HERE/noise_$tag.md --out-png $HERE/noise_$tag.png
  if [ ${#NONE[@]} -gt 0 ]; then
    $PY -m pipeline.evaluation.sweep --dataset "${NONE[@]}" --methods dpr dpr_none dpr_sieve dpr_oracle \
      --pairs '[["dpr_sieve", "dpr_none"], ["dpr_oracle", "dpr_none"]]' --metric "$metric" \
      --out-json $HERE/noise_${tag}_same_pool.json --out-md $HERE/noise_${tag}_same_pool.md \
      --out-png $HERE/noise_${tag}_same_pool.png
  fi
done
