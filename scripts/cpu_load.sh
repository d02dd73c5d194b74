#!/usr/bin/env bash
# The load the test suite must survive: three numpy matrix-multiply loops and three `yes > /dev/null`
# (load about 10 on 2 cores). Runs until stopped (Ctrl-C or kill). Usage: scripts/cpu_load.sh &
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
pids=()
for _ in 1 2 3; do
  "$PY" -c 'import numpy as np
a = np.random.rand(600, 600)
while True:
    a = a @ a
    a /= a.max()' & pids+=($!)
  yes > /dev/null & pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT TERM INT
wait
