// The command line's words for the library's settings (feedline/loader/settings.hpp): each
// setting a flag made from the table — --NAME with dashes for its name, --no-NAME too for a flag,
// its help, default and range as the table has them — whose value the library checks as it is
// parsed ("--io-depth: 0 is out of range: 1..65536"). Config files reach the same flags
// (config_file.hpp), so their keys are the table's names with dashes.
#pragma once

#include <CLI/CLI.hpp>

#include <initializer_list>
#include <string>
#include <string_view>

#include "feedline/loader/settings.hpp"

namespace feedline::tools {

// Adds a flag to cmd, bound to s, for every setting of the table in one of `sections` ("sampler",
// "network", ...; empty: every section). Settings of SettingScope::kCommandLine are added too.
void add_setting_flags(CLI::App& cmd, loader::LoaderSettings& s,
                       std::initializer_list<std::string_view> sections = {});

// A library message's {name} placeholders as flags ("{io_depth}" -> "--io-depth").
std::string in_flag_words(std::string_view message);

}  // namespace feedline::tools
