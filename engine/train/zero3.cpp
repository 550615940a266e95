// ZeRO-3: partition, gather per op, reduce-scatter per op, sharded Adam.
#include "engine/train/zero3.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/io/atomic_file.h"
#include "engine/io/crc32c.h"

namespace memwall::train {

Zero3Trainer::Zero3Trainer(const model::GptConfig& c, const Zero3Options& o, comm::Communicator& comm)
    : c_(c), o_(o), comm_(&comm) {}

Result<Zero3Trainer> Zero3Trainer::create(const model::GptConfig& c, const Zero3Options& o,
                                          comm::Communicator& comm) {
  MW_RETURN_IF_ERROR(model::validate(c, o.micro_batch, o.seq));
  if (o.tiling < 1 || c.channels % o.tiling != 0) {
    return Status::invalid_argument("tiling " + std::to_string(o.tiling) + " must divide channels (" +
                                    std::to_string(c.channels) + ")");
  }
  Zero3Trainer t(c, o, comm);
  t.model_ = std::make_unique<model::GptModel>(c, o.micro_batch, o.seq, o.tiling);
  const auto R = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  std::size_t local = 0;
  for (const auto& s : t.model_->slices()) {
    const std::size_t shard = (s.numel + R - 1) / R;
    t.parts_.push_back({s.offset, s.numel, shard, local});
    local += shard;
  }
  t.shard_master_.assign(local, 0.0f);
  t.shard_m_.assign(local, 0.0f);
  t.shard_v_.assign(local, 0.0f);
  t.shard_grad_.assign(local, 0.0f);
  // Partitioned initialisation: this rank's elements only (padding stays zero).
  for (const auto& p : t.parts_) {
    const std::size_t begin = std::min(p.numel, r * p.shard), end = std::min(p.numel, (r + 1) * p.shard);
    if (begin < end) {
      model::gpt_init_range(c, t.shard_master_.data() + p.local, p.model_offset + begin, p.model_offset + end,
                            o.seed);
    }
  }
  return t;
}

void Zero3Trainer::emit(std::string name, const char* category, Phase phase, Resource resource, double start,
                        double bytes, double flops) {
  if (!sink_) return;
  TrainEvent e;
  e.name = std::move(name);
  e.category = category;
  e.phase = phase;
  e.resource = resource;
  e.start_s = start;
  e.end_s = now();
  e.bytes = bytes;
  e.flops = flops;
  sink_(e);
}

Status Zero3Trainer::gather(int param, std::vector<float>& into, const std::string& tag, Phase phase) {
  const Part& p = parts_[static_cast<std::size_t>(param)];
  into.resize(p.shard * static_cast<std::size_t>(comm_->size()));
  const double start = sink_ ? now() : 0;
  MW_RETURN_IF_ERROR(
      comm_->allgather(shard_master_.data() + p.local, into.data(), p.shard * sizeof(float), tag));
  if (sink_) {
    emit(model_->graph().params[static_cast<std::size_t>(param)].name + " allgather", "collective", phase,
         Resource::kNetwork, start, static_cast<double>(into.size() * sizeof(float)), 0);
  }
  return Status::ok();
}

Status Zero3Trainer::forward(const int* tokens, const int* targets, const std::string& at) {
  const ModelGraph& g = model_->graph();
  std::vector<const float*> pp;
  model_->set_batch(tokens, targets);
  for (int op = 0; op < static_cast<int>(g.ops.size()); ++op) {
    const auto& params = g.ops[static_cast<std::size_t>(op)].params;
    if (work_.size() < params.size()) work_.resize(params.size());
    pp.clear();
    for (std::size_t k = 0; k < params.size(); ++k) {
      MW_RETURN_IF_ERROR(gather(params[k], work_[k],
                                at + g.ops[static_cast<std::size_t>(op)].name + " gather", Phase::kForward));
      pp.push_back(work_[k].data());
    }
    const double start = sink_ ? now() : 0;
    model_->forward_op(op, pp.data());
    if (sink_) {
      const auto& gop = g.ops[static_cast<std::size_t>(op)];
      emit(gop.name, "compute", Phase::kForward, Resource::kCompute, start, 0, gop.fwd_flops);
    }
  }
  return Status::ok();
}

Result<float> Zero3Trainer::evaluate(const int* tokens, const int* targets) {
  MW_RETURN_IF_ERROR(forward(tokens, targets, "eval "));
  return model_->loss();
}

Result<float> Zero3Trainer::step(const int* tokens, const int* targets) {
  const ModelGraph& g = model_->graph();
  const int ops = static_cast<int>(g.ops.size());
  const std::string at = "step " + std::to_string(step_ + 1) + " ";
  std::vector<const float*> pp;
  std::vector<float*> gp;
  MW_RETURN_IF_ERROR(forward(tokens, targets, at));
  std::fill(shard_grad_.begin(), shard_grad_.end(), 0.0f);
  std::vector<float> reduced;
  for (int op = ops - 1; op >= 0; --op) {
    const auto& gop = g.ops[static_cast<std::size_t>(op)];
    if (work_grad_.size() < gop.params.size()) work_grad_.resize(gop.params.size());
    pp.clear();
    gp.clear();
    for (std::size_t k = 0; k < gop.params.size(); ++k) {
      MW_RETURN_IF_ERROR(
          gather(gop.params[k], work_[k], at + gop.name + " backward gather", Phase::kBackward));
      work_grad_[k].assign(work_[k].size(), 0.0f);
      pp.push_back(work_[k].data());
      gp.push_back(work_grad_[k].data());
    }
    const double start = sink_ ? now() : 0;
    model_->backward_op(op, pp.data(), gp.data());
    emit(gop.name, "compute", Phase::kBackward, Resource::kCompute, start, 0, gop.bwd_flops);
    for (std::size_t k = 0; k < gop.params.size(); ++k) {
      const Part& p = parts_[static_cast<std::size_t>(gop.params[k])];
      reduced.resize(p.shard);
      MW_RETURN_IF_ERROR(comm_->reduce_scatter_sum(work_grad_[k].data(), reduced.data(), p.shard,
                                                   at + gop.name + " reduce-scatter"));
      float* dst = shard_grad_.data() + p.local;
      for (std::size_t i = 0; i < p.shard; ++i) dst[i] += reduced[i];
    }
  }
  // Data parallel: the gradient of the mean loss over all ranks' batches.
  const float inv = 1.0f / static_cast<float>(comm_->size());
  for (auto& x : shard_grad_) x *= inv;
  ++step_;
  kernels::AdamHyper h = o_.adam;
  h.step = step_;
  const kernels::AdamArrays a = kernels::fp32_arrays(shard_master_.data(), shard_m_.data(), shard_v_.data(),
                                                     shard_grad_.data(), shard_master_.size());
  const double adam_start = sink_ ? now() : 0;
  kernels::adam_step(a, h, o_.threads);
  emit("adam", "optimizer_step", Phase::kOptimizer, Resource::kCpuOptimizer, adam_start,
       28.0 * static_cast<double>(a.n), 0);
  // Loss averaged over ranks.
  const float mine = model_->loss();
  std::vector<float> all(static_cast<std::size_t>(comm_->size()));
  MW_RETURN_IF_ERROR(comm_->allgather(&mine, all.data(), sizeof(float), at + "loss"));
  float sum = 0.0f;
  for (float l : all) sum += l;
  return sum * inv;
}

Status Zero3Trainer::gather_params(std::vector<float>& out) {
  out.assign(model_elements(), 0.0f);
  std::vector<float> buf;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    MW_RETURN_IF_ERROR(gather(static_cast<int>(i), buf, "gather_params", Phase::kSetup));
    std::memcpy(out.data() + parts_[i].model_offset, buf.data(), parts_[i].numel * sizeof(float));
  }
  return Status::ok();
}

namespace {
constexpr char kMagic[8] = {'M', 'W', 'Z', '3', 'C', 'K', 'P', '1'};

std::string step_dir_name(long step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08ld", step);
  return buf;
}

std::string rank_file(const std::string& step_dir, int rank, int ranks) {
  return step_dir + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(ranks) + ".bin";
}

struct CheckpointHeader {
  char magic[8];
  std::int64_t step;
  std::uint64_t elements;  // per array (master, m, v)
  std::uint32_t crc;       // CRC32C of the three arrays
  std::uint32_t reserved;
};
}  // namespace

Status Zero3Trainer::save(const std::string& dir) {
  const std::string step_dir = dir + "/" + step_dir_name(step_);
  std::error_code ec;
  std::filesystem::create_directories(step_dir, ec);
  if (ec) return Status::io_error(step_dir + ": " + ec.message());
  CheckpointHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.step = step_;
  h.elements = shard_master_.size();
  const std::size_t bytes = shard_master_.size() * sizeof(float);
  std::uint32_t crc = io::crc32c(shard_master_.data(), bytes);
  crc = io::crc32c_extend(crc, shard_m_.data(), bytes);
  h.crc = io::crc32c_extend(crc, shard_v_.data(), bytes);
  auto view = [](const void* p, std::size_t n) { return std::string_view(static_cast<const char*>(p), n); };
  MW_RETURN_IF_ERROR(io::write_file_atomic(rank_file(step_dir, comm_->rank(), comm_->size()),
                                           {view(&h, sizeof h), view(shard_master_.data(), bytes),
                                            view(shard_m_.data(), bytes), view(shard_v_.data(), bytes)}));
  MW_RETURN_IF_ERROR(io::fsync_path(step_dir, true));
  MW_RETURN_IF_ERROR(comm_->barrier("checkpoint step " + std::to_string(step_)));
  if (comm_->rank() == 0) {
    const nlohmann::json latest = {{"format", "memwall-zero3-checkpoint"},
                                   {"version", 1},
                                   {"step", step_},
                                   {"dir", step_dir_name(step_)},
                                   {"ranks", comm_->size()},
                                   {"layers", c_.layers},
                                   {"channels", c_.channels},
                                   {"heads", c_.heads},
                                   {"vocab", c_.vocab},
                                   {"max_seq", c_.max_seq},
                                   {"tiling", o_.tiling},
                                   {"params", model_elements()}};
    const std::string text = latest.dump(2) + "\n";
    MW_RETURN_IF_ERROR(io::write_file_atomic(dir + "/latest.json", {text}));
    // Older checkpoints are no longer named by latest.json.
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step-", 0) == 0 && name != step_dir_name(step_)) {
        std::filesystem::remove_all(e.path(), ec);
      }
    }
  }
  return comm_->barrier("checkpoint step " + std::to_string(step_) + " published");
}

namespace {
Result<nlohmann::json> read_latest(const std::string& dir) {
  const std::string latest_path = dir + "/latest.json";
  std::ifstream in(latest_path);
  if (!in) return Status::not_found(latest_path + ": no checkpoint here");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    return Status::invalid_argument(latest_path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "memwall-zero3-checkpoint") {
    return Status::invalid_argument(latest_path + ": not a memwall checkpoint");
  }
  return j;
}

// Reads one rank file's header and arrays; `elements` must match. Checks the CRC.
Status read_shard(const std::string& file, std::size_t elements, std::vector<float>& master,
                  std::vector<float>& m, std::vector<float>& v, long& step) {
  std::ifstream f(file, std::ios::binary);
  if (!f) return Status::not_found(file + ": missing rank shard of the checkpoint");
  CheckpointHeader h{};
  f.read(reinterpret_cast<char*>(&h), sizeof h);
  if (!f || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.elements != elements) {
    return Status::invalid_argument(file + ": not a shard of this model (bad header or size)");
  }
  const std::size_t bytes = elements * sizeof(float);
  master.resize(elements);
  m.resize(elements);
  v.resize(elements);
  f.read(reinterpret_cast<char*>(master.data()), static_cast<std::streamsize>(bytes));
  f.read(reinterpret_cast<char*>(m.data()), static_cast<std::streamsize>(bytes));
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
  if (!f) return Status::io_error(file + ": truncated");
  std::uint32_t crc = io::crc32c(master.data(), bytes);
  crc = io::crc32c_extend(crc, m.data(), bytes);
  crc = io::crc32c_extend(crc, v.data(), bytes);
  if (crc != h.crc) return Status::io_error(file + ": checksum mismatch (corrupt checkpoint)");
  step = h.step;
  return Status::ok();
}
}  // namespace

Result<long> Zero3Trainer::load(const std::string& dir) {
  const std::string latest_path = dir + "/latest.json";
  auto latest = read_latest(dir);
  if (!latest.is_ok()) return latest.status();
  const nlohmann::json& j = *latest;
  const std::pair<const char*, long> expect[] = {
      {"ranks", comm_->size()},  {"layers", c_.layers},
      {"channels", c_.channels}, {"heads", c_.heads},
      {"vocab", c_.vocab},       {"max_seq", c_.max_seq},
      {"tiling", o_.tiling},     {"params", static_cast<long>(model_elements())}};
  for (const auto& [key, want] : expect) {
    const long got = j.value(key, -1L);
    if (got != want) {
      return Status::invalid_argument(latest_path + ": checkpoint has " + key + " = " + std::to_string(got) +
                                      ", this run has " + std::to_string(want));
    }
  }
  const std::string file = rank_file(dir + "/" + j.value("dir", std::string()), comm_->rank(), comm_->size());
  std::vector<float> master, m, v;
  long step = 0;
  MW_RETURN_IF_ERROR(read_shard(file, shard_master_.size(), master, m, v, step));
  shard_master_ = std::move(master);
  shard_m_ = std::move(m);
  shard_v_ = std::move(v);
  step_ = step;
  return step_;
}

Result<std::vector<float>> read_checkpoint_params(const std::string& dir, model::GptConfig& c) {
  auto latest = read_latest(dir);
  if (!latest.is_ok()) return latest.status();
  const nlohmann::json& j = *latest;
  c.layers = j.value("layers", 0);
  c.channels = j.value("channels", 0);
  c.heads = j.value("heads", 0);
  c.vocab = j.value("vocab", 0);
  c.max_seq = j.value("max_seq", 0);
  const int ranks = j.value("ranks", 0), tiling = j.value("tiling", 1);
  if (Status s = model::validate(c, 1, 1);
      !s.is_ok() || ranks < 1 || tiling < 1 || c.channels % tiling != 0) {
    return Status::invalid_argument(dir + "/latest.json: inconsistent model fields");
  }
  // The partition every rank used: graph parameters in order, each padded to a multiple of the rank count.
  const model::GptModel shape(c, 1, 1, tiling);
  const auto R = static_cast<std::size_t>(ranks);
  std::size_t per_rank = 0;
  for (const auto& s : shape.slices()) per_rank += (s.numel + R - 1) / R;
  std::vector<float> full(model::gpt_num_params(c), 0.0f), master, m, v;
  for (int r = 0; r < ranks; ++r) {
    long step = 0;
    MW_RETURN_IF_ERROR(read_shard(rank_file(dir + "/" + j.value("dir", std::string()), r, ranks), per_rank,
                                  master, m, v, step));
    std::size_t local = 0;
    for (const auto& s : shape.slices()) {
      const std::size_t shard = (s.numel + R - 1) / R,
                        begin = std::min(s.numel, static_cast<std::size_t>(r) * shard),
                        end = std::min(s.numel, (static_cast<std::size_t>(r) + 1) * shard);
      std::copy(master.begin() + static_cast<std::ptrdiff_t>(local),
                master.begin() + static_cast<std::ptrdiff_t>(local + (end - begin)),
                full.begin() + static_cast<std::ptrdiff_t>(s.offset + begin));
      local += shard;
    }
  }
  return full;
}

}  // namespace memwall::train
