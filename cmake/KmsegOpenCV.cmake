# Provides kmseg::opencv: OpenCV core + imgproc only.
# Debian ships OpenCVConfig.cmake only with libopencv-dev, which pulls every module (highgui brings
# Qt 5, imgcodecs ~135 libraries). The per-module -dev packages carry headers and libraries but no
# CMake config, so look for the config first and fall back to the two modules directly.
find_package(OpenCV QUIET CONFIG COMPONENTS core imgproc)
add_library(kmseg_opencv INTERFACE)
add_library(kmseg::opencv ALIAS kmseg_opencv)
if(OpenCV_FOUND)
  target_link_libraries(kmseg_opencv INTERFACE opencv_core opencv_imgproc)
else()
  find_path(KMSEG_OPENCV_INCLUDE_DIR opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
  find_library(KMSEG_OPENCV_CORE_LIB opencv_core REQUIRED)
  find_library(KMSEG_OPENCV_IMGPROC_LIB opencv_imgproc REQUIRED)
  target_include_directories(kmseg_opencv SYSTEM INTERFACE ${KMSEG_OPENCV_INCLUDE_DIR})
  target_link_libraries(kmseg_opencv INTERFACE ${KMSEG_OPENCV_IMGPROC_LIB} ${KMSEG_OPENCV_CORE_LIB})
endif()
