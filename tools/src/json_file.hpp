// A JSON file a command writes (`run --json FILE`, `run --trace FILE`): the library's OutputFile
// (feedline/loader/output_file.hpp: checked before the run, written whole at the end, renamed
// into place, also after a failed or interrupted run), with the document's secrets scrubbed
// (out::scrub) from what is written.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "feedline/core/error.hpp"
#include "feedline/loader/output_file.hpp"

namespace feedline::tools {

using loader::check_output_paths;
using loader::OutputPath;

class JsonFile {
 public:
  // An unset file (no --json): commit() does nothing.
  JsonFile() = default;
  // kInvalidArgument naming `flag` and the path when it cannot be written there.
  static Result<JsonFile> prepare(std::string path, std::string_view flag);

  bool enabled() const noexcept { return file_.enabled(); }
  const std::string& path() const noexcept { return file_.path(); }
  // Writes the document and renames it into place. kIo naming the path when that fails.
  Result<void> commit(const nlohmann::json& doc);
  // The same for a document too large to hold as one string (a trace): `produce` hands its text
  // to the sink piece by piece, in order (already scrubbed where it needs to be).
  using Sink = loader::OutputFile::Sink;
  Result<void> commit_streamed(const std::function<void(const Sink&)>& produce,
                               std::string_view what) {
    return file_.commit_streamed(produce, what);
  }

 private:
  loader::OutputFile file_;
};

}  // namespace feedline::tools
