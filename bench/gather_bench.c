/* gather_bench.c - what a byte of a gathered Q4_0 row costs against a byte of the dense matmul,
 * on one thread, and whether hot-first neuron order changes it.
 *
 *     I="-Inative/src -Inative/include" K=native/src/kernels
 *     cc -O2 $I -mavx2 -mfma -mf16c -c $K/avx2.c -o /tmp/avx2.o
 *     cc -O2 $I -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -c $K/avx512.c -o /tmp/avx512.o
 *     cc -O2 $I -DPI_HAVE_X86 bench/gather_bench.c $K/api.c $K/dispatch.c $K/ref.c $K/types.c native/src/status.c \
 *        /tmp/avx2.o /tmp/avx512.o -lm -o /tmp/gather_bench
 *     /tmp/gather_bench [SHARE [RUN]]
 *
 * 66 matrices of the 1B ReLU model's gate shape (5632 x 2048 Q4_0, 430 MB: out of cache). Each
 * neuron is picked with a power-law probability (bench/make_relu_model.py's, mean SHARE,
 * default 0.25) in one of two orders: random (the model's own) or hot-first (the order a
 * converter could write). The picked rows go to the kernel one call per RUN positions (default
 * 128, ffn_sparse's run), as the sparse FFN calls it; dense is one call over every row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

enum { N_EMBD = 2048, N_FF = 5632, N_MATRICES = 66, REPEATS = 5 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* power-law firing probabilities by rank, mean `share`, capped at 0.95 */
static void firing(double *p, double share) {
    double sum = 0;
    for (int i = 0; i < N_FF; i++) sum += p[i] = pow(i + 1.0, -0.7);
    for (int it = 0; it < 20; it++) {
        double next = 0;
        for (int i = 0; i < N_FF; i++) next += p[i] = fmin(p[i] * share * N_FF / sum, 0.95);
        sum = next;
    }
}

int main(int argc, char **argv) {
    const double share = argc > 1 ? atof(argv[1]) : 0.25;
    const int run = argc > 2 ? atoi(argv[2]) : 128;
    pi_kernels k;
    pi_kernels_init(&k, 0);
    const size_t row_bytes = N_EMBD / 32 * 18, matrix = row_bytes * N_FF;
    uint8_t *W = malloc(matrix * N_MATRICES);
    int32_t *rows = malloc(sizeof(int32_t) * N_FF * N_MATRICES), *rank = malloc(sizeof(int32_t) * N_FF);
    int *n = malloc(sizeof(int) * N_MATRICES);
    double *p = malloc(sizeof(double) * N_FF);
    float *x = malloc(sizeof(float) * N_EMBD), *y = malloc(sizeof(float) * N_FF);
    block_q8x *xq = malloc(sizeof(block_q8x) * (N_EMBD / 32));
    for (size_t i = 0; i < matrix * N_MATRICES; i++) W[i] = (uint8_t)rand();
    const uint16_t scale = 0x2000; /* every block's f16 scale: 2^-7 */
    for (size_t r = 0; r < (size_t)N_FF * N_MATRICES; r++)
        for (int b = 0; b < N_EMBD / 32; b++) memcpy(W + r * row_bytes + b * 18, &scale, 2);
    for (int i = 0; i < N_EMBD; i++) x[i] = sinf((float)i);
    k.quantize_act(x, xq, N_EMBD);
    const pi_act a = { x, xq, NULL, N_EMBD };
    firing(p, share);
    for (int i = 0; i < N_FF; i++) rank[i] = i;
    printf("%s kernels, 1 thread, calls of %d positions\n", k.name, run);
    const char *names[] = { "random", "hot-first", "dense" };
    for (int mode = 0; mode < 3; mode++) {
        double best = 1e30;
        long picked = 0;
        for (int rep = 0; rep < REPEATS; rep++) {
            picked = 0;
            for (int m = 0; m < N_MATRICES; m++) {
                for (int i = N_FF - 1; i > 0; i--) { /* a fresh random order per matrix */
                    const int j = rand() % (i + 1), t = rank[i];
                    rank[i] = rank[j];
                    rank[j] = t;
                }
                n[m] = 0;
                for (int i = 0; i < N_FF; i++)
                    if (mode == 2 || rand() < p[mode == 0 ? rank[i] : i] * RAND_MAX) rows[m * N_FF + n[m]++] = i;
                picked += n[m];
            }
            const double t0 = now();
            for (int m = 0; m < N_MATRICES; m++) {
                const uint8_t *Wm = W + matrix * m;
                const int32_t *list = rows + m * N_FF;
                if (mode == 2) {
                    k.matmul[PI_TYPE_Q4_0](Wm, row_bytes, NULL, 0, N_FF, a, 1, y, N_FF);
                    continue;
                }
                for (int j = 0, p0 = 0; p0 < N_FF; p0 += run) {
                    const int j0 = j;
                    while (j < n[m] && list[j] < p0 + run) j++;
                    if (j > j0) k.matmul[PI_TYPE_Q4_0](Wm, row_bytes, list + j0, 0, j - j0, a, 1, y, j - j0);
                }
            }
            const double t = now() - t0;
            best = t < best ? t : best;
        }
        printf("%-10s rows %5.1f%%  %7.2f ms  %5.1f GB/s\n", names[mode], 100.0 * picked / ((double)N_FF * N_MATRICES),
               best * 1e3, picked * row_bytes / best / 1e9);
    }
    return 0;
}
