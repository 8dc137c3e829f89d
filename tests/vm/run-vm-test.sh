#!/usr/bin/env bash
# Boots Debian's kernel under qemu (TCG) with one scenario, the stand-in
# NVIDIA modules and the project's tools, in the image flavour the scenario
# declares, and passes when the guest reports success through isa-debug-exit.
#
#   run-vm-test.sh SCENARIO CACHE_DIR LOG_DIR TOOL...
#
# SCENARIO names scenarios/SCENARIO.sh; its header comment may declare
# "# vm-flavour: NAME" (default busybox), which selects images/NAME.sh. A
# TOOL that is a symlink (a multi-call binary's link) is recreated as one in
# the guest's /usr/sbin beside its target (see copy_tools in lib.sh).
#
# The kernel, the modules and each flavour's base are built once into
# CACHE_DIR (under a lock, so parallel tests share them). Exit 77 (skipped)
# with a loud message when qemu, the kernel headers or what the flavour
# needs (busybox-static; debootstrap and root) are missing.
# GPUINIT_VM_TIMEOUT (seconds, default 240) bounds qemu: raise it on a
# machine loaded enough that a sound scenario runs past it.
#
# An image flavour is a bash file images/NAME.sh sourced here. It defines:
#   flavour_memory      guest memory in MiB
#   flavour_append      optional: kernel command-line words added to
#                       "console=ttyS0 quiet panic=-1"
#   flavour_needs       checks the host's prerequisites; calls skip REASON
#                       [HINT] (exit 77) for anything missing; runs first
#   flavour_base        builds the flavour's cached base under CACHE_DIR if
#                       it is not there yet; runs under the cache lock
#   flavour_tree TREE   creates TREE, the scenario's own root, with lib.sh's
#                       helpers (copy_tools TREE "${tools[@]}", add_modules,
#                       add_accounts); its init mounts /proc, /sys and /dev
#                       and runs "sh $guest_runner $scenario"
#   flavour_boot TREE   optional: makes the boot media once the harness has
#                       added the scenario and the runner to TREE, sets
#                       $initrd and may add to the qemu_args array (a
#                       -drive); the default packs TREE as the initramfs
# and may use $here, $cache, $release, $depmod, $scenario, $tools, $work
# and $guest_runner.
#
# A scenario that needs its image prepared before the boot (units enabled,
# module options, an init script linked) has setup/SCENARIO.sh: bash,
# sourced here after flavour_tree with $tree set, the same variables and
# lib.sh's helpers; chroot "$tree" runs the image's own tools (the Debian
# flavours). The harness then adds to TREE: /scenario.sh,
# /scenario-common.sh, $guest_runner and the list of tool names the runner
# checks (/usr/local/lib/gpuinit-vm/tools).
set -euo pipefail

scenario=$1 cache=$2 logs=$3
shift 3
tools=("$@")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
skip() {
  echo "SKIPPED LOUDLY: vm test $scenario: $1; ${2:-run scripts/install-build-deps}" >&2
  exit 77
}
die() { echo "vm: $scenario: $*" >&2; exit 2; }

scenario_file=$here/scenarios/$scenario.sh
[[ -f $scenario_file ]] || die "no scenario $scenario_file"
flavour=$(vm_header "$scenario_file" flavour)
flavour=${flavour:-busybox}
[[ -f $here/images/$flavour.sh ]] ||
  die "$scenario_file declares vm-flavour '$flavour', but there is no $here/images/$flavour.sh"
flavour_append=""
flavour_boot() {
  pack_initramfs "$1" "$work/initrd.gz"
  initrd=$work/initrd.gz
}
# shellcheck source=images/busybox.sh
. "$here/images/$flavour.sh"

command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is missing"
command -v cpio >/dev/null || skip "cpio is missing"
release=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 2>/dev/null | sed 's/linux-headers-//; s/[ ,].*//')
[[ -n $release && -d /lib/modules/$release/build ]] || skip "linux-headers-amd64 is missing"
depmod=$(command -v depmod || echo /sbin/depmod)
[[ -x $depmod ]] || skip "depmod (kmod) is missing"
flavour_needs

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
# The stand-in nvidia-smi (tests/fixture) is built here too, for the guest.
fixture=$(cd "$here/../fixture" && pwd)
smi_sources=("$fixture/standin_nvidia_smi.c" "$fixture/mig_standin.c" "$fixture/mig_standin.h")
source_stamp=$({ echo "$release"; cat "$here"/fake-nvidia/* "${smi_sources[@]}"; } | md5sum | cut -d' ' -f1)
if [[ ! -f $cache/fake-nvidia.$source_stamp.built ]]; then
  echo "vm: building the stand-in modules against $release"
  rm -rf "$cache/fake-nvidia" && cp -r "$here/fake-nvidia" "$cache/fake-nvidia"
  make -s -C "/lib/modules/$release/build" M="$cache/fake-nvidia" modules
  strip --strip-debug "$cache"/fake-nvidia/*.ko
  "${CC:-cc}" -static -Os -Wall -Wextra -Werror -o "$cache/fake-nvidia/nvidia-probe" \
    "$cache/fake-nvidia/nvidia-probe.c"
  strip "$cache/fake-nvidia/nvidia-probe"
  # Static, as nvidia-probe; a scenario's setup installs it (with
  # GPUINIT_STANDIN_DRIVER, its driver mode over the module's nvidia-test/mig).
  # Not -Werror: its warnings are the unit build's to report.
  "${CC:-cc}" -static -Os -Wall -Wextra -I"$fixture" -o "$cache/fake-nvidia/standin-nvidia-smi" \
    "$fixture/standin_nvidia_smi.c" "$fixture/mig_standin.c"
  strip "$cache/fake-nvidia/standin-nvidia-smi"
  rm -f "$cache"/fake-nvidia.*.built && touch "$cache/fake-nvidia.$source_stamp.built"
fi
flavour_base
flock -u 9

# The scenario's own tree: nothing is shared with another scenario's.
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
tree=$work/root
guest_runner=/usr/local/lib/gpuinit-vm/run-scenario
initrd=""
qemu_args=()
flavour_tree "$tree"
if [[ -f $here/setup/$scenario.sh ]]; then
  # shellcheck source=/dev/null
  . "$here/setup/$scenario.sh"
fi
mkdir -p "$tree/usr/local/lib/gpuinit-vm"
cp "$here/guest/run-scenario" "$tree$guest_runner"
for tool in "${tools[@]}"; do basename "$tool"; done >"$tree/usr/local/lib/gpuinit-vm/tools"
cp "$scenario_file" "$tree/scenario.sh"
cp "$here/guest/common.sh" "$tree/scenario-common.sh"
flavour_boot "$tree"

log=$logs/$scenario.log
echo "vm: $scenario: flavour $flavour, ${flavour_memory} MiB"
start=$(date +%s%N)
status=0
timeout "${GPUINIT_VM_TIMEOUT:-240}" qemu-system-x86_64 -accel tcg -cpu max -smp 1 \
  -kernel "$cache/vmlinuz" -initrd "$initrd" -m "$flavour_memory" \
  -append "console=ttyS0 quiet panic=-1${flavour_append:+ $flavour_append}" -nographic -no-reboot \
  -serial "file:$log" -monitor none -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
  "${qemu_args[@]}" || status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "vm: $scenario: qemu exit $status after ${elapsed_ms} ms; serial log $log"
if [[ $status -ne 3 ]]; then
  echo "vm: $scenario FAILED (pass is the guest's debug-exit 1, qemu status 3)" >&2
  tail -60 "$log" >&2
  exit 1
fi
grep -q "=== PASS $scenario" "$log" || { echo "vm: no PASS line in $log" >&2; exit 1; }
