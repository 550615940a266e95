// ZeRO-3 / ZeRO-Infinity training driven by the schedule: tiers, task bindings, checkpoints (see zero3.h).
#include "engine/train/zero3.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/units.h"
#include "cpu/cast.h"
#include "engine/exec/lanes.h"
#include "engine/host/arena.h"
#include "engine/io/async_io.h"
#include "engine/io/atomic_file.h"
#include "engine/io/crc32c.h"
#include "engine/io/tensor_store.h"
#include "engine/train/checkpoint.h"
#include "exec/run_analysis.h"
#include "plan/planner.h"

#if MEMWALL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/adam.h"
#include "cuda/cast.h"
#include "cuda/gpt_ops.h"
#include "engine/cuda/device.h"
#include "engine/model/gpt_cuda.h"
#endif
#if MEMWALL_HAVE_NCCL
#include "engine/comm/nccl.h"
#endif

namespace memwall::train {

RunConfig default_train_run() {
  RunConfig run;
  run.name = "zero-3";
  run.zero.stage = 3;
  run.zero.param_persistence_threshold = {false, 0};  // every parameter partitioned (a run file may set one)
  run.zero.overlap_comm = true;
  run.precision = Precision::kBf16;
  run.memwall.prefetch = true;
  return run;
}

HardwareSpec emulated_hardware(double device_bytes, double host_bytes, double nvme_bytes) {
  HardwareSpec hw;
  hw.name = "emulated";
  hw.description = "host-emulated tiers for memwall train";
  hw.gpu.model = "host-emulated device";
  hw.gpu.count = 64;
  hw.gpu.shares_host_cpu = true;
  hw.gpu.memory_bytes = device_bytes;
  hw.cpu.memory_bytes = host_bytes;
  if (nvme_bytes > 0) {
    hw.nvme.drives = 1;
    hw.nvme.drive_capacity_bytes = nvme_bytes;
  }
  return hw;
}

namespace {

constexpr std::size_t kB16 = sizeof(std::uint16_t);

std::string store_key(const char* kind, std::size_t index) {
  return std::string(kind) + "." + std::to_string(index);
}

// The task a lane thread is running, with asynchronous GPU completion (see State::deps_on_stream).
struct GpuTask {
  const Task* task = nullptr;
  bool host_waited = false;         // the host has waited for the dependencies' GPU work
  std::vector<const void*> waited;  // streams made to wait for it
  const void* recorded = nullptr;   // the stream the task's end event was last recorded on
};
[[maybe_unused]] thread_local GpuTask* tl_gpu_task = nullptr;

}  // namespace

struct Zero3Trainer::State {
  struct Part {
    std::size_t model_offset, numel, shard, local;  // local: where this rank's shard starts in flat arrays
  };
  struct Group {
    std::size_t first, last;  // parameters [first, last)
    std::size_t begin, end;   // flat elements [begin, end)
  };

  model::GptGraph gg;                      // the graph, parameter slices and op roles
  std::unique_ptr<model::GptModel> model;  // the CPU model (not built on a GPU)
  Schedule sched;
  std::vector<Part> parts;
  // Per parameter: whether weight decay applies (memwall.weight_decay_params "matrices": not to biases and
  // norm weights, the layout's 1-D tensors).
  std::vector<char> decays;
  // Per parameter: whether it is a routing's correction bias stepped by DeepSeek-V3's balancing rule (its
  // gradient the summed load errors: bias -= speed x sign) rather than by Adam, and the speed.
  std::vector<char> bias_rule;
  double bias_speed = 0;
  std::size_t total = 0;  // this rank's flat elements
  std::vector<Group> groups;
  std::vector<Tier> home;      // per parameter: where its bf16 shard lives
  std::vector<int> shard_buf;  // per parameter: its persistent shard buffer (stage 3), or -1
  std::vector<int> resident;   // per parameter: its whole bf16 copy on the device (stages 0-2; stage 3's
                               // persistent small parameters), or -1
  std::vector<int> persistent_grad;  // per parameter: a persistent fp32 gradient buffer, or -1
  Tier opt_tier = Tier::kGpu;
  int stage = 3;  // ZeRO stage: 3 partitions the parameters; 0, 1 and 2 keep them whole on every rank
  int R = 1, rank = 0;
  // The optimizer states (and the flat arrays, shards and checkpoint files) are partitioned over
  // `partitions` ranks and this rank holds partition `partition`: over every rank in stages 1-3; stage 0
  // (plain data parallelism) keeps them whole on every rank, one partition each rank steps alike.
  int partitions = 1, partition = 0;

  // Tiers.
  std::unique_ptr<host::Arena> device, host_mem;
  std::map<int, std::unique_ptr<host::Arena>> pools;  // pool buffer id -> its slots' arena
  std::vector<host::Arena*> arena_of;                 // per buffer, while allocated
  std::vector<host::Arena::Block> block;
  std::vector<char*> mem;
  std::vector<double> real_bytes;
  double nvme_peak = 0;              // bytes the store's tensors took at most (old + new versions)
  double reserved[kTierCount] = {};  // the hardware's reserve, allocated but not reported as used
  std::unique_ptr<io::AsyncIo> aio;
  std::unique_ptr<io::TensorStore> store;
  std::mutex store_mu;

  // Optimizer states on the GPU or CPU tier (flat, `total` elements), and 16-bit staging of updated
  // parameters that go to another tier.
  float *master = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr, *grads32 = nullptr;
  // ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio < 1, the optimizer on the CPU): the first gpu_groups
  // sub-groups, flat elements [0, split), step on the GPU with their states there (gpu_master, ...) and their
  // gradients in their persistent device buffers; the arrays above hold [split, total). 0 without Twin-Flow.
  int gpu_groups = 0;
  std::size_t split = 0;
  float *gpu_master = nullptr, *gpu_exp_avg = nullptr, *gpu_exp_avg_sq = nullptr;
  Tier group_tier(int g) const { return g >= 0 && g < gpu_groups ? Tier::kGpu : opt_tier; }
  Tier param_opt_tier(std::size_t p) const { return parts[p].local < split ? Tier::kGpu : opt_tier; }
  // Master weights, momentum and variance from flat element `off` on, wherever they live.
  struct StateArrays {
    float *master, *m, *v;
  };
  StateArrays states_at(std::size_t off) const {
    if (off < split) return {gpu_master + off, gpu_exp_avg + off, gpu_exp_avg_sq + off};
    return {master + (off - split), exp_avg + (off - split), exp_avg_sq + (off - split)};
  }
  // Whether the states from flat element `off` on are in GPU memory.
  bool states_on_device(std::size_t off) const { return cuda && (off < split || opt_tier == Tier::kGpu); }
  // Delayed parameter update (memwall.delayed_parameter_update): the optimizer steps, at the start of each
  // step and beside its forward and backward, on the previous step's gradients (prev_grads), while this
  // step's go to grads32; the two swap when the step ends. pending_step: the step whose gradients wait in
  // prev_grads (0: none, as before the first step and after a checkpoint drained them).
  bool delayed = false;
  float* prev_grads = nullptr;
  long pending_step = 0;
  // The fp32 gradients in CPU memory the optimizer steps on.
  float* step_grads() const { return delayed ? prev_grads : grads32; }
  // The fp32 gradients in CPU memory (`base`: grads32 or prev_grads, which start at flat element `split`) of
  // the shard at flat element `local`.
  float* cpu_grads(float* base, std::size_t local) const { return base + (local - split); }
  // NVMe optimizer: its fp32 gradients wait in CPU memory (the plan resolved optimizer_gradients so), so its
  // swap slots hold master, momentum and variance, then the 16-bit updated parameters, and no gradients;
  // slot_fp32_bytes() is a slot's fp32 bytes per element, before the 16-bit part.
  bool grads_in_cpu = false;
  std::size_t slot_fp32_bytes() const { return grads_in_cpu ? 12 : 16; }
  std::unique_ptr<host::Arena> out16_arena;  // page-aligned, so it can be page-locked on a GPU
  std::uint16_t* out16 = nullptr;

  // Compute lane scratch: fp32 copies of an op's parameters. Network lane scratch.
  std::vector<std::vector<float>> work;
  std::vector<float> reduced;

  // Measurement.
  StepStats stats;
  std::vector<double> moved;        // per task: bytes really moved in the last run
  std::vector<double> moved_train;  // the same for the last training step (every step moves the same)
  RunResult last_run;
  // Gradient accumulation: the last step's runs (one per micro-batch) and bytes moved in each, and that
  // step as one schedule (accumulated_schedule), rebuilt when the micro-batch count changes.
  std::vector<RunResult> micro_runs;
  std::vector<std::vector<double>> micro_moved;
  AccumulatedSchedule accumulated;
  int accumulated_steps = 1;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  kernels::AdamHyper adam_hyper;  // step set per iteration
  int micro = 0;                  // gradient accumulation: the micro-batch running (0: the first)
  // Gradient clipping (RunConfig::gradient_clipping > 0): the plan's "gradient norm" task sums the squares
  // of every parameter's final gradient shard (grad_sq, per parameter, so that every placement adds them in
  // the same order; gradients that went to NVMe were summed as they were written in the last micro-batch),
  // the ranks add theirs in rank order, and the step's gradients are scaled down to the norm.
  double clip = 0;
  bool last_micro = false;      // the micro-batch with the optimizer phase is running
  std::vector<double> grad_sq;  // per parameter: the sum of squares of this rank's gradient shard
  double grad_norm = -1;        // the last step's global gradient norm (of the mean gradient), or -1
  Status clip_gradients(const std::string& at, comm::Communicator& comm);
  std::size_t valid(const Part& pt) const {  // elements of a shard inside its parameter (not padding)
    const std::size_t from = static_cast<std::size_t>(partition) * pt.shard;
    return from >= pt.numel ? 0 : std::min(pt.shard, pt.numel - from);
  }
  int adam_threads = 1;
  // Activation checkpoints offloaded to the CPU (cpu_checkpointing): the residual stream at a segment's first
  // layer, B*T*C fp32 values of the model's (its activations are fp32), and the tests' scrubbing of the
  // model's copy before one comes back (Zero3Options::scrub_offloaded_checkpoints).
  std::size_t residual_floats = 0;
  bool scrub_checkpoints = false;
  float* residual(int layer) const;

  // On a real GPU (Zero3Options::device == kCuda): the device, its tier carved out of the device's arena
  // (`device` above is bookkeeping over that block), the model on kernels/cuda, NCCL when built in, and
  // device scratch for the fp32 copies of an op's parameters and a reduce-scatter's result.
  bool cuda = false;
#if MEMWALL_HAVE_CUDA
  std::unique_ptr<gpu::Device> gpu;
  host::Arena::Block tier_block{};
  std::unique_ptr<model::CudaGptModel> cmodel;
  float *work_dev = nullptr, *reduced_dev = nullptr;
  // Gradient clipping: per parameter the sum of squares of its shard, then the kernel's partial sums.
  double* squares_dev = nullptr;
#endif
#if MEMWALL_HAVE_NCCL
  std::unique_ptr<comm::NcclComm> nccl;
#endif
  // Asynchronous completion on the GPU (Zero3Options::gpu_async): a task whose work goes to a stream ends by
  // recording its end event instead of waiting for the stream, and its lane moves on. A task after it waits
  // for that event on its own stream (cudaStreamWaitEvent: no host wait) or, when its work is host-side
  // (NVMe, the CPU optimizer, host copies, alloc/free), on the host; a task that does no GPU work waits on
  // the host too, so that its completion still means everything before it is done. The events also time the
  // tasks: the trace shows when the GPU ran them, not when they were queued.
  bool gpu_async = false;
#if MEMWALL_HAVE_CUDA
  std::vector<std::unique_ptr<gpu::Event>> ev_start, ev_end;  // per task
  std::vector<char> pending;                                  // per task: end recorded in this run
  std::unique_ptr<gpu::Event> ev_origin;                      // time zero of a run on the GPU ...
  double origin_s = 0;                                        // ... and on the host clock
  Status deps_on_host();
  Status deps_on_stream(const gpu::Stream& s);
  Status done_on(const gpu::Stream& s);
#endif
  // On a GPU, host memory the GPU copies to and from is page-locked (cudaHostRegister), so the copies are
  // DMA: the pinned pools, the buffers the plan marks pinned (offload_param / offload_optimizer `pin_memory`)
  // and the CPU optimizer's bf16 staging. Undone before that memory goes (declared after every member that
  // owns such memory, so destroyed before them).
  struct Registered {
    std::vector<std::pair<void*, std::size_t>> ranges;
    ~Registered();
  } registered;
  Status page_lock(void* p, std::size_t bytes, const std::string& what);
  std::vector<std::string> warnings;  // what the caller should hear about but that does not stop training
  std::string pin_refused;            // why the driver would not page-lock host memory, if it would not
  std::size_t unpinned = 0;
  double unpinned_bytes = 0;
  // Whether buffer b's bytes are in GPU memory.
  bool on_device(int b) const {
    return cuda && sched.buffers[static_cast<std::size_t>(b)].tier == Tier::kGpu;
  }
  // memcpy between any two places, host or device: a GPU copy on the stream of its direction, waited for
  // unless `last` (the task's final work, completed asynchronously when that is on).
  Status move(void* dst, bool dst_dev, const void* src, bool src_dev, std::size_t bytes, bool last = false);
  Status zero(void* p, bool dev, std::size_t bytes, bool last = false);  // `last` as for move()
  Status compute_cuda(const Task& t);
  Status collective_cuda(const Task& t, const std::string& at, comm::Communicator& comm, double& moved_bytes);

  char* ptr(int buf) const {
    char* p = mem[static_cast<std::size_t>(buf)];
    MW_CHECK(p != nullptr,
             "buffer " + sched.buffers[static_cast<std::size_t>(buf)].name + " is not in memory");
    return p;
  }
  const Buffer& buffer(int b) const {
    return sched.buffers[static_cast<std::size_t>(b)];
  }
  int use(const Task& t, BufferRole role) const {
    for (int b : t.uses) {
      if (buffer(b).role == role) return b;
    }
    return -1;
  }
  int use_of_param(const Task& t, int p, std::initializer_list<BufferRole> roles) const {
    for (BufferRole r : roles) {
      for (int b : t.uses) {
        if (buffer(b).param == p && buffer(b).role == r) return b;
      }
    }
    return -1;
  }
  const Part& part(int p) const {
    return parts[static_cast<std::size_t>(p)];
  }
  // This rank's bf16 shard of parameter p: its shard buffer (stage 3), or its slice of the whole copy every
  // rank keeps (stages 1 and 2 and stage 3's persistent parameters; all of it in stage 0), and the buffer
  // that holds it.
  int shard16_buffer(int p) const {
    const auto i = static_cast<std::size_t>(p);
    return shard_buf[i] >= 0 ? shard_buf[i] : resident[i];
  }
  char* shard16(int p) const {
    const auto i = static_cast<std::size_t>(p);
    if (shard_buf[i] >= 0) return ptr(shard_buf[i]);
    return ptr(resident[i]) + static_cast<std::size_t>(partition) * parts[i].shard * kB16;
  }
  // This rank's shard of parameter p's fp32 gradient in buffer b: all of a shard buffer, or this rank's slice
  // of a whole gradient (stages 0 and 1 keep whole gradients, all-reduced).
  float* grad_shard(int p, int b) const {
    auto* g = reinterpret_cast<float*>(ptr(b));
    return buffer(b).role == BufferRole::kGrad ? g + static_cast<std::size_t>(partition) * part(p).shard : g;
  }

  double bytes_of(const Buffer& b) const;
  Status alloc(int b);
  void release(int b);
  Status bind(const Task& t, int step_no);
  Status compute(const Task& t);
  Status copy(const Task& t, double& moved_bytes);
  Status nvme_read(const Task& t, double& moved_bytes);
  Status nvme_write(const Task& t, double& moved_bytes);
  Status collective(const Task& t, const std::string& at, comm::Communicator& comm, double& moved_bytes);
  // Stages 0 and 1: parameter p's whole gradient in buffer b, replaced by its mean over the ranks.
  Status all_reduce_grad(int p, int b, const std::string& tag, comm::Communicator& comm, double& moved_bytes);
  // Stages 1 and 2 (stage 3: its persistent parameters): every rank's slice of the whole bf16 copies of
  // sub-group g's parameters (after its optimizer step, or after the states were installed; g < 0: every
  // sub-group's), gathered into every rank's copies.
  Status gather_resident(int g, const std::string& tag, comm::Communicator& comm, double& moved_bytes);
  // Any task: bind() or collective(), with the bookkeeping of asynchronous GPU completion around it.
  Status run_task(const Task& t, int step_no, const std::string& at, comm::Communicator& comm);
  // The schedule's tasks in `include` on the lanes (every GPU task done after, with the GPU's own times);
  // `started`: when the lanes began.
  Result<RunResult> run_lanes(const std::vector<char>& include, int step_no, const std::string& at,
                              comm::Communicator& comm, double& started);
  Status optimizer(const Task& t);
  // Where an updated bf16 parameter goes from the optimizer: straight into its shard when that lives next to
  // the states, else a staging area the following copy or NVMe write takes it from.
  std::uint16_t* updated16(const Task& t, int p);
  // The store is thread-safe for get/write: the NVMe read and write lanes overlap.
  Status store_get(const std::string& key, void* dst, std::size_t bytes) {
    return store->get(key, dst, bytes);
  }
  Status store_put(const std::string& key, const void* src, std::size_t bytes) {
    Status s = store->write(key, src, bytes);
    const auto used = static_cast<double>(store->capacity_bytes() - store->free_bytes());
    std::lock_guard<std::mutex> lock(store_mu);
    nvme_peak = std::max(nvme_peak, used);
    return s;
  }
  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double tier_peak(Tier t) const;
  // The arena of the pinned pool the optimizer's sub-group swap slots come from (NVMe optimizer), or null.
  host::Arena* optimizer_pool() const;
  // On a GPU: the device memory beside the tier (the model's activations and the trainer's scratch).
  std::size_t outside_tier_bytes() const;
};

Zero3Trainer::State::Registered::~Registered() {
#if MEMWALL_HAVE_CUDA
  for (const auto& [p, n] : ranges) gpu::unregister_host(p, n);
#endif
}

// Real sizes: shards are ceil(numel / partitions) elements (padded), parameters bf16, gradients fp32.
double Zero3Trainer::State::bytes_of(const Buffer& b) const {
  if (b.param >= 0) {
    const double S = static_cast<double>(part(b.param).shard), full = S * partitions;
    switch (b.role) {
      case BufferRole::kShard:
      case BufferRole::kStaged:
      case BufferRole::kSwapIn:
        return S * kB16;
      case BufferRole::kGathered:
      case BufferRole::kResident:
        return full * kB16;
      case BufferRole::kGrad:
        return full * 4;
      case BufferRole::kGradShard:
      case BufferRole::kGradSwapOut:
        return S * 4;
      default:
        break;
    }
  }
  // An offloaded activation checkpoint holds the model's fp32 residual stream (planned at the run's
  // activation width).
  if (b.category == MemCategory::kActivationCheckpoints && b.tier == Tier::kCpu)
    return static_cast<double>(residual_floats) * 4;
  if (b.role == BufferRole::kOptimizerSwap) {
    std::size_t most = 0;
    for (const Group& g : groups) most = std::max(most, g.end - g.begin);
    return static_cast<double>(most) * static_cast<double>(slot_fp32_bytes() + kB16);
  }
  switch (b.category) {
    case MemCategory::kMasterParams32:
    case MemCategory::kMomentum32:
    case MemCategory::kVariance32:
    case MemCategory::kGrads32:
      // (Twin-Flow: the GPU's part, then the CPU's.)
      if (split > 0) return static_cast<double>(b.tier == Tier::kGpu ? split : total - split) * 4;
      return static_cast<double>(total) * 4;
    default:
      return std::ceil(b.bytes);
  }
}

Status Zero3Trainer::State::alloc(int b) {
  const Buffer& buf = buffer(b);
  const double bytes = bytes_of(buf);
  real_bytes[static_cast<std::size_t>(b)] = bytes;
  if (buf.tier == Tier::kNvme) return Status::ok();  // the store holds NVMe data (see store_put)
  // On a GPU the model holds the activations, and the runtime its share, outside the tier: these buffers
  // are the plan's timeline only (nothing reads or writes them).
  if (cuda && held_outside_gpu_tier(buf)) return Status::ok();
  host::Arena* arena = buf.tier == Tier::kGpu ? device.get() : host_mem.get();
  if (buf.pool >= 0) arena = pools.at(buf.pool).get();
  // A pinned host buffer of its own on a GPU (not a pool's slot, nor a pool's bookkeeping block): whole
  // pages, so that page-locking it touches no neighbour.
  const bool lock = cuda && buf.pinned && buf.persistent && buf.tier == Tier::kCpu && buf.pool < 0 &&
                    buf.category != MemCategory::kPinnedSwapBuffers;
  constexpr std::size_t kPage = 4096;
  const auto n = static_cast<std::size_t>(bytes);
  auto blk = arena->allocate(lock ? n + 2 * kPage : n, buf.name);
  if (!blk.is_ok()) return blk.status();
  block[static_cast<std::size_t>(b)] = *blk;
  arena_of[static_cast<std::size_t>(b)] = arena;
  mem[static_cast<std::size_t>(b)] = static_cast<char*>(blk->data);
  if (lock) {
    const auto at = (reinterpret_cast<std::uintptr_t>(blk->data) + kPage - 1) / kPage * kPage;
    mem[static_cast<std::size_t>(b)] = reinterpret_cast<char*>(at);
    MW_RETURN_IF_ERROR(
        page_lock(mem[static_cast<std::size_t>(b)], (n + kPage - 1) / kPage * kPage, buf.name));
  }
  if (buf.persistent && buf.role == BufferRole::kOther && (buf.category == MemCategory::kPinnedSwapBuffers) &&
      buf.pool < 0) {
    // A pinned pool: its slots are carved from an arena of the pool's size, scaled by how much larger the
    // real slots are than planned (shard padding) plus each slot's alignment.
    double ratio = 1, slots = 0;
    for (const Buffer& sb : sched.buffers) {
      if (sb.pool != b) continue;
      slots += 1;
      if (sb.bytes > 0) ratio = std::max(ratio, bytes_of(sb) / sb.bytes);
    }
    auto& pool = pools[b] = std::make_unique<host::Arena>(
        buf.name, static_cast<std::size_t>(bytes * ratio + (slots + 1) * host::Arena::kAlign));
    if (cuda && pool->capacity() > 0) MW_RETURN_IF_ERROR(page_lock(pool->base(), pool->capacity(), buf.name));
  }
  // Gradients accumulate from zero.
  if (buf.role == BufferRole::kGrad || buf.role == BufferRole::kGradShard)
    return zero(blk->data, on_device(b), static_cast<std::size_t>(bytes), true);
  return Status::ok();
}

Status Zero3Trainer::State::page_lock(void* p, std::size_t bytes, const std::string& what) {
#if MEMWALL_HAVE_CUDA
  // Where the driver refuses (some sandboxes do), the memory stays pageable: copies through it still work,
  // staged by the driver and synchronous, so one warning (create() adds it) rather than an error, and no
  // further tries.
  Status s = pin_refused.empty() ? gpu::register_host(p, bytes) : Status::unavailable(pin_refused);
  if (!s.is_ok()) {
    if (pin_refused.empty()) pin_refused = "page-locking " + what + ": " + s.message();
    ++unpinned;
    unpinned_bytes += static_cast<double>(bytes);
    return Status::ok();
  }
  registered.ranges.emplace_back(p, bytes);
  return Status::ok();
#else
  (void)p, (void)bytes;
  return Status::internal(what + ": page-locking for a GPU in a build without CUDA");
#endif
}

std::size_t Zero3Trainer::State::outside_tier_bytes() const {
#if MEMWALL_HAVE_CUDA
  if (cuda && gpu) return gpu->arena().used() - tier_block.bytes;
#endif
  return 0;
}

void Zero3Trainer::State::release(int b) {
  const Buffer& buf = buffer(b);
  if (buf.tier == Tier::kNvme) return;
  host::Arena* a = arena_of[static_cast<std::size_t>(b)];
  if (a == nullptr) return;  // never allocated (a task left out of an evaluation)
  a->release(block[static_cast<std::size_t>(b)]);
  arena_of[static_cast<std::size_t>(b)] = nullptr;
  mem[static_cast<std::size_t>(b)] = nullptr;
}

double Zero3Trainer::State::tier_peak(Tier t) const {
  if (t == Tier::kGpu) return static_cast<double>(device->peak() + outside_tier_bytes()) - reserved[0];
  if (t == Tier::kCpu) return static_cast<double>(host_mem->peak()) - reserved[1];
  return nvme_peak;
}

Status Zero3Trainer::State::move(void* dst, bool dst_dev, const void* src, bool src_dev, std::size_t bytes,
                                 bool last) {
  if (!dst_dev && !src_dev) {
#if MEMWALL_HAVE_CUDA
    MW_RETURN_IF_ERROR(deps_on_host());
#endif
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
#if MEMWALL_HAVE_CUDA
  const gpu::Stream& s = dst_dev && !src_dev ? gpu->h2d() : (!dst_dev ? gpu->d2h() : gpu->compute());
  MW_RETURN_IF_ERROR(deps_on_stream(s));
  const cudaError_t rc =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s.get()));
  if (rc != cudaSuccess) return Status::internal(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(rc));
  return last ? done_on(s) : s.synchronize();
#else
  (void)last;
  return Status::internal("device memory in a build without CUDA");
#endif
}

#if MEMWALL_HAVE_CUDA
// Before a task's host-side work: the host waits for its dependencies' GPU work.
Status Zero3Trainer::State::deps_on_host() {
  GpuTask* c = tl_gpu_task;
  if (c == nullptr || c->host_waited) return Status::ok();
  for (const int d : c->task->deps) {
    if (pending[static_cast<std::size_t>(d)] != 0)
      MW_RETURN_IF_ERROR(ev_end[static_cast<std::size_t>(d)]->synchronize());
  }
  c->host_waited = true;
  return Status::ok();
}

// Before a task's work on stream `s`: the stream waits for the dependencies' GPU work (once per stream);
// the first time, the task's start is recorded.
Status Zero3Trainer::State::deps_on_stream(const gpu::Stream& s) {
  GpuTask* c = tl_gpu_task;
  if (c == nullptr) return Status::ok();
  for (const void* w : c->waited) {
    if (w == s.get()) return Status::ok();
  }
  if (!c->host_waited) {
    for (const int d : c->task->deps) {
      if (pending[static_cast<std::size_t>(d)] != 0)
        MW_RETURN_IF_ERROR(ev_end[static_cast<std::size_t>(d)]->wait(s));
    }
  }
  if (c->waited.empty()) MW_RETURN_IF_ERROR(ev_start[static_cast<std::size_t>(c->task->id)]->record(s));
  c->waited.push_back(s.get());
  return Status::ok();
}

// The end of a task's work on `s`: with asynchronous completion, its end event (joining an earlier stream's
// record, if the task used two); else the stream drained.
Status Zero3Trainer::State::done_on(const gpu::Stream& s) {
  GpuTask* c = tl_gpu_task;
  if (c == nullptr) return s.synchronize();
  const auto id = static_cast<std::size_t>(c->task->id);
  if (std::find(c->waited.begin(), c->waited.end(), s.get()) == c->waited.end())
    return Status::internal(c->task->name +
                            ": GPU work on a stream that did not wait for the task's dependencies");
  if (c->recorded != nullptr && c->recorded != s.get()) MW_RETURN_IF_ERROR(ev_end[id]->wait(s));
  MW_RETURN_IF_ERROR(ev_end[id]->record(s));
  c->recorded = s.get();
  pending[id] = 1;
  return Status::ok();
}
#endif

Status Zero3Trainer::State::zero(void* p, bool dev, std::size_t bytes, bool last) {
  if (!dev) {
    std::memset(p, 0, bytes);
    return Status::ok();
  }
#if MEMWALL_HAVE_CUDA
  MW_RETURN_IF_ERROR(deps_on_stream(gpu->compute()));
  const cudaError_t rc = cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(gpu->compute().get()));
  if (rc != cudaSuccess) return Status::internal(std::string("cudaMemsetAsync: ") + cudaGetErrorString(rc));
  return last ? done_on(gpu->compute()) : gpu->compute().synchronize();
#else
  (void)last;
  return Status::internal("device memory in a build without CUDA");
#endif
}

// GPU compute: each gathered bf16 parameter widened to fp32 in device scratch (as the CPU path does in host
// vectors), then the op on the compute stream.
Status Zero3Trainer::State::compute_cuda(const Task& t) {
#if MEMWALL_HAVE_CUDA
  const GraphOp& op = gg.graph.ops[static_cast<std::size_t>(t.op)];
  std::vector<const float*> pp;
  std::vector<float*> gp;
  std::size_t off = 0;
  void* stream = gpu->compute().get();
  MW_RETURN_IF_ERROR(deps_on_stream(gpu->compute()));
  // With bf16 GEMMs a linear's (or the head's) weights go to the GEMMs as the gathered bf16 copies they are;
  // the other parameters are widened to fp32.
  std::vector<const std::uint16_t*> p16;
  for (std::size_t k = 0; k < op.params.size(); ++k) {
    const int p = op.params[k];
    const int b = use_of_param(
        t, p, {BufferRole::kGathered, BufferRole::kStaged, BufferRole::kShard, BufferRole::kResident});
    if (b < 0 || !on_device(b))
      return Status::internal(t.name + ": the schedule gives no device copy of parameter " +
                              std::to_string(p));
    const std::size_t n = part(p).numel;
    p16.push_back(reinterpret_cast<const std::uint16_t*>(ptr(b)));
    if (cmodel->bf16_weight(t.op, static_cast<int>(k))) {
      pp.push_back(nullptr);
    } else {
      if (int rc = kernels::cuda::cast_bf16_to_f32(ptr(b), work_dev + off, n, stream); rc != 0)
        return Status::internal(t.name + ": " + kernels::cuda::error_string(rc));
      pp.push_back(work_dev + off);
      off += (n + 63) / 64 * 64;
    }
    if (t.phase == Phase::kBackward) {
      const int g = use_of_param(t, p, {BufferRole::kGrad, BufferRole::kGradShard});
      if (g < 0 || !on_device(g))
        return Status::internal(t.name + ": the schedule gives no device gradient for parameter " +
                                std::to_string(p));
      gp.push_back(reinterpret_cast<float*>(ptr(g)));
    }
  }
  MW_RETURN_IF_ERROR(t.phase == Phase::kBackward ? cmodel->backward_op(t.op, pp.data(), gp.data(), p16.data())
                                                 : cmodel->forward_op(t.op, pp.data(), p16.data()));
  return done_on(gpu->compute());
#else
  (void)t;
  return Status::internal("GPU compute in a build without CUDA");
#endif
}

Status Zero3Trainer::State::compute(const Task& t) {
  if (cuda) return compute_cuda(t);
  const GraphOp& op = gg.graph.ops[static_cast<std::size_t>(t.op)];
  if (work.size() < op.params.size()) work.resize(op.params.size());
  std::vector<const float*> pp;
  std::vector<float*> gp;
  std::vector<const std::uint16_t*> p16;  // the gathered bf16 parameters, which bf16 GEMMs take as they are
  for (std::size_t k = 0; k < op.params.size(); ++k) {
    const int p = op.params[k];
    const int b = use_of_param(
        t, p, {BufferRole::kGathered, BufferRole::kStaged, BufferRole::kShard, BufferRole::kResident});
    if (b < 0)
      return Status::internal(t.name + ": the schedule gives no gathered copy of parameter " +
                              std::to_string(p));
    const std::size_t n = part(p).numel;
    const auto* gathered = reinterpret_cast<const std::uint16_t*>(ptr(b));
    p16.push_back(gathered);
    if (model->bf16_weight(t.op, static_cast<int>(k))) {  // read only in bf16: no fp32 copy
      pp.push_back(nullptr);
    } else {
      work[k].resize(n);
      kernels::cast_bf16_to_f32(gathered, work[k].data(), n);
      pp.push_back(work[k].data());
    }
    if (t.phase == Phase::kBackward) {
      const int g = use_of_param(t, p, {BufferRole::kGrad, BufferRole::kGradShard});
      if (g < 0)
        return Status::internal(t.name + ": the schedule gives no gradient buffer for parameter " +
                                std::to_string(p));
      gp.push_back(reinterpret_cast<float*>(ptr(g)));
    }
  }
  if (t.phase == Phase::kBackward)
    model->backward_op(t.op, pp.data(), gp.data(), p16.data());
  else
    model->forward_op(t.op, pp.data(), p16.data());
  return Status::ok();
}

std::uint16_t* Zero3Trainer::State::updated16(const Task& t, int p) {
  const Part& pt = part(p);
  const Tier tier = group_tier(t.subgroup), staging = tier == Tier::kGpu ? Tier::kGpu : Tier::kCpu;
  if (home[static_cast<std::size_t>(p)] == staging) return reinterpret_cast<std::uint16_t*>(shard16(p));
  if (opt_tier == Tier::kNvme) {
    const Group& g = groups[static_cast<std::size_t>(t.subgroup)];
    const std::size_t n = g.end - g.begin;
    char* slot = ptr(use(t, BufferRole::kOptimizerSwap));
    return reinterpret_cast<std::uint16_t*>(slot + slot_fp32_bytes() * n) + (pt.local - g.begin);
  }
  return out16 + pt.local;
}

Status Zero3Trainer::State::copy(const Task& t, double& moved_bytes) {
  if (t.param >= 0) {
    const Part& pt = part(t.param);
    if (t.dst == Tier::kGpu) {  // a shard to the device, before its all-gather
      const int dst = use(t, BufferRole::kStaged);
      const int src = t.uses[0] == dst ? t.uses[1] : t.uses[0];
      moved_bytes = static_cast<double>(pt.shard * kB16);
      return move(ptr(dst), on_device(dst), ptr(src), on_device(src), pt.shard * kB16, true);
    }
    // A gradient shard off the device: into the fp32 gradients (CPU states) or an NVMe swap-out slot.
    const int src = t.uses[0];
    const int slot = use(t, BufferRole::kGradSwapOut);
    float* dst = slot >= 0 ? reinterpret_cast<float*>(ptr(slot)) : cpu_grads(grads32, pt.local);
    const float* shard = grad_shard(t.param, src);
    moved_bytes = static_cast<double>(pt.shard * 4);
    // Gradient accumulation: added to the earlier micro-batches' sum (read into the slot), unless the
    // micro-batches were summed before (stage 1's whole gradients, offloaded once per step).
    if (micro > 0 && !t.last_micro_batch) {
      const float* from = shard;
      std::vector<float> staged;
      if (on_device(src)) {
        staged.resize(pt.shard);
        MW_RETURN_IF_ERROR(move(staged.data(), false, from, true, pt.shard * 4));
        from = staged.data();
      }
      for (std::size_t i = 0; i < pt.shard; ++i) dst[i] += from[i];
      return Status::ok();
    }
    return move(dst, slot >= 0 ? on_device(slot) : false, shard, on_device(src), pt.shard * 4, true);
  }
  if (t.subgroup >= 0 && t.dst == Tier::kGpu) {  // updated bf16 parameters back to their device shards
    const Group& g = groups[static_cast<std::size_t>(t.subgroup)];
    for (std::size_t p = g.first; p < g.last; ++p) {
      if (home[p] != Tier::kGpu) continue;
      const int q = static_cast<int>(p);
      MW_RETURN_IF_ERROR(move(shard16(q), on_device(shard16_buffer(q)), updated16(t, q),
                              cuda && group_tier(t.subgroup) == Tier::kGpu, parts[p].shard * kB16, true));
      moved_bytes += static_cast<double>(parts[p].shard * kB16);
    }
    return Status::ok();
  }
  // An activation checkpoint (cpu_checkpointing): the model's residual stream at the segment's first layer
  // (its buffer on the device is the checkpoint's device copy) to the plan's CPU buffer after the forward
  // wrote it, and back before the segment's recompute reads it.
  if (t.layer < 0) return Status::internal(t.name + ": memwall train has no binding for this copy");
  const int host = buffer(t.uses[0]).tier == Tier::kCpu ? t.uses[0] : t.uses[1];
  float* model_copy = residual(t.layer);
  const std::size_t bytes = residual_floats * 4;
  moved_bytes = static_cast<double>(bytes);
  if (t.dst == Tier::kCpu) return move(ptr(host), false, model_copy, cuda, bytes, true);
  if (scrub_checkpoints) {
    const std::vector<float> nan(residual_floats, std::numeric_limits<float>::quiet_NaN());
    MW_RETURN_IF_ERROR(move(model_copy, cuda, nan.data(), false, bytes));
  }
  return move(model_copy, cuda, ptr(host), false, bytes, true);
}

float* Zero3Trainer::State::residual(int layer) const {
#if MEMWALL_HAVE_CUDA
  if (cuda) return cmodel->residual(layer);
#endif
  return model->residual(layer);
}

Status Zero3Trainer::State::nvme_read(const Task& t, double& moved_bytes) {
  if (t.param >= 0 && t.later_micro_batches) {  // the earlier micro-batches' gradient sum, to be added to
    const Part& pt = part(t.param);
    MW_RETURN_IF_ERROR(store_get(store_key("grad", static_cast<std::size_t>(t.param)),
                                 ptr(use(t, BufferRole::kGradSwapOut)), pt.shard * 4));
    moved_bytes = static_cast<double>(pt.shard * 4);
    return Status::ok();
  }
  if (t.param >= 0) {
    const Part& pt = part(t.param);
    MW_RETURN_IF_ERROR(store_get(store_key("param", static_cast<std::size_t>(t.param)),
                                 ptr(use(t, BufferRole::kSwapIn)), pt.shard * kB16));
    moved_bytes = static_cast<double>(pt.shard * kB16);
    return Status::ok();
  }
  // An optimizer sub-group into its slot: master, momentum and variance ("nvme->cpu optimizer", possibly
  // during backward), then each parameter's fp32 gradient shard ("nvme->cpu grads", after backward).
  const Group& g = groups[static_cast<std::size_t>(t.subgroup)];
  const std::size_t n = g.end - g.begin;
  char* slot = ptr(use(t, BufferRole::kOptimizerSwap));
  if (t.name.rfind("nvme->cpu grads", 0) != 0) {
    MW_RETURN_IF_ERROR(store_get(store_key("opt", static_cast<std::size_t>(t.subgroup)), slot, 12 * n));
    moved_bytes = static_cast<double>(12 * n);
    return Status::ok();
  }
  for (std::size_t p = g.first; p < g.last; ++p) {
    MW_RETURN_IF_ERROR(
        store_get(store_key("grad", p), slot + 12 * n + 4 * (parts[p].local - g.begin), parts[p].shard * 4));
  }
  moved_bytes = static_cast<double>(4 * n);
  return Status::ok();
}

Status Zero3Trainer::State::nvme_write(const Task& t, double& moved_bytes) {
  if (t.param >= 0) {  // a gradient shard, from its swap-out slot
    const Part& pt = part(t.param);
    auto* slot = reinterpret_cast<float*>(ptr(use(t, BufferRole::kGradSwapOut)));
    if (clip > 0 && last_micro && !bias_rule[static_cast<std::size_t>(t.param)])
      grad_sq[static_cast<std::size_t>(t.param)] = kernels::sum_of_squares(slot, valid(pt), adam_threads);
    MW_RETURN_IF_ERROR(store_put(store_key("grad", static_cast<std::size_t>(t.param)), slot, pt.shard * 4));
    moved_bytes = static_cast<double>(pt.shard * 4);
    return Status::ok();
  }
  const Group& g = groups[static_cast<std::size_t>(t.subgroup)];
  const std::size_t n = g.end - g.begin;
  if (t.name.rfind("cpu->nvme params", 0) == 0) {  // updated bf16 parameters to their NVMe shards
    for (std::size_t p = g.first; p < g.last; ++p) {
      if (home[p] != Tier::kNvme) continue;
      MW_RETURN_IF_ERROR(
          store_put(store_key("param", p), updated16(t, static_cast<int>(p)), parts[p].shard * kB16));
      moved_bytes += static_cast<double>(parts[p].shard * kB16);
    }
    return Status::ok();
  }
  MW_RETURN_IF_ERROR(store_put(store_key("opt", static_cast<std::size_t>(t.subgroup)),
                               ptr(use(t, BufferRole::kOptimizerSwap)), 12 * n));
  moved_bytes = static_cast<double>(12 * n);
  return Status::ok();
}

Status Zero3Trainer::State::collective_cuda(const Task& t, const std::string& at, comm::Communicator& comm,
                                            double& moved_bytes) {
#if MEMWALL_HAVE_CUDA
  const Part& pt = part(t.param);
  const auto R_ = static_cast<std::size_t>(R);
  const gpu::Stream& s = gpu->comm();
  if (t.collective == CollectiveKind::kAllGather) {
    const int dst = use(t, BufferRole::kGathered);
    const int src = t.uses[0] == dst ? t.uses[1] : t.uses[0];
    moved_bytes = static_cast<double>(pt.shard * kB16 * R_);
#if MEMWALL_HAVE_NCCL
    if (nccl) {
      MW_RETURN_IF_ERROR(deps_on_stream(s));
      MW_RETURN_IF_ERROR(nccl->all_gather(ptr(src), ptr(dst), pt.shard * kB16, s.get()));
      return done_on(s);
    }
#endif
    if (R == 1 && on_device(src) && on_device(dst)) {  // one shard: a device copy on the collective stream
      MW_RETURN_IF_ERROR(deps_on_stream(s));
      const cudaError_t rc = cudaMemcpyAsync(ptr(dst), ptr(src), pt.shard * kB16, cudaMemcpyDeviceToDevice,
                                             static_cast<cudaStream_t>(s.get()));
      if (rc != cudaSuccess) return Status::internal(t.name + ": " + cudaGetErrorString(rc));
      return done_on(s);
    }
    // Without NCCL: through host memory and the host communicator.
    std::vector<std::uint16_t> shard(pt.shard), full(pt.shard * R_);
    MW_RETURN_IF_ERROR(move(shard.data(), false, ptr(src), on_device(src), pt.shard * kB16));
    MW_RETURN_IF_ERROR(comm.allgather(shard.data(), full.data(), pt.shard * kB16, at + t.name));
    return move(ptr(dst), on_device(dst), full.data(), false, full.size() * kB16);
  }
  if (t.collective == CollectiveKind::kReduceScatter) {
    const int src = use(t, BufferRole::kGrad), dst = use(t, BufferRole::kGradShard);
    moved_bytes = static_cast<double>(pt.shard * 4 * R_);
    bool done = false;
    const float* summed = reduced_dev;
    if (R == 1 && on_device(src)) {  // the sum over one rank is the gradient itself
      summed = reinterpret_cast<const float*>(ptr(src));
      done = true;
    }
#if MEMWALL_HAVE_NCCL
    if (nccl && !done) {
      MW_RETURN_IF_ERROR(deps_on_stream(s));
      MW_RETURN_IF_ERROR(
          nccl->reduce_scatter_sum(reinterpret_cast<const float*>(ptr(src)), reduced_dev, pt.shard, s.get()));
      done = true;
    }
#endif
    if (!done) {
      std::vector<float> full(pt.shard * R_);
      reduced.resize(pt.shard);
      MW_RETURN_IF_ERROR(move(full.data(), false, ptr(src), on_device(src), full.size() * 4));
      MW_RETURN_IF_ERROR(comm.reduce_scatter_sum(full.data(), reduced.data(), pt.shard, at + t.name));
      // The collective stream may still be summing the previous reduce-scatter out of reduced_dev.
      MW_RETURN_IF_ERROR(s.synchronize());
      MW_RETURN_IF_ERROR(move(reduced_dev, true, reduced.data(), false, pt.shard * 4));
    }
    // Accumulated and averaged over the ranks, as on the CPU.
    MW_RETURN_IF_ERROR(deps_on_stream(s));
    const int rc =
        kernels::cuda::accumulate_strided(reinterpret_cast<float*>(ptr(dst)), 0, summed, 0, 1,
                                          static_cast<int>(pt.shard), 1.0f / static_cast<float>(R), s.get());
    if (rc != 0) return Status::internal(t.name + ": " + kernels::cuda::error_string(rc));
    return done_on(s);
  }
  return Status::internal(t.name + ": memwall train has no binding for a " + collective_name(t.collective));
#else
  (void)t, (void)at, (void)comm, (void)moved_bytes;
  return Status::internal("GPU collectives in a build without CUDA");
#endif
}

Status Zero3Trainer::State::collective(const Task& t, const std::string& at, comm::Communicator& comm,
                                       double& moved_bytes) {
  if (t.collective == CollectiveKind::kAllGather && t.param < 0)
    return gather_resident(t.subgroup, at + t.name, comm, moved_bytes);
  if (t.collective == CollectiveKind::kAllReduce && t.param >= 0) {
    const int b = use(t, BufferRole::kGrad);
    if (b < 0) return Status::internal(t.name + ": the schedule gives no gradient to all-reduce");
    return all_reduce_grad(t.param, b, at + t.name, comm, moved_bytes);
  }
#if MEMWALL_HAVE_CUDA
  if (cuda) return collective_cuda(t, at, comm, moved_bytes);
#endif
  const Part& pt = part(t.param);
  if (t.collective == CollectiveKind::kAllGather) {
    const int dst = use(t, BufferRole::kGathered);
    const int src = t.uses[0] == dst ? t.uses[1] : t.uses[0];
    moved_bytes = static_cast<double>(pt.shard * kB16 * static_cast<std::size_t>(R));
    return comm.allgather(ptr(src), ptr(dst), pt.shard * kB16, at + t.name);
  }
  if (t.collective == CollectiveKind::kReduceScatter) {
    const int src = use(t, BufferRole::kGrad), dst = use(t, BufferRole::kGradShard);
    reduced.resize(pt.shard);
    MW_RETURN_IF_ERROR(comm.reduce_scatter_sum(reinterpret_cast<const float*>(ptr(src)), reduced.data(),
                                               pt.shard, at + t.name));
    // Accumulated (a parameter used twice in backward is reduced twice) and averaged over the ranks.
    float* out = reinterpret_cast<float*>(ptr(dst));
    const float inv = 1.0f / static_cast<float>(R);
    for (std::size_t i = 0; i < pt.shard; ++i) out[i] += reduced[i] * inv;
    moved_bytes = static_cast<double>(pt.shard * 4 * static_cast<std::size_t>(R));
    return Status::ok();
  }
  return Status::internal(t.name + ": memwall train has no binding for a " + collective_name(t.collective));
}

Status Zero3Trainer::State::all_reduce_grad(int p, int b, const std::string& tag, comm::Communicator& comm,
                                            double& moved_bytes) {
  // The whole gradient (N elements: stage 1's padded to a multiple of R, stage 0's the parameter's own) in
  // R chunks of C: each rank sums one chunk over the ranks, scales it by 1/R, and all of them are gathered.
  const auto R_ = static_cast<std::size_t>(R);
  const std::size_t N = part(p).shard * static_cast<std::size_t>(partitions), C = (N + R_ - 1) / R_;
  auto* full = reinterpret_cast<float*>(ptr(b));
  moved_bytes = static_cast<double>(2 * C * 4 * R_);
#if MEMWALL_HAVE_NCCL
  if (nccl && on_device(b)) {
    const gpu::Stream& s = gpu->comm();
    const auto stream = static_cast<cudaStream_t>(s.get());
    // dst[0, n) = the sum in the scratch / R.
    const auto write_mean = [&](float* dst, std::size_t n) -> Status {
      if (const cudaError_t rc = cudaMemsetAsync(dst, 0, n * 4, stream); rc != cudaSuccess)
        return Status::internal(tag + ": " + cudaGetErrorString(rc));
      if (int k = kernels::cuda::accumulate_strided(dst, 0, reduced_dev, 0, 1, static_cast<int>(n),
                                                    1.0f / static_cast<float>(R), s.get());
          k != 0)
        return Status::internal(tag + ": " + kernels::cuda::error_string(k));
      return Status::ok();
    };
    MW_RETURN_IF_ERROR(deps_on_stream(s));
    if (C * R_ == N) {  // reduce-scatter, this rank's chunk scaled in place, all-gather in place
      float* own = full + static_cast<std::size_t>(rank) * C;
      MW_RETURN_IF_ERROR(nccl->reduce_scatter_sum(full, reduced_dev, C, s.get()));
      MW_RETURN_IF_ERROR(write_mean(own, C));
      MW_RETURN_IF_ERROR(nccl->all_gather(own, full, C * 4, s.get()));
      return done_on(s);
    }
    // Stage 0 (no padding to split by): R chunks of at most C, each summed by an all-reduce in the scratch
    // (C elements, as for the other stages; the stream orders its reuse), then written back scaled.
    for (std::size_t at = 0; at < N; at += C) {
      const std::size_t n = std::min(C, N - at);
      float* chunk = full + at;
      if (const cudaError_t rc = cudaMemcpyAsync(reduced_dev, chunk, n * 4, cudaMemcpyDeviceToDevice, stream);
          rc != cudaSuccess)
        return Status::internal(tag + ": " + cudaGetErrorString(rc));
      MW_RETURN_IF_ERROR(nccl->all_reduce_sum(reduced_dev, n, s.get()));
      MW_RETURN_IF_ERROR(write_mean(chunk, n));
    }
    return done_on(s);
  }
#endif
  // Through the host communicator (on host copies of device buffers, padded when N is not R chunks): the
  // same reduce-scatter, scaled by 1/R, then all-gathered, so every rank holds bitwise the same mean.
  std::vector<float> staged;
  float* host = full;
  if (on_device(b) || C * R_ != N) {
    staged.assign(C * R_, 0.0f);
    MW_RETURN_IF_ERROR(move(staged.data(), false, full, on_device(b), N * 4));
    host = staged.data();
  }
  reduced.resize(C);
  MW_RETURN_IF_ERROR(comm.reduce_scatter_sum(host, reduced.data(), C, tag));
  const float inv = 1.0f / static_cast<float>(R);
  for (float& x : reduced) x *= inv;
  MW_RETURN_IF_ERROR(comm.allgather(reduced.data(), host, C * 4, tag));
  return host == full ? Status::ok() : move(full, on_device(b), host, false, N * 4);
}

Status Zero3Trainer::State::gather_resident(int g, const std::string& tag, comm::Communicator& comm,
                                            double& moved_bytes) {
  // (g < 0: every sub-group's, as stage 3 gathers its persistent parameters after the last step.)
  const Group grp = g < 0 ? Group{0, parts.size(), 0, total} : groups[static_cast<std::size_t>(g)];
  const auto R_ = static_cast<std::size_t>(R);
  // Stage 3 partitions the other parameters: they have no whole copy to gather into.
  const auto whole = [&](std::size_t p) { return stage < 3 || resident[p] >= 0; };
#if MEMWALL_HAVE_NCCL
  if (nccl && cuda) {  // in place, on the collective stream (the whole copies are on the device)
    const gpu::Stream& s = gpu->comm();
    MW_RETURN_IF_ERROR(deps_on_stream(s));
    for (std::size_t p = grp.first; p < grp.last; ++p) {
      if (!whole(p)) continue;
      const std::size_t bytes = parts[p].shard * kB16;
      MW_RETURN_IF_ERROR(nccl->all_gather(shard16(static_cast<int>(p)), ptr(resident[p]), bytes, s.get()));
      moved_bytes += static_cast<double>(bytes * R_);
    }
    return done_on(s);
  }
#endif
  std::vector<char> mine, staged;
  for (std::size_t p = grp.first; p < grp.last; ++p) {
    if (!whole(p)) continue;
    const int b = resident[p];
    if (b < 0) return Status::internal(tag + ": parameter " + std::to_string(p) + " has no whole copy");
    const std::size_t bytes = parts[p].shard * kB16;
    mine.resize(bytes);
    MW_RETURN_IF_ERROR(move(mine.data(), false, shard16(static_cast<int>(p)), on_device(b), bytes));
    char* full = ptr(b);
    if (on_device(b)) staged.resize(bytes * R_);
    MW_RETURN_IF_ERROR(comm.allgather(mine.data(), on_device(b) ? staged.data() : full, bytes, tag));
    if (on_device(b)) MW_RETURN_IF_ERROR(move(full, true, staged.data(), false, bytes * R_));
    moved_bytes += static_cast<double>(bytes * R_);
  }
  return Status::ok();
}

Status Zero3Trainer::State::clip_gradients(const std::string& at, comm::Communicator& comm) {
#if MEMWALL_HAVE_CUDA
  if (cuda) MW_RETURN_IF_ERROR(deps_on_host());  // the gradients' GPU work (reduce-scatters, copies) is done
#endif
  // This rank's squares: where the gradients wait for the optimizer (on the GPU, in CPU memory), or as the
  // last micro-batch wrote them to NVMe.
  const bool on_nvme = opt_tier == Tier::kNvme && !grads_in_cpu;
  // Gradients in device memory: their squares summed there, one copy of the sums down for them all.
  std::vector<double> device_sq(cuda ? parts.size() : 0);
#if MEMWALL_HAVE_CUDA
  if (cuda && !on_nvme) {
    MW_RETURN_IF_ERROR(deps_on_stream(gpu->compute()));
    void* stream = gpu->compute().get();
    bool any = false;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const int b = persistent_grad[p];
      if (param_opt_tier(p) != Tier::kGpu || b < 0 || !on_device(b)) continue;
      if (int rc = kernels::cuda::sum_of_squares(grad_shard(static_cast<int>(p), b), valid(parts[p]),
                                                 squares_dev + parts.size(), squares_dev + p, stream);
          rc != 0)
        return Status::internal(std::string("gradient norm: ") + kernels::cuda::error_string(rc));
      any = true;
    }
    if (any) {
      MW_RETURN_IF_ERROR(gpu->compute().synchronize());
      MW_RETURN_IF_ERROR(move(device_sq.data(), false, squares_dev, true, parts.size() * sizeof(double)));
    }
  }
#endif
  double local = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const Part& pt = parts[p];
    if (!on_nvme) {
      const int b = persistent_grad[p];
      const bool gpu_tier = param_opt_tier(p) == Tier::kGpu;
      if (gpu_tier && b < 0)
        return Status::internal("gradient norm: parameter " + std::to_string(p) + " has no gradient");
      // (a correction bias's load errors are not a gradient: not in the norm)
      if (bias_rule[p])
        grad_sq[p] = 0.0;
      else if (gpu_tier && on_device(b))
        grad_sq[p] = device_sq[p];
      else
        grad_sq[p] = kernels::sum_of_squares(
            gpu_tier ? grad_shard(static_cast<int>(p), b) : cpu_grads(step_grads(), pt.local), valid(pt),
            adam_threads);
    }
    local += grad_sq[p];
  }
  // Every rank's, added in rank order (the same sum on every rank); in stage 0 every rank has them all.
  double sq = local;
  if (partitions > 1) {
    std::vector<double> all(static_cast<std::size_t>(R));
    MW_RETURN_IF_ERROR(comm.allgather(&local, all.data(), sizeof(double), at + "gradient norm"));
    sq = 0;
    for (double x : all) sq += x;
  }
  // The norm of the mean over the micro-batches (adam_hyper.grad_scale divides the summed gradients by
  // their count); PyTorch's clip_grad_norm_: scaled by max_norm / (norm + 1e-6) where that is below 1.
  const double mean_scale = adam_hyper.grad_scale;
  grad_norm = std::sqrt(sq) / mean_scale;
  const double coef = clip / (grad_norm + 1e-6);
  if (coef < 1) adam_hyper.grad_scale = static_cast<float>(mean_scale / coef);
  return Status::ok();
}

Status Zero3Trainer::State::optimizer(const Task& t) {
  const Group& g = groups[static_cast<std::size_t>(t.subgroup)];
  const std::size_t n = g.end - g.begin;
  float *p32 = nullptr, *m = nullptr, *v = nullptr, *g32 = nullptr;
  const Tier tier = group_tier(t.subgroup);  // (Twin-Flow: the GPU for the first sub-groups)
#if MEMWALL_HAVE_CUDA
  if (cuda && tier == Tier::kGpu) MW_RETURN_IF_ERROR(deps_on_stream(gpu->compute()));
#endif
  if (tier == Tier::kNvme) {
    p32 = reinterpret_cast<float*>(ptr(use(t, BufferRole::kOptimizerSwap)));
    m = p32 + n;
    v = m + n;
    // The gradients: read into the slot after the states, or where backward left them in CPU memory
    // (memwall.optimizer_gradients; grads32 is set only for a CPU-resident buffer).
    g32 = grads_in_cpu ? grads32 + g.begin : v + n;
  }
  for (std::size_t p = g.first; p < g.last; ++p) {
    const Part& pt = parts[p];
    kernels::AdamArrays a;
    if (tier == Tier::kNvme) {
      const std::size_t off = pt.local - g.begin;
      a = kernels::fp32_arrays(p32 + off, m + off, v + off, g32 + off, pt.shard);
    } else {
      const float* grad = tier == Tier::kCpu ? cpu_grads(step_grads(), pt.local)
                                             : grad_shard(static_cast<int>(p), persistent_grad[p]);
      const StateArrays s = states_at(pt.local);
      a = kernels::fp32_arrays(s.master, s.m, s.v, grad, pt.shard);
    }
    a.params_out = updated16(t, static_cast<int>(p));
    a.out_type = kernels::DType::kBF16;
    if (bias_rule[p]) {  // DeepSeek-V3's rule: down where the expert was overloaded, up where underloaded
      // (a few hundred numbers: on the GPU's tier they come to the host and go back)
      const bool on_gpu = cuda && tier == Tier::kGpu;
      std::vector<float> host_params, host_errors;
      float* params = a.params;
      const auto* load_error = static_cast<const float*>(a.grads);
      if (on_gpu) {
        host_params.resize(a.n);
        host_errors.resize(a.n);
        MW_RETURN_IF_ERROR(move(host_errors.data(), false, load_error, true, a.n * 4));
        MW_RETURN_IF_ERROR(move(host_params.data(), false, params, true, a.n * 4));
        params = host_params.data();
        load_error = host_errors.data();
      }
      for (std::size_t i = 0; i < valid(pt); ++i) {
        const float e = load_error[i];
        params[i] -= static_cast<float>(bias_speed) * static_cast<float>((e > 0) - (e < 0));
      }
      if (!on_gpu) {
        if (a.params_out != nullptr)
          kernels::cast_f32_to_bf16(a.params, static_cast<std::uint16_t*>(a.params_out), a.n);
        continue;
      }
#if MEMWALL_HAVE_CUDA
      MW_RETURN_IF_ERROR(move(a.params, true, params, false, a.n * 4));
      if (a.params_out != nullptr) {
        const int rc = kernels::cuda::cast_f32_to_bf16(a.params, static_cast<std::uint16_t*>(a.params_out),
                                                       a.n, gpu->compute().get());
        if (rc != 0) return Status::internal(t.name + ": " + kernels::cuda::error_string(rc));
      }
#endif
      continue;
    }
    kernels::AdamHyper h = adam_hyper;
    if (!decays[p]) h.weight_decay = 0;
#if MEMWALL_HAVE_CUDA
    if (cuda && tier == Tier::kGpu) {  // states, gradients and the bf16 shard all on the device
      kernels::cuda::AdamDeviceArrays d{a.params,
                                        a.exp_avg,
                                        a.exp_avg_sq,
                                        static_cast<const float*>(a.grads),
                                        static_cast<std::uint16_t*>(a.params_out),
                                        a.n};
      if (int rc = kernels::cuda::adam_step(d, h, gpu->compute().get()); rc != 0)
        return Status::internal(t.name + ": " + kernels::cuda::error_string(rc));
      continue;
    }
#endif
    kernels::adam_step(a, h, adam_threads);
  }
#if MEMWALL_HAVE_CUDA
  if (cuda && tier == Tier::kGpu) return done_on(gpu->compute());
#endif
  return Status::ok();
}

Status Zero3Trainer::State::run_task(const Task& t, int step_no, const std::string& at,
                                     comm::Communicator& comm) {
#if MEMWALL_HAVE_CUDA
  if (cuda) cudaSetDevice(gpu->info().ordinal);  // lanes are threads; the current device is per thread
  GpuTask task;
  task.task = &t;
  struct Scope {
    explicit Scope(GpuTask* c) { tl_gpu_task = c; }
    ~Scope() { tl_gpu_task = nullptr; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  } scope(cuda && gpu_async ? &task : nullptr);
  // Work that is host-side whatever the buffers: the host waits for what it follows first.
  const bool host_side = t.kind == TaskKind::kAlloc || t.kind == TaskKind::kFree ||
                         t.kind == TaskKind::kNvmeRead || t.kind == TaskKind::kNvmeWrite ||
                         (t.kind == TaskKind::kOptimizerStep && group_tier(t.subgroup) != Tier::kGpu);
  if (host_side) MW_RETURN_IF_ERROR(deps_on_host());
#endif
  Status st = Status::ok();
  if (delayed && pending_step == 0 && t.phase == Phase::kOptimizer) {
    // A delayed update with no gradients waiting (the first step, or the first after a checkpoint): nothing
    // to step on, so the optimizer phase does nothing.
  } else if (t.kind == TaskKind::kCollective) {
    double bytes = 0;
    st = collective(t, at, comm, bytes);
    moved[static_cast<std::size_t>(t.id)] = bytes;
  } else {
    // Gradient clipping's norm (the plan's "gradient norm" task, before the first sub-group's step): a
    // collective too, but every other collective of the step precedes the gradients it waits for.
    if (t.kind == TaskKind::kOptimizerStep && t.subgroup < 0) {
      st = clip_gradients(at, comm);
      if (!st.is_ok()) st = Status(st.code(), at + t.name + ": " + st.message());
      moved[static_cast<std::size_t>(t.id)] = t.bytes;
    } else {
      st = bind(t, step_no);
    }
  }
#if MEMWALL_HAVE_CUDA
  // A task that queued no GPU work is complete only once what it follows is.
  if (st.is_ok() && task.recorded == nullptr) st = deps_on_host();
#endif
  return st;
}

Status Zero3Trainer::State::bind(const Task& t, int step_no) {
  double bytes = 0;
  const std::string at = step_no > 0 ? "step " + std::to_string(step_no) + " " : "eval ";
  Status st = Status::ok();
  switch (t.kind) {
    case TaskKind::kAlloc:
      return alloc(t.buffer);
    case TaskKind::kFree:
      release(t.buffer);
      return Status::ok();
    case TaskKind::kCompute:
      st = compute(t);
      break;
    case TaskKind::kCopy:
      st = copy(t, bytes);
      break;
    case TaskKind::kNvmeRead:
      st = nvme_read(t, bytes);
      break;
    case TaskKind::kNvmeWrite:
      st = nvme_write(t, bytes);
      break;
    case TaskKind::kCollective:
      return Status::internal("collectives are bound by the trainer");
    case TaskKind::kOptimizerStep:
      st = optimizer(t);
      bytes = 28.0 * t.elements;
      break;
  }
  if (!st.is_ok()) return Status(st.code(), at + t.name + ": " + st.message());
  moved[static_cast<std::size_t>(t.id)] = bytes;
  return Status::ok();
}

Zero3Trainer::Zero3Trainer(const model::GptConfig& c, const Zero3Options& o, comm::Communicator& comm)
    : c_(c), o_(o), comm_(&comm), st_(std::make_unique<State>()) {}
Zero3Trainer::Zero3Trainer(Zero3Trainer&&) noexcept = default;
Zero3Trainer& Zero3Trainer::operator=(Zero3Trainer&&) noexcept = default;
Zero3Trainer::~Zero3Trainer() = default;

const ModelGraph& Zero3Trainer::graph() const {
  return st_->gg.graph;
}
const Schedule& Zero3Trainer::schedule() const {
  return st_->sched;
}
std::string Zero3Trainer::device_gpu_name() const {
#if MEMWALL_HAVE_CUDA
  if (st_->gpu) return "GPU " + std::to_string(st_->gpu->info().ordinal) + " (" + st_->gpu->info().name + ")";
#endif
  return "no GPU";
}

std::string Zero3Trainer::device_name() const {
  if (st_->cuda) return st_->device->name() + ", CUDA";
  return o_.hw.gpu.model + ", host-emulated";
}

const std::vector<std::string>& Zero3Trainer::warnings() const {
  return st_->warnings;
}

const StepStats& Zero3Trainer::last_step() const {
  return st_->stats;
}
std::size_t Zero3Trainer::device_optimizer_elements() const {
  return st_->split;
}
int Zero3Trainer::optimizer_sub_groups() const {
  return static_cast<int>(st_->groups.size());
}
std::size_t Zero3Trainer::shard_elements() const {
  return st_->total;
}
void Zero3Trainer::set_learning_rate(float lr) {
  st_->adam_hyper.lr = lr;
}
void Zero3Trainer::set_betas(float beta1, float beta2) {
  st_->adam_hyper.beta1 = beta1;
  st_->adam_hyper.beta2 = beta2;
}
double Zero3Trainer::last_grad_norm() const {
  return st_->grad_norm;
}
double Zero3Trainer::last_expert_load() const {
  if (st_->model) return st_->model->expert_load();
  return st_->cmodel ? st_->cmodel->expert_load() : 0;
}
const RunResult& Zero3Trainer::last_run() const {
  return st_->last_run;
}

Schedule Zero3Trainer::measured_schedule() const {
  const bool accumulating = st_->accumulated_steps > 1;
  Schedule s = accumulating ? st_->accumulated.schedule : st_->sched;
  for (Task& t : s.tasks) {
    // A compute task keeps the device memory traffic the plan counts (the roofline's bytes, not measured).
    if (t.resource == Resource::kNone || t.kind == TaskKind::kCompute) continue;
    const auto i = static_cast<std::size_t>(t.id);
    t.bytes = accumulating ? st_->micro_moved[static_cast<std::size_t>(st_->accumulated.micro[i])]
                                             [static_cast<std::size_t>(st_->accumulated.origin[i])]
                           : st_->moved_train[i];
  }
  for (Buffer& b : s.buffers) b.bytes = st_->bytes_of(b);
#if MEMWALL_HAVE_CUDA
  // On a GPU the runtime's share is what memwall's one allocation left of the device (CUDA's context,
  // cuBLAS's workspace, NCCL's buffers, other processes), not the hardware file's estimate.
  if (st_->cuda && st_->gpu) {
    const gpu::DeviceInfo& info = st_->gpu->info();
    for (Buffer& b : s.buffers) {
      if (b.tier == Tier::kGpu && b.category == MemCategory::kRuntimeReserved)
        b.bytes = static_cast<double>(info.total_bytes - st_->gpu->arena().capacity());
    }
  }
#endif
  return s;
}

Result<Zero3Trainer> Zero3Trainer::create(const model::GptConfig& c, const Zero3Options& o,
                                          comm::Communicator& comm) {
  MW_RETURN_IF_ERROR(model::validate(c, o.micro_batch, o.seq));
  MW_RETURN_IF_ERROR(model::validate_tiling(c, o.tiling, "memwall.tiling_factor"));
  RunConfig run = o.run;
  const ZeroConfig& z = run.zero;
  if (run.memwall.partitioning == Partitioning::kBroadcast) {
    return Status::invalid_argument("run " + run.name +
                                    ": memwall.partitioning = broadcast is simulated only; memwall train "
                                    "partitions bandwidth-centric (allowed: bandwidth-centric)");
  }
  if (run.memwall.model_parallel != 1) {
    return Status::invalid_argument(
        "run " + run.name + ": memwall.model_parallel = " + std::to_string(run.memwall.model_parallel) +
        ": memwall train is data parallel only (allowed: 1)");
  }
  if (run.memwall.expert_parallel != 1) {
    return Status::invalid_argument(
        "run " + run.name + ": memwall.expert_parallel = " + std::to_string(run.memwall.expert_parallel) +
        ": memwall train runs every expert on every rank (allowed: 1)");
  }
  if (z.offload_param.device != OffloadDevice::kNone && z.offload_optimizer.device == OffloadDevice::kNone) {
    return Status::invalid_argument("run " + run.name +
                                    ": zero_optimization.offload_param needs offload_optimizer too (as in "
                                    "DeepSpeed); allowed: offload_optimizer.device cpu or nvme");
  }
  if (z.stage < 0 || z.stage > 3) {
    return Status::invalid_argument("run " + run.name + ": zero_optimization.stage = " +
                                    std::to_string(z.stage) + ": allowed: 0, 1, 2 or 3");
  }
  // ZeRO-Offload++'s Twin-Flow, where the run file's checks allow it (RunConfigs made in code come here too).
  if (z.offload_optimizer.ratio < 1 && (z.stage != 3 || z.offload_optimizer.device != OffloadDevice::kCpu ||
                                        z.offload_param.device != OffloadDevice::kNone)) {
    return Status::invalid_argument(
        "run " + run.name +
        strprintf(
            ": zero_optimization.offload_optimizer.ratio = %g needs stage 3 with offload_optimizer.device "
            "cpu and offload_param.device none; allowed otherwise: 1",
            z.offload_optimizer.ratio));
  }
  if (z.stage == 0 && z.offload_optimizer.device != OffloadDevice::kNone) {
    return Status::invalid_argument(
        "run " + run.name +
        ": zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0, "
        "as in DeepSpeed); allowed with stage 0: offload_optimizer.device none");
  }
  const bool nvme =
      z.offload_param.device == OffloadDevice::kNvme || z.offload_optimizer.device == OffloadDevice::kNvme;
  if (nvme && o.swap_dir.empty()) {
    return Status::invalid_argument("run " + run.name +
                                    ": NVMe offload needs a swap directory "
                                    "(zero_optimization.offload_*.nvme_path or --nvme-path)");
  }
  // What the engine implements (see default_train_run).
  run.precision = Precision::kBf16;
  run.fp32_gradients = true;
  run.micro_batch_per_gpu = {false, static_cast<double>(o.micro_batch)};
  run.memwall.sequence_length = o.seq;
  run.memwall.tiling_factor = o.tiling;
  run.memwall.data_parallel = comm.size();
  run.memwall.model_parallel = 1;
  run.memwall.memory_in_program_order = true;  // the lanes run alloc/free in task order
  // On a GPU the model keeps its activations in device memory of its own (open_gpu sizes it first).
  run.memwall.gpu_activations_outside_tier = o.device == ComputeDevice::kCuda;

  Zero3Trainer tr(c, o, comm);
  tr.o_.run = run;
  State& st = *tr.st_;
  st.R = comm.size();
  st.rank = comm.rank();
  st.stage = run.zero.stage;
  st.residual_floats = static_cast<std::size_t>(o.micro_batch) * static_cast<std::size_t>(o.seq) *
                       static_cast<std::size_t>(c.channels);
  st.scrub_checkpoints = o.scrub_offloaded_checkpoints;
  st.partitions = st.stage == 0 ? 1 : st.R;
  st.partition = st.stage == 0 ? 0 : st.rank;
  st.delayed = run.memwall.delayed_parameter_update;
  st.adam_hyper = o.adam;
  st.adam_threads = o.threads;
  const bool flash = run.memwall.attention == AttentionKernel::kFlash;
  st.gg = model::make_gpt_graph(c, o.micro_batch, o.seq, o.tiling, flash);
  st.cuda = o.device == ComputeDevice::kCuda;
  st.gpu_async = st.cuda && o.gpu_async;
  // A rank can fail where the others do not (its GPU, its memory, a plan that does not fit it): the ranks
  // agree before their first collective, so each fails at once with that rank's reason instead of waiting
  // out the collective's deadline.
  const Status planned = [&]() -> Status {
    std::string fits = o.hw.name;
    if (st.cuda) {  // the GPU tier is what the real device has left after the activations (see open_gpu)
      MW_RETURN_IF_ERROR(tr.open_gpu());
      fits += " on " + tr.device_gpu_name() + " (" + format_bytes(tr.o_.hw.gpu.memory_bytes) +
              " left for the device tier after the model's activations)";
      // Likewise the CPU tier: a real run cannot use more host memory than this machine has.
      const double ram =
          static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
      // (The file's reserve for the runtime shrinks in proportion.)
      if (ram > 0 && ram < tr.o_.hw.cpu.memory_bytes) {
        tr.o_.hw.cpu.reserved_bytes *= ram / tr.o_.hw.cpu.memory_bytes;
        tr.o_.hw.cpu.memory_bytes = ram;
        fits += " with this machine's " + format_bytes(ram) + " of host memory";
      }
    }
    auto sched = plan_iteration(model::gpt_model_spec(c), run, tr.o_.hw);
    if (!sched.is_ok()) {
      return Status(sched.status().code(), "the run does not fit " + fits + ": " + sched.status().message());
    }
    st.sched = std::move(sched).value();
    if (!st.cuda) {
      // Host-emulated, the device tier is this machine's memory too: the ranks sharing a node (all of them
      // here, up to the hardware's per node) hold both tiers' peaks at once, which must fit its RAM (the
      // peaks are within ~15% of what such a run keeps resident) rather than end in the kernel's OOM killer.
      const double ram =
          static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
      // (Without the tiers' reserves for a runtime this machine's process does not have.)
      auto mem = replay_memory(st.sched,
                               [](const Buffer& b) { return b.category != MemCategory::kRuntimeReserved; });
      if (!mem.is_ok()) return mem.status();
      const double per_rank =
          mem->peak_bytes[static_cast<int>(Tier::kGpu)] + mem->peak_bytes[static_cast<int>(Tier::kCpu)];
      const int local = std::max(1, st.sched.ranks_per_node);
      if (ram > 0 && per_rank * local > ram) {
        return Status::out_of_memory(
            "the run does not fit this machine: its host-emulated device and CPU tiers peak at " +
            format_bytes(per_rank) + " per rank" +
            (local > 1 ? " x " + std::to_string(local) + " ranks" : "") + ", more than its " +
            format_bytes(ram) +
            " of memory; allowed: a smaller model, micro-batch or sequence, or the parameters and optimizer "
            "states on NVMe (zero_optimization.offload_param / offload_optimizer device \"nvme\")");
      }
    }
    return Status::ok();
  }();
  MW_RETURN_IF_ERROR(comm::agree(comm, planned, "trainer setup: plan"));
  if (!st.cuda) {
    // Only once the plan fits (the model's activation buffers of a model that does not would exhaust this
    // machine's memory before the plan could say so). With activation checkpointing the schedule recomputes
    // each segment's forward before its backward, so the model keeps one segment's activations (and the
    // residual stream at every layer), as the plan assumes (the CUDA model alike, in open_gpu).
    const auto& ac = run.activation_checkpointing;
    st.model = std::make_unique<model::GptModel>(c, o.micro_batch, o.seq, o.tiling, flash,
                                                 ac.enabled ? std::max(1, ac.interval) : 0);
    st.model->set_bf16_matmuls(o.cpu_bf16_matmuls);
    st.model->set_router_bias_update(run.memwall.router_bias_update > 0);
  }
  st.bias_speed = run.memwall.router_bias_update;
  const ModelGraph& g = st.gg.graph;
  // The planner built its graph from the same spec and options: it must be the model's.
  std::size_t computes = 0;
  for (const Task& t : st.sched.tasks) {
    if (t.kind == TaskKind::kCompute && (t.op < 0 || t.op >= static_cast<int>(g.ops.size()))) {
      return Status::internal("the schedule names op " + std::to_string(t.op) + " the model does not have");
    }
    computes += t.kind == TaskKind::kCompute ? 1 : 0;
  }
  MW_CHECK(computes >= g.ops.size(), "the schedule does not run every op");
  // Every rank must run the same schedule: a rank that planned with less free GPU or host memory than the
  // others could plan another one, and its collectives would not match theirs. Checked before any work.
  if (st.R > 1) {
    struct Plan {
      std::uint64_t hash, tasks;
      double gpu_tier, cpu;
    };
    const Plan mine{fingerprint(st.sched), st.sched.tasks.size(), tr.o_.hw.gpu.memory_bytes,
                    tr.o_.hw.cpu.memory_bytes};
    std::vector<Plan> all(static_cast<std::size_t>(st.R));
    MW_RETURN_IF_ERROR(comm.allgather(&mine, all.data(), sizeof mine, "schedule check"));
    for (int q = 1; q < st.R; ++q) {
      const Plan& a = all[0];
      const Plan& b = all[static_cast<std::size_t>(q)];
      if (b.hash == a.hash) continue;
      const std::string what = strprintf(
          "rank %d planned another schedule than rank 0 (%llu tasks for a %s GPU tier and %s of host memory, "
          "against %llu for %s and %s)",
          q, static_cast<unsigned long long>(b.tasks), format_bytes(b.gpu_tier).c_str(),
          format_bytes(b.cpu).c_str(), static_cast<unsigned long long>(a.tasks),
          format_bytes(a.gpu_tier).c_str(), format_bytes(a.cpu).c_str());
      return Status::failed_precondition(strprintf("rank %d of %d: ", st.rank, st.R) + what +
                                         ": every rank must plan alike; give the ranks the same free memory, "
                                         "or a --hardware file with less");
    }
  }

  const Status built = [&]() -> Status {
    // Partition: every graph parameter padded to a multiple of the partitions (R; stage 0: 1); optimizer
    // sub-groups split at parameter boundaries into as many groups as the plan has.
    const auto P = static_cast<std::size_t>(st.partitions);
    const std::vector<model::ParamTensor> layout = model::gpt_param_layout(c);
    for (const auto& s : st.gg.slices) {
      const std::size_t shard = (s.numel + P - 1) / P;
      st.parts.push_back({s.offset, s.numel, shard, st.total});
      st.total += shard;
      // The layout's tensor holding the slice (a slice never spans a matrix and a vector).
      const auto t =
          std::upper_bound(layout.begin(), layout.end(), s.offset,
                           [](std::size_t at, const model::ParamTensor& x) { return at < x.offset; });
      // (never a routing's correction bias: a buffer its model does not train)
      const bool buffer = std::prev(t)->name.find("e_score_correction_bias") != std::string::npos;
      st.decays.push_back(!buffer && (!run.memwall.decay_matrices_only || std::prev(t)->shape.size() >= 2));
      st.bias_rule.push_back(buffer && run.memwall.router_bias_update > 0);
    }
    int groups = 0;
    for (const Task& t : st.sched.tasks) groups = std::max(groups, t.subgroup + 1);
    groups = std::max(groups, 1);
    // Twin-Flow: the plan's first sub-groups step on the GPU, over the parameters whose gradients it keeps
    // there; the trainer splits those parameters into the GPU's sub-groups and the rest into the others.
    const auto n_parts = st.parts.size();
    const auto twin_params = static_cast<std::size_t>(st.sched.twin_flow_params);
    st.gpu_groups = std::min(st.sched.twin_flow_groups, groups);
    if (st.gpu_groups > 0) st.split = twin_params < n_parts ? st.parts[twin_params].local : st.total;
    const auto split_groups = [&](std::size_t first, std::size_t last, int count) {
      const std::size_t begin = first < n_parts ? st.parts[first].local : st.total;
      const std::size_t end = last < n_parts ? st.parts[last].local : st.total;
      for (std::size_t p = first, gi = 0; gi < static_cast<std::size_t>(count); ++gi) {
        State::Group grp{p, p, 0, 0};
        const std::size_t target = begin + (end - begin) * (gi + 1) / static_cast<std::size_t>(count);
        while (p < last && (st.parts[p].local < target || grp.last == grp.first)) ++p, ++grp.last;
        if (gi + 1 == static_cast<std::size_t>(count)) {
          while (p < last) ++p, ++grp.last;
        }
        grp.begin = grp.first < n_parts ? st.parts[grp.first].local : st.total;
        grp.end = grp.last < n_parts ? st.parts[grp.last].local : st.total;
        st.groups.push_back(grp);
      }
    };
    if (st.gpu_groups > 0) {
      split_groups(0, twin_params, st.gpu_groups);
      split_groups(twin_params, n_parts, groups - st.gpu_groups);
    } else {
      split_groups(0, n_parts, groups);
    }
    // Tiers: the device arena has the GPU's memory; the host arena this rank's share of the node's.
    const auto n_buf = st.sched.buffers.size();
    st.arena_of.assign(n_buf, nullptr);
    st.block.assign(n_buf, {});
    st.mem.assign(n_buf, nullptr);
    st.real_bytes.assign(n_buf, 0);
    st.moved.assign(st.sched.tasks.size(), 0);
    st.moved_train = st.moved;
    if (st.cuda) {
      MW_RETURN_IF_ERROR(tr.carve_device_tier());
    } else {
      st.device = std::make_unique<host::Arena>("device (" + o.hw.gpu.model + ")",
                                                static_cast<std::size_t>(o.hw.gpu.memory_bytes));
    }
    st.host_mem = std::make_unique<host::Arena>(
        "host memory",
        static_cast<std::size_t>(tr.o_.hw.cpu.memory_bytes / std::max(1, st.sched.ranks_per_node)));
    st.opt_tier = tier_of(z.offload_optimizer.device);
    st.grads_in_cpu = st.opt_tier == Tier::kNvme && st.sched.optimizer_gradients == tier_name(Tier::kCpu);
    st.clip = o.run.gradient_clipping;
    st.grad_sq.assign(st.parts.size(), 0.0);
    st.home.assign(st.parts.size(), Tier::kGpu);
    st.shard_buf.assign(st.parts.size(), -1);
    st.resident.assign(st.parts.size(), -1);
    st.persistent_grad.assign(st.parts.size(), -1);
    for (const Buffer& b : st.sched.buffers) {
      if (b.param < 0 || !b.persistent) continue;
      if (b.role == BufferRole::kResident) {
        st.resident[static_cast<std::size_t>(b.param)] = b.id;
      } else if (b.role == BufferRole::kShard) {
        st.home[static_cast<std::size_t>(b.param)] = b.tier;
        st.shard_buf[static_cast<std::size_t>(b.param)] = b.id;
      } else if (b.role == BufferRole::kGrad || b.role == BufferRole::kGradShard) {
        st.persistent_grad[static_cast<std::size_t>(b.param)] = b.id;
      }
    }
    if (nvme) {
      io::IoSettings ios = io::IoSettings::from(run.aio);
      auto aio = io::AsyncIo::create(ios);
      if (!aio.is_ok()) return aio.status();
      st.aio = std::move(aio).value();
      io::StoreOptions so;
      so.dir = o.swap_dir;
      so.rank = st.rank;
      // Every tensor twice (a new version is written before the old one is released), with alignment slack.
      const double data = static_cast<double>(st.total) * (2 + 4 + 12);
      const double slack = 2.0 * 1048576.0 * static_cast<double>(st.parts.size() * 2 + st.groups.size());
      so.capacity_bytes = static_cast<std::uint64_t>(2 * data + slack) / 4096 * 4096 + (64ull << 20);
      // An extent holds whole tensors: at least the largest one the store takes (a sub-group's swap slot, a
      // shard's fp32 gradient), rounded up to a MiB; 1 GiB when they are all smaller.
      std::uint64_t largest = 0;
      for (const State::Group& sg : st.groups)
        largest = std::max<std::uint64_t>(largest, (sg.end - sg.begin) * (st.slot_fp32_bytes() + kB16));
      for (const State::Part& pt : st.parts) largest = std::max<std::uint64_t>(largest, pt.shard * 4);
      const std::uint64_t extent =
          std::max<std::uint64_t>(1ull << 30, (largest + (1ull << 20) - 1) >> 20 << 20);
      so.capacity_bytes = std::max(so.capacity_bytes, extent);
      so.extent_bytes = std::min<std::uint64_t>(so.capacity_bytes, extent);
      so.durable = false;  // swap: recreated on every start (checkpoints are written elsewhere, durably)
      std::error_code ec;
      std::filesystem::remove_all(o.swap_dir + "/rank" + std::to_string(st.rank), ec);  // swap, not state
      auto store = io::TensorStore::create(so, *st.aio);
      if (!store.is_ok()) return store.status();
      st.store = std::move(store).value();
      if (!st.store->direct()) {
        st.warnings.push_back(
            o.swap_dir +
            ": the filesystem refuses O_DIRECT, so the NVMe tier's swap goes through the page "
            "cache (buffered I/O: host memory, not the disk's rate)");
      }
    }
    // Setup tasks: the persistent buffers.
    for (const Task& t : st.sched.tasks) {
      if (t.phase != Phase::kSetup) continue;
      MW_CHECK(t.kind == TaskKind::kAlloc, "setup tasks are allocations");
      if (Status s = st.alloc(t.buffer); !s.is_ok()) {
        return Status(s.code(), "allocating the model states: " + s.message());
      }
    }
    for (const Buffer& b : st.sched.buffers) {
      if (b.persistent && b.category == MemCategory::kRuntimeReserved)
        st.reserved[static_cast<int>(b.tier)] +=
            static_cast<double>(st.block[static_cast<std::size_t>(b.id)].bytes);
      if (!b.persistent || b.tier == Tier::kNvme) continue;
      float* f = reinterpret_cast<float*>(st.mem[static_cast<std::size_t>(b.id)]);
      const bool twin = st.split > 0 && b.tier == Tier::kGpu;  // Twin-Flow's GPU part
      if (b.category == MemCategory::kMasterParams32) (twin ? st.gpu_master : st.master) = f;
      if (b.category == MemCategory::kMomentum32) (twin ? st.gpu_exp_avg : st.exp_avg) = f;
      if (b.category == MemCategory::kVariance32) (twin ? st.gpu_exp_avg_sq : st.exp_avg_sq) = f;
      if (twin) continue;  // (its fp32 gradients are the parameters' persistent gradient buffers)
      if (b.category == MemCategory::kGrads32)
        (b.role == BufferRole::kDelayedGrads ? st.prev_grads : st.grads32) = f;
    }
    if (st.opt_tier == Tier::kCpu) {  // zero-filled (mmap)
      st.out16_arena = std::make_unique<host::Arena>("bf16 staging of updated parameters",
                                                     (st.total * kB16 + 4095) / 4096 * 4096);
      auto blk = st.out16_arena->allocate(st.total * kB16, "bf16 staging");
      if (!blk.is_ok()) return blk.status();
      st.out16 = static_cast<std::uint16_t*>(blk->data);
      if (st.cuda)
        MW_RETURN_IF_ERROR(st.page_lock(st.out16_arena->base(), st.out16_arena->capacity(), "bf16 staging"));
    }
    // Partitioned initialisation: this rank's elements only (padding stays zero), made piece by piece.
    const std::size_t r = static_cast<std::size_t>(st.partition);
    MW_RETURN_IF_ERROR(tr.install_states([&](std::size_t begin, std::size_t n, float* master, float* m,
                                             float* v) {
      std::fill(master, master + n, 0.0f);
      if (m != nullptr) std::fill(m, m + n, 0.0f);
      if (v != nullptr) std::fill(v, v + n, 0.0f);
      for (const auto& p : st.parts) {
        // This rank's real (unpadded) elements of the parameter, in flat and in model coordinates.
        const std::size_t first = std::min(p.numel, r * p.shard), last = std::min(p.numel, (r + 1) * p.shard);
        const std::size_t lo = std::max(begin, p.local), hi = std::min(begin + n, p.local + (last - first));
        if (lo >= hi) continue;
        const std::size_t from = p.model_offset + first + (lo - p.local);
        if (o.init) {
          const Status read = o.init(from, hi - lo, master + (lo - begin));
          if (!read.is_ok()) return read;
        } else {
          model::gpt_init_range(c, master + (lo - begin), from, from + (hi - lo), o.seed);
        }
      }
      return Status::ok();
    }));
    if (!st.pin_refused.empty()) {
      st.warnings.push_back(
          "the GPU driver would not page-lock host memory (" + st.pin_refused + "); " +
          std::to_string(st.unpinned) + " host buffers (" + format_bytes(st.unpinned_bytes) +
          ") stay pageable, so their copies go through the driver's staging, synchronously");
    }
    return Status::ok();
  }();
  MW_RETURN_IF_ERROR(comm::agree(comm, built, "trainer setup: memory and files"));
  return tr;
}

// Before planning: the GPU of this rank (rank % GPUs unless Zero3Options::gpu says), the model's activations
// and the compute scratch, and the hardware file's GPU memory capped at what is left of the device for the
// tier, so that the plan fits the real GPU (or is refused with what it needs).
Status Zero3Trainer::open_gpu() {
#if MEMWALL_HAVE_CUDA
  State& st = *st_;
  std::string why;
  const int gpus = gpu::device_count(&why);
  if (gpus == 0) return Status::failed_precondition("--device cuda: " + why);
  const int ordinal = o_.gpu >= 0 ? o_.gpu : st.rank % gpus;
  if (ordinal >= gpus) {
    return Status::invalid_argument("--gpu " + std::to_string(ordinal) + ": this machine has " +
                                    std::to_string(gpus) + " GPU(s)");
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaSetDevice(ordinal) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
    return Status::internal("cuda: cannot query GPU " + std::to_string(ordinal));
  // One allocation of most of what is free (the rest for the CUDA context, cuBLAS's workspace and NCCL's
  // buffers); a little less if the driver cannot give that much in one piece.
  Result<std::unique_ptr<gpu::Device>> dev = Status::internal("unreachable");
  for (const std::size_t twentieths : {19u, 18u, 16u}) {
    dev = gpu::Device::open(ordinal, free_bytes / 20 * twentieths);
    if (dev.is_ok() || dev.status().code() != StatusCode::kOutOfMemory) break;
  }
  if (!dev.is_ok()) return dev.status();
  st.gpu = std::move(dev).value();
  // With activation checkpointing the schedule recomputes each segment's forward before its backward, so the
  // model keeps one segment's activations (and the residual stream at every layer), as the plan assumes.
  const auto& ac = o_.run.activation_checkpointing;
  const int slots = ac.enabled ? std::max(1, ac.interval) : 0;
  auto cm = model::CudaGptModel::create(c_, o_.micro_batch, o_.seq, o_.tiling, *st.gpu, o_.gpu_bf16_matmuls,
                                        slots, o_.run.memwall.attention == AttentionKernel::kFlash);
  if (!cm.is_ok()) return cm.status();
  st.cmodel = std::move(cm).value();
  st.cmodel->set_router_bias_update(o_.run.memwall.router_bias_update > 0);
  std::size_t work = 0, most_shard = 1;
  const auto R = static_cast<std::size_t>(st.R);
  for (const GraphOp& op : st.gg.graph.ops) {
    std::size_t n = 0;
    for (int p : op.params) n += (st.gg.slices[static_cast<std::size_t>(p)].numel + 63) / 64 * 64;
    work = std::max(work, n);
  }
  // (A shard's worth: stage 0's all-reduce goes through it in R chunks.)
  for (const auto& sl : st.gg.slices) most_shard = std::max(most_shard, (sl.numel + R - 1) / R);
  auto w = st.gpu->arena().allocate(std::max<std::size_t>(work, 1) * 4, "fp32 copies of an op's parameters");
  auto r = st.gpu->arena().allocate(most_shard * 4, "reduce-scatter result");
  // (one sum per graph parameter, as State::parts will have)
  auto q = st.gpu->arena().allocate((st.gg.slices.size() + kernels::kSquaresSplit) * sizeof(double),
                                    "gradient norm's sums of squares");
  if (!w.is_ok()) return w.status();
  if (!r.is_ok()) return r.status();
  if (!q.is_ok()) return q.status();
  st.work_dev = static_cast<float*>(w->data);
  st.reduced_dev = static_cast<float*>(r->data);
  st.squares_dev = static_cast<double*>(q->data);
  // The tier: what is left of the device allocation, and no more than the hardware file's GPU leaves
  // beside the runtime's reserve and what the model just took (the plan leaves those out of the tier).
  const std::size_t left = st.gpu->arena().largest_free() / host::Arena::kAlign * host::Arena::kAlign;
  const double file_left =
      o_.hw.gpu.memory_bytes - o_.hw.gpu.reserved_bytes - static_cast<double>(st.gpu->arena().used());
  o_.hw.gpu.memory_bytes = std::max(0.0, std::min(file_left, static_cast<double>(left)));
  return Status::ok();
#else
  return Status::failed_precondition("--device cuda: memwall was built without CUDA (MEMWALL_CUDA)");
#endif
}

// After planning: the device tier, a block of that memory inside the device's one allocation with the plan's
// buffers carved from it; the tasks' events; NCCL for more than one rank.
Status Zero3Trainer::carve_device_tier() {
#if MEMWALL_HAVE_CUDA
  State& st = *st_;
  const std::size_t tier =
      static_cast<std::size_t>(o_.hw.gpu.memory_bytes) / host::Arena::kAlign * host::Arena::kAlign;
  auto blk = st.gpu->arena().allocate(tier, "the device tier");
  if (!blk.is_ok()) return blk.status();
  st.tier_block = *blk;
  st.device = std::make_unique<host::Arena>(device_gpu_name(), blk->data, tier);
  // Per task: timing events for asynchronous completion.
  if (st.gpu_async) {
    const std::size_t n = st.sched.tasks.size();
    st.pending.assign(n, 0);
    st.ev_start.resize(n);
    st.ev_end.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      for (auto* v : {&st.ev_start, &st.ev_end}) {
        auto e = gpu::Event::create(true);
        if (!e.is_ok()) return e.status();
        (*v)[i] = std::make_unique<gpu::Event>(std::move(e).value());
      }
    }
    auto e = gpu::Event::create(true);
    if (!e.is_ok()) return e.status();
    st.ev_origin = std::make_unique<gpu::Event>(std::move(e).value());
  }
#if MEMWALL_HAVE_NCCL
  if (st.R > 1 && o_.gpu_nccl) {
    auto nc = comm::NcclComm::create(*comm_);
    if (!nc.is_ok()) return nc.status();
    st.nccl = std::move(nc).value();
  }
#endif
  return Status::ok();
#else
  return Status::failed_precondition("--device cuda: memwall was built without CUDA (MEMWALL_CUDA)");
#endif
}

// Pieces of this rank's flat states, each a run of whole parameters: the optimizer's sub-groups when the
// states live on NVMe (the store's unit), else parameters packed up to kStatePiece elements (a larger
// parameter is a piece of its own). Checkpoints and initialisation stage one piece at a time.
std::vector<Zero3Trainer::Piece> Zero3Trainer::state_pieces() const {
  const State& st = *st_;
  std::vector<Piece> out;
  if (st.opt_tier == Tier::kNvme) {
    for (const State::Group& g : st.groups) out.push_back({g.first, g.last, g.begin, g.end});
    return out;
  }
  for (std::size_t p = 0; p < st.parts.size();) {
    Piece pc{p, p, st.parts[p].local, st.parts[p].local};
    // (Twin-Flow: no piece spans the GPU's part and the CPU's.)
    const bool gpu_part = pc.begin < st.split;
    while (p < st.parts.size() && (st.parts[p].local < st.split) == gpu_part &&
           (pc.last == pc.first || st.parts[p].local + st.parts[p].shard - pc.begin <= kStatePiece)) {
      pc.end = st.parts[p].local + st.parts[p].shard;
      ++p, ++pc.last;
    }
    out.push_back(pc);
  }
  return out;
}

void Zero3Trainer::note_staging(std::size_t bytes) {
  staging_peak_ = std::max(staging_peak_, bytes);
}

namespace {
// Host memory for one piece of the states while checkpointing or initialising: with the optimizer on NVMe,
// a block of the optimizer's swap pool (pinned, sized for a sub-group's states, and idle between steps), so
// this takes no memory beyond the plan; else (or when the pool cannot give it) a heap buffer.
class Staging {
 public:
  Staging(host::Arena* pool, std::size_t floats) : pool_(pool) {
    if (pool_ != nullptr) {
      auto blk = pool_->allocate(floats * sizeof(float), "checkpoint staging");
      if (blk.is_ok()) {
        block_ = *blk;
        data_ = static_cast<float*>(block_.data);
        return;
      }
    }
    heap_.resize(floats);
    data_ = heap_.data();
  }
  ~Staging() {
    if (block_.data != nullptr) pool_->release(block_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  float* data() const { return data_; }
  std::size_t heap_bytes() const { return heap_.size() * sizeof(float); }

 private:
  host::Arena* pool_;
  host::Arena::Block block_{};
  std::vector<float> heap_;
  float* data_ = nullptr;
};
}  // namespace

host::Arena* Zero3Trainer::State::optimizer_pool() const {
  for (const Buffer& b : sched.buffers) {
    if (b.role != BufferRole::kOptimizerSwap || b.pool < 0) continue;
    auto it = pools.find(b.pool);
    return it == pools.end() ? nullptr : it->second.get();
  }
  return nullptr;
}

// Puts this rank's flat master weights and moments where the run keeps them, and their bf16 copies into the
// parameter shards, one piece at a time.
Status Zero3Trainer::install_states(const StateSource& src, bool commit) {
  State& st = *st_;
  const bool nvme = st.opt_tier == Tier::kNvme;
  std::vector<std::uint16_t> b16;
  const std::vector<Piece> pieces = state_pieces();
  const Status installed = [&]() -> Status {
    for (std::size_t gi = 0; gi < pieces.size(); ++gi) {
      const Piece& pc = pieces[gi];
      const std::size_t k = pc.end - pc.begin;
      const bool dev = st.states_on_device(pc.begin);
      const bool host = !nvme && !dev;  // the states' own memory is the staging
      const State::StateArrays to = nvme ? State::StateArrays{} : st.states_at(pc.begin);
      float *master = to.master, *m = to.m, *v = to.v;
      std::unique_ptr<Staging> buf;
      if (!host) {
        buf = std::make_unique<Staging>(st.optimizer_pool(), 3 * k);
        master = buf->data(), m = master + k, v = m + k;
      }
      MW_RETURN_IF_ERROR(src(pc.begin, k, master, m, v));
      if (nvme) {
        MW_RETURN_IF_ERROR(st.store_put(store_key("opt", gi), master, 12 * k));
      } else if (dev) {
        MW_RETURN_IF_ERROR(st.move(to.master, true, master, false, k * 4));
        MW_RETURN_IF_ERROR(st.move(to.m, true, m, false, k * 4));
        MW_RETURN_IF_ERROR(st.move(to.v, true, v, false, k * 4));
      }
      for (std::size_t p = pc.first; p < pc.last; ++p) {
        const auto& pt = st.parts[p];
        b16.resize(pt.shard);
        note_staging((buf ? buf->heap_bytes() : 0) + pt.shard * kB16);
        kernels::cast_f32_to_bf16(master + (pt.local - pc.begin), b16.data(), pt.shard);
        if (st.home[p] == Tier::kNvme) {
          MW_RETURN_IF_ERROR(st.store_put(store_key("param", p), b16.data(), pt.shard * kB16));
        } else {
          const int q = static_cast<int>(p);
          MW_RETURN_IF_ERROR(
              st.move(st.shard16(q), st.on_device(st.shard16_buffer(q)), b16.data(), false, pt.shard * kB16));
        }
      }
    }
    return Status::ok();
  }();
  // Stages 1 and 2 (stage 3: its persistent parameters): every rank's slice into every rank's whole copies,
  // once every rank has its slices.
  if (st.stage >= 1 && std::any_of(st.resident.begin(), st.resident.end(), [](int b) { return b >= 0; })) {
    MW_RETURN_IF_ERROR(comm::agree(*comm_, installed, "installing the parameters"));
    double moved = 0;
    MW_RETURN_IF_ERROR(st.gather_resident(-1, "installing the parameters", *comm_, moved));
#if MEMWALL_HAVE_CUDA
    if (st.cuda) MW_RETURN_IF_ERROR(st.gpu->synchronize());
#endif
  }
  MW_RETURN_IF_ERROR(installed);
  if (st.store && commit) MW_RETURN_IF_ERROR(st.store->commit());
  return Status::ok();
}

// This rank's flat master weights and moments, wherever they live, one piece at a time and in order.
Status Zero3Trainer::visit_states(const StateVisitor& fn) {
  State& st = *st_;
  const bool nvme = st.opt_tier == Tier::kNvme;
  const std::vector<Piece> pieces = state_pieces();
  for (std::size_t gi = 0; gi < pieces.size(); ++gi) {
    const Piece& pc = pieces[gi];
    const std::size_t k = pc.end - pc.begin;
    const State::StateArrays from = nvme ? State::StateArrays{} : st.states_at(pc.begin);
    if (!nvme && !st.states_on_device(pc.begin)) {
      MW_RETURN_IF_ERROR(fn(pc.begin, k, from.master, from.m, from.v));
      continue;
    }
    const Staging buf(st.optimizer_pool(), 3 * k);
    note_staging(buf.heap_bytes());
    float* p = buf.data();
    if (nvme) {
      MW_RETURN_IF_ERROR(st.store_get(store_key("opt", gi), p, 12 * k));
    } else {
      MW_RETURN_IF_ERROR(st.move(p, false, from.master, true, k * 4));
      MW_RETURN_IF_ERROR(st.move(p + k, false, from.m, true, k * 4));
      MW_RETURN_IF_ERROR(st.move(p + 2 * k, false, from.v, true, k * 4));
    }
    MW_RETURN_IF_ERROR(fn(pc.begin, k, p, p + k, p + 2 * k));
  }
  return Status::ok();
}

Result<RunResult> Zero3Trainer::State::run_lanes(const std::vector<char>& include, int step_no,
                                                 const std::string& at, comm::Communicator& comm,
                                                 double& started) {
#if MEMWALL_HAVE_CUDA
  if (cuda && gpu_async) {  // time zero of the GPU's clock for this run
    MW_RETURN_IF_ERROR(gpu->synchronize());
    MW_RETURN_IF_ERROR(ev_origin->record(gpu->compute()));
    MW_RETURN_IF_ERROR(ev_origin->synchronize());
    origin_s = now();
    std::fill(pending.begin(), pending.end(), 0);
  }
#endif
  exec::LaneExecutor ex(
      sched, include,
      [this, &comm, step_no, &at](const Task& t) -> Status { return run_task(t, step_no, at, comm); }, t0);
  started = now();
  auto run = run_schedule(sched, ex);
#if MEMWALL_HAVE_CUDA
  if (cuda) {
    // Everything queued has run (also after a failure: no buffer may go while the GPU uses it); the GPU's
    // own times replace the queueing times of the tasks it ran.
    const Status drained = gpu->synchronize();
    if (run.is_ok() && !drained.is_ok()) return drained;
    if (run.is_ok() && gpu_async) {
      for (const Task& t : sched.tasks) {
        const auto id = static_cast<std::size_t>(t.id);
        if (pending[id] == 0) continue;
        auto a = gpu::Event::elapsed_ms(*ev_origin, *ev_start[id]);
        auto b = gpu::Event::elapsed_ms(*ev_origin, *ev_end[id]);
        if (!a.is_ok()) return a.status();
        if (!b.is_ok()) return b.status();
        run->timing[id].start_s = origin_s + *a / 1e3;
        run->timing[id].end_s = origin_s + *b / 1e3;
      }
    }
  }
#endif
  return run;
}

Result<float> Zero3Trainer::run_phases(const int* tokens, const int* targets, bool train, bool optimizer) {
  State& st = *st_;
  const Schedule& s = st.sched;
#if MEMWALL_HAVE_CUDA
  if (st.cuda) MW_RETURN_IF_ERROR(st.cmodel->set_batch(tokens, targets));
#endif
  if (!st.cuda) st.model->set_batch(tokens, targets);
  std::vector<char> include(s.tasks.size(), 0);
  for (const Task& t : s.tasks) {
    include[static_cast<std::size_t>(t.id)] =
        t.phase != Phase::kSetup && (train || t.phase == Phase::kForward) &&
        (optimizer || (t.phase != Phase::kOptimizer && !t.last_micro_batch)) &&
        (st.micro > 0 || !t.later_micro_batches);
  }
  // Later micro-batches add to the first one's gradients (stage 1's whole gradients too: they are reduced,
  // and offloaded, once per step, in the last).
  if (train && st.micro == 0) {
    for (int b : st.persistent_grad) {
      if (b >= 0) {
        MW_RETURN_IF_ERROR(st.zero(st.ptr(b), st.on_device(b),
                                   static_cast<std::size_t>(st.real_bytes[static_cast<std::size_t>(b)])));
      }
    }
  }
  // The update a step applies: its own, or with a delayed update the pending one's.
  st.adam_hyper.step = st.delayed ? st.pending_step : step_ + 1;
  std::fill(st.moved.begin(), st.moved.end(), 0.0);
  const int step_no = train ? static_cast<int>(step_ + 1) : 0;
  const std::string at = !train                       ? "eval "
                         : optimizer && st.micro == 0 ? "step " + std::to_string(step_no) + " "
                                                      : "step " + std::to_string(step_no) + " micro-batch " +
                                                            std::to_string(st.micro + 1) + " ";
  double t_start = 0;
  auto run = st.run_lanes(include, step_no, at, *comm_, t_start);
  const double t_end = st.now();
  if (!run.is_ok()) return run.status();
  // Buffers a forward-only run left allocated (kept for backward) go back.
  if (!train) {
    for (const Buffer& b : s.buffers) {
      if (!b.persistent && st.arena_of[static_cast<std::size_t>(b.id)] != nullptr) st.release(b.id);
    }
  }
  if (st.store) {
    std::lock_guard<std::mutex> lock(st.store_mu);
    MW_RETURN_IF_ERROR(st.store->commit());  // releases the versions this step replaced
  }
  StepStats stats;
  stats.seconds = t_end - t_start;
  for (const Task& t : s.tasks) {
    if (!include[static_cast<std::size_t>(t.id)] || t.resource == Resource::kNone) continue;
    const Completion& c = run->timing[static_cast<std::size_t>(t.id)];
    const auto r = static_cast<std::size_t>(t.resource);
    stats.busy_s[r] += c.end_s - c.start_s;
    stats.bytes[r] += st.moved[static_cast<std::size_t>(t.id)];
  }
  const RunBreakdown rb = analyze_run(s, *run);  // tasks left out ran for no time
  stats.transfer_s = rb.transfer_s;
  stats.transfer_overlapped_s = rb.transfer_overlapped_s;
  if (train) st.moved_train = st.moved;
  st.last_run = std::move(run).value();
  for (const Task& t : s.tasks) {
    if (t.phase == Phase::kSetup)
      st.last_run.timing[static_cast<std::size_t>(t.id)] = {t.id, t_start, t_start};
  }
  for (int ti = 0; ti < kTierCount; ++ti) stats.peak_bytes[ti] = st.tier_peak(static_cast<Tier>(ti));
  stats.capacity_bytes[0] = static_cast<double>(st.device->capacity() + st.outside_tier_bytes());
  stats.capacity_bytes[1] = static_cast<double>(st.host_mem->capacity());
  stats.capacity_bytes[2] = st.store ? static_cast<double>(st.store->capacity_bytes()) : 0;
  st.stats = stats;
  // A step returns the loss averaged over ranks; an evaluation this rank's own (callers average its batches).
  float mine = 0;
#if MEMWALL_HAVE_CUDA
  if (st.cuda) {
    auto l = st.cmodel->loss(!train);
    if (!l.is_ok()) return l.status();
    mine = *l;
  }
#endif
  // (A held-out evaluation's is the main model's, without the next-token-prediction module's term.)
  if (!st.cuda) mine = train ? st.model->loss() : st.model->main_loss();
  if (!train) return mine;
  std::vector<float> all(static_cast<std::size_t>(comm_->size()));
  MW_RETURN_IF_ERROR(comm_->allgather(&mine, all.data(), sizeof(float), at + "loss"));
  float sum = 0.0f;
  for (float l : all) sum += l;
  if (optimizer) {
    ++step_;
    if (st.delayed) {  // this step's gradients wait for the next step's optimizer
      std::swap(st.grads32, st.prev_grads);
      st.pending_step = step_;
    }
  }
  return sum / static_cast<float>(comm_->size());
}

Result<float> Zero3Trainer::step(const int* tokens, const int* targets, int micro_batches) {
  State& st = *st_;
  if (micro_batches < 1) {
    return Status::invalid_argument("micro-batches per step: " + std::to_string(micro_batches) +
                                    " (allowed: 1 or more)");
  }
  if (micro_batches > 1 && micro_batches != o_.run.accumulation_steps()) {
    return Status::invalid_argument(
        "step: " + std::to_string(micro_batches) + " micro-batches, but the schedule was planned for " +
        std::to_string(o_.run.accumulation_steps()) + " (gradient_accumulation_steps of the run)");
  }
  const std::size_t per = static_cast<std::size_t>(o_.micro_batch) * static_cast<std::size_t>(o_.seq);
  st.adam_hyper.grad_scale = static_cast<float>(micro_batches);  // the mean of the micro-batches' gradients
  st.grad_norm = -1;
  StepStats total;
  float loss = 0;
  st.micro_runs.clear();
  st.micro_moved.clear();
  for (int k = 0; k < micro_batches; ++k) {
    st.micro = k;
    st.last_micro = k + 1 == micro_batches;
    auto l = run_phases(tokens + k * per, targets + k * per, true, k + 1 == micro_batches);
    st.micro = 0;
    st.last_micro = false;
    if (!l.is_ok()) return l;
    loss += *l;
    if (micro_batches > 1) {
      st.micro_runs.push_back(st.last_run);
      st.micro_moved.push_back(st.moved);
    }
    const StepStats& one = st.stats;
    total.seconds += one.seconds;
    for (int r = 0; r < kResourceCount; ++r) {
      total.busy_s[r] += one.busy_s[r];
      total.bytes[r] += one.bytes[r];
    }
    total.transfer_s += one.transfer_s;
    total.transfer_overlapped_s += one.transfer_overlapped_s;
    std::copy(std::begin(one.peak_bytes), std::end(one.peak_bytes), total.peak_bytes);
    std::copy(std::begin(one.capacity_bytes), std::end(one.capacity_bytes), total.capacity_bytes);
  }
  // Warming up a delayed update: the step's gradients are applied right after it, as without the delay (the
  // time counts in the step's).
  if (st.delayed && step_ <= o_.run.memwall.delayed_parameter_update_warmup) {
    const double began = st.now();
    MW_RETURN_IF_ERROR(drain_delayed_update(&total));
    total.seconds += st.now() - began;
  }
  st.stats = total;
  // The whole step as one run of one schedule, so that a trace holds every micro-batch.
  if (micro_batches > 1) {
    if (st.accumulated_steps != micro_batches || st.accumulated.schedule.tasks.empty()) {
      st.accumulated = accumulated_schedule(st.sched, micro_batches);
    }
    st.last_run = accumulated_run(st.accumulated, st.micro_runs);
  }
  st.accumulated_steps = micro_batches;
  return loss / static_cast<float>(micro_batches);
}

Result<float> Zero3Trainer::evaluate(const int* tokens, const int* targets) {
  return run_phases(tokens, targets, false);
}

Status Zero3Trainer::gather_params(std::vector<float>& out) {
  std::vector<float> master(st_->total), buf;
  MW_RETURN_IF_ERROR(
      visit_states([&](std::size_t begin, std::size_t n, const float* m32, const float*, const float*) {
        std::copy(m32, m32 + n, master.begin() + static_cast<std::ptrdiff_t>(begin));
        return Status::ok();
      }));
  out.assign(model_elements(), 0.0f);
  for (const auto& p : st_->parts) {
    buf.resize(p.shard * static_cast<std::size_t>(comm_->size()));
    MW_RETURN_IF_ERROR(
        comm_->allgather(master.data() + p.local, buf.data(), p.shard * sizeof(float), "gather_params"));
    std::memcpy(out.data() + p.model_offset, buf.data(), p.numel * sizeof(float));
  }
  return Status::ok();
}

// A delayed update's waiting gradients, applied now: the schedule's optimizer phase alone (its sub-groups'
// steps, the copies of their parameters to the device and, below stage 3, the all-gathers).
Status Zero3Trainer::drain_delayed_update(StepStats* add) {
  State& st = *st_;
  if (!st.delayed || st.pending_step == 0) return Status::ok();
  const Schedule& s = st.sched;
  std::vector<char> include(s.tasks.size(), 0);
  for (const Task& t : s.tasks) include[static_cast<std::size_t>(t.id)] = t.phase == Phase::kOptimizer;
  st.adam_hyper.step = st.pending_step;
  st.adam_hyper.grad_scale = static_cast<float>(o_.run.accumulation_steps());
  st.last_micro = true;
  const std::string at = "draining the delayed update of step " + std::to_string(st.pending_step) + " ";
  double started = 0;
  auto run = st.run_lanes(include, 0, at, *comm_, started);
  st.last_micro = false;
  if (!run.is_ok()) return run.status();
  st.pending_step = 0;
  if (add != nullptr) {  // part of the step just run: its figures, and its tasks' times in the step's run
    for (const Task& t : s.tasks) {
      const auto id = static_cast<std::size_t>(t.id);
      if (include[id] == 0) continue;
      st.last_run.timing[id] = run->timing[id];
      if (!st.micro_runs.empty()) st.micro_runs.back().timing[id] = run->timing[id];
      st.moved_train[id] = st.moved[id];
      if (!st.micro_moved.empty()) st.micro_moved.back()[id] = st.moved[id];
      if (t.resource == Resource::kNone) continue;
      const auto r = static_cast<std::size_t>(t.resource);
      add->busy_s[r] += run->timing[id].end_s - run->timing[id].start_s;
      add->bytes[r] += st.moved[id];
    }
    for (RunResult* into : {&st.last_run, st.micro_runs.empty() ? nullptr : &st.micro_runs.back()}) {
      if (into == nullptr) continue;
      into->makespan_s = std::max(into->makespan_s, run->makespan_s);  // (times since the trainer began)
      for (int r = 0; r < kResourceCount; ++r) into->busy_s[r] += run->busy_s[r];
    }
  }
  return Status::ok();
}

Status Zero3Trainer::save(const std::string& dir) {
  // A checkpoint holds no waiting gradients: a delayed update applies them first (the run goes on from
  // there too, so a resumed run follows the one that saved).
  MW_RETURN_IF_ERROR(drain_delayed_update());
  const std::string step_dir = dir + "/" + ckpt::step_dir_name(step_);
  std::error_code ec;
  // Each partition's rank writes its file (in stage 0 rank 0 the one whole partition every rank holds alike,
  // so the checkpoint reads as a one-rank one); latest.json names the step only once every file is on disk (a
  // rank that could not write, a full disk say, fails the save on every rank and the last checkpoint stays).
  const int files = st_->partitions;
  const Status written = [&]() -> Status {
    std::filesystem::create_directories(step_dir, ec);
    if (ec) return Status::io_error(step_dir + ": " + ec.message());
    if (comm_->rank() >= files) return Status::ok();
    auto w = ckpt::ShardWriter::create(ckpt::rank_file(step_dir, st_->partition, files), step_, st_->total);
    if (!w.is_ok()) return w.status();
    MW_RETURN_IF_ERROR(visit_states([&](std::size_t begin, std::size_t n, const float* master, const float* m,
                                        const float* v) { return w->write(begin, n, master, m, v); }));
    MW_RETURN_IF_ERROR(w->commit());
    return io::fsync_path(step_dir, true);
  }();
  MW_RETURN_IF_ERROR(comm::agree(*comm_, written, "checkpoint step " + std::to_string(step_)));
  if (comm_->rank() == 0) {
    nlohmann::json latest = {{"format", "memwall-zero3-checkpoint"},
                             {"version", 1},
                             {"step", step_},
                             {"dir", ckpt::step_dir_name(step_)},
                             {"ranks", files},                  // the files (partitions)
                             {"data_parallel", comm_->size()},  // the ranks that trained
                             {"tiling", o_.tiling},
                             {"params", model_elements()}};
    latest.update(ckpt::model_fields(c_));
    const std::string text = latest.dump(2) + "\n";
    MW_RETURN_IF_ERROR(io::write_file_atomic(dir + "/latest.json", {text}));
    // Older checkpoints are no longer named by latest.json.
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step-", 0) == 0 && name != ckpt::step_dir_name(step_)) {
        std::filesystem::remove_all(e.path(), ec);
      }
    }
  }
  return comm_->barrier("checkpoint step " + std::to_string(step_) + " published");
}

Result<long> Zero3Trainer::load(const std::string& dir) {
  State& st = *st_;
  // Partitions: the ranks (stage 0: one partition, whole on every rank); R and me for sharing the checks.
  const int R = comm_->size(), me = comm_->rank(), P = st.partitions;
  // Every rank checks what it will read, and the ranks agree before any of them installs anything: a corrupt
  // or missing file fails the load on every rank, naming the file, and leaves every trainer as it was.
  std::optional<ckpt::CheckpointParams> written;  // another rank count or tiling: partitioned anew
  std::optional<ckpt::ShardReader> reader;        // this rank's own file
  bool staged = false;                            // installed in the NVMe store, not yet committed
  const Status checked = [&]() -> Status {
    const std::string latest_path = dir + "/latest.json";
    auto latest = ckpt::read_latest(dir);
    if (!latest.is_ok()) return latest.status();
    const nlohmann::json& j = *latest;
    // The model's fields (a checkpoint older than the Llama shape's keys reads as GPT-2) and its size.
    // The fields first (they name what differs), the size last (what a differing field also changes).
    nlohmann::json got = ckpt::model_fields(ckpt::model_of(j)), want = ckpt::model_fields(c_);
    got["params"] = j.value("params", -1L);
    want["params"] = static_cast<long>(model_elements());
    for (const bool size : {false, true}) {
      for (const auto& [key, value] : want.items()) {
        if ((key == "params") != size || got[key] == value) continue;
        return Status::invalid_argument(latest_path + ": checkpoint has " + key + " = " + got[key].dump() +
                                        ", this run has " + value.dump());
      }
    }
    if (j.value("ranks", -1L) != P || j.value("tiling", -1L) != o_.tiling) {
      // Each old file's checksum is checked by one rank (file k by rank k mod R); then every rank reads
      // just its elements, in model order.
      model::GptConfig config;
      auto cp = ckpt::CheckpointParams::open(dir, config, [&](int file) { return file % R == me; });
      if (!cp.is_ok()) return cp.status();
      written.emplace(std::move(cp).value());
      return Status::ok();
    }
    auto opened = ckpt::ShardReader::open(
        ckpt::rank_file(dir + "/" + j.value("dir", std::string()), st.partition, P), st.total);
    if (!opened.is_ok()) return opened.status();
    reader.emplace(std::move(opened).value());
    // When everything it installs goes to the NVMe store (optimizer states and every parameter shard
    // there), one pass: the pieces are staged in the store, checked as they are read, and committed only if
    // the file's checksum matches on every rank (else rolled back). Otherwise the whole file is checked
    // first, and read again to install it once every rank's file checked out.
    const bool all_in_store =
        st.store && st.opt_tier == Tier::kNvme &&
        std::all_of(st.home.begin(), st.home.end(), [](Tier t) { return t == Tier::kNvme; });
    if (!all_in_store) return reader->verify();
    std::uint32_t crc[3] = {};
    Status s = install_states(
        [&](std::size_t begin, std::size_t n, float* master, float* m, float* v) {
          MW_RETURN_IF_ERROR(reader->read(begin, n, master, m, v));
          const float* arrays[3] = {master, m, v};
          for (int a = 0; a < 3; ++a) crc[a] = io::crc32c_extend(crc[a], arrays[a], n * sizeof(float));
          return Status::ok();
        },
        false);
    if (s.is_ok()) s = reader->matches(crc);
    if (!s.is_ok()) {
      st.store->rollback();
      return s;
    }
    staged = true;
    return Status::ok();
  }();
  if (Status s = comm::agree(*comm_, checked, "checkpoint load"); !s.is_ok()) {
    if (staged) st.store->rollback();
    return s;
  }
  if (written) {
    const auto rank = static_cast<std::size_t>(st.partition);
    const auto repartitioned = [&](std::size_t begin, std::size_t n, float* master, float* m, float* v) {
      for (float* a : {master, m, v}) std::fill(a, a + n, 0.0f);  // the shards' padding
      for (const auto& pt : st.parts) {
        const std::size_t lo = std::max(begin, pt.local), hi = std::min(begin + n, pt.local + pt.shard);
        if (lo >= hi) continue;
        const std::size_t e = rank * pt.shard + (lo - pt.local);  // element of the parameter
        if (e >= pt.numel) continue;
        const std::size_t k = std::min(hi - lo, pt.numel - e), at = lo - begin;
        MW_RETURN_IF_ERROR(written->read(pt.model_offset + e, k, master + at, m + at, v + at));
      }
      return Status::ok();
    };
    MW_RETURN_IF_ERROR(install_states(repartitioned));
    step_ = written->step();
    st.pending_step = 0;
    return step_;
  }
  if (staged) {
    MW_RETURN_IF_ERROR(st.store->commit());
  } else {
    MW_RETURN_IF_ERROR(install_states([&](std::size_t begin, std::size_t n, float* master, float* m,
                                          float* v) { return reader->read(begin, n, master, m, v); }));
  }
  step_ = reader->step();
  st.pending_step = 0;
  return step_;
}

Result<std::vector<float>> read_checkpoint_params(const std::string& dir, model::GptConfig& c) {
  auto cp = ckpt::CheckpointParams::open(dir, c);
  if (!cp.is_ok()) return cp.status();
  std::vector<float> full(cp->size());
  MW_RETURN_IF_ERROR(cp->read(0, full.size(), full.data()));
  return full;
}

}  // namespace memwall::train
