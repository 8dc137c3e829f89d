#!/usr/bin/env bash
# scripts/build-packages never hands the package build a directory of the
# checkout's build-static: the package's configure runs
# build-static-deps.sh on GPUINIT_STATIC_DEPS, which rebuilds it in place
# when its recipe changed. dpkg-buildpackage is a stand-in here that says
# what it was given, and writes there as such a rebuild would.
#   check-build-packages.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v git >/dev/null || { echo "SKIPPED LOUDLY: no git" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
top=$work/top
mkdir -p "$top/scripts" "$top/build-static/static-deps/lib" "$work/bin"
cp "$src/scripts/build-packages" "$top/scripts/"
echo "recipe old" >"$top/build-static/static-deps/.complete"
echo archive >"$top/build-static/static-deps/lib/libkmod.a"
git -C "$top" init -q && git -C "$top" add scripts
cat >"$work/bin/dpkg-checkbuilddeps" <<'SH'
#!/bin/sh
exit 0
SH
cat >"$work/bin/dpkg-buildpackage" <<'SH'
#!/bin/sh
echo "$GPUINIT_STATIC_DEPS" >"$WORK/given"
cat "$GPUINIT_STATIC_DEPS/lib/libkmod.a" >"$WORK/archive"
echo "recipe new" >"$GPUINIT_STATIC_DEPS/.complete"
touch ../gpuinit_0_amd64.deb ../gpuinit_0_amd64.buildinfo ../gpuinit_0_amd64.changes
SH
chmod 755 "$work/bin"/*
env -u GPUINIT_STATIC_DEPS WORK="$work" PATH="$work/bin:$PATH" GPUINIT_NVML_INCLUDE_DIR=/nonexistent \
  "$top/scripts/build-packages" "$work/out" >"$work/log" 2>&1 || fail "build-packages: $(cat "$work/log")"
given=$(cat "$work/given")
[[ $given != "$top"/build-static* ]] || fail "the package build was given the checkout's $given"
[[ $(cat "$work/archive") == archive ]] || fail "the package build did not get the cached archives"
[[ $(cat "$top/build-static/static-deps/.complete") == "recipe old" ]] ||
  fail "the package build wrote into the checkout's build-static/static-deps"
[[ -f $work/out/gpuinit_0_amd64.deb ]] || fail "no .deb in OUTDIR: $(cat "$work/log")"
echo "PASS: check-build-packages"
