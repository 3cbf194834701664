// The loader's JSON documents (the run's report, the checkpoint state) are made with nlohmann
// json, in this folder only (loader/src/json/): the public headers give them as text.
//
// Names are bytes (a file name, an S3 key) and a JSON document's strings must be UTF-8:
// nlohmann's dump() throws type_error.316 on a string that is not. dump_utf8() rewrites every
// string and object key that is not UTF-8 as utf8_text() does (feedline/core/text.hpp: each byte
// that is not UTF-8 as the four characters \xHH) before it dumps, so a document never fails on a
// name. (tools/src/json_render.cpp does the same for the CLI's own documents.)
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "feedline/loader/sampler.hpp"

namespace feedline::loader::detail {

// `doc` with every string and object key made UTF-8 (utf8_text()); idempotent.
void make_utf8(nlohmann::json& doc);

// The document's text, its strings made UTF-8 where they were not (indent < 0: one line).
std::string dump_utf8(const nlohmann::json& doc, int indent = -1);

// {"epoch": e, "progress": [{"world_size": w, "batches": b}, ...]}: the state's and the report's
// "resumed_from".
nlohmann::json resume_point_doc(const ResumePoint& p);

}  // namespace feedline::loader::detail
