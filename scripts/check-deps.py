#!/usr/bin/env python3
"""Proves that a build used only what the project's own install step installs.

    scripts/check-deps.py [BUILD_DIR] [--extra FILE ...]   (default: build; run by `make test`)

--extra adds files to those the build used (the tests use it to show that a
stray header is caught).

A fresh machine has only what scripts/install-deps.sh puts there: the Debian
packages of scripts/debian-packages.txt (with everything they depend on) and the
virtual environment .venv filled from python/requirements.txt (with what those
depend on). A build that also used something installed by hand passes on the
machine where it was installed and fails everywhere else (it happened: Debian's
libtorch-dev headers). So this script takes every file the build really used —
each object's header dependencies as the compiler reported them to Ninja, every
library and tool named on a compile or link line — and finds who owns it:

  * the source tree or the build directory: the project itself;
  * the virtual environment's site-packages: the pip distribution whose RECORD
    lists the file, which must be required (directly or through a dependency) by
    python/requirements.txt;
  * the interpreter the virtual environment was made from (its headers): that
    interpreter is what install-deps.sh makes .venv with;
  * the CUDA toolkit directory (/usr/local/cuda): the machine's toolkit, which
    the build uses only when present (HYPEROFFLOAD_WITH_CUDA; without it the CUDA
    backend is left out);
  * anything else: `dpkg -S` names the Debian package, which must be one of
    scripts/debian-packages.txt or a package one of them depends on, recursively.

It also checks the Python side of the install step: every `name==version` pin
of python/requirements.txt (PyTorch, transformers, and the training frameworks
the integration tests run: accelerate, lightning) is installed in .venv at
exactly that version, and every package of pyproject.toml's `test` extra is
pinned there. (A test run against another version than the pinned one passes or
fails for reasons the project did not see.)

    --requirements FILE   read the pins from FILE instead of python/requirements.txt
                          (the tests use it to show that a wrong pin is caught)

Exit 0 when every file is accounted for and every pin is met; otherwise exit 1
and list each stray file with its owner and the fix (add the package to the
list), and each pin that .venv does not meet.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def read_list(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def used_files(build: Path) -> set[str]:
    """Every header, library and tool the build's Ninja graph used."""
    files: set[str] = set()
    deps = subprocess.run(["ninja", "-C", str(build), "-t", "deps"], check=True, capture_output=True, text=True)
    for line in deps.stdout.splitlines():
        if line.startswith("    "):
            files.add(line.strip())
    commands = subprocess.run(["ninja", "-C", str(build), "-t", "commands"], check=True, capture_output=True,
                              text=True)
    for line in commands.stdout.splitlines():
        for command in re.split(r"\s&&\s", line):
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            if words and words[0] == ":":
                words = words[1:]
            if not words:
                continue
            tool = words[0]
            if os.path.isabs(tool):
                files.add(tool)
            for word in words[1:]:
                if os.path.isabs(word) and re.search(r"\.(so(\.\d+)*|a)$", word):
                    files.add(word)
    return {f for f in files if os.path.exists(f)}


def venv_owners(python: Path) -> tuple[dict[str, str], dict[str, set[str]], dict[str, str], str]:
    """(file -> distribution, distribution -> its requirements, distribution -> its version,
    base interpreter prefix) of a venv."""
    probe = r"""
import json, sys, importlib.metadata as md, re
from pathlib import Path
files, requires, versions = {}, {}, {}
for dist in md.distributions():
    name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    versions[name] = dist.version
    for f in dist.files or []:
        files[str(Path(dist.locate_file(f)).resolve())] = name
    requires[name] = sorted({re.sub(r"[-_.]+", "-", re.split(r"[ ;<>=!~\[(]", r, 1)[0]).lower()
                             for r in (dist.requires or []) if "extra ==" not in r})
print(json.dumps({"files": files, "requires": requires, "versions": versions, "base": sys.base_prefix}))
"""
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    return data["files"], {k: set(v) for k, v in data["requires"].items()}, data["versions"], data["base"]


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): `PyYAML`, `pyyaml` and `py_yaml` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    return canonical(re.split(r"[ ;<>=!~\[]", line, 1)[0])


def version_matches(installed: str, pinned: str) -> bool:
    """Whether `installed` meets `==pinned` (PEP 440): a pin without a local label (`+cpu`) ignores the
    installed one's, and release numbers compare with trailing zeros padded (1.0 == 1.0.0)."""
    if "+" not in pinned:
        installed = installed.split("+", 1)[0]

    def key(version: str) -> tuple:
        release, _, rest = version.partition("+")
        if re.fullmatch(r"\d+(\.\d+)*", release):
            parts = [int(p) for p in release.split(".")]
            while len(parts) > 1 and parts[-1] == 0:
                parts.pop()
            return tuple(parts), rest
        return release, rest

    return key(installed) == key(pinned)


def pin_problems(requirements: list[str], versions: dict[str, str], requirements_path: Path) -> list[str]:
    """Each `name==version` pin that the venv (distribution -> version) does not meet."""
    problems = []
    for line in requirements:
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if match is None:
            continue
        name, version = canonical(match.group(1)), match.group(2)
        installed = versions.get(name)
        if installed is None:
            problems.append(f"{requirements_path.name} pins {name}=={version}, which .venv does not have; "
                            f"run scripts/install-deps.sh --python")
        elif not version_matches(installed, version):
            problems.append(f"{requirements_path.name} pins {name}=={version}, but .venv has {name} {installed}; "
                            f"run scripts/install-deps.sh --python (or change the pin)")
    return problems


def test_extra_problems(pyproject: Path, requirement_names: set[str]) -> list[str]:
    """Each package of pyproject.toml's `test` extra that python/requirements.txt does not pin."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11: nothing to read the file with
        return []
    extras = tomllib.loads(pyproject.read_text()).get("project", {}).get("optional-dependencies", {})
    return [f"pyproject.toml's test extra lists {name}, which python/requirements.txt does not pin; pin it there"
            for name in map(requirement_name, extras.get("test", [])) if name not in requirement_names]


def debian_closure(roots: list[str]) -> set[str]:
    """The installed packages `roots` depend on, recursively (Depends and Pre-Depends)."""
    query = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Provides}\t${Depends},${Pre-Depends}\n"],
                           check=True, capture_output=True, text=True).stdout
    depends: dict[str, set[str]] = {}
    provided_by: dict[str, set[str]] = {}
    for line in query.splitlines():
        package, provides, deps = (line.split("\t") + ["", ""])[:3]
        names = set()
        for clause in deps.split(","):
            # "a (>= 1) | b": any alternative may be the installed one.
            for alternative in clause.split("|"):
                name = alternative.strip().split(" ")[0].split(":")[0]
                if name:
                    names.add(name)
        depends[package] = names
        for provided in provides.split(","):
            name = provided.strip().split(" ")[0]
            if name:
                provided_by.setdefault(name, set()).add(package)
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        package = stack.pop()
        for name in {package} | provided_by.get(package, set()):
            if name in seen or name not in depends:
                continue
            seen.add(name)
            stack.extend(depends[name])
    return seen


def dpkg_owners(paths: list[str]) -> dict[str, str]:
    """file -> Debian package, for the files dpkg knows (also through /usr-merge symlinks)."""
    owners: dict[str, str] = {}
    # candidate name -> the paths it stands for: several paths can be one file
    # (llvm-ranlib is a link to llvm-ar, and both are on the fuzz build's lines).
    variants: dict[str, list[str]] = {}
    for path in paths:
        real = os.path.realpath(path)
        for candidate in {path, real, re.sub(r"^/usr(/lib|/bin|/sbin)", r"\1", real)}:
            variants.setdefault(candidate, []).append(path)
    names = sorted(variants)
    for start in range(0, len(names), 500):
        result = subprocess.run(["dpkg", "-S", *names[start:start + 500]], capture_output=True, text=True)
        for line in result.stdout.splitlines():
            if ": " not in line:
                continue
            packages, file = line.rsplit(": ", 1)
            for path in variants.get(file, []):
                owners.setdefault(path, packages.split(",")[0].strip().split(":")[0])
    return owners


def main() -> int:
    args = sys.argv[1:]
    requirements_path = REPO / "python" / "requirements.txt"
    if "--requirements" in args:
        at = args.index("--requirements")
        requirements_path = Path(args[at + 1])
        args = args[:at] + args[at + 2:]
    extra: list[str] = []
    if "--extra" in args:
        at = args.index("--extra")
        extra, args = args[at + 1:], args[:at]
    build = Path(args[0] if args else REPO / "build").resolve()
    if not (build / "build.ninja").exists():
        print(f"check-deps: {build} is not a Ninja build directory (run `make build` first)", file=sys.stderr)
        return 2
    debian = read_list(REPO / "scripts" / "debian-packages.txt")
    requirement_lines = read_list(requirements_path)
    requirements = [requirement_name(r) for r in requirement_lines]
    files = used_files(build) | {os.path.abspath(f) for f in extra}

    venv_python = REPO / ".venv" / "bin" / "python"
    pip_files: dict[str, str] = {}
    pip_requires: dict[str, set[str]] = {}
    pip_versions: dict[str, str] = {}
    base_prefix = None
    if venv_python.exists():
        pip_files, pip_requires, pip_versions, base_prefix = venv_owners(venv_python)
    allowed_pip: set[str] = set()
    stack = list(requirements)
    while stack:
        name = stack.pop()
        if name not in allowed_pip:
            allowed_pip.add(name)
            stack.extend(pip_requires.get(name, ()))
    allowed_debian = debian_closure(debian)
    cuda_root = os.path.realpath("/usr/local/cuda")

    strays: list[str] = []
    counts = {"project": 0, "pip": 0, "interpreter": 0, "cuda": 0, "debian": 0}
    to_dpkg = []
    for file in sorted(files):
        real = os.path.realpath(file)
        if real.startswith(str(REPO) + os.sep) and not real.startswith(str(REPO / ".venv") + os.sep):
            counts["project"] += 1
        elif real.startswith(str(build) + os.sep):
            counts["project"] += 1
        elif real in pip_files:
            dist = pip_files[real]
            if dist in allowed_pip:
                counts["pip"] += 1
            else:
                strays.append(f"{file}: from pip distribution {dist}, which python/requirements.txt does not "
                              f"require; add it there")
        elif base_prefix and real.startswith(os.path.realpath(base_prefix) + os.sep) and "/include/" in real:
            counts["interpreter"] += 1
        elif real.startswith(cuda_root + os.sep) or file.startswith("/usr/local/cuda"):
            counts["cuda"] += 1
        else:
            to_dpkg.append(file)
    owners = dpkg_owners(to_dpkg)
    for file in to_dpkg:
        package = owners.get(file)
        if package is None:
            strays.append(f"{file}: no Debian package or pip distribution owns it (installed by hand?)")
        elif package not in allowed_debian:
            strays.append(f"{file}: from Debian package {package}, which scripts/debian-packages.txt does not "
                          f"install (directly or as a dependency); add it there")
        else:
            counts["debian"] += 1
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    pins = test_extra_problems(REPO / "pyproject.toml", set(requirements))
    if venv_python.exists():
        pins += pin_problems(requirement_lines, pip_versions, requirements_path)
    if pins:
        print(f"check-deps: {len(pins)} Python requirement(s) not met:")
        for line in pins:
            print("  " + line)
    if strays:
        print(f"check-deps: {len(strays)} of {len(files)} files the build used come from outside the project's "
              f"install step:")
        for line in strays[:50]:
            print("  " + line)
        if len(strays) > 50:
            print(f"  ... and {len(strays) - 50} more")
        return 1
    if pins:
        return 1
    pinned = sum("==" in line for line in requirement_lines)
    print(f"check-deps: all {len(files)} files the build used are accounted for ({summary}); "
          f".venv meets all {pinned} pins of {requirements_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
