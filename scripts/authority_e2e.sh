#!/usr/bin/env bash
# Run the original ST-BME extension's own Authority end-to-end scripts (tests/e2e/authority-*.mjs) against
# `stbme serve`. ST-BME's code is never copied into this repository: pass the path of an ST-BME checkout
# (for example a `git clone` or `git archive` of it under /tmp).
#
#   scripts/authority_e2e.sh /tmp/st-bme            # the scripts as they are in that checkout
#   scripts/authority_e2e.sh /tmp/st-bme --fix-contract-version
#
# At ST-BME 590da3b authority-checkpoint-restore fails whatever the server does: its contract graph has no
# `version` field, so its own deserialiser restores an empty graph (expects 2 nodes, gets 0).
# --fix-contract-version runs that script from a temporary copy of the checkout whose test helper adds
# `version: 9` to the contract graph (the checkout itself is not changed).
#
# Needs Node >= 20.6 (the scripts register module hooks) and this repo's .venv (scripts/test.sh makes it).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
stbme_src="${1:?usage: $0 <path of an ST-BME checkout> [--fix-contract-version]}"
fix_version="${2:-}"
stbme_src="$(cd "$stbme_src" && pwd)"
[ -f "$stbme_src/tests/helpers/authority-e2e-context.mjs" ] || {
  echo "$stbme_src has no tests/helpers/authority-e2e-context.mjs: not an ST-BME checkout with Authority" >&2; exit 2; }

work="$(mktemp -d)"
port="$("$repo/.venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$repo/.venv/bin/stbme" serve --port "$port" --data-dir "$work/data" --log-level warning >"$work/serve.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.5
done

if [ "$fix_version" = "--fix-contract-version" ]; then
  cp -r "$stbme_src" "$work/st-bme"
  python3 - "$work/st-bme/tests/helpers/authority-e2e-context.mjs" <<'EOF'
import pathlib, sys
path = pathlib.Path(sys.argv[1])
text = path.read_text()
anchor = "    tombstones: [],\n    state: {"
if text.count(anchor) != 1:
    sys.exit("the contract graph in the helper changed shape; fix it by hand")
path.write_text(text.replace(anchor, "    version: 9,\n" + anchor))
EOF
  checkpoint_src="$work/st-bme"
else
  checkpoint_src="$stbme_src"
fi

echo "ST-BME checkout: $stbme_src ($(git -C "$stbme_src" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout'))"
echo "sidecar: http://127.0.0.1:$port (data in $work/data)"
failed=()
for script in authority-server-primary authority-diagnostics-roundtrip authority-checkpoint-restore; do
  src="$stbme_src"
  [ "$script" = authority-checkpoint-restore ] && src="$checkpoint_src"
  echo "== $script"
  if (cd "$src" && AUTHORITY_E2E_BASE_URL="http://127.0.0.1:$port/v1/authority" \
        node --no-warnings "tests/e2e/$script.mjs"); then :; else failed+=("$script"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "all ST-BME Authority E2E scripts passed"
