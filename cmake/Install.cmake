# install() and export(): how a C++ project builds against feedline (docs/EMBEDDING.md).
#
#   cmake --install build/release --prefix /opt/feedline
#     bin/feedline                                    the CLI
#     include/feedline/{core,transports,storage,loader}/    each layer's include tree
#     lib/libfeedline_{core,transports,storage,loader}.a
#     lib/cmake/feedline/feedline{Config,ConfigVersion,Targets*}.cmake   find_package(feedline)
#     lib/pkgconfig/feedline.pc                       pkg-config --cflags --libs --static feedline
#
# The exported targets are feedline::core, ::transports, ::storage and ::loader (the ALIAS names
# the tree's own code uses; feedline_layer() sets EXPORT_NAME and lists the layers in the global
# property FEEDLINE_LAYERS). The layers are static libraries, so their link interfaces carry their
# private dependencies as $<LINK_ONLY:...>: fmt::fmt, Threads::Threads, dl, and, as this build was
# configured, zstd::libzstd_shared, CURL::libcurl, pugixml::pugixml and the pkg-config IMPORTED
# targets PkgConfig::XXHASH, ::URING, ::NFS, ::ISAL, ::PROMETHEUS. feedlineConfig.cmake finds (or recreates) exactly
# those; feedline.pc lists the same libraries. Header-only dependencies (Boost.Asio, nlohmann_json)
# are linked through $<BUILD_INTERFACE:...>, so no consumer needs them. A layer that links a new
# library adds it to cmake/feedlineConfig.cmake.in and to feedline.pc here: the install test
# (tests/install/) fails until it does.
#
# The build tree is exported as well: -Dfeedline_DIR=<build dir> uses the libraries in place.
include(CMakePackageConfigHelpers)

get_property(_feedline_layers GLOBAL PROPERTY FEEDLINE_LAYERS)
set(FEEDLINE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/feedline CACHE STRING
    "Where feedlineConfig.cmake is installed (relative to the prefix)")

install(TARGETS ${_feedline_layers} EXPORT feedlineTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(_layer IN LISTS _feedline_layers)
  get_target_property(_dir ${_layer} SOURCE_DIR)
  install(DIRECTORY ${_dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
endforeach()
if(TARGET feedline)
  install(TARGETS feedline RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT feedlineTargets NAMESPACE feedline:: DESTINATION ${FEEDLINE_INSTALL_CMAKEDIR})
export(EXPORT feedlineTargets NAMESPACE feedline:: FILE ${PROJECT_BINARY_DIR}/feedlineTargets.cmake)

# feedlineConfig.cmake twice: the installed one, and one beside the build tree's export. The
# build tree's export keeps $<BUILD_INTERFACE:...> (CMake 3.25 has no BUILD_LOCAL_INTERFACE), so
# its config also finds the header-only Boost and nlohmann_json, which that machine has.
set(FEEDLINE_CONFIG_BUILD_TREE OFF)
configure_package_config_file(cmake/feedlineConfig.cmake.in ${PROJECT_BINARY_DIR}/cmake/feedlineConfig.cmake
                              INSTALL_DESTINATION ${FEEDLINE_INSTALL_CMAKEDIR})
set(FEEDLINE_CONFIG_BUILD_TREE ON)
configure_package_config_file(cmake/feedlineConfig.cmake.in ${PROJECT_BINARY_DIR}/feedlineConfig.cmake
                              INSTALL_DESTINATION ${PROJECT_BINARY_DIR} INSTALL_PREFIX ${PROJECT_BINARY_DIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/feedlineConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/feedlineConfig.cmake ${PROJECT_BINARY_DIR}/feedlineConfigVersion.cmake
        DESTINATION ${FEEDLINE_INSTALL_CMAKEDIR})

# feedline.pc. Relocatable: prefix is ${pcfiledir}/.. up to the prefix, so `cmake --install
# --prefix X` anywhere gives a working file. A dependency that has a .pc file goes to
# Requires.private, one that has none (fmt can be a CMake-only install) to Libs.private as -lNAME.
# libcurl is always -lcurl: feedline links the shared libcurl, and `--static` on libcurl.pc would
# ask for curl's own static closure (nghttp2, rtmp, ssh2, ldap, gssapi...), whose -dev packages
# Debian does not install with libcurl4-openssl-dev.
set(_pc_requires "")
set(_pc_libs "-pthread")
foreach(_lib IN LISTS CMAKE_DL_LIBS)
  string(APPEND _pc_libs " -l${_lib}")
endforeach()
function(_feedline_pc_dep module lib)
  execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --exists ${module} RESULT_VARIABLE rc)
  if(rc EQUAL 0)
    set(_pc_requires "${_pc_requires} ${module}" PARENT_SCOPE)
  else()
    set(_pc_libs "${_pc_libs} -l${lib}" PARENT_SCOPE)
  endif()
endfunction()
_feedline_pc_dep(fmt fmt)
_feedline_pc_dep(libxxhash xxhash)
if(FEEDLINE_WITH_URING)
  _feedline_pc_dep(liburing uring)
endif()
if(FEEDLINE_WITH_ZSTD)
  _feedline_pc_dep(libzstd zstd)
endif()
if(FEEDLINE_WITH_JPEG)
  _feedline_pc_dep(libjpeg jpeg)
  _feedline_pc_dep(libexif exif)
endif()
if(FEEDLINE_WITH_ISAL)
  _feedline_pc_dep(libisal isal)
endif()
if(FEEDLINE_WITH_HTTP)
  get_target_property(_curl CURL::libcurl LOCATION)
  get_filename_component(_curl_dir "${_curl}" DIRECTORY)
  if(_curl_dir AND NOT _curl_dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    string(APPEND _pc_libs " -L${_curl_dir}")
  endif()
  string(APPEND _pc_libs " -lcurl")
  _feedline_pc_dep(pugixml pugixml)
endif()
if(FEEDLINE_WITH_NFS)
  _feedline_pc_dep(libnfs nfs)
endif()
if(FEEDLINE_WITH_PROMETHEUS)
  _feedline_pc_dep(prometheus-cpp-pull prometheus-cpp-pull)
endif()
string(STRIP "${_pc_requires}" FEEDLINE_PC_REQUIRES_PRIVATE)
string(STRIP "${_pc_libs}" FEEDLINE_PC_LIBS_PRIVATE)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FEEDLINE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" _up "${_up}")
  set(FEEDLINE_PC_PREFIX "\${pcfiledir}/${_up}")
endif()
set(FEEDLINE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(FEEDLINE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
foreach(_var LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_var}}")
    set(FEEDLINE_PC_${_var} "${CMAKE_INSTALL_${_var}}")
  endif()
endforeach()
configure_file(cmake/feedline.pc.in ${PROJECT_BINARY_DIR}/feedline.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/feedline.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
