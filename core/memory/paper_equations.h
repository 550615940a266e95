// The ZeRO-Infinity paper's closed forms (SC'21, §3-§4), exactly as printed. Bytes, FLOPs, FLOP/byte.
// The memory and bandwidth models build on these; tests check them against Figure 2a and Figure 3.
#pragma once

namespace memwall::paper {

// Eq. (1): parameters of nl transformer blocks of hidden size hd.
inline double eq1_params(double nl, double hd) {
  return 12.0 * nl * hd * hd;
}
// Eq. (2): model-state bytes with mixed-precision Adam, 20 bytes per parameter.
inline double eq2_model_state_bytes(double nl, double hd) {
  return 240.0 * nl * hd * hd;
}
// Eq. (3): activation-checkpoint bytes, one 16-bit block input every ci blocks.
inline double eq3_checkpoint_bytes(double bsz, double seq, double hd, double nl, double ci) {
  return 2.0 * bsz * seq * hd * nl / ci;
}
// Eq. (4): model-state working memory: 16-bit params + grads of the hd x 4hd linear.
inline double eq4_mswm_bytes(double hd) {
  return 4.0 * hd * 4.0 * hd;
}
// Eq. (5): activation working memory: recomputing ci blocks between two checkpoints.
inline double eq5_awm_bytes(double bsz, double seq, double ci, double hd, double heads) {
  return bsz * seq * ci * (16.0 * hd + 2.0 * heads * seq);
}
// Eq. (6): efficiency with no overlap of compute and data movement.
inline double eq6_efficiency(double ait, double bw_Bps, double peak_flops) {
  return ait * bw_Bps / (ait * bw_Bps + peak_flops);
}
// Eq. (6) solved for the bandwidth that gives `efficiency` (0 < efficiency < 1).
inline double eq6_bandwidth_for(double ait, double efficiency, double peak_flops) {
  return efficiency * peak_flops / (ait * (1.0 - efficiency));
}
// Eq. (7)/(8): FLOPs per iteration with activation recomputation (forward x 1, backward x 2, recompute x 1).
inline double eq7_flops_per_iteration(double bsz, double seq, double params) {
  return 2.0 * 4.0 * bsz * seq * params;
}
// Eq. (9): arithmetic intensity for parameters and gradients.
inline double eq9_ait_params_grads(double seq, double bsz) {
  return seq * bsz;
}
// Eq. (10): arithmetic intensity for optimizer states.
inline double eq10_ait_optimizer(double seq, double bsz) {
  return seq * bsz / 4.0;
}
// Eq. (11): arithmetic intensity for activation checkpoints.
inline double eq11_ait_checkpoints(double hd, double ci) {
  return 24.0 * hd * ci;
}

}  // namespace memwall::paper
