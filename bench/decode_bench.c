/* decode_bench.c - one-token decode speed through the C API alone, no Python in the loop.
 *
 *     decode_bench MODEL THREADS [SPARSE [SHIFT]]    -> "THREADS threads: N tok/s (kernels)"
 *
 * 128 steps after one token. SPARSE is PI_SPARSE_* (0 dense, 1 decode), SHIFT the threshold
 * shift (+1000: the predictors run, no neuron passes). bench/ffn_time.sh drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "powerinfer.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL THREADS [SPARSE [SHIFT]]\n", argv[0]);
        return 2;
    }
    pi_model *m;
    pi_context *c;
    if (pi_model_load(argv[1], pi_model_default_params(), &m)) {
        fprintf(stderr, "load: %s\n", pi_last_error());
        return 1;
    }
    pi_context_params p = pi_context_default_params();
    p.n_ctx = 1024;
    p.n_threads = p.n_threads_batch = atoi(argv[2]);
    if (argc > 3) p.sparse = atoi(argv[3]);
    if (argc > 4) p.sparse_threshold_shift = (float)atof(argv[4]);
    if (pi_context_new(m, p, &c)) {
        fprintf(stderr, "context: %s\n", pi_last_error());
        pi_model_free(m);
        return 1;
    }
    enum { STEPS = 128 };
    int32_t token = 1000;
    int rc = pi_decode(c, &token, 1, 0);
    const double t0 = now();
    for (int i = 0; i < STEPS && !rc; i++) {
        token = 1000 + i;
        rc = pi_decode(c, &token, 1, i + 1);
    }
    if (rc) fprintf(stderr, "decode: %s\n", pi_last_error());
    else printf("%d threads: %.1f tok/s (%s)\n", p.n_threads, STEPS / (now() - t0), pi_context_kernels(c));
    pi_context_free(c);
    pi_model_free(m);
    return rc ? 1 : 0;
}
