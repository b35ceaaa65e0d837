/* A small CPU emulator of the GPU execution model, used only by
 * tests/kernels/test_gpu_emulated.cc to run kernels/okv_kernels.cu unchanged
 * on a machine without a GPU (compat mode OKV_GPU_EMULATE, host C++).
 *
 * Each thread block runs as one fiber (ucontext) per GPU thread on the calling
 * OS thread. __syncthreads() and the warp primitives (shuffle, ballot) are
 * barriers: a fiber arriving early yields to the next runnable one. Function
 * scope __shared__ variables become statics (one block runs at a time), so
 * they are shared by the block's fibers exactly like shared memory. Atomics are
 * plain read-modify-writes (fibers never interleave between barriers). A block
 * in which some fibers wait at a barrier that the others never reach is
 * reported as a deadlock (divergent __syncthreads). The warp size is
 * OKV_EMU_WARP (32 or 64), so both wavefront widths are exercised.
 * A fiber starts with setcontext and then switches with _setjmp/_longjmp
 * (no signal-mask system call per switch); build without _FORTIFY_SOURCE,
 * whose longjmp check rejects jumps between stacks.
 *
 * Not thread-safe; not part of the library. */
#ifndef OASISKV_GPU_EMULATOR_H
#define OASISKV_GPU_EMULATOR_H

#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#ifndef OKV_EMU_WARP
#define OKV_EMU_WARP 32
#endif
#define OKV_WARP_SIZE OKV_EMU_WARP

struct okv_emu_dim3 {
  unsigned x, y, z;
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct uint2 {
  uint32_t x, y;
};

namespace okv_emu {

struct Fiber {
  ucontext_t ctx;
  jmp_buf jb;
  bool started;
  okv_emu_dim3 tid;
  int state; /* 0 runnable, 1 waiting at a barrier, 2 finished */
  int wait_kind;
  unsigned wait_id, wait_gen;
  std::vector<char> stack;
};

struct Barrier {
  unsigned count = 0, gen = 0;
};

struct State {
  okv_emu_dim3 block_idx{0, 0, 0}, block_dim{1, 1, 1}, grid_dim{1, 1, 1};
  std::vector<Fiber> fibers;
  unsigned current = 0;
  jmp_buf sched;
  Barrier block_bar;
  std::vector<Barrier> warp_bars;
  std::vector<uint64_t> exchange;
  std::vector<unsigned char> dyn_smem;
  std::function<void()> entry;
  bool deadlock = false;
  uint64_t n_switches = 0;
};

inline State &st() {
  static State s;
  return s;
}

inline Fiber &self() { return st().fibers[st().current]; }

inline void barrier(int kind, unsigned id, unsigned expected) {
  State &s = st();
  Barrier &b = kind == 0 ? s.block_bar : s.warp_bars[id];
  const unsigned gen = b.gen;
  if (++b.count == expected) {
    b.count = 0;
    b.gen++;
    return;
  }
  Fiber &f = self();
  f.state = 1;
  f.wait_kind = kind;
  f.wait_id = id;
  f.wait_gen = gen;
  s.n_switches++;
  if (!_setjmp(f.jb)) _longjmp(s.sched, 1);
}

inline unsigned n_threads() {
  const State &s = st();
  return s.block_dim.x * s.block_dim.y * s.block_dim.z;
}

inline void sync_block() { barrier(0, 0, n_threads()); }

template <class T>
T shfl_xor(T v, int lane_mask, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  State &s = st();
  const unsigned tid = self().tid.x, warp = tid / OKV_EMU_WARP, lane = tid % OKV_EMU_WARP;
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  s.exchange[tid] = bits;
  barrier(1, warp, OKV_EMU_WARP);
  const unsigned seg = lane - lane % (unsigned)width;
  const unsigned src = seg + ((lane % (unsigned)width) ^ (unsigned)lane_mask) % (unsigned)width;
  T r;
  bits = s.exchange[warp * OKV_EMU_WARP + src];
  memcpy(&r, &bits, sizeof(T));
  barrier(1, warp, OKV_EMU_WARP);
  return r;
}

inline uint64_t ballot(bool pred) {
  State &s = st();
  const unsigned tid = self().tid.x, warp = tid / OKV_EMU_WARP;
  s.exchange[tid] = pred ? 1u : 0u;
  barrier(1, warp, OKV_EMU_WARP);
  uint64_t m = 0;
  for (unsigned l = 0; l < OKV_EMU_WARP; ++l)
    if (s.exchange[warp * OKV_EMU_WARP + l]) m |= 1ull << l;
  barrier(1, warp, OKV_EMU_WARP);
  return m;
}

inline void trampoline() {
  State &s = st();
  s.entry();
  s.fibers[s.current].state = 2;
  _longjmp(s.sched, 1); /* never returns: the scheduler resumes */
}

inline bool runnable(const Fiber &f) {
  const State &s = st();
  if (f.state == 0) return true;
  if (f.state == 2) return false;
  const Barrier &b = f.wait_kind == 0 ? s.block_bar : s.warp_bars[f.wait_id];
  return b.gen != f.wait_gen;
}

/* Runs one thread block; false on a deadlock. */
inline bool run_block(const std::function<void()> &entry) {
  State &s = st();
  const unsigned n = n_threads();
  if (s.fibers.size() < n) s.fibers.resize(n);
  s.fibers.resize(n);
  s.block_bar = Barrier();
  s.warp_bars.assign((n + OKV_EMU_WARP - 1) / OKV_EMU_WARP, Barrier());
  s.exchange.assign(n, 0);
  s.entry = entry;
  for (unsigned t = 0; t < n; ++t) {
    Fiber &f = s.fibers[t];
    f.stack.resize(64 * 1024);
    f.tid = okv_emu_dim3{t % s.block_dim.x, (t / s.block_dim.x) % s.block_dim.y, t / (s.block_dim.x * s.block_dim.y)};
    f.state = 0;
    f.started = false;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, trampoline, 0);
  }
  for (;;) {
    volatile bool progress = false, all_done = true;
    for (volatile unsigned t = 0; t < n; t = t + 1) {
      Fiber &f = s.fibers[t];
      if (f.state != 2) all_done = false;
      if (!runnable(f)) continue;
      f.state = 0;
      s.current = t;
      s.n_switches++;
      progress = true;
      if (!_setjmp(s.sched)) {
        if (!f.started) {
          f.started = true;
          setcontext(&f.ctx);
        }
        _longjmp(f.jb, 1);
      }
    }
    if (all_done) return true;
    if (!progress) {
      s.deadlock = true;
      return false;
    }
  }
}

/* Launches `kernel` over `grid` blocks of `threads` threads with `smem_bytes`
 * of dynamic shared memory. Returns false when a block deadlocked. */
template <class Args>
bool launch(void (*kernel)(Args), okv_emu_dim3 grid, unsigned threads, size_t smem_bytes, const Args &args) {
  State &s = st();
  s.grid_dim = grid;
  s.block_dim = okv_emu_dim3{threads, 1, 1};
  s.dyn_smem.resize(smem_bytes + 16);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        s.block_idx = okv_emu_dim3{x, y, z};
        /* Garbage (NaN as floats) in dynamic shared memory at every block start. */
        std::fill(s.dyn_smem.begin(), s.dyn_smem.end(), (unsigned char)0xff);
        if (!run_block([&]() { kernel(args); })) return false;
      }
  return true;
}

}  // namespace okv_emu

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__                        static
#define OKV_DEVICE                        static inline
#define threadIdx                         (okv_emu::self().tid)
#define blockIdx                          (okv_emu::st().block_idx)
#define blockDim                          (okv_emu::st().block_dim)
#define gridDim                           (okv_emu::st().grid_dim)
#define __syncthreads()                   okv_emu::sync_block()
#define okv_shfl_xor(v, lane_mask, width) okv_emu::shfl_xor((v), (lane_mask), (width))
#define okv_ballot(pred)                  okv_emu::ballot((pred))
#define OKV_DYNAMIC_SMEM(type, name)      type *name = (type *)(void *)okv_emu::st().dyn_smem.data()

static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
static inline uint32_t atomicAdd(uint32_t *p, uint32_t v) {
  const uint32_t old = *p;
  *p = old + v;
  return old;
}
static inline uint32_t atomicOr(uint32_t *p, uint32_t v) {
  const uint32_t old = *p;
  *p = old | v;
  return old;
}
template <class T>
static inline T min(T a, T b) {
  return b < a ? b : a;
}

#endif /* OASISKV_GPU_EMULATOR_H */
