#!/usr/bin/env bash
# More seeded LLM fault schedules than CI runs (tests/test_llm_faults.py): cut-off answers, garbage, HTTP 500
# and 429, hangs and crashes mid-batch, with edits; each must end equal to a fresh ingest.
# Usage: scripts/fault_schedules.sh [SEEDS]   (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."
STBME_FAULT_SEEDS=${1:-300} .venv/bin/python -m pytest -q tests/test_llm_faults.py -k schedule
