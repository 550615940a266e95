// The ZeRO-Infinity planner: builds one iteration's task DAG with explicit buffers (see planner.h).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/units.h"

namespace memwall {

namespace {

struct Event {
  int op = 0;
  Phase phase = Phase::kForward;
};

class Planner {
 public:
  Planner(const ModelGraph& g, const RunConfig& run, const HardwareSpec& hw) : g_(g), run_(run), hw_(hw) {}

  Schedule plan();

 private:
  // ---- task and buffer helpers ----
  int add_task(Task t) {
    t.id = static_cast<int>(s_.tasks.size());
    // Dependencies sorted, once each, without -1 (none). A long list that comes sorted (the optimizer's
    // join of every gradient task) costs a pass, not a sort: a large model's sub-groups each take it.
    if (!std::is_sorted(t.deps.begin(), t.deps.end())) std::sort(t.deps.begin(), t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
    t.deps.erase(std::remove(t.deps.begin(), t.deps.end(), -1), t.deps.end());
    const auto given = static_cast<std::ptrdiff_t>(t.deps.size());
    for (int b : t.uses) {
      MW_CHECK(!freed_[b], "use of a freed buffer: " + s_.buffers[b].name);
      t.deps.push_back(alloc_task_[b]);
    }
    std::sort(t.deps.begin() + given, t.deps.end());
    std::inplace_merge(t.deps.begin(), t.deps.begin() + given, t.deps.end());
    t.deps.erase(std::unique(t.deps.begin(), t.deps.end()), t.deps.end());
    for (int d : t.deps) MW_CHECK(d >= 0 && d < t.id, "dependency must precede its task");
    for (int b : t.uses) users_[b].push_back(t.id);
    s_.tasks.push_back(std::move(t));
    return s_.tasks.back().id;
  }

  int simple(TaskKind kind, Resource r, Phase ph, std::string name, std::vector<int> deps,
             std::vector<int> uses = {}) {
    Task t;
    t.kind = kind;
    t.resource = r;
    t.phase = ph;
    t.name = std::move(name);
    t.deps = std::move(deps);
    t.uses = std::move(uses);
    return add_task(std::move(t));
  }

  // Allocates a buffer; returns the buffer id (its alloc task is alloc_task_[id]).
  int alloc(Tier tier, MemCategory cat, double bytes, const std::string& name, Phase ph,
            std::vector<int> deps, bool persistent = false, bool pinned = false) {
    Buffer b;
    b.id = static_cast<int>(s_.buffers.size());
    b.tier = tier;
    b.category = cat;
    b.bytes = bytes;
    b.persistent = persistent;
    b.pinned = pinned;
    b.name = name;
    s_.buffers.push_back(b);
    freed_.push_back(false);
    users_.emplace_back();
    alloc_task_.push_back(-1);
    Task t;
    t.kind = TaskKind::kAlloc;
    t.phase = ph;
    t.name = "alloc " + name;
    t.buffer = b.id;
    t.deps = std::move(deps);
    alloc_task_[b.id] = add_task(std::move(t));
    return b.id;
  }

  // A slot inside a persistent pool buffer: tracked like a buffer, takes no memory of its own.
  int slot(int pool, Tier tier, double bytes, const std::string& name, Phase ph, std::vector<int> deps) {
    const int b = alloc(tier, MemCategory::kPinnedSwapBuffers, bytes, name, ph, std::move(deps), false, true);
    s_.buffers[b].pool = pool;
    s_.tasks[alloc_task_[b]].deps.push_back(alloc_task_[pool]);
    std::sort(s_.tasks[alloc_task_[b]].deps.begin(), s_.tasks[alloc_task_[b]].deps.end());
    return b;
  }

  // Marks what a buffer holds (for executors that move real data).
  int mark(int buf, int param, BufferRole role) {
    s_.buffers[buf].param = param;
    s_.buffers[buf].role = role;
    return buf;
  }
  int of_param(int task, int param) {
    s_.tasks[task].param = param;
    return task;
  }

  // Frees a buffer after every task that used it.
  int free_buffer(int buf, Phase ph, std::vector<int> extra_deps = {}) {
    MW_CHECK(!freed_[buf], "double free: " + s_.buffers[buf].name);
    Task t;
    t.kind = TaskKind::kFree;
    t.phase = ph;
    t.name = "free " + s_.buffers[buf].name;
    t.buffer = buf;
    t.deps = users_[buf];
    t.deps.push_back(alloc_task_[buf]);
    t.deps.insert(t.deps.end(), extra_deps.begin(), extra_deps.end());
    freed_[buf] = true;
    return add_task(std::move(t));
  }

  int copy(Tier src, Tier dst, double bytes, const std::string& name, Phase ph, std::vector<int> deps,
           std::vector<int> uses, bool single_link = false) {
    Task t;
    t.phase = ph;
    t.name = name;
    t.bytes = bytes;
    t.src = src;
    t.dst = dst;
    t.deps = std::move(deps);
    t.uses = std::move(uses);
    if (src == Tier::kNvme) {
      t.kind = TaskKind::kNvmeRead;
      t.resource = Resource::kNvmeRead;
    } else if (dst == Tier::kNvme) {
      t.kind = TaskKind::kNvmeWrite;
      t.resource = Resource::kNvmeWrite;
    } else {
      t.kind = TaskKind::kCopy;
      t.resource = dst == Tier::kGpu ? Resource::kH2D : Resource::kD2H;
      t.single_link = single_link;
    }
    return add_task(std::move(t));
  }

  int collective(CollectiveKind kind, int group, double bytes, const std::string& name, Phase ph,
                 std::vector<int> deps, std::vector<int> uses) {
    Task t;
    t.kind = TaskKind::kCollective;
    t.resource = Resource::kNetwork;
    t.phase = ph;
    t.name = name;
    t.collective = kind;
    t.group = group;
    t.bytes = bytes;
    t.deps = std::move(deps);
    t.uses = std::move(uses);
    return add_task(std::move(t));
  }

  void setup();
  void build_events();
  void plan_events();
  // Fetching a partitioned parameter for an event happens in three stages, each emitted right after the
  // compute task that triggers it: NVMe->CPU (nc), CPU->GPU (cg) and the all-gather (gg).
  struct Fetch {
    int param = -1;
    size_t event = 0;
    int src_buf = -1;   // where the data is after the stages so far
    int ready = -1;     // the task after which src_buf holds it
    int gathered = -1;  // the whole parameter on the GPU, after gg
  };
  void plan_fetches();
  void emit_stage(int fetch, int stage, Phase ph);
  void gradient(int param, Phase ph, int compute_task, int grad_buf);
  void optimizer();
  // Grows a pinned pool to the most bytes its slots hold at once in task order (optimizer states read during
  // backward share the pool with gradient swap-outs).
  void size_pools();
  // NVMe optimizer: sub-group g's swap slot and the read of its fp32 states (not its gradients).
  void emit_states_read(int g, std::vector<int> alloc_deps, std::vector<int> read_deps);
  double group_elements(int g) const {
    return g + 1 < opt_groups_ ? opt_sub_ : opt_total_ - opt_sub_ * (opt_groups_ - 1);
  }

  // Stage 3 partitions every parameter but the persistent ones: of at most stage3_param_persistence_threshold
  // elements, within stage3_model_persistence_threshold in all (persistent_params).
  bool partitioned(int p) const { return stage_ == 3 && !persistent_[static_cast<size_t>(p)]; }
  // The data-parallel ranks that hold parameter p (it is partitioned, gathered and reduced over them): all of
  // them, or with expert parallelism an expert's data_parallel / expert_parallel, strided over the nodes.
  int dp_of(int p) const { return dp_ / g_.params[static_cast<size_t>(p)].expert_parallel; }
  int dp_of(size_t p) const { return dp_of(static_cast<int>(p)); }
  // A collective of parameter p's data-parallel ranks (an expert's span every node of the job).
  int param_collective(CollectiveKind kind, int p, double bytes, const std::string& name, Phase ph,
                       std::vector<int> deps, std::vector<int> uses) {
    const int id = collective(kind, dp_of(p), bytes, name, ph, std::move(deps), std::move(uses));
    strided_group(id, g_.params[static_cast<size_t>(p)].expert_parallel);
    return id;
  }
  // Collective `id` runs over every `stride`-th rank (an expert's data-parallel ranks), spread over the
  // nodes.
  void strided_group(int id, int stride) {
    if (stride <= 1) return;
    Task& t = s_.tasks[static_cast<size_t>(id)];
    t.group_nodes = std::min(t.group, (s_.ranks + s_.ranks_per_node - 1) / s_.ranks_per_node);
    t.group_stride = stride;
  }
  // This rank's share of parameter p's optimizer states (all of them in stage 0), and of every parameter's.
  double shard_elements(size_t p) const {
    return stage_ >= 1 ? g_.params[p].elements / dp_of(p) : g_.params[p].elements;
  }
  double optimizer_elements() const {
    double n = 0;
    for (size_t p = 0; p < g_.params.size(); ++p) n += shard_elements(p);
    return n;
  }
  long trigger(size_t event_index, int ahead) const;  // event index of the triggering op, -1: at once
  double gathered_elements(size_t i) const;

  const ModelGraph& g_;
  const RunConfig& run_;
  const HardwareSpec& hw_;
  Schedule s_;
  std::vector<bool> freed_;
  std::vector<std::vector<int>> users_;
  std::vector<int> alloc_task_;

  // Settings
  int stage_ = 0;
  int dp_ = 1;
  int mp_ = 1;
  double b_ = 2;
  double gb_ = 2;                 // bytes per gradient element
  std::vector<char> persistent_;  // per parameter: stage 3 keeps it whole (DeepSpeed's persistence)
  Tier opt_tier_ = Tier::kGpu;
  Tier grad_tier_ = Tier::kGpu;  // where an offloaded optimizer's fp32 gradients wait for the step
  int grads32_buf_ = -1;         // those gradients (CPU or NVMe), or -1 (optimizer on the GPU)
  bool mixed_ = true;
  bool broadcast_ = false;

  // Per parameter
  std::vector<Tier> home_;           // where the partitioned shard lives
  std::vector<int> shard_buf_;       // its persistent buffer
  std::vector<int> resident_buf_;    // whole parameter on the GPU (stages 0-2, persistent small params)
  std::vector<int> grad_buf_;        // persistent 16-bit gradient (stages 0-2 and stage 3 with GPU optimizer)
  std::vector<int> last_use_;        // index in events_ of the parameter's last backward use
  std::vector<int> gathered_;        // buffer of a currently gathered (kept) parameter, or -1
  std::vector<int> gathered_ready_;  // task after which gathered_ is valid
  std::vector<int> grad_done_;       // last task of each parameter's gradient path
  std::vector<int> pending_grad_;    // gradient buffer kept between two backward uses of a parameter
  std::vector<int> kept_shard_;      // gradient shard accumulated over several backward uses, or -1
  std::vector<int> kept_reduce_;     // the last reduce-scatter into kept_shard_

  std::vector<Event> events_;
  std::vector<int> compute_of_event_;
  std::vector<double> prefix_elems_;  // prefix sums of gathered elements per event
  int opt_states_buf_ = -1;
  int param_pool_ = -1;             // pinned param swap pool (NVMe-resident parameters)
  int opt_pool_ = -1;               // pinned optimizer swap pool (NVMe-resident optimizer states)
  std::vector<int> swap_in_frees_;  // free tasks of param swap-in slots, in slot order
  std::vector<Fetch> fetches_;
  // Optimizer sub-groups.
  double opt_total_ = 0, opt_sub_ = 1;
  int opt_groups_ = 1, opt_sets_ = 1;
  // An NVMe optimizer's swap slot for n elements: fp32 master, momentum, variance (and the gradients, when
  // they are read from NVMe too) and the 16-bit updated parameters.
  double opt_slot_bytes(double n) const { return ((grad_tier_ == Tier::kNvme ? 16 : 12) + b_) * n; }
  // ZeRO-Offload++'s Twin-Flow (offload_optimizer.ratio < 1): the first gpu_groups_ sub-groups (their first
  // gpu_elems_ elements of this rank's shard) step on the GPU; a parameter whose shard starts among them
  // (param_at_: its offset in the shard) has its gradient and fp32 states kept on the GPU, so the GPU holds
  // the states of gpu_state_elems_ elements (up to the end of the last such parameter), as memwall train
  // does (DeepSpeed's sub-groups are whole parameters too).
  int gpu_groups_ = 0;
  double gpu_elems_ = 0, gpu_state_elems_ = 0;
  std::vector<double> param_at_;
  int gpu_states_buf_ = -1;  // the GPU sub-groups' fp32 states (and gradients) the step uses
  Tier group_tier(int g) const { return g < gpu_groups_ ? Tier::kGpu : opt_tier_; }
  Tier opt_tier_of(int p) const { return param_at_[p] < gpu_elems_ ? Tier::kGpu : opt_tier_; }
  std::vector<int> opt_swap_, opt_states_;                   // per sub-group, once emitted (else -1)
  std::map<std::pair<size_t, int>, int> fetch_of_;           // (event, param) -> fetch
  std::vector<std::vector<std::pair<int, int>>> stages_at_;  // [trigger event + 1] -> (fetch, stage)
  std::map<std::pair<size_t, int>, bool> keep_after_;  // (event, param): stays gathered for its next use
};

Schedule Planner::plan() {
  const ZeroConfig& z = run_.zero;
  stage_ = z.stage;
  dp_ = std::max(1, run_.memwall.data_parallel);
  mp_ = run_.memwall.model_parallel;
  b_ = run_.param_bytes();
  gb_ = run_.grad_bytes();
  mixed_ = run_.mixed_precision();
  persistent_ = persistent_params(g_, z.param_persistence_threshold.value, z.model_persistence_threshold);
  opt_tier_ = tier_of(z.offload_optimizer.device);
  grad_tier_ = tier_of(run_.gradients_device());
  broadcast_ = run_.memwall.partitioning == Partitioning::kBroadcast;
  s_.data_parallel = dp_;
  s_.model_parallel = mp_;
  s_.ranks = dp_ * mp_;
  s_.ranks_per_node = std::min(hw_.gpu.count, s_.ranks);
  s_.memory_in_program_order = run_.memwall.memory_in_program_order;
  s_.delayed_parameter_update = run_.memwall.delayed_parameter_update;
  s_.tokens = g_.options.micro_batch * g_.options.sequence_length;
  opt_total_ = optimizer_elements();
  opt_sub_ = std::min(z.sub_group_size, opt_total_);
  opt_groups_ = static_cast<int>(std::ceil(opt_total_ / opt_sub_));
  opt_sets_ = 1 + (z.offload_optimizer.pipeline_read ? 1 : 0) + (z.offload_optimizer.pipeline_write ? 1 : 0);
  opt_swap_.assign(opt_groups_, -1);
  opt_states_.assign(opt_groups_, -1);
  param_at_.assign(g_.params.size(), 0);
  double at = 0;
  for (size_t p = 0; p < g_.params.size(); ++p) param_at_[p] = at, at += shard_elements(p);
  const TwinFlowSplit twin = twin_flow_split(run_, opt_total_);
  gpu_groups_ = twin.gpu_groups;
  gpu_elems_ = twin.gpu_elements;
  s_.twin_flow_groups = gpu_groups_;
  if (gpu_groups_ > 0) {
    for (size_t p = 0; p < g_.params.size() && opt_tier_of(static_cast<int>(p)) == Tier::kGpu; ++p) {
      ++s_.twin_flow_params;
      gpu_state_elems_ = param_at_[p] + shard_elements(p);
    }
  }
  if (const std::string note = twin_flow_note(run_, opt_total_); !note.empty()) s_.notes.push_back(note);
  if (opt_tier_ != Tier::kGpu) s_.optimizer_gradients = tier_name(grad_tier_);
  // Room for the tasks and buffers up front (plans make up to 24 tasks and 9 buffers an op, 43 and 16 with
  // NVMe offload; capacity never written takes no memory): growing a vector of millions of tasks moved
  // each of them about twice and held the old and the new array at once (DeepSeek-V3: 10.2 s -> 8.1 s).
  const bool nvme =
      z.offload_param.device == OffloadDevice::kNvme || z.offload_optimizer.device == OffloadDevice::kNvme;
  const std::size_t ops = g_.ops.size(), groups = static_cast<std::size_t>(opt_groups_);
  s_.tasks.reserve((nvme ? 48 : 26) * ops + 4 * groups + 1024);
  s_.buffers.reserve((nvme ? 17 : 10) * ops + 2 * groups + 1024);
  setup();
  build_events();
  plan_events();
  optimizer();
  size_pools();
  return std::move(s_);
}

void Planner::setup() {
  const size_t n = g_.params.size();
  home_.assign(n, Tier::kGpu);
  shard_buf_.assign(n, -1);
  resident_buf_.assign(n, -1);
  grad_buf_.assign(n, -1);
  gathered_.assign(n, -1);
  gathered_ready_.assign(n, -1);
  grad_done_.assign(n, -1);
  pending_grad_.assign(n, -1);
  kept_shard_.assign(n, -1);
  kept_reduce_.assign(n, -1);
  const Phase ph = Phase::kSetup;
  alloc(Tier::kGpu, MemCategory::kRuntimeReserved, hw_.gpu.reserved_bytes, "gpu reserved", ph, {}, true);
  alloc(Tier::kCpu, MemCategory::kRuntimeReserved, hw_.cpu.reserved_bytes / s_.ranks_per_node,
        "cpu reserved (this rank's share)", ph, {}, true);
  const ZeroConfig& z = run_.zero;
  const Tier param_tier = stage_ == 3 ? tier_of(z.offload_param.device) : Tier::kGpu;
  double cpu_budget = param_tier == Tier::kNvme ? z.offload_param.max_in_cpu : 0;  // elements kept in CPU
  for (size_t p = 0; p < n; ++p) {
    const GraphParam& gp = g_.params[p];
    if (partitioned(static_cast<int>(p))) {
      const double shard = gp.elements / dp_of(p);
      Tier home = param_tier;
      if (home == Tier::kNvme && cpu_budget >= shard) {
        home = Tier::kCpu;
        cpu_budget -= shard;
      }
      home_[p] = home;
      shard_buf_[p] = mark(alloc(home, MemCategory::kParams16, b_ * shard, gp.name + " shard", ph, {}, true,
                                 home == Tier::kCpu && z.offload_param.pin_memory),
                           static_cast<int>(p), BufferRole::kShard);
      if (opt_tier_of(static_cast<int>(p)) == Tier::kGpu) {
        grad_buf_[p] =
            mark(alloc(Tier::kGpu, MemCategory::kGrads16, gb_ * shard, gp.name + " grad shard", ph, {}, true),
                 static_cast<int>(p), BufferRole::kGradShard);
      }
    } else {
      const MemCategory cat = stage_ == 3 ? MemCategory::kPersistentParams : MemCategory::kParams16;
      const int pi = static_cast<int>(p);
      resident_buf_[p] =
          mark(alloc(Tier::kGpu, cat, b_ * gp.elements, gp.name, ph, {}, true), pi, BufferRole::kResident);
      if (stage_ == 3) {
        grad_buf_[p] = mark(alloc(Tier::kGpu, MemCategory::kPersistentParams, gb_ * gp.elements,
                                  gp.name + " grad", ph, {}, true),
                            pi, BufferRole::kGrad);
      } else if (opt_tier_ == Tier::kGpu || stage_ < 2) {
        const double grad = stage_ >= 2 ? gp.elements / dp_of(p) : gp.elements;
        grad_buf_[p] =
            mark(alloc(Tier::kGpu, MemCategory::kGrads16, gb_ * grad, gp.name + " grad", ph, {}, true), pi,
                 stage_ >= 2 ? BufferRole::kGradShard : BufferRole::kGrad);
      }
    }
  }
  // NVMe-resident shards: the pinned swap pool they are staged through, and their files' block padding.
  double param_padding = 0;
  for (size_t p = 0; p < n; ++p) {
    if (home_[p] == Tier::kNvme)
      param_padding += aio_padding(s_.buffers[shard_buf_[p]].bytes, run_.aio.block_size);
  }
  if (std::count(home_.begin(), home_.end(), Tier::kNvme) > 0) {
    param_pool_ = alloc(Tier::kCpu, MemCategory::kPinnedSwapBuffers, param_swap_pool_bytes(run_),
                        "param swap pool", ph, {}, true, true);
    alloc(Tier::kNvme, MemCategory::kNvmeFilePadding, param_padding, "param swap file padding", ph, {}, true);
  }
  // Optimizer states of this rank: fp32 master params, momentum, variance and gradients.
  const double n_opt = optimizer_elements();
  const bool pin = grad_tier_ == Tier::kCpu && z.offload_optimizer.pin_memory;
  if (opt_tier_ == Tier::kNvme) {
    const double sub = std::min(z.sub_group_size, n_opt);
    opt_pool_ = alloc(Tier::kCpu, MemCategory::kPinnedSwapBuffers, optimizer_swap_pool_bytes(run_, sub),
                      "optimizer swap pool", ph, {}, true, true);
    alloc(Tier::kNvme, MemCategory::kNvmeFilePadding,
          optimizer_swap_padding(n_opt, sub, optimizer_swap_files(run_), run_.aio.block_size),
          "optimizer swap file padding", ph, {}, true);
  }
  // Twin-Flow: the GPU sub-groups' states, as an optimizer on the GPU keeps them.
  if (gpu_state_elems_ > 0) {
    const double bytes = 4 * gpu_state_elems_;
    const auto on_gpu = [&](MemCategory c, const char* name) {
      return alloc(Tier::kGpu, c, bytes, std::string(name) + " (GPU sub-groups)", ph, {}, true);
    };
    if (mixed_) on_gpu(MemCategory::kMasterParams32, "fp32 master params");
    on_gpu(MemCategory::kMomentum32, "fp32 momentum");
    gpu_states_buf_ = on_gpu(MemCategory::kVariance32, "fp32 variance");
    if (mixed_) gpu_states_buf_ = on_gpu(MemCategory::kGrads32, "fp32 grads");
  }
  const double n_rest = n_opt - gpu_state_elems_;
  if (mixed_) alloc(opt_tier_, MemCategory::kMasterParams32, 4 * n_rest, "fp32 master params", ph, {}, true);
  alloc(opt_tier_, MemCategory::kMomentum32, 4 * n_rest, "fp32 momentum", ph, {}, true);
  opt_states_buf_ = alloc(opt_tier_, MemCategory::kVariance32, 4 * n_rest, "fp32 variance", ph, {}, true);
  // The fp32 gradients an offloaded optimizer reads (without mixed precision too: the GPU keeps none).
  if (mixed_ || opt_tier_ != Tier::kGpu) {
    grads32_buf_ =
        alloc(grad_tier_, MemCategory::kGrads32, 4 * n_rest,
              grad_tier_ != opt_tier_ ? "fp32 grads (kept in CPU memory)" : "fp32 grads", ph, {}, true, pin);
    if (grad_tier_ == opt_tier_) opt_states_buf_ = grads32_buf_;
  }
  // Delayed parameter update: the step works on the previous step's gradients, kept beside this step's.
  if (run_.memwall.delayed_parameter_update) {
    mark(alloc(grad_tier_, MemCategory::kGrads32, 4 * n_opt, "fp32 grads of the previous step (DPU)", ph, {},
               true, pin),
         -1, BufferRole::kDelayedGrads);
  }
}

void Planner::build_events() {
  const int nl = g_.layers;
  const auto& ac = run_.activation_checkpointing;
  const int ci = ac.enabled ? std::max(1, ac.interval) : nl;
  std::vector<int> before, after;
  std::vector<std::vector<int>> segments((nl + ci - 1) / std::max(1, ci));
  for (const GraphOp& o : g_.ops) {
    events_.push_back({o.id, Phase::kForward});
    if (o.layer < 0)
      before.push_back(o.id);
    else if (o.layer >= nl)
      after.push_back(o.id);
    else
      segments[o.layer / ci].push_back(o.id);
  }
  for (auto it = after.rbegin(); it != after.rend(); ++it) events_.push_back({*it, Phase::kBackward});
  for (auto seg = segments.rbegin(); seg != segments.rend(); ++seg) {
    if (ac.enabled) {
      for (int op : *seg) events_.push_back({op, Phase::kRecompute});
    }
    for (auto it = seg->rbegin(); it != seg->rend(); ++it) events_.push_back({*it, Phase::kBackward});
  }
  for (auto it = before.rbegin(); it != before.rend(); ++it) events_.push_back({*it, Phase::kBackward});

  last_use_.assign(g_.params.size(), -1);
  prefix_elems_.assign(events_.size() + 1, 0);
  for (size_t i = 0; i < events_.size(); ++i) {
    prefix_elems_[i + 1] = prefix_elems_[i] + gathered_elements(i);
    if (events_[i].phase == Phase::kBackward) {
      for (int p : g_.ops[events_[i].op].params) last_use_[p] = static_cast<int>(i);
    }
  }
  compute_of_event_.assign(events_.size(), -1);
}

double Planner::gathered_elements(size_t i) const {
  double n = 0;
  for (int p : g_.ops[events_[i].op].params) {
    if (partitioned(p)) n += g_.params[p].elements;
  }
  return n;
}

// The event whose op's completion lets a fetch stage `ahead` events before event i start (-1: at once).
long Planner::trigger(size_t i, int ahead) const {
  const ZeroConfig& z = run_.zero;
  long k = static_cast<long>(i) - 1;  // just in time: after the previous op
  if (run_.memwall.prefetch) {
    k = static_cast<long>(i) - ahead - 1;
    // Budgets: parameters gathered for events (k+1, i] (prefetched) must fit the prefetch bucket, and
    // with the running op k+1 the max-live-parameters budget.
    const double bucket = std::min(z.prefetch_bucket_size.value, z.max_live_parameters);
    while (k < static_cast<long>(i) - 2) {
      const long from = std::max(0L, k + 2);
      const double ahead_elems = prefix_elems_[i + 1] - prefix_elems_[from];
      const double live = prefix_elems_[i + 1] - prefix_elems_[std::max(0L, k + 1)];
      if (ahead_elems <= bucket && live <= z.max_live_parameters) break;
      ++k;
    }
  }
  return std::max(-1L, k);
}

// Decides, for every use of every partitioned parameter, whether it must be fetched (its previous use did
// not keep it within the reuse distance) and when each stage of that fetch is issued.
void Planner::plan_fetches() {
  stages_at_.assign(events_.size() + 1, {});
  std::map<int, size_t> previous;  // param -> its previous use event
  for (size_t i = 0; i < events_.size(); ++i) {
    for (int p : g_.ops[events_[i].op].params) {
      if (!partitioned(p)) continue;
      long prev_use = -1;  // the last event before i that uses p
      if (auto it = previous.find(p); it != previous.end()) {
        const size_t prev = it->second;
        prev_use = static_cast<long>(prev);
        const double distance = prefix_elems_[i] - prefix_elems_[prev + 1];
        const bool keepable =
            !(dp_of(p) == 1 && home_[p] == Tier::kGpu);  // the shard itself is the parameter
        keep_after_[{prev, p}] = keepable && distance <= run_.zero.max_reuse_distance;
      }
      previous[p] = i;
      const bool fetched_before = fetch_of_.count({i, p}) > 0;
      if (fetched_before) continue;
      // Needed unless its previous use kept it (within the reuse distance).
      if (prev_use >= 0 && keep_after_[{static_cast<size_t>(prev_use), p}]) continue;
      const int f = static_cast<int>(fetches_.size());
      fetches_.push_back({p, i, shard_buf_[p], -1, -1});
      fetch_of_[{i, p}] = f;
      // Stages in order, never later than the next one: nc (3 ahead), cg (2 ahead), gg (1 ahead).
      const long gg = trigger(i, 1);
      const long cg = std::min(trigger(i, 2), gg);
      const long nc = std::min(trigger(i, 3), cg);
      stages_at_[nc + 1].push_back({f, 0});
      stages_at_[cg + 1].push_back({f, 1});
      stages_at_[gg + 1].push_back({f, 2});
    }
  }
  // Within one trigger point, issue every nc before any cg before any gg (each stage needs the previous).
  for (auto& list : stages_at_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.second < b.second; });
  }
}

void Planner::emit_stage(int f, int stage, Phase ph) {
  Fetch& fe = fetches_[f];
  const int p = fe.param;
  const GraphParam& gp = g_.params[p];
  const std::string& nm = gp.name;
  const double full = b_ * gp.elements;
  const double shard = broadcast_ ? full : full / dp_of(p);
  const Tier home = home_[p];
  const long trig =
      stage == 0 ? trigger(fe.event, 3) : (stage == 1 ? trigger(fe.event, 2) : trigger(fe.event, 1));
  const int after = trig >= 0 ? compute_of_event_[std::min<long>(trig, static_cast<long>(fe.event) - 1)] : -1;
  if (stage == 0 && home == Tier::kNvme) {
    // A slot of the pinned swap pool: at most buffer_count swap-ins are in flight.
    std::vector<int> slot_deps = {after};
    const size_t count = static_cast<size_t>(run_.zero.offload_param.buffer_count);
    if (swap_in_frees_.size() >= count) slot_deps.push_back(swap_in_frees_[swap_in_frees_.size() - count]);
    const int swap =
        mark(slot(param_pool_, Tier::kCpu, std::min(shard, b_ * run_.zero.offload_param.buffer_size),
                  nm + " swap-in", ph, slot_deps),
             p, BufferRole::kSwapIn);
    fe.ready = of_param(
        copy(Tier::kNvme, Tier::kCpu, shard, "nvme->cpu " + nm, ph, {after}, {swap, shard_buf_[p]}), p);
    fe.src_buf = swap;
  } else if (stage == 1 && home != Tier::kGpu) {
    const int staged =
        mark(alloc(Tier::kGpu, MemCategory::kGatherPrefetch, shard, nm + " staged", ph, {after}), p,
             BufferRole::kStaged);
    fe.ready = of_param(copy(home == Tier::kNvme ? Tier::kCpu : home, Tier::kGpu, shard, "cpu->gpu " + nm, ph,
                             {fe.ready, after}, {staged, fe.src_buf}, broadcast_),
                        p);
    if (home == Tier::kNvme) swap_in_frees_.push_back(free_buffer(fe.src_buf, ph));
    fe.src_buf = staged;
  } else if (stage == 2) {
    if (dp_of(p) == 1) {
      fe.gathered = fe.src_buf;  // a GPU shard, or the staged copy, is already the whole parameter
      return;
    }
    const int full_buf =
        mark(alloc(Tier::kGpu, MemCategory::kModelStateWorking, full, nm + " gathered", ph, {after}), p,
             BufferRole::kGathered);
    fe.ready = of_param(param_collective(broadcast_ ? CollectiveKind::kBroadcast : CollectiveKind::kAllGather,
                                         p, full, (broadcast_ ? "broadcast " : "allgather ") + nm, ph,
                                         {fe.ready, after}, {full_buf, fe.src_buf}),
                        p);
    if (home != Tier::kGpu) free_buffer(fe.src_buf, ph);
    fe.gathered = full_buf;
  }
}

void Planner::plan_events() {
  const auto& ac = run_.activation_checkpointing;
  const int nl = g_.layers;
  const int ci = ac.enabled ? std::max(1, ac.interval) : nl;
  const double eb = g_.options.element_bytes;
  std::map<int, int> saved;      // op -> saved-activation buffer (until its backward)
  std::map<int, int> ckpt_gpu;   // segment -> checkpoint on GPU
  std::map<int, int> ckpt_cpu;   // segment -> checkpoint on CPU
  std::map<int, int> ckpt_copy;  // segment -> d2h copy task
  int prev_out = -1;             // transient output of the previous event (freed after the next compute)
  int prev_compute = -1;
  int logits_grad = -1;
  const bool overlap = run_.zero.overlap_comm;
  plan_fetches();
  std::vector<int> pending_reduce;  // without overlap_comm the next compute waits for these

  for (size_t i = 0; i < events_.size(); ++i) {
    const Event ev = events_[i];
    const GraphOp& op = g_.ops[ev.op];
    const Phase ph = ev.phase;
    // NVMe optimizer with optimizer_prefetch: the first sub-groups' states are read while backward runs (in
    // task order before backward's own NVMe reads, so in-order NVMe queues do not hold them back).
    if (ph == Phase::kBackward && (i == 0 || events_[i - 1].phase != Phase::kBackward) &&
        opt_tier_ == Tier::kNvme && run_.memwall.optimizer_prefetch && opt_states_[0] < 0) {
      const auto& oo = run_.zero.offload_optimizer;
      const int most = oo.pipeline_read && oo.pipeline_write ? std::min(opt_sets_, opt_groups_) : 1;
      // As many as the optimizer swap pool holds beside the largest gradient swap-out slot (if gradients
      // go through it).
      double used = 0;
      for (size_t p = 0; p < g_.params.size() && grad_tier_ == Tier::kNvme; ++p) {
        if (partitioned(static_cast<int>(p))) used = std::max(used, 4 * g_.params[p].elements / dp_of(p));
      }
      for (int g = 0; g < most; ++g) {
        used += opt_slot_bytes(group_elements(g));
        if (used > s_.buffers[opt_pool_].bytes) break;
        emit_states_read(g, {}, g > 0 ? std::vector<int>{opt_states_[g - 1]} : std::vector<int>{});
      }
    }
    // Fetch stages triggered by the previous op (or by nothing, before the first) run while this op runs.
    for (const auto& [f, stage] : stages_at_[i]) emit_stage(f, stage, events_[fetches_[f].event].phase);
    const char* tag = ph == Phase::kForward ? "fwd " : (ph == Phase::kRecompute ? "recompute " : "bwd ");
    const bool in_block = op.layer >= 0 && op.layer < nl;
    const int segment = in_block ? op.layer / ci : -1;
    std::vector<int> deps = {prev_compute};
    if (!overlap) deps.insert(deps.end(), pending_reduce.begin(), pending_reduce.end());
    pending_reduce.clear();
    std::vector<int> uses;

    // Activation checkpoints: saved at the start of a checkpointed block, brought back for recompute.
    if (ac.enabled && in_block && op.block_start && op.layer % ci == 0) {
      const double ckpt_bytes = eb * s_.tokens * g_.hidden / (ac.partition_activations ? mp_ : 1);
      if (ph == Phase::kForward) {
        const int gbuf = alloc(Tier::kGpu, MemCategory::kActivationCheckpoints, ckpt_bytes,
                               strprintf("ckpt seg%d", segment), ph, {prev_compute});
        // The block input is written into the checkpoint by the previous op.
        if (ac.cpu_checkpointing) {
          const int cbuf = alloc(Tier::kCpu, MemCategory::kActivationCheckpoints, ckpt_bytes,
                                 strprintf("ckpt seg%d cpu", segment), ph, {prev_compute});
          ckpt_copy[segment] =
              copy(Tier::kGpu, Tier::kCpu, ckpt_bytes, strprintf("gpu->cpu ckpt seg%d", segment), ph,
                   {prev_compute}, {gbuf, cbuf});
          s_.tasks[ckpt_copy[segment]].layer = op.layer;
          free_buffer(gbuf, ph);
          ckpt_cpu[segment] = cbuf;
        } else {
          ckpt_gpu[segment] = gbuf;
        }
      } else if (ph == Phase::kRecompute && ac.cpu_checkpointing) {
        // Brought back while the previous (later) segment's backward still runs.
        const int gbuf = alloc(Tier::kGpu, MemCategory::kActivationCheckpoints, ckpt_bytes,
                               strprintf("ckpt seg%d back", segment), ph,
                               {trigger(i, 2) >= 0 ? compute_of_event_[trigger(i, 2)] : -1});
        const int c = copy(Tier::kCpu, Tier::kGpu, ckpt_bytes, strprintf("cpu->gpu ckpt seg%d", segment), ph,
                           {ckpt_copy[segment]}, {ckpt_cpu[segment], gbuf});
        s_.tasks[c].layer = op.layer;
        free_buffer(ckpt_cpu[segment], ph);
        ckpt_gpu[segment] = gbuf;
        deps.push_back(c);
      }
      if (ph == Phase::kRecompute) uses.push_back(ckpt_gpu[segment]);
    }

    // Parameters.
    std::vector<int> grad_bufs;
    for (int p : op.params) {
      if (partitioned(p)) {
        if (auto it = fetch_of_.find({i, p}); it != fetch_of_.end()) {
          gathered_[p] = fetches_[it->second].gathered;
          gathered_ready_[p] = fetches_[it->second].ready;
        }
        MW_CHECK(gathered_[p] >= 0, "parameter " + g_.params[p].name + " not gathered for " + op.name);
        deps.push_back(gathered_ready_[p]);
        uses.push_back(gathered_[p]);
      } else {
        uses.push_back(resident_buf_[p]);
      }
      if (ph == Phase::kBackward) {
        // A transient gradient buffer when the gradient is reduce-scattered or offloaded from it;
        // otherwise backward accumulates straight into the persistent gradient.
        const bool scattered = partitioned(p) || stage_ == 2;
        if (scattered && (dp_of(p) > 1 || opt_tier_of(p) != Tier::kGpu)) {
          // A parameter used again later in backward (the tied embedding) keeps accumulating in one buffer.
          const int gb =
              pending_grad_[p] >= 0
                  ? pending_grad_[p]
                  : mark(alloc(Tier::kGpu,
                               stage_ == 3 ? MemCategory::kModelStateWorking : MemCategory::kReduceBuckets,
                               gb_ * g_.params[p].elements, g_.params[p].name + " grad", ph, {prev_compute}),
                         p, BufferRole::kGrad);
          pending_grad_[p] = -1;
          grad_bufs.push_back(gb);
          uses.push_back(gb);
        } else {
          MW_CHECK(grad_buf_[p] >= 0, "no gradient buffer for " + g_.params[p].name);
          grad_bufs.push_back(-1);
          uses.push_back(grad_buf_[p]);
        }
      }
    }

    // Activations.
    int out_buf = -1;
    if (ph == Phase::kBackward) {
      if (op.kind == OpKind::kLoss) {
        logits_grad =
            alloc(Tier::kGpu, MemCategory::kLogits, op.out_bytes, "logits grad", ph, {prev_compute});
        uses.push_back(logits_grad);
      } else if (op.out_bytes > 0) {
        out_buf = alloc(Tier::kGpu, MemCategory::kActivationWorking, op.out_bytes, op.name + " dgrad", ph,
                        {prev_compute});
        uses.push_back(out_buf);
      }
      if (saved.count(op.id)) uses.push_back(saved[op.id]);
    } else if (op.kind != OpKind::kLoss) {
      const bool keep = op.saved_bytes > 0 && (!ac.enabled || !in_block || ph == Phase::kRecompute);
      if (keep && ph == Phase::kForward && !in_block) {
        saved[op.id] = alloc(
            Tier::kGpu, op.kind == OpKind::kLinear ? MemCategory::kLogits : MemCategory::kActivationWorking,
            op.saved_bytes, op.name + " saved", ph, {prev_compute});
        uses.push_back(saved[op.id]);
      } else if (keep) {
        saved[op.id] =
            alloc(Tier::kGpu, ac.enabled ? MemCategory::kActivationWorking : MemCategory::kActivations,
                  op.saved_bytes, op.name + " saved", ph, {prev_compute});
        uses.push_back(saved[op.id]);
      }
      if (op.out_bytes > 0 && !keep) {
        out_buf = alloc(Tier::kGpu, MemCategory::kActivationWorking, op.out_bytes, op.name + " out", ph,
                        {prev_compute});
        uses.push_back(out_buf);
      }
    } else if (ph == Phase::kForward) {
      uses.push_back(saved.count(op.id - 1) ? saved[op.id - 1] : -1);
      uses.erase(std::remove(uses.begin(), uses.end(), -1), uses.end());
    }
    if (prev_out >= 0) uses.push_back(prev_out);  // this op reads the previous op's output

    // The op itself.
    int task = -1;
    if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kAllToAll) {
      task =
          collective(op.kind == OpKind::kAllReduce ? CollectiveKind::kAllReduce : CollectiveKind::kAllToAll,
                     op.group, op.out_bytes, tag + op.name, ph, deps, uses);
    } else {
      Task t;
      t.kind = TaskKind::kCompute;
      t.resource = Resource::kCompute;
      t.phase = ph;
      t.name = tag + op.name;
      t.op = op.id;
      t.flops = (ph == Phase::kBackward ? op.bwd_flops : op.fwd_flops) * op.exec_fraction;
      t.bytes = ph == Phase::kBackward ? op.bwd_mem_bytes : op.fwd_mem_bytes;
      t.deps = deps;
      t.uses = uses;
      task = add_task(std::move(t));
    }
    compute_of_event_[i] = task;
    prev_compute = task;
    if (prev_out >= 0) free_buffer(prev_out, ph);
    prev_out = out_buf;

    // After the op: release what it no longer needs.
    if (ph == Phase::kBackward) {
      if (saved.count(op.id)) {
        free_buffer(saved[op.id], ph);
        saved.erase(op.id);
      }
      if (op.kind == OpKind::kLinear && op.layer >= nl && logits_grad >= 0) {
        free_buffer(logits_grad, ph);
        logits_grad = -1;
      }
      if (in_block && op.block_start && op.layer % ci == 0 && ckpt_gpu.count(segment)) {
        free_buffer(ckpt_gpu[segment], ph);
        ckpt_gpu.erase(segment);
      }
      for (size_t k = 0; k < op.params.size(); ++k) {
        const int p = op.params[k];
        if (last_use_[p] == static_cast<int>(i)) {
          gradient(p, ph, task, grad_bufs[k]);
          if (!overlap) pending_reduce.push_back(grad_done_[p]);
        } else if (grad_bufs[k] >= 0) {
          // A tied parameter used again later in backward: this use's gradient is reduce-scattered now and
          // the later ones accumulate into the same shard (with one rank, into the same whole gradient).
          if (dp_of(p) > 1) {
            const GraphParam& gp = g_.params[p];
            if (kept_shard_[p] < 0) {
              kept_shard_[p] =
                  opt_tier_of(p) == Tier::kGpu && grad_buf_[p] >= 0
                      ? grad_buf_[p]
                      : mark(alloc(Tier::kGpu, MemCategory::kReduceBuckets, gb_ * gp.elements / dp_of(p),
                                   gp.name + " grad shard", ph, {task}),
                             p, BufferRole::kGradShard);
            }
            kept_reduce_[p] =
                of_param(param_collective(CollectiveKind::kReduceScatter, p, gb_ * gp.elements,
                                          "reducescatter grad " + gp.name, ph, {task, kept_reduce_[p]},
                                          {grad_bufs[k], kept_shard_[p]}),
                         p);
            free_buffer(grad_bufs[k], ph);
          } else {
            pending_grad_[p] = grad_bufs[k];
          }
        }
      }
    }
    // Parameters: keep when reused within the reuse distance, otherwise release.
    for (int p : op.params) {
      if (!partitioned(p) || gathered_[p] < 0) continue;
      if (keep_after_[{i, p}]) continue;
      if (gathered_[p] != shard_buf_[p]) free_buffer(gathered_[p], ph);
      gathered_[p] = -1;
    }
  }
  if (prev_out >= 0) free_buffer(prev_out, Phase::kBackward);
  for (auto& [op, buf] : saved) free_buffer(buf, Phase::kBackward);
  if (logits_grad >= 0) free_buffer(logits_grad, Phase::kBackward);
}

// Reduce (and offload) the gradient of parameter p after its last backward use. `grad_buf` is the
// transient full gradient, or -1 when backward accumulated into the persistent gradient grad_buf_[p].
void Planner::gradient(int p, Phase ph, int compute_task, int grad_buf) {
  const GraphParam& gp = g_.params[p];
  const double full = gb_ * gp.elements;
  const std::string& nm = gp.name;
  int last = compute_task;
  int shard_buf = grad_buf_[p];
  double shard = full;
  // Stages 0 and 1 (and stage 3's persistent parameters) sum whole gradients over the micro-batches and
  // reduce (and offload) them once per step.
  const bool at_boundary = grad_buf < 0 && stage_ != 2;
  const std::size_t first_task = s_.tasks.size();
  if (grad_buf < 0) {
    // Replicated gradient (stages 0-1, persistent small params): all-reduced in place.
    if (dp_of(p) > 1) {
      last = of_param(param_collective(CollectiveKind::kAllReduce, p, full, "allreduce grad " + nm, ph,
                                       {last}, {grad_buf_[p]}),
                      p);
    }
    if (stage_ >= 1) shard = full / dp_of(p);
  } else {
    shard_buf = grad_buf;
    if (dp_of(p) > 1) {
      shard = full / dp_of(p);
      shard_buf = opt_tier_of(p) == Tier::kGpu ? grad_buf_[p]
                  : kept_shard_[p] >= 0        ? kept_shard_[p]
                                               : mark(alloc(Tier::kGpu, MemCategory::kReduceBuckets, shard,
                                                            nm + " grad shard", ph, {compute_task}),
                                                      p, BufferRole::kGradShard);
      last = of_param(param_collective(CollectiveKind::kReduceScatter, p, full, "reducescatter grad " + nm,
                                       ph, {last, kept_reduce_[p]}, {grad_buf, shard_buf}),
                      p);
      free_buffer(grad_buf, ph);
    }
  }
  if (opt_tier_of(p) == Tier::kGpu) {
    // The optimizer steps this gradient on the GPU: it stays there.
  } else if (grad_tier_ == Tier::kCpu) {
    // Into the fp32 gradients in CPU memory (summed there over micro-batches).
    last = of_param(
        copy(Tier::kGpu, Tier::kCpu, shard, "gpu->cpu grad " + nm, ph, {last}, {shard_buf, grads32_buf_}), p);
  } else if (opt_tier_ == Tier::kNvme) {
    const double fp32 = 4 * shard / gb_;
    const int pinned = mark(slot(opt_pool_, Tier::kCpu, fp32, nm + " grad swap-out", ph, {last}), p,
                            BufferRole::kGradSwapOut);
    std::vector<int> before_copy = {last};
    if (run_.accumulation_steps() > 1 && !at_boundary) {
      // Gradient accumulation: after the first micro-batch the sum so far is read back into the slot, the
      // shard is added to it and the sum written out again.
      const int sum = of_param(
          copy(Tier::kNvme, Tier::kCpu, fp32, "nvme->cpu grad sum " + nm, ph, {}, {pinned, opt_states_buf_}),
          p);
      s_.tasks[sum].later_micro_batches = true;
      before_copy.push_back(sum);
    }
    const int c = of_param(
        copy(Tier::kGpu, Tier::kCpu, shard, "gpu->cpu grad " + nm, ph, before_copy, {shard_buf, pinned}), p);
    last = of_param(
        copy(Tier::kCpu, Tier::kNvme, fp32, "cpu->nvme grad " + nm, ph, {c}, {pinned, opt_states_buf_}), p);
    free_buffer(pinned, ph);
  }
  if (shard_buf >= 0 && shard_buf != grad_buf_[p] && !freed_[shard_buf]) free_buffer(shard_buf, ph);
  if (at_boundary) {
    for (std::size_t k = first_task; k < s_.tasks.size(); ++k) {
      Task& t = s_.tasks[k];
      if (t.kind == TaskKind::kCollective || t.kind == TaskKind::kCopy || t.kind == TaskKind::kNvmeWrite)
        t.last_micro_batch = true;
    }
  }
  grad_done_[p] = last;
}

void Planner::optimizer() {
  const ZeroConfig& z = run_.zero;
  const Phase ph = Phase::kOptimizer;
  const int groups = opt_groups_;
  std::vector<int> join;  // every gradient task, sorted (add_task then takes it as it is)
  for (int t : grad_done_) {
    if (t >= 0) join.push_back(t);
  }
  std::sort(join.begin(), join.end());
  // `sorted` with x added in order (a copy of the join with one more task stays sorted).
  const auto with = [](std::vector<int> sorted, int x) {
    sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), x), x);
    return sorted;
  };
  // Delayed parameter update (steady state): the step uses the previous step's gradients, so it does not
  // wait for this one's backward; only the updated parameters must wait until backward no longer reads the
  // current ones.
  const bool delayed = run_.memwall.delayed_parameter_update;
  // Per sub-group, the gradient tasks of the parameters its slice of the flat shard covers (parameters in
  // graph order, each rank holding 1/dp of each): a parameter's new values may go to the GPU once backward
  // is done with it.
  std::vector<std::vector<int>> backward_done(groups);
  // Per sub-group, the elements of its slice whose 16-bit copies every rank keeps whole (stages 1 and 2: all
  // of them; stage 3: the persistent small parameters), gathered from every rank's slice after the step, and
  // those of them that are experts' (expert parallelism: gathered over an expert's data_parallel /
  // expert_parallel ranks).
  std::vector<double> whole_elements(groups, 0.0), expert_elements(groups, 0.0);
  double at = 0;
  for (size_t p = 0; p < g_.params.size(); ++p) {
    const double n = shard_elements(p);
    const int lo = std::min(groups - 1, static_cast<int>(at / opt_sub_));
    const int hi = std::min(groups - 1, static_cast<int>(std::max(at, at + n - 1) / opt_sub_));
    for (int g = lo; g <= hi; ++g) {
      if (delayed && grad_done_[p] >= 0) backward_done[g].push_back(grad_done_[p]);
      if (partitioned(static_cast<int>(p))) continue;
      // The part of [at, at + n) in the sub-group (the last one open-ended).
      const double part =
          (g + 1 < groups ? std::min(at + n, (g + 1) * opt_sub_) : at + n) - std::max(at, g * opt_sub_);
      whole_elements[g] += part;
      if (g_.params[p].expert_parallel > 1) expert_elements[g] += part;
    }
    at += n;
  }
  if (delayed) join.clear();
  // State traffic per element: read p, g, m, v (fp32), write p, m, v (fp32) and the 16-bit copy.
  const double traffic = mixed_ ? 28 + b_ : 20;
  // Every rank's 16-bit slices of whole copies (`whole16` bytes per rank, `experts16` of them experts'),
  // all-gathered once `deps` are done: the dense ones over all ranks, the experts' over their own.
  const auto gather_whole = [&](double whole16, double experts16, const std::string& what,
                                const std::vector<int>& deps) {
    if (dp_ <= 1) return;
    if (const double dense16 = whole16 - experts16; dense16 > 0)
      collective(CollectiveKind::kAllGather, dp_, dense16 * dp_, "allgather " + what, ph, deps, {});
    if (const int edp = dp_ / run_.memwall.expert_parallel; experts16 > 0 && edp > 1) {
      const int t = collective(CollectiveKind::kAllGather, edp, experts16 * edp, "allgather expert " + what,
                               ph, deps, {});
      strided_group(t, run_.memwall.expert_parallel);
    }
  };
  // Stage 3's persistent parameters: what each sub-group's step leaves for their all-gather, and its bytes.
  std::vector<int> persistent_ready;
  double persistent16 = 0, persistent_experts16 = 0;
  const Tier param_home = stage_ == 3 ? tier_of(z.offload_param.device) : Tier::kGpu;
  const int sets = opt_sets_;
  std::vector<int> step(groups, -1), write(groups, -1), read(groups, -1), freed(groups, -1);
  // Gradient clipping: the global norm of the gradients before the first sub-group's step, on the
  // optimizer's resource: a pass over this rank's fp32 gradients where they wait (none where they went to
  // NVMe: summed as they were written) and an exchange of one number between the ranks (not modelled).
  int norm = -1;
  if (run_.gradient_clipping > 0) {
    Task t;
    t.kind = TaskKind::kOptimizerStep;
    t.resource = opt_tier_ == Tier::kGpu ? Resource::kCompute : Resource::kCpuOptimizer;
    t.phase = ph;
    t.name = "gradient norm";
    // (Twin-Flow: the GPU sub-groups' share on the GPU is not timed.)
    t.bytes = opt_tier_ == Tier::kNvme && grad_tier_ == Tier::kNvme ? 0 : 4 * (opt_total_ - gpu_state_elems_);
    t.dst = opt_tier_ == Tier::kNvme ? Tier::kCpu : opt_tier_;
    t.deps = join;
    if (grads32_buf_ >= 0) t.uses = {grads32_buf_};
    norm = add_task(std::move(t));
  }
  for (int g = 0; g < groups; ++g) {
    const double n = group_elements(g);
    const bool on_gpu = g < gpu_groups_;  // Twin-Flow: a sub-group the GPU steps
    const Tier tier = group_tier(g);
    const int states_buf = on_gpu ? gpu_states_buf_ : opt_states_buf_;
    const std::string nm = strprintf("subgroup %d/%d", g + 1, groups);
    const size_t first_task = s_.tasks.size();
    // (After the first, each sub-group's step follows the previous one, which followed every gradient: not
    // every gradient task again, which would make a many-sub-group step of a large model quadratic.)
    std::vector<int> step_deps = g == 0 ? join : std::vector<int>{};
    if (g > 0) step_deps.push_back(step[g - 1]);
    if (norm >= 0) step_deps.push_back(norm);
    int swap = -1;
    if (tier == Tier::kNvme) {
      // The fp32 states do not depend on this iteration's gradients: with optimizer_prefetch they are read
      // as soon as a slot is free (during backward); the gradients after the last one is written.
      if (opt_states_[g] < 0) {
        const bool early = run_.memwall.optimizer_prefetch;
        std::vector<int> alloc_deps = early ? std::vector<int>{} : join;
        if (g >= sets) alloc_deps = with(std::move(alloc_deps), freed[g - sets]);
        std::vector<int> read_deps;
        if (g > 0) {
          read_deps.push_back(z.offload_optimizer.pipeline_read ? opt_states_[g - 1] : step[g - 1]);
          if (!z.offload_optimizer.pipeline_write) read_deps.push_back(write[g - 1]);
        }
        emit_states_read(g, alloc_deps, read_deps);
      }
      swap = opt_swap_[g];
      const int states = opt_states_[g];
      if (grad_tier_ == Tier::kNvme) {
        const std::vector<int> grad_deps = with(join, states);
        read[g] = copy(Tier::kNvme, Tier::kCpu, 4 * n, "nvme->cpu grads " + nm, ph, grad_deps,
                       {swap, opt_states_buf_});
        step_deps.push_back(read[g]);
      } else {  // the step reads the gradients where they are, in CPU memory
        step_deps.push_back(states);
      }
      if (g > 0 && !z.offload_optimizer.pipeline_write) step_deps.push_back(write[g - 1]);
    }
    Task t;
    t.kind = TaskKind::kOptimizerStep;
    t.resource = tier == Tier::kGpu ? Resource::kCompute : Resource::kCpuOptimizer;
    t.phase = ph;
    t.name = "adam " + nm + (on_gpu ? " (GPU)" : "");
    t.elements = n;
    t.bytes = traffic * n;
    t.dst = tier == Tier::kNvme ? Tier::kCpu : tier;
    t.deps = step_deps;
    t.uses = {states_buf};
    if (swap >= 0) t.uses.push_back(swap);
    if (!on_gpu && grads32_buf_ >= 0 && grads32_buf_ != opt_states_buf_) t.uses.push_back(grads32_buf_);
    step[g] = add_task(std::move(t));
    int last = step[g];
    if (tier == Tier::kNvme) {
      write[g] = copy(Tier::kCpu, Tier::kNvme, 12 * n, "cpu->nvme optimizer " + nm, ph, {step[g]},
                      {swap, opt_states_buf_});
      last = write[g];
    }
    // The updated 16-bit parameters go back to where parameters live. Stage 3's persistent parameters live
    // whole on the GPU whatever the others' home: their slices go there too, to be gathered like stage 1's.
    const double p16 = b_ * n, whole16 = stage_ == 3 ? b_ * whole_elements[g] : p16;
    const Tier staged = tier == Tier::kNvme ? Tier::kCpu : tier;
    const std::vector<int> src = swap >= 0 ? std::vector<int>{swap} : std::vector<int>{opt_states_buf_};
    std::vector<int> to_gpu_deps = {step[g]};
    if (delayed) to_gpu_deps.insert(to_gpu_deps.end(), backward_done[g].begin(), backward_done[g].end());
    if (tier != Tier::kGpu) {
      if (param_home == Tier::kGpu) {
        last = copy(staged, Tier::kGpu, p16, "cpu->gpu params " + nm, ph, to_gpu_deps, src);
      } else if (param_home == Tier::kNvme) {
        const int w = copy(Tier::kCpu, Tier::kNvme, p16, "cpu->nvme params " + nm, ph, {step[g]}, src);
        if (write[g] >= 0) last = w;
      }
    }
    int after_step = last;
    if (stage_ == 3 && whole16 > 0 && tier != Tier::kGpu && param_home != Tier::kGpu)
      after_step =
          copy(staged, Tier::kGpu, whole16, "cpu->gpu persistent params " + nm, ph, to_gpu_deps, src);
    if (stage_ == 3 && whole16 > 0) {
      // Stage 3 gathers the persistent parameters once, after the last sub-group (DeepSpeed's _post_step).
      persistent_ready.push_back(after_step);
      persistent16 += whole16;
      persistent_experts16 += b_ * expert_elements[g];
    } else if (stage_ >= 1 && whole16 > 0) {
      gather_whole(whole16, b_ * expert_elements[g], "params " + nm, {after_step});
    }
    if (swap >= 0) freed[g] = free_buffer(swap, ph);
    for (size_t k = first_task; k < s_.tasks.size(); ++k) s_.tasks[k].subgroup = g;
  }
  // One all-gather of every sub-group's persistent slices (sub-group -1: all of them).
  if (persistent16 > 0)
    gather_whole(persistent16, persistent_experts16, "persistent params", persistent_ready);
}

void Planner::size_pools() {
  std::map<int, double> live, peak;
  for (const Task& t : s_.tasks) {
    if (t.kind != TaskKind::kAlloc && t.kind != TaskKind::kFree) continue;
    const Buffer& b = s_.buffers[t.buffer];
    if (b.pool < 0) continue;
    live[b.pool] += t.kind == TaskKind::kAlloc ? b.bytes : -b.bytes;
    peak[b.pool] = std::max(peak[b.pool], live[b.pool]);
  }
  for (const auto& [pool, bytes] : peak) {
    Buffer& b = s_.buffers[pool];
    if (bytes <= b.bytes) continue;
    s_.notes.push_back(strprintf("%s grown from %s to %s: the slots it holds at once", b.name.c_str(),
                                 format_bytes(b.bytes).c_str(), format_bytes(bytes).c_str()));
    b.bytes = bytes;
  }
}

void Planner::emit_states_read(int g, std::vector<int> alloc_deps, std::vector<int> read_deps) {
  const double n = group_elements(g);
  const std::string nm = strprintf("subgroup %d/%d", g + 1, opt_groups_);
  const Phase ph = Phase::kOptimizer;
  opt_swap_[g] =
      mark(slot(opt_pool_, Tier::kCpu, opt_slot_bytes(n), "optimizer swap " + nm, ph, std::move(alloc_deps)),
           -1, BufferRole::kOptimizerSwap);
  opt_states_[g] = copy(Tier::kNvme, Tier::kCpu, 12 * n, "nvme->cpu optimizer " + nm, ph,
                        std::move(read_deps), {opt_swap_[g], opt_states_buf_});
  s_.tasks[alloc_task_[opt_swap_[g]]].subgroup = g;
  s_.tasks[opt_states_[g]].subgroup = g;
}

}  // namespace

Schedule plan_graph(const ModelGraph& graph, const RunConfig& run, const HardwareSpec& hw) {
  Planner p(graph, run, hw);
  return p.plan();
}

}  // namespace memwall

namespace memwall {

namespace {

// Largest categories at a tier's peak: "model_state_working 9.77 GiB, activation_checkpoints 2.00 GiB".
std::string top_categories(const MemoryTimeline& tl, Tier tier) {
  std::vector<std::pair<double, int>> cats;
  const auto& row = tl.peak_by_category[static_cast<int>(tier)];
  for (size_t c = 0; c < row.size(); ++c) {
    if (row[c] > 0) cats.emplace_back(row[c], static_cast<int>(c));
  }
  std::sort(cats.rbegin(), cats.rend());
  std::string out;
  for (size_t i = 0; i < cats.size() && i < 3; ++i) {
    out += (i ? ", " : "") + std::string(category_name(static_cast<MemCategory>(cats[i].second))) + " " +
           format_bytes(cats[i].first);
  }
  return out;
}

}  // namespace

GraphOptions graph_options(const RunConfig& run) {
  GraphOptions opt;
  opt.micro_batch = run.micro_batch_per_gpu.value;
  opt.sequence_length = run.memwall.sequence_length;
  opt.tiling = run.memwall.tiling_factor;
  opt.model_parallel = run.memwall.model_parallel;
  opt.element_bytes = run.param_bytes();
  opt.flash_attention = run.memwall.attention == AttentionKernel::kFlash;
  opt.expert_parallel = run.memwall.expert_parallel;
  opt.expert_load = run.memwall.expert_load;
  return opt;
}

Result<Schedule> plan_iteration(const ModelSpec& model, const RunConfig& run_in, const HardwareSpec& hw) {
  if (run_in.memwall.pipeline_parallel != 1) {
    return Status::invalid_argument(
        "run '" + run_in.name +
        "': key 'memwall.pipeline_parallel': " + std::to_string(run_in.memwall.pipeline_parallel) +
        ": memwall's schedule has no pipeline stages (predict's memory model has); "
        "allowed: 1 for plan, simulate, sweep and train");
  }
  const ModelGraph graph = build_model_graph(model, graph_options(run_in));
  RunConfig run = run_in;
  std::vector<std::string> notes;
  for (;;) {
    Schedule s = plan_graph(graph, run, hw);
    // An executor that holds the activations outside the tier (memwall train on a GPU) has checked them
    // itself; the tier must hold the rest.
    const bool outside = run.memwall.gpu_activations_outside_tier;
    Result<MemoryTimeline> tl =
        outside ? replay_memory(s, [](const Buffer& b) { return !held_outside_gpu_tier(b); })
                : replay_memory(s);
    if (!tl.is_ok())
      return Status::internal("planner produced an inconsistent schedule: " + tl.status().message());
    const double rpn = s.ranks_per_node;
    const struct {
      Tier tier;
      double used;
      double capacity;
      const char* scope;
    } tiers[] = {{Tier::kGpu, tl->peak_bytes[0], hw.gpu.memory_bytes, "per GPU"},
                 {Tier::kCpu, tl->peak_bytes[1] * rpn, hw.cpu.memory_bytes, "per node"},
                 {Tier::kNvme, tl->peak_bytes[2] * rpn, hw.nvme.capacity_bytes(), "per node"}};
    const auto* over =
        std::find_if(std::begin(tiers), std::end(tiers), [](const auto& t) { return t.used > t.capacity; });
    if (over == std::end(tiers)) {
      s.notes.insert(s.notes.begin(), notes.begin(), notes.end());
      return s;
    }
    ZeroConfig& z = run.zero;
    // An NVMe optimizer's gradients kept in CPU memory ("auto") go to NVMe when the CPU cannot hold them.
    if (over->tier == Tier::kCpu && z.offload_optimizer.device == OffloadDevice::kNvme &&
        run.memwall.optimizer_gradients == OptimizerGradients::kAuto) {
      run.memwall.optimizer_gradients = OptimizerGradients::kNvme;
      notes.push_back(strprintf(
          "fp32 gradients on NVMe (memwall.optimizer_gradients auto): CPU memory is %s short of keeping them",
          format_bytes(over->used - over->capacity).c_str()));
      continue;
    }
    // Shrink the prefetch budget first: it is the only part of the plan that is optional. Not where the
    // GPU's persistent buffers alone (the model states and the runtime's reserve setup() allocates, which no
    // prefetch budget changes) are more than it has: each try is a plan.
    if (over->tier == Tier::kGpu && run.memwall.prefetch && tl->persistent_bytes[0] <= over->capacity) {
      if (z.prefetch_bucket_size.value >= 1e6) {
        z.prefetch_bucket_size.value = std::floor(z.prefetch_bucket_size.value / 4);
        notes.push_back(strprintf("GPU peak over capacity: prefetch bucket shrunk to %s elements",
                                  format_count(z.prefetch_bucket_size.value).c_str()));
      } else {
        run.memwall.prefetch = false;
        notes.push_back("GPU peak over capacity: prefetching disabled");
      }
      continue;
    }
    const char* name = over->tier != Tier::kGpu ? (over->tier == Tier::kCpu ? "CPU" : "NVMe")
                       : outside                ? "GPU (besides the activations)"
                                                : "GPU";
    return Status::out_of_memory(strprintf(
        "%s: the schedule needs %s %s at its peak, the hardware has %s (short by "
        "%s); largest at the peak: %s",
        name, format_bytes(over->used).c_str(), over->scope, format_bytes(over->capacity).c_str(),
        format_bytes(over->used - over->capacity).c_str(), top_categories(*tl, over->tier).c_str()));
  }
}

}  // namespace memwall
