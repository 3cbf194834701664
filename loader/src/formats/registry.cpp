// FormatRegistry (format.hpp) and the one registration of the built-in formats.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "builtin_formats.hpp"
#include "feedline/loader/format.hpp"

namespace feedline::loader {
namespace {

bool well_formed_name(std::string_view name) {
  return !name.empty() && name.size() <= 32 && name != "auto" &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
         });
}

bool well_formed_extension(std::string_view ext) {
  return ext.size() >= 2 && ext.size() <= 17 && ext.front() == '.' &&
         std::all_of(ext.begin() + 1, ext.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.';
         });
}

// "a, b or c"
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}

}  // namespace

// The built-in formats, in the order auto prefers them (files, which claims no extension, is its
// fallback). Each is defined in its folder (formats/NAME/NAME_format.cpp). A new format: its
// folder, its declaration in builtin_formats.hpp, and one line here.
const FormatRegistry& builtin_formats() noexcept {
  static const FormatRegistry registry = [] {
    FormatRegistry r;
    for (const FormatSpec* spec :
         {&detail::kFilesFormat, &detail::kTarFormat, &detail::kTfRecordFormat, &detail::kNpzFormat,
          &detail::kNpyFormat}) {
      (void)r.add(*spec);  // well-formed: cannot fail (the unit tests check each)
    }
    return r;
  }();
  return registry;
}

constinit const DatasetFormat DatasetFormat::kAuto{};
constinit const DatasetFormat DatasetFormat::kFiles{detail::kFilesFormat};
constinit const DatasetFormat DatasetFormat::kTar{detail::kTarFormat};
constinit const DatasetFormat DatasetFormat::kTfRecord{detail::kTfRecordFormat};
constinit const DatasetFormat DatasetFormat::kNpz{detail::kNpzFormat};
constinit const DatasetFormat DatasetFormat::kNpy{detail::kNpyFormat};

std::string_view DatasetFormat::name() const noexcept { return spec_ ? spec_->name : "auto"; }

std::string_view format_name(DatasetFormat f) noexcept { return f.name(); }

Result<DatasetFormat> parse_format(std::string_view text) { return builtin_formats().parse(text); }

Result<void> FormatRegistry::add(const FormatSpec& spec) {
  if (!well_formed_name(spec.name)) {
    return fail(Error(Errc::kInvalidArgument,
                      fmt::format("dataset format name '{}' is not 1-32 lower-case letters, "
                                  "digits, '-' or '_' (or is 'auto')",
                                  spec.name))
                    .with_hint("name formats as they are spelled on the command line: \"tar\""));
  }
  for (const std::string_view ext : spec.extensions) {
    if (!well_formed_extension(ext)) {
      return fail(
          Error(Errc::kInvalidArgument,
                fmt::format("dataset format {}: extension '{}' is not a dot and 1-16 letters, "
                            "digits or dots",
                            spec.name, ext))
              .with_hint("give extensions such as \".tar\""));
    }
  }
  if (!spec.open) {
    return fail(
        Error(Errc::kInvalidArgument, fmt::format("dataset format {} has no opener", spec.name)));
  }
  for (const FormatSpec*& f : formats_) {
    if (f->name == spec.name) {
      f = &spec;
      return {};
    }
  }
  formats_.push_back(&spec);
  return {};
}

const FormatSpec* FormatRegistry::find(std::string_view name) const noexcept {
  for (const FormatSpec* f : formats_) {
    if (f->name == name) return f;
  }
  return nullptr;
}

Result<DatasetFormat> FormatRegistry::parse(std::string_view text) const {
  if (text == "auto") return DatasetFormat::kAuto;
  if (const FormatSpec* f = find(text)) return DatasetFormat(*f);
  return fail(Error(Errc::kInvalidArgument, fmt::format("unknown dataset format '{}'", text))
                  .with_hint(fmt::format("expected {}, or auto to choose from what is there",
                                         names_text())));
}

const FormatSpec* FormatRegistry::fallback() const noexcept {
  for (const FormatSpec* f : formats_) {
    if (f->extensions.empty()) return f;
  }
  return nullptr;
}

std::string FormatRegistry::names_text(bool writable) const {
  std::vector<std::string> names;
  for (const FormatSpec* f : formats_) {
    if (!writable || f->gen.write) names.emplace_back(f->name);
  }
  return listed(names);
}

std::string FormatRegistry::help() const {
  std::string out;
  for (const FormatSpec* f : formats_) out += fmt::format("{}, ", f->name);
  return out + "or auto (from the objects' extensions)";
}

std::string FormatRegistry::gen_help() const {
  std::vector<std::string> items;
  for (const FormatSpec* f : formats_) {
    if (!f->gen.write) continue;
    items.push_back(f->description.empty() ? std::string(f->name)
                                           : fmt::format("{} ({})", f->name, f->description));
  }
  return listed(items);
}

}  // namespace feedline::loader
