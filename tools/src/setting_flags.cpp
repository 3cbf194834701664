#include "setting_flags.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace feedline::tools {
namespace {

using loader::SettingType;
using loader::SettingVocabulary;

// The value's kind in --help: a count's and a number's range, a choice's names.
std::string type_name(const loader::Setting& w) {
  switch (w.type) {
    case SettingType::kCount:
      return fmt::format("INT in [{} - {}]", loader::count_bounds(w).first,
                         loader::count_bounds(w).second);
    case SettingType::kNumber:
      return fmt::format("NUMBER in ({} - {}]", w.min, w.max);
    case SettingType::kSize:
      return "SIZE";
    case SettingType::kDuration:
      return "DURATION";
    case SettingType::kChoice:
      return fmt::format("{{{}}}", loader::setting_range(w));
    case SettingType::kPath:
      return "FILE";
    case SettingType::kFlag:
    case SettingType::kText:
      break;
  }
  return "TEXT";
}

void add_setting_flag(CLI::App& cmd, loader::LoaderSettings& s, const loader::Setting& w) {
  const std::string name = loader::setting_name(w.name, SettingVocabulary::kCommandLine);
  CLI::Option* opt = nullptr;
  if (w.type == SettingType::kFlag) {
    bool& field = std::get<bool& (*)(loader::LoaderSettings&)>(w.field)(s);
    const std::string off = loader::setting_name(w.name, SettingVocabulary::kCommandLine, true);
    opt = cmd.add_flag(fmt::format("{},!{}", name, off), field, in_flag_words(w.help));
  } else {
    opt = cmd.add_option_function<std::string>(
        name,
        [&s, &w, name](const std::string& v) {
          if (auto r = loader::set_setting(s, w, v); !r)
            throw CLI::ValidationError(name, r.error().message());
        },
        in_flag_words(w.help));
    opt->check(CLI::Validator(
        [&w](std::string& v) {
          loader::LoaderSettings scratch;
          auto r = loader::set_setting(scratch, w, v);
          return r ? std::string() : r.error().message();
        },
        ""));
    opt->type_name(type_name(w));
    if (std::string def = loader::setting_default(w); !def.empty()) opt->default_str(def);
  }
  if (w.section == "network") opt->group("Network storage (s3://, http(s)://, nfs://)");
}

}  // namespace

void add_setting_flags(CLI::App& cmd, loader::LoaderSettings& s,
                       std::initializer_list<std::string_view> sections) {
  for (const loader::Setting& w : loader::settings()) {
    if (sections.size() > 0 &&
        std::find(sections.begin(), sections.end(), w.section) == sections.end()) {
      continue;
    }
    add_setting_flag(cmd, s, w);
  }
}

std::string in_flag_words(std::string_view message) {
  return loader::render_setting_names(message, SettingVocabulary::kCommandLine);
}

}  // namespace feedline::tools
