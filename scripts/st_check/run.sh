#!/usr/bin/env bash
# The real-SillyTavern check of the Authority bridge: an unmodified original ST-BME in a real SillyTavern
# (headless Chromium) keeps its graph and vectors in `stbme serve` and recalls from them.
#
#   scripts/st_check/run.sh <SillyTavern source dir> <ST-BME checkout> [stbme|authority]
#
# Both directories stay outside this repository (for example under /tmp); nothing of theirs is copied here.
# The SillyTavern directory is a scratch copy: this script runs `npm ci` in it if needed and changes its
# config.yaml, plugins/, and its default user's settings and extensions. The last argument picks the address
# ST-BME uses: `authority` (default: a copy of the plugin mounted as "authority", ST-BME unconfigured) or
# `stbme` (ST-BME's authorityBaseUrl set to /api/plugins/stbme/v1/authority).
# A stand-in model (scripts/st_check/fake_model.py) plays ST's chat API, ST-BME's LLM and its embeddings.
# Needs: node >= 18, Debian's chromium, this repo's .venv and tests/js/node_modules (scripts/test.sh).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
st="$(cd "${1:?usage: $0 <SillyTavern dir> <ST-BME dir> [stbme|authority]}" && pwd)"
stbme_src="$(cd "${2:?usage: $0 <SillyTavern dir> <ST-BME dir> [stbme|authority]}" && pwd)"
mode="${3:-authority}"
py="$repo/.venv/bin/python"
work="$(mktemp -d /tmp/st-check-XXXXXX)"
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
st_port=$(free_port); sidecar_port=$(free_port); model_port=$(free_port)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_http() { for _ in $(seq 1 240); do curl -s -o /dev/null "$1" && return 0; sleep 0.5; done; echo "no answer from $1" >&2; return 1; }

[ -d "$st/node_modules" ] || (cd "$st" && npm ci --no-audit --no-fund)
[ -f "$st/config.yaml" ] || cp "$st/default/config.yaml" "$st/config.yaml"
sed -i -e 's/^enableServerPlugins: .*/enableServerPlugins: true/' -e "s/^port: .*/port: $st_port/" "$st/config.yaml"
for name in stbme authority; do
  mkdir -p "$st/plugins/$name"
  cp "$repo/st_extension/server-plugin/index.cjs" "$repo/st_extension/server-plugin/package.json" "$st/plugins/$name/"
done
echo "{\"sidecarUrl\": \"http://127.0.0.1:$sidecar_port\"}" > "$st/plugins/stbme/config.json"
echo "{\"sidecarUrl\": \"http://127.0.0.1:$sidecar_port\", \"mountAs\": \"authority\"}" > "$st/plugins/authority/config.json"
ext="$st/data/default-user/extensions/st-bme"   # where ST 1.12 looks for a user's third-party extensions
rm -rf "$ext" && mkdir -p "$ext" && (cd "$stbme_src" && tar --exclude=./tests --exclude=./.git -cf - .) | tar -xf - -C "$ext"

"$py" "$repo/scripts/st_check/fake_model.py" --port "$model_port" --log "$work/model.log" >"$work/model.out" 2>&1 &
pids+=($!)
"$repo/.venv/bin/stbme" serve --port "$sidecar_port" --data-dir "$work/sidecar" >"$work/sidecar.log" 2>&1 &
pids+=($!)
(cd "$st" && exec node server.js) >"$work/st.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$model_port/v1/models"; wait_http "http://127.0.0.1:$sidecar_port/health"
wait_http "http://127.0.0.1:$st_port/"

# ST wrote its default user's settings at start-up: point its chat API and ST-BME at the stand-in model.
"$py" - "$st/data/default-user/settings.json" "http://127.0.0.1:$model_port/v1" <<'PY'
import json, sys
path, url = sys.argv[1], sys.argv[2]
settings = json.load(open(path))
settings["firstRun"] = False
settings["main_api"] = "openai"
settings["oai_settings"].update({"chat_completion_source": "custom", "custom_url": url, "custom_model": "fake-model",
                                 "stream_openai": False})
bme = settings.setdefault("extension_settings", {}).setdefault("st_bme", {})
bme.update({"enabled": True, "embeddingApiUrl": url, "embeddingModel": "fake-embed", "embeddingApiKey": "none",
            "llmApiUrl": url, "llmModel": "fake-model", "llmApiKey": "none", "recallEnableLLM": False})
json.dump(settings, open(path, "w"), indent=4)
PY

echo "SillyTavern $(node -p "require('$st/package.json').version") on :$st_port, ST-BME $(node -p "require('$stbme_src/manifest.json').version") ($(git -C "$stbme_src" rev-parse --short HEAD 2>/dev/null || echo 'no git')), sidecar on :$sidecar_port, logs in $work"
base_url=""
[ "$mode" = stbme ] && base_url="/api/plugins/stbme/v1/authority"
ST_URL="http://127.0.0.1:$st_port" SIDECAR_URL="http://127.0.0.1:$sidecar_port" MODEL_LOG="$work/model.log" \
  OUT_DIR="$work" AUTHORITY_BASE_URL="$base_url" node "$repo/scripts/st_check/drive.mjs"
