# The stand-in driver behaves as the real one where a daemon that holds
# /dev/nvidiaN to keep GPUs initialized depends on it: with init_ms the
# first open takes that long and a second opener waits for the same init;
# an O_NONBLOCK open (busybox stty -F opens so) returns before the init is
# done, and its close waits for it; rmmod fails while a file is open; a
# removal through sysfs waits until the GPU's files are closed, refusing new
# opens meanwhile; a GPU written to the "lose" file refuses opens with EIO
# until it is removed and rescanned; with nonblocking_ioctl=0 an O_NONBLOCK
# open blocks. (The ioctl and poll() need a program; the daemon's tests
# use them.)
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

# O_NONBLOCK: stty -F opens the file non-blocking, then fails at once on
# tcgetattr (ENOTTY, the driver's answer to any other ioctl) while the init
# still runs; its exit's close waits for the init.
stty -F /dev/nvidia1 2>/tmp/stty.err 3<&- &
stty=$!
wait_file /tmp/stty.err
set -- $(counters 1)
echo "stty failed with gpu 1 at: $*"
[ "$3 $5" = "1 1" ] || fail "the O_NONBLOCK open waited for the init: $*"
grep -q 'Inappropriate ioctl' /tmp/stty.err || fail "stty: $(cat /tmp/stty.err)"
if wait $stty; then fail "stty succeeded"; fi
set -- $(counters 1)
[ "$3 $4 $5" = "2 2 0" ] || fail "gpu 1 after the non-blocking open closed: $*"

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
dmesg | grep -q "fake-nvidia: gpu 0 ($bdf0) remove waits for 1 open file(s)" ||
  fail "no 'remove waits' line"
err=$(open_error /dev/nvidia0)
echo "open during the removal: $err"
case $err in *"No such device"*) ;; *) fail "open of a GPU being removed: $err" ;; esac
exec 3<&-
wait $remover
[ ! -e "/sys/bus/pci/devices/$bdf0" ] || fail "$bdf0 still in sysfs after the close"
[ -z "$(counters 0)" ] || fail "gpu 0 still in the driver's view"
[ "$(dmesg | grep -c 'fake-nvidia: gpu 0 .* deinit$')" = 1 ] || fail "gpu 0 deinit count"

# A lost GPU: its holder keeps counting, new opens fail with EIO, the last
# close still tears it down; removed and rescanned, it is healthy again.
exec 3</dev/nvidia1
set -- $(counters 1)
bdf1=$2
echo "$bdf1" >/proc/driver/nvidia-test/lose
set -- $(counters 1)
[ "$3 $4 $5 $6" = "3 2 1 1" ] || fail "gpu 1 lost: $*"
err=$(open_error /dev/nvidia1)
echo "open of a lost GPU: $err"
case $err in *"Input/output error"*) ;; *) fail "open of a lost GPU: $err" ;; esac
exec 3<&-
set -- $(counters 1)
[ "$3 $4 $5 $6" = "3 3 0 1" ] || fail "lost gpu 1 closed: $*"
if echo 9 >/proc/driver/nvidia-test/lose 2>/dev/null; then fail "lost a GPU that is not there"; fi
echo 1 >"/sys/bus/pci/devices/$bdf1/remove"
echo 1 >/sys/bus/pci/rescan
cat /proc/driver/nvidia-test/counters
set -- $(counters 1)
[ "$2 $6" = "$bdf1 0" ] || fail "gpu 1 after the rescan: $*"
[ "$(open_error /dev/nvidia1)" = opened ] || fail "gpu 1 does not open after the rescan"
rmmod nvidia

# nonblocking_ioctl=0, as drivers before 550.40.07: O_NONBLOCK opens block.
insmod $extra/nvidia.ko gpus=1 init_ms=800 nonblocking_ioctl=0
[ "$(cat /sys/module/nvidia/parameters/nonblocking_ioctl)" = N ] || fail "nonblocking_ioctl"
rm -f /tmp/stty.err
stty -F /dev/nvidia0 2>/tmp/stty.err &
stty=$!
wait_file /tmp/stty.err
[ "$(counters 0 | cut -d' ' -f3)" = 1 ] || fail "O_NONBLOCK open returned before the init"
if wait $stty; then fail "stty succeeded"; fi
cat /proc/driver/nvidia-test/counters
rmmod nvidia
