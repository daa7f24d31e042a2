#!/bin/sh
# Makes sure a standalone nats-server is on PATH, so server/natsq's test
# against a separate NATS process runs (it skips, saying so, without one).
# Installs Debian's nats-server package when it is missing and packages can
# be installed (root, or passwordless sudo). Never fails the build.
# Debian installs it in /usr/sbin, which a normal user's PATH may lack; the
# test looks there too.
have() { command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; }
if have; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "note: nats-server not found and apt-get is not available; the test of ferry serve against a separate NATS server will be skipped." >&2
	exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
		echo "note: nats-server not found and packages cannot be installed here; the test against a separate NATS server will be skipped. To install: sudo apt-get install nats-server" >&2
		exit 0
	fi
fi
echo "installing nats-server (Debian package) for the NATS cluster test..." >&2
if ! $SUDO apt-get install -y -q nats-server >/dev/null 2>&1; then
	$SUDO apt-get update -q >/dev/null 2>&1
	$SUDO apt-get install -y -q nats-server >/dev/null 2>&1
fi
if have; then echo "nats-server installed." >&2; else
	echo "note: could not install nats-server; the test against a separate NATS server will be skipped." >&2
fi
exit 0
