// The settings of a loader run, in one table: for every knob its name, type, default, range, unit
// and one line of help. The command line's flags (--io-depth 64), the keys of a --config file
// (io-depth = 64), Python's keywords (io_depth=64) and the reference tables of docs/CLI.md and
// docs/PYTHON.md are made from this table or checked against it by a test, and every value is
// checked here, once, whoever gave it.
//
// Names: one per knob. A setting's name is its field's (io_depth); the command line and config
// files write it with dashes (--io-depth; a flag also as --no-NAME: --no-shuffle), Python as it
// is. Messages of the library that name a setting write {name} (or {!name}: the flag turned off),
// and each front end renders those in its own words (render_setting_names), so that a Python user
// reads "io_depth" and a shell user "--io-depth".
//
//   loader::LoaderSettings s;                       // every default
//   const loader::Setting* io = loader::find_setting("io_depth");
//   if (auto r = loader::set_setting(s, *io, "128"); !r) ...   // "0 is out of range: 1..65536"
//   loader::setting_text(s, *io);                   // "128"
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "feedline/core/error.hpp"

namespace feedline::loader {

// The network backends' settings (s3://, http(s)://, nfs://): also `gen`'s and `bench storage`'s.
struct NetSettings {
  unsigned connections = 0;  // 0: the backend's default
  std::string endpoint;
  std::string region;
  std::string profile;
  bool sign_request = true;
  bool insecure = false;
  std::string ca_bundle;
  std::string part_size = "8MiB";
  unsigned http_loops = 0;  // 0: auto
  unsigned max_attempts = 5;
  std::string connect_timeout = "10s";
  std::string stall_timeout = "30s";
};

// Every setting's value as given: counts as numbers, sizes and durations as their text ("1GiB",
// "2ms": reports print them as given), "" and nullopt for a setting left unset. The defaults here
// are the table's.
struct LoaderSettings {
  // Sampler: which samples, in which order, over how many ranks.
  unsigned batch_size = 32;
  unsigned epochs = 1;
  std::uint64_t seed = 0;
  bool shuffle = true;
  unsigned shard_shuffle = 0;
  std::optional<unsigned> rank;
  std::optional<unsigned> world_size;
  bool drop_last = false;
  // Dataset.
  std::string format = "auto";
  bool index = true;
  std::string on_error = "fail";
  std::string max_sample_size;
  // Pipeline.
  unsigned io_depth = 64;
  unsigned storage_threads = 0;  // 0: auto
  unsigned decode_threads = 2;
  int decode_nice = 5;
  unsigned prefetch = 2;
  std::string memory_budget = "1GiB";
  bool accounting = true;
  // Local storage, and throttles that emulate slower storage.
  std::string engine = "auto";
  bool direct = false;
  std::string throttle_bw;
  std::string throttle_latency;
  std::string throttle_seek;
  NetSettings net;
  // Decode: JPEG members into images, planted costs.
  std::optional<unsigned> image_size;
  std::string crop;
  bool dct_scaling = true;
  std::string decode_cost;
  std::string collate_cost;
  // The GPU.
  std::string device;
  std::string gpu_direct = "auto";
  unsigned cuda_streams = 4;
  // Observability.
  std::optional<unsigned> metrics_port;
  std::string metrics_bind = "127.0.0.1";
  // Emulated training, as MLPerf Storage runs it (the command line's runs).
  unsigned accelerators = 1;
  unsigned runs = 1;
  std::string compute_time;
  std::optional<double> au_target;
  bool stages_alone = false;
  std::uint64_t stages_alone_samples = 20000;
};

enum class SettingType : std::uint8_t {
  kFlag,      // true or false
  kCount,     // a whole number in [min, max]
  kNumber,    // a finite number in (min, max]
  kSize,      // bytes: 64MiB, 4k, or a number of bytes
  kDuration,  // 2ms, 1.5s, or a number of seconds
  kChoice,    // one of choices
  kPath,      // a file that exists and can be read (a CA bundle)
  kText,      // text the setting's own parser checks (a URL, a device, a distribution)
};

// Who takes a setting: every embedder of the loader (the command line's run, Python, C++), or only
// the command line (an emulated accelerator's compute, repeated runs: a training loop that embeds
// the loader is the real thing).
enum class SettingScope : std::uint8_t { kLoader, kCommandLine };

// Where a setting's value lives in LoaderSettings (a field, maybe nested).
using SettingField =
    std::variant<bool& (*)(LoaderSettings&), unsigned& (*)(LoaderSettings&),
                 int& (*)(LoaderSettings&), std::uint64_t& (*)(LoaderSettings&),
                 std::optional<unsigned>& (*)(LoaderSettings&),
                 std::optional<double>& (*)(LoaderSettings&), std::string& (*)(LoaderSettings&)>;

struct Setting {
  std::string_view name;  // io_depth
  SettingType type;
  std::string_view section;  // "sampler", "dataset", "pipeline", "storage", "network", ...
  std::string_view unit;     // "samples", "reads", "bytes", ... ("" where it says nothing)
  std::string_view help;     // one line
  double min = 0;            // kCount: [min, max]; kNumber: (min, max]
  double max = 0;
  std::span<const std::string_view> choices;  // kChoice
  SettingScope scope = SettingScope::kLoader;
  SettingField field;
};

// The table, in the order the reference documents list it.
std::span<const Setting> settings() noexcept;
// A setting by its name (io_depth); nullptr for none.
const Setting* find_setting(std::string_view name) noexcept;

// Checks `text` as a value of `which` and stores it. A flag takes true/false (also 1/0, yes/no,
// on/off); "" is refused (a front end leaves a setting out to keep its default). The error is the
// value's fault alone ("0 is out of range: 1..65536"): the caller names the setting in its own
// words.
Result<void> set_setting(LoaderSettings& s, const Setting& which, std::string_view text);
// The value of `which` in `s` as text ("" when unset): set_setting(setting_text(...)) keeps it.
std::string setting_text(const LoaderSettings& s, const Setting& which);
// The default, as text.
std::string setting_default(const Setting& which);
// A count's bounds as whole numbers: a double cannot hold 2^64 - 1, so a max of 2^64 or more in
// the table means 2^64 - 1.
std::pair<std::uint64_t, std::uint64_t> count_bounds(const Setting& which) noexcept;
// The range or choices in words ("1..65536", "fail, skip"); "" for none.
std::string setting_range(const Setting& which);

// How a front end writes a setting's name: the command line (--io-depth, --no-shuffle), a --config
// file (io-depth, shuffle = false) or Python (io_depth, shuffle=False).
enum class SettingVocabulary : std::uint8_t { kCommandLine, kConfigFile, kPython };
// "io_depth" in `vocabulary`: --io-depth, io-depth, io_depth; `off` names the flag turned off.
std::string setting_name(std::string_view name, SettingVocabulary vocabulary, bool off = false);
// A library message with {name}, {!name} (the flag turned off) and {name=value} (the setting
// given a value) placeholders, in `vocabulary`'s words: "{on_error=skip}" is `--on-error skip`,
// `on-error = "skip"` and `on_error="skip"`. A brace that names no setting is kept as it is.
// Libraries below the loader (storage, transports) write the same placeholders: the names are
// the table's, and whichever front end shows the message renders them.
std::string render_setting_names(std::string_view message, SettingVocabulary vocabulary);

}  // namespace feedline::loader
