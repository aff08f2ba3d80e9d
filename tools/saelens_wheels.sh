#!/usr/bin/env bash
# Downloads into .whl/ the wheels that tools/saelens_check.py needs on a machine without network whose
# Python already has PyTorch, numpy, safetensors and transformers (docs/saelens.md): sae-lens and every
# package it requires, followed through each wheel's Requires-Dist (markers evaluated for CPython 3.12 on
# Linux x86_64), except the packages already there and what they require themselves.
#
#   tools/saelens_wheels.sh            # sae-lens 6.54.12, the pins below taken as installed
#   SAELENS=sae-lens==6.54.12 PRESENT="torch==2.11.0 numpy==2.5.2 safetensors==0.8.0 transformers==5.17.0" \
#     tools/saelens_wheels.sh
#
# INSTALLED="pandas pyarrow ..." names further packages the target already has (any version): they are
# neither fetched nor followed, which keeps .whl/ small enough to carry (the GPU image's list is in
# docs/saelens.md). A requirement published only as source is built into a wheel here (pure Python ones
# only). The list of what was taken and why is written to .whl/REQUIREMENTS.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
export SAELENS="${SAELENS:-sae-lens==6.54.12}"
export PRESENT="${PRESENT:-torch==2.11.0 numpy==2.5.2 safetensors==0.8.0 transformers==5.17.0}"
export PYVER="${PYVER:-3.12}"
export INSTALLED="${INSTALLED:-}"
mkdir -p .whl
exec python3 - <<'PY'
import json, os, subprocess, sys, tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

PY = os.environ["PYVER"]
# Further packages known to be on the target machine, by name: neither fetched nor followed.
ASSUMED = {canonicalize_name(n) for n in os.environ.get("INSTALLED", "").split()}
OUT = Path(".whl")
PLATFORM = [f"manylinux_2_{n}_x86_64" for n in range(17, 40)] + ["manylinux2014_x86_64", "manylinux1_x86_64", "any"]
TARGET = ["--python-version", PY, "--implementation", "cp", "--only-binary=:all:"] + [
    a for p in PLATFORM for a in ("--platform", p)
]
ENV = default_environment()
ENV.update(python_version=PY, python_full_version=PY + ".0", sys_platform="linux", platform_system="Linux",
           platform_machine="x86_64", os_name="posix", implementation_name="cpython",
           platform_python_implementation="CPython")


def pip(*args):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def metadata(req: str):
    """(name, version, Requires-Dist, wheel?) of the newest release satisfying `req`, from its metadata
    alone where the index serves it (no wheel is downloaded)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        common = ["install", "--dry-run", "--no-deps", "--ignore-installed", "--ignore-requires-python",
                  "--quiet", "--report", str(report), "--target", str(Path(tmp) / "t")]
        r = pip(*common, *TARGET, req)
        wheel = r.returncode == 0
        if not wheel:  # published as source only: resolved for this machine, built below
            r = pip(*common, req)
        if r.returncode != 0:
            sys.exit(f"cannot resolve {req}:\n{r.stderr}")
        (item,) = json.loads(report.read_text())["install"]
    m = item["metadata"]
    return canonicalize_name(m["name"]), m["version"], m.get("requires_dist") or [], wheel


def requirements(requires_dist):
    for line in requires_dist:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate(dict(ENV, extra="")):
            yield r


def closure(roots, installed=None):
    """Every package `roots` need: name -> (version, specifiers, needed by, wheel?). A package in
    `installed` is recorded with the specifiers asked of it, and what it needs is not followed."""
    found, specs, queue = {}, {}, [(Requirement(r), "command line") for r in roots]
    while queue:
        req, by = queue.pop(0)
        name = canonicalize_name(req.name)
        specs[name] = specs.get(name, SpecifierSet()) & req.specifier
        if name in ASSUMED:
            found[name] = (None, specs[name], by, True)
            continue
        if installed is not None and name in installed:
            found[name] = (installed[name][0], specs[name], by, True)
            continue
        if name in found and Version(found[name][0]) in specs[name]:
            continue
        version, requires, wheel = metadata(f"{name}{specs[name]}")[1:]
        found[name] = (version, specs[name], by, wheel)
        queue += [(r, name) for r in requirements(requires)]
    return found


present = closure(os.environ["PRESENT"].split())
needed = closure([os.environ["SAELENS"]], installed=present)
lines = []
for name, (version, spec, by, wheel) in sorted(needed.items()):
    if name in ASSUMED:
        continue
    if name in present:
        if Version(version) not in spec:
            print(f"warning: {by} wants {name}{spec}; taken as installed ({name} {version} from PRESENT)",
                  file=sys.stderr)
        continue
    args = ["--no-deps", "-q", "-d" if wheel else "-w", str(OUT), f"{name}=={version}"]
    r = pip("download", *TARGET, *args) if wheel else pip("wheel", *args)
    if r.returncode != 0:
        sys.exit(f"cannot fetch {name}=={version}:\n{r.stderr}")
    lines.append(f"{name}=={version}  # needed by {by}" + ("" if wheel else ", built from source"))
    print(lines[-1])
(OUT / "REQUIREMENTS.txt").write_text("\n".join(lines) + "\n")
print(f"{len(lines)} wheels in {OUT}/ ({len(present)} packages taken as installed)")
PY
