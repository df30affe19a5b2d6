// The CPU device's thread pool: runs the pieces of a kernel's outermost loop on all cores in one call from Python
// (handing a chunk to a Python thread costs ~90 us of thread wake-up and GIL traffic; this costs a few). Workers spin
// briefly between kernels (a training step launches them back to back), then sleep on a condition variable.
//
// The caller and the workers claim pieces one at a time until none is left, and the call returns when every piece is
// done: a worker that wakes late (a core that was idle can take milliseconds in a virtual machine) finds less or nothing
// to do instead of holding the others up, as a fixed share per thread would. A piece is claimed by a compare-and-swap
// on `ticket` = generation << 32 | pieces << 16 | next piece, so a worker still holding an old generation cannot take a
// piece of a newer call.
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>

typedef void (*chunk_fn)(void **args, int lo, int hi);
#define MAX_THREADS 64
#define MAX_PIECES 0xffff
#define SPIN 2000

static struct { chunk_fn fn; void **args; const int *lo, *hi; } job;   // written by the caller before `ticket`
static _Atomic uint64_t ticket;
static atomic_int generation, done;
static int workers;   // threads besides the caller
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t running = PTHREAD_MUTEX_INITIALIZER;   // one call at a time (callers may be several threads)

// claim and run pieces of generation `gen` until there are none left
static void work(uint32_t gen) {
  uint64_t t = atomic_load_explicit(&ticket, memory_order_acquire);
  for (;;) {
    uint32_t next = t & 0xffff, pieces = (t >> 16) & 0xffff;
    if ((uint32_t)(t >> 32) != gen || next >= pieces) return;
    if (!atomic_compare_exchange_weak_explicit(&ticket, &t, t + 1, memory_order_acq_rel, memory_order_acquire)) continue;
    job.fn(job.args, job.lo[next], job.hi[next]);   // the job stays this generation's until every piece is done
    atomic_fetch_add_explicit(&done, 1, memory_order_release);
    t = atomic_load_explicit(&ticket, memory_order_acquire);
  }
}

static void *worker(void *arg) {
  int seen = (int)(long)arg;
  for (;;) {
    for (int spins = 0; atomic_load_explicit(&generation, memory_order_acquire) == seen; spins++) {
      if (spins < SPIN) { sched_yield(); continue; }
      pthread_mutex_lock(&lock);
      while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &lock);
      pthread_mutex_unlock(&lock);
    }
    seen = atomic_load_explicit(&generation, memory_order_acquire);
    work((uint32_t)seen);
  }
  return 0;
}

static void forked_child(void) {   // threads do not survive fork(): the child starts its own; the lock may have been held
  workers = 0;
  pthread_mutex_init(&running, 0);
  pthread_mutex_init(&lock, 0);
  pthread_cond_init(&wake, 0);
}

static void start(int threads) {
  static int registered;
  if (!registered) { pthread_atfork(0, 0, forked_child); registered = 1; }
  while (workers + 1 < threads && workers + 1 < MAX_THREADS) {
    pthread_t t;   // a new worker waits for the next generation
    if (pthread_create(&t, 0, worker, (void *)(long)atomic_load(&generation)) != 0) break;
    pthread_detach(t);
    workers++;
  }
}

// run pieces 0..n-1 of `fn`, piece i over [lo[i], hi[i]), on the calling thread and threads-1 workers
void tw_threads_run(chunk_fn fn, void **args, const int *lo, const int *hi, int n, int threads) {
  pthread_mutex_lock(&running);
  if (workers + 1 < threads) start(threads);
  if (workers == 0 || n > MAX_PIECES) {   // no threads to be had
    for (int i = 0; i < n; i++) fn(args, lo[i], hi[i]);
    pthread_mutex_unlock(&running);
    return;
  }
  job.fn = fn; job.args = args; job.lo = lo; job.hi = hi;
  atomic_store(&done, 0);
  uint32_t gen = (uint32_t)atomic_load(&generation) + 1;
  atomic_store_explicit(&ticket, (uint64_t)gen << 32 | (uint64_t)n << 16, memory_order_release);
  pthread_mutex_lock(&lock);
  atomic_store_explicit(&generation, (int)gen, memory_order_release);
  pthread_cond_broadcast(&wake);
  pthread_mutex_unlock(&lock);
  work(gen);
  while (atomic_load_explicit(&done, memory_order_acquire) < n) sched_yield();
  pthread_mutex_unlock(&running);
}
