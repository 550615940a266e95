// Worker-per-queue async I/O over io_uring, libaio or pread/pwrite (see async_io.h).
#include "engine/io/async_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "base/suggest.h"
#include "base/units.h"

#if MEMWALL_HAVE_URING
#include <liburing.h>
#endif
#if MEMWALL_HAVE_AIO
#include <libaio.h>
#endif

namespace memwall::io {

namespace detail {
bool dio_alignment(int fd, std::size_t* offset_align, std::size_t* mem_align);
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto:
      return "auto";
    case Backend::kIoUring:
      return "io_uring";
    case Backend::kLibaio:
      return "libaio";
    case Backend::kPsync:
      return "psync";
  }
  return "auto";
}

Result<Backend> parse_backend(const std::string& name) {
  std::vector<std::string> names;
  for (Backend b : {Backend::kAuto, Backend::kIoUring, Backend::kLibaio, Backend::kPsync}) {
    if (name == backend_name(b)) return b;
    names.emplace_back(backend_name(b));
  }
  return Status::invalid_argument("backend \"" + name + "\" is not known" + did_you_mean(name, names) +
                                  "; allowed: auto, io_uring, libaio, psync");
}

IoSettings IoSettings::from(const AioConfig& aio) {
  IoSettings s;
  s.block_size = static_cast<std::size_t>(aio.block_size);
  s.queue_depth = aio.queue_depth;
  s.parallelism = aio.intra_op_parallelism;
  return s;
}

void* alloc_aligned(std::size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<std::size_t>(bytes, 1)) != 0) return nullptr;
  return p;
}

// ---- File ----

Result<std::unique_ptr<File>> File::open(const std::string& path, OpenMode mode, bool create, bool direct,
                                         std::vector<std::string>* warnings) {
  int flags = mode == OpenMode::kRead ? O_RDONLY : (mode == OpenMode::kWrite ? O_WRONLY : O_RDWR);
  if (create) flags |= O_CREAT;
  flags |= O_CLOEXEC;
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->buffered_fd_ = ::open(path.c_str(), flags, 0644);
  if (f->buffered_fd_ < 0) return Status::io_error(path + ": open: " + std::strerror(errno));
  if (direct) {
    f->direct_fd_ = ::open(path.c_str(), (flags & ~O_CREAT) | O_DIRECT);
    if (f->direct_fd_ < 0) {
      if (errno != EINVAL) return Status::io_error(path + ": open with O_DIRECT: " + std::strerror(errno));
      if (warnings) warnings->push_back(path + ": the filesystem refuses O_DIRECT; using buffered I/O");
    } else if (!detail::dio_alignment(f->direct_fd_, &f->offset_align_, &f->mem_align_)) {
      f->offset_align_ = 4096;  // safe for 512-byte and 4 KiB sector devices
      f->mem_align_ = 4096;
    }
  }
  return f;
}

File::~File() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (buffered_fd_ >= 0) ::close(buffered_fd_);
}

int File::fd_for(std::uint64_t offset, std::size_t length, const void* buffer) const {
  if (direct_fd_ < 0) return buffered_fd_;
  const bool aligned = offset % offset_align_ == 0 && length % offset_align_ == 0 &&
                       reinterpret_cast<std::uintptr_t>(buffer) % mem_align_ == 0;
  return aligned ? direct_fd_ : buffered_fd_;
}

Status File::sync() {
  if (::fdatasync(buffered_fd_) != 0) return Status::io_error(path_ + ": fdatasync: " + std::strerror(errno));
  return Status::ok();
}

Result<std::uint64_t> File::size() const {
  struct stat st;
  if (::fstat(buffered_fd_, &st) != 0) return Status::io_error(path_ + ": fstat: " + std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

// ---- requests and chunks ----

struct AsyncIo::Request {
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Status error;

  void fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.is_ok()) error = s;
  }
  void chunk_done() {
    if (remaining.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
      cv.notify_all();
    }
  }
};

namespace {

struct Chunk {
  std::shared_ptr<AsyncIo::Request> req;
  const File* file = nullptr;
  Op op = Op::kRead;
  char* buf = nullptr;
  std::size_t len = 0;
  std::uint64_t off = 0;
};

std::string describe(const Chunk& c, const char* what) {
  return strprintf("%s: %s of %zu bytes at offset %llu: %s", c.file->path().c_str(),
                   c.op == Op::kRead ? "read" : "write", c.len, static_cast<unsigned long long>(c.off), what);
}

// Applies one completion result to a chunk: true when the chunk is finished (done or failed), false when a
// remainder must be submitted again (short transfer or EINTR/EAGAIN).
bool settle(Chunk& c, long res, FaultInjector* faults) {
  if (faults) res = faults->on_complete(c.op, c.off, c.len, res);
  if (res == -EINTR || res == -EAGAIN) return false;
  if (res < 0) {
    c.req->fail(Status::io_error(describe(c, std::strerror(static_cast<int>(-res)))));
    c.req->chunk_done();
    return true;
  }
  if (res == 0) {
    c.req->fail(Status::io_error(describe(c, c.op == Op::kRead ? "unexpected end of file" : "no progress")));
    c.req->chunk_done();
    return true;
  }
  const auto n = static_cast<std::size_t>(res);
  if (n >= c.len) {
    c.req->chunk_done();
    return true;
  }
  c.buf += n;  // short transfer: resume the rest
  c.off += n;
  c.len -= n;
  return false;
}

long sync_transfer(const Chunk& c) {
  const int fd = c.file->fd_for(c.off, c.len, c.buf);
  const ssize_t r = c.op == Op::kRead ? ::pread(fd, c.buf, c.len, static_cast<off_t>(c.off))
                                      : ::pwrite(fd, c.buf, c.len, static_cast<off_t>(c.off));
  return r < 0 ? -errno : r;
}

// One submission queue: a worker thread and its backend context.
class Queue {
 public:
  Queue(Backend backend, int depth, FaultInjector* faults)
      : backend_(backend), depth_(depth), faults_(faults) {}
  ~Queue() { stop(); }

  Status start() {
#if MEMWALL_HAVE_URING
    if (backend_ == Backend::kIoUring) {
      const int rc = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
      if (rc < 0) return Status::unavailable(std::string("io_uring_queue_init: ") + std::strerror(-rc));
      ring_ready_ = true;
    }
#endif
#if MEMWALL_HAVE_AIO
    if (backend_ == Backend::kLibaio) {
      const int rc = io_setup(depth_, &ctx_);
      if (rc < 0) return Status::unavailable(std::string("io_setup: ") + std::strerror(-rc));
      ctx_ready_ = true;
    }
#endif
    thread_ = std::thread([this] { loop(); });
    return Status::ok();
  }

  void push(Chunk c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(std::move(c));
    }
    cv_.notify_one();
  }

  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
#if MEMWALL_HAVE_URING
    if (ring_ready_) io_uring_queue_exit(&ring_);
#endif
#if MEMWALL_HAVE_AIO
    if (ctx_ready_) io_destroy(ctx_);
#endif
  }

 private:
  // Takes up to `room` chunks; blocks when there is nothing in flight and nothing queued.
  bool take(std::deque<Chunk>& into, int room, bool block) {
    std::unique_lock<std::mutex> lock(mu_);
    if (block) cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (stopping_ && pending_.empty()) return false;
    while (room-- > 0 && !pending_.empty()) {
      into.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    return true;
  }

  void loop() {
    switch (backend_) {
      case Backend::kIoUring:
        loop_uring();
        break;
      case Backend::kLibaio:
        loop_libaio();
        break;
      default:
        loop_psync();
        break;
    }
  }

  void loop_psync() {
    std::deque<Chunk> work;
    while (take(work, depth_, true)) {
      while (!work.empty()) {
        Chunk c = std::move(work.front());
        work.pop_front();
        while (!settle(c, sync_transfer(c), faults_)) {
        }
      }
    }
  }

  void loop_uring() {
#if MEMWALL_HAVE_URING
    std::deque<Chunk> ready;
    std::vector<Chunk*> slots;  // in flight, owned here
    int inflight = 0;
    for (;;) {
      if (!take(ready, depth_ - inflight - static_cast<int>(ready.size()), inflight == 0 && ready.empty()))
        break;
      int queued = 0;
      while (!ready.empty() && inflight < depth_) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;
        auto* c = new Chunk(std::move(ready.front()));
        ready.pop_front();
        const int fd = c->file->fd_for(c->off, c->len, c->buf);
        if (c->op == Op::kRead) {
          io_uring_prep_read(sqe, fd, c->buf, static_cast<unsigned>(c->len), c->off);
        } else {
          io_uring_prep_write(sqe, fd, c->buf, static_cast<unsigned>(c->len), c->off);
        }
        io_uring_sqe_set_data(sqe, c);
        ++inflight;
        ++queued;
      }
      if (queued > 0) io_uring_submit(&ring_);
      if (inflight == 0) continue;
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) continue;
      // Reap everything that is ready.
      do {
        auto* c = static_cast<Chunk*>(io_uring_cqe_get_data(cqe));
        const long res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        --inflight;
        if (!settle(*c, res, faults_)) ready.push_front(std::move(*c));
        delete c;
      } while (io_uring_peek_cqe(&ring_, &cqe) == 0);
    }
#else
    loop_psync();
#endif
  }

  void loop_libaio() {
#if MEMWALL_HAVE_AIO
    std::deque<Chunk> ready;
    int inflight = 0;
    std::vector<io_event> events(static_cast<std::size_t>(depth_));
    for (;;) {
      if (!take(ready, depth_ - inflight - static_cast<int>(ready.size()), inflight == 0 && ready.empty()))
        break;
      std::vector<iocb*> batch;
      while (!ready.empty() && inflight + static_cast<int>(batch.size()) < depth_) {
        auto* c = new Chunk(std::move(ready.front()));
        ready.pop_front();
        auto* cb = new iocb();
        const int fd = c->file->fd_for(c->off, c->len, c->buf);
        if (c->op == Op::kRead) {
          io_prep_pread(cb, fd, c->buf, c->len, static_cast<long long>(c->off));
        } else {
          io_prep_pwrite(cb, fd, c->buf, c->len, static_cast<long long>(c->off));
        }
        cb->data = c;
        batch.push_back(cb);
      }
      if (!batch.empty()) {
        int rc = io_submit(ctx_, static_cast<long>(batch.size()), batch.data());
        if (rc < 0) {  // nothing submitted: complete them synchronously with the error
          for (iocb* cb : batch) {
            auto* c = static_cast<Chunk*>(cb->data);
            settle(*c, rc, faults_);
            delete c;
            delete cb;
          }
          batch.clear();
        } else {
          for (int i = rc; i < static_cast<int>(batch.size()); ++i) {  // partial submit: retry the rest
            auto* c = static_cast<Chunk*>(batch[i]->data);
            ready.push_front(std::move(*c));
            delete c;
            delete batch[i];
          }
          inflight += rc;
        }
      }
      if (inflight == 0) continue;
      const int n = io_getevents(ctx_, 1, depth_, events.data(), nullptr);
      for (int i = 0; i < n; ++i) {
        auto* cb = events[i].obj;
        auto* c = static_cast<Chunk*>(cb->data);
        const long res = static_cast<long>(events[i].res);
        --inflight;
        if (!settle(*c, res, faults_)) ready.push_front(std::move(*c));
        delete c;
        delete cb;
      }
    }
#else
    loop_psync();
#endif
  }

  Backend backend_;
  int depth_;
  FaultInjector* faults_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> pending_;
  bool stopping_ = false;
#if MEMWALL_HAVE_URING
  io_uring ring_{};
  bool ring_ready_ = false;
#endif
#if MEMWALL_HAVE_AIO
  io_context_t ctx_ = nullptr;
  bool ctx_ready_ = false;
#endif
};

class Engine final : public AsyncIo {
 public:
  Engine(Backend b, const IoSettings& s) : backend_(b), settings_(s) {}
  ~Engine() override {
    (void)wait_all();
    for (auto& q : queues_) q->stop();
  }

  Status start() {
    for (int i = 0; i < std::max(1, settings_.parallelism); ++i) {
      queues_.push_back(
          std::make_unique<Queue>(backend_, std::max(1, settings_.queue_depth), settings_.faults));
      MW_RETURN_IF_ERROR(queues_.back()->start());
    }
    return Status::ok();
  }

  Backend backend() const override { return backend_; }

  Ticket read(File& file, void* buffer, std::size_t length, std::uint64_t offset) override {
    return submit(file, Op::kRead, static_cast<char*>(buffer), length, offset);
  }
  Ticket write(File& file, const void* buffer, std::size_t length, std::uint64_t offset) override {
    return submit(file, Op::kWrite, static_cast<char*>(const_cast<void*>(buffer)), length, offset);
  }

  Status wait(const Ticket& t) override {
    std::unique_lock<std::mutex> lock(t->mu);
    t->cv.wait(lock, [&] { return t->finished; });
    return t->error;
  }
  bool done(const Ticket& t) const override {
    std::lock_guard<std::mutex> lock(t->mu);
    return t->finished;
  }

  Status wait_all() override {
    std::vector<Ticket> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(outstanding_);
    }
    Status first;
    for (const auto& t : all) {
      Status s = wait(t);
      if (first.is_ok() && !s.is_ok()) first = s;
    }
    return first;
  }

 private:
  Ticket submit(File& file, Op op, char* buf, std::size_t len, std::uint64_t off) {
    auto req = std::make_shared<Request>();
    const std::size_t block = std::max<std::size_t>(settings_.block_size, 1);
    const std::size_t chunks = len == 0 ? 0 : (len + block - 1) / block;
    req->remaining = static_cast<int>(chunks);
    if (chunks == 0) {
      req->finished = true;
      return req;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      outstanding_.erase(std::remove_if(outstanding_.begin(), outstanding_.end(),
                                        [](const Ticket& t) { return t.use_count() == 1 && t->finished; }),
                         outstanding_.end());
      outstanding_.push_back(req);
    }
    for (std::size_t i = 0; i < chunks; ++i) {
      Chunk c;
      c.req = req;
      c.file = &file;
      c.op = op;
      c.buf = buf + i * block;
      c.off = off + i * block;
      c.len = std::min(block, len - i * block);
      queues_[next_++ % queues_.size()]->push(std::move(c));
    }
    return req;
  }

  Backend backend_;
  IoSettings settings_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::mutex mu_;
  std::vector<Ticket> outstanding_;
  std::size_t next_ = 0;
};

bool uring_works() {
#if MEMWALL_HAVE_URING
  io_uring ring;
  if (io_uring_queue_init(2, &ring, 0) != 0) return false;
  io_uring_queue_exit(&ring);
  return true;
#else
  return false;
#endif
}

bool libaio_works() {
#if MEMWALL_HAVE_AIO
  io_context_t ctx = nullptr;
  if (io_setup(2, &ctx) != 0) return false;
  io_destroy(ctx);
  return true;
#else
  return false;
#endif
}

}  // namespace

Result<std::unique_ptr<AsyncIo>> AsyncIo::create(const IoSettings& settings) {
  if (settings.block_size == 0 || settings.queue_depth < 1 || settings.parallelism < 1) {
    return Status::invalid_argument("async I/O: block_size, queue_depth and parallelism must be >= 1");
  }
  Backend b = settings.backend;
  if (b == Backend::kAuto)
    b = uring_works() ? Backend::kIoUring : (libaio_works() ? Backend::kLibaio : Backend::kPsync);
  if (b == Backend::kIoUring && !uring_works()) {
    return Status::unavailable(
        "io_uring is not available here (not compiled in, or io_uring_setup is refused)");
  }
  if (b == Backend::kLibaio && !libaio_works()) {
    return Status::unavailable("libaio is not available here (not compiled in, or io_setup is refused)");
  }
  auto e = std::make_unique<Engine>(b, settings);
  MW_RETURN_IF_ERROR(e->start());
  return std::unique_ptr<AsyncIo>(std::move(e));
}

}  // namespace memwall::io
