# The Python binding (python/), built against Debian's /usr/bin/python3 and pybind11. The module
# is a shared object linking the static layers, so they are compiled position-independent.
set(FEEDLINE_PYTHON_BUILT OFF)
if(NOT FEEDLINE_WITH_PYTHON STREQUAL "OFF")
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)  # not a pyenv one on PATH: Debian's numpy and torch
  endif()
  find_package(Python 3.9 COMPONENTS Interpreter Development.Module QUIET)
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 2.10 CONFIG QUIET)
  endif()
  # DLPack's header (libdlpack-dev): Batch.__dlpack__ for torch.from_dlpack.
  find_path(FEEDLINE_DLPACK_INCLUDE_DIR dlpack/dlpack.h)
  if(Python_FOUND AND pybind11_FOUND AND FEEDLINE_DLPACK_INCLUDE_DIR)
    add_subdirectory(python)
    set(FEEDLINE_PYTHON_BUILT ON)
    message(STATUS "feedline: Python binding for ${Python_EXECUTABLE} (pybind11 ${pybind11_VERSION})")
  elseif(FEEDLINE_WITH_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "FEEDLINE_WITH_PYTHON=ON, but Python's headers, pybind11 or dlpack.h were "
                        "not found (Debian: python3-dev pybind11-dev libdlpack-dev; "
                        "scripts/install-deps.sh installs them)")
  else()
    message(STATUS "feedline: no Python binding (Python headers, pybind11 or dlpack.h not found)")
  endif()
endif()
