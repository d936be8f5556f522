#!/usr/bin/env bash
# Install a headless-capable Chromium for the report page's browser test and print its path.
#
# Usage:  chromium=$(bash .ci/install-chromium.sh)   # then FEINSUM_CHROMIUM="$chromium"
#
# * uses a Chromium already on PATH (chromium, chromium-browser, google-chrome);
# * else installs Debian's `chromium` package with apt-get (root, or sudo without a password);
# * prints exactly one line on stdout, the browser's path; every diagnostic goes to stderr.
#   Exits non-zero when no browser could be installed.
set -euo pipefail

log() { echo "install-chromium: $*" >&2; }

find_browser() {
    local c
    for c in chromium chromium-browser google-chrome google-chrome-stable; do
        if command -v "$c" >/dev/null 2>&1; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if ! find_browser >/dev/null; then
    command -v apt-get >/dev/null 2>&1 || { log "no Chromium and no apt-get to install it"; exit 1; }
    if [ "$(id -u)" = 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        log "installing Chromium needs root (apt-get install chromium)"; exit 1
    fi
    log "installing Chromium (apt-get install -y chromium)"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq >&2
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >&2
fi
browser=$(find_browser) || { log "no Chromium found after installation"; exit 1; }
"$browser" --version >&2 || { log "$browser does not run"; exit 1; }
echo "$browser"
