/* int8_peak.c - the machine's int8 dot-product peak: the throughput of independent chains of
 * the instruction each tier's integer dot is built on, per thread and with every thread at once.
 * The chains never depend on each other, so latency is hidden and what is measured is issue
 * throughput: vpdpbusd on zmm and on ymm (the AVX-512 VNNI tier), and vpmaddubsw + vpmaddwd
 * (the AVX2 tier's pair; two instructions per 32 products, chained through the activation).
 * A MAC counts as 2 ops, as the GEMM figures count them. bench/bench_kernels.py compiles and runs it:
 *
 *     cc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 bench/int8_peak.c -lpthread -o /tmp/int8_peak
 *     /tmp/int8_peak THREADS SECONDS */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CHAINS = 12, STEPS = 1 << 16 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Each function runs STEPS x CHAINS instructions `reps` times and returns the MACs done. The
 * chains are 12 named variables, not an array, so that they live in registers (an array is kept
 * in memory, and its store-to-load latency is measured instead); the empty asm keeps each alive. */
#define EACH(V) V(0) V(1) V(2) V(3) V(4) V(5) V(6) V(7) V(8) V(9) V(10) V(11)
#define CHAIN_LOOP(T, INIT, STEP, SUM)                                                               \
    EACH(INIT)                                                                                       \
    for (long r = 0; r < reps; r++)                                                                  \
        for (int s = 0; s < STEPS; s++) { EACH(STEP) }                                               \
    T sum = a0;                                                                                      \
    EACH(SUM)                                                                                        \
    __asm__ volatile("" : : "v"(sum));

static __m512i w512, x512;
static __m256i w256, x256, ones16;

#define INIT512(i) __m512i a##i = _mm512_set1_epi32(i);
#define INIT256(i) __m256i a##i = _mm256_set1_epi32(i);
#define DP512(i) a##i = _mm512_dpbusd_epi32(a##i, w, x); __asm__ volatile("" : "+v"(a##i));
#define DP256(i) a##i = _mm256_dpbusd_epi32(a##i, w, x); __asm__ volatile("" : "+v"(a##i));
/* the pair's chain runs through the activation operand, so that neither step is loop-invariant */
#define PAIR256(i) a##i = _mm256_madd_epi16(_mm256_maddubs_epi16(w, a##i), ones); __asm__ volatile("" : "+v"(a##i));
#define SUM512(i) sum = _mm512_add_epi32(sum, a##i);
#define SUM256(i) sum = _mm256_add_epi32(sum, a##i);

static double zmm_dpbusd(long reps) {
    const __m512i w = w512, x = x512;
    CHAIN_LOOP(__m512i, INIT512, DP512, SUM512)
    return (double)reps * STEPS * CHAINS * 64;
}

static double ymm_dpbusd(long reps) {
    const __m256i w = w256, x = x256;
    CHAIN_LOOP(__m256i, INIT256, DP256, SUM256)
    return (double)reps * STEPS * CHAINS * 32;
}

static double ymm_maddubs(long reps) {
    const __m256i w = w256, ones = ones16;
    CHAIN_LOOP(__m256i, INIT256, PAIR256, SUM256)
    return (double)reps * STEPS * CHAINS * 32;
}

typedef struct {
    double (*kernel)(long);
    long reps;
    double macs;
} job;

static void *run(void *arg) {
    job *j = arg;
    j->macs = j->kernel(j->reps);
    return NULL;
}

/* GOP/s of `threads` threads running kernel at once for about `seconds` */
static double measure(double (*kernel)(long), int threads, double seconds) {
    double t0 = now();
    kernel(1);
    const long reps = (long)(seconds / (now() - t0 + 1e-9)) + 1;
    job jobs[64];
    pthread_t ids[64];
    t0 = now();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (job){ kernel, reps, 0 };
        pthread_create(&ids[i], NULL, run, &jobs[i]);
    }
    double macs = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        macs += jobs[i].macs;
    }
    return 2.0 * macs / (now() - t0) / 1e9;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const double seconds = argc > 2 ? atof(argv[2]) : 0.5;
    if (threads < 1 || threads > 64) return 2;
    w512 = _mm512_set1_epi8(3), x512 = _mm512_set1_epi8(5);
    w256 = _mm256_set1_epi8(3), x256 = _mm256_set1_epi8(5), ones16 = _mm256_set1_epi16(1);
    const struct { const char *name; double (*kernel)(long); } kinds[] = {
        { "vpdpbusd zmm", zmm_dpbusd }, { "vpdpbusd ymm", ymm_dpbusd }, { "vpmaddubsw+vpmaddwd ymm", ymm_maddubs } };
    for (int k = 0; k < 3; k++)
        printf("%s\t%.1f\t%.1f\n", kinds[k].name, measure(kinds[k].kernel, 1, seconds),
               threads > 1 ? measure(kinds[k].kernel, threads, seconds) : 0.0);
    return 0;
}
