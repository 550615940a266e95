"""memwall: ZeRO-Infinity's memory, bandwidth and scheduling models, and memwall traces, from Python.

Functions (docs/python.md): load, predict, efficiency, max_model, plan, simulate, replay, read_trace; with
pandas installed, spans_frame and counters_frame turn a trace into DataFrames.
"""
from ._memwall import (__version__, efficiency, load, max_model, plan, predict, read_trace,  # noqa: F401
                       replay, scenarios_dir, simulate)


def spans_frame(trace):
    """The spans of a trace (a path or read_trace's result) as a pandas DataFrame, one row per task."""
    import pandas as pd
    t = read_trace(trace) if isinstance(trace, str) else trace
    df = pd.DataFrame(t["spans"])
    df["resource"] = [t["threads"].get((p, r), str(r)) for p, r in zip(df["pid"], df["tid"])]
    return df


def counters_frame(trace, name):
    """One counter track ("memory gpu", "bandwidth h2d", ...) as a DataFrame indexed by time (us), a column per
    value, rank 0."""
    import pandas as pd
    t = read_trace(trace) if isinstance(trace, str) else trace
    rows = [dict(c["values"], ts_us=c["ts_us"]) for c in t["counters"] if c["name"] == name and c["pid"] == 0]
    return pd.DataFrame(rows).set_index("ts_us").sort_index().ffill().fillna(0.0) if rows else pd.DataFrame()
