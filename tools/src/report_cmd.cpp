#include "report_cmd.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "cli_error.hpp"
#include "html_report.hpp"
#include "output.hpp"

namespace feedline::tools {
namespace {

struct ReportOptions {
  std::string file;
  std::optional<std::string> html;
};

// The saved document, or an error naming the file (exit 1: not there, or not a report: the
// byte where its JSON breaks, or what it lacks).
nlohmann::json read_report(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CommandError(
        Error::from_errno(errno ? errno : EIO, "cannot read the report").with_object(path));
  }
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw CommandError(Error(Errc::kCorrupt, "not a JSON document (its text breaks there)")
                           .with_object(path)
                           .with_offset(e.byte > 0 ? e.byte - 1 : 0));  // nlohmann's: from 1
  }
  if (!doc.is_object() || !doc.contains("schema") || !doc.contains("stages") ||
      !doc["stages"].is_array()) {
    throw CommandError(Error(Errc::kCorrupt,
                             "not a feedline run report (it has no \"schema\" and \"stages\": "
                             "feedline run --json FILE writes one)")
                           .with_object(path));
  }
  return doc;
}

int report(const ReportOptions& o) {
  // The page's path first: a usage error before anything is read.
  HtmlFile page = value_or_usage(HtmlFile::prepare(o.html, "--html"));
  const nlohmann::json doc = read_report(o.file);
  HtmlInputs in;
  in.command = doc.contains("ranks") ? "feedline run (an MPI job)" : "feedline run";
  in.run = &doc;
  in.saved = true;
  in.report_how = "feedline run --json FILE";
  const int code = page.finish(std::move(in), kExitOk);
  if (code == kExitOk) out::print("feedline report: {} -> {}\n", o.file, *o.html);
  return code;
}

}  // namespace

void add_report(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report", "A saved report (run --json's document) as the page run --html writes");
  cmd->add_option("FILE", o->file, "The report: what feedline run --json wrote")->required();
  cmd->add_option("--html", o->html,
                  "Write it as one self-contained HTML page to this file (the saved document "
                  "has no samples over time: the page has the rest)")
      ->required();
  cmd->callback([o, &exit_code] { exit_code = report(*o); });
}

}  // namespace feedline::tools
