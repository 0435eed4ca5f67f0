#!/usr/bin/env bash
# chromium.sh — make sure Chromium is installed for the browser tests
# (`make test-browser`): Debian's chromium package, and a Japanese font so
# the pages' Japanese is drawn in screenshots, installed with apt when
# running as root; otherwise it stops and says so.
set -euo pipefail

need=()
found=
for c in "${CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
	if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then
		found=1
		break
	fi
done
[ -n "$found" ] || need+=(chromium)
if ! command -v fc-list >/dev/null 2>&1 || [ -z "$(fc-list :lang=ja 2>/dev/null)" ]; then
	need+=(fonts-ipafont-gothic)
fi
[ ${#need[@]} -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "chromium: missing ${need[*]}; install them (apt-get install ${need[*]}) or set CHROMIUM" >&2
	[ -n "$found" ] && exit 0
	exit 1
fi
echo "chromium: installing ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
