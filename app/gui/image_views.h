// SPDX-License-Identifier: MIT
#pragma once

// The four image views (original, selected mode's labels, fp64 reference, disagreement mask)
// with linked zoom and pan.

#include <QGraphicsView>
#include <QImage>
#include <QPoint>
#include <QWidget>

#include <array>

class QGraphicsPixmapItem;
class QLabel;

namespace kmseg::gui {

/// One view of an image with two optional layers above it: an overlay drawn with an opacity,
/// and boundaries. Scene units are device-independent pixels: the pixmaps carry the screen's
/// device pixel ratio, so zoom 1 ("100 %") shows one image pixel per device pixel on any
/// screen. Lives in the GUI thread.
class ImageView : public QGraphicsView {
  Q_OBJECT

 public:
  /// An empty view; pan by dragging, zoom with the wheel.
  explicit ImageView(QWidget* parent = nullptr);

  /// The base image; a null image clears the view.
  void setImage(const QImage& image);
  /// The layer drawn above the base with overlayOpacity(); null removes it.
  void setOverlay(const QImage& image);
  /// The topmost layer (transparent where nothing is drawn); null removes it.
  void setBoundaries(const QImage& image);
  /// Shows or hides the overlay layer.
  void setOverlayVisible(bool visible);
  /// Opacity of the overlay layer, 0..1.
  void setOverlayOpacity(double opacity);
  /// Shows or hides the boundary layer.
  void setBoundariesVisible(bool visible);
  /// Text drawn in the middle of the view while it has no image.
  void setPlaceholder(const QString& text);
  /// Filter the base image when it is shown reduced (for photos); label maps keep exact colours
  /// at every zoom, so this is off by default.
  void setSmoothWhenReduced(bool smooth);

  /// Scale of the view: 1 = 100 % (one image pixel per device pixel).
  double zoom() const { return transform().m11(); }
  /// Multiplies the zoom by `factor` (clamped to [1/64, 64]) around the viewport centre.
  void zoomBy(double factor);
  /// Size of the base image in pixels.
  QSize imageSize() const { return base_.size(); }
  /// True when a base image is set.
  bool hasImage() const { return !base_.isNull(); }
  /// The base image as set.
  const QImage& image() const { return base_; }
  /// Whether the overlay / the boundaries are drawn now (set, and switched on).
  bool overlayShown() const;
  bool boundariesShown() const;
  /// The image pixel under viewport position `pos` (logical pixels, as mouse events give it), or
  /// (-1, -1) outside the image.
  QPoint pixelAt(const QPointF& pos) const;
  /// The scene point at the centre of the viewport.
  QPointF centre() const;
  /// The device pixel ratio the pixmaps were made for.
  qreal pixmapRatio() const { return ratio_; }

 signals:
  /// The transform or the scroll position changed (zoom, pan, resize).
  void viewChanged();
  /// The pixel under the mouse; (-1, -1) when the mouse is outside the image.
  void hovered(QPoint pixel);
  /// The user pointed at this view (it becomes the target of keyboard zoom when unlinked).
  void activated();

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void scrollContentsBy(int dx, int dy) override;
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void drawForeground(QPainter* painter, const QRectF& rect) override;

 private:
  void refreshPixmaps();
  void updateSmoothing();

  QGraphicsScene scene_;
  QGraphicsPixmapItem* baseItem_ = nullptr;
  QGraphicsPixmapItem* overlayItem_ = nullptr;
  QGraphicsPixmapItem* boundaryItem_ = nullptr;
  QImage base_, overlay_, boundaries_;
  QString placeholder_;
  bool overlayVisible_ = false;
  bool boundariesVisible_ = false;
  bool smoothWhenReduced_ = false;
  qreal ratio_ = 1.0;
};

/// The four views side by side (2 x 2), their titles, and the link between them: while linked,
/// every view has the same transform and the same centre, so zooming or panning one moves all.
class ImageViews : public QWidget {
  Q_OBJECT

 public:
  enum Index { Original, ModeLabels, Reference, Mask };
  static constexpr int kViewCount = 4;

  /// Four empty views, linked.
  explicit ImageViews(QWidget* parent = nullptr);
  /// Disconnects the views first: QWidget's destructor deletes them after this object's own
  /// members are gone, and a view scrolled on the way out would call back into it.
  ~ImageViews() override;

  /// View `index` (an Index).
  ImageView* view(int index) const { return views_[std::size_t(index)]; }
  /// The photo; clears the result views.
  void setOriginal(const QImage& image);
  /// The result views. `overlay` is laid over the photo; boundaries go on the label views (and
  /// the mode's also over the photo).
  void setResult(const QString& modeTitle, const QImage& modeLabels, const QImage& reference,
                 const QImage& mask, const QImage& modeBoundaries,
                 const QImage& referenceBoundaries);
  /// Empties the result views (the photo stays).
  void clearResult();

  /// Whether zoom and pan are shared; linking aligns every view with the active one.
  bool isLinked() const { return linked_; }
  void setLinked(bool linked);
  /// The label overlay on the photo: shown or not, and its opacity (0..1).
  void setOverlayVisible(bool visible);
  void setOverlayOpacity(double opacity);
  /// Cluster boundaries on the photo and the label views.
  void setBoundariesVisible(bool visible);

  /// Zooms the views (all when linked, else the active one) by `factor`.
  void zoomBy(double factor);
  /// One step in (x1.25) or out.
  void zoomIn() { zoomBy(1.25); }
  void zoomOut() { zoomBy(0.8); }
  /// Fits the whole image in the views, at a zoom within the limits of zoomBy() ([1/64, 64]).
  void fitToWindow();
  /// 100 %: one image pixel per device pixel.
  void actualSize();
  /// The view keyboard zoom acts on when the views are not linked.
  ImageView* activeView() const { return active_; }

 signals:
  /// The pixel under the mouse in any view; (-1, -1) outside.
  void hovered(QPoint pixel);
  /// The zoom of the active view changed.
  void zoomChanged(double zoom);

 private:
  void syncFrom(ImageView* source);

  std::array<ImageView*, kViewCount> views_{};
  std::array<QLabel*, kViewCount> titles_{};
  ImageView* active_ = nullptr;
  bool linked_ = true;
  bool syncing_ = false;
};

}  // namespace kmseg::gui
