"""Each pytest case as a ctest test of its own, so that a skipped case shows as skipped in
ctest's summary, never inside a suite counted as passed.

A suite runs once (its fixtures start servers and write datasets once per module), writing a
JUnit file; each case's ctest test then reads its own outcome from that file. Two modes:

  pytest_cases.py collect OUT -- PYTEST_ARGS...
      the suite's node ids (pytest --collect-only), one per line, into OUT; at build time.
  pytest_cases.py case RESULTS NODE_ID
      the case's outcome in the suite's JUnit file RESULTS: prints it (a failure with its
      message, a skip with its reason) and exits 0 (passed), 77 (skipped: ctest's
      SKIP_RETURN_CODE) or 1 (failed, an error, or no result: the suite stopped before it).

Only the standard library: the case mode runs without the sanitizer runtimes the suites need.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def collect(out, pytest_args):
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(cmd + pytest_args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line]
    # 5: nothing collected (pytest missing a module it imports is 2 or 4, an error).
    if proc.returncode not in (0, 5):
        sys.stderr.write(proc.stdout)
        sys.stderr.write("pytest_cases.py: collecting %s failed (exit %d)\n"
                         % (" ".join(pytest_args), proc.returncode))
        return 1
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(i + "\n" for i in ids))
    os.replace(tmp, out)
    return 0


def junit_name(node_id):
    """pytest's JUnit (classname, name) for a node id: "dir/test_x.py::test_y[p]" is
    ("dir.test_x", "test_y[p]")."""
    path, _, name = node_id.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    classname = module.replace("/", ".")
    if "::" in name:  # a test in a class
        cls, _, name = name.rpartition("::")
        classname += "." + cls.replace("::", ".")
    return classname, name


def case(results, node_id):
    if not os.path.exists(results):
        print("no result for %s: its suite did not run or did not finish (%s is missing)"
              % (node_id, results))
        return 1
    classname, name = junit_name(node_id)
    for c in ET.parse(results).iter("testcase"):
        if c.get("name") != name or not classname.endswith(c.get("classname", "\0")):
            continue
        for kind in ("failure", "error"):
            bad = c.find(kind)
            if bad is not None:
                print("%s: %s: %s" % (node_id, kind.upper(), bad.get("message", "")))
                print(bad.text or "")
                return 1
        skipped = c.find("skipped")
        if skipped is not None:
            print("SKIPPED: %s: %s" % (node_id, skipped.get("message", "")))
            return 77
        print("passed: %s (%.2f s in the suite's run)" % (node_id, float(c.get("time") or 0)))
        return 0
    print("no result for %s in %s: the suite stopped before it (a crash or a timeout: see the "
          "suite's own test's output)" % (node_id, results))
    return 1


def main(argv):
    if len(argv) >= 3 and argv[0] == "collect" and argv[2] == "--":
        return collect(argv[1], argv[3:])
    if len(argv) == 3 and argv[0] == "case":
        return case(argv[1], argv[2])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
