// The memwall-gui main window: opens traces (File menu, command line, drag and drop, recent files), shows one
// trace's timeline with its summary, or two stacked on one time axis with a table of their differences, and
// a predict panel (docs/gui.md).
#pragma once

#include <QMainWindow>
#include <QStringList>

#include <memory>

#include "gui/timeline.h"

class QMenu;
class QTableWidget;
class QTabWidget;
class QVBoxLayout;

namespace memwall::gui {

class PredictPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  // Opens one trace, replacing what is shown. On failure an error dialog says what is wrong, the window keeps
  // what it showed, and false is returned (last_error() has the message).
  bool open(const QString& path);
  // Two traces stacked with aligned time axes, and their differences.
  bool compare(const QString& a, const QString& b);
  const QString& last_error() const { return last_error_; }
  QTableWidget* summary_table() const { return summary_; }
  QTableWidget* compare_table() const { return diff_; }
  TimeAxis* axis() const { return axis_; }
  std::vector<TimelineView*> views() const { return views_; }
  PredictPanel* predict_panel() const { return predict_; }

 protected:
  void dragEnterEvent(QDragEnterEvent*) override;
  void dropEvent(QDropEvent*) override;

 private:
  bool load(const QString& path, std::shared_ptr<const TraceModel>& out);
  void show_models(std::vector<std::shared_ptr<const TraceModel>> models);
  void fill_summary(const TraceModel& m);
  void fill_compare(const TraceModel& a, const TraceModel& b);
  void remember(const QString& path);
  void rebuild_recent();
  void fail(const QString& message);

  TimeAxis* axis_;
  QWidget* views_box_;
  QVBoxLayout* views_layout_;
  std::vector<TimelineView*> views_;
  QTabWidget* tabs_;
  QTableWidget* summary_;
  QTableWidget* diff_;
  QMenu* recent_menu_;
  PredictPanel* predict_;
  QString last_error_;
};

}  // namespace memwall::gui
