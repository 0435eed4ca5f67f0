#!/usr/bin/env bash
# chromium.sh — make sure Chromium is installed for the browser tests
# (`make test-browser`): Debian's chromium package, installed with apt when
# running as root; otherwise it stops and says so.
set -euo pipefail

for c in "${CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
	if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then
		exit 0
	fi
done
if [ "$(id -u)" != 0 ]; then
	echo "chromium: not installed; install it (apt-get install chromium) or set CHROMIUM" >&2
	exit 1
fi
echo "chromium: installing Debian's chromium package" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
