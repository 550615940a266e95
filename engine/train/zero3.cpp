// ZeRO-3: partition, gather per op, reduce-scatter per op, sharded Adam.
#include "engine/train/zero3.h"

#include <algorithm>
#include <cstring>

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

Status Zero3Trainer::gather(int param, std::vector<float>& into, const std::string& tag) {
  const Part& p = parts_[static_cast<std::size_t>(param)];
  into.resize(p.shard * static_cast<std::size_t>(comm_->size()));
  return comm_->allgather(shard_master_.data() + p.local, into.data(), p.shard * sizeof(float), tag);
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
      MW_RETURN_IF_ERROR(
          gather(params[k], work_[k], at + g.ops[static_cast<std::size_t>(op)].name + " gather"));
      pp.push_back(work_[k].data());
    }
    model_->forward_op(op, pp.data());
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
      MW_RETURN_IF_ERROR(gather(gop.params[k], work_[k], at + gop.name + " backward gather"));
      work_grad_[k].assign(work_[k].size(), 0.0f);
      pp.push_back(work_[k].data());
      gp.push_back(work_grad_[k].data());
    }
    model_->backward_op(op, pp.data(), gp.data());
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
  kernels::AdamArrays a;
  a.params = shard_master_.data();
  a.exp_avg = shard_m_.data();
  a.exp_avg_sq = shard_v_.data();
  a.grads = shard_grad_.data();
  a.n = shard_master_.size();
  kernels::adam_step(a, h, o_.threads);
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
    MW_RETURN_IF_ERROR(gather(static_cast<int>(i), buf, "gather_params"));
    std::memcpy(out.data() + parts_[i].model_offset, buf.data(), parts_[i].numel * sizeof(float));
  }
  return Status::ok();
}

}  // namespace memwall::train
