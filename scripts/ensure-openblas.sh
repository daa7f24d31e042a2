#!/bin/sh
# Makes sure OpenBLAS is present for ferry's fast GEMM path. Installs
# Debian's libopenblas0-pthread when it is missing and packages can be
# installed (root, or passwordless sudo); otherwise says that ferry's
# built-in kernels will be used. Never fails the build.
have() { ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so'; }
if have; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "note: OpenBLAS not found and apt-get is not available; ferry uses its built-in GEMM kernels (as fast on CPUs with AVX-512, slower on others)." >&2
	exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
		echo "note: OpenBLAS not found and packages cannot be installed here; ferry uses its built-in GEMM kernels (as fast on CPUs with AVX-512, slower on others). To install: sudo apt-get install libopenblas0-pthread" >&2
		exit 0
	fi
fi
echo "installing OpenBLAS (libopenblas0-pthread) for the fast GEMM path..." >&2
if ! $SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; then
	$SUDO apt-get update -q >/dev/null 2>&1
	$SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1
fi
if have; then echo "OpenBLAS installed." >&2; else
	echo "note: could not install OpenBLAS; ferry uses its built-in GEMM kernels (as fast on CPUs with AVX-512, slower on others)." >&2
fi
exit 0
