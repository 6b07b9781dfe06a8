// SPDX-License-Identifier: MIT
#pragma once

#include <QImage>
#include <QMainWindow>
#include <QPointer>
#include <QStringList>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "controller.h"

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QMessageBox;
class QProgressBar;
class QSlider;
class QSplitter;
class QTableView;

namespace kmseg::gui {

class ImageViews;
class LegendWidget;
class ParamsPanel;
class ResultCharts;
class ResultsModel;

/// The main window: renders what the Controller holds and forwards the user's requests to it.
/// GUI thread only.
class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  struct Options {
    /// Read and write QSettings (parameters, recent files, window state). Off for screenshots,
    /// which must not depend on, or change, the user's settings.
    bool useSettings = true;
  };

  /// The window with its controller; reads the settings when options.useSettings.
  explicit MainWindow(const Options& options, QWidget* parent = nullptr);
  /// The window with settings.
  MainWindow() : MainWindow(Options{}) {}
  /// Stops the runs (the controller waits for them) before the widgets go.
  ~MainWindow() override;

  /// Loads `path` in the background; an error shows a dialog and keeps what is shown.
  void openFile(const QString& path);
  /// Runs the fp64 reference and the mode selected in the parameters panel.
  void runSelected();
  /// Runs the fp64 reference and all nine modes.
  void compareAll();
  /// Asks the active runs to stop (within one iteration).
  void cancelRun();
  /// Writes `kind` for the selected table row; false (with an error dialog) on failure.
  bool exportTo(Controller::ExportKind kind, const QString& path);
  /// Saves the image views as they are shown (atomically); false with a dialog on failure.
  bool exportViewTo(const QString& path);
  /// Starts writing every file of the result into `dir` (Controller::exportAll), replacing
  /// files of those names; false with a dialog when it cannot start.
  bool exportAllTo(const QString& dir);

  /// The selected results row (0 = reference), -1 when there is none.
  int selectedRow() const;
  /// Selects table row `row` and shows that run in the views and the legend.
  void selectRow(int row);

  /// Shows a non-blocking, window-modal error dialog and returns it.
  QMessageBox* showError(const QString& title, const QString& text, const QString& advice);
  /// "title: text" of the last error shown; empty when none.
  QString lastError() const { return lastError_; }

  /// The window's parts (for main() and the tests).
  Controller* controller() const { return controller_; }
  ImageViews* views() const { return views_; }
  ParamsPanel* paramsPanel() const { return params_; }
  ResultsModel* resultsModel() const { return model_; }
  QTableView* resultsView() const { return table_; }
  ResultCharts* charts() const { return charts_; }
  LegendWidget* legend() const { return legend_; }
  QProgressBar* progressBar() const { return progressBar_; }
  QAction* overlayAction() const { return overlayAction_; }
  QAction* boundariesAction() const { return boundariesAction_; }
  QAction* linkAction() const { return linkAction_; }
  /// Edit > Copy results table (Ctrl+C in the table).
  QAction* copyResultsAction() const { return copyResultsAction_; }
  QSlider* opacitySlider() const { return opacity_; }
  /// Status bar texts: the pixel under the cursor, the image size, the backend.
  QString pixelText() const;
  QString sizeText() const;
  QString backendText() const;
  /// The backend's whole text, with the reason when a run did not take the chosen engine.
  QString backendToolTip() const;
  /// Recently opened files, newest first (absolute paths).
  QStringList recentFiles() const { return recent_; }

 protected:
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;
  void closeEvent(QCloseEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  void buildActions();
  void buildLayout();
  void openDialog();
  /// openFile(path), with `note` added to the status line's "Opening" and "Opened".
  void openFile(const QString& path, const QString& note);
  /// Asks for a file name and writes `kind` for the run selected when it asked.
  void exportDialog(Controller::ExportKind kind);
  /// exportTo for row `row` of `outcome` (the table's result when an export dialog opened).
  bool exportRun(Controller::ExportKind kind, const QString& path,
                 const std::shared_ptr<const RunOutcome>& outcome, int row);
  /// Asks for a file name and saves the views as they were shown when it asked.
  void exportViewDialog();
  /// Saves `shown` (a grab of the views) to `path` atomically; false with a dialog on failure.
  bool saveView(const QImage& shown, const QString& path);
  /// Asks for a folder, and before replacing files there, for a yes.
  void exportAllDialog();
  /// Puts the results table on the clipboard (ResultsModel::tableText) and says so.
  void copyResults();
  void showRow(int row);
  void forgetReferenceMaps();
  void showPixel(QPoint pixel);
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void saveSettings();
  void setBackendText(const QString& description, const QString& note);
  void onImageLoaded(const QString& path);
  void onProgress(const RunProgress& progress);
  void onRunFinished();
  /// Shows the controller's outcome in the table and the charts, and selects its row to show
  /// (each row as it completes, and at the end).
  void showOutcome();
  void onBusyChanged(bool busy);
  /// The file name an export dialog suggests for row `row` of `o` (a null `o`: no result).
  QString suggestedName(const QString& suffix, const RunOutcome* o, int row,
                        bool withMode = true) const;

  Options options_;
  Controller* controller_ = nullptr;
  ImageViews* views_ = nullptr;
  ParamsPanel* params_ = nullptr;
  ResultsModel* model_ = nullptr;
  QTableView* table_ = nullptr;
  ResultCharts* charts_ = nullptr;
  LegendWidget* legend_ = nullptr;
  QDockWidget* paramsDock_ = nullptr;
  QSplitter* split_ = nullptr;
  QSplitter* topSplit_ = nullptr;
  QSplitter* bottomSplit_ = nullptr;
  QProgressBar* progressBar_ = nullptr;
  QLabel* progressLabel_ = nullptr;
  QLabel* pixelLabel_ = nullptr;
  QLabel* sizeLabel_ = nullptr;
  QLabel* backendLabel_ = nullptr;
  QLabel* zoomLabel_ = nullptr;
  QSlider* opacity_ = nullptr;
  QMenu* recentMenu_ = nullptr;
  QAction* runAction_ = nullptr;
  QAction* compareAction_ = nullptr;
  QAction* cancelAction_ = nullptr;
  QAction* overlayAction_ = nullptr;
  QAction* boundariesAction_ = nullptr;
  QAction* linkAction_ = nullptr;
  QAction* copyResultsAction_ = nullptr;
  QList<QAction*> exportActions_;
  QStringList recent_;
  QString lastError_;
  QString lastDir_;
  QString openNote_;  ///< the note of the last openFile() until its image is shown
  QPointer<QMessageBox> errorBox_;
  int shownRow_ = -1;
  std::shared_ptr<const void> shownOf_;  ///< the run shown in shownRow_
  /// A row was selected by the user since the current run started: rows completing do not
  /// move the selection, and a new table (the run's first row) selects that row's mode again.
  bool userPicked_ = false;
  std::optional<Mode> pickedMode_;  ///< the mode of that row; none for the reference's
  bool selecting_ = false;          ///< selectRow() is moving the selection
  int lastStartedJob_ = 0;          ///< the id of the newest run
  int jobsBeforeImage_ = 0;         ///< runs up to this id were on an image before the current one
  /// The reference's maps, rendered once per reference and palette
  /// (showRow); forgetReferenceMaps() drops them.
  std::shared_ptr<const KMeansResult> referenceOf_;
  std::vector<Rgb8> referencePalette_;
  QImage referenceLabels_, referenceBoundaries_;
  bool firstShow_ = true;
  bool stateRestored_ = false;
};

}  // namespace kmseg::gui
