// A mixture of experts' routing on the host (see MoeRouter in gpt.h): one token's choice of experts, a
// layer's routing and balance losses, and back.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/gpt.h"

namespace memwall::model {

namespace {
// p[0, n) = softmax(z[0, n)) in fp32 (as transformers computes the router's); z and p may be the same.
void softmax(const float* z, std::size_t n, float* p) {
  const float zmax = *std::max_element(z, z + n);
  float sum = 0;
  for (std::size_t e = 0; e < n; ++e) sum += (p[e] = std::exp(z[e] - zmax));
  for (std::size_t e = 0; e < n; ++e) p[e] /= sum;
}

// order[0, n): the indices of the n largest of score[0, order.size()), the lower index first among equals.
void best_first(const float* score, std::size_t n, std::vector<int>& order) {
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [score](int x, int y) { return score[x] > score[y] || (score[x] == score[y] && x < y); });
}

// Leaves in `choice` [experts] only the experts of the groups_per_token best of expert_groups groups, the
// others' -inf: never chosen (DeepSeek-V3's own gate masks them so; transformers fills 0, the same unless a
// kept expert's score plus its bias is negative, which the balancing's biases make common: then every token
// would take the same masked experts). A group scores its best expert's choice value (`by_best`:
// DeepSeek-V2's group_limited_greedy) or the sum of its two best (GLM-4.5's and DeepSeek-V3's).
void keep_best_groups(const GptConfig& c, std::vector<float>& choice, bool by_best) {
  const auto G = static_cast<std::size_t>(c.expert_groups), per = choice.size() / G,
             kept = static_cast<std::size_t>(c.groups_per_token);
  if (kept >= G) return;
  std::vector<float> group(G);
  for (std::size_t g = 0; g < G; ++g) {
    float a = -INFINITY, b = -INFINITY;  // the group's best two
    for (std::size_t e = g * per; e < (g + 1) * per; ++e) {
      if (choice[e] > a) {
        b = a;
        a = choice[e];
      } else if (choice[e] > b) {
        b = choice[e];
      }
    }
    group[g] = by_best ? a : a + b;
  }
  std::vector<int> groups(G);
  best_first(group.data(), kept, groups);
  std::vector<char> keep(G, 0);
  for (std::size_t i = 0; i < kept; ++i) keep[static_cast<std::size_t>(groups[i])] = 1;
  for (std::size_t e = 0; e < choice.size(); ++e) {
    if (!keep[e / per]) choice[e] = -INFINITY;
  }
}
}  // namespace

void route_token(const GptConfig& c, const float* z, const float* bias, float* prob, int* chosen,
                 float* weight, std::vector<int>& order, std::vector<float>& choice) {
  const auto E = static_cast<std::size_t>(c.experts), K = static_cast<std::size_t>(c.experts_per_token);
  order.resize(E);
  choice.resize(E);
  if (!c.sigmoid_scores()) {  // the softmax over the experts
    softmax(z, E, prob);
    std::copy(prob, prob + E, choice.begin());
    if (c.group_by_best) keep_best_groups(c, choice, true);  // (DeepSeek-V2's group_limited_greedy)
  } else {  // sigmoid scores; chosen by score + bias within the best groups (Llama 4's by logit)
    for (std::size_t e = 0; e < E; ++e) {
      prob[e] = sigmoid(z[e]);
      choice[e] = c.llama4 ? z[e] : prob[e] + (bias != nullptr ? bias[e] : 0.0f);
    }
    keep_best_groups(c, choice, false);
  }
  best_first(choice.data(), K, order);
  float total = 0;
  for (std::size_t j = 0; j < K; ++j) total += prob[order[j]];
  const auto scale = static_cast<float>(c.routed_scale);
  for (std::size_t j = 0; j < K; ++j) {
    chosen[j] = order[j];
    weight[j] = (c.norm_topk ? prob[order[j]] / total : prob[order[j]]) * scale;
  }
}

MoeRouter::MoeRouter(const GptConfig& c, int B, int T, int slots)
    : c_(c), N_(static_cast<std::size_t>(B) * static_cast<std::size_t>(T)), T_(T) {
  if (!c.moe()) return;
  const auto E = static_cast<std::size_t>(c.experts), K = static_cast<std::size_t>(c.experts_per_token),
             S = static_cast<std::size_t>(slots);
  prob_.assign(S, std::vector<float>(N_ * E));
  wt_.assign(S, std::vector<float>(N_ * K));
  sel_.assign(S, std::vector<int>(N_ * K));
  rows_.assign(S, std::vector<std::vector<int>>(E));
  first_.assign(S, std::vector<std::size_t>(E));
  count_.assign(static_cast<std::size_t>(c.layers) * E, 0.0);
  psum_.assign(count_.size(), 0.0);
  seq_.assign(static_cast<std::size_t>(c.layers), 0.0);
}

void MoeRouter::route(std::size_t l, std::size_t a, const float* logits, const float* bias) {
  const std::size_t N = N_, E = static_cast<std::size_t>(c_.experts),
                    K = static_cast<std::size_t>(c_.experts_per_token);
  float* prob = prob_[a].data();
  float* wt = wt_[a].data();
  int* sel = sel_[a].data();
  for (auto& rows : rows_[a]) rows.clear();
  double* count = count_.data() + l * E;
  double* psum = psum_.data() + l * E;
  std::fill(count, count + E, 0.0);
  std::fill(psum, psum + E, 0.0);
  std::vector<int> order;
  std::vector<float> choice;
  for (std::size_t t = 0; t < N; ++t) {
    route_token(c_, logits + t * E, bias, prob + t * E, sel + t * K, wt + t * K, order, choice);
    const float* p = prob + t * E;
    if (c_.gpt_oss) {  // (the load-balancing loss's probabilities, not the router's)
      balance_probabilities(wt + t * K, sel + t * K, choice);
      p = choice.data();
    }
    for (std::size_t e = 0; e < E; ++e) psum[e] += static_cast<double>(p[e]);
    for (std::size_t j = 0; j < K; ++j) {
      const auto e = static_cast<std::size_t>(sel[t * K + j]);
      count[e] += 1;
      rows_[a][e].push_back(static_cast<int>(t * K + j));
    }
  }
  // Each expert's activations' rows in the slot's buffers, expert after expert.
  std::size_t first = 0;
  for (std::size_t e = 0; e < E; ++e) {
    first_[a][e] = first;
    first += rows_[a][e].size();
  }
  if (c_.seq_aux_alpha > 0) seq_[l] = seq_aux_loss(a, nullptr);
}

double MoeRouter::seq_aux_loss(std::size_t a, float* dscore) const {
  const std::size_t E = static_cast<std::size_t>(c_.experts),
                    K = static_cast<std::size_t>(c_.experts_per_token), N = N_;
  // The groups the loss averages over: each sequence, or the whole micro-batch.
  const std::size_t per = c_.seq_aux ? static_cast<std::size_t>(T_) : N, groups = N / per;
  const float* prob = prob_[a].data();
  const int* sel = sel_[a].data();
  std::vector<double> ce(E), score(E), q(E);
  double loss = 0;
  for (std::size_t b = 0; b < groups; ++b) {
    std::fill(ce.begin(), ce.end(), 0.0);
    std::fill(score.begin(), score.end(), 0.0);
    for (std::size_t t = b * per; t < (b + 1) * per; ++t) {
      for (std::size_t j = 0; j < K; ++j) ce[static_cast<std::size_t>(sel[t * K + j])] += 1;
      const float* p = prob + t * E;
      double sum = 1;  // (the softmax's probabilities as they are; sigmoid scores over their sum)
      if (c_.sigmoid_routing) {
        sum = 0;
        for (std::size_t e = 0; e < E; ++e) sum += static_cast<double>(p[e]);
      }
      for (std::size_t e = 0; e < E; ++e) score[e] += static_cast<double>(p[e]) / sum;
    }
    const double share = static_cast<double>(per * K) / static_cast<double>(E);
    for (std::size_t e = 0; e < E; ++e) {
      ce[e] /= share;
      loss += ce[e] * score[e] / static_cast<double>(per);
    }
    if (dscore == nullptr) continue;
    // d loss / d q_te = alpha ce_e / (tokens x groups); with sigmoid routing q = s / S, so
    // d/ds_e = (g_e - sum_f g_f q_f) / S.
    const double coef = c_.seq_aux_alpha / (static_cast<double>(per) * static_cast<double>(groups));
    for (std::size_t t = b * per; t < (b + 1) * per; ++t) {
      const float* p = prob + t * E;
      float* d = dscore + t * E;
      if (!c_.sigmoid_routing) {
        for (std::size_t e = 0; e < E; ++e) d[e] += static_cast<float>(coef * ce[e]);
        continue;
      }
      double sum = 0, dot = 0;
      for (std::size_t e = 0; e < E; ++e) sum += static_cast<double>(p[e]);
      for (std::size_t e = 0; e < E; ++e) dot += coef * ce[e] * static_cast<double>(p[e]) / sum;
      for (std::size_t e = 0; e < E; ++e) d[e] += static_cast<float>((coef * ce[e] - dot) / sum);
    }
  }
  return c_.seq_aux_alpha * loss / static_cast<double>(groups);
}

double MoeRouter::expert_load() const {
  if (!c_.moe()) return 0;
  const auto E = static_cast<std::size_t>(c_.experts);
  const double even = static_cast<double>(N_) * c_.experts_per_token / c_.experts;
  double busiest = 0;
  for (int l = 0; l < c_.layers; ++l) {
    if (!c_.moe_layer(l)) continue;
    const double* count = count_.data() + static_cast<std::size_t>(l) * E;
    busiest = std::max(busiest, *std::max_element(count, count + E) / even);
  }
  return busiest;
}

void MoeRouter::balance_probabilities(const float* w, const int* sel, std::vector<float>& q) const {
  const auto E = static_cast<std::size_t>(c_.experts), K = static_cast<std::size_t>(c_.experts_per_token);
  q.assign(E, 0.0f);  // the scores: the chosen experts' weights, 0 elsewhere
  for (std::size_t j = 0; j < K; ++j) q[static_cast<std::size_t>(sel[j])] = w[j];
  softmax(q.data(), E, q.data());
}

double MoeRouter::over_layers(const std::vector<double>& per_layer, std::size_t e) const {
  const auto E = static_cast<std::size_t>(c_.experts);
  double sum = 0;
  for (int l = 0; l < c_.layers; ++l) sum += per_layer[static_cast<std::size_t>(l) * E + e];
  return sum;
}

double MoeRouter::aux_loss() const {
  // transformers' load_balancing_loss_func over every layer's tokens together: experts x the sum over experts
  // of (its routing choices / tokens) x (its mean probability).
  const std::size_t E = static_cast<std::size_t>(c_.experts);
  const double tokens = static_cast<double>(N_) * c_.moe_layers();  // (the layers with experts)
  double sum = 0;
  for (std::size_t e = 0; e < E; ++e) sum += over_layers(count_, e) * over_layers(psum_, e);
  return c_.router_aux * static_cast<double>(E) * sum / (tokens * tokens);
}

void MoeRouter::backward(std::size_t a, const float* drw, float* dlogits) const {
  const std::size_t N = N_, E = static_cast<std::size_t>(c_.experts),
                    K = static_cast<std::size_t>(c_.experts_per_token);
  // The load-balancing loss's gradient at probability e of any token: coefficient x experts x (expert e's
  // routing choices over all layers) / (tokens x layers)^2.
  std::vector<double> aux(E, 0.0);
  if (c_.router_aux > 0) {
    const double tokens = static_cast<double>(N) * c_.moe_layers();
    for (std::size_t e = 0; e < E; ++e)
      aux[e] = c_.router_aux * static_cast<double>(E) * over_layers(count_, e) / (tokens * tokens);
  }
  std::vector<float> dp(E), dseq, q, dws(K);
  const bool oss_aux = c_.gpt_oss && c_.router_aux > 0;  // (its balance loss through the chosen weights)
  if (c_.seq_aux_alpha > 0) {  // DeepSeek's balance loss's gradient at every token's scores
    dseq.assign(N * E, 0.0f);
    seq_aux_loss(a, dseq.data());
  }
  for (std::size_t t = 0; t < N; ++t) {
    const float* p = prob_[a].data() + t * E;
    const int* sel = sel_[a].data() + t * K;
    const float* w = wt_[a].data() + t * K;
    const float* dw = drw + t * K;
    for (std::size_t e = 0; e < E; ++e)
      dp[e] = (oss_aux ? 0.0f : static_cast<float>(aux[e])) + (dseq.empty() ? 0.0f : dseq[t * E + e]);
    if (oss_aux) {
      // gpt-oss's load-balancing loss reaches the router through the chosen weights, the scores its
      // probabilities are the softmax of: dw_j += q_e (aux_e - sum_f q_f aux_f) at e = sel_j.
      balance_probabilities(w, sel, q);
      double dot = 0;
      for (std::size_t e = 0; e < E; ++e) dot += static_cast<double>(q[e]) * aux[e];
      for (std::size_t j = 0; j < K; ++j) {
        const auto e = static_cast<std::size_t>(sel[j]);
        dws[j] = dw[j] + static_cast<float>(static_cast<double>(q[e]) * (aux[e] - dot));
      }
      dw = dws.data();
    }
    const auto scale = static_cast<float>(c_.routed_scale);
    if (c_.norm_topk) {  // w_j = scale p_j / S: dp_j = scale (dw_j - sum_i dw_i w_i / scale) / S
      float chosen = 0, dot = 0;
      for (std::size_t j = 0; j < K; ++j) {
        chosen += p[sel[j]];
        dot += dw[j] * w[j] / scale;
      }
      for (std::size_t j = 0; j < K; ++j)
        dp[static_cast<std::size_t>(sel[j])] += scale * (dw[j] - dot) / chosen;
    } else {
      for (std::size_t j = 0; j < K; ++j) dp[static_cast<std::size_t>(sel[j])] += scale * dw[j];
    }
    float* dz = dlogits + t * E;
    if (c_.sigmoid_scores()) {  // each score its own sigmoid: dz_e = dp_e s_e (1 - s_e)
      for (std::size_t e = 0; e < E; ++e) dz[e] = dp[e] * p[e] * (1 - p[e]);
      continue;
    }
    float dot = 0;  // the softmax's: dz_e = p_e (dp_e - sum_f p_f dp_f)
    for (std::size_t e = 0; e < E; ++e) dot += p[e] * dp[e];
    for (std::size_t e = 0; e < E; ++e) dz[e] = p[e] * (dp[e] - dot);
  }
}

void MoeRouter::add_losses(float& loss) const {
  if (!c_.moe()) return;
  if (c_.router_aux > 0) loss += static_cast<float>(aux_loss());
  if (c_.seq_aux_alpha > 0) {  // (DeepSeek's balance loss, each layer's)
    double seq = 0;
    for (double x : seq_) seq += x;
    loss += static_cast<float>(seq);
  }
}

void MoeRouter::add_load_error(std::size_t a, float* g) const {
  const double even = static_cast<double>(N_) * static_cast<double>(c_.experts_per_token) / c_.experts;
  for (std::size_t x = 0; x < rows_[a].size(); ++x)
    g[x] += static_cast<float>(static_cast<double>(rows_[a][x].size()) - even);
}

}  // namespace memwall::model
