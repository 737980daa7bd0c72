# `pip wheel .` (pyproject.toml, scikit-build-core; packaging/wheel.sh): memledger installed inside its Python
# package, site-packages/memledger/:
#   bin/memledger, bin/qt.conf          the program (CLI and window); qt.conf points Qt at plugins/
#   lib/memledger/*.so                  core, and the libtorch part it loads on first use
#   plugins/{platforms,xcbglintegrations,imageformats}/   Qt's, for the window and its PNG/SVG export
# libtorch is not bundled: it is the user's torch wheel's, found beside the package (site-packages/torch/lib) as
# torchvision finds it, and the wheel requires that torch version (packaging/wheel_metadata.py). packaging/wheel.sh
# bundles Qt, QCustomPlot and what they need with auditwheel, libtorch and CUDA excluded.
#
# Included by the top-level CMakeLists.txt before find_package(Torch) when scikit-build-core configures (SKBUILD).

set(MEMLEDGER_WHEEL ON)
# Torch's CMake config, from the Python that builds the wheel (pip wheel --no-build-isolation in the user's venv).
execute_process(COMMAND "${Python_EXECUTABLE}" -c "import os, torch; print(os.path.dirname(torch.__file__))"
  OUTPUT_VARIABLE memledger_wheel_torch OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE memledger_wheel_torch_rc)
if(NOT memledger_wheel_torch_rc EQUAL 0 OR NOT memledger_wheel_torch)
  message(FATAL_ERROR "memledger's wheel is built against the torch of the Python that builds it (${Python_EXECUTABLE}), "
    "which has none: pip install torch there, then pip wheel . --no-build-isolation (packaging/wheel.sh)")
endif()
list(APPEND CMAKE_PREFIX_PATH "${memledger_wheel_torch}/share/cmake")
list(APPEND CMAKE_LIBRARY_PATH "${memledger_wheel_torch}/lib")
set(MEMLEDGER_PYTHON "${Python_EXECUTABLE}" CACHE FILEPATH "The Python (with torch) that makes the fixtures")
# The tests and benchmarks are the checkout's (packaging/test.sh); the wheel is tested installed (tests/wheel_test.sh).
set(MEMLEDGER_BUILD_TESTS OFF CACHE BOOL "" FORCE)

# RPATHs relative to the package: the binary finds lib/memledger, the libraries each other and torch's.
set(MEMLEDGER_WHEEL_RPATH "$ORIGIN/../lib/memledger" "$ORIGIN" "$ORIGIN/../../../torch/lib")

# Called at the end of the top-level CMakeLists.txt: Qt's plugins beside the program.
function(memledger_wheel_install_qt_plugins)
  set(plugins "${QT6_INSTALL_PREFIX}/${QT6_INSTALL_PLUGINS}")
  foreach(plugin platforms/libqxcb.so platforms/libqoffscreen.so platforms/libqminimal.so
                 xcbglintegrations/libqxcb-glx-integration.so xcbglintegrations/libqxcb-egl-integration.so
                 imageformats/libqsvg.so imageformats/libqjpeg.so imageformats/libqgif.so imageformats/libqico.so
                 iconengines/libqsvgicon.so)
    if(EXISTS "${plugins}/${plugin}")
      get_filename_component(dir "${plugin}" DIRECTORY)
      install(FILES "${plugins}/${plugin}" DESTINATION "plugins/${dir}")
    endif()
  endforeach()
  file(WRITE "${CMAKE_BINARY_DIR}/qt.conf" "[Paths]\nPlugins = ../plugins\n")
  install(FILES "${CMAKE_BINARY_DIR}/qt.conf" DESTINATION bin)
endfunction()
