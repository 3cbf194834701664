// Names are bytes: text that came from outside (a file or directory name, an S3 key, a server's
// message) made safe to show.
//
// Linux file names are any bytes but '/' and NUL, and an object store's keys arrive from its
// server: neither need be UTF-8, and either may hold control characters (an ESC that sets the
// terminal's title, a newline that starts a forged "feedline: error:" line). Two renderings, one
// rule for bytes that are not UTF-8: each such byte becomes the four characters \xHH (lower-case
// hex), as Python's bytes.decode("utf-8", "backslashreplace") writes it. Valid UTF-8 is kept as
// it is, backslashes included, so a name shows as written whenever it can; both renderings are
// idempotent (rendering a rendered text changes nothing).
//
//  - utf8_text(): for JSON documents, whose strings must be UTF-8. Only bytes that are not
//    UTF-8 are escaped (JSON escapes control characters itself). A name that is valid UTF-8 is
//    unchanged; one that is not differs from every other name except one that spells the same
//    \xHH in text (a name holding a backslash, 'x' and two hex digits).
//  - printable(): for a terminal or a one-line message. Also escapes, as \xHH per byte, the C0
//    controls (newline, tab and carriage return included, unless kept), DEL and the C1 controls
//    (U+0080-U+009F, two bytes each in UTF-8), so that no byte of a name moves the cursor,
//    starts an escape sequence or ends the line.
//
// Pure functions: no locale, thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace feedline {

// True when `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing above
// U+10FFFF): what a JSON document may hold.
bool is_utf8(std::string_view text) noexcept;

// `text` when it is UTF-8; else with each byte that is not part of a well-formed UTF-8 sequence
// written as \xHH.
std::string utf8_text(std::string_view text);

enum class Newlines : bool { kEscape, kKeep };
// utf8_text(), and control characters escaped as \xHH: one line safe for a terminal. With
// Newlines::kKeep, '\n' and '\t' are kept (text of several lines, a report).
std::string printable(std::string_view text, Newlines newlines = Newlines::kEscape);

}  // namespace feedline
