#include "json_file.hpp"

#include <utility>

#include "json_render.hpp"
#include "output.hpp"

namespace feedline::tools {

Result<JsonFile> JsonFile::prepare(std::string path, std::string_view flag) {
  JsonFile f;
  FEEDLINE_ASSIGN_OR_RETURN(f.file_, loader::OutputFile::prepare(std::move(path), flag));
  return f;
}

Result<void> JsonFile::commit(const nlohmann::json& doc) {
  return file_.commit(out::scrub(dump_json(doc, 2)) + "\n", "the JSON report");
}

}  // namespace feedline::tools
