#!/usr/bin/env bash
# Build and run the OpenMPI peer: MPI_Allreduce over TCP on loopback.
# usage: bench/peers/run.sh [ranks] [elements] [iterations]
set -euo pipefail
cd "$(dirname "$0")"
ranks=${1:-6}; elements=${2:-1048576}; iters=${3:-20}
if ! command -v mpicc >/dev/null; then
  echo "mpicc not found: apt-get install -y openmpi-bin libopenmpi-dev" >&2; exit 2
fi
out=${TMPDIR:-/tmp}/inabench-mpi-allreduce
mpicc -O2 -o "$out" mpi_allreduce.c
mpi=$(mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
  --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
  "$out" "$elements" "$iters")
echo "$mpi"

# ours: software NetReduce with the same ranks and bytes on the udp fabric, a process per node
root=$(cd ../.. && pwd)
(cd "$root" && cargo build --release -q -p inabench -p inabench-ina --example udp_probe)
target=${CARGO_TARGET_DIR:-$root/target}
ours=$(INABENCH_NODE_EXE="$target/release/inabench" "$target/release/examples/udp_probe" \
  netreduce "$elements" event "$ranks" 5 2>/dev/null)
echo "$ours"
median() { sed -n 's/.*"median_s":\([0-9.e-]*\).*/\1/p'; }
awk -v a="$(echo "$ours" | median)" -v b="$(echo "$mpi" | median)" \
  'BEGIN { printf "{\"ratio_inabench_over_mpi\":%.2f}\n", a / b }'
