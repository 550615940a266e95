// memwall-gui under QT_QPA_PLATFORM=offscreen: the trace model's values, zoom and pan by simulated input,
// tooltips, rank collapsing, compare mode, bad files, the predict panel.
#include <QApplication>
#include <QTableWidget>
#include <QWheelEvent>
#include <QtTest/QtTest>

#include <fstream>
#include <sstream>

#include "gui/main_window.h"
#include "gui/predict_panel.h"
#include "trace/trace.h"

using namespace memwall;

namespace {

// A small trace written by the project's own writer: two ranks, compute and h2d tracks, memory and bandwidth
// counters, a hardware header with a 1000-byte GPU and a 1 GB/s link.
std::string sample_trace(double scale = 1.0) {
  std::ostringstream out;
  trace::TraceWriter w(out);
  trace::TraceHeader h;
  h.memwall_version = "test";
  h.executor = "reference";
  h.command = "plan";
  h.ranks = 2;
  h.hardware_json = R"({"gpu": {"memory_bytes": 1000}, "pcie": {"gpu_link_Bps": 1e9}})";
  w.begin(h);
  for (int pid = 0; pid < 2; ++pid) {
    w.process_name(pid, "rank " + std::to_string(pid));
    w.thread_name(pid, 1, "compute");
    w.thread_name(pid, 3, "h2d");
  }
  auto span = [&](int pid, int tid, const char* name, const char* cat, double ts, double dur, double bytes,
                  double flops) {
    trace::TraceSpan s;
    s.pid = pid;
    s.tid = tid;
    s.name = name;
    s.category = cat;
    s.ts_us = ts * scale;
    s.dur_us = dur * scale;
    s.phase = "forward";
    s.bytes = bytes;
    s.flops = flops;
    w.span(s);
  };
  span(0, 1, "fwd a", "compute", 0, 100, 0, 2e6);
  span(0, 1, "fwd b", "compute", 150, 100, 0, 2e6);
  span(0, 3, "cpu->gpu x", "copy", 50, 90, 9e4, 0);
  span(1, 1, "fwd a", "compute", 0, 120, 0, 2e6);
  w.counter({0, "memory gpu", 0, {{"params16", 100}}});
  w.counter({0, "memory gpu", 100 * scale, {{"params16", 300}, {"activations", 200}}});
  w.counter({0, "memory gpu", 200 * scale, {{"params16", 100}, {"activations", 0}}});
  w.counter({0, "bandwidth h2d", 50 * scale, {{"Bps", 1e9}}});
  w.counter({0, "bandwidth h2d", 140 * scale, {{"Bps", 0}}});
  // memwall train's per-step figures at each step's end (out of order in the file: the model sorts them).
  w.counter({0, "expert load", 250 * scale, {{"busiest expert", 1.5}}});
  w.counter({0, "loss", 100 * scale, {{"loss", 5.25}}});
  w.counter({0, "loss", 250 * scale, {{"loss", 4.5}}});
  (void)w.finish();
  return out.str();
}

QString write(const QString& name, const std::string& text) {
  const QString path = QDir::temp().filePath("memwall-gui-test-" + name);
  std::ofstream(path.toStdString(), std::ios::binary) << text;
  return path;
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT
 private slots:
  void model_values() {
    auto m = gui::TraceModel::from_bytes(sample_trace(), "sample");
    QVERIFY2(m.is_ok(), m.status().message().c_str());
    QCOMPARE(m->tracks.size(), std::size_t{3});
    QCOMPARE(m->tracks[0].name, std::string("rank 0 / compute"));
    QCOMPARE(m->memory.size(), std::size_t{1});
    QCOMPARE(m->memory[0].peak_total, 500.0);
    QCOMPARE(m->metrics.size(), std::size_t{2});  // loss first, then the expert load
    QCOMPARE(m->metrics[0].name, std::string("loss"));
    QCOMPARE(m->metrics[0].t.size(), std::size_t{2});
    QCOMPARE(m->metrics[0].total(1), 4.5);
    QCOMPARE(m->metrics[1].name, std::string("expert load"));
    QCOMPARE(m->capacity_of("memory gpu"), 1000.0);
    QCOMPARE(m->capacity_of("bandwidth h2d"), 1e9);
    QCOMPARE(m->capacity_of("bandwidth h2d 1"), 1e9);  // a further lane of the link
    QCOMPARE(m->capacity_of("bandwidth h2d x"), 0.0);
    QCOMPARE(m->summary.ranks, 2);
    QCOMPARE(m->summary.peak_bytes[0], 500.0);
    QVERIFY(std::abs(m->summary.span_s - 250e-6) < 1e-12);
    QVERIFY(std::abs(m->summary.compute_s - 200e-6) < 1e-12);
    QCOMPARE(m->summary.stalls.size(), std::size_t{1});  // the 50 us gap before fwd b
    QCOMPARE(m->summary.stalls[0].before, std::string("fwd b"));
    QCOMPARE(m->summary.stalls[0].cause, std::string("cpu->gpu x"));
    // 4 MFLOP in 250 us.
    QVERIFY(std::abs(m->summary.tflops_per_gpu - 4e6 / 250e-6 / 1e12) < 1e-9);
    const auto* s = m->span_at(0, 160e-6);
    QVERIFY(s != nullptr);
    QCOMPARE(s->name, std::string("fwd b"));
    QVERIFY(m->span_at(0, 120e-6) == nullptr);
  }

  // A replayed trace's side-stream lane ("compute 1", tid 9) counts towards compute: busy while any lane is
  // (80-170 us bridges the main lane's gap), its FLOPs included; stalls stay on the main lane.
  void compute_lanes() {
    std::ostringstream out;
    trace::TraceWriter w(out);
    trace::TraceHeader h;
    h.command = "replay";
    w.begin(h);
    w.thread_name(0, 1, "compute");
    w.thread_name(0, 9, "compute 1");
    auto span = [&](int tid, const char* name, double ts, double dur, double flops) {
      trace::TraceSpan sp;
      sp.tid = tid;
      sp.name = name;
      sp.category = "compute";
      sp.ts_us = ts;
      sp.dur_us = dur;
      sp.flops = flops;
      w.span(sp);
    };
    span(1, "gemm a", 0, 100, 2e6);
    span(1, "gemm b", 150, 100, 2e6);
    span(9, "copy-in", 80, 90, 1e6);
    (void)w.finish();
    auto m = gui::TraceModel::from_bytes(out.str(), "lanes");
    QVERIFY2(m.is_ok(), m.status().message().c_str());
    QCOMPARE(m->tracks.size(), std::size_t{2});
    QCOMPARE(m->tracks[1].name, std::string("rank 0 / compute 1"));
    QVERIFY(std::abs(m->summary.compute_s - 250e-6) < 1e-12);
    QVERIFY(std::abs(m->summary.tflops_per_gpu - 5e6 / 250e-6 / 1e12) < 1e-9);
    QCOMPARE(m->summary.stalls.size(), std::size_t{1});
  }

  void zoom_pan_and_keys() {
    gui::MainWindow w;
    QVERIFY(w.open(write("a.json", sample_trace())));
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* v = w.views().at(0);
    auto* axis = w.axis();
    QVERIFY(std::abs(axis->t1() - 250e-6) < 1e-12);
    // Wheel up one notch at the middle of the plot: the range shrinks to 0.8 around that time.
    const QPointF at(gui::TimelineView::kGutter + (v->width() - gui::TimelineView::kGutter) / 2.0, 30);
    const double t_at = v->x_to_time(at.x());
    QWheelEvent wheel(at, v->mapToGlobal(at), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(v, &wheel);
    QVERIFY(std::abs((axis->t1() - axis->t0()) - 0.8 * 250e-6) < 1e-12);
    QVERIFY(std::abs(v->x_to_time(at.x()) - t_at) < 1e-12);  // the time under the cursor stays put
    // Drag 100 px to the right on rank 0's compute track: the view moves left by 100 px worth of time.
    int y = 300;
    for (const auto& r : v->rows()) {
      if (r.kind == gui::TimelineView::Row::kTrack) {
        y = r.y + r.h / 2;
        break;
      }
    }
    const double before = axis->t0(),
                 per_px = (axis->t1() - axis->t0()) / (v->width() - gui::TimelineView::kGutter);
    QTest::mousePress(v, Qt::LeftButton, Qt::NoModifier, QPoint(600, y));
    QTest::mouseMove(v, QPoint(700, y));
    QTest::mouseRelease(v, Qt::LeftButton, Qt::NoModifier, QPoint(700, y));
    QVERIFY(std::abs(axis->t0() - (before - 100 * per_px)) < 1e-9);
    // Shift-drag: zoom to the band.
    const double a = v->x_to_time(400), b = v->x_to_time(800);
    QTest::mousePress(v, Qt::LeftButton, Qt::ShiftModifier, QPoint(400, y));
    QTest::mouseMove(v, QPoint(800, y));
    QTest::mouseRelease(v, Qt::LeftButton, Qt::ShiftModifier, QPoint(800, y));
    QVERIFY(std::abs(axis->t0() - a) < 1e-12 && std::abs(axis->t1() - b) < 1e-12);
    // Home resets; right arrow pans by a tenth.
    QTest::keyClick(v, Qt::Key_Home);
    QVERIFY(std::abs(axis->t0()) < 1e-15);
    QTest::keyClick(v, Qt::Key_Right);
    QVERIFY(std::abs(axis->t0() - 25e-6) < 1e-12);
    QTest::mouseClick(v, Qt::RightButton);
    QVERIFY(std::abs(axis->t0()) < 1e-15);
  }

  void tooltips_and_collapse() {
    gui::MainWindow w;
    QVERIFY(w.open(write("b.json", sample_trace())));
    w.resize(1200, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    auto* v = w.views().at(0);
    const auto& rows = v->rows();
    auto row_of = [&](gui::TimelineView::Row::Kind kind, int index) {
      for (const auto& r : rows) {
        if (r.kind == kind && r.index == index) return r;
      }
      return gui::TimelineView::Row{kind, -1, -1, 0};
    };
    const auto compute = row_of(gui::TimelineView::Row::kTrack, 0),
               copy = row_of(gui::TimelineView::Row::kTrack, 1);
    QVERIFY(compute.y >= 0 && copy.y >= 0);
    const int x60 = static_cast<int>(v->time_to_x(60e-6));
    QString tip = v->tooltip_at(QPoint(x60, compute.y + compute.h / 2));
    QVERIFY2(tip.contains("fwd a") && tip.contains("TFLOP/s") && tip.contains("duration 100.0 us"),
             qPrintable(tip));
    tip = v->tooltip_at(QPoint(x60, copy.y + copy.h / 2));
    QVERIFY2(tip.contains("cpu->gpu x") && tip.contains("achieved 1.00 GB/s"), qPrintable(tip));
    const auto mem = row_of(gui::TimelineView::Row::kMemory, 0);
    tip = v->tooltip_at(QPoint(static_cast<int>(v->time_to_x(150e-6)), mem.y + mem.h / 2));
    QVERIFY2(tip.contains("total 500 B") && tip.contains("activations: 200 B"), qPrintable(tip));
    const auto loss = row_of(gui::TimelineView::Row::kMetric, 0);
    QVERIFY(loss.y >= 0);
    tip = v->tooltip_at(QPoint(static_cast<int>(v->time_to_x(150e-6)), loss.y + loss.h / 2));
    QVERIFY2(tip.contains("loss") && tip.contains("5.25"), qPrintable(tip));  // the step that ended at 100
    // Collapsing rank 1 hides its tracks.
    const std::size_t n = v->rows().size();
    v->toggle_rank(1);
    QCOMPARE(v->rows().size(), n - 1);
    v->toggle_rank(1);
    QCOMPARE(v->rows().size(), n);
    // Painting works (offscreen) and draws something.
    const QImage img = w.grab().toImage();
    QVERIFY(!img.isNull());
  }

  void compare_mode() {
    gui::MainWindow w;
    QVERIFY(w.compare(write("c1.json", sample_trace()), write("c2.json", sample_trace(2.0))));
    QCOMPARE(w.views().size(), std::size_t{2});
    QVERIFY(std::abs(w.axis()->t1() - 500e-6) < 1e-12);  // the longer trace
    QTableWidget* t = w.compare_table();
    bool found = false;
    for (int r = 0; r < t->rowCount(); ++r) {
      if (t->item(r, 0)->text() == "iteration time (s)") {
        found = true;
        QCOMPARE(t->item(r, 3)->text(), QString("2.000"));
      }
    }
    QVERIFY(found);
  }

  void bad_files_say_what_is_wrong() {
    gui::MainWindow w;
    QVERIFY(w.open(write("good.json", sample_trace())));
    const std::string good = sample_trace();
    QVERIFY(!w.open(write("truncated.json", good.substr(0, good.size() / 2))));
    QVERIFY2(w.last_error().contains("truncated.json") && w.last_error().contains("not valid JSON"),
             qPrintable(w.last_error()));
    QVERIFY(!w.open(write("foreign.json", R"({"traceEvents": []})")));
    QVERIFY2(w.last_error().contains("not a memwall trace"), qPrintable(w.last_error()));
    std::string future = good;
    future.replace(future.find("\"version\":\"1."), 13, "\"version\":\"9.");
    QVERIFY(!w.open(write("future.json", future)));
    QVERIFY2(w.last_error().contains("9."), qPrintable(w.last_error()));
    QVERIFY(!w.open("/nonexistent/trace.json"));
    QVERIFY2(w.last_error().contains("/nonexistent/trace.json"), qPrintable(w.last_error()));
    QCOMPARE(w.views().size(), std::size_t{1});  // still showing the good trace
  }

  void predict_panel() {
    gui::MainWindow w;
    auto* p = w.predict_panel();
    QVERIFY2(p->choose("dgx2", "gpt2", "zero-3"), qPrintable(p->status()));
    QVERIFY(p->estimate().fits);
    QVERIFY(p->status().contains("fits"));
    QCOMPARE(p->largest_table()->rowCount(), 7);  // one row per strategy of Table 2
    // Longer sequences and the attention kernel: Llama-2-7B at 4096 tokens keeps 5x less activation working
    // memory with flash attention (Eq. 5's probabilities replaced by a log-sum-exp per head).
    QVERIFY2(p->choose("dgx2", "llama-2-7b", "zero-3"), qPrintable(p->status()));
    QVERIFY2(p->set_sequence(4096, "unfused"), qPrintable(p->status()));
    QVERIFY2(p->status().contains("4096 tokens, unfused attention"), qPrintable(p->status()));
    const double unfused = p->estimate().bytes(Tier::kGpu, MemCategory::kActivationWorking);
    QVERIFY2(p->set_sequence(4096, "flash"), qPrintable(p->status()));
    const double flash = p->estimate().bytes(Tier::kGpu, MemCategory::kActivationWorking);
    QVERIFY2(flash * 4 < unfused, qPrintable(QString("%1 vs %2").arg(flash).arg(unfused)));
    QVERIFY2(p->set_sequence(0, "run"), qPrintable(p->status()));
    QVERIFY2(p->status().contains("unfused attention"), qPrintable(p->status()));
  }
};

QTEST_MAIN(GuiTest)
#include "gui_test.moc"
