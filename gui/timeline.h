// TimelineView: one trace drawn with QPainter on a shared time axis: memory occupancy per tier (stacked areas
// by category, the tier's capacity as a dashed line), bandwidth per link (with the link's peak), and a Gantt
// of spans per resource, grouped per rank (click a rank's header to collapse it). Level of detail: spans and
// samples narrower than a pixel are merged per pixel column, so a million events draw as fast as the screen
// is wide. Wheel zooms at the cursor, drag pans, shift-drag zooms to the band, right click or Home resets,
// arrow keys and +/- pan and zoom; hovering shows the span or sample under the cursor.
#pragma once

#include <QObject>
#include <QWidget>

#include <memory>
#include <set>

#include "gui/trace_model.h"

namespace memwall::gui {

// The visible time range, shared by every view that should zoom and pan together. Times are relative to
// each trace's own start, so traces from different runs line up at zero.
class TimeAxis : public QObject {
  Q_OBJECT
 public:
  double t0() const { return t0_; }
  double t1() const { return t1_; }
  double full() const { return full_; }
  void set_full(double seconds);  // the longest trace; resets the view
  void set_range(double t0, double t1);
  void zoom(double factor, double at);  // factor < 1 zooms in, keeping `at` in place
  void pan(double dt);
  void reset() { set_range(0, full_); }

 signals:
  void changed();

 private:
  double t0_ = 0, t1_ = 1, full_ = 1;
};

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  TimelineView(std::shared_ptr<const TraceModel> model, TimeAxis* axis, QWidget* parent = nullptr);

  static constexpr int kGutter = 170;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override { return {400, 200}; }
  // The text of the tooltip at a point of the widget (empty when nothing is there); what hovering shows.
  QString tooltip_at(QPoint p) const;
  // Rows: where each part is drawn (for tests and tooltips).
  struct Row {
    enum Kind { kMemory, kBandwidth, kMetric, kRankHeader, kTrack } kind;
    int index;  // series, rank or track index
    int y, h;
  };
  const std::vector<Row>& rows() const { return rows_; }
  void toggle_rank(int pid);
  double x_to_time(double x) const;
  double time_to_x(double t) const;
  const TraceModel& model() const { return *model_; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void keyPressEvent(QKeyEvent*) override;
  bool event(QEvent*) override;

 private:
  void layout_rows();
  // Memory stacks its categories (bytes), bandwidth is one value (B/s), a training metric one plain number.
  enum class Unit { kBytes, kBandwidth, kPlain };
  void paint_series(QPainter& p, const Series& s, const Row& r, Unit unit);
  void paint_track(QPainter& p, const Track& t, const Row& r);
  void paint_axis(QPainter& p);

  std::shared_ptr<const TraceModel> model_;
  TimeAxis* axis_;
  std::vector<Row> rows_;
  std::set<int> collapsed_;
  int content_height_ = 0;
  bool dragging_ = false, banding_ = false;
  QPoint press_, last_;
};

}  // namespace memwall::gui
