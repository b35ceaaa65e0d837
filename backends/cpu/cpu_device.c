/* CPU backend: one device whose DEVICE tier is a capacity-limited host arena
 * and whose HOST tier is plain host memory. Each stream owns a worker thread
 * that consumes a FIFO of operations (copies, batched block copies, event
 * records, waits on events, kernel closures, injected failures), so everything
 * enqueued is asynchronous to the caller, like on a GPU.
 *
 * Emulated link (params link_bytes_per_s / link_latency_s, an EMULATION of a
 * GPU's PCIe link): a COPY or BLOCKS op between the HOST and DEVICE tiers
 * reserves its direction's "copy engine" (one per direction per device, shared
 * by every stream) for latency + bytes / bandwidth seconds, starting when the
 * op reaches the head of its stream or when the engine is free, whichever is
 * later; the worker sleeps until that start, copies, and sleeps until the
 * reserved interval ends. So copies of one direction are serialised, the two
 * directions overlap, and a stream's later work waits for its copy as on a GPU.
 *
 * Allocator discipline: the worker thread never calls the device allocator.
 * Finished operations stay on the stream's list and are reclaimed (buffers and
 * events released, payloads freed) by the next API call on that stream:
 * enqueue, synchronize or release. So buffers used by enqueued work stay
 * retained at least until the work ran. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_kernels.h"
#include "hal_impl.h"

#define OKV_CPU_ALIGN                64u
#define OKV_CPU_MMAP_MIN_BYTES       (1u << 20)   /* larger buffers come zeroed from mmap */
#define OKV_CPU_HUGEPAGE_MIN_BYTES   (64u << 20)  /* larger ones are advised to use transparent huge pages */
#define OKV_CPU_PARALLEL_COPY_BYTES  (1u << 20)   /* batched copies above this use OpenMP */
#define OKV_CPU_DEFAULT_DEVICE_BYTES (1ull << 30) /* DEVICE arena limit unless params say otherwise */

/* ---- Objects ---- */

/* Directions of the emulated link: one copy engine each. */
enum { OKV_CPU_LINK_H2D = 0, OKV_CPU_LINK_D2H = 1, OKV_CPU_LINK_DIRS = 2 };

typedef struct okv_cpu_device_t {
  okv_hal_device_t base;
  /* Emulated link (see the file comment); guarded by link_mutex. */
  pthread_mutex_t link_mutex;
  double link_bytes_per_s;                /* 0 = unpaced */
  double link_latency_s;                  /* seconds per copy op */
  double link_free_at[OKV_CPU_LINK_DIRS]; /* CLOCK_MONOTONIC seconds when each direction's engine is free */
} okv_cpu_device_t;

typedef struct okv_cpu_buffer_t {
  okv_hal_buffer_t base;
  bool mapped; /* host_ptr from mmap (else posix_memalign) */
  size_t map_bytes;
} okv_cpu_buffer_t;

typedef enum okv_cpu_op_kind_e {
  OKV_CPU_OP_COPY,
  OKV_CPU_OP_BLOCKS,
  OKV_CPU_OP_RECORD,
  OKV_CPU_OP_WAIT,
  OKV_CPU_OP_FAIL,
  OKV_CPU_OP_KERNEL,
} okv_cpu_op_kind_t;

typedef struct okv_cpu_op_t okv_cpu_op_t;
struct okv_cpu_op_t {
  okv_cpu_op_t *next;
  okv_cpu_op_kind_t kind;
  uint64_t seq;              /* position in its stream, from 1 */
  okv_hal_buffer_t *bufs[7]; /* retained until reclaimed */
  int n_bufs;
  okv_hal_event_t *event; /* retained (RECORD, WAIT) */
  uint64_t gen;           /* event generation recorded / waited for */
  /* COPY: bufs[0] -> bufs[1] */
  uint64_t src_offset, dst_offset, bytes;
  /* BLOCKS: bufs[0] -> bufs[1] */
  uint64_t block_bytes;
  size_t n_blocks;
  okv_block_copy_t *pairs; /* owned */
  /* FAIL */
  okv_status_code_t code;
  char message[256];
  /* KERNEL */
  void (*run)(okv_cpu_op_t *op, int n_threads);
  void (*free_payload)(const okv_allocator_t *a, void *payload);
  void *payload;                   /* cloned descriptor */
  void *arrays[3];                 /* owned host arrays (summary append) */
  struct okv_cpu_stream_t *stream; /* the stream it was enqueued on */
  uint32_t head_dim, n;
  okv_dtype_t dtype;
};

#define CPU_OP_POOL 32 /* ops per stream allocated with it (a layer-step enqueues about 15 per stream) */

typedef struct okv_cpu_stream_t {
  okv_hal_stream_t base;
  pthread_mutex_t mutex;
  pthread_cond_t work_cond; /* worker: an op arrived or stop */
  pthread_cond_t idle_cond; /* synchronize: the queue ran dry */
  okv_cpu_op_t *first;      /* oldest op not yet reclaimed */
  okv_cpu_op_t *next_run;   /* op the worker runs (or will run) next; ops before it are done */
  okv_cpu_op_t *last;
  bool stop;
  uint64_t id;         /* process-unique, tells a reused address from this stream */
  uint64_t n_enqueued; /* seq of the newest op */
  uint64_t n_done;     /* seq of the newest finished op */
  /* CPU_OP_POOL ops allocated with the stream (one allocation) and reused by cpu_op_new while free; an op
   * allocated on its own cost about 3 us here (glibc gave the memory back on the frees in between and
   * faulted it in again). Ops beyond them are allocated and freed as before. */
  okv_cpu_op_t *op_slab;      /* [CPU_OP_POOL] */
  okv_cpu_op_t *op_pool;      /* the free ones, under mutex */
  bool sleeping;              /* the worker waits on work_cond: an enqueue wakes it (only then) */
  bool batched;               /* a batch is open (okv_hal_stream_batch_begin): enqueues do not wake the worker */
  bool wake_deferred;         /* an op was enqueued for the sleeping worker during the batch */
  uint32_t seq_waiters;       /* threads waiting on idle_cond for an op (n_done) rather than for the queue to run dry */
  okv_status_t pending_error; /* first unreported error of the stream */
  pthread_t thread;
  /* Scratch of the kernels run by the worker (scoring's list mode), grown there, freed with the stream. */
  void *scratch;
  size_t scratch_bytes;
} okv_cpu_stream_t;

typedef struct okv_cpu_event_t {
  okv_hal_event_t base;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  uint64_t recorded;  /* generation of the latest record call */
  uint64_t completed; /* highest generation the worker reached */
  bool has_time;
  struct timespec time;          /* CLOCK_MONOTONIC completion time of `recorded` */
  okv_status_t error;            /* error captured by the latest completed record */
  okv_hal_stream_t *last_stream; /* stream of the latest record (may be gone: check before use) */
  uint64_t last_stream_id;       /* its id */
  uint64_t last_seq;             /* seq of that record op */
} okv_cpu_event_t;

static const okv_hal_device_vtable_t cpu_vtable;

static atomic_uint_fast64_t cpu_next_stream_id = 1;

/* ---- Device description ---- */

static const char *cpu_arch(void) {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "cpu";
#endif
}

static int cpu_online(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static uint64_t cpu_mem_total(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : 0;
}

static void cpu_fill_info(okv_hal_device_info_t *info, int n_threads) {
  memset(info, 0, sizeof(*info));
  snprintf(info->backend, sizeof(info->backend), "cpu");
  snprintf(info->name, sizeof(info->name), "%s host (%d thread%s)", cpu_arch(), n_threads, n_threads == 1 ? "" : "s");
  info->ordinal = 0;
  uint64_t mem = cpu_mem_total();
  info->physical_bytes[OKV_TIER_DEVICE] = mem;
  info->physical_bytes[OKV_TIER_HOST] = mem;
  info->alloc_tiers = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  uint32_t both = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  info->copy_mask[OKV_TIER_DEVICE] = both;
  info->copy_mask[OKV_TIER_HOST] = both;
  snprintf(info->simd, sizeof(info->simd), "%s", okv_cpu_isa_name(okv_cpu_isa_active()));
}

static okv_status_t cpu_enumerate(okv_hal_device_info_t *out_infos, size_t capacity, size_t *out_count) {
  *out_count = 1;
  if (capacity >= 1 && out_infos) cpu_fill_info(&out_infos[0], cpu_online());
  return OKV_OK;
}

static okv_status_t cpu_create(const okv_hal_device_params_t *params, const okv_allocator_t *allocator,
                               okv_hal_device_t **out_device) {
  if (params->ordinal != 0)
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "params->ordinal: %d out of range (the cpu backend has 1 device)",
                           params->ordinal);
  okv_cpu_device_t *dev = okv_calloc(allocator, 1, sizeof(*dev));
  if (!dev) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate the cpu device");
  if (pthread_mutex_init(&dev->link_mutex, NULL) != 0) {
    okv_free(allocator, dev);
    return okv_status_make(OKV_STATUS_INTERNAL, "device: pthread_mutex_init failed for the emulated link");
  }
  dev->base.vtable = &cpu_vtable;
  dev->base.allocator = *allocator;
  cpu_fill_info(&dev->base.info, params->n_threads > 0 ? params->n_threads : cpu_online());
  dev->base.capacity_bytes[OKV_TIER_DEVICE] = OKV_CPU_DEFAULT_DEVICE_BYTES;
  /* hal/ validated the link values (finite, >= 0). */
  dev->link_bytes_per_s = params->link_bytes_per_s;
  dev->link_latency_s = params->link_latency_s;
  dev->base.info.link_bytes_per_s = params->link_bytes_per_s;
  dev->base.info.link_latency_s = params->link_latency_s;
  *out_device = &dev->base;
  return OKV_OK;
}

static void cpu_device_destroy(okv_hal_device_t *device) {
  okv_allocator_t a = device->allocator;
  pthread_mutex_destroy(&((okv_cpu_device_t *)device)->link_mutex);
  okv_free(&a, device);
}

static void cpu_set_link(okv_hal_device_t *device, double bytes_per_s, double latency_s) {
  okv_cpu_device_t *d = (okv_cpu_device_t *)device;
  pthread_mutex_lock(&d->link_mutex);
  d->link_bytes_per_s = bytes_per_s;
  d->link_latency_s = latency_s;
  pthread_mutex_unlock(&d->link_mutex);
}

const okv_hal_backend_t okv_cpu_backend = {
    .name = "cpu",
    .enumerate = cpu_enumerate,
    .create = cpu_create,
    .link_emulation = true,
};

/* ---- Buffers ---- */

static okv_status_t cpu_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                     okv_hal_buffer_t **out_buffer) {
  okv_cpu_buffer_t *buf = okv_calloc(&device->allocator, 1, sizeof(*buf));
  if (!buf) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a buffer object");
  void *mem = NULL;
  if (bytes >= OKV_CPU_MMAP_MIN_BYTES) {
    mem = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) mem = NULL;
#ifdef MADV_HUGEPAGE
    /* Transparent huge pages where the system allows them (advice only: failure changes nothing): a
     * prefill's first writes into the HOST tier fault 2 MiB pages instead of 4 KiB ones. */
    if (mem != NULL && bytes >= OKV_CPU_HUGEPAGE_MIN_BYTES) (void)madvise(mem, (size_t)bytes, MADV_HUGEPAGE);
#endif
    buf->mapped = mem != NULL;
    buf->map_bytes = (size_t)bytes;
  } else if (posix_memalign(&mem, OKV_CPU_ALIGN, (size_t)bytes) == 0) {
    memset(mem, 0, (size_t)bytes);
  } else {
    mem = NULL;
  }
  if (!mem) {
    okv_free(&device->allocator, buf);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s tier: the host could not provide %" PRIu64 " bytes",
                           okv_tier_name(tier), bytes);
  }
  buf->base.host_ptr = mem;
  buf->base.device_ptr = mem;
  buf->base.device = device;
  buf->base.tier = tier;
  buf->base.size = bytes;
  *out_buffer = &buf->base;
  return OKV_OK;
}

static void cpu_buffer_destroy(okv_hal_buffer_t *buffer) {
  okv_cpu_buffer_t *buf = (okv_cpu_buffer_t *)buffer;
  if (buf->mapped) {
    munmap(buffer->host_ptr, buf->map_bytes);
  } else {
    free(buffer->host_ptr);
  }
  okv_free(&buffer->device->allocator, buf);
}

static okv_status_t cpu_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes) {
  memcpy((unsigned char *)buffer->host_ptr + offset, src, (size_t)bytes);
  return OKV_OK;
}

static okv_status_t cpu_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes) {
  memcpy(dst, (const unsigned char *)buffer->host_ptr + offset, (size_t)bytes);
  return OKV_OK;
}

static unsigned char *cpu_ptr(okv_hal_buffer_t *b, uint64_t offset) {
  return b ? (unsigned char *)b->host_ptr + offset : NULL;
}

/* ---- Stream worker ---- */

/* Keeps the first unreported error of the stream; caller holds the stream mutex. */
static void cpu_stream_set_error_locked(okv_cpu_stream_t *s, okv_status_t err) {
  if (!err) return;
  if (s->pending_error) {
    okv_status_free(err);
  } else {
    s->pending_error = err;
  }
}

static void cpu_run_blocks(okv_cpu_op_t *op, int n_threads) {
  const unsigned char *src = cpu_ptr(op->bufs[0], 0);
  unsigned char *dst = cpu_ptr(op->bufs[1], 0);
  const okv_block_copy_t *pairs = op->pairs;
  const size_t bb = (size_t)op->block_bytes;
  const long n = (long)op->n_blocks;
  const bool same = op->bufs[0] == op->bufs[1];
#ifdef _OPENMP
#if defined(__SANITIZE_THREAD__)
  /* libgomp's barriers are invisible to ThreadSanitizer: under TSan the batch
   * runs serially so the reader's view stays checkable. */
  const bool parallel = false;
#else
  const bool parallel = (uint64_t)op->n_blocks * op->block_bytes > OKV_CPU_PARALLEL_COPY_BYTES && n > 1;
#endif
#pragma omp parallel for schedule(static) num_threads(n_threads) if (parallel)
#else
  (void)n_threads;
#endif
  for (long i = 0; i < n; ++i) {
    if (same) {
      memmove(dst + pairs[i].dst_offset, src + pairs[i].src_offset, bb);
    } else {
      memcpy(dst + pairs[i].dst_offset, src + pairs[i].src_offset, bb);
    }
  }
}

static void cpu_run_record(okv_cpu_stream_t *s, okv_cpu_op_t *op) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)op->event;
  pthread_mutex_lock(&s->mutex);
  okv_status_t err = s->pending_error;
  s->pending_error = OKV_OK;
  pthread_mutex_unlock(&s->mutex);

  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&ev->mutex);
  if (op->gen > ev->completed) ev->completed = op->gen;
  if (op->gen == ev->recorded) {
    ev->time = now;
    ev->has_time = true;
    okv_status_free(ev->error);
    ev->error = err;
    err = OKV_OK;
  }
  pthread_cond_broadcast(&ev->cond);
  pthread_mutex_unlock(&ev->mutex);

  if (err) {
    /* The event was re-recorded before this marker ran: the error belongs to
     * the stream's next record. */
    pthread_mutex_lock(&s->mutex);
    cpu_stream_set_error_locked(s, err);
    pthread_mutex_unlock(&s->mutex);
  }
}

static void cpu_run_wait(okv_cpu_op_t *op) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)op->event;
  pthread_mutex_lock(&ev->mutex);
  while (ev->completed < op->gen) pthread_cond_wait(&ev->cond, &ev->mutex);
  pthread_mutex_unlock(&ev->mutex);
}

/* ---- Emulated link ---- */

static double cpu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void cpu_sleep_until(double t) {
  struct timespec ts;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* The link interval of a copy op: false when the op is not paced (not
 * HOST<->DEVICE, or the link is unpaced); else reserves the direction's
 * engine for latency + bytes / bandwidth from max(now, engine free) and
 * writes that interval. */
static bool cpu_link_reserve(okv_cpu_stream_t *s, const okv_cpu_op_t *op, uint64_t bytes, double *start, double *end) {
  okv_tier_t src = op->bufs[0]->tier, dst = op->bufs[1]->tier;
  int dir;
  if (src == OKV_TIER_HOST && dst == OKV_TIER_DEVICE)
    dir = OKV_CPU_LINK_H2D;
  else if (src == OKV_TIER_DEVICE && dst == OKV_TIER_HOST)
    dir = OKV_CPU_LINK_D2H;
  else
    return false;
  okv_cpu_device_t *d = (okv_cpu_device_t *)s->base.device;
  pthread_mutex_lock(&d->link_mutex);
  bool paced = d->link_bytes_per_s > 0.0;
  if (paced) {
    double now = cpu_now_s();
    *start = d->link_free_at[dir] > now ? d->link_free_at[dir] : now;
    *end = *start + d->link_latency_s + (double)bytes / d->link_bytes_per_s;
    d->link_free_at[dir] = *end;
  }
  pthread_mutex_unlock(&d->link_mutex);
  return paced;
}

static int cpu_op_threads(const okv_cpu_stream_t *s) {
  int n_threads = s->base.device->n_threads;
#if defined(__SANITIZE_THREAD__)
  /* libgomp's fork/join barriers are invisible to ThreadSanitizer, which would
   * report every OpenMP region's writes as racing with the next reader. */
  n_threads = 1;
#endif
  return n_threads;
}

static void cpu_run_op(okv_cpu_stream_t *s, okv_cpu_op_t *op) {
  const int n_threads = cpu_op_threads(s);
  double start = 0.0, end = 0.0;
  bool paced = false;
  if (op->kind == OKV_CPU_OP_COPY || op->kind == OKV_CPU_OP_BLOCKS) {
    uint64_t bytes = op->kind == OKV_CPU_OP_COPY ? op->bytes : (uint64_t)op->n_blocks * op->block_bytes;
    paced = cpu_link_reserve(s, op, bytes, &start, &end);
    if (paced) cpu_sleep_until(start); /* another stream's copy holds this direction */
  }
  switch (op->kind) {
    case OKV_CPU_OP_COPY: {
      const unsigned char *src = cpu_ptr(op->bufs[0], op->src_offset);
      unsigned char *dst = cpu_ptr(op->bufs[1], op->dst_offset);
      memmove(dst, src, (size_t)op->bytes);
      break;
    }
    case OKV_CPU_OP_BLOCKS: cpu_run_blocks(op, n_threads); break;
    case OKV_CPU_OP_RECORD: cpu_run_record(s, op); break;
    case OKV_CPU_OP_WAIT: cpu_run_wait(op); break;
    case OKV_CPU_OP_FAIL:
      pthread_mutex_lock(&s->mutex);
      cpu_stream_set_error_locked(s, okv_status_make(op->code, "%s", op->message));
      pthread_mutex_unlock(&s->mutex);
      break;
    case OKV_CPU_OP_KERNEL: op->run(op, n_threads); break;
  }
  if (paced) cpu_sleep_until(end);
}

static void cpu_run_score(okv_cpu_op_t *op, int n_threads);
static void cpu_run_topk(okv_cpu_op_t *op, int n_threads);
static bool cpu_fusable(const okv_cpu_stream_t *s, const okv_cpu_op_t *op);
static void cpu_run_score_topk(okv_cpu_stream_t *s, okv_cpu_op_t *score, okv_cpu_op_t *topk);
static bool cpu_predict_fusable(const okv_cpu_stream_t *s, const okv_cpu_op_t *op);
static void cpu_run_predict(okv_cpu_stream_t *s, okv_cpu_op_t *op);

static void *cpu_stream_main(void *arg) {
  okv_cpu_stream_t *s = arg;
  pthread_mutex_lock(&s->mutex);
  for (;;) {
    while (!s->next_run && !s->stop) {
      s->sleeping = true;
      pthread_cond_wait(&s->work_cond, &s->mutex);
      s->sleeping = false;
    }
    if (!s->next_run) break; /* stop requested and the queue is drained */
    okv_cpu_op_t *op = s->next_run;
    /* A c4 scoring call whose top-K is queued right behind it runs fused with it (cpu_run_score_topk): both
     * finish together, as they would one after the other. */
    okv_cpu_op_t *last = op;
    if (cpu_fusable(s, op)) last = cpu_predict_fusable(s, op) ? op->next->next->next : op->next;
    pthread_mutex_unlock(&s->mutex);
    if (last == op)
      cpu_run_op(s, op);
    else if (last == op->next)
      cpu_run_score_topk(s, op, last);
    else
      cpu_run_predict(s, op);
    pthread_mutex_lock(&s->mutex);
    s->next_run = last->next;
    s->n_done = last->seq;
    /* Waking a synchronize for every finished op would cost it a wake-up per op (a system call and a context
     * switch each): only when the queue ran dry, or when some thread waits for one op. */
    if (!s->next_run || s->seq_waiters > 0) pthread_cond_broadcast(&s->idle_cond);
  }
  pthread_mutex_unlock(&s->mutex);
  return NULL;
}

/* Frees a finished (or never enqueued) op: releases what it retained; an op of its stream's slab goes back
 * to the stream's pool. Runs on an API thread, never on the worker. */
static void cpu_op_free(const okv_allocator_t *a, okv_cpu_op_t *op) {
  for (int i = 0; i < op->n_bufs; ++i) OKV_IGNORE_ERROR(okv_hal_buffer_release(op->bufs[i]));
  if (op->event) OKV_IGNORE_ERROR(okv_hal_event_release(op->event));
  if (op->free_payload) op->free_payload(a, op->payload);
  for (int i = 0; i < 3; ++i) okv_free(a, op->arrays[i]);
  okv_free(a, op->pairs);
  okv_cpu_stream_t *s = op->stream;
  if (s != NULL && op >= s->op_slab && op < s->op_slab + CPU_OP_POOL) {
    pthread_mutex_lock(&s->mutex);
    op->next = s->op_pool;
    s->op_pool = op;
    pthread_mutex_unlock(&s->mutex);
    return;
  }
  okv_free(a, op);
}

/* Reclaims every finished op of the stream. */
static void cpu_stream_reclaim(okv_cpu_stream_t *s) {
  pthread_mutex_lock(&s->mutex);
  okv_cpu_op_t *done = s->first, *stop_at = s->next_run;
  if (done == stop_at) {
    pthread_mutex_unlock(&s->mutex);
    return;
  }
  s->first = stop_at;
  if (!stop_at) s->last = NULL;
  pthread_mutex_unlock(&s->mutex);
  const okv_allocator_t *a = &s->base.device->allocator;
  while (done != stop_at) {
    okv_cpu_op_t *next = done->next;
    cpu_op_free(a, done);
    done = next;
  }
}

static okv_cpu_op_t *cpu_op_new(okv_hal_stream_t *stream, okv_cpu_op_kind_t kind) {
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  pthread_mutex_lock(&s->mutex);
  okv_cpu_op_t *op = s->op_pool;
  if (op != NULL) s->op_pool = op->next;
  pthread_mutex_unlock(&s->mutex);
  if (op != NULL)
    memset(op, 0, sizeof *op);
  else
    op = okv_calloc(&stream->device->allocator, 1, sizeof(*op));
  if (op) {
    op->kind = kind;
    op->stream = (okv_cpu_stream_t *)stream;
  }
  return op;
}

static okv_status_t cpu_op_oom(const char *what) {
  return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate the %s operation", what);
}

/* Retains `b` into op->bufs (NULL is skipped). */
static okv_status_t cpu_op_hold(okv_cpu_op_t *op, okv_hal_buffer_t *b) {
  if (!b) return OKV_OK;
  OKV_RETURN_IF_ERROR(okv_hal_buffer_retain(b));
  op->bufs[op->n_bufs++] = b;
  return OKV_OK;
}

static uint64_t cpu_enqueue(okv_hal_stream_t *stream, okv_cpu_op_t *op) {
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  cpu_stream_reclaim(s);
  pthread_mutex_lock(&s->mutex);
  op->next = NULL;
  op->seq = ++s->n_enqueued;
  if (s->last) {
    s->last->next = op;
  } else {
    s->first = op;
  }
  s->last = op;
  if (!s->next_run) s->next_run = op;
  uint64_t seq = op->seq;
  /* Only a sleeping worker needs the signal, sent after the unlock (the woken worker does not at once block
   * on the mutex); inside a batch it is deferred to the batch's end or the first wait (cpu_stream_start). */
  bool wake = false;
  if (s->sleeping) {
    if (s->batched) {
      s->wake_deferred = true;
    } else {
      s->sleeping = false;
      wake = true;
    }
  }
  pthread_mutex_unlock(&s->mutex);
  if (wake) pthread_cond_signal(&s->work_cond);
  return seq;
}

/* Starts the work a batch holds back (the caller holds s->mutex): returns whether the worker must be
 * signalled (after the unlock). */
static bool cpu_stream_start_locked(okv_cpu_stream_t *s) {
  if (!s->wake_deferred) return false;
  s->wake_deferred = false;
  if (!s->sleeping) return false;
  s->sleeping = false;
  return true;
}

static void cpu_stream_start(okv_cpu_stream_t *s) {
  pthread_mutex_lock(&s->mutex);
  bool wake = cpu_stream_start_locked(s);
  pthread_mutex_unlock(&s->mutex);
  if (wake) pthread_cond_signal(&s->work_cond);
}

static void cpu_stream_batch(okv_hal_stream_t *stream, bool open) {
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  pthread_mutex_lock(&s->mutex);
  s->batched = open;
  bool wake = !open && cpu_stream_start_locked(s);
  pthread_mutex_unlock(&s->mutex);
  if (wake) pthread_cond_signal(&s->work_cond);
}

/* Holds every buffer listed (NULLs skipped) and enqueues op; when `s` (an
 * earlier step of building op) or a hold fails, frees op and returns the error. */
static okv_status_t cpu_submit(okv_hal_stream_t *stream, okv_cpu_op_t *op, okv_status_t s,
                               okv_hal_buffer_t *const *bufs, int n) {
  for (int i = 0; i < n && s == OKV_OK; ++i) s = cpu_op_hold(op, bufs[i]);
  if (s != OKV_OK) {
    cpu_op_free(&stream->device->allocator, op);
    return s;
  }
  cpu_enqueue(stream, op);
  return OKV_OK;
}

/* A RECORD or WAIT op on `event` (retained); not yet enqueued. */
static okv_status_t cpu_event_op(okv_hal_stream_t *stream, okv_cpu_op_kind_t kind, okv_hal_event_t *event,
                                 const char *what, okv_cpu_op_t **out_op) {
  okv_cpu_op_t *op = cpu_op_new(stream, kind);
  if (!op) return cpu_op_oom(what);
  okv_status_t s = okv_hal_event_retain(event);
  if (s != OKV_OK) {
    cpu_op_free(&stream->device->allocator, op);
    return s;
  }
  op->event = event;
  *out_op = op;
  return OKV_OK;
}

/* ---- Streams ---- */

static okv_status_t cpu_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream) {
  okv_cpu_stream_t *s = okv_calloc(&device->allocator, 1, sizeof(*s));
  if (!s) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a stream");
  s->op_slab = okv_calloc(&device->allocator, CPU_OP_POOL, sizeof(okv_cpu_op_t));
  if (!s->op_slab) {
    okv_free(&device->allocator, s);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a stream's operations");
  }
  for (int i = CPU_OP_POOL; i-- > 0;) {
    s->op_slab[i].next = s->op_pool;
    s->op_pool = &s->op_slab[i];
  }
  s->base.device = device;
  s->id = atomic_fetch_add(&cpu_next_stream_id, 1);
  if (pthread_mutex_init(&s->mutex, NULL) != 0) goto fail_mutex;
  if (pthread_cond_init(&s->work_cond, NULL) != 0) goto fail_work;
  if (pthread_cond_init(&s->idle_cond, NULL) != 0) goto fail_idle;
  int rc = pthread_create(&s->thread, NULL, cpu_stream_main, s);
  if (rc != 0) {
    pthread_cond_destroy(&s->idle_cond);
    pthread_cond_destroy(&s->work_cond);
    pthread_mutex_destroy(&s->mutex);
    okv_free(&device->allocator, s->op_slab);
    okv_free(&device->allocator, s);
    return okv_status_make(rc == EAGAIN ? OKV_STATUS_OUT_OF_MEMORY : OKV_STATUS_INTERNAL,
                           "stream: could not start its worker thread (%s)", strerror(rc));
  }
  *out_stream = &s->base;
  return OKV_OK;
fail_idle:
  pthread_cond_destroy(&s->work_cond);
fail_work:
  pthread_mutex_destroy(&s->mutex);
fail_mutex:
  okv_free(&device->allocator, s->op_slab);
  okv_free(&device->allocator, s);
  return okv_status_make(OKV_STATUS_INTERNAL, "stream: could not initialise its mutex/condition variables");
}

static void cpu_stream_destroy(okv_hal_stream_t *stream) {
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  pthread_mutex_lock(&s->mutex);
  s->stop = true;
  pthread_cond_signal(&s->work_cond);
  pthread_mutex_unlock(&s->mutex);
  pthread_join(s->thread, NULL); /* the worker drains the queue first */
  cpu_stream_reclaim(s);
  okv_free(&stream->device->allocator, s->op_slab);
  okv_free(&stream->device->allocator, s->scratch);
  okv_status_free(s->pending_error);
  pthread_cond_destroy(&s->idle_cond);
  pthread_cond_destroy(&s->work_cond);
  pthread_mutex_destroy(&s->mutex);
  okv_free(&stream->device->allocator, s);
}

static okv_status_t cpu_stream_synchronize(okv_hal_stream_t *stream) {
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  cpu_stream_start(s); /* a batch's work is waited for (signalled before this thread takes the mutex to wait) */
  pthread_mutex_lock(&s->mutex);
  while (s->next_run) pthread_cond_wait(&s->idle_cond, &s->mutex);
  okv_status_t err = s->pending_error;
  s->pending_error = OKV_OK;
  pthread_mutex_unlock(&s->mutex);
  cpu_stream_reclaim(s);
  return err;
}

static okv_status_t cpu_enqueue_failure(okv_hal_stream_t *stream, okv_status_code_t code, const char *message) {
  okv_cpu_op_t *op = cpu_op_new(stream, OKV_CPU_OP_FAIL);
  if (!op) return cpu_op_oom("failure");
  op->code = code;
  snprintf(op->message, sizeof(op->message), "%s", message ? message : "asynchronous failure");
  cpu_enqueue(stream, op);
  return OKV_OK;
}

/* ---- Events ---- */

static okv_status_t cpu_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event) {
  okv_cpu_event_t *ev = okv_calloc(&device->allocator, 1, sizeof(*ev));
  if (!ev) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate an event");
  ev->base.device = device;
  if (pthread_mutex_init(&ev->mutex, NULL) != 0) {
    okv_free(&device->allocator, ev);
    return okv_status_make(OKV_STATUS_INTERNAL, "event: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&ev->cond, NULL) != 0) {
    pthread_mutex_destroy(&ev->mutex);
    okv_free(&device->allocator, ev);
    return okv_status_make(OKV_STATUS_INTERNAL, "event: pthread_cond_init failed");
  }
  *out_event = &ev->base;
  return OKV_OK;
}

static void cpu_event_destroy(okv_hal_event_t *event) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  okv_status_free(ev->error);
  pthread_cond_destroy(&ev->cond);
  pthread_mutex_destroy(&ev->mutex);
  okv_free(&event->device->allocator, ev);
}

static okv_status_t cpu_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  okv_cpu_op_t *op = NULL;
  OKV_RETURN_IF_ERROR(cpu_event_op(stream, OKV_CPU_OP_RECORD, event, "event record", &op));
  pthread_mutex_lock(&ev->mutex);
  op->gen = ++ev->recorded;
  ev->has_time = false;
  okv_status_free(ev->error);
  ev->error = OKV_OK;
  /* The stream is known before the op is enqueued, so that a wait in between starts it if a batch holds it
   * (cpu_event_start_stream); its seq only after (0 until then: a reclaim waits for nothing). */
  ev->last_stream = stream;
  ev->last_stream_id = ((okv_cpu_stream_t *)stream)->id;
  ev->last_seq = 0;
  pthread_mutex_unlock(&ev->mutex);
  uint64_t gen = op->gen;
  uint64_t seq = cpu_enqueue(stream, op); /* op may be reclaimed from here on */
  pthread_mutex_lock(&ev->mutex);
  if (ev->recorded == gen) ev->last_seq = seq;
  pthread_mutex_unlock(&ev->mutex);
  return OKV_OK;
}

/* A copy of the event's captured error; caller holds ev->mutex. */
static okv_status_t cpu_event_error_locked(okv_cpu_event_t *ev) {
  if (!ev->error) return OKV_OK;
  return okv_status_make(okv_status_code(ev->error), "%s", okv_status_message(ev->error));
}

/* Once a host thread has seen `ev` complete, reclaims the finished ops of the
 * stream it was recorded on (up to and including the record), so the buffers
 * they held are released as soon as the caller knows the work ran. The stream
 * may have been released meanwhile: it is looked up through the registry. */
static void cpu_event_reclaim(okv_cpu_event_t *ev) {
  pthread_mutex_lock(&ev->mutex);
  okv_hal_stream_t *stream = ev->last_stream;
  uint64_t id = ev->last_stream_id, seq = ev->last_seq;
  pthread_mutex_unlock(&ev->mutex);
  if (!stream || okv_status_consume(okv_hal_stream_retain(stream)) != OKV_STATUS_OK) return;
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  pthread_mutex_lock(&s->mutex);
  /* The record op finishes right after stamping the event. The address may
   * belong to a newer stream by now: then there is nothing of ours to reclaim. */
  bool ours = s->id == id;
  if (ours && s->n_done < seq) {
    s->seq_waiters++;
    while (s->n_done < seq) pthread_cond_wait(&s->idle_cond, &s->mutex);
    s->seq_waiters--;
  }
  pthread_mutex_unlock(&s->mutex);
  cpu_stream_reclaim(s);
  OKV_IGNORE_ERROR(okv_hal_stream_release(stream));
}

/* Starts the work a batch holds back on the stream of the event's latest record (which may be gone by now:
 * looked up through the registry as in cpu_event_reclaim), so that a wait for the event cannot wait for the
 * batch's end. */
static void cpu_event_start_stream(okv_cpu_event_t *ev) {
  pthread_mutex_lock(&ev->mutex);
  okv_hal_stream_t *stream = ev->completed < ev->recorded ? ev->last_stream : NULL;
  uint64_t id = ev->last_stream_id;
  pthread_mutex_unlock(&ev->mutex);
  if (!stream || okv_status_consume(okv_hal_stream_retain(stream)) != OKV_STATUS_OK) return;
  okv_cpu_stream_t *s = (okv_cpu_stream_t *)stream;
  if (s->id == id) cpu_stream_start(s);
  OKV_IGNORE_ERROR(okv_hal_stream_release(stream));
}

static okv_status_t cpu_event_query(okv_hal_event_t *event, bool *out_done) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  cpu_event_start_stream(ev); /* a caller polling for the event gets it without ending the batch */
  pthread_mutex_lock(&ev->mutex);
  bool done = ev->completed >= ev->recorded;
  okv_status_t s = done ? cpu_event_error_locked(ev) : OKV_OK;
  pthread_mutex_unlock(&ev->mutex);
  if (done) cpu_event_reclaim(ev);
  *out_done = done;
  return s;
}

static okv_status_t cpu_event_wait(okv_hal_event_t *event) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  cpu_event_start_stream(ev);
  pthread_mutex_lock(&ev->mutex);
  while (ev->completed < ev->recorded) pthread_cond_wait(&ev->cond, &ev->mutex);
  okv_status_t s = cpu_event_error_locked(ev);
  pthread_mutex_unlock(&ev->mutex);
  cpu_event_reclaim(ev);
  return s;
}

static okv_status_t cpu_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  pthread_mutex_lock(&ev->mutex);
  uint64_t gen = ev->recorded;
  bool done = ev->completed >= gen;
  pthread_mutex_unlock(&ev->mutex);
  if (done) return OKV_OK;    /* nothing to wait for */
  cpu_event_start_stream(ev); /* this stream's worker would otherwise wait for the other stream's batch */
  okv_cpu_op_t *op = NULL;
  OKV_RETURN_IF_ERROR(cpu_event_op(stream, OKV_CPU_OP_WAIT, event, "stream wait", &op));
  op->gen = gen;
  cpu_enqueue(stream, op);
  return OKV_OK;
}

/* Completion time of a done event; caller must not hold its mutex. */
static okv_status_t cpu_event_time(okv_hal_event_t *event, const char *arg, struct timespec *out) {
  okv_cpu_event_t *ev = (okv_cpu_event_t *)event;
  pthread_mutex_lock(&ev->mutex);
  bool done = ev->completed >= ev->recorded, has = ev->has_time;
  *out = ev->time;
  pthread_mutex_unlock(&ev->mutex);
  if (!done) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: the event has not completed yet", arg);
  if (!has) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: the event was never recorded", arg);
  return OKV_OK;
}

static okv_status_t cpu_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds) {
  struct timespec t0, t1;
  OKV_RETURN_IF_ERROR(cpu_event_time(start, "start", &t0));
  OKV_RETURN_IF_ERROR(cpu_event_time(end, "end", &t1));
  *out_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return OKV_OK;
}

/* ---- Copies ---- */

static okv_status_t cpu_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                             okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes) {
  okv_cpu_op_t *op = cpu_op_new(stream, OKV_CPU_OP_COPY);
  if (!op) return cpu_op_oom("copy");
  op->src_offset = src_offset;
  op->dst_offset = dst_offset;
  op->bytes = bytes;
  okv_hal_buffer_t *bufs[2] = {src, dst}; /* bufs[0] -> bufs[1] */
  return cpu_submit(stream, op, OKV_OK, bufs, 2);
}

static okv_status_t cpu_copy_blocks(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                    uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs) {
  const okv_allocator_t *a = &stream->device->allocator;
  if (n_blocks > SIZE_MAX / sizeof(okv_block_copy_t))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "n_blocks: %zu is too large", n_blocks);
  okv_cpu_op_t *op = cpu_op_new(stream, OKV_CPU_OP_BLOCKS);
  if (!op) return cpu_op_oom("block copy");
  op->pairs = okv_malloc(a, n_blocks * sizeof(okv_block_copy_t));
  if (op->pairs) memcpy(op->pairs, pairs, n_blocks * sizeof(okv_block_copy_t));
  op->block_bytes = block_bytes;
  op->n_blocks = n_blocks;
  okv_hal_buffer_t *bufs[2] = {src, dst}; /* bufs[0] -> bufs[1] */
  return cpu_submit(stream, op, op->pairs ? OKV_OK : cpu_op_oom("block copy pair list of the"), bufs, 2);
}

/* ---- Kernels: clone the descriptor, retain its buffers, run on the worker ---- */

/* A KERNEL op running run(op) on the worker around `payload` (a descriptor
 * clone, freed with the op by free_payload), holding the buffers listed. */
static okv_status_t cpu_kernel_enqueue(okv_hal_stream_t *stream, const char *what, void *payload,
                                       void (*run)(okv_cpu_op_t *op, int n_threads),
                                       void (*free_payload)(const okv_allocator_t *a, void *payload),
                                       okv_hal_buffer_t *const *bufs, int n) {
  okv_cpu_op_t *op = cpu_op_new(stream, OKV_CPU_OP_KERNEL);
  if (!op) {
    free_payload(&stream->device->allocator, payload);
    return cpu_op_oom(what);
  }
  op->payload = payload;
  op->run = run;
  op->free_payload = free_payload;
  return cpu_submit(stream, op, OKV_OK, bufs, n);
}

/* cpu_<kind>_enqueue for the descriptor kernels: clones the descriptor
 * (okv_<kind>_desc_clone), holds the buffers listed (expressions of the clone
 * `c`) and runs cpu_run_<kind> on the worker. */
#define OKV_CPU_DESC_KERNEL(kind, what, n_bufs, ...)                                                           \
  static void cpu_free_##kind(const okv_allocator_t *a, void *payload) { okv_##kind##_desc_free(a, payload); } \
  static okv_status_t cpu_##kind##_enqueue(okv_hal_stream_t *stream, const okv_##kind##_desc_t *desc) {        \
    okv_##kind##_desc_t *c = NULL;                                                                             \
    OKV_RETURN_IF_ERROR(okv_##kind##_desc_clone(&stream->device->allocator, desc, &c));                        \
    okv_hal_buffer_t *bufs[n_bufs] = {__VA_ARGS__};                                                            \
    return cpu_kernel_enqueue(stream, what, c, cpu_run_##kind, cpu_free_##kind, bufs, n_bufs);                 \
  }

/* The stream's scratch grown to `need` bytes (only its worker touches it); false with the stream's error set
 * when the host allocator fails. */
static bool cpu_stream_scratch(okv_cpu_stream_t *s, size_t need, const char *what) {
  if (need <= s->scratch_bytes) return true;
  const okv_allocator_t *a = &s->base.device->allocator;
  okv_free(a, s->scratch);
  s->scratch = okv_malloc(a, need);
  s->scratch_bytes = s->scratch ? need : 0;
  if (s->scratch != NULL) return true;
  pthread_mutex_lock(&s->mutex);
  cpu_stream_set_error_locked(s,
                              okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: %zu bytes of %s scratch", need, what));
  pthread_mutex_unlock(&s->mutex);
  return false;
}

static void cpu_run_attention(okv_cpu_op_t *op, int n_threads) {
  const okv_attention_desc_t *d = op->payload;
  okv_attention_desc_t wd;
  if (d->tables != NULL) { /* table mode: the working sets read from the tables here, on the device */
    if (!cpu_stream_scratch(op->stream, okv_cpu_attention_tables_scratch_bytes(d), "attention working set")) return;
    okv_cpu_attention_tables_ws(d, cpu_ptr(d->tables, d->tables_offset),
                                (const uint32_t *)cpu_ptr(d->slot_map, d->slot_map_offset), op->stream->scratch, &wd);
    d = &wd;
  }
  okv_cpu_attention(d, cpu_ptr(d->kv_pool, 0), (const float *)cpu_ptr(d->q, d->q_offset),
                    (const float *)cpu_ptr(d->inflight_kv, d->inflight_offset), (float *)cpu_ptr(d->out, d->out_offset),
                    (float *)cpu_ptr(d->block_mass, d->mass_offset), n_threads);
}
OKV_CPU_DESC_KERNEL(attention, "attention", 7, c->kv_pool, c->q, c->inflight_kv, c->out, c->block_mass, c->tables,
                    c->slot_map)

static void cpu_run_summary(okv_cpu_op_t *op, int n_threads) {
  const okv_summary_desc_t *d = op->payload;
  okv_cpu_summarize_blocks(d, cpu_ptr(d->kv, 0), (float *)cpu_ptr(d->summaries, 0), n_threads);
}
OKV_CPU_DESC_KERNEL(summary, "block summary", 2, c->kv, c->summaries)

static void cpu_run_score(okv_cpu_op_t *op, int n_threads) {
  const okv_score_desc_t *d = op->payload;
  const float *q = (const float *)cpu_ptr(d->q, d->q_offset);
  float *scores = (float *)cpu_ptr(d->scores, 0);
  if (d->list_blocks == NULL) {
    okv_cpu_score_blocks(d, q, cpu_ptr(d->summaries, 0), scores, n_threads);
    return;
  }
  /* Candidate lists, read on the device (here): with f32 / f16 / bf16 summaries scored per segment directly;
   * with 8- or 4-bit ones turned into ranges of contiguous summaries and scored as such (the ranges live in
   * the stream's scratch, which only this worker touches, so no call allocates). */
  const uint32_t *list = (const uint32_t *)cpu_ptr(d->list_blocks, d->list_offset);
  if (okv_cpu_score_list_direct(d)) {
    okv_cpu_score_list(d, q, cpu_ptr(d->summaries, 0), list, scores, n_threads);
    return;
  }
  okv_cpu_stream_t *s = op->stream;
  if (!cpu_stream_scratch(s, okv_cpu_score_list_scratch_bytes(d), "scoring list")) return;
  okv_score_desc_t rd;
  okv_cpu_score_list_ranges(d, list, scores, s->scratch, &rd);
  if (rd.n_ranges > 0) okv_cpu_score_blocks(&rd, q, cpu_ptr(d->summaries, 0), scores, n_threads);
}
OKV_CPU_DESC_KERNEL(score, "block scoring", 4, c->q, c->summaries, c->scores, c->list_blocks)

static void cpu_run_topk(okv_cpu_op_t *op, int n_threads) {
  const okv_topk_desc_t *d = op->payload;
  okv_topk_desc_t t = *d;
  if (d->index_map_buffer != NULL) t.index_map = (const uint32_t *)cpu_ptr(d->index_map_buffer, d->index_map_offset);
  okv_cpu_topk(&t, (const float *)cpu_ptr(d->scores, 0), (uint32_t *)cpu_ptr(d->out_indices, d->out_offset),
               (uint32_t *)cpu_ptr(d->out_counts, d->counts_offset), n_threads);
}
OKV_CPU_DESC_KERNEL(topk, "top-K", 4, c->scores, c->out_indices, c->out_counts, c->index_map_buffer)

/* op (queued on s, the worker holding s's mutex) and the op behind it are a c4 scoring call by ranges and a
 * top-K of the same scores buffer that okv_cpu_score_topk can run as one. */
static bool cpu_fusable(const okv_cpu_stream_t *s, const okv_cpu_op_t *op) {
  const okv_cpu_op_t *next = op->next;
  if (op->kind != OKV_CPU_OP_KERNEL || op->run != cpu_run_score || next == NULL || next->kind != OKV_CPU_OP_KERNEL ||
      next->run != cpu_run_topk)
    return false;
  const okv_score_desc_t *sd = op->payload;
  const okv_topk_desc_t *td = next->payload;
  if (sd->list_blocks != NULL || td->index_map_buffer != NULL || td->scores != sd->scores) return false;
  return okv_cpu_score_topk_fusable(sd, td, cpu_op_threads(s));
}

static void cpu_run_score_topk(okv_cpu_stream_t *s, okv_cpu_op_t *score, okv_cpu_op_t *topk) {
  const okv_score_desc_t *sd = score->payload;
  const okv_topk_desc_t *td = topk->payload;
  okv_cpu_score_topk(sd, (const float *)cpu_ptr(sd->q, sd->q_offset), cpu_ptr(sd->summaries, 0),
                     (float *)cpu_ptr(sd->scores, 0), td, (uint32_t *)cpu_ptr(td->out_indices, td->out_offset),
                     (uint32_t *)cpu_ptr(td->out_counts, td->counts_offset), cpu_op_threads(s));
}

/* op and op->next fusable (cpu_fusable), and the two ops behind them the exact pass over op->next's output as
 * lists and the top-K through it as its index map: the whole prediction that okv_cpu_predict runs as one. */
static bool cpu_predict_fusable(const okv_cpu_stream_t *s, const okv_cpu_op_t *op) {
  const okv_cpu_op_t *o2 = op->next->next, *o3 = o2 != NULL ? o2->next : NULL;
  if (o2 == NULL || o3 == NULL || o2->kind != OKV_CPU_OP_KERNEL || o2->run != cpu_run_score ||
      o3->kind != OKV_CPU_OP_KERNEL || o3->run != cpu_run_topk)
    return false;
  const okv_score_desc_t *sd = op->payload, *sd2 = o2->payload;
  const okv_topk_desc_t *td = op->next->payload, *td2 = o3->payload;
  /* the lists and the index map are the candidates; the second scores, both outputs and the candidates apart */
  if (sd2->list_blocks != td->out_indices || sd2->list_offset != td->out_offset ||
      td2->index_map_buffer != td->out_indices || td2->index_map_offset != td->out_offset || td2->scores != sd2->scores)
    return false;
  const okv_hal_buffer_t *bufs[6] = {sd->scores,  td->out_indices,  td->out_counts,
                                     sd2->scores, td2->out_indices, td2->out_counts};
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++)
      if (bufs[i] != NULL && bufs[i] == bufs[j]) return false;
  okv_cpu_predict_t p = {.sd = sd, .td = td, .sd2 = sd2, .td2 = td2};
  return okv_cpu_predict_fusable(&p, cpu_op_threads(s));
}

static void cpu_run_predict(okv_cpu_stream_t *s, okv_cpu_op_t *op) {
  const okv_cpu_op_t *o2 = op->next->next, *o3 = o2->next;
  const okv_score_desc_t *sd = op->payload, *sd2 = o2->payload;
  const okv_topk_desc_t *td = op->next->payload, *td2 = o3->payload;
  const okv_cpu_predict_t p = {.sd = sd,
                               .q = (const float *)cpu_ptr(sd->q, sd->q_offset),
                               .summaries = cpu_ptr(sd->summaries, 0),
                               .scores = (float *)cpu_ptr(sd->scores, 0),
                               .td = td,
                               .cand = (uint32_t *)cpu_ptr(td->out_indices, td->out_offset),
                               .cand_counts = (uint32_t *)cpu_ptr(td->out_counts, td->counts_offset),
                               .sd2 = sd2,
                               .q2 = (const float *)cpu_ptr(sd2->q, sd2->q_offset),
                               .summaries2 = cpu_ptr(sd2->summaries, 0),
                               .scores2 = (float *)cpu_ptr(sd2->scores, 0),
                               .td2 = td2,
                               .out = (uint32_t *)cpu_ptr(td2->out_indices, td2->out_offset),
                               .out_counts = (uint32_t *)cpu_ptr(td2->out_counts, td2->counts_offset)};
  okv_cpu_predict(&p, cpu_op_threads(s));
}

static void cpu_run_summary_reduce(okv_cpu_op_t *op, int n_threads) {
  const okv_summary_reduce_desc_t *d = op->payload;
  okv_cpu_summary_reduce(d, cpu_ptr(d->src, 0), cpu_ptr(d->dst, 0), n_threads);
}
OKV_CPU_DESC_KERNEL(summary_reduce, "summary reduce", 2, c->src, c->dst)

static void cpu_run_kv_write(okv_cpu_op_t *op, int n_threads) {
  (void)n_threads;
  const okv_kv_write_desc_t *d = op->payload;
  okv_cpu_kv_write(d, cpu_ptr(d->kv, 0));
}
OKV_CPU_DESC_KERNEL(kv_write, "token write", 1, c->kv)

static void cpu_run_select(okv_cpu_op_t *op, int n_threads) {
  const okv_select_desc_t *d = op->payload;
  okv_cpu_select(d, cpu_ptr(d->table, d->table_offset), (const uint32_t *)cpu_ptr(d->predicted, d->predicted_offset),
                 (const uint32_t *)cpu_ptr(d->predicted_counts, d->counts_offset),
                 (uint32_t *)cpu_ptr(d->plan, d->plan_offset), (uint32_t *)cpu_ptr(d->result, d->result_offset),
                 n_threads);
}
OKV_CPU_DESC_KERNEL(select, "selection", 5, c->table, c->predicted, c->predicted_counts, c->plan, c->result)

static void cpu_run_slot_commit(okv_cpu_op_t *op, int n_threads) {
  (void)n_threads;
  const okv_slot_commit_desc_t *d = op->payload;
  okv_cpu_slot_commit(d, cpu_ptr(d->table, d->table_offset), (const uint32_t *)cpu_ptr(d->plan, d->plan_offset),
                      (const uint32_t *)cpu_ptr(d->result, d->result_offset));
}
OKV_CPU_DESC_KERNEL(slot_commit, "slot commit", 3, c->table, c->plan, c->result)

/* Append with any summary dtype: the descriptor clone (keys included) runs on the worker. */
static void cpu_run_summary_append_ex(okv_cpu_op_t *op, int n_threads) {
  (void)n_threads;
  const okv_summary_append_desc_t *d = op->payload;
  okv_cpu_summary_append_ex(d, cpu_ptr(d->summaries, 0));
}

static void cpu_free_summary_append_ex(const okv_allocator_t *a, void *payload) {
  okv_summary_append_desc_free(a, payload);
}

static okv_status_t cpu_summary_append_ex_enqueue(okv_hal_stream_t *stream, const okv_summary_append_desc_t *desc) {
  okv_summary_append_desc_t *c = NULL;
  OKV_RETURN_IF_ERROR(okv_summary_append_desc_clone(&stream->device->allocator, desc, &c));
  okv_hal_buffer_t *bufs[1] = {c->summaries};
  return cpu_kernel_enqueue(stream, "summary append", c, cpu_run_summary_append_ex, cpu_free_summary_append_ex, bufs,
                            1);
}

static void cpu_run_summary_append(okv_cpu_op_t *op, int n_threads) {
  (void)n_threads;
  okv_cpu_summary_append((float *)cpu_ptr(op->bufs[0], 0), op->head_dim, op->dtype, op->n,
                         (const uint64_t *)op->arrays[0], (const float *)op->arrays[1], (const uint8_t *)op->arrays[2]);
}

static okv_status_t cpu_summary_append_enqueue(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                               okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index,
                                               const float *keys, const uint8_t *first) {
  if (n == 0) return OKV_OK;
  const okv_allocator_t *a = &stream->device->allocator;
  okv_cpu_op_t *op = cpu_op_new(stream, OKV_CPU_OP_KERNEL);
  if (!op) return cpu_op_oom("summary append");
  size_t n_keys = (size_t)n * head_dim;
  op->arrays[0] = okv_malloc(a, (size_t)n * sizeof(uint64_t));
  op->arrays[1] = okv_malloc(a, n_keys * sizeof(float));
  op->arrays[2] = first ? okv_malloc(a, n) : NULL;
  const bool ok = op->arrays[0] && op->arrays[1] && (!first || op->arrays[2]);
  if (ok) {
    memcpy(op->arrays[0], summary_index, (size_t)n * sizeof(uint64_t));
    memcpy(op->arrays[1], keys, n_keys * sizeof(float));
    if (first) memcpy(op->arrays[2], first, n);
  }
  op->head_dim = head_dim;
  op->dtype = kv_dtype;
  op->n = n;
  op->run = cpu_run_summary_append;
  okv_hal_buffer_t *bufs[1] = {summaries};
  return cpu_submit(stream, op, ok ? OKV_OK : cpu_op_oom("summary append"), bufs, 1);
}

static const okv_hal_device_vtable_t cpu_vtable = {
    .device_destroy = cpu_device_destroy,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_destroy = cpu_buffer_destroy,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_batch = cpu_stream_batch,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_wait = cpu_event_wait,
    .stream_wait_event = cpu_stream_wait_event,
    .event_elapsed = cpu_event_elapsed,
    .copy = cpu_copy,
    .copy_blocks = cpu_copy_blocks,
    .enqueue_failure = cpu_enqueue_failure,
    .attention = cpu_attention_enqueue,
    .summarize_blocks = cpu_summary_enqueue,
    .summary_append = cpu_summary_append_enqueue,
    .score_blocks = cpu_score_enqueue,
    .topk = cpu_topk_enqueue,
    .summary_append_ex = cpu_summary_append_ex_enqueue,
    .summary_reduce = cpu_summary_reduce_enqueue,
    .kv_write = cpu_kv_write_enqueue,
    .select = cpu_select_enqueue,
    .slot_commit = cpu_slot_commit_enqueue,
    .set_link = cpu_set_link,
};
