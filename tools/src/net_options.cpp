#include "net_options.hpp"

#include <cstdlib>

#include "cli_error.hpp"
#include "feedline/loader/run_plan.hpp"
#include "output.hpp"
#include "setting_flags.hpp"

namespace feedline::tools {

void add_net_options(CLI::App& cmd, loader::LoaderSettings& s) {
  add_setting_flags(cmd, s, {"network"});
}

storage::EnvLookup process_env() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

void apply_net_options(const NetOptions& o, std::string_view url, storage::BackendConfig& c,
                       std::vector<std::string>& notes) {
  std::vector<std::string> found, secrets;
  auto r = loader::apply_net_settings(o, url, process_env(), c, found, secrets);
  for (std::string& secret : secrets) out::add_secret(std::move(secret));
  if (!r) throw UsageError(in_flag_words(r.error().message()));
  for (const std::string& n : found) notes.push_back(in_flag_words(n));
}

}  // namespace feedline::tools
