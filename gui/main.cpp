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
  if (time_open) {
    for (const QString& f : files) {
      const auto t0 = std::chrono::steady_clock::now();
      auto m = memwall::gui::TraceModel::load(f.toStdString());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!m.is_ok()) {
        std::fprintf(stderr, "memwall-gui: %s\n", m.status().message().c_str());
        return 1;
      }
      std::printf("%s: %zu spans, %zu counter samples, %zu tracks: loaded in %.2f s\n",
                  f.toLocal8Bit().constData(), m->data.spans.size(), m->data.counters.size(),
                  m->tracks.size(), s);
    }
    return 0;
  }
  QApplication app(argc, argv);
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
