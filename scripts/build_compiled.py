"""Build the compiled twins of the hot modules (schemas/_compiled.py): ``python scripts/build_compiled.py``.

Each module of ``COMPILED_MODULES`` whose extension is missing or older than its source is compiled by Cython, unchanged
(``annotation_typing=False``: annotations stay documentation, as in CPython), into ``.compiled/<cache tag>/``, with the
hash of the source it was built from beside it. Up-to-date modules are skipped, so running it again is quick; ``make
up`` and ``make test`` run it after installing. Without Cython or a C compiler it says so and exits 0 (the pure
modules run as before), unless ``--strict``. ``--clean`` removes the build. ``--jobs`` compiles in parallel (default:
the CPU count); a full build takes ~1.5 min on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _compiled_module() -> object:
    """schemas/_compiled.py by path (not the ``schemas`` package, whose modules this may be about to compile)."""
    spec = importlib.util.spec_from_file_location("_lineage_compiled_build", ROOT / "schemas" / "_compiled.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def build(names: list[str], jobs: int, root: Path = ROOT) -> list[str]:
    """Compile ``names`` (dotted, under ``root``) into the build directory; returns those built."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    c = _compiled_module()
    digests = {name: c.source_digest(c.source_path(name, root)) for name in names}
    with tempfile.TemporaryDirectory(prefix="lineage-compile-") as tmp:
        # -w: the warnings are about Cython's generated C, not about anything a reader of the .py could change
        extensions = [Extension(name, [str(c.source_path(name, root).relative_to(root))], extra_compile_args=["-w"])
                      for name in names]
        cwd = os.getcwd()
        os.chdir(root)   # module names come from the package layout under the working directory
        try:
            modules = cythonize(extensions, build_dir=os.path.join(tmp, "c"), nthreads=jobs, quiet=True,
                                compiler_directives={"language_level": 3, "annotation_typing": False})
            dist = Distribution({"name": "lineage-compiled", "ext_modules": modules})
            command = dist.get_command_obj("build_ext")
            command.build_lib = os.path.join(tmp, "lib")
            command.build_temp = os.path.join(tmp, "tmp")
            command.parallel = jobs
            command.ensure_finalized()
            command.run()
        finally:
            os.chdir(cwd)
        built = []
        for name in names:
            *package, module = name.split(".")
            produced = Path(tmp, "lib", *package, module + c.extension_path(name, root).name[len(module):])
            if not produced.is_file():
                raise SystemExit(f"build_compiled: {name}: the compiler left no {produced.name}")
            if c.source_digest(c.source_path(name, root)) != digests[name]:
                print(f"build_compiled: {name}: its source changed while compiling; not installed", file=sys.stderr)
                continue
            target, stamp = c.extension_path(name, root), c.stamp_path(name, root)
            target.parent.mkdir(parents=True, exist_ok=True)
            stamp.unlink(missing_ok=True)            # never a new extension beside an old stamp, nor the reverse
            partial = target.with_name(target.name + ".partial")
            shutil.copyfile(produced, partial)
            os.replace(partial, target)             # a running process keeps the file it loaded
            stamp.write_text(digests[name] + "\n")
            built.append(name)
        return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--force", action="store_true", help="rebuild every module, up to date or not")
    parser.add_argument("--strict", action="store_true", help="fail (exit 1) when the build cannot run")
    parser.add_argument("--clean", action="store_true", help="remove the build directory and stop")
    args = parser.parse_args(argv)
    c = _compiled_module()
    if args.clean:
        shutil.rmtree(ROOT / ".compiled", ignore_errors=True)
        print("build_compiled: removed .compiled/")
        return 0
    states = c.status(ROOT)
    todo = [n for n in c.COMPILED_MODULES if args.force or states[n] != "compiled"]
    if not todo:
        print(f"build_compiled: all {len(states)} modules up to date in {c.build_dir(ROOT)}")
        return 0
    missing = [tool for tool, ok in (("Cython", importlib.util.find_spec("Cython") is not None),
                                     ("a C compiler (cc)", shutil.which(os.environ.get("CC", "cc")) is not None))
               if not ok]
    if missing:
        print(f"build_compiled: no {' and no '.join(missing)}: the {len(todo)} hot modules stay pure Python "
              "(slower, same results); install them and run `python scripts/build_compiled.py`", file=sys.stderr)
        return 1 if args.strict else 0
    started = time.monotonic()
    try:
        built = build(todo, max(1, args.jobs))
    except Exception as exc:  # noqa: BLE001 - a failed build leaves the pure modules in use
        print(f"build_compiled: the build failed ({type(exc).__name__}: {exc}); the pure modules stay in use",
              file=sys.stderr)
        return 1 if args.strict else 0
    print(f"build_compiled: {len(built)} of {len(todo)} modules compiled in {time.monotonic() - started:.0f} s "
          f"into {c.build_dir(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
