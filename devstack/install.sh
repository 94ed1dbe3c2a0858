#!/usr/bin/env bash
# Idempotent install of the devstack's npm dependencies (exact versions from package-lock.json).
# Skips the install when node_modules was installed from the same package.json + package-lock.json
# (hash stamp) and the anvil binary is present. Set DEVSTACK_FORCE_INSTALL=1 to reinstall.
# Note: `npm ci` does not work with @foundry-rs/anvil's per-platform optional packages (see README);
# `npm install --no-save` with the committed lockfile installs exactly the locked versions.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"

STAMP="node_modules/.factomat-devstack.stamp"
ANVIL_BIN="node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"

want_hash() {
  # lockfile may be absent on the very first install (it is created then)
  cat package.json package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1
}

if [[ "${DEVSTACK_FORCE_INSTALL:-0}" != "1" && -f "$STAMP" && -x "$ANVIL_BIN" && -f package-lock.json ]]; then
  if [[ "$(cat "$STAMP")" == "$(want_hash)" ]]; then
    echo "devstack/install.sh: node_modules up to date (stamp matches lockfile)" >&2
    exit 0
  fi
fi

if [[ -f package-lock.json ]]; then
  echo "devstack/install.sh: npm install --no-save (locked versions)" >&2
  npm install --no-save --no-audit --no-fund >&2
else
  echo "devstack/install.sh: no lockfile yet: npm install (creates package-lock.json)" >&2
  npm install --no-audit --no-fund >&2
fi

if [[ ! -x "$ANVIL_BIN" ]]; then
  echo "devstack/install.sh: anvil binary missing at $ANVIL_BIN (optional deps omitted? unsupported platform?)" >&2
  exit 1
fi
want_hash > "$STAMP"
echo "devstack/install.sh: done" >&2
