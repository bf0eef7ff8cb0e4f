#!/usr/bin/env bash
# Ours against the OpenMPI peer (MPI_Allreduce, int32 sum) on the same ranks and bytes, in one run:
#   udp: software NetReduce, a process per node on loopback UDP   vs  MPI over TCP loopback
#   mem: software NetReduce, a thread per node on the mem fabric   vs  MPI over shared memory (vader)
#   the udp switch split into 1, 2 and 4 shards: NetReduce's by QP (S shards: S RC connections
#   per worker pair, message m on QP m mod S, shard q serves QP q), SwitchML's by slot (1/16 of the
#   bytes: its 192-byte chunks); udp without GSO/GRO (mmsg); and udp with the switch's process
#   at nice -10 (the knob `switch_nice`, as root: on a host with fewer cores than nodes the switch,
#   which every frame crosses, then runs when it has input instead of queueing behind the
#   workers; a real switch does not share cores with the workers)
# With the floors (bench/examples/mem_floor.rs, udp_floor.rs): the same bytes moved with no
# endpoint or fabric bookkeeping, the least any run of this traffic costs on this host.
# Every sum is checked (ours against the reference sum, MPI's element 0 against its closed form).
# usage: bench/peers/run.sh [ranks] [elements] [iterations]
# Targets (issue #22): udp >= 1.0x MPI-TCP, mem >= 2x MPI-shm (x = MPI's time over ours).
set -euo pipefail
cd "$(dirname "$0")"
ranks=${1:-6}; elements=${2:-1048576}; iters=${3:-20}
if ! command -v mpicc >/dev/null; then
  echo "mpicc not found: apt-get install -y openmpi-bin libopenmpi-dev" >&2; exit 2
fi
out=${TMPDIR:-/tmp}/inabench-mpi-allreduce
mpicc -O2 -o "$out" mpi_allreduce.c
mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
root=$(cd ../.. && pwd)
# two builds: with `--example`, cargo builds only examples, so `-p inabench` in the same command
# left the node binary (bin `inabench`) as it was
(cd "$root" && cargo build --release -q -p inabench && cargo build --release -q -p inabench-ina-run --example udp_probe \
  && cargo build --release -q -p inabench-bench --example mem_floor --example udp_floor)
target=${CARGO_TARGET_DIR:-$root/target}
probe() { INABENCH_NODE_EXE="$target/release/inabench" "$target/release/examples/udp_probe" "$@" 2>/dev/null; }
median() { sed -n 's/.*"median_s":\([0-9.e-]*\).*/\1/p'; }
cores=$(nproc)
echo "host: $cores cores, $(uname -r); ranks $ranks, $elements int32 ($((elements * 4 / 1048576)) MiB), $iters iterations each"

mpi_tcp=$("${mpirun[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
  "$out" "$elements" "$iters" tcp)
mpi_shm=$("${mpirun[@]}" --mca btl self,vader --mca pml ob1 "$out" "$elements" "$iters" shm)
echo "$mpi_tcp"; echo "$mpi_shm"
ours_mem=$(probe netreduce "$elements" mem "$ranks" "$iters"); echo "$ours_mem"
# the floors: the same bytes with no endpoint or fabric bookkeeping (bench/examples/*_floor.rs)
floors=$("$target/release/examples/mem_floor" "$ranks" "$elements" "$iters" 2>/dev/null)
floor_copies=$(echo "$floors" | grep floor-copies); floor_shared=$(echo "$floors" | grep floor-shared)
floor_udp=$("$target/release/examples/udp_floor" "$ranks" "$elements" "$iters" 2>/dev/null)
echo "$floors"; echo "$floor_udp"
declare -A udp
for s in 1 2 4; do
  udp[$s]=$(probe netreduce "$elements" event "$ranks" "$iters" "$s"); echo "${udp[$s]}"
done
ours_mmsg=$(INABENCH_UDP_OFFLOAD=mmsg probe netreduce "$elements" event "$ranks" "$iters" 1)
echo "$ours_mmsg"
ours_nice=$(INABENCH_SWITCH_NICE=-10 probe netreduce "$elements" event "$ranks" "$iters" 1)
echo "$ours_nice"
declare -A sml
for s in 1 2 4; do
  sml[$s]=$(probe switchml $((elements / 16)) event "$ranks" "$iters" "$s"); echo "${sml[$s]}"
done

ratio() { awk -v mpi="$(echo "$1" | median)" -v ours="$(echo "$2" | median)" \
  'BEGIN { printf "%.3f s vs %.3f s: %.2fx", ours, mpi, mpi / ours }'; }
# a udp run's CPU time in the run (medians over the iterations, ms): the switch (all shards),
# the workers (summed), the switch's wait for a CPU while runnable
cpu() { local f; for f in switch_cpu_ms workers_cpu_ms switch_run_delay_ms; do
  printf '%s ' "$(echo "$1" | sed -n "s/.*\"$f\":\([0-9.e-]*\).*/\1/p")"; done; }
cpus() { read -r s w d <<<"$(cpu "$1")"; echo "   [cpu ms: switch $s, workers $w; switch run delay $d]"; }
echo
echo "side by side (x = MPI's time / ours; above 1 is faster than MPI):"
echo "  udp mmsg only  vs MPI tcp: $(ratio "$mpi_tcp" "$ours_mmsg")   (GSO/GRO off)$(cpus "$ours_mmsg")"
echo "  udp switch at nice -10 vs MPI tcp: $(ratio "$mpi_tcp" "$ours_nice")   (1 shard)$(cpus "$ours_nice")"
echo "  mem            vs MPI shm: $(ratio "$mpi_shm" "$ours_mem")   target >= 2.0x"
echo "  mem floor, a copy per receiver, 2 threads, vs MPI shm: $(ratio "$mpi_shm" "$floor_copies")   (byte work only)"
echo "  mem floor, one shared result buffer, vs MPI shm: $(ratio "$mpi_shm" "$floor_shared")   (byte work only)"
echo "  udp floor (kernel only, thread per node) vs MPI tcp: $(ratio "$mpi_tcp" "$floor_udp")"
for s in 1 2 4; do
  note=""; [ $((ranks + s)) -gt "$cores" ] && note="   (contended: $ranks workers + $s shards on $cores cores)"
  echo "  udp $s shard(s) vs MPI tcp: $(ratio "$mpi_tcp" "${udp[$s]}")$note$(cpus "${udp[$s]}")"
done
for s in 2 4; do
  echo "  switchml $s shards vs 1 shard ($((elements / 16)) int32): $(ratio "${sml[1]}" "${sml[$s]}")"
done
echo "  targets: udp >= 1.0x MPI tcp (1 shard, or the shards the host's cores allow); mem >= 2.0x MPI shm"
