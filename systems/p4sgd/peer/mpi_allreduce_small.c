/* p4sgd-fig8's emulated CPUSync peer: OpenMPI's MPI_Allreduce (int32 sum) of `elements` values
 * per rank, `ops` all-reduces issued one after another (the next when the previous result is in,
 * as a training loop does), each timed with MPI_Wtime around the call on every rank. The first
 * `warmup` all-reduces (connection set-up) are not counted. Every rank checks every result
 * against the exact sum of all ranks' contributions, which every rank can compute (the values
 * are a closed form of rank, operation and element).
 *
 * usage: mpi_allreduce_small ELEMENTS OPS WARMUP OUT_FILE [corrupt]
 *   `corrupt` makes rank 1 add 1 to one element of every contribution without the others
 *   knowing: every result is then wrong (the check's own test).
 * Rank 0 writes OUT_FILE: a first line `ranks R elements E ops N wrong W`, then R x N latencies
 * in nanoseconds, one a line (rank-major). Exit status 0 unless MPI or the file failed. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t value(int rank, long op, int i) {
    return (int32_t)(((uint32_t)rank * 2654435761u + (uint32_t)op * 40503u + (uint32_t)i * 97u) % 2001u) - 1000;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0) fprintf(stderr, "usage: %s ELEMENTS OPS WARMUP OUT_FILE [corrupt]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int elements = atoi(argv[1]);
    long ops = atol(argv[2]);
    long warmup = atol(argv[3]);
    const char *path = argv[4];
    int corrupt = argc > 5 && strcmp(argv[5], "corrupt") == 0;
    if (elements < 1 || ops < 1 || warmup < 0) {
        if (rank == 0) fprintf(stderr, "ELEMENTS and OPS must be >= 1, WARMUP >= 0\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int32_t *in = malloc(sizeof(int32_t) * elements);
    int32_t *out = malloc(sizeof(int32_t) * elements);
    double *t = malloc(sizeof(double) * ops);
    double *all = rank == 0 ? malloc(sizeof(double) * ops * size) : NULL;
    if (!in || !out || !t || (rank == 0 && !all)) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long wrong = 0;
    for (long k = -warmup; k < ops; k++) {
        long op = k + warmup;
        for (int i = 0; i < elements; i++) in[i] = value(rank, op, i);
        if (corrupt && rank == 1) in[0] += 1;
        double t0 = MPI_Wtime();
        MPI_Allreduce(in, out, elements, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        if (k >= 0) t[k] = t1 - t0;
        for (int i = 0; i < elements; i++) {
            int32_t expect = 0;
            for (int r = 0; r < size; r++) expect += value(r, op, i);
            if (out[i] != expect) { wrong++; break; }
        }
    }
    long wrong_all = 0;
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Gather(t, (int)ops, MPI_DOUBLE, all, (int)ops, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int rc = 0;
    if (rank == 0) {
        FILE *f = fopen(path, "w");
        if (!f) {
            perror(path);
            rc = 1;
        } else {
            fprintf(f, "ranks %d elements %d ops %ld wrong %ld\n", size, elements, ops, wrong_all);
            for (long j = 0; j < ops * size; j++) fprintf(f, "%.0f\n", all[j] * 1e9);
            if (fclose(f) != 0) rc = 1;
        }
    }
    free(in); free(out); free(t); free(all);
    MPI_Finalize();
    return rc;
}
