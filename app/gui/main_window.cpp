// SPDX-License-Identifier: MIT
#include "main_window.h"

#include <QAction>
#include <QClipboard>
#include <QCloseEvent>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSlider>
#include <QSplitter>
#include <QStatusBar>
#include <QStyle>
#include <QTableView>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include "image_convert.h"
#include "image_views.h"
#include "legend_widget.h"
#include "params_panel.h"
#include "result_charts.h"
#include "results_model.h"

namespace kmseg::gui {

namespace {

constexpr int kMaxRecent = 8;
constexpr int kProgressSteps = 1000;
const QRgb kBoundaryColour = qRgb(255, 255, 255);

QStringList localFiles(const QMimeData* mime) {
  QStringList paths;
  if (!mime || !mime->hasUrls()) return paths;
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile()) paths << url.toLocalFile();
  return paths;
}

/// The recent files as the settings hold them, fit for the menu: no empty entries (they would
/// open nothing), each file once, at most kMaxRecent, newest first.
QStringList cleanRecent(QStringList paths) {
  paths.removeIf([](const QString& path) { return path.trimmed().isEmpty(); });
  paths.removeDuplicates();
  if (paths.size() > kMaxRecent) paths.resize(kMaxRecent);
  return paths;
}

QString modeTag(const QString& name) {
  QString tag = name;
  return tag.replace('>', '-');
}

}  // namespace

MainWindow::MainWindow(const Options& options, QWidget* parent)
    : QMainWindow(parent), options_(options) {
  setWindowTitle(tr("kmseg"));
  setAcceptDrops(true);
  controller_ = new Controller(this);
  model_ = new ResultsModel(this);
  buildLayout();
  buildActions();

  if (options_.useSettings) {
    QSettings s;
    params_->setParams(loadParams(s));
    recent_ = cleanRecent(s.value("recentFiles").toStringList());
    lastDir_ = s.value("lastDirectory").toString();
    restoreGeometry(s.value("window/geometry").toByteArray());
    stateRestored_ = restoreState(s.value("window/state").toByteArray());
    split_->restoreState(s.value("window/split").toByteArray());
    topSplit_->restoreState(s.value("window/topSplit").toByteArray());
    bottomSplit_->restoreState(s.value("window/bottomSplit").toByteArray());
  }
  rebuildRecentMenu();

  connect(controller_, &Controller::imageLoaded, this, &MainWindow::onImageLoaded);
  connect(controller_, &Controller::progressed, this, &MainWindow::onProgress);
  connect(controller_, &Controller::runStarted, this, [this](int job) {
    userPicked_ = false;
    lastStartedJob_ = job;
  });
  connect(controller_, &Controller::rowsReady, this, [this](int job) {
    // Rows come from the run going on only. Before its first progress (its reference taken from
    // the run before) the row after them is the one computing.
    if (model_->activeJob() != job && controller_->outcome())
      model_->setActiveRun(job, controller_->outcome()->readyRows());
    showOutcome();
  });
  connect(controller_, &Controller::runFinished, this, &MainWindow::onRunFinished);
  connect(controller_, &Controller::runCancelled, this, [this](int job) {
    model_->setRunEnded(job, true);
    if (controller_->isBusy()) return;
    // Opening an image cancels the runs on the image before and clears their results.
    if (job <= jobsBeforeImage_ && controller_->image())
      progressLabel_->setText(tr("Opened %1; the run on the image before it was cancelled")
                                  .arg(controller_->image()->path));
    else if (!controller_->outcome())
      progressLabel_->setText(tr("Cancelled"));
    else
      progressLabel_->setText(tr("Cancelled; the results shown are kept"));
  });
  connect(controller_, &Controller::runFailed, this, [this](int job) {
    model_->setRunEnded(job, false);
    if (!controller_->isBusy()) progressLabel_->setText(tr("The run failed"));
  });
  connect(controller_, &Controller::busyChanged, this, &MainWindow::onBusyChanged);
  connect(controller_, &Controller::backendChanged, this, &MainWindow::setBackendText);
  connect(controller_, &Controller::errorOccurred, this, &MainWindow::showError);
  connect(controller_, &Controller::exportedAll, this, [this](const QString& dir, int files) {
    progressLabel_->setText(tr("Wrote %n file(s) to %1", nullptr, files).arg(dir));
  });
  connect(params_, &ParamsPanel::backendChanged, this, [this] {
    const GuiParams p = params_->params();
    controller_->probeBackend(p.backend, p.workflow.kmeans.threads);
  });
  connect(params_, &ParamsPanel::resetRequested, this,
          [this] { params_->setParams(defaultParams()); });
  connect(params_->runButton(), &QPushButton::clicked, this, &MainWindow::runSelected);
  connect(params_->compareButton(), &QPushButton::clicked, this, &MainWindow::compareAll);
  connect(params_->cancelButton(), &QPushButton::clicked, this, &MainWindow::cancelRun);
  connect(views_, &ImageViews::hovered, this, &MainWindow::showPixel);
  connect(views_, &ImageViews::zoomChanged, this,
          [this](double zoom) { zoomLabel_->setText(tr("%1 %").arg(zoom * 100.0, 0, 'f', 0)); });
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            const auto o = model_->outcome();
            if (!selecting_ && current.isValid() && o) {
              userPicked_ = true;
              pickedMode_ = current.row() == 0
                                ? std::nullopt
                                : std::optional<Mode>(o->modes.at(std::size_t(current.row() - 1)));
            }
            showRow(current.isValid() ? current.row() : -1);
          });

  const GuiParams p = params_->params();
  setBackendText(tr("finding the backend…"), QString());
  controller_->probeBackend(p.backend, p.workflow.kmeans.threads);
  onBusyChanged(false);
}

MainWindow::~MainWindow() {
  // The controller (a child) cancels its runs and waits for them before the widgets go.
  delete controller_;
}

void MainWindow::buildLayout() {
  views_ = new ImageViews(this);

  table_ = new QTableView(this);
  table_->setModel(model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setAlternatingRowColors(true);
  table_->setToolTip(tr("Select a row to show that run's labels and disagreement mask"));

  charts_ = new ResultCharts(this);
  legend_ = new LegendWidget(this);
  auto* legendBox = new QWidget(this);
  auto* legendLayout = new QVBoxLayout(legendBox);
  legendLayout->setContentsMargins(0, 0, 0, 0);
  legendLayout->setSpacing(1);
  auto* legendTitle = new QLabel(tr("Legend: fp64 clusters"), legendBox);
  legendTitle->setContentsMargins(4, 0, 4, 0);
  legendLayout->addWidget(legendTitle);
  legendLayout->addWidget(legend_, 1);

  // Top: the views and the charts; bottom: the results table and the legend.
  topSplit_ = new QSplitter(Qt::Horizontal, this);
  topSplit_->addWidget(views_);
  topSplit_->addWidget(charts_);
  topSplit_->setStretchFactor(0, 3);
  topSplit_->setStretchFactor(1, 2);
  bottomSplit_ = new QSplitter(Qt::Horizontal, this);
  bottomSplit_->addWidget(table_);
  bottomSplit_->addWidget(legendBox);
  bottomSplit_->setStretchFactor(0, 5);
  bottomSplit_->setStretchFactor(1, 1);
  split_ = new QSplitter(Qt::Vertical, this);
  split_->addWidget(topSplit_);
  split_->addWidget(bottomSplit_);
  split_->setStretchFactor(0, 4);
  split_->setStretchFactor(1, 3);
  setCentralWidget(split_);

  params_ = new ParamsPanel(this);
  auto* scroll = new QScrollArea(this);
  scroll->setWidget(params_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setMinimumWidth(params_->minimumSizeHint().width() +
                          scroll->style()->pixelMetric(QStyle::PM_ScrollBarExtent));
  paramsDock_ = new QDockWidget(tr("Parameters"), this);
  paramsDock_->setObjectName(QStringLiteral("parametersDock"));
  paramsDock_->setWidget(scroll);
  paramsDock_->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::LeftDockWidgetArea, paramsDock_);

  progressLabel_ = new QLabel(this);
  progressLabel_->setObjectName(QStringLiteral("progressLabel"));
  progressBar_ = new QProgressBar(this);
  progressBar_->setMaximumWidth(160);
  progressBar_->setTextVisible(false);
  pixelLabel_ = new QLabel(this);
  pixelLabel_->setToolTip(tr("The pixel under the cursor and its label in each view"));
  sizeLabel_ = new QLabel(tr("no image"), this);
  backendLabel_ = new QLabel(this);
  statusBar()->addWidget(progressLabel_, 1);
  statusBar()->addWidget(progressBar_);
  statusBar()->addPermanentWidget(pixelLabel_);
  statusBar()->addPermanentWidget(sizeLabel_);
  statusBar()->addPermanentWidget(backendLabel_);
}

void MainWindow::buildActions() {
  auto* file = menuBar()->addMenu(tr("&File"));
  auto* openAction = file->addAction(tr("&Open…"), this, &MainWindow::openDialog);
  openAction->setShortcut(QKeySequence::Open);
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  file->addSeparator();
  auto* exportMenu = file->addMenu(tr("&Export"));
  struct ExportItem {
    QString text;
    Controller::ExportKind kind;
  };
  const ExportItem items[] = {
      {tr("&Label map (exact ids)…"), Controller::ExportKind::LabelMap},
      {tr("&Colour PNG…"), Controller::ExportKind::ColorMap},
      {tr("Disagreement &mask…"), Controller::ExportKind::Mask},
      {tr("Report (&JSON)…"), Controller::ExportKind::ReportJson},
      {tr("Report (&CSV)…"), Controller::ExportKind::ReportCsv},
  };
  for (const ExportItem& item : items) {
    const auto kind = item.kind;
    exportActions_.append(
        exportMenu->addAction(item.text, this, [this, kind] { exportDialog(kind); }));
  }
  exportActions_.append(
      exportMenu->addAction(tr("Current &view as shown…"), this, &MainWindow::exportViewDialog));
  exportMenu->addSeparator();
  auto* exportAll =
      exportMenu->addAction(tr("&All results to a folder…"), this, &MainWindow::exportAllDialog);
  exportAll->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
  exportActions_.append(exportAll);
  file->addSeparator();
  auto* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  // Ctrl+C copies the results where the table has the focus; the menu entry copies them from
  // anywhere. Both copy the whole table (see ResultsModel::tableText).
  auto* edit = menuBar()->addMenu(tr("&Edit"));
  copyResultsAction_ = edit->addAction(tr("&Copy results table"), this, &MainWindow::copyResults);
  copyResultsAction_->setShortcut(QKeySequence::Copy);
  copyResultsAction_->setShortcutContext(Qt::WidgetWithChildrenShortcut);
  table_->addAction(copyResultsAction_);
  exportActions_.append(copyResultsAction_);

  auto* run = menuBar()->addMenu(tr("&Run"));
  runAction_ = run->addAction(tr("&Run selected mode"), this, &MainWindow::runSelected);
  runAction_->setShortcut(Qt::Key_F5);
  compareAction_ = run->addAction(tr("&Compare all modes"), this, &MainWindow::compareAll);
  compareAction_->setShortcut(Qt::Key_F6);
  cancelAction_ = run->addAction(tr("C&ancel"), this, &MainWindow::cancelRun);
  cancelAction_->setShortcut(Qt::Key_Escape);

  auto* view = menuBar()->addMenu(tr("&View"));
  auto* zoomIn = view->addAction(tr("Zoom &in"), views_, &ImageViews::zoomIn);
  zoomIn->setShortcuts({QKeySequence::ZoomIn, QKeySequence(Qt::CTRL | Qt::Key_Equal)});
  auto* zoomOut = view->addAction(tr("Zoom &out"), views_, &ImageViews::zoomOut);
  zoomOut->setShortcut(QKeySequence::ZoomOut);
  auto* fit = view->addAction(tr("&Fit"), views_, &ImageViews::fitToWindow);
  fit->setShortcut(Qt::CTRL | Qt::Key_0);
  auto* actual = view->addAction(tr("&100 %"), views_, &ImageViews::actualSize);
  actual->setShortcut(Qt::CTRL | Qt::Key_1);
  view->addSeparator();
  linkAction_ = view->addAction(tr("&Link views"));
  linkAction_->setCheckable(true);
  linkAction_->setChecked(true);
  linkAction_->setShortcut(Qt::Key_L);
  linkAction_->setIconText(tr("Link"));
  linkAction_->setToolTip(tr("Zoom and pan all views together (L)"));
  connect(linkAction_, &QAction::toggled, views_, &ImageViews::setLinked);
  overlayAction_ = view->addAction(tr("Label &overlay on the photo"));
  overlayAction_->setCheckable(true);
  overlayAction_->setShortcut(Qt::Key_O);
  overlayAction_->setIconText(tr("Overlay"));
  overlayAction_->setToolTip(tr("Show the selected mode's labels over the photo (O)"));
  connect(overlayAction_, &QAction::toggled, views_, &ImageViews::setOverlayVisible);
  boundariesAction_ = view->addAction(tr("Cluster &boundaries"));
  boundariesAction_->setCheckable(true);
  boundariesAction_->setShortcut(Qt::Key_B);
  boundariesAction_->setIconText(tr("Boundaries"));
  boundariesAction_->setToolTip(tr("Draw pixels whose 4-neighbour has another label (B)"));
  connect(boundariesAction_, &QAction::toggled, views_, &ImageViews::setBoundariesVisible);

  auto* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About kmseg"), this, [this] {
    QMessageBox::about(
        this, tr("About kmseg"),
        tr("<b>kmseg</b> segments photos with k-means at a floating-point precision you choose "
           "and compares every label map with an fp64 reference."));
  });

  auto* tools = addToolBar(tr("Main"));
  tools->setObjectName(QStringLiteral("mainToolBar"));
  tools->addAction(openAction);
  tools->addAction(runAction_);
  tools->addAction(compareAction_);
  tools->addAction(cancelAction_);
  tools->addSeparator();
  tools->addAction(zoomIn);
  tools->addAction(zoomOut);
  tools->addAction(fit);
  tools->addAction(actual);
  zoomLabel_ = new QLabel(tr("100 %"), this);
  zoomLabel_->setMinimumWidth(
      zoomLabel_->fontMetrics().horizontalAdvance(QStringLiteral("6400 %")));
  zoomLabel_->setAlignment(Qt::AlignCenter);
  tools->addWidget(zoomLabel_);
  tools->addAction(linkAction_);
  tools->addSeparator();
  tools->addAction(overlayAction_);
  opacity_ = new QSlider(Qt::Horizontal, this);
  opacity_->setRange(0, 100);
  opacity_->setValue(50);
  opacity_->setMaximumWidth(110);
  opacity_->setToolTip(tr("Opacity of the label overlay"));
  connect(opacity_, &QSlider::valueChanged, views_,
          [this](int v) { views_->setOverlayOpacity(v / 100.0); });
  tools->addWidget(new QLabel(tr(" opacity "), this));
  tools->addWidget(opacity_);
  tools->addAction(boundariesAction_);
  views_->setOverlayOpacity(opacity_->value() / 100.0);
}

void MainWindow::openDialog() {
  QStringList patterns;
  for (const char* ext :
       {"jpg", "jpeg", "png", "bmp", "gif", "tga", "psd", "hdr", "pic", "pnm", "ppm", "pgm"})
    patterns << QStringLiteral("*.%1").arg(QLatin1String(ext));
  const QString path = QFileDialog::getOpenFileName(
      this, tr("Open image"), lastDir_,
      tr("Images (%1);;All files (*)").arg(patterns.join(QLatin1Char(' '))));
  if (!path.isEmpty()) openFile(path);
}

void MainWindow::openFile(const QString& path) {
  openFile(path, QString());
}

void MainWindow::openFile(const QString& path, const QString& note) {
  openNote_ = note;
  const QString opening = tr("Opening %1…").arg(QFileInfo(path).fileName());
  progressLabel_->setText(note.isEmpty() ? opening : tr("%1 (%2)").arg(opening, note));
  controller_->openImage(path, params_->params().maxPixels);
}

void MainWindow::onImageLoaded(const QString& path) {
  const auto image = controller_->image();
  setWindowTitle(tr("kmseg — %1").arg(QFileInfo(path).fileName()));
  // The results of the image before go, and what acts on them: the runs on it were cancelled
  // (jobsBeforeImage_ tells their ends apart).
  jobsBeforeImage_ = lastStartedJob_;
  views_->setOriginal(image->display);
  model_->setOutcome(nullptr);
  charts_->setOutcome(nullptr);
  legend_->clearClusters();
  pixelLabel_->clear();
  for (QAction* a : exportActions_) a->setEnabled(false);
  shownRow_ = -1;
  shownOf_.reset();
  forgetReferenceMaps();
  const int w = image->image.width, h = image->image.height;
  sizeLabel_->setText(tr("%1 × %2 px (%3 MP%4)")
                          .arg(w)
                          .arg(h)
                          .arg(double(w) * h / 1e6, 0, 'f', 2)
                          .arg(image->image.bitDepth == 16 ? tr(", 16-bit") : QString()));
  progressLabel_->setText(openNote_.isEmpty() ? tr("Opened %1").arg(path)
                                              : tr("Opened %1 (%2)").arg(path, openNote_));
  openNote_.clear();
  addRecent(path);
  lastDir_ = QFileInfo(path).absolutePath();
  QTimer::singleShot(0, views_, &ImageViews::fitToWindow);
}

void MainWindow::runSelected() {
  saveSettings();
  if (controller_->startRun(params_->params(), false) > 0) progressLabel_->setText(tr("Running…"));
}

void MainWindow::compareAll() {
  saveSettings();
  if (controller_->startRun(params_->params(), true) > 0)
    progressLabel_->setText(tr("Comparing all modes…"));
}

void MainWindow::cancelRun() {
  if (!controller_->isBusy()) return;
  controller_->cancel();
  progressLabel_->setText(tr("Cancelling…"));
}

void MainWindow::onProgress(const RunProgress& p) {
  model_->setActiveRun(p.job, p.run);
  const int maxIter = std::max(1, p.maxIterations);
  progressBar_->setRange(0, p.runCount * kProgressSteps);
  if (!p.restartNote.isEmpty()) {
    // Why is in the backend's text (setBackendText), which elides it; this line stays short.
    progressBar_->setValue(p.run * kProgressSteps);
    progressLabel_->setText(
        tr("[%1/%2] %3 · starts again on %4").arg(p.run + 1).arg(p.runCount).arg(p.name, p.engine));
    return;
  }
  progressBar_->setValue(p.run * kProgressSteps +
                         int(qint64(kProgressSteps) * std::min(p.iteration, maxIter) / maxIter));
  progressLabel_->setText(tr("[%1/%2] %3 · iteration %4 · changed %5 · fallback %6 %")
                              .arg(p.run + 1)
                              .arg(p.runCount)
                              .arg(p.name)
                              .arg(QLocale().toString(p.iteration))
                              .arg(QLocale().toString(p.changed))
                              .arg(p.fallbackPercent, 0, 'f', 2));
}

void MainWindow::showOutcome() {
  const auto outcome = controller_->outcome();
  // The end of a run brings the outcome its last row brought: nothing to take in again.
  if (outcome != model_->outcome()) {
    model_->setOutcome(outcome);
    charts_->setOutcome(outcome);
  }
  if (!outcome) return;
  // Show the row the user picked since the run started (it may have been picked in the results
  // before, which a new run's first row replaces), else the panel's mode; the reference's row
  // until that row is complete. (Following each row as it completes drew three maps per row on
  // every core while the comparisons ran, and slowed them.) A mode this run does not have
  // leaves the choice to the panel.
  int target = -1;
  if (userPicked_) {
    target = pickedMode_ ? outcome->rowOf(*pickedMode_) : 0;
    if (target < 0) userPicked_ = false;
  }
  if (target < 0) target = outcome->rowOf(outcome->params.mode);
  if (target < 0) target = outcome->rowCount() > 1 ? 1 : 0;
  if (!outcome->isReady(target)) target = 0;
  if (target != selectedRow()) selectRow(target);
}

void MainWindow::onRunFinished() {
  showOutcome();
  const auto outcome = controller_->outcome();
  const double total = outcome->runSeconds();
  int overflowed = 0;
  for (const auto& m : outcome->finished) overflowed += m->result.normOverflows > 0 ? 1 : 0;
  QString done = tr("Done: %1 run(s), %2 of Lloyd iterations")
                     .arg(outcome->rowCount())
                     .arg(ResultsModel::durationText(total));
  if (outcome->referenceGiven) done += tr(" · the fp64 reference of the run before");
  if (overflowed > 0)
    done += tr(" · %n mode(s) met pixels beyond their precision's range (see the marked rows)",
               nullptr, overflowed);
  progressLabel_->setText(done);
}

void MainWindow::onBusyChanged(bool busy) {
  progressBar_->setVisible(busy);
  if (busy) {
    progressBar_->setRange(0, 0);
    progressBar_->setValue(0);
  }
  cancelAction_->setEnabled(busy);
  params_->cancelButton()->setEnabled(busy);
  const bool have = controller_->outcome() != nullptr;
  for (QAction* a : exportActions_) a->setEnabled(have);
}

void MainWindow::copyResults() {
  const QString text = model_->tableText();
  if (text.isEmpty()) return;
  QGuiApplication::clipboard()->setText(text);
  progressLabel_->setText(tr("Copied the results table (%n row(s)) as tab-separated text", nullptr,
                             int(text.count(QLatin1Char('\n'))) - 1));
}

int MainWindow::selectedRow() const {
  const QModelIndex i = table_->selectionModel()->currentIndex();
  return i.isValid() ? i.row() : -1;
}

void MainWindow::selectRow(int row) {
  if (row < 0 || row >= model_->rowCount()) return;
  const auto o = model_->outcome();
  if (!o || !o->isReady(row)) return;
  selecting_ = true;
  table_->selectionModel()->setCurrentIndex(
      model_->index(row, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  selecting_ = false;
  showRow(row);
}

void MainWindow::forgetReferenceMaps() {
  referenceOf_.reset();
  referencePalette_.clear();
  referenceLabels_ = referenceBoundaries_ = QImage();
}

void MainWindow::showRow(int row) {
  const auto o = model_->outcome();
  for (QAction* a : exportActions_) a->setEnabled(o != nullptr);
  if (!o || !o->isReady(row)) {
    views_->clearResult();
    legend_->clearClusters();
    shownRow_ = -1;
    shownOf_.reset();
    forgetReferenceMaps();
    return;
  }
  // The same run in the same row, in the same colours, is already shown (the outcome grew, or
  // a new run took the reference of the one before).
  std::shared_ptr<const void> run =
      row == 0 ? std::shared_ptr<const void>(o->reference) : o->finished[std::size_t(row - 1)];
  if (row == shownRow_ && shownOf_ == run && referencePalette_ == o->palette) return;
  shownRow_ = row;
  shownOf_ = std::move(run);
  const KMeansResult& r = o->result(row);
  const int w = o->width(), h = o->height();
  const Comparison* c = o->comparison(row);
  const KMeansResult& ref = *o->reference;
  // Each map is rendered on every core (a pass over every pixel), the reference's once per
  // reference and palette; its cluster sizes came with it (RunOutcome::referenceSizes).
  if (referenceOf_ != o->reference || referencePalette_ != o->palette) {
    referenceLabels_ = renderLabels(ref.labels, w, h, o->palette);
    referenceBoundaries_ = renderBoundaries(ref.labels, w, h, kBoundaryColour);
    referenceOf_ = o->reference;
    referencePalette_ = o->palette;
  }
  // Candidate ids are drawn in the colour of the reference cluster they are matched to.
  const QImage modeLabels =
      renderLabels(r.labels, w, h, o->palette, c ? c->mapping : std::vector<int>{});
  const QImage mask = c ? renderMask(c->mask, w, h) : QImage();
  const QImage boundaries = renderBoundaries(r.labels, w, h, kBoundaryColour);
  views_->setResult(tr("%1 labels (colours matched to fp64)").arg(o->rowName(row)), modeLabels,
                    referenceLabels_, mask, boundaries, referenceBoundaries_);
  // Each reference cluster's centre in the photo's units, as the legend's row tooltips.
  std::vector<QString> centres;
  if (o->features && o->features->features.scales.size() == ref.centroids.cols &&
      ref.centroids.cols == kImageFeatureCount) {
    const Matrix raw = inRawUnits(ref.centroids, o->features->features.scales);
    const bool lab = o->features->options.colorSpace == ColorSpace::Lab;
    for (std::size_t j = 0; j < raw.rows; ++j) {
      double v[5];
      for (std::size_t q = 0; q < 5; ++q) v[q] = raw(j, q);
      centres.push_back(centreText(v, lab));
    }
  }
  legend_->setClusters(o->palette,
                       o->referenceSizes ? *o->referenceSizes : std::vector<std::int64_t>{},
                       c ? c->clusterDiffPercent : std::vector<double>{}, centres);
}

QString MainWindow::pixelText() const {
  return pixelLabel_->text();
}

QString MainWindow::sizeText() const {
  return sizeLabel_->text();
}

QString MainWindow::backendText() const {
  return backendLabel_->text();
}

QString MainWindow::backendToolTip() const {
  return backendLabel_->toolTip();
}

void MainWindow::showPixel(QPoint pixel) {
  const auto image = controller_->image();
  if (!image || pixel.x() < 0) {
    pixelLabel_->clear();
    return;
  }
  const int w = image->image.width;
  const std::size_t i = std::size_t(pixel.y()) * std::size_t(w) + std::size_t(pixel.x());
  QString text = tr("x %1 y %2 · RGB %3,%4,%5")
                     .arg(pixel.x())
                     .arg(pixel.y())
                     .arg(image->image.sample(i, 0))
                     .arg(image->image.sample(i, 1))
                     .arg(image->image.sample(i, 2));
  const auto o = model_->outcome();
  if (o && o->image == image && o->isReady(shownRow_)) {
    const KMeansResult& r = o->result(shownRow_);
    const Comparison* c = o->comparison(shownRow_);
    const int label = r.labels[i];
    const int refLabel = o->reference->labels[i];
    if (c) {
      text += tr(" · %1: %2 (≙ ref %3)")
                  .arg(o->rowName(shownRow_))
                  .arg(label)
                  .arg(c->mapping[std::size_t(label)]);
    } else {
      text += tr(" · %1: %2").arg(o->rowName(shownRow_)).arg(label);
    }
    text += tr(" · fp64: %1").arg(refLabel);
    if (c) text += c->mask[i] ? tr(" · differs") : tr(" · agrees");
  }
  pixelLabel_->setText(text);
}

void MainWindow::setBackendText(const QString& description, const QString& note) {
  const QString full = note.isEmpty() ? description : tr("%1 — %2").arg(description, note);
  backendLabel_->setText(backendLabel_->fontMetrics().elidedText(full, Qt::ElideRight, 420));
  backendLabel_->setToolTip(full);
}

QMessageBox* MainWindow::showError(const QString& title, const QString& text,
                                   const QString& advice) {
  lastError_ = title + QStringLiteral(": ") + text;
  progressLabel_->setText(title);
  // One dialog at a time: a new error replaces the one still open.
  if (errorBox_) errorBox_->close();
  auto* box = new QMessageBox(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
  box->setInformativeText(advice);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setObjectName(QStringLiteral("errorBox"));
  errorBox_ = box;
  box->open();
  return box;
}

QString MainWindow::suggestedName(const QString& suffix, const RunOutcome* o, int row,
                                  bool withMode) const {
  const QString stem = o ? QFileInfo(o->image->path).completeBaseName() : QStringLiteral("kmseg");
  const QString tag = !o || row < 0 || !withMode ? QString()
                      : row == 0                 ? QStringLiteral("reference")
                                                 : modeTag(o->rowName(row));
  const QString name = tag.isEmpty() ? stem + suffix : stem + '.' + tag + suffix;
  return lastDir_.isEmpty() ? name : lastDir_ + '/' + name;
}

void MainWindow::exportDialog(Controller::ExportKind kind) {
  // The run selected now is the one exported: while the dialog is open, rows completing (or a
  // new run) may move the selection or replace the results.
  const auto o = model_->outcome();
  const int row = selectedRow();
  // Reports are named as `kmseg compare` and `kmseg segment` name them.
  const QString reportSuffix =
      o && o->allModes ? QStringLiteral(".compare") : QStringLiteral(".segment");
  QString suffix, filter;
  switch (kind) {
    case Controller::ExportKind::LabelMap:
      suffix = QStringLiteral(".labels.png");
      filter = tr("PNG images (*.png)");
      break;
    case Controller::ExportKind::ColorMap:
      suffix = QStringLiteral(".color.png");
      filter = tr("PNG images (*.png)");
      break;
    case Controller::ExportKind::Mask:
      suffix = QStringLiteral(".mask.png");
      filter = tr("PNG images (*.png)");
      break;
    case Controller::ExportKind::ReportJson:
      suffix = reportSuffix + QStringLiteral(".json");
      filter = tr("JSON (*.json)");
      break;
    case Controller::ExportKind::ReportCsv:
      suffix = reportSuffix + QStringLiteral(".csv");
      filter = tr("CSV (*.csv)");
      break;
  }
  // A report covers every run, so its name carries no mode.
  const bool report =
      kind == Controller::ExportKind::ReportJson || kind == Controller::ExportKind::ReportCsv;
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Export"), suggestedName(suffix, o.get(), row, !report), filter);
  if (!path.isEmpty()) exportRun(kind, path, o, row);
}

bool MainWindow::exportTo(Controller::ExportKind kind, const QString& path) {
  return exportRun(kind, path, model_->outcome(), selectedRow());
}

bool MainWindow::exportRun(Controller::ExportKind kind, const QString& path,
                           const std::shared_ptr<const RunOutcome>& outcome, int row) {
  if (!controller_->exportFile(kind, path, outcome, row < 0 ? 0 : row)) return false;
  lastDir_ = QFileInfo(path).absolutePath();
  progressLabel_->setText(tr("Wrote %1").arg(path));
  return true;
}

void MainWindow::exportAllDialog() {
  const QString dir =
      QFileDialog::getExistingDirectory(this, tr("Export all results to a folder"), lastDir_);
  if (dir.isEmpty()) return;
  QStringList existing;
  for (const QString& path : controller_->exportAllFiles(dir))
    if (QFileInfo::exists(path)) existing << QFileInfo(path).fileName();
  if (!existing.isEmpty()) {
    const auto answer = QMessageBox::question(
        this, tr("Replace files?"),
        tr("%n file(s) of this export exist in %1 already, e.g. %2. Replace them?", nullptr,
           int(existing.size()))
            .arg(dir, existing.front()),
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer != QMessageBox::Yes) return;
  }
  exportAllTo(dir);
}

bool MainWindow::exportAllTo(const QString& dir) {
  const int files = int(controller_->exportAllFiles(dir).size());
  if (!controller_->exportAll(dir)) return false;
  lastDir_ = dir;
  progressLabel_->setText(tr("Writing %n file(s) to %1…", nullptr, files).arg(dir));
  return true;
}

void MainWindow::exportViewDialog() {
  // The views as shown now, named after the run they show: the dialog may stay open while the
  // selection moves.
  const QImage shown = views_->grab().toImage();
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Export the views as shown"),
      suggestedName(QStringLiteral(".view.png"), model_->outcome().get(), selectedRow()),
      tr("PNG images (*.png);;JPEG (*.jpg)"));
  if (!path.isEmpty()) saveView(shown, path);
}

bool MainWindow::exportViewTo(const QString& path) {
  return saveView(views_->grab().toImage(), path);
}

bool MainWindow::saveView(const QImage& shown, const QString& path) {
  QString error;
  if (!saveImageAtomic(shown, path, &error)) {
    showError(tr("Cannot export %1").arg(path), error,
              tr("Choose a folder you can write to and a file name that is not a folder, then "
                 "export again."));
    return false;
  }
  lastDir_ = QFileInfo(path).absolutePath();
  progressLabel_->setText(tr("Wrote %1").arg(path));
  return true;
}

void MainWindow::addRecent(const QString& path) {
  const QString abs = QFileInfo(path).absoluteFilePath();
  recent_.removeAll(abs);
  recent_.prepend(abs);
  while (recent_.size() > kMaxRecent) recent_.removeLast();
  if (options_.useSettings) QSettings().setValue("recentFiles", recent_);
  rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu() {
  recentMenu_->clear();
  for (const QString& path : recent_)
    recentMenu_->addAction(QFileInfo(path).fileName(), this, [this, path] { openFile(path); })
        ->setToolTip(path);
  recentMenu_->setEnabled(!recent_.isEmpty());
  if (recent_.isEmpty()) return;
  recentMenu_->addSeparator();
  recentMenu_->addAction(tr("Clear the list"), this, [this] {
    recent_.clear();
    if (options_.useSettings) QSettings().setValue("recentFiles", recent_);
    rebuildRecentMenu();
  });
}

void MainWindow::saveSettings() {
  if (!options_.useSettings) return;
  QSettings s;
  saveParams(s, params_->params());
  s.setValue("recentFiles", recent_);
  s.setValue("lastDirectory", lastDir_);
}

void MainWindow::showEvent(QShowEvent* event) {
  QMainWindow::showEvent(event);
  if (!firstShow_) return;
  firstShow_ = false;
  // As narrow as the panel allows (unless the user's layout was restored): the views and the
  // table need the width more. Docks can only be resized once the window is laid out.
  if (!stateRestored_)
    resizeDocks({paramsDock_}, {paramsDock_->minimumSizeHint().width()}, Qt::Horizontal);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!localFiles(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  const QStringList paths = localFiles(event->mimeData());
  if (paths.isEmpty()) return;
  event->acceptProposedAction();
  // The window holds one image: the first file dropped, and the status line says so when there
  // were more.
  openFile(paths.front(), paths.size() > 1 ? tr("only the first of the %n dropped files", nullptr,
                                                int(paths.size()))
                                           : QString());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  controller_->cancel();
  saveSettings();
  if (options_.useSettings) {
    QSettings s;
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/state", saveState());
    s.setValue("window/split", split_->saveState());
    s.setValue("window/topSplit", topSplit_->saveState());
    s.setValue("window/bottomSplit", bottomSplit_->saveState());
  }
  QMainWindow::closeEvent(event);
}

}  // namespace kmseg::gui
