// Cross-check of the Hugging Face export against an independent implementation: trains a small GPT a few
// steps on the King James Bible (the trainer `memwall train` uses, one rank), exports it with export_hf into
// DIR and writes DIR/check.json with one held-out batch and memwall's loss on it. bench/export_check.py then
// loads the safetensors file into its own PyTorch GPT-2 and must reproduce the loss. Usage:
// memwall-export-check DIR [steps=50]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/comm/comm.h"
#include "engine/model/export.h"
#include "engine/model/gpt.h"
#include "engine/train/dataset.h"
#include "engine/train/zero3.h"

using namespace memwall;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: memwall-export-check DIR [steps=50]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  std::filesystem::create_directories(dir);
  const model::GptConfig c{.vocab = 256, .max_seq = 64, .layers = 2, .heads = 4, .channels = 64};
  const int B = 4, T = 64;
  auto path = train::kjv_corpus(dir + "/kjv.txt");
  if (!path.is_ok()) {
    std::fprintf(stderr, "memwall-export-check: %s\n", path.status().to_string().c_str());
    return 1;
  }
  auto ds = train::TextDataset::from_file(*path, 0.05, T);
  if (!ds.is_ok()) {
    std::fprintf(stderr, "memwall-export-check: %s\n", ds.status().to_string().c_str());
    return 1;
  }
  train::Zero3Options o;
  o.micro_batch = B;
  o.seq = T;
  o.seed = 1;
  o.adam.lr = 3e-3f;
  auto local = comm::make_local_comm();
  auto trainer = train::Zero3Trainer::create(c, o, *local);
  std::vector<int> tok(B * T), tgt(B * T);
  std::vector<float> params;
  Result<float> loss = Status::internal("no evaluation");
  for (int s = 0; s < steps && trainer.is_ok(); ++s) {
    ds->train_batch(9, static_cast<std::uint64_t>(s), B, T, tok.data(), tgt.data());
    if (auto l = trainer->step(tok.data(), tgt.data()); !l.is_ok()) loss = l.status();
  }
  if (trainer.is_ok()) {
    ds->val_batch(0, B, T, tok.data(), tgt.data());
    loss = trainer->evaluate(tok.data(), tgt.data());
  }
  Status st = !trainer.is_ok() ? trainer.status()
              : !loss.is_ok()  ? loss.status()
                               : trainer->gather_params(params);
  if (st.is_ok()) st = model::export_hf(c, params.data(), dir);
  // The loss of exactly the exported fp32 weights (the trainer computes on their bf16 copies, which differ
  // from the export by bf16 rounding): what an independent implementation must reproduce.
  if (st.is_ok()) {
    model::GptModel plain(c, B, T);
    loss = plain.forward(params.data(), tok.data(), tgt.data());
  }
  if (!st.is_ok()) {
    std::fprintf(stderr, "memwall-export-check: %s\n", st.to_string().c_str());
    return 1;
  }
  std::ofstream out(dir + "/check.json");
  out.precision(9);
  out << "{\"B\": " << B << ", \"T\": " << T << ", \"loss\": " << *loss << ", \"tokens\": [";
  for (std::size_t i = 0; i < tok.size(); ++i) out << (i ? "," : "") << tok[i];
  out << "], \"targets\": [";
  for (std::size_t i = 0; i < tgt.size(); ++i) out << (i ? "," : "") << tgt[i];
  out << "]}\n";
  std::printf("{\"dir\": \"%s\", \"steps\": %d, \"memwall_loss\": %.6f}\n", dir.c_str(), steps,
              static_cast<double>(*loss));
  return 0;
}
