// SPDX-License-Identifier: MIT
#include "image_views.h"

#include <QGraphicsPixmapItem>
#include <QGridLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

namespace kmseg::gui {

namespace {

constexpr double kMinZoom = 1.0 / 64.0;
constexpr double kMaxZoom = 64.0;

QPixmap pixmapFor(const QImage& image, qreal ratio) {
  if (image.isNull()) return {};
  QPixmap pm = QPixmap::fromImage(image);
  pm.setDevicePixelRatio(ratio);
  return pm;
}

}  // namespace

ImageView::ImageView(QWidget* parent) : QGraphicsView(parent) {
  setScene(&scene_);
  baseItem_ = scene_.addPixmap({});
  overlayItem_ = scene_.addPixmap({});
  boundaryItem_ = scene_.addPixmap({});
  // Nearest-neighbour scaling: label maps must stay crisp when zoomed in.
  for (auto* item : {baseItem_, overlayItem_, boundaryItem_})
    item->setTransformationMode(Qt::FastTransformation);
  overlayItem_->setOpacity(0.5);
  overlayItem_->setVisible(false);
  boundaryItem_->setVisible(false);
  setDragMode(QGraphicsView::ScrollHandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setResizeAnchor(QGraphicsView::AnchorViewCenter);
  setBackgroundBrush(palette().color(QPalette::Dark));
  setFrameShape(QFrame::NoFrame);
  setMouseTracking(true);
  viewport()->setMouseTracking(true);
  // Drops go to the main window, which opens the file.
  setAcceptDrops(false);
  viewport()->setAcceptDrops(false);
  ratio_ = devicePixelRatioF();
}

void ImageView::setImage(const QImage& image) {
  base_ = image;
  refreshPixmaps();
}

void ImageView::setOverlay(const QImage& image) {
  overlay_ = image;
  overlayItem_->setPixmap(pixmapFor(overlay_, ratio_));
  overlayItem_->setVisible(overlayVisible_ && !overlay_.isNull());
}

void ImageView::setBoundaries(const QImage& image) {
  boundaries_ = image;
  boundaryItem_->setPixmap(pixmapFor(boundaries_, ratio_));
  boundaryItem_->setVisible(boundariesVisible_ && !boundaries_.isNull());
}

void ImageView::setOverlayVisible(bool visible) {
  overlayVisible_ = visible;
  overlayItem_->setVisible(visible && !overlay_.isNull());
}

void ImageView::setOverlayOpacity(double opacity) {
  overlayItem_->setOpacity(std::clamp(opacity, 0.0, 1.0));
}

void ImageView::setBoundariesVisible(bool visible) {
  boundariesVisible_ = visible;
  boundaryItem_->setVisible(visible && !boundaries_.isNull());
}

bool ImageView::overlayShown() const {
  return overlayItem_->isVisible();
}

bool ImageView::boundariesShown() const {
  return boundaryItem_->isVisible();
}

void ImageView::setPlaceholder(const QString& text) {
  placeholder_ = text;
  viewport()->update();
}

void ImageView::setSmoothWhenReduced(bool smooth) {
  smoothWhenReduced_ = smooth;
  updateSmoothing();
}

void ImageView::updateSmoothing() {
  const auto mode =
      smoothWhenReduced_ && zoom() < 1.0 ? Qt::SmoothTransformation : Qt::FastTransformation;
  if (baseItem_->transformationMode() != mode) baseItem_->setTransformationMode(mode);
}

void ImageView::refreshPixmaps() {
  ratio_ = devicePixelRatioF();
  baseItem_->setPixmap(pixmapFor(base_, ratio_));
  overlayItem_->setPixmap(pixmapFor(overlay_, ratio_));
  boundaryItem_->setPixmap(pixmapFor(boundaries_, ratio_));
  overlayItem_->setVisible(overlayVisible_ && !overlay_.isNull());
  boundaryItem_->setVisible(boundariesVisible_ && !boundaries_.isNull());
  const QSizeF size = QSizeF(base_.size()) / ratio_;
  scene_.setSceneRect(QRectF(QPointF(0, 0), size));
  viewport()->update();
}

void ImageView::zoomBy(double factor) {
  const double target = std::clamp(zoom() * factor, kMinZoom, kMaxZoom);
  if (zoom() <= 0.0 || target == zoom()) return;
  const QPointF c = centre();
  const double f = target / zoom();
  const ViewportAnchor anchor = transformationAnchor();
  setTransformationAnchor(QGraphicsView::NoAnchor);
  scale(f, f);
  centerOn(c);
  setTransformationAnchor(anchor);
  emit viewChanged();
}

QPoint ImageView::pixelAt(const QPointF& pos) const {
  if (base_.isNull()) return {-1, -1};
  // A mouse position is the top-left corner of the device pixel under the cursor; its centre,
  // half a device pixel further, decides which image pixel is meant.
  const QPointF s =
      viewportTransform().inverted().map(pos + QPointF(0.5, 0.5) / devicePixelRatioF());
  const int x = int(std::floor(s.x() * ratio_));
  const int y = int(std::floor(s.y() * ratio_));
  if (x < 0 || y < 0 || x >= base_.width() || y >= base_.height()) return {-1, -1};
  return {x, y};
}

QPointF ImageView::centre() const {
  return mapToScene(viewport()->rect().center());
}

void ImageView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0.0 || base_.isNull()) {
    QGraphicsView::wheelEvent(event);
    return;
  }
  emit activated();
  const double target = std::clamp(zoom() * std::pow(1.25, steps), kMinZoom, kMaxZoom);
  const double f = target / zoom();
  // Keep the image point under the cursor where it is.
  const QPointF before = mapToScene(event->position().toPoint());
  const ViewportAnchor anchor = transformationAnchor();
  setTransformationAnchor(QGraphicsView::NoAnchor);
  scale(f, f);
  const QPointF after = mapToScene(event->position().toPoint());
  const QPointF shift = (after - before) * transform().m11();
  horizontalScrollBar()->setValue(horizontalScrollBar()->value() - int(std::lround(shift.x())));
  verticalScrollBar()->setValue(verticalScrollBar()->value() - int(std::lround(shift.y())));
  setTransformationAnchor(anchor);
  event->accept();
  emit viewChanged();
}

void ImageView::mouseMoveEvent(QMouseEvent* event) {
  QGraphicsView::mouseMoveEvent(event);
  emit hovered(pixelAt(event->position()));
}

void ImageView::mousePressEvent(QMouseEvent* event) {
  emit activated();
  QGraphicsView::mousePressEvent(event);
}

void ImageView::leaveEvent(QEvent* event) {
  QGraphicsView::leaveEvent(event);
  emit hovered({-1, -1});
}

void ImageView::scrollContentsBy(int dx, int dy) {
  QGraphicsView::scrollContentsBy(dx, dy);
  emit viewChanged();
}

void ImageView::paintEvent(QPaintEvent* event) {
  // Every change of zoom repaints, so the filter follows the zoom here.
  updateSmoothing();
  QGraphicsView::paintEvent(event);
}

void ImageView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  if (devicePixelRatioF() != ratio_) refreshPixmaps();
}

void ImageView::showEvent(QShowEvent* event) {
  QGraphicsView::showEvent(event);
  // The window may have moved to a screen with another device pixel ratio.
  if (devicePixelRatioF() != ratio_) refreshPixmaps();
}

void ImageView::drawForeground(QPainter* painter, const QRectF& rect) {
  QGraphicsView::drawForeground(painter, rect);
  if (!base_.isNull() || placeholder_.isEmpty()) return;
  painter->save();
  painter->resetTransform();
  painter->setPen(palette().color(QPalette::Light));
  painter->drawText(viewport()->rect().adjusted(12, 12, -12, -12),
                    Qt::AlignCenter | Qt::TextWordWrap, placeholder_);
  painter->restore();
}

ImageViews::ImageViews(QWidget* parent) : QWidget(parent) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(4);
  const QStringList titles = {tr("Original"), tr("Mode labels"), tr("fp64 reference"),
                              tr("Disagreement mask")};
  for (int i = 0; i < kViewCount; ++i) {
    auto* box = new QWidget(this);
    auto* layout = new QVBoxLayout(box);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(1);
    auto* title = new QLabel(titles[i], box);
    title->setContentsMargins(4, 0, 4, 0);
    // A long title (the mode's) may be cut rather than widen its column: the views share the
    // width equally (the grid's stretch), while the titles' widths still count in the views'
    // preferred width, which the window's layout gives them.
    title->setMinimumWidth(1);
    auto* v = new ImageView(box);
    v->setObjectName(QStringLiteral("view%1").arg(i));
    layout->addWidget(title);
    layout->addWidget(v, 1);
    grid->addWidget(box, i / 2, i % 2);
    grid->setRowStretch(i / 2, 1);
    grid->setColumnStretch(i % 2, 1);
    views_[std::size_t(i)] = v;
    titles_[std::size_t(i)] = title;
    connect(v, &ImageView::viewChanged, this, [this, v] {
      if (linked_) syncFrom(v);
      if (v == active_) emit zoomChanged(v->zoom());
    });
    connect(v, &ImageView::hovered, this, &ImageViews::hovered);
    connect(v, &ImageView::activated, this, [this, v] { active_ = v; });
  }
  active_ = views_[0];
  views_[Original]->setSmoothWhenReduced(true);
  views_[Original]->setPlaceholder(
      tr("Open an image: File > Open (Ctrl+O), a recent file, or drop a file here."));
  views_[ModeLabels]->setPlaceholder(tr("Run (F5) or Compare all modes (F6)."));
}

ImageViews::~ImageViews() {
  for (ImageView* v : views_) v->disconnect(this);
}

void ImageViews::setOriginal(const QImage& image) {
  views_[Original]->setImage(image);
  clearResult();
}

void ImageViews::setResult(const QString& modeTitle, const QImage& modeLabels,
                           const QImage& reference, const QImage& mask,
                           const QImage& modeBoundaries, const QImage& referenceBoundaries) {
  titles_[ModeLabels]->setText(modeTitle);
  titles_[ModeLabels]->setToolTip(modeTitle);
  views_[ModeLabels]->setImage(modeLabels);
  views_[ModeLabels]->setBoundaries(modeBoundaries);
  views_[Reference]->setImage(reference);
  views_[Reference]->setBoundaries(referenceBoundaries);
  views_[Mask]->setImage(mask);
  views_[Original]->setOverlay(modeLabels);
  views_[Original]->setBoundaries(modeBoundaries);
  // New pixmaps of the same size keep each view's transform; bring them in line with the rest.
  if (linked_) syncFrom(active_);
}

void ImageViews::clearResult() {
  titles_[ModeLabels]->setText(tr("Mode labels"));
  titles_[ModeLabels]->setToolTip({});
  for (int i : {ModeLabels, Reference, Mask}) {
    views_[std::size_t(i)]->setImage({});
    views_[std::size_t(i)]->setBoundaries({});
  }
  views_[Original]->setOverlay({});
  views_[Original]->setBoundaries({});
}

void ImageViews::setLinked(bool linked) {
  linked_ = linked;
  if (linked_) syncFrom(active_);
}

void ImageViews::setOverlayVisible(bool visible) {
  views_[Original]->setOverlayVisible(visible);
}

void ImageViews::setOverlayOpacity(double opacity) {
  views_[Original]->setOverlayOpacity(opacity);
}

void ImageViews::setBoundariesVisible(bool visible) {
  for (auto* v : views_) v->setBoundariesVisible(visible);
}

void ImageViews::zoomBy(double factor) {
  if (linked_) {
    active_->zoomBy(factor);
    syncFrom(active_);
  } else {
    active_->zoomBy(factor);
  }
  emit zoomChanged(active_->zoom());
}

void ImageViews::fitToWindow() {
  // QGraphicsView::fitInView leaves a margin; this fills the viewport up to one pixel.
  auto fit = [](ImageView* v) {
    const QRectF r = v->scene()->sceneRect();
    const QRect vp = v->viewport()->rect();
    if (r.isEmpty() || vp.width() < 2 || vp.height() < 2) return;
    // Within the limits of zoomBy and the wheel: a tiny image would otherwise be blown up past
    // them (and the next "zoom in" would zoom out), a very long one shrunk below them.
    const double s = std::clamp(
        std::min((vp.width() - 1) / r.width(), (vp.height() - 1) / r.height()), kMinZoom, kMaxZoom);
    v->setTransform(QTransform::fromScale(s, s));
    v->centerOn(r.center());
  };
  if (linked_) {
    fit(active_);
    syncFrom(active_);
  } else {
    fit(active_);
  }
  emit zoomChanged(active_->zoom());
}

void ImageViews::actualSize() {
  auto reset = [](ImageView* v) {
    const QPointF c = v->centre();
    v->setTransform(QTransform());
    v->centerOn(c);
  };
  reset(active_);
  if (linked_) syncFrom(active_);
  emit zoomChanged(active_->zoom());
}

void ImageViews::syncFrom(ImageView* source) {
  if (syncing_ || !source) return;
  syncing_ = true;
  const QTransform t = source->transform();
  const QPointF c = source->centre();
  for (auto* v : views_) {
    if (v == source) continue;
    if (v->transform() != t) v->setTransform(t);
    v->centerOn(c);
  }
  syncing_ = false;
}

}  // namespace kmseg::gui
