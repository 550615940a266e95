// The device tier on a real GPU (engine/cuda) and NCCL collectives against the host Communicator's results.
// Skipped (with the reason) without a GPU; the NCCL test runs on as many ranks as mpirun starts (one GPU
// each, skipped when there are fewer GPUs than ranks) or on one rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/cuda/device.h"
#if MEMWALL_HAVE_NCCL
#include "engine/comm/nccl.h"
#endif

namespace memwall::gpu {
namespace {

#define SKIP_WITHOUT_GPU()                            \
  do {                                                \
    std::string why;                                  \
    if (device_count(&why) == 0) GTEST_SKIP() << why; \
  } while (0)

TEST(CudaDevice, ArenaCopiesAndEventsOrderTheStreams) {
  SKIP_WITHOUT_GPU();
  auto dev = Device::open(0, 64u << 20);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  Device& d = **dev;
  EXPECT_FALSE(d.info().name.empty());
  auto a = d.arena().allocate(1u << 20, "a");
  auto b = d.arena().allocate(1u << 20, "b");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  // Pinned (registered) host memory, as the I/O library's pool hands out.
  std::vector<float> src(1u << 18), dst(src.size(), -1.0f);
  std::iota(src.begin(), src.end(), 0.0f);
  ASSERT_TRUE(register_host(src.data(), src.size() * 4).is_ok());
  ASSERT_TRUE(register_host(dst.data(), dst.size() * 4).is_ok());
  // h2d on its stream, then the copy-back on the compute stream only after an event says h2d is done.
  auto ev = Event::create();
  ASSERT_TRUE(ev.is_ok());
  ASSERT_TRUE(d.copy_to_device(a->data, src.data(), src.size() * 4, d.h2d()).is_ok());
  ASSERT_TRUE(ev->record(d.h2d()).is_ok());
  ASSERT_TRUE(ev->wait(d.compute()).is_ok());
  ASSERT_TRUE(d.copy_to_host(dst.data(), a->data, dst.size() * 4, d.compute()).is_ok());
  ASSERT_TRUE(d.compute().synchronize().is_ok());
  EXPECT_TRUE(ev->done());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size() * 4), 0);
  unregister_host(src.data(), src.size() * 4);
  unregister_host(dst.data(), dst.size() * 4);
  d.arena().release(*a);
  d.arena().release(*b);
  // A device tier larger than the GPU is refused with what is free.
  auto huge = Device::open(0, static_cast<std::size_t>(1) << 50);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("free"), std::string::npos) << huge.status().message();
}

#if MEMWALL_HAVE_NCCL && (!MEMWALL_EMULATED_GPU || MEMWALL_EMULATED_NCCL)
TEST(Nccl, CollectivesAgreeWithTheHostCommunicator) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<comm::Communicator> world;
  if (comm::launched_by_mpi()) {
    auto w = comm::make_mpi_comm(std::chrono::seconds(60));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    world = std::move(w).value();
  } else {
    world = comm::make_local_comm();
  }
  const int R = world->size(), r = world->rank();
  if (device_count() < R) GTEST_SKIP() << R << " ranks need " << R << " GPUs";
  auto dev = Device::open(r, 64u << 20);
  ASSERT_TRUE(dev.is_ok()) << dev.status().message();
  auto nccl = comm::NcclComm::create(*world);
  ASSERT_TRUE(nccl.is_ok()) << nccl.status().message();
  const std::size_t count = 4099;  // per rank, not a multiple of anything
  std::vector<float> shard(count), full(count * static_cast<std::size_t>(R));
  for (std::size_t i = 0; i < count; ++i)
    shard[i] = std::sin(static_cast<float>(i + 1) * static_cast<float>(r + 1));
  for (std::size_t i = 0; i < full.size(); ++i)
    full[i] = std::cos(static_cast<float>(i) * 0.01f + static_cast<float>(r));
  // The host communicator's answers.
  std::vector<float> gathered(full.size()), reduced(count);
  ASSERT_TRUE(world->allgather(shard.data(), gathered.data(), count * 4, "test").is_ok());
  ASSERT_TRUE(world->reduce_scatter_sum(full.data(), reduced.data(), count, "test").is_ok());
  // NCCL's, on device buffers and the collective stream.
  Device& d = **dev;
  auto d_shard = d.arena().allocate(count * 4, "shard");
  auto d_full = d.arena().allocate(full.size() * 4, "full");
  auto d_out = d.arena().allocate(full.size() * 4, "out");
  ASSERT_TRUE(d_shard.is_ok() && d_full.is_ok() && d_out.is_ok());
  ASSERT_TRUE(d.copy_to_device(d_shard->data, shard.data(), count * 4, d.comm()).is_ok());
  ASSERT_TRUE(d.copy_to_device(d_full->data, full.data(), full.size() * 4, d.comm()).is_ok());
  ASSERT_TRUE((*nccl)->all_gather(d_shard->data, d_out->data, count * 4, d.comm().get()).is_ok());
  std::vector<float> got(full.size());
  ASSERT_TRUE(d.copy_to_host(got.data(), d_out->data, got.size() * 4, d.comm()).is_ok());
  ASSERT_TRUE(d.comm().synchronize().is_ok());
  EXPECT_EQ(got, gathered);  // a gather moves bytes: bitwise
  ASSERT_TRUE((*nccl)
                  ->reduce_scatter_sum(static_cast<const float*>(d_full->data),
                                       static_cast<float*>(d_out->data), count, d.comm().get())
                  .is_ok());
  ASSERT_TRUE(d.copy_to_host(got.data(), d_out->data, count * 4, d.comm()).is_ok());
  ASSERT_TRUE(d.comm().synchronize().is_ok());
  for (std::size_t i = 0; i < count; ++i) {
    // Sums of R terms in another order: within R ulps of the magnitude.
    EXPECT_NEAR(got[i], reduced[i], 1e-6f * static_cast<float>(R) * (1.0f + std::fabs(reduced[i]))) << i;
  }
  // All-reduce of the shard: every rank gets the same sum.
  ASSERT_TRUE(d.copy_to_device(d_out->data, shard.data(), count * 4, d.comm()).is_ok());
  ASSERT_TRUE((*nccl)->all_reduce_sum(static_cast<float*>(d_out->data), count, d.comm().get()).is_ok());
  ASSERT_TRUE(d.copy_to_host(got.data(), d_out->data, count * 4, d.comm()).is_ok());
  ASSERT_TRUE(d.comm().synchronize().is_ok());
  for (std::size_t i = 0; i < count; ++i) {
    float expect = 0;
    for (int k = 0; k < R; ++k) expect += gathered[static_cast<std::size_t>(k) * count + i];
    EXPECT_NEAR(got[i], expect, 1e-6f * static_cast<float>(R) * (1.0f + std::fabs(expect))) << i;
  }
  d.arena().release(*d_shard);
  d.arena().release(*d_full);
  d.arena().release(*d_out);
}
#endif

}  // namespace
}  // namespace memwall::gpu
