// SPDX-License-Identifier: MIT
// stb_image's implementation, from Debian's libstb-dev header, compiled into kmseg for sanitizer
// builds (KMSEG_SANITIZE) in place of the uninstrumented libstb, so that the sanitizers check
// every read and write of the decoders too (core/CMakeLists.txt).
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
