#!/bin/sh
# OpenBLAS for ferry's GEMM, where it is the faster choice or asked for.
#
# On x86-64 with AVX2 and FMA ferry's own GEMM kernels are the default (as
# fast as OpenBLAS's sgemm there, without its spinning threads), so this
# installs nothing unless FERRY_GEMM=openblas asks for OpenBLAS; elsewhere
# (CPUs without AVX2, arm64, whose Go GEMM has no assembly kernel yet) it
# installs Debian's libopenblas0-pthread when it is missing and packages
# can be installed (root, or passwordless sudo). It only says what it did
# or how to do it by hand, and never fails the build.
have() { ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so'; }
if have; then exit 0; fi

# avx2_fma: this is an x86-64 CPU with AVX2 and FMA (/proc/cpuinfo's
# "flags" line exists on x86 only; `uname -m` is not trusted: some virtual
# machines report the host's architecture there).
avx2_fma() {
	flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
	case "$flags" in *" avx2 "*) ;; *) return 1 ;; esac
	case "$flags" in *" fma "*) return 0 ;; esac
	return 1
}
HOWTO="sudo apt-get install libopenblas0-pthread"
if [ "${FERRY_GEMM:-}" != "openblas" ] && avx2_fma; then
	echo "note: OpenBLAS not needed: ferry's own GEMM is the default on this AVX2 CPU (for FERRY_GEMM=openblas: FERRY_GEMM=openblas make deps, or $HOWTO)" >&2
	exit 0
fi
WHY="ferry uses its built-in GEMM kernels (portable Go here: slower than OpenBLAS on a CPU without AVX2)"
if [ "${FERRY_GEMM:-}" = "openblas" ]; then WHY="FERRY_GEMM=openblas falls back to ferry's built-in GEMM"; fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "note: OpenBLAS not found and apt-get is not available; $WHY. Install OpenBLAS (libopenblas.so) with your package manager." >&2
	exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
		echo "note: OpenBLAS not found and packages cannot be installed here; $WHY. To install: $HOWTO" >&2
		exit 0
	fi
fi
echo "installing OpenBLAS (libopenblas0-pthread) for the GEMM..." >&2
if ! $SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; then
	$SUDO apt-get update -q >/dev/null 2>&1
	$SUDO apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1
fi
if have; then echo "OpenBLAS installed." >&2; else
	echo "note: could not install OpenBLAS; $WHY. To install: $HOWTO" >&2
fi
exit 0
