#!/usr/bin/env bash
# Install the test dependencies and run every test: Python (pytest) and the ST extension (node --test,
# headless Chromium). Run from anywhere; uses ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
# Below CPython 3.13 the hnswlib module comes from chroma-hnswlib's wheels. A venv that compiled the
# hnswlib source package earlier has both (they share the module file): drop it and restore chroma's.
if .venv/bin/python -c 'import sys; sys.exit(sys.version_info >= (3, 13))' \
    && .venv/bin/python -m pip show --quiet hnswlib >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall --quiet --yes hnswlib
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$(grep -o "chroma-hnswlib>=[^;\"']*" pyproject.toml | head -1)"
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "chromium is missing: sudo apt-get install chromium" >&2; exit 1
  fi
fi
(cd tests/js && npm ci --no-audit --no-fund --silent)

# Every suite runs even when an earlier one fails; the summary names the failures.
failed=()
run_suite() {
  local name=$1; shift
  echo "== $name" >&2
  "$@" || failed+=("$name")
}
# Four workers, each test file on one (module fixtures stay shared): on a busy 2-core machine, four
# processes get four shares of the CPU instead of one. STBME_TEST_WORKERS=0 runs them in this process.
run_suite "python tests" .venv/bin/python -m pytest -q -n "${STBME_TEST_WORKERS:-4}" --dist loadfile "$@"
run_suite "extension unit tests" bash -c 'cd tests/js && node --test unit/'
run_suite "extension end-to-end tests (headless Chromium + real sidecar)" \
  bash -c 'cd tests/js && STBME_PYTHON="$PWD/../../.venv/bin/python" node --test --test-concurrency=1 e2e/'

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "all suites passed" >&2
