// Writes a run of a Schedule (its task timings from any executor) as trace events: one track per resource
// of the rank, spans with bytes/FLOPs, memory counters per tier by category from the alloc/free times,
// and bandwidth counters per link.
#pragma once

#include "exec/executor.h"
#include "trace/trace.h"

namespace memwall {

void export_run_trace(const Schedule& s, const RunResult& run, int pid, trace::TraceWriter& w);

}  // namespace memwall
