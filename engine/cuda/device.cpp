// CUDA runtime wrappers for the device tier (see device.h). Runtime API only: never the driver library,
// so binaries start on machines without a GPU driver (reference/toolchain-notes.md §1).
#include "engine/cuda/device.h"

#include <cuda_runtime_api.h>

#include "base/units.h"

namespace memwall::gpu {

namespace {

Status check(cudaError_t rc, const std::string& call) {
  if (rc == cudaSuccess) return Status::ok();
  if (rc == cudaErrorMemoryAllocation)
    return Status::out_of_memory("cuda: " + call + ": " + cudaGetErrorString(rc));
  return Status::internal("cuda: " + call + ": " + cudaGetErrorString(rc));
}

cudaStream_t as_stream(const Stream& s) {
  return static_cast<cudaStream_t>(s.get());
}

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  // Without a driver this is cudaErrorInsufficientDriver, not cudaErrorNoDevice: any error means no GPU.
  if (rc != cudaSuccess) {
    if (why != nullptr) *why = std::string("no GPU (") + cudaGetErrorString(rc) + ")";
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (why != nullptr) *why = n > 0 ? std::to_string(n) + " GPU(s)" : "no GPU";
  return n;
}

// ---- Stream ----

Result<Stream> Stream::create() {
  cudaStream_t s = nullptr;
  MW_RETURN_IF_ERROR(
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
  return Stream(s);
}

Stream::~Stream() {
  if (s_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(s_));
}

Status Stream::synchronize() const {
  return check(cudaStreamSynchronize(static_cast<cudaStream_t>(s_)), "cudaStreamSynchronize");
}

// ---- Event ----

Result<Event> Event::create(bool timing) {
  cudaEvent_t e = nullptr;
  MW_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
                           "cudaEventCreateWithFlags"));
  return Event(e);
}

Result<double> Event::elapsed_ms(const Event& from, const Event& to) {
  float ms = 0;
  MW_RETURN_IF_ERROR(
      check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.e_), static_cast<cudaEvent_t>(to.e_)),
            "cudaEventElapsedTime"));
  return static_cast<double>(ms);
}

Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(e_));
}

Status Event::record(const Stream& on) {
  return check(cudaEventRecord(static_cast<cudaEvent_t>(e_), as_stream(on)), "cudaEventRecord");
}

Status Event::wait(const Stream& on) const {
  return check(cudaStreamWaitEvent(as_stream(on), static_cast<cudaEvent_t>(e_), 0), "cudaStreamWaitEvent");
}

Status Event::synchronize() const {
  return check(cudaEventSynchronize(static_cast<cudaEvent_t>(e_)), "cudaEventSynchronize");
}

bool Event::done() const {
  return cudaEventQuery(static_cast<cudaEvent_t>(e_)) == cudaSuccess;
}

// ---- Device ----

Device::Device(DeviceInfo info, void* base, std::unique_ptr<host::Arena> arena, Stream compute, Stream h2d,
               Stream d2h, Stream comm)
    : info_(std::move(info)),
      base_(base),
      arena_(std::move(arena)),
      compute_(std::move(compute)),
      h2d_(std::move(h2d)),
      d2h_(std::move(d2h)),
      comm_(std::move(comm)) {}

Device::~Device() {
  cudaDeviceSynchronize();
  arena_.reset();
  if (base_ != nullptr) cudaFree(base_);
}

Result<std::unique_ptr<Device>> Device::open(int ordinal, std::size_t arena_bytes) {
  std::string why;
  const int n = device_count(&why);
  if (ordinal < 0 || ordinal >= n) {
    return Status::not_found("cuda: GPU " + std::to_string(ordinal) + " is not available: " + why);
  }
  MW_RETURN_IF_ERROR(check(cudaSetDevice(ordinal), "cudaSetDevice(" + std::to_string(ordinal) + ")"));
  cudaDeviceProp prop{};
  MW_RETURN_IF_ERROR(check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties"));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  MW_RETURN_IF_ERROR(check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo"));
  if (arena_bytes > info.free_bytes) {
    return Status::out_of_memory("cuda: GPU " + std::to_string(ordinal) + " (" + info.name +
                                 "): the device tier needs " +
                                 format_bytes(static_cast<double>(arena_bytes)) + " but " +
                                 format_bytes(static_cast<double>(info.free_bytes)) + " of " +
                                 format_bytes(static_cast<double>(info.total_bytes)) + " are free");
  }
  void* base = nullptr;
  MW_RETURN_IF_ERROR(check(cudaMalloc(&base, std::max<std::size_t>(arena_bytes, host::Arena::kAlign)),
                           "cudaMalloc(" + format_bytes(static_cast<double>(arena_bytes)) + ")"));
  auto arena = std::make_unique<host::Arena>("GPU " + std::to_string(ordinal), base, arena_bytes);
  Result<Stream> compute = Stream::create(), h2d = Stream::create(), d2h = Stream::create(),
                 comm = Stream::create();
  for (const Result<Stream>* s : {&compute, &h2d, &d2h, &comm}) {
    if (!s->is_ok()) {
      cudaFree(base);
      return s->status();
    }
  }
  return std::unique_ptr<Device>(new Device(std::move(info), base, std::move(arena),
                                            std::move(compute).value(), std::move(h2d).value(),
                                            std::move(d2h).value(), std::move(comm).value()));
}

Status Device::copy_to_device(void* dst, const void* src, std::size_t bytes, const Stream& on) {
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(on)),
               "cudaMemcpyAsync(H2D)");
}

Status Device::copy_to_host(void* dst, const void* src, std::size_t bytes, const Stream& on) {
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(on)),
               "cudaMemcpyAsync(D2H)");
}

Status Device::synchronize() {
  return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- pinned host memory ----

Status register_host(void* p, std::size_t bytes) {
  return check(cudaHostRegister(p, bytes, cudaHostRegisterDefault),
               "cudaHostRegister(" + format_bytes(static_cast<double>(bytes)) + ")");
}

void unregister_host(void* p, std::size_t) {
  cudaHostUnregister(p);
}

}  // namespace memwall::gpu
