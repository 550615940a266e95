// TimelineView painting and interaction (see timeline.h).
#include "gui/timeline.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

namespace memwall::gui {

void TimeAxis::set_full(double seconds) {
  full_ = seconds > 0 ? seconds : 1;
  reset();
}

void TimeAxis::set_range(double t0, double t1) {
  if (!(t1 > t0)) return;
  const double min_width = full_ * 1e-9;
  if (t1 - t0 < min_width) {
    const double c = 0.5 * (t0 + t1);
    t0 = c - min_width / 2;
    t1 = c + min_width / 2;
  }
  t0_ = t0;
  t1_ = t1;
  emit changed();
}

void TimeAxis::zoom(double factor, double at) {
  set_range(at - (at - t0_) * factor, at + (t1_ - at) * factor);
}

void TimeAxis::pan(double dt) {
  set_range(t0_ + dt, t1_ + dt);
}

namespace {

constexpr int kAxisH = 22, kMemoryH = 78, kBandwidthH = 44, kHeaderH = 18, kTrackH = 16;

QColor category_color(const std::string& key, int k) {
  // PyTorch's memory timeline colours where the meaning matches; others from a fixed palette.
  if (key.find("param") != std::string::npos && key.find("master") == std::string::npos)
    return QColor("darkgreen");
  if (key.find("grad") != std::string::npos) return QColor("mediumblue");
  if (key.find("momentum") != std::string::npos || key.find("variance") != std::string::npos ||
      key.find("master") != std::string::npos || key.find("optimizer") != std::string::npos)
    return QColor("goldenrod");
  if (key.find("activation") != std::string::npos || key.find("logits") != std::string::npos)
    return QColor("red");
  if (key.find("swap") != std::string::npos || key.find("pinned") != std::string::npos)
    return QColor("mediumpurple");
  if (key.find("reserved") != std::string::npos) return QColor("grey");
  static const QColor palette[] = {QColor("teal"),  QColor("orange"),    QColor("sienna"),
                                   QColor("olive"), QColor("steelblue"), QColor("orchid")};
  return palette[k % 6];
}

QColor span_color(const trace::TraceSpan& s) {
  const std::string& c = s.category;
  if (c == "compute") return s.phase == "backward" ? QColor(60, 110, 200) : QColor(90, 150, 230);
  if (c == "copy") return QColor(210, 70, 60);
  if (c == "nvme_read") return QColor(230, 150, 40);
  if (c == "nvme_write") return QColor(200, 120, 20);
  if (c == "collective") return QColor(60, 160, 90);
  if (c == "optimizer_step") return QColor(150, 90, 180);
  return QColor(120, 120, 120);
}

// A plain number as a label: 4 significant digits.
std::string format_plain(double v) {
  return QString::number(v, 'g', 4).toStdString();
}
}  // namespace

TimelineView::TimelineView(std::shared_ptr<const TraceModel> model, TimeAxis* axis, QWidget* parent)
    : QWidget(parent), model_(std::move(model)), axis_(axis) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent);
  connect(axis_, &TimeAxis::changed, this, [this] { update(); });
  layout_rows();
}

void TimelineView::layout_rows() {
  rows_.clear();
  int y = kAxisH;
  for (std::size_t i = 0; i < model_->memory.size(); ++i) {
    rows_.push_back({Row::kMemory, static_cast<int>(i), y, kMemoryH});
    y += kMemoryH + 4;
  }
  for (std::size_t i = 0; i < model_->bandwidth.size(); ++i) {
    rows_.push_back({Row::kBandwidth, static_cast<int>(i), y, kBandwidthH});
    y += kBandwidthH + 2;
  }
  for (std::size_t i = 0; i < model_->metrics.size(); ++i) {
    rows_.push_back({Row::kMetric, static_cast<int>(i), y, kBandwidthH});
    y += kBandwidthH + 2;
  }
  int pid = -1;
  for (std::size_t i = 0; i < model_->tracks.size(); ++i) {
    const Track& t = model_->tracks[i];
    if (t.pid != pid) {
      pid = t.pid;
      rows_.push_back({Row::kRankHeader, pid, y, kHeaderH});
      y += kHeaderH;
    }
    if (collapsed_.count(pid)) continue;
    rows_.push_back({Row::kTrack, static_cast<int>(i), y, kTrackH});
    y += kTrackH + 1;
  }
  content_height_ = y + 4;
  setMinimumHeight(content_height_);
  updateGeometry();
}

QSize TimelineView::sizeHint() const {
  return {1100, content_height_};
}

void TimelineView::toggle_rank(int pid) {
  if (!collapsed_.erase(pid)) collapsed_.insert(pid);
  layout_rows();
  update();
}

double TimelineView::x_to_time(double x) const {
  const double w = std::max(1, width() - kGutter);
  return axis_->t0() + (x - kGutter) / w * (axis_->t1() - axis_->t0());
}

double TimelineView::time_to_x(double t) const {
  const double w = std::max(1, width() - kGutter);
  return kGutter + (t - axis_->t0()) / (axis_->t1() - axis_->t0()) * w;
}

void TimelineView::paint_axis(QPainter& p) {
  p.setPen(QColor(60, 60, 60));
  const double span = axis_->t1() - axis_->t0();
  const double raw = span / 8;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 2 ? 2 * mag : (raw / mag < 5 ? 5 * mag : 10 * mag);
  for (double t = std::ceil(axis_->t0() / step) * step; t <= axis_->t1(); t += step) {
    const int x = static_cast<int>(time_to_x(t));
    p.drawLine(x, kAxisH - 5, x, kAxisH);
    p.drawText(x + 2, kAxisH - 7, QString::fromStdString(human_seconds(t)));
  }
  p.drawLine(kGutter, kAxisH, width(), kAxisH);
}

void TimelineView::paint_series(QPainter& p, const Series& s, const Row& r, Unit unit) {
  const bool stacked = unit == Unit::kBytes;
  const auto format_total = [&](double v) {
    return unit == Unit::kBytes   ? format_bytes(v)
           : unit == Unit::kPlain ? format_plain(v)
                                  : format_bandwidth(v);
  };
  const double t0 = axis_->t0() + model_->t_min, t1 = axis_->t1() + model_->t_min;
  const double cap = model_->capacity_of(s.name);
  // The hardware's reserved memory is not drawn (it would flatten everything else); the label says how much.
  double scale = std::max(stacked ? s.peak_shown : s.peak_total, 1e-12) * 1.1;
  const bool cap_visible = cap > 0 && cap <= 4 * scale;
  if (cap_visible) scale = std::max(scale, cap * 1.05);
  const double y0 = r.y + r.h;
  auto ypos = [&](double v) { return y0 - v / scale * (r.h - 2); };
  // Level of detail: one column per pixel, drawn at the largest sample in it, then holding the column's last
  // sample until the next column (a step function stays a step function however many samples share a pixel).
  struct Col {
    double x;
    std::size_t peak, last;
  };
  std::vector<Col> cols;
  const long first = std::max(0L, TraceModel::sample_at(s, t0));
  for (auto i = static_cast<std::size_t>(first); i < s.t.size() && s.t[i] <= t1; ++i) {
    const double x = std::max<double>(kGutter, time_to_x(s.t[i] - model_->t_min));
    if (!cols.empty() && static_cast<int>(cols.back().x) == static_cast<int>(x)) {
      if (s.total(i) >= s.total(cols.back().peak)) cols.back().peak = i;
      cols.back().last = i;
    } else {
      cols.push_back({x, i, i});
    }
  }
  const double x_end = width();
  const std::size_t keys = stacked ? s.keys.size() : 1;
  auto value = [&](std::size_t k, std::size_t i) {
    return stacked ? (s.shown(k) ? s.values[k][i] : 0.0) : s.total(i);
  };
  // Each column contributes two steps: [x, x+1) at its peak sample, [x+1, next) at its last sample.
  std::vector<double> xs;
  std::vector<std::size_t> at;
  for (std::size_t c = 0; c < cols.size(); ++c) {
    const double xn = c + 1 < cols.size() ? cols[c + 1].x : x_end;
    xs.push_back(cols[c].x);
    at.push_back(cols[c].peak);
    if (cols[c].last != cols[c].peak && cols[c].x + 1 < xn) {
      xs.push_back(cols[c].x + 1);
      at.push_back(cols[c].last);
    }
  }
  std::vector<double> base(xs.size(), 0.0);
  for (std::size_t k = 0; k < keys; ++k) {
    QPainterPath path;
    path.moveTo(xs.empty() ? kGutter : xs.front(), y0);  // (nothing before the first sample)
    for (std::size_t c = 0; c < xs.size(); ++c) {
      const double top = base[c] + value(k, at[c]);
      const double xn = c + 1 < xs.size() ? xs[c + 1] : x_end;
      path.lineTo(xs[c], ypos(top));
      path.lineTo(xn, ypos(top));
    }
    for (std::size_t c = xs.size(); c-- > 0;) {
      const double xn = c + 1 < xs.size() ? xs[c + 1] : x_end;
      path.lineTo(xn, ypos(base[c]));
      path.lineTo(xs[c], ypos(base[c]));
    }
    path.closeSubpath();
    QColor col = stacked                ? category_color(s.keys[k], static_cast<int>(k))
                 : unit == Unit::kPlain ? QColor(214, 130, 40)
                                        : QColor(70, 130, 180);
    col.setAlpha(200);
    p.fillPath(path, col);
    for (std::size_t c = 0; c < xs.size(); ++c) base[c] += value(k, at[c]);
  }
  p.setPen(QColor(40, 40, 40));
  p.drawText(6, r.y + 14, QString::fromStdString(s.name));
  p.drawText(6, r.y + 28,
             QString::fromStdString(unit == Unit::kPlain
                                        ? "last " + format_plain(s.t.empty() ? 0.0 : s.total(s.t.size() - 1))
                                        : "peak " + format_total(stacked ? s.peak_shown : s.peak_total)));
  if (stacked && s.reserved > 0) {
    p.setPen(QColor(110, 110, 110));
    p.drawText(6, r.y + 56, QString::fromStdString("+ reserved " + format_bytes(s.reserved)));
  }
  if (cap_visible) {
    QPen pen(QColor(200, 0, 0));
    pen.setStyle(Qt::DashLine);
    p.setPen(pen);
    p.drawLine(QPointF(kGutter, ypos(cap)), QPointF(width(), ypos(cap)));
  }
  if (cap > 0) {
    p.setPen(QColor(150, 0, 0));
    p.drawText(6, r.y + 42,
               QString::fromStdString(
                   (stacked ? "capacity " + format_bytes(cap) : "peak " + format_bandwidth(cap))));
  }
  p.setPen(QColor(220, 220, 220));
  p.drawLine(kGutter, r.y + r.h, width(), r.y + r.h);
}

void TimelineView::paint_track(QPainter& p, const Track& t, const Row& r) {
  const double t0 = axis_->t0() + model_->t_min, t1 = axis_->t1() + model_->t_min;
  p.setPen(QColor(40, 40, 40));
  const std::string label =
      t.name.substr(t.name.find(" / ") == std::string::npos ? 0 : t.name.find(" / ") + 3);
  p.drawText(16, r.y + r.h - 3, QString::fromStdString(label));
  auto it = std::lower_bound(t.start.begin(), t.start.end(), t0 - t.longest);
  std::vector<unsigned char> covered(static_cast<std::size_t>(std::max(0, width() - kGutter)) + 1, 0);
  const auto& spans = model_->data.spans;
  for (auto i = static_cast<std::size_t>(it - t.start.begin()); i < t.start.size() && t.start[i] <= t1; ++i) {
    if (t.end[i] < t0) continue;
    const double x0 = std::max<double>(kGutter, time_to_x(t.start[i] - model_->t_min));
    const double x1 = std::min<double>(width(), time_to_x(t.end[i] - model_->t_min));
    if (x1 - x0 < 1.5) {
      covered[static_cast<std::size_t>(
          std::clamp<int>(static_cast<int>(x0) - kGutter, 0, static_cast<int>(covered.size()) - 1))] = 1;
      continue;
    }
    p.fillRect(QRectF(x0, r.y + 1, x1 - x0, r.h - 2), span_color(spans[t.span[i]]));
    if (x1 - x0 > 40) {
      p.setPen(Qt::white);
      p.drawText(QRectF(x0 + 2, r.y, x1 - x0 - 4, r.h), Qt::AlignVCenter | Qt::AlignLeft,
                 QString::fromStdString(spans[t.span[i]].name));
    }
  }
  // Sub-pixel spans: one column per covered pixel.
  p.setPen(QColor(90, 90, 140));
  for (std::size_t c = 0; c < covered.size(); ++c) {
    if (covered[c])
      p.drawLine(static_cast<int>(c) + kGutter, r.y + 1, static_cast<int>(c) + kGutter, r.y + r.h - 2);
  }
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  p.fillRect(QRect(0, 0, kGutter, height()), QColor(245, 245, 245));
  paint_axis(p);
  for (const Row& r : rows_) {
    switch (r.kind) {
      case Row::kMemory:
        paint_series(p, model_->memory[static_cast<std::size_t>(r.index)], r, Unit::kBytes);
        break;
      case Row::kBandwidth:
        paint_series(p, model_->bandwidth[static_cast<std::size_t>(r.index)], r, Unit::kBandwidth);
        break;
      case Row::kMetric:
        paint_series(p, model_->metrics[static_cast<std::size_t>(r.index)], r, Unit::kPlain);
        break;
      case Row::kRankHeader: {
        p.fillRect(QRect(0, r.y, width(), r.h), QColor(230, 232, 240));
        p.setPen(QColor(20, 20, 60));
        auto pr = model_->data.processes.find(r.index);
        const QString name = pr != model_->data.processes.end() ? QString::fromStdString(pr->second)
                                                                : QString("rank %1").arg(r.index);
        p.drawText(4, r.y + r.h - 4, (collapsed_.count(r.index) ? "▸ " : "▾ ") + name);
        break;
      }
      case Row::kTrack:
        paint_track(p, model_->tracks[static_cast<std::size_t>(r.index)], r);
        break;
    }
  }
  if (banding_) {
    QColor c(30, 100, 200, 50);
    p.fillRect(
        QRect(QPoint(std::min(press_.x(), last_.x()), 0), QPoint(std::max(press_.x(), last_.x()), height())),
        c);
  }
}

QString TimelineView::tooltip_at(QPoint pt) const {
  if (pt.x() < kGutter) return {};
  const double t = x_to_time(pt.x()) + model_->t_min;
  for (const Row& r : rows_) {
    if (pt.y() < r.y || pt.y() >= r.y + r.h) continue;
    if (r.kind == Row::kTrack) {
      const auto* s = model_->span_at(static_cast<std::size_t>(r.index), t);
      if (s == nullptr) {
        // Within a pixel: the nearest span (spans narrower than a pixel are drawn as columns).
        const double px = (axis_->t1() - axis_->t0()) / std::max(1, width() - kGutter);
        s = model_->span_at(static_cast<std::size_t>(r.index), t + px);
        if (s == nullptr) return {};
      }
      const double dur = s->dur_us * 1e-6;
      QString text = QString("%1\nop/task: %2 (%3)\nstart %4, duration %5")
                         .arg(QString::fromStdString(s->name), QString::fromStdString(s->category),
                              QString::fromStdString(s->phase),
                              QString::fromStdString(human_seconds(s->ts_us * 1e-6 - model_->t_min)),
                              QString::fromStdString(human_seconds(dur)));
      if (s->bytes > 0) {
        text += QString("\nbytes %1, achieved %2")
                    .arg(QString::fromStdString(format_bytes(s->bytes)),
                         QString::fromStdString(dur > 0 ? format_bandwidth(s->bytes / dur) : "-"));
      }
      if (s->flops > 0 && dur > 0) text += QString("\n%1 TFLOP/s").arg(s->flops / dur / 1e12, 0, 'f', 2);
      return text;
    }
    if (r.kind == Row::kMemory || r.kind == Row::kBandwidth || r.kind == Row::kMetric) {
      const Series& s = r.kind == Row::kMemory      ? model_->memory[static_cast<std::size_t>(r.index)]
                        : r.kind == Row::kBandwidth ? model_->bandwidth[static_cast<std::size_t>(r.index)]
                                                    : model_->metrics[static_cast<std::size_t>(r.index)];
      const long i = TraceModel::sample_at(s, t);
      if (i < 0) return {};
      QString text =
          QString("%1 at %2")
              .arg(QString::fromStdString(s.name), QString::fromStdString(human_seconds(t - model_->t_min)));
      if (r.kind == Row::kBandwidth)
        return text + "\n" + QString::fromStdString(format_bandwidth(s.total(static_cast<std::size_t>(i))));
      if (r.kind == Row::kMetric)  // (the step that ended last before t)
        return text + "\n" + QString::fromStdString(format_plain(s.total(static_cast<std::size_t>(i))));
      text += "\ntotal " + QString::fromStdString(format_bytes(s.total(static_cast<std::size_t>(i))));
      for (std::size_t k = 0; k < s.keys.size(); ++k) {
        const double v = s.values[k][static_cast<std::size_t>(i)];
        if (v > 0)
          text += QString("\n  %1: %2")
                      .arg(QString::fromStdString(s.keys[k]), QString::fromStdString(format_bytes(v)));
      }
      return text;
    }
  }
  return {};
}

bool TimelineView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const QString text = tooltip_at(he->pos());
    if (text.isEmpty())
      QToolTip::hideText();
    else
      QToolTip::showText(he->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  if (steps == 0) return;
  axis_->zoom(std::pow(0.8, steps), x_to_time(e->position().x()));
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  press_ = last_ = e->pos();
  if (e->button() == Qt::RightButton) {
    axis_->reset();
    return;
  }
  for (const Row& r : rows_) {
    if (r.kind == Row::kRankHeader && e->pos().y() >= r.y && e->pos().y() < r.y + r.h) {
      toggle_rank(r.index);
      return;
    }
  }
  if (e->button() == Qt::LeftButton) {
    banding_ = (e->modifiers() & Qt::ShiftModifier) != 0;
    dragging_ = !banding_;
  }
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (dragging_) {
    const double dt = x_to_time(last_.x()) - x_to_time(e->pos().x());
    axis_->pan(dt);
  }
  last_ = e->pos();
  if (banding_) update();
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  if (banding_ && std::abs(e->pos().x() - press_.x()) > 3) {
    const double a = x_to_time(std::min(press_.x(), e->pos().x()));
    const double b = x_to_time(std::max(press_.x(), e->pos().x()));
    axis_->set_range(a, b);
  }
  dragging_ = banding_ = false;
  update();
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  const double w = axis_->t1() - axis_->t0();
  const double mid = 0.5 * (axis_->t0() + axis_->t1());
  switch (e->key()) {
    case Qt::Key_Left:
      axis_->pan(-0.1 * w);
      break;
    case Qt::Key_Right:
      axis_->pan(0.1 * w);
      break;
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      axis_->zoom(0.8, mid);
      break;
    case Qt::Key_Minus:
      axis_->zoom(1.25, mid);
      break;
    case Qt::Key_Home:
      axis_->reset();
      break;
    default:
      QWidget::keyPressEvent(e);
  }
}

}  // namespace memwall::gui
