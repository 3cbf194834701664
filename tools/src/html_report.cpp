#include "html_report.hpp"

#include <fmt/format.h>

#include <utility>

#include "cli_error.hpp"
#include "feedline/loader/html_page.hpp"
#include "json_render.hpp"
#include "output.hpp"

namespace feedline::tools {

Result<HtmlFile> HtmlFile::prepare(const std::optional<std::string>& path, std::string_view flag) {
  HtmlFile h;
  if (!path) return h;
  FEEDLINE_ASSIGN_OR_RETURN(h.file_, JsonFile::prepare(*path, flag));
  h.timeline_ = std::make_shared<loader::Timeline>();
  return h;
}

int HtmlFile::finish(HtmlInputs in, int code) noexcept {
  if (!timeline_ && !file_.enabled()) return code;
  try {
    loader::HtmlPageInputs page;
    page.command = std::move(in.command);
    page.report_how = in.report_how.empty() ? page.command + " --json FILE" : in.report_how;
    if (in.run) page.run_json = dump_json(*in.run);
    if (in.diagnose) page.diagnose_json = dump_json(*in.diagnose);
    page.timeline = timeline_ ? timeline_->finish() : std::move(in.timeline);
    page.read_latency = in.read_latency;
    page.saved = in.saved;
    auto text = loader::html_page(page);
    if (!text) {
      out::error(text.error().what());
      return code == kExitOk ? kExitRuntime : code;
    }
    const std::string scrubbed = out::scrub(*text);
    auto w = file_.commit_streamed([&](const JsonFile::Sink& sink) { sink(scrubbed); },
                                   "the HTML report");
    if (!w) {
      out::error(w.error().what());
      return code == kExitOk ? kExitRuntime : code;
    }
  } catch (const std::exception& e) {
    out::error(fmt::format("writing the HTML report: {}", e.what()));
    return code == kExitOk ? kExitRuntime : code;
  }
  return code;
}

}  // namespace feedline::tools
