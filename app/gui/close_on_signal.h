// SPDX-License-Identifier: MIT
#pragma once

// SIGTERM (a session ending), SIGINT (Ctrl+C in the terminal that started the app) and SIGHUP
// (that terminal closed) close the window as its close button does, instead of killing the
// process in the middle of an export.

#include <QObject>

#include <csignal>
#include <optional>

#include "kmseg/export.h"

class QSocketNotifier;

namespace kmseg::gui {

/// "SIGTERM", "SIGINT" or "SIGHUP" for the signals CloseOnSignal catches, else "signal".
const char* closeSignalName(int signal);

/// Catches SIGTERM, SIGINT and SIGHUP while it lives and restores the handlers it found. The
/// first signal is passed to the event loop (closeRequested), where the application closes its
/// windows: the runs are cancelled, the settings saved, and the exports being written finish
/// (the controller waits for them). A second signal, when closing takes too long, ends the
/// process at once by the signal's default action, after removing the temporary files of the
/// writes in progress and the empty folders made for them (abandonOutputsAndRaise). One instance
/// at a time (the handler has one pipe to write to); construct it in the thread of the event
/// loop.
class CloseOnSignal : public QObject {
  Q_OBJECT
 public:
  explicit CloseOnSignal(QObject* parent = nullptr);
  ~CloseOnSignal() override;
  CloseOnSignal(const CloseOnSignal&) = delete;
  CloseOnSignal& operator=(const CloseOnSignal&) = delete;

  /// The first signal caught since construction, or 0.
  int caught() const;
  /// Ends the process by caught()'s default action (after the application has closed); returns
  /// when no signal was caught. Restores the default handler first.
  void endByCaughtSignal() const;

 signals:
  /// The first signal, delivered in the event loop.
  void closeRequested(int signal);

 private:
  void readPipe();

  QSocketNotifier* notifier_ = nullptr;
  std::optional<StopSignalHandlers> handlers_;
};

}  // namespace kmseg::gui
