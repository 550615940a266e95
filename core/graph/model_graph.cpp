// Builds the per-rank operator list of a GPT-2 / Llama style decoder, with tiling and tensor parallelism.
#include "graph/model_graph.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "base/status.h"
#include "base/units.h"

namespace memwall {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kEmbedding:
      return "embedding";
    case OpKind::kLayerNorm:
      return "layernorm";
    case OpKind::kLinear:
      return "linear";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kGelu:
      return "gelu";
    case OpKind::kAllReduce:
      return "allreduce";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kLoss:
      return "loss";
    case OpKind::kConv:
      return "conv";
    case OpKind::kLinearAttention:
      return "linear_attention";
  }
  return "unknown";
}

double ModelGraph::total_param_elements() const {
  double n = 0;
  for (const auto& p : params) n += p.elements;
  return n;
}
double ModelGraph::total_fwd_flops() const {
  double f = 0;
  for (const auto& o : ops) f += o.fwd_flops;
  return f;
}
double ModelGraph::total_bwd_flops() const {
  double f = 0;
  for (const auto& o : ops) f += o.bwd_flops;
  return f;
}

namespace {

class Builder {
 public:
  Builder(ModelGraph& g, double tokens, double eb) : g_(g), tokens_(tokens), eb_(eb) {}

  // The tokens the next ops run on (an expert's share of them).
  void set_tokens(double tokens) { tokens_ = tokens; }
  // The expert parallelism of the parameters made next (1: not an expert's).
  void set_expert_parallel(int ep) { ep_ = ep; }

  int param(const std::string& name, double elements, int layer) {
    if (elements <= 0) return -1;
    GraphParam p;
    p.id = static_cast<int>(g_.params.size());
    p.name = name;
    p.elements = elements;
    p.layer = layer;
    p.expert_parallel = ep_;
    g_.params.push_back(p);
    return p.id;
  }

  GraphOp& op(const std::string& name, OpKind kind, int layer) {
    GraphOp o;
    o.id = static_cast<int>(g_.ops.size());
    o.name = name;
    o.kind = kind;
    o.layer = layer;
    g_.ops.push_back(o);
    return g_.ops.back();
  }

  // An elementwise op over `width` features per token (layernorm, GELU): ~8 FLOP per element forward.
  // Memory: forward reads its input and writes its output; backward reads the output's gradient and the
  // input and writes the input's gradient (the parameters' own traffic is added by norm ops).
  GraphOp& elementwise(const std::string& name, OpKind kind, int layer, double width) {
    GraphOp& o = op(name, kind, layer);
    o.fwd_flops = 8 * tokens_ * width;
    o.bwd_flops = 2 * o.fwd_flops;
    o.out_bytes = eb_ * tokens_ * width;
    o.fwd_mem_bytes = 2 * o.out_bytes;
    o.bwd_mem_bytes = 3 * o.out_bytes;
    return o;
  }

  // A linear in -> out (per rank), split into `tiles` ops over the output features. Weights (and biases)
  // named `prefix` + ".w"/".b" with the given per-matrix output sizes (several matrices fused, e.g. gate+up).
  void linear(const std::string& name, int layer, double in, const std::vector<double>& outs, bool bias,
              int tiles, bool save_output) {
    double out_total = 0;
    for (double o : outs) out_total += o;
    for (int t = 0; t < tiles; ++t) {
      const std::string suffix = tiles > 1 ? strprintf("[%d/%d]", t + 1, tiles) : "";
      GraphOp o;
      o.name = name + suffix;
      o.kind = OpKind::kLinear;
      o.layer = layer;
      o.tile = t;
      o.tiles = tiles;
      for (size_t m = 0; m < outs.size(); ++m) {
        const std::string mat = outs.size() > 1 ? strprintf(".w%zu", m) : ".w";
        o.params.push_back(param(name + mat + suffix, in * outs[m] / tiles, layer));
        if (bias)
          o.params.push_back(param(name + (outs.size() > 1 ? strprintf(".b%zu", m) : ".b") + suffix,
                                   outs[m] / tiles, layer));
      }
      o.fwd_flops = 2 * tokens_ * in * out_total / tiles;
      o.bwd_flops = 2 * o.fwd_flops;
      o.out_bytes = eb_ * tokens_ * out_total / tiles;
      set_matmul_bytes(o, in, out_total / tiles);
      o.saved_bytes = save_output ? o.out_bytes : 0;
      o.id = static_cast<int>(g_.ops.size());
      g_.ops.push_back(o);
    }
  }

  // A matmul of the tokens by an in x out weight: forward reads the input and the weight and writes the
  // output; backward computes the input's gradient (reads the output's gradient and the weight, writes
  // in) and the weight's (reads the input and the output's gradient, writes in x out).
  void set_matmul_bytes(GraphOp& o, double in, double out) const {
    o.fwd_mem_bytes = eb_ * (tokens_ * in + in * out + tokens_ * out);
    o.bwd_mem_bytes = 2 * o.fwd_mem_bytes;
  }

  void allreduce(const std::string& name, int layer, double width, int mp) {
    if (mp <= 1) return;
    GraphOp& o = op(name, OpKind::kAllReduce, layer);
    o.out_bytes = eb_ * tokens_ * width;
    o.group = mp;
  }

  // Expert parallelism's all-to-all of `tokens` token vectors of `width` features (each rank's share of
  // them leaves for the other ranks of its group of `ep`).
  void all_to_all(const std::string& name, int layer, double tokens, double width, int ep) {
    GraphOp& o = op(name, OpKind::kAllToAll, layer);
    o.out_bytes = eb_ * tokens * width;
    o.group = ep;
  }

 private:
  ModelGraph& g_;
  double tokens_;
  double eb_;
  int ep_ = 1;
};

}  // namespace

ModelGraph build_model_graph(const ModelSpec& m, const GraphOptions& opt) {
  MW_CHECK(opt.model_parallel >= 1 && opt.tiling >= 1 && opt.expert_parallel >= 1, "graph options");
  MW_CHECK(opt.expert_parallel == 1 || (m.moe() && m.experts % opt.expert_parallel == 0),
           "expert parallelism divides the experts");
  ModelGraph g;
  g.layers = m.layers;
  g.hidden = m.hidden;
  g.options = opt;
  const double mp = opt.model_parallel;
  const double eb = opt.element_bytes;
  const double seq = opt.sequence_length;
  const double T = opt.micro_batch * seq;  // tokens per rank per micro-batch
  const double hd = m.hidden;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim();
  const double qw = m.q_width();   // queries and the attention's output: hidden unless head_dim differs
  const double ow = m.o_width();   // the attention's output (qw but for MLA's value heads)
  const double ffn = m.mlp_ffn();  // the dense MLP's inner features, or one expert's
  const bool ln = m.norm == NormKind::kLayerNorm && m.norm_bias;  // (a LayerNorm's bias)
  const bool has_norm = m.norm != NormKind::kNone;
  const bool norm_weight = has_norm && m.norm_weight;  // (OLMo's LayerNorms have no parameters)
  const int tiles = opt.tiling;
  Builder b(g, T, eb);

  // Embedding (vocabulary split over model-parallel ranks).
  int tok = -1;
  if (m.vocab > 0 || (m.position == PositionKind::kLearned && m.max_positions > 0)) {
    GraphOp& e = b.op("embed", OpKind::kEmbedding, -1);
    const int e_id = e.id;
    tok = b.param("embed.tokens", m.vocab * hd / mp, -1);
    const int pos =
        m.position == PositionKind::kLearned
            ? b.param("embed.positions", static_cast<double>(m.max_positions + m.position_offset) * hd, -1)
            : -1;
    GraphOp& e2 = g.ops[e_id];
    if (tok >= 0) e2.params.push_back(tok);
    if (pos >= 0) e2.params.push_back(pos);
    e2.out_bytes = eb * T * hd;
    // Forward gathers a row of each table per token and writes their sum; backward reads the output's
    // gradient and adds it into each table's gradient rows (read and written).
    const double tables = (tok >= 0 ? 1 : 0) + (pos >= 0 ? 1 : 0);
    e2.fwd_mem_bytes = (tables + 1) * e2.out_bytes;
    e2.bwd_mem_bytes = (2 * tables + 1) * e2.out_bytes;
  }
  auto norm_op = [&](const std::string& name, int layer) -> GraphOp* {
    if (!has_norm) return nullptr;
    const int w = norm_weight ? b.param(name + ".w", hd, layer) : -1;
    const int bias = ln ? b.param(name + ".b", hd, layer) : -1;
    GraphOp& o = b.elementwise(name, OpKind::kLayerNorm, layer, hd);
    if (w >= 0) o.params.push_back(w);
    if (bias >= 0) o.params.push_back(bias);
    // Read forward; read and gradient written backward.
    const double pb = eb * hd * ((w >= 0 ? 1 : 0) + (bias >= 0 ? 1 : 0));
    o.fwd_mem_bytes += pb;
    o.bwd_mem_bytes += 2 * pb;
    return &o;
  };

  if (m.embed_norm) norm_op("embed_norm", -1);  // BLOOM's

  for (int L = 0; L < m.layers; ++L) {
    const std::string p = strprintf("L%d", L);
    const size_t first = g.ops.size();
    if (L >= m.main_layers()) {
      // A multi-token-prediction module's block (DeepSeek-V3's): the norms of its two inputs (the previous
      // depth's hidden state, the next token's embedding) and eh_proj joining them, kept for the backward.
      norm_op(p + ".mtp_enorm", L);
      norm_op(p + ".mtp_hnorm", L);
      b.linear(p + ".mtp_eh_proj", L, 2 * hd, {hd / mp}, false, tiles, true);
    }
    if (!m.post_norm) norm_op(p + ".ln1", L);  // (OLMo 2's norms follow the attention and the MLP only)
    if (m.linear_attention(L)) {
      // Qwen3-Next's Gated DeltaNet: in_proj_qkvz and in_proj_ba (kept), the depthwise causal convolution
      // with its SiLU over the queries, keys and values (kept), the delta rule, the output gate's RMSNorm
      // (kept, for out_proj), out_proj.
      const double keys = m.la_key_width(), values = m.la_value_width(), vh = m.la_value_heads;
      b.linear(p + ".in_proj", L, hd, {(2 * keys + 2 * values) / mp, 2 * vh / mp}, false, tiles, true);
      {
        const int w = b.param(p + ".conv1d.w", m.la_conv_width() * m.la_conv_kernel / mp, L);
        GraphOp& conv = b.elementwise(p + ".conv1d", OpKind::kConv, L, m.la_conv_width() / mp);
        conv.params.push_back(w);
        conv.fwd_flops = 2.0 * T * m.la_conv_width() * (m.la_conv_kernel + 2) / mp;
        conv.bwd_flops = 2 * conv.fwd_flops;
        conv.saved_bytes = conv.out_bytes;
      }
      {
        // The chunked delta rule (chunks of C = 64, per value head, queries and keys repeated to them): per
        // chunk k_beta K^T, its triangular solve, the corrected values and keys, Q K^T, the state's reads
        // and update: 2 C (3 dk + 2 dv) + 6 dk dv + 2 C^2 / 3 FLOPs a token and head forward, twice that
        // backward (which recomputes the chunk states). Reads Q, K, V, writes the output; kept: the output.
        const int decay = b.param(p + ".dt_bias_A_log", 2 * vh / mp, L);
        GraphOp& a = b.op(p + ".deltanet", OpKind::kLinearAttention, L);
        a.params.push_back(decay);
        const double C = 64, dk = m.la_key_dim, dv = m.la_value_dim;
        a.fwd_flops = T * (vh / mp) * (2 * C * (3 * dk + 2 * dv) + 6 * dk * dv + 2 * C * C / 3);
        a.bwd_flops = 2 * a.fwd_flops;
        a.out_bytes = eb * T * values / mp;
        a.saved_bytes = a.out_bytes;
        a.fwd_mem_bytes = eb * T * (2 * keys + 2 * values) / mp;
        a.bwd_mem_bytes = 2 * a.fwd_mem_bytes + a.out_bytes;
      }
      {
        const int w = b.param(p + ".la_norm.w", static_cast<double>(m.la_value_dim), L);
        GraphOp& norm = b.elementwise(p + ".la_norm", OpKind::kLayerNorm, L, values / mp);
        norm.params.push_back(w);
        norm.saved_bytes = norm.out_bytes;
      }
      b.linear(p + ".out_proj", L, values / mp, {hd}, false, tiles, false);
    } else {
      if (m.mla()) {
        // DeepSeek's latent attention: the down projections to the latents (whole on every model-parallel
        // rank), their RMSNorms, the up projections to the rank's heads (queries; keys without positions and
        // values), each output kept for the backward.
        const auto latent_norm = [&](const std::string& name, double width) {
          const int w = b.param(name + ".w", width, L);
          GraphOp& o = b.elementwise(name, OpKind::kLayerNorm, L, width);
          o.params.push_back(w);
        };
        const double up = static_cast<double>(m.heads) * (m.head_dim() - m.rope_head_size) + m.v_width();
        if (m.q_lora_rank > 0) {
          b.linear(p + ".q_a", L, hd, {static_cast<double>(m.q_lora_rank)}, false, tiles, true);
          latent_norm(p + ".q_a_norm", m.q_lora_rank);
          b.linear(p + ".q_b", L, m.q_lora_rank, {qw / mp}, false, tiles, true);
        } else {
          b.linear(p + ".q", L, hd, {qw / mp}, false, tiles, true);
        }
        b.linear(p + ".kv_a", L, hd, {static_cast<double>(m.kv_lora_rank + m.rope_head_size)}, false, tiles,
                 true);
        latent_norm(p + ".kv_a_norm", m.kv_lora_rank);
        b.linear(p + ".kv_b", L, m.kv_lora_rank, {up / mp}, false, tiles, true);
      } else {
        // One fused qkv weight with multi-head attention; separate q and kv weights with grouped-query
        // attention (or heads of their own size).
        const std::vector<double> qkv =
            kv == hd && qw == hd && !m.attn_output_gate
                ? std::vector<double>{3 * hd / mp}
                : std::vector<double>{(m.attn_output_gate ? 2 : 1) * qw / mp, 2 * kv / mp};
        b.linear(p + ".qkv", L, hd, qkv, (m.linear_bias && m.attn_bias) || m.qkv_bias, tiles,
                 /*save_output=*/true);
      }
      if (m.qk_norm) {
        // Qwen3's RMSNorm of each query and key head (one weight of head_dim each), before the rotary turn;
        // OLMo 2's of all the queries and all the keys.
        const int w = b.param(p + ".qk_norm.w", m.qk_norm_elements(), L);
        GraphOp& o = b.elementwise(p + ".qk_norm", OpKind::kLayerNorm, L, (qw + kv) / mp);
        o.params.push_back(w);
      }
      {
        // (gpt-oss's sink logits: one per head, in the softmax's denominator; their FLOPs are not counted.)
        const int sinks = m.attn_sinks ? b.param(p + ".sinks", static_cast<double>(m.heads) / mp, L) : -1;
        GraphOp& a = b.op(p + ".attn", OpKind::kAttention, L);
        if (sinks >= 0) a.params.push_back(sinks);
        // QK^T over head_dim and AV over the value heads (no causal discount, as the paper counts).
        a.fwd_flops = 2 * T * seq * (qw + ow) / mp;
        a.bwd_flops = 2 * a.fwd_flops;
        a.out_bytes = eb * T * ow / mp;
        const double S = eb * T * (m.heads / mp) * seq;
        // q: the mean of Q's and the output's bytes, k: of K's and V's (Q and the output alike, K and V alike
        // but for MLA's value heads).
        const double q = eb * T * (qw + ow) / 2 / mp, k = eb * T * (kv + m.v_width()) / 2 / mp;
        if (opt.flash_attention) {
          // Fused: backward recomputes QK^T (half the forward's FLOPs) before its four GEMMs; the output and
          // an fp32 log-sum-exp per row and head are saved. Device memory as FlashAttention-2 moves it when
          // its tiles stay on chip: forward reads Q, K, V and writes O; backward reads Q, K, V, O, dO and
          // writes dQ, dK, dV (the per-row sums and log-sum-exps are T x heads, negligible).
          a.bwd_flops += a.fwd_flops / 2;
          // Causal: of n key tiles of 128 (FlashAttention-2's), query tile i computes i + 1. With this
          // layer's sliding window w, only those from the tile holding its first row's first key, 128 i - w +
          // 1: i + 1 while i < r = ceil((w - 1) / 128), then r + 1 each.
          const double n = std::ceil(seq / 128.0), w = m.attention_window(L);
          const double r = w > 0 ? std::min(n, std::ceil((w - 1) / 128)) : n;
          a.exec_fraction = (r * (r + 1) / 2 + (n - r) * (r + 1)) / (n * n);
          // Llama 4's chunks instead: query tile i computes the key tiles from the one its first row's chunk
          // starts in up to its own.
          if (const int chunk = m.attention_chunk_at(L); chunk > 0 && w == 0) {
            double seen = 0;
            for (long i = 0; i < static_cast<long>(n); ++i)
              seen += static_cast<double>(i - 128 * i / chunk * chunk / 128 + 1);
            a.exec_fraction = seen / (n * n);
          }
          a.saved_bytes = a.out_bytes + 4.0 * T * (m.heads / mp);
          a.fwd_mem_bytes = 2 * q + 2 * k;
          a.bwd_mem_bytes = 4 * q + 4 * k;
        } else {
          a.saved_bytes = a.out_bytes + S;  // output + probabilities
          // Unfused attention over scores S (heads x seq per token) and q = T x hd / mp (Q, K, V, output;
          // K and V smaller with grouped-query attention). Forward: QK^T reads Q, K and writes S; the
          // softmax reads S and writes P; PV reads P, V and writes the output. Backward: dV = P^T dO (reads
          // P, dO; writes dV), dP = dO V^T (reads dO, V; writes dP), the softmax's gradient (reads P, dP;
          // writes dS), dQ = dS K and dK = dS^T Q (each reads dS and one of K, Q; writes dQ, dK).
          a.fwd_mem_bytes = 4 * S + 2 * q + 2 * k;
          a.bwd_mem_bytes = 7 * S + 4 * q + 4 * k;
          if (m.attn_softcap > 0) {
            // Soft-capped scores (Gemma 2's): backward recomputes QK^T (half the forward's FLOPs), written
            // and read again for the cap's derivative (forward caps them in the softmax's own pass).
            a.bwd_flops += a.fwd_flops / 2;
            a.bwd_mem_bytes += 2 * S + q + k;
          }
        }
        // MLA's keys carry one rotary part for all heads, which the attention takes (and keeps) per head.
        if (m.mla()) a.saved_bytes += eb * T * m.heads * m.rope_head_size / mp;
      }
      if (m.attn_output_gate) {  // Qwen3-Next's: the output times its gate's sigmoid, kept for o_proj
        GraphOp& gate = b.elementwise(p + ".gate", OpKind::kGelu, L, qw / mp);
        gate.saved_bytes = gate.out_bytes;
      }
      b.linear(p + ".proj", L, ow / mp, {hd}, m.linear_bias && m.attn_bias, tiles, false);
    }
    b.allreduce(p + ".proj.allreduce", L, hd, opt.model_parallel);
    // Gemma 2's and OLMo 2's norm of the attention's output.
    if (m.sandwich_norm || m.post_norm) norm_op(p + ".ln1_post", L);
    if (!m.block_norm_shared && !m.post_norm) norm_op(p + ".ln2", L);
    // An MLP of `width` inner features per rank: fc1 (gate and up when gated), the activation, fc2.
    const auto mlp = [&](const std::string& name, double width, bool bias) {
      const std::vector<double> fc1 =
          m.gated_mlp ? std::vector<double>{width, width} : std::vector<double>{width};
      b.linear(name + ".fc1", L, hd, fc1, bias, tiles, true);
      b.elementwise(name + ".gelu", OpKind::kGelu, L, width);
      b.linear(name + ".fc2", L, width, {hd}, bias, tiles, false);
    };
    if (m.moe_layer(L)) {
      // Mixture of experts: the router's logits (hidden -> experts, kept for its backward), then each
      // expert's gated MLP on the tokens sent to it, experts_per_token / experts of them with balanced
      // routing (every expert's parameters gathered, each token's FLOPs those of experts_per_token MLPs).
      // With expert parallelism ep the rank holds experts / ep of them, each on the tokens of its group's
      // ep ranks routed to it, which an all-to-all brings (each token once per expert it goes to) and
      // another returns: the rank's FLOPs are the same. The weighted sum of the experts' outputs is not
      // counted.
      b.linear(p + ".router", L, hd, {static_cast<double>(m.experts)}, m.expert_bias, 1, true);
      if (m.router_bias_buffer) {  // (the routing's correction bias, where memwall train keeps it)
        const int cb = b.param(p + ".router.cb", m.experts, L);
        g.ops.back().params.push_back(cb);
      }
      const int ep = opt.expert_parallel;
      // (the busiest rank's share with imbalanced routing: its experts' tokens, and what it receives)
      const double routed = T * m.experts_per_token * (ep > 1 ? opt.expert_load : 1.0);
      if (ep > 1) b.all_to_all(p + ".dispatch", L, routed, hd, ep);
      b.set_tokens(routed * ep / m.experts);
      b.set_expert_parallel(ep);
      for (int e = 0; e < m.experts / ep; ++e)
        mlp(strprintf("%s.expert%d", p.c_str(), e), ffn / mp, m.expert_bias);
      b.set_expert_parallel(1);
      b.set_tokens(T);
      if (ep > 1) b.all_to_all(p + ".combine", L, routed, hd, ep);
      if (m.shared_expert_ffn > 0) {  // Qwen2-MoE's shared expert on every token, and its sigmoid gate
        mlp(p + ".shared", m.shared_expert_ffn / mp, false);
        if (m.shared_expert_gate) b.linear(p + ".shared_gate", L, hd, {1}, false, 1, true);
      }
    } else {  // (a dense MLP: every block's, or the first dense_layers' before the experts)
      mlp(p, m.ffn_hidden / mp, m.linear_bias);
    }
    b.allreduce(p + ".fc2.allreduce", L, hd, opt.model_parallel);
    if (m.sandwich_norm || m.post_norm) norm_op(p + ".ln2_post", L);  // and of the MLP's
    g.ops[first].block_start = true;
  }
  const int after = m.layers;
  norm_op("final_norm", after);
  if (m.vocab > 0) {
    if (m.tied_embeddings && tok >= 0) {
      GraphOp& h = b.op("lm_head", OpKind::kLinear, after);
      h.params.push_back(tok);
      h.fwd_flops = 2 * T * hd * m.vocab / mp;
      h.bwd_flops = 2 * h.fwd_flops;
      h.out_bytes = eb * T * m.vocab / mp;
      h.saved_bytes = h.out_bytes;  // the logits, kept for the loss gradient
      h.fwd_mem_bytes = eb * (T * hd + hd * m.vocab / mp) + h.out_bytes;
      h.bwd_mem_bytes = 2 * h.fwd_mem_bytes;
    } else {
      b.linear("lm_head", after, hd, {m.vocab / mp}, m.head_bias, tiles, true);
    }
    GraphOp& loss = b.op("loss", OpKind::kLoss, after);
    loss.fwd_flops = 5 * T * m.vocab / mp;
    loss.bwd_flops = loss.fwd_flops;
    loss.out_bytes = 4 * T * m.vocab / mp;  // fp32 gradient of the logits (allocated in backward)
    // The softmax cross-entropy reads the logits twice forward (maximum, then the sum of exponentials);
    // backward reads them once more and writes their fp32 gradient.
    loss.fwd_mem_bytes = 2 * eb * T * m.vocab / mp;
    loss.bwd_mem_bytes = eb * T * m.vocab / mp + loss.out_bytes;
    if (m.final_softcap > 0) {
      // Gemma 2's capped logits, in place first (read and written); backward scales the gradient by the
      // cap's derivative from them (both read, the gradient written).
      loss.fwd_mem_bytes += 2 * eb * T * m.vocab / mp;
      loss.bwd_mem_bytes += eb * T * m.vocab / mp + loss.out_bytes;
    }
    // Each multi-token-prediction module's head: its norm, then the shared head (the same parameters, their
    // gradients accumulated) and another loss, as the model's.
    const std::size_t head_first = [&] {
      std::size_t i = g.ops.size() - 1;
      while (i > 0 && g.ops[i - 1].name.rfind("lm_head", 0) == 0) --i;
      return i;
    }();
    const std::size_t head_end = g.ops.size();
    for (int k = 0; k < m.mtp_modules; ++k) {
      const std::string name = strprintf("mtp%d.", k);
      norm_op(name + "norm", after);
      for (std::size_t i = head_first; i < head_end; ++i) {
        GraphOp copy = g.ops[i];
        copy.id = static_cast<int>(g.ops.size());
        copy.name = name + copy.name;
        g.ops.push_back(std::move(copy));
      }
    }
  }
  return g;
}

std::vector<char> persistent_params(const ModelGraph& g, double param_threshold, double model_threshold) {
  PersistenceRule rule{param_threshold, model_threshold};
  std::vector<char> out;
  out.reserve(g.params.size());
  for (const auto& p : g.params) out.push_back(rule.admit(p.elements) ? 1 : 0);
  return out;
}

GraphParamStats graph_param_stats(const ModelSpec& model, int tiling, int model_parallel,
                                  double persistence_threshold, double model_persistence_threshold) {
  // The blocks that differ (GLM-4.5's dense first ones, and as many as the period does not divide), then
  // one period of blocks standing for the rest (one block; Llama 4 Maverick's dense and expert pair;
  // Qwen3-Next's three linear-attention layers and a softmax one).
  ModelSpec one = model;
  // (Qwen3-Next's: a softmax-attention layer every full_attn_every.)
  const int every =
      std::lcm(model.moe() ? std::max(1, model.moe_every) : 1, std::max(1, model.full_attn_every));
  // (Multi-token-prediction modules: blocks after the main ones, once each, with the tensors after them.)
  const int main = model.main_layers();
  const int period = std::clamp(every, 1, main);
  int rep = model.moe() ? std::clamp(model.dense_layers, 0, main - period) : 0;
  rep += (main - rep) % period;
  one.layers = rep + period + model.mtp_modules;
  const int repeats = (main - rep) / period;
  const auto repeated = [&](int layer) { return layer >= rep && layer < rep + period; };
  GraphOptions opt;
  opt.tiling = tiling;
  opt.model_parallel = model_parallel;
  const ModelGraph g = build_model_graph(one, opt);
  GraphParamStats s;
  // The full model's parameter order: those before block `rep`'s (with the blocks before it), block rep's
  // once per block from it on, those after.
  std::vector<const GraphParam*> before, block, after;
  for (const auto& p : g.params) {
    s.total_elements += (repeated(p.layer) ? repeats : 1) * p.elements;
    s.largest_param_elements = std::max(s.largest_param_elements, p.elements);
    (repeated(p.layer) ? block : block.empty() ? before : after).push_back(&p);
  }
  PersistenceRule rule{persistence_threshold, model_persistence_threshold};
  std::map<double, double> partitioned;  // elements -> how many
  const auto visit = [&](const std::vector<const GraphParam*>& ps, double copies) {
    for (const GraphParam* p : ps) {
      if (rule.admit(p->elements)) {
        s.persistent_elements += copies * p->elements;
      } else {
        partitioned[p->elements] += copies;
      }
    }
  };
  visit(before, 1);
  // Once the limit binds, block by block (until a block's tensors all go one way, as every later block's
  // then do); without it (the default) one pass stands for every block.
  const bool unlimited = model_persistence_threshold >= kUnlimitedPersistence;
  for (int l = 0; l < repeats;) {
    const double before_total = rule.total;
    const int copies = unlimited ? repeats - l : 1;
    visit(block, copies);
    l += copies;
    if (rule.total == before_total && l < repeats) {  // nothing more fitted: the rest go alike
      visit(block, repeats - l);
      break;
    }
  }
  visit(after, 1);
  for (const auto& [elements, copies] : partitioned) s.partitioned_tensors.emplace_back(elements, copies);
  for (const auto& o : g.ops) {
    double n = 0;
    for (int id : o.params) n += g.params[id].elements;
    s.largest_op_elements = std::max(s.largest_op_elements, n);
  }
  return s;
}

}  // namespace memwall
