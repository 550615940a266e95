// memwall-gui: the trace viewer. `memwall-gui [TRACE [TRACE2]] [--predict] [--screenshot out.png]
// [--quit-after MS] [--time-open]`: one trace opens it, two compare them; --screenshot renders the window to
// a PNG and exits; --time-open loads the traces without a window and prints how long that took.
#include <QApplication>
#include <QTimer>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gui/main_window.h"
#include "gui/predict_panel.h"

int main(int argc, char** argv) {
  std::vector<QString> files;
  QString screenshot;
  int quit_after = -1;
  bool time_open = false, predict = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quit-after" && i + 1 < argc) {
      quit_after = std::atoi(argv[++i]);
    } else if (a == "--screenshot" && i + 1 < argc) {
      screenshot = argv[++i];
    } else if (a == "--time-open") {
      time_open = true;
    } else if (a == "--predict") {
      predict = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: memwall-gui [TRACE [TRACE2]] [--predict] [--screenshot out.png] [--quit-after MS] "
          "[--time-open]\n");
      return 0;
    } else if (!a.empty() && a[0] != '-') {
      files.push_back(QString::fromLocal8Bit(argv[i]));
    }
  }
  QApplication app(argc, argv);
  if (time_open) {
    // The open benchmark: parse + model, then the window's first frame and frames while zooming in.
    for (const QString& f : files) {
      using clock = std::chrono::steady_clock;
      const auto t0 = clock::now();
      auto m = memwall::gui::TraceModel::load(f.toStdString());
      const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
      if (!m.is_ok()) {
        std::fprintf(stderr, "memwall-gui: %s\n", m.status().message().c_str());
        return 1;
      }
      memwall::gui::MainWindow w;
      w.resize(1280, 860);
      const auto t1 = clock::now();
      if (!w.open(f)) return 1;
      w.show();
      const QImage first = w.grab().toImage();
      const double open_s = std::chrono::duration<double>(clock::now() - t1).count();
      const auto t2 = clock::now();
      const int frames = 20;
      for (int k = 0; k < frames; ++k) {
        w.axis()->zoom(0.7, 0.5 * (w.axis()->t0() + w.axis()->t1()));
        (void)w.views().front()->grab();
      }
      const double frame_s = std::chrono::duration<double>(clock::now() - t2).count() / frames;
      std::printf(
          "%s: %zu spans, %zu counter samples, %zu tracks: parsed and modelled in %.2f s; opened and first "
          "frame drawn in %.2f s; %.1f ms per frame while zooming in\n",
          f.toLocal8Bit().constData(), m->data.spans.size(), m->data.counters.size(), m->tracks.size(),
          load_s, open_s, frame_s * 1e3);
      (void)first;
    }
    return 0;
  }
  memwall::gui::MainWindow window;
  if (predict) {
    window.predict_panel()->show();
    window.predict_panel()->compute();
  }
  bool ok = true;
  if (files.size() == 1) ok = window.open(files[0]);
  if (files.size() >= 2) ok = window.compare(files[0], files[1]);
  window.show();
  if (!screenshot.isEmpty()) {
    QTimer::singleShot(500, &app, [&] {
      window.grab().save(screenshot);
      app.exit(ok ? 0 : 1);
    });
  }
  if (quit_after >= 0) QTimer::singleShot(quit_after, &app, &QApplication::quit);
  return app.exec();
}
