// Run under `mpirun -n 2` by ctest: ZeRO-3 across real MPI ranks (each rank one sequence) against the same
// training on one rank with both sequences in its micro-batch. Losses must agree to 1e-6 relative for 5
// steps (the issue asks for 1e-6; 8e-8 measured), and each rank must hold about half of the model. The
// same 2-rank training with parameters and optimizer offloaded to CPU, and to NVMe, must give bitwise the
// losses of the in-device one; 2 micro-batches per rank with gradient accumulation must match one rank with
// all of them in one micro-batch to 1e-5 (2e-7 measured); with gradient clipping the global norm spans the
// ranks (1e-6 against one rank). Checkpoints resume with another rank count, and a damaged one is refused on
// every rank. Initial weights read shard by shard from a safetensors export train as the seed that made them.
// ZeRO stages 0, 1 and 2 train as stage 3 does, and their checkpoints resume on it, as does stage 3 with
// persistent small parameters; Twin-Flow (ratio 0.5) trains as the optimizer on the CPU does (1e-6); the
// delayed parameter update on 2 ranks steps like one rank. Exits non-zero on failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "engine/model/export.h"
#include "engine/model/import.h"
#include "engine/train/checkpoint.h"
#include "engine/train/zero3.h"

using namespace memwall;

int main() {
  auto made = comm::make_mpi_comm(std::chrono::seconds(30));
  if (!made.is_ok()) {
    std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
    return 1;
  }
  comm::Communicator& world = **made;
  const int R = world.size(), r = world.rank();
  const model::GptConfig c{.vocab = 17, .max_seq = 8, .layers = 2, .heads = 2, .channels = 16};
  train::Zero3Options o;
  o.micro_batch = 1;
  o.seq = 8;
  o.seed = 5;
  o.adam.lr = 1e-2f;
  auto dist = train::Zero3Trainer::create(c, o, world);
  train::Zero3Options o_cpu = o, o_nvme = o;
  o_cpu.run.zero.offload_param.device = o_cpu.run.zero.offload_optimizer.device = OffloadDevice::kCpu;
  o_nvme.run.zero.offload_param.device = o_nvme.run.zero.offload_optimizer.device = OffloadDevice::kNvme;
  o_nvme.run.zero.offload_param.max_in_cpu = 0;
  o_nvme.run.zero.sub_group_size = 1000;
  o_nvme.run.zero.offload_param.buffer_size = 1e4;
  o_nvme.swap_dir = "zero3-mpi-swap";
  o_nvme.hw = train::emulated_hardware(64 << 20, 1 << 30, 1 << 30);
  std::filesystem::create_directories(o_nvme.swap_dir);
  auto dist_cpu = train::Zero3Trainer::create(c, o_cpu, world);
  auto dist_nvme = train::Zero3Trainer::create(c, o_nvme, world);
  if (!dist_cpu.is_ok() || !dist_nvme.is_ok()) {
    std::fprintf(stderr, "rank %d: create with offload failed: %s\n", r,
                 (dist_cpu.is_ok() ? dist_nvme.status() : dist_cpu.status()).to_string().c_str());
    return 1;
  }
  auto local = comm::make_local_comm();
  train::Zero3Options o_all = o;
  o_all.micro_batch = R;
  auto ref = train::Zero3Trainer::create(c, o_all, *local);
  if (!dist.is_ok() || !ref.is_ok()) {
    std::fprintf(stderr, "rank %d: create failed\n", r);
    return 1;
  }
  int failures = 0;
  // One step's loss over the R ranks against one rank's with all their sequences: printed, and a failure
  // beyond `tol` relative.
  const auto against_one_rank = [&](const char* what, int s, float got, float want, double tol) {
    const double rel = std::fabs(static_cast<double>(got - want)) / static_cast<double>(want);
    std::printf("rank %d step %d: %s, %d ranks %.7f, one rank %.7f, rel diff %.2e\n", r, s, what, R,
                static_cast<double>(got), static_cast<double>(want), rel);
    if (rel > tol) ++failures;
  };
  const double share =
      static_cast<double>(dist->shard_elements()) / static_cast<double>(dist->model_elements());
  if (share > 1.0 / R + 0.05) {
    std::fprintf(stderr, "rank %d holds %.3f of the model\n", r, share);
    ++failures;
  }
  std::vector<int> tok_all(static_cast<std::size_t>(R * 8)), tgt_all(tok_all.size());
  const auto fill_batch = [&](int s) {  // step s's sequences of every rank (rank r's: the r-th 8 tokens)
    for (int i = 0; i < R * 8; ++i) {
      tok_all[static_cast<std::size_t>(i)] = (7 * i + 3 * s + 1) % 17;
      tgt_all[static_cast<std::size_t>(i)] = (5 * i + s + 2) % 17;
    }
  };
  for (int s = 0; s < 5; ++s) {
    fill_batch(s);
    auto got = dist->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
    auto want = ref->step(tok_all.data(), tgt_all.data());
    if (!got.is_ok() || !want.is_ok()) {
      std::fprintf(stderr, "rank %d: step %d failed: %s\n", r, s,
                   (got.is_ok() ? want.status() : got.status()).to_string().c_str());
      return 1;
    }
    auto got_cpu = dist_cpu->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
    auto got_nvme = dist_nvme->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
    if (!got_cpu.is_ok() || !got_nvme.is_ok()) {
      std::fprintf(stderr, "rank %d: offloaded step %d failed: %s\n", r, s,
                   (got_cpu.is_ok() ? got_nvme.status() : got_cpu.status()).to_string().c_str());
      return 1;
    }
    if (*got_cpu != *got || *got_nvme != *got) {
      std::fprintf(stderr, "rank %d step %d: offloaded losses %.9g (cpu) %.9g (nvme) differ from %.9g\n", r,
                   s, static_cast<double>(*got_cpu), static_cast<double>(*got_nvme),
                   static_cast<double>(*got));
      ++failures;
    }
    against_one_rank("ZeRO-3", s, *got, *want, 1e-6);
  }
  // Gradient accumulation across ranks: 2 micro-batches of one sequence on each rank train like one rank
  // with all 2R sequences in one micro-batch (the gradients summed in another order: 1e-5 relative).
  {
    train::Zero3Options o_ref4 = o, o_gas = o;
    o_ref4.micro_batch = 2 * R;
    o_gas.run.gradient_accumulation_steps = {false, 2};
    auto gas = train::Zero3Trainer::create(c, o_gas, world);
    auto ref4 = train::Zero3Trainer::create(c, o_ref4, *local);
    if (!gas.is_ok() || !ref4.is_ok()) {
      std::fprintf(stderr, "rank %d: create for gradient accumulation failed\n", r);
      return 1;
    }
    std::vector<int> tok4(static_cast<std::size_t>(2 * R * 8)), tgt4(tok4.size()), mine(16), mine_t(16);
    for (int s = 0; s < 4; ++s) {
      for (std::size_t i = 0; i < tok4.size(); ++i) {
        tok4[i] = static_cast<int>((11 * i + 3 * static_cast<std::size_t>(s) + 1) % 17);
        tgt4[i] = static_cast<int>((5 * i + static_cast<std::size_t>(s) + 4) % 17);
      }
      for (int k = 0; k < 2; ++k) {  // micro-batch k of rank r: sequence k * R + r
        for (int i = 0; i < 8; ++i) {
          mine[static_cast<std::size_t>(k * 8 + i)] = tok4[static_cast<std::size_t>((k * R + r) * 8 + i)];
          mine_t[static_cast<std::size_t>(k * 8 + i)] = tgt4[static_cast<std::size_t>((k * R + r) * 8 + i)];
        }
      }
      auto got = gas->step(mine.data(), mine_t.data(), 2);
      auto want = ref4->step(tok4.data(), tgt4.data());
      if (!got.is_ok() || !want.is_ok()) {
        std::fprintf(stderr, "rank %d: accumulating step %d failed: %s\n", r, s,
                     (got.is_ok() ? want.status() : got.status()).to_string().c_str());
        return 1;
      }
      against_one_rank("2 micro-batches each", s, *got, *want, 1e-5);
    }
  }
  // Gradient clipping across ranks: the global norm is every rank's shard together, so 2 ranks clip like one
  // rank with both sequences (1e-6 relative on losses and norms), the NVMe placement (gradients on NVMe,
  // summed as they are written) bitwise like the in-device one.
  {
    train::Zero3Options o_clip = o, o_clip_nvme = o_nvme, o_clip_all = o_all;
    o_clip.run.gradient_clipping = o_clip_nvme.run.gradient_clipping = o_clip_all.run.gradient_clipping =
        0.05;
    o_clip_nvme.run.memwall.optimizer_gradients = OptimizerGradients::kNvme;
    auto clip = train::Zero3Trainer::create(c, o_clip, world);
    auto clip_nvme = train::Zero3Trainer::create(c, o_clip_nvme, world);
    auto clip_ref = train::Zero3Trainer::create(c, o_clip_all, *local);
    if (!clip.is_ok() || !clip_nvme.is_ok() || !clip_ref.is_ok()) {
      std::fprintf(stderr, "rank %d: create with gradient clipping failed\n", r);
      return 1;
    }
    for (int s = 0; s < 4; ++s) {
      fill_batch(s);
      auto got = clip->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
      auto got_nvme = clip_nvme->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
      auto want = clip_ref->step(tok_all.data(), tgt_all.data());
      if (!got.is_ok() || !got_nvme.is_ok() || !want.is_ok()) {
        std::fprintf(stderr, "rank %d: clipped step %d failed: %s\n", r, s,
                     (!got.is_ok()        ? got.status()
                      : !got_nvme.is_ok() ? got_nvme.status()
                                          : want.status())
                         .to_string()
                         .c_str());
        return 1;
      }
      const double n = clip->last_grad_norm(), n_ref = clip_ref->last_grad_norm();
      const double rel = std::fabs(static_cast<double>(*got - *want)) / static_cast<double>(*want);
      std::printf("rank %d step %d: clipped, %d ranks %.7f (norm %.6g), one rank %.7f (norm %.6g)\n", r, s, R,
                  static_cast<double>(*got), n, static_cast<double>(*want), n_ref);
      // The norm: each rank's partition's sum of squares then their sum, against one sum over the whole
      // (another order of fp32 additions: within 1e-5 relative; a partition missed or counted twice moves it
      // by far more).
      if (rel > 1e-6 || std::fabs(n - n_ref) > 1e-5 * n_ref || !(n_ref > 0.05)) ++failures;
      if (*got_nvme != *got || clip_nvme->last_grad_norm() != n) {
        std::fprintf(stderr, "rank %d step %d: clipped NVMe loss %.9g norm %.9g differ from %.9g %.9g\n", r,
                     s, static_cast<double>(*got_nvme), clip_nvme->last_grad_norm(),
                     static_cast<double>(*got), n);
        ++failures;
      }
    }
  }
  // ZeRO stages 1 and 2 (every rank keeps the whole bf16 parameters, all-gathered after each optimizer
  // sub-group's step; stage 1 all-reduces whole gradients, stage 2 reduce-scatters them), with the optimizer
  // on the device or on the CPU, 2 micro-batches per step and gradient clipping: stage 3's losses, norms and
  // parameters, bitwise for stage 2; stage 1 sums a rank's own contributions before reducing them (the tied
  // embedding's two uses, and with the optimizer on the device the micro-batches), hence 1e-6 relative.
  // Stage 0 (plain data parallelism: every rank steps all of the states, the optimizer on the device) as
  // stage 1, and its gradient norm sums the whole gradients on each rank, so 1e-6 too. A stage-2 and a
  // stage-0 checkpoint (one file, every rank's states alike) then resume on stage 3 with the next loss.
  {
    train::Zero3Options base = o;
    base.run.gradient_accumulation_steps = {false, 2};
    base.run.gradient_clipping = 0.05;
    struct Trained {
      std::vector<float> losses, params;
      std::vector<double> norms;
    };
    // The largest relative difference of the losses, gradient norms and parameters (relative to 1 at least).
    const auto worst_difference = [](const Trained& got, const Trained& want) {
      double worst = 0;
      for (std::size_t s = 0; s < want.losses.size(); ++s) {
        worst = std::max(worst, std::fabs(static_cast<double>(got.losses[s] - want.losses[s])) /
                                    static_cast<double>(want.losses[s]));
        worst = std::max(worst, std::fabs(got.norms[s] - want.norms[s]) / want.norms[s]);
      }
      for (std::size_t i = 0; i < want.params.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(got.params[i] - want.params[i])) /
                                    std::max(1.0, std::fabs(static_cast<double>(want.params[i]))));
      }
      return worst;
    };
    std::vector<int> tok4(static_cast<std::size_t>(2 * R * 8)), tgt4(tok4.size()), mine(16), mine_t(16);
    const auto batch = [&](int s) {
      for (std::size_t i = 0; i < tok4.size(); ++i) {
        tok4[i] = static_cast<int>((13 * i + 5 * static_cast<std::size_t>(s) + 2) % 17);
        tgt4[i] = static_cast<int>((3 * i + static_cast<std::size_t>(s) + 7) % 17);
      }
      for (int k = 0; k < 2; ++k) {
        for (int i = 0; i < 8; ++i) {
          mine[static_cast<std::size_t>(k * 8 + i)] = tok4[static_cast<std::size_t>((k * R + r) * 8 + i)];
          mine_t[static_cast<std::size_t>(k * 8 + i)] = tgt4[static_cast<std::size_t>((k * R + r) * 8 + i)];
        }
      }
    };
    const auto run_steps = [&](train::Zero3Trainer& t, Trained& out) -> Status {
      for (int s = 0; s < 4; ++s) {
        batch(s);
        auto l = t.step(mine.data(), mine_t.data(), 2);
        if (!l.is_ok()) return l.status();
        out.losses.push_back(*l);
        out.norms.push_back(t.last_grad_norm());
      }
      return t.gather_params(out.params);
    };
    for (const OffloadDevice opt : {OffloadDevice::kNone, OffloadDevice::kCpu}) {
      const char* where = opt == OffloadDevice::kCpu ? "CPU" : "the device";
      train::Zero3Options o3 = base;
      o3.run.zero.offload_optimizer.device = opt;
      auto z3 = train::Zero3Trainer::create(c, o3, world);
      Trained want;
      if (!z3.is_ok() || !run_steps(*z3, want).is_ok()) {
        std::fprintf(stderr, "rank %d: stage 3 with the optimizer on %s failed\n", r, where);
        return 1;
      }
      for (const int stage : {0, 1, 2}) {
        if (stage == 0 && opt != OffloadDevice::kNone)
          continue;  // (stage 0 keeps the optimizer on the device)
        train::Zero3Options os = o3;
        os.run.zero.stage = stage;
        auto zs = train::Zero3Trainer::create(c, os, world);
        Trained got;
        const Status trained = zs.is_ok() ? run_steps(*zs, got) : zs.status();
        if (!trained.is_ok()) {
          std::fprintf(stderr, "rank %d: stage %d with the optimizer on %s: %s\n", r, stage, where,
                       trained.to_string().c_str());
          return 1;
        }
        const double tol = stage == 2 ? 0.0 : 1e-6;
        const double worst = worst_difference(got, want);
        const bool clipped = want.norms[0] > 0.05;
        std::printf(
            "rank %d: stage %d, optimizer on %s: losses %.7f .. %.7f, worst difference from stage 3 "
            "%.2e (allowed %.0e)%s\n",
            r, stage, where, static_cast<double>(got.losses.front()), static_cast<double>(got.losses.back()),
            worst, tol, clipped ? "" : ", NOT CLIPPED");
        if (worst > tol || !clipped) ++failures;
        if (stage == 1 || (stage == 2 && opt != OffloadDevice::kCpu)) continue;
        // ZeRO-Offload's and plain data parallelism's checkpoints, resumed by stage 3: the step stage 2 (0)
        // takes next. Stage 0's is one partition (every rank holds the same states): one rank's file.
        const std::string ckpt = "zero3-mpi-stage" + std::to_string(stage) + "-ckpt";
        auto resumed = train::Zero3Trainer::create(c, o3, world);
        const bool saved = zs->save(ckpt).is_ok();
        bool ok = saved && resumed.is_ok() && resumed->load(ckpt).is_ok();
        if (stage == 0) {
          auto latest = train::ckpt::read_latest(ckpt);
          ok = ok && latest.is_ok() && latest->value("ranks", -1L) == 1 &&
               latest->value("data_parallel", -1L) == R;
        }
        batch(4);
        const auto a = ok ? zs->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
        const auto b = ok ? resumed->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
        ok = ok && a.is_ok() && b.is_ok() && *a == *b;
        std::printf("rank %d: a stage-%d checkpoint resumed on stage 3: %s\n", r, stage,
                    ok ? "ok" : "FAILED");
        if (!ok) ++failures;
        const std::string ckpt3 = "zero3-mpi-stage3-ckpt";
        if (stage == 0 && ok) {
          // And back, one step on: stage 3's two files resumed on stage 0 (each rank reads all of both), and
          // stage 0's own one file (read by both ranks).
          bool back = resumed->save(ckpt3).is_ok() && zs->save(ckpt).is_ok();
          auto from3 = train::Zero3Trainer::create(c, os, world);
          auto from0 = train::Zero3Trainer::create(c, os, world);
          back = back && from3.is_ok() && from0.is_ok() && from3->load(ckpt3).is_ok() &&
                 from0->load(ckpt).is_ok();
          batch(5);
          const auto x = back ? resumed->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
          const auto y = back ? from3->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
          const auto w = back ? from0->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
          back = back && x.is_ok() && y.is_ok() && w.is_ok() && *x == *y && *x == *w;
          std::printf("rank %d: stage 3's and stage 0's checkpoints resumed on stage 0: %s\n", r,
                      back ? "ok" : "FAILED");
          if (!back) ++failures;
        }
        if (!world.barrier("stage checkpoint").is_ok()) return 1;
        if (r == 0) {
          std::filesystem::remove_all(ckpt);
          std::filesystem::remove_all(ckpt3);
        }
      }
    }
    // Stage 3 with persistent small parameters (stage3_param_persistence_threshold 300: the embeddings,
    // norms, biases and the attention's output projection stay whole on every rank, the other matrices are
    // partitioned), with the optimizer on the device, on the CPU (the parameters too) and on NVMe (the
    // parameters too, several sub-groups), 2 micro-batches and clipping: every-parameter-partitioned stage
    // 3's losses, norms and parameters to 1e-6 relative (a persistent gradient is summed over the
    // micro-batches and the tied embedding's two uses on each rank before it is all-reduced, as stage 1's);
    // its checkpoint, resumed on a fresh trainer with persistence, gives the next loss bitwise.
    // ZeRO-Offload++'s Twin-Flow too (the optimizer on the CPU, ratio 0.5 of its sub-groups of 1000 there,
    // the others on the device): every parameter partitioned, it trains as the optimizer on the CPU does to
    // 1e-6 relative (the same Adam; the device's part adds the second micro-batch's gradients inside its
    // reduce-scatter, as the optimizer on the device does, not after it: other rounding).
    std::vector<std::string> dirs;  // swap directories, removed once their trainers are gone
    std::map<std::string, Trained> partitioned;
    for (const char* where : {"the device", "CPU", "NVMe", "Twin-Flow"}) {
      const std::string tag = where;
      const auto place = [&](train::Zero3Options& x) {
        auto& z = x.run.zero;
        if (tag == "CPU") z.offload_param.device = z.offload_optimizer.device = OffloadDevice::kCpu;
        if (tag == "Twin-Flow") {
          z.offload_optimizer.device = OffloadDevice::kCpu;
          z.offload_optimizer.ratio = 0.5;
          z.sub_group_size = 1000;
        }
        if (tag != "NVMe") return;
        z.offload_param.device = z.offload_optimizer.device = OffloadDevice::kNvme;
        z.offload_param.max_in_cpu = 0;
        z.sub_group_size = 1000;
        z.offload_param.buffer_size = 1e4;
        x.hw = o_nvme.hw;
        x.swap_dir = "zero3-mpi-persistent-swap" + std::to_string(dirs.size());
        dirs.push_back(x.swap_dir);
        std::filesystem::create_directories(x.swap_dir);
      };
      train::Zero3Options all = base, some = base;
      place(all);
      place(some);
      some.run.zero.param_persistence_threshold = {false, 300};
      auto za = train::Zero3Trainer::create(c, all, world);
      auto zp = train::Zero3Trainer::create(c, some, world);
      Trained want, got;
      Status trained = za.is_ok() ? run_steps(*za, want) : za.status();
      if (trained.is_ok()) trained = zp.is_ok() ? run_steps(*zp, got) : zp.status();
      if (!trained.is_ok()) {
        std::fprintf(stderr, "rank %d: persistent parameters, optimizer on %s: %s\n", r, where,
                     trained.to_string().c_str());
        return 1;
      }
      const double worst = worst_difference(got, want);
      std::printf(
          "rank %d: persistent small parameters, optimizer on %s: losses %.7f .. %.7f, worst difference "
          "from every parameter partitioned %.2e (allowed 1e-6)\n",
          r, where, static_cast<double>(got.losses.front()), static_cast<double>(got.losses.back()), worst);
      if (worst > 1e-6) ++failures;
      partitioned[tag] = want;
      const std::string ckpt = "zero3-mpi-persistent-ckpt";
      train::Zero3Options again = base;
      place(again);
      again.run.zero.param_persistence_threshold = some.run.zero.param_persistence_threshold;
      auto resumed = train::Zero3Trainer::create(c, again, world);
      bool ok = zp->save(ckpt).is_ok() && resumed.is_ok() && resumed->load(ckpt).is_ok();
      batch(4);
      const auto a = ok ? zp->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
      const auto b = ok ? resumed->step(mine.data(), mine_t.data(), 2) : Result<float>(0.0f);
      ok = ok && a.is_ok() && b.is_ok() && *a == *b;
      std::printf("rank %d: persistent parameters, optimizer on %s: checkpoint resumed: %s\n", r, where,
                  ok ? "ok" : "FAILED");
      if (!ok) ++failures;
      if (!world.barrier("persistent checkpoint").is_ok()) return 1;
      if (r == 0) std::filesystem::remove_all(ckpt);
    }
    const double twin = worst_difference(partitioned["Twin-Flow"], partitioned["CPU"]);
    std::printf(
        "rank %d: Twin-Flow (ratio 0.5): worst difference from the optimizer on CPU %.2e (allowed 1e-6)\n", r,
        twin);
    if (twin > 1e-6) ++failures;
    if (!world.barrier("persistent parameters").is_ok()) return 1;
    if (r == 0) {
      for (const std::string& d : dirs) std::filesystem::remove_all(d);
    }
  }
  // The delayed parameter update (stage 2, the optimizer on the CPU stepping on the previous step's
  // gradients): 2 ranks of one sequence step like one rank with both (1e-6 relative).
  {
    train::Zero3Options od = o, od_all = o_all;
    for (train::Zero3Options* x : {&od, &od_all}) {
      x->run.zero.stage = 2;
      x->run.zero.offload_optimizer.device = OffloadDevice::kCpu;
      x->run.memwall.delayed_parameter_update = true;
    }
    auto dpu = train::Zero3Trainer::create(c, od, world);
    auto dpu_ref = train::Zero3Trainer::create(c, od_all, *local);
    if (!dpu.is_ok() || !dpu_ref.is_ok()) {
      std::fprintf(stderr, "rank %d: create with the delayed update failed: %s\n", r,
                   (dpu.is_ok() ? dpu_ref.status() : dpu.status()).to_string().c_str());
      return 1;
    }
    for (int s = 0; s < 4; ++s) {
      fill_batch(s);
      auto got = dpu->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
      auto want = dpu_ref->step(tok_all.data(), tgt_all.data());
      if (!got.is_ok() || !want.is_ok()) {
        std::fprintf(stderr, "rank %d: delayed step %d failed: %s\n", r, s,
                     (got.is_ok() ? want.status() : got.status()).to_string().c_str());
        return 1;
      }
      against_one_rank("delayed update", s, *got, *want, 1e-6);
    }
  }
  // Ranks that plan differently (here rank 1 with smaller optimizer sub-groups, as a rank with less free
  // memory would get) are refused on every rank before any work, naming the difference.
  {
    train::Zero3Options skewed = o_nvme;
    if (r == 1) skewed.run.zero.sub_group_size = 300;
    auto refused = train::Zero3Trainer::create(c, skewed, world);
    const std::string m = refused.is_ok() ? "" : refused.status().message();
    std::printf("rank %d: differently planned ranks: %s\n", r, m.c_str());
    if (refused.is_ok() || m.find("rank 1 planned another schedule than rank 0") == std::string::npos)
      ++failures;
  }
  // A rank whose plan does not fit (here rank 1 with a CPU tier far too small for the optimizer states) fails
  // the setup on every rank at once with its reason, before any collective could wait for it.
  {
    train::Zero3Options starved = o_cpu;
    if (r == 1) starved.hw = train::emulated_hardware(64 << 20, 64 << 10, 1 << 30);
    const auto t0 = std::chrono::steady_clock::now();
    auto refused = train::Zero3Trainer::create(c, starved, world);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string m = refused.is_ok() ? "" : refused.status().message();
    const bool named = m.find("does not fit") != std::string::npos &&
                       (r == 1) == (m.find("rank 1 of 2: ") == std::string::npos);
    std::printf("rank %d: a plan that does not fit one rank (%.2f s): %s\n", r, waited, m.c_str());
    if (refused.is_ok() || !named) ++failures;  // without the agreement rank 0 would time out in a collective
  }
  // A 2-rank checkpoint, reassembled in one process, is the model the ranks hold.
  const std::string dir = "zero3-mpi-ckpt";
  if (!dist->save(dir).is_ok()) {
    std::fprintf(stderr, "rank %d: save failed\n", r);
    return 1;
  }
  std::vector<float> gathered;
  if (!dist->gather_params(gathered).is_ok()) return 1;
  if (r == 0) {
    model::GptConfig read_back;
    auto full = train::read_checkpoint_params(dir, read_back);
    if (!full.is_ok() || *full != gathered || read_back.layers != c.layers) {
      std::fprintf(stderr, "rank 0: reassembled checkpoint differs: %s\n",
                   full.is_ok() ? "values" : full.status().to_string().c_str());
      ++failures;
    }
  }
  // Resuming with another rank count partitions the states anew: the 2-rank checkpoint loaded by one rank,
  // and a 1-rank checkpoint loaded by both, hold the same weights, and their next steps agree.
  {
    const std::string one_dir = "zero3-mpi-ckpt-one-rank";
    auto solo = train::Zero3Trainer::create(c, o_all, *local);  // one rank, both sequences
    std::vector<float> solo_params;
    bool ok = solo.is_ok() && solo->load(dir).is_ok() && solo->gather_params(solo_params).is_ok() &&
              solo_params == gathered;
    if (r == 0 && ok) ok = solo->save(one_dir).is_ok();
    if (!world.barrier("one-rank checkpoint written").is_ok()) return 1;
    auto again = train::Zero3Trainer::create(c, o, world);
    std::vector<float> again_params;
    ok = ok && again.is_ok() && again->load(one_dir).is_ok() && again->gather_params(again_params).is_ok() &&
         again_params == gathered;
    // One more step: both ranks' sequences on the 2-rank trainer, all of them on the single rank.
    std::vector<int> tok(static_cast<std::size_t>(R * 8)), tgt(tok.size());
    for (std::size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int>((7 * i + 2) % 17);
      tgt[i] = static_cast<int>((3 * i + 5) % 17);
    }
    const auto a = ok ? again->step(tok.data() + r * 8, tgt.data() + r * 8) : Result<float>(0.0f);
    const auto b = ok ? solo->step(tok.data(), tgt.data()) : Result<float>(0.0f);
    ok = ok && a.is_ok() && b.is_ok() &&
         std::fabs(static_cast<double>(*a - *b)) <= 1e-5 * std::fabs(static_cast<double>(*b));
    std::printf("rank %d: checkpoints resumed with another rank count: %s\n", r, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
    if (!world.barrier("resumed").is_ok()) return 1;
    // A damaged file fails the load on every rank, naming the file, and leaves every trainer as it was:
    // rank 1's file of the 2-rank checkpoint (checked by rank 1 alone), and the one file of the 1-rank
    // checkpoint loaded by both ranks (checked by rank 0 alone: the ranks share the checking out).
    const auto damage = [&](const std::string& ckpt_dir, int file, int files) {
      if (r == 0) {
        auto latest = train::ckpt::read_latest(ckpt_dir);
        std::fstream f(
            train::ckpt::rank_file(ckpt_dir + "/" + latest->value("dir", std::string()), file, files),
            std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(4096 + 100);  // inside the master weights
        f.put('\x7f');
      }
      return world.barrier("damaged").is_ok();
    };
    const auto refused = [&](train::Zero3Trainer& t, const std::string& ckpt_dir, const std::string& file,
                             int checked_by) {
      std::vector<float> before, after;
      const auto loaded = t.gather_params(before).is_ok() ? t.load(ckpt_dir) : Result<long>(0L);
      const std::string msg = loaded.is_ok() ? "" : loaded.status().message();
      const bool named =
          msg.find(file) != std::string::npos && msg.find("checksum mismatch") != std::string::npos &&
          (r == checked_by) ==
              (msg.find("rank " + std::to_string(checked_by) + " of 2: ") == std::string::npos);
      const bool kept = t.gather_params(after).is_ok() && after == before;
      std::printf("rank %d: damaged %s refused on every rank (%s): %s\n", r, file.c_str(), msg.c_str(),
                  !loaded.is_ok() && named && kept ? "ok" : "FAILED");
      return !loaded.is_ok() && named && kept;
    };
    if (!damage(dir, 1, 2) || !damage(one_dir, 0, 1)) return 1;
    if (!refused(*dist, dir, "rank-1-of-2.bin", 1)) ++failures;
    if (!refused(*again, one_dir, "rank-0-of-1.bin", 0)) ++failures;
    if (!world.barrier("refused").is_ok()) return 1;
    if (r == 0) std::filesystem::remove_all(one_dir);
  }
  if (r == 0) std::filesystem::remove_all(dir);
  // Initial weights from a safetensors file (rank 0 exports seed 5's initialisation), each rank reading its
  // own shard: bitwise the steps of the trainer that made them from the seed.
  {
    const std::string wdir = "zero3-mpi-weights";
    Status exported = Status::ok();
    if (r == 0) {
      std::vector<float> p(model::gpt_num_params(c));
      model::gpt_init(c, p.data(), 5);
      std::filesystem::create_directories(wdir);
      exported = model::export_hf(c, p.data(), wdir);
    }
    if (!comm::agree(world, exported, "export").is_ok()) return 1;
    auto w = model::HfWeights::open(wdir, c);
    if (!w.is_ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, w.status().to_string().c_str());
      return 1;
    }
    train::Zero3Options o_file = o;
    o_file.seed = 1;
    o_file.init = [&w](std::size_t offset, std::size_t n, float* out) { return w->read(offset, n, out); };
    auto seeded = train::Zero3Trainer::create(c, o, world);
    auto from_file = train::Zero3Trainer::create(c, o_file, world);
    if (!seeded.is_ok() || !from_file.is_ok()) {
      std::fprintf(stderr, "rank %d: create for --init-from failed\n", r);
      return 1;
    }
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < R * 8; ++i) {
        tok_all[static_cast<std::size_t>(i)] = (3 * i + s + 2) % 17;
        tgt_all[static_cast<std::size_t>(i)] = (7 * i + 2 * s + 1) % 17;
      }
      auto a = seeded->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
      auto b = from_file->step(tok_all.data() + r * 8, tgt_all.data() + r * 8);
      const bool same = a.is_ok() && b.is_ok() && *a == *b;
      std::printf("rank %d: step %d from the file's weights %s\n", r, s,
                  same ? "as from the seed" : "DIFFERS");
      if (!same) ++failures;
    }
    if (!world.barrier("init-from").is_ok()) return 1;
    if (r == 0) std::filesystem::remove_all(wdir);
  }
  std::filesystem::remove_all(o_nvme.swap_dir + "/rank" + std::to_string(r));
  return failures == 0 ? 0 : 1;
}
