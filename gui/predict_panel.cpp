// PredictPanel (see predict_panel.h).
#include "gui/predict_panel.h"

#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/units.h"
#include "memory/max_model.h"
#include "spec/spec_loader.h"

namespace memwall::gui {

// Horizontal bars, one per tier, stacked by category, scaled to the tier's capacity.
class TierBars : public QWidget {
 public:
  explicit TierBars(QWidget* parent) : QWidget(parent) { setMinimumHeight(120); }
  void set(const MemoryEstimate* e) {
    e_ = e;
    update();
  }

 protected:
  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    if (e_ == nullptr) return;
    const char* names[] = {"GPU", "CPU", "NVMe"};
    static const QColor palette[] = {QColor("darkgreen"), QColor("mediumblue"),   QColor("goldenrod"),
                                     QColor("red"),       QColor("mediumpurple"), QColor("teal"),
                                     QColor("orange"),    QColor("sienna"),       QColor("grey")};
    const int bar_h = 26, left = 44, w = width() - left - 8;
    for (int t = 0; t < kTierCount; ++t) {
      const TierUsage& u = e_->tiers[t];
      const int y = 8 + t * (bar_h + 12);
      p.setPen(Qt::black);
      p.drawText(4, y + 17, names[t]);
      const double scale = std::max(u.capacity_bytes, u.used_bytes);
      p.drawRect(left, y, w, bar_h);
      if (scale <= 0) continue;
      double x = left;
      int k = 0;
      for (const MemoryItem& it : e_->items) {
        if (it.tier != static_cast<Tier>(t)) continue;
        const double bytes =
            it.per_node ? it.bytes_per_rank : it.bytes_per_rank * (t == 0 ? 1 : e_->ranks_per_node);
        const double dw = bytes / scale * w;
        p.fillRect(QRectF(x, y + 1, dw, bar_h - 1), palette[k++ % 9]);
        x += dw;
      }
      const double cap_x = left + u.capacity_bytes / scale * w;
      p.setPen(QPen(Qt::red, 2));
      p.drawLine(QPointF(cap_x, y - 3), QPointF(cap_x, y + bar_h + 3));
      p.setPen(Qt::black);
      p.drawText(left + 4, y + bar_h + 11,
                 QString("%1 of %2 %3")
                     .arg(QString::fromStdString(format_bytes(u.used_bytes)),
                          QString::fromStdString(format_bytes(u.capacity_bytes)), u.scope));
    }
  }

 private:
  const MemoryEstimate* e_ = nullptr;
};

QString PredictPanel::scenarios_dir() {
  if (const char* env = std::getenv("MEMWALL_SCENARIOS"); env != nullptr && *env != '\0') return env;
  const QString installed =
      QDir(QCoreApplication::applicationDirPath()).filePath("../share/memwall/scenarios");
  if (QDir(installed).exists()) return installed;
  return MEMWALL_GUI_SCENARIOS;
}

PredictPanel::PredictPanel(QWidget* parent) : QDockWidget("Predict", parent) {
  auto* box = new QWidget(this);
  auto* layout = new QVBoxLayout(box);
  auto* form = new QFormLayout;
  hw_ = new QComboBox;
  model_ = new QComboBox;
  run_ = new QComboBox;
  const QString dir = scenarios_dir();
  for (auto [combo, kind] :
       {std::pair{hw_, "hardware"}, std::pair{model_, "models"}, std::pair{run_, "runs"}}) {
    for (const QString& f : QDir(dir + "/" + kind).entryList({"*.json"}, QDir::Files, QDir::Name))
      combo->addItem(f.chopped(5), QDir(dir + "/" + kind).filePath(f));
    combo->addItem("Other file...", QString());
    connect(combo, &QComboBox::activated, this, [this, combo] {
      if (combo->currentData().toString().isEmpty()) {
        const QString f = QFileDialog::getOpenFileName(this, "Choose a file", {}, "JSON (*.json)");
        if (f.isEmpty()) return;
        combo->insertItem(0, QFileInfo(f).fileName(), f);
        combo->setCurrentIndex(0);
      }
      compute();
    });
  }
  hw_->setCurrentText("dgx2");
  model_->setCurrentText("paper-1t");
  run_->setCurrentText("zero-infinity-nvme");
  form->addRow("hardware", hw_);
  form->addRow("model", model_);
  form->addRow("run", run_);
  seq_ = new QSpinBox;
  seq_->setRange(0, 1 << 20);
  seq_->setSingleStep(1024);
  seq_->setSpecialValueText("the run's");
  seq_->setToolTip("memwall.sequence_length (0: the run's, else the model's n_positions)");
  attention_ = new QComboBox;
  attention_->addItem("the run's", "run");
  attention_->addItem("unfused (Eq. 5)", "unfused");
  attention_->addItem("flash (fused)", "flash");
  attention_->setToolTip(
      "memwall.attention: unfused keeps the T x T probabilities, flash a log-sum-exp per row");
  connect(seq_, &QSpinBox::editingFinished, this, [this] { compute(); });
  connect(attention_, &QComboBox::activated, this, [this] { compute(); });
  form->addRow("sequence", seq_);
  form->addRow("attention", attention_);
  layout->addLayout(form);
  status_ = new QLabel;
  status_->setWordWrap(true);
  layout->addWidget(status_);
  bars_ = new TierBars(box);
  layout->addWidget(bars_);
  largest_ = new QTableWidget(0, 3);
  largest_->setHorizontalHeaderLabels({"strategy", "largest model", "limited by"});
  largest_->horizontalHeader()->setStretchLastSection(true);
  largest_->verticalHeader()->setVisible(false);
  largest_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  layout->addWidget(largest_, 1);
  setWidget(box);
  setMinimumWidth(380);
}

QString PredictPanel::status() const {
  return status_->text();
}

bool PredictPanel::choose(const QString& hardware, const QString& model, const QString& run) {
  hw_->setCurrentText(hardware);
  model_->setCurrentText(model);
  run_->setCurrentText(run);
  return compute();
}

bool PredictPanel::set_sequence(int sequence_length, const QString& attention) {
  seq_->setValue(sequence_length);
  attention_->setCurrentIndex(std::max(0, attention_->findData(attention)));
  return compute();
}

bool PredictPanel::compute() {
  const ReadFileFn read = [](const std::string& path) -> Result<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::not_found(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  Diagnostics diag;
  auto hw = load_hardware(hw_->currentData().toString().toStdString(), read, diag);
  auto m = hw.is_ok() ? load_model(model_->currentData().toString().toStdString(), read, diag)
                      : Result<ModelSpec>(hw.status());
  auto r = m.is_ok() ? load_run(run_->currentData().toString().toStdString(), read, diag)
                     : Result<RunConfig>(m.status());
  if (r.is_ok()) {
    if (seq_->value() > 0) r->memwall.sequence_length = seq_->value();
    const QString attention = attention_->currentData().toString();
    if (attention != "run")
      r->memwall.attention = attention == "flash" ? AttentionKernel::kFlash : AttentionKernel::kUnfused;
  }
  Status st = r.is_ok() ? resolve_run_config(*r, *m, *hw) : r.status();
  if (!st.is_ok()) {
    status_->setText("<span style='color:#b00'>" + QString::fromStdString(st.message()).toHtmlEscaped() +
                     "</span>");
    bars_->set(nullptr);
    largest_->setRowCount(0);
    return false;
  }
  estimate_ = estimate_memory(*m, *r, *hw);
  status_->setText(
      QString("%1: %2 parameters, %3 tokens, %4 attention, %5")
          .arg(QString::fromStdString(m->name))
          .arg(static_cast<double>(m->total_params()), 0, 'g', 4)
          .arg(r->memwall.sequence_length)
          .arg(attention_kernel_name(r->memwall.attention))
          .arg(estimate_.fits ? "<b style='color:#060'>fits</b>" : "<b style='color:#b00'>does not fit</b>"));
  bars_->set(&estimate_);
  largest_->setRowCount(0);
  const ShapeFamily family;  // the paper's
  for (Strategy s : all_strategies()) {
    const MaxModelResult res = find_max_model(s, family, *m, *r, *hw);
    const int row = largest_->rowCount();
    largest_->insertRow(row);
    largest_->setItem(row, 0, new QTableWidgetItem(strategy_label(s)));
    largest_->setItem(
        row, 1,
        new QTableWidgetItem(
            res.found ? QString("%1B%2")
                            .arg(static_cast<double>(res.model.total_params()) / 1e9, 0, 'f', 2)
                            .arg(res.tiling_factor > 1 ? QString(" (tiling %1)").arg(res.tiling_factor) : "")
                      : QString("none")));
    largest_->setItem(
        row, 2,
        new QTableWidgetItem(QString::fromStdString(res.error.empty() ? res.next_failure : res.error)));
  }
  largest_->resizeColumnsToContents();
  return true;
}

}  // namespace memwall::gui
