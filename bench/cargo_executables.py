"""Reads `cargo build --message-format=json` on stdin and prints `NAME PATH` for each executable asked
for as PACKAGE/TARGET[=NAME] on the command line: an integration test, a binary or an example of that
package by its name, or `lib` for the library's unit tests (NAME defaults to TARGET). Exits 1, naming
them, if some were not built."""
import json
import sys


def package_name(package_id):
    # "name 0.1.0 (path+file:///…)" (older cargo), "path+file:///…/dir#0.1.0" or "…#name@0.1.0".
    if " (" in package_id:
        return package_id.split()[0]
    url, _, version = package_id.partition("#")
    if "@" in version:
        return version.split("@")[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def target_key(target, is_test):
    """The TARGET a spec names this artifact by, or None for the unit tests of a binary or example."""
    kinds = target["kind"]
    if "lib" in kinds:
        return "lib" if is_test else None
    if "test" in kinds:
        return target["name"]
    return None if is_test else target["name"]


want = {}
for spec in sys.argv[1:]:
    key, _, name = spec.partition("=")
    package, _, target = key.partition("/")
    want[(package, target)] = name or target
found = set()
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    key = (package_name(m["package_id"]), target_key(m["target"], m["profile"]["test"]))
    if key in want:
        found.add(key)
        print(want[key], m["executable"])
missing = [f"{p}/{t}" for (p, t) in want if (p, t) not in found]
if missing:
    sys.exit(f"not built: {', '.join(missing)} (check the package and target names and the cargo flags)")
