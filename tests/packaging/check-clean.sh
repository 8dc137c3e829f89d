#!/usr/bin/env bash
# `debian/rules clean` (dpkg-buildpackage's first step) removes everything a
# package build leaves, the two cmake trees included, so that a plain
# dpkg-buildpackage in the checkout can be followed by another, or by
# scripts/build-packages.
#   check-clean.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v dh >/dev/null || { echo "SKIPPED LOUDLY: no debhelper (scripts/install-build-deps)" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$src/debian" "$work/"
# What a build leaves: the two trees (a cache naming another source
# directory makes the next configure fail) and debhelper's staging.
left=(obj-static/CMakeCache.txt obj-dynamic/CMakeCache.txt debian/tmp/usr/sbin/gpuinit
  debian/gpuinit/usr/sbin/gpuinit debian/.debhelper/x debian/files debian/debhelper-build-stamp)
for path in "${left[@]}"; do
  mkdir -p "$work/$(dirname "$path")"
  echo "CMAKE_CACHEFILE_DIR:INTERNAL=/elsewhere" >"$work/$path"
done
(cd "$work" && debian/rules clean) >"$work/clean.log" 2>&1 ||
  fail "debian/rules clean failed: $(cat "$work/clean.log")"
for path in "${left[@]}" obj-static obj-dynamic; do
  [[ ! -e $work/$path ]] || fail "debian/rules clean left $path"
done
# Until then git ignores it: `git status` stays clean, and
# scripts/build-packages (which copies what git does not ignore) does not
# copy a previous build along.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  for path in "${left[@]}" debian/gpuinit-libgpulimit/x debian/gpuinit.substvars; do
    git -C "$src" check-ignore -q --no-index "$path" || fail "git does not ignore $path"
  done
else
  echo "check-clean: $src is not a git checkout; the .gitignore part is not checked" >&2
fi
echo "PASS: check-clean"
