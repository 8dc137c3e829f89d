#!/usr/bin/env bash
# Builds the static archives the static gpuinit tools link against, from
# Debian's own source packages at the versions the archive serves:
# libkmod.a (kmod), libpci.a (pciutils) and libudev.a (systemd). Debian 12
# ships only libcap-ng.a, which is copied from libcap-ng-dev.
#
#   scripts/build-static-deps.sh OUTDIR
#
# OUTDIR gets include/ and lib/; a finished run leaves OUTDIR/.complete with
# the recipe (a hash of this script and static-no-nss.c) and the versions,
# and a rerun with the same recipe neither fetches nor compiles. A changed
# recipe rebuilds. Needs root only to add a deb-src entry when none exists.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: build-static-deps.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
stamp=$out/.complete
recipe="recipe $(cat "$here/build-static-deps.sh" "$here/static-no-nss.c" | sha256sum | cut -c1-16)"
if [[ -f $stamp ]]; then
  if [[ $(head -n 1 "$stamp") == "$recipe" ]]; then
    echo "build-static-deps: cached in $out ($(tail -n +2 "$stamp" | tr '\n' ' '))"
    exit 0
  fi
  echo "build-static-deps: $out was built by another recipe; rebuilding" >&2
  rm -f "$stamp"
fi
jobs=$(nproc)
started=$SECONDS

# Fail early, naming the packages, rather than halfway through a build.
missing=()
for program in apt-get dpkg-source gcc ld objcopy ar make meson ninja gperf; do
  command -v "$program" >/dev/null || missing+=("$program")
done
if ((${#missing[@]} > 0)); then
  echo "build-static-deps: missing ${missing[*]}; install scripts/static-packages.txt" >&2
  exit 1
fi
if [[ ! -f /usr/include/cap-ng.h ]] || ! compgen -G '/usr/lib/*/libcap-ng.a' >/dev/null; then
  echo "build-static-deps: libcap-ng.a missing; install libcap-ng-dev" >&2
  exit 1
fi

src=$out/src
rm -rf "${src:?}" "${out:?}/include" "${out:?}/lib"
mkdir -p "$src" "$out/include" "$out/lib"

have_deb_src() {
  grep -rqsE '^[[:space:]]*Types:.*deb-src' /etc/apt/sources.list.d/ ||
    grep -qsE '^[[:space:]]*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/*.list
}
need_update=no
if ! have_deb_src; then
  need_update=yes
  list=/etc/apt/sources.list.d/gpuinit-deb-src.sources
  if [[ ! -w /etc/apt/sources.list.d ]]; then
    echo "build-static-deps: no deb-src entry, and $list needs root; run this once as root" >&2
    exit 1
  fi
  # The same suites as the binary packages (point release, updates,
  # security), so the sources match what is installed.
  codename=$(awk -F= '$1 == "VERSION_CODENAME" {print $2}' /etc/os-release)
  codename=${codename:-bookworm}
  echo "build-static-deps: no deb-src entry; adding $list ($codename)" >&2
  cat >"$list" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi
# apt-get update only when needed: a new entry, or source lists never fetched.
if [[ $need_update == yes || -z $(apt-cache showsrc kmod 2>/dev/null) ]]; then
  echo "build-static-deps: apt-get update (new or unfetched source lists)" >&2
  apt-get update -qq
fi

# The version of the library that is installed, whose headers the tools
# compile against, when the archive serves its source; else the highest
# version the archive serves (showsrc lists one stanza per suite that has the
# package, in no promised order).
declare -A installed_library=([kmod]=libkmod2 [pciutils]=libpci3 [systemd]=libudev1)
source_version() {
  local served installed best=""
  served=$(apt-cache showsrc "$1" | awk '/^Version:/ {print $2}')
  installed=$(dpkg-query -W -f='${source:Version}' "${installed_library[$1]}" 2>/dev/null || true)
  if [[ -n $installed ]] && grep -qxF "$installed" <<<"$served"; then
    echo "$installed"
    return
  fi
  [[ -z $installed ]] || echo "build-static-deps: $1 $installed (installed) is not served; taking the highest" >&2
  while read -r version; do
    if [[ -n $version ]] && { [[ -z $best ]] || dpkg --compare-versions "$version" gt "$best"; }; then
      best=$version
    fi
  done <<<"$served"
  echo "$best"
}

cd "$src"
for package in kmod pciutils systemd; do
  version=$(source_version "$package")
  [[ -n $version ]] || { echo "build-static-deps: apt-cache showsrc $package: nothing" >&2; exit 1; }
  echo "build-static-deps: fetching $package $version"
  apt-get source -qq --download-only "$package=$version" >"$src/apt-$package.log" 2>&1 ||
    { tail -20 "$src/apt-$package.log" >&2; echo "build-static-deps: apt-get source $package=$version failed" >&2; exit 1; }
  dpkg-source -x "$package"_*.dsc >>"$src/apt-$package.log" 2>&1 ||
    { tail -20 "$src/apt-$package.log" >&2; echo "build-static-deps: unpacking $package failed" >&2; exit 1; }
  echo "$package $version" >>"$src/versions"
done

# libkmod.a: its build refuses --enable-static, so compile the library and its
# shared helpers directly, without compression or crypto support.
echo "build-static-deps: building libkmod.a"
kmod=$(echo "$src"/kmod-*/)
cat >"$kmod/gpuinit-config.h" <<'CONFIG'
#define ENABLE_LOGGING 1
#define HAVE_DECL_BE32TOH 1
#define HAVE_DECL_STRNDUPA 1
#define HAVE_LINUX_MODULE_H 1
#define HAVE_NORETURN 1
#define HAVE_SECURE_GETENV 1
#define HAVE_STATIC_ASSERT 1
#define HAVE_STRUCT_STAT_ST_MTIM 1
#define HAVE___BUILTIN_UADDLL_OVERFLOW 1
#define HAVE___BUILTIN_UADDL_OVERFLOW 1
#define KMOD_FEATURES "-ZSTD -XZ -ZLIB -LIBCRYPTO"
#define PACKAGE "kmod"
CONFIG
kmod_version=$(awk '$1 == "kmod" {v = $2; sub(/^[0-9]+:/, "", v); sub(/[+~-].*/, "", v); print v}' "$src/versions")
echo "#define VERSION \"$kmod_version\"" >>"$kmod/gpuinit-config.h"
mkdir -p "$kmod/gpuinit-build"
pids=()
for file in "$kmod"/libkmod/libkmod*.c "$kmod"/shared/*.c; do
  gcc -c -O2 -fPIC -ffunction-sections -fdata-sections -fvisibility=hidden -D_GNU_SOURCE \
    -include "$kmod/gpuinit-config.h" -I"$kmod" -DSYSCONFDIR='"/etc"' \
    -o "$kmod/gpuinit-build/$(basename "$file" .c).o" "$file" &
  pids+=($!)
done
# A bare `wait` returns 0 even when a compile failed: wait for each.
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "build-static-deps: compiling libkmod failed" >&2; exit 1; }
done
# libkmod exports its API with default visibility and keeps the rest hidden;
# localizing the hidden symbols of one relocatable object keeps its helpers
# (memdup, path_make_absolute_cwd, ...) from clashing with systemd's in
# libudev.a.
ld -r -o "$kmod/gpuinit-build/kmod.o" "$kmod"/gpuinit-build/*.o
objcopy --localize-hidden "$kmod/gpuinit-build/kmod.o"
ar rcs "$out/lib/libkmod.a" "$kmod/gpuinit-build/kmod.o"
cp "$kmod/libkmod/libkmod.h" "$out/include/"

# libpci.a: pciutils' own Makefile, static only, without zlib (pci.ids is
# read uncompressed, as Debian's pci.ids package ships it), DNS lookups,
# udev's hwdb or libkmod, none of which the tools use. lib/configure writes
# lib/config.h into the tree, which is this run's own unpacked copy.
# IDSDIR is only the default pci.ids path; the tools name the root's.
echo "build-static-deps: building libpci.a"
pciutils=$(echo "$src"/pciutils-*/)
make -C "$pciutils" -j"$jobs" lib/libpci.a ZLIB=no DNS=no HWDB=no LIBKMOD=no SHARED=no \
  IDSDIR=/usr/share/misc OPT="-O2 -fPIC -ffunction-sections -fdata-sections" \
  >"$src/pciutils.log" 2>&1 ||
  { tail -20 "$src/pciutils.log" >&2; echo "build-static-deps: building libpci.a failed" >&2; exit 1; }
grep -qx '#define PCI_HAVE_PM_LINUX_SYSFS' "$pciutils/lib/config.h" ||
  { echo "build-static-deps: libpci.a was configured without its sysfs method" >&2; exit 1; }
cp "$pciutils/lib/libpci.a" "$out/lib/"
mkdir -p "$out/include/pci"
cp "$pciutils"/lib/{pci.h,config.h,header.h,types.h} "$out/include/pci/"

# libudev.a: meson wants version.h generated before the library.
echo "build-static-deps: building libudev.a (about a minute and a half)"
systemd=$(echo "$src"/systemd-*/)
meson setup "$systemd/gpuinit-build" "$systemd" -Dauto_features=disabled \
  -Dstatic-libudev=true -Dtests=false -Dman=false -Dhtml=false -Dtranslations=false \
  -Dlink-udev-shared=false -Dbuildtype=release >"$src/meson.log" 2>&1 ||
  { tail -30 "$src/meson.log" >&2; exit 1; }
ninja -C "$systemd/gpuinit-build" version.h >/dev/null
ninja -C "$systemd/gpuinit-build" libudev.a >/dev/null
cp "$systemd/gpuinit-build/libudev.a" "$out/lib/"
cp "$systemd/src/libudev/libudev.h" "$out/include/"

cp /usr/lib/*/libcap-ng.a "$out/lib/"
cp /usr/include/cap-ng.h "$out/include/"

# NSS: glibc marks getpwnam, initgroups, dlopen, getaddrinfo... with a
# .gnu.warning section, and the static build makes that warning fatal. The
# warning is per object file, so libudev's enumerate/monitor pull systemd's
# user-util.o (get_user_creds) and any libcap-ng call pulls cap-ng.o
# (capng_change_id) although no tool reaches those functions. Rename every
# such reference in the archives to a stand-in from static-no-nss.c (not
# found / ENOSYS), kept in libgpuinit-nonss.a. A warned function without a
# stand-in fails here, naming it.
echo "build-static-deps: replacing NSS references with stand-ins"
objdump -h "$(gcc -print-file-name=libc.a)" | grep -o '\.gnu\.warning\.[A-Za-z0-9_]*' |
  sed 's/^\.gnu\.warning\.//' | sort -u >"$src/warned"
[[ -s $src/warned ]] || { echo "build-static-deps: found no warned functions in libc.a" >&2; exit 1; }
# These reach NSS inside glibc (getnameinfo: gethostbyaddr_r, getservbyport_r;
# getlogin_r: getpwuid_r; ...) without a warning of their own; systemd's
# socket-util.o calls getnameinfo. Treated the same, so the NSS module
# loader stays out of the tools (cmake/CheckStaticTool.cmake checks that).
printf '%s\n' getnameinfo getlogin getlogin_r cuserid ether_ntohost ether_hostton innetgr \
  setnetgrent getnetgrent getnetgrent_r rcmd rcmd_af ruserok ruserok_af iruserok iruserok_af \
  rexec rexec_af >>"$src/warned"
sort -u -o "$src/warned" "$src/warned"
gcc -c -O2 -Wall -Wextra -Werror -ffunction-sections -fdata-sections \
  -o "$src/no-nss.o" "$here/static-no-nss.c"
nm "$src/no-nss.o" | awk '$2 == "T" && sub(/^gpuinit_nonss_/, "", $3) {print $3}' | sort -u >"$src/stubbed"
ar rcs "$out/lib/libgpuinit-nonss.a" "$src/no-nss.o"
for archive in "$out"/lib/lib{kmod,pci,udev,cap-ng}.a; do
  nm "$archive" 2>/dev/null | awk '$1 == "U" {print $2}' | sort -u | comm -12 - "$src/warned" >"$src/used"
  [[ -s $src/used ]] || continue
  unstubbed=$(comm -23 "$src/used" "$src/stubbed" | tr '\n' ' ')
  if [[ -n $unstubbed ]]; then
    echo "build-static-deps: $(basename "$archive") calls $unstubbed: add stand-ins to scripts/static-no-nss.c" >&2
    exit 1
  fi
  renames=()
  while read -r symbol; do
    renames+=(--redefine-sym "$symbol=gpuinit_nonss_$symbol")
  done <"$src/used"
  objcopy "${renames[@]}" "$archive"
  echo "build-static-deps: $(basename "$archive"): $(tr '\n' ' ' <"$src/used")-> stand-ins"
done

{ echo "$recipe"; cat "$src/versions"; } >"$stamp"
rm -rf "$src"
echo "build-static-deps: done in $((SECONDS - started)) s: $(tail -n +2 "$stamp" | tr '\n' ' ')in $out"
