#!/usr/bin/env bash
# Unit check of lib.sh's copy_tools, no qemu: a fake multi-call layout (a
# copy of static busybox named "multi", with links "echo" and "basename" to
# it, as build-static/tools will have gpu-mknod and gpu-modload -> gpuinit),
# a regular static tool and a dynamic one go into a fresh tree. The binary
# must be copied once, each link recreated as a relative link to it (so it
# still dispatches on argv[0]), the regular tools copied as they are, and the
# dynamic one must bring its libraries.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
if ! { [[ -x /bin/busybox ]] && [[ $(file -b /bin/busybox) == *"statically linked"* ]]; }; then
  echo "SKIPPED LOUDLY: copy_tools check: a static /bin/busybox (busybox-static) is missing" >&2
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-copy-tools.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/tools" "$work/other"
cp /bin/busybox "$work/tools/multi"
ln -s multi "$work/tools/echo"
ln -s ../tools/multi "$work/other/basename" # another directory, another relative path
cp /bin/busybox "$work/tools/regular"
dynamic=$(type -P true)
# Not "ldd | grep -q": under pipefail, grep leaving at the first match can
# fail the pipeline with ldd's SIGPIPE (it did, about one run in five).
[[ $(ldd "$dynamic") == *libc* ]] || fail "$dynamic is not dynamic"
tree=$work/root
mkdir -p "$tree/usr/sbin"
printf 'installed\n' >"$tree/usr/sbin/echo" # as cmake --install leaves a tool
ln -s nowhere "$tree/usr/sbin/multi"        # an installed link is replaced, not written through
copy_tools "$tree" "$work/tools/echo" "$work/other/basename" "$work/tools/regular" "$dynamic"

sbin=$tree/usr/sbin
ls -l "$sbin"
[[ -f $sbin/multi && ! -L $sbin/multi ]] || fail "multi is not a regular file"
cmp -s /bin/busybox "$sbin/multi" || fail "multi is not the multi-call binary"
[[ ! -e $tree/usr/sbin/nowhere ]] || fail "copy_tools wrote through an installed symlink"
for link in echo basename; do
  [[ -L $sbin/$link ]] || fail "$link is not a symlink"
  [[ $(readlink "$sbin/$link") == multi ]] || fail "$link -> $(readlink "$sbin/$link"), want multi"
done
[[ $(find "$sbin" -type f | wc -l) == 3 ]] || fail "want 3 files (multi, regular, true)"
[[ -f $sbin/regular && ! -L $sbin/regular ]] || fail "regular is not a regular file"
[[ -x $sbin/$(basename "$dynamic") ]] || fail "the dynamic tool was not copied"
while read -r library; do
  [[ -e $tree$library ]] || fail "the dynamic tool's $library was not copied"
done < <(ldd "$dynamic" | grep -oE '/[^ ]+')
# The links dispatch on their own names, as gpu-mknod -> gpuinit will.
[[ $("$sbin/echo" dispatched) == dispatched ]] || fail "the echo link does not run echo"
[[ $("$sbin/basename" /a/b) == b ]] || fail "the basename link does not run basename"
# A missing tool (not built) is an error, not a silent skip.
if copy_tools "$work/root2" "$work/tools/missing" 2>/dev/null; then fail "a missing tool was accepted"; fi
echo "copy_tools: multi-call links, regular and dynamic tools: ok"
