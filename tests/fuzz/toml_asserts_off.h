// Force-included into fuzz_config's sources (see CMakeLists.txt): toml++ with its internal asserts
// off, as in the Debian library the CLI links, which is built with NDEBUG.
#pragma once
#define TOML_ASSERT(expr) static_cast<void>(0)
