#include "config_file.hpp"

#include <fmt/format.h>

#include <toml++/toml.h>

#include "cli_error.hpp"

namespace feedline::tools {

void apply_config_file(CLI::App& cmd, const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw UsageError(fmt::format("--config {}: line {}, column {}: {}", path, e.source().begin.line,
                                 e.source().begin.column, e.description()));
  }
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    CLI::Option* opt = nullptr;
    try {
      opt = cmd.get_option("--" + name);
    } catch (const CLI::OptionNotFound&) {
    }
    if (!opt || name == "config") {
      throw UsageError(fmt::format("--config {}: unknown key '{}' (keys are `{}` option names, e.g. batch-size)",
                                   path, name, cmd.get_name()));
    }
    if (opt->count() > 0) continue;  // given on the command line: the flag wins
    std::string value;
    if (auto s = node.value<std::string>(); s && node.is_string()) {
      value = *s;
    } else if (node.is_boolean()) {
      value = *node.value<bool>() ? "true" : "false";
    } else if (node.is_integer()) {
      value = std::to_string(*node.value<std::int64_t>());
    } else if (node.is_floating_point()) {
      value = fmt::format("{}", *node.value<double>());
    } else {
      throw UsageError(fmt::format("--config {}: key '{}' must be a string, number or boolean", path, name));
    }
    opt->add_result(value);
    try {
      opt->run_callback();
    } catch (const CLI::ParseError& e) {
      throw UsageError(fmt::format("--config {}: key '{}': {}", path, name, e.what()));
    }
  }
}

}  // namespace feedline::tools
