// The fibers behind tests/cuda/simt/simt.h: one per CUDA thread of the block running now, switched only at
// barriers and shuffles: on x86-64 by a few instructions that swap the callee-saved registers and the stack
// pointer (swapcontext also saves the signal mask, a system call per switch, which made the model tests
// minutes long); elsewhere with ucontext.
#include "cuda/simt/simt.h"

#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>

#if MEMWALL_SIMT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#include "cuda/emulation/emulation.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace memwall::simt {

namespace {

constexpr std::size_t kStack = 64 * 1024;  // a kernel's frames, std::apply's and libm's
constexpr std::size_t kGuard = 4096;       // a PROT_NONE page below each stack: an overflow faults
constexpr unsigned kMaxThreads = 1024;
constexpr std::size_t kNowhere = ~std::size_t{0};

enum class Wait { kNone, kBlock, kWarp };

// ThreadSanitizer's view (cuda_simt_race_tests builds this file with MEMWALL_SIMT_TSAN, uninstrumented, and
// the kernels instrumented): every CUDA thread is a TSan fiber, switched to without synchronisation, so
// TSan orders two threads' accesses only by CUDA's own happens-before edges, made explicit here: the
// launch before every thread of the grid; a barrier's arrivals before its departures, and a warp's
// shuffle the same for its lanes (one token per barrier or shuffle, so work after one barrier is not
// ordered by the next); every thread of a block before the next block and whatever the host does after
// the grid. That last edge is not CUDA's (blocks run concurrently on a GPU) but the emulator's, whose
// blocks share one copy of each __shared__ array and one set of stacks: TSan finds races between the
// threads of a block, in shared or global memory, not races between blocks.
namespace tsan {
#if MEMWALL_SIMT_TSAN
constexpr bool kOn = true;
void release(void* token) {
  __tsan_release(token);
}
void acquire(void* token) {
  __tsan_acquire(token);
}
// Thread i of every block is TSan fiber i (made once): blocks are ordered anyway, and making and
// destroying a fiber per CUDA thread is most of TSan's cost.
void* pooled(std::size_t i) {
  static std::vector<void*> pool;  // grids run one at a time (grid_mu)
  while (pool.size() <= i) pool.push_back(__tsan_create_fiber(0));
  return pool[i];
}
void* current() {
  return __tsan_get_current_fiber();
}
void switch_to(void* fiber) {
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
}
#else
constexpr bool kOn = false;
void release(void*) {}
void acquire(void*) {}
void* pooled(std::size_t) {
  return nullptr;
}
void* current() {
  return nullptr;
}
void switch_to(void*) {}
#endif
char launch_token, done_token;  // a block's start and end (blocks run one at a time)
}  // namespace tsan

// A suspended execution context: the fiber's, or the scheduler's while a fiber runs.
#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;  // the callee-saved registers and the resume address are on this stack
  void* tsan = nullptr;
};
#else
struct Context {
  ucontext_t uc{};
  void* tsan = nullptr;
};
#endif

struct Fiber {
  Context ctx;
  uint3 tid{};
  unsigned warp = 0, lane = 0;
  bool done = false;
  Wait wait = Wait::kNone;
  unsigned shuffles = 0;  // how many this thread has done
};

// Happens-before tokens of successive barriers (or shuffles): a deque keeps their addresses.
struct Tokens {
  std::deque<char> all{char{}};
  char* now() { return &all.back(); }
  void next() {
    if (tsan::kOn) all.emplace_back();
  }
};

struct Warp {
  unsigned lanes = 0;       // threads of the block in this warp
  unsigned live = 0;        // of them, not returned
  unsigned arrived = 0;     // at the exchange now
  float value[2][32] = {};  // shuffles alternate between two (see __shfl_xor_sync)
  Tokens tokens;
};

// The block running on this host thread.
struct Block {
  const char* kernel = "";
  const std::function<void()>* thread = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Context scheduler;
  std::size_t current = 0;
  unsigned live = 0;               // threads not returned
  unsigned at_barrier = 0;         // of them, waiting at __syncthreads
  bool reverse = false;            // threads run last to first (odd blocks)
  std::size_t restart = kNowhere;  // the earliest position in run order the running thread made runnable
  std::string error;               // set when a thread misuses a barrier or a shuffle
  Tokens barriers;
};

thread_local Block* tl_block = nullptr;

void trampoline();

#if defined(__x86_64__)
}  // namespace
}  // namespace memwall::simt

// Saves the callee-saved registers on the current stack and its pointer in *save, then resumes the context
// whose stack pointer is `load`.
extern "C" void memwall_simt_switch(void** save, void* load);
asm(R"(
  .text
  .globl memwall_simt_switch
  .type memwall_simt_switch, @function
memwall_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size memwall_simt_switch, .-memwall_simt_switch
)");

namespace memwall::simt {
namespace {

void switch_to(Context& save, const Context& load) {
  tsan::switch_to(load.tsan);
  memwall_simt_switch(&save.sp, load.sp);
}

// A fresh fiber starts in trampoline() with the stack aligned as after a call (rsp = 8 mod 16).
void start_fiber(Context& c, char* stack, std::size_t bytes, Context*) {
  auto top = (reinterpret_cast<std::uintptr_t>(stack) + bytes) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<void**>(top - 64);  // six registers, the entry, a return slot
  for (int i = 0; i < 6; ++i) frame[i] = nullptr;
  frame[6] = reinterpret_cast<void*>(&trampoline);
  frame[7] = nullptr;
  c.sp = frame;
}
#else
void switch_to(Context& save, const Context& load) {
  tsan::switch_to(load.tsan);
  ::swapcontext(&save.uc, &load.uc);
}

// getcontext returns twice: kept out of run_grid, whose locals would otherwise be at risk.
[[gnu::noinline]] void start_fiber(Context& c, char* stack, std::size_t bytes, Context* scheduler) {
  ::getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = &scheduler->uc;
  ::makecontext(&c.uc, trampoline, 0);
}
#endif
// kMaxThreads fiber stacks with guard pages, mapped once for the process: grids run one at a time (the
// lock), whichever host thread runs them.
std::mutex grid_mu;
char* stacks() {
  static char* base = [] {
    const std::size_t each = kStack + kGuard;
    void* p = ::mmap(nullptr, each * kMaxThreads, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "simt: cannot map %zu bytes of fiber stacks\n", each * kMaxThreads);
      std::abort();
    }
    auto* b = static_cast<char*>(p);
    for (unsigned i = 0; i < kMaxThreads; ++i) ::mprotect(b + i * each, kGuard, PROT_NONE);
    return b;
  }();
  return base;
}

Block& block() {
  if (tl_block == nullptr) {
    std::fprintf(stderr, "simt: a barrier or shuffle outside a kernel\n");
    std::abort();
  }
  return *tl_block;
}

Fiber& self() {
  return block().fibers[block().current];
}

// Back to the scheduler until released (or for good after an error).
void suspend() {
  Block& b = block();
  Fiber& f = self();
  switch_to(f.ctx, b.scheduler);
}

void fail(const std::string& what) {
  Block& b = block();
  if (b.error.empty()) b.error = what;
  self().wait = Wait::kBlock;  // never resumed: the scheduler stops at the error
  suspend();
}

void release_block_barrier(Block& b) {
  if (b.at_barrier == 0 || b.at_barrier != b.live) return;
  for (Fiber& f : b.fibers) {
    if (f.wait == Wait::kBlock) f.wait = Wait::kNone;
  }
  b.at_barrier = 0;
  b.restart = 0;
  b.barriers.next();
}

void release_warp(Block& b, unsigned warp) {
  Warp& w = b.warps[warp];
  if (w.arrived == 0 || w.arrived != w.live) return;
  const std::size_t n = b.fibers.size(), last = std::min<std::size_t>(32 * warp + 31, n - 1);
  for (std::size_t i = std::size_t{32} * warp; i <= last; ++i) {
    if (b.fibers[i].wait == Wait::kWarp) b.fibers[i].wait = Wait::kNone;
  }
  w.arrived = 0;
  w.tokens.next();
  b.restart = std::min(b.restart, b.reverse ? n - 1 - last : std::size_t{32} * warp);
}

// All lanes of the caller's warp meet here.
void warp_meet() {
  Block& b = block();
  Fiber& f = self();
  char* token = b.warps[f.warp].tokens.now();
  tsan::release(token);
  f.wait = Wait::kWarp;
  ++b.warps[f.warp].arrived;
  release_warp(b, f.warp);
  if (f.wait != Wait::kNone) suspend();
  tsan::acquire(token);
}

void trampoline() {
  Block& b = block();
  tsan::acquire(&tsan::launch_token);
  (*b.thread)();
  tsan::release(&tsan::done_token);
  Fiber& f = self();
  f.done = true;
  --b.live;
  --b.warps[f.warp].live;
  release_block_barrier(b);       // threads that returned count as arrived
  switch_to(f.ctx, b.scheduler);  // for good: a finished fiber is never resumed
  std::abort();
}

std::string str(dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

}  // namespace

bool run_grid(const char* kernel, dim3 grid, dim3 block_dim, const std::function<void()>& thread) {
  const unsigned n = block_dim.x * block_dim.y * block_dim.z;
  std::lock_guard<std::mutex> lock(grid_mu);
  char* stack = stacks();
  Block b;
  b.kernel = kernel;
  b.thread = &thread;
  b.scheduler.tsan = tsan::current();
  gridDim = grid;
  blockDim = block_dim;
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = uint3{bx, by, bz};
        b.fibers.assign(n, Fiber{});
        b.warps.assign((n + 31) / 32, Warp{});
        b.live = n;
        b.at_barrier = 0;
        b.barriers = Tokens{};
        tsan::release(&tsan::launch_token);  // the launch (and the blocks before) before these threads
        for (unsigned i = 0; i < n; ++i) {
          Fiber& f = b.fibers[i];
          f.tid = uint3{i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y)};
          f.warp = i / 32;
          f.lane = i % 32;
          ++b.warps[f.warp].lanes;
          ++b.warps[f.warp].live;
          start_fiber(f.ctx, stack + i * (kStack + kGuard) + kGuard, kStack, &b.scheduler);
          f.ctx.tsan = tsan::pooled(i);
        }
        // Odd blocks run their threads last to first: a value read before the barrier that orders it
        // after its write is then stale in one order or the other.
        b.reverse = (bx + grid.x * (by + grid.y * bz)) % 2 == 1;
        Block* outer = tl_block;
        tl_block = &b;
        // The first runnable thread in the block's order runs next, so the first warps race as far ahead as
        // they can. Every position before k holds a thread that cannot run; running one can only make
        // threads it releases runnable, so the scan goes on from the earliest of those.
        for (std::size_t k = 0; k < n && b.error.empty();) {
          const std::size_t i = b.reverse ? n - 1 - k : k;
          Fiber& f = b.fibers[i];
          if (f.done || f.wait != Wait::kNone) {
            ++k;
            continue;
          }
          b.current = i;
          b.restart = kNowhere;
          threadIdx = f.tid;
          switch_to(b.scheduler, f.ctx);
          k = std::min(b.restart, k + 1);
        }
        tl_block = outer;
        tsan::acquire(&tsan::done_token);  // this block before the next one (see namespace tsan)
        if (b.error.empty() && b.live > 0) {
          unsigned at_warp = 0;
          for (const Fiber& f : b.fibers) at_warp += f.wait == Wait::kWarp ? 1 : 0;
          b.error = std::to_string(b.at_barrier) + " thread(s) wait at __syncthreads and " +
                    std::to_string(at_warp) + " at a warp shuffle, " + std::to_string(n - b.live) +
                    " returned: a deadlock";
        }
        if (!b.error.empty()) {
          std::fprintf(stderr, "simt: kernel %s, block %s of grid %s, block size %s: %s\n", kernel,
                       str(dim3(bx, by, bz)).c_str(), str(grid).c_str(), str(block_dim).c_str(),
                       b.error.c_str());
          return false;
        }
      }
    }
  }
  return true;
}

int queue_grid(const char* kernel, dim3 grid, dim3 block_dim, std::size_t shared_bytes, cudaStream_t stream,
               const std::vector<const void*>& pointers, std::function<void()> thread) {
  const unsigned long long threads = static_cast<unsigned long long>(block_dim.x) * block_dim.y * block_dim.z;
  std::string bad;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) bad = "an empty grid " + str(grid);
  if (threads == 0 || threads > kMaxThreads || block_dim.x > 1024 || block_dim.y > 1024 || block_dim.z > 64)
    bad = "a block of " + str(block_dim) + " threads (at most 1024, z at most 64)";
  if (grid.y > 65535 || grid.z > 65535) bad = "a grid of " + str(grid) + " blocks (y and z at most 65535)";
  if (shared_bytes != 0)
    bad = std::to_string(shared_bytes) + " bytes of dynamic shared memory (not emulated)";
  if (!bad.empty())
    return emulated_gpu::report(cudaErrorInvalidConfiguration, std::string("kernel ") + kernel + ": " + bad);
  for (std::size_t i = 0; i < pointers.size(); ++i) {
    const std::string what = std::string("kernel ") + kernel + " pointer argument " + std::to_string(i + 1);
    if (int e = emulated_gpu::check_device(pointers[i], 1, what.c_str()); e != 0) return e;
  }
  return emulated_gpu::enqueue(
      stream,
      [kernel, grid, block_dim, thread = std::move(thread)] {
        if (!run_grid(kernel, grid, block_dim, thread)) std::abort();  // a kernel bug: stop here, loudly
      },
      {}, kernel);
}

}  // namespace memwall::simt

void __syncthreads() {
  using namespace memwall::simt;
  Block& b = block();
  Fiber& f = self();
  char* token = b.barriers.now();
  tsan::release(token);
  f.wait = Wait::kBlock;
  ++b.at_barrier;
  release_block_barrier(b);
  if (f.wait != Wait::kNone) suspend();
  tsan::acquire(token);
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask, int width) {
  using namespace memwall::simt;
  Block& b = block();
  Fiber& f = self();
  const Warp& w = b.warps[f.warp];
  if (mask != 0xffffffffu || width != 32 || lane_mask < 0 || lane_mask > 31) {
    fail("__shfl_xor_sync with mask " + std::to_string(mask) + ", width " + std::to_string(width) +
         ", lane mask " + std::to_string(lane_mask) + " (emulated: full warps, width 32)");
  }
  if (w.live != 32) {
    fail("__shfl_xor_sync over the full warp " + std::to_string(f.warp) + " of which " +
         std::to_string(w.live) + " lane(s) are running (" + std::to_string(w.lanes) + " exist)");
  }
  // Alternate buffers: a lane writes this buffer again two shuffles on, after the next shuffle's meeting,
  // which every lane reaches only after reading this one.
  const unsigned p = f.shuffles++ & 1;
  b.warps[f.warp].value[p][f.lane] = v;
  warp_meet();  // every lane has put its value
  return b.warps[f.warp].value[p][f.lane ^ static_cast<unsigned>(lane_mask)];
}

float atomicAdd(float* address, float v) {
  const float old = *address;
  *address = old + v;
  return old;
}
