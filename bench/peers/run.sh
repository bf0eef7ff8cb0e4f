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
mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
  --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1 \
  "$out" "$elements" "$iters"
