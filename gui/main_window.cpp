// MainWindow (see main_window.h).
#include "gui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>

#include "gui/predict_panel.h"

namespace memwall::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent), axis_(new TimeAxis) {
  axis_->setParent(this);
  setWindowTitle("memwall-gui");
  setAcceptDrops(true);
  auto* split = new QSplitter(Qt::Vertical, this);
  auto* scroll = new QScrollArea(split);
  views_box_ = new QWidget;
  views_layout_ = new QVBoxLayout(views_box_);
  views_layout_->setContentsMargins(0, 0, 0, 0);
  auto* hint = new QLabel(
      "Open a memwall trace (File > Open, drag and drop, or memwall-gui FILE.json[.gz]).\n"
      "Traces come from memwall plan, simulate, train and replay (--trace).");
  hint->setAlignment(Qt::AlignCenter);
  views_layout_->addWidget(hint);
  scroll->setWidget(views_box_);
  scroll->setWidgetResizable(true);
  tabs_ = new QTabWidget(split);
  summary_ = new QTableWidget(0, 2);
  summary_->setHorizontalHeaderLabels({"", "value"});
  diff_ = new QTableWidget(0, 4);
  diff_->setHorizontalHeaderLabels({"", "A", "B", "B / A"});
  for (auto* t : {summary_, diff_}) {
    t->horizontalHeader()->setStretchLastSection(true);
    t->verticalHeader()->setVisible(false);
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  }
  tabs_->addTab(summary_, "Summary");
  tabs_->addTab(diff_, "Compare");
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({640, 200});
  setCentralWidget(split);
  predict_ = new PredictPanel(this);
  addDockWidget(Qt::RightDockWidgetArea, predict_);
  predict_->hide();

  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open...", QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, "Open a memwall trace", {},
                                                      "memwall traces (*.json *.json.gz);;All files (*)");
    if (!path.isEmpty()) open(path);
  });
  file->addAction("&Compare two traces...", this, [this] {
    const QStringList paths = QFileDialog::getOpenFileNames(
        this, "Choose two traces", {}, "memwall traces (*.json *.json.gz);;All files (*)");
    if (paths.size() == 2) compare(paths[0], paths[1]);
  });
  recent_menu_ = file->addMenu("Open &Recent");
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* view = menuBar()->addMenu("&View");
  view->addAction("&Reset zoom", QKeySequence(Qt::Key_Home), this, [this] { axis_->reset(); });
  view->addAction(predict_->toggleViewAction());
  rebuild_recent();
  resize(1280, 860);
}

void MainWindow::fail(const QString& message) {
  last_error_ = message;
  statusBar()->showMessage(message, 10000);
  auto* box = new QMessageBox(QMessageBox::Critical, "memwall-gui", message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();  // not modal-blocking: the window stays usable (and tests can go on)
}

bool MainWindow::load(const QString& path, std::shared_ptr<const TraceModel>& out) {
  auto m = TraceModel::load(path.toStdString());
  if (!m.is_ok()) {
    fail(QString::fromStdString(m.status().message()));
    return false;
  }
  out = std::make_shared<const TraceModel>(std::move(m).value());
  remember(path);
  return true;
}

bool MainWindow::open(const QString& path) {
  std::shared_ptr<const TraceModel> m;
  if (!load(path, m)) return false;
  show_models({m});
  fill_summary(*m);
  tabs_->setCurrentWidget(summary_);
  setWindowTitle("memwall-gui — " + QFileInfo(path).fileName());
  return true;
}

bool MainWindow::compare(const QString& a, const QString& b) {
  std::shared_ptr<const TraceModel> ma, mb;
  if (!load(a, ma) || !load(b, mb)) return false;
  show_models({ma, mb});
  fill_summary(*ma);
  fill_compare(*ma, *mb);
  tabs_->setCurrentWidget(diff_);
  setWindowTitle("memwall-gui — " + QFileInfo(a).fileName() + " vs " + QFileInfo(b).fileName());
  return true;
}

void MainWindow::show_models(std::vector<std::shared_ptr<const TraceModel>> models) {
  while (QLayoutItem* item = views_layout_->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  views_.clear();
  double longest = 0;
  for (const auto& m : models) longest = std::max(longest, m->t_max - m->t_min);
  axis_->set_full(longest);
  const char* tag[] = {"A: ", "B: "};
  for (std::size_t i = 0; i < models.size(); ++i) {
    const auto& m = models[i];
    auto* title = new QLabel(QString("%1%2  (%3 %4, %5 spans, %6 counter samples)")
                                 .arg(models.size() > 1 ? tag[i] : "")
                                 .arg(QFileInfo(QString::fromStdString(m->name)).fileName())
                                 .arg(QString::fromStdString(m->data.header.command))
                                 .arg(QString::fromStdString(m->data.header.executor))
                                 .arg(m->data.spans.size())
                                 .arg(m->data.counters.size()));
    title->setStyleSheet("font-weight: bold; padding: 4px;");
    views_layout_->addWidget(title);
    auto* v = new TimelineView(m, axis_);
    views_layout_->addWidget(v);
    views_.push_back(v);
  }
  views_layout_->addStretch(1);
}

namespace {
void add_row(QTableWidget* t, const QString& k, const QStringList& values) {
  const int r = t->rowCount();
  t->insertRow(r);
  t->setItem(r, 0, new QTableWidgetItem(k));
  for (int c = 0; c < values.size(); ++c) t->setItem(r, c + 1, new QTableWidgetItem(values[c]));
}
QString q(const std::string& s) {
  return QString::fromStdString(s);
}
}  // namespace

void MainWindow::fill_summary(const TraceModel& m) {
  summary_->setRowCount(0);
  const Summary& s = m.summary;
  const char* tiers[] = {"gpu", "cpu", "nvme"};
  add_row(summary_, "trace",
          {q(m.name) + " (" + q(m.data.header.command) + ", executor " + q(m.data.header.executor) + ")"});
  add_row(summary_, "ranks", {QString::number(s.ranks)});
  add_row(summary_, "iterations shown", {QString::number(s.iterations)});
  add_row(summary_, "iteration time", {q(human_seconds(s.iteration_s))});
  add_row(summary_, "TFLOP/s per GPU", {QString::number(s.tflops_per_gpu, 'f', 2)});
  add_row(summary_, "compute busy (rank 0)", {q(human_seconds(s.compute_s))});
  add_row(summary_, "exposed (not computing)", {q(human_seconds(s.exposed_s))});
  for (int t = 0; t < 3; ++t) {
    const double cap = m.capacity_of(std::string("memory ") + tiers[t]);
    add_row(summary_, QString("peak memory %1 (beyond the reserve)").arg(tiers[t]),
            {q(format_bytes(s.peak_bytes[t])) + (cap > 0 ? " of " + q(format_bytes(cap)) : QString())});
  }
  for (const Stall& st : s.stalls) {
    add_row(summary_, "stall",
            {q(human_seconds(st.seconds)) + " before " + q(st.before) + " at " +
             q(human_seconds(st.at_s - m.t_min)) +
             (st.cause.empty() ? QString() : ", waiting on " + q(st.cause))});
  }
  summary_->resizeColumnToContents(0);
}

void MainWindow::fill_compare(const TraceModel& a, const TraceModel& b) {
  diff_->setRowCount(0);
  auto row = [&](const QString& k, double va, double vb, const std::string& (*)(double) = nullptr) {
    (void)0;
    add_row(diff_, k,
            {QString::number(va, 'g', 5), QString::number(vb, 'g', 5),
             va != 0 ? QString::number(vb / va, 'f', 3) : "-"});
  };
  row("iteration time (s)", a.summary.iteration_s, b.summary.iteration_s);
  row("TFLOP/s per GPU", a.summary.tflops_per_gpu, b.summary.tflops_per_gpu);
  row("compute busy (s)", a.summary.compute_s, b.summary.compute_s);
  row("exposed (s)", a.summary.exposed_s, b.summary.exposed_s);
  const char* tiers[] = {"gpu", "cpu", "nvme"};
  for (int t = 0; t < 3; ++t)
    row(QString("peak memory %1 (GiB)").arg(tiers[t]), a.summary.peak_bytes[t] / 1073741824.0,
        b.summary.peak_bytes[t] / 1073741824.0);
  // Busy time and bytes per resource of rank 0, by track name.
  std::map<std::string, std::pair<const Track*, const Track*>> by;
  for (const Track& t : a.tracks) {
    if (t.pid == a.tracks.front().pid) by[t.name.substr(t.name.find(" / ") + 3)].first = &t;
  }
  for (const Track& t : b.tracks) {
    if (t.pid == b.tracks.front().pid) by[t.name.substr(t.name.find(" / ") + 3)].second = &t;
  }
  for (const auto& [name, ab] : by) {
    const double ia = a.summary.iterations, ib = b.summary.iterations;
    row(q(name) + " busy per iteration (s)", ab.first ? ab.first->busy_s / ia : 0,
        ab.second ? ab.second->busy_s / ib : 0);
    if ((ab.first && ab.first->bytes > 0) || (ab.second && ab.second->bytes > 0))
      row(q(name) + " bytes per iteration (MiB)", ab.first ? ab.first->bytes / ia / 1048576 : 0,
          ab.second ? ab.second->bytes / ib / 1048576 : 0);
  }
  diff_->resizeColumnToContents(0);
}

void MainWindow::remember(const QString& path) {
  QSettings st("memwall", "memwall-gui");
  QStringList recent = st.value("recent").toStringList();
  const QString abs = QFileInfo(path).absoluteFilePath();
  recent.removeAll(abs);
  recent.prepend(abs);
  while (recent.size() > 10) recent.removeLast();
  st.setValue("recent", recent);
  rebuild_recent();
}

void MainWindow::rebuild_recent() {
  recent_menu_->clear();
  const QStringList recent = QSettings("memwall", "memwall-gui").value("recent").toStringList();
  for (const QString& p : recent) recent_menu_->addAction(p, this, [this, p] { open(p); });
  recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  const auto urls = e->mimeData()->urls();
  if (urls.size() == 1) open(urls[0].toLocalFile());
  if (urls.size() >= 2) compare(urls[0].toLocalFile(), urls[1].toLocalFile());
}

}  // namespace memwall::gui
