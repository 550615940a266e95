// The CUDA runtime functions memwall calls, emulated on the host (see emulation.h). Linked into the
// emulated test executable, these definitions take the place of libcudart's.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda/emulation/emulation.h"

// The opaque handles of the runtime API, given a body here.
struct CUstream_st {
  std::deque<std::function<void()>> queue;
  std::size_t enqueued = 0, done = 0;  // work items queued and run so far
  std::size_t index = 0;               // this stream's entry in vector clocks (0 is the host's)
  std::vector<std::size_t> clock;      // what the next item queued here is ordered after
};
struct CUevent_st {
  CUstream_st* stream = nullptr;  // null: recorded on the default stream (complete at once)
  std::size_t seq = 0;            // complete once stream->done reaches it
  bool recorded = false;
  double time = 0;                 // host seconds when the stream reached the record
  std::vector<std::size_t> clock;  // what its completion implies
};

namespace memwall::emulated_gpu {
namespace {

struct Emulator {
  std::recursive_mutex mu;
  std::map<std::uintptr_t, std::size_t> allocs;      // device allocations: base -> bytes asked for
  std::map<std::uintptr_t, std::size_t> registered;  // page-locked host ranges
  std::set<CUstream_st*> streams;
  std::size_t next_stream = 1;
  // Race detection: the host's vector clock (all host threads: the emulator sees their calls in one order)
  // and the device accesses of queued work that the host has not yet synchronised past.
  std::vector<std::size_t> host_clock;
  struct Touch {
    std::uintptr_t begin, end;
    std::size_t stream, seq;
    bool write;
    const char* what;
  };
  std::vector<Touch> touches;
  std::size_t total = 0, used = 0;  // device memory, shared by the devices
  int devices = 1;
  int running = 0;  // nesting depth of emulated GPU work: device memory is accessible while > 0

  Emulator() {
    const char* env = std::getenv("MEMWALL_EMULATED_GPU_BYTES");
    total = env != nullptr ? std::strtoull(env, nullptr, 10) : (std::size_t{2} << 30);
    const char* n = std::getenv("MEMWALL_EMULATED_GPUS");
    devices = n != nullptr ? std::max(1, std::atoi(n)) : 1;
  }
  // An allocation is whole pages with a PROT_NONE guard page on each side, the pointer placed so that its
  // bytes (rounded up to cudaMalloc's 256-byte alignment) end where the pages do: an access past the end
  // faults at once, as compute-sanitizer would report it. Accesses are checked against the bytes asked for.
  static constexpr std::size_t kPage = 4096;
  static std::size_t padded(std::size_t bytes) { return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256; }
  static std::size_t mapped(std::size_t bytes) { return (padded(bytes) + kPage - 1) / kPage * kPage; }
  static std::uintptr_t pages_of(std::uintptr_t base) { return base / kPage * kPage; }
  // The bytes between an allocation's end and its pages' end (under 256) hold this pattern; work that
  // changes them wrote past the end without reaching the guard page.
  static constexpr unsigned char kCanary = 0xa5;
  // The first allocation whose canary bytes changed (the caller holds mu, with device memory accessible):
  // {base, bytes}, or {0, 0}.
  std::pair<std::uintptr_t, std::size_t> overrun() const {
    for (const auto& [base, bytes] : allocs) {
      const auto* tail = reinterpret_cast<const unsigned char*>(base + bytes);
      const std::size_t slack = padded(bytes) - bytes;
      for (std::size_t i = 0; i < slack; ++i) {
        if (tail[i] != kCanary) return {base, bytes};
      }
    }
    return {0, 0};
  }
  void protect(int prot) {
    for (const auto& [base, bytes] : allocs)
      ::mprotect(reinterpret_cast<void*>(pages_of(base)), mapped(bytes), prot);
  }
  // The allocation holding [p, p + bytes), or allocs.end().
  std::map<std::uintptr_t, std::size_t>::const_iterator find(const void* p, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return allocs.end();
    --it;
    if (a + bytes > it->first + it->second) return allocs.end();
    return it;
  }
  bool on_device(const void* p) const { return find(p, 1) != allocs.end(); }
  bool is_registered(const void* p, std::size_t bytes) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    auto it = registered.upper_bound(a);
    if (it == registered.begin()) return false;
    --it;
    return a + bytes <= it->first + it->second;
  }
};

Emulator& emu();

// A fault inside device memory is host code touching the GPU's memory, one in a guard page an access out of
// an allocation's bounds: say so before crashing.
void on_segv(int sig, siginfo_t* info, void*) {
  const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const auto& [base, bytes] : emu().allocs) {
    const std::uintptr_t pages = Emulator::pages_of(base), end = pages + Emulator::mapped(bytes);
    if (a + Emulator::kPage < pages || a >= end + Emulator::kPage) continue;
    char line[200];
    int n = 0;
    if (a < pages || a >= end) {
      const bool before = a < base;
      n = std::snprintf(line, sizeof line,
                        "emulated CUDA: an access at %p, %zu bytes %s a %zu-byte cudaMalloc allocation\n",
                        info->si_addr, static_cast<std::size_t>(before ? base - a : a - (base + bytes)),
                        before ? "before the start of" : "past the end of", bytes);
    } else {
      n = std::snprintf(line, sizeof line,
                        "emulated CUDA: host code touched device memory at %p (%zd bytes into a %zu-byte "
                        "cudaMalloc allocation)\n",
                        info->si_addr, static_cast<std::ptrdiff_t>(a - base), bytes);
    }
    if (n > 0) (void)!::write(2, line, static_cast<std::size_t>(std::min<int>(n, sizeof line - 1)));
    break;
  }
  ::signal(sig, SIG_DFL);  // returning re-runs the access, which now crashes as usual
}

Emulator& emu() {
  static Emulator* e = [] {
    auto* made = new Emulator();  // never destroyed: streams may be synchronised during exit
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    ::sigaction(SIGSEGV, &sa, nullptr);
    return made;
  }();
  return *e;
}

thread_local cudaError_t last_error = cudaSuccess;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaError_t fail(cudaError_t e, const std::string& what) {
  std::fprintf(stderr, "emulated CUDA: %s\n", what.c_str());
  last_error = e;
  return e;
}

// Device memory is readable and writable while one of these lives (the caller holds emu().mu).
class Running {
 public:
  Running() {
    if (emu().running++ == 0) emu().protect(PROT_READ | PROT_WRITE);
  }
  ~Running() {
    if (--emu().running == 0) emu().protect(PROT_NONE);
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

bool immediate(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

void run_until(CUstream_st* s, std::size_t seq) {
  Running r;
  while (s->done < seq) {
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->done;
    work();
  }
}

void merge(std::vector<std::size_t>& into, const std::vector<std::size_t>& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

bool ordered(const std::vector<std::size_t>& clock, std::size_t stream, std::size_t seq) {
  return stream < clock.size() && clock[stream] >= seq;
}

// The host now knows what `clock` says is done: work it covers can no longer race with anything queued later.
void host_knows(const std::vector<std::size_t>& clock) {
  Emulator& e = emu();
  merge(e.host_clock, clock);
  std::erase_if(e.touches, [&](const Emulator::Touch& t) { return ordered(e.host_clock, t.stream, t.seq); });
}

void run_all() {
  for (CUstream_st* s : emu().streams) {
    run_until(s, s->enqueued);
    host_knows(s->clock);
  }
}

// 0, or an error naming both sides when work with `clock` on stream `stream` (0: the host) touching `a`
// races with earlier work of another stream.
int check_races(const std::vector<std::size_t>& clock, std::size_t stream, const Access& a,
                const char* what) {
  const auto begin = reinterpret_cast<std::uintptr_t>(a.p), end = begin + a.bytes;
  for (const Emulator::Touch& t : emu().touches) {
    if (t.stream == stream || (!t.write && !a.write) || t.end <= begin || end <= t.begin) continue;
    if (ordered(clock, t.stream, t.seq)) continue;
    char line[400];
    std::snprintf(
        line, sizeof line,
        "stream race: %s on %s %zu %s %zu bytes at %p that %s on stream %zu %s, with no event wait or "
        "host synchronisation between them",
        what, stream == 0 ? "the host" : "stream", stream, a.write ? "writes" : "reads", a.bytes, a.p, t.what,
        t.stream, t.write ? "writes" : "reads");
    return fail(cudaErrorLaunchFailure, line);
  }
  return 0;
}

}  // namespace

int enqueue(void* stream, std::function<void()> work_in, const std::vector<Access>& access,
            const char* what) {
  std::lock_guard<std::recursive_mutex> lock(emu().mu);
  // After the work: nothing it wrote may lie past an allocation's end (a kernel bug: stop, loudly).
  auto work = [run = std::move(work_in), what] {
    run();
    if (const auto [base, bytes] = emu().overrun(); base != 0) {
      std::fprintf(stderr,
                   "emulated CUDA: %s wrote past the end of the %zu-byte cudaMalloc allocation at %p\n", what,
                   bytes, reinterpret_cast<void*>(base));
      std::abort();
    }
  };
  Emulator& e = emu();
  auto* s = static_cast<cudaStream_t>(stream);
  std::vector<Access> on_device;
  for (const Access& a : access) {
    if (a.bytes > 0 && e.on_device(a.p)) on_device.push_back(a);
  }
  if (immediate(s)) {  // the host's own work, ordered after all it knows
    for (const Access& a : on_device) {
      if (int rc = check_races(e.host_clock, 0, a, what); rc != 0) return rc;
    }
    Running r;
    work();
    return 0;
  }
  if (e.streams.count(s) == 0) return fail(cudaErrorInvalidResourceHandle, "work on an unknown stream");
  std::vector<std::size_t> clock = s->clock;
  merge(clock, e.host_clock);  // queued after everything the host has waited for
  if (clock.size() <= s->index) clock.resize(s->index + 1, 0);
  clock[s->index] = s->enqueued + 1;
  for (const Access& a : on_device) {
    if (int rc = check_races(clock, s->index, a, what); rc != 0) return rc;
  }
  for (const Access& a : on_device) {
    const auto b = reinterpret_cast<std::uintptr_t>(a.p);
    e.touches.push_back({b, b + a.bytes, s->index, s->enqueued + 1, a.write, what});
  }
  s->clock = std::move(clock);
  s->queue.push_back(std::move(work));
  ++s->enqueued;
  return 0;
}

int check_device(const void* p, std::size_t bytes, const char* what) {
  std::lock_guard<std::recursive_mutex> lock(emu().mu);
  if (emu().find(p, std::max<std::size_t>(bytes, 1)) != emu().allocs.end()) return 0;
  char line[256];
  std::snprintf(line, sizeof line, "%s: %zu bytes at %p are not inside one device allocation", what, bytes,
                p);
  return fail(cudaErrorInvalidDevicePointer, line);
}

int report(int error, const std::string& what) {
  return fail(static_cast<cudaError_t>(error), what);
}

}  // namespace memwall::emulated_gpu

namespace emu_ns = memwall::emulated_gpu;
using emu_ns::emu;

namespace {

using Lock = std::lock_guard<std::recursive_mutex>;

// Whether a copy of `kind` may go from src to dst.
cudaError_t check_kind(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const bool d = emu().on_device(dst), s = emu().on_device(src);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !d && !s;
      break;
    case cudaMemcpyHostToDevice:
      ok = d && !s;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !d && s;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = d && s;
      break;
    default:
      break;
  }
  if (!ok) {
    char line[200];
    std::snprintf(line, sizeof line, "a copy of kind %d from %s %p to %s %p", static_cast<int>(kind),
                  s ? "device" : "host", src, d ? "device" : "host", dst);
    return emu_ns::fail(cudaErrorInvalidMemcpyDirection, line);
  }
  if (d && emu().find(dst, bytes) == emu().allocs.end())
    return emu_ns::fail(cudaErrorInvalidValue, "a copy runs past the end of its device allocation");
  if (s && emu().find(src, bytes) == emu().allocs.end())
    return emu_ns::fail(cudaErrorInvalidValue, "a copy reads past the end of its device allocation");
  return cudaSuccess;
}

cudaError_t queue(cudaStream_t s, std::function<void()> work, const std::vector<emu_ns::Access>& access = {},
                  const char* what = "work") {
  return static_cast<cudaError_t>(emu_ns::enqueue(s, std::move(work), access, what));
}

}  // namespace

extern "C" {

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation:
      return "out of memory (emulated)";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal (emulated)";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer (emulated)";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy (emulated)";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle (emulated)";
    case cudaErrorHostMemoryAlreadyRegistered:
      return "part or all of the requested memory range is already mapped (emulated)";
    case cudaErrorHostMemoryNotRegistered:
      return "pointer does not correspond to a registered memory region (emulated)";
    default:
      return "emulated CUDA error";
  }
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = emu_ns::last_error;
  emu_ns::last_error = cudaSuccess;
  return e;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = emu().devices;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (device >= 0 && device < emu().devices) return cudaSuccess;
  return emu_ns::fail(cudaErrorInvalidDevice, "cudaSetDevice: no such emulated GPU (MEMWALL_EMULATED_GPUS)");
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= emu().devices)
    return emu_ns::fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such emulated GPU");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "host emulation of a GPU");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->totalGlobalMem = emu().total;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  Lock lock(emu().mu);
  *free = emu().total - emu().used;
  *total = emu().total;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** ptr, size_t size) {
  Lock lock(emu().mu);
  using E = emu_ns::Emulator;
  const std::size_t bytes = E::mapped(size);
  if (bytes > emu().total - emu().used)
    return emu_ns::fail(cudaErrorMemoryAllocation, "cudaMalloc: out of memory");
  void* m =
      ::mmap(nullptr, bytes + 2 * E::kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return emu_ns::fail(cudaErrorMemoryAllocation, "cudaMalloc: mmap failed");
  char* pages = static_cast<char*>(m) + E::kPage;
  ::mprotect(pages, bytes, PROT_READ | PROT_WRITE);
  char* p = pages + bytes - E::padded(size);
  std::memset(p + size, E::kCanary, E::padded(size) - size);
  if (emu().running == 0) ::mprotect(pages, bytes, PROT_NONE);
  emu().allocs[reinterpret_cast<std::uintptr_t>(p)] = size;
  emu().used += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Lock lock(emu().mu);
  emu_ns::run_all();  // cudaFree waits for the device
  auto it = emu().allocs.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == emu().allocs.end())
    return emu_ns::fail(cudaErrorInvalidDevicePointer, "cudaFree of a non-allocation");
  using E = emu_ns::Emulator;
  ::munmap(reinterpret_cast<void*>(E::pages_of(it->first) - E::kPage), E::mapped(it->second) + 2 * E::kPage);
  emu().used -= E::mapped(it->second);
  emu().allocs.erase(it);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostRegister(void* ptr, size_t size, unsigned int) {
  Lock lock(emu().mu);
  if (std::getenv("MEMWALL_EMULATED_NO_PINNING") != nullptr)  // as drivers in some sandboxes answer
    return emu_ns::fail(cudaErrorNotSupported,
                        "cudaHostRegister: not supported (MEMWALL_EMULATED_NO_PINNING)");
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  auto& reg = emu().registered;
  auto next = reg.lower_bound(a);
  const bool overlaps_next = next != reg.end() && next->first < a + size;
  const bool overlaps_prev = next != reg.begin() && std::prev(next)->first + std::prev(next)->second > a;
  if (overlaps_next || overlaps_prev)
    return emu_ns::fail(cudaErrorHostMemoryAlreadyRegistered, "cudaHostRegister of an overlapping range");
  if (emu().on_device(ptr)) return emu_ns::fail(cudaErrorInvalidValue, "cudaHostRegister of device memory");
  reg[a] = size;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostUnregister(void* ptr) {
  Lock lock(emu().mu);
  if (emu().registered.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0)
    return emu_ns::fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister of an unregistered pointer");
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  Lock lock(emu().mu);
  *s = new CUstream_st();
  (*s)->index = emu().next_stream++;
  emu().streams.insert(*s);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) {
  Lock lock(emu().mu);
  if (emu().streams.erase(s) == 0) return emu_ns::fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy");
  emu_ns::run_until(s, s->enqueued);  // queued work still completes
  emu_ns::host_knows(s->clock);
  delete s;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t s) {
  Lock lock(emu().mu);
  if (emu_ns::immediate(s)) return cudaSuccess;
  if (emu().streams.count(s) == 0)
    return emu_ns::fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize");
  emu_ns::run_until(s, s->enqueued);
  emu_ns::host_knows(s->clock);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void) {
  Lock lock(emu().mu);
  emu_ns::run_all();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  *e = new CUevent_st();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Lock lock(emu().mu);
  e->recorded = true;
  if (emu_ns::immediate(s)) {
    e->stream = nullptr;
    e->time = emu_ns::seconds();
    return cudaSuccess;
  }
  if (cudaError_t rc = queue(s, [e] { e->time = emu_ns::seconds(); }); rc != cudaSuccess) return rc;
  e->stream = s;
  e->seq = s->enqueued;
  e->clock = s->clock;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Lock lock(emu().mu);
  for (cudaEvent_t e : {start, end}) {
    if (!e->recorded)
      return emu_ns::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not recorded");
    if (e->stream != nullptr && e->stream->done < e->seq) return cudaErrorNotReady;
  }
  *ms = static_cast<float>((end->time - start->time) * 1e3);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t e) {
  Lock lock(emu().mu);
  if (e->stream != nullptr) {
    emu_ns::run_until(e->stream, e->seq);
    emu_ns::host_knows(e->clock);
  }
  return cudaSuccess;
}

// The emulated GPU makes progress when asked: a query completes the event's work.
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e) {
  return cudaEventSynchronize(e);
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  Lock lock(emu().mu);
  CUstream_st* on = e->stream;
  const std::size_t seq = e->seq;
  if (on == nullptr) return cudaSuccess;
  if (emu_ns::immediate(s)) return cudaEventSynchronize(e);
  emu_ns::merge(s->clock, e->clock);  // what s runs from now on is ordered after the event
  return queue(s, [on, seq] { emu_ns::run_until(on, seq); });
}

// As on a GPU: a copy between device memory and page-locked (registered) host memory is queued like a
// kernel, so the host must not touch the host side until it has synchronised; one from pageable host memory
// takes its bytes before returning (the driver stages them); one to pageable host memory, or between two
// host buffers, returns only once it is done.
cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                      cudaStream_t s) {
  Lock lock(emu().mu);
  if (cudaError_t e = check_kind(dst, src, count, kind); e != cudaSuccess) return e;
  const bool dst_dev = emu().on_device(dst), src_dev = emu().on_device(src);
  if (!dst_dev && !emu().is_registered(dst, count)) {  // to pageable memory: synchronous
    if (!emu_ns::immediate(s)) {
      if (emu().streams.count(s) == 0) return emu_ns::fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync");
      emu_ns::run_until(s, s->enqueued);
      emu_ns::host_knows(s->clock);
    }
    return queue(
        nullptr, [=] { std::memcpy(dst, src, count); }, {{src, count, false}}, "a copy to the host");
  }
  const std::vector<emu_ns::Access> access = {{dst, count, true}, {src, count, false}};
  if (!src_dev && !emu().is_registered(src, count)) {  // from pageable memory: staged now
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + count);
    return queue(
        s, [=] { std::memcpy(dst, staged->data(), count); }, access, "cudaMemcpyAsync");
  }
  return queue(
      s, [=] { std::memcpy(dst, src, count); }, access, "cudaMemcpyAsync");
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);  // the default stream runs at once
}

cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                        size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  Lock lock(emu().mu);
  if (height == 0 || width == 0) return cudaSuccess;
  if (width > dpitch || width > spitch)
    return emu_ns::fail(cudaErrorInvalidPitchValue, "cudaMemcpy2DAsync pitch");
  if (cudaError_t e = check_kind(dst, src, 0, kind); e != cudaSuccess) return e;
  const bool d = emu().on_device(dst), sd = emu().on_device(src);
  if (d && emu().find(dst, dpitch * (height - 1) + width) == emu().allocs.end())
    return emu_ns::fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync writes past its device allocation");
  if (sd && emu().find(src, spitch * (height - 1) + width) == emu().allocs.end())
    return emu_ns::fail(cudaErrorInvalidValue, "cudaMemcpy2DAsync reads past its device allocation");
  // The rows' whole span (the columns between them too: an over-approximation for race detection).
  const std::vector<emu_ns::Access> access = {{dst, dpitch * (height - 1) + width, true},
                                              {src, spitch * (height - 1) + width, false}};
  return queue(
      s,
      [=] {
        for (std::size_t r = 0; r < height; ++r)
          std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                      width);
      },
      access, "cudaMemcpy2DAsync");
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t s) {
  Lock lock(emu().mu);
  if (emu_ns::check_device(ptr, count, "cudaMemsetAsync") != 0) return cudaErrorInvalidDevicePointer;
  return queue(
      s, [=] { std::memset(ptr, value, count); }, {{ptr, count, true}}, "cudaMemsetAsync");
}

cudaError_t CUDARTAPI cudaMemset(void* ptr, int value, size_t count) {
  return cudaMemsetAsync(ptr, value, count, nullptr);
}

}  // extern "C"
