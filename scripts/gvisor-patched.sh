#!/usr/bin/env bash
# gvisor-patched.sh: measures the firmware's instruction cost with the gVisor
# changes in docs/gvisor-patches/ applied (issue 16 item 4).
#
# It copies the gVisor module the main module requires (go.mod) from the
# module cache into build/gvisor-patched, applies docs/gvisor-patches/*.patch
# in order with patch -p1, writes build/gvisor-patched.work (a go.work that
# replaces gvisor.dev/gvisor with that copy) and runs qemu/cmd/tamanic-cost
# with GOWORK pointing at it, passing every argument through; tamanic-cost
# builds the firmware with `go tool tamago build` in the same environment, so
# the firmware links the patched gVisor. The module cache is never written.
#
#   scripts/gvisor-patched.sh -warm -runs 3 -cfg tx:bounce:512,tx:sg:512,rx:tso:512 -o build/cost-gvisor
#
# GVISOR_PATCHES=N applies only the first N patches (for per-patch figures);
# GVISOR_PATCHES=0 builds stock gVisor through the same go.work (make bench
# measures both, back to back, for its issue-16 targets table).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}

# --prepare only writes the patched copy and the go.work and prints the
# go.work's path (make firmware GVISOR=patched, make test's gvisor-test).
prepare=
if [ "${1:-}" = --prepare ]; then
	prepare=1
	shift
fi

# Skip (exit 0, one line) where the firmware cannot be built or booted:
# the same checks as qemu.Missing.
if [ -n "$prepare" ]; then
	: # building the copy needs only go and patch
elif ! command -v qemu-system-arm >/dev/null 2>&1; then
	echo "gvisor-patched: SKIP: qemu-system-arm is not installed"
	exit 0
fi
if [ -z "$prepare" ] && { ! "$go" tool -n tamago >/dev/null 2>&1 ||
	[ ! -x "${XDG_CACHE_HOME:-$HOME/.cache}/tamago-go/tamago-go1.26.0/bin/go" ]; }; then
	echo "gvisor-patched: SKIP: the TamaGo compiler (go tool tamago, tamago-go1.26.0) is not installed"
	exit 0
fi

src=$(GOWORK=off "$go" list -m -f '{{.Dir}}' gvisor.dev/gvisor)
if [ -z "$src" ] || [ ! -f "$src/go.mod" ]; then
	GOWORK=off "$go" mod download gvisor.dev/gvisor
	src=$(GOWORK=off "$go" list -m -f '{{.Dir}}' gvisor.dev/gvisor)
fi
dst=$root/build/gvisor-patched
rm -rf "$dst"
mkdir -p "$root/build"
cp -r "$src" "$dst"
chmod -R u+w "$dst"

n=0
applied=
for p in "$root"/docs/gvisor-patches/*.patch; do
	[ -e "$p" ] || continue
	if [ -n "${GVISOR_PATCHES:-}" ] && [ "$n" -ge "$GVISOR_PATCHES" ]; then
		break
	fi
	echo "gvisor-patched: applying $(basename "$p")"
	patch -s -p1 -d "$dst" <"$p"
	applied=${applied:+$applied,}$(basename "$p" .patch)
	n=$((n + 1))
done
# tamanic-cost -json records which patches the firmware was built with.
export TAMANIC_GVISOR_PATCHES=$applied

goversion=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
work=$root/build/gvisor-patched.work
cat >"$work" <<WORK
go $goversion

use $root

replace gvisor.dev/gvisor => $dst
WORK

export GOWORK=$work
# The patched copy is what the build resolves gvisor.dev/gvisor to.
got=$("$go" list -m -f '{{if .Replace}}{{.Replace.Dir}}{{end}}' gvisor.dev/gvisor)
if [ "$got" != "$dst" ]; then
	echo "gvisor-patched: go.work does not replace gvisor.dev/gvisor (got '$got')" >&2
	exit 1
fi
if [ -n "$prepare" ]; then
	echo "$work"
	exit 0
fi
exec "$go" run ./qemu/cmd/tamanic-cost "$@"
