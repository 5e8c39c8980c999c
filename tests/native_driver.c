/* native_driver.c - load a model, decode N tokens one at a time, free everything: the C API
 * alone, for valgrind (tests/test_reliability.py). */
#include <stdio.h>
#include <stdlib.h>

#include "powerinfer.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const int steps = atoi(argv[2]);
    pi_model *m = NULL;
    pi_context *c = NULL;
    if (pi_model_load(argv[1], pi_model_default_params(), &m)) {
        fprintf(stderr, "load: %s\n", pi_last_error());
        return 1;
    }
    pi_context_params p = pi_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 2;
    if (pi_context_new(m, p, &c)) {
        fprintf(stderr, "context: %s\n", pi_last_error());
        pi_model_free(m);
        return 1;
    }
    int done = 0;
    for (int i = 0; i < steps; i++) {
        int32_t token = 1 + i;
        if (pi_decode(c, &token, 1, i)) {
            fprintf(stderr, "decode: %s\n", pi_last_error());
            break;
        }
        done++;
    }
    printf("decoded %d\n", done);
    pi_context_free(c);
    pi_model_free(m);
    return done == steps ? 0 : 1;
}
