// PredictPanel: choose hardware, model and run from scenarios/ (or files), optionally another sequence length
// and attention kernel than the run's, and see what core's analytic model says: per-tier memory bars by
// category with the capacity, whether it fits, and the largest model per strategy of the paper's Table 2
// (shaped like the chosen model, the paper's shape family).
#pragma once

#include <QDockWidget>

#include <string>
#include <vector>

#include "memory/memory_model.h"

class QComboBox;
class QLabel;
class QSpinBox;
class QTableWidget;

namespace memwall::gui {

class TierBars;

class PredictPanel : public QDockWidget {
  Q_OBJECT
 public:
  explicit PredictPanel(QWidget* parent = nullptr);
  // Computes for the current choices; false (with the message in status()) on bad input.
  bool compute();
  bool choose(const QString& hardware, const QString& model, const QString& run);
  // Overrides of the run: sequence length (0: the run's, else the model's n_positions) and attention ("run",
  // "unfused" or "flash"); recomputes.
  bool set_sequence(int sequence_length, const QString& attention);
  QString status() const;
  const MemoryEstimate& estimate() const { return estimate_; }
  QTableWidget* largest_table() const { return largest_; }
  static QString scenarios_dir();

 private:
  QComboBox *hw_, *model_, *run_, *attention_;
  QSpinBox* seq_;
  QLabel* status_;
  TierBars* bars_;
  QTableWidget* largest_;
  MemoryEstimate estimate_;
};

}  // namespace memwall::gui
