/* The peer a user would otherwise pick: OpenMPI's MPI_Allreduce (int32 sum), over TCP on
 * loopback or over shared memory (run.sh picks the transport with --mca btl), with the same
 * ranks and bytes as inabench's software NetReduce on `udp` and on `mem`.
 * usage: mpi_allreduce [elements] [iterations] [transport label]
 * Prints one JSON line: ranks, elements, iterations, seconds per all-reduce (median), algbw. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long elements = argc > 1 ? atol(argv[1]) : 1048576;
    int iters = argc > 2 ? atoi(argv[2]) : 20;
    const char *label = argc > 3 ? argv[3] : "tcp";
    int32_t *in = malloc(sizeof(int32_t) * elements);
    int32_t *out = malloc(sizeof(int32_t) * elements);
    double *t = malloc(sizeof(double) * iters);
    if (!in || !out || !t) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (long i = 0; i < elements; i++) in[i] = (int32_t)((i * 2654435761u + rank) & 0xffff);
    MPI_Allreduce(in, out, (int)elements, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    for (int k = 0; k < iters; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(in, out, (int)elements, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        t[k] = MPI_Wtime() - t0;
    }
    /* check the sum of element 0 against the closed form */
    int32_t expect = 0;
    for (int r = 0; r < size; r++) expect += (int32_t)((0 * 2654435761u + r) & 0xffff);
    int ok = out[0] == expect;
    if (rank == 0) {
        qsort(t, iters, sizeof(double), cmp);
        double med = t[iters / 2];
        double bytes = 4.0 * elements;
        printf("{\"peer\":\"openmpi-allreduce-%s\",\"ranks\":%d,\"elements\":%ld,\"iterations\":%d,"
               "\"median_s\":%.9f,\"algbw_gbps\":%.4f,\"correct\":%s}\n",
               label, size, elements, iters, med, bytes * 8 / med / 1e9, ok ? "true" : "false");
    }
    free(in); free(out); free(t);
    MPI_Finalize();
    return ok ? 0 : 1;
}
