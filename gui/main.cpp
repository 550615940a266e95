// memwall-gui entry point. The viewer's panels (memory per tier, bandwidth, Gantt) arrive with the
// trace event schema; until then the window states the trace format version it will read.
#include <QApplication>
#include <QLabel>
#include <QMainWindow>
#include <QTimer>

#include <cstring>

#include "trace/trace_version.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QMainWindow window;
  window.setWindowTitle("memwall-gui");
  auto* label = new QLabel(QString("memwall %1: trace viewer (reads %2 %3). No views are implemented yet.")
                               .arg(MEMWALL_GUI_VERSION)
                               .arg(memwall::trace::kFormatName)
                               .arg(QString::fromStdString(memwall::trace::format_version())));
  label->setMargin(24);
  window.setCentralWidget(label);
  window.resize(640, 200);
  window.show();
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--quit-after") == 0)
      QTimer::singleShot(std::atoi(argv[i + 1]), &app, &QApplication::quit);
  }
  return app.exec();
}
