// A GPT-2-style decoder on memwall's CPU kernels: token + position embedding; L blocks of (layernorm, causal
// multi-head attention, residual, layernorm, GELU MLP, residual); a final layernorm; an LM head tied to the
// token embedding; mean softmax cross-entropy. Or (GptArch::kLlama) the Llama shape: token embedding only,
// RMSNorm, rotary positions applied to queries and keys, grouped-query attention, a SwiGLU MLP (gate, up,
// down), no biases (or Qwen2's on q, k and v), the head tied or not; heads of their own width (head_dim) and
// Qwen3's RMSNorm of each query and key head before the rotary turn. Or OPT's variant of GPT-2's shape
// (`opt`): a ReLU MLP, and a position table of max_seq + 2 rows read from row 2 (OPT's position ids start at
// 2). Or GPT-NeoX's (`neox`): rotary positions on part of each head instead of the table, an untied head, and
// (parallel_residual) the attention and the MLP side by side on each block's input; or Phi's (`phi`): those,
// one norm for both, a bias on the head; or Falcon's (`falcon`): grouped- or multi-query attention, one norm
// or two, linears without biases; or BLOOM's (`bloom`): ALiBi's linear biases on the attention scores instead
// of positions, and a LayerNorm of the embeddings.
//
// Parameters live in one flat fp32 array in a fixed order (gpt_param_layout), named with Hugging Face GPT-2
// keys (Llama's keys for the Llama shape). Linear weights are stored [out, in] (memwall's matmul convention);
// Hugging Face's GPT-2 Conv1D stores [in, out], so an exporter transposes them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "graph/model_graph.h"
#include "spec/model_spec.h"

namespace memwall::model {

enum class GptArch { kGpt2, kLlama };

struct GptConfig {
  int vocab = 256;    // V
  int max_seq = 256;  // positions in wpe (the longest sequence with rotary positions)
  int layers = 2;     // L
  int heads = 4;      // NH
  int channels = 64;  // C, divisible by heads unless head_dim is given
  // The Llama shape's own sizes (GPT-2 has kv_heads = heads, ffn = 4C, a tied head).
  GptArch arch = GptArch::kGpt2;
  int kv_heads = 0;            // key/value heads (0: heads); heads is a multiple of it
  int ffn = 0;                 // the MLP's inner width F (0: 4C)
  bool tied = true;            // the head is the token embedding
  bool qkv_bias = false;       // biases on q, k and v (Qwen2's; the Llama shape has no other biases)
  double rope_theta = 10000;   // as the model file has them (the kernels take them as float)
  double norm_eps = 1e-5;      // RMSNorm's epsilon (GPT-2's layernorm uses 1e-5)
  RopeScaling rope_scaling{};  // the rotary frequencies' rope_scaling (a supported type; none by default)
  int sliding_window = 0;      // attention window (Mistral's): query t sees keys t - w < u <= t; 0: all
  int first_window_layer = 0;  // layers from this one on attend over the window (Qwen2's max_window_layers)
  int global_every = 0;  // with a window, every global_every-th layer attends over all keys (Gemma 2: 2)
  int head_dim = 0;      // a head's width where it is not channels / heads (Qwen3's); 0: that
  bool qk_norm = false;  // Qwen3's RMSNorm of each query and key head before rotary (q_norm, k_norm)
  // Gemma's: a GeGLU MLP (gelu(gate) * up, GELU's tanh approximation), RMSNorm by 1 + weight, the embedding
  // times sqrt(channels).
  bool gelu_mlp = false;
  bool norm_unit_offset = false;
  bool embed_scale = false;
  // Phi-3's Hugging Face tensors: q, k and v as one qkv_proj, gate and up as one gate_up_proj (the same
  // parameters, named as its files name them).
  bool fused_names = false;
  // Gemma 2's: RMSNorms of the attention's and the MLP's outputs too, before each residual add
  // (post_attention_layernorm, post_feedforward_layernorm; the MLP's input norm is then
  // pre_feedforward_layernorm), cap * tanh(x / cap) on the attention scores and the logits (0: none), and
  // scores scaled by query_pre_attn_scalar^-1/2 (0: the head size's).
  bool sandwich_norm = false;
  double attn_softcap = 0;
  double final_softcap = 0;
  double query_scale = 0;
  // Gemma 3's rope_local_base_freq: the windowed layers' rotary base, without rope_scaling (0: every layer's
  // is rope_theta's with rope_scaling).
  double rope_local_theta = 0;
  // Rotary on the first int(head size x this) channels of each head only (Phi-4-mini's 0.75), the rest
  // passed through (partial_rotary_factor).
  double partial_rotary = 1.0;
  // OPT's GPT-2 shape (pre-LN: do_layer_norm_before): ReLU in the MLP, positions from row kOptPositionOffset
  // of a table that many rows longer, and, in Hugging Face files, OPT's names (separate q, k and v).
  bool opt = false;
  static constexpr int kOptPositionOffset = 2;
  // GPT-2's shape with the exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (activation_function "gelu":
  // Cerebras-GPT's), rather than its tanh approximation (gelu_new).
  bool exact_gelu = false;
  // GPT-NeoX's variant of GPT-2's shape (Pythia's): rotary positions on the first int(head size x
  // partial_rotary) channels of each head (rope_theta, rope_scaling) instead of a position table, the head
  // tied or not (tied), an MLP of ffn inner features, and, in Hugging Face files, NeoX's names with q, k and
  // v interleaved head by head in one query_key_value matrix.
  bool neox = false;
  // Attention and MLP side by side on the block's input, each through its own norm:
  // x + attn(ln1(x)) + mlp(ln2(x)) (GPT-NeoX's use_parallel_residual), rather than one after the other.
  bool parallel_residual = false;
  // Phi's (1, 1.5, 2) variant of GPT-NeoX's: one norm before the attention and the MLP side by side
  // (x + attn(ln1(x)) + mlp(ln1(x)), no ln_2), a bias on the untied head, and, in Hugging Face files, Phi's
  // names with separate q_proj, k_proj and v_proj. Needs parallel_residual.
  bool phi = false;
  // Falcon's variant of GPT-NeoX's (FalconForCausalLM): grouped- or multi-query attention (kv_heads), in
  // Hugging Face files Falcon's names with q, k and v grouped by key/value head in one query_key_value
  // matrix; with one_norm (Falcon-7B's) one norm before the attention and the MLP side by side, else two
  // (ln_attn and ln_mlp: the new decoder architecture's); no_bias: its linears without biases (bias false).
  bool falcon = false;
  bool one_norm = false;
  bool no_bias = false;
  // Falcon's ALiBi instead of rotary positions (alibi true: Falcon-RW's), its biases added to the scores
  // before the score scale (so scaled by it, unlike BLOOM's).
  bool falcon_alibi = false;
  // GPT-BigCode's GPT-2 shape (SantaCoder's, StarCoder's): multi-query attention (kv_heads 1) with learned
  // positions, and in Hugging Face files nn.Linear weights ([out, in], not Conv1D's) with c_attn's rows
  // every query, then the key, then the value (one key/value head per query head: head by head).
  bool bigcode = false;
  // BLOOM's GPT-2 shape (BloomForCausalLM): no position table but ALiBi's linear biases on the attention
  // scores (alibi_slope(h, heads) x (key - query) for head h), a LayerNorm of the token embedding
  // (word_embeddings_layernorm) before the first block, and in Hugging Face files BLOOM's names with q, k and
  // v interleaved head by head in one query_key_value matrix (as GPT-NeoX's).
  bool bloom = false;
  // MPT's GPT-2 shape (MptForCausalLM, no_bias): BLOOM's ALiBi (MPT's slopes with alibi_bias_max 8 are
  // BLOOM's for every head count) without its embedding norm, no biases at all (no_bias: on the linears, and
  // the LayerNorms without theirs), an MLP of ffn inner features, the exact GELU, and in Hugging Face files
  // MPT's names (attn.Wqkv's rows every query, then every key, then every value: memwall's c_attn).
  bool mpt = false;
  // GPT-J's variant of Phi's (GPTJForCausalLM): rotary positions on the first rotary_dim channels of each
  // head (partial_rotary), one norm before the attention and the MLP side by side, biases on the MLP only, an
  // untied head with a bias. GPT-J turns neighbouring channels (2i, 2i + 1) together where memwall's kernels
  // turn channel i with i + rotary_dim / 2 (rotate_half): memwall keeps each head's rotary rows of q_proj and
  // k_proj in the order that makes the two the same (file channel 2i at i, 2i + 1 at rotary_dim / 2 + i;
  // hf_interleaved, interleave_qkv reorder them on export and import), and q . k does not change when q and k
  // are permuted alike.
  bool gptj = false;
  // CodeGen's (CodeGenForCausalLM, with gptj): GPT-J's block with q, k and v as one qkv_proj whose rows are
  // in 4 groups of heads (its mp_num), each group's queries, then its values, then its keys.
  bool codegen = false;
  static constexpr int kCodegenGroups = 4;
  // StarCoder2's GPT-2 shape (Starcoder2ForCausalLM): grouped-query attention (kv_heads) with rotary
  // positions on every channel (rope_theta, rope_scaling) instead of a position table, a window
  // (sliding_window) on every layer, an MLP of ffn inner features (GELU's tanh approximation), biases on
  // every linear (none with no_bias: use_bias false; the LayerNorms keep theirs), the head tied or not, and
  // in Hugging Face files Llama's names (model.layers.*, q_proj, k_proj, v_proj, o_proj) with mlp.c_fc and
  // mlp.c_proj.
  bool starcoder2 = false;
  // Nemotron's GPT-2 shape (NemotronForCausalLM: Nemotron-4, Minitron): grouped-query attention (kv_heads)
  // with rotary positions on partial_rotary of each head (rotate_half's convention), LayerNorm1P (LayerNorms
  // with a bias scaling by 1 + weight: norm_unit_offset), an MLP of ffn inner features with the squared ReLU
  // (relu2), biases on every linear (none with no_bias), the head tied or not, and in Hugging Face files
  // Llama's names (model.layers.*, q_proj, k_proj, v_proj, o_proj) with mlp.up_proj and mlp.down_proj.
  bool nemotron = false;
  // StableLM's Llama shape (StableLmForCausalLM): LayerNorms with a weight and a bias (input_layernorm,
  // post_attention_layernorm, model.norm; epsilon 1e-5) instead of RMSNorms.
  bool layer_norm = false;
  // OLMo's (OlmoForCausalLM, with layer_norm): LayerNorms without weight or bias, no norm tensors at all.
  bool norm_params = true;
  // OLMo 1.7's clip_qkv (with OLMo's norms): q, k and v clamped to [-clip_qkv, clip_qkv] as the qkv linear
  // writes them, before rotary (0: none).
  double clip_qkv = 0;
  // OLMo 2's Llama shape (Olmo2ForCausalLM): RMSNorms after the attention and after the MLP instead of before
  // them (x + norm(attn(x)), then x + norm(mlp(x)): post_attention_layernorm, post_feedforward_layernorm),
  // and with qk_norm_full (and qk_norm) its q_norm and k_norm: one RMSNorm over all the queries and one over
  // all the keys before the heads split (weights of q_width and kv_width), rather than each head's.
  bool post_norm = false;
  bool qk_norm_full = false;
  // StableLM 2 12B's qk_layernorm (with qk_norm and layer_norm): a LayerNorm without bias of each query and
  // each key head before rotary, each head its own weight (q_layernorm.norms.i, k_layernorm.norms.i).
  bool qk_layernorm = false;
  // Cohere's Llama shape (CohereForCausalLM; with layer_norm, parallel_residual and one_norm): LayerNorms
  // without bias, rotary on neighbouring pairs of channels (2i with 2i + 1), the logits multiplied by
  // logit_scale, and with qk_layernorm its q_norm and k_norm ([heads, head size], [kv heads, head size]).
  bool cohere = false;
  double logit_scale = 1;  // (Cohere's; 1: none)
  // Cohere2's (Command R7B's, Command A's; with cohere) and EXAONE 4's (with post_norm and per-head q/k
  // norms): rotary positions on the windowed layers only, the global ones (and every layer without a window)
  // attending without positions (NoPE).
  bool rope_windowed_only = false;
  // IBM Granite's (GraniteForCausalLM; the Llama shape): the embedding times embed_multiplier
  // (embedding_multiplier), scores scaled by attention_multiplier (as query_scale, its -2nd power), each
  // sublayer's output times residual_multiplier before its residual add, the logits divided by logits_scaling
  // (as logit_scale, its inverse).
  bool granite = false;
  double embed_multiplier = 0;  // (0: none; Gemma's sqrt(C) is embed_scale)
  double residual_multiplier = 1;
  // SmolLM3's (no_rope_layers): every nope_every-th layer (layers nope_every - 1, 2 nope_every - 1, ...)
  // attends without positions (NoPE); 0: every layer turns.
  int nope_every = 0;
  // GLM's (GlmForCausalLM, and Glm4ForCausalLM with sandwich_norm; the Llama shape with RMSNorms): rotary on
  // neighbouring pairs of channels (2i with 2i + 1) of the first partial_rotary of each head, and in Hugging
  // Face files gate and up as one gate_up_proj (q, k and v apart), and GLM-4's four norms named
  // post_self_attn_layernorm (the attention output's), post_attention_layernorm (the MLP's input) and
  // post_mlp_layernorm (the MLP output's).
  bool glm = false;
  // A mixture of experts as the blocks' MLP (the Llama shape's; Mixtral's, Qwen2-MoE's, Qwen3-MoE's, OLMoE's;
  // every block's but those dense_layers and moe_every leave dense): a router
  // (a linear of channels x experts, no bias) whose softmax picks each token's experts_per_token experts,
  // each a SwiGLU MLP of expert_width() inner features; the token's MLP output is their outputs weighted by
  // the router's probabilities at them (renormalised to sum to 1 with norm_topk: Mixtral's). router_aux > 0
  // adds transformers' load-balancing loss times it (output_router_logits). In Hugging Face files the router
  // is mlp.gate and expert e's linears mlp.experts.e.gate_proj, up_proj and down_proj (Mixtral's, the
  // Llama shape without q/k norms or q/k/v biases: block_sparse_moe.gate and experts.e.w1, w3 and w2).
  int experts = 0;
  int experts_per_token = 0;
  int expert_ffn = 0;  // (0: ffn_width())
  bool norm_topk = false;
  double router_aux = 0;
  // DeepSeek's balance loss (aux_loss_alpha; 0: none): per layer of experts, seq_aux_alpha x the sum over
  // experts of (its routing choices over its even share, K x tokens / experts) x (its mean score), over each
  // sequence's tokens and averaged over the sequences (seq_aux) or over the micro-batch's; the scores the
  // softmax's probabilities, or with sigmoid routing the sigmoid scores over their sum (DeepSeek-V3's
  // sequence-wise balance loss). Its gradient reaches the router through the scores only.
  double seq_aux_alpha = 0;
  bool seq_aux = true;
  // Qwen2-MoE's shared expert: a SwiGLU MLP of shared_ffn inner features every token goes through beside its
  // routed experts, its output times the sigmoid of shared_expert_gate (a linear of channels x 1); 0: none.
  // Hugging Face names mlp.shared_expert.gate_proj, up_proj, down_proj and mlp.shared_expert_gate.
  int shared_ffn = 0;
  // Dense SwiGLU MLPs of ffn_width() in some layers (Qwen-MoE's mlp_only_layers, its first dense_layers; and
  // decoder_sparse_step: experts in every moe_every-th layer only), the experts in the others.
  int dense_layers = 0;
  int moe_every = 1;
  // GLM-4.5's routing (Glm4MoeTopkRouter): sigmoid scores; the experts chosen by score plus the router's
  // correction bias (mlp.gate.e_score_correction_bias: a tensor of the layout its gradient never reaches,
  // nor weight decay) among the groups_per_token best of expert_groups groups (a group's score the sum of its
  // two best, the other groups' experts never chosen); weights the chosen scores (over their sum with
  // norm_topk) times routed_scale. Its shared experts (mlp.shared_experts) have no gate (shared_gate false).
  bool sigmoid_routing = false;
  // DeepSeek-V2's group_limited_greedy (softmax routing): the experts chosen among the groups_per_token
  // groups whose best expert's probability is highest.
  bool group_by_best = false;
  int expert_groups = 1;
  int groups_per_token = 1;
  double routed_scale = 1;
  bool shared_gate = true;
  // gpt-oss's (GptOssForCausalLM): biases on q, k, v (qkv_bias) and o, a learned sink logit per query head
  // in every attention softmax's denominator (self_attn.sinks), a router with a bias (mlp.router), experts
  // with biases on their gate, up and down whose activation is the clamped SwiGLU (swiglu_limit: the gate
  // clamped to at most it, up to +-it, out = (up + 1) x gate x sigmoid(kSwigluAlpha x gate)), weighted by
  // the softmax of the chosen experts' logits (norm_topk). In Hugging Face files every expert's gate and up
  // as one mlp.experts.gate_up_proj [experts, C, 2F] with gate and up interleaved column by column (and its
  // bias [experts, 2F]), the downs as one down_proj [experts, F, C] (and down_proj_bias [experts, C]).
  bool gpt_oss = false;
  double swiglu_limit = 7.0;
  static constexpr float kSwigluAlpha = 1.702f;
  // DeepSeek-V2's and V3's multi-head latent attention (kv_lora > 0; the Llama shape, heads of head_dim =
  // qk_nope_head_dim + rope_dim for queries and keys): the queries from a latent of q_lora features
  // (self_attn.q_a_proj, its RMSNorm q_a_layernorm, q_b_proj; 0: one q_proj), the keys and values from one
  // of kv_lora (kv_a_proj_with_mqa, whose last rope_dim outputs are a rotary key part every head shares, an
  // RMSNorm kv_a_layernorm of the rest, kv_b_proj up to each head's key part without positions and its value
  // of v_dim); rotary on neighbouring pairs of the rope_dim channels (rope_interleave; else its halves),
  // o_proj from heads x v_dim. Both latent norms' epsilon is kLatentNormEps (DeepseekV3RMSNorm's default).
  // Rows as the files keep them: q_b_proj's each head's nope then rope part, kv_b_proj's each head's key part
  // then value. deepseek: which config a file is (2: DeepseekV2Config, 3: DeepseekV3Config; 0 without
  // latents).
  int kv_lora = 0;
  int q_lora = 0;
  int rope_dim = 0;
  int v_dim = 0;
  int deepseek = 0;
  // DeepseekV3Config's rope_interleave: the rotary parts turn neighbouring pairs (true: V2's and V3's
  // default), or rotate_half's halves (false).
  bool rope_interleave = true;
  static constexpr float kLatentNormEps = 1e-6f;
  // Llama 4's (Llama4ForCausalLM; the Llama shape with experts, every moe_every-th layer's, the others a
  // dense MLP of ffn): rotary on neighbouring pairs of channels (2i with 2i + 1: its complex rotation), the
  // experts_per_token largest router logits chosen and their sigmoids scaling the token's input to each
  // chosen expert (not its output), a shared expert without a gate (shared_gate false); in Hugging Face
  // files the blocks' MLPs under feed_forward: the router feed_forward.router, every expert's gate and up as
  // one experts.gate_up_proj [experts, C, 2F] (the gates the first F columns), the downs as one
  // experts.down_proj [experts, F, C], the shared expert's linears under shared_expert. With qk_l2_norm each
  // query and key head of the rotary layers is RMS-normed without weights (epsilon norm_eps) after the turn
  // (use_qk_norm); with attn_temperature > 0 the other layers' query at position t is multiplied by
  // 1 + attn_temperature x log(1 + floor((t + 1) / floor_scale)) (attn_temperature_tuning, attn_scale).
  // attention_chunk (attention_chunk_size; 0: none): the rotary layers attend within chunks of it (query t
  // sees keys u <= t with u / chunk == t / chunk: attention_span).
  bool llama4 = false;
  bool qk_l2_norm = false;
  double attn_temperature = 0;
  int floor_scale = 8192;
  int attention_chunk = 0;

  // DeepSeek-V3's and GLM-4.5's next-token-prediction module (num_nextn_predict_layers with the run's
  // memwall.mtp; 0: none, else 1): after the main model's main_layers() blocks, one more (of the last block's
  // kind, counted in `layers`) whose input is eh_proj (a linear of 2C to C) of [enorm(the embedding of each
  // position's next token) | hnorm(the main model's last hidden state)], then its own RMSNorm
  // (shared_head.norm) and the model's head, predicting the token after the next: its mean cross-entropy
  // over the positions that have one (T - 1 a sequence) times mtp_weight is added to the loss. In Hugging
  // Face files the module is model.layers.<main_layers()>: enorm, hnorm, eh_proj, shared_head.norm and its
  // block's tensors (with copies of the embedding and the head, embed_tokens and shared_head.head, which
  // export writes and import does not read).
  int mtp = 0;
  double mtp_weight = 0.3;
  int main_layers() const { return layers - mtp; }

  bool llama() const { return arch == GptArch::kLlama; }
  bool mla() const { return kv_lora > 0; }
  // A latent-attention head's key part without positions, the attention's output width (o_proj's input),
  // and kv_b_proj's outputs (every head's key part and value).
  int nope_dim() const { return head_size() - rope_dim; }
  int attn_out_width() const { return mla() ? heads * v_dim : q_width(); }
  int kv_b_width() const { return heads * (nope_dim() + v_dim); }
  // Whether the attention scores take ALiBi's biases (BLOOM's), and whether the embedding adds a learned
  // position's row (neither rotary positions nor ALiBi).
  bool alibi() const { return bloom || falcon_alibi || mpt; }
  // What the attention kernels multiply ALiBi's slopes by (0: no ALiBi): BLOOM and MPT add the biases to the
  // scaled scores, Falcon to the scores before the scale.
  float alibi_scale() const {
    return bloom || mpt ? 1.0f : falcon_alibi ? static_cast<float>(1.0 / std::sqrt(head_size())) : 0.0f;
  }
  // Whether the attention's and the MLP's outputs are normed before each residual add (Gemma 2's, OLMo 2's).
  bool out_norms() const { return sandwich_norm || post_norm; }
  // Whether the sublayers' outputs are scaled before their residual adds (Granite's residual_multiplier).
  bool scaled_branches() const { return residual_multiplier != 1; }
  // Whether rotary turns neighbouring channels (2i, 2i + 1) together (Cohere's, GLM's) rather than channel i
  // with i + rotary_dim / 2 (Llama's rotate_half).
  bool rope_pairs() const { return cohere || glm || llama4 || (mla() && rope_interleave); }
  // Whether routing scores are sigmoids of the logits (GLM-4.5's, DeepSeek-V3's, Llama 4's) rather than
  // their softmax.
  bool sigmoid_scores() const { return sigmoid_routing || llama4; }
  // Whether Llama 4's temperature tuning scales layer l's queries (its layers without positions).
  bool tempered(int layer) const { return attn_temperature > 0 && !rotary_at(layer); }
  // Layer l's query scale from Llama 4's temperature tuning at position t (1 on the rotary layers).
  float query_temperature(int layer, int t) const {
    if (!tempered(layer)) return 1.0f;
    return static_cast<float>(1.0 + attn_temperature * std::log1p(std::floor((t + 1.0) / floor_scale)));
  }
  // The tempered layers' query scale by position, [T] (each such layer's the same; empty without any).
  std::vector<float> query_temperatures(int T) const {
    int layer = 0;
    while (layer < layers && !tempered(layer)) ++layer;
    std::vector<float> v;
    for (int t = 0; t < T && layer < layers; ++t) v.push_back(query_temperature(layer, t));
    return v;
  }
  // Whether layer l's query and key heads are normed without weights after the turn (Llama 4's).
  bool l2_norm_at(int layer) const { return qk_l2_norm && rotary_at(layer); }
  // The q/k norms as the head-norm kernels take them: query heads, key heads and their widths (for
  // qk_norm_full one "head" of all the queries and one of all the keys, narrower with grouped-query heads).
  int qk_norm_heads() const { return qk_norm_full ? 1 : heads; }
  int qk_norm_kv_heads() const { return qk_norm_full ? 1 : kv_head_count(); }
  int qk_norm_width() const { return qk_norm_full ? q_width() : head_size(); }
  int qk_norm_kv_width() const { return qk_norm_full ? kv_width() : head_size(); }
  // Whether the norms are RMSNorms (the Llama shape's but StableLM's) rather than LayerNorms.
  bool rms_norm() const { return llama() && !layer_norm; }
  // Whether the LayerNorms have a bias (not MPT's or OLMo's; StableLM's do), and a norm's tensors in the
  // layout (weight and bias, the weight alone, or none: OLMo's).
  bool norm_bias() const { return llama() ? layer_norm && norm_params && !cohere : !mpt; }
  std::size_t norm_tensors() const { return !norm_params ? 0 : norm_bias() ? 2 : 1; }
  bool learned_positions() const { return !rotary() && !alibi(); }
  // Whether queries and keys turn by rotary positions (the Llama shape's, GPT-NeoX's) rather than the
  // embedding adding a learned position's row.
  bool rotary() const {
    return llama() || neox || phi || gptj || starcoder2 || nemotron || (falcon && !falcon_alibi);
  }
  // Whether layer l's queries and keys turn (not Cohere2's and EXAONE 4's global layers, nor SmolLM3's every
  // n-th).
  bool rotary_at(int layer) const {
    return rotary() && (!rope_windowed_only || attention_window(layer) > 0) &&
           (nope_every == 0 || (layer + 1) % nope_every != 0);
  }
  // Whether the attention reads qkv expanded to a [3 x q_width] layout (key/value heads repeated to their
  // query heads, rotary positions applied) rather than the qkv linear's output as it is.
  bool expanded_attention() const { return rotary() || kv_head_count() != heads; }
  // One norm before the attention and the MLP side by side (Phi's, Falcon-7B's): no second norm.
  bool shared_norm() const { return phi || one_norm || gptj; }  // (one_norm: Falcon-7B's, StableLM's)
  // GPT-2's shape's biases: on the attention's linears (not Falcon's with bias false, MPT's or GPT-J's), on
  // the MLP's (not Falcon's or MPT's), on the untied head (Phi's, GPT-J's).
  bool attn_bias() const { return !llama() && !no_bias && !gptj; }
  bool mlp_bias() const { return !llama() && !no_bias; }
  bool head_bias() const { return phi || gptj; }
  int head_size() const { return head_dim > 0 ? head_dim : channels / heads; }
  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int kv_width() const { return kv_head_count() * head_size(); }  // of K, and of V
  int q_width() const { return heads * head_size(); }             // of Q, and of the attention's output
  int ffn_width() const { return ffn > 0 ? ffn : 4 * channels; }
  bool moe() const { return experts > 0; }
  // Whether layer l's MLP is the mixture of experts (as ModelSpec::moe_layer).
  bool moe_layer(int layer) const {
    return moe() && layer >= dense_layers && (moe_every <= 1 || (layer + 1) % moe_every == 0);
  }
  int moe_layers() const {
    int n = 0;
    for (int l = 0; l < layers; ++l) n += moe_layer(l) ? 1 : 0;
    return n;
  }
  int expert_width() const { return expert_ffn > 0 ? expert_ffn : ffn_width(); }
  // The family a mixture of experts is (its Hugging Face model_type, which names its tensors and config):
  // "deepseek_v2", "deepseek_v3" (latent attention), "gpt_oss", "granitemoe", "glm4_moe" (sigmoid routing),
  // "olmoe" (q/k norms over all heads), "qwen3_moe" (per-head q/k norms), "qwen2_moe" (q/k/v biases or a
  // shared expert) or "mixtral"; "" without experts.
  const char* moe_type() const {
    return !moe()                       ? ""
           : deepseek == 2              ? "deepseek_v2"
           : deepseek == 3              ? "deepseek_v3"
           : llama4                     ? "llama4_text"
           : gpt_oss                    ? "gpt_oss"
           : granite                    ? "granitemoe"
           : sigmoid_routing            ? "glm4_moe"
           : qk_norm_full               ? "olmoe"
           : qk_norm                    ? "qwen3_moe"
           : qkv_bias || shared_ffn > 0 ? "qwen2_moe"
                                        : "mixtral";
  }
  bool mixtral() const { return std::string_view(moe_type()) == "mixtral"; }
  // GPT-2's learned position table: its rows, and the row position 0 reads.
  int position_offset() const { return opt ? kOptPositionOffset : 0; }
  int position_rows() const { return max_seq + position_offset(); }
  // Where position 0's row starts in the table, in floats.
  std::size_t position0() const {
    return static_cast<std::size_t>(position_offset()) * static_cast<std::size_t>(channels);
  }
  int qkv_width() const { return q_width() + 2 * kv_width(); }  // the qkv linear's output
  // Whether the qkv linear is two matrices (q, and k with v) in the graph: unless all three are C wide.
  bool split_qkv() const { return kv_width() != channels || q_width() != channels; }
  int fc_width() const { return (llama() ? 2 : 1) * ffn_width(); }  // fc1's output (gate and up)
  // The channels of a head rotary turns (the first ones; all unless partial_rotary < 1).
  // (the latent attention's: rope_dim)
  int rotary_dim() const { return mla() ? rope_dim : static_cast<int>(head_size() * partial_rotary); }
  // The rotary frequencies of the rotary_dim() / 2 pairs (rope_theta and rope_scaling) for a context of
  // `context` positions (longrope's factors depend on it).
  std::vector<double> rope_inv_freq(int context) const {
    return memwall::rope_inv_freq(rotary_dim(), rope_theta, rope_scaling, context);
  }
  // What the rotary cosines and sines are multiplied by (yarn's and longrope's attention factor, else 1).
  double rope_attention_scale() const { return memwall::rope_attention_scale(rope_scaling); }
  // Whether layer l turns by the local rotary base (Gemma 3's windowed layers), and those frequencies.
  bool local_rope(int layer) const { return rope_local_theta > 0 && attention_window(layer) > 0; }
  std::vector<double> rope_local_inv_freq() const {
    return memwall::rope_inv_freq(rotary_dim(), rope_local_theta, RopeScaling{});
  }
  // The floats in each of gpt_rope_tables' cosine and sine arrays for T positions, and where layer l's rows
  // start in them (the local table after the global one).
  std::size_t rope_tables_floats(int T) const {
    return static_cast<std::size_t>(T) * static_cast<std::size_t>(rotary_dim() / 2) *
           (rope_local_theta > 0 ? 2 : 1);
  }
  std::size_t rope_table_offset(int layer, int T) const {
    return local_rope(layer) ? static_cast<std::size_t>(T) * static_cast<std::size_t>(rotary_dim() / 2) : 0;
  }
  // What the norms' weights are offset by (1 for Gemma's RMSNorm and Nemotron's LayerNorm1P, 1 + weight),
  // and the embedding's scale.
  float norm_offset() const { return norm_unit_offset ? 1.0f : 0.0f; }
  float embedding_scale() const;
  // Gemma's three together (what its config.json describes).
  bool gemma() const { return gelu_mlp && norm_unit_offset && embed_scale; }
  // Layer l's attention window for the kernels (0: full causal attention).
  int attention_window(int layer) const {
    return layer_window(layer, sliding_window, first_window_layer, global_every);
  }
  // Layer l's attention for the kernels: its window (attention_window), or on Llama 4's rotary layers its
  // chunks as the kernels take them, a negative window (-attention_chunk); 0: full causal attention.
  int attention_span(int layer) const {
    const int w = attention_window(layer);
    return w == 0 && attention_chunk > 0 && rotary_at(layer) ? -attention_chunk : w;
  }
  // The attention kernels' score scale (0: theirs, 1 / sqrt(head size)) and soft cap.
  float score_scale() const {
    return query_scale > 0 ? static_cast<float>(1.0 / std::sqrt(query_scale)) : 0.0f;
  }
  float score_cap() const { return static_cast<float>(attn_softcap); }
};

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// A mixture of experts' routing of one token from its router logits z [experts]: the softmax (or the
// sigmoid scores) in `prob` [experts], the experts_per_token most probable (the lower expert first among
// equals; with sigmoid routing by score plus `bias`, the correction bias, among the best groups) in `chosen`
// and their weights in `weight` (their probabilities, or with norm_topk those over their sum; times
// routed_scale). `order`, `choice`: scratch.
void route_token(const GptConfig& c, const float* z, const float* bias, float* prob, int* chosen,
                 float* weight, std::vector<int>& order, std::vector<float>& choice);

// A mixture of experts' routing of B x T tokens on the host, for the CPU model and the GPU's (which copies
// its router logits down): per activation slot the router's probabilities [tokens][experts], each token's
// chosen experts and their weights [tokens][experts_per_token], per expert the routing choices it got
// (token x experts_per_token + choice, in token order) and where its rows begin in a buffer of every
// expert's rows, expert after expert; per layer the choices each expert got, the sum of its probabilities
// over the tokens (gpt-oss's: balance_probabilities') for the load-balancing loss, and DeepSeek's balance
// loss.
class MoeRouter {
 public:
  MoeRouter() = default;
  MoeRouter(const GptConfig& c, int B, int T, int slots);
  // Layer l's routing into slot a from its router logits [tokens][experts] (`bias`: the sigmoid routing's
  // correction bias, or null).
  void route(std::size_t l, std::size_t a, const float* logits, const float* bias);
  const std::vector<int>& rows(std::size_t a, std::size_t e) const { return rows_[a][e]; }
  std::size_t first(std::size_t a, std::size_t e) const { return first_[a][e]; }
  // Slot a's routing weights, [tokens][experts_per_token].
  const float* weights(std::size_t a) const { return wt_[a].data(); }
  // The router logits' gradient [tokens][experts] from the routing weights' (drw [tokens][K]) and the
  // balance losses'.
  void backward(std::size_t a, const float* drw, float* dlogits) const;
  // The balance losses of the last forward added to `loss` (transformers' over all layers, router_aux; and
  // DeepSeek's per layer, seq_aux_alpha).
  void add_losses(float& loss) const;
  // The busiest expert's routing choices over its even share, the largest over the layers (0: no experts).
  double expert_load() const;
  // DeepSeek-V3's bias rule: each expert's routing choices in slot a minus its even share, added into g.
  void add_load_error(std::size_t a, float* g) const;
  // The last forward's routing choices per layer and expert, [layers][experts] (0 for dense layers).
  const std::vector<double>& counts() const { return count_; }

 private:
  double aux_loss() const;
  // gpt-oss's load-balancing probabilities q [experts] of a token routed to `sel` with weights `w`
  // [experts_per_token]: transformers' load_balancing_loss_func takes what GptOssForCausalLM records as the
  // router logits, its router's scores (the chosen experts' weights, 0 elsewhere), so q is their softmax.
  void balance_probabilities(const float* w, const int* sel, std::vector<float>& q) const;
  // DeepSeek's balance loss of slot a's routing: its value, and (dscore) its gradient at each token's scores
  // added into dscore [tokens][experts].
  double seq_aux_loss(std::size_t a, float* dscore) const;
  // Expert e's entry of a per-layer [layers][experts] table (count_, psum_), summed over the layers.
  double over_layers(const std::vector<double>& per_layer, std::size_t e) const;

  GptConfig c_;
  std::size_t N_ = 0;
  int T_ = 0;
  std::vector<std::vector<float>> prob_, wt_;
  std::vector<std::vector<int>> sel_;
  std::vector<std::vector<std::vector<int>>> rows_;
  std::vector<std::vector<std::size_t>> first_;
  std::vector<double> count_, psum_, seq_;
};

// DeepSeek's score scale as query_scale (its -2nd power): head_dim^-1/2 times yarn's
// mscale(factor, mscale_all_dim) squared, or 0 (head_dim^-1/2 alone) without yarn's mscale_all_dim.
double latent_query_scale(int head_dim, const RopeScaling& rs);

// The latent attention's output: of each head's head-size columns in `wide` [N][heads x head size], the
// first v_dim into `narrow` [N][heads x v_dim] (to_narrow), or back, the others zeros.
void mla_values(const GptConfig& c, int N, float* wide, float* narrow, bool to_narrow);

// Rejects non-positive sizes, channels not divisible by heads (without head_dim) and seq > max_seq, naming
// the field; for the Llama shape heads not a multiple of kv_heads and an odd head size (rotary pairs); for
// GPT-2 the Llama shape's fields other than their GPT-2 values.
Status validate(const GptConfig& c, int batch, int seq);
// Memory-centric tiling splits every linear's output rows: `tiling` must divide each (named when not).
Status validate_tiling(const GptConfig& c, int tiling, const std::string& what = "tiling");

struct ParamTensor {
  std::string name;  // e.g. "h.3.attn.c_attn.weight"
  std::size_t offset = 0;
  std::size_t numel = 0;
  std::vector<int> shape;  // as stored here ([out, in] for linear weights)
};

std::vector<ParamTensor> gpt_param_layout(const GptConfig& c);
// The layout as Hugging Face files name it: gpt_param_layout's, or with fused_names Phi-3's qkv_proj and
// gate_up_proj, each the tensors it joins (back to back in the flat array) as one [rows, in] tensor, or for
// OPT its names (model.decoder.*), c_attn split into q_proj, k_proj and v_proj, or for GPT-NeoX its names
// (gpt_neox.*, embed_out), c_attn as query_key_value with its rows in NeoX's order (hf_interleaved), or for
// Phi its names (model.layers.*.self_attn.*), c_attn split as OPT's, or for Falcon its names
// (transformer.h.*), grouped-query attention's c_attn_q and c_attn_kv joined as query_key_value in Falcon's
// order, or for GPT-BigCode GPT-2's names with c_attn_q and c_attn_kv joined as c_attn.
std::vector<ParamTensor> hf_param_layout(const GptConfig& c);
std::size_t gpt_num_params(const GptConfig& c);
// The rotary cosines and sines of positions [0, T), [T][rotary_dim() / 2] each (the Llama shape's, for a
// sequence of T; with rope_local_theta the local base's table follows: rope_table_offset says which a layer
// reads).
void gpt_rope_tables(const GptConfig& c, int T, std::vector<float>& cos, std::vector<float>& sin);

// The family this configuration is, as people name it ("GPT-2", "OPT", "GPT-NeoX", ..., "Llama", "StableLM",
// "OLMo", "OLMo 2"; Llama's variants Mistral, Qwen, Gemma and Phi-3 are "Llama").
const char* gpt_family(const GptConfig& c);

// The core's description of exactly this model (GPT-2: learned positions, layernorm, GELU MLP of 4C, biases,
// tied head; or the Llama shape), from which build_model_graph makes the ops and tensors the planner
// schedules.
ModelSpec gpt_model_spec(const GptConfig& c);
// The inverse: this GPT's sizes from a model file (its vocabulary kept; memwall train replaces it with the
// 256 byte values unless it trains on GPT-2's BPE tokens). The caller checks that the file describes this
// architecture.
GptConfig gpt_config_of(const ModelSpec& m);
// Whether a model file describes an architecture this GPT implements (GPT-2's shape, OPT's, the Llama shape
// with its supported variants); else one line naming what is not, for `tool` ("memwall train").
Status check_model_file(const ModelSpec& m, const std::string& tool);
// Whether a model file's MLP activation is GELU's tanh approximation (gelu_pytorch_tanh, gelu_new), as
// memwall's GeGLU computes it.
bool is_gelu_tanh(const std::string& act);

// Fills `out` with parameters [offset, offset + n) in gpt_param_layout order (a checkpoint, a safetensors
// file, ...).
using ParamReader = std::function<Status(std::size_t offset, std::size_t n, float* out)>;

// Hugging Face's GPT-2 keeps the blocks' linear weights as Conv1D [in, out]; memwall stores them [out, in]
// (GPT-BigCode's, with GPT-2's names, are nn.Linear [out, in]).
bool hf_transposed(const GptConfig& c, const ParamTensor& t);
// GPT-NeoX's and Falcon's query_key_value (weight or bias, of hf_param_layout): its rows are grouped by
// key/value head, each group's query heads, then its key, then its value (GPT-NeoX: q, k and v of head 0,
// then of head 1, ...; Falcon-7B's one group: every q, k, v), where memwall's c_attn has every q, then every
// k, then every v. GPT-J's q_proj and k_proj: each head's rotary rows in neighbouring pairs, where memwall
// keeps them as rotate_half pairs (GptConfig::gptj); CodeGen's qkv_proj: those, in its groups of heads.
bool hf_interleaved(const GptConfig& c, const ParamTensor& t);
// A query_key_value tensor's rows ([q_width + 2 kv_width][cols]; GPT-J: a q_proj or k_proj, [q_width][cols])
// from memwall's order into the file's (to_hf), or back.
void interleave_qkv(const GptConfig& c, const float* src, std::size_t cols, float* dst, bool to_hf);
// A tensor of hf_param_layout that hf_interleaved says is reordered, from memwall's order into the file's
// (to_hf), or back: interleave_qkv's, or gpt-oss's experts' gate_up_proj [experts, C, 2F] (gate and up
// alternating by column where memwall keeps an expert's gate rows, then its up rows), gate_up_proj_bias
// [experts, 2F] (likewise) and down_proj [experts, F, C] (each expert's down transposed).
void hf_reorder(const GptConfig& c, const ParamTensor& t, const float* src, float* dst, bool to_hf);
// dst[c * rows + r] = src[r * cols + c]: a rows x cols matrix transposed.
void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst);

// Where each GraphParam of a graph built from gpt_model_spec(c) (model_parallel 1, any tiling) lives in the
// flat parameter array. A tile of a linear is a contiguous block of weight rows ([out, in] layout) and of the
// bias. Error when the graph does not describe this model (a name or size that does not match).
struct ParamSlice {
  std::size_t offset = 0;
  std::size_t numel = 0;
};
Result<std::vector<ParamSlice>> map_graph_params(const ModelGraph& g, const GptConfig& c);

// GPT-2's initialisation, deterministic in `seed`: weights N(0, 0.02), the two residual projections of each
// block N(0, 0.02 / sqrt(2 L)), layernorm weight 1 and bias 0, linear biases 0. The Llama shape: every matrix
// N(0, 0.02) (transformers' initializer_range), norm weights 1 (Gemma's 0: it scales by 1 + weight).
// Counter-based (element i's value depends only on seed and i), so a rank can initialise just its shard.
void gpt_init(const GptConfig& c, float* params, std::uint64_t seed);
// Elements [begin, end) of the flat array into out[0, end - begin).
void gpt_init_range(const GptConfig& c, float* out, std::size_t begin, std::size_t end, std::uint64_t seed);

// What each op of the model's graph does: its role, layer, and (for a tiled linear) which slice of the
// output features it computes.
enum class GptRole {
  kEmbed,
  kLn1,
  kQkv,
  kQkNorm,
  kAttn,
  kProj,
  kLn2,
  kLn1Post,  // Gemma 2's norm of the attention's output (then the residual add)
  kLn2Post,  // and of the MLP's
  kFc1,
  kGelu,
  kFc2,
  kFinalNorm,
  kHead,
  kLoss,
  kEmbedNorm,  // BLOOM's LayerNorm of the embedding
  // A mixture of experts: the router's logits (and the routing they decide), and expert `expert`'s gate and
  // up linear, SwiGLU and down linear (on the tokens routed to it, its weighted output added to the block's).
  kRouter,
  kExpertFc1,
  kExpertAct,
  kExpertFc2,
  // Qwen2-MoE's shared expert: its gate and up linear, SwiGLU and down linear on every token, and its sigmoid
  // gate's linear (which adds the gated output to the block's).
  kSharedFc1,
  kSharedAct,
  kSharedFc2,
  kSharedGate,
  // DeepSeek's latent attention: the query latent's down projection (q_a_proj) and its RMSNorm, the
  // queries' up projection (q_b_proj, or q_proj without a query latent), the key/value latent's down
  // projection with the shared rotary key part (kv_a_proj_with_mqa), its RMSNorm, the up projection to each
  // head's key part and value (kv_b_proj).
  kQA,
  kQANorm,
  kQB,
  kKvA,
  kKvANorm,
  kKvB,
  // The next-token-prediction module (mtp): the norms of its inputs (the next tokens' embedding, the main
  // model's last hidden state), eh_proj joining them into its block's input; after the main head, its
  // output's norm, the head again and its loss.
  kMtpENorm,
  kMtpHNorm,
  kMtpEhProj,
  kMtpNorm,
  kMtpHead,
  kMtpLoss
};
struct GptOp {
  GptRole role = GptRole::kEmbed;
  int layer = 0, tile = 0, tiles = 1;
  int expert = -1;  // (kExpert*)
};

// One weight matrix of a linear op (several when fused: GQA's q and kv, SwiGLU's gate and up): its rows are
// the output columns [col0, col0 + rows) of the op's output, of which a tile computes its share.
struct LinearPart {
  const float* w = nullptr;
  const float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
  int col0 = 0, rows = 0;
  const std::uint16_t* w16 = nullptr;  // w in bf16, when the caller has it
};
// Whether op `o` is a linear (role kQkv, kProj, kFc1, kFc2 or kHead, whose weight is the token embedding
// when tied), and whether its k-th parameter is a matrix's weight (not a bias).
bool is_linear(const GptOp& o);
bool linear_weight(const GptConfig& c, const GptOp& o, int k);
// The matrices of linear op `o`, from the op's parameter pointers `p` ([w, b] per matrix with biases, else
// [w] per matrix), gradient pointers `g` (null in forward) and, when given, bf16 copies `p16` of the
// parameters (parallel to p); returns how many (1 or 2). Shared by the CPU and CUDA models.
int linear_parts(const GptConfig& c, const GptOp& o, const float* const* p, float* const* g,
                 LinearPart* parts, const std::uint16_t* const* p16 = nullptr);

// The core's graph of this model for one micro-batch of B x T tokens with `tiling` (and fused attention
// when `flash_attention`: the graph's activation and traffic accounting, not its ops, change), where each of
// its parameters lives in the flat array, and each op's role. Shared by the CPU and CUDA models.
struct GptGraph {
  ModelGraph graph;
  std::vector<ParamSlice> slices;
  std::vector<GptOp> ops;
};
GptGraph make_gpt_graph(const GptConfig& c, int B, int T, int tiling, bool flash_attention = false);

// Runs the model op by op, in the core's ModelGraph: one micro-batch of B sequences of T tokens (T <=
// max_seq), with memory-centric tiling of every block linear into `tiling` ops over slices of its output
// features. With `flash_attention` the attention is the fused kernel (kernels/cpu flash_attention_*): a
// layer keeps B x heads x T log-sum-exps instead of its B x heads x T x T probabilities. forward/backward run
// every op in graph order (reverse for backward); an executor driven by the planner's schedule calls
// forward_op/backward_op itself, with parameter pointers that may be gathered working copies.
class GptModel {
 public:
  // Precondition: validate(c, B, T) and validate_tiling(c, tiling) are ok.
  // activation_slots: layers whose activations are kept at once (0: all), as CudaGptModel's: with activation
  // checkpointing the checkpoint interval, the residual stream kept at every layer boundary and the rest of
  // layer l's activations in slot l % activation_slots, refilled by the schedule's recompute of the layer's
  // forward ops before its backward ones; forward() / backward() (whole passes) need all.
  GptModel(const GptConfig& c, int B, int T, int tiling = 1, bool flash_attention = false,
           int activation_slots = 0);

  // Returns the mean cross-entropy of predicting targets[i] at position i. tokens and targets: [B*T].
  float forward(const float* params, const int* tokens, const int* targets);
  // Accumulates d(loss)/d(params) into grads (same layout as params); call after forward with the same
  // params.
  void backward(const float* params, float* grads);

  // One op of graph(). `param[k]` points at the op's k-th parameter (graph().ops[op].params[k]) and `grad[k]`
  // at its gradient (accumulated). Ops must run in graph order forward and reverse order backward.
  // `param16`, when given (with bf16 matmuls), holds bf16 copies of the parameters that a linear's GEMMs
  // then take as they are: param[k] may be null where bf16_weight(op, k).
  void set_batch(const int* tokens, const int* targets);
  void forward_op(int op, const float* const* param, const std::uint16_t* const* param16 = nullptr);
  void backward_op(int op, const float* const* param, float* const* grad,
                   const std::uint16_t* const* param16 = nullptr);
  // With bf16 matmuls: whether op `op` reads its k-th parameter only as the bf16 copy, if given one (a
  // linear's weight).
  bool bf16_weight(int op, int k) const;
  float loss() const { return loss_; }
  // A mixture of experts' balance in the last forward: the busiest expert's routing choices over its even
  // share (experts_per_token x tokens / experts), the largest over the layers of experts (1: balanced, as
  // the graph's FLOPs assume; 0 without experts).
  double expert_load() const { return router_.expert_load(); }
  // The next-token-prediction module's mean cross-entropy in the last forward (0 without one); the loss
  // adds it times mtp_weight.
  double mtp_loss() const { return mtp_loss_; }
  // The loss without that term: the main model's (what a held-out evaluation reports).
  float main_loss() const { return loss_ - static_cast<float>(c_.mtp_weight * mtp_loss_); }
  // bf16 GEMMs: the linears' and the head's matmuls, forward and backward, on bf16 copies of their operands
  // with fp32 accumulation (oneDNN on AMX or AVX-512 BF16 where the CPU has them), as PyTorch's bf16 autocast
  // does; the attention's GEMMs and everything else stay fp32. Off by default (fp32 throughout).
  void set_bf16_matmuls(bool on) { bf16_ = on; }
  // DeepSeek-V3's auxiliary-loss-free balancing: with sigmoid routing, backward adds each expert's load
  // error in the micro-batch, its routing choices minus its even share (tokens x experts_per_token /
  // experts), into the correction bias's gradient (a buffer's: no loss reaches it), for the trainer to step
  // the bias by its sign (memwall.router_bias_update_speed). Off by default (the gradient stays 0).
  void set_router_bias_update(bool on) { bias_update_ = on; }
  // The last forward's routing choices per layer and expert, [layers][experts] (0 for dense layers).
  const std::vector<double>& routing_counts() const { return router_.counts(); }
  // After forward: the logits of every position, [B*T][vocab].
  const float* logits() const { return logits_.data(); }
  // The residual stream at layer l's input, B*T*C floats (l = layers: the final norm's input): what an
  // activation checkpoint holds, which the trainer copies out and back in with cpu_checkpointing.
  float* residual(int layer) { return resid_[rin(static_cast<std::size_t>(layer))].data(); }

  const ModelGraph& graph() const { return graph_; }
  const std::vector<ParamSlice>& slices() const { return slices_; }

 private:
  using Role = GptRole;
  using OpInfo = GptOp;
  using Part = LinearPart;
  void params_of(int op, const float* base, float* gbase, std::vector<const float*>& p,
                 std::vector<float*>& g) const;
  // (rows: of in and out; 0: B x T)
  void linear_forward(float* out, int out_width, const float* in, int in_width, const Part* parts, int n,
                      const OpInfo& o, const float* residual, int rows = 0);
  void linear_backward(float* din, const float* dout, int out_width, const float* in, int in_width,
                       const Part* parts, int n, const OpInfo& o, int rows = 0);
  // A mixture of experts in layer l (activation slot a): the routing from the router's logits (rlogit_),
  // and the block's output started at its residual sum (`bias`: the sigmoid routing's correction bias, or
  // null).
  void route(std::size_t l, std::size_t a, const float* bias);
  // The rows of `src` ([tokens][C]) the tokens routed to expert e (slot a) read, into ein_.
  void gather_expert_input(std::size_t a, int e, const float* src);
  // The attention kernels' `values`: the latent attention's value width (its heads' value channels past it
  // are padding the kernels skip), else 0.
  int attention_values() const { return c_.mla() ? c_.v_dim : 0; }
  // Expert e's first row in slot a's buffer v (efc_, egel_ or eout_) of rows `width` wide.
  float* expert_rows(std::vector<std::vector<float>>& v, std::size_t a, std::size_t e, std::size_t width);
  // The rotary shapes' attention input: qkv_[l] with K and V repeated to every query head and rotary
  // positions applied to Q and K, in the [B*T, 3C] layout the attention kernels take (qf_); and back: the
  // gradient of that layout turned back and summed over each key/value head's group into dqkv_.
  void expand_qkv(const float* qkv, int layer);
  void collapse_dqkv(int layer);
  // Llama 4's temperature on layer `layer`'s queries: the first q_width() floats of each of the B x T rows
  // of 3 x q_width() in `rows` times their position's query_temperature (forward, and the same on their
  // gradient).
  void temper_queries(float* rows, int layer) const;
  // The latent attention's input (mla): every head's query, key and value assembled into qf_ in the [B*T, 3Q]
  // layout the attention kernels take (each head's rotary part first, the shared one its keys' rotary part,
  // values padded with zeros to the head size), rotary positions applied; and back: that layout's gradient
  // (dqf_) turned back and scattered into the queries' (dq_), kv_b_proj's outputs' (dkvb_) and the shared
  // rotary key part's (dkva_'s last rope_dim columns, summed over the heads).
  void assemble_mla(std::size_t a, int layer);
  void scatter_mla(int layer);
  // The MLP's norm's input in layer l (activation slot a): the attention's residual sum, or with
  // parallel_residual the block's input.
  const float* mlp_input(std::size_t l, std::size_t a) const {
    return (c_.parallel_residual ? resid_[rin(l)] : res1_[a]).data();
  }
  // The MLP's input: its norm's output, or (shared_norm) the attention's norm's, or (post_norm: no norm
  // before it) the attention's residual sum.
  const float* fc1_input(std::size_t a) const {
    return (c_.post_norm ? res1_ : c_.shared_norm() ? ln1_ : ln2_)[a].data();
  }
  // The attention's output as o_proj reads it: the kernels', or the latent attention's without the value
  // padding.
  const float* attn_output(std::size_t a) const { return (c_.mla() ? atto_ : atty_)[a].data(); }
  // The attention's input in layer l: its norm's output, or (post_norm) the block's input.
  const float* attn_input(std::size_t l, std::size_t a) const {
    return (c_.post_norm ? resid_[rin(l)] : ln1_[a]).data();
  }
  void norm_forward(float* out, float* mean, float* rstd, const float* in, const float* const* p);
  void post_norm_forward(float* out, const float* residual, const float* in, float* rstd,
                         const float* const* p);
  void scale_branch(const std::vector<float>& d);
  void norm_backward(float* din, float* const* g, const float* dout, const float* in, const float* const* p,
                     const float* mean, const float* rstd);
  // kernels/cpu's matmul_forward / matmul_backward, in fp32 or (bf16_) on bf16 copies of the operands;
  // `ld`: the row stride of out (forward) or dout (backward) when they are columns of a wider array;
  // `cast_in`: false when in16_ already holds `in` in bf16 (a second matrix of the same op).
  // `w16`: w in bf16 already (else cast here).
  void mm_forward(float* out, const float* in, const float* w, const float* b, int N, int IC, int OC,
                  int ld_out = 0, bool cast_in = true, const std::uint16_t* w16 = nullptr);
  void mm_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                   int N, int IC, int OC, int ld_dout = 0, bool cast_in = true,
                   const std::uint16_t* w16 = nullptr);
  // A bf16 GEMM's operands: `in` [N, IC] cast into in16_ (when cast_in), and the weight [OC, IC]: w16 when
  // given, else w cast into w16_.
  const std::uint16_t* bf16_operands(const float* in, const float* w, const std::uint16_t* w16, int N, int IC,
                                     int OC, bool cast_in);

  GptConfig c_;
  int B_, T_;
  bool flash_;
  int slots_;  // layers' activations kept at once
  bool bf16_ = false;
  bool bias_update_ = false;
  std::vector<std::uint16_t> in16_, w16_, dout16_;  // bf16 copies of a matmul's operands
  ModelGraph graph_;
  std::vector<ParamSlice> slices_;
  std::vector<OpInfo> info_;
  std::vector<int> tokens_, targets_;
  float loss_ = 0;
  double mtp_loss_ = 0;
  // The next-token-prediction module's (mtp): the embedding of each position's next token (its target),
  // normed, and its rstd; the main model's last hidden state normed, its rstd; both side by side [N][2C]
  // (eh_proj's input); its output's norm and rstd; its logits and probabilities. Backward: the module's
  // output's gradient, the main model's output's (from its own head), eh_proj's input's, one half of it,
  // and the next tokens' embedding's (added to the table's at the embedding).
  std::vector<float> emb_next_, mtpe_, rmtpe_, mtph_, rmtph_, ehin_, lnm_, rmn_, logits2_, probs2_;
  std::vector<float> dmtp_, dmain_, dehin_, dhalf_, demb_next_;
  // Where layer l's input is in the residual stream: resid_[l], or past the main model's output for the
  // next-token-prediction module's block (its input is eh_proj's output, resid_[l + 1]).
  std::size_t rin(std::size_t l) const {
    return c_.mtp > 0 && static_cast<int>(l) >= c_.main_layers() ? l + 1 : l;
  }
  // Per layer: the block's input (resid[l]); per activation slot (layer l in slot l % slots_): everything
  // its backward needs (att_: the probabilities, or with flash attention the log-sum-exps).
  std::vector<std::vector<float>> resid_, ln1_, m1_, r1_, qkv_, att_, atty_, res1_, ln2_, m2_, r2_, fc_, gel_;
  std::vector<std::vector<float>> qkn_, rqk_;  // with qk_norm: qkv_ with its q and k heads normed, their rstd
  std::vector<std::vector<float>> mqk_;        // and with qk_layernorm their means
  // With sandwich_norm: the attention's and the MLP's projected outputs (the norms' inputs) and their rstd;
  // (backward) a projected output's gradient.
  std::vector<std::vector<float>> ao_, rao_, mo_, rmo_;
  std::vector<float> dpost_;
  std::vector<float> lnf_, mf_, rf_, logits_, probs_;
  // BLOOM's: the embedding before its LayerNorm, the norm's means and rstds; (backward) its gradient.
  std::vector<float> emb_, me_, re_, demb_;
  // Gradient scratch, reused across layers.
  std::vector<float> dx_, dres_, dln_, datty_, dqkv_, dqkn_, dfc_, dgel_, dlogits_;
  std::vector<float> qf_, dqf_;  // the Llama shape's expanded, rotated qkv and its gradient (one layer's)
  std::vector<float> qkr_;       // Llama 4's: its query and key heads' rstd [tokens][2 x heads]
  std::vector<float> temper_;    // and its tempered layers' query scale by position (query_temperatures)
  // its rotary angles' cosines and sines, [T][head size / 2] (twice: the local base's after, with
  // rope_local_theta)
  std::vector<float> rope_cos_, rope_sin_;
  // A mixture of experts: the routing (per activation slot), and per slot every expert's fc1, SwiGLU and
  // fc2 rows ([routed][2F], [routed][F], [routed][C]), expert after expert (N x K rows in all, allocated
  // once: grown per expert as routings changed, they reallocated and page-faulted tens of ms a step).
  // Scratch: the router's logits, an expert's gathered input, and gradients.
  MoeRouter router_;
  std::vector<std::vector<float>> efc_, egel_, eout_;
  // Qwen2-MoE's shared expert, per activation slot: its fc1, SwiGLU and down outputs and its gate's sigmoid;
  // scratch: the gate's logits (and their gradient) and the output's gradient.
  std::vector<std::vector<float>> sfc_, sgel_, sout_, sgate_;
  std::vector<float> glogit_, dsout_;
  std::vector<float> rlogit_, drlogit_, drw_, ein_, dein_, dy_, degel_, defc_;
  // The latent attention's, per activation slot: the query latent, normed, and its rstd; the queries; the
  // key/value latent with the rotary key part, its first kv_lora normed and their rstd; kv_b_proj's output;
  // the attention's output without the value padding (o_proj's input). Scratch: the latent before its norm
  // and the gradients.
  std::vector<std::vector<float>> qa_, qan_, rqa_, q_, kva_, kvn_, rkv_, kvb_, atto_;
  std::vector<float> kvc_, dqa_, dqan_, dq_, dkva_, dkvc_, dkvn_, dkvb_, datto_;
  std::vector<const float*> p_;
  std::vector<float*> g_;
};

}  // namespace memwall::model
