#!/usr/bin/env bash
# The Soft-RoCE test rig (#36 item 3): qemu guests running Debian's own kernel with rdma_rxe, so
# the verbs binding (drivers/devices/src/verbs.rs) runs against the kernel's RoCE stack, which
# nobody here wrote, on a machine without RDMA NICs.
#
#   tools/rxe-rig/rig.sh image
#       Build the guest image, or find it in the cache, and print its folder. debootstrap from the
#       package registry (Debian's linux-image-amd64 has CONFIG_RDMA_RXE=m; rdma-core,
#       ibverbs-providers with librxe, perftest, iproute2's `rdma`); cached under
#       ~/.cache/inabench/rxe-rig/<key>, the key a hash of the suite, the mirror and the registry's
#       versions of the packages (apt-cache madison), so a new kernel or rdma-core builds anew.
#   tools/rxe-rig/rig.sh run [--guests N] [--share DIR] [--timeout S] [--capture FILE]
#                            [--relay HOSTCOMMAND] [--host-ip ADDR/PREFIX] -- COMMAND
#       Boot N guests (default 2) under qemu TCG, each on a tap joined to one host bridge, give each
#       an address 10.77.0.<i+1>/24 and a Soft-RoCE device rxe0 on its NIC, share DIR read-only at
#       /mnt/share, run COMMAND (a shell command) in each, print each guest's output and exit
#       status, and tear everything down (a trap removes the qemu processes, taps and bridge on
#       any exit). COMMAND sees RIG_GUEST (0..N-1), RIG_GUESTS, RIG_IP, RIG_IPS (all guests'
#       data addresses, space-separated), RIG_CTL_IPS (the addresses for the command's own TCP),
#       RIG_SHARE=/mnt/share, RIG_OUT (its own folder in the run folder) and RIG_NIC (the data
#       NIC, rxe0's netdev). Peers' data addresses are static neighbours (MAC 52:54:00:77:00:<i+1>).
#       --host-ip ADDR/PREFIX gives the host that address on the bridge (a runner there is what
#       agents in the guests connect to: `inabench agent --connect ADDR:PORT --token-stdin`, the
#       token from a root-only file the host writes in the share, never on a command line).
#       --relay: the guests' data taps join no bridge: HOSTCOMMAND runs on the host with RIG_TAPS
#       (the data taps, in guest order) and carries their frames (a bump in the wire); each guest
#       gets a second NIC on the bridge (10.78.0.<i+1>, RIG_CTL_IPS) for TCP. When the guests are
#       done the rig creates the file RIG_RELAY_UNTIL names; HOSTCOMMAND then ends (15 s at most),
#       and its output and exit status are printed with the guests'. HOSTCOMMAND also sees
#       RIG_CTL_DIR, the host folder of the guests' RIG_OUT folders (guest<i>/), where a guest can
#       leave what the host side needs (SwitchML-RDMA's workers their QPs). --capture writes a pcap of the
#       bridge (dumpcap or tcpdump) to FILE. Exit 0 when every guest ran COMMAND and it exited 0.
#       A run first removes the taps and bridges of earlier runs that were killed before their
#       trap ran (no rig.sh of their number alive), and says so.
#   tools/rxe-rig/rig.sh clean
#       Remove the cache.
#
# Needs root (taps, a bridge), qemu-system-x86_64, debootstrap, mkfs.ext4 (e2fsprogs) and network
# access to the mirror for the first build (.ci/setup installs the tools). Where one is missing (or
# debootstrap cannot build the image) it prints "rxe-rig: skipped: ..." and exits 77; under CI=true
# the same is a failure (exit 1).
# The guests run the host's binaries from the share: both sides are Debian of the same release
# (the image build compares their glibc and refuses an older guest glibc).
#
# TCG, not KVM: on the (nested) machine this was built on, KVM with -cpu max aborts (MSR 0x10a)
# and with -cpu host,-arch-capabilities the guest prints nothing in 60 s; INABENCH_RXE_RIG_ACCEL=kvm
# tries it where KVM works.
set -euo pipefail

RIG_DIR="$(cd "$(dirname "$0")" && pwd)"
CACHE="${INABENCH_RXE_RIG_CACHE:-$HOME/.cache/inabench/rxe-rig}"
MIRROR="${INABENCH_RXE_RIG_MIRROR:-http://deb.debian.org/debian}"
SUITE="${INABENCH_RXE_RIG_SUITE:-$( (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || true)}"
SUITE="${SUITE:-bookworm}"
ACCEL="${INABENCH_RXE_RIG_ACCEL:-tcg}"
# TCG emulates every feature (max); KVM passes the host CPU through (max fails MSR writes there)
CPU=max
[ "$ACCEL" = tcg ] || CPU=host,-arch-capabilities
# bump when the recipe below changes what an image holds
RECIPE=3
PKGS=(linux-image-amd64 initramfs-tools kmod iproute2 rdma-core ibverbs-providers ibverbs-utils
  perftest udev)

say() { echo "rxe-rig: $*" >&2; }

# A missing prerequisite: a skip off CI, a failure under CI.
unavailable() {
  if [ "${CI:-}" = "true" ]; then
    say "FAILED: $* (CI must run the rig: .ci/setup installs its tools)"
    exit 1
  fi
  say "skipped: $*"
  exit 77
}

prerequisites() {
  [ "$(id -u)" = 0 ] || unavailable "not root (the rig makes taps and a bridge)"
  local t
  for t in qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap mkfs.ext4:e2fsprogs \
    ip:iproute2 apt-cache:apt; do
    command -v "${t%%:*}" >/dev/null || unavailable "no ${t%%:*} (Debian package ${t#*:})"
  done
  [ -c /dev/net/tun ] || unavailable "no /dev/net/tun (taps)"
}

# The registry's version of each package in the suite (not its -security or -updates pockets:
# debootstrap installs from the suite alone).
versions() {
  local m p v
  m="$(apt-cache madison "${PKGS[@]}" libc6 2>/dev/null || true)"
  for p in "${PKGS[@]}" libc6; do
    v="$(echo "$m" | awk -F'|' -v p="$p" -v s=" $SUITE/" '
      { gsub(/ /, "", $1) } $1 == p && index($3, s) { gsub(/ /, "", $2); print $2; exit }')"
    echo "$p=${v:-unknown}"
  done
}

key() {
  { echo "recipe $RECIPE"; echo "suite $SUITE"; echo "mirror $MIRROR"; versions; } |
    sha256sum | cut -c1-16
}

# The guest's PID 1, baked into the image: mounts, the rig's 9p share, then the run's own guest
# script from it (tools/rxe-rig/guest.sh, copied at each run: changing it needs no new image).
write_init() {
  cat >"$1" <<'EOF'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
modprobe 9pnet_virtio && modprobe 9p
mkdir -p /mnt/rig /mnt/share
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 rig /mnt/rig
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro share /mnt/share 2>/dev/null
sh /mnt/rig/guest.sh
sync
umount /mnt/rig /mnt/share 2>/dev/null
echo 1 >/proc/sys/kernel/sysrq
echo o >/proc/sysrq-trigger
sleep 10
EOF
  chmod 755 "$1"
}

# The upstream glibc version (2.36 of 2.36-9+deb12u14).
glibc_upstream() { echo "$1" | sed 's/-.*//'; }

image() {
  prerequisites
  local k dir
  k="$(key)"
  dir="$CACHE/$k"
  if [ -e "$dir/ready" ]; then
    say "image cached: $dir"
    echo "$dir"
    return
  fi
  mkdir -p "$CACHE"
  # one build at a time; a run that waited here finds the image the other built
  exec 9>"$CACHE/.lock"
  flock 9
  if [ -e "$dir/ready" ]; then
    say "image cached: $dir"
    echo "$dir"
    return
  fi
  local t0 tmp
  t0=$(date +%s)
  tmp="$(mktemp -d "$CACHE/build.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  say "building the guest image ($SUITE from $MIRROR; packages: ${PKGS[*]}); a few minutes"
  versions >"$tmp/registry-versions.txt"
  if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PKGS[*]}")" \
    "$SUITE" "$tmp/root" "$MIRROR" >"$tmp/debootstrap.log" 2>&1; then
    tail -20 "$tmp/debootstrap.log" >&2
    unavailable "debootstrap could not build the guest image from $MIRROR (log above)"
  fi
  write_init "$tmp/root/rig-init"
  # a small initramfs (what it takes to mount the virtio disk) instead of MODULES=most's 35 MB:
  # TCG unpacks every byte of it at each boot
  echo "MODULES=list" >"$tmp/root/etc/initramfs-tools/conf.d/rig.conf"
  printf '%s\n' virtio_pci virtio_blk ext4 >>"$tmp/root/etc/initramfs-tools/modules"
  if ! chroot "$tmp/root" update-initramfs -u -k all >"$tmp/initramfs.log" 2>&1; then
    tail -20 "$tmp/initramfs.log" >&2
    say "FAILED: update-initramfs in the guest image (log above)"
    exit 1
  fi
  chroot "$tmp/root" dpkg-query -W >"$tmp/versions.txt"
  local host_libc guest_libc
  host_libc="$(dpkg-query -W -f='${Version}' libc6 2>/dev/null || echo unknown)"
  guest_libc="$(awk '$1 == "libc6:amd64" || $1 == "libc6" { print $2; exit }' "$tmp/versions.txt")"
  echo "host libc6 $host_libc, guest libc6 $guest_libc" >"$tmp/glibc.txt"
  if [ "$host_libc" != unknown ] &&
    ! dpkg --compare-versions "$(glibc_upstream "$guest_libc")" ge "$(glibc_upstream "$host_libc")"; then
    say "FAILED: the guest's glibc $guest_libc is older than the host's $host_libc: binaries built here would not run there (set INABENCH_RXE_RIG_SUITE to the host's release)"
    exit 1
  fi
  cp "$tmp"/root/boot/vmlinuz-* "$tmp/vmlinuz"
  cp "$tmp"/root/boot/initrd.img-* "$tmp/initrd.img"
  rm -rf "$tmp"/root/usr/share/{doc,man,info,locale} "$tmp"/root/var/cache/apt/archives/*.deb \
    "$tmp"/root/var/lib/apt/lists/*
  local mb
  mb=$(($(du -sm "$tmp/root" | cut -f1) + 256))
  mkfs.ext4 -q -F -L rigroot -d "$tmp/root" "$tmp/rootfs.img" "${mb}M" >&2
  rm -rf "$tmp/root"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
  echo "built in $(($(date +%s) - t0)) s on $(date -u +%FT%TZ)" >"$dir/ready"
  say "image built in $(($(date +%s) - t0)) s: $dir ($(du -sh "$dir" | cut -f1))"
  echo "$dir"
}

# Links an earlier run left behind (rxbr<pid>, rxtap<pid>g<i>, rxctl<pid>g<i>: its pid mod
# 100000) when it was killed before its trap ran: removed when no rig.sh of that number is alive,
# each said once. A stale bridge holding the host's address (--host-ip) would take the route to the
# guests' network, and the next run's agents could not reach their runner.
sweep_stale() {
  local l n p alive
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
    | grep -E '^rx(br|tap|ctl)[0-9]+' || true); do
    n="$(echo "$l" | sed -E 's/^rx(br|tap|ctl)([0-9]+).*/\2/')"
    alive=""
    for p in $(pgrep -f 'rig\.sh' 2>/dev/null || true); do
      [ "$((p % 100000))" = "$n" ] && [ "$p" != "$$" ] && alive=1
    done
    [ "$n" = "$(( $$ % 100000 ))" ] && alive=1
    if [ -z "$alive" ]; then
      ip link del "$l" 2>/dev/null && say "removed $l, left by an earlier rig run that was killed"
    fi
  done
  return 0
}

run() {
  local guests=2 share="" timeout=600 capture="" relay="" host_ip=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --host-ip) host_ip="$2"; shift 2 ;;
      --guests) guests="$2"; shift 2 ;;
      --share) share="$2"; shift 2 ;;
      --timeout) timeout="$2"; shift 2 ;;
      --capture) capture="$2"; shift 2 ;;
      --relay) relay="$2"; shift 2 ;;
      --) shift; break ;;
      *) say "unknown option $1"; exit 2 ;;
    esac
  done
  [ $# -gt 0 ] || { say "run needs a command after --"; exit 2; }
  [ "$guests" -ge 1 ] && [ "$guests" -le 8 ] || { say "--guests is 1 to 8"; exit 2; }
  local img
  img="$(image)"
  # globals: the EXIT trap runs after this function returned
  id="$$"
  run_dir="$(mktemp -d "${TMPDIR:-/tmp}/rxe-rig-run.XXXXXX")"
  br="rxbr$((id % 100000))"
  pids=()
  taps=()
  capture_pid=""
  relay_pid=""
  cleanup() {
    local p t
    # the guests are disposable: SIGKILL, so that the taps and the bridge are gone well inside
    # the second a launcher gives this script between its SIGTERM and its SIGKILL (a qemu under
    # TCG can take longer than that to stop on SIGTERM, and a bridge left behind with the host's
    # address breaks the next rig run's agents)
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in ${capture_pid:+"$capture_pid"} ${relay_pid:+"$relay_pid"}; do
      kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}" ${capture_pid:+"$capture_pid"} ${relay_pid:+"$relay_pid"}; do
      wait "$p" 2>/dev/null || true
    done
    for t in "${taps[@]}"; do ip link del "$t" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
    [ -n "${INABENCH_RXE_RIG_KEEP:-}" ] || rm -rf "$run_dir"
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  sweep_stale
  mkdir -p "$run_dir/ctl" "$run_dir/empty"
  printf '%s\n' "$*" >"$run_dir/ctl/cmd.sh"
  cp "$RIG_DIR/guest.sh" "$run_dir/ctl/guest.sh"
  [ -n "$share" ] || share="$run_dir/empty"
  ip link add "$br" type bridge
  ip link set "$br" up
  # the host on the guests' network (its agents' runner listens there)
  [ -z "$host_ip" ] || ip addr add "$host_ip" dev "$br"
  if [ -n "$capture" ]; then
    if command -v dumpcap >/dev/null; then
      dumpcap -q -P -i "$br" -w "$capture" >"$run_dir/capture.log" 2>&1 &
    elif command -v tcpdump >/dev/null; then
      tcpdump -i "$br" -w "$capture" -U >"$run_dir/capture.log" 2>&1 &
    else
      unavailable "no dumpcap (Debian tshark) or tcpdump for --capture"
    fi
    capture_pid=$!
  fi
  local i tap ctap t0 data_taps=() control=()
  t0=$(date +%s)
  for ((i = 0; i < guests; i++)); do
    tap="rxtap$((id % 100000))g$i"
    ip tuntap add dev "$tap" mode tap
    taps+=("$tap")
    data_taps+=("$tap")
    ip link set "$tap" up
    if [ -z "$relay" ]; then
      ip link set "$tap" master "$br"
      control=()
    else
      # the data tap is the relay's; a second NIC on the bridge carries the command's TCP
      ctap="rxctl$((id % 100000))g$i"
      ip tuntap add dev "$ctap" mode tap
      taps+=("$ctap")
      ip link set "$ctap" master "$br"
      ip link set "$ctap" up
      control=(-netdev "tap,id=n1,ifname=$ctap,script=no,downscript=no"
        -device "virtio-net-pci,netdev=n1,mac=52:54:00:78:00:$(printf %02x $((i + 1))),romfile=")
    fi
    qemu-system-x86_64 -accel "$ACCEL" -cpu "$CPU" -smp 1 -m 1024 -display none -monitor none \
      -no-reboot -serial "file:$run_dir/guest$i.console" \
      -kernel "$img/vmlinuz" -initrd "$img/initrd.img" \
      -append "root=/dev/vda rw console=ttyS0 quiet init=/rig-init panic=-1 rig.guest=$i rig.guests=$guests" \
      -drive "file=$img/rootfs.img,if=virtio,format=raw,snapshot=on" \
      -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
      -device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:$(printf %02x $((i + 1))),romfile=" \
      -fsdev "local,id=rig,path=$run_dir/ctl,security_model=none" \
      -device "virtio-9p-pci,fsdev=rig,mount_tag=rig" \
      -fsdev "local,id=share,path=$share,security_model=none,readonly=on" \
      -device "virtio-9p-pci,fsdev=share,mount_tag=share" \
      "${control[@]}" \
      >"$run_dir/guest$i.qemu.log" 2>&1 &
    pids+=($!)
  done
  if [ -n "$relay" ]; then
    RIG_TAPS="${data_taps[*]}" RIG_RELAY_UNTIL="$run_dir/guests-done" RIG_CTL_DIR="$run_dir/ctl" \
      bash -c "$relay" >"$run_dir/relay.log" 2>&1 &
    relay_pid=$!
  fi
  say "$guests guest(s) booting ($ACCEL), bridge $br, run folder $run_dir"
  # wait for every qemu to exit (the guest powers off after the command), at most $timeout s
  local deadline=$(($(date +%s) + timeout)) alive
  while :; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] || break
    if [ "$(date +%s)" -ge "$deadline" ]; then
      say "timed out after $timeout s: stopping the guests"
      break
    fi
    sleep 1
  done
  local wall=$(($(date +%s) - t0)) failed=0 rc
  if [ -n "$relay" ]; then
    touch "$run_dir/guests-done"
    local n=0
    while kill -0 "$relay_pid" 2>/dev/null && [ "$n" -lt 150 ]; do
      sleep 0.1
      n=$((n + 1))
    done
    rc=none
    if ! kill -0 "$relay_pid" 2>/dev/null; then
      rc=0
      wait "$relay_pid" || rc=$?
      relay_pid=""
    fi
    echo "== relay: exit status $rc"
    cat "$run_dir/relay.log"
    [ "$rc" = 0 ] || failed=1
  fi
  for ((i = 0; i < guests; i++)); do
    local o="$run_dir/ctl/guest$i"
    rc="$(cat "$o/rc" 2>/dev/null || echo none)"
    echo "== guest $i: exit status $rc"
    [ -f "$o/setup.log" ] && sed 's/^/   setup: /' "$o/setup.log"
    [ -f "$o/stdout" ] && cat "$o/stdout"
    [ -s "$o/stderr" ] && sed 's/^/   stderr: /' "$o/stderr"
    if [ "$rc" != 0 ]; then
      failed=1
      if [ "$rc" = none ]; then
        echo "   the command did not finish; the console's last lines:"
        tail -25 "$run_dir/guest$i.console" 2>/dev/null | sed 's/^/   console: /'  || true
        sed 's/^/   qemu: /' "$run_dir/guest$i.qemu.log" 2>/dev/null || true
      fi
    fi
  done
  if [ -n "$capture" ]; then
    kill "$capture_pid" 2>/dev/null || true
    wait "$capture_pid" 2>/dev/null || true
    capture_pid=""
  fi
  say "guests booted, ran and stopped in $wall s"
  return "$failed"
}

case "${1:-}" in
  image) image ;;
  run) shift; run "$@" ;;
  clean) rm -rf "$CACHE"; say "removed $CACHE" ;;
  *)
    sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
