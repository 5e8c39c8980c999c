/* threadpool.c - fork/join with spinning workers that fall asleep when idle.
 *
 * A decode step runs a few hundred short parallel ops, so waking threads through the kernel
 * each time would cost more than the work: workers spin on a generation counter for a while
 * after each task and only then block on a condition variable. Every spin yields the core
 * after a short while: where more threads are runnable than there are cores (a server's other
 * threads, another process), a spinning thread would otherwise hold the core that the thread
 * it waits for needs, and each of the step's ops would wait out a scheduler time slice. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "status.h"
#include "threadpool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

enum {
    SPIN_ROUNDS = 200000, /* ~ a millisecond of spinning before a worker sleeps */
    YIELD_EVERY = 1024    /* pauses between yields of the core, a few microseconds */
};

/* one round of a spin: a pause, and now and then the core to whoever else is runnable */
static void spin_round(int spins) {
    if (spins % YIELD_EVERY == YIELD_EVERY - 1) sched_yield();
    else cpu_relax();
}

typedef struct {
    pi_threadpool *pool;
    int ith;
    pthread_t thread;
} worker;

struct pi_threadpool {
    int n_threads;
    worker *workers;            /* [n_threads - 1], worker i has ith = i + 1 */
    pi_task_fn fn;
    void *arg;
    int nth;
    atomic_uint generation;     /* bumped once per task */
    atomic_int pending;         /* workers still running the current task */
    atomic_int sleepers;
    atomic_int stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
};

static void *worker_main(void *p) {
    worker *w = p;
    pi_threadpool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ROUNDS) {
                spin_round(spins);
                continue;
            }
            pthread_mutex_lock(&pool->lock);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->wake, &pool->lock);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->lock);
            spins = 0;
        }
        seen = gen;
        if (atomic_load(&pool->stop)) return NULL;
        if (w->ith < pool->nth) pool->fn(pool->arg, w->ith, pool->nth);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

int pi_threadpool_new(int n_threads, pi_threadpool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 512) return pi_set_error(PI_ERR_ARG, "thread count %d out of range", n_threads);
    pi_threadpool *pool = calloc(1, sizeof *pool);
    if (!pool) return pi_set_error(PI_ERR_NOMEM, "no memory for the thread pool");
    pool->n_threads = 1;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pool->workers = calloc((size_t)n_threads, sizeof *pool->workers);
    if (!pool->workers) {
        pi_threadpool_free(pool);
        return pi_set_error(PI_ERR_NOMEM, "no memory for the thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pi_threadpool_free(pool);
            return pi_set_error(PI_ERR_NOMEM, "cannot start thread %d of %d", i, n_threads);
        }
        pool->n_threads = i + 1;
    }
    *out = pool;
    return PI_OK;
}

void pi_threadpool_free(pi_threadpool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stop, 1);
    atomic_fetch_add(&pool->generation, 1);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    free(pool->workers);
    free(pool);
}

int pi_threadpool_size(const pi_threadpool *pool) { return pool->n_threads; }

void pi_threadpool_run(pi_threadpool *pool, pi_task_fn fn, void *arg, int nth) {
    if (nth > pool->n_threads) nth = pool->n_threads;
    if (nth <= 1 || pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }
    fn(arg, 0, nth);
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; spins++) spin_round(spins);
}
