#!/bin/sh
# Run by each rig guest's init (tools/rxe-rig/rig.sh) from the rig's 9p share at /mnt/rig: the
# guest's addresses, rxe0 on its data NIC, then the run's command; its output and exit status go
# to /mnt/rig/guest<i>/.
for a in $(cat /proc/cmdline); do
  case "$a" in
    rig.guest=*) RIG_GUEST="${a#rig.guest=}" ;;
    rig.guests=*) RIG_GUESTS="${a#rig.guests=}" ;;
  esac
done
mac() { printf '52:54:00:%s:00:%02x' "$1" "$(($2 + 1))"; }
RIG_IP="10.77.0.$((RIG_GUEST + 1))"
RIG_IPS=""
RIG_CTL_IPS=""
i=0
while [ "$i" -lt "$RIG_GUESTS" ]; do
  RIG_IPS="$RIG_IPS 10.77.0.$((i + 1))"
  RIG_CTL_IPS="$RIG_CTL_IPS 10.78.0.$((i + 1))"
  i=$((i + 1))
done
RIG_IPS="${RIG_IPS# }"
RIG_OUT="/mnt/rig/guest$RIG_GUEST"
mkdir -p "$RIG_OUT"
{
  modprobe virtio_net
  # the data NIC (52:54:00:77:00:<i+1>, rxe0 on it) and, when the run has one, the control NIC
  # (52:54:00:78:00:<i+1>, for the command's own TCP)
  nic=""
  ctl=""
  for n in /sys/class/net/*; do
    case "$(cat "$n/address")" in
      52:54:00:77:*) nic="${n##*/}" ;;
      52:54:00:78:*) ctl="${n##*/}" ;;
    esac
  done
  ip link set lo up
  # the guest's name, as agents in it report their host to a runner
  hostname "guest$RIG_GUEST"
  ip link set "$nic" up
  ip addr add "$RIG_IP/24" dev "$nic"
  # every peer's data address is a static neighbour: nothing on a relay has to answer ARP
  i=0
  while [ "$i" -lt "$RIG_GUESTS" ]; do
    [ "$i" = "$RIG_GUEST" ] ||
      ip neigh replace "10.77.0.$((i + 1))" lladdr "$(mac 77 "$i")" dev "$nic" nud permanent
    i=$((i + 1))
  done
  if [ -n "$ctl" ]; then
    ip link set "$ctl" up
    ip addr add "10.78.0.$((RIG_GUEST + 1))/24" dev "$ctl"
  else
    RIG_CTL_IPS="$RIG_IPS"
  fi
  modprobe rdma_rxe
  rdma link add rxe0 type rxe netdev "$nic"
  t=0
  until rdma link show rxe0/1 2>/dev/null | grep -q ACTIVE || [ "$t" -ge 50 ]; do
    sleep 0.2
    t=$((t + 1))
  done
  rdma link show
  echo "guest $RIG_GUEST: data nic $nic $RIG_IP${ctl:+, control nic $ctl}, kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime) s"
} >"$RIG_OUT/setup.log" 2>&1
RIG_CTL_IPS="${RIG_CTL_IPS# }"
RIG_NIC="$nic"
export RIG_GUEST RIG_GUESTS RIG_IP RIG_IPS RIG_CTL_IPS RIG_OUT RIG_NIC RIG_SHARE=/mnt/share HOME=/root
cd /mnt/rig || exit 1
sh /mnt/rig/cmd.sh >"$RIG_OUT/stdout" 2>"$RIG_OUT/stderr"
echo $? >"$RIG_OUT/rc.tmp"
mv "$RIG_OUT/rc.tmp" "$RIG_OUT/rc"
