// A report file a run writes (the CLI's `--json`, `--trace`, `--html`; Python's html=, trace=).
//
// Checked before the run does any work: a path that is empty, whose directory is missing or not
// writable, or that is a directory, is kInvalidArgument at once, not after a long run. The text
// is written whole at the end to a temporary file beside the path and renamed over it, so a
// reader never sees half a document; a failed or interrupted run writes its report too, so the
// file never goes on showing an older run as if it were this one.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "feedline/core/error.hpp"
#include "feedline/core/unique_fd.hpp"

namespace feedline::loader {

// A file a run writes, and the name that asked for it (a flag: "--json"; a keyword: "html=").
struct OutputPath {
  std::string_view flag;
  std::string path;
};

// Checks the files a run will write against what it reads and against each other, before
// anything is written: an output inside the dataset (a local dataset `url`: its directory, or the
// file it names, an index beside it, or a file of its brace list), or two outputs naming one
// file, are kInvalidArgument naming the flags and the path (a usage error). Paths compare as the
// directory entry that will be replaced: the parent's real path (symlinks and ".." resolved)
// and the file's name; the dataset as its real path. Paths whose directory does not exist are
// left to OutputFile::prepare; a dataset that is not local (s3://, http://, nfs://, mem://) has
// nothing here to overwrite.
Result<void> check_output_paths(const std::vector<OutputPath>& outputs, std::string_view url);
// The same for the outputs that were given: (flag, path if given) pairs.
Result<void> check_output_paths(
    std::initializer_list<std::pair<std::string_view, const std::optional<std::string>*>> given,
    std::string_view url);

class OutputFile {
 public:
  // An unset file (no --json): commit() does nothing.
  OutputFile() = default;
  // kInvalidArgument naming `flag` and the path when it cannot be written there.
  static Result<OutputFile> prepare(std::string path, std::string_view flag);
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  ~OutputFile();  // removes the temporary file when nothing was committed

  bool enabled() const noexcept { return !path_.empty(); }
  const std::string& path() const noexcept { return path_; }
  // Writes `text` and renames the file into place. kIo naming the path when that fails; `what`
  // names the document in errors ("the JSON report").
  Result<void> commit(std::string_view text, std::string_view what);
  // The same for a document too large to hold as one string (a trace): `produce` hands its text
  // to the sink piece by piece, in order.
  using Sink = std::function<void(std::string_view)>;
  Result<void> commit_streamed(const std::function<void(const Sink&)>& produce,
                               std::string_view what);

 private:
  Result<void> finish(std::string_view what);
  std::string path_;
  std::string tmp_;
  UniqueFd fd_;
};

}  // namespace feedline::loader
