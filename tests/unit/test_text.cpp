// Names are bytes (feedline/core/text.hpp, tools/src/json_render.hpp): a file name or S3 key that
// is not UTF-8, or that holds control characters, is shown escaped (\xHH) on a terminal, in an
// error line and in every JSON document, never thrown on, never written raw.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

#include "feedline/core/error.hpp"
#include "feedline/core/text.hpp"
#include "feedline/loader/html_page.hpp"
#include "json_render.hpp"
#include "output.hpp"

using feedline::is_utf8;
using feedline::Newlines;
using feedline::printable;
using feedline::utf8_text;
using feedline::tools::dump_json;
using feedline::tools::make_utf8;

TEST_CASE("text: UTF-8 is told from bytes that are not", "[core][text]") {
  CHECK(is_utf8(""));
  CHECK(is_utf8("plain ascii \t\n\x1b"));
  CHECK(is_utf8("d\xc3\xa9j\xc3\xa0 \xe2\x82\xac \xf0\x9f\x98\x80"));
  CHECK_FALSE(is_utf8("\xff"));
  CHECK_FALSE(is_utf8("a\xc3"));             // truncated two-byte sequence
  CHECK_FALSE(is_utf8("\xc3("));             // lead byte without its continuation
  CHECK_FALSE(is_utf8("\xc0\xaf"));          // overlong '/'
  CHECK_FALSE(is_utf8("\xe0\x80\xaf"));      // overlong, three bytes
  CHECK_FALSE(is_utf8("\xed\xa0\x80"));      // a surrogate (U+D800)
  CHECK_FALSE(is_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(is_utf8("\xe2\x82"));          // cut short at the end
  CHECK(is_utf8("\xf4\x8f\xbf\xbf"));        // U+10FFFF itself
}

TEST_CASE("text: utf8_text escapes only the bytes that are not UTF-8, as Python's backslashreplace",
          "[core][text]") {
  CHECK(utf8_text("train/0001.jpg") == "train/0001.jpg");
  CHECK(utf8_text("d\xc3\xa9j\xc3\xa0") == "d\xc3\xa9j\xc3\xa0");
  CHECK(utf8_text("a\\b \x1b\n") == "a\\b \x1b\n");  // valid text: unchanged, controls kept
  CHECK(utf8_text("bad\xff.bin") == "bad\\xff.bin");
  CHECK(utf8_text("lone\xc3.bin") == "lone\\xc3.bin");
  CHECK(utf8_text("\xc3\xa9\xc3") == "\xc3\xa9\\xc3");
  CHECK(utf8_text("\xe2\x82(") == "\\xe2\\x82(");
  CHECK(utf8_text("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  // Distinct names stay distinct; rendering twice changes nothing.
  CHECK(utf8_text("x\xff") != utf8_text("x\xfe"));
  CHECK(utf8_text("x\xff") != utf8_text("x\xef\xbf\xbd"));  // not the replacement character
  CHECK(utf8_text(utf8_text("a\xff\xc3")) == utf8_text("a\xff\xc3"));
  CHECK(is_utf8(utf8_text("\xff\xfe\xc3\x28\xe0\x80")));
}

TEST_CASE("text: printable leaves no control character and nothing that is not UTF-8",
          "[core][text]") {
  CHECK(printable("shard-000001.tar") == "shard-000001.tar");
  CHECK(printable("d\xc3\xa9j\xc3\xa0 \xe2\x82\xac") == "d\xc3\xa9j\xc3\xa0 \xe2\x82\xac");
  CHECK(printable("\x1b]0;owned\x07\x1b[2J.bin") == "\\x1b]0;owned\\x07\\x1b[2J.bin");
  CHECK(printable("a\nfeedline: error: forged") == "a\\x0afeedline: error: forged");
  CHECK(printable("cr\rtab\tdel\x7f") == "cr\\x0dtab\\x09del\\x7f");
  CHECK(printable("c1 \xc2\x9b"
                  "31m") == "c1 \\xc2\\x9b31m");       // U+009B, the 8-bit CSI
  CHECK(printable("\xc2\xa0nbsp") == "\xc2\xa0nbsp");  // U+00A0 is not a control
  CHECK(printable("bad\xff") == "bad\\xff");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("two\nlines\tx\x1b", Newlines::kKeep) == "two\nlines\tx\\x1b");
  const std::string once = printable("\x1b\n\xff\\x41");
  CHECK(printable(once) == once);
}

TEST_CASE("text: an error's line holds no raw control character or non-UTF-8 byte",
          "[core][error][text]") {
  const feedline::Error e = feedline::Error(feedline::Errc::kCorrupt, "bad tar header")
                                .with_object("/data/evil\x1b[2J\nfeedline: error: forged\xff.tar")
                                .with_offset(512);
  const std::string what = e.what();
  CHECK(what ==
        "corrupt data: /data/evil\\x1b[2J\\x0afeedline: error: forged\\xff.tar at offset 512: bad "
        "tar header");
  CHECK(what.find('\n') == std::string::npos);
  CHECK(what.find('\x1b') == std::string::npos);
  CHECK(is_utf8(what));
}

TEST_CASE("json: documents with names that are not UTF-8 dump, escaped, without throwing",
          "[tools][json][text]") {
  nlohmann::json doc = {{"url", "/data/set\xff"},
                        {"skipped", {{"examples", {"a\xc3.bin", "ok.bin", "quote\"back\\slash"}}}},
                        {"counters", {{"name\xfe", 1}, {"fine", 2}}},
                        {"n", 3}};
  CHECK_THROWS(doc.dump());  // what nlohmann does by itself: type_error.316
  const std::string text = dump_json(doc, 2);
  CHECK(is_utf8(text));
  const nlohmann::json back = nlohmann::json::parse(text);
  CHECK(back["url"] == "/data/set\\xff");
  CHECK(back["skipped"]["examples"][0] == "a\\xc3.bin");
  CHECK(back["skipped"]["examples"][1] == "ok.bin");
  CHECK(back["skipped"]["examples"][2] == "quote\"back\\slash");
  CHECK(back["counters"]["name\\xfe"] == 1);
  CHECK(back["counters"]["fine"] == 2);
  CHECK(back["n"] == 3);
  // A valid document is dumped as nlohmann dumps it; make_utf8 is idempotent.
  nlohmann::json ok = {{"url", "d\xc3\xa9j\xc3\xa0\x1b"}};
  CHECK(dump_json(ok) == ok.dump());
  make_utf8(doc);
  const nlohmann::json once = doc;
  make_utf8(doc);
  CHECK(doc == once);
  CHECK_NOTHROW(doc.dump());
}

TEST_CASE("json: a document for stdout is ASCII, so a terminal shows it and it stays JSON",
          "[tools][json][text]") {
  using feedline::tools::Json;
  const nlohmann::json doc = {{"url", "/d/del\x7f c1\xc2\x9b esc\x1b d\xc3\xa9j\xc3\xa0 \xff"}};
  const std::string text = dump_json(doc, 2, Json::kAscii);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    INFO(text);
    CHECK(((u >= 0x20 && u < 0x7f) || c == '\n'));
  }
  // printable() (what out:: does to everything it writes) leaves it as it is: still JSON.
  CHECK(printable(text, Newlines::kKeep) == text);
  CHECK(nlohmann::json::parse(text)["url"] ==
        "/d/del\x7f c1\xc2\x9b esc\x1b d\xc3\xa9j\xc3\xa0 \\xff");
}

TEST_CASE("secrets are masked in the forms names are written in", "[tools][text][redact]") {
  namespace out = feedline::tools::out;
  // A password with a byte that is not UTF-8, a control character and a quote: escaped by the
  // time it is scrubbed (an error line, a JSON string), it must still be masked.
  const std::string secret = "pw\xff\x01q\"uote-names-test";
  out::add_secret(secret);
  const feedline::Error e =
      feedline::Error(feedline::Errc::kPermissionDenied, "denied").with_object("s3://u:" + secret);
  CHECK(out::scrub(e.what()) == "permission denied: s3://u:***: denied");
  const nlohmann::json doc = {{"error", "x " + secret + " y"}};
  CHECK(out::scrub(dump_json(doc)) == R"({"error":"x *** y"})");
  CHECK(out::scrub(dump_json(doc, -1, feedline::tools::Json::kAscii)) == R"({"error":"x *** y"})");
  CHECK(out::scrub("raw " + secret) == "raw ***");
}

TEST_CASE("html: names are escaped as markup and shown as printable", "[tools][html][text]") {
  feedline::loader::HtmlPageInputs in;
  in.command = "run <b>&\"'\x1b[2J\xff\nfeedline: error: forged";
  in.report_how = "r";
  in.run_json = R"({"url":"s3://b/<i>x</i>&y"})";
  auto page = feedline::loader::html_page(in);
  REQUIRE(page);
  CHECK(page->find(
            "<h1>run &lt;b&gt;&amp;&quot;&#39;\\x1b[2J\\xff\\x0afeedline: error: forged</h1>") !=
        std::string::npos);
  CHECK(page->find("s3://b/&lt;i&gt;x&lt;/i&gt;&amp;y") != std::string::npos);
  CHECK(page->find("<i>x") == std::string::npos);
  CHECK(page->find("\x1b") == std::string::npos);
  in.run_json = "[1]";
  CHECK_FALSE(feedline::loader::html_page(in));
}
