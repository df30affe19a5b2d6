// The CPU device's thread pool: runs the chunks of a kernel's outermost loop on all cores in one call from Python
// (handing a chunk to a Python thread costs ~90 us of thread wake-up and GIL traffic; this costs a few). Workers spin
// briefly between kernels (a training step launches them back to back), then sleep on a condition variable.
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>

typedef void (*chunk_fn)(void **args, int lo, int hi);
#define MAX_THREADS 64
#define SPIN 2000   // sched_yield()s before a worker sleeps (~1 ms)

static struct { chunk_fn fn; void **args; const int *lo, *hi; int n; } job;
static atomic_int generation, remaining;
static int workers;   // threads besides the caller
static int start_generation;   // the generation a new worker starts from: it waits for the next one
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t running = PTHREAD_MUTEX_INITIALIZER;   // one call at a time (callers may be several threads)

static void *worker(void *arg) {
  int id = (int)(long)arg, seen = start_generation;
  for (;;) {
    for (int spins = 0; atomic_load_explicit(&generation, memory_order_acquire) == seen; spins++) {
      if (spins < SPIN) { sched_yield(); continue; }
      pthread_mutex_lock(&lock);
      while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &lock);
      pthread_mutex_unlock(&lock);
    }
    seen = atomic_load_explicit(&generation, memory_order_acquire);
    if (id < job.n) job.fn(job.args, job.lo[id], job.hi[id]);
    atomic_fetch_sub_explicit(&remaining, 1, memory_order_release);
  }
  return 0;
}

static void forked_child(void) {   // threads do not survive fork(): the child starts its own; the lock may have been held
  workers = 0;
  pthread_mutex_init(&running, 0);
  pthread_mutex_init(&lock, 0);
  pthread_cond_init(&wake, 0);
}

static void start(int n) {
  static int registered;
  if (!registered) { pthread_atfork(0, 0, forked_child); registered = 1; }
  start_generation = atomic_load(&generation);
  while (workers + 1 < n && workers + 1 < MAX_THREADS) {
    pthread_t t;
    if (pthread_create(&t, 0, worker, (void *)(long)(workers + 1)) != 0) break;
    pthread_detach(t);
    workers++;
  }
}

// run chunks 0..n-1 of `fn`, chunk i over [lo[i], hi[i]): chunk 0 on the calling thread, the others on the workers
void tw_threads_run(chunk_fn fn, void **args, const int *lo, const int *hi, int n) {
  pthread_mutex_lock(&running);
  if (workers + 1 < n) start(n);
  if (workers + 1 < n) {   // no threads to be had
    for (int i = 0; i < n; i++) fn(args, lo[i], hi[i]);
    pthread_mutex_unlock(&running);
    return;
  }
  job.fn = fn; job.args = args; job.lo = lo; job.hi = hi; job.n = n;
  atomic_store(&remaining, workers);
  pthread_mutex_lock(&lock);
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&lock);
  fn(args, lo[0], hi[0]);
  while (atomic_load_explicit(&remaining, memory_order_acquire) > 0) sched_yield();
  pthread_mutex_unlock(&running);
}
