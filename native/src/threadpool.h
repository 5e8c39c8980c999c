/* threadpool.h - one persistent pool per context: workers are created once and reused. */
#ifndef PI_THREADPOOL_H
#define PI_THREADPOOL_H

/* A task runs as fn(arg, ith, nth) on nth threads at once, the caller being ith == 0. */
typedef void (*pi_task_fn)(void *arg, int ith, int nth);

typedef struct pi_threadpool pi_threadpool;

int pi_threadpool_new(int n_threads, pi_threadpool **out); /* n_threads - 1 workers are started */
void pi_threadpool_free(pi_threadpool *pool);
int pi_threadpool_size(const pi_threadpool *pool);
/* Run fn on nth threads (1 <= nth <= size) and return when all have finished. */
void pi_threadpool_run(pi_threadpool *pool, pi_task_fn fn, void *arg, int nth);

#endif
