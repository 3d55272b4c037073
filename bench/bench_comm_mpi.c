/* bench/bench_comm_mpi.c — the MPI baseline of bench_comm: MPI_Allreduce
 * (in place, MPI_FLOAT, MPI_SUM) between the ranks mpirun starts, with
 * OpenMPI's defaults, one buffer per size reused across repetitions.
 *
 * Not a general MPI benchmark. Built only when CMake finds MPI (mpicc); run
 * by bench_comm as `mpirun -np 2 bench_comm_mpi BYTES...`. A repetition's
 * time is the slowest rank's (barrier, then MPI_Allreduce); rank 0 prints
 * one line per size: "bytes reps median_us p10_us p90_us".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int a = 1; a < argc; a++) {
        const size_t bytes = strtoull(argv[a], NULL, 10);
        const int count = (int)(bytes / sizeof(float));
        float *buf = malloc(bytes ? bytes : 1);
        if (!buf)
            MPI_Abort(MPI_COMM_WORLD, 1);
        memset(buf, 0, bytes);
        /* Warm-up, then as many repetitions as fit in ~0.3 s (3..2000). */
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double warm = (MPI_Wtime() - t0) / 2;
        MPI_Bcast(&warm, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        int reps = warm > 0 ? (int)(0.3 / warm) : 2000;
        reps = reps < 3 ? 3 : reps > 2000 ? 2000 : reps;
        double *t = malloc((size_t)reps * sizeof(double));
        double *tmax = malloc((size_t)reps * sizeof(double));
        for (int r = 0; r < reps; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double s = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[r] = MPI_Wtime() - s;
        }
        MPI_Reduce(t, tmax, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            qsort(tmax, (size_t)reps, sizeof(double), cmp_double);
            printf("%zu %d %.3f %.3f %.3f\n", bytes, reps, tmax[reps / 2] * 1e6,
                   tmax[reps / 10] * 1e6, tmax[reps * 9 / 10] * 1e6);
            fflush(stdout);
        }
        free(t);
        free(tmax);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
