// SPDX-License-Identifier: MIT
#pragma once

#include <stdexcept>
#include <string>

namespace kmseg {

/// Base of every exception kmseg throws at its library boundary. The message names the input
/// and, where there is one, the limit it broke; it is meant to be shown to a user as it is.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// A parameter or argument outside its allowed range (K, rho, a mode name, ...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// An image with more pixels than the caller's pixel limit (ImageOptions::maxPixels): the one
/// refusal of an image that a larger limit lifts (the decoder's own limits are InvalidArgument).
class PixelLimitError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// A file that cannot be read, decoded or written.
class IoError : public Error {
 public:
  using Error::Error;
};

/// Input data that the algorithm cannot work on (NaN/Inf features, too few distinct rows, ...).
class DataError : public Error {
 public:
  using Error::Error;
};

/// A run stopped because its caller asked it to.
class Cancelled : public Error {
 public:
  Cancelled() : Error("the run was cancelled") {}
};

/// A failure inside a compute backend (CUDA errors, device out of memory).
class BackendError : public Error {
 public:
  using Error::Error;
};

/// v as an error message writes it: the shortest text that reads back as the same double ("2",
/// "0.1", "1e-08", "-1"), and "inf", "-inf" or "nan" for those.
std::string numberText(double v);

}  // namespace kmseg
