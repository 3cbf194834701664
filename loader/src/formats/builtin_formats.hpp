// The built-in dataset formats (format.hpp), each defined in its folder under loader/src/formats/
// (NAME/NAME_format.cpp) and registered in registry.cpp, which lists them in the order auto
// prefers them.
//
// Private to the formats module.
#pragma once

#include "feedline/loader/format.hpp"

namespace feedline::loader::detail {

extern const FormatSpec kFilesFormat;     // files/files_format.cpp
extern const FormatSpec kTarFormat;       // tar/tar_format.cpp
extern const FormatSpec kTfRecordFormat;  // tfrecord/tfrecord_format.cpp
extern const FormatSpec kNpzFormat;       // npy/npy_format.cpp
extern const FormatSpec kNpyFormat;       // npy/npy_format.cpp

}  // namespace feedline::loader::detail
