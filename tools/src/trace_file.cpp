#include "trace_file.hpp"

#include <fmt/format.h>

#include "cli_error.hpp"
#include "feedline/loader/chrome_trace.hpp"
#include "json_render.hpp"
#include "output.hpp"

namespace feedline::tools {

Result<TraceFile> TraceFile::prepare(const std::optional<std::string>& path, std::string_view flag,
                                     std::uint64_t max_events) {
  TraceFile t;
  if (!path) return t;
  FEEDLINE_ASSIGN_OR_RETURN(t.file_, JsonFile::prepare(*path, flag));
  t.log_ = std::make_shared<loader::TraceLog>(loader::trace_options_for(max_events));
  return t;
}

Result<void> TraceFile::commit(const nlohmann::json& about) {
  if (!log_) return {};
  Result<void> written;
  auto w = file_.commit_streamed(
      [&](const JsonFile::Sink& sink) {
        written = loader::write_chrome_trace(*log_, dump_json(about), sink, out::scrub);
      },
      "the trace");
  if (!written) return written;
  return w;
}

int TraceFile::finish(const nlohmann::json& about, int code) noexcept {
  if (!log_) return code;
  try {
    if (auto w = commit(about); !w) {
      out::error(w.error().what());
      return code == kExitOk ? kExitRuntime : code;
    }
  } catch (const std::exception& e) {  // out of memory writing it: said, not thrown on
    out::error(fmt::format("writing the trace: {}", e.what()));
    return code == kExitOk ? kExitRuntime : code;
  }
  return code;
}

}  // namespace feedline::tools
