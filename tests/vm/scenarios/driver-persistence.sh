# The stand-in driver behaves as the real one (NVIDIA/open-gpu-kernel-modules
# 580.142, kernel-open/nvidia/nv.c and nv-pci.c) where a daemon that holds
# /dev/nvidiaN to keep GPUs initialized depends on it: with init_ms the
# first open takes that long and a second opener waits for the same init;
# an O_NONBLOCK open returns before the init is done, NV_ESC_WAIT_OPEN_COMPLETE
# reports its result, and its close waits for it; any other ioctl gives
# EINVAL; poll() reports nothing on a healthy GPU and wakes nobody; rmmod
# fails while a file is open; a removal through sysfs waits until the GPU's
# files are closed, refusing new opens meanwhile (ENODEV; EBUSY for an
# O_NONBLOCK open while it is not initialized); an excluded GPU's
# O_NONBLOCK open succeeds and its EPERM comes from the ioctl; a GPU written
# to the "lose" file logs Xid 79, and only an external one (an eGPU) then
# reports POLLHUP when polled (epoll never wakes) and refuses opens with
# ENODEV, and its removal does not wait for its files; an internal lost GPU
# keeps its holders, polls as healthy, and fails a new init with EIO; with
# nonblocking_ioctl=0 an O_NONBLOCK open blocks and the ioctl gives EINVAL.
# nvidia-probe (fake-nvidia/nvidia-probe.c) makes the calls busybox cannot.
#
# vm-label: vm-driver
. /scenario-common.sh
counters() { grep "^$1 " /proc/driver/nvidia-test/counters; }
# The shell's message when FILE cannot be opened for reading, else "opened".
open_error() { if true 2>/tmp/open.err <"$1"; then echo opened; else cat /tmp/open.err; fi; }
# Waits up to 5 s for FILE to be non-empty.
wait_file() {
  n=0
  until [ -s "$1" ]; do
    n=$((n + 1))
    [ $n -le 50 ] || fail "nothing in $1 after 5 s"
    sleep 0.1
  done
}
# probe_says FILE LINE: nvidia-probe's output FILE has exactly that line.
probe_says() { grep -qx "$2" "$1" || fail "nvidia-probe did not say '$2': $(cat "$1")"; }

insmod $extra/nvidia.ko gpus=2 init_ms=800
gpu-mknod -q
grep -q 'lost$' /proc/driver/nvidia-test/counters || fail "no lost column"
[ "$(stat -c %a /proc/driver/nvidia-test/lose)" = 200 ] || fail "lose is not 0200"

# A blocking first open sleeps init_ms; a second open of the held GPU does not.
t0=$(now)
exec 3</dev/nvidia0
t1=$(now)
echo "first open of /dev/nvidia0: $((t1 - t0)) cs"
[ $((t1 - t0)) -ge 75 ] || fail "the first open took $((t1 - t0)) cs with init_ms=800"
t0=$(now)
exec 4</dev/nvidia0
t1=$(now)
echo "second open of /dev/nvidia0: $((t1 - t0)) cs"
[ $((t1 - t0)) -lt 60 ] || fail "the second open took $((t1 - t0)) cs: a second init?"
set -- $(counters 0)
bdf0=$2
[ "$3 $4 $5 $6" = "1 0 2 0" ] || fail "gpu 0 held twice: $*"
exec 4<&-

# rmmod fails while a file is open (the open file holds the module).
if rmmod nvidia 2>/tmp/rmmod.err; then fail "rmmod succeeded with /dev/nvidia0 open"; fi
cat /tmp/rmmod.err
grep -q '^nvidia ' /proc/modules || fail "nvidia unloaded"

# A second opener arriving during an init waits for that init: one init,
# and the open returns only once it is done.
(
  exec 3<&- 5</dev/nvidia1
  exec sleep 3
) &
holder=$!
n=0
until [ "$(counters 1 | cut -d' ' -f5)" = 1 ]; do
  n=$((n + 1))
  [ $n -le 50 ] || fail "the background open of /dev/nvidia1 did not start"
  sleep 0.05
done
set -- $(counters 1)
[ "$3" = 0 ] || fail "gpu 1 initialized already: $*; raise init_ms"
exec 4</dev/nvidia1
set -- $(counters 1)
[ "$3 $5" = "1 2" ] || fail "after the second open during the init: $*"
[ "$(dmesg | grep -c 'fake-nvidia: gpu 1 .* init$')" = 1 ] || fail "gpu 1 initialized twice"
exec 4<&-
kill $holder
wait $holder || :
set -- $(counters 1)
[ "$3 $4 $5" = "1 1 0" ] || fail "gpu 1 after both closed: $*"

# O_NONBLOCK: the open returns while the init still runs; poll() then
# says POLLERR (the open is not complete); the ioctl waits for the init and
# gives its result; any other ioctl gives EINVAL; the close waits for the
# init. A healthy GPU polls as nothing, blocking or not, and wakes nobody.
nvidia-probe -n /dev/nvidia1 poll=0 wait poll=0 ioctl=0 >/tmp/nonblock.out 3<&- &
probe=$!
wait_file /tmp/nonblock.out
set -- $(counters 1)
echo "the O_NONBLOCK open returned with gpu 1 at: $*"
[ "$3 $5" = "1 1" ] || fail "the O_NONBLOCK open waited for the init: $*"
wait $probe
cat /tmp/nonblock.out
[ "$(cat /tmp/nonblock.out)" = "$(printf 'open: ok\npoll: ERR\nwait: rc=0\npoll: none\nioctl 0: EINVAL')" ] ||
  fail "the O_NONBLOCK open's answers"
set -- $(counters 1)
[ "$3 $4 $5" = "2 2 0" ] || fail "gpu 1 after the non-blocking open closed: $*"
nvidia-probe /dev/nvidia0 poll=0 poll=500 epoll=500 ioctl=0 >/tmp/healthy.out
nvidia-probe -n /dev/nvidia0 poll=0 epoll=0 >>/tmp/healthy.out
nvidia-probe /dev/nvidiactl poll=0 wait ioctl=0 >>/tmp/healthy.out
cat /tmp/healthy.out
[ "$(grep -c 'poll: none$' /tmp/healthy.out)" = 6 ] || fail "a healthy GPU or nvidiactl polled as ready"
[ "$(grep -c 'ioctl 0: EINVAL' /tmp/healthy.out)" = 2 ] || fail "an unknown ioctl"
probe_says /tmp/healthy.out "wait: rc=0"

# Removal through sysfs waits while /dev/nvidia0 is open (fd 3); new opens
# of the GPU fail with ENODEV meanwhile.
(
  exec 3<&-
  echo 1 >"/sys/bus/pci/devices/$bdf0/remove"
) &
remover=$!
sleep 1
kill -0 $remover || fail "the removal of $bdf0 returned while /dev/nvidia0 is open"
[ -e "/sys/bus/pci/devices/$bdf0" ] || fail "$bdf0 left sysfs while open"
# The kernel drops the device's driver link before it calls the driver's
# remove (drivers/base/dd.c __device_release_driver): gpu-persist tells a
# waiting unbind or removal by it.
ls -l "/sys/bus/pci/devices/$bdf0/" | grep driver || :
[ ! -e "/sys/bus/pci/devices/$bdf0/driver" ] || fail "the driver link is there while remove waits"
dmesg | grep -q "fake-nvidia: gpu 0 ($bdf0) remove waits for 1 open file(s)" ||
  fail "no 'remove waits' line"
err=$(open_error /dev/nvidia0)
echo "open during the removal: $err"
case $err in *"No such device"*) ;; *) fail "open of a GPU being removed: $err" ;; esac
nvidia-probe -n /dev/nvidia0 >/tmp/removing.out || :
probe_says /tmp/removing.out "open: ENODEV"
exec 3<&-
wait $remover
[ ! -e "/sys/bus/pci/devices/$bdf0" ] || fail "$bdf0 still in sysfs after the close"
[ -z "$(counters 0)" ] || fail "gpu 0 still in the driver's view"
[ "$(dmesg | grep -c 'fake-nvidia: gpu 0 .* deinit$')" = 1 ] || fail "gpu 0 deinit count"

# A lost (internal) GPU: the driver logs Xid 79 but flags nothing a file
# can see: its holder keeps it, a new open of the initialized GPU succeeds
# and polls as healthy; once the last close tore it down, a new init fails
# with EIO (in the ioctl's rc for an O_NONBLOCK open, which polls POLLERR).
# Removed and rescanned, it is healthy again.
exec 3</dev/nvidia1
set -- $(counters 1)
bdf1=$2
echo "$bdf1" >/proc/driver/nvidia-test/lose
set -- $(counters 1)
[ "$3 $4 $5 $6" = "3 2 1 1" ] || fail "gpu 1 lost: $*"
dmesg | grep -q "NVRM: Xid (PCI:${bdf1%.*}): 79, GPU has fallen off the bus." || fail "no Xid 79"
dmesg | grep -q "NVRM: GPU $bdf1: GPU has fallen off the bus." || fail "no fallen-off line"
nvidia-probe -n /dev/nvidia1 wait poll=0 epoll=0 >/tmp/lost.out
cat /tmp/lost.out
[ "$(cat /tmp/lost.out)" = "$(printf 'open: ok\nwait: rc=0\npoll: none\nepoll: none')" ] ||
  fail "a lost internal GPU's held files"
[ "$(open_error /dev/nvidia1)" = opened ] || fail "a held lost GPU did not open"
exec 3<&-
set -- $(counters 1)
[ "$3 $4 $5 $6" = "3 3 0 1" ] || fail "lost gpu 1 closed: $*"
err=$(open_error /dev/nvidia1)
echo "open of a lost GPU: $err"
case $err in *"Input/output error"*) ;; *) fail "open of a lost GPU: $err" ;; esac
nvidia-probe -n /dev/nvidia1 wait poll=0 ioctl=0 >/tmp/lost.out
cat /tmp/lost.out
[ "$(cat /tmp/lost.out)" = "$(printf 'open: ok\nwait: rc=-5\npoll: ERR\nioctl 0: EIO')" ] ||
  fail "an O_NONBLOCK open of a lost GPU"
set -- $(counters 1)
[ "$3 $4 $5 $6" = "3 3 0 1" ] || fail "lost gpu 1 after failed opens: $*"
if echo 9 >/proc/driver/nvidia-test/lose 2>/dev/null; then fail "lost a GPU that is not there"; fi
echo 1 >"/sys/bus/pci/devices/$bdf1/remove"
echo 1 >/sys/bus/pci/rescan
cat /proc/driver/nvidia-test/counters
set -- $(counters 1)
[ "$2 $6" = "$bdf1 0" ] || fail "gpu 1 after the rescan: $*"
[ "$(open_error /dev/nvidia1)" = opened ] || fail "gpu 1 does not open after the rescan"
rmmod nvidia

# GPU 1 external (an eGPU), GPU 2 excluded, teardowns of 2 s.
excluded=GPU-558ce122-5b8b-16a1-87d4-ce157bba0002
insmod $extra/nvidia.ko gpus=3 deinit_ms=2000 external=2 NVreg_ExcludedGpus=$excluded
gpu-mknod -q
mknod /tmp/nvidia2 c 195 2
# An excluded GPU: a blocking open fails with EPERM; an O_NONBLOCK one
# succeeds and the ioctl's rc says EPERM.
nvidia-probe /tmp/nvidia2 >/tmp/excluded.out || :
nvidia-probe -n /tmp/nvidia2 wait poll=0 ioctl=0 >>/tmp/excluded.out
cat /tmp/excluded.out
[ "$(cat /tmp/excluded.out)" = "$(printf 'open: EPERM\nopen: ok\nwait: rc=-1\npoll: ERR\nioctl 0: EIO')" ] ||
  fail "the excluded GPU's opens"

# An O_NONBLOCK open of a GPU being removed whose teardown runs: EBUSY.
set -- $(counters 0)
bdf0=$2
(
  exec 3</dev/nvidia0
  exec sleep 2
) &
wait_for '[ "$(counters 0 | cut -d" " -f5)" = 1 ]' 50
(echo 1 >"/sys/bus/pci/devices/$bdf0/remove") &
remover=$!
wait_for '[ "$(counters 0 | cut -d" " -f5)" = 0 ]' 50
nvidia-probe -n /dev/nvidia0 >/tmp/busy.out || :
probe_says /tmp/busy.out "open: EBUSY"
case $(open_error /dev/nvidia0) in *"No such device"*) ;; *) fail "a blocking open during the removal" ;; esac
wait $remover

# A lost external GPU: flagged surprise-removed, its files poll POLLHUP when
# polled (an epoll added before the loss never wakes), new opens fail with
# ENODEV, and its removal does not wait for its holder.
set -- $(counters 1)
bdf1=$2
nvidia-probe -n /dev/nvidia1 wait hold poll=0 >/tmp/egpu-held.out &
holder=$!
nvidia-probe -n /dev/nvidia1 wait epoll=3000 poll=0 >/tmp/egpu-epoll.out &
waiter=$!
wait_for 'grep -q "wait: rc=0" /tmp/egpu-held.out && grep -q "wait: rc=0" /tmp/egpu-epoll.out' 50
echo "$bdf1" >/proc/driver/nvidia-test/lose
dmesg | grep -q "fake-nvidia: gpu 1 ($bdf1) lost with 2 open file(s) (external)" || fail "egpu lost"
nvidia-probe -n /dev/nvidia1 >/tmp/egpu-open.out || :
probe_says /tmp/egpu-open.out "open: ENODEV"
case $(open_error /dev/nvidia1) in *"No such device"*) ;; *) fail "a blocking open of a lost eGPU" ;; esac
wait $waiter
cat /tmp/egpu-epoll.out
probe_says /tmp/egpu-epoll.out "epoll: none"
probe_says /tmp/egpu-epoll.out "poll: HUP"
t0=$(now)
echo 1 >"/sys/bus/pci/devices/$bdf1/remove"
[ $(($(now) - t0)) -lt 100 ] || fail "the removal of a held eGPU waited"
dmesg | grep -q "fake-nvidia: gpu 1 ($bdf1) removed with 1 open file(s) (external)" ||
  fail "no 'removed with' line"
kill $holder
wait $holder
cat /tmp/egpu-held.out
probe_says /tmp/egpu-held.out "poll: HUP"
rmmod nvidia

# nonblocking_ioctl=0, as drivers before 550.40.07: O_NONBLOCK opens block
# and the ioctl is unknown (EINVAL).
insmod $extra/nvidia.ko gpus=1 init_ms=800 nonblocking_ioctl=0
[ "$(cat /sys/module/nvidia/parameters/nonblocking_ioctl)" = N ] || fail "nonblocking_ioctl"
gpu-mknod -q
nvidia-probe -n /dev/nvidia0 wait >/tmp/old.out &
probe=$!
wait_file /tmp/old.out
[ "$(counters 0 | cut -d' ' -f3)" = 1 ] || fail "O_NONBLOCK open returned before the init"
wait $probe
probe_says /tmp/old.out "wait: EINVAL"
cat /proc/driver/nvidia-test/counters
rmmod nvidia
