// ModelSpec: a decoder-only transformer (GPT-2 or Llama style) and the parameter count derived from it.
//
// Loaded from a Hugging Face config.json by load_model() (spec_loader.h). Parameter counts are exact for
// the architecture described (embeddings, biases, norms, untied head); paper_params() is the paper's
// Eq. (1) approximation 12·nl·hd², printed beside it so users can check both.
#pragma once

#include <string>
#include <vector>

namespace memwall {

enum class NormKind { kLayerNorm, kRmsNorm, kNone };
enum class PositionKind { kLearned, kRotary, kNone };

// A Llama-shaped model file's rope_scaling: how the rotary frequencies are stretched for contexts longer
// than the model was pre-trained on. "linear" divides every frequency by `factor` (positions interpolated);
// "llama3" (Llama 3.1 / 3.2) divides the low frequencies (wavelength above original_max_positions /
// low_freq_factor) by `factor`, keeps the high ones (wavelength below original_max_positions /
// high_freq_factor) and blends the band between; "yarn" (YaRN: Qwen2.5's long-context setting) blends each
// pair between divided by `factor` and kept along a ramp over the pairs that turn between beta_slow and
// beta_fast times within original_max_positions, and scales the rotated queries and keys by an attention
// factor (0.1 ln factor + 1 unless given); "dynamic" (NTK) raises the base only for sequences longer than
// max_position_embeddings, so within them it is no scaling; "longrope" (Phi-3.5's, Phi-4-mini's) divides
// each pair's frequency by its own factor, short_factor's for sequences of up to original_max_positions
// and long_factor's beyond, and scales the rotated queries and keys by an attention factor
// (sqrt(1 + ln factor / ln original_max_positions) unless given). Other types are kept by name only:
// predict and simulate do not need them, memwall train refuses them.
struct RopeScaling {
  // "" (none: transformers' "default"), "linear", "llama3", "yarn", "dynamic", "longrope", or another
  // type's name.
  std::string type{};
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_positions = 0;  // original_max_position_embeddings (0: not given)
  // yarn's: attention_factor (0: derived from factor, mscale and mscale_all_dim), the ramp's rotations, and
  // whether its ends are rounded outwards to whole pairs (truncate).
  double attention_factor = 0;  // yarn's and longrope's (0: derived)
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 0;
  double mscale_all_dim = 0;
  bool truncate = true;
  // longrope's per-pair divisors (one per rotary pair): for contexts of up to original_max_positions, and
  // beyond. Its `factor` is the stretch (max_position_embeddings / original_max_positions where the file
  // gives both) that derives the attention factor.
  std::vector<double> short_factor{};
  std::vector<double> long_factor{};

  bool none() const { return type.empty(); }
  bool supported() const {
    return type.empty() || type == "linear" || type == "llama3" || type == "yarn" || type == "dynamic" ||
           type == "longrope";
  }
};

// Rotary frequencies of the `rotary_dim / 2` pairs (radians per position): theta^(-2i / rotary_dim), then
// `scaling` (a supported type) applied, in double as transformers computes them ("dynamic": as within
// max_position_embeddings, unscaled). `context`: the positions the frequencies serve (a sequence's
// length), which picks longrope's short or long factors (0: short).
std::vector<double> rope_inv_freq(int rotary_dim, double theta, const RopeScaling& scaling, int context = 0);
// The factor the rotary cosines and sines are multiplied by (yarn's and longrope's attention factor; 1 for
// the others).
double rope_attention_scale(const RopeScaling& scaling);

// A group of identical parameter tensors: `count` tensors of `elements` each (e.g. one per layer).
struct ParamTensorGroup {
  std::string name;        // "h.attn.c_attn.weight"
  double rows = 0;         // output features (or vocab for embeddings)
  double cols = 1;         // input features (1 for vectors)
  int count = 1;           // how many such tensors in the model
  bool is_linear = false;  // a matrix used by a linear op (tiling applies)
  double elements() const { return rows * cols; }
};

// Layer `layer`'s attention window (0: full causal attention) in a model with a `window` (0: none) on the
// layers from `first` on, all but every `global_every`-th (0: none skipped; Gemma 2's 2, Gemma 3's 6).
inline int layer_window(int layer, int window, int first, int global_every) {
  const bool global = global_every > 0 && (layer + 1) % global_every == 0;
  return window > 0 && layer >= first && !global ? window : 0;
}

struct ModelSpec {
  std::string name;        // file stem or "name" key
  std::string model_type;  // "gpt2", "llama", ...
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;       // == heads without grouped-query attention
  int ffn_hidden = 0;     // MLP inner size (4·hidden for GPT-2)
  int vocab = 0;          // 0: no embedding/head (the paper's idealized models)
  int max_positions = 0;  // learned position table size; default sequence length
  bool tied_embeddings = true;
  bool gated_mlp = false;   // SwiGLU-style: gate, up and down matrices
  bool linear_bias = true;  // biases on attention and MLP linears
  bool qkv_bias = false;    // biases on the q, k and v projections only (Qwen2's), when linear_bias is false
  NormKind norm = NormKind::kLayerNorm;
  PositionKind position = PositionKind::kLearned;
  double rope_theta = 10000;  // rotary base (rope_theta); memwall train and generate use it
  double norm_eps = 1e-5;     // the norms' epsilon (rms_norm_eps; GPT-2's layer_norm_epsilon is 1e-5)
  int sliding_window = 0;     // the attention window (Mistral's sliding_window; 0: none): keys t - w < u <= t
  int first_window_layer = 0;  // the first layer attending over that window (Qwen2's max_window_layers)
  RopeScaling rope_scaling{};  // rope_scaling (none by default); memwall train and generate use it
  int head_size = 0;           // head_dim where it is not hidden / heads (Qwen3's, Mistral Nemo's); 0: that
  bool qk_norm = false;        // Qwen3's RMSNorm of each query and key head (q_norm, k_norm) before rotary
  // OLMo 2's q_norm and k_norm: one RMSNorm over all the queries and one over all the keys (weights of
  // heads x head_dim and kv_heads x head_dim), rather than one weight per head shared by every head.
  bool qk_norm_full = false;
  // StableLM 2 12B's qk_layernorm (with qk_norm): a LayerNorm without bias of each query and each key head,
  // each head its own weight (heads x head_dim and kv_heads x head_dim weights, as many as OLMo 2's).
  bool qk_norm_head_weights = false;
  // OLMo 2's norm placement: RMSNorms after the attention and after the MLP (before each residual add) and
  // none before them (Gemma 2's sandwich_norm has both).
  bool post_norm = false;
  // The MLP's activation as transformers names it (GPT-2's activation_function, else hidden_act): GPT-2's
  // "gelu_new"; for the gated MLP "silu" (SwiGLU, the default) or Gemma's "gelu_pytorch_tanh" (GeGLU), the
  // two memwall train takes there.
  std::string mlp_act = "silu";
  // Gemma's and Qwen3-Next's RMSNorms, Nemotron's LayerNorm1P scale by 1 + weight (their weights start at 0).
  bool norm_unit_offset = false;
  bool embed_scale = false;            // Gemma's embedding output multiplied by sqrt(hidden)
  double partial_rotary_factor = 1.0;  // the share of each head's channels rotary turns (Phi-4-mini's 0.75)
  // With a window: every global_every-th layer (layers global_every - 1, 2 global_every - 1, ...) attends
  // over all keys, the others over the window (Gemma 2's alternation: 2); 0: the window from
  // first_window_layer on.
  int global_every = 0;
  // Gemma 2's: RMSNorms on the attention's and the MLP's outputs too (post_attention_layernorm,
  // post_feedforward_layernorm, before each residual add), cap * tanh(x / cap) on the attention scores and
  // on the logits (attn_logit_softcapping, final_logit_softcapping; 0: none), and scores scaled by
  // query_pre_attn_scalar^-1/2 rather than head_dim^-1/2 (0: head_dim).
  bool sandwich_norm = false;
  double attn_softcap = 0;
  double final_softcap = 0;
  double query_scale = 0;
  // Gemma 3's rope_local_base_freq: the windowed layers' rotary base, without rope_scaling (0: every layer
  // turns by rope_theta and rope_scaling).
  double rope_local_theta = 0;
  // A mixture-of-experts MLP (Mixtral's, Qwen3-MoE's) in every block: a router (a linear of hidden x
  // experts) sends each token to experts_per_token of `experts` gated MLPs of expert_ffn inner features
  // (ffn_hidden where 0), their outputs summed by the router's weights. 0 experts: a dense MLP.
  int experts = 0;
  int experts_per_token = 0;
  int expert_ffn = 0;
  // How a token's experts are weighted: the router's softmax over all experts at the chosen ones
  // (norm_topk_prob false: OLMoE's, Qwen-MoE's default), or those renormalised to sum to 1 (Mixtral's,
  // Granite MoE's; norm_topk_prob true). What memwall train computes; predict and simulate do not depend on
  // it.
  bool norm_topk_prob = false;
  // The load-balancing loss transformers adds to the training loss with output_router_logits true:
  // router_aux_loss_coef x experts x sum over experts of (the share of routing choices it got) x (its mean
  // router probability), both over all the layers' tokens together; 0: none (output_router_logits false, the
  // published files' setting).
  double router_aux_loss = 0;
  // DeepSeek's own balance loss (aux_loss_alpha, seq_aux; what memwall train computes): per layer of experts,
  // alpha x the sum over experts of (its routing choices over their even share) x (its mean score), each
  // sequence's (seq_aux, then the mean over sequences) or the micro-batch's; the scores the router's softmax
  // (V2) or its sigmoid scores over their sum (V3's sequence-wise balance loss). 0: none.
  double seq_aux_alpha = 0;
  bool seq_aux = true;
  // GLM-4.5's routing (DeepSeek-V3's is the same; its reader does not set it, train refusing its latent
  // attention anyway): sigmoid scores instead of the softmax, the experts chosen by score
  // plus a per-expert correction bias (e_score_correction_bias: a buffer, not trained) among the
  // groups_per_token best of expert_groups groups (n_group, topk_group; a group's score the sum of its two
  // best), weighted by their scores (renormalised with norm_topk_prob) times routed_scale
  // (routed_scaling_factor). What memwall train computes; predict and simulate do not depend on it.
  bool sigmoid_routing = false;
  int expert_groups = 1;
  int groups_per_token = 1;
  double routed_scale = 1;
  // DeepSeek-V2's topk_method group_limited_greedy: a group scored by its best expert's probability (not the
  // sum of its two best scores plus biases: GLM-4.5's, DeepSeek-V3's noaux_tc). memwall train does not take
  // it.
  bool group_by_best = false;
  // Whether the graph gives each router its correction bias as a parameter of experts elements (memwall
  // train's graphs of sigmoid routing, gpt_model_spec; the model files' counts leave the buffer out).
  bool router_bias_buffer = false;
  // Qwen2-MoE's shared expert: a gated MLP of this many inner features every token goes through besides its
  // routed experts, scaled by a sigmoid gate (a linear of hidden x 1); 0: none.
  int shared_expert_ffn = 0;
  // gpt-oss's: biases on the router and on every expert's gate, up and down (expert_bias), and a learned
  // sink logit per head in every layer's attention softmax (attn_sinks).
  bool expert_bias = false;
  bool attn_sinks = false;
  // gpt-oss's clamped SwiGLU (swiglu_limit > 0; 0: the plain SwiGLU): the gate clamped to at most the limit,
  // the up projection to +-it, and (up + 1) x gate x sigmoid(1.702 gate). What memwall train computes;
  // predict and simulate count it as SwiGLU.
  double swiglu_limit = 0;
  // GLM-4.5's and DeepSeek's (first_k_dense_replace): the first dense_layers blocks have a dense gated MLP of
  // ffn_hidden inner features, the others the mixture of experts (0: every block). Whether a shared expert is
  // scaled by Qwen2-MoE's sigmoid gate (a linear of hidden x 1; GLM-4.5's shared experts have none).
  int dense_layers = 0;
  bool shared_expert_gate = true;
  // Llama 4's interleave_moe_layer_step: experts in every moe_every-th block (blocks moe_every - 1,
  // 2 moe_every - 1, ...), a dense MLP of ffn_hidden in the others (1: every block after the dense_layers).
  int moe_every = 1;
  // DeepSeek-V2's and V3's multi-head latent attention (kv_lora_rank > 0; 0: none): the keys and values
  // come from one latent of kv_lora_rank features per token (kv_a_proj_with_mqa, hidden -> kv_lora_rank +
  // rope_head_size, an RMSNorm of its first kv_lora_rank, then kv_b_proj up to every head's key part without
  // positions and its value), the rotated key part of rope_head_size is one for all heads; the queries come
  // from a latent of q_lora_rank (q_a_proj, an RMSNorm, q_b_proj; 0: one q_proj). Each head's query and key
  // are head_size wide (qk_nope_head_dim + qk_rope_head_dim), its value and output v_head_size.
  int kv_lora_rank = 0;
  int q_lora_rank = 0;
  int rope_head_size = 0;
  int v_head_size = 0;  // 0: head_dim
  // Whether the rotary parts turn neighbouring channels together (DeepseekV3Config's rope_interleave, true
  // by default; DeepSeek-V2's always): what memwall train computes, nothing to count.
  bool rope_interleave = true;
  // Qwen3-Next's hybrid attention: every full_attn_every-th layer (layers full_attn_every - 1,
  // 2 full_attn_every - 1, ...) softmax attention, the others linear attention (0: every layer softmax
  // attention). A linear-attention layer is a Gated DeltaNet: in_proj_qkvz (hidden -> queries and keys of
  // la_key_heads x la_key_dim, values and an output gate of la_value_heads x la_value_dim), in_proj_ba
  // (hidden -> 2 x la_value_heads: each value head's write strength and decay), a depthwise causal
  // convolution of la_conv_kernel taps over the queries, keys and values, a decay (A_log) and time-step bias
  // (dt_bias) per value head, the delta rule's recurrence over a la_key_dim x la_value_dim state per value
  // head, an RMSNorm gated by the output gate (a weight of la_value_dim), out_proj back to hidden.
  int full_attn_every = 0;
  int la_key_heads = 0;
  int la_value_heads = 0;
  int la_key_dim = 0;
  int la_value_dim = 0;
  int la_conv_kernel = 0;
  // Qwen3-Next's softmax attention output gate: q_proj also gives each head a gate of head_dim, the
  // attention's output multiplied by its sigmoid before o_proj.
  bool attn_output_gate = false;
  // DeepSeek-V3's and GLM-4.5's multi-token-prediction modules (num_nextn_predict_layers): in the file, and
  // counted (with_mtp: the last mtp_modules of `layers` are theirs, each a block of the last block's kind
  // with an input projection eh_proj, 2 hidden -> hidden, and three norms, enorm, hnorm and its head's; the
  // embedding and the head shared with the model).
  int mtp_in_file = 0;
  int mtp_modules = 0;
  // OPT's learned position table: this many rows beyond max_positions (its position ids start at 2).
  int position_offset = 0;
  // One norm before an attention and an MLP that run side by side on the same input (Falcon-7B's, Phi's):
  // no second norm in the block.
  bool block_norm_shared = false;
  // The attention and the MLP side by side on the block's input, each through its own norm (GPT-NeoX's
  // use_parallel_residual): x + attn(ln1(x)) + mlp(ln2(x)).
  bool parallel_residual = false;
  bool embed_norm = false;  // BLOOM's LayerNorm of the embeddings (word_embeddings_layernorm)
  bool norm_bias = true;    // LayerNorm's bias (MPT's norms have none: no_bias)
  bool norm_weight = true;  // the norms' weight (OLMo's LayerNorms have none, nor a bias)
  double clip_qkv = 0;      // OLMo's clamp of q, k and v to [-clip_qkv, clip_qkv] (0: none); nothing to count
  double logit_scale = 1;   // Cohere's logits multiplied by logit_scale; nothing to count
  // Cohere2's: rotary positions on the windowed layers only, none on the global ones (NoPE); nothing to
  // count.
  bool rope_windowed_only = false;
  // SmolLM3's no_rope_layers: every nope_every-th layer (layers nope_every - 1, 2 nope_every - 1, ...)
  // without rotary positions (0: every layer turns); nothing to count.
  int nope_every = 0;
  // Llama 4's attention_chunk_size: the rotary layers (all but every nope_every-th) attend within chunks of
  // this many positions (query t sees keys u <= t with u / chunk == t / chunk), the others over every key (0:
  // no chunks). Fused attention computes the chunks' tiles only; unfused attention, every score.
  int attention_chunk = 0;
  // Llama 4's use_qk_norm: an RMSNorm without weights (epsilon norm_eps) of each query and key head on the
  // rotary layers, after the turn (Llama4TextL2Norm); and its attn_temperature_tuning on the other layers:
  // each query at position t times 1 + attn_temperature x log(1 + floor((t + 1) / floor_scale)) (its
  // attn_scale; 0: none). Nothing to count.
  bool qk_l2_norm = false;
  double attn_temperature = 0;
  int floor_scale = 8192;
  // Granite's multipliers (nothing to count): the embedding times embed_multiplier (embedding_multiplier; 0:
  // none), each sublayer's output times residual_multiplier before its residual add; its
  // attention_multiplier is query_scale (its -2nd power), its logits_scaling logit_scale (its inverse).
  double embed_multiplier = 0;
  double residual_multiplier = 1;
  bool attn_bias = true;   // with linear_bias, on the attention's linears too (GPT-J's: on the MLP's only)
  bool head_bias = false;  // Phi's bias on the untied head

  bool moe() const { return experts > 0; }
  int main_layers() const { return layers - mtp_modules; }
  bool mla() const { return kv_lora_rank > 0; }
  // Whether layer l is a linear-attention (Gated DeltaNet) layer, and how many are softmax attention.
  bool linear_attention(int layer) const { return full_attn_every > 1 && (layer + 1) % full_attn_every != 0; }
  int softmax_attention_layers() const {
    return count_layers([this](int l) { return !linear_attention(l); });
  }
  // A linear-attention layer's widths: its queries' (and keys'), its values' (and output gate's), and the
  // convolved queries, keys and values.
  double la_key_width() const { return static_cast<double>(la_key_heads) * la_key_dim; }
  double la_value_width() const { return static_cast<double>(la_value_heads) * la_value_dim; }
  double la_conv_width() const { return 2 * la_key_width() + la_value_width(); }
  // Whether block `layer` routes its tokens to experts (not the dense blocks first, nor those between), and
  // how many do.
  bool moe_layer(int layer) const {
    return moe() && layer >= dense_layers && (moe_every <= 1 || (layer + 1) % moe_every == 0);
  }
  int moe_layers() const {
    return count_layers([this](int l) { return moe_layer(l); });
  }
  // How many of the layers `is` holds for.
  template <class Pred>
  int count_layers(Pred is) const {
    int n = 0;
    for (int l = 0; l < layers; ++l) n += is(l) ? 1 : 0;
    return n;
  }
  // The MLP inner features one expert (or the dense MLP) has.
  int mlp_ffn() const { return moe() && expert_ffn > 0 ? expert_ffn : ffn_hidden; }
  int head_dim() const { return head_size > 0 ? head_size : heads > 0 ? hidden / heads : 0; }
  // The width of the queries and of the attention's output, heads x head_dim (hidden unless head_dim
  // differs).
  int q_width() const { return heads * head_dim(); }
  // A value head's width (MLA's v_head_dim; head_dim otherwise), and the attention's output width before
  // its projection (heads of that), and the values' (kv_heads of that).
  int v_head_dim() const { return v_head_size > 0 ? v_head_size : head_dim(); }
  int o_width() const { return heads * v_head_dim(); }
  double v_width() const { return static_cast<double>(kv_heads) * v_head_dim(); }
  // The q/k norms' weights in a layer: Qwen3's one per head for queries and one for keys, or OLMo 2's over
  // every query and every key channel (StableLM 2 12B's one per head: as many).
  double qk_norm_elements() const {
    return qk_norm_full || qk_norm_head_weights
               ? static_cast<double>(q_width()) + static_cast<double>(kv_heads) * head_dim()
               : 2.0 * head_dim();
  }
  // Layer l's attention window (0: full causal attention).
  int attention_window(int layer) const {
    return layer_window(layer, sliding_window, first_window_layer, global_every);
  }
  // Layer l's attention chunk (0: none): Llama 4's rotary layers'.
  int attention_chunk_at(int layer) const {
    return attention_chunk > 0 && (nope_every == 0 || (layer + 1) % nope_every != 0) ? attention_chunk : 0;
  }
  // The context the model was pre-trained at, a run's default sequence length: max_positions, or where a
  // rope_scaling stretches it (Llama 3.1's 131072 positions from 8192), the original_max_position_embeddings.
  int pretraining_positions() const {
    const int original = rope_scaling.original_max_positions;
    return original > 0 && original < max_positions ? original : max_positions;
  }
  // Every parameter tensor, grouped. Sum of elements() * count == total_params().
  std::vector<ParamTensorGroup> param_tensors() const;
  double total_params() const;
  double params_per_layer() const;
  double embedding_params() const;  // token (+ learned position) embedding (+ untied head)
  // The parameters a token's forward pass uses: all of them, less the experts it is not routed to.
  double active_params() const;
  // The routed experts' parameters, every layer's (0 without experts).
  double routed_expert_params() const;
  // Eq. (1): 12·nl·hd².
  double paper_params() const { return 12.0 * layers * static_cast<double>(hidden) * hidden; }
  // Elements of the largest single linear weight (the operator that sets model-state working memory).
  double largest_linear_elements() const;
};

// The model with its file's multi-token-prediction modules counted (run option memwall.mtp): mtp_in_file more
// blocks, mtp_modules set.
ModelSpec with_mtp(const ModelSpec& m);

}  // namespace memwall
