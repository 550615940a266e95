// `memwall calibrate [--path DIR] [--out FILE] [--json]`: measures this machine and writes a HardwareSpec, so
// that a `memwall train` run here can be simulated and replayed on the machine it ran on. Measured: memcpy
// bandwidth (the host-emulated device's copies, and CPU memory traffic), fp32 GEMM FLOP/s through the same
// matmul memwall train uses, and O_DIRECT write and read rates of the disk under --path through the I/O
// library. The device is the host-emulated one (its memory: half of RAM, a convention), one per machine.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "base/stats.h"
#include "base/units.h"
#include "cli_common.h"
#include "commands.h"
#include "cpu/gpt_ops.h"
#include "engine/comm/comm.h"
#include "engine/io/atomic_file.h"
#include "engine/io/tensor_store.h"
#include "engine/model/gpt.h"
#include "engine/train/zero3.h"
#include "io_measure.h"
#include "memory/bandwidth_model.h"
#include "spec/spec_loader.h"
#if MEMWALL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cast.h"
#include "cuda/gpt_ops.h"
#include "engine/cuda/device.h"
#endif

namespace memwall::cli {

namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct CalibrateOptions {
  std::string path = ".";
  std::string out;
  std::string size = "512M";
  std::string model;  // optional: achievable FLOP/s measured on this GPT as memwall train runs it
  int batch = 2, seq = 0;
  std::string tensor_size;     // optional: NVMe rates of memwall's tensor store at this tensor size
  std::string device = "cpu";  // cpu: the host-emulated device; cuda: a real GPU
  int gpu = 0;
  int gemm_size = 4096;  // --device cuda: the square GEMM for the GPU's peak FLOP/s
  bool json = false;
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// `work` (bytes, FLOP) per second of the fastest of five runs of `op` after one warm-up; op returns a Status
// and, for GPU work, waits for it.
Result<double> best_of_five(double work, const std::function<Status()>& op) {
  MW_RETURN_IF_ERROR(op());
  double best = 0;
  for (int k = 0; k < 5; ++k) {
    const auto t0 = clock_type::now();
    MW_RETURN_IF_ERROR(op());
    best = std::max(best, work / seconds_since(t0));
  }
  return best;
}

// Rates of memwall's tensor store (swap settings: checksums, no sync) with tensors of `tensor` bytes: reads
// alone, writes alone, then one thread reading and one writing at the same time as memwall train's NVMe
// lanes do (their sum is the drive's combined rate, and the process CPU time per byte moved is what those
// lanes cost the host).
Result<Measurement> store_rates(const std::string& dir, std::uint64_t total, std::uint64_t tensor) {
  io::IoSettings settings;
  auto aio = io::AsyncIo::create(settings);
  if (!aio.is_ok()) return aio.status();
  const std::uint64_t count = std::max<std::uint64_t>(4, total / tensor / 2);
  io::StoreOptions so;
  so.dir = dir;
  so.capacity_bytes = 4 * count * ((tensor + (1 << 20)) / 4096 + 1) * 4096;
  so.extent_bytes = std::min<std::uint64_t>(so.capacity_bytes, 1ull << 30) / 4096 * 4096;
  so.durable = false;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  auto store = io::TensorStore::create(so, **aio);
  if (!store.is_ok()) return store.status();
  std::vector<char> a(tensor, 1), b(tensor, 2);
  for (std::uint64_t i = 0; i < count; ++i)
    MW_RETURN_IF_ERROR((*store)->write("r" + std::to_string(i), a.data(), tensor));
  MW_RETURN_IF_ERROR((*store)->commit());
  // Timed passes: all `count` tensors read into `a`, or written from `b` under names prefixed `prefix`.
  auto read_pass = [&](double& seconds) {
    const auto t0 = clock_type::now();
    Status st = Status::ok();
    for (std::uint64_t i = 0; i < count && st.is_ok(); ++i)
      st = (*store)->get("r" + std::to_string(i), a.data(), tensor);
    seconds = seconds_since(t0);
    return st;
  };
  auto write_pass = [&](const char* prefix, double& seconds) {
    const auto t0 = clock_type::now();
    Status st = Status::ok();
    for (std::uint64_t i = 0; i < count && st.is_ok(); ++i)
      st = (*store)->write(prefix + std::to_string(i), b.data(), tensor);
    seconds = seconds_since(t0);
    return st;
  };
  double solo_read_s = 0, solo_write_s = 0;
  MW_RETURN_IF_ERROR(read_pass(solo_read_s));
  MW_RETURN_IF_ERROR(write_pass("s", solo_write_s));
  // Reads and writes at once, three times (this VM's CPU time and disk rates vary by tens of percent from
  // pass to pass): the median combined rate and the median CPU time per byte, in the regime train's lanes run
  // in.
  std::vector<double> combined, cpu_per_byte;
  for (int pass = 0; pass < 3; ++pass) {
    MW_RETURN_IF_ERROR((*store)->commit());  // releases the versions the last pass replaced
    Status rs = Status::ok(), ws = Status::ok();
    double read_s = 0, write_s = 0;
    const double cpu0 = process_cpu_s();
    std::thread reader([&] { rs = read_pass(read_s); });
    std::thread writer([&] { ws = write_pass("w", write_s); });
    reader.join();
    writer.join();
    const double cpu_s = process_cpu_s() - cpu0;
    MW_RETURN_IF_ERROR(rs);
    MW_RETURN_IF_ERROR(ws);
    const auto moved = static_cast<double>(count * tensor);
    combined.push_back(moved / read_s + moved / write_s);
    cpu_per_byte.push_back(cpu_s / (2 * moved));
  }
  store->reset();
  std::filesystem::remove_all(dir, ec);
  const auto bytes = static_cast<double>(count * tensor);
  Measurement m;
  m.read_Bps = bytes / solo_read_s;
  m.write_Bps = bytes / solo_write_s;
  m.readwrite_Bps = median(combined);
  m.cpu_s_per_byte = median(cpu_per_byte);
  return m;
}

// What calibrate measures on a GPU: its peak FLOP/s on cuBLAS (bf16 operands with fp32 accumulation, the
// tensor cores, and fp32 without TF32, memwall train's default arithmetic), its memory bandwidth (a
// device-to-device copy: bytes read + written) and the host link each way (page-locked host memory).
struct GpuRates {
  std::string name;
  int count = 0;
  double total_bytes = 0, free_bytes = 0;
  double bf16_flops = 0, fp32_flops = 0, hbm_Bps = 0, h2d_Bps = 0, d2h_Bps = 0;
  bool link_pinned = true;  // false: the driver would not page-lock host memory; the link rate is pageable's
};

#if MEMWALL_HAVE_CUDA
Result<GpuRates> gpu_rates(int ordinal, int n) {
  std::string why;
  GpuRates r;
  r.count = gpu::device_count(&why);
  if (r.count == 0) return Status::failed_precondition("--device cuda: " + why);
  if (ordinal < 0 || ordinal >= r.count) {
    return Status::invalid_argument("--gpu " + std::to_string(ordinal) + ": this machine has " +
                                    std::to_string(r.count) + " GPU(s)");
  }
  const auto N = static_cast<std::size_t>(n);
  const std::size_t copy = 256ull << 20, gemm_bytes = N * N * (3 * 4 + 2 * 2);
  auto dev = gpu::Device::open(ordinal, gemm_bytes + 2 * copy + (64ull << 20));
  if (!dev.is_ok()) return dev.status();
  gpu::Device& d = **dev;
  r.name = d.info().name;
  r.total_bytes = static_cast<double>(d.info().total_bytes);
  r.free_bytes = static_cast<double>(d.info().free_bytes);
  std::vector<host::Arena::Block> blocks;
  auto alloc = [&](std::size_t bytes, const char* what) -> Result<void*> {
    auto b = d.arena().allocate(bytes, what);
    if (!b.is_ok()) return b.status();
    blocks.push_back(*b);
    return b->data;
  };
  // Operands of a [n, n] x [n, n] GEMM: varied values (zeros run faster than real data).
  std::vector<float> host(N * N);
  for (std::size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<float>(i * 7919 % 1000) / 1000.0f - 0.5f;
  auto in = alloc(N * N * 4, "GEMM input"), w = alloc(N * N * 4, "GEMM weight"),
       out = alloc(N * N * 4, "GEMM out"), in16 = alloc(N * N * 2, "bf16 input"),
       w16 = alloc(N * N * 2, "bf16 weight"), a = alloc(copy, "copy source"),
       b = alloc(copy, "copy destination");
  for (const auto* x : {&in, &w, &out, &in16, &w16, &a, &b}) {
    if (!x->is_ok()) return x->status();
  }
  const gpu::Stream& s = d.compute();
  MW_RETURN_IF_ERROR(d.copy_to_device(*in, host.data(), N * N * 4, s));
  MW_RETURN_IF_ERROR(d.copy_to_device(*w, host.data(), N * N * 4, s));
  auto kernel = [](int rc) {
    return rc == 0 ? Status::ok()
                   : Status::internal(std::string("calibrate: ") + kernels::cuda::error_string(rc));
  };
  MW_RETURN_IF_ERROR(
      kernel(kernels::cuda::cast_f32_to_bf16(static_cast<float*>(*in), *in16, N * N, s.get())));
  MW_RETURN_IF_ERROR(kernel(kernels::cuda::cast_f32_to_bf16(static_cast<float*>(*w), *w16, N * N, s.get())));
  int status = 0;
  std::unique_ptr<kernels::cuda::Blas> blas(kernels::cuda::Blas::create(status));
  if (blas == nullptr) return kernel(status);
  MW_RETURN_IF_ERROR(kernel(blas->set_stream(s.get())));
  // GPU work, best of five after a warm-up, each timed with the stream drained around it.
  auto best_rate = [&](double work, const std::function<Status()>& op, const gpu::Stream& on) {
    return best_of_five(work, [&] {
      MW_RETURN_IF_ERROR(op());
      return on.synchronize();
    });
  };
  const double gemm_flops = 2.0 * static_cast<double>(N) * static_cast<double>(N) * static_cast<double>(N);
  auto fp32 = best_rate(
      gemm_flops,
      [&] {
        return kernel(kernels::cuda::matmul_forward(*blas, static_cast<float*>(*out),
                                                    static_cast<float*>(*in), static_cast<float*>(*w),
                                                    nullptr, n, n, n, s.get()));
      },
      s);
  auto bf16 = best_rate(
      gemm_flops,
      [&] {
        return kernel(kernels::cuda::matmul_forward_bf16(
            *blas, static_cast<float*>(*out), static_cast<std::uint16_t*>(*in16),
            static_cast<std::uint16_t*>(*w16), nullptr, n, n, n, s.get()));
      },
      s);
  auto hbm = best_rate(
      2.0 * static_cast<double>(copy),
      [&] {
        const cudaError_t rc =
            cudaMemcpyAsync(*b, *a, copy, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s.get()));
        return rc == cudaSuccess ? Status::ok()
                                 : Status::internal(std::string("calibrate: ") + cudaGetErrorString(rc));
      },
      s);
  if (!fp32.is_ok()) return fp32.status();
  if (!bf16.is_ok()) return bf16.status();
  if (!hbm.is_ok()) return hbm.status();
  r.fp32_flops = *fp32;
  r.bf16_flops = *bf16;
  r.hbm_Bps = *hbm;
  // The host link, from and to page-locked host memory (as the trainer's pinned buffers are).
  std::vector<char> pinned(copy, 1);
  r.link_pinned = gpu::register_host(pinned.data(), copy).is_ok();  // else pageable, as train then copies
  auto h2d = best_rate(
      static_cast<double>(copy), [&] { return d.copy_to_device(*a, pinned.data(), copy, d.h2d()); }, d.h2d());
  auto d2h = best_rate(
      static_cast<double>(copy), [&] { return d.copy_to_host(pinned.data(), *a, copy, d.d2h()); }, d.d2h());
  if (r.link_pinned) gpu::unregister_host(pinned.data(), copy);
  if (!h2d.is_ok()) return h2d.status();
  if (!d2h.is_ok()) return d2h.status();
  r.h2d_Bps = *h2d;
  r.d2h_Bps = *d2h;
  for (const auto& blk : blocks) d.arena().release(blk);
  return r;
}
#else
Result<GpuRates> gpu_rates(int, int) {
  return Status::failed_precondition("--device cuda: memwall was built without CUDA (MEMWALL_CUDA)");
}
#endif

// FLOP/s of memwall train's compute on this GPT at (batch, seq): a ZeRO-3 trainer with everything on the
// device (no offload, so no I/O competes for the cores) runs one warm-up step and `steps` measured ones;
// each step's rate is the achievable FLOP/s at which the schedule's compute tasks (recomputation included),
// each timed by the roofline with memory at `hbm_Bps` as the simulator times them, fill the compute lane's
// busy time; the median is kept. This is the device's achievable rate on the workload as train runs it (its
// GEMM shapes, bf16 parameters widened per op, the lane threads), which a large GEMM overstates; the cost of
// offloading is left to the simulator's model of the links and of host CPU contention. Where the memory
// time alone exceeds a step's busy time, that step's rate is its FLOPs over its busy time (a warning says
// so).
Result<double> train_rate(const ModelSpec& m, int batch, int seq, int steps, bool cuda, int gpu,
                          double hbm_Bps, std::vector<std::string>& warnings) {
  model::GptConfig c = model::gpt_config_of(m);
  c.vocab = 256;  // as memwall train: byte tokens
  const int T = seq > 0 ? seq : m.max_positions;
  MW_RETURN_IF_ERROR(model::validate(c, batch, T));
  train::Zero3Options zo;
  zo.micro_batch = batch;
  zo.seq = T;
  // As memwall train's default run (train-gpt) computes: checkpointing every block, so backward recomputes
  // the forward (the op mix whose rate is measured).
  zo.run.activation_checkpointing.enabled = true;
  zo.run.activation_checkpointing.interval = 1;
  const double params_bytes = 16.0 * static_cast<double>(model::gpt_num_params(c));
  zo.hw = train::emulated_hardware(4 * params_bytes + (2ull << 30), 4 * params_bytes + (2ull << 30), 0);
  if (cuda) {  // the tier: what the GPU has, at most that
    zo.device = train::ComputeDevice::kCuda;
    zo.gpu = gpu;
    zo.gpu_bf16_matmuls = true;  // memwall train's default on a GPU
  }
  auto world = comm::make_local_comm();
  auto trainer = train::Zero3Trainer::create(c, zo, *world);
  if (!trainer.is_ok()) return trainer.status();
  double flops = 0;
  std::vector<std::pair<double, double>> ops;  // {FLOPs, memory bytes} of each compute task
  for (const Task& t : trainer->schedule().tasks) {
    if (t.kind != TaskKind::kCompute) continue;
    flops += t.flops;
    ops.emplace_back(t.flops, t.bytes);
  }
  std::vector<int> tok(static_cast<std::size_t>(batch) * static_cast<std::size_t>(T)), tgt(tok.size());
  for (std::size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int>((i * 31) % 256);
    tgt[i] = static_cast<int>((i * 17 + 3) % 256);
  }
  std::vector<double> rates;
  bool warned = false;
  for (int k = 0; k <= steps; ++k) {
    auto loss = trainer->step(tok.data(), tgt.data());
    if (!loss.is_ok()) return loss.status();
    // The compute tasks' own time (the compute lane also runs the optimizer's step on the device).
    double busy = 0;
    for (const Completion& done : trainer->last_run().timing) {
      if (done.task >= 0 &&
          trainer->schedule().tasks[static_cast<std::size_t>(done.task)].kind == TaskKind::kCompute)
        busy += done.end_s - done.start_s;
    }
    if (k == 0 || busy <= 0) continue;
    const double rate = roofline_flops_for(ops, hbm_Bps, busy);
    if (rate <= 0 && !warned) {
      warned = true;
      warnings.push_back(
          strprintf("a training step's compute took %.1f ms, less than its memory traffic at the measured "
                    "%.1f GB/s would; its achievable rate is its FLOPs over its time (no roofline)",
                    busy * 1e3, hbm_Bps / 1e9));
    }
    rates.push_back(rate > 0 ? rate : flops / busy);
  }
  if (rates.empty()) return Status::internal("calibrate: the trainer's compute lane recorded no time");
  return median(rates);
}

// Bytes copied per second by memcpy between two 256 MiB buffers (best of 5).
double memcpy_rate() {
  const std::size_t n = 256ull << 20;
  std::vector<char> a(n, 1), b(n, 2);
  int k = 0;
  return *best_of_five(static_cast<double>(n), [&] {
    ++k;
    std::memcpy(k % 2 ? a.data() : b.data(), k % 2 ? b.data() : a.data(), n);
    return Status::ok();
  });
}

// fp32 GEMM FLOP/s of a transformer-sized matmul (2048 tokens x 1024 x 1024), best of 5.
double gemm_rate() {
  const int N = 2048, IC = 1024, OC = 1024;
  std::vector<float> in(static_cast<std::size_t>(N) * IC, 0.01f), w(static_cast<std::size_t>(OC) * IC, 0.02f),
      out(static_cast<std::size_t>(N) * OC);
  return *best_of_five(2.0 * N * IC * OC, [&] {
    kernels::matmul_forward(out.data(), in.data(), w.data(), nullptr, N, IC, OC);
    return Status::ok();
  });
}

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

int run_calibrate(const CalibrateOptions& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(opt.path, ec)) {
    return report_error(Status::invalid_argument("--path " + opt.path + ": not a directory"));
  }
  // The spec's drive capacity is the filesystem's size: one that reports none (ramfs) is no disk.
  struct statvfs vfs {};
  const double disk_bytes = ::statvfs(opt.path.c_str(), &vfs) == 0
                                ? static_cast<double>(vfs.f_blocks) * static_cast<double>(vfs.f_frsize)
                                : 0;
  if (!(disk_bytes > 0)) {
    return report_error(Status::invalid_argument(
        "--path " + opt.path +
        ": its filesystem reports no size (a ramfs?); allowed: a directory on the disk to measure"));
  }
  const ParsedBytes size = parse_bytes(opt.size);
  if (!size.ok || size.bytes < (1 << 20)) {
    return report_error(
        Status::invalid_argument("--size \"" + opt.size + "\": allowed: 1M or more, e.g. 512M"));
  }
  const std::string out = opt.out.empty() ? scenarios_dir() + "/hardware/local.json" : opt.out;
  if (!fs::path(out).parent_path().empty()) fs::create_directories(fs::path(out).parent_path(), ec);
  if (Status s = prepare_output("--out", out, false); !s.is_ok()) return report_error(s);
  const bool cuda = opt.device == "cuda";
  if (cuda && (opt.gemm_size < 64 || opt.gemm_size > 32768)) {
    return report_error(
        Status::invalid_argument("--gemm-size " + std::to_string(opt.gemm_size) + ": allowed: 64 to 32768"));
  }
  std::vector<std::string> warnings;
  GpuRates g;
  if (cuda) {
    if (!opt.json) std::fprintf(stderr, "calibrate: GPU %d (GEMMs, memory, host link)...\n", opt.gpu);
    auto r = gpu_rates(opt.gpu, opt.gemm_size);
    if (!r.is_ok()) return report_error(r.status());
    g = *r;
  }
  if (!opt.json) std::fprintf(stderr, "calibrate: memory bandwidth...\n");
  const double copy_Bps = memcpy_rate();
  if (!opt.json) std::fprintf(stderr, "calibrate: GEMM (%s)...\n", kernels::matmul_backend());
  const double gemm = gemm_rate();
  double flops = cuda ? g.bf16_flops : gemm;
  const std::string gemm_shape = std::to_string(opt.gemm_size) + "^3";
  std::string rate_source = cuda
                                ? "bf16 GEMM " + gemm_shape + " on cuBLAS (memwall train's default on a GPU)"
                                : "fp32 GEMM 2048x1024x1024 (" + std::string(kernels::matmul_backend()) + ")";
  if (!opt.model.empty()) {
    Diagnostics mdiag;
    auto m = load_model_arg(opt.model, mdiag);
    if (!m.is_ok()) return report_error(m.status());
    if (!opt.json) std::fprintf(stderr, "calibrate: %s training steps (no offload)...\n", m->name.c_str());
    auto r = train_rate(*m, opt.batch, opt.seq, 7, cuda, opt.gpu, cuda ? g.hbm_Bps : 2 * copy_Bps, warnings);
    if (!r.is_ok()) return report_error(r.status());
    flops = *r;
    rate_source = m->name + " compute of memwall train" + (cuda ? " --device cuda" : "") +
                  " (no offload), batch " + std::to_string(opt.batch);
  }
  if (!opt.json)
    std::fprintf(stderr, "calibrate: disk under %s (%s)...\n", opt.path.c_str(), opt.size.c_str());
  const std::string file = (fs::path(opt.path) / "memwall-calibrate.dat").string();
  io::Backend used = io::Backend::kAuto;
  io::IoSettings settings;
  settings.block_size = 1 << 20;
  settings.queue_depth = 8;
  settings.parallelism = 1;
  auto disk =
      measure_disk(file, static_cast<std::uint64_t>(size.bytes), settings, true, true, warnings, used);
  // Per-request latency: 4 KiB requests one at a time (what a small tensor's read or write pays on top of
  // its transfer).
  io::IoSettings small = settings;
  small.block_size = 4096;
  small.queue_depth = 1;
  io::Backend used_small = used;
  auto lat = disk.is_ok() ? measure_disk(file, 8ull << 20, small, true, true, warnings, used_small)
                          : Result<Measurement>(disk.status());
  fs::remove(file, ec);
  if (!disk.is_ok()) return report_error(disk.status());
  if (!lat.is_ok()) return report_error(lat.status());
  double latency_s = 0.5 * (4096 / lat->read_Bps + 4096 / lat->write_Bps);
  std::string nvme_source =
      (disk->direct ? "O_DIRECT sequential I/O of "
                    : "buffered sequential I/O (the filesystem refuses O_DIRECT: page-cache "
                      "rates, not the disk's) of ") +
      opt.size + " and 4 KiB requests";
  if (!opt.tensor_size.empty()) {
    const ParsedBytes t = parse_bytes(opt.tensor_size);
    if (!t.ok || t.bytes < 4096) {
      return report_error(
          Status::invalid_argument("--tensor-size \"" + opt.tensor_size + "\": allowed: 4K or more"));
    }
    if (!opt.json) {
      std::fprintf(stderr, "calibrate: tensor store, %s tensors read and written at once...\n",
                   opt.tensor_size.c_str());
    }
    auto st = store_rates((fs::path(opt.path) / "memwall-calibrate-store").string(),
                          static_cast<std::uint64_t>(size.bytes), static_cast<std::uint64_t>(t.bytes));
    if (!st.is_ok()) return report_error(st.status());
    disk = *st;
    latency_s = 0;  // included in the measured rates
    nvme_source = "memwall's tensor store, " + opt.tensor_size + " tensors read and written concurrently";
  }
  const double ram = mem_total_bytes();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  char host[256] = "this machine";
  ::gethostname(host, sizeof host - 1);

  // The peak is the largest rate measured (a workload's rate above a GEMM's, on a noisy machine, raises it).
  json gpu_spec = {{"model", "host-emulated device"},
                   {"count", 1},
                   {"memory_bytes", std::floor(ram / 2 / 4096) * 4096},
                   {"reserved_bytes", 0},
                   {"peak_flops", std::max(gemm, flops)},
                   {"achievable_flops", flops},
                   {"hbm_Bps", 2 * copy_Bps},
                   {"shares_host_cpu", true}};
  std::string device_source =
      "memcpy of 256 MiB, peak = fp32 GEMM 2048x1024x1024 (" + std::string(kernels::matmul_backend()) + ")";
  double link_Bps = copy_Bps;
  if (cuda) {  // the GPU's own figures; its memory as the driver reports it, less what was in use already
    gpu_spec = {{"model", g.name},
                {"count", g.count},
                {"memory_bytes", std::floor(g.total_bytes / 4096) * 4096},
                {"reserved_bytes", std::floor((g.total_bytes - g.free_bytes) / 4096) * 4096},
                {"peak_flops", std::max({g.bf16_flops, g.fp32_flops, flops})},
                {"achievable_flops", flops},
                {"hbm_Bps", g.hbm_Bps},
                {"shares_host_cpu", false}};
    device_source = "GPU: peak = bf16 GEMM " + gemm_shape +
                    " on cuBLAS (fp32 accumulation), memory = a 256 MiB "
                    "device-to-device copy (read + written), link = 256 MiB page-locked copies each way (the "
                    "slower)";
    link_Bps = std::min(g.h2d_Bps, g.d2h_Bps);
  }
  json hw = {{"format", "memwall-hardware"},
             {"version", 1},
             {"name", "local"},
             {"description", std::string("measured by memwall calibrate on ") + host + ": " + cpu_model() +
                                 ", " + std::to_string(cores) + " cores; the device is " +
                                 (cuda ? g.name + " (CUDA)" : std::string("memwall's host-emulated one"))},
             {"sources",
              {"memwall calibrate " MEMWALL_VERSION ": " + device_source + ", achievable = " + rate_source +
               ", NVMe: " + nvme_source + " under " + opt.path + " (" + io::backend_name(used) + ")"}},
             {"nodes", 1},
             {"gpu", gpu_spec},
             {"cpu",
              {{"model", cpu_model()},
               {"sockets", 1},
               {"cores", cores},
               {"memory_bytes", std::floor(ram / 4096) * 4096},
               {"reserved_bytes", 0},
               {"memory_Bps", 2 * copy_Bps}}},
             {"nvme",
              {{"drives", 1},
               {"drive_capacity_bytes", disk_bytes},
               {"drive_read_Bps", disk->read_Bps},
               {"drive_write_Bps", disk->write_Bps},
               {"drive_readwrite_Bps",
                disk->readwrite_Bps > 0 ? disk->readwrite_Bps : std::max(disk->read_Bps, disk->write_Bps)},
               {"latency_s", latency_s},
               {"host_cpu_s_per_byte", disk->cpu_s_per_byte}}},
             {"pcie", {{"gpu_link_Bps", link_Bps}, {"latency_s", 0}}}};
  // It must load as a hardware spec before it is written.
  Diagnostics diag;
  auto check = parse_hardware(hw.dump(), out, diag, nullptr);
  if (!check.is_ok())
    return report_error(Status::internal("calibrate produced an invalid spec: " + check.status().message()));
  const std::string text = hw.dump(2) + "\n";
  if (Status st = io::write_file_atomic(out, {text}); !st.is_ok()) return report_error(st);
  if (opt.json) {
    std::printf("%s\n", json({{"out", out}, {"hardware", hw}, {"warnings", warnings}}).dump(2).c_str());
  } else {
    for (const std::string& w : warnings) std::fprintf(stderr, "memwall: warning: %s\n", w.c_str());
    if (cuda) {
      std::printf("GPU        %s (%d on this machine), %s\n", g.name.c_str(), g.count,
                  format_bytes(g.total_bytes).c_str());
      std::printf("GPU GEMM   %8.2f TFLOP/s bf16, %.2f TFLOP/s fp32 (cuBLAS, %s)\n", g.bf16_flops / 1e12,
                  g.fp32_flops / 1e12, gemm_shape.c_str());
      std::printf("GPU memory %8.2f GB/s (device-to-device copy, read + written)\n", g.hbm_Bps / 1e9);
      std::printf("host link  %8.2f GB/s to the GPU, %.2f GB/s back (%s)\n", g.h2d_Bps / 1e9, g.d2h_Bps / 1e9,
                  g.link_pinned ? "page-locked" : "pageable: the driver would not page-lock host memory");
    }
    std::printf("memcpy     %8.2f GB/s  (%sCPU memory traffic %.2f GB/s)\n", copy_Bps / 1e9,
                cuda ? "" : "device copies; ", 2 * copy_Bps / 1e9);
    std::printf("GEMM fp32  %8.2f GFLOP/s on the CPU (%s)\n", gemm / 1e9, kernels::matmul_backend());
    if (!opt.model.empty()) std::printf("achievable %8.2f GFLOP/s (%s)\n", flops / 1e9, rate_source.c_str());
    std::printf("disk write %8.3f GB/s, read %.3f GB/s, %.1f us per 4 KiB request (%s, O_DIRECT, %s)\n",
                disk->write_Bps / 1e9, disk->read_Bps / 1e9, latency_s * 1e6, io::backend_name(used),
                opt.path.c_str());
    if (disk->readwrite_Bps > 0)
      std::printf("disk r+w   %8.3f GB/s reads and writes at once\n", disk->readwrite_Bps / 1e9);
    std::printf("disk CPU   %8.3f ns per byte read or written (%.2f GB/s per core)\n",
                disk->cpu_s_per_byte * 1e9, disk->cpu_s_per_byte > 0 ? 1e-9 / disk->cpu_s_per_byte : 0.0);
    std::printf("memory     %s RAM (device: %s)\n", format_bytes(ram).c_str(),
                format_bytes(cuda ? g.total_bytes : ram / 2).c_str());
    std::printf("wrote %s (use --hardware %s)\n", out.c_str(), opt.out.empty() ? "local" : out.c_str());
  }
  return kExitOk;
}

}  // namespace

void register_calibrate(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<CalibrateOptions>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Measure this machine and write a hardware spec for simulate and replay");
  cmd->add_option("--path", opt->path, "A directory on the disk to measure (the NVMe tier)")
      ->capture_default_str();
  cmd->add_option("--size", opt->size, "Bytes of disk I/O per pass")->capture_default_str();
  cmd->add_option("--out", opt->out, "Where to write the spec (default: scenarios/hardware/local.json)");
  cmd->add_option(
      "--model", opt->model,
      "Measure the achievable FLOP/s of memwall train on this GPT (scenario or config.json) instead "
      "of a large GEMM");
  cmd->add_option("--batch", opt->batch, "Sequences per step for --model")->capture_default_str();
  cmd->add_option("--seq", opt->seq, "Sequence length for --model (default: the model's n_positions)");
  cmd->add_option("--tensor-size", opt->tensor_size,
                  "Measure the NVMe rates through memwall's tensor store with tensors of this size, read and "
                  "written at once (what memwall train's NVMe lanes see), e.g. 128K");
  cmd->add_option(
         "--device", opt->device,
         "The device memwall train computes on: cpu (host-emulated, on this CPU) or cuda (a GPU: its "
         "GEMM rates, memory bandwidth, host link and memory)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--gpu", opt->gpu, "With --device cuda: which GPU")->capture_default_str();
  cmd->add_option("--gemm-size", opt->gemm_size, "With --device cuda: n of the n x n x n GEMMs")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "Print the measurements and the spec as JSON");
  cmd->callback([opt, &exit_code] { exit_code = run_calibrate(*opt); });
}

}  // namespace memwall::cli
