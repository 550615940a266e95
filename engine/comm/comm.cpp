// Local communicator, MPI communicator with deadlines and rank-ordered reductions.
#include "engine/comm/comm.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "base/hash.h"

#if MEMWALL_HAVE_MPI
#include <mpi.h>
#endif

namespace memwall::comm {

namespace {

class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status allgather(const void* shard, void* full, std::size_t bytes, const std::string&) override {
    if (bytes > 0 && shard != full) std::memmove(full, shard, bytes);
    return Status::ok();
  }
  Status reduce_scatter_sum(const float* full, float* shard, std::size_t count, const std::string&) override {
    if (count > 0 && full != shard) std::memmove(shard, full, count * sizeof(float));
    return Status::ok();
  }
  Status barrier(const std::string&) override { return Status::ok(); }
};

#if MEMWALL_HAVE_MPI
// A collective that timed out cannot be cancelled: its request stays posted, and MPI may still read and write
// its buffers later (when the late peer joins, or while MPI_Finalize progresses what is pending). memwall's
// own buffers of such a request are kept here until the process ends (reachable, so not a leak). The caller's
// buffers of a timed-out all-gather or reduce-scatter are beyond reach: then MPI_Finalize, which would
// progress the request into them after they are freed, is not called at exit (the run is failing anyway;
// mpirun reports that the rank exited without finalizing).
std::vector<std::shared_ptr<void>>& abandoned_buffers() {
  static auto* kept = new std::vector<std::shared_ptr<void>>();
  return *kept;
}
bool caller_buffers_abandoned = false;

class MpiComm final : public Communicator {
 public:
  explicit MpiComm(std::chrono::milliseconds timeout) : timeout_(timeout) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status allgather(const void* shard, void* full, std::size_t bytes, const std::string& tag) override {
    MPI_Request req;
    MW_RETURN_IF_ERROR(check_count(bytes, tag));
    MW_RETURN_IF_ERROR(check_intents("allgather", bytes, tag));
    MPI_Iallgather(shard, static_cast<int>(bytes), MPI_BYTE, full, static_cast<int>(bytes), MPI_BYTE,
                   MPI_COMM_WORLD, &req);
    const Status s = wait(req, "allgather", tag);
    if (!s.is_ok()) caller_buffers_abandoned = true;
    return s;
  }

  Status reduce_scatter_sum(const float* full, float* shard, std::size_t count,
                            const std::string& tag) override {
    MW_RETURN_IF_ERROR(check_count(count, tag));
    MW_RETURN_IF_ERROR(check_intents("reduce-scatter", count * sizeof(float), tag));
    // Every rank sends piece r of its buffer to rank r, then sums the received pieces in rank order.
    std::vector<float>& recv = *recv_;
    recv.resize(count * static_cast<std::size_t>(size_));
    MPI_Request req;
    MPI_Ialltoall(full, static_cast<int>(count), MPI_FLOAT, recv.data(), static_cast<int>(count), MPI_FLOAT,
                  MPI_COMM_WORLD, &req);
    if (Status s = wait(req, "reduce-scatter", tag); !s.is_ok()) {
      abandoned_buffers().push_back(std::exchange(recv_, std::make_shared<std::vector<float>>()));
      caller_buffers_abandoned = true;
      return s;
    }
    std::memcpy(shard, recv.data(), count * sizeof(float));
    for (int r = 1; r < size_; ++r) {
      const float* piece = recv.data() + static_cast<std::size_t>(r) * count;
      for (std::size_t i = 0; i < count; ++i) shard[i] += piece[i];
    }
    return Status::ok();
  }

  Status barrier(const std::string& tag) override {
    MW_RETURN_IF_ERROR(check_intents("barrier", 0, tag));
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return wait(req, "barrier", tag);
  }

 private:
  Status check_count(std::size_t n, const std::string& tag) const {
    if (n > static_cast<std::size_t>(INT32_MAX)) {
      return Status::invalid_argument("rank " + std::to_string(rank_) + ": " + tag + ": " +
                                      std::to_string(n) +
                                      " elements per rank exceed MPI's int count; use smaller sub-groups");
    }
    return Status::ok();
  }

  // Ranks that run the same schedule call the same collectives in the same order. Before each one they
  // exchange what they are about to run (operation, bytes, tag), so ranks that diverged (a different plan,
  // a rank that skipped a step) get an error naming what every rank runs, not a hang or silently mixed data.
  struct Intent {
    std::uint64_t bytes, tag_hash;
    char op[16];
    char tag[96];  // the tag's first 95 characters, for the message
  };
  struct Intents {
    Intent mine{};
    std::vector<Intent> all;
  };
  Status check_intents(const char* op, std::size_t bytes, const std::string& tag) {
    Intent& mine = intents_->mine;
    mine = Intent{};
    mine.bytes = bytes;
    mine.tag_hash = fnv1a(tag.data(), tag.size());  // the same in every process
    std::strncpy(mine.op, op, sizeof mine.op - 1);
    std::strncpy(mine.tag, tag.c_str(), sizeof mine.tag - 1);
    std::vector<Intent>& all = intents_->all;
    all.resize(static_cast<std::size_t>(size_));
    MPI_Request req;
    MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof(Intent), MPI_BYTE, MPI_COMM_WORLD, &req);
    if (Status s = wait(req, op, tag); !s.is_ok()) {
      abandoned_buffers().push_back(std::exchange(intents_, std::make_shared<Intents>()));
      return s;
    }
    bool same = true;
    for (const Intent& o : all) {
      same = same && o.bytes == mine.bytes && o.tag_hash == mine.tag_hash && std::strcmp(o.op, mine.op) == 0;
    }
    if (same) return Status::ok();
    std::string each;
    for (int q = 0; q < size_; ++q) {
      const Intent& o = all[static_cast<std::size_t>(q)];
      each += (q ? "; rank " : "rank ") + std::to_string(q) + " runs " + o.op + " '" + o.tag + "' (" +
              std::to_string(o.bytes) + " bytes)";
    }
    return Status::failed_precondition(
        "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
        ": the ranks diverged (every rank must run the same collectives in the "
        "same order): " +
        each);
  }

  Status wait(MPI_Request& req, const char* op, const std::string& tag) {
    const auto start = std::chrono::steady_clock::now();
    int done = 0;
    while (true) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return Status::ok();
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout_) {
        // The request cannot be cancelled: the caller keeps what it may still touch (abandoned_buffers).
        return Status::unavailable(
            "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + op + " '" + tag +
            "' did not complete within " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
            " ms: a peer died or left the schedule");
      }
      // Small collectives (and the intents exchanged before each) complete within microseconds: poll
      // without sleeping for the first 100 us, then in 50 us naps.
      if (waited < std::chrono::microseconds(100)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<std::vector<float>> recv_ = std::make_shared<std::vector<float>>();
  std::shared_ptr<Intents> intents_ = std::make_shared<Intents>();
};

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !caller_buffers_abandoned) MPI_Finalize();
}
#endif

}  // namespace

Status agree(Communicator& comm, const Status& local, const std::string& tag) {
  if (comm.size() == 1) return local;
  struct Outcome {
    std::int32_t code = 0;
    char message[1020] = {};  // truncated; one line is far shorter
  };
  Outcome mine;
  mine.code = static_cast<std::int32_t>(local.code());
  std::strncpy(mine.message, local.message().c_str(), sizeof mine.message - 1);
  std::vector<Outcome> all(static_cast<std::size_t>(comm.size()));
  MW_RETURN_IF_ERROR(comm.allgather(&mine, all.data(), sizeof mine, tag));
  for (int r = 0; r < comm.size(); ++r) {
    const Outcome& o = all[static_cast<std::size_t>(r)];
    if (o.code == static_cast<std::int32_t>(StatusCode::kOk)) continue;
    if (r == comm.rank()) return local;
    const std::string who = "rank " + std::to_string(r) + " of " + std::to_string(comm.size()) + ": ";
    const auto code = std::min(o.code, static_cast<std::int32_t>(StatusCode::kInternal));
    return {static_cast<StatusCode>(code),
            who + std::string(o.message, strnlen(o.message, sizeof o.message))};
  }
  return Status::ok();
}

std::unique_ptr<Communicator> make_local_comm() {
  return std::make_unique<LocalComm>();
}

Result<std::unique_ptr<Communicator>> make_mpi_comm(std::chrono::milliseconds timeout) {
#if MEMWALL_HAVE_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return Status::unavailable("MPI_Init_thread failed");
    }
    std::atexit(finalize_mpi);
  }
  return std::unique_ptr<Communicator>(std::make_unique<MpiComm>(timeout));
#else
  (void)timeout;
  return Status::unavailable(
      "this memwall was built without MPI (apt-get install libopenmpi-dev openmpi-bin, "
      "then reconfigure with -DMEMWALL_MPI=ON)");
#endif
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace memwall::comm
