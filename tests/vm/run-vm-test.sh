#!/usr/bin/env bash
# Boots Debian's kernel under qemu (TCG) with an initramfs holding busybox,
# the stand-in NVIDIA modules, the project's tools and one scenario script,
# and passes when the guest reports success through isa-debug-exit.
#
#   run-vm-test.sh SCENARIO CACHE_DIR LOG_DIR TOOL...
#
# The kernel, the modules and the base initramfs tree are built once into
# CACHE_DIR (under a lock, so parallel tests share them). Exit 77 (skipped)
# with a loud message when qemu, the kernel headers or busybox are missing,
# or for a systemd-* scenario when not run as root.
set -euo pipefail

scenario=$1 cache=$2 logs=$3
shift 3
tools=("$@")
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED LOUDLY: vm test $scenario: $*; run scripts/install-build-deps" >&2; exit 77; }

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is missing"
command -v cpio >/dev/null || skip "cpio is missing"
if ! { [[ -x /bin/busybox ]] && file -b /bin/busybox | grep -q "statically linked"; }; then
  skip "a static /bin/busybox (busybox-static) is missing"
fi
release=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 2>/dev/null | sed 's/linux-headers-//; s/[ ,].*//')
[[ -n $release && -d /lib/modules/$release/build ]] || skip "linux-headers-amd64 is missing"
depmod=$(command -v depmod || echo /sbin/depmod)
[[ -x $depmod ]] || skip "depmod (kmod) is missing"
if [[ $scenario == systemd-* && $(id -u) -ne 0 ]]; then
  # debootstrap needs root, and so does copying the image's root-only files.
  echo "SKIPPED LOUDLY: vm test $scenario: the Debian image needs root (debootstrap); run as root" >&2
  exit 77
fi

mkdir -p "$cache" "$logs"
exec 9>"$cache/.lock"
flock 9
# Both stamps name the kernel release: a new linux-headers-amd64 fetches its
# own kernel and rebuilds the modules against its headers.
if [[ ! -f $cache/kernel.$release.ready ]]; then
  echo "vm: fetching linux-image-$release (vmlinuz and modules.builtin only, no postinst)"
  rm -rf "$cache/deb" && mkdir -p "$cache/deb"
  (cd "$cache/deb" && apt-get download -qq "linux-image-$release" >/dev/null 2>&1) ||
    (cd "$cache/deb" && apt-get download -qq "linux-image-$release-unsigned")
  dpkg-deb --fsys-tarfile "$cache"/deb/*.deb |
    tar -x -C "$cache/deb" "./boot/vmlinuz-$release" "./lib/modules/$release/modules.builtin" \
      "./lib/modules/$release/modules.builtin.modinfo"
  cp "$cache/deb/boot/vmlinuz-$release" "$cache/vmlinuz"
  cp "$cache/deb/lib/modules/$release"/modules.builtin* "$cache/"
  rm -rf "$cache/deb"
  rm -f "$cache"/kernel.*ready && touch "$cache/kernel.$release.ready"
fi
source_stamp=$({ echo "$release"; cat "$here"/fake-nvidia/*; } | md5sum | cut -d' ' -f1)
if [[ ! -f $cache/fake-nvidia.$source_stamp.built ]]; then
  echo "vm: building the stand-in modules against $release"
  rm -rf "$cache/fake-nvidia" && cp -r "$here/fake-nvidia" "$cache/fake-nvidia"
  make -s -C "/lib/modules/$release/build" M="$cache/fake-nvidia" modules
  strip --strip-debug "$cache"/fake-nvidia/*.ko
  rm -f "$cache"/fake-nvidia.*.built && touch "$cache/fake-nvidia.$source_stamp.built"
fi
if [[ $scenario == systemd-* ]]; then
  command -v debootstrap >/dev/null || skip "debootstrap is missing"
  "$here/build-debian-image.sh" "$cache/debian"
fi
flock -u 9

# The scenario's own tree: nothing is shared with another scenario's.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/root
memory=512
add_tools() {
  for tool in "${tools[@]}"; do
    cp "$tool" "$tree/usr/sbin/"
    # A dynamic tool brings its libraries and loader; a static one needs none.
    for library in $(ldd "$tool" 2>/dev/null | grep -oE '/[^ ]+' || true); do
      [[ -e $tree$library ]] && continue # the Debian image has its own libc
      mkdir -p "$tree$(dirname "$library")"
      cp -L "$library" "$tree$library"
    done
  done
}
add_modules() {
  mkdir -p "$tree/lib/modules/$release/extra"
  cp "$cache"/fake-nvidia/*.ko "$tree/lib/modules/$release/extra/"
  cp "$cache"/modules.builtin* "$tree/lib/modules/$release/"
  : >"$tree/lib/modules/$release/modules.order"
  "$depmod" -b "$tree" "$release"
}
# alice and bob have primary groups of their own: access to /dev/nvidiaN can
# only come from their supplementary nvidiaN membership.
add_accounts() {
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
# The guest's verdict, written to qemu's isa-debug-exit port: 1 pass, 2 fail.
# qemu exits on that write, and what the guest printed just before may still
# sit in the serial tty's buffer: reapplying the line's own settings is a
# tcsetattr(TCSADRAIN), which returns once the UART has sent everything.
# Expanded in the guest, so single quotes are meant.
# shellcheck disable=SC2016
report='stty -F /dev/ttyS0 "$(stty -F /dev/ttyS0 -g)" || echo "=== cannot drain /dev/ttyS0"
printf "\\$(printf %o "$result")" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null'

if [[ $scenario == systemd-* ]]; then
  # A minimal Debian booting systemd as init, with the project installed by
  # cmake --install and the tools under test over the installed ones.
  memory=1024
  cp -a "$cache/debian" "$tree"
  rm -f "$tree/.complete"
  DESTDIR=$tree cmake --install "$GPUINIT_BUILD_DIR" --prefix /usr >/dev/null
  add_tools
  add_modules
  add_accounts
  ln -sf lib/systemd/systemd "$tree/init"
  mkdir -p "$tree/usr/local/lib/gpuinit-vm"
  cat >"$tree/usr/local/lib/gpuinit-vm/run" <<RUN
#!/bin/sh
echo "=== gpuinit vm scenario $scenario on \$(uname -r)"
result=2
if sh -e -x /scenario.sh; then result=1; echo "=== PASS $scenario"; else echo "=== FAIL $scenario"; fi
echo "=== dmesg"
dmesg | grep -iE 'fake-nvidia|nvidia|pci 1' | tail -60
$report
RUN
  cat >"$tree/etc/systemd/system/gpuinit-vmtest.service" <<'UNIT'
[Unit]
Description=gpuinit VM scenario
Wants=systemd-udevd.service systemd-udev-trigger.service
After=systemd-udevd.service systemd-udev-trigger.service

[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/sh /usr/local/lib/gpuinit-vm/run
UNIT
  ln -sf /etc/systemd/system/gpuinit-vmtest.service \
    "$tree/etc/systemd/system/multi-user.target.wants/gpuinit-vmtest.service"
  # With console=ttyS0 the getty generator starts serial-getty@ttyS0, whose
  # TTYVHangup=yes hangs up the line under the scenario: from then on its
  # output is lost, at a different point each boot.
  ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyS0.service"
else
  mkdir -p "$tree"/{bin,sbin,etc,proc,sys,dev,tmp,run,usr/sbin}
  cp /bin/busybox "$tree/bin/busybox"
  for applet in $("$tree/bin/busybox" --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$tree/bin/$applet"
  done
  add_modules
  add_tools
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$tree/etc/passwd"
  printf 'root:x:0:\n' >"$tree/etc/group"
  add_accounts
  cat >"$tree/init" <<INIT
#!/bin/sh
export PATH=/usr/sbin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "=== gpuinit vm scenario $scenario on \$(uname -r)"
result=2
if sh -e -x /scenario.sh; then result=1; echo "=== PASS $scenario"; else echo "=== FAIL $scenario"; fi
echo "=== dmesg"
dmesg | grep -iE 'fake-nvidia|nvidia|pci 1' | tail -60
$report
poweroff -f
INIT
  chmod +x "$tree/init"
fi
cp "$here/scenarios/$scenario.sh" "$tree/scenario.sh"
cp "$here/scenarios/common.sh" "$tree/scenario-common.sh"
(cd "$tree" && find . -print0 | cpio --quiet --null -o -H newc -R 0:0 | gzip -1) >"$work/initrd.gz"

log=$logs/$scenario.log
start=$(date +%s%N)
status=0
timeout 240 qemu-system-x86_64 -accel tcg -cpu max -smp 1 \
  -kernel "$cache/vmlinuz" -initrd "$work/initrd.gz" -m "$memory" \
  -append "console=ttyS0 quiet panic=-1" -nographic -no-reboot \
  -serial "file:$log" -monitor none -device isa-debug-exit,iobase=0xf4,iosize=0x04 || status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "vm: $scenario: qemu exit $status after ${elapsed_ms} ms; serial log $log"
if [[ $status -ne 3 ]]; then
  echo "vm: $scenario FAILED (pass is the guest's debug-exit 1, qemu status 3)" >&2
  tail -60 "$log" >&2
  exit 1
fi
grep -q "=== PASS $scenario" "$log" || { echo "vm: no PASS line in $log" >&2; exit 1; }
