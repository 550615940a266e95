"""The Python module against the CLI: the same answers for the same inputs, traces as arrays, errors."""
import json
import os
import subprocess
import tempfile
import unittest

import memwall

MEMWALL = os.environ.get("MEMWALL_BINARY", "memwall")


def cli(*args):
    out = subprocess.run([MEMWALL, *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


class ModuleTest(unittest.TestCase):
    def test_predict_matches_the_cli(self):
        got = memwall.predict(hardware="dgx2", model="gpt3-175b", run="zero-infinity-cpu")
        want = cli("predict", "--hardware", "dgx2", "--model", "gpt3-175b", "--run", "zero-infinity-cpu")["memory"]
        self.assertEqual(got["fits"], want["fits"])
        for tier in ("gpu", "cpu", "nvme"):
            self.assertAlmostEqual(got["tiers"][tier]["used_bytes"], want["tiers"][tier]["used_bytes"], delta=1.0)
        self.assertIn("params16", got["tiers"]["cpu"]["bytes_per_rank_by_category"])
        self.assertEqual(got["model"], "gpt3-175b")
        self.assertEqual(got["deepspeed_estimate"], want["deepspeed_estimate"])
        self.assertTrue(got["deepspeed_estimate"]["available"])
        self.assertIsNone(got["twin_flow"])
        twin = {"zero_optimization.offload_param.device": "none", "zero_optimization.offload_optimizer.ratio": 0.5,
                "zero_optimization.sub_group_size": 1e7}
        got = memwall.predict(hardware="dgx2", model="gpt2-xl", run="zero-infinity-cpu", set=twin)
        want = cli("predict", "--model", "gpt2-xl", "--run", "zero-infinity-cpu", "--set", json.dumps(twin))
        self.assertEqual(got["twin_flow"], want["memory"]["twin_flow"])
        self.assertEqual(got["twin_flow"]["gpu_sub_groups"], 5)

    def test_largest_models_follow_the_paper_ordering(self):
        rows = {r["strategy"]: r for r in memwall.max_model(hardware="dgx2", model="paper-1t")}
        self.assertEqual(len(rows), 7)
        self.assertGreater(rows["zero-infinity-nvme"]["params"], rows["zero-infinity-cpu"]["params"])
        self.assertGreater(rows["zero-infinity-cpu"]["params"], rows["zero-3"]["params"])
        self.assertGreater(rows["zero-3"]["params"], rows["data-parallel"]["params"])
        self.assertEqual(rows["zero-infinity-nvme"]["limiting_tier"], "nvme")

    def test_plan_writes_a_trace_the_reader_reads(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json.gz")
            r = memwall.plan(model="gpt2", run="zero-infinity-cpu", trace=path)
            self.assertGreater(r["iteration_s"], 0)
            phases = r["peak_bytes_per_rank_by_phase"]
            self.assertEqual(max(p["gpu"] for p in phases.values()), r["peak_bytes_per_rank"]["gpu"])
            t = memwall.read_trace(path)
        self.assertEqual(t["header"]["command"], "plan")
        self.assertEqual(t["header"]["hardware"]["name"], "dgx2")
        n = len(t["spans"]["ts_us"])
        self.assertGreater(n, 100)
        self.assertEqual(len(t["spans"]["name"]), n)
        self.assertGreater(float(t["spans"]["dur_us"].sum()), 0.0)
        self.assertTrue(any(c["name"] == "memory gpu" for c in t["counters"]))

    def test_simulate_runs_simgrid(self):
        r = memwall.simulate(model="gpt2", run="zero-infinity-cpu", set={"memwall.data_parallel": 1})
        self.assertEqual(r["executor"], "simgrid")
        self.assertGreater(r["tflops_per_gpu"], 0)

    def test_gradient_accumulation_matches_the_cli(self):
        args = dict(model="gpt2", run="zero-infinity-cpu", set={"gradient_accumulation_steps": 4})
        for fn, fast in ((memwall.plan, ["--fast"]), (memwall.simulate, [])):
            got = fn(**args)
            want = cli("simulate", "--model", "gpt2", "--run", "zero-infinity-cpu", "--set",
                       '{"gradient_accumulation_steps": 4}', *fast)
            self.assertEqual(got["gradient_accumulation_steps"], 4)
            self.assertAlmostEqual(got["iteration_s"], want["iteration_s"], delta=1e-6 * want["iteration_s"])
            self.assertAlmostEqual(got["micro_step_s"], want["micro_step_s"], delta=1e-6 * want["micro_step_s"])
            one = fn(model="gpt2", run="zero-infinity-cpu")
            self.assertAlmostEqual(got["flops_per_iteration"], 4 * one["flops_per_iteration"], delta=1.0)
            self.assertGreater(got["tflops_per_gpu"], one["tflops_per_gpu"])  # the optimizer step amortised

    def test_what_if_matches_the_cli(self):
        got = memwall.plan(model="paper-1t", what_if=["nvme=2", "pcie=1.5"])
        want = cli("simulate", "--model", "paper-1t", "--fast", "--what-if", "nvme=2", "--what-if", "pcie=1.5")
        self.assertAlmostEqual(got["iteration_s"], want["what_if"]["iteration_s"],
                               delta=1e-6 * got["iteration_s"])
        self.assertLess(got["iteration_s"], memwall.plan(model="paper-1t")["iteration_s"])
        with self.assertRaises(ValueError) as e:
            memwall.plan(what_if=["disk=2"])
        self.assertIn("allowed: pcie", str(e.exception))

    def test_straggler_matches_the_cli(self):
        got = memwall.plan(model="gpt2", run="zero-3", straggler="5:1.5")["straggler"]
        want = cli("simulate", "--model", "gpt2", "--run", "zero-3", "--fast", "--straggler", "5:1.5")["straggler"]
        self.assertAlmostEqual(got["iteration_s"], want["iteration_s"], delta=1e-9 * want["iteration_s"])
        self.assertEqual(got["rank"], 5)
        self.assertGreater(got["slowdown"], 1.3)
        self.assertEqual(len(got["collective_wait_s"]), 16)
        with self.assertRaises(ValueError) as e:
            memwall.plan(model="gpt2", run="zero-3", straggler="16:2")
        self.assertIn("rank 16 is not on the node", str(e.exception))

    def test_replay_matches_the_cli(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            memwall.plan(model="gpt2", run="zero-infinity-cpu", trace=path)
            got = memwall.replay(path, fast=True, what_if=["pcie=2"])
            want = cli("replay", path, "--fast", "--what-if", "pcie=2")
            self.assertEqual(len(memwall.replay([path, path], fast=True)["replay"]), 2)
            with self.assertRaises(ValueError) as e:
                memwall.replay(os.path.join(d, "missing.json"))
            self.assertIn("missing.json", str(e.exception))
        row, cli_row = got["replay"][0], want["replay"][0]
        self.assertEqual(row["hardware"], "dgx2")  # the trace's own
        for key in ("replayed_iteration_s", "measured_iteration_s", "what_if_iteration_s"):
            self.assertAlmostEqual(row[key], cli_row[key], delta=1e-9 * cli_row[key])
        # Replaying the plan's own reference run on its hardware gives back its iteration time.
        self.assertAlmostEqual(row["error"], 0.0, delta=0.01)
        self.assertGreaterEqual(row["what_if_speedup"], 1.0)

    def test_bad_input_raises_naming_it(self):
        with self.assertRaises(ValueError) as e:
            memwall.predict(set={"zero_optimization.stage": 7})
        self.assertIn("stage", str(e.exception))
        with self.assertRaises(ValueError):
            memwall.read_trace("/nonexistent/trace.json")

    def test_pandas_frames(self):
        try:
            import pandas  # noqa: F401
        except ImportError:
            self.skipTest("pandas is not installed")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "plan.json")
            memwall.plan(model="gpt2", run="zero-infinity-cpu", trace=path)
            spans = memwall.spans_frame(path)
            mem = memwall.counters_frame(path, "memory gpu")
        self.assertIn("resource", spans.columns)
        self.assertGreater(len(mem), 0)


if __name__ == "__main__":
    unittest.main()
