// SPDX-License-Identifier: MIT
#include "close_on_signal.h"

#include <QSocketNotifier>
#include <QtGlobal>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "kmseg/export.h"

namespace kmseg::gui {
namespace {

// The pipe from the handler to the event loop, and the first signal caught. The handler reads
// them: plain ints set before the handler is installed and reset after it is removed.
int gPipe[2] = {-1, -1};
std::atomic<int> gCaught{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

// Async-signal-safe: lock-free atomics, write() and abandonOutputsAndRaise.
extern "C" void onCloseSignal(int signal) {
  const int saved = errno;
  int none = 0;
  if (gCaught.compare_exchange_strong(none, signal)) {
    const char byte = 1;
    // Non-blocking: a full pipe already holds a byte for the event loop.
    [[maybe_unused]] const ssize_t n = ::write(gPipe[1], &byte, 1);
  } else {
    // A second signal: the process ends at once, without the outputs in progress.
    abandonOutputsAndRaise(signal);
  }
  errno = saved;
}

}  // namespace

const char* closeSignalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal";
  }
}

CloseOnSignal::CloseOnSignal(QObject* parent) : QObject(parent) {
  Q_ASSERT(gPipe[0] < 0);
  gCaught.store(0);
  if (::pipe2(gPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    qWarning("kmseg-gui: cannot catch SIGTERM, SIGINT and SIGHUP (pipe: %s)", std::strerror(errno));
    gPipe[0] = gPipe[1] = -1;
    return;
  }
  notifier_ = new QSocketNotifier(gPipe[0], QSocketNotifier::Read, this);
  connect(notifier_, &QSocketNotifier::activated, this, &CloseOnSignal::readPipe);
  handlers_.emplace(onCloseSignal);
}

CloseOnSignal::~CloseOnSignal() {
  if (gPipe[0] < 0) return;
  handlers_.reset();
  delete notifier_;
  ::close(gPipe[0]);
  ::close(gPipe[1]);
  gPipe[0] = gPipe[1] = -1;
}

int CloseOnSignal::caught() const {
  return gCaught.load();
}

void CloseOnSignal::endByCaughtSignal() const {
  if (const int signal = caught(); signal != 0) raiseWithDefaultAction(signal);
}

void CloseOnSignal::readPipe() {
  char bytes[16];
  while (::read(gPipe[0], bytes, sizeof bytes) > 0) {
  }
  if (const int signal = caught(); signal != 0) emit closeRequested(signal);
}

}  // namespace kmseg::gui
