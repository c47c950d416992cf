#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests (tests/studies/dashboard/test_browser.py).
#
#   .ci/chromium.sh     install Debian's `chromium` and `chromium-driver` when either is missing
#                       (needs root or sudo); print the browser's version on stderr
#
# The tests drive /usr/bin/chromium through /usr/bin/chromedriver (same package version, so the
# WebDriver protocol matches) and skip, saying why, when they are absent. Nothing is downloaded at
# test time.
set -euo pipefail

log() { echo "chromium.sh: $*" >&2; }

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    log "found $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
    exit 0
fi
log "installing the Debian packages chromium and chromium-driver"
sudo=""
[[ "$(id -u)" == "0" ]] || sudo="sudo"
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver >&2
log "installed $(/usr/bin/chromium --version 2>/dev/null | head -n1)"
