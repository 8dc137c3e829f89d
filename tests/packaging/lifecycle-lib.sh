# shellcheck shell=bash
# Sourced by the lifecycle-*.sh tests: the packages' life cycle (install,
# upgrade, remove, purge) in a chroot of a minimal Debian 12, the VM tests'
# cached image (tests/vm/build-debian-image.sh), as an admin does it on a
# machine: apt-get install ./gpuinit*.deb, dpkg --purge. No booted system:
# what needs one (services held across an upgrade) is in tests/vm.
#
# Environment (ctest sets both): GPUINIT_DEB_DIR, the built .debs;
# GPUINIT_VM_CACHE, the build's image cache (shared with tests/vm, under its
# lock). Exit 77 (skipped, loudly) without root or without the image and
# debootstrap to make it.
set -euo pipefail

lifecycle_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
failures=0

# The test runs in a mount namespace of its own: the chroot's /proc goes
# with it even when the test is killed (ctest's timeout) before its trap.
if [[ $(id -u) -eq 0 && -z ${GPUINIT_LIFECYCLE_NS:-} ]]; then
  export GPUINIT_LIFECYCLE_NS=1
  exec unshare --mount --propagation private "$0" "$@"
fi

skip() {
  echo "SKIPPED LOUDLY: $*" >&2
  exit 77
}
die() {
  echo "FAIL: $*" >&2
  exit 1
}
# A failed check that lets the test go on, to list every leftover at once.
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
finish() {
  ((failures == 0)) || die "$failures check(s) failed (above)"
  echo "PASS: $*"
}

# The .debs under test: $tools_deb and $limit_deb (the tests read them).
# shellcheck disable=SC2034
lifecycle_debs() {
  local dir=${GPUINIT_DEB_DIR:?set GPUINIT_DEB_DIR to the directory of the built .debs}
  local found
  mapfile -t found < <(compgen -G "$dir/gpuinit_*.deb" || true)
  ((${#found[@]} == 1)) || die "$dir: ${#found[@]} gpuinit_*.deb, want exactly one (scripts/build-packages $dir)"
  tools_deb=${found[0]}
  mapfile -t found < <(compgen -G "$dir/gpuinit-libgpulimit_*.deb" || true)
  ((${#found[@]} == 1)) ||
    die "$dir: ${#found[@]} gpuinit-libgpulimit_*.deb, want exactly one (scripts/build-packages $dir)"
  limit_deb=${found[0]}
}

# lifecycle_tree FLAVOUR: $tree, a chroot copied from the cached image of
# FLAVOUR (debian: systemd; debian-sysvinit: sysvinit-core), made ready for
# maintainer scripts. The image is built first if the cache lacks it.
lifecycle_tree() {
  local flavour=$1 init_packages
  case $flavour in
  debian) init_packages=systemd,systemd-sysv ;;
  debian-sysvinit) init_packages=sysvinit-core ;;
  *) die "unknown image flavour $flavour" ;;
  esac
  [[ $(id -u) -eq 0 ]] || skip "the life-cycle tests install packages into a chroot: run as root"
  lifecycle_debs
  local cache=${GPUINIT_VM_CACHE:?set GPUINIT_VM_CACHE to the VM image cache (BUILD/vm-cache)}
  local image=$cache/$flavour
  mkdir -p "$cache"
  work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-lifecycle.XXXXXX")
  tree=$work/root
  trap lifecycle_cleanup EXIT
  # The VM tests' lock: they may be building or copying the same image.
  exec 9>"$cache/.lock"
  flock 9
  if [[ ! -f $image/.complete || $(<"$image/.complete") != "$init_packages" ]]; then
    command -v debootstrap >/dev/null ||
      skip "no cached Debian image in $image and no debootstrap to make one (scripts/install-test-deps)"
    "$lifecycle_here/../vm/build-debian-image.sh" "$image" "$init_packages" >&2
  fi
  cp -a "$image" "$tree"
  flock -u 9
  rm -f "$tree/.complete"
  # As in any Debian chroot: invoke-rc.d asks policy-rc.d, and 101 forbids
  # every start, stop and restart, so no maintainer script starts a daemon
  # of the host's (deb-systemd-invoke asks it too). Each request is logged
  # outside the compared tree (/tmp), for the tests that check what the
  # scripts ask for.
  cat >"$tree/usr/sbin/policy-rc.d" <<'EOF'
#!/bin/sh
echo "$*" >>/tmp/policy-rc.d.log
exit 101
EOF
  chmod 755 "$tree/usr/sbin/policy-rc.d"
  # Scripts and tools read /proc (systemd-sysusers, dpkg's triggers). No
  # /run/systemd/system in the image: the scripts see a system not booted
  # with systemd and only record the units' state (deb-systemd-helper,
  # which works offline from files in /var/lib/systemd).
  mount -t proc proc "$tree/proc"
  mounted=1
  # The image is trimmed for the VM tests (build-debian-image.sh); two of
  # its cuts would show as changes the packages did not make, so they are
  # undone as the installed system had them:
  # - docs, man pages and locales went behind dpkg's back, directories
  #   included. dpkg, unpacking into a directory it records for other
  #   packages but finds missing (/usr/share/man/man8), drops it from their
  #   lists. The directories every package records are made again.
  # shellcheck disable=SC2016
  in_chroot sh -c 'cat /var/lib/dpkg/info/*.list | sed "s|/[^/]*\$||" | sort -u |
    while read -r dir; do [ -z "$dir" ] || [ -e "$dir" ] || [ -L "$dir" ] || mkdir -p "$dir"; done'
  # - the links of getty@tty1, e2scrub_reap and remote-fs (for a serial
  #   console) went from getty.target.wants and multi-user.target.wants,
  #   which deb-systemd-helper's purge of a unit then removes as empty.
  #   Put back where their units are, as their packages made them.
  # shellcheck disable=SC2016
  in_chroot sh -c 'for link in getty.target.wants/getty@tty1.service:getty@.service \
      multi-user.target.wants/e2scrub_reap.service:e2scrub_reap.service \
      multi-user.target.wants/remote-fs.target:remote-fs.target; do
    unit=/lib/systemd/system/${link#*:} link=/etc/systemd/system/${link%:*}
    if [ -d "${link%/*}" ] && [ -e "$unit" ] && [ ! -L "$link" ]; then ln -s "$unit" "$link"; fi
  done'
}

lifecycle_cleanup() {
  local rc=$?
  if [[ ${mounted:-} ]]; then
    umount "$tree/proc" || umount -l "$tree/proc" || true
  fi
  # --one-file-system: never into a mount that did not come off.
  [[ -z ${work:-} ]] || rm -rf --one-file-system "$work"
  exit "$rc"
}

# in_chroot CMD...: CMD as root in the tree, non-interactive, stdin closed:
# a question from dpkg (a conffile prompt) fails instead of waiting.
in_chroot() {
  chroot "$tree" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive HOME=/root "$@" </dev/null
}

installed() { # NAME...: the packages are installed (configured) in the tree
  local name
  for name; do
    [[ $(in_chroot dpkg-query -W -f="\${db:Status-Abbrev}" "$name" 2>/dev/null) == "ii " ]] || return 1
  done
}

# The relations of the .debs given, one clause (alternatives joined by |)
# a line, each alternative reduced to its package name.
depends_clauses() {
  local deb
  for deb; do
    dpkg-deb -f "$deb" Pre-Depends Depends | sed -E 's/^(Pre-)?Depends: ?//'
  done | tr ',' '\n' | sed -E 's/\([^)]*\)//g; s/:any//g; s/[[:space:]]//g' | grep -v '^$' || true
}

# lifecycle_deps DEB...: what the .debs depend on and the image lacks
# (libpci3 and pci.ids: not in minbase), installed before any "before"
# snapshot, so that a test sees only the .debs' own changes. From the host's
# apt cache where it holds them (the host builds with libpci-dev), else from
# the Debian archive by apt-get in the chroot.
lifecycle_deps() {
  local own=" " ours deb clause alternative name found
  for deb; do own+="$(dpkg-deb -f "$deb" Package) "; done
  ours=$own
  local -a queue files=() unmet=()
  mapfile -t queue < <(depends_clauses "$@")
  local arch
  arch=$(dpkg --print-architecture)
  while ((${#queue[@]})); do
    clause=${queue[0]}
    queue=("${queue[@]:1}")
    found=
    for alternative in ${clause//|/ }; do
      if [[ $own == *" $alternative "* ]] || installed "$alternative"; then
        found=yes
        break
      fi
    done
    [[ $found ]] && continue
    for alternative in ${clause//|/ }; do
      name=$(compgen -G "/var/cache/apt/archives/${alternative}_*_$arch.deb" ||
        compgen -G "/var/cache/apt/archives/${alternative}_*_all.deb" || true)
      name=$(sort -V <<<"$name" | tail -1)
      if [[ $name ]]; then
        files+=("$name")
        own+="$alternative "
        mapfile -t -O "${#queue[@]}" queue < <(depends_clauses "$name")
        found=yes
        break
      fi
    done
    [[ $found ]] || unmet+=("$clause")
  done
  ((${#files[@]} + ${#unmet[@]})) || return 0
  if ((${#unmet[@]} == 0)); then
    mkdir -p "$tree/tmp/deps"
    cp "${files[@]}" "$tree/tmp/deps/"
    echo "lifecycle: the image's missing dependencies from the host's apt cache: ${files[*]##*/}"
    if in_chroot sh -c 'dpkg -i /tmp/deps/*.deb' >"$work/deps.log" 2>&1; then
      rm -rf "$tree/tmp/deps"
      return 0
    fi
    echo "lifecycle: dpkg -i of the cached packages failed; from the archive instead:" >&2
    tail -5 "$work/deps.log" >&2
    rm -rf "$tree/tmp/deps"
  fi
  local wanted
  wanted=$(depends_clauses "$@" | grep -vxF -f <(tr ' ' '\n' <<<"$ours" | grep -v '^$') | paste -sd, || true)
  echo "lifecycle: installing from the Debian archive in the chroot: $wanted"
  # Never through a link of the image's, which would lead out of the tree.
  rm -f "$tree/etc/resolv.conf"
  cp -L /etc/resolv.conf "$tree/etc/resolv.conf"
  if ! in_chroot apt-get update -q >"$work/deps.log" 2>&1 ||
    ! in_chroot apt-get satisfy -y -q --no-install-recommends "$wanted" >>"$work/deps.log" 2>&1; then
    tail -20 "$work/deps.log" >&2
    die "could not install the dependencies $wanted in the chroot"
  fi
}

# install_debs DEB...: the admin's install, apt-get install ./x.deb, here
# offline (no lists): every dependency is in the image already.
install_debs() {
  local deb args=()
  mkdir -p "$tree/tmp/debs"
  for deb; do
    cp "$deb" "$tree/tmp/debs/"
    args+=("/tmp/debs/${deb##*/}")
  done
  in_chroot apt-get install -y -q --no-install-recommends "${args[@]}" >"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; die "apt-get install ${args[*]##*/} failed in the chroot"; }
  rm -rf "$tree/tmp/debs"
}

# snapshot OUT: every file of the tree (not crossing into mounts) with its
# type, mode, owner and, for a regular file its checksum, for a link its
# target; one line each, sorted by path. Left out, each for its reason:
snapshot() {
  local out=$1
  local -a prune=(
    # The kernel's file systems, mounted at boot: no package's files.
    ./proc ./sys ./dev
    # tmpfs at boot, emptied at the next one (and /tmp holds this
    # harness's own files: the policy-rc.d log).
    ./run ./tmp
    # The logs the admin keeps (dpkg.log, apt's history and term logs,
    # alternatives.log): the issue's one exception.
    ./var/log
    # apt's own caches and state: package lists, pkgcache.bin, downloaded
    # archives, extended_states (auto-installed marks), rebuilt by every
    # apt run.
    ./var/cache/apt ./var/lib/apt
    # debconf's database: gpuinit has no templates; debconf rewrites it
    # (with -old backups) whenever apt or a script loads it.
    ./var/cache/debconf
    # dpkg's records of every package, rewritten by every dpkg run (status,
    # available and their -old copies, the locks, the journal in updates/,
    # the trigger queues). That gpuinit left no record is checked apart
    # (purged_from_dpkg); dpkg's info/, alternatives/, diversions and
    # statoverride stay in the list, so a leftover there shows.
    ./var/lib/dpkg/status ./var/lib/dpkg/status-old ./var/lib/dpkg/available
    ./var/lib/dpkg/available-old ./var/lib/dpkg/lock ./var/lib/dpkg/lock-frontend
    ./var/lib/dpkg/updates ./var/lib/dpkg/triggers
    ./var/lib/dpkg/diversions-old ./var/lib/dpkg/statoverride-old
  )
  local -a expr=()
  local path
  for path in "${prune[@]}"; do
    expr+=(-path "$path" -o)
  done
  unset 'expr[-1]'
  (
    cd "$tree"
    find . -xdev \( "${expr[@]}" \) -prune -o -printf '%p\t%y %m %U:%G %l\n' | sort >"$out.meta"
    find . -xdev \( "${expr[@]}" \) -prune -o -type f -print0 | xargs -0r sha256sum |
      sed -E 's/^([0-9a-f]+)  (.*)$/\2\t\1/' | sort >"$out.sums"
  )
  # insserv's dependency caches (/etc/init.d/.depend.boot, .start, .stop),
  # rewritten by every update-rc.d, list each script's dependencies in an
  # order that changes from run to run: compared as sets.
  local depend sum
  for depend in "$tree"/etc/init.d/.depend.*; do
    [[ -f $depend ]] || continue
    sum=$(perl -lane 'print join " ", $F[0], sort @F[1 .. $#F]' "$depend" | sort | sha256sum | cut -d' ' -f1)
    sed -i "s|^\./etc/init\.d/${depend##*/}\t.*|./etc/init.d/${depend##*/}\t$sum (as a set)|" "$out.sums"
  done
  # path<TAB>type mode owner [link target] [sha256]
  join -t $'\t' -a 1 "$out.meta" "$out.sums" | sed -E 's/\t([0-9a-f]{64}( \(as a set\))?)$/ \1/' >"$out"
  rm -f "$out.meta" "$out.sums"
}

# purged_from_dpkg NAME...: dpkg keeps no record of the packages (status
# "not-installed", no info/ files).
purged_from_dpkg() {
  local name status
  for name; do
    status=$(in_chroot dpkg-query -W -f="\${db:Status-Status}" "$name" 2>/dev/null || true)
    [[ -z $status || $status == not-installed ]] || fail "dpkg still records $name: status $status"
    [[ -z $(compgen -G "$tree/var/lib/dpkg/info/$name.*" || compgen -G "$tree/var/lib/dpkg/info/$name:*" || true) ]] ||
      fail "dpkg's info/ still holds files of $name: $(cd "$tree/var/lib/dpkg/info" && echo "$name".* "$name":*)"
  done
}

# check_purged BEFORE ETC_BEFORE AFTER: the snapshot AFTER a purge equals
# BEFORE (taken before the install, with a copy of /etc in ETC_BEFORE),
# except for the gpu-persist account, which stays by Debian's convention
# (debian/gpuinit.postrm): it must be the only change to the account files.
check_purged() {
  local before=$1 etc_before=$2 after=$3 file added unexpected backup stray
  # The account's files: after = before plus the gpu-persist entry, nothing
  # else.
  for file in etc/passwd etc/group etc/shadow etc/gshadow; do
    added=$(diff "$etc_before/${file#etc/}" "$tree/$file" | grep '^[<>]' || true)
    unexpected=$(grep -v '^> gpu-persist:' <<<"$added" | grep -v '^$' || true)
    [[ -z $unexpected ]] || fail "/$file changed beyond the gpu-persist account:"$'\n'"$unexpected"
    if [[ $file == etc/passwd || $file == etc/group ]]; then
      [[ $(grep -c '^> gpu-persist:' <<<"$added") == 1 ]] ||
        fail "/$file does not keep exactly one gpu-persist entry after the purge"
    fi
    # The tools' backup of the file, if they rewrote it: the version before
    # the account was added.
    backup=$tree/$file-
    if [[ -f $backup ]] && ! cmp -s "$backup" "$etc_before/${file#etc/}-"; then
      stray=$(grep -vxF -f "$etc_before/${file#etc/}" "$backup" | grep -v '^gpu-persist:' || true)
      [[ -z $stray ]] || fail "/$file- holds lines of neither version:"$'\n'"$stray"
    fi
  done
  # Every other difference is a leftover (>), a file the purge took away (<)
  # or one it changed (both).
  diff "$before" "$after" | grep '^[<>]' |
    grep -vP '^[<>] \./etc/(passwd|group|shadow|gshadow)-?\t' >"$work/leftovers" || true
  if [[ -s $work/leftovers ]]; then
    fail "the purge left the system changed (< before the install, > after the purge):"$'\n'"$(cat "$work/leftovers")"
  fi
}
