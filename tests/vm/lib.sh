# shellcheck shell=bash
# The harness's globals ($cache, $release, $depmod) are set by the caller.
# shellcheck disable=SC2154
# Host-side helpers of the VM harness (bash), sourced by run-vm-test.sh, by
# the image flavours in images/ and by check-copy-tools.sh. Nothing here runs
# on its own.

# vm_header FILE KEY: the value of a "# vm-KEY: VALUE" line in FILE's header
# (its leading comment and blank lines), or nothing. tests/vm/CMakeLists.txt
# reads the same lines, and checks them.
vm_header() {
  sed -n -e '/^[[:space:]]*$/b' -e '/^#/!q' \
    -e "s/^# vm-$2:[[:space:]]*\([^[:space:]]*\).*/\1/p" "$1"
}

# copy_binary TREE FILE: FILE into TREE/usr/sbin under its own name,
# replacing whatever is there (never writing through an installed symlink).
# A dynamic binary brings the libraries and the loader ldd names, unless TREE
# has them already (the Debian images have their own libc); a static one
# needs none.
copy_binary() {
  local tree=$1 file=$2 library
  mkdir -p "$tree/usr/sbin"
  cp --remove-destination "$file" "$tree/usr/sbin/$(basename "$file")"
  for library in $(ldd "$file" 2>/dev/null | grep -oE '/[^ ]+' || true); do
    [[ -e $tree$library ]] && continue
    mkdir -p "$tree$(dirname "$library")"
    cp -L "$library" "$tree$library"
  done
}

# copy_tools TREE TOOL...: the tools under test into TREE/usr/sbin, keeping a
# multi-call layout working. A TOOL that is a regular file is copied as it
# is. A TOOL that is a symlink (gpu-mknod -> gpuinit) gets the file it
# finally resolves to copied once, under that file's name, and the link
# recreated under the TOOL's name as a relative link next to it, so the
# binary still sees the tool's name as argv[0].
copy_tools() {
  local tree=$1 tool target
  shift
  local -A copied=()
  mkdir -p "$tree/usr/sbin"
  for tool in "$@"; do
    [[ -e $tool ]] || { echo "vm: tool $tool does not exist (not built?)" >&2; return 1; }
    if [[ -L $tool ]]; then
      target=$(readlink -f "$tool")
      if [[ -z ${copied[$target]:-} ]]; then
        copy_binary "$tree" "$target"
        copied[$target]=1
      fi
      if [[ $(basename "$tool") != "$(basename "$target")" ]]; then
        ln -sfn "$(basename "$target")" "$tree/usr/sbin/$(basename "$tool")"
      fi
    elif [[ -z ${copied[$(readlink -f "$tool")]:-} ]]; then
      copy_binary "$tree" "$tool"
      copied[$(readlink -f "$tool")]=1
    fi
  done
}

# add_modules TREE: the stand-in modules under lib/modules/RELEASE/extra and
# their depmod index, and its client nvidia-probe in usr/local/bin. Uses the
# harness's $cache, $release and $depmod.
add_modules() {
  local tree=$1
  mkdir -p "$tree/lib/modules/$release/extra" "$tree/usr/local/bin"
  cp "$cache"/fake-nvidia/*.ko "$tree/lib/modules/$release/extra/"
  cp "$cache/fake-nvidia/nvidia-probe" "$tree/usr/local/bin/"
  cp "$cache"/modules.builtin* "$tree/lib/modules/$release/"
  : >"$tree/lib/modules/$release/modules.order"
  "$depmod" -b "$tree" "$release"
}

# add_standin_nvidia_smi TREE: the stand-in nvidia-smi (tests/fixture,
# built by the harness into $cache) as TREE's /usr/bin/nvidia-smi, where
# the driver package puts it, so that the tools find it on any PATH a
# service gets: a wrapper that runs it in its driver mode
# (tests/fixture/mig_standin.h) over the stand-in module's nvidia-test/mig,
# one GPU per bound stand-in GPU (their minors are their indices unless
# reverse_probe). It keeps no state of its own: a driver reload loses what
# a reboot would. Uses the harness's $cache.
add_standin_nvidia_smi() {
  local tree=$1
  install -D -m 0755 "$cache/fake-nvidia/standin-nvidia-smi" \
    "$tree/usr/local/lib/gpuinit-vm/standin-nvidia-smi"
  mkdir -p "$tree/usr/bin"
  cat >"$tree/usr/bin/nvidia-smi" <<'SMI'
#!/bin/sh
# The stand-in nvidia-smi in its driver mode (tests/fixture/mig_standin.h).
GPUINIT_STANDIN_GPUS=$(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l)
GPUINIT_STANDIN_DRIVER=/proc/driver/nvidia-test/mig
GPUINIT_STANDIN_MIG=/run/gpuinit-standin
export GPUINIT_STANDIN_GPUS GPUINIT_STANDIN_DRIVER GPUINIT_STANDIN_MIG
exec /usr/local/lib/gpuinit-vm/standin-nvidia-smi "$@"
SMI
  chmod 0755 "$tree/usr/bin/nvidia-smi"
}

# add_accounts TREE: alice and bob, with primary groups of their own, so
# access to /dev/nvidiaN can only come from their supplementary nvidiaN
# membership; groups nvidia0..3. Appends to TREE/etc/passwd and group.
add_accounts() {
  local tree=$1
  cat >>"$tree/etc/passwd" <<'PASSWD'
alice:x:2000:2000::/tmp:/bin/sh
bob:x:2001:2001::/tmp:/bin/sh
PASSWD
  cat >>"$tree/etc/group" <<'GROUP'
alice:x:2000:
bob:x:2001:
nvidia0:x:1000:alice
nvidia1:x:1001:bob
nvidia2:x:1002:
nvidia3:x:1003:
GROUP
}

# The Debian flavours' shared steps.
# debian_needs: the host can build the image, and the built packages are
# there to install (sets gpuinit_debs).
debian_needs() {
  # debootstrap needs root, and so does copying the image's root-only files.
  [[ $(id -u) -eq 0 ]] || skip "the Debian image needs root (debootstrap)" "run as root"
  command -v debootstrap >/dev/null || skip "debootstrap is missing"
  # ctest sets it, and its fixture gpuinit-debs builds them there; a run by
  # hand names a directory of scripts/build-packages' output.
  [[ -n ${GPUINIT_DEB_DIR:-} ]] ||
    die "set GPUINIT_DEB_DIR to the directory of the built packages (scripts/build-packages DIR)"
  local list
  list=$(package_debs "$GPUINIT_DEB_DIR")
  mapfile -t gpuinit_debs <<<"$list"
}

# package_debs DIR: the paths of DIR's gpuinit_*.deb and
# gpuinit-libgpulimit_*.deb, one a line; fails unless each is there exactly
# once (two versions side by side would make the install ambiguous).
package_debs() {
  local dir=$1 name file files
  for name in gpuinit gpuinit-libgpulimit; do
    files=()
    for file in "$dir/${name}_"*.deb; do
      [[ -f $file ]] && files+=("$file")
    done
    if [[ ${#files[@]} -ne 1 ]]; then
      echo "vm: $dir has ${#files[@]} ${name}_*.deb (${files[*]:-none}), not one; build them with scripts/build-packages $dir" >&2
      return 1
    fi
    echo "${files[0]}"
  done
}

# install_packages TREE DEB...: the packages installed into TREE as an admin
# installs them, with apt from the files (apt-get install ./NAME.deb):
# their dependencies must be in TREE already (build-debian-image.sh
# includes them), as the image has neither package lists nor a network,
# and their maintainer scripts run in TREE. A policy-rc.d refuses every
# start meanwhile, so nothing runs in the host's chroot; it is gone before
# the boot.
install_packages() {
  local tree=$1 deb status=0
  shift
  local names=()
  mkdir -p "$tree/tmp/gpuinit-debs"
  for deb in "$@"; do
    cp "$deb" "$tree/tmp/gpuinit-debs/"
    names+=("./$(basename "$deb")")
  done
  printf '#!/bin/sh\n# gpuinit vm: nothing starts while the image is made\nexit 101\n' \
    >"$tree/usr/sbin/policy-rc.d"
  chmod 755 "$tree/usr/sbin/policy-rc.d"
  chroot "$tree" /bin/sh -c 'cd /tmp/gpuinit-debs && exec apt-get install -y -q -o Dpkg::Use-Pty=0 "$@"' apt \
    "${names[@]}" </dev/null >"$tree/tmp/gpuinit-apt.log" 2>&1 || status=$?
  if [[ $status -ne 0 ]]; then
    cat "$tree/tmp/gpuinit-apt.log" >&2
    echo "vm: apt-get install ${names[*]} failed in the image (exit $status); a dependency" \
      "missing from the image goes in build-debian-image.sh's package_depends" >&2
    return 1
  fi
  rm -rf "$tree/usr/sbin/policy-rc.d" "$tree/tmp/gpuinit-debs" "$tree/tmp/gpuinit-apt.log"
  chroot "$tree" apt-get clean
}

# debian_tree IMAGE TREE: TREE is a copy of the cached IMAGE with the built
# packages installed (install_packages), the stand-in modules and the test
# accounts. The tools under test are the package's: nothing is copied over
# them.
debian_tree() {
  local image=$1 tree=$2
  cp -a "$image" "$tree"
  rm -f "$tree/.complete"
  install_packages "$tree" "${gpuinit_debs[@]}"
  add_modules "$tree"
  add_accounts "$tree"
}

# systemd_test_init TREE: systemd as the guest's init, and a oneshot unit
# that runs the scenario on /dev/ttyS0 once udev's coldplug has run.
systemd_test_init() {
  local tree=$1
  ln -sf lib/systemd/systemd "$tree/init"
  cat >"$tree/etc/systemd/system/gpuinit-vmtest.service" <<UNIT
[Unit]
Description=gpuinit VM scenario
Wants=systemd-udevd.service systemd-udev-trigger.service
After=systemd-udevd.service systemd-udev-trigger.service

[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/sh $guest_runner $scenario
UNIT
  ln -sf /etc/systemd/system/gpuinit-vmtest.service \
    "$tree/etc/systemd/system/multi-user.target.wants/gpuinit-vmtest.service"
  # With console=ttyS0 the getty generator starts serial-getty@ttyS0, whose
  # TTYVHangup=yes hangs up the line under the scenario: from then on its
  # output is lost, at a different point each boot.
  ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
}

# pack_initramfs TREE OUT [keep-owners]: TREE as a gzip'd newc cpio, every
# file root's unless keep-owners (a Debian image whose daemons check who owns
# their files; the tree is a root-made copy, so its owners are the image's).
pack_initramfs() {
  local owners=(-R 0:0)
  [[ ${3:-} == keep-owners ]] && owners=()
  (cd "$1" && find . -print0 | cpio --quiet --null -o -H newc "${owners[@]}" | gzip -1) >"$2"
}
