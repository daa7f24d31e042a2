#!/bin/sh
# Checks for the Go toolchain ferry needs (1.26 or newer) and says how to
# get it when it is missing; Debian's golang package is older.
if ! command -v go >/dev/null 2>&1; then
	echo "ferry needs Go 1.26 or newer: install it from https://go.dev/dl/ and put it on PATH" >&2
	exit 1
fi
v=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
major=$(echo "$v" | cut -d. -f1)
minor=$(echo "$v" | cut -d. -f2)
if [ "${major:-0}" -lt 1 ] || { [ "${major:-0}" -eq 1 ] && [ "${minor:-0}" -lt 26 ]; }; then
	echo "ferry needs Go 1.26 or newer, found $v: install it from https://go.dev/dl/" >&2
	exit 1
fi
