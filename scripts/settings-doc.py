#!/usr/bin/env python3
"""The settings reference tables of docs/CLI.md and docs/PYTHON.md, made from the library's
settings table (loader/src/settings/settings.cpp, through the Python module's _settings()).

    PYTHONPATH=build/release/python /usr/bin/python3 scripts/settings-doc.py          # rewrite
    PYTHONPATH=build/release/python /usr/bin/python3 scripts/settings-doc.py --check  # exit 1 if stale

Each document holds its table between the lines "<!-- settings:begin -->" and
"<!-- settings:end -->"; python/tests/test_settings.py fails while a table is stale.
"""
import os
import sys

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"
TYPES = {"flag": "flag", "count": "int", "number": "float", "size": "size", "duration": "duration",
         "choice": "choice", "path": "path", "text": "text"}


def _cell(text):
    return text.replace("|", "\\|")


def table(settings, python):
    """The markdown table: for the command line (every setting, as flags and config keys) or for
    Python (the loader's settings, as keywords)."""
    rows = []
    if python:
        rows.append("| Keyword | Type | Default | Range | What it does |")
    else:
        rows.append("| Flag (config key) | Type | Default | Range | What it does |")
    rows.append("|---|---|---|---|---|")
    for s in settings:
        if python and s["scope"] != "loader":
            continue
        dashed = s["name"].replace("_", "-")
        if python:
            name = "`%s`" % s["name"]
            default = {"": "None", "true": "True", "false": "False"}.get(s["default"], s["default"])
            if s["type"] in ("size", "duration", "choice", "text", "path") and s["default"]:
                default = '"%s"' % s["default"]
            helptext = s["help"]
        else:
            name = "`--%s`%s (`%s`)" % (dashed, ", `--no-%s`" % dashed if s["type"] == "flag" else "",
                                        dashed)
            default = s["default"] or "(unset)"
            helptext = s["help_cli"]
            if s["scope"] != "loader":
                helptext += " (command line only)"
        bounds = s["range"] + (" " + s["unit"] if s["unit"] and s["range"] else "")
        rows.append("| %s | %s | %s | %s | %s |" % (name, TYPES[s["type"]], _cell(default),
                                                  _cell(bounds), _cell(helptext)))
    return "\n".join(rows)


def documents():
    """{path: (its text now, its text with the table made anew)}."""
    from feedline import _feedline
    settings = _feedline._settings()
    out = {}
    for rel, python in (("docs/CLI.md", False), ("docs/PYTHON.md", True)):
        path = os.path.join(REPO, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if BEGIN not in text or END not in text:
            raise SystemExit("%s has no %s ... %s lines for the settings table" % (rel, BEGIN, END))
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        out[path] = (text, head + BEGIN + "\n" + table(settings, python) + "\n" + END + tail)
    return out


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for path, (now, made) in documents().items():
        if now == made:
            continue
        stale.append(os.path.relpath(path, REPO))
        if not check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(made)
    if check and stale:
        print("stale settings tables in %s: run scripts/settings-doc.py" % ", ".join(stale))
        return 1
    for p in stale:
        print("rewrote the settings table of %s" % p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
