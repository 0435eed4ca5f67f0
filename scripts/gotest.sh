#!/usr/bin/env bash
# gotest.sh — go test, with its failures repeated at the end.
#
#   scripts/gotest.sh [go test flags and packages…]
#
# The Caddy tests log every config load, so a failing test's lines can sit
# thousands of lines above the end, where a CI log is read from. This runs
# `go test` as it is, then, when it fails, prints each failing test's lines
# again (Caddy's JSON log lines left out) and exits with go test's status.
set -uo pipefail

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"${GO:-go}" test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
	echo
	echo "gotest: go test failed (exit $status); its failures again:"
	grep -v '^{"level"' "$log" |
		grep -E -A40 -e '^ *--- FAIL' -e '^panic:' -e '^WARNING: DATA RACE' -e '^FAIL' |
		head -n 400
fi
exit "$status"
