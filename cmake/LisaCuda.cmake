# Decide whether the CUDA trainer backend is built. AUTO turns it on when
# nvcc and the CUDA toolkit are found; the CPU-only build still builds and
# tests everything else.
set(LISA_HAVE_CUDA OFF)
if(NOT LISA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(LISA_HAVE_CUDA ON)
  elseif(LISA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LISA_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()
message(STATUS "lisa: CUDA backend ${LISA_HAVE_CUDA}")
