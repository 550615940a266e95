// Cross-check of the Hugging Face export against an independent implementation: initialises a small GPT
// (seeded), trains it a few steps on the King James Bible, exports it with export_hf into DIR and writes
// DIR/check.json with one held-out batch and memwall's loss on it. bench/export_check.py then loads the
// safetensors file into its own PyTorch GPT-2 and must reproduce the loss.
// Usage: memwall-export-check DIR [steps=50]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/adam.h"
#include "engine/model/export.h"
#include "engine/model/gpt.h"
#include "engine/train/dataset.h"

using namespace memwall;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: memwall-export-check DIR [steps=50]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  std::filesystem::create_directories(dir);
  model::GptConfig c;
  c.vocab = 256;
  c.max_seq = 64;
  c.layers = 2;
  c.heads = 4;
  c.channels = 64;
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
  const std::size_t n = model::gpt_num_params(c);
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  model::gpt_init(c, p.data(), 1);
  model::GptModel gpt(c, B, T);
  std::vector<int> tok(B * T), tgt(B * T);
  kernels::AdamHyper h;
  h.lr = 3e-3f;
  for (int s = 0; s < steps; ++s) {
    ds->train_batch(9, static_cast<std::uint64_t>(s), B, T, tok.data(), tgt.data());
    gpt.forward(p.data(), tok.data(), tgt.data());
    std::fill(g.begin(), g.end(), 0.0f);
    gpt.backward(p.data(), g.data());
    kernels::AdamArrays a;
    a.params = p.data();
    a.exp_avg = m.data();
    a.exp_avg_sq = v.data();
    a.grads = g.data();
    a.n = n;
    h.step = s + 1;
    kernels::adam_step(a, h, 1);
  }
  ds->val_batch(0, B, T, tok.data(), tgt.data());
  const float loss = gpt.forward(p.data(), tok.data(), tgt.data());
  const Status st = model::export_hf(c, p.data(), dir);
  if (!st.is_ok()) {
    std::fprintf(stderr, "memwall-export-check: %s\n", st.to_string().c_str());
    return 1;
  }
  std::ofstream out(dir + "/check.json");
  out.precision(9);
  out << "{\"B\": " << B << ", \"T\": " << T << ", \"loss\": " << loss << ", \"tokens\": [";
  for (std::size_t i = 0; i < tok.size(); ++i) out << (i ? "," : "") << tok[i];
  out << "], \"targets\": [";
  for (std::size_t i = 0; i < tgt.size(); ++i) out << (i ? "," : "") << tgt[i];
  out << "]}\n";
  std::printf("{\"dir\": \"%s\", \"steps\": %d, \"memwall_loss\": %.6f}\n", dir.c_str(), steps,
              static_cast<double>(loss));
  return 0;
}
